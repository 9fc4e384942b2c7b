"""A run's tables (``base/table.py``) as CSV and parquet without pandas, byte for byte what
pandas writes (``DataFrame.to_csv(index=False)`` and ``to_parquet(index=False)`` of
``Table.to_frame()``): the headline ``zionsim run`` then never imports pandas (0.25 CPU s).

* CSV: pandas turns a float column into text with numpy's ``astype(str)`` (the shortest
  repr), NaN as the empty string, and writes rows with Python's ``csv`` writer (minimal
  quoting, ``\\n`` line ends); so does this.
* Parquet: pyarrow's own writer with the arrow types and the ``pandas`` schema metadata that
  pyarrow's pandas conversion would attach (``int64``, ``double``, ``large_string`` for pandas'
  ``str``), snappy compressed as pandas asks.

``tests/io/test_tables.py`` checks both against pandas on the headline run's tables and on
random tables (NaN, infinities, signed zeros, huge and tiny floats, integers, strings needing
quotes, empty strings and missing ones).
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np

from zionsim.base.table import Table


def table_csv(table: Table) -> str:
    """``table`` as pandas' ``to_frame().to_csv(index=False)`` writes it."""
    names = list(table.columns)
    cells = [_csv_column(table[k]) for k in names]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    w.writerows(zip(*cells, strict=True))
    return buf.getvalue()


def _csv_column(v: np.ndarray) -> list:
    kind = v.dtype.kind
    if kind == "f" and v.dtype.itemsize == 8:
        text = v.astype(str)
        text[np.isnan(v)] = ""
        return text.tolist()
    if kind in "iub":
        return v.astype(str).tolist()
    if kind == "O":
        return ["" if x is None or (isinstance(x, float) and x != x) else x for x in v.tolist()]
    raise TypeError(f"no CSV text for a column of dtype {v.dtype}")


def table_parquet(table: Table) -> bytes:
    """``table`` as pandas' ``to_frame().to_parquet(index=False)`` writes it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays, meta = [], []
    for name, v in table.columns.items():
        array, pandas_type, numpy_type = _arrow(pa, v)
        arrays.append(array)
        meta.append(
            {
                "name": name,
                "field_name": name,
                "pandas_type": pandas_type,
                "numpy_type": numpy_type,
                "metadata": None,
            }
        )
    pandas_meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": meta,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": _pandas_version(),
    }
    schema = pa.schema(
        [pa.field(n, a.type) for n, a in zip(table.columns, arrays, strict=True)],
        metadata={b"pandas": json.dumps(pandas_meta).encode()},
    )
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), buf, compression="snappy")
    return buf.getvalue()


def _arrow(pa, v: np.ndarray):
    """A column as an arrow array made from its buffers (``pa.array`` would import pandas), with
    the pandas and numpy type names pyarrow records for it; missing values (NaN in a float
    column, None or NaN in a string one) are nulls, as pyarrow's pandas conversion makes them."""
    n = len(v)
    kind, size = v.dtype.kind, v.dtype.itemsize
    if kind == "f" and size == 8:
        valid = ~np.isnan(v)
        buffers = [_validity(pa, valid), pa.py_buffer(np.ascontiguousarray(v))]
        return pa.Array.from_buffers(pa.float64(), n, buffers), "float64", "float64"
    if kind == "i" and size == 8:
        buffers = [None, pa.py_buffer(np.ascontiguousarray(v))]
        return pa.Array.from_buffers(pa.int64(), n, buffers), "int64", "int64"
    if kind == "b":
        data = pa.py_buffer(np.packbits(v, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), n, [None, data]), "bool", "bool"
    if kind == "O":
        items = v.tolist()
        try:  # every value a string (a run's tables): encoded in one pass
            data = list(map(str.encode, items))
            valid = np.ones(n, dtype=bool)
        except TypeError:
            valid = np.array([isinstance(x, str) for x in items], dtype=bool)
            if any(not _missing(x) for x, ok in zip(items, valid, strict=True) if not ok):
                raise TypeError("a string column holds values that are not strings") from None
            data = [x.encode() if ok else b"" for x, ok in zip(items, valid, strict=True)]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, data), np.int64, n), out=offsets[1:])
        buffers = [_validity(pa, valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(pa.large_string(), n, buffers), "object", "str"
    raise TypeError(f"no parquet column for dtype {v.dtype}")


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and x != x)


def _validity(pa, valid: np.ndarray):
    """The validity bitmap of ``valid`` (None where every value is present)."""
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _pandas_version() -> str:
    """The installed pandas' ``__version__`` (written into the parquet metadata as pandas
    writes it), without importing pandas: from the version file of its build
    (``pandas/_version_meson.py``) where there is one, else from its distribution metadata
    (``importlib.metadata``, 0.02 CPU s)."""
    import re
    from importlib.util import find_spec

    spec = find_spec("pandas")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = open(f"{folder}/_version_meson.py", encoding="utf-8").read()
        except OSError:
            continue
        found = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.M)
        if found:
            return found.group(1)
    from importlib.metadata import version

    return version("pandas")
