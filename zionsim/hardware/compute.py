"""Per-GPU compute cost models: GEMMs, pooled embedding lookups and updates, memory-bound kernels.

Every function is pure and returns seconds for one kernel (or one fused group of kernels) on one
GPU, from a :class:`~zionsim.hardware.topology.GpuSpec` (peak FLOP/s per dtype, HBM bandwidth) and a
:class:`ComputeModel` (per-architecture efficiencies).  The parameters, with their sources, live
in ``zionsim/data/compute_model.yaml``; the fitted ones are written by
``tools/calibrate_compute.py``.

Modelling assumptions:

1. A kernel costs a fixed launch overhead plus its work; kernels of one stream run one at a time.
2. GEMM ``C[m,n] = A[m,k] @ B[k,n]`` is a roofline: ``max(2mnk / (peak[dtype] * eff), bytes /
   (hbm_bw * stream_eff))``.  ``eff = e_max * x / (1 + x)``, ``x = (W / (peak[dtype] * t_half))^a``,
   ``W = 2mnk``: efficiency rises with the work and saturates at ``e_max`` (small GEMMs fill few
   SMs and pay tile prologues); it is half of ``e_max`` when the work would take ``t_half`` at
   peak.  Each architecture has a curve fitted to FP16/BF16 measurements; a dtype whose math
   runs on other units has a curve of its own where public measurements of it exist
   (``fitted.gemm_dtype``, fitted by ``tools/calibrate_compute.py`` on
   ``data/reference/gemm_kernels_dtype.csv``): CUDA-core FP32 SGEMM on Volta (DeepBench V100),
   Ampere and Hopper, TF32 on Hopper.  Every other (architecture, dtype) runs on the
   architecture's curve at the dtype's peak, so a slower dtype saturates at less work; Ampere
   TF32 among them (no A100 SXM TF32 sweep is public; H100 SXM's TF32 and BF16 reach the same
   fraction of their peaks, within 7 %).  The curve depends on the work ``2mnk`` alone, not on the
   shape: tile and wave quantisation of skinny or batched GEMMs are not modelled.
3. ``tf32`` runs as FP32 (the FP32 peak and curve, :func:`math_dtype`) on a GPU whose TF32
   rate is missing or no faster than FP32 (Volta has no TF32 units).
4. The GEMM memory floor reads A and B once and writes C once (tiles re-read from L2/shared
   memory cost nothing), all elements ``dtype`` wide (INT8 GEMMs are assumed to write INT8).
   On an architecture whose entry says ``gemm_overlap: true`` (Volta, Ampere, Blackwell) math
   and memory traffic overlap imperfectly: the two times combine by a smooth maximum
   ``(c^q + m^q)^(1/q)`` (:func:`smooth_max`), which is the roofline's ``max(c, m)`` far from
   the ridge and ``2^(1/q)`` times it where ``c = m`` (skinny GEMMs: a tall activation times a
   narrow weight, the shape of DLRM MLP and DCN layers at large batch).  ``q``
   (``fitted.gemm_overlap_exponent``) is fitted by ``tools/calibrate_compute.py`` on DeepBench's
   V100 FP16 training GEMMs (the only public FP16 sweep of non-square shapes near the ridge).
   Ampere and Blackwell take it as an assumption, each checked on public skinny GEMMs of its own
   (held out): A100 802816x192x768 FP16 (Azure), B200 819200x192x1024 FP16 and 1000000x512x512
   BF16 (cuBLAS in Triton benchmarks), which run as far or further below the plain roofline.
   Hopper keeps the plain roofline: no FP16/BF16 skinny-GEMM measurement of it was found (the
   Azure FP8 sweep of H200 also runs its skinny shape below the roofline, but the model has no
   FP8 curve; docs/limitations.md).
5. Memory-bound kernels (concat, loss, optimizer steps) stream at STREAM-triad efficiency.
6. An embedding row access is random: it moves its payload rounded up to 32-byte DRAM sectors
   plus a fixed per-access overhead (fitted to TorchRec's block-size penalties) at the GPU's
   gather bandwidth (:func:`gather_bandwidth_Bps`).  Indices (int64) and pooled outputs stream.
   A gather's loads depend on indices, so it keeps only as many bytes in flight as its warps
   have loads outstanding: by Little's law it moves at most ``sm_count x Q / latency`` (``Q``
   bytes in flight per SM, ``latency`` the idle latency of a load that misses L2), and at most
   the STREAM rate.  The two combine by a smooth minimum ``(a^-p + b^-p)^(-1/p)`` (queueing
   near the knee).  ``Q`` and ``p`` are fitted on H100 gathers only (tools/calibrate_compute.py)
   and assumed the same for every GPU (the same kernels, the same per-SM limits on outstanding
   loads); ``sm_count`` and ``latency`` are the GPU's own (``GpuSpec``, else its
   architecture's).  So HBM bandwidth gained without more SMs or less latency (H200, B200)
   speeds gathers up less than streams.
7. A lookup's row read reaches HBM unless the L2 serves it (assumption 12, forward only).  The
   backward pass reads each lookup's bag gradient but updates each distinct row once (FBGEMM
   sorts the indices and merges duplicates before the fused optimizer update); the caller gives
   the expected distinct rows (``dlrm/cache.py``, Zipf-skewed accesses).  The bag gradient is
   read at the row's width, except under HugeCTR's embedding collection (a stack's
   ``local_reduce``): its local reduce reads each lookup's gradient from the exchange buffer in
   the communication precision (FP16 under mixed precision) and writes one reduced gradient of
   that precision per distinct key, which the optimizer's update kernel reads back
   (``grad_bytes`` of :func:`embedding_backward_time_s`).
8. Fused = FBGEMM's TBE: one forward kernel for all tables, one backward with the optimizer in
   it, no gradient materialised ("The backward operator is fused with optimizer. Thus, the
   embedding tables are updated during backward", FBGEMM TBE docs).  Native (``fused=False``)
   = what facebookresearch/dlrm's ``dlrm_s_pytorch.py`` runs: one ``nn.EmbeddingBag(mode="sum",
   sparse=True)`` per table and ``torch.optim.SGD`` after ``backward()``, with every byte and
   kernel from PyTorch's source: the forward is one kernel per table that also writes
   ``offset2bag`` (an index per lookup); the backward materialises each table's sparse gradient,
   ``lookups x row`` values (:func:`embedding_gradient_bytes`, a ``memory`` op of the trace);
   then a separate optimizer pass reads it back (:func:`embedding_optimizer_time_s`): SGD adds
   the uncoalesced gradient with one ``index_add_`` (every lookup's row read and written,
   duplicates not merged); Adagrad / Adam coalesce it first (sort + unique, the values gathered
   in sorted order) and run their elementwise kernels over the distinct rows.  The same gather
   efficiency as the TBE kernel is assumed per byte; the difference is the work and the
   launches.  Autograd keeps the sparse gradient uncopied (``accumulate_grad.h``: a shallow copy
   when its indices and values are contiguous).  Not modelled: the device-host sync inside the
   coalesce (``unique_by_key``) and atomic contention on hot rows.
9. Volta, Ampere, Hopper and Blackwell each have their own GEMM fit (Blackwell's from B200
   kernel measurements; no per-dtype curve: none is fitted on H200 or Blackwell data).  CPU
   trainers have a stated gather efficiency (no latency bound).
10. A topology's ``compute:`` section (``GpuSpec.compute``, e.g. written by ``zionsim calibrate``
    from measured kernels) replaces its architecture's parameters for that cluster's GPU; a
    ``gemm`` there is measured and becomes the GPU's curve for every dtype (the built-in
    per-dtype curves are dropped: measure the dtype the workload runs); a
    ``gather_efficiency`` there is a measured one and replaces the latency bound.
11. A ``dot`` interaction run by NVIDIA DeepLearningExamples' custom kernels
    (``dot_based_interact``, a stack's ``interaction_kernel``) is priced by the kernel its
    input runs (:func:`dot_interaction_time_s`): FP16, or FP32 on a GPU with TF32 tensor
    cores, the WMMA kernels, priced as one GEMM over every sample's rows (as a ``gemm``
    interaction); FP32 on a GPU without TF32 (Volta) the CUDA-core kernel, one sample per
    128-thread block, which is bound by shared memory: its wavefronts (128-byte cycles of an
    SM; n distinct addresses in one bank take n) are counted from the kernel's addressing
    (:func:`dot_simt_wavefronts`) and served at ``shared_memory_bytes_per_clock`` per SM at
    ``sm_clock_mhz``, against its HBM bytes (the larger of the two).  Latency, occupancy and
    FMA issue are not modelled (the FMAs need half the cycles the loads take).
12. L2 hits of the forward lookups: given the kernel's tables (``l2_parts`` of
    :func:`embedding_forward_time_s`, from the sharding layout), ``hardware/l2_cache.py`` gives
    the share of row reads the GPU's L2 serves (an LRU cache under Che's approximation over the
    workload's Zipf popularity, table by table as the kernel walks them, every row's first
    touch from HBM).  Those bytes move at the L2 gather rate: the smooth minimum (the gathers'
    ``p``) of the L2's peak read rate, bytes per clock per SM x SMs x SM clock, and the
    Little's-law bound of the same bytes in flight per SM at the L2 hit latency; both scale
    with SMs x clock.  The backward pass gets none: it updates each distinct row once (the
    sorted indices merge a row's lookups: its reads and writes are the row's first touch) and
    reads each lookup's pooled gradient once from the exchange buffer or the output's
    gradient, so it has no row reuse for an L2 to serve (the gradients of one bag, read once
    per lookup, could hit; not modelled).  L2 sizes, hit latencies and per-clock rates are
    each GPU's or architecture's (``data/gpus.yaml``, ``data/compute_model.yaml``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from zionsim.base.config import Fields, safe_load
from zionsim.base.errors import InputError
from zionsim.hardware import l2_cache
from zionsim.hardware.topology import TRAINER_ARCHITECTURES, GpuSpec

GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "int8")
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1}
OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam")
ARCHITECTURES = TRAINER_ARCHITECTURES
#: GPU families (and the CPU trainers' Xeon) recognised in ``GpuSpec.model``, their architecture
FAMILIES = {
    "XEON": "cpu",
    "V100": "volta",
    "A100": "ampere",
    "A800": "ampere",
    "H100": "hopper",
    "H800": "hopper",
    "H200": "hopper",
    "GH200": "hopper",
    "B100": "blackwell",
    "B200": "blackwell",
    "GB200": "blackwell",
}
MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "compute_model.yaml"
_FAMILY = re.compile(r"(?<![A-Z0-9])(" + "|".join(FAMILIES) + r")", re.IGNORECASE)


@dataclass(frozen=True)
class GemmFit:
    """GEMM efficiency ``eff_max * x / (1 + x)``, ``x = (W / (peak * half_time_s))^exponent``."""

    eff_max: float
    half_time_s: float
    exponent: float


@dataclass(frozen=True)
class ArchModel:
    """Parameters of one GPU architecture (fractions of peak; seconds).  ``gather_eff`` is None
    for a GPU architecture until :meth:`ComputeModel.for_gpu` derives it from the latency bound
    (a stated or measured one is kept); ``sm_count`` and ``memory_latency_s`` are the defaults
    for a GPU that does not state its own (0 for CPU trainers)."""

    launch_s: float
    stream_eff: float
    gather_eff: float | None
    gemm: GemmFit
    sm_count: int = 0
    memory_latency_s: float = 0.0
    #: ``(dtype, curve)`` of the dtypes fitted on their own measurements (assumption 2); every
    #: other dtype runs on ``gemm``
    gemm_dtype: tuple[tuple[str, GemmFit], ...] = ()
    #: SM clock (Hz) and shared-memory bytes per clock per SM, for kernels priced by their
    #: shared-memory wavefronts (assumption 11); 0 where the architecture states none
    sm_clock_Hz: float = 0.0
    shared_bytes_per_clock: float = 0.0
    #: whether GEMM math and memory time combine by the fitted smooth maximum (assumption 4)
    #: rather than the plain roofline maximum
    gemm_overlap: bool = False
    #: L2 of the architecture's flagship (a GPU's own ``l2_cache`` wins): capacity (bytes), the
    #: latency of a load that hits it (s) and its peak read bytes per SM clock per SM
    #: (assumption 12); 0 where none is stated (CPU trainers: no L2 model)
    l2_bytes: float = 0.0
    l2_latency_s: float = 0.0
    l2_bytes_per_clock_per_sm: float = 0.0

    def gemm_for(self, dtype: str) -> GemmFit:
        """The efficiency curve of GEMMs whose math runs in ``dtype``."""
        for d, fit in self.gemm_dtype:
            if d == dtype:
                return fit
        return self.gemm


@dataclass(frozen=True)
class ComputeModel:
    """Per-architecture parameters (volta / ampere / hopper) and embedding-kernel constants."""

    arch: dict[str, ArchModel]
    sector_bytes: float
    access_overhead_bytes: float
    index_bytes: float
    backward_index_bytes: float
    backward_kernels: int
    coalesce_index_bytes: float
    coalesce_kernels: int
    #: random-row gathers: bytes in flight per SM and the smooth minimum's exponent (fitted)
    gather_bytes_in_flight: float = 0.0
    gather_smoothness: float = 1.0
    #: GEMMs: the exponent of the smooth maximum of math and memory time on the architectures
    #: with ``gemm_overlap`` (assumption 4, fitted); ``math.inf`` is the plain maximum
    gemm_overlap_exponent: float = math.inf
    #: for_gpu's results for GPUs without a ``compute:`` of their own (a copy made by
    #: ``dataclasses.replace`` starts empty)
    _resolved: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def for_gpu(self, gpu: GpuSpec) -> ArchModel:
        """The parameters of ``gpu``'s architecture, with the GPU's own fitted ones over them
        and the gather efficiency of its latency bound where none is stated."""
        arch = architecture(gpu)
        key = None if gpu.compute else (arch, gpu.sm_count, gpu.memory_latency_s, gpu.hbm_bw_Bps)
        if key in self._resolved:
            return self._resolved[key]
        a = self.arch[arch]
        if gpu.compute:
            own = {k: v for k, v in gpu.compute.items() if k != "gemm"}
            if "gemm" in gpu.compute:  # a measured curve is this GPU's for every dtype
                own["gemm_dtype"] = ()
            gemm = replace(a.gemm, **gpu.compute.get("gemm", {}))
            a = replace(a, gemm=gemm, **own)
        if a.gather_eff is None:
            a = replace(a, gather_eff=_gather_bandwidth(gpu, a, self) / gpu.hbm_bw_Bps)
        if key is not None:
            self._resolved[key] = a
        return a

    def with_gemm(self, arch: str, fit: GemmFit, dtype: str | None = None) -> ComputeModel:
        """A copy with another GEMM fit for ``arch`` (used by the calibrations): without
        ``dtype``, one curve for every dtype (the per-dtype curves dropped, as a measured
        ``compute.gemm`` does); with ``dtype``, the curve of that dtype alone."""
        a = self.arch[arch]
        if dtype is None:
            a = replace(a, gemm=fit, gemm_dtype=())
        else:
            _element_bytes(dtype)
            own = tuple((d, f) for d, f in a.gemm_dtype if d != dtype)
            a = replace(a, gemm_dtype=tuple(sorted(own + ((dtype, fit),))))
        return replace(self, arch={**self.arch, arch: a})


@lru_cache(maxsize=4)
def load_compute_model(path: str | None = None) -> ComputeModel:
    """The compute model in ``path`` (default: the built-in calibrated one)."""
    file = str(path or MODEL_FILE)
    f = Fields(safe_load(Path(file).read_text()), file)
    emb, fitted = f.sub("embedding"), f.sub("fitted")
    return ComputeModel(
        arch={
            a: _arch(
                f.sub("architectures").sub(a),
                _gemm_fields(f, fitted, a),
                _dtype_fits(fitted, a),
            )
            for a in ARCHITECTURES
        },
        sector_bytes=emb.quantity("sector_bytes", "bytes", unit=False),
        access_overhead_bytes=fitted.quantity(
            "access_overhead_bytes", "bytes", strict=False, unit=False
        ),
        index_bytes=emb.quantity("index_bytes_per_lookup", "bytes", unit=False),
        backward_index_bytes=emb.quantity("backward_index_bytes_per_lookup", "bytes", unit=False),
        backward_kernels=emb.integer("backward_kernels"),
        coalesce_index_bytes=emb.quantity("coalesce_index_bytes_per_lookup", "bytes", unit=False),
        coalesce_kernels=emb.integer("coalesce_kernels"),
        gather_bytes_in_flight=fitted.quantity(
            "gather_bytes_in_flight_per_sm", "bytes", unit=False
        ),
        gather_smoothness=fitted.quantity("gather_smoothness", "fraction"),
        gemm_overlap_exponent=_overlap_exponent(fitted),
    )


def _overlap_exponent(fitted: Fields) -> float:
    """``fitted.gemm_overlap_exponent`` (assumption 4): a number >= 1; absent, the plain
    roofline maximum."""
    if "gemm_overlap_exponent" not in fitted.data:
        return math.inf
    q = fitted.quantity("gemm_overlap_exponent", "fraction")
    if not q >= 1.0 or not math.isfinite(q):
        raise fitted.error(
            "gemm_overlap_exponent",
            f"must be a finite number >= 1, got {q!r}",
            allowed="a number from 1 (math and memory never overlap) up (2: DeepBench's fit)",
        )
    return q


def _gemm_fields(f: Fields, fitted: Fields, arch: str) -> Fields:
    """An architecture's GEMM curve: the calibration's fit (``fitted.gemm``), else the one its
    ``architectures`` entry states with its sources (``cpu``: no CPU data in the calibration)."""
    if arch in (fitted.data.get("gemm") or {}):
        return fitted.sub("gemm").sub(arch)
    return f.sub("architectures").sub(arch).sub("gemm")


def _dtype_fits(fitted: Fields, arch: str) -> tuple[tuple[str, GemmFit], ...]:
    """The per-dtype GEMM curves of ``arch`` in ``fitted.gemm_dtype`` (none when absent)."""
    per_arch = fitted.sub("gemm_dtype", {})
    per_arch.check_keys(ARCHITECTURES)
    if arch not in per_arch.data:
        return ()
    f = per_arch.sub(arch)
    f.check_keys(GEMM_DTYPES)
    return tuple(sorted((dtype, _gemm_fit(f.sub(dtype))) for dtype in f.data))


def _gemm_fit(g: Fields) -> GemmFit:
    """One GEMM curve: ``eff_max``, ``half_time_us``, ``exponent``."""
    g.check_keys({"eff_max", "half_time_us", "exponent"})
    return GemmFit(
        eff_max=g.fraction("eff_max"),
        half_time_s=g.quantity("half_time_us", "time", unit=False) * 1e-6,
        exponent=g.quantity("exponent", "fraction"),
    )


def _arch(f: Fields, g: Fields, dtype_fits: tuple[tuple[str, GemmFit], ...] = ()) -> ArchModel:
    """One ``architectures`` entry: a GPU architecture states ``sm_count`` and
    ``memory_latency_ns`` (its gather efficiency comes from the latency bound), a CPU trainer its
    ``gather_efficiency``."""
    stated = "gather_efficiency" in f.data
    if not stated and not ("sm_count" in f.data and "memory_latency_ns" in f.data):
        raise f.error(
            "gather_efficiency",
            "missing: needs gather_efficiency, or sm_count and memory_latency_ns",
            allowed="gather_efficiency (0, 1], or sm_count and memory_latency_ns",
        )
    return ArchModel(
        launch_s=f.quantity("launch_overhead_us", "time", unit=False) * 1e-6,
        stream_eff=f.fraction("stream_efficiency"),
        gather_eff=f.fraction("gather_efficiency") if stated else None,
        sm_count=f.integer("sm_count") if "sm_count" in f.data else 0,
        memory_latency_s=(
            f.quantity("memory_latency_ns", "time", unit=False) * 1e-9
            if "memory_latency_ns" in f.data
            else 0.0
        ),
        gemm=_gemm_fit(g),
        gemm_dtype=dtype_fits,
        sm_clock_Hz=(f.integer("sm_clock_mhz") * 1e6 if "sm_clock_mhz" in f.data else 0.0),
        shared_bytes_per_clock=(
            f.quantity("shared_memory_bytes_per_clock", "bytes", unit=False)
            if "shared_memory_bytes_per_clock" in f.data
            else 0.0
        ),
        gemm_overlap=f.flag("gemm_overlap", False),
        **_l2_fields(f),
    )


def _l2_fields(f: Fields) -> dict:
    """An architecture's L2 (assumption 12): ``l2_cache`` (a size), ``l2_latency_cycles`` and
    ``l2_bytes_per_clock_per_sm`` with ``sm_clock_mhz`` (cycles to seconds); all or none."""
    keys = ("l2_cache", "l2_latency_cycles", "l2_bytes_per_clock_per_sm", "sm_clock_mhz")
    stated = [k for k in keys[:3] if k in f.data]
    if not stated:
        return {}
    missing = [k for k in keys if k not in f.data]
    if missing:
        raise f.error(
            missing[0],
            "missing: an L2 model needs all of " + ", ".join(keys),
            allowed=", ".join(keys),
        )
    clock = f.integer("sm_clock_mhz") * 1e6
    return {
        "l2_bytes": f.quantity("l2_cache", "bytes"),
        "l2_latency_s": f.quantity("l2_latency_cycles", "fraction", unit=False) / clock,
        "l2_bytes_per_clock_per_sm": f.quantity("l2_bytes_per_clock_per_sm", "bytes", unit=False),
    }


def architecture(gpu: GpuSpec) -> str:
    """``"volta"``, ``"ampere"``, ``"hopper"``, ``"blackwell"`` (or ``"cpu"`` for a CPU trainer):
    ``gpu.architecture`` when given (a preset gives it), else from the family named in
    ``gpu.model``."""
    if gpu.architecture:
        return gpu.architecture
    found = _FAMILY.search(gpu.model)
    if not found:
        raise InputError(
            f"unknown GPU family in {gpu.model!r}",
            field="gpu.model",
            allowed="a model naming one of " + ", ".join(FAMILIES),
        )
    return FAMILIES[found.group(1).upper()]


def launch_overhead_s(gpu: GpuSpec, model: ComputeModel | None = None) -> float:
    """Seconds one kernel launch adds on ``gpu``."""
    return _arch_of(gpu, model).launch_s


def memory_time_s(gpu: GpuSpec, nbytes: float, model: ComputeModel | None = None) -> float:
    """Seconds of a memory-bound kernel moving ``nbytes`` bytes (reads plus writes)."""
    _non_negative("nbytes", nbytes)
    a = _arch_of(gpu, model)
    return a.launch_s + nbytes / (gpu.hbm_bw_Bps * a.stream_eff)


def gemm_flops(m: int, n: int, k: int) -> float:
    """FLOPs of ``C[m,n] = A[m,k] @ B[k,n]``: one multiply and one add per term."""
    return 2.0 * m * n * k


def gemm_bytes(m: int, n: int, k: int, dtype: str) -> float:
    """Bytes of the GEMM memory floor: A and B read once, C written once."""
    return float(_element_bytes(dtype) * (m * k + k * n + m * n))


def gemm_efficiency(
    gpu: GpuSpec, m: int, n: int, k: int, dtype: str, model: ComputeModel | None = None
) -> float:
    """Fraction of the ``dtype`` peak a GEMM of this shape reaches (compute-bound part only), on
    the curve of the dtype its math runs in (:func:`math_dtype`)."""
    g = _arch_of(gpu, model).gemm_for(math_dtype(gpu, dtype))
    x = (gemm_flops(m, n, k) / (peak_flops(gpu, dtype) * g.half_time_s)) ** g.exponent
    return g.eff_max * x / (1.0 + x)


def gemm_time_s(
    gpu: GpuSpec, m: int, n: int, k: int, dtype: str, model: ComputeModel | None = None
) -> float:
    """Seconds of ``C[m,n] = A[m,k] @ B[k,n]`` in ``dtype``: launch + the smooth maximum of
    compute and memory time (assumptions 2 and 4)."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if v < 1:
            raise InputError(f"GEMM dimension must be >= 1, got {v!r}", field=name)
    mod = model or load_compute_model()
    a = _arch_of(gpu, mod)
    eff = gemm_efficiency(gpu, m, n, k, dtype, mod)
    compute = gemm_flops(m, n, k) / (peak_flops(gpu, dtype) * eff)
    memory = gemm_bytes(m, n, k, dtype) / (gpu.hbm_bw_Bps * a.stream_eff)
    q = mod.gemm_overlap_exponent if a.gemm_overlap else math.inf
    return a.launch_s + smooth_max(compute, memory, q)


