"""The trace file schema ``zionsim.trace/1`` (``docs/traces.md``): a
:class:`~zionsim.dlrm.trace.Trace` as plain JSON-able data and back, with every field of a
loaded file validated (errors name the file, the op and the field).  Pure: reading and writing
the files is ``io.files``'.
"""

from __future__ import annotations

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.trace import (
    CATEGORIES,
    KINDS,
    PS_PARTS,
    SCHEMA,
    STREAMS,
    TRANSFER_DIRECTIONS,
    Collective,
    Op,
    Trace,
)


def trace_to_dict(trace: Trace) -> dict:
    """The trace as plain JSON-able data (schema ``zionsim.trace/1``)."""
    return {
        "schema": SCHEMA,
        "ranks": trace.ranks,
        "meta": trace.meta,
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


def trace_from_dict(data: dict, file: str = "<trace>") -> Trace:
    """Validate and load a trace mapping; errors name the file, the op and the field."""

    def err(field_, problem, allowed=None):
        return InputError(problem, file=file, field=field_, allowed=allowed)

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise err(
            "schema",
            f"expected {SCHEMA!r}, got {data.get('schema') if isinstance(data, dict) else data!r}",
        )
    ranks = data.get("ranks")
    if not isinstance(ranks, int) or ranks < 1:
        raise err("ranks", f"expected a positive integer, got {ranks!r}")
    colls = [
        _load_collective(i, c, ranks, err) for i, c in enumerate(data.get("collectives") or [])
    ]
    ops = [
        _load_op(i, o, data, ranks, len(colls), err) for i, o in enumerate(data.get("ops") or [])
    ]
    _check_members(ops, colls, data.get("meta") or {}, err)
    return Trace(ranks, ops, colls, dict(data.get("meta") or {}))


def _load_collective(i: int, c: dict, ranks: int, err) -> Collective:
    """Collective ``i`` of a trace file: its id, a known op and members among the ranks."""
    if c.get("id") != i:
        raise err(f"collectives[{i}].id", f"expected {i}, got {c.get('id')!r}")
    from zionsim.network.collectives import OPS

    if c.get("op") not in OPS:
        raise err(f"collectives[{i}].op", f"unknown collective {c.get('op')!r}", ", ".join(OPS))
    group = np.asarray(c.get("ranks", []), dtype=np.int64)
    if len(group) == 0 or group.min() < 0 or group.max() >= ranks:
        raise err(f"collectives[{i}].ranks", f"ranks must be in 0..{ranks - 1}")
    matrix = c.get("matrix")
    return Collective(
        i,
        c["op"],
        group,
        float(c.get("size_bytes", 0)),
        None if matrix is None else np.asarray(matrix, dtype=float),
    )


def _load_op(i: int, o: dict, data: dict, ranks: int, n_colls: int, err) -> Op:
    """Op ``i`` of a trace file: id, kind, stream, category, rank, deps and args checked."""
    where = f"ops[{i}]"
    if o.get("id") != i:
        raise err(f"{where}.id", f"expected {i}, got {o.get('id')!r}")
    for key, allowed in (("kind", KINDS), ("stream", STREAMS), ("category", CATEGORIES)):
        if o.get(key) not in allowed:
            what = "op kind" if key == "kind" else key
            raise err(f"{where}.{key}", f"unknown {what} {o.get(key)!r}", ", ".join(allowed))
    rank = o.get("rank")
    if not isinstance(rank, int) or not 0 <= rank < ranks:
        raise err(f"{where}.rank", f"rank must be in 0..{ranks - 1}, got {rank!r}")
    deps = tuple(o.get("deps") or ())
    _check_deps(i, deps, rank, data["ops"], err)
    args = dict(o.get("args") or {})
    _check_args(where, o["kind"], args, n_colls, err)
    return Op(
        i, rank, str(o.get("name", f"op{i}")), o["kind"], o["category"], o["stream"], deps, args
    )


def _check_deps(i: int, deps: tuple, rank: int, ops: list, err) -> None:
    """Op ``i``'s dependencies name earlier ops on its own rank."""
    for d in deps:
        if not isinstance(d, int) or not 0 <= d < i:
            raise err(
                f"ops[{i}].deps", f"dependency {d!r} does not name an earlier op", f"ids 0..{i - 1}"
            )
        if ops[d]["rank"] != rank:
            raise err(
                f"ops[{i}].deps",
                f"dependency {d} is on rank {ops[d]['rank']}, "
                f"not {rank} (cross-rank order goes through collectives)",
            )


def _check_args(where: str, kind: str, args: dict, n_colls: int, err) -> None:
    """A transfer has a direction and nbytes (and per-server bytes for the ``ps`` ones); a
    collective op names a listed collective."""
    if kind == "transfer" and (
        args.get("direction") not in TRANSFER_DIRECTIONS
        or not isinstance(args.get("nbytes"), int | float)
    ):
        raise err(
            f"{where}.args",
            f"a transfer needs direction ({', '.join(TRANSFER_DIRECTIONS)}) and nbytes",
        )
    if args.get("direction") in PS_PARTS:
        _check_ps_args(args, err, where)
    if kind == "collective":
        c = args.get("coll")
        if not isinstance(c, int) or not 0 <= c < n_colls:
            raise err(f"{where}.args.coll", f"unknown collective {c!r}", f"ids 0..{n_colls - 1}")


def _check_members(ops: list[Op], colls: list[Collective], meta: dict, err) -> None:
    """Each member of a collective has exactly one op on it (background sync collectives, run
    outside the iteration, have none)."""
    members: dict[int, list[int]] = {}
    for op in ops:
        if op.kind == "collective":
            members.setdefault(op.args["coll"], []).append(op.rank)
    background = set((meta.get("sync") or {}).get("background", {}).values())
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
        isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in servers
    ):
        raise err(f"{where}.args.servers", "expected a list of server indices >= 0")
    for part in PS_PARTS[args["direction"]]:
        v = args.get(part)
        if (
            not isinstance(v, list)
            or len(v) != len(servers)
            or not all(isinstance(x, int | float) and x >= 0 for x in v)
        ):
            raise err(f"{where}.args.{part}", "expected one byte count >= 0 per server")
