"""GPU presets: ``gpu: h100`` in a topology, or ``--set gpu=h100`` on any topology.

The presets, each number with its source, are data: ``zionsim/data/gpus.yaml`` (V100, A100 40 GB
and 80 GB, H100 SXM, H200, B200).  :func:`expand_gpu_preset` is the one place a preset is resolved:
it replaces the ``gpu`` of a topology mapping by the preset's GPU fields (model, architecture,
peak FLOP/s per dtype, HBM capacity and bandwidth) and, on an NVLink fabric, the NVLink the SXM
part implies: on an NVSwitch, the link speed, links per GPU and NVSwitch generation; on a mesh,
the link speed (the wiring stays the topology's).  ``gpu: {preset: h100, hbm: 96 GB}`` takes a
preset and changes some of its fields.  A preset may also carry ``compute:``, kernel-model
parameters measured on that part (the ``compute:`` section of a topology, ``docs/topologies.md``),
which it brings along unless the topology has a ``compute:`` of its own.  The result is validated
like any topology mapping.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from zionsim.base.errors import InputError

PRESET_FILE = Path(__file__).resolve().parent.parent / "data" / "gpus.yaml"


@lru_cache(maxsize=1)
def load_presets() -> dict[str, dict]:
    """``{name: preset}`` of ``gpus.yaml``; each preset has ``gpu``, ``nvlink`` and ``aliases``."""
    return yaml.safe_load(PRESET_FILE.read_text())["presets"]


def preset_names() -> list[str]:
    """The presets' names (aliases not included), in file order."""
    return list(load_presets())


def _key(name: str) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


def find_preset(name: str, file: str = "<topology>", field: str = "gpu") -> tuple[str, dict]:
    """The preset called ``name`` or one of its aliases (case, ``-``, ``_`` and spaces alike):
    ``(name, preset)``; an :class:`InputError` naming ``file`` and ``field`` when there is none."""
    key = _key(name)
    for preset_name, preset in load_presets().items():
        if key == preset_name or key in preset.get("aliases", ()):
            return preset_name, preset
    raise InputError(
        f"unknown GPU preset {name!r}",
        file=file,
        field=field,
        allowed=", ".join(preset_names()) + " (or a gpu: mapping)",
    )


def expand_gpu_preset(data: dict, file: str = "<topology>") -> dict:
    """A copy of the topology mapping ``data`` with its ``gpu`` preset resolved; ``data`` itself
    when ``gpu`` is an ordinary mapping."""
    gpu = data.get("gpu")
    if isinstance(gpu, str):
        name, extra = gpu, {}
    elif isinstance(gpu, dict) and "preset" in gpu:
        name, extra = gpu["preset"], {k: v for k, v in gpu.items() if k != "preset"}
        if not isinstance(name, str):
            raise InputError(f"expected a preset name, got {name!r}", file=file, field="gpu.preset")
    else:
        return data
    _, preset = find_preset(name, file, "gpu" if isinstance(gpu, str) else "gpu.preset")
    out = dict(data)
    out["gpu"] = {**preset["gpu"], "flops": dict(preset["gpu"]["flops"]), **extra}
    if "compute" in preset and "compute" not in data:  # the part's own kernel measurements
        out["compute"] = copy.deepcopy(preset["compute"])
    scale_up = data.get("scale_up")
    if isinstance(scale_up, dict) and scale_up.get("kind") in ("nvswitch", "mesh"):
        nvlink = preset["nvlink"]
        keep = ("link_bw",) if scale_up["kind"] == "mesh" else tuple(nvlink)
        out["scale_up"] = {**scale_up, **{k: nvlink[k] for k in keep}}
    return out
