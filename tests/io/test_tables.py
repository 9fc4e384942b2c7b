"""A run's tables written without pandas (``io/tables.py``): the same bytes as pandas writes of
the DataFrames they make (CSV and parquet), the same rank totals, track lanes and Perfetto text;
and the headline ``zionsim run`` imports no pandas."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from zionsim.base.table import Table, strings
from zionsim.io.tables import table_csv, table_parquet
from zionsim.sim.inputs import resolve_inputs
from zionsim.sim.perfetto import perfetto_json, track_lanes
from zionsim.sim.results import rank_total_table, rank_totals, sample_events
from zionsim.sim.run import simulate_inputs

ROOT = Path(__file__).resolve().parents[2]


def _pandas_csv(table: Table) -> str:
    return table.to_frame().to_csv(index=False)


def _pandas_parquet(table: Table) -> bytes:
    buf = io.BytesIO()
    table.to_frame().to_parquet(buf, index=False)
    return buf.getvalue()


SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e300, -1e-300, 5e-324, 1e16, 1e15, 0.1, 1e-5]
SPECIAL += [123456789.123, 2.5e-7, 1.0, -7.0, 9007199254740993.0, 1.7976931348623157e308]
WORDS = ["a", "", "x,y", 'say "hi"', "line\nbreak", "naïve", "tab\tbed", " pad ", "1.5", "nan"]


def _random_table(rng: np.random.Generator, n: int, with_missing: bool) -> Table:
    with np.errstate(over="ignore"):
        floats = rng.choice(np.array(SPECIAL), n) * rng.choice([1.0, -1.0, 1e-9, 3e7], n)
    normal = rng.normal(0, 10.0 ** rng.integers(-12, 12), n)
    floats = np.where(rng.random(n) < 0.3, normal, floats)
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), n)]
    if with_missing:
        words = [None if rng.random() < 0.2 else w for w in words]
    return Table(
        {
            "i": rng.integers(-(2**62), 2**62, n),
            "small": rng.integers(-3, 3, n),
            "f": floats,
            "whole": rng.integers(-1000, 1000, n).astype(np.float64),
            "b": rng.random(n) < 0.5,
            "s": strings(words),
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_random_tables_match_pandas(seed):
    """Integers, floats (NaN, ±inf, ±0, subnormal, huge, tiny), booleans and strings needing
    quotes, empty or missing: CSV and parquet bytes are pandas' own."""
    rng = np.random.default_rng(seed)
    for n in (0, 1, 7, 300):
        t = _random_table(rng, n, with_missing=seed % 2 == 1)
        assert table_csv(t) == _pandas_csv(t)
        assert table_parquet(t) == _pandas_parquet(t)


def test_a_bad_column_is_refused():
    """A dtype the writers have no rule for is an error, not a guess."""
    t = Table({"c": np.array([1.5], dtype=np.float32)})
    with pytest.raises(TypeError):
        table_csv(t)
    with pytest.raises(TypeError):
        table_parquet(t)


CATS = ["gemm", "all_to_all", "b", "a"]


def _rank_frame(rng, n: int) -> Table:
    durations = rng.exponential(1e-3, n)
    durations[rng.random(n) < 0.05] = np.nan
    durations[rng.random(n) < 0.01] = np.inf
    return Table(
        {
            "rank": rng.integers(-1, 5, n),
            "category": strings([CATS[i] for i in rng.integers(0, len(CATS), n)]),
            "duration_s": durations,
            "bytes": rng.choice([0.0, 1e9 / 3, 7.0, 1e-3], n),
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_rank_totals_match_pandas_groupby(seed):
    """Group sums (Kahan-compensated in row order, NaN skipped, infinities) and counts to the
    bit, groups in pandas' order."""
    rng = np.random.default_rng(seed)
    t = _rank_frame(rng, 2000)
    ours = rank_total_table(t).to_frame()
    pd.testing.assert_frame_equal(ours, rank_totals(t.to_frame()), check_exact=True)


@pytest.mark.parametrize("seed", range(3))
def test_sorted_codes_are_numpy_unique(seed):
    """The dict-made codes of a string column (``results._sorted_codes``) are np.unique's
    sorted values and inverse, an empty column included."""
    from zionsim.sim.results import _sorted_codes

    rng = np.random.default_rng(seed)
    col = strings([CATS[i] for i in rng.integers(0, len(CATS), int(rng.integers(0, 50)))])
    vocab, code = _sorted_codes(col)
    if len(col):
        want_vocab, want_code = np.unique(col, return_inverse=True)
        assert vocab == want_vocab.tolist()
        assert code.tolist() == want_code.ravel().tolist()
    else:
        assert vocab == [] and len(code) == 0
    empty = rank_total_table(_rank_frame(rng, 5).take(np.zeros(0, dtype=np.int64)))
    assert len(empty["rank"]) == 0


@pytest.fixture(scope="module")
def run():
    options = {"topology": "zionex", "nodes": 2, "workload": "tiny", "iterations": 3}
    return simulate_inputs(resolve_inputs(options))


def test_run_tables_are_columns_until_read(run):
    """A run keeps its tables as columns; reading one gives the DataFrame."""
    assert isinstance(run.table("links"), Table)
    assert isinstance(run.links, pd.DataFrame)
    assert isinstance(run.table("links"), pd.DataFrame)  # kept once made


def test_run_tables_written_as_pandas_writes_them(run):
    """The run's own tables: CSV, parquet, rank totals, lanes and Perfetto text as pandas gives."""
    events = run.table("events")
    if not isinstance(events, Table):
        pytest.skip("read as a DataFrame by an earlier test")
    for name in ("events", "breakdown", "memory"):
        t = run.table(name)
        assert isinstance(t, Table)
        assert table_csv(t) == _pandas_csv(t), name
    assert table_parquet(events) == _pandas_parquet(events)
    bd = run.table("breakdown")
    assert bd.records() == bd.to_frame().to_dict("records")
    frame = events.to_frame()
    pd.testing.assert_frame_equal(
        rank_total_table(events).to_frame(), rank_totals(frame), check_exact=True
    )
    assert track_lanes(events).tolist() == track_lanes(frame).tolist()
    assert "".join(perfetto_json(events)) == "".join(perfetto_json(frame))
    some = sample_events(events, [0, 3])
    assert table_csv(some) == sample_events(frame, [0, 3]).to_csv(index=False)
    assert np.unique(some["rank"]).tolist() == [-1, 0, 3]


def test_headline_run_imports_no_pandas(tmp_path):
    """``zionsim run`` on its defaults writes every file (plot aside) without importing pandas."""
    code = (
        "import sys\n"
        "from zionsim.cli.main import main\n"
        f"main(['run', '--out', {str(tmp_path / 'r')!r}, '--no-plot', '--nodes', '2'])\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "r" / "events.parquet").is_file()


def test_pandas_version_read_without_pandas_is_pandas_own():
    """The version written into the parquet metadata is the imported pandas' ``__version__``."""
    from zionsim.io.tables import _pandas_version

    assert _pandas_version() == pd.__version__


def test_a_string_column_with_other_values_is_refused():
    """A string column holding a number is an error (pandas would write it otherwise)."""
    with pytest.raises(TypeError, match="not strings"):
        table_parquet(Table({"s": strings(["a", 3])}))
