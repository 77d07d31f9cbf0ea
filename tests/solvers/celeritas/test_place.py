"""Order-Place and Adjusting Placement (Celeritas §5.2, Algorithm 2) on the simulator.

Where the paper's argument (each adjustment never delays a node's successors) carries over
to the simulator: forward pass, identical devices, memory for the whole graph on one device
(so Order-Place keeps everything on device 0), and free messages (zero bytes).  Then every
node's planned start under Adjusting Placement is at most its start on one device, and the
simulator's replay of the orders is never later than the plan.  On those fixtures Adjusting
Placement is never worse than Order-Place.
"""

from __future__ import annotations

import bisect
import random
from contextlib import nullcontext

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.base import Budget, no_progress
from solvers.celeritas.adjusting import AdjustingSchedule
from solvers.celeritas.place import back_costs_s
from solvers.celeritas.solver import CeleritasOptions, CeleritasSolver, task_order
from solvers.listsched import (
    LatencyCosts,
    ListSchedule,
    TaskGraph,
    latency_costs,
    op_task_graph,
    postal_planning,
)
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.validity import resolve_plan
from tests.solvers.listsched.test_timeline import plain_slot_s
from tests.strategies import HUGE_MEMORY_BYTES, dag_graphs, examples, topologies

GiB = float(2**30)
# the paper's pipeline: one R, any run of the order fused, CPD-TOPO placement order, Eq. 9 as written,
# no list schedulers kept beside it
PAPER = {"adaptive": False, "fusion": "contiguous", "placement_order": "cpd-topo", "move_threshold": 1.0,
         "finalists": 1, "list_schedulers": False}


def _uniform_topology(n: int, memory_bytes: float = HUGE_MEMORY_BYTES, bandwidth_Bps: float = 1e9) -> Topology:
    devices = [Device(f"d{i}", "V100", "h0", memory_bytes, 1.0) for i in range(n)]
    links = [Link(f"d{i}", f"d{j}", bandwidth_Bps, 1e-5) for i in range(n) for j in range(i + 1, n)]
    return Topology.from_links("pcie", devices, links)


def _solve(problem: Problem, **options: object) -> tuple[float, object]:
    """Celeritas' own placement (the list schedulers' plans are not kept: these tests are about Algorithm 2)."""
    options = {"list_schedulers": False, **options}
    plan = CeleritasSolver().solve(problem, CeleritasOptions(**options), Budget(30.0), no_progress)  # type: ignore[arg-type]
    assert plan.status == "feasible", plan.notes
    resolve_plan(problem, plan)
    simulated = simulate(problem, plan).metrics["objective_s"]
    assert plan.claimed_objective_s == simulated
    return float(simulated), plan


def _free_messages(g: OpGraph) -> OpGraph:
    edges = [Edge(e.src, e.dst, 0.0) for e in g.edges]
    return OpGraph.build(g.name, g.nodes, edges, g.profiled_batch_size)


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(min_ops=2, max_ops=16, edge_p=0.2), st.integers(2, 4), st.integers(1, 5))
def test_adjusting_never_worse_than_order_place(g: OpGraph, n_devices: int, r_max: int) -> None:
    problem = Problem(_free_messages(g), _uniform_topology(n_devices), "latency", ProblemSettings(pass_="forward"))
    adjusting, _ = _solve(problem, placement="adjusting", exploration_range=r_max)
    ordered, plan = _solve(problem, placement="order", exploration_range=r_max)
    assert plan.stats["devices_used"] == 1  # type: ignore[attr-defined]
    assert adjusting <= ordered * (1 + 1e-9)


