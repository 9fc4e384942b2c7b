"""One description of a run and the one way to build it: the options grammar and ``RunInputs``.

Every way of starting a run reads the same flat mapping of options (``docs/architecture.md``,
"Run options"): the run options of :data:`OPTIONS` (``nodes``, ``sync``, ``stack`` …) and dotted
overrides ``topology.PATH``, ``workload.PATH`` and ``stack.PATH``.  ``zionsim run|trace|plan``
turn their flags and ``--set`` into it (:func:`split_override`), sweeps and validation cases
write it in YAML, the library passes it to ``run_point``.  :func:`resolve_inputs` turns it into
a :class:`RunInputs` — the cluster spec with its overrides, the workload as the stack trains it,
the stack profile, the sync spec — once; the plan is chosen from it by :func:`plan_of`, and
:meth:`RunInputs.provenance` is the ``inputs`` block of ``summary.json`` that ``zionsim rerun``
rebuilds the run from.

Adding a run option is one entry in :data:`OPTIONS` (its type, default, flag and help): the CLI
flags of ``run``/``trace``/``plan``, sweep keys, validation-case options, the ``inputs`` block
and ``rerun`` all follow from it; the code that uses the value reads ``inputs.options[NAME]``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from zionsim.base.errors import InputError
from zionsim.dlrm.stack import StackSpec
from zionsim.dlrm.sync import SyncSpec
from zionsim.dlrm.workload import WORKLOAD_KEYS, WorkloadSpec
from zionsim.hardware.topology import ClusterSpec
from zionsim.sim.variability import VariabilitySpec


class RunOption(NamedTuple):
    """One run option: its name (the key in files and ``run_point``), how its value is read
    (``text``, ``int``, ``int0`` (>= 0), ``flag``, ``time``,
    ``list``: texts, a repeatable flag), its default, the CLI flag (None: no
    flag; a flag starting ``--no``/``--un`` stores False), the commands that take the flag, and
    its help."""

    name: str
    kind: str
    default: Any
    flag: str | None
    commands: tuple[str, ...]
    help: str


_BUILD = ("run", "trace", "plan")
#: every run option, in the order ``summary.json``'s ``inputs.options`` and the help list them
OPTIONS: tuple[RunOption, ...] = (
    RunOption("topology", "text", "zionex", None, (), "built-in topology name or YAML path"),
    RunOption("workload", "text", "neo_model_a", None, (), "built-in workload or YAML path"),
    RunOption("nodes", "int", None, None, (), "nodes (default: the topology's)"),
    RunOption("gpus_per_node", "int", None, None, (), "GPUs per node (default: the topology's)"),
    RunOption(
        "plan", "text", "auto", "--plan", _BUILD,
        "auto (the stack's planner: greedy, HugeCTR's for --stack hugectr, DLE's device "
        "mapping for --stack nvidia_pytorch_dlrm), greedy, round_robin, ps (tables on CPU "
        "parameter servers), hugectr, hugectr_hybrid, dle, or a plan YAML",
    ),
    RunOption(
        "batch_per_gpu", "int", None, "--batch-per-gpu", _BUILD,
        "samples per GPU (default: the workload's)",
    ),
    RunOption(
        "global_batch", "int", None, "--global-batch", _BUILD,
        "samples per iteration over all GPUs",
    ),
    RunOption(
        "fused",
        "flag",
        True,
        "--unfused",
        _BUILD,
        "native embeddings: per-table nn.EmbeddingBag kernels, a materialised sparse gradient "
        "and a separate torch.optim pass (default: FBGEMM TBE)",
    ),
    RunOption(
        "stack", "text", None, "--stack", _BUILD,
        "software stack profile: torchrec (default), hugectr, nvidia_pytorch_dlrm, "
        "tensorflow_sok, bare, or a YAML path (docs/stacks.md)",
    ),
    RunOption(
        "iterations", "int", 3, "--iterations", ("run",),
        "iterations, warm-up included (default 3)",
    ),
    RunOption(
        "warmup", "int0", 1, "--warmup", ("run",),
        "iterations left out of the figures (default 1)",
    ),
    RunOption(
        "sync", "text", None, "--sync", ("run",),
        "allreduce (default), foreground-ma|bmuf|easgd, shadow-ma|bmuf|easgd",
    ),
    RunOption("sync_every", "int", None, "--sync-every", ("run",), "foreground: every K"),
    RunOption("sync_servers", "int", None, "--sync-servers", ("run",), "EASGD servers"),
    RunOption(
        "sync_period_s", "time", None, "--sync-period", ("run",),
        "shadow: minimum seconds between a trainer's rounds",
    ),
    RunOption(
        "sync_trainer", "text", None, "--sync-trainer", ("run",),
        "shadow/foreground: a trainer is one GPU (rank) or one node",
    ),
    RunOption(
        "seed", "int0", None, "--seed", ("run",),
        "seed of the variability draws and of a sweep point (recorded; default 0)",
    ),
    RunOption(
        "variability", "text", None, "--variability", ("run",),
        "variability YAML: kernel_cv, stragglers, links, host_hiccup, faults, goodput "
        "(docs/variability.md); --set variability.KEY=VALUE sets one field",
    ),
    RunOption(
        "fault", "list", None, "--fault", ("run",),
        "a failed component, repeatable: nic=n1:0, link=ID, uplink=leaf0:3, switch=leaf2, "
        "node=n5 (docs/variability.md)",
    ),
    RunOption(
        "samples", "int", 1, "--samples", ("run",),
        "realisations of the variability (seeds seed..seed+N-1 of its draws): summary.json "
        "gains a distribution of iteration time and samples/s",
    ),
)  # fmt: skip
#: run options that appear in ``summary.json``'s ``inputs`` only when set (runs without them
#: keep the inputs block, and so the result folder's id, they had before they existed)
OPTIONAL_OPTIONS = ("variability", "fault", "samples")
#: the names of :data:`OPTIONS`
RUN_OPTIONS = tuple(o.name for o in OPTIONS)
_DEFAULTS = {o.name: o.default for o in OPTIONS}
#: the prefixes of dotted overrides, and what each overrides
OVERRIDE_PREFIXES = ("topology.", "workload.", "stack.", "variability.")
#: what a mapping of run options may hold (for error messages)
ALLOWED_KEYS = ", ".join(RUN_OPTIONS) + (
    ", topology.PATH, workload.PATH, stack.PATH, variability.KEY"
)


def split_override(text: str) -> tuple[str, Any]:
    """A ``--set PATH=VALUE`` as a dotted option: ``topology.``, ``workload.`` or ``stack.``
    paths as given; a bare path names a workload field when its first part is one
    (``batch_per_gpu``, ``precision.embedding``), else a topology field (``gpu``,
    ``scale_out.nic_bw``).  The value is read as YAML."""
    from zionsim.base.config import parse_override

    path, value = parse_override(text)
    if path.startswith(OVERRIDE_PREFIXES):
        return path, value
    head = path.split(".")[0]
    return ("workload." if head in WORKLOAD_KEYS else "topology.") + path, value


@dataclass(frozen=True)
class RunInputs:
    """A run, resolved: ``options`` (every run option, typed, defaults filled), ``overrides``
    (dotted path → value, as given), the cluster spec, the workload as the stack trains it
    (None when replaying ``trace_file``), the stack profile and the sync spec."""

    options: dict
    overrides: dict
    cluster: ClusterSpec
    workload: WorkloadSpec | None
    stack: StackSpec
    sync: SyncSpec
    trace_file: str | None = None
    #: what varies (``sim/variability.py``); None: a deterministic run
    variability: VariabilitySpec | None = None

    def sets(self, prefix: str) -> dict:
        """The overrides under ``prefix`` (``topology``, ``workload``, ``stack``), unprefixed."""
        return _sets(self.overrides, prefix)

    def provenance(self, version: str) -> dict:
        """The ``inputs`` block of ``summary.json``: the options and overrides to rebuild the run
        (``zionsim rerun``), and what they resolved to — the GPU, the files read with their
        SHA-256, the stack profile's content hash — and the zionsim ``version``."""
        from zionsim.base.config import file_sha256, portable_path

        def file(path: str | None, kind: str = "") -> dict | None:
            if not path:
                return None
            name = portable_path(path, kind) if kind else str(path)
            return {"path": name, "sha256": file_sha256(path)}

        plan = self.options["plan"]
        files = {
            "topology": file(self.cluster.file, "topologies"),
            "workload": file(self.workload.file, "workloads") if self.workload else None,
            "stack": None if self.trace_file else file(self.stack.file, "stacks"),
            "plan": None if plan == "auto" or plan in _planners() else file(plan),
            "trace": file(self.trace_file),
            **({"variability": file(self.options["variability"])}
               if self.options.get("variability") else {}),
        }  # fmt: skip
        options = {
            k: v for k, v in self.options.items() if k not in OPTIONAL_OPTIONS or v != _DEFAULTS[k]
        }
        return {
            "options": options,
            "overrides": dict(self.overrides),
            "trace_file": self.trace_file,
            "gpu": self.cluster.gpu.model,
            "stack": None
            if self.trace_file  # a replayed trace carries its own stack
            else {"name": self.stack.name, "sha256": content_sha256(self.stack.to_dict())},
            "files": files,
            "zionsim_version": version,
        }


