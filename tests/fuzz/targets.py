"""The fuzz targets: one per input kind, each with the real inputs it starts from and a function
that feeds a fuzzed case to zionsim (loader, then a small simulation) and returns the outputs to
be checked finite.  Shared by ``tests/fuzz/test_fuzz_*.py`` and ``bench/fuzz.py``.

Clusters stay small (at most :data:`MAX_SIM_GPUS` GPUs are simulated) so that no case takes long:
a fuzzed input that validates but names a larger cluster is checked by the loaders only.
"""

from __future__ import annotations

import functools
import json
import zlib

import yaml
from hypothesis import strategies as st

from tests.fuzz.harness import (
    DATA,
    ROOT,
    TEXT_TOKENS,
    TINY,
    capture,
    json_files,
    scratch,
    text_lines,
    yaml_files,
)
from zionsim.base.errors import InputError

#: the largest cluster a fuzz case simulates (GPUs); larger valid inputs are only loaded
MAX_SIM_GPUS = 16
#: the largest workload a fuzz case simulates (tables)
MAX_SIM_TABLES = 64


def _yaml(path) -> dict:
    return yaml.safe_load(path.read_text())


def _small(doc: dict, **changes) -> dict:
    return {**doc, **changes}


@functools.cache
def topology_docs() -> list[dict]:
    """Every shipped topology (cut to 2 nodes) and the test cluster."""
    docs = [_small(_yaml(p), nodes=2) for p in sorted((ROOT / "topologies").glob("*.yaml"))]
    return [*docs, _yaml(DATA / "tiny_cluster.yaml")]


@functools.cache
def workload_docs() -> list[dict]:
    """The small shipped workloads (the Neo-scale ones differ only in size)."""
    names = ("tiny", "mlperf_dlrm", "mlperf_dlrm_dcnv2", "dle_dlrm_small")
    return [_yaml(ROOT / "workloads" / f"{n}.yaml") for n in names]


def _tiny_world():
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster

    return Cluster.load(TINY), load_workload("tiny")


@functools.cache
def plan_docs() -> list[dict]:
    """Plans zionsim writes for the tiny world: greedy, round-robin, and hand-made ones using
    every sharding and tier."""
    from zionsim.dlrm.plan_file import plan_to_dict
    from zionsim.dlrm.planner import PLANNERS

    cluster, w = _tiny_world()
    docs = [plan_to_dict(PLANNERS[p](cluster, w), w) for p in ("greedy", "round_robin")]
    mixed = {
        "name": "mixed",
        "tables": [
            {"table": "t0", "sharding": "RW"},
            {"table": "t1", "sharding": "TWRW", "node": 1},
            {
                "table": "t2",
                "sharding": "CW",
                "ranks": [0, 3],
                "tier": "uvm",
                "cache_fraction": 0.5,
            },  # fmt: skip
            {"table": "t3", "sharding": "TW", "tier": "ps", "server": 1},
        ],
    }
    return [*docs, mixed, {**mixed, "tables": [{"table": "t0", "sharding": "DP"}] + mixed[
        "tables"][1:]}]  # fmt: skip


@functools.cache
def trace_docs() -> list[dict]:
    """Traces lowered for the tiny world (all-reduce, and foreground EASGD sync with a PS and
    UVM table), as trace-file data."""
    from zionsim.dlrm.plan_file import plan_from_dict
    from zionsim.dlrm.sync import sync_spec
    from zionsim.dlrm.trace_file import trace_to_dict
    from zionsim.sim.run import build_trace

    cluster, w = _tiny_world()
    plan = plan_from_dict(plan_docs()[2], w, 4, 2, servers=4)
    docs = []
    for sync in (sync_spec(), sync_spec("foreground-easgd", 2, 2)):
        trace, _ = build_trace(cluster, w, plan, True, sync, None)
        docs.append(json.loads(json.dumps(trace_to_dict(trace))))
    return docs


def sweep_docs() -> list[dict]:
    """Sweep files over the tiny world."""
    base = {"topology": TINY, "workload": "tiny", "iterations": 1, "warmup": 0}
    return [
        {"base": base, "grid": {"nodes": [1, 2], "fused": [True, False]}},
        {
            "base": {**base, "sync": "foreground-ma", "sync_every": 2},
            "grid": {
                "topology.scale_out.nic_bw": ["100 Gbps", "200 Gbps"],
                "workload.batch_per_gpu": [16, 32],
                "plan": ["auto", "round_robin"],
            },
        },
        {"base": {**base, "global_batch": 128, "stack": "hugectr"}},
    ]


@functools.cache
def kineto_docs() -> list:
    """The test suite's Kineto trace (two ranks)."""
    return [json.loads((DATA / "kineto_tiny.json").read_text())]


