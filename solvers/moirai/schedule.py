"""Exact timing of a placement + per-device task order on an :class:`Instance`.

The rules are those the MILP encodes and the op-level simulator replays (docs/cost-model.md, docs/simulator.md): a task
starts at ``max(device free, inputs arrived)`` in its device's order; when it ends, one message
per consumer device leaves with the largest edge bytes to that device, starting at
``max(task end, channel free)`` — a channel serves its messages in request order, which is the
sending device's task order — and arriving ``latency + bytes / bandwidth`` later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from solvers.model.errors import SolverFailure
from solvers.moirai.instance import Instance


@dataclass(frozen=True)
class TimedSchedule:
    """Start / end of every task; ``messages[(task, slot, consumer device)] = (start, end)``."""

    device_of_unit: tuple[int, ...]
    order: dict[int, list[int]]
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    messages: dict[tuple[int, int, int], tuple[float, float]]
    makespan_s: float


def slot_messages(inst: Instance, device_of_unit: Sequence[int], task: int) -> list[tuple[int, int, float, list[int]]]:
    """Messages ``task`` sends: ``(slot, consumer device, bytes, consumer tasks)`` in send order."""
    here = device_of_unit[inst.task_unit[task]]
    out = []
    for si, slot in enumerate(inst.slots[task]):
        size: dict[int, float] = {}
        cons: dict[int, list[int]] = {}
        for idx in slot:
            s, b = inst.succ[task][idx]
            k = device_of_unit[inst.task_unit[s]]
            if k != here:
                size[k] = max(size.get(k, 0.0), b)
                cons.setdefault(k, []).append(s)
        out += [(si, k, size[k], cons[k]) for k in sorted(size)]
    return out


def replay(inst: Instance, device_of_unit: Sequence[int], order: Mapping[int, Sequence[int]]) -> TimedSchedule:
    """Time the schedule (module doc); raises :class:`SolverFailure` on an order that deadlocks."""
    n = inst.n_tasks
    start = [0.0] * n
    end = [0.0] * n
    done = [False] * n
    arrival: dict[tuple[int, int], float] = {}  # (producer task, consumer task) -> arrival
    messages: dict[tuple[int, int, int], tuple[float, float]] = {}
    free = dict.fromkeys(order, 0.0)
    chan: dict[tuple[int, int], float] = {}
    ptr = dict.fromkeys(order, 0)
    left = n
    while left:
        progressed = False
        for k, tasks in order.items():
            while ptr[k] < len(tasks):
                t = tasks[ptr[k]]
                if not all(done[p] for p in inst.pred[t]):
                    break
                ready = free[k]
                for p in inst.pred[t]:
                    ready = max(ready, arrival.get((p, t), end[p]))
                start[t], end[t] = ready, ready + float(inst.dur_s[t, k])
                free[k] = end[t]
                done[t] = True
                for si, k2, size, consumers in slot_messages(inst, device_of_unit, t):
                    dur = inst.comm_s(size, k, k2)
                    if dur <= 0.0:
                        continue  # a zero-byte message takes no time and no channel
                    s0 = max(end[t], chan.get((k, k2), 0.0))
                    chan[(k, k2)] = s0 + dur
                    messages[(t, si, k2)] = (s0, s0 + dur)
                    for c in consumers:
                        arrival[(t, c)] = s0 + dur
                ptr[k] += 1
                left -= 1
                progressed = True
        if not progressed and left:
            raise SolverFailure("moirai: the per-device task order contradicts the dependencies")
    return TimedSchedule(tuple(device_of_unit), {k: list(v) for k, v in order.items()}, tuple(start), tuple(end),
                    messages, max(end) if end else 0.0)


def full_order(inst: Instance, forward: Mapping[int, Sequence[int]]) -> dict[int, list[int]]:
    """Per-device task order from the forward order: in training, backward tasks follow, reversed."""
    out = {k: list(v) for k, v in forward.items()}
    if inst.training:
        for k, tasks in out.items():
            tasks += [inst.n_units + t for t in reversed(forward[k])]
    return out


def order_by_start(inst: Instance, device_of_unit: Sequence[int], start_s: Sequence[float]) -> dict[int, list[int]]:
    """Per-device order of the forward tasks by start time (ties: topological position), completed
    by :func:`full_order`."""
    rank = {t: i for i, t in enumerate(inst.topo)}
    out: dict[int, list[int]] = {}
    for t in sorted(range(inst.n_units), key=lambda t: (start_s[t], rank[t])):
        out.setdefault(device_of_unit[t], []).append(t)
    return full_order(inst, out)


def memory_fits(inst: Instance, device_of_unit: Sequence[int]) -> bool:
    """Every device holds its units' static memory plus the largest working memory (Eq. 5)."""
    used = np.zeros(inst.n_devices)
    work = np.zeros(inst.n_devices)
    for u, k in enumerate(device_of_unit):
        if not inst.allowed[u, k]:
            return False
        used[k] += inst.static_bytes[u]
        work[k] = max(work[k], inst.work_bytes[u])
    return bool(np.all(used + work <= inst.cap_bytes * (1 + 1e-12)))
