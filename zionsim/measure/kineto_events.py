"""Reading a Kineto (PyTorch profiler) trace file: the checks on its events, the lookup tables
of one file (:class:`KinetoDoc`: CPU ops by External id, nesting, launches, sequences), kernel
classification by name and the shapes read from ``Input Dims``.

The format facts and the heuristics these rely on are listed in :mod:`zionsim.measure.kineto`,
which turns the documents into a zionsim trace.
"""

from __future__ import annotations

import re

import numpy as np

from zionsim.base.errors import InputError

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
NCCL_OPS = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "SendRecv": "all_to_all",
    "AllToAll": "all_to_all",
    "Broadcast": "all_gather",
    "Reduce": "reduce_scatter",
}
#: bytes per element of PyTorch dtype names as profiler args spell them
DTYPE_BYTES = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2,
    "c10::bfloat16": 2, "double": 8, "float64": 8, "long": 8, "long int": 8, "int64": 8,
    "int": 4, "int32": 4, "short": 2, "int16": 2, "byte": 1, "uint8": 1, "char": 1,
    "signed char": 1, "int8": 1, "bool": 1, "unsigned char": 1,
}  # fmt: skip
GEMM_DTYPES = {
    "float": "fp32", "float32": "fp32", "half": "fp16", "float16": "fp16", "c10::half": "fp16",
    "bfloat16": "bf16", "c10::bfloat16": "bf16", "signed char": "int8", "int8": "int8",
}  # fmt: skip
_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)")
_EMB = re.compile(r"embedding|bounded_", re.IGNORECASE)
_GEMM = re.compile(r"(?<!fb)gemm|gemv|xmma|cutlass|cublas|wgmma", re.IGNORECASE)  # not fbgemm_gpu::
_BWD = re.compile(r"backward|_bwd|grad", re.IGNORECASE)
_OPTIM = re.compile(r"multi_tensor_apply|optimizer|adam|adagrad|sgd", re.IGNORECASE)


def classify_kernel(name: str) -> tuple[str, str, str | None]:
    """(zionsim kind, breakdown category, collective op or None) of a GPU kernel name."""
    if m := _NCCL.match(name):
        op = NCCL_OPS.get(m.group(1), "all_reduce")
        return "collective", "all_to_all" if op == "all_to_all" else op, op
    if _EMB.search(name) and "bounds_check" not in name:
        return ("embedding_bwd" if _BWD.search(name) else "embedding_fwd"), "embedding", None
    if _GEMM.search(name):
        return "gemm", "gemm", None
    return "memory", "optimizer" if _OPTIM.search(name) else "interaction", None


def gemm_shape(dims: list, types: list | None = None) -> tuple[int, int, int, str] | None:
    """(m, n, k, dtype) of the first pair of ≥2-D inputs that multiply, or None."""
    types = list(types or []) + [""] * len(dims)
    mats = [(d, t) for d, t in zip(dims, types, strict=False) if _is_shape(d) and len(d) >= 2]
    for (a, ta), (b, _) in zip(mats, mats[1:], strict=False):
        n = b[-1] if a[-1] == b[-2] else b[-2] if a[-1] == b[-1] else None
        dtype = GEMM_DTYPES.get(str(ta).lower())
        if n is not None and dtype:
            return int(np.prod(a[:-1])), int(n), int(a[-1]), dtype
    return None


def embedding_shape(dims: list, types: list | None = None) -> dict | None:
    """Lookups, row bytes and bags of an embedding op's inputs (heuristic 2), or None."""
    types = [str(t).lower() for t in (types or [])] + [""] * len(dims)
    ints = [
        d[0]
        for d, t in zip(dims, types, strict=False)
        if _is_shape(d) and len(d) == 1 and ("int" in t or "long" in t)
    ]
    tables = [
        (d, t)
        for d, t in zip(dims, types, strict=False)
        if _is_shape(d) and len(d) == 2 and t in DTYPE_BYTES and "int" not in t
    ]
    if not ints or not tables:
        return None
    lookups = max(ints)
    rest = sorted(ints, reverse=True)[1:]
    (_, width), t = tables[0]
    row = float(width * DTYPE_BYTES[t])
    return {"lookups": float(lookups), "row_bytes": row, "bags": float(rest[0] if rest else 0)}


#: shape readers of the kinds whose work comes from Input Dims (heuristic 2)
SHAPES = {"gemm": gemm_shape, "embedding_fwd": embedding_shape, "embedding_bwd": embedding_shape}


def _is_shape(d) -> bool:
    return isinstance(d, list) and bool(d) and all(isinstance(x, int) for x in d)