def nccl_texts() -> list[str]:
    """The test suite's nccl-tests logs."""
    return [(DATA / f"nccl_tests_{op}.log").read_text() for op in ("all_reduce", "alltoall")]


def kernel_texts() -> list[str]:
    """The test suite's kernel-time CSV."""
    return [(DATA / "kernel_times.csv").read_text()]


@functools.cache
def scenario_docs() -> list[dict]:
    """``zionsim jobs`` scenarios on a 4-node tiny cluster: two training jobs (an explicit node
    list and a placed count) and a traffic job."""
    return [
        {
            "cluster": {"topology": TINY, "nodes": 4, "set": ["scale_out.oversubscription=3"]},
            "jobs": [
                {"name": "a", "workload": "tiny", "nodes": [0, 2], "iterations": 2},
                {"name": "b", "workload": "tiny", "count": 1, "placement": "spread",
                 "seed": 1, "weight": 2, "start": "1 ms"},
                {"name": "c", "kind": "traffic", "src": ["a"], "dst": [3], "bytes": "1 MB",
                 "period": "1 ms", "rate": "10 GB/s"},
            ],
        }
    ]  # fmt: skip


# ------------------------------------------------------------------------------------ targets


def run_topology(text: str):
    """Load a fuzzed topology; a small one is built and runs one all-reduce."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.hardware.topology import load_topology
    from zionsim.network.simulate import simulate_collective

    path = scratch("topology.yaml")
    path.write_text(text)
    spec = load_topology(path)
    if spec.gpus > MAX_SIM_GPUS:
        return {"gpus": spec.gpus}
    cluster = Cluster.load(path)
    return [simulate_collective(cluster, "all_reduce", 2**20).row()]


def run_workload(text: str):
    """Load a fuzzed workload; a small one runs an iteration on the tiny cluster."""
    from zionsim.dlrm.workload import load_workload
    from zionsim.sim.run import run_point

    path = scratch("workload.yaml")
    path.write_text(text)
    w = load_workload(path)
    if len(w.tables) > MAX_SIM_TABLES:
        return {"tables": len(w.tables)}
    return run_point({"topology": TINY, "workload": str(path), "iterations": 1, "warmup": 0})


def run_plan(text: str):
    """Load a fuzzed plan for the tiny world and simulate one iteration under it."""
    path = scratch("plan.yaml")
    path.write_text(text)
    from zionsim.sim.run import run_point

    return run_point(
        {"topology": TINY, "workload": "tiny", "plan": str(path), "iterations": 1, "warmup": 0}
    )


def run_trace(doc: str):
    """Load a fuzzed trace file and replay it on the tiny cluster."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.io.files import read_trace
    from zionsim.sim.run import simulate_run

    path = scratch("trace.json")
    path.write_text(doc)
    trace = read_trace(path)
    if trace.ranks > MAX_SIM_GPUS:
        return {"ranks": trace.ranks}
    cluster = Cluster.load(TINY, nodes=1, gpus_per_node=trace.ranks)
    return simulate_run(cluster, trace=trace, iterations=1, warmup=0)


def run_sweep_file(text: str):
    """Load a fuzzed sweep file and run its first two points (small clusters only)."""
    from zionsim.hardware.topology import load_topology
    from zionsim.sim.run import run_point
    from zionsim.studies.sweep import load_sweep, points

    path = scratch("sweep.yaml")
    path.write_text(text)
    out = []
    for point in points(load_sweep(path))[:2]:
        params = {k: v for k, v in point.items() if k != "point_id"}
        spec = _point_spec(params, load_topology)
        if spec is not None and spec.gpus <= MAX_SIM_GPUS:
            out.append(run_point(params).summary)
    return out


def _point_spec(params: dict, load_topology):
    """The cluster a sweep point names, if it can be loaded cheaply (None: let run_point say)."""
    topo = params.get("topology", "zionex")
    if not isinstance(topo, str):
        return None
    sets = {k[9:]: v for k, v in params.items() if k.startswith("topology.")}
    nodes, gpn = params.get("nodes"), params.get("gpus_per_node")
    return load_topology(topo, nodes=nodes, gpus_per_node=gpn, overrides=sets)


def run_scenario(text: str):
    """Load a fuzzed ``zionsim jobs`` scenario; a small one runs (together and alone)."""
    from zionsim.io.scenario import load_scenario
    from zionsim.sim.jobs import simulate_jobs

    path = scratch("scenario.yaml")
    path.write_text(text)
    sc = load_scenario(path)
    if sc.cluster.gpus > MAX_SIM_GPUS or len(sc.jobs) > 4:
        return {"gpus": sc.cluster.gpus}
    if any(j.inputs is not None and len(j.inputs.workload.tables) > MAX_SIM_TABLES
           for j in sc.jobs):  # fmt: skip
        return {"jobs": len(sc.jobs)}
    return simulate_jobs(sc).to_dict()


