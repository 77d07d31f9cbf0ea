"""The placement instance the MILP sees: units, tasks, per-device times, memory, channels.

A *unit* is a node of the coarsened graph ``G = (N, L)`` (§III-D), placed as a whole.  A *task*
is one pass of a unit: a forward pass has one task per unit; a training pass adds a backward
task per unit, run on its forward's device, with the edges reversed and an edge from each
unit's forward to its backward (so a backward starts after the forward of everything
downstream, docs/formats.md).  Task times per device come from
:class:`~solvers.cost.compute.ComputeModel` (heterogeneous devices), memory from the latency
memory model of :mod:`solvers.cost.memory`, channels from the topology's widest-path matrices.

Communication follows the op-level simulator (docs/simulator.md): a task's output needed on
another device is sent when the task ends in ``latency + bytes / bandwidth`` on the channel; a
zero-byte message takes no time and does not occupy its channel.  A forward task sends one
message per consumer device carrying the largest edge bytes to that device; a backward task
sends one gradient message per edge, in edge order.  Both are *send slots*: ``slots[t]`` lists
groups of ``succ[t]`` entries, each slot sending one message per consumer device.  In a
training pass a device runs all its forward tasks, in the plan's order, then its backward
tasks in the reverse order.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray
from solvers.cost.comm import transfer_s
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes
from solvers.model.problem import Problem
from solvers.moirai.gcof import Grouping

DEADLINE_CHECK_EVERY = 4096  # edges between two looks at the clock while building


class OutOfTime(Exception):
    """The deadline passed before the step that raised it could end (the solver refuses with the reason)."""


@dataclass(frozen=True, eq=False)
class Instance:
    """Index form of one coarsened problem.

    ``task_unit[t]`` = unit of task ``t``; ``dur_s[t, k]`` = time of task ``t`` on device ``k``;
    ``succ[t]`` = ``(successor task, bytes)``; ``static_bytes[u]`` / ``work_bytes[u]`` = memory a
    unit adds / its peak working memory; ``cap_bytes[k]`` = usable memory of device ``k``;
    ``allowed[u, k]`` = unit ``u`` may run on device ``k`` (pins); ``slots[t]`` = send slots of
    task ``t`` (indices into ``succ[t]``); ``training``: tasks ``n_units + u`` are backward tasks.
    """

    problem: Problem
    grouping: Grouping
    task_unit: tuple[int, ...]
    dur_s: FloatArray
    succ: tuple[tuple[tuple[int, float], ...], ...]
    static_bytes: FloatArray
    work_bytes: FloatArray
    cap_bytes: FloatArray
    allowed: npt.NDArray[np.bool_]
    slots: tuple[tuple[tuple[int, ...], ...], ...]
    training: bool

    @property
    def n_tasks(self) -> int:
        return len(self.task_unit)

    @property
    def n_units(self) -> int:
        return self.grouping.n_units

    @property
    def n_devices(self) -> int:
        return int(self.dur_s.shape[1])

    def comm_s(self, size_bytes: float, src: int, dst: int) -> float:
        """Postal time of a message on channel ``src -> dst`` (0 on one device or 0 bytes)."""
        return transfer_s(self.problem.topology, src, dst, size_bytes)

    @cached_property
    def pred(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.n_tasks)]
        for t, succ in enumerate(self.succ):
            for s, _ in succ:
                out[s].append(t)
        return tuple(tuple(p) for p in out)

    @cached_property
    def topo(self) -> tuple[int, ...]:
        """Tasks in a topological order, ties by task index: of the tasks whose predecessors are
        all out, the smallest index next (networkx's lexicographical sort, without loading
        networkx: a second of a member's start on a loaded machine)."""
        indeg = [len(p) for p in self.pred]
        ready = [t for t, k in enumerate(indeg) if k == 0]
        heapq.heapify(ready)
        out: list[int] = []
        while ready:
            t = heapq.heappop(ready)
            out.append(t)
            for s, _ in self.succ[t]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        return tuple(out)

    @cached_property
    def reach(self) -> tuple[int, ...]:
        """``reach[t]`` = bit set of the tasks reachable from ``t`` (its ``Succ`` set of Table II).

        Hand-written for speed: on a 2,000-op graph this sweep takes 0.4 ms, ``networkx.descendants``
        per task 0.41 s (``python -m bench.bench_graph_algorithms``)."""
        bits = [0] * self.n_tasks
        for t in reversed(self.topo):
            acc = 0
            for s, _ in self.succ[t]:
                acc |= bits[s] | (1 << s)
            bits[t] = acc
        return tuple(bits)

    def comparable(self, i: int, j: int) -> bool:
        return bool((self.reach[i] >> j) & 1 or (self.reach[j] >> i) & 1)


def build_instance(problem: Problem, grouping: Grouping, deadline: float | None = None) -> Instance:
    """The instance of ``problem`` coarsened by ``grouping`` (module doc).  ``deadline``
    (``time.monotonic()``): raise :class:`OutOfTime` once it has passed, looked at after every
    ``DEADLINE_CHECK_EVERY`` edges (the edge sweep is the part that grows with the graph); a graph
    with fewer edges is always built, whatever the clock, so that it always gets a plan."""
    g, topo = problem.graph, problem.topology
    n_units, n_dev = grouping.n_units, topo.n_devices
    training = problem.settings.pass_ == "training"
    unit_of = grouping.unit_of(g.n_ops)
    cm = ComputeModel(g, topo)
    fwd = np.zeros((n_units, n_dev))
    bwd = np.zeros((n_units, n_dev))
    # one op per unit (the uncoarsened graph): its times gathered, the same values as the sums of one
    single = np.array([ops[0] for ops in grouping.groups], dtype=np.int64) \
        if all(len(ops) == 1 for ops in grouping.groups) else None
    column_of: dict[int, int] = {}  # devices of one class share their time vectors: filled once
    for k in range(n_dev):
        f_k, b_k = cm.fwd_s(k), cm.bwd_s(k)
        same = column_of.setdefault(id(f_k), k)
        if same != k:
            fwd[:, k], bwd[:, k] = fwd[:, same], bwd[:, same]
        elif single is not None:
            fwd[:, k], bwd[:, k] = f_k[single], b_k[single]
        else:
            fwd[:, k] = [f_k[list(ops)].sum() for ops in grouping.groups]
            bwd[:, k] = [b_k[list(ops)].sum() for ops in grouping.groups]
    # unit edge bytes: each producer op's largest edge into the consumer unit, summed over producers
    largest: dict[tuple[int, int, int], float] = {}
    first_edge: dict[tuple[int, int], int] = {}
    for e, (s, d, b) in enumerate(zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_bytes.tolist(), strict=True)):
        if deadline is not None and e and e % DEADLINE_CHECK_EVERY == 0 and time.monotonic() > deadline:
            raise OutOfTime(f"the time limit ran out while building the instance ({e} of {len(g.edge_src)} edges)")
        a, c = unit_of[s], unit_of[d]
        if a != c:
            largest[(a, c, s)] = max(largest.get((a, c, s), 0.0), float(b))
            first_edge.setdefault((a, c), e)
    unit_bytes: dict[tuple[int, int], float] = {}
    for (a, c, _), b in sorted(largest.items()):
        unit_bytes[(a, c)] = unit_bytes.get((a, c), 0.0) + b
    n_tasks = n_units * (2 if training else 1)
    succ: list[list[tuple[int, float]]] = [[] for _ in range(n_tasks)]
    for (a, c), b in sorted(unit_bytes.items()):
        succ[a].append((c, b))
    slots: list[tuple[tuple[int, ...], ...]] = [(tuple(range(len(succ[u]))),) for u in range(n_units)]
    if training:
        # gradient edges c' -> a' in the simulator's order: by the first original edge a -> c
        for (a, c) in sorted(unit_bytes, key=lambda ac: first_edge[ac]):
            succ[n_units + c].append((n_units + a, unit_bytes[(a, c)]))
        slots += [tuple((i,) for i in range(len(succ[n_units + u]))) for u in range(n_units)]
        for u in range(n_units):
            succ[u].append((n_units + u, 0.0))
    factor = 1.0 + problem.settings.optimizer_bytes_per_param_byte if problem.training else 1.0
    if single is not None:
        static = g.param_bytes[single] * factor + g.act_bytes[single]
        work = np.maximum(g.mem_fwd_bytes[single], g.mem_bwd_bytes[single])
    else:
        static = np.array([float(g.param_bytes[list(ops)].sum()) * factor + float(g.act_bytes[list(ops)].sum())
                           for ops in grouping.groups])
        work = np.array([float(np.maximum(g.mem_fwd_bytes[list(ops)], g.mem_bwd_bytes[list(ops)]).max())
                         for ops in grouping.groups])
    allowed = np.ones((n_units, n_dev), dtype=bool)
    for op, target in problem.settings.pinned.items():
        if isinstance(target, str):
            row = np.zeros(n_dev, dtype=bool)
            row[topo.index[target]] = True
            allowed[unit_of[g.index[op]]] &= row
    task_unit = tuple(range(n_units)) + (tuple(range(n_units)) if training else ())
    dur = np.vstack([fwd, bwd]) if training else fwd
    return Instance(problem, grouping, task_unit, dur, tuple(tuple(s) for s in succ), static, work,
                    np.array([capacity_bytes(problem, k) for k in range(n_dev)]), allowed, tuple(slots), training)