def _sets(overrides: dict, prefix: str) -> dict:
    """The entries of ``overrides`` under ``prefix.``, unprefixed, in their order."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in overrides.items() if k.startswith(prefix + ".")}


def _planners() -> tuple[str, ...]:
    from zionsim.dlrm.planner import PLANNERS

    return tuple(PLANNERS)


def content_sha256(data: Any) -> str:
    """SHA-256 of ``data`` as sorted, compact JSON (the identity of a resolved profile)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_options(options: dict, file: str = "run options") -> dict:
    """The run options of ``options`` (:data:`OPTIONS`; dotted paths pass through) checked and
    typed, absent ones at their defaults; an unknown option or a value of the wrong type or out
    of bounds is an :class:`InputError` naming it (``2.7`` iterations is refused, not run as 2;
    the string ``"false"`` is not a flag)."""
    from zionsim.base.config import Fields

    check_option_keys(options, file)
    f = Fields(options, file)
    out = {}
    for o in OPTIONS:
        if o.name == "stack" and isinstance(options.get("stack"), StackSpec):
            out["stack"] = options["stack"]  # a profile object (library use) passes as it is
        elif o.kind == "text":
            out[o.name] = f.text(o.name, o.default)
        elif o.kind in ("int", "int0"):
            low = {"minimum": 0} if o.kind == "int0" else {}
            out[o.name] = f.integer(o.name, o.default, **low)
        elif o.kind == "flag":
            out[o.name] = f.flag(o.name, o.default)
        elif o.kind == "list":
            out[o.name] = _text_list(f, o.name)
        elif f.raw(o.name, None) is None:  # time
            out[o.name] = o.default
        else:
            out[o.name] = f.quantity(o.name, "time", unit=False, strict=False)
    return out


