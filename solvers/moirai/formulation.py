"""The MILP of MOIRAI §III-D as a back-end-neutral linear model.

Augmented DAG (Fig. 8): every task (a unit's forward or backward pass) is a node; every
(producer task ``a``, send slot, consumer device ``k''``) with positive bytes is a
communication node ``q`` — the simulator sends one message per producer and consumer device
(forward) or per edge (backward), so the communication nodes of Fig. 8 are per send slot and
destination device rather than per link.

Variables (Table II; times in model units, ``seconds * scale``, horizon = 1000 units):
  ``x[u][k]``      unit ``u`` on device ``k`` (binary)
  ``S[t]``, ``C[t]`` start / completion of task ``t``
  ``q.S``, ``q.C``, ``q.T`` start / completion / duration of message ``q``
  ``q.z``          message ``q`` is sent (``z_q``, binary)
  ``q.u[k']``      message ``q`` leaves on channel ``k' -> k''`` (``u_{q k' k''}``, binary)
  ``delta[i, j]``  for an unordered task pair ``i < j``: ``i`` runs before ``j`` (binary)
  ``W[k]``         the largest working memory on device ``k`` (fraction of its capacity)
  ``cmax``         completion of the last task (objective, Eq. 4)

Constraints: precedence 4a, duration 4b, assignment 4c, memory 5, non-overlap 6, channel
selection 7 with per-pair, direction-dependent times, congestion 8 per channel, serving
messages in the sender's task order (the simulator's rule).  In a training pass the backward
tasks of a device run after its forward tasks in the reverse order, so the backward pairs reuse
the forward pairs' ``delta`` reversed.  All big-M constants equal the
horizon ``M``: every time variable lies in ``[0, M]``, so a relaxed row always holds.
"""

from __future__ import annotations

from solvers.moirai.hint import hint_from_schedule
from solvers.moirai.instance import Instance
from solvers.moirai.linear_model import Formulation, LinearModel, Message
from solvers.moirai.schedule import TimedSchedule

HORIZON_UNITS = 1000.0
TINY_UNITS = 1e-7  # transfer times under 1e-10 of the horizon are left out of the model


def horizon_s(inst: Instance, incumbent: TimedSchedule | None) -> float:
    """Big-M horizon: the incumbent's makespan, else a serial bound on any ASAP schedule."""
    if incumbent is not None and incumbent.makespan_s > 0:
        return incumbent.makespan_s
    k = inst.n_devices
    serial = float(inst.dur_s.max(axis=1).sum())
    for t in range(inst.n_tasks):
        for _, b in inst.succ[t]:
            serial += max((inst.comm_s(b, a, c) for a in range(k) for c in range(k)), default=0.0)
    return max(serial, 1e-9)


def messages_of(inst: Instance) -> list[Message]:
    """Communication nodes: per producer task, send slot and possible consumer device (positive bytes)."""
    out = []
    for t in range(inst.n_tasks):
        ua = inst.task_unit[t]
        for si, slot in enumerate(inst.slots[t]):
            edges = [inst.succ[t][i] for i in slot if inst.task_unit[inst.succ[t][i][0]] != ua]
            for k2 in range(inst.n_devices):
                cons = [(s, b) for s, b in edges if b > 0 and inst.allowed[inst.task_unit[s], k2]]
                if cons and any(inst.allowed[ua, k] for k in range(inst.n_devices) if k != k2):
                    out.append(Message(t, si, k2, cons, [s for s, b in edges if b <= 0]))
    return out


