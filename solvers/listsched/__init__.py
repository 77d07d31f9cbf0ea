"""Shared list-scheduling machinery for latency plans (m-TOPO, m-ETF, m-SCT, HEFT, Celeritas).

The schedulers work on a :class:`TaskGraph` (the op graph itself, or Celeritas' coarse graph)
and time it with the shared cost model (docs/cost-model.md) under the op-level simulator's rules:

* a task's duration on device ``d`` is its forward time there (``ComputeModel``); in a
  training pass (``problem.training``) forward + backward, and every message counts twice
  (activation forward, gradient back).  This "combined pass" is the one approximation the
  schedulers make: the simulator runs all forwards, then the backwards in reverse order, and
  for a placement the two halves mirror each other;
* a producer's output needed on another device is one message per (producer, device), sent
  when the producer ends, postal time ``latency + bytes / bandwidth`` on the widest-path
  channel, one message at a time per directed channel (FIFO in booking order); an empty
  message (zero bytes) is a pure dependency: free, and it neither waits for nor occupies its
  channel (docs/simulator.md);
* devices run one task at a time; ``insertion=True`` lets a task fill an idle gap (HEFT,
  Celeritas' Adjusting Placement), otherwise it is appended (ETF-style device-ready times);
* memory is the latency-plan model of ``solvers.cost.memory.device_memory_bytes``, tracked
  exactly: parameters (x (1 + optimizer) in training) + activations summed, plus the largest
  single-op working memory.

The claimed objective of every plan is the simulator's, computed at the end
(:func:`finish_latency_plan`); the internal timing only guides the decisions.
"""

from solvers.listsched.finish import (
    TIMED_OUT_NOTE,
    budget_before_end,
    end_reserve_s,
    finish_latency_plan,
    finish_schedule,
    infeasible_plan,
    obviously_infeasible,
    start_op_schedule,
)
from solvers.listsched.orders import b_level, is_topological, levels, m_topo_order
from solvers.listsched.schedule import ListSchedule, MemoryTracker, complete_fast, expired_every
from solvers.listsched.tasks import (
    LatencyCosts,
    TaskGraph,
    check_latency_pins,
    device_caps_bytes,
    latency_costs,
    op_memory_bytes,
    op_task_graph,
    postal_planning,
)

__all__ = [
    "TIMED_OUT_NOTE", "LatencyCosts", "ListSchedule", "MemoryTracker", "TaskGraph", "b_level", "budget_before_end",
    "check_latency_pins", "complete_fast", "device_caps_bytes", "end_reserve_s", "expired_every", "finish_latency_plan",
    "finish_schedule", "infeasible_plan", "is_topological", "latency_costs", "levels", "m_topo_order",
    "obviously_infeasible", "op_memory_bytes", "op_task_graph", "postal_planning", "start_op_schedule",
]
