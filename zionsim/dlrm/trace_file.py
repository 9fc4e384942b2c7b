"""The trace file schema ``zionsim.trace/1`` (``docs/traces.md``): a
:class:`~zionsim.dlrm.trace.Trace` as plain JSON-able data and back, with every field of a
loaded file validated (errors name the file, the op and the field).  Pure: reading and writing
the files is ``io.files``'.
"""

from __future__ import annotations

import math

import numpy as np

from zionsim.base import bounds
from zionsim.base.errors import InputError
from zionsim.dlrm.stack import StackSpec
from zionsim.dlrm.sync import PLACEMENTS, TraceSync, sync_spec
from zionsim.dlrm.trace import (
    CATEGORIES,
    KINDS,
    OP_ARGS,
    PS_PARTS,
    SCHEMA,
    STREAMS,
    TRANSFER_DIRECTIONS,
    Collective,
    Op,
    Trace,
)


def trace_to_dict(trace: Trace) -> dict:
    """The trace as plain JSON-able data (schema ``zionsim.trace/1``); its typed stack and sync
    become ``meta.stack`` and ``meta.sync`` (here only: the model never flattens them)."""
    return {
        "schema": SCHEMA,
        "ranks": trace.ranks,
        "meta": _meta_to_dict(trace),
        "collectives": [
            {
                "id": c.id,
                "op": c.op,
                "ranks": c.ranks.tolist(),
                "size_bytes": c.size_bytes,
                "matrix": None if c.matrix is None else c.matrix.tolist(),
            }
            for c in trace.collectives
        ],
        "ops": [
            {
                "id": o.id,
                "rank": o.rank,
                "name": o.name,
                "kind": o.kind,
                "category": o.category,
                "stream": o.stream,
                "deps": list(o.deps),
                "args": o.args,
            }
            for o in trace.ops
        ],
    }


def _meta_to_dict(trace: Trace) -> dict:
    """``meta`` with ``stack`` after ``fused`` and ``sync`` after ``model`` (where a lowered
    trace has always had them), or last."""
    out = {}
    extra = {
        "stack": None if trace.stack is None else stack_to_dict(trace.stack),
        "sync": None if trace.sync is None else sync_to_dict(trace.sync),
    }
    after = {"fused": "stack", "model": "sync"}
    for key, value in trace.meta.items():
        out[key] = value
        if key in after and extra[after[key]] is not None:
            out[after[key]] = extra.pop(after[key])
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def stack_to_dict(stack: StackSpec) -> dict:
    """A stack profile as a trace file's ``meta.stack`` (``StackSpec.to_dict``)."""
    return stack.to_dict()


def sync_to_dict(sync: TraceSync) -> dict:
    """A trace's sync as its file's ``meta.sync``: the spec, the background collective of each
    rank and the bytes of a round."""
    return {**sync.spec.to_dict(), "background": dict(sync.background), "bytes": sync.bytes}


def trace_from_dict(data: dict, file: str = "<trace>") -> Trace:
    """Validate and load a trace mapping; errors name the file, the op and the field.

    Every field is checked for its type and physical bound (``base.bounds``): a trace with a
    NaN GEMM dimension, a negative collective size or an op argument of the wrong type is
    refused here, not run."""

    def err(field_, problem, allowed=None):
        return InputError(problem, file=file, field=field_, allowed=allowed)

    try:
        return _trace(data, err)
    except InputError as exc:
        raise exc.located(file) from None


