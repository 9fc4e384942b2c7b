"""nccl-tests logs: parse them and write them (``nccl_fit`` refits the NCCL model to them).

Pure: text in, data out (``read_nccl_log`` is the one wrapper that opens a file).

The format is what NVIDIA/nccl-tests ``src/common.cu`` prints (read through our search tool in
several versions of the file):

* header: ``# nccl-tests version 2.13.8 nccl-headers=… nccl-library=…`` and ``# Collective test
  starting: all_reduce_perf`` (recent versions only), ``# nThread 1 nGpus 1 minBytes 8 maxBytes …
  step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0``, ``# Using
  devices`` and one ``#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s`` line per rank;
* two column rows, ``# size count type redop root time algbw busbw #wrong time algbw busbw
  #wrong`` and a units row (``(B) (elements) (us) (GB/s) (GB/s)``); the first
  ``time algbw busbw #wrong`` group is the out-of-place run, the second the in-place run.  Old
  versions name the error column ``error`` and print no ``root`` for all-to-all;
* one row per size: ``%12li  %12li  %8s  %6s  %6i`` (size in bytes, element count, type, redop,
  root), then per run ``  %7s  %6.2f  %6.2f  %5s``: time in µs (``%7.2f`` below 100 µs,
  ``%7.1f`` below 10 ms, ``%7.0f`` above), algbw and busbw in GB/s (1e9 B/s), and the number of
  wrong elements, ``N/A`` where not checked (``-c 0``, in-place all-to-all).  all_gather and
  all_to_all print ``none`` and ``-1`` as redop and root;
* footer: ``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth    : %g`` (the mean busbw of
  every out-of-place and in-place result).

Sizes follow nccl-tests: all_reduce the buffer, all_gather the total output, reduce_scatter the
total input, all_to_all the per-rank send buffer — zionsim's own convention (``collectives.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from zionsim.base.errors import InputError
from zionsim.network.collectives import busbw_factor

#: nccl-tests binary (``<name>_perf``) → collective name
BINARIES = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "sendrecv": "send_recv",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}
#: nccl-tests type names → bytes per element (``test_typenames`` in src/common.cu)
TYPE_BYTES = {
    "int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8,
    "uint64": 8, "half": 2, "float": 4, "double": 8, "bfloat16": 2,
    "f8e4m3": 1, "f8e5m2": 1,
}  # fmt: skip
RUN_FIELDS = ("time_us", "algbw_GBps", "busbw_GBps", "wrong")
_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")  # mpirun --tag-output prefix
_BINARY = re.compile(r"\b([a-z_]+?)_perf\b")
_RANK = re.compile(
    r"#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+"
    r"device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)"
)
_FAILED = re.compile(r"Test (?:NCCL |CUDA )?failure|Test timeout", re.IGNORECASE)
_RUN_COLUMNS = ["time", "algbw", "busbw", "#wrong"]
_DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root"] + 2 * _RUN_COLUMNS


def read_nccl_log(path: str | Path, op: str | None = None) -> pd.DataFrame:
    """:func:`parse_nccl_tests` of the file at ``path`` (a missing file or a folder is an
    :class:`InputError` naming it)."""
    p = Path(path)
    if not p.is_file():
        what = "is a folder" if p.is_dir() else "no such file"
        raise InputError(what, file=str(p), field="--nccl-log", allowed="an nccl-tests log file")
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(p), field="--nccl-log") from None
    return parse_nccl_tests(text, str(p), op)


def parse_nccl_tests(text: str, source: str = "<log>", op: str | None = None) -> pd.DataFrame:
    """One row per size of an nccl-tests log (see the module docstring for the format).

    Columns: ``op``, ``size_bytes``, ``count``, ``type``, ``redop``, ``root``, ``oop_time_us``,
    ``oop_algbw_GBps``, ``oop_busbw_GBps``, ``oop_wrong`` and the same ``ip_*`` for the in-place
    run (NaN where absent or ``N/A``), ``time_s``, ``algbw_GBps``, ``busbw_GBps`` (the
    out-of-place run), ``ranks`` and ``line``.  ``op`` comes from the binary name in the log
    (``# Collective test starting: X_perf`` or an echoed command line), else from ``op``.
    ``df.attrs`` holds ``avg_busbw_GBps``, ``devices`` (one dict per ``# Rank`` line) and
    ``params`` (the ``# nThread`` line).  Bad text raises :class:`InputError` naming ``source``
    and the line.
    """
    rows, devices, attrs = [], [], {"source": source, "params": {}}
    columns, current = None, op
    for number, raw in enumerate(text.splitlines(), 1):
        line = _TAG.sub("", raw).strip()
        if not line:
            continue
        where = f"line {number}"
        if line.startswith("#"):
            columns = _header(line, columns)
            if m := _RANK.match(line):
                devices.append(_device(m))
            elif "Collective test starting" in line or "nThread" in line:
                current = _binary_op(line) or current
                attrs["params"].update(_params(line))
            elif m := re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)", line):
                attrs["avg_busbw_GBps"] = _number(m.group(1), source, where)
            continue
        if _FAILED.search(line):
            raise InputError(f"the run failed: {line[:120]}", file=source, field=where)
        if not re.match(r"\d+\s", line):
            current = _binary_op(line) or current  # an echoed command line, or noise
            continue
        if current is None:
            raise InputError(
                "cannot tell which collective this log measures (no X_perf binary name in it)",
                file=source,
                field=where,
                allowed="pass op=" + "/".join(sorted(set(BINARIES.values()))),
            )
        rows.append({"op": current, **_row(line.split(), columns, source, where), "line": number})
    if not rows:
        raise InputError(
            "no nccl-tests result rows (lines that start with a size in bytes)",
            file=source,
            field=f"lines 1-{max(1, len(text.splitlines()))}",
        )
    df = pd.DataFrame(rows)
    df["time_s"] = df["oop_time_us"] * 1e-6
    df["algbw_GBps"] = df["oop_algbw_GBps"]
    df["busbw_GBps"] = df["oop_busbw_GBps"]
    df["ranks"] = len({d["rank"] for d in devices}) if devices else np.nan
    df = df[[c for c in df.columns if c != "line"] + ["line"]]
    df.attrs.update(attrs, devices=devices)
    df.attrs.setdefault("avg_busbw_GBps", float("nan"))
    return df


def _header(line: str, columns: list[str] | None) -> list[str] | None:
    """The column names if ``line`` is the ``# size count …`` row, else the ones we had."""
    words = line.lstrip("#").split()
    if words[:2] == ["size", "count"]:
        return ["#wrong" if w == "error" else w for w in words]
    return columns


def _row(tokens: list[str], columns: list[str] | None, source: str, where: str) -> dict:
    """A result row, laid out by the column header (the modern layout if none was seen)."""
    columns = columns or _DEFAULT_COLUMNS
    front = columns[: columns.index("time")] if "time" in columns else columns[:5]
    runs = sum(c in ("time", "cputime") for c in columns) or 2
    n_front = len(tokens) - 4 * runs
    if "redop" in front and n_front == len(front) - 1:
        tokens = tokens[:3] + ["none"] + tokens[3:]  # old all-to-all prints an empty redop
        n_front += 1
    if n_front != len(front) or n_front < 3:
        raise InputError(
            f"expected {len(front) + 4 * runs} fields "
            f"({' '.join(front)} + {runs} x time algbw busbw #wrong), got {len(tokens)}",
            file=source,
            field=where,
        )
    head = dict(zip(front, tokens, strict=False))
    row = {
        "size_bytes": _integer(head["size"], source, where),
        "count": _integer(head["count"], source, where),
        "type": head["type"],
        "redop": head.get("redop", "none"),
        "root": _integer(head.get("root", "-1"), source, where, minimum=-1),
    }
    values = tokens[n_front:]
    for i, prefix in enumerate(("oop", "ip")):
        group = values[4 * i : 4 * i + 4] if i < runs else ["N/A"] * 4
        for name, value in zip(RUN_FIELDS, group, strict=True):
            timed = name == "time_us"
            row[f"{prefix}_{name}"] = _number(
                value, source, where, na_ok=not (timed and prefix == "oop"), positive=timed
            )
    return row


#: the largest value any column of a result row may hold: 10^18 (bytes, elements, µs, GB/s);
#: beyond it a number is a corrupt line, not a measurement
_MAX_VALUE = 1e18


def _number(text: str, source: str, where: str, na_ok: bool = True, positive=False) -> float:
    """A measured value: finite, >= 0 (> 0 when ``positive``: a time), at most
    :data:`_MAX_VALUE`; ``N/A`` or ``-`` is NaN (absent) where ``na_ok``."""
    text = text.rstrip("*")  # old versions flag a failed check with a trailing '*'
    if na_ok and text in ("N/A", "-"):
        return float("nan")
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", file=source, field=where) from None
    if not (value > 0 if positive else value >= 0) or not value <= _MAX_VALUE:
        raise InputError(
            f"{text!r} is not a measurement",
            file=source,
            field=where,
            allowed=f"a finite number {'>' if positive else '>='} 0, at most {_MAX_VALUE:g}",
        )
    return value


def _integer(text: str, source: str, where: str, minimum: int = 0) -> int:
    """A whole number ``>= minimum`` and at most :data:`_MAX_VALUE`."""
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"expected an integer, got {text!r}", file=source, field=where) from None
    if not minimum <= value <= _MAX_VALUE:
        raise InputError(
            f"{text!r} is out of range",
            file=source,
            field=where,
            allowed=f"{minimum} to {_MAX_VALUE:g}",
        )
    return value


def _binary_op(line: str) -> str | None:
    m = _BINARY.search(line)
    return BINARIES.get(m.group(1)) if m else None


def _device(m: re.Match) -> dict:
    rank, group, pid, host, device, bus, name = m.groups()
    return {
        "rank": int(rank),
        "group": int(group or 0),
        "pid": int(pid),
        "host": host,
        "device": int(device),
        "bus": bus,
        "name": name.strip(),
    }


def _params(line: str) -> dict:
    """Numbers of the ``# nThread …`` line: ``{"nThread": 1, "minBytes": 8, "iters": 20, …}``."""
    return {k.strip(): int(v) for k, v in re.findall(r"([A-Za-z][A-Za-z ]*?):? (-?\d+)\b", line)}


# ------------------------------------------------------------------------------ writing
def format_nccl_tests(
    rows: pd.DataFrame,
    op: str,
    ranks: int,
    *,
    dtype: str = "float",
    redop: str = "sum",
    comment: str | None = None,
    host: str = "node0",
    device_name: str = "GPU",
) -> str:
    """An nccl-tests log of ``rows`` (``size_bytes``, ``time_s``; ``ip_time_s`` optional).

    Numbers are printed with nccl-tests' own formats, so parsing the text back loses what
    nccl-tests' output loses (busbw to 0.01 GB/s, time to 0.01 µs or coarser).
    """
    binary = {v: k for k, v in reversed(BINARIES.items())}[op]
    sizes = rows["size_bytes"].to_numpy(dtype=float)
    out = [f"# {line}" for line in (comment or "").splitlines()]
    out += _log_header(binary, sizes, ranks, host, device_name)
    factor, busbws = busbw_factor(op, ranks), []
    ip = rows["ip_time_s"] if "ip_time_s" in rows else rows["time_s"]
    for size, t_oop, t_ip in zip(sizes, rows["time_s"], ip, strict=True):
        out.append(_log_row(op, ranks, dtype, redop, size, t_oop, t_ip, factor, busbws))
    out += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {float(np.mean(busbws)):g} ",
        "#",
    ]
    return "\n".join(out) + "\n"


def _log_header(binary: str, sizes, ranks: int, host: str, device_name: str) -> list[str]:
    """nccl-tests' header: version, test, parameters, one ``# Rank`` line per rank (rank r on
    device r of ``host``) and the column titles."""
    out = [
        "# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805",
        f"# Collective test starting: {binary}_perf",
        f"# nThread 1 nGpus 1 minBytes {int(sizes.min())} maxBytes {int(sizes.max())} "
        "step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    out += [
        f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {host:>10s} device {r:2d} "
        f"[0000:{r + 7:02x}:00] {device_name}"
        for r in range(ranks)
    ]
    out += [
        "#",
        f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place"
        "                       in-place          ",
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  "
        f"{'time':>7s}  {'algbw':>6s}  {'busbw':>6s} {'#wrong':>6s}  {'time':>7s}  "
        f"{'algbw':>6s}  {'busbw':>6s} {'#wrong':>6s}",
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  "
        f"{'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>5s}  {'(us)':>7s}  {'(GB/s)':>6s}  "
        f"{'(GB/s)':>6s}  {'':>5s}",
    ]
    return out


def _log_row(op, ranks, dtype, redop, size, t_oop, t_ip, factor, busbws: list) -> str:
    """One size's line: count, type, redop, root, then time (µs), algbw and busbw (GB/s) out of
    place and in place; appends both busbws to ``busbws``."""
    rooted = op in ("broadcast", "reduce")
    reduces = op in ("all_reduce", "reduce_scatter", "reduce")
    per_rank = op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
    count = int(size // TYPE_BYTES[dtype] // (ranks if per_rank else 1))
    line = (
        f"{int(size):12d}  {count:12d}  {dtype:>8s}  {redop if reduces else 'none':>6s}  "
        f"{0 if rooted else -1:6d}"
    )
    for t, wrong in ((t_oop, "0"), (t_ip, "N/A" if op == "all_to_all" else "0")):
        algbw = size / t / 1e9
        busbws.append(algbw * factor)
        line += f"  {_time_text(t * 1e6):>7s}  {algbw:6.2f}  {algbw * factor:6.2f}  {wrong:>5s}"
    return line


def _time_text(us: float) -> str:
    """nccl-tests' time column: 2 decimals below 100 µs, 1 below 10 ms, none above."""
    return f"{us:7.0f}" if us >= 10000.0 else f"{us:7.1f}" if us >= 100.0 else f"{us:7.2f}"


def world_of(frames: list[pd.DataFrame]) -> tuple[int, int] | None:
    """(nodes, GPUs per node) of the logs' ``# Rank`` lines (hosts, ranks per host), if they
    name the same world in every log and every host runs as many ranks; else None."""
    worlds = set()
    for df in frames:
        devices = df.attrs.get("devices") or []
        if not devices:
            return None
        per_host: dict[str, int] = {}
        for d in devices:
            per_host[d["host"]] = per_host.get(d["host"], 0) + 1
        if len(set(per_host.values())) != 1:
            return None
        worlds.add((len(per_host), next(iter(per_host.values()))))
    return worlds.pop() if len(worlds) == 1 else None
