"""Per-peer byte matrices of all-to-alls kept as two vectors: ``m[i, j] = row[i] + col[j]``.

A DLRM's embedding all-to-alls have this shape: the indices sent to a table's owner depend on
the owner only (a column constant: ``col[owner]``), the pooled vectors an owner sends depend on
the owner only (a row constant: ``row[owner]``).  Stored densely, a 16,384-rank matrix is
2 GiB and every pass over it is 268 M cells; as :class:`OuterSum` it is two vectors, and the
sums the collectives need (per sender, per destination node and rail) are closed forms.

The class behaves as a read-only numpy matrix where code or tests look at it as one
(``np.asarray``, indexing, ``sum``, ``any``, ``T``, ``tolist``, ``==``): those materialise it,
which is fine at the sizes they are used at.
"""

from __future__ import annotations

import numpy as np


class OuterSum:
    """An ``n x n`` matrix ``m[i, j] = row[i] + col[j]`` (bytes from rank ``i`` to ``j``)."""

    __array_priority__ = 20  # numpy defers ``array == OuterSum`` to __eq__ below

    def __init__(self, n: int | None = None, row=None, col=None):
        self.row = np.zeros(n) if row is None else np.asarray(row, dtype=float)
        self.col = np.zeros(n) if col is None else np.asarray(col, dtype=float)
        if self.row.shape != self.col.shape or self.row.ndim != 1:
            raise ValueError("row and col must be vectors of one length")

    # -------------------------------------------------------------------- building
    def add_to_row(self, i: int, value: float) -> None:
        """``m[i, :] += value``."""
        self.row[i] += value

    def add_to_column(self, j: int, value: float) -> None:
        """``m[:, j] += value``."""
        self.col[j] += value

    # -------------------------------------------------------------------- cheap reads
    @property
    def shape(self) -> tuple[int, int]:
        """``(n, n)``."""
        return (len(self.row), len(self.row))

    @property
    def stored_cells(self) -> int:
        """Numbers held in memory (for memory estimates): ``2n``."""
        return 2 * len(self.row)

    def __len__(self) -> int:
        return len(self.row)

    @property
    def T(self) -> OuterSum:  # noqa: N802 - numpy's name
        """The transpose (bytes from ``j`` to ``i``)."""
        return OuterSum(row=self.col, col=self.row)

    def copy(self) -> OuterSum:
        """An independent copy."""
        return OuterSum(row=self.row.copy(), col=self.col.copy())

    def sum(self, axis: int | None = None):
        """Row sums (``axis=1``), column sums (``axis=0``) or the total, in closed form."""
        n = len(self.row)
        if axis is None:
            return float(n * self.row.sum() + n * self.col.sum())
        if axis in (1, -1):
            return n * self.row + self.col.sum()
        if axis == 0:
            return self.row.sum() + n * self.col
        raise ValueError(f"axis {axis} out of range for a matrix")

    def min(self, initial: float | None = None) -> float:
        """The smallest entry (at most ``initial`` when given, as numpy's ``min``)."""
        low = float(self.row.min() + self.col.min()) if len(self.row) else np.inf
        low = low if initial is None else min(low, initial)
        return 0.0 if low == np.inf else low

    def any(self) -> bool:
        """Whether any entry is non-zero (all entries are ≥ 0 where this is used)."""
        if not len(self.row):
            return False
        if self.min() >= 0:
            return bool(self.row.max() + self.col.max() > 0)
        return bool(self.dense().any())

    def entries(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``m[i, j]`` for index arrays ``i`` and ``j``."""
        return self.row[i] + self.col[j]

    # -------------------------------------------------------------------- as a numpy matrix
    def dense(self) -> np.ndarray:
        """The full ``n x n`` array."""
        return self.row[:, None] + self.col[None, :]

    def __array__(self, dtype=None, copy=None):
        out = self.dense()
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key):
        return self.dense()[key]

    def __eq__(self, other):
        return self.dense() == np.asarray(other)

    __hash__ = None  # mutable, like an ndarray

    def tolist(self) -> list:
        """Nested lists of the full matrix (what trace files store)."""
        return self.dense().tolist()

    def __repr__(self) -> str:
        return f"OuterSum(n={len(self.row)})"


def tiled(m: OuterSum, ranks: int) -> OuterSum:
    """``m`` (R x R) tiled to ``ranks x ranks`` (rank ``i`` plays rank ``i mod R``) with each row
    keeping its total: every tiled row sums ``ranks/R`` times the original, so both vectors
    scale by ``R/ranks``."""
    R = len(m)
    idx = np.arange(ranks) % R
    scale = R / ranks
    return OuterSum(row=m.row[idx] * scale, col=m.col[idx] * scale)