def _text_list(f, key: str) -> list[str] | None:
    """A list of texts (one text is a list of one); None when absent."""
    raw = f.raw(key, None)
    if raw is None or raw == []:
        return None
    raw = [raw] if isinstance(raw, str) else raw
    if not isinstance(raw, list | tuple) or not all(isinstance(x, str) for x in raw):
        raise f.error(key, f"expected a text or a list of texts, got {raw!r}")
    return list(raw)


def check_option_keys(options: dict, file: str = "run options") -> None:
    """Every undotted key is one of :data:`RUN_OPTIONS`, every dotted one has a known prefix
    (InputError naming the first that isn't)."""
    if not isinstance(options, dict):
        raise InputError(f"expected a mapping of run options, got {options!r}", field="options")
    if "fidelity" in options:
        raise InputError(
            f"run option 'fidelity' ({options['fidelity']!r}) was removed: the flow model "
            "(max-min shared links) is the only network model",
            field="fidelity",
            allowed="delete the key",
        )
    for k in sorted(str(key) for key in options):
        if k in RUN_OPTIONS or (k.startswith(OVERRIDE_PREFIXES) and "." in k[:-1]):
            continue
        noun = "run option" if "." not in k else "override path"
        raise InputError(f"unknown {noun} {k!r}", field=k, allowed=ALLOWED_KEYS)


def resolve_inputs(
    options: dict, file: str = "run options", trace_file: str | None = None, memo=None
) -> RunInputs:
    """The :class:`RunInputs` of a mapping of run options and dotted overrides: topology,
    workload (``--batch-per-gpu`` or ``--global-batch``, not both), stack (with ``stack.PATH``
    overrides) applied to the workload once, and the sync spec over the workload's ``sync:``.
    With ``trace_file`` (a replayed trace) no workload is loaded: the trace carries its own.
    ``memo``: a dict that keeps the loaded topology, workload and stack specs for the next
    call with the same arguments (:func:`_loaded`; a sweep's points, ``studies/sweep.py``)."""
    from zionsim.dlrm.stack import apply_stack
    from zionsim.dlrm.sync import sync_spec
    from zionsim.dlrm.workload import load_workload, with_global_batch

    o = run_options(options, file)
    overrides = {str(k): v for k, v in options.items() if "." in str(k)}
    spec, stack = _topology_and_stack(o, overrides, memo)
    if trace_file is not None:
        var = resolve_variability(o, overrides)
        return RunInputs(o, overrides, spec, None, stack, sync_spec(), trace_file, var)
    work_sets = _sets(overrides, "workload")
    w = _loaded(
        memo,
        ("workload", o["workload"], work_sets, o["batch_per_gpu"]),
        lambda: load_workload(o["workload"], overrides=work_sets, batch_per_gpu=o["batch_per_gpu"]),
    )
    given = [k for k in ("batch_per_gpu", "global_batch") if o[k] is not None]
    if given and "workload.batch_per_gpu" in overrides:
        raise InputError(
            f"the batch is set twice: {given[0]} and workload.batch_per_gpu",
            file=file,
            field="workload.batch_per_gpu",
            allowed="one of batch_per_gpu, global_batch or workload.batch_per_gpu",
        )
    if o["global_batch"] is not None:
        if o["batch_per_gpu"] is not None:
            raise InputError(
                "give batch_per_gpu or global_batch, not both",
                file=file,
                field="global_batch",
                allowed="--batch-per-gpu or --global-batch",
            )
        w = with_global_batch(w, o["global_batch"], spec.gpus)
    w = apply_stack(w, stack)
    sync = sync_spec(
        o["sync"], o["sync_every"], o["sync_servers"], o["sync_period_s"], o["sync_trainer"],
        base=w.sync,
    )  # fmt: skip
    var = resolve_variability(o, overrides)
    return RunInputs(o, overrides, spec, w, stack, sync, variability=var)


