"""Memos kept per live object (a cluster): forgotten when the object is, and never handed to
another object that later takes the same ``id``."""

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
