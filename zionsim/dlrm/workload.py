"""DLRM workloads: a workload YAML → :class:`WorkloadSpec` (schema in ``docs/workloads.md``).

A workload says what is trained (tables, MLPs, interaction, precisions, optimizers, batch), not
where: the cluster is the topology and the placement of tables is the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from zionsim.base import bounds
from zionsim.base.config import Fields, load_with_overrides
from zionsim.base.errors import InputError
from zionsim.dlrm.sync import sync_spec

#: bytes per element of each precision (int8 rows carry a row-wise scale and bias, see
#: :func:`row_bytes`)
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1}
EMBEDDING_DTYPES = ("fp32", "fp16", "bf16", "int8")
DENSE_DTYPES = ("fp32", "tf32", "fp16", "bf16")
COMM_DTYPES = ("fp32", "fp16", "bf16")
#: optimizer state: (values per element, values per row), each a 4-byte float
EMBEDDING_OPTIMIZERS = {"sgd": (0, 0), "adagrad": (1, 0), "rowwise_adagrad": (0, 1), "adam": (2, 0)}
#: how a sample's ids of a pooled table are drawn (``cache.py``): each an independent Zipf draw,
#: or MLPerf DLRM-DCNv2's synthetic lists (the one-hot id and fixed uniform random rows)
MULTI_HOT = ("independent", "fixed_uniform")
DENSE_OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2, "lamb": 2}
INTERACTIONS = ("dot", "concat", "dcn", "reduce", "projection")
#: interaction kinds whose output width the workload states (``interaction.output_width``)
STATED_WIDTH = ("reduce", "projection")
WORKLOAD_KEYS = {
    "sync",
    "zipf_alpha",
    "multi_hot",
    "batch_per_gpu",
    "dense_features",
    "precision",
    "optimizer",
    "tables",
    "bottom_mlp",
    "top_mlp",
    "interaction",
    "index_bytes",
}
TOP_KEYS = WORKLOAD_KEYS | {"name", "description", "references"}


@dataclass(frozen=True)
class Table:
    """One embedding table; ``index`` is its feature position in the model."""

    index: int
    name: str
    rows: int
    dim: int
    pooling: float


@dataclass(frozen=True)
class WorkloadSpec:
    """A validated DLRM workload (``workloads/*.yaml``): per-GPU batch, precisions, optimizers,
    embedding tables, MLP widths (elements) and the interaction; built by :func:`load_workload`."""

    name: str
    description: str
    batch_per_gpu: int
    dense_features: int
    precision: dict[str, str]
    optimizer: dict[str, str]
    tables: tuple[Table, ...]
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    interaction: str
    dcn_layers: int = 0
    dcn_low_rank: int = 0
    #: stated output width of a ``reduce`` or ``projection`` interaction (0 otherwise)
    interaction_width: int = 0
    index_bytes: int = 8
    #: skew of row accesses (Zipf exponent), for the HBM cache of UVM tables (``cache.py``)
    zipf_alpha: float = 1.0
    #: how a pooled table's ids are drawn (:data:`MULTI_HOT`; distinct rows per batch,
    #: ``cache.py``)
    multi_hot: str = "independent"
    #: dense-parameter sync (``sync.py``): mode, every, servers, period_s, trainer
    sync: dict = field(default_factory=dict, compare=False)
    file: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def embedding_width(self) -> int:
        """Sum of all table widths (elements)."""
        return sum(t.dim for t in self.tables)

    @cached_property
    def interaction_input_width(self) -> int:
        """Elements per sample entering the interaction: bottom-MLP output + pooled embeddings."""
        return self.bottom_mlp[-1] + self.embedding_width

    @cached_property
    def top_input_width(self) -> int:
        """Input width of the top MLP: what the interaction outputs per sample — the bottom MLP's
        output plus, for ``dot``, one pairwise dot product per pair of the F = tables + 1
        features; the stated ``output_width`` for ``reduce``/``projection``; else every input."""
        d, n_feat = self.bottom_mlp[-1], len(self.tables) + 1
        if self.interaction == "dot":
            return d + n_feat * (n_feat - 1) // 2
        if self.interaction in STATED_WIDTH:
            return self.interaction_width
        return self.interaction_input_width

    @cached_property
    def interaction_flops_per_sample(self) -> float:
        """Forward FLOPs per sample of the interaction (multiply-adds count 2; element-wise
        ``reduce``/``concat`` count nothing, as GEMM-only FLOP counts do)."""
        d, n_feat, n = self.bottom_mlp[-1], len(self.tables) + 1, self.interaction_input_width
        if self.interaction == "dot":
            return 2.0 * n_feat * n_feat * d
        if self.interaction == "dcn":
            return self.dcn_layers * 2.0 * (2 * n * self.dcn_low_rank)
        if self.interaction == "projection":
            return 2.0 * n * self.interaction_width
        return 0.0

    @cached_property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample of the dense part (MLPs and interaction), the figure papers
        quote as "FLOPs/sample" (Neo, Table 3); backward adds about twice as much."""
        mlp = sum(2.0 * i * o for i, o in self.bottom_layers() + self.top_layers())
        return mlp + self.interaction_flops_per_sample

    def top_layers(self) -> list[tuple[int, int]]:
        """(in, out) of each top-MLP layer."""
        widths = [self.top_input_width, *self.top_mlp]
        return list(zip(widths[:-1], widths[1:], strict=True))

    def bottom_layers(self) -> list[tuple[int, int]]:
        """(in, out) of each bottom-MLP layer."""
        return list(zip(self.bottom_mlp[:-1], self.bottom_mlp[1:], strict=True))

    @cached_property
    def dense_params(self) -> int:
        """Weights and biases of both MLPs and the DCN layers."""
        mlp = sum(i * o + o for i, o in self.bottom_layers() + self.top_layers())
        return mlp + self.interaction_params

    @cached_property
    def interaction_params(self) -> int:
        """Weights and biases of the interaction: DCN cross layers or a projection."""
        n = self.interaction_input_width
        if self.interaction == "dcn":
            return self.dcn_layers * (2 * n * self.dcn_low_rank + n)
        if self.interaction == "projection":
            return n * self.interaction_width + self.interaction_width
        return 0

    @cached_property
    def embedding_params(self) -> int:
        """Parameters of all embedding tables: Σ rows × dim."""
        return sum(t.rows * t.dim for t in self.tables)


def row_bytes(dim: int, dtype: str) -> int:
    """Stored bytes of one embedding row; INT8 rows carry an FP16 scale and bias (FBGEMM's
    fused 8-bit row-wise format)."""
    return dim * DTYPE_BYTES[dtype] + (4 if dtype == "int8" else 0)


def load_workload(
    name_or_path: str | Path,
    *,
    overrides: dict[str, Any] | list[str] | None = None,
    batch_per_gpu: int | None = None,
) -> WorkloadSpec:
    """Load a built-in workload by name, or a YAML path, with ``--set`` overrides.

    >>> load_workload("tiny").top_input_width
    26
    """
    data, file = load_with_overrides(name_or_path, "workloads", overrides)
    if batch_per_gpu is not None:
        data["batch_per_gpu"] = batch_per_gpu
    return workload_from_dict(data, file)


def workload_from_dict(data: dict, file: str = "<workload>") -> WorkloadSpec:
    """Validate a workload mapping; every error names the file and the field."""
    f = Fields(data, file)
    f.check_keys(TOP_KEYS)
    p, o = f.sub("precision"), f.sub("optimizer")
    p.check_keys({"embedding", "dense", "communication"})
    o.check_keys({"embedding", "dense"})
    inter = f.sub("interaction")
    kind = inter.choice("kind", INTERACTIONS)
    allowed = {"dcn": {"layers", "low_rank"}}.get(kind, set())
    allowed |= {"output_width"} if kind in STATED_WIDTH else set()
    inter.check_keys({"kind", "description"} | allowed)
    bottom, top = _widths(f, "bottom_mlp", 2), _widths(f, "top_mlp", 1)
    spec = WorkloadSpec(
        name=str(f.raw("name", Path(file).stem)),
        description=str(f.raw("description", "")),
        batch_per_gpu=f.integer("batch_per_gpu"),
        dense_features=f.integer("dense_features"),
        precision={
            "embedding": p.choice("embedding", EMBEDDING_DTYPES),
            "dense": p.choice("dense", DENSE_DTYPES),
            "communication": p.choice("communication", COMM_DTYPES),
        },
        optimizer={
            "embedding": o.choice("embedding", tuple(EMBEDDING_OPTIMIZERS)),
            "dense": o.choice("dense", tuple(DENSE_OPTIMIZERS)),
        },
        tables=_tables(f),
        bottom_mlp=bottom,
        top_mlp=top,
        interaction=kind,
        dcn_layers=inter.integer("layers") if kind == "dcn" else 0,
        dcn_low_rank=inter.integer("low_rank") if kind == "dcn" else 0,
        interaction_width=inter.integer("output_width") if kind in STATED_WIDTH else 0,
        index_bytes=f.integer("index_bytes", 8),
        zipf_alpha=f.quantity("zipf_alpha", "fraction", 1.0, strict=False),
        multi_hot=f.choice("multi_hot", MULTI_HOT, "independent"),
        sync=sync_spec(base=f.raw("sync", {}), file=file).to_dict(),
        file=file,
        raw=data,
    )
    if spec.dense_features != bottom[0]:
        raise f.error(
            "bottom_mlp", f"first width {bottom[0]} must equal dense_features {spec.dense_features}"
        )
    if kind == "dot":
        bad = [t for t in spec.tables if t.dim != bottom[-1]]
        if bad:
            raise f.error(
                "tables",
                f"table {bad[0].name!r} has dim {bad[0].dim}, but dot "
                f"interaction needs every dim equal to bottom_mlp[-1] = {bottom[-1]}",
            )
    return spec


def _widths(f: Fields, key: str, minimum: int) -> tuple[int, ...]:
    value = f.raw(key)
    if not isinstance(value, list) or not minimum <= len(value) <= bounds.FIELDS["layers"].high:
        raise f.error(
            key, f"expected a list of at least {minimum} positive integers, got {value!r}"
        )
    return tuple(
        bounds.count(v, "width", file=f.file, field=f"{f.path(key)}[{i}]")
        for i, v in enumerate(value)
    )


def _tables(f: Fields) -> tuple[Table, ...]:
    items = f.raw("tables")
    if not isinstance(items, list) or not items:
        raise f.error("tables", "expected a non-empty list of tables")
    out: list[Table] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        t = Fields(item, f.file, f"tables[{i}]")
        t.check_keys({"name", "count", "rows", "dim", "pooling"})
        name, count = str(t.raw("name", f"t{i}")), t.integer("count", 1)
        if name in names:
            raise t.error("name", f"duplicate table name {name!r}")
        names.add(name)
        rows, dim = t.integer("rows"), t.integer("dim")
        pooling = t.quantity("pooling", "fraction")
        bounds.count(len(out) + count, "tables", file=f.file, field=f"tables[{i}].count")
        for c in range(count):
            out.append(Table(len(out), name if count == 1 else f"{name}_{c}", rows, dim, pooling))
    return tuple(out)


def with_precision(spec: WorkloadSpec, precision: dict[str, str]) -> WorkloadSpec:
    """``spec`` trained in other precisions (keys ``embedding``, ``dense``, ``communication``);
    ``spec`` itself when nothing changes."""
    merged = {**spec.precision, **precision}
    if merged == spec.precision:
        return spec
    return workload_from_dict({**spec.raw, "precision": merged}, spec.file)


def with_global_batch(spec: WorkloadSpec, global_batch: int, gpus: int) -> WorkloadSpec:
    """``spec`` with the per-GPU batch implied by ``global_batch`` on ``gpus`` GPUs."""
    global_batch = bounds.count(global_batch, "global_batch", field="--global-batch")
    if global_batch % gpus:
        raise InputError(
            f"global batch {global_batch} is not a multiple of {gpus} GPUs", field="--global-batch"
        )
    return workload_from_dict({**spec.raw, "batch_per_gpu": global_batch // gpus}, spec.file)
