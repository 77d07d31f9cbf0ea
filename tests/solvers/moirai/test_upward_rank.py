"""The warm start's upward rank (HEFT's rank_u) equals its definition with every channel's postal time."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.cost.comm import transfer_s
from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import Instance, build_instance
from solvers.moirai.warmstart import upward_rank


def _by_definition(inst: Instance) -> list[float]:
    """Mean task time plus the heaviest path to a sink, each message the mean over the ordered device pairs."""
    k, topology = inst.n_devices, inst.problem.topology
    off = [(a, b) for a in range(k) for b in range(k) if a != b]
    rank = [0.0] * inst.n_tasks
    for t in reversed(inst.topo):
        best = 0.0
        for s, size in inst.succ[t]:
            comm = float(np.mean([transfer_s(topology, a, b, size) for a, b in off])) if off else 0.0
            best = max(best, comm + rank[s])
        rank[t] = float(inst.dur_s[t].mean()) + best
    return rank


@pytest.mark.parametrize(("nodes", "gpus", "pass_"), [(1, 1, "forward"), (2, 2, "training"), (2, 3, "forward")])
def test_upward_rank_is_its_definition(nodes: int, gpus: int, pass_: str) -> None:
    graph = generate_graph("random_dag", n_ops=120, width=5, edge_prob=0.3, max_skip=3, bytes_max=1e7, seed=7)
    problem = Problem(graph, generate_topology("hierarchical", nodes=nodes, gpus_per_node=gpus), "latency",
                      ProblemSettings(pass_=pass_))
    inst = build_instance(problem, identity_grouping(graph))
    assert upward_rank(inst) == _by_definition(inst)  # bit for bit: the same sums in the same order
