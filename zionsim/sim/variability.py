"""Variability of a run: kernel-time noise, stragglers, degraded links, host hiccups, faults.

A run without variability is deterministic: every op takes the seconds its cost model gives.
A :class:`VariabilitySpec` (``zionsim run --variability FILE``, ``--set variability.KEY=...``,
``--fault``) perturbs it, reproducibly: every random draw comes from a numpy ``Generator`` seeded
by ``(seed, realisation)``, so the same inputs and seed give the same numbers.

What is perturbed (``docs/variability.md`` has the file format):

1. **Kernel noise** (``kernel_cv``): every GPU kernel's duration, each iteration and rank on its
   own, is multiplied by a lognormal factor of mean 1 and coefficient of variation ``cv``
   (``sigma² = ln(1 + cv²)``, ``mu = -sigma²/2``).  ``cv`` is one number for every kernel kind
   or a mapping by op kind (``gemm``, ``embedding_fwd``, ``embedding_bwd``, ``memory``, ``host``
   and ``default``); host-thread work (``host``) is noisy only when named.
2. **Stragglers**: named ranks, the ranks of named nodes, or a ``fraction`` of the ranks drawn
   per realisation, run every GPU kernel ``factor`` (>= 1) times slower, every iteration (a slow
   GPU: thermal or power throttling, a bad HBM stack, a noisy neighbour on the host).
3. **Links**: the bandwidth of every link of a ``kind`` (``roce``, ``nvlink``, ``pcie`` …) or of
   one link ``id`` (both directions; ``links.csv`` lists the ids) is multiplied by ``factor``
   in (0, 1] (a link trained down, a flapping port's average).
4. **Host hiccups**: each iteration, each rank's host stalls for ``duration`` with
   ``probability`` (an OS or Python pause, a page-fault storm): the first op of its host thread
   (or of its compute stream when the stack has no host thread) starts that much later.
5. **Faults** (``hardware/faults.py``): components removed from the graph; flows reroute.

The model's assumptions: noise draws are independent across ranks, ops and iterations (no
correlated slow phases); a straggler's factor applies to GPU kernels only (its collectives run
at the network's pace, its host thread at the host's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zionsim.base.errors import InputError

#: the op kinds a kernel_cv mapping may name (``dlrm/trace.py`` COMPUTE_KINDS) and its default
KERNEL_KINDS = ("gemm", "embedding_fwd", "embedding_bwd", "memory", "host", "default")
#: the fields of a variability file
FIELDS = ("kernel_cv", "stragglers", "links", "host_hiccup", "faults", "goodput")


@dataclass(frozen=True)
class Straggler:
    """Ranks that run ``factor`` times slower: ``ranks``, the ranks of ``nodes`` (node
    indices), or ``fraction`` of all ranks drawn per realisation."""

    factor: float
    ranks: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    fraction: float = 0.0


@dataclass(frozen=True)
class LinkFactor:
    """Links of ``kind`` (or the link ``id``, both directions) at ``factor`` of their bandwidth."""

    factor: float
    kind: str | None = None
    id: int | None = None


@dataclass(frozen=True)
class VariabilitySpec:
    """What varies in a run (module docstring); ``goodput`` is the raw ``goodput:`` mapping
    (read by ``sim/goodput.py``), ``faults`` the fault texts (``hardware/faults.py``)."""

    kernel_cv: dict = field(default_factory=dict)
    stragglers: tuple[Straggler, ...] = ()
    links: tuple[LinkFactor, ...] = ()
    hiccup_probability: float = 0.0
    hiccup_s: float = 0.0
    faults: tuple[str, ...] = ()
    goodput: dict | None = None

    @property
    def noisy(self) -> bool:
        """Durations differ from iteration to iteration (noise or hiccups): ranks are no
        longer alike, each is stepped on its own."""
        noise = any(v > 0 for v in self.kernel_cv.values())
        return noise or (self.hiccup_probability > 0 and self.hiccup_s > 0)

    @property
    def perturbs(self) -> bool:
        """Anything differs from the deterministic run (noise, stragglers, links, faults)."""
        return bool(self.noisy or self.stragglers or self.links or self.faults)

    @property
    def random(self) -> bool:
        """Realisations differ from one another (noise, hiccups, drawn stragglers)."""
        return self.noisy or any(s.fraction > 0 for s in self.stragglers)

    def to_dict(self) -> dict:
        """The spec as plain data (``summary.json``'s ``variability`` block)."""
        return {
            "kernel_cv": dict(self.kernel_cv),
            "stragglers": [
                {k: v for k, v in s.__dict__.items() if v not in ((), 0.0)} for s in self.stragglers
            ],
            "links": [{k: v for k, v in x.__dict__.items() if v is not None} for x in self.links],
            "host_hiccup": {"probability": self.hiccup_probability, "duration_s": self.hiccup_s},
            "faults": list(self.faults),
        }


def variability_spec(data: dict | None, file: str = "variability", faults=()) -> VariabilitySpec:
    """The :class:`VariabilitySpec` of a variability mapping (``None``: none) plus ``--fault``
    texts; every error names the file and field."""
    from zionsim.base.config import Fields

    f = Fields(data or {}, file)
    f.check_keys(FIELDS)
    hic = f.sub("host_hiccup", {})
    hic.check_keys(("probability", "duration"))
    prob = float(hic.quantity("probability", "fraction", 0.0, strict=False))
    if prob > 1:
        raise hic.error("probability", f"must be in [0, 1], got {prob!r}")
    given = f.raw("faults", [])
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, list) or not all(isinstance(x, str) for x in given):
        raise f.error("faults", f"expected a list of texts, got {given!r}", _FAULT_FORMS)
    from zionsim.hardware.faults import parse_fault

    for text in (*given, *faults):  # the form is checked now; the target once the cluster is built
        parse_fault(text, file)
    goodput = f.raw("goodput", None)
    if goodput is not None and not isinstance(goodput, dict):
        raise f.error("goodput", f"expected a mapping, got {goodput!r}")
    return VariabilitySpec(
        kernel_cv=_kernel_cv(f),
        stragglers=tuple(_straggler(f, i, x) for i, x in enumerate(_items(f, "stragglers"))),
        links=tuple(_link(f, i, x) for i, x in enumerate(_items(f, "links"))),
        hiccup_probability=prob,
        hiccup_s=float(hic.quantity("duration", "time", 0.0, strict=False)),
        faults=tuple(given) + tuple(faults),
        goodput=goodput,
    )


