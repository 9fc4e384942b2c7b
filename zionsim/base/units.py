"""Parsing of human units: the one place where "200 Gbps" or "40 GiB" become SI numbers.

Inside zionsim every quantity is SI: seconds, bytes, bytes/s, FLOP/s.  Files and the command line
may use human units; they are converted here and nowhere else.

Conventions (DESIGN §9): ``KiB/MiB/GiB/TiB`` are powers of two, ``KB/MB/GB/TB`` powers of ten;
``bps/Kbps/Mbps/Gbps/Tbps`` are bits per second (÷8 to bytes/s); ``B/s, KB/s, GB/s, GiB/s`` are
bytes per second; ``FLOPS``/``FLOP/s`` with SI prefixes; times ``ns, us, µs, ms, s`` and, for
checkpoint intervals and restarts, ``min, h, d``.
A plain number is already SI.

>>> parse_quantity("200 Gbps", "bandwidth")
25000000000.0
>>> parse_quantity("40 GiB", "bytes")
42949672960.0
"""

from __future__ import annotations

import re

from zionsim.base.errors import InputError

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

#: unit suffix -> (dimension, factor to SI)
UNITS: dict[str, tuple[str, float]] = {}
for _p, _f in {**_SI, **_BIN}.items():
    UNITS[f"{_p}B"] = ("bytes", _f)
    UNITS[f"{_p}B/s"] = ("bandwidth", _f)
    UNITS[f"{_p}Bps"] = ("bandwidth", _f)
for _p, _f in _SI.items():
    UNITS[f"{_p}bps"] = ("bandwidth", _f / 8.0)
    UNITS[f"{_p}bit/s"] = ("bandwidth", _f / 8.0)
    UNITS[f"{_p}FLOPS"] = ("flops", _f)
    UNITS[f"{_p}FLOP/s"] = ("flops", _f)
    UNITS[f"{_p}FLOP"] = ("flop", _f)
UNITS.update(
    {
        "s": ("time", 1.0),
        "ms": ("time", 1e-3),
        "us": ("time", 1e-6),
        "µs": ("time", 1e-6),
        "ns": ("time", 1e-9),
        "min": ("time", 60.0),
        "h": ("time", 3600.0),
        "d": ("time", 86400.0),
    }
)
UNITS["B"] = ("bytes", 1.0)
UNITS["%"] = ("fraction", 0.01)

#: dimensions whose value must carry a unit in a file or ``--set`` (a bare ``400`` for a NIC
#: would silently be 400 bytes/s); 0 needs none
UNIT_REQUIRED = ("bytes", "bandwidth", "flops", "time")
#: the largest magnitude accepted in any dimension (SI): beyond it a value is a typo or an
#: overflow, not hardware (1e30 B/s, 1e30 FLOP/s, 1e30 bytes, 1e30 s)
MAX_MAGNITUDE = 1e30

#: the largest collective size ``--sizes`` takes: the bytes bound of ``base.bounds`` (10 PB)
MAX_COLLECTIVE_BYTES = 1e16

_NUM = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/%]*)\s*$")


def parse_quantity(
    value: object,
    dimension: str | None = None,
    *,
    field: str | None = None,
    file: str | None = None,
) -> float:
    """Return ``value`` in SI units; ``dimension`` (bytes, bandwidth, flops, time) is checked.

    Numbers pass through unchanged.  Strings are ``<number> <unit>``; the unit must belong to the
    expected dimension.
    """
    if isinstance(value, bool):
        raise InputError(f"expected a quantity, got {value!r}", file=file, field=field)
    if isinstance(value, int | float):
        number = float(value) if abs(value) <= MAX_MAGNITUDE else float("inf")  # no overflow
        return _finite(number, value, dimension, file, field)
    if not isinstance(value, str):
        raise InputError(
            f"expected a number or a string with a unit, got {value!r}", file=file, field=field
        )
    m = _NUM.match(value)
    if not m:
        raise InputError(
            f"cannot read {value!r} as a quantity",
            file=file,
            field=field,
            allowed=_allowed(dimension),
        )
    number, unit = float(m.group(1)), m.group(2)
    if unit == "":
        return _finite(number, value, dimension, file, field)
    if unit not in UNITS:
        raise InputError(
            f"unknown unit {unit!r} in {value!r}",
            file=file,
            field=field,
            allowed=_allowed(dimension),
        )
    dim, factor = UNITS[unit]
    if dimension is not None and dim != dimension:
        raise InputError(
            f"{value!r} is a {dim}, expected a {dimension}",
            file=file,
            field=field,
            allowed=_allowed(dimension),
        )
    return _finite(number * factor, value, dimension, file, field)


def _finite(number: float, value: object, dimension, file, field) -> float:
    """``number`` if finite and within :data:`MAX_MAGNITUDE`, else an :class:`InputError`."""
    if number != number or abs(number) > MAX_MAGNITUDE:
        raise InputError(
            f"{value!r} is not a finite quantity of plausible size",
            file=file,
            field=field,
            allowed=f"|value| <= {MAX_MAGNITUDE:g} in SI units; " + _allowed(dimension),
        )
    return number


def require_unit(value: object, dimension: str, *, field=None, file=None) -> None:
    """Refuse a bare non-zero number for a unit-bearing ``dimension`` (``UNIT_REQUIRED``)."""
    if dimension not in UNIT_REQUIRED or isinstance(value, bool):
        return
    bare = isinstance(value, int | float) or (
        isinstance(value, str) and (m := _NUM.match(value)) is not None and m.group(2) == ""
    )
    if bare and not (isinstance(value, int) and value == 0) and float(str(value)) != 0:
        raise InputError(
            f"{value!r} has no unit", file=file, field=field, allowed=_allowed(dimension)
        )


def parse_size_list(text: str) -> list[int]:
    """nccl-tests style size range ``"1K:8G"`` (doubling; K/M/G are powers of two) → byte sizes."""
    parts = text.split(":")
    if len(parts) not in (1, 2):
        raise InputError(
            f"cannot read size range {text!r}",
            field="--sizes",
            allowed="MIN:MAX, e.g. 1K:8G or 1073741824:1073741824",
        )
    lo, hi = (_nccl_size(p) for p in (parts[0], parts[-1]))
    if lo <= 0 or hi < lo:
        raise InputError(f"size range {text!r} is empty", field="--sizes", allowed="0 < MIN <= MAX")
    if hi > MAX_COLLECTIVE_BYTES:
        raise InputError(
            f"size {parts[-1]!r} is beyond any collective buffer",
            field="--sizes",
            allowed=f"at most {MAX_COLLECTIVE_BYTES:g} bytes (10 PB)",
        )
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= 2
    return sizes


def _nccl_size(token: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", token)
    if not m:
        raise InputError(
            f"cannot read size {token!r}",
            field="--sizes",
            allowed="an integer with optional K, M, G, T (powers of two)",
        )
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m.group(2)]


def _allowed(dimension: str | None) -> str:
    if dimension is None:
        return "a plain SI number or a number with a unit"
    if dimension in UNIT_REQUIRED:
        prefix = "a number with a unit, e.g. "
    else:
        prefix = "a plain SI number or e.g. "
    units = sorted(u for u, (d, _) in UNITS.items() if d == dimension)
    examples = {
        "bytes": "40 GiB, 1.5 TB",
        "bandwidth": "200 Gbps, 25 GB/s",
        "flops": "312 TFLOPS",
        "time": "1.5 us, 3 ms",
    }.get(dimension, ", ".join(units[:4]))
    return prefix + examples
