"""The ``moirai`` solver: fusion coarsening + the §III-D MILP, on interchangeable back-ends.

Pipeline: GCOF (Alg. 1) -> coarsening to ``max_nodes`` -> instance (per-device times, memory,
channels) -> warm start (list schedule / single device) -> one formulation solved by the chosen
``backend`` in a child process killed at the deadline -> the schedule re-timed exactly, expanded
to ops, and scored by the simulator.  The plan has one stage per used device and ``order`` =
each device's ops in the order the model scheduled them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.moirai.backends.result import BackendResult
from solvers.moirai.backends.runner import run_backend
from solvers.moirai.coarsen_budget import coarsen_to_budget
from solvers.moirai.formulation import Formulation, build
from solvers.moirai.gcof import Grouping, gcof, identity_grouping, make_grouping
from solvers.moirai.instance import Instance, build_instance
from solvers.moirai.rules import FusionRules
from solvers.moirai.schedule import TimedSchedule, memory_fits, order_by_start, replay
from solvers.moirai.warmstart import warm_start

OPTIMAL_GAP = 1e-4  # "optimal" = proven within this relative gap
BOUND_SAFETY = 1e-6  # proven bounds are shaved by this relative amount (solver tolerances)
RESERVE_S = 0.4  # kept for decoding, expanding and simulating after the back-end
HEURISTICS = ("heft", "celeritas", "m-sct")  # warm-start candidates, used when registered


class MoiraiOptions(SolverOptions):
    """Options of ``moirai`` (docs/moirai.md)."""

    backend: Literal["cbc", "scip", "highs", "pulp-cbc", "cp-sat"] = Field(
        "cp-sat", description="engine for the one formulation: OR-Tools CBC / SCIP / HiGHS, PuLP CBC, or CP-SAT")
    fusion: bool = Field(True, description="coarsen by operator-fusion rules first (GCOF, Alg. 1)")
    fusion_rules: list[list[str]] | None = Field(
        None, description="fusion rules, each an ordered list of op types; default: docs/moirai.md")
    max_nodes: int = Field(40, ge=1, le=2000, description="node budget of the MILP's coarsened graph")
    warm_start: bool = Field(True, description="start from the best heuristic plan (HEFT, Celeritas, list "
                                               "schedule, single device): hint, cut-off and big-M horizon")
    solve_time_limit_s: float = Field(60.0, gt=0, description="cap on the back-end's time within the budget")
    threads: int = Field(1, ge=1, le=64, description="threads given to the back-end")


def _expand(problem: Problem, inst: Instance, sched: TimedSchedule) -> tuple[tuple[Stage, ...], dict[str, tuple[str, ...]]]:
    """One stage per used device; ``order`` = its forward tasks' ops in scheduled order."""
    g, topo = problem.graph, problem.topology
    stages, order = [], {}
    for k in sorted(sched.order):
        ops = [g.nodes[v].id for t in sched.order[k] if t < inst.n_units for v in inst.grouping.groups[t]]
        if not ops:
            continue
        dev = topo.devices[k].id
        stages.append(Stage(tuple(ops), (dev,)))
        order[dev] = tuple(ops)
    return tuple(stages), order


def _decode(f: Formulation, result: BackendResult) -> TimedSchedule | None:
    """The back-end's placement and start order, re-timed exactly; ``None`` if unusable."""
    if result.values is None:
        return None
    inst, vals = f.inst, result.values
    device = [max(row, key=lambda k: vals[row[k]]) for row in f.x]
    if not memory_fits(inst, device):
        return None
    start = [vals[f.S[t]] for t in range(inst.n_tasks)]
    return replay(inst, device, order_by_start(inst, device, start))


def _proved_infeasible(problem: Problem, inst: Instance) -> str | None:
    """A short proof that nothing fits, or ``None``: an op too big for every device, or too little memory."""
    single = build_instance(problem, identity_grouping(problem.graph)) if inst.n_units != problem.graph.n_ops else inst
    cap = single.cap_bytes
    for u in range(single.n_units):
        need = single.static_bytes[u] + single.work_bytes[u]
        if not any(single.allowed[u, k] and need <= cap[k] for k in range(single.n_devices)):
            op = problem.graph.nodes[single.grouping.groups[u][0]].id
            return f"op {op!r} needs {need / 2**30:.3f} GiB, more than any allowed device holds"
    if float(single.static_bytes.sum()) > float(cap.sum()):
        return "the ops need more memory than all devices together hold"
    return None


