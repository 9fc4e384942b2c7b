"""CPU trainers (topologies/cpu_ps_platform.yaml, stacks/cpu_hogwild.yaml): the prior CPU
parameter-server platform runs, scales with trainers, loses to GPUs, and refuses what it lacks."""

import subprocess
import sys

import pytest

from zionsim.base.errors import InputError
from zionsim.hardware import compute
from zionsim.hardware.topology import load_topology
from zionsim.sim.run import run_point

CPU = {
    "topology": "cpu_ps_platform",
    "stack": "cpu_hogwild",
    "plan": "ps",
    "sync": "shadow-easgd",
    "sync_servers": 2,
    "iterations": 3,
}


def _samples(**options) -> float:
    return run_point(options).summary["samples_per_s"]


def test_a_cpu_trainer_run_completes_on_a_tiny_setup():
    r = run_point({**CPU, "workload": "tiny", "nodes": 2})
    assert r.summary["samples_per_s"] > 0
    assert r.summary["gpus"] == 2
    assert r.summary["breakdown_s"]["parameter_server"] >= 0


def test_the_cpu_architecture_has_its_own_compute_model():
    """A GEMM on the trainer host's CPUs runs at the CPU's FP32 peak times MKL's efficiency,
    far below an A100's; memory-bound work streams at the host's DRAM bandwidth."""
    cpu = load_topology("cpu_ps_platform").gpu
    a100 = load_topology("zionex").gpu
    assert compute.architecture(cpu) == "cpu"
    n, threads = 4096, 36  # every core a Hogwild thread running its own n^3 GEMM
    t_cpu = compute.gemm_time_s(cpu, threads * n, n, n, "fp32")
    # MKL's 0.93 of peak at n >= 4000 on one core [blas_1t], for every core at once
    assert compute.gemm_flops(threads * n, n, n) / t_cpu == pytest.approx(4.84e12 * 0.93, rel=0.02)
    assert compute.gemm_time_s(a100, threads * n, n, n, "fp32") < t_cpu
    nbytes = 1e9
    assert compute.memory_time_s(cpu, nbytes) == pytest.approx(nbytes / (256e9 * 0.703), rel=1e-3)


def test_gpu_trainers_are_faster_than_cpu_trainers_on_the_same_model():
    """One ZionEX node against two CPU trainer hosts, MLPerf DLRM at the workload's batch."""
    gpu = _samples(topology="zionex", nodes=1, workload="mlperf_dlrm", iterations=3)
    cpu = _samples(**CPU, workload="mlperf_dlrm", nodes=2)
    assert gpu > 10 * cpu


def test_more_cpu_trainers_scale_throughput():
    """Trainers bound by their own NIC: doubling them (parameter servers to spare) nearly
    doubles the samples per second."""
    base = {**CPU, "workload": "mlperf_dlrm", "topology.front_end.servers": 34}
    two, four = _samples(**base, nodes=2), _samples(**base, nodes=4)
    assert four > 1.8 * two


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sync": "allreduce"}, "no NCCL all-reduce"),
        ({"sync": "shadow-ma"}, "no NCCL all-reduce"),
        ({"plan": "round_robin", "workload": "mlperf_dlrm"}, "no NCCL all-to-all"),
        ({"stack": "torchrec"}, "trains on GPUs but the topology's trainers are CPU hosts"),
    ],
)
def test_unsupported_combinations_are_refused(options, match):
    with pytest.raises(InputError, match=match):
        run_point({**CPU, "workload": "tiny", "nodes": 2, "iterations": 2, **options})


def test_a_cpu_stack_on_gpus_is_refused():
    with pytest.raises(InputError, match="trains on CPUs but the topology's trainers are GPUs"):
        run_point({"topology": "zionex", "nodes": 1, "workload": "tiny", "stack": "cpu_hogwild"})


def test_nccl_on_cpu_trainers_is_a_one_line_error():
    p = subprocess.run(
        [sys.executable, "-m", "zionsim.cli", "collective", "--topology", "cpu_ps_platform",
         "--op", "all_reduce", "--size", "1MB"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert p.returncode == 2
    assert "NCCL collectives need GPUs" in p.stderr
    assert "Traceback" not in p.stderr


def test_the_capacity_precheck_counts_parameter_servers_under_plan_ps():
    """Model F (48 TB of FP32 rows) fits the CPU platform's 64 TB of parameter servers, not its
    trainers: the pre-check before any graph counts the service hosts only where a plan may use
    them."""
    from zionsim.dlrm.stack import apply_stack, load_stack
    from zionsim.dlrm.workload import load_workload
    from zionsim.sim.resources import check_inputs

    spec = load_topology("cpu_ps_platform")
    w = apply_stack(load_workload("neo_model_f"), load_stack("cpu_hogwild"))
    check_inputs(spec, w, plan="ps")
    with pytest.raises(InputError, match="HBM and host DRAM"):
        check_inputs(spec, w, plan="round_robin")
