"""HugeCTR's hybrid embedding, as NVIDIA's MLPerf DLRM (v1) HugeCTR submissions ran it.

Sources: NVIDIA-Merlin/HugeCTR before commit 8092533 ("Deprecate AsyncDataReader, LocalizedOneHot
and Hybrid Embedding"), ``HugeCTR/src/embeddings/hybrid_sparse_embedding.cu`` and
``HugeCTR/src/embeddings/hybrid_embedding/{model,calibration_data,frequent_embedding,
infrequent_embedding,communication}.cu``; ``HugeCTR/src/pybind/add_sparse_embedding.cpp`` (the
cap on frequent categories is ``max_num_frequent_categories`` × the larger of the train and eval
batch; defaults ``p_dup_max`` 0.01, bandwidths 1.3e11 / 1.9e11 B/s, ratio 1.0);
``mlcommons/training_results_v2.0`` NVIDIA/benchmarks/dlrm/implementations/hugectr/dgx_a100.py
(``HybridEmbeddingParam(2, -1, 0.03, 1.3e11, 1.9e11, 1.0, …, NVLink_SingleNode, Distributed)``,
``batchsize_eval = 1769472``, ``num_iterations_statistics`` left at CreateSolver's 20; the same
in ``training_results_v2.1`` hugectr-preview/dgx_h100.py); ``training_results_v1.0``
dgx_a100_8x8x1120.json (8 nodes: ``communication_type: IB_NVLink_Hierarchical``,
``max_num_frequent_categories: 2``, batch 71680, eval batch 716800, the rest at the defaults).
What the code does, as read there (the code here is written from this description):

1. **Frequent categories.**  Before training HugeCTR counts every category over
   ``num_iterations_statistics`` global batches and calls a category frequent when its count
   reaches a threshold (``calculate_threshold``), with ``M = G / n`` samples per GPU:

   * ``NVLink_SingleNode``: ``G · iters · sqrt(2 p_dup_max / (M (M - 1)))``;
   * ``IB_NVLink``: ``iters · n · (a2a_bw / ar_bw) · efficiency · n / (n - 1)``;
   * ``IB_NVLink_Hier``: ``iters · n · (a2a_bw / ar_bw) · efficiency · nodes / (nodes - 1)``.

   Frequent rows are replicated on every GPU (data-parallel): a GPU looks them up for its own
   ``B`` samples and their gradients are reduced among all GPUs (multi-node: the frequent
   gradient buffer lives in the dense wgrad buffer and joins its all-reduce,
   ``initialize_embedding_vectors(…, wgrad_offset_in_bytes)``; single node: each GPU reduces the
   frequent rows it owns from its peers' partial gradients over NVLink and the others read the
   updated rows back, about the bytes of an all-reduce of the rows a batch touches, nearly all
   of them at this threshold).  Here they join the all-reduce as a DP table's gradient does.
2. **Infrequent categories** are model-parallel, dealt round-robin over the GPUs
   (``calculate_frequent_and_infrequent_categories``: per instance round-robin).  Every GPU
   reads the whole global batch's keys (``Data`` holds the global batch; each GPU computes which
   of its samples need which remote rows), so no index all-to-all is needed; forward, each owner
   sends the embedding vector of every infrequent lookup to the sample's GPU (an all-to-allv,
   hierarchical under ``IB_NVLink_Hier``: the same bytes across nodes), backward the gradients
   travel back the same way.  A lookup is one vector: the hybrid embedding takes one-hot slots.
   Under ``IB_NVLink_Hier`` the exchange has two stages (``infrequent_embedding.cu``,
   ``fused_intra_forward_model``: each owner writes every message over NVLink into the send
   buffer of its node's GPU with the receiver's local index; then ``HierAll2Allv_Multi_IB``, an
   all-to-all among the same-index GPUs of all nodes; backward ``fused_intra_update_network``
   then the same inter-node all-to-all), so the messages crossing nodes are ``g`` times larger.

Frequency model (assumption, stated): row popularity of each table follows a Zipf law of
exponent ``zipf_alpha`` (the workload's field, ``cache.py``), so row ``k`` of a table of ``R`` rows
is drawn with probability ``p_k = k^-α / H(R, α)``.  A row is frequent when its expected count
over the statistics batches, ``G · iters · L · p_k``, reaches the threshold: the ``K`` hottest
rows, ``K = min(R, ⌊(G · iters · L / (threshold · H(R, α)))^(1/α)⌋)``, which take a share
``H(K, α) / H(R, α)`` of the table's lookups.  HugeCTR's rounding of the total up to a multiple
of ``n`` (at most ``n - 1`` rows) is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zionsim.base.config import Fields
from zionsim.base.errors import InputError
from zionsim.dlrm.cache import harmonic, hit_rate
from zionsim.dlrm.plan import Plan, Shard

#: ``hybrid_embedding::CommunicationType`` (``utils.hpp``)
COMMUNICATION_TYPES = ("NVLink_SingleNode", "IB_NVLink", "IB_NVLink_Hier")


@dataclass(frozen=True)
class HybridSettings:
    """``HybridEmbeddingParam`` and the solver fields the hybrid embedding reads."""

    #: communication type on one node and on several (MLPerf configs: NVLink_SingleNode on one
    #: DGX, IB_NVLink_Hier on several)
    single_node: str = "NVLink_SingleNode"
    multi_node: str = "IB_NVLink_Hier"
    #: cap on frequent categories in units of the larger batch (dgx_a100.py: 2)
    max_num_frequent_categories: float = 2.0
    #: ``batchsize_eval`` (dgx_a100.py: 1769472), the other factor of the cap
    eval_batch: int = 1769472
    #: ``p_dup_max`` (dgx_a100.py: 0.03)
    p_dup_max: float = 0.03
    #: ``max_all_reduce_bandwidth`` / ``max_all_to_all_bandwidth``, B/s (dgx_a100.py)
    all_reduce_bw_Bps: float = 1.3e11
    all_to_all_bw_Bps: float = 1.9e11
    efficiency_bandwidth_ratio: float = 1.0
    #: ``CreateSolver(num_iterations_statistics=20)`` (solver_wrapper.hpp default)
    iterations: int = 20

    def kind(self, nodes: int) -> str:
        """The communication type on ``nodes`` nodes."""
        return self.single_node if nodes <= 1 else self.multi_node

    def to_dict(self) -> dict:
        """The settings as plain data."""
        return {
            "communication_type": {"single_node": self.single_node, "multi_node": self.multi_node},
            "max_num_frequent_categories": self.max_num_frequent_categories,
            "eval_batch": self.eval_batch,
            "p_dup_max": self.p_dup_max,
            "max_all_reduce_bandwidth_Bps": self.all_reduce_bw_Bps,
            "max_all_to_all_bandwidth_Bps": self.all_to_all_bw_Bps,
            "efficiency_bandwidth_ratio": self.efficiency_bandwidth_ratio,
            "num_iterations_statistics": self.iterations,
        }


def settings_from_fields(f: Fields) -> HybridSettings:
    """Validate a ``hybrid:`` mapping (errors name the field): ``communication_type: {single_node,
    multi_node}``, ``max_num_frequent_categories``, ``eval_batch``, ``p_dup_max``,
    ``max_all_reduce_bandwidth`` and ``max_all_to_all_bandwidth`` (bytes/s),
    ``efficiency_bandwidth_ratio``, ``num_iterations_statistics``; absent fields take
    :class:`HybridSettings`' values."""
    f.check_keys(
        {
            "communication_type",
            "max_num_frequent_categories",
            "eval_batch",
            "p_dup_max",
            "max_all_reduce_bandwidth",
            "max_all_to_all_bandwidth",
            "efficiency_bandwidth_ratio",
            "num_iterations_statistics",
        }
    )
    d = HybridSettings()
    ct = f.sub("communication_type", {})
    ct.check_keys({"single_node", "multi_node"})
    s = HybridSettings(
        single_node=ct.choice("single_node", COMMUNICATION_TYPES, d.single_node),
        multi_node=ct.choice("multi_node", COMMUNICATION_TYPES[1:], d.multi_node),
        max_num_frequent_categories=_positive(f, "max_num_frequent_categories", 2.0),
        eval_batch=f.integer("eval_batch", d.eval_batch, minimum=0),
        p_dup_max=_positive(f, "p_dup_max", d.p_dup_max),
        all_reduce_bw_Bps=_positive(f, "max_all_reduce_bandwidth", d.all_reduce_bw_Bps),
        all_to_all_bw_Bps=_positive(f, "max_all_to_all_bandwidth", d.all_to_all_bw_Bps),
        efficiency_bandwidth_ratio=_positive(
            f, "efficiency_bandwidth_ratio", d.efficiency_bandwidth_ratio
        ),
        iterations=f.integer("num_iterations_statistics", d.iterations),
    )
    if s.p_dup_max > 1.0:
        raise f.error("p_dup_max", f"is a probability, got {s.p_dup_max}", allowed="0 < p <= 1")
    return s


