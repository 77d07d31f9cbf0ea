"""M-TOPO, DFS-TOPO and CPD-TOPO (Celeritas §4.2.2, §5.1.3, Algorithm 1)."""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.celeritas import orders
from solvers.celeritas.fusion import coarse_task_graph, fuse
from solvers.celeritas.solver import _order_and_blevel, task_order
from solvers.listsched import latency_costs, op_task_graph
from solvers.listsched.orders import b_level, is_topological, levels, m_topo_order
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Topology
from tests.strategies import dag_graphs, examples, topologies


def _lists(g: OpGraph) -> tuple[list[list[int]], list[list[int]]]:
    return g.succ, g.pred


@settings(max_examples=examples(60), deadline=None)
@given(dag_graphs(max_ops=14, edge_p=0.3))
def test_every_order_is_topological(g: OpGraph) -> None:
    succ, pred = _lists(g)
    out_b = [[g.edges[e].bytes for e in out] for out in g.out_edges]
    in_b = [[g.edges[e].bytes for e in inn] for inn in g.in_edges]
    for order in (m_topo_order(succ, pred), orders.dfs_topo_order(succ, pred),
                  orders.cpd_topo_order(succ, out_b, pred, in_b, g.fwd_s, 1e-3, 1e-6)):
        assert is_topological(order, succ)


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(max_ops=8, edge_p=0.4))
def test_levels_are_longest_paths(g: OpGraph) -> None:
    """tlevel (Eq. 2) and blevel (Eq. 3) against an enumeration of all paths."""
    succ, pred = _lists(g)
    w = g.fwd_s
    size = {(int(s), int(d)): float(b) for s, d, b in zip(g.edge_src, g.edge_dst, g.edge_bytes, strict=True)}
    c = {e: 1e-3 + b * 1e-6 if b > 0 else 0.0 for e, b in size.items()}
    succ_b = [[size[(v, s)] for s in succ[v]] for v in range(g.n_ops)]
    pred_b = [[size[(p, v)] for p in pred[v]] for v in range(g.n_ops)]
    tlevel, blevel = levels(succ, succ_b, pred, pred_b, w, 1e-3, 1e-6)

    def paths_from(v: int) -> list[list[int]]:
        return [[v]] + [[v, *rest] for s in succ[v] for rest in paths_from(s)]

    def length(path: list[int]) -> float:
        return sum(w[u] for u in path) + sum(c[(a, b)] for a, b in itertools.pairwise(path))

    for v in range(g.n_ops):
        down = max(length(p) for p in paths_from(v) if not succ[p[-1]])
        assert abs(blevel[v] - down) < 1e-9
        ups = [length(p) - w[v] for u in range(g.n_ops) for p in paths_from(u) if p[-1] == v and not pred[u]]
        assert abs(tlevel[v] - max(ups)) < 1e-9


def test_dfs_follows_a_path_where_m_topo_goes_breadth_first() -> None:
    """Figure 3: two chains a0->a1->a2 and b0->b1->b2; DFS-TOPO keeps each chain together."""
    succ = [[1], [2], [], [4], [5], []]
    pred = [[], [0], [1], [], [3], [4]]
    assert m_topo_order(succ, pred).tolist() == [0, 3, 1, 4, 2, 5]
    assert orders.dfs_topo_order(succ, pred).tolist() == [0, 1, 2, 3, 4, 5]


def test_cpd_topo_takes_the_critical_child_first() -> None:
    """Source 0 feeds a light child 1 and a heavy child 2: CPD-TOPO outputs 2 (larger cpath)
    right after 0 and follows its path before coming back to 1 (Algorithm 1, lines 16–20)."""
    succ = [[1, 2], [3], [4], [], []]
    pred = [[], [0], [0], [1], [2]]
    w = np.array([1.0, 1.0, 5.0, 1.0, 5.0])
    zero = [[0.0] * len(s) for s in succ]
    zero_in = [[0.0] * len(p) for p in pred]
    assert orders.cpd_topo_order(succ, zero, pred, zero_in, w, 1.0, 1.0).tolist() == [0, 2, 4, 1, 3]


def test_cpd_topo_starts_with_the_source_of_largest_cpath() -> None:
    succ = [[2], [3], [], []]
    pred = [[], [], [0], [1]]
    cpath = np.array([2.0, 9.0, 2.0, 9.0])
    assert orders.cpath_first_order(succ, pred, cpath).tolist() == [1, 3, 0, 2]


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(min_ops=1, max_ops=40, edge_p=0.2), topologies(min_devices=1, max_devices=4), st.booleans())
def test_the_op_blevels_order_the_unfused_coarse_graph(g: OpGraph, topo: Topology, training: bool) -> None:
    """Without fusion the solver orders the coarse graph by the b-levels CPD-TOPO computed for the
    ops (taken in fusion order) instead of computing them again: the same b-levels bit for bit, so
    the same b-level order."""
    problem = Problem(g, topo, "latency", ProblemSettings(pass_="training" if training else "forward"))
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    seq, op_blevel = _order_and_blevel(tasks, costs, "cpd-topo")
    assert op_blevel is not None
    fusion = fuse(g, seq, costs.mean_comm_s(g.edge_bytes), tasks.mem_add_bytes + tasks.mem_work_bytes, 1,
                  float("inf"))
    coarse = coarse_task_graph(g, tasks, fusion)
    f = costs.msg_factor
    fresh = b_level(coarse.succ, coarse.succ_bytes, coarse.dur_s.mean(axis=1), f * costs.mean_latency_s,
                    f * costs.mean_inv_bandwidth_sPB, np.argsort(coarse.rank, kind="stable"))
    assert fresh.tolist() == op_blevel[fusion.seq].tolist()
    assert task_order(coarse, costs, "b-level").tolist() == task_order(coarse, costs, "b-level",
                                                                        op_blevel[fusion.seq]).tolist()


def plain_cpath_first_order(succ: list[list[int]], pred: list[list[int]], cpath: list[float]) -> list[int]:
    """Algorithm 1, lines 6-21, as written: sources by decreasing cpath (ties: lower index first),
    children pushed to the head by increasing cpath (ties: higher index first)."""
    indeg = [len(p) for p in pred]
    queue = deque(sorted((v for v, k in enumerate(indeg) if k == 0), key=lambda v: (-cpath[v], v)))
    out: list[int] = []
    while queue:
        v = queue.popleft()
        out.append(v)
        for s in sorted(succ[v], key=lambda u: (cpath[u], -u)):
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.appendleft(s)
    return out


@settings(max_examples=examples(80))
@given(dag_graphs(min_ops=1, max_ops=30, edge_p=0.3), st.lists(st.sampled_from([0.0, 1.0, 2.5, -0.0, 3.0]),
                                                               min_size=30, max_size=30))
def test_cpath_first_order_as_algorithm_1(g: OpGraph, values: list[float]) -> None:
    """The order (children sorted by one integer rank of ``(cpath, -index)``) is the one of the
    algorithm's sort by ``cpath`` with index tie-breaks, many cpath values tied."""
    cpath = values[:g.n_ops]
    got = orders.cpath_first_order(g.succ, g.pred, np.asarray(cpath)).tolist()
    assert got == plain_cpath_first_order(g.succ, g.pred, cpath)