def _fork_join(width: int, depth: int, bytes_: float, param_bytes: float = 0.0) -> OpGraph:
    """A source feeding ``width`` independent chains of ``depth`` heavy ops, joined at a sink."""
    nodes = [Node("src", "x", 1e-4, 1e-4), Node("sink", "x", 1e-4, 1e-4)]
    edges = []
    for b in range(width):
        prev = "src"
        for k in range(depth):
            v = f"b{b}.{k}"
            nodes.append(Node(v, "x", 1e-2, 2e-2, param_bytes, 1e6))
            edges.append(Edge(prev, v, bytes_))
            prev = v
        edges.append(Edge(prev, "sink", bytes_))
    return OpGraph.build("fork-join", nodes, edges)


def test_adjusting_spreads_independent_branches() -> None:
    """Cheap messages, heavy branches: Adjusting Placement uses the idle devices and beats
    Order-Place, in inference and in a training pass (§6.4.1, the Transformer row)."""
    for pass_ in ("forward", "training"):
        problem = Problem(_fork_join(4, 5, 1e3), _uniform_topology(4), "latency", ProblemSettings(pass_=pass_))  # type: ignore[arg-type]
        adjusting, plan = _solve(problem, placement="adjusting", exploration_range=5)
        ordered, _ = _solve(problem, placement="order", exploration_range=5)
        assert plan.stats["devices_used"] == 4  # type: ignore[attr-defined]
        assert adjusting < 0.5 * ordered


def test_expensive_messages_keep_the_chain_together() -> None:
    """Eq. 9: a move needs an EST gain above back_cost; with huge tensors nothing moves (the
    paper's threshold, and the default search, which finds one device best)."""
    problem = Problem(_fork_join(3, 4, 4e9), _uniform_topology(3, bandwidth_Bps=1e9), "latency", ProblemSettings())
    for options in ({**PAPER, "exploration_range": 1}, {}):
        _, plan = _solve(problem, placement="adjusting", **options)
        assert plan.stats["devices_used"] == 1  # type: ignore[attr-defined]


def test_memory_spreads_the_graph_and_is_respected() -> None:
    """Each branch holds 3 GiB of parameters (x4 with Adam in training); 8 GiB devices."""
    g = _fork_join(4, 3, 1e6, param_bytes=1 * GiB / 3)
    problem = Problem(g, _uniform_topology(4, memory_bytes=8 * GiB), "latency", ProblemSettings(pass_="training"))
    for placement in ("adjusting", "order"):
        _, plan = _solve(problem, placement=placement, exploration_range=3)
        assert plan.stats["devices_used"] >= 2  # type: ignore[attr-defined]
        assert plan.stats["best_effort_nodes"] == 0  # type: ignore[attr-defined]


def test_best_effort_is_flagged_and_never_returned_as_a_valid_plan() -> None:
    """Three 0.6 GiB ops, two 1 GiB devices: enough memory in total, but no packing exists."""
    nodes = [Node(f"op{i}", "x", 1e-3, param_bytes=0.6 * GiB) for i in range(3)]
    edges = [Edge("op0", "op1", 1e3), Edge("op1", "op2", 1e3)]
    problem = Problem(OpGraph.build("big", nodes, edges), _uniform_topology(2, memory_bytes=1 * GiB), "latency",
                      ProblemSettings(pass_="forward"))
    plan = CeleritasSolver().solve(problem, CeleritasOptions(), Budget(10.0), no_progress)
    assert plan.status == "infeasible" and not plan.stages
    assert plan.stats["best_effort_nodes"] >= 1
    assert any("best-effort" in n for n in plan.notes)


def test_pins_are_honoured() -> None:
    g = _fork_join(2, 3, 1e3)
    pins = {"b0.1": "d2", "b1.2": "d0"}
    problem = Problem(g, _uniform_topology(3), "latency", ProblemSettings(pinned=pins))
    _, plan = _solve(problem)
    where = {op: s.devices[0] for s in plan.stages for op in s.ops}  # type: ignore[attr-defined]
    assert all(where[op] == dev for op, dev in pins.items())