def run_kineto(doc: str):
    """Import a fuzzed Kineto trace and replay it on the tiny cluster."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.measure.kineto import read_kineto
    from zionsim.sim.run import simulate_run

    path = scratch("kineto.json")
    path.write_text(doc)
    trace = read_kineto(path, global_batch=64)
    if trace.ranks > MAX_SIM_GPUS:
        return {"ranks": trace.ranks}
    cluster = Cluster.load(TINY, nodes=1, gpus_per_node=trace.ranks)
    return simulate_run(cluster, trace=trace, iterations=1, warmup=0)


#: a fuzzed nccl-tests log is fitted in one case of this many (a fit takes about a second)
FIT_ONE_IN = 8
#: columns of a parsed log that the fit reads: finite in every row (the others may be NaN: N/A)
NCCL_USED = ["size_bytes", "time_s", "algbw_GBps", "busbw_GBps"]


def run_nccl_log(text: str):
    """Parse a fuzzed nccl-tests log; one in :data:`FIT_ONE_IN` (by a hash of the text) also
    fits the collective model of the tiny cluster to its last rows."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.measure.nccl_fit import fit_from_nccl_logs
    from zionsim.measure.nccl_logs import parse_nccl_tests, world_of

    df = parse_nccl_tests(text, "fuzz.log")
    nodes, gpn = world_of([df]) or (1, 4)
    if zlib.crc32(text.encode()) % FIT_ONE_IN or nodes * gpn > MAX_SIM_GPUS:
        return df[NCCL_USED]
    cluster = Cluster.load(TINY, nodes=nodes, gpus_per_node=gpn)
    model, report = fit_from_nccl_logs(cluster, [df.tail(6)])
    return [df[NCCL_USED], report, model.overhead_s, model.efficiency]


