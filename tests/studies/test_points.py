"""Point files: sealed with hashes; on resume an edited, stale or foreign file is recomputed and
the user told, an intact one reused untouched."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TINY
from zionsim.studies import points as pt
from zionsim.studies import sweep as sw

SWEEP = {
    "base": {"topology": TINY, "workload": "tiny", "iterations": 2, "nodes": 1},
    "grid": {"batch_per_gpu": [16, 32]},
}


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """The 2-point sweep run once in-process: (folder, table, {batch: point file})."""
    out = tmp_path_factory.mktemp("pts")
    table = sw.run_sweep(sw.sweep_from_dict(SWEEP), out, workers=1, progress=False)
    pairs = zip(table.batch_per_gpu, table.point_id, strict=True)
    files = {int(b): pt.point_path(out, i) for b, i in pairs}
    return out, table, files


def _copy(done, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(done[0], out)
    return out, {b: out / "points" / f.name for b, f in done[2].items()}


def _resume(out, workers: int = 1):
    said: list[str] = []
    table = sw.run_sweep(
        sw.sweep_from_dict(SWEEP), out, workers, progress=False, notify=said.append
    )
    return table, said


def test_records_are_sealed_and_reused_untouched(done, tmp_path):
    """Every file carries the four hashes; a resume reuses both files and says nothing."""
    out, files = _copy(done, tmp_path)
    for f in files.values():
        rec = json.loads(f.read_text())
        assert all(len(rec[h]) == 64 for h in pt.HASHES)
        assert rec["model_sha256"] == pt.model_version()
    before = {b: f.stat().st_mtime_ns for b, f in files.items()}
    _, said = _resume(out)
    assert said == [] and {b: f.stat().st_mtime_ns for b, f in files.items()} == before


def test_an_edited_ok_file_with_wrong_figures_is_recomputed(done, tmp_path):
    """A failed point edited to `status: ok` with invented figures is detected and redone."""
    out, files = _copy(done, tmp_path)
    rec = json.loads(files[16].read_text())
    rec["figures"]["samples_per_s"] = 1e12
    files[16].write_text(json.dumps(rec))
    table, said = _resume(out)
    assert len(said) == 1 and "edited" in said[0] and rec["point_id"] in said[0]
    row = table.set_index("batch_per_gpu").loc[16]
    assert row["samples_per_s"] == done[1].set_index("batch_per_gpu").loc[16, "samples_per_s"]


def test_parameters_that_do_not_match_their_hash_are_recomputed(done, tmp_path):
    """A file of another point renamed to this point's id, hashes and all, is not reused."""
    out, files = _copy(done, tmp_path)
    files[16].write_text(files[32].read_text())
    table, said = _resume(out)
    assert len(said) == 1 and "parameters differ" in said[0]
    assert list(table.sort_values("batch_per_gpu")["samples_per_s"]) == list(
        done[1].sort_values("batch_per_gpu")["samples_per_s"]
    )


def test_another_model_version_recomputes_every_point(done, tmp_path, monkeypatch):
    """A changed model hash (new code or data) makes every file stale, in one message."""
    out, files = _copy(done, tmp_path)
    before = {b: f.stat().st_mtime_ns for b, f in files.items()}
    monkeypatch.setattr(pt, "model_version", lambda: "0" * 64)
    monkeypatch.setattr(sw, "model_version", lambda: "0" * 64)
    _, said = _resume(out, workers=2)  # a pool (one worker is this process, patched too)
    assert "another model version" in said[0] and "2 point file(s)" in said[0]
    assert all(f.stat().st_mtime_ns != before[b] for b, f in files.items())
    # the pool's workers still run the real model: the user is told, once
    assert len(said) == 2 and "worker running another zionsim model version" in said[1]


def test_a_changed_input_file_recomputes(done, tmp_path):
    """Editing the topology file the points name makes their files stale."""
    topo = tmp_path / "topo.yaml"
    topo.write_text(open(TINY).read())
    sweep = {**SWEEP, "base": {**SWEEP["base"], "topology": str(topo)}}
    out = tmp_path / "s"
    sw.run_sweep(sw.sweep_from_dict(sweep), out, progress=False)
    topo.write_text(open(TINY).read() + "\n# edited\n")
    said: list[str] = []
    sw.run_sweep(sw.sweep_from_dict(sweep), out, progress=False, notify=said.append)
    assert len(said) == 1 and "input file changed" in said[0]


def test_unsealed_files_of_an_older_zionsim_are_recomputed(done, tmp_path):
    """A record without hashes (the old format) is not trusted."""
    out, files = _copy(done, tmp_path)
    rec = json.loads(files[32].read_text())
    for h in pt.HASHES:
        rec.pop(h)
    files[32].write_text(json.dumps(rec))
    _, said = _resume(out)
    assert len(said) == 1 and "not sealed" in said[0]
    assert "record_sha256" in json.loads(files[32].read_text())


def test_reuse_problem_names_missing_and_failed():
    """No file, or a failed point: rerun quietly (the reasons _QUIET lists)."""
    point = {"point_id": "x", "nodes": 1}
    assert pt.reuse_problem(None, point, "") == "missing"
    assert pt.reuse_problem({"status": "error"}, point, "") == "failed before"
    assert set(pt._QUIET) == {"missing", "failed before"}
