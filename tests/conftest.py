"""Shared fixtures: a tiny world (2 nodes × 2 GPUs) and paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from zionsim.hardware.cluster import Cluster

DATA = Path(__file__).parent / "data"
TINY = str(DATA / "tiny_cluster.yaml")


@pytest.fixture(scope="session")
def tiny_cluster() -> Cluster:
    """2 nodes × 2 GPUs on NVSwitch, 2 NICs per node, ideal links."""
    return Cluster.load(TINY)


@pytest.fixture(scope="session")
def zionex1() -> Cluster:
    """One ZionEX node (8 × A100 on NVSwitch)."""
    return Cluster.load("zionex", nodes=1)