def _trace(data: dict, err) -> Trace:
    """The body of :func:`trace_from_dict` (errors without a file get it added there)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise err(
            "schema",
            f"expected {SCHEMA!r}, got {data.get('schema') if isinstance(data, dict) else data!r}",
        )
    unknown = sorted(str(k) for k in data if k not in TOP_KEYS)
    if unknown:
        raise err(unknown[0], "unknown field", ", ".join(TOP_KEYS))
    ranks = bounds.count(data.get("ranks"), "gpus", field="ranks")
    colls_data, ops_data = (_list(data, k, err) for k in ("collectives", "ops"))
    colls = [_load_collective(i, c, ranks, err) for i, c in enumerate(colls_data)]
    ops = [_load_op(i, o, ops_data, ranks, len(colls), err) for i, o in enumerate(ops_data)]
    meta = _check_meta(data.get("meta"), ranks, len(colls), err)
    stack = _stack_from_meta(meta.pop("stack", None))
    sync = _sync_from_meta(meta.pop("sync", None))
    _check_members(ops, colls, sync, err)
    return Trace(ranks, ops, colls, meta, stack, sync)


def _embedding_update(data: dict | None) -> dict:
    """StackSpec fields of ``meta.stack.embedding_update`` (absent: the fused update); the ops
    it shaped are already in the file, so it is carried for the record."""
    if not isinstance(data, dict):
        return {}
    grad = data.get("gradient") or {}
    return {
        "embedding_optimizer": str(data.get("optimizer", "fused")),
        "embedding_gradient": (
            str(grad.get("single_gpu", "view")),
            str(grad.get("multi_gpu", "view")),
        ),
        "amp_unscale": bool(data.get("amp_unscale", False)),
    }


def _stack_from_meta(data: dict | None) -> StackSpec | None:
    """The :class:`StackSpec` of a file's ``meta.stack`` (checked by :func:`_check_meta`);
    absent fields take the profile's defaults, the name ``bare``."""
    if not data:
        return None
    fields = {
        "name": str(data.get("name", "bare")),
        "precision": dict(data.get("precision") or {}),
        "kernel_launch_s": data.get("kernel_launch_s"),
        "mlp_kernels": tuple(data.get("mlp_kernels") or (1, 2)),
        "optimizer_kernels_per_tensor": int(data.get("optimizer_kernels_per_tensor", 0)),
        "host_dispatch_s": float(data.get("host_dispatch_s", 0.0)),
        "host_per_step_s": float(data.get("host_per_step_s", 0.0)),
        "host_per_sample_s": float(data.get("host_per_sample_s", 0.0)),
        "host_overlap": bool(data.get("host_overlap", True)),
        "gpu_per_step_s": float(data.get("gpu_per_step_s", 0.0)),
        "compute_slowdown": float(data.get("compute_slowdown", 0.0)),
        "comm_slowdown": float(data.get("comm_slowdown", 0.0)),
        "fused_embedding": bool(data.get("fused_embedding", True)),
        **_embedding_update(data.get("embedding_update")),
        "local_reduce": bool(data.get("local_reduce", False)),
        "embedding_stream": bool(data.get("embedding_stream", False)),
        "iteration_join": bool(data.get("iteration_join", False)),
        "dense_waits_lookup": bool(data.get("dense_waits_lookup", False)),
        "data_distributor": bool(data.get("data_distributor", False)),
        "data_distributor_key_bytes": int(data.get("data_distributor_key_bytes", 0)),
        "data_distributor_host_sync_s": float(data.get("data_distributor_host_sync_s", 0.0)),
        "one_communicator": bool(data.get("one_communicator", False)),
        "hierarchical_reduction": bool(data.get("hierarchical_reduction", False)),
        "hier_sparse_copy": bool(data.get("hier_sparse_copy", False)),
        "hier_fused_forward": bool(data.get("hier_fused_forward", False)),
        "grouped_allreduce": bool(data.get("grouped_allreduce", False)),
        "planner": str(data.get("planner", "greedy")),
        "bottom_mlp": str(data.get("bottom_mlp", "data_parallel")),
        "planner_settings": _Settings(data["planner_settings"])
        if data.get("planner_settings") is not None
        else None,
    }
    return StackSpec(**fields)


class _Settings(dict):
    """A planner's settings as a trace file holds them (plain data, written back as read)."""

    def to_dict(self) -> dict:
        """The settings as read."""
        return dict(self)


