"""Memos kept per live object (a cluster): forgotten when the object is, and never handed to
another object that later takes the same ``id``; and memos kept with a lowered trace's ops
(:func:`kept_with`), for the next run of the same ops."""

from __future__ import annotations

import weakref

#: a registry: per ``id(obj)``, a weak reference to ``obj`` and the dict kept for it
Registry = dict[int, tuple[weakref.ref, dict]]


def kept_for(registry: Registry, obj) -> dict:
    """The dict ``registry`` keeps for ``obj`` (a new one the first time; entries of objects
    that have gone are dropped then)."""
    entry = registry.get(id(obj))
    if entry is None or entry[0]() is not obj:
        for k in [k for k, (ref, _) in registry.items() if ref() is None]:
            del registry[k]
        entry = registry[id(obj)] = (weakref.ref(obj), {})
    return entry[1]


#: what is derived from a lowered trace's ops alone (the analysis's stream links and op codes,
#: the engine's rank lists and templates) is kept for the next run of equal ops, for at most
#: this many ops in all (a sweep's points that differ only in the cluster's rates run the same
#: lowered trace); 0: never kept
KEEP_OPS = 100_000
_KEPT: list[tuple[list, dict]] = []  # (ops, derived), the most recent last


def kept_with(ops: list) -> dict:
    """The kept derivations of ``ops`` (a dict to read and fill; never changed once filled):
    an earlier run's when its ops equal these and begin with the same op object (the lowering
    hands out the same op objects again), else a new one kept beside them."""
    if not ops:
        return {}
    for i, (kept_ops, derived) in enumerate(_KEPT):
        if len(kept_ops) == len(ops) and kept_ops[0] is ops[0] and kept_ops == ops:
            _KEPT.append(_KEPT.pop(i))
            return derived
    derived: dict = {}
    if len(ops) <= KEEP_OPS:
        _KEPT.append((list(ops), derived))
        while sum(len(o) for o, _ in _KEPT) > KEEP_OPS:
            _KEPT.pop(0)
    return derived


def keep_by_identity(store: dict, used: list, limit: int, obj, value: tuple) -> None:
    """Keep ``value`` (a tuple of arrays or ``None``) for ``obj`` in ``store`` by ``id`` (the
    reader checks ``store[id(obj)][0] is obj``), within ``limit`` bytes in all (``used[0]``
    counts them; past the limit everything kept is forgotten at once; a value larger than the
    limit is not kept; a limit of 0 keeps nothing)."""
    if not limit:
        return
    size = sum(a.nbytes for a in value if a is not None)
    if used[0] + size > limit:
        store.clear()
        used[0] = 0
    if size <= limit:
        store[id(obj)] = (obj, value)
        used[0] += size