def _positive(f: Fields, key: str, default: float) -> float:
    """A positive number ``key`` of ``f`` (plain, no unit)."""
    v = f.raw(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise f.error(key, f"must be a positive number, got {v!r}", allowed="a number > 0")
    return float(v)


def count_threshold(
    s: HybridSettings, kind: str, gpus: int, nodes: int, global_batch: int
) -> float:
    """HugeCTR's count over ``s.iterations`` global batches at which a category is frequent
    (module docstring, item 1)."""
    n, it = float(gpus), float(s.iterations)
    ratio = s.all_to_all_bw_Bps / s.all_reduce_bw_Bps * s.efficiency_bandwidth_ratio
    if kind == "NVLink_SingleNode":
        m = global_batch / n
        if m <= 1:
            raise InputError(
                f"the hybrid embedding's single-node threshold needs more than one sample per "
                f"GPU, got {m:g}",
                field="global_batch",
                allowed="at least 2 samples per GPU",
            )
        return global_batch * it * math.sqrt(2.0 * s.p_dup_max / (m * (m - 1.0)))
    if kind == "IB_NVLink":
        if n <= 1:
            raise InputError("IB_NVLink needs several GPUs", field="communication_type.multi_node")
        return it * n * ratio * n / (n - 1.0)
    if nodes <= 1:
        raise InputError(
            "IB_NVLink_Hier needs several nodes",
            field="communication_type.multi_node",
            allowed="NVLink_SingleNode on one node",
        )
    return it * n * ratio * nodes / (nodes - 1.0)


def frequent_rows(rows: int, pooling: float, alpha: float, samples: float, threshold: float):
    """(frequent rows ``K``, share of the table's lookups they take) of a ``rows``-row table of
    ``pooling`` lookups per sample, Zipf(``alpha``) popularity, when ``samples`` samples are
    counted and a row is frequent at ``threshold`` counts (module docstring)."""
    if rows <= 0 or pooling <= 0:
        return 0, 0.0
    h = harmonic(rows, alpha)
    if alpha <= 0:  # uniform: every row alike, all frequent or none
        k = rows if samples * pooling / rows >= threshold else 0
    else:
        k = min(rows, math.floor((samples * pooling / (threshold * h)) ** (1.0 / alpha)))
    return int(k), hit_rate(rows, k, alpha)  # the share a cache of the K hottest rows serves


def hybrid_plan(cluster, w, settings: HybridSettings | None = None):
    """The hybrid embedding of ``w`` on ``cluster`` as a plan (:func:`plan_for`)."""
    return plan_for(w, len(cluster.gpus), cluster.spec.nodes, settings or HybridSettings())


def plan_for(w, n: int, nodes: int, s: HybridSettings):
    """The hybrid embedding of ``w`` on ``n`` GPUs of ``nodes`` nodes as a plan: one ``HYB``
    shard per table over every GPU, with its frequent rows, their share of lookups and the
    infrequent rows each GPU holds (dealt round-robin)."""
    bad = [t.name for t in w.tables if t.pooling != 1]
    if bad:
        raise InputError(
            f"HugeCTR's hybrid embedding takes one-hot slots (one lookup per sample and table), "
            f"but table(s) {', '.join(bad[:5])} have pooling != 1",
            field="plan",
            allowed="a workload with pooling 1 on every table, or another planner",
        )
    kind = s.kind(nodes)
    G = w.batch_per_gpu * n
    thr = count_threshold(s, kind, n, nodes, G)
    samples = float(G) * s.iterations
    shards, total = [], 0
    for t in w.tables:
        k, share = frequent_rows(t.rows, t.pooling, w.zipf_alpha, samples, thr)
        total += k
        ranks = tuple(range(n))
        rest = t.rows - k  # dealt round-robin: rest // n each, one more on the first rest % n
        rows = tuple(rest // n + (1 if i < rest % n else 0) for i in range(n))
        hier = kind == "IB_NVLink_Hier"
        shards.append(
            Shard(t.index, "HYB", ranks, rows=rows, frequent_rows=k, frequent_share=share,
                  hierarchical=hier)
        )  # fmt: skip
    cap = s.max_num_frequent_categories * max(G, s.eval_batch)
    if total > cap:
        raise InputError(
            f"the hybrid embedding finds {total} frequent categories but holds at most {cap:g} "
            f"(max_num_frequent_categories × the larger of the train and eval batch)",
            field="max_num_frequent_categories",
            allowed=f"at least {total / max(G, s.eval_batch):.3g}",
        )
    return Plan(f"hugectr_hybrid_{kind}", tuple(shards))