def _sync_from_meta(data: dict | None) -> TraceSync | None:
    """The :class:`TraceSync` of a file's ``meta.sync`` (checked by :func:`_check_meta`)."""
    if not data:
        return None
    spec = sync_spec(base={k: v for k, v in data.items() if k not in ("background", "bytes")},
                     file="trace meta")  # fmt: skip
    background = {int(k): int(v) for k, v in (data.get("background") or {}).items()}
    return TraceSync(spec, background, float(data.get("bytes", 0.0)))


#: top-level fields of a trace file
TOP_KEYS = ("schema", "ranks", "meta", "collectives", "ops")


def _list(data: dict, key: str, err) -> list:
    """``data[key]`` as a list of mappings (absent or null: empty)."""
    items = data.get(key) or []
    if not isinstance(items, list):
        raise err(key, f"expected a list, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise err(f"{key}[{i}]", f"expected a mapping, got {item!r}"[:120])
    return items


def _load_collective(i: int, c: dict, ranks: int, err) -> Collective:
    """Collective ``i`` of a trace file: its id, a known op, distinct members among the ranks,
    a size in bytes and an optional square byte matrix over the members."""
    where = f"collectives[{i}]"
    if c.get("id") != i or isinstance(c.get("id"), bool):
        raise err(f"{where}.id", f"expected {i}, got {c.get('id')!r}")
    from zionsim.network.collectives import OPS

    if c.get("op") not in OPS:
        raise err(f"{where}.op", f"unknown collective {c.get('op')!r}", ", ".join(OPS))
    group = c.get("ranks")
    if (
        not isinstance(group, list)
        or not group
        or not all(isinstance(r, int) and not isinstance(r, bool) for r in group)
        or not all(0 <= r < ranks for r in group)
        or len(set(group)) != len(group)
    ):
        raise err(f"{where}.ranks", f"expected distinct ranks in 0..{ranks - 1}", "a list")
    size = _number(c.get("size_bytes", 0), "size_bytes", "bytes", f"{where}.size_bytes", err)
    matrix = c.get("matrix")
    if matrix is not None:
        matrix = _byte_matrix(matrix, len(group), f"{where}.matrix", err)
    return Collective(i, c["op"], np.asarray(group, dtype=np.int64), size, matrix)


def _byte_matrix(matrix, n: int, where: str, err) -> np.ndarray:
    """A square ``n`` x ``n`` matrix of finite byte counts >= 0."""
    ok = isinstance(matrix, list) and len(matrix) == n
    ok = ok and all(isinstance(row, list) and len(row) == n for row in matrix)
    ok = ok and all(_is_number(x) for row in matrix for x in row)
    if not ok:
        raise err(where, f"expected {n} rows of {n} byte counts (one per member)")
    out = np.asarray(matrix, dtype=float)
    if (
        not np.isfinite(out).all()
        or (out < 0).any()
        or (out > bounds.DIMENSIONS["bytes"].high).any()
    ):
        raise err(
            where, "byte counts must be finite and >= 0", bounds.DIMENSIONS["bytes"].allowed()
        )
    return out


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _number(value, key: str, dimension: str | None, where: str, err) -> float:
    """A number (not a bool) inside the bound of ``key``/``dimension``."""
    if not _is_number(value):
        raise err(where, f"expected a number, got {value!r}"[:120])
    if value < 0:
        raise err(where, f"must be >= 0, got {value!r}")
    return float(bounds.check(value, key, dimension, field=where))


def _load_op(i: int, o: dict, ops: list, ranks: int, n_colls: int, err) -> Op:
    """Op ``i`` of a trace file: id, kind, stream, category, rank, deps and args checked."""
    where = f"ops[{i}]"
    if o.get("id") != i or isinstance(o.get("id"), bool):
        raise err(f"{where}.id", f"expected {i}, got {o.get('id')!r}")
    for key, allowed in (("kind", KINDS), ("stream", STREAMS), ("category", CATEGORIES)):
        if o.get(key) not in allowed:
            what = "op kind" if key == "kind" else key
            raise err(f"{where}.{key}", f"unknown {what} {o.get(key)!r}", ", ".join(allowed))
    rank = o.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < ranks:
        raise err(f"{where}.rank", f"rank must be in 0..{ranks - 1}, got {rank!r}")
    deps = o.get("deps") or []
    if not isinstance(deps, list):
        raise err(f"{where}.deps", f"expected a list of op ids, got {deps!r}"[:120])
    _check_deps(i, tuple(deps), rank, ops, err)
    args = o.get("args") or {}
    if not isinstance(args, dict):
        raise err(f"{where}.args", f"expected a mapping, got {args!r}"[:120])
    args = _check_args(where, o["kind"], dict(args), n_colls, err)
    name = o.get("name", f"op{i}")
    return Op(i, rank, str(name), o["kind"], o["category"], o["stream"], tuple(deps), args)


def _check_deps(i: int, deps: tuple, rank: int, ops: list, err) -> None:
    """Op ``i``'s dependencies name earlier ops on its own rank."""
    for d in deps:
        if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d < i:
            raise err(
                f"ops[{i}].deps", f"dependency {d!r} does not name an earlier op", f"ids 0..{i - 1}"
            )
        if ops[d].get("rank") != rank:
            raise err(
                f"ops[{i}].deps",
                f"dependency {d} is on rank {ops[d].get('rank')}, "
                f"not {rank} (cross-rank order goes through collectives)",
            )


#: op args by kind, derived from the typed schema ``trace.OP_ARGS``: required (no default),
#: then optional (``measured_us``, the time a profiler measured, is allowed on every op);
#: :func:`_check_arg` gives each name its type and bound
REQUIRED_ARGS = {
    kind: tuple(f for f in t._fields if f not in t._field_defaults) for kind, t in OP_ARGS.items()
}
OPTIONAL_ARGS = {
    kind: tuple(f for f in t._field_defaults if f != "measured_us") for kind, t in OP_ARGS.items()
}
#: numeric args: (key of the bound in ``base.bounds``, dimension, smallest whole number or None
#: for a real number >= 0)
_NUMERIC_ARGS = {
    "m": ("m", None, 1),
    "n": ("n", None, 1),
    "k": ("k", None, 1),
    "launches": ("launches", None, 1),
    "tables": ("tables", None, 0),  # an embedding op with no local table (all on servers)
    "every": ("every", None, 1),
    "nbytes": ("nbytes", "bytes", None),
    "eltwise_bytes": ("nbytes", "bytes", None),  # bias/activation kernels beside a GEMM
    "row_bytes": ("row_bytes", "bytes", None),
    "grad_bytes": ("row_bytes", "bytes", None),
    "out_bytes": ("out_bytes", "bytes", None),
    "state_bytes_per_row": ("state_bytes_per_row", "bytes", None),
    "seconds": ("seconds", "time", None),
    "lookups": ("lookups", None, None),
    "unique_rows": ("lookups", None, None),
    "measured_us": ("measured_us", None, None),
}


def _check_args(where: str, kind: str, args: dict, n_colls: int, err) -> dict:
    """The args of an op of ``kind``: the required ones present, no unknown ones, each of its
    type and within its bound; a transfer's direction fits its other args, a collective op
    names a listed collective."""
    required, optional = REQUIRED_ARGS[kind], OPTIONAL_ARGS[kind] + ("measured_us",)
    missing = [a for a in required if a not in args]
    if missing:
        raise err(
            f"{where}.args.{missing[0]}", f"missing: a {kind} op needs it", ", ".join(required)
        )
    unknown = sorted(str(a) for a in args if a not in required + optional)
    if unknown:
        raise err(f"{where}.args.{unknown[0]}", "unknown argument", ", ".join(required + optional))
    for name, value in list(args.items()):
        args[name] = _check_arg(f"{where}.args.{name}", name, value, err)
    if kind == "transfer":
        _check_transfer(where, args, err)
    if kind == "collective" and not args["coll"] < n_colls:
        raise err(
            f"{where}.args.coll", f"unknown collective {args['coll']!r}", f"ids 0..{n_colls - 1}"
        )
    return args


def _check_arg(where: str, name: str, value, err):
    """One op argument of its type and bound, as it is used: a whole number as an int (``2.0``
    would index a list as a float)."""
    from zionsim.dlrm.workload import EMBEDDING_OPTIMIZERS
    from zionsim.hardware.compute import DOT_KERNELS
    from zionsim.hardware.topology import DTYPES

    choices = {"dtype": DTYPES, "optimizer": tuple(EMBEDDING_OPTIMIZERS),
               "direction": TRANSFER_DIRECTIONS, "kernel": ("gemm", *DOT_KERNELS)}  # fmt: skip
    if name in choices:
        if value not in choices[name]:
            raise err(where, f"unknown value {value!r}", ", ".join(choices[name]))
    elif name == "fused":
        if not isinstance(value, bool):
            raise err(where, f"expected true or false, got {value!r}")
    elif name == "coll":
        return bounds.count(value, "coll", minimum=0, field=where)
    elif name == "l2_parts":
        return _l2_parts(where, value, err)
    elif name in _NUMERIC_ARGS:
        key, dimension, least = _NUMERIC_ARGS[name]
        if least is not None:
            return bounds.count(value, key, minimum=least, field=where)
        _number(value, key, dimension, where, err)
    return value


def _l2_parts(where: str, value, err) -> tuple:
    """An embedding lookup's ``l2_parts``: a list of ``[table_rows, rows_held, lookups,
    row_bytes, zipf_alpha]`` and optionally a sixth, the multi-hot list length (0: independent
    draws), the rows held no more than the table's, as a tuple of tuples."""
    allowed = (
        "a list of [table_rows, rows_held, lookups, row_bytes, zipf_alpha] (and optionally "
        "list_length), each >= 0"
    )
    if not isinstance(value, list | tuple):
        raise err(where, f"expected a list, got {value!r}"[:120], allowed)
    parts = []
    for i, part in enumerate(value):
        ok = isinstance(part, list | tuple) and len(part) in (5, 6)
        ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in part)
        if not ok or not all(math.isfinite(v) and v >= 0 for v in part) or part[1] > part[0]:
            raise err(f"{where}[{i}]", f"expected five or six numbers, got {part!r}"[:120], allowed)
        bounds.check(float(part[4]), "zipf_alpha", field=f"{where}[{i}][4]")
        parts.append(tuple(float(v) for v in part))
    return tuple(parts)


