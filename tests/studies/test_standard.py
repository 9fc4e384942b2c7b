"""Committed study tables are written at a precision every install reproduces."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from zionsim.io.files import STUDY_DIGITS, study_csv

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _significant(cell: str) -> int | None:
    """Significant digits of a float cell as written (None: not a float)."""
    try:
        value = float(cell)
    except ValueError:
        return None
    if not math.isfinite(value) or value == 0 or ("." not in cell and "e" not in cell):
        return None
    mantissa = cell.lower().split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0") if "." in cell.split("e")[0] else mantissa)


def test_study_csv_rounds_floats_to_the_stated_digits():
    """Values that differ only past the 6th digit (another BLAS) give the same bytes."""
    a = pd.DataFrame({"x": [0.1 + 0.2, 1e7 / 3], "n": [1, 2], "s": ["a", "b"]})
    b = pd.DataFrame({"x": [0.3, 1e7 / 3 * (1 + 1e-15)], "n": [1, 2], "s": ["a", "b"]})
    assert study_csv(a) == study_csv(b)
    assert study_csv(a).splitlines()[1] == "0.3,1,a"


def test_committed_study_tables_are_at_the_stated_precision():
    """Every float cell of results/<study>/*.csv has at most STUDY_DIGITS significant digits,
    so `zionsim studies` on another install rewrites them byte for byte."""
    tables = sorted(p for p in RESULTS.glob("*/*.csv") if p.parent.name != "validation")
    assert tables
    for path in tables:
        with open(path, newline="") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    digits = _significant(cell)
                    assert digits is None or digits <= STUDY_DIGITS, (path.name, cell)