def test_stats_report_table_2_columns() -> None:
    problem = Problem(_fork_join(4, 10, 1e6), _uniform_topology(4), "latency", ProblemSettings())
    _, plan = _solve(problem, **{**PAPER, "exploration_range": 4})
    stats = plan.stats  # type: ignore[attr-defined]
    assert stats["original_nodes"] == 42 and stats["fused_nodes"] < 42
    assert stats["fused_ccr"] <= stats["original_ccr"]


class NaiveSchedule(ListSchedule):
    """The list scheduler's definitions, written plainly: each device's data-ready time from
    its own sorted messages, and the insertion search scanning every gap from the ready time."""

    def __init__(self, tasks: TaskGraph, costs: LatencyCosts, caps_bytes: np.ndarray) -> None:
        super().__init__(tasks, costs, caps_bytes)
        self._sent: dict[tuple[int, int], float] = {}  # (producer, device) -> arrival of its message
        self._tasks_on: list[list[tuple[float, float]]] = [[] for _ in range(self.n_devices)]  # (start, end)

    def _insert(self, d: int, start: float, end: float) -> None:
        super()._insert(d, start, end)
        bisect.insort(self._tasks_on[d], (start, end))  # by start, an empty task before one that starts with it

    def _ready_s(self, v: int, d: int, book: bool) -> float:
        t = 0.0
        pending: list[tuple[float, int, int, float]] = []
        for p, size in zip(self.tasks.pred[v], self.tasks.pred_bytes[v], strict=True):
            dp = self.device[p]
            if dp == d:
                t = max(t, self.finish_s[p])
            elif not self.costs.channel_queues:
                t = max(t, self.finish_s[p] + self.costs.comm_s(dp, d, size))
            elif (p, d) in self._sent:
                t = max(t, self._sent[(p, d)])
            elif self.costs.comm_s(dp, d, size) <= 0.0:
                t = max(t, self.finish_s[p])
            else:
                pending.append((self.finish_s[p], p, dp, size))
        local: dict[int, float] = {}
        for fin, p, dp, size in sorted(pending):
            a = max(fin, local.get(dp, self._chan_free[d][dp])) + self.costs.comm_s(dp, d, size)
            local[dp] = a
            if book:
                self._sent[(p, d)] = a
            t = max(t, a)
        if book:
            for dp, a in local.items():
                self._chan_free[d][dp] = a
        return t

    def slot_s(self, d: int, ready: float, dur: float, insertion: bool) -> float:
        if not insertion:
            return max(ready, self.free_s[d])
        return plain_slot_s(self._tasks_on[d], ready, dur)


def test_an_empty_task_where_another_starts_lets_no_later_task_overlap() -> None:
    """Found by the property below: an empty task placed at the start of a busy interval was
    filed after it, the device's ends were no longer sorted, and the insertion search's
    bisection of the ends then put a later task on top of the busy one (start 0 instead of 2)."""
    no_edges: list[list[int]] = [[], [], []]
    no_bytes: list[list[float]] = [[], [], []]
    tasks = TaskGraph(no_edges, no_bytes, no_edges, no_bytes, np.array([[2.0], [0.0], [1.0]]),
                      np.zeros(3), np.zeros(3), np.arange(3))
    costs = LatencyCosts(np.zeros((1, 1)), np.zeros((1, 1)), 1.0, 0.0, 0.0)
    for sched in (ListSchedule(tasks, costs, np.ones(1)), NaiveSchedule(tasks, costs, np.ones(1))):
        assert [sched.commit(v, 0, True) for v in range(3)] == [0.0, 0.0, 2.0]


@settings(max_examples=examples(60), deadline=None)
@given(dag_graphs(min_ops=1, max_ops=40, edge_p=0.15), topologies(min_devices=1, max_devices=4),
       st.booleans(), st.floats(0.05, 1.0), st.randoms(use_true_random=False), st.booleans())
