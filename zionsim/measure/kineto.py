"""Import a PyTorch profiler (Kineto) trace of one training iteration as a zionsim trace.

Pure: :func:`import_kineto` takes the parsed JSON; :func:`read_kineto` is the wrapper that reads
files.  The result replays with ``zionsim run --trace`` on any cluster with as many GPUs as the
trace has ranks; :func:`retarget` replicates it to another rank count (``zionsim trace
--import-kineto FILE --nodes N``).

Reading one file (event checks, its lookup tables, kernel classes by name, shapes from ``Input
Dims``) lives in :mod:`zionsim.measure.kineto_events`; this module turns the files into ops,
collectives and dependencies.

Format facts relied on (pytorch/kineto ``libkineto/src/output_json.cpp``, ``ActivityType.cpp``
and the CUPTI kernel metadata of ``CuptiActivity.cpp``, read through our search tool; PyTorch
profiler docs for ``record_shapes``):

* a file is ``{"schemaVersion", "deviceProperties", "distributedInfo": {"backend", "rank",
  "world_size", …}, "traceEvents": […]}``; events of interest are complete events ``"ph": "X"``
  with ``cat`` (``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, …), ``name``, ``pid``, ``tid``, and ``ts``/``dur`` in µs;
* CPU ops: ``args`` ``"External id"`` (the op's correlation id), with ``record_shapes``
  ``"Input Dims"`` and ``"Input type"`` (one entry per input), and ``"Sequence number"``, shared by
  a forward op and the autograd node that runs its backward;
* kernels: ``pid`` is the device, ``tid`` the stream; ``args`` ``"External id"`` (the CPU op
  that launched it), ``"device"``, ``"stream"``, ``"correlation"`` (the CUPTI id the
  ``cuda_runtime`` launch event also carries).  When the launching op is ``record_param_comms``,
  Kineto copies ``"Collective name"``, ``"In msg nelems"``, ``"Out msg nelems"``, ``"Group
  size"``, ``"dtype"``, ``"In split size"``, ``"Out split size"`` and ``"Process Group Ranks"``
  onto the kernel; the same fields are on the ``record_param_comms`` CPU op;
* NCCL kernels are named ``ncclKernel_<Coll>_…`` (NCCL ≤ 2.18) or ``ncclDevKernel_<Coll>…``,
  ``<Coll>`` one of AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, SendRecv.

Heuristics (each an assumption, not a fact of the trace):

1. Kernels → ops by name: NCCL kernels → ``collective`` (SendRecv is all_to_all unless the
   collective name says send/recv; Broadcast ≈ all_gather and Reduce ≈ reduce_scatter of the
   same bytes); ``*embedding*``/``bounded_`` (FBGEMM TBE, PyTorch EmbeddingBag) → embedding
   forward, or backward when the name says backward/grad; ``*gemm*``, ``gemv``, ``xmma``,
   ``cutlass``, ``cublas`` → GEMM; everything else (and memset / device copies) → ``memory``.
2. Work, not time: a GEMM takes (m, n, k, dtype) from the ``Input Dims`` of the CPU op that
   launched it or of an enclosing op (first pair of ≥2-D inputs with a matching inner dimension;
   a batched ``[b, m, k]`` GEMM becomes ``m·b``); an embedding op takes lookups (the longest 1-D
   integer input), row bytes (width of the first 2-D float input) and bags (the other 1-D
   integer input, PyTorch's ``offsets``); a backward node without shapes borrows those of the
   forward op with its ``Sequence number``.  Without shapes, a kernel becomes a ``memory`` op
   (its category kept) moving ``nbytes = duration × ref_hbm_Bps`` — a time measured on the
   reference GPU turned into bytes.  Replayed, it takes ``launch + nbytes / (hbm_bw ·
   stream_eff)``: on the reference GPU about ``duration / stream_eff`` plus a launch (an A100:
   ×1.2 + 4 µs), so short kernels come out slower than measured; it scales with HBM bandwidth.
3. A collective's bytes come from ``In/Out msg nelems`` × ``dtype`` size on the kernel or the
   nearest enclosing ``record_param_comms`` op (nccl-tests sizes: all_gather the output, the
   others the input), else ``default_bytes``.  All-to-allv splits (``In split size``, in
   ``Process Group Ranks`` order) become the per-peer byte matrix when every member has them.
4. Collectives are matched across ranks by order of occurrence per (operation, process group):
   the k-th all_reduce of every member is one collective.
5. Streams: NCCL all-to-all/send-recv kernels → ``a2a``, other NCCL kernels → ``allreduce``,
   every other kernel (whatever its CUDA stream) → ``compute``, in start-time order.
6. Dependencies: stream order; an op on ``compute`` depends on the latest op of each
   collective stream that ended before it started, and a collective on the latest ``compute``
   op that ended before it started (its probable producer).  A dependency already implied by
   an earlier op of the same stream is left out.  This can add false dependencies (an op that
   merely ran after a collective) but never drops one the timeline shows.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from pathlib import Path

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.trace import Collective, Op, Trace
from zionsim.measure.kineto_events import (
    DTYPE_BYTES,
    SHAPES,
    KinetoDoc,
    classify_kernel,
    event_arg,
    event_end,
)

#: A100-SXM4-40GB HBM2 bandwidth (B/s), ``topologies/zionex.yaml`` [a100]: the default reference
#: GPU whose measured kernel times are turned into bytes (heuristic 2)
REF_HBM_BPS = 1555e9
STREAM_OF = {"all_to_all": "a2a", "send_recv": "a2a"}
_SHORT = re.compile(r"<|\((?!anonymous namespace\))")


def read_kineto(path: str | Path | list, **kwargs) -> Trace:
    """:func:`import_kineto` of a trace file (``.json`` or ``.json.gz``), of a directory of them
    (one per rank) or of a list of paths."""
    if isinstance(path, list | tuple):
        paths = [Path(p) for p in path]
    elif Path(path).is_dir():
        paths = sorted(p for p in Path(path).iterdir() if p.name.endswith((".json", ".json.gz")))
    else:
        paths = [Path(path)]
    docs = []
    for p in paths:
        try:
            opener = gzip.open if p.name.endswith(".gz") else open
            with opener(p, "rt") as f:
                doc = json.load(f, parse_constant=_refuse_constant)
        except (OSError, ValueError, RecursionError, EOFError) as e:
            why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            raise InputError(f"cannot read a JSON trace: {why}", file=str(p)) from None
        docs += doc if isinstance(doc, list) else [doc]
    return import_kineto(docs if len(docs) != 1 else docs[0], str(path), **kwargs)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def import_kineto(
    data: dict | list[dict],
    source: str = "<trace>",
    *,
    ref_hbm_Bps: float = REF_HBM_BPS,
    default_bytes: float | None = None,
    step: int | None = None,
    global_batch: int | None = None,
) -> Trace:
    """A zionsim :class:`Trace` of a Kineto trace: one dict per rank, or one dict (one rank, or
    one process driving several GPUs: a rank per device).  ``step`` keeps the kernels launched
    inside ``ProfilerStep#<step>``; ``global_batch`` goes to ``meta`` (for samples/s).  See the
    module docstring for the heuristics; bad input raises :class:`InputError` naming ``source``.
    """
    docs = data if isinstance(data, list) else [data]
    ranks: list[tuple[int, KinetoDoc, list[dict]]] = []
    for i, doc in enumerate(docs):
        where = source if len(docs) == 1 else f"{source}[{i}]"
        d = KinetoDoc(doc, where)
        devices = sorted({_device(e) for e in d.gpu}, key=str)
        if len(devices) > 1 and len(docs) > 1:
            raise InputError(
                f"kernels on devices {devices}: one file per rank holds one GPU",
                file=where,
                field="traceEvents",
            )
        if len(devices) > 1:
            ranks += [(j, d, [e for e in d.gpu if _device(e) == v]) for j, v in enumerate(devices)]
        else:
            ranks.append((int(d.info.get("rank", i)), d, d.gpu))
    ranks.sort(key=lambda r: r[0])
    rank_ids = [r[0] for r in ranks]
    if len(set(rank_ids)) != len(rank_ids):
        raise InputError(f"duplicate ranks {rank_ids}", file=source, field="distributedInfo.rank")
    index_of = {g: r for r, g in enumerate(rank_ids)}
    items = [
        _items(d, kernels, step, ref_hbm_Bps, index_of, f"{source} rank {g}")
        for g, d, kernels in ranks
    ]
    colls = _collectives(items, default_bytes, source)
    ops: list[Op] = []
    for r, its in enumerate(items):
        _rank_ops(ops, r, its)
    meta = {
        "workload": f"kineto:{Path(source).name}",
        "plan": "measured",
        "source": source,
        "ranks_global": rank_ids,
        "ref_hbm_Bps": ref_hbm_Bps,
        "approximated_ops": sum(1 for its in items for it in its if it.get("approx")),
    }
    if global_batch:
        meta["global_batch"] = int(global_batch)
    from zionsim.dlrm.trace_file import trace_from_dict, trace_to_dict

    # what the heuristics made of the file is held to the trace-file schema: a shape or size
    # read from the profile that no GPU runs (a negative GEMM dimension …) is refused here
    return trace_from_dict(trace_to_dict(Trace(len(items), ops, colls, meta)), source)


def _device(e: dict):
    dev = event_arg(e, "device")
    return e.get("pid") if dev is None else dev


def _items(d: KinetoDoc, kernels, step, ref_hbm_Bps, index_of, where) -> list[dict]:
    """One dict per GPU activity of a rank, in start order: what op it becomes."""
    if step is not None:
        spans = [e for e in d.cpu if e.get("name") == f"ProfilerStep#{step}"]
        if not spans:
            found = sorted({e["name"] for e in d.cpu if e.get("name", "").startswith("Profiler")})
            raise InputError(
                f"no ProfilerStep#{step}",
                file=where,
                field="step",
                allowed=", ".join(found) or "none in this trace",
            )
        lo, hi = spans[0]["ts"], event_end(spans[0])
        kernels = [k for k in kernels if lo <= d.launch_ts(k) <= hi]
    out = []
    for k in sorted(kernels, key=lambda e: (e["ts"], event_end(e))):
        it = {"name": _short(k["name"]), "ts": k["ts"], "end": event_end(k), "stream": "compute"}
        it["measured_us"] = round(float(k.get("dur", 0)), 3)
        cat = k.get("cat", "").lower()
        if cat == "kernel":
            kind, category, coll = classify_kernel(k["name"])
        else:
            kind, category, coll = "memory", "interaction", None
        it.update(kind=kind, category=category)
        chain = d.chain(k)
        if coll:
            it.update(_collective_item(k, chain, coll, index_of, where))
        elif kind in SHAPES:
            _set_work(it, d, chain, SHAPES[kind])
        elif cat == "gpu_memcpy" and event_arg(k, "bytes") and re.search(r"HtoD|DtoH", k["name"]):
            direction = "h2d" if "HtoD" in k["name"] else "d2h"
            it.update(
                kind="transfer",
                category="host_transfer",
                direction=direction,
                nbytes=float(event_arg(k, "bytes")),
            )
        elif cat in ("gpu_memcpy", "gpu_memset") and event_arg(k, "bytes"):
            it["nbytes"] = float(event_arg(k, "bytes")) * (2.0 if cat == "gpu_memcpy" else 1.0)
        if it["kind"] in ("gemm", "embedding_fwd", "embedding_bwd") and "work" not in it:
            it["kind"] = "memory"
        if it["kind"] == "memory" and "nbytes" not in it:
            it.update(nbytes=float(k.get("dur", 0)) * 1e-6 * ref_hbm_Bps, approx=True)
        out.append(it)
    return out


def _short(name: str) -> str:
    """A kernel name without ``void``, template arguments and parameter list."""
    return _SHORT.split(name.removeprefix("void "), maxsplit=1)[0].strip()[:96] or name[:96]


def _set_work(it: dict, d: KinetoDoc, chain: list[dict], shape_of) -> None:
    """Shape args from the launching ops, else from the forward op of a backward node."""
    candidates = list(chain)
    for op in chain:
        seq = event_arg(op, "Sequence number")
        candidates += [d.cpu[i] for i in d.by_seq.get(seq, ()) if d.cpu[i] is not op]
    for op in candidates:
        args = op.get("args") or {}
        shape = shape_of(args.get("Input Dims") or [], args.get("Input type"))
        if shape is None:
            continue
        if it["kind"] == "gemm":
            m, n, k, dtype = shape
            if "tf32" in it["name"].lower() and dtype == "fp32":
                dtype = "tf32"
            it.update(work=True, m=m, n=n, k=k, dtype=dtype)
        else:
            fused = "split_embedding" in it["name"]
            it.update(
                work=True,
                lookups=shape["lookups"],
                row_bytes=shape["row_bytes"],
                tables=1,
                fused=fused,
            )
            if it["kind"] == "embedding_fwd":
                it["out_bytes"] = shape["bags"] * shape["row_bytes"]
            else:
                m = re.search(r"rowwise_adagrad|adagrad|adam", it["name"])
                it["optimizer"] = m.group(0) if m else "sgd"
        return


def _collective_item(k: dict, chain: list[dict], op: str, index_of: dict, where: str) -> dict:
    """Collective op, process group (trace ranks), bytes and all-to-allv splits of a kernel."""
    sources = [e.get("args") or {} for e in (k, *chain)]
    args = next((a for a in sources if "In msg nelems" in a), {})
    name = str(args.get("Collective name", "")).lower()
    if op == "all_to_all" and re.search(r"^(send|recv)", name):
        op = "send_recv"
    group = args.get("Process Group Ranks")
    if group is not None:
        group = [int(x) for x in re.findall(r"-?\d+", str(group))]
        missing = [g for g in group if g not in index_of]
        if missing:
            raise InputError(
                f"process group {group} has ranks {missing} that have no trace",
                file=where,
                field="Process Group Ranks",
            )
        group = tuple(index_of[g] for g in group)
    nbytes, splits = None, None
    elem = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    if elem and "In msg nelems" in args:
        n_in, n_out = float(args["In msg nelems"]), float(args.get("Out msg nelems", 0))
        nbytes = elem * {"all_gather": n_out, "send_recv": max(n_in, n_out)}.get(op, n_in)
        splits = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", str(args.get("In split size")))]
    stream = STREAM_OF.get(op, "allreduce")
    return {
        "coll": op,
        "group": group,
        "nbytes": nbytes,
        "splits": splits or None,
        "stream": stream,
        "category": "all_to_all" if op == "send_recv" else op,
    }


def _collectives(items: list[list[dict]], default_bytes, source) -> list[Collective]:
    """Match collective kernels across ranks (heuristic 4); sets ``it["cid"]``."""
    lists: dict = {}
    for r, its in enumerate(items):
        for it in its:
            if "coll" in it:
                lists.setdefault((it["coll"], it["group"]), {}).setdefault(r, []).append(it)
    instances = []
    for (op, group), per_rank in lists.items():
        members = sorted(group) if group else sorted(per_rank)
        counts = {r: len(per_rank.get(r, [])) for r in members}
        if len(set(counts.values())) != 1:
            raise InputError(
                f"{op} kernels per rank {counts} differ: cannot pair them across ranks",
                file=source,
                field="traceEvents",
            )
        for k in range(counts[members[0]]):
            instances.append((op, members, [per_rank[r][k] for r in members]))
    instances.sort(key=lambda inst: min(it["ts"] for it in inst[2]))
    out = []
    for cid, (op, members, its) in enumerate(instances):
        sizes = [it["nbytes"] for it in its if it["nbytes"] is not None]
        if not sizes and default_bytes is None:
            raise InputError(
                f"{op} kernel {its[0]['name']!r} has no message size (no record_param_comms "
                "args); pass default_bytes",
                file=source,
                field="default_bytes",
            )
        size = max(sizes) if sizes else float(default_bytes)
        matrix = None
        if op == "all_to_all" and len(sizes) == len(its):
            rows = [it["splits"] for it in its]
            if all(s and len(s) == len(members) and sum(s) > 0 for s in rows):
                matrix = np.array(
                    [np.array(s) / sum(s) * it["nbytes"] for s, it in zip(rows, its, strict=True)]
                )
                size = float(matrix.sum(axis=1).max())
        for it in its:
            it["cid"] = cid
        out.append(Collective(cid, op, np.array(members, dtype=np.int64), float(size), matrix))
    return out


def _rank_ops(ops: list[Op], rank: int, its: list[dict]) -> None:
    """Append the ops of one rank with their dependencies (heuristics 5 and 6)."""
    ends: dict[str, list[tuple[float, int]]] = {}
    last: dict[str, int] = {}
    implied: dict[tuple[str, str], int] = {}
    for it in its:
        s, i = it["stream"], len(ops)
        deps = [last[s]] if s in last else []
        others = ("a2a", "allreduce") if s == "compute" else ("compute",)
        for o in others:
            done = ends.get(o, [])
            j = bisect.bisect_right(done, (it["ts"], float("inf"))) - 1
            if j >= 0 and done[j][1] > implied.get((s, o), -1):
                deps.append(done[j][1])
                implied[s, o] = done[j][1]
        bisect.insort(ends.setdefault(s, []), (it["end"], i))
        last[s] = i
        ops.append(
            Op(i, rank, it["name"], it["kind"], it["category"], s, tuple(deps), _op_args(it))
        )


def _op_args(it: dict) -> dict:
    keys = {
        "gemm": ("m", "n", "k", "dtype"),
        "embedding_fwd": ("lookups", "row_bytes", "tables", "fused", "out_bytes"),
        "embedding_bwd": ("lookups", "row_bytes", "tables", "fused", "optimizer"),
        "memory": ("nbytes",),
        "transfer": ("direction", "nbytes"),
        "collective": ("cid",),
    }[it["kind"]]
    args = {k: it[k] for k in keys}
    if "cid" in args:
        args = {"coll": args.pop("cid")}
    return {**args, "measured_us": it["measured_us"]}
