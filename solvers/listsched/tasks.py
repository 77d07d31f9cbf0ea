"""The task graph list schedulers place, and the channel figures they time messages with."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes, param_bytes_factor
from solvers.model.errors import InvalidProblem
from solvers.model.problem import Problem


@dataclass(frozen=True)
class TaskGraph:
    """A DAG of tasks to place (read-only; the lists may be the graph's own).
    ``pred[v]`` / ``pred_bytes[v]``: producers of ``v`` and the
    message size each sends to ``v``; ``dur_s[v, d]``: time of ``v`` on device ``d``;
    ``mem_add_bytes[v]``: additive memory, ``mem_work_bytes[v]``: working memory (max-combined);
    ``rank[v]``: position in a topological order (tie-breaks)."""

    pred: list[list[int]]
    pred_bytes: list[list[float]]
    succ: list[list[int]]
    succ_bytes: list[list[float]]
    dur_s: FloatArray
    mem_add_bytes: FloatArray
    mem_work_bytes: FloatArray
    rank: IntArray

    @property
    def n(self) -> int:
        return len(self.pred)


_CHANNEL_QUEUES: ContextVar[bool] = ContextVar("listsched_channel_queues", default=True)


@contextmanager
def postal_planning() -> Iterator[None]:
    """Within the block the list schedulers *plan* with the postal model of the HEFT paper (§2,
    ``c(i, j)`` per edge): every edge's data arrives ``latency + bytes / bandwidth`` after its
    producer ends, channels never queue and a producer's messages to one device are not merged,
    instead of one message per (producer, device) queued on its channel in booking order.  Their
    plans are still timed by the simulator, queues included: this changes the decisions, not the
    scoring (the ``moirai`` warm start tries both, docs/moirai.md)."""
    token = _CHANNEL_QUEUES.set(False)
    try:
        yield
    finally:
        _CHANNEL_QUEUES.reset(token)


@dataclass(frozen=True)
class LatencyCosts:
    """Channel figures of one latency problem. ``msg_factor`` is 2 in a training pass;
    ``channel_queues``: messages queue on their channel while planning (else postal, above)."""

    latency_s: FloatArray
    inv_bandwidth_sPB: FloatArray  # [a, b] = seconds per byte on channel a -> b (0 on the diagonal)
    msg_factor: float
    mean_latency_s: float
    mean_inv_bandwidth_sPB: float
    channel_queues: bool = True

    def comm_s(self, a: int, b: int, size_bytes: float) -> float:
        """Postal time of a message a -> b (both passes in training); empty messages are free."""
        if a == b or size_bytes <= 0.0:
            return 0.0
        return self.msg_factor * float(self.latency_s[a, b] + size_bytes * self.inv_bandwidth_sPB[a, b])

    def mean_comm_s(self, size_bytes: FloatArray) -> FloatArray:
        """Average postal time over all ordered device pairs (HEFT's c-bar, Celeritas' c)."""
        t = self.msg_factor * (self.mean_latency_s + size_bytes * self.mean_inv_bandwidth_sPB)
        return np.where(size_bytes > 0.0, t, 0.0)


def latency_costs(problem: Problem) -> LatencyCosts:
    topo = problem.topology
    n = topo.n_devices
    lat = np.array(topo.latency_s, dtype=np.float64)
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.array(topo.bandwidth_Bps, dtype=np.float64)
    np.fill_diagonal(inv, 0.0)
    off = ~np.eye(n, dtype=bool)
    mean_lat = float(lat[off].mean()) if n > 1 else 0.0
    mean_inv = float(inv[off].mean()) if n > 1 else 0.0
    return LatencyCosts(lat, inv, 2.0 if problem.training else 1.0, mean_lat, mean_inv, _CHANNEL_QUEUES.get())


def check_latency_pins(problem: Problem) -> dict[int, int]:
    """Op position -> device position for device pins; stage-index pins are refused."""
    out: dict[int, int] = {}
    for op, target in problem.settings.pinned.items():
        if isinstance(target, int):
            raise InvalidProblem(f"settings.pinned.{op}: a latency plan pins ops to device ids, not stage "
                                 f"index {target}", field=f"settings.pinned.{op}", ref=op)
        out[problem.graph.index[op]] = problem.topology.index[target]
    return out


def op_task_graph(problem: Problem) -> TaskGraph:
    """The op graph as a task graph (message bytes per edge; memory per op)."""
    g, topo = problem.graph, problem.topology
    compute = ComputeModel(g, topo)
    cols = [compute.fwd_s(d) + compute.bwd_s(d) if problem.training else compute.fwd_s(d)
            for d in range(topo.n_devices)]
    dur = np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.float64)
    pred_b = _bytes_per_node(g.edge_dst, g.edge_bytes, g.n_ops)  # aligned with g.pred (edge order)
    succ_b = _bytes_per_node(g.edge_src, g.edge_bytes, g.n_ops)  # aligned with g.succ
    add, work = op_memory_bytes(problem)
    return TaskGraph(g.pred, pred_b, g.succ, succ_b, dur, add, work, np.asarray(g.topo_position, dtype=np.int64))


def _bytes_per_node(ends: IntArray, edge_bytes: FloatArray, n_nodes: int) -> list[list[float]]:
    """``out[v]``: the bytes of the edges whose end (``ends``: each edge's source or destination)
    is ``v``, in edge order, as :attr:`OpGraph.pred <solvers.model.graph.OpGraph.pred>` and
    ``succ`` list them.  One stable sort of the edges by end, cut into lists by slicing: without
    the graph's ``in_edges`` and ``out_edges``, which a list schedule does not read otherwise
    (about half the time at 36k ops, docs/benchmarks.md, "Celeritas")."""
    by_end = np.argsort(ends, kind="stable")
    stops = np.cumsum(np.bincount(ends, minlength=n_nodes)).tolist()
    values = np.asarray(edge_bytes, dtype=np.float64)[by_end].tolist()
    return [values[a:b] for a, b in itertools.pairwise([0, *stops])]


def op_memory_bytes(problem: Problem) -> tuple[FloatArray, FloatArray]:
    """Per op: additive bytes (params x factor + activations) and working bytes (Eq. 14 peak)."""
    g = problem.graph
    add = g.param_bytes * param_bytes_factor(problem) + g.act_bytes
    work = np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes)
    return np.asarray(add, dtype=np.float64), np.asarray(work, dtype=np.float64)


def device_caps_bytes(problem: Problem) -> FloatArray:
    """Usable bytes per device (headroom applied; any stage cap applies to every device)."""
    caps = np.array([capacity_bytes(problem, d) for d in range(problem.topology.n_devices)])
    stage_caps = problem.settings.stage_memory_caps_bytes
    if stage_caps:
        caps = np.minimum(caps, min(float(c) for c in stage_caps.values()))
    return caps