class MoiraiSolver:
    """MOIRAI: operator-fusion coarsening and exact MILP placement on heterogeneous devices."""

    name: ClassVar[str] = "moirai"
    summary: ClassVar[str] = ("MOIRAI: fusion-rule coarsening + MILP placement and scheduling (latency), "
                              "on CBC / SCIP / HiGHS / PuLP / CP-SAT")
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = MoiraiOptions
    version: ClassVar[str] = "1.0"

    def solve(self, problem: Problem, options: MoiraiOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        t0 = time.perf_counter()
        fused, grouping = _coarsen(problem, options)
        inst = build_instance(problem, grouping)
        stats: dict[str, object] = {
            "nodes_original": problem.graph.n_ops, "nodes_fused": fused,
            "nodes_milp": inst.n_units, "tasks": inst.n_tasks, "backend": options.backend,
            "coarsened": inst.n_units != problem.graph.n_ops}
        proof = _proved_infeasible(problem, inst)
        if proof is not None:
            return Plan(stages=(), status="infeasible", stats=stats, notes=(proof,))
        incumbent = warm_start(inst, HEURISTICS, budget.sub(0.15)) if options.warm_start else None
        if incumbent is not None:
            stats["warm_start_s"] = incumbent.makespan_s
            progress(ProgressEvent(0.05, incumbent.makespan_s, None, "warm start"))
        f = build(inst, incumbent)
        stats.update(variables=len(f.model.names), rows=len(f.model.rows), messages=len(f.messages),
                     horizon_s=f.horizon_s, prepare_s=time.perf_counter() - t0)
        result = self._run(f, options, budget, problem.settings.seed, progress)
        stats.update(backend_status=result.status, backend_message=result.message)
        found = _decode(f, result)
        candidates = [c for c in (found, incumbent) if c is not None]
        if not candidates and stats["coarsened"]:  # the units may be too big: list-schedule the ops
            inst = build_instance(problem, identity_grouping(problem.graph))
            fallback = warm_start(inst)
            candidates = [fallback] if fallback is not None else []
            stats["fallback"] = "list schedule on the uncoarsened graph"
            result = BackendResult("unknown", message=result.message)
        if not candidates:
            proved = result.status == "infeasible" and not stats["coarsened"]
            note = ("the MILP proves that no placement fits in memory" if proved else
                    "no memory-feasible placement found (not proven infeasible)")
            return Plan(stages=(), status="infeasible", stats=stats, notes=(note,))
        plan = self._finish(problem, inst, f, result, candidates, stats)
        progress(ProgressEvent(1.0, plan.claimed_objective_s, plan.lower_bound_s, "done"))
        return plan

    def _run(self, f: Formulation, options: MoiraiOptions, budget: Budget, seed: int,
             progress: ProgressCallback) -> BackendResult:
        hard = min(budget.remaining_s() - RESERVE_S, options.solve_time_limit_s)
        if hard < 0.2:
            return BackendResult("unknown", message="no time left for the back-end")
        started = time.monotonic()

        def report(incumbent: float | None, bound: float | None) -> None:
            frac = min(0.95, 0.05 + 0.9 * (time.monotonic() - started) / hard)
            progress(ProgressEvent(frac, None if incumbent is None else incumbent / f.scale,
                                   None if bound is None else bound / f.scale, options.backend))

        own = max(0.1, 0.85 * hard - 0.15)
        return run_backend(f, options.backend, own, hard, options.threads, seed, report)

    def _finish(self, problem: Problem, inst: Instance, f: Formulation, result: BackendResult,
                candidates: list[TimedSchedule], stats: dict[str, object]) -> Plan:
        """The candidate (back-end solution first, then warm start) the simulator scores best."""
        from solvers.simulate import simulate

        scored = []
        for i, sched in enumerate(candidates):
            stages, order = _expand(problem, inst, sched)
            plan = Plan(stages=stages, micro_batches=1, order=order)
            scored.append((float(simulate(problem, plan).metrics["objective_s"]), i, plan, sched))
        simulated, _, plan, best = min(scored, key=lambda c: (c[0], c[1]))
        exact = not stats["coarsened"]
        bound_s = None if result.bound is None else result.bound / f.scale * (1 - BOUND_SAFETY)
        gap = None if bound_s is None else max(0.0, (best.makespan_s - bound_s) / best.makespan_s)
        optimal = exact and result.status == "optimal" and gap is not None and gap <= OPTIMAL_GAP
        stats.update(model_makespan_s=best.makespan_s, milp_objective_s=(
            None if result.objective is None else result.objective / f.scale), bound_s=bound_s, gap=gap,
            bound_applies_to="problem" if exact else "coarsened graph",
            chosen="back-end solution" if best is candidates[0] and result.values is not None else "warm start")
        return plan.with_(status="optimal" if optimal else "feasible", lower_bound_s=bound_s if exact else None,
                          claimed_objective_s=simulated, stats=stats)


def _coarsen(problem: Problem, options: MoiraiOptions) -> tuple[int, Grouping]:
    """GCOF (when enabled), then the node budget; returns the GCOF size and the final units."""
    g = problem.graph
    grouping = gcof(g, FusionRules.parse(options.fusion_rules)) if options.fusion else identity_grouping(g)
    fused = grouping.n_units
    grouping = coarsen_to_budget(g, grouping, options.max_nodes, problem.settings.pass_ == "training")
    return fused, _respect_pins(problem, grouping)


def _respect_pins(problem: Problem, grouping: Grouping) -> Grouping:
    """Split units that hold ops pinned to different devices back into single ops."""
    pins = {problem.graph.index[op]: t for op, t in problem.settings.pinned.items() if isinstance(t, str)}
    if not pins:
        return grouping
    groups: list[Sequence[int]] = []
    labels: list[str] = []
    for ops, label in zip(grouping.groups, grouping.labels, strict=True):
        if len({pins[v] for v in ops if v in pins}) > 1:
            groups += [(v,) for v in ops]
            labels += [problem.graph.nodes[v].op for v in ops]
        else:
            groups.append(ops)
            labels.append(label)
    return make_grouping(problem.graph, [list(g) for g in groups], labels)