def test_list_schedule_times_as_the_plain_definitions(g: OpGraph, topo: Topology, training: bool,
                                                      memory_share: float, rnd: random.Random,
                                                      postal: bool) -> None:
    """The list scheduler's fast paths (one pass over the producers for all devices in
    ``est_all``, the insertion search over the idle gaps and their suffix maxima,
    ``est_all``'s least-only answer with ``keep``) give every node the EST the plain
    definitions give it, with the same channel bookings, along a run of commits to random
    devices (memory tight enough for some devices to be full), planning with channel queues or
    postal (``postal_planning``)."""
    problem = Problem(g, topo, "latency", ProblemSettings(pass_="training" if training else "forward"))
    with postal_planning() if postal else nullcontext():
        tasks, costs = op_task_graph(problem), latency_costs(problem)
    caps = np.full(topo.n_devices, memory_share * float((tasks.mem_add_bytes + tasks.mem_work_bytes).sum()))
    fast, reference = ListSchedule(tasks, costs, caps), NaiveSchedule(tasks, costs, caps)
    order = task_order(tasks, costs, rnd.choice(["cpd-topo", "b-level", "m-topo"])).tolist()
    for v in order:
        expected = [reference.est_s(v, d, True) if reference.fits(v, d) else float("inf")
                    for d in range(topo.n_devices)]
        assert fast.est_all(v) == expected
        keep = rnd.randrange(-1, topo.n_devices)
        least = fast.est_all(v, keep)  # exact where least and on keep, above the least elsewhere
        assert min(least) == min(expected)
        assert all(got == want or (want > min(expected) and min(expected) < got <= want)
                   for got, want in zip(least, expected, strict=True))
        assert keep < 0 or least[keep] == expected[keep]
        assert [fast.est_s(v, d, True) if fast.fits(v, d) else float("inf")
                for d in range(topo.n_devices)] == expected
        d = rnd.randrange(topo.n_devices)
        assert fast.commit(v, d, True) == reference.commit(v, d, True)
    assert fast.start_s == reference.start_s and fast.finish_s == reference.finish_s


@settings(max_examples=examples(80), deadline=None)
@given(dag_graphs(min_ops=1, max_ops=40, edge_p=0.15), topologies(min_devices=1, max_devices=4),
       st.booleans(), st.floats(0.02, 1.0), st.sampled_from([0.0, 1.0, 3.0]), st.randoms(use_true_random=False),
       st.booleans())
def test_adjusting_loop_places_as_est_all_and_commit(g: OpGraph, topo: Topology, training: bool,
                                                    memory_share: float, threshold: float, rnd: random.Random,
                                                    pinned: bool) -> None:
    """``AdjustingSchedule.place_all`` (one loop) gives every node the device and start that a call
    of ``est_all`` and ``commit`` per node gives it (``_place_each``), with the same channel
    bookings and memory: memory tight enough for full devices and best effort, Eq. 9's threshold
    at 0, 1 and 3, and some nodes pinned."""
    problem = Problem(g, topo, "latency", ProblemSettings(pass_="training" if training else "forward"))
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    caps = np.full(topo.n_devices, memory_share * float((tasks.mem_add_bytes + tasks.mem_work_bytes).sum()))
    order = task_order(tasks, costs, rnd.choice(["cpd-topo", "b-level"])).tolist()
    pins = {v: rnd.randrange(topo.n_devices) for v in range(g.n_ops) if pinned and rnd.random() < 0.2}
    back = back_costs_s(tasks, costs).tolist()
    loop, each = AdjustingSchedule(tasks, costs, caps), AdjustingSchedule(tasks, costs, caps)
    loop.place_all(order, pins, back, threshold)
    each._place_each(order, pins, back, threshold)
    assert (loop.device, loop.start_s, loop.finish_s) == (each.device, each.start_s, each.finish_s)
    assert loop.best_effort == each.best_effort
    assert loop._chan_free == each._chan_free and loop._arrival == each._arrival
    assert (loop.mem.add_bytes, loop.mem.work_bytes) == (each.mem.add_bytes, each.mem.work_bytes)
