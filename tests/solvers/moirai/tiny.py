"""Tiny random latency problems and an independent brute force over placements and orders."""

from __future__ import annotations

import itertools

import numpy as np

from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Topology


def tiny_problem(seed: int, n_ops: int = 5, n_dev: int = 3, training: bool = False,
                 memory_gib: float = 16.0) -> Problem:
    """A random DAG on heterogeneous devices with asymmetric channels (2 or 3 devices)."""
    rng = np.random.default_rng(seed)
    ops = ["aten.mm", "aten.add", "aten.relu", "aten.gelu", "aten.bmm"]
    nodes = [Node(f"v{i}", ops[int(rng.integers(len(ops)))], float(rng.uniform(1e-3, 5e-3)),
                  bwd_s=float(rng.uniform(1e-3, 8e-3)), param_bytes=float(rng.integers(1, 4)) * 2**28,
                  act_bytes=float(rng.integers(1, 4)) * 2**26, mem_fwd_bytes=float(rng.integers(0, 3)) * 2**26)
             for i in range(n_ops)]
    edges = [Edge(f"v{i}", f"v{j}", float(rng.uniform(1e6, 8e6)))
             for i in range(n_ops) for j in range(i + 1, n_ops) if rng.random() < 0.45]
    speeds = rng.uniform(0.5, 2.0, size=n_dev)
    devices = [Device(f"d{k}", kind=f"K{k}", memory_bytes=memory_gib * 2**30, speed=float(speeds[k]))
               for k in range(n_dev)]
    bw = rng.uniform(0.5e9, 3e9, size=(n_dev, n_dev))
    lat = rng.uniform(1e-5, 2e-4, size=(n_dev, n_dev))
    topo = Topology.from_matrices(f"tiny{seed}", devices, bw.tolist(), lat.tolist())
    return Problem(OpGraph.build(f"tiny{seed}", nodes, edges), topo, "latency",
                   ProblemSettings(pass_="training" if training else "forward"))


def linear_extensions(graph: OpGraph) -> list[list[int]]:
    """Every topological order of ``graph``'s ops."""
    out: list[list[int]] = []

    def rec(prefix: list[int], indeg: list[int]) -> None:
        if len(prefix) == graph.n_ops:
            out.append(list(prefix))
            return
        for v in range(graph.n_ops):
            if indeg[v] == 0 and v not in prefix:
                prefix.append(v)
                for s in graph.succ[v]:
                    indeg[s] -= 1
                rec(prefix, indeg)
                for s in graph.succ[v]:
                    indeg[s] += 1
                prefix.pop()

    rec([], [len(p) for p in graph.pred])
    return out


def plan_of(problem: Problem, device_of: tuple[int, ...], order: list[int]) -> Plan:
    """A latency plan: one stage per used device, ``order`` induced by the global ``order``."""
    g, topo = problem.graph, problem.topology
    per: dict[int, list[str]] = {}
    for v in order:
        per.setdefault(device_of[v], []).append(g.nodes[v].id)
    stages = tuple(Stage(tuple(ops), (topo.devices[k].id,)) for k, ops in sorted(per.items()))
    return Plan(stages=stages, order={topo.devices[k].id: tuple(ops) for k, ops in per.items()})


def candidates(problem: Problem) -> itertools.product[tuple[int, ...]]:
    return itertools.product(range(problem.topology.n_devices), repeat=problem.graph.n_ops)