def build(inst: Instance, incumbent: TimedSchedule | None) -> Formulation:
    """Build the MILP (module doc) with the incumbent as hint and cut-off."""
    m = LinearModel()
    hz = horizon_s(inst, incumbent)
    scale = HORIZON_UNITS / hz
    big = HORIZON_UNITS
    n_dev = inst.n_devices
    x = [{k: m.var(f"x[{u},{k}]", 0, 1, True) for k in range(n_dev) if inst.allowed[u, k]} for u in range(inst.n_units)]
    for u in range(inst.n_units):
        m.row(((v, 1.0) for v in x[u].values()), 1.0, 1.0)  # (4c)
    S = [m.var(f"S[{t}]", 0, big) for t in range(inst.n_tasks)]
    C = [m.var(f"C[{t}]", 0, big) for t in range(inst.n_tasks)]
    for t in range(inst.n_tasks):  # (4b)
        u = inst.task_unit[t]
        m.row([(C[t], 1.0), (S[t], -1.0)] + [(v, -float(inst.dur_s[t, k]) * scale) for k, v in x[u].items()], 0.0, 0.0)
        for s, _ in inst.succ[t]:  # (4a)
            m.row([(S[s], 1.0), (C[t], -1.0)], 0.0)
    _memory(inst, m, x)
    msgs = messages_of(inst)
    for q in msgs:
        _message(inst, m, q, x, S, C, scale, big)
    delta = _non_overlap(inst, m, x, S, C, big)
    _congestion(inst, m, msgs, delta, big)
    cmax = m.var("cmax", 0, big)
    for t in range(inst.n_tasks):
        if not inst.succ[t]:
            m.row([(cmax, 1.0), (C[t], -1.0)], 0.0)
    m.objective[cmax] = 1.0
    f = Formulation(inst, m, scale, hz, x, S, C, msgs, delta, cmax)
    if incumbent is not None:
        m.hint.update({v: min(max(val, m.lb[v]), m.ub[v]) for v, val in hint_from_schedule(f, incumbent).items()})
    return f


def _memory(inst: Instance, m: LinearModel, x: list[dict[int, int]]) -> None:
    """(5): static bytes of the units on ``k`` plus its largest working memory fit its capacity."""
    for k in range(inst.n_devices):
        on_k = [(u, x[u][k]) for u in range(inst.n_units) if k in x[u]]
        cap = float(inst.cap_bytes[k])
        if cap <= 0:
            for _, v in on_k:
                m.row([(v, 1.0)], ub=0.0)
            continue
        w = m.var(f"W[{k}]", 0.0, 1.0)
        m.row([(w, 1.0)] + [(v, float(inst.static_bytes[u]) / cap) for u, v in on_k], ub=1.0)
        for u, v in on_k:
            if inst.work_bytes[u] > 0:
                m.row([(w, 1.0), (v, -float(inst.work_bytes[u]) / cap)], 0.0)


def _message(inst: Instance, m: LinearModel, q: Message, x: list[dict[int, int]], S: list[int], C: list[int],
             scale: float, big: float) -> None:
    """(7): activation ``z``, channel choice ``u``, duration, and the consumers waiting for it."""
    a, k2 = q.task, q.dst
    ua = inst.task_unit[a]
    tag = f"{a},{q.slot},{k2}"
    q.S, q.C, q.T = m.var(f"qS[{tag}]", 0, big), m.var(f"qC[{tag}]", 0, big), m.var(f"qT[{tag}]", 0, big)
    q.z = m.var(f"z[{tag}]", 0, 1, True)
    xa2 = [(x[ua][k2], -1.0)] if k2 in x[ua] else []
    for b, _ in q.consumers:
        m.row([(q.z, 1.0), (x[inst.task_unit[b]][k2], -1.0)] + [(v, -c) for v, c in xa2], 0.0)
    for k1, v in x[ua].items():
        if k1 == k2:
            continue
        q.u[k1] = m.var(f"u[{a},{q.slot},{k1},{k2}]", 0, 1, True)
        m.row([(q.u[k1], 1.0), (v, -1.0), (q.z, -1.0)], -1.0)
        m.row([(q.u[k1], 1.0), (v, -1.0)], ub=0.0)
        for b, size in q.consumers:
            p = inst.comm_s(size, k1, k2) * scale
            if p < TINY_UNITS:  # below solver tolerances (engines drop such coefficients)
                continue
            m.row([(q.T, 1.0), (v, -p), (x[inst.task_unit[b]][k2], -p)], -p)
    m.row([(q.z, 1.0)] + [(v, -1.0) for v in q.u.values()], 0.0, 0.0)
    m.row([(q.C, 1.0), (q.S, -1.0), (q.T, -1.0)], 0.0, 0.0)
    m.row([(q.S, 1.0), (C[a], -1.0)], 0.0)
    for b, _ in q.consumers:
        m.row([(S[b], 1.0), (q.C, -1.0), (x[inst.task_unit[b]][k2], -big)], -big)
    for b in q.zero_consumers:
        if k2 in x[inst.task_unit[b]]:
            m.row([(S[b], 1.0), (q.C, -1.0), (x[inst.task_unit[b]][k2], -big), (q.z, -big)], -2 * big)