def with_sets(data: dict, sets: dict) -> dict:
    """A copy of ``data`` with each dotted ``variability.KEY`` set (``--set``; absent
    mappings are made, unknown fields are refused by :func:`variability_spec`)."""
    import copy

    out = copy.deepcopy(data)
    for dotted, value in sets.items():
        node, keys = out, dotted.split(".")
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = copy.deepcopy(value)  # the caller's mappings stay as they were
    return out


_FAULT_FORMS = "nic=n1:0, link=ID, uplink=leaf0:3, switch=leaf2, node=n5"


def _items(f, key: str) -> list:
    items = f.raw(key, [])
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise f.error(key, f"expected a list of mappings, got {items!r}")
    return items


def _kernel_cv(f) -> dict:
    """``kernel_cv``: one number (every GPU kernel kind) or a mapping by op kind."""
    raw = f.raw("kernel_cv", 0.0)
    if not isinstance(raw, dict):
        cv = f.quantity("kernel_cv", "fraction", 0.0, strict=False)
        return {k: cv for k in KERNEL_KINDS if k != "host"} if cv > 0 else {}
    sub = f.sub("kernel_cv")
    sub.check_keys(KERNEL_KINDS)
    out = {k: float(sub.quantity(k, "fraction", strict=False)) for k in raw}
    return {k: v for k, v in sorted(out.items()) if v > 0}


def _straggler(f, i: int, item: dict) -> Straggler:
    from zionsim.base.config import Fields

    s = Fields(item, f.file, f.path(f"stragglers[{i}]"))
    s.check_keys(("ranks", "nodes", "fraction", "factor"))
    factor = float(s.quantity("factor", "fraction", minimum=0.0))
    if factor < 1:
        raise s.error("factor", f"a straggler is slower: factor >= 1, got {factor!r}")
    which = [k for k in ("ranks", "nodes", "fraction") if k in s.data]
    if len(which) != 1:
        raise s.error("ranks", "give exactly one of ranks, nodes or fraction", "ranks: [0, 5], "
                      "nodes: [n3] or fraction: 0.01")  # fmt: skip
    if which[0] == "fraction":
        return Straggler(factor, fraction=s.fraction("fraction"))
    vals = s.raw(which[0])
    vals = vals if isinstance(vals, list) else [vals]
    out = tuple(_index(s, which[0], v) for v in vals)
    return Straggler(factor, **{which[0]: out})


def _index(s, key: str, v) -> int:
    """A rank (an integer) or a node (``n3`` or 3) index."""
    text = v[1:] if key == "nodes" and isinstance(v, str) and v.startswith("n") else v
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = -1
    if isinstance(v, bool) or value < 0 or (isinstance(text, float) and text != value):
        raise s.error(key, f"expected {'a rank number' if key == 'ranks' else 'n<k>'}, got {v!r}")
    return value


