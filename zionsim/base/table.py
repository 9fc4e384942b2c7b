"""A run's tables before pandas: named numpy columns of one length.

``zionsim run`` writes its tables (``events.parquet``, ``breakdown.csv``, ``links.csv``,
``memory.csv``, ``ranks.csv``) from these columns without importing pandas (``io/tables.py``,
byte for byte what pandas writes); :meth:`Table.to_frame` makes the DataFrame a study, a
notebook or a test reads (``RunResult.events`` and the others, made when first read).

Columns are 1-D numpy arrays: ``int64``, ``float64``, ``bool`` or ``object`` holding ``str``
(a pandas ``str`` column in the DataFrame).
"""

from __future__ import annotations

import numpy as np


class Table:
    """Named columns of equal length (name → 1-D numpy array), in order."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict):
        n = None
        cols = {}
        for name, values in columns.items():
            arr = values if isinstance(values, np.ndarray) else None
            if arr is None:
                arr = _array(values)
            if arr.ndim == 0:  # a scalar: broadcast below
                cols[name] = arr
                continue
            if n is not None and len(arr) != n:
                raise ValueError(f"column {name!r} has {len(arr)} rows, not {n}")
            n = len(arr) if n is None else n
            cols[name] = arr
        n = 0 if n is None else n
        self.columns = {
            k: np.full(n, v.item(), dtype=v.dtype) if v.ndim == 0 else v for k, v in cols.items()
        }

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    @property
    def empty(self) -> bool:
        """No rows or no columns (as pandas' ``DataFrame.empty``)."""
        return not self.columns or len(self) == 0

    def take(self, rows: np.ndarray) -> Table:
        """The rows ``rows`` (indices or a boolean mask), in that order."""
        return Table({k: v[rows] for k, v in self.columns.items()})

    def records(self) -> list[dict]:
        """One dict per row, Python values (as pandas' ``to_dict("records")`` gives them)."""
        names = list(self.columns)
        cols = [v.tolist() for v in self.columns.values()]
        return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]

    def to_frame(self):
        """The table as a pandas DataFrame (string columns of pandas' ``str`` dtype)."""
        import pandas as pd

        return pd.DataFrame(
            {
                k: pd.array(v, dtype="str") if v.dtype == object else v
                for k, v in self.columns.items()
            }
        )


def _array(values) -> np.ndarray:
    """A column from a list, range or scalar: strings as an object array of ``str``."""
    if isinstance(values, range):
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    if isinstance(values, str):
        return np.array(values, dtype=object)
    arr = np.asarray(values)
    if arr.dtype.kind == "U":
        return arr.astype(object)
    return arr


def strings(values) -> np.ndarray:
    """``values`` (strings) as an object column."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out