def _check_transfer(where: str, args: dict, err) -> None:
    """A transfer's ``servers`` is a count for EASGD sync (``to_ps``, ``from_ps``) and a list
    with one byte count per server and part for the ``ps`` tier (``PS_PARTS``)."""
    direction = args["direction"]
    if direction in PS_PARTS:
        _check_ps_args(args, err, where)
    elif "servers" in args:
        args["servers"] = bounds.count(args["servers"], "servers", field=f"{where}.args.servers")
    if "placement" in args and args["placement"] not in PLACEMENTS:
        problem = f"unknown placement {args['placement']!r}"
        raise err(f"{where}.args.placement", problem, ", ".join(PLACEMENTS))
    stray = [p for parts in PS_PARTS.values() for p in parts if p in args]
    if direction not in PS_PARTS and stray:
        raise err(f"{where}.args.{stray[0]}", "only a ps_lookup or ps_update transfer has it")


def _check_meta(meta, ranks: int, n_colls: int, err) -> dict:
    """``meta``: names as text, the global batch a count, the stack and sync as a run would
    make them, and every number in it finite."""
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise err("meta", f"expected a mapping, got {meta!r}"[:120])
    for key in ("workload", "plan"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise err(f"meta.{key}", f"expected a name, got {meta[key]!r}"[:120])
    if "global_batch" in meta:
        bounds.count(meta["global_batch"], "global_batch", minimum=0, field="meta.global_batch")
    for key in ("model", "stack", "sync"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise err(f"meta.{key}", f"expected a mapping, got {meta[key]!r}"[:120])
    bad = bounds.non_finite_path(meta, "meta")
    if bad:
        raise err(bad, "not a finite number")
    if meta.get("stack"):
        _check_stack_meta(meta["stack"], err)
    if meta.get("sync"):
        _check_sync_meta(meta["sync"], ranks, n_colls, err)
    return dict(meta)


def _check_stack_meta(stack: dict, err) -> None:
    """The stack fields the engine reads: launch cost, the two slowdowns, the host's overlap
    (its work is in the trace's ``host`` ops; the per-step figures are the profile's record)."""
    launch = stack.get("kernel_launch_s")
    if launch is not None:
        _number(launch, "kernel_launch", "time", "meta.stack.kernel_launch_s", err)
    for key in ("compute_slowdown", "comm_slowdown"):
        _number(stack.get(key, 0.0), key, None, f"meta.stack.{key}", err)
    for key, bound in (
        ("host_dispatch_s", "dispatch"),
        ("host_per_step_s", "per_step"),
        ("host_per_sample_s", "per_sample"),
        ("gpu_per_step_s", "gpu_per_step"),
    ):
        _number(stack.get(key, 0.0), bound, "time", f"meta.stack.{key}", err)  # fmt: skip
    for key in ("host_overlap", "iteration_join"):
        if not isinstance(stack.get(key, key == "host_overlap"), bool):
            raise err(f"meta.stack.{key}", "expected true or false")


def _check_sync_meta(sync: dict, ranks: int, n_colls: int, err) -> None:
    """The sync mode (as ``sync_spec`` takes it), its bytes, and background collectives."""
    spec = sync_spec(base={k: sync[k] for k in sync if k not in ("background", "bytes")},
                     file="trace meta")  # fmt: skip
    _number(sync.get("bytes", 0.0), "bytes", "bytes", "meta.sync.bytes", err)
    background = sync.get("background") or {}
    if not isinstance(background, dict):
        raise err("meta.sync.background", "expected a mapping of rank to collective id")
    for rank, cid in background.items():
        if not (str(rank).isdigit() and int(rank) < ranks):
            raise err("meta.sync.background", f"{rank!r} is not a rank", f"0..{ranks - 1}")
        if not isinstance(cid, int) or isinstance(cid, bool) or not 0 <= cid < n_colls:
            raise err(f"meta.sync.background.{rank}", f"unknown collective {cid!r}")
    if spec.is_shadow and not spec.uses_servers:
        missing = sorted(set(range(ranks)) - {int(r) for r in background})
        if missing:
            raise err("meta.sync.background", f"rank {missing[0]} has no background collective")


def _check_members(ops: list[Op], colls: list[Collective], sync: TraceSync | None, err) -> None:
    """Each member of a collective has exactly one op on it (background sync collectives, run
    outside the iteration, have none)."""
    members: dict[int, list[int]] = {}
    for op in ops:
        if op.kind == "collective":
            members.setdefault(op.args["coll"], []).append(op.rank)
    background = set(sync.background.values()) if sync is not None else set()
    for c in colls:
        if c.id in background:
            continue
        got = sorted(members.get(c.id, []))
        if got != sorted(c.ranks.tolist()):
            raise err(
                f"collectives[{c.id}].ranks",
                f"members {sorted(c.ranks.tolist())[:8]} "
                f"but ops on ranks {got[:8]}: each member needs exactly one op",
            )


def _check_ps_args(args: dict, err, where: str) -> None:
    """A parameter-server transfer names its servers and one byte count per server and part."""
    servers = args.get("servers")
    if not isinstance(servers, list) or not all(
        isinstance(k, int) and not isinstance(k, bool) and 0 <= k < bounds.MAX_COUNT
        for k in servers
    ):
        raise err(f"{where}.args.servers", "expected a list of server indices >= 0")
    for part in PS_PARTS[args["direction"]]:
        v = args.get(part)
        if not isinstance(v, list) or len(v) != len(servers):
            raise err(f"{where}.args.{part}", "expected one byte count >= 0 per server")
        for j, x in enumerate(v):
            _number(x, part, "bytes", f"{where}.args.{part}[{j}]", err)