def shared_devices(inst: Instance, x: list[dict[int, int]], i: int, j: int) -> list[int]:
    return [k for k in x[inst.task_unit[i]] if k in x[inst.task_unit[j]]]


def fwd_before_bwd(inst: Instance) -> list[tuple[int, int]]:
    """Training: pairs (forward ``i``, backward ``j'``) of different units not already ordered."""
    n = inst.n_units
    if not inst.training:
        return []
    return [(i, n + j) for i in range(n) for j in range(n) if i != j and not (inst.reach[i] >> (n + j)) & 1]


def _non_overlap(inst: Instance, m: LinearModel, x: list[dict[int, int]], S: list[int], C: list[int],
                 big: float) -> dict[tuple[int, int], int]:
    """(6): two unordered tasks on one device do not overlap; ``delta[i, j] = 1``: ``i`` first.

    In a training pass ``delta`` exists for forward pairs only: backward ``i'`` runs after ``j'``
    exactly when ``i`` runs before ``j``, and a device's forward tasks precede its backward tasks.
    """
    delta: dict[tuple[int, int], int] = {}
    n = inst.n_units if inst.training else inst.n_tasks
    for i in range(n):
        for j in range(i + 1, n):
            shared = [] if inst.comparable(i, j) else shared_devices(inst, x, i, j)
            if not shared:
                continue
            d = delta[(i, j)] = m.var(f"delta[{i},{j}]", 0, 1, True)
            for k in shared:
                same = [(x[inst.task_unit[i]][k], -big), (x[inst.task_unit[j]][k], -big)]
                m.row([(S[i], 1.0), (C[j], -1.0), (d, big), *same], -2 * big)
                m.row([(S[j], 1.0), (C[i], -1.0), (d, -big), *same], -3 * big)
                if inst.training:  # backward pair, reversed: d = 1 -> j' before i'
                    bi, bj = inst.n_units + i, inst.n_units + j
                    m.row([(S[bi], 1.0), (C[bj], -1.0), (d, -big), *same], -3 * big)
                    m.row([(S[bj], 1.0), (C[bi], -1.0), (d, big), *same], -2 * big)
    for i, bj in fwd_before_bwd(inst):
        for k in shared_devices(inst, x, i, bj):
            same = [(x[inst.task_unit[i]][k], -big), (x[inst.task_unit[bj]][k], -big)]
            m.row([(S[bj], 1.0), (C[i], -1.0), *same], -2 * big)
    return delta


def precedes(inst: Instance, a: int, c: int) -> bool:
    """Task ``a`` runs before task ``c`` whenever both are on one device (a path, or forward before backward)."""
    return bool((inst.reach[a] >> c) & 1) or (inst.training and a < inst.n_units <= c)


def order_key(inst: Instance, a: int, c: int) -> tuple[tuple[int, int], bool]:
    """The ``delta`` key deciding the order of unordered tasks ``a``, ``c`` (both forward or both
    backward), and whether ``delta = 1`` means ``a`` first."""
    n = inst.n_units
    backward = inst.training and a >= n
    i, j = (a - n, c - n) if backward else (a, c)
    return (min(i, j), max(i, j)), (i < j) != backward


def _congestion(inst: Instance, m: LinearModel, msgs: list[Message], delta: dict[tuple[int, int], int],
                big: float) -> None:
    """(8) per channel ``k' -> k''``: one message at a time, in the sender's task order."""
    by_dst: dict[int, list[Message]] = {}
    for q in msgs:
        by_dst.setdefault(q.dst, []).append(q)
    for group in by_dst.values():
        for i, q in enumerate(group):
            for r in group[i + 1:]:
                a, c = q.task, r.task
                for k1 in q.u.keys() & r.u.keys():
                    both = [(q.u[k1], -big), (r.u[k1], -big)]
                    if a == c or precedes(inst, a, c):  # one sender's slots leave in slot order
                        m.row([(r.S, 1.0), (q.C, -1.0), *both], -2 * big)
                    elif precedes(inst, c, a):
                        m.row([(q.S, 1.0), (r.C, -1.0), *both], -2 * big)
                    else:
                        key, a_first = order_key(inst, a, c)
                        d = delta[key]
                        first, second = (q, r) if a_first else (r, q)  # d = 1: ``first`` leaves first
                        m.row([(second.S, 1.0), (first.C, -1.0), (d, -big), *both], -3 * big)
                        m.row([(first.S, 1.0), (second.C, -1.0), (d, big), *both], -2 * big)
