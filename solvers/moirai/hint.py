"""Translate a timed schedule into a full assignment of the MILP's variables (the warm start)."""

from __future__ import annotations

from solvers.moirai.linear_model import Formulation
from solvers.moirai.schedule import TimedSchedule


def hint_from_schedule(f: Formulation, sched: TimedSchedule) -> dict[int, float]:
    """Values of every variable of ``f`` that reproduce ``sched`` (feasible for the model)."""
    inst, sc = f.inst, f.scale
    out: dict[int, float] = {}
    dev = sched.device_of_unit
    for u, row in enumerate(f.x):
        for k, v in row.items():
            out[v] = 1.0 if dev[u] == k else 0.0
    for t in range(inst.n_tasks):
        out[f.S[t]] = sched.start_s[t] * sc
        out[f.C[t]] = sched.end_s[t] * sc
    for q in f.messages:
        timed = sched.messages.get((q.task, q.slot, q.dst))
        active = timed is not None
        s0, e0 = timed if timed is not None else (sched.end_s[q.task], sched.end_s[q.task])
        out[q.S], out[q.C], out[q.T] = s0 * sc, e0 * sc, (e0 - s0) * sc
        out[q.z] = 1.0 if active else 0.0
        for k1, v in q.u.items():
            out[v] = 1.0 if active and dev[inst.task_unit[q.task]] == k1 else 0.0
    rank = {t: i for i, t in enumerate(inst.topo)}
    for (i, j), v in f.delta.items():
        out[v] = 1.0 if (sched.start_s[i], rank[i]) < (sched.start_s[j], rank[j]) else 0.0
    for k in range(inst.n_devices):
        name = f"W[{k}]"
        if name in f.model.names:
            cap = float(inst.cap_bytes[k])
            out[f.model.names.index(name)] = max(
                (float(inst.work_bytes[u]) / cap for u in range(inst.n_units) if dev[u] == k), default=0.0)
    out[f.cmax] = sched.makespan_s * sc
    return out
