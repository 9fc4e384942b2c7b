"""The study notebooks execute (shrunk by ZIONSIM_NOTEBOOK_FAST=1) and use only the public API."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
NAMES = [
    "zion_vs_zionex",
    "scaling",
    "whatif_hardware",
    "shadowsync",
    "seeds",
    "placement",
    "variability",
]


def test_the_study_notebooks_are_committed_with_outputs():
    """Each notebook exists and its code cells carry outputs from a real execution."""
    assert sorted(p.stem for p in NOTEBOOKS) == sorted(NAMES)
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert all(c.get("execution_count") for c in code), path.name
        assert any(o.get("data", {}).get("image/png") for c in code for o in c["outputs"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_uses_only_the_public_api(path):
    """Code cells import zionsim only as `import zionsim as zs`."""
    code = "\n".join(
        "".join(c["source"])
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code"
    )
    assert "import zionsim as zs" in code
    assert not re.search(r"from zionsim|import zionsim\.|zs\.\w+\.\w+\(", code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_fast(path, tmp_path, monkeypatch):
    """The notebook runs top to bottom in a temporary copy with ZIONSIM_NOTEBOOK_FAST=1."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("ZIONSIM_NOTEBOOK_FAST", "1")
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    nb = nbformat.read(copy, as_version=4)
    client = NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
