"""Workload files: built-ins load, derived sizes are right, bad input names file and field."""

import re

import pytest
import yaml

from zionsim.base.config import builtin_dir, builtin_names
from zionsim.base.errors import InputError
from zionsim.dlrm.workload import load_workload


def test_required_workloads_ship():
    """The six workloads of the brief are built in."""
    need = {"tiny", "mlperf_dlrm", "mlperf_dlrm_dcnv2", "neo_model_a", "neo_model_i", "neo_model_f"}
    assert need <= set(builtin_names("workloads"))


def test_tiny_sizes_by_hand():
    """tiny: 4 tables × 16, dot interaction → top input 16 + C(5,2) = 26; 1,713 dense params."""
    w = load_workload("tiny")
    assert len(w.tables) == 4 and w.top_input_width == 26
    # bottom 8·32+32 + 32·16+16, top 26·32+32 + 32·1+1
    assert w.dense_params == (8 * 32 + 32) + (32 * 16 + 16) + (26 * 32 + 32) + (32 + 1)
    assert w.embedding_params == (1000 + 2000 + 500 + 100) * 16


def test_table_groups_expand():
    """A `count:` group stands for that many tables (Neo model A: 4,096)."""
    assert len(load_workload("neo_model_a").tables) == 4096


def test_overrides():
    """--set changes workload fields; batch_per_gpu is a run option too."""
    w = load_workload("tiny", overrides=["precision.embedding=fp16"], batch_per_gpu=64)
    assert (w.precision["embedding"], w.batch_per_gpu) == ("fp16", 64)


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d.pop("top_mlp"), "top_mlp"),
        (lambda d: d["precision"].update(embedding="fp64"), "precision.embedding"),
        (lambda d: d["tables"][1].update(rows=-5), "tables[1].rows"),
        (lambda d: d.update(batch_per_gpu=0), "batch_per_gpu"),
        (lambda d: d["interaction"].update(kind="attention"), "interaction.kind"),
        (lambda d: d["tables"][0].update(dim=8), "tables"),
    ],
)
def test_malformed_workloads(tmp_path, edit, field):
    """Malformed workloads give an error naming the file and the field."""
    from zionsim.base.config import builtin_dir

    data = yaml.safe_load((builtin_dir("workloads") / "tiny.yaml").read_text())
    edit(data)
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_workload(str(path))
    assert err.value.file == str(path) and err.value.field == field


def _uncited_lines(text: str) -> list[str]:
    """Lines of a shipped YAML that hold a number but name no source: a ``[key]`` of its
    ``references`` (or ``[assumption]``) on the line, on the comment lines right below it, or,
    for a nested line, on its top-level key's line."""
    refs = set(re.findall(r"^  (\w+):", text.split("references:")[1], re.M))
    lines, bad, top, parent = text.splitlines(), [], None, False
    for i, line in enumerate(lines):
        if not line.strip() or line.strip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            top = line.split(":")[0]
        cites = set(re.findall(r"\[([A-Za-z]\w*)", line))
        j = i + 1
        while j < len(lines) and lines[j].strip().startswith("#"):
            cites |= set(re.findall(r"\[([A-Za-z]\w*)", lines[j]))
            j += 1
        if indent == 0:
            parent = bool(cites)
        value = line.split("#")[0]
        value = value if line.strip().startswith("- ") else value.split(":", 1)[-1]
        if top in ("name", "description", "references") or not re.search(r"\d", value):
            continue
        if not ((cites and cites <= refs | {"assumption"}) or (indent and parent)):
            bad.append(line.strip())
    return bad


def test_every_workload_cites_every_number():
    """Each built-in workload loads and names a source for every number it holds."""
    for name in builtin_names("workloads"):
        load_workload(name)
        text = (builtin_dir("workloads") / f"{name}.yaml").read_text()
        assert _uncited_lines(text) == [], name


def test_cache_hit_rate_of_a_shard_below_one_row():
    """A small table split over more GPUs than it has rows gives shards of < 1 row: the hit
    rate is the cached share, not a ZeroDivisionError."""
    from zionsim.dlrm.cache import hit_rate

    assert hit_rate(0.75, 0.5, 1.0) == pytest.approx(0.5 / 0.75)
    assert hit_rate(0.75, 0.75, 1.0) == 1.0