def _link(f, i: int, item: dict) -> LinkFactor:
    from zionsim.base.config import Fields

    s = Fields(item, f.file, f.path(f"links[{i}]"))
    s.check_keys(("kind", "id", "factor"))
    if ("kind" in s.data) == ("id" in s.data):
        raise s.error("kind", "give exactly one of kind or id", "kind: roce or id: 12")
    factor = s.fraction("factor")
    if "kind" in s.data:
        return LinkFactor(factor, kind=s.text("kind"))
    return LinkFactor(factor, id=s.integer("id", minimum=0))


def check_against(spec: VariabilitySpec, ranks: int, nodes: int, file: str) -> None:
    """Named ranks and nodes exist (InputError naming the first that does not)."""
    for i, s in enumerate(spec.stragglers):
        for key, vals, n in (("ranks", s.ranks, ranks), ("nodes", s.nodes, nodes)):
            bad = [v for v in vals if v >= n]
            if bad:
                raise InputError(
                    f"{key[:-1]} {bad[0]} does not exist",
                    file=file,
                    field=f"stragglers[{i}].{key}",
                    allowed=f"0..{n - 1}" if key == "ranks" else f"n0..n{n - 1}",
                )


def straggler_ranks(spec: VariabilitySpec, ranks: int, g: int, rng) -> np.ndarray:
    """Each rank's straggler factor (1: none; factors of several entries multiply); fractions
    draw ``max(1, round(fraction × ranks))`` distinct ranks from ``rng``."""
    factor = np.ones(ranks)
    for s in spec.stragglers:
        chosen = list(s.ranks) + [n * g + i for n in s.nodes for i in range(g)]
        if s.fraction > 0:
            k = min(ranks, max(1, round(s.fraction * ranks)))
            chosen += rng.choice(ranks, size=k, replace=False).tolist()
        factor[np.unique(np.asarray(chosen, dtype=np.int64))] *= s.factor
    return factor


def lognormal_factors(cv: float, size, rng) -> np.ndarray:
    """Lognormal factors of mean 1 and coefficient of variation ``cv``."""
    sigma2 = np.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2.0, np.sqrt(sigma2), size=size)


@dataclass(frozen=True)
class Realisation:
    """One realisation's durations: ``static_s`` (per op, stragglers applied) and, when noisy,
    ``per_iteration_s`` (iterations × ops); ``straggler_factor`` per rank."""

    static_s: np.ndarray
    per_iteration_s: np.ndarray | None
    straggler_factor: np.ndarray


def realise(spec, trace, durations_s, iterations: int, g: int, seed: int, n: int) -> Realisation:
    """The op durations of realisation ``n`` of ``spec`` for ``trace`` (module docstring),
    drawn from ``numpy.random.default_rng([seed, n])``."""
    rng = np.random.default_rng([int(seed), int(n)])
    ops = trace.ops
    kind = np.array([op.kind for op in ops])
    rank = np.array([op.rank for op in ops], dtype=np.int64)
    kernel = ~np.isin(kind, ("collective", "transfer", "host"))
    factor = straggler_ranks(spec, trace.ranks, g, rng)
    static = np.where(kernel, durations_s * factor[rank], durations_s)
    if not spec.noisy:
        return Realisation(static, None, factor)
    per = np.repeat(static[None, :], iterations, axis=0)
    for k, cv in spec.kernel_cv.items():
        if k == "default":
            mask = kernel & ~np.isin(kind, [x for x in spec.kernel_cv if x != "default"])
        else:
            mask = kind == k
        if mask.any():
            per[:, mask] *= lognormal_factors(cv, (iterations, int(mask.sum())), rng)
    if spec.hiccup_probability > 0 and spec.hiccup_s > 0:
        first = _first_ops(trace)
        hit = rng.random((iterations, len(first))) < spec.hiccup_probability
        per[:, first] += hit * spec.hiccup_s
    return Realisation(static, per, factor)


def _first_ops(trace) -> np.ndarray:
    """Each rank's first host-thread op (or first compute-stream op): where a hiccup lands."""
    host, compute = {}, {}
    for op in trace.ops:
        if op.stream == "host" and op.kind == "host":
            host.setdefault(op.rank, op.id)
        elif op.stream == "compute" and op.kind not in ("collective", "transfer"):
            compute.setdefault(op.rank, op.id)
    return np.array([host.get(r, compute.get(r, -1)) for r in range(trace.ranks)
                     if r in host or r in compute], dtype=np.int64)  # fmt: skip
