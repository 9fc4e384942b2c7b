"""A built cluster: spec + hardware graph + router, the object every simulation runs on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from zionsim.hardware.graph import HardwareGraph, build_graph
from zionsim.hardware.routing import Router
from zionsim.hardware.topology import ClusterSpec, load_topology


@dataclass(frozen=True)
class Cluster:
    """``spec`` built into its hardware graph ``hw`` with a ``router``.

    ``gpus`` are the GPU device ids in rank order; ``graph`` is the hardware graph as a
    ``networkx.DiGraph`` (built on first use: simulations never need it).
    """

    spec: ClusterSpec
    hw: HardwareGraph
    router: Router

    @cached_property
    def graph(self):
        """The hardware graph as a ``networkx.DiGraph`` (see ``zionsim.hardware.graph``)."""
        return self.hw.to_networkx()

    @classmethod
    def build(cls, spec: ClusterSpec) -> Cluster:
        """Build the graph and router of an already loaded ``spec``."""
        graph = build_graph(spec)
        return cls(spec, graph, Router(graph))

    @classmethod
    def load(cls, topology: str, **kwargs) -> Cluster:
        """Build a cluster from a topology name or path (``nodes=``, ``overrides=`` …)."""
        return cls.build(load_topology(topology, **kwargs))

    @cached_property
    def gpus(self) -> np.ndarray:
        """GPU device ids in rank order (node-major): rank ``r`` is ``gpus[r]``."""
        return self.router.gpus()

    def node_of(self, devices: np.ndarray) -> np.ndarray:
        """Node index of device ids (every node has the same devices, numbered node-major)."""
        return np.asarray(devices) // self.router.per_node

    def local_of(self, devices: np.ndarray) -> np.ndarray:
        """Local GPU index of GPU device ids."""
        return self.router.local_gpu_index[np.asarray(devices) % self.router.per_node]


@dataclass(frozen=True)
class NodeSubset(Cluster):
    """The cluster seen by a job placed on some of its ``nodes`` (``sim/jobs.py``): the whole
    spec, graph and router (its flows cross the shared fabric), but only those nodes' GPUs as
    ranks, node-major in the order given."""

    nodes: tuple[int, ...] = ()

    @cached_property
    def gpus(self) -> np.ndarray:
        """GPU device ids of the job's nodes: rank ``r`` is ``gpus[r]``."""
        per_node = self.router.gpus().reshape(self.spec.nodes, -1)
        return per_node[np.asarray(self.nodes, dtype=np.int64)].ravel()


def on_nodes(cluster: Cluster, nodes) -> NodeSubset:
    """``cluster`` as a job on ``nodes`` (node indices, rank order) sees it."""
    return NodeSubset(cluster.spec, cluster.hw, cluster.router, tuple(int(k) for k in nodes))
