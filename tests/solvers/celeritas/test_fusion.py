"""Optimal operation fusion: breakpoint DP (Eq. 4–6) against brute force; Lemma 2; Table 2 stats."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.celeritas.fusion import _grouped, ccr, chain_breaks, coarse_task_graph, fuse, optimal_breakpoints
from solvers.celeritas.solver import task_order
from solvers.listsched import latency_costs, op_task_graph
from solvers.listsched.orders import is_topological, m_topo_order
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from tests.solvers import contract_fixtures as fx
from tests.strategies import dag_graphs, examples, topologies


def _brute_force(n: int, src: np.ndarray, dst: np.ndarray, c: np.ndarray, mem: np.ndarray, r_max: int,
                 cap: float, single: np.ndarray | None, breaks: np.ndarray | None = None) -> float:
    best = np.inf
    for mask in range(1 << (n - 1)):
        starts = [0] + [i + 1 for i in range(n - 1) if mask >> i & 1]
        if breaks is not None and not set(np.flatnonzero(breaks).tolist()) <= set(starts):
            continue
        ends = [*starts[1:], n]
        ok = all(e - s == 1 or (e - s <= r_max and mem[s:e].sum() <= cap and (single is None or not single[s:e].any()))
                 for s, e in zip(starts, ends, strict=True))
        if ok and all(e - s <= r_max for s, e in zip(starts, ends, strict=True)):
            cluster = np.zeros(n, dtype=int)
            for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
                cluster[s:e] = k
            best = min(best, float(c[cluster[src] != cluster[dst]].sum()))
    return best


@st.composite
def sequences(draw: st.DrawFn) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, float,
                                        np.ndarray | None, np.ndarray | None]:
    n = draw(st.integers(1, 9))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())]
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    c = np.array([draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])) for _ in pairs])
    mem = np.array([draw(st.sampled_from([0.0, 1.0, 2.0])) for _ in range(n)])
    r_max = draw(st.integers(1, 6))
    cap = draw(st.sampled_from([1.0, 3.0, 5.0, float("inf")]))
    single = np.array([draw(st.booleans()) for _ in range(n)]) if draw(st.booleans()) else None
    breaks = np.array([draw(st.booleans()) for _ in range(n)]) if draw(st.booleans()) else None
    return n, src, dst, c, mem, r_max, cap, single, breaks


@settings(max_examples=examples(150), deadline=None)
@given(sequences())
def test_breakpoint_dp_equals_brute_force(case: tuple) -> None:
    n, src, dst, c, mem, r_max, cap, single, breaks = case
    starts, cut = optimal_breakpoints(src, dst, c, mem, r_max, cap, single, breaks)
    assert abs(cut - _brute_force(n, src, dst, c, mem, r_max, cap, single, breaks)) < 1e-9
    if breaks is not None:
        assert set(np.flatnonzero(breaks).tolist()) <= set(starts.tolist())
    sizes = np.diff(np.append(starts, n))
    assert starts[0] == 0 and (sizes >= 1).all() and (sizes <= r_max).all()
    for s, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        assert size == 1 or mem[s:s + size].sum() <= cap
        assert size == 1 or single is None or not single[s:s + size].any()
    cluster = np.repeat(np.arange(len(starts)), sizes)
    assert abs(float(c[cluster[src] != cluster[dst]].sum()) - cut) < 1e-9


def test_long_sequences_cross_dp_blocks(monkeypatch: object) -> None:
    """The cost band is built in blocks; a tiny block size must not change the optimum."""
    import solvers.celeritas.fusion as fusion

    rng = np.random.default_rng(7)
    n = 300
    src = rng.integers(0, n - 1, 700)
    dst = np.minimum(src + 1 + rng.integers(0, 12, 700), n - 1)
    key = np.unique(src * n + dst)
    src, dst = key // n, key % n
    c, mem = rng.random(len(src)), rng.random(n)
    expected = optimal_breakpoints(src, dst, c, mem, 17, 4.0)
    monkeypatch.setattr(fusion, "_BLOCK", 5)  # type: ignore[attr-defined]
    got = optimal_breakpoints(src, dst, c, mem, 17, 4.0)
    assert got[0].tolist() == expected[0].tolist() and abs(got[1] - expected[1]) < 1e-9


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(min_ops=2, max_ops=25, edge_p=0.25), topologies(min_devices=2, max_devices=3),
       st.integers(1, 6), st.sampled_from(["cpd-topo", "dfs-topo", "m-topo"]))
def test_fused_graph_is_a_dag(g: OpGraph, topo: object, r_max: int, kind: str) -> None:
    """Lemma 2: clusters contiguous in a topological order give an acyclic coarse graph."""
    problem = Problem(g, topo, "latency", ProblemSettings())  # type: ignore[arg-type]
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    seq = task_order(tasks, costs, kind)
    fusion = fuse(g, seq, costs.mean_comm_s(g.edge_bytes), tasks.mem_add_bytes, r_max, float("inf"))
    coarse = coarse_task_graph(g, tasks, fusion)
    assert is_topological(m_topo_order(coarse.succ, coarse.pred), coarse.succ)
    assert all(a < b for a in range(coarse.n) for b in coarse.succ[a])  # cluster order is topological
    assert np.allclose(coarse.dur_s.sum(axis=0), tasks.dur_s.sum(axis=0))
    assert sorted(np.concatenate([fusion.members(k) for k in range(fusion.n_clusters)]).tolist()) == list(range(g.n_ops))


def test_fusion_reduces_nodes_and_ccr() -> None:
    """Table 2's columns on a chain of diamonds: fewer nodes, lower CCR, cut = remaining edges."""
    problem = fx.larger_problem("latency", n_layers=40)
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    g = problem.graph
    seq = task_order(tasks, costs, "cpd-topo")
    fusion = fuse(g, seq, costs.mean_comm_s(g.edge_bytes), tasks.mem_add_bytes, 20, float("inf"))
    coarse = coarse_task_graph(g, tasks, fusion)
    assert coarse.n == fusion.n_clusters < g.n_ops / 10
    assert ccr(coarse, costs) < ccr(tasks, costs)


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(min_ops=2, max_ops=25, edge_p=0.25), topologies(min_devices=2, max_devices=3), st.integers(1, 8))
def test_chain_fusion_makes_paths(g: OpGraph, topo: object, r_max: int) -> None:
    """``chains``: every op of a cluster consumes the output of the op before it, so a cluster
    never serialises two ops that could run at the same time; the cut is never below the
    unconstrained optimum."""
    problem = Problem(g, topo, "latency", ProblemSettings())  # type: ignore[arg-type]
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    seq = task_order(tasks, costs, "cpd-topo")
    edge_c = costs.mean_comm_s(g.edge_bytes)
    chained = fuse(g, seq, edge_c, tasks.mem_add_bytes, r_max, float("inf"), chains=True)
    edges = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    for k in range(chained.n_clusters):
        ops = chained.members(k).tolist()
        assert all((a, b) in edges for a, b in itertools.pairwise(ops))
    free = fuse(g, seq, edge_c, tasks.mem_add_bytes, r_max, float("inf"))
    assert chained.cut_s >= free.cut_s - 1e-12
    assert chain_breaks(g, seq)[0]


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(min_ops=1, max_ops=25, edge_p=0.25), topologies(min_devices=2, max_devices=3), st.booleans())
def test_no_fusion_shortcut_equals_the_dp_and_the_grouped_graph(g: OpGraph, topo: object, training: bool) -> None:
    """R = 1 skips the DP and builds the coarse graph by relabelling: the same clusters, cut and
    coarse graph as the DP and the general construction."""
    problem = Problem(g, topo, "latency", ProblemSettings(pass_="training" if training else "forward"))  # type: ignore[arg-type]
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    seq = task_order(tasks, costs, "cpd-topo")
    edge_c = costs.mean_comm_s(g.edge_bytes)
    fusion = fuse(g, seq, edge_c, tasks.mem_add_bytes, 1, float("inf"))
    pos = np.empty(g.n_ops, dtype=np.int64)
    pos[seq] = np.arange(g.n_ops)
    starts, cut = optimal_breakpoints(pos[g.edge_src], pos[g.edge_dst], edge_c, tasks.mem_add_bytes[seq], 1)
    assert fusion.starts.tolist() == starts.tolist() and fusion.cut_s == cut
    assert (fusion.cluster_of[seq] == np.arange(g.n_ops)).all()
    fast, general = coarse_task_graph(g, tasks, fusion), _grouped(g, tasks, fusion)
    assert (fast.pred, fast.pred_bytes, fast.succ, fast.succ_bytes) == (general.pred, general.pred_bytes,
                                                                       general.succ, general.succ_bytes)
    for name in ("dur_s", "mem_add_bytes", "mem_work_bytes", "rank"):
        assert np.array_equal(getattr(fast, name), getattr(general, name)), name
