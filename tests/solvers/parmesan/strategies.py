"""Hypothesis strategies and small fixtures shared by the Parmesan tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology

GiB = float(2**30)


def random_dag(seed: int, n_ops: int, edge_prob: float = 0.35) -> OpGraph:
    """A random DAG on ``n_ops`` ops (edges only from lower to higher index, so usually many orders)."""
    rng = np.random.default_rng(seed)
    nodes = [Node(f"v{i}", "op", float(rng.uniform(0.1, 2.0)) * 1e-3, float(rng.uniform(0.1, 2.0)) * 1e-3,
                  float(rng.uniform(0, 1e6)), float(rng.uniform(1e5, 1e6)), 1e5, 1e5) for i in range(n_ops)]
    edges = [Edge(f"v{i}", f"v{j}", float(rng.uniform(1e5, 4e6)))
             for i in range(n_ops) for j in range(i + 1, n_ops) if rng.random() < edge_prob]
    return OpGraph.build(f"dag{seed}", nodes, edges)


def random_topology(seed: int, n_devices: int, memory_bytes: float = 16 * GiB) -> Topology:
    """A fully heterogeneous topology (uniform random bandwidths, like the paper's uniform_dist)."""
    rng = np.random.default_rng(seed + 7919)
    bw = rng.uniform(1e8, 1e10, size=(n_devices, n_devices))
    bw = (bw + bw.T) / 2
    lat = np.full((n_devices, n_devices), 1e-6)
    devices = [Device(f"d{i}", "GPU", f"n{i // 4}", memory_bytes) for i in range(n_devices)]
    return Topology.from_matrices("random", devices, bw.tolist(), lat.tolist())


def problem_of(graph: OpGraph, topo: Topology, **settings: object) -> Problem:
    return Problem(graph, topo, "throughput", ProblemSettings(**settings))  # type: ignore[arg-type]


dag_seeds = st.integers(min_value=0, max_value=10_000)


def compute_only_problem(graph: OpGraph, n_devices: int = 6, n_stages: int = 6) -> Problem:
    """The compute-only setting: zero edge bytes, no memory limit, identical devices and channels,
    ``n_stages`` stages of one replica, one micro-batch, under 1F1B (the solver's own stages)."""
    graph = OpGraph.build(graph.name, list(graph.nodes), [Edge(e.src, e.dst, 0.0) for e in graph.edges],
                          profiled_batch_size=graph.profiled_batch_size)
    devices = [Device(f"d{i}", "GPU", f"h{i}", 1e18) for i in range(n_devices)]
    links = [Link(a.id, b.id, 1e10, 0.0) for i, a in enumerate(devices) for b in devices[i + 1:]]
    return problem_of(graph, Topology.from_links("identical", devices, links), stages=n_stages, replicas=1,
                      micro_batches=(1,), schedule="1f1b")