def _topology_and_stack(o: dict, overrides: dict, memo: dict | None) -> tuple:
    """The cluster spec and the stack of run options ``o`` with their ``topology.``/``stack.``
    overrides (kept in ``memo``, :func:`_loaded`)."""
    from zionsim.dlrm.stack import load_stack, resolve_stack
    from zionsim.hardware.topology import load_topology

    topo_sets = _sets(overrides, "topology")
    spec = _loaded(
        memo,
        ("topology", o["topology"], o["nodes"], o["gpus_per_node"], topo_sets),
        lambda: load_topology(
            o["topology"], nodes=o["nodes"], gpus_per_node=o["gpus_per_node"],
            overrides=topo_sets,
        ),
    )  # fmt: skip
    stack_sets = _sets(overrides, "stack")
    if stack_sets and isinstance(o["stack"], StackSpec):
        raise InputError(
            "stack.PATH overrides need a stack name or file, not a profile object",
            field=next(iter(stack_sets)),
        )
    stack = _loaded(
        memo,
        ("stack", o["stack"], stack_sets),
        lambda: load_stack(o["stack"] or "torchrec", stack_sets) if stack_sets else (
            resolve_stack(o["stack"])
        ),
    )  # fmt: skip
    return spec, stack


def _loaded(memo: dict | None, args: tuple, load):
    """``load()``, kept in ``memo`` (None: not kept) under ``args`` (with this folder, which
    relative paths are read from) and handed out again while every file it read still reads
    the same (``config.recording_reads``); only what is named by text, paths, numbers and
    plain values is kept (a spec object given as an option is used as is)."""
    import os

    from zionsim.base.config import recording_reads, unchanged

    if memo is None or not isinstance(args[1], str | None):
        return load()
    key = repr((os.getcwd(), args))
    kept = memo.get(key)
    if kept is not None and unchanged(kept[0]):
        return kept[1]
    with recording_reads() as reads:
        value = load()
    memo[key] = (tuple(reads), value)
    return value


def resolve_variability(o: dict, overrides: dict) -> VariabilitySpec | None:
    """The variability of a run: its ``variability`` file, then ``variability.KEY``
    overrides, then ``fault`` texts (``sim/variability.py``); None when none is given."""
    from zionsim.base.config import load_yaml
    from zionsim.sim.variability import variability_spec, with_sets

    sets = _sets(overrides, "variability")
    if o["variability"] is None and not sets and not o["fault"]:
        return None
    data, file = {}, "variability"
    if o["variability"] is not None:
        data, file = load_yaml(_existing(o["variability"]), "variability")
    data = with_sets(data or {}, sets)
    return variability_spec(data, file, tuple(o["fault"] or ()))


def _existing(path: str) -> str:
    """A variability file's path, checked to exist (there are no built-in ones)."""
    from pathlib import Path

    if not Path(path).is_file():
        raise InputError("no such file", file=path, field="--variability",
                         allowed="a YAML file (docs/variability.md)")  # fmt: skip
    return path


def plan_of(inputs: RunInputs, cluster):
    """The plan of a run: a planner's (``auto`` is the stack's, greedy by default) or a plan
    file's (YAML or a TorchRec dump), checked against the workload and the cluster."""
    from zionsim.dlrm.planner import PLANNERS, named_plan

    name, w = inputs.options["plan"], inputs.workload
    if name == "auto" or name in PLANNERS:
        return named_plan(name, cluster, w, inputs.stack)
    from zionsim.dlrm.plan_file import load_plan

    spec = cluster.spec
    servers = spec.front_end.servers if spec.front_end is not None else 0  # service hosts
    return load_plan(name, w, len(cluster.gpus), spec.gpus_per_node, servers)