#: DeepLearningExamples' FP32 dot-interaction kernels (``dot_based_interact_fp32_fwd.cu`` /
#: ``_bwd.cu``, launchers ``dotBasedInteractF32Fwd`` / ``Bwd``): one sample per thread block of
#: 128 threads (``kNumThreads``) [dle_interact]
DOT_SIMT_THREADS = 128
#: 32 shared-memory banks of 4 bytes (CUDA C++ Best Practices Guide, "Shared Memory"); a warp's
#: 128-bit loads are served 8 threads at a time (4 requests per LDS.128, forum 77228), 32-bit
#: loads 32 at a time
SHARED_BANKS = 32
#: DLE's dot-interaction kernel forms (``GemmArgs.kernel``): the forward kernel and the backward
#: kernel, whose work the lowering writes as its two tensor-core-priced GEMMs
DOT_KERNELS = ("dot_based_interact_fwd", "dot_based_interact_bwd")


def dot_interaction_time_s(
    gpu: GpuSpec, m: int, n: int, k: int, dtype: str, kernel: str, model: ComputeModel | None = None
) -> float:
    """Seconds of one op of DeepLearningExamples' custom dot interaction (``kernel`` one of
    :data:`DOT_KERNELS`; ``m = samples x features``, ``n = features``, ``k = dim``; assumption
    11).  A 16-bit input, or a 32-bit one on a GPU with TF32 tensor cores, runs the WMMA
    tensor-core kernels, priced as the GEMM :func:`gemm_time_s` prices (unchanged); a 32-bit
    input on a GPU without them (Volta) runs the CUDA-core FP32 kernel, priced by its
    shared-memory wavefronts (:func:`dot_simt_wavefronts`) against its HBM bytes; the backward
    kernel's time is split over the lowering's two backward ops."""
    if kernel not in DOT_KERNELS:
        raise InputError(
            f"unknown GEMM kernel {kernel!r}",
            field="kernel",
            allowed="gemm, " + ", ".join(DOT_KERNELS),
        )
    if dtype not in ("fp32", "tf32") or math_dtype(gpu, "tf32") != "fp32":
        return gemm_time_s(gpu, m, n, k, dtype, model)
    a = _arch_of(gpu, model)
    if not (a.sm_clock_Hz > 0 and a.shared_bytes_per_clock > 0):
        raise InputError(
            f"the {architecture(gpu)} architecture states no SM clock or shared-memory bandwidth",
            field=f"architectures.{architecture(gpu)}.sm_clock_mhz",
            allowed="sm_clock_mhz and shared_memory_bytes_per_clock in compute_model.yaml",
        )
    phase = "fwd" if kernel.endswith("fwd") else "bwd"
    samples, features, dim = m // n, n, k
    wavefronts = samples * dot_simt_wavefronts(features, dim, phase)
    sms = gpu.sm_count or a.sm_count
    shared_s = wavefronts * (SHARED_BANKS * 4 / a.shared_bytes_per_clock) / (sms * a.sm_clock_Hz)
    pairs = features * (features - 1) // 2
    out = -(-(pairs + dim) // 8) * 8  # the output row, padded to a multiple of 8
    per_sample = features * dim + out if phase == "fwd" else 2 * features * dim + out + dim
    hbm_s = samples * 4.0 * per_sample / (gpu.hbm_bw_Bps * a.stream_eff)
    seconds = max(shared_s, hbm_s)
    return a.launch_s + (seconds if phase == "fwd" else seconds / 2.0)


@lru_cache(maxsize=64)
def dot_simt_wavefronts(features: int, dim: int, phase: str) -> int:
    """Shared-memory wavefronts (128-byte cycles of one SM) of one sample of DLE's FP32 dot
    interaction, from its kernels' addressing [dle_interact].  Forward: thread ``t`` computes
    pairs ``t, t + 128, ...`` of the strictly lower triangle (row-major), each a dot product of
    two rows read from shared memory as float4s; the 8 threads a 128-bit load serves together
    take one wavefront per distinct address in one bank (an n-way conflict takes n; one address
    read by several threads is broadcast).  Rows ``dim`` floats apart start in the same bank
    when ``4 dim`` is a multiple of 128 bytes, so distinct rows conflict.  Without float4
    alignment (``dim`` not a multiple of 4) the kernel reads floats, 32 threads together.
    Backward: thread ``t`` owns column ``t`` (and ``t + 128``...) and for every row sums the
    other rows' elements times one upstream gradient: two 32-bit loads per term, consecutive
    columns in distinct banks and the gradient broadcast, one wavefront each per warp."""
    if phase == "bwd":
        return -(-dim // 32) * features * (features - 1) * 2
    pairs = [(r, c) for r in range(1, features) for c in range(r)]
    vec = 4 if dim % 4 == 0 else 1
    group = 32 // vec
    per_load = 0
    for base in range(0, len(pairs), DOT_SIMT_THREADS):
        block = pairs[base : base + DOT_SIMT_THREADS]
        for w in range(0, len(block), 32):
            warp = block[w : w + 32]
            for g in range(0, len(warp), group):
                threads = warp[g : g + group]
                for side in (0, 1):
                    per_load += _bank_conflicts([p[side] * dim for p in threads], vec)
    return per_load * (dim // vec)


def _bank_conflicts(addresses: list[int], vec: int) -> int:
    """Wavefronts of one shared-memory request: the most distinct ``vec``-word addresses that
    fall in one bank (group), at least one."""
    per_bank: dict[int, set[int]] = {}
    for addr in addresses:
        per_bank.setdefault((addr % SHARED_BANKS) // vec, set()).add(addr)
    return max((len(v) for v in per_bank.values()), default=1)


def math_dtype(gpu: GpuSpec, dtype: str) -> str:
    """The dtype a GEMM's math runs in: ``dtype``, except ``tf32`` on a GPU without TF32 tensor
    cores (Volta: no TF32 rate listed, or one no faster than FP32), whose FP32 GEMMs run as
    CUDA-core SGEMM (assumption 3)."""
    _element_bytes(dtype)
    if dtype == "tf32" and gpu.flops.get("tf32", 0.0) <= gpu.flops.get("fp32", 0.0):
        return "fp32"
    return dtype


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Dense peak FLOP/s of ``gpu`` in ``dtype`` (``tf32`` falls back to ``fp32``)."""
    dtype = math_dtype(gpu, dtype)
    if dtype not in gpu.flops:
        raise InputError(
            f"the GPU lists no {dtype} rate",
            field=f"gpu.flops.{dtype}",
            allowed=", ".join(gpu.flops),
        )
    return gpu.flops[dtype]


def access_bytes(payload: float, model: ComputeModel | None = None) -> float:
    """Bytes-equivalent of one random access of ``payload`` bytes: sectors plus fixed overhead."""
    m = model or load_compute_model()
    if payload <= 0:
        return 0.0
    return math.ceil(payload / m.sector_bytes) * m.sector_bytes + m.access_overhead_bytes


def smooth_max(a: float, b: float, q: float) -> float:
    """``(a^q + b^q)^(1/q)`` for ``a, b >= 0``: above both, the larger as ``q`` grows
    (``q = math.inf``: the larger)."""
    if math.isinf(q) or a <= 0.0 or b <= 0.0:
        return max(a, b)
    hi = max(a, b)
    return hi * (1.0 + (min(a, b) / hi) ** q) ** (1.0 / q)


def smooth_min(a: float, b: float, p: float) -> float:
    """``(a^-p + b^-p)^(-1/p)``: below both, the smaller as ``p`` grows (``p > 0``)."""
    return (a ** (-p) + b ** (-p)) ** (-1.0 / p)


def latency_bound_Bps(sm_count: int, bytes_in_flight: float, latency_s: float) -> float:
    """Little's law: bytes per second that ``sm_count`` SMs move with ``bytes_in_flight`` each
    outstanding for ``latency_s``."""
    return sm_count * bytes_in_flight / latency_s


def gather_bandwidth_Bps(gpu: GpuSpec, model: ComputeModel | None = None) -> float:
    """Bytes per second of random-row gathers on ``gpu`` (assumption 6): its stated or
    measured gather efficiency, else the smooth minimum of the STREAM rate and the latency
    bound."""
    return _arch_of(gpu, model).gather_eff * gpu.hbm_bw_Bps


def _gather_bandwidth(gpu: GpuSpec, a: ArchModel, m: ComputeModel) -> float:
    """The latency-bound gather bandwidth of ``gpu`` with architecture parameters ``a``."""
    sms = gpu.sm_count or a.sm_count
    latency = gpu.memory_latency_s or a.memory_latency_s
    if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
        raise InputError(
            f"the GPU's SM count must be a whole number >= 1, got {sms!r}",
            field="gpu.sm_count",
            allowed="an integer from 1 to 1024 (H100 SXM5: 132, B200: 148)",
        )
    if not latency > 0 or not math.isfinite(latency):
        raise InputError(
            f"the GPU's memory latency must be > 0, got {latency!r} s",
            field="gpu.memory_latency",
            allowed="a time such as 354 ns",
        )
    stream = a.stream_eff * gpu.hbm_bw_Bps
    bound = latency_bound_Bps(sms, m.gather_bytes_in_flight, latency)
    return smooth_min(stream, bound, m.gather_smoothness)


def gather_efficiency(gpu: GpuSpec, row_bytes: float, model: ComputeModel | None = None) -> float:
    """Useful fraction of HBM bandwidth when gathering rows of ``row_bytes`` bytes."""
    m = model or load_compute_model()
    return m.for_gpu(gpu).gather_eff * row_bytes / access_bytes(row_bytes, m)


def embedding_forward_time_s(
    gpu: GpuSpec,
    lookups: float,
    row_bytes: float,
    tables: int,
    fused: bool,
    out_bytes: float,
    model: ComputeModel | None = None,
    l2_parts: tuple | None = None,
) -> float:
    """Seconds of a pooled lookup: ``lookups`` rows gathered, ``out_bytes`` of pooled output.

    Per lookup: one random row access and an 8-byte index read; the output streams once.
    Native (``fused=False``): one ``EmbeddingBag_updateOutputKernel_sum_mean`` launch per table,
    each also writing ``offset2bag`` (one index per lookup) for its backward.
    ``l2_parts``: the kernel's tables, ``(table_rows, rows_held, lookups, row_bytes,
    zipf_alpha)`` each: the share of the row reads the GPU's L2 serves (assumption 12) moves at
    :func:`l2_gather_bandwidth_Bps` instead of the HBM gather rate (None: every read from HBM).
    """
    m = _checked_embedding(lookups, row_bytes, tables, model)
    _non_negative("out_bytes", out_bytes)
    a = m.for_gpu(gpu)
    scattered = lookups * access_bytes(row_bytes, m)
    streamed = lookups * m.index_bytes + out_bytes
    if not fused:
        streamed += lookups * m.index_bytes
    launches = a.launch_s if fused else tables * a.launch_s
    share = l2_hit_share(gpu, l2_parts, m) if l2_parts else 0.0
    if share <= 0.0:
        return launches + _transfer_s(gpu, a, scattered, streamed)
    hits = scattered * share
    return (
        launches
        + _transfer_s(gpu, a, scattered - hits, streamed)
        + hits / l2_gather_bandwidth_Bps(gpu, m)
    )


def l2_hit_share(gpu: GpuSpec, l2_parts, model: ComputeModel | None = None) -> float:
    """Share of a lookup kernel's row bytes that ``gpu``'s L2 serves (assumption 12; 0 on an
    architecture without an L2 model)."""
    m = model or load_compute_model()
    a = m.for_gpu(gpu)
    capacity = gpu.l2_bytes or a.l2_bytes
    if not capacity or not a.l2_bytes_per_clock_per_sm:
        return 0.0
    return l2_cache.hit_bytes_share(l2_parts, capacity, m.sector_bytes)


def l2_gather_bandwidth_Bps(gpu: GpuSpec, model: ComputeModel | None = None) -> float:
    """Bytes per second of row reads that hit ``gpu``'s L2 (assumption 12): the smooth minimum
    of the L2's peak read rate (bytes per clock per SM x SMs x clock) and the Little's-law bound
    of the gathers' bytes in flight at the L2 hit latency."""
    m = model or load_compute_model()
    a = m.for_gpu(gpu)
    sms = gpu.sm_count or a.sm_count
    peak = a.l2_bytes_per_clock_per_sm * sms * a.sm_clock_Hz
    bound = latency_bound_Bps(sms, m.gather_bytes_in_flight, a.l2_latency_s)
    return smooth_min(peak, bound, m.gather_smoothness)


def embedding_backward_time_s(
    gpu: GpuSpec,
    lookups: float,
    row_bytes: float,
    tables: int,
    fused: bool,
    optimizer: str,
    state_bytes_per_row: float,
    model: ComputeModel | None = None,
    unique_rows: float | None = None,
    grad_bytes: float | None = None,
) -> float:
    """Seconds of the embedding backward with the optimizer update (FBGEMM "exact" TBE).

    Per lookup, random accesses: the pooled gradient of its bag (``row_bytes`` assumed); per
    distinct row (``unique_rows``, default every lookup its own row), the row read and written
    and the optimizer state read and written (none for ``sgd``): the sorted indices let the
    kernel merge a row's gradients before one update; streamed: the index sort of the backward
    setup.  Native (``fused=False``): the separate optimizer pass over the already materialised
    sparse gradients, :func:`embedding_optimizer_time_s` (the gradient itself is a memory
    kernel of :func:`embedding_gradient_bytes`).

    ``grad_bytes`` (a stack's ``local_reduce``, HugeCTR's embedding collection): each lookup's
    pooled gradient is read ``grad_bytes`` wide (the exchange's precision) and summed per
    distinct row into a reduced-gradient buffer of that width, which the update then reads:
    per distinct row ``grad_bytes`` streamed out and back in besides the row and state updates.
    """
    if not fused:
        return embedding_optimizer_time_s(
            gpu, lookups, row_bytes, tables, optimizer, state_bytes_per_row, model, unique_rows
        )
    m = _checked_embedding(lookups, row_bytes, tables, model)
    state = _checked_state(optimizer, state_bytes_per_row)
    a = m.for_gpu(gpu)
    rows = lookups if unique_rows is None else min(float(unique_rows), lookups)
    if grad_bytes is not None and not grad_bytes > 0:
        raise InputError(f"must be > 0, got {grad_bytes!r}", field="grad_bytes")
    grad = row_bytes if grad_bytes is None else float(grad_bytes)
    scattered = lookups * access_bytes(grad, m)
    scattered += rows * (2 * access_bytes(row_bytes, m) + 2 * access_bytes(state, m))
    streamed = lookups * m.backward_index_bytes
    if grad_bytes is not None:  # the reduced gradient written by the local reduce, read back
        streamed += rows * 2 * grad
    return m.backward_kernels * a.launch_s + _transfer_s(gpu, a, scattered, streamed)


def embedding_gradient_bytes(
    lookups: float, row_bytes: float, out_bytes: float, index_bytes: float
) -> float:
    """Bytes of native autograd's per-table gradient materialisation (PyTorch
    ``_embedding_bag_sparse_backward``: ``grad.index_select(0, offset2bag)``, one kernel per
    table): ``offset2bag`` read (``index_bytes`` per lookup), the bags' output gradients read
    (``out_bytes``: a bag's lookups are adjacent, so its row streams once) and one gradient row
    per lookup written, the values of the sparse COO gradient the optimizer reads back."""
    for name, v in (("lookups", lookups), ("row_bytes", row_bytes), ("out_bytes", out_bytes)):
        _non_negative(name, v)
    return lookups * (index_bytes + row_bytes) + out_bytes


def embedding_optimizer_time_s(
    gpu: GpuSpec,
    lookups: float,
    row_bytes: float,
    tables: int,
    optimizer: str,
    state_bytes_per_row: float,
    model: ComputeModel | None = None,
    unique_rows: float | None = None,
) -> float:
    """Seconds of ``torch.optim``'s step over ``tables`` native sparse gradients of ``lookups``
    rows in all (``unique_rows`` distinct): :func:`native_step_work` per table, at the same
    gather and stream efficiencies as the fused kernels."""
    m = _checked_embedding(lookups, row_bytes, tables, model)
    state = _checked_state(optimizer, state_bytes_per_row)
    a = m.for_gpu(gpu)
    rows = lookups if unique_rows is None else min(float(unique_rows), lookups)
    kernels, scattered, streamed = native_step_work(optimizer, lookups, rows, row_bytes, state, m)
    return tables * kernels * a.launch_s + _transfer_s(gpu, a, scattered, streamed)


def native_step_work(
    optimizer: str, lookups: float, rows: float, row: float, state: float, m: ComputeModel
) -> tuple[int, float, float]:
    """(kernels per table, random-access bytes, streamed bytes) of the ``torch.optim`` step over
    one sparse gradient of ``lookups`` values, ``rows`` distinct, rows of ``row`` bytes and
    ``state`` optimizer-state bytes per row.  Every update ends with ``param.add_(sparse)``:
    ``index_add_`` (index and value read, the row read and written).

    * ``sgd`` (``torch/optim/sgd.py``: ``param.add_(grad, alpha=-lr)`` on the uncoalesced
      gradient, ``add_out_dense_sparse_cuda``: ``values = values.mul(value)``, "purposely not
      inplace", a read and a write of every value, then one ``index_add_``): every lookup
      updates its row; 2 kernels.
    * ``adagrad`` (``torch/optim/adagrad.py``, sparse branch): ``coalesce()``, then ``pow(2)``,
      ``state_sum.add_`` (``index_add_``), ``sparse_mask`` (a gather, 2 kernels: assumption),
      ``sqrt_``, ``add_(eps)``, the division and ``param.add_``: 8 kernels over the distinct rows.
      ``rowwise_adagrad`` has no ``torch.optim`` form: the same kernels with the row-wise state.
    * ``adam`` (``torch.optim.SparseAdam``): ``coalesce()``, two ``sparse_mask`` gathers, the
      moments' updates (sub, mul, pow, two ``index_add_``), ``add_`` × 2, ``sqrt_``, ``add_``,
      ``div_``, the step scale and ``param.add_``: 18 kernels, two states of ``state / 2``.
    """
    idx, acc = m.index_bytes, (lambda b: access_bytes(b, m))
    if optimizer == "sgd":
        return 2, lookups * 2 * acc(row), lookups * (idx + 3 * row)
    # coalesce: index work, the values gathered in sorted order, the distinct rows written
    kernels = m.coalesce_kernels + 1
    scattered = lookups * acc(row) + rows * 2 * acc(row)
    streamed = lookups * m.coalesce_index_bytes + rows * row + rows * (idx + row)
    if optimizer == "adam":
        h = state / 2  # exp_avg, exp_avg_sq
        # 2 gathers (read at random, write h), 2 index_add_ (RMW), elementwise: 29 h + 2 rows
        scattered += rows * 2 * (acc(h) + 2 * acc(h))
        streamed += rows * (4 * idx + 2 * row + 29 * h)
        return kernels + 17, scattered, streamed
    # adagrad: gather (read at random) + index_add_ (RMW) of the state; pow r→s, index_add_ s,
    # gather writes s, sqrt_ 2s, add_ 2s, division 2r + s
    scattered += rows * 3 * acc(state)
    streamed += rows * (2 * idx + 3 * row + 8 * state)
    return kernels + 7, scattered, streamed


def _transfer_s(gpu: GpuSpec, a: ArchModel, scattered: float, streamed: float) -> float:
    """Seconds to move ``scattered`` random-access bytes and ``streamed`` sequential bytes."""
    return (scattered / a.gather_eff + streamed / a.stream_eff) / gpu.hbm_bw_Bps


def _arch_of(gpu: GpuSpec, model: ComputeModel | None) -> ArchModel:
    return (model or load_compute_model()).for_gpu(gpu)


def _element_bytes(dtype: str) -> int:
    if dtype not in ELEMENT_BYTES:
        raise InputError(
            f"unknown GEMM dtype {dtype!r}", field="dtype", allowed=", ".join(GEMM_DTYPES)
        )
    return ELEMENT_BYTES[dtype]


def _checked_state(optimizer: str, state_bytes_per_row: float) -> float:
    """The optimizer-state bytes per row an update reads and writes (none for ``sgd``)."""
    if optimizer not in OPTIMIZERS:
        raise InputError(
            f"unknown optimizer {optimizer!r}", field="optimizer", allowed=", ".join(OPTIMIZERS)
        )
    _non_negative("state_bytes_per_row", state_bytes_per_row)
    return 0.0 if optimizer == "sgd" else state_bytes_per_row


def _checked_embedding(
    lookups: float, row_bytes: float, tables: int, model: ComputeModel | None
) -> ComputeModel:
    _non_negative("lookups", lookups)
    if row_bytes <= 0:
        raise InputError(f"must be > 0, got {row_bytes!r}", field="row_bytes")
    if tables < 1:
        raise InputError(f"must be >= 1, got {tables!r}", field="tables")
    return model or load_compute_model()


def _non_negative(name: str, value: float) -> None:
    if not value >= 0:
        raise InputError(f"must be >= 0, got {value!r}", field=name)