class KinetoDoc:
    """Lookup tables of one trace file: CPU ops by External id, parents, launches, sequences."""

    def __init__(self, doc: dict, source: str):
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise InputError(
                "not a Kineto trace (no traceEvents list)", file=source, field="traceEvents"
            )
        xs = [
            check_event(i, e, source)
            for i, e in enumerate(doc["traceEvents"])
            if isinstance(e, dict) and e.get("ph") == "X"
        ]
        self.cpu = [e for e in xs if e.get("cat", "").lower() in ("cpu_op", "user_annotation")]
        self.gpu = [e for e in xs if e.get("cat", "").lower() in GPU_CATS]
        self.runtime = {
            event_arg(e, "correlation"): e for e in xs if e.get("cat", "").lower() == "cuda_runtime"
        }
        self.runtime.pop(None, None)
        self.by_ext = {event_arg(e, "External id"): i for i, e in enumerate(self.cpu)}
        self.by_ext.pop(None, None)
        self.by_seq: dict = {}
        for i, e in enumerate(self.cpu):
            if "Input Dims" in e.get("args", {}) and "Sequence number" in e["args"]:
                self.by_seq.setdefault(e["args"]["Sequence number"], []).append(i)
        self.parent = self._nesting()
        self.info = doc.get("distributedInfo") or {}
        rank = self.info.get("rank", 0) if isinstance(self.info, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 2**31:
            raise InputError(
                "expected a mapping with an integer rank >= 0",
                file=source,
                field="distributedInfo",
            )

    def _nesting(self) -> dict[int, int]:
        """Enclosing CPU op of every CPU op (same pid and tid, time containment)."""
        parent, threads = {}, {}
        for i, e in enumerate(self.cpu):
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(i)
        for ids in threads.values():
            stack: list[int] = []
            for i in sorted(ids, key=lambda i: (self.cpu[i]["ts"], -self.cpu[i].get("dur", 0))):
                end = self.cpu[i]["ts"] + self.cpu[i].get("dur", 0)
                while stack and event_end(self.cpu[stack[-1]]) < end - 1e-3:
                    stack.pop()
                if stack:
                    parent[i] = stack[-1]
                stack.append(i)
        return parent

    def chain(self, kernel: dict) -> list[dict]:
        """The CPU op that launched ``kernel`` and the ops enclosing it, innermost first."""
        ext = event_arg(kernel, "External id")
        if ext not in self.by_ext:
            ext = event_arg(self.runtime.get(event_arg(kernel, "correlation"), {}), "External id")
        i, out = self.by_ext.get(ext), []
        while i is not None and len(out) < 12:
            out.append(self.cpu[i])
            i = self.parent.get(i)
        return out

    def launch_ts(self, kernel: dict) -> float:
        """Host time (µs) a GPU kernel was launched: its CUDA runtime call, else the CPU op that
        launched it, else its own start."""
        rt = self.runtime.get(event_arg(kernel, "correlation"))
        chain = self.chain(kernel)
        return rt["ts"] if rt else chain[0]["ts"] if chain else kernel["ts"]


#: event args the importer reads, and the type each must have: ids are scalars (dict keys),
#: sizes finite numbers >= 0, shapes and types lists
_ID_ARGS = ("External id", "correlation", "Sequence number", "device", "stream")
_SIZE_ARGS = ("bytes", "In msg nelems", "Out msg nelems")
_LIST_ARGS = ("Input Dims", "Input type")


def check_event(i: int, e: dict, source: str) -> dict:
    """A complete (``"ph": "X"``) event whose fields the importer reads have their Kineto
    types: ``name`` and ``cat`` text, ``ts`` and ``dur`` (µs) finite numbers, ``dur`` >= 0,
    ``pid``/``tid`` scalars, ``args`` a mapping (see :data:`_ID_ARGS` …)."""

    def bad(field: str, value, allowed: str) -> InputError:
        shown = repr(value)[:60]
        return InputError(
            f"unexpected value {shown}", file=source, field=f"traceEvents[{i}].{field}",
            allowed=allowed,
        )  # fmt: skip

    for key in ("name", "ts"):
        if key not in e:
            raise bad(key, None, "present on every complete event")
    for key in ("name", "cat"):
        if not isinstance(e.get(key, ""), str):
            raise bad(key, e[key], "text")
    for key in ("ts", "dur"):
        v = e.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
            raise bad(key, v, "a finite number of microseconds")
        if key == "dur" and v < 0:
            raise bad(key, v, "a duration >= 0")
    for key in ("pid", "tid"):
        if not isinstance(e.get(key, 0), int | str):
            raise bad(key, e[key], "an integer or text")
    args = e.get("args", {})
    if not isinstance(args, dict):
        raise bad("args", args, "a mapping")
    _check_event_args(args, bad)
    return e


def _check_event_args(args: dict, bad) -> None:
    """The args of :func:`check_event` the importer reads have the types it needs."""
    for key in _ID_ARGS:
        if key in args and not isinstance(args[key], int | str | None):
            raise bad(f"args.{key}", args[key], "an integer or text")
    for key in _SIZE_ARGS:
        v = args.get(key)
        if key in args and (
            isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e18
        ):
            raise bad(f"args.{key}", v, "a number >= 0")
    for key in _LIST_ARGS:
        if key in args and not isinstance(args[key], list):
            raise bad(f"args.{key}", args[key], "a list")


def event_arg(e: dict, key: str):
    """``e['args'][key]``, None when absent."""
    return (e.get("args") or {}).get(key)


def event_end(e: dict) -> float:
    """End time (µs) of a complete event."""
    return e["ts"] + e.get("dur", 0)