def run_kernel_csv(text: str):
    """Parse a fuzzed kernel-time CSV and fit the compute model of the tiny cluster's GPU."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.measure.kernel_times import fit_compute, parse_kernel_csv

    kernels = parse_kernel_csv(text, "fuzz.csv")
    fitted, report = fit_compute(Cluster.load(TINY).spec.gpu, kernels)
    return [kernels, fitted, report]


def _main(argv: list[str]):
    """``zionsim argv``: refused when it exits 2 (argparse or an InputError); the written
    ``summary.json`` (strict JSON) is the output of an accepted run."""
    from zionsim.cli.main import main

    try:
        code, _, err = capture(main, argv)
    except SystemExit as exc:  # argparse: a bad flag or value
        if exc.code == 2:
            raise InputError("refused by the argument parser", field="argv") from None
        raise
    if code == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("zionsim: error: "):
            raise AssertionError(f"exit 2 without a one-line error: {err!r}")
        raise InputError(lines[0], field="argv")
    if code != 0:
        raise AssertionError(f"exit {code}: {err!r}")
    summary = scratch("out") / "summary.json"
    return json.loads(summary.read_text()) if summary.exists() else {}


RUN_ARGV = ["run", "--topology", TINY, "--workload", "tiny", "--iterations", "1", "--warmup",
            "0", "--no-plot", "--format", "json", "--force"]  # fmt: skip


def run_overrides(sets: list[str]):
    """``zionsim run`` on the tiny world with fuzzed ``--set`` overrides."""
    argv = [*RUN_ARGV, "--out", str(scratch("out"))]
    for s in sets:
        argv += ["--set", s]
    return _main(argv)


def run_cli(argv: list[str]):
    """A fuzzed zionsim command line (result folders go to the scratch folder)."""
    if argv and argv[0] in ("run", "collective"):
        argv = [*argv, "--out", str(scratch("out")), "--force"]
    if argv and argv[0] == "run":
        argv.append("--no-plot")
    return _main(argv)


# ---------------------------------------------------------------------------------- strategies


def _dotted(doc, prefix="") -> list[str]:
    out = []
    for k, v in doc.items():
        path = f"{prefix}{k}"
        out.append(path)
        if isinstance(v, dict):
            out += _dotted(v, path + ".")
    return out


@functools.cache
def override_paths() -> list[str]:
    """Dotted paths of the tiny cluster and workload, and some that do not exist."""
    topo = _dotted(_yaml(DATA / "tiny_cluster.yaml"))
    work = ["workload." + p for p in _dotted(_yaml(ROOT / "workloads" / "tiny.yaml"))]
    return topo + work + ["gpu.flops.bogus", "nodes.x", "workload.tables", "", "."]


OVERRIDE_VALUES = [
    "1e400 GB", "1e308 TB/s", "1e-300 FLOPS", ".inf", ".nan", "-.inf", "-1", "0", "1e9",
    "1000000000", "2.7", "true", '"false"', "[1, 2]", "{a: 1}", "[[[[[[1]]]]]]", "abc",
    "100 Gbps", "1 us", "80%", "fp16", "-128", "1e308", "null", "~", "&a [*a]", "{",
    "nvswitch", "mesh", "none", "host", "0.5", "1e-300", "1e30", "5 ms", "64 GiB",
]  # fmt: skip


def overrides() -> st.SearchStrategy:
    """1..3 ``--set PATH=VALUE`` strings."""
    value = st.one_of(st.sampled_from(OVERRIDE_VALUES), st.text(max_size=10))
    one = st.builds(lambda p, v: f"{p}={v}", st.sampled_from(override_paths()), value)
    return st.lists(one, min_size=1, max_size=3)


#: flags of ``zionsim run`` and ``collective``, with values worth trying
FLAG_VALUES = {
    "--nodes": ["1", "2", "0", "-1", "1000000000", "2.5", "x"],
    "--gpus-per-node": ["1", "2", "0", "100000", "-3"],
    "--iterations": ["1", "2", "0", "-1", "1000000000"],
    "--warmup": ["0", "1", "5", "-1"],
    "--batch-per-gpu": ["1", "16", "0", "-128", "100000000000"],
    "--global-batch": ["64", "-128", "0", "3", "1000000000000"],
    "--sync": ["allreduce", "foreground-ma", "shadow-easgd", "bogus"],
    "--sync-every": ["1", "0", "-2", "3"],
    "--sync-servers": ["1", "2", "0", "100000"],
    "--sync-period": ["0", "0.001", "-1", "inf", "nan", "1e300"],
    "--sync-trainer": ["rank", "node", "x"],
    "--plan": ["auto", "round_robin", "ps", "nosuch.yaml", "greedy"],
    "--stack": ["torchrec", "hugectr", "bare", "nosuch"],
    "--sizes": ["1K:1M", "0:1", "8G:1K", "x", "1:1", "1T:1T"],
    "--op": ["all_reduce", "all_to_all", "send_recv", "x"],
    "--algorithm": ["ring", "tree", "nvls", "direct", "bogus"],
    "--protocol": ["LL", "LL128", "Simple"],
}
RUN_FLAGS = [f for f in FLAG_VALUES if f not in ("--sizes", "--op", "--algorithm", "--protocol")]
COLLECTIVE_FLAGS = ["--nodes", "--gpus-per-node", "--sizes", "--op", "--algorithm", "--protocol"]


@st.composite
def command_lines(draw):
    """A ``run`` or ``collective`` command line on the tiny world with 1..4 fuzzed flags."""
    cmd = draw(st.sampled_from(["run", "collective", "topology"]))
    flags = {"run": RUN_FLAGS, "collective": COLLECTIVE_FLAGS, "topology": ["--nodes",
             "--gpus-per-node"]}[cmd]  # fmt: skip
    argv = [cmd, "--topology", TINY]
    if cmd == "run":
        argv += ["--workload", "tiny", "--iterations", "1", "--warmup", "0", "--format", "json"]
    if cmd == "collective":
        argv += ["--sizes", "1K:64K"]
    for flag in draw(st.lists(st.sampled_from(flags), min_size=1, max_size=4, unique=True)):
        argv += [flag, draw(st.sampled_from(FLAG_VALUES[flag]))]
    return argv


#: kind -> (strategy of cases, target); the fuzz tests and bench/fuzz.py iterate this
def kinds() -> dict:
    """Every input kind the fuzzers cover: its case strategy and its target."""
    return {
        "topology": (st.deferred(lambda: yaml_files(topology_docs())), run_topology),
        "workload": (st.deferred(lambda: yaml_files(workload_docs())), run_workload),
        "plan": (st.deferred(lambda: yaml_files(plan_docs())), run_plan),
        "trace": (st.deferred(lambda: json_files(trace_docs(), focus=("ops",))), run_trace),
        "sweep": (st.deferred(lambda: yaml_files(sweep_docs())), run_sweep_file),
        "scenario": (st.deferred(lambda: yaml_files(scenario_docs())), run_scenario),
        "kineto": (
            st.deferred(lambda: json_files(kineto_docs(), focus=(0, "traceEvents"))),
            run_kineto,
        ),
        "nccl_log": (st.deferred(lambda: text_lines(nccl_texts(), TEXT_TOKENS)), run_nccl_log),
        "kernel_csv": (
            st.deferred(lambda: text_lines(kernel_texts(), TEXT_TOKENS)),
            run_kernel_csv,
        ),
        "overrides": (overrides(), run_overrides),
        "cli": (command_lines(), run_cli),
    }
