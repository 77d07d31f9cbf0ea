"""The plan ``placer.plan/v1`` and its validation against a problem (docs/formats.md).

A hand-written plan holding only ``format``, ``stages`` (``ops``, ``devices``),
``micro_batches`` and ``schedule`` is complete: every other field has a default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import numpy as np

from solvers.arrays import IntArray
from solvers.model import _check as check
from solvers.model.errors import InvalidPlan
from solvers.model.problem import Problem
from solvers.model.schedules import PIPELINE_SCHEDULES, stage_ranks

PLAN_FORMAT = "placer.plan/v1"
Status = Literal["optimal", "feasible", "infeasible", "unknown"]
STATUSES: tuple[str, ...] = ("optimal", "feasible", "infeasible", "unknown")

_PLAN_KEYS = frozenset(
    {"format", "solver", "solver_version", "options", "objective", "pass", "graph_digest", "topology_digest",
     "problem_digest", "status", "order", "stages", "micro_batches", "schedule", "virtual_stages", "recompute",
     "claimed_objective_s", "lower_bound_s", "metrics", "solve_time_s", "stats", "notes", "warnings",
     "sequence_parallel"}
)

_FREE_FORM = ("options", "metrics", "stats", "notes")
"""Members whose values are free-form JSON: nested at most :data:`~solvers.model._check.MAX_NESTING` levels."""


@dataclass(frozen=True, slots=True)
class Stage:
    """Ops run by one pipeline stage (or device group) on ``tp * R`` devices.

    ``tp`` is the stage's tensor-parallel degree: ``devices`` lists its ``R`` replicas replica-major,
    replica ``k`` being the tensor-parallel group ``devices[k*tp:(k+1)*tp]`` (docs/formats.md).
    """

    ops: tuple[str, ...]
    devices: tuple[str, ...]
    tp: int = 1

    @property
    def replicas(self) -> int:
        """The stage's data-parallel replicas ``R = len(devices) / tp``."""
        return len(self.devices) // self.tp

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ops": list(self.ops), "devices": list(self.devices)}
        if self.tp != 1:  # written only when not 1: a plan without tensor parallelism keeps its digest
            out["tp"] = self.tp
        return out


Recompute = bool | tuple[int, ...]
"""A plan's recomputation: ``True`` in every stage, ``False`` in none, or the sorted indices of
the stages that recompute their activations (docs/formats.md)."""


@dataclass(frozen=True)
class Plan:
    """A placement plus what the solver and the simulator said about it.

    ``recompute``: see :data:`Recompute`; :meth:`recomputes` answers for one stage.
    """

    stages: tuple[Stage, ...]
    micro_batches: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1  # stages per rank group (interleaved and V-shaped schedules; docs/formats.md)
    recompute: Recompute = False
    sequence_parallel: bool = False  # tensor-parallel stages also split norms and dropout along the sequence
    solver: str = "user"
    solver_version: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    objective: str | None = None
    pass_: str | None = None
    graph_digest: str | None = None
    topology_digest: str | None = None
    problem_digest: str | None = None
    status: Status = "unknown"
    order: Mapping[str, tuple[str, ...]] | None = None
    claimed_objective_s: float | None = None
    lower_bound_s: float | None = None
    metrics: Mapping[str, Any] | None = None
    solve_time_s: float | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[Mapping[str, str], ...] = ()  # {code, message}: why predicted times may be off (solvers.advice)

    def __post_init__(self) -> None:
        for key in ("claimed_objective_s", "lower_bound_s", "solve_time_s"):
            check_finite(getattr(self, key), key)
        check_finite(self.stats, "stats")
        check_finite(self.metrics, "metrics")
        check_finite(self.options, "options")

    def with_(self, **changes: Any) -> Plan:
        return replace(self, **changes)

    def recomputes(self, stage: int) -> bool:
        """Whether stage ``stage`` recomputes its activations in the backward pass."""
        return self.recompute if isinstance(self.recompute, bool) else stage in self.recompute

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": PLAN_FORMAT, "solver": self.solver, "solver_version": self.solver_version,
            "options": dict(self.options), "status": self.status,
            "stages": [s.to_dict() for s in self.stages], "micro_batches": self.micro_batches,
            "schedule": self.schedule, "stats": dict(self.stats),
            **({"virtual_stages": self.virtual_stages} if self.virtual_stages != 1 else {}),
            **({"sequence_parallel": True} if self.sequence_parallel else {}),
            "recompute": self.recompute if isinstance(self.recompute, bool) else list(self.recompute),
        }
        for key in ("objective", "graph_digest", "topology_digest", "problem_digest",
                    "claimed_objective_s", "lower_bound_s", "solve_time_s"):
            value = getattr(self, key)
            if value is not None:
                doc[key] = value
        if self.pass_ is not None:
            doc["pass"] = self.pass_
        if self.order is not None:
            doc["order"] = {d: list(ops) for d, ops in self.order.items()}
        if self.metrics is not None:
            doc["metrics"] = dict(self.metrics)
        if self.notes:
            doc["notes"] = list(self.notes)
        if self.warnings:
            doc["warnings"] = [dict(w) for w in self.warnings]
        return doc


def check_finite(value: Any, path: str) -> None:
    """Raise :class:`InvalidPlan` naming ``path`` if ``value`` holds a NaN or an infinity.

    A plan document is JSON (RFC 8259 has no NaN or infinity), so every number a solver
    reports (stats, metrics, objective, bound, options) must be finite; an undefined
    quantity is ``None``.
    """
    if isinstance(value, float | np.floating):
        if not math.isfinite(float(value)):
            raise InvalidPlan(f"{path}: must be a finite number or null, got {float(value)!r}", field=path)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_finite(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_finite(item, f"{path}[{i}]")


def plan_from_document(doc: Any) -> Plan:
    """Parse a ``placer.plan/v1`` document (structure only; see :func:`~solvers.validity.resolve_plan`)."""
    doc = check.mapping(doc, "", InvalidPlan)
    for key in _FREE_FORM:  # before anything walks them (check_finite recurses)
        if key in doc:
            check.shallow(doc[key], key, InvalidPlan)
    if doc.get("format") != PLAN_FORMAT:
        raise InvalidPlan(f"format: expected {PLAN_FORMAT!r}, got {doc.get('format')!r}", field="format")
    check.known_keys(doc, _PLAN_KEYS, "", InvalidPlan)
    stages = []
    status = doc.get("status", "unknown")
    if status not in STATUSES:
        raise InvalidPlan(f"status: must be one of {', '.join(STATUSES)}, got {status!r}", field="status")
    raw_stages = check.sequence(doc.get("stages", []), "stages", InvalidPlan, nonempty=status != "infeasible")
    for i, raw in enumerate(raw_stages):
        raw = check.mapping(raw, f"stages[{i}]", InvalidPlan)
        check.known_keys(raw, frozenset({"ops", "devices", "tp"}), f"stages[{i}]", InvalidPlan)
        ops = check.sequence(raw.get("ops", []), f"stages[{i}].ops", InvalidPlan)
        devices = check.sequence(raw.get("devices"), f"stages[{i}].devices", InvalidPlan, nonempty=True)
        tp = check.integer(raw.get("tp", 1), f"stages[{i}].tp", InvalidPlan, minimum=1)
        if len(devices) % tp:
            raise InvalidPlan(f"stages[{i}].devices: {len(devices)} devices are not a whole number of "
                              f"tensor-parallel groups of tp={tp} (a multiple of {tp}, replica-major)",
                              field=f"stages[{i}].devices")
        stages.append(Stage(
            tuple(check.string(o, f"stages[{i}].ops[{k}]", InvalidPlan) for k, o in enumerate(ops)),
            tuple(check.string(d, f"stages[{i}].devices[{k}]", InvalidPlan) for k, d in enumerate(devices)),
            tp,
        ))
    schedule = doc.get("schedule", "1f1b")
    if schedule not in PIPELINE_SCHEDULES:
        raise InvalidPlan(f"schedule: must be one of {', '.join(PIPELINE_SCHEDULES)}, got {schedule!r}",
                          field="schedule")
    order = None
    if doc.get("order") is not None:
        raw_order = check.mapping(doc["order"], "order", InvalidPlan)
        order = {str(d): tuple(check.string(o, f"order.{d}", InvalidPlan)
                               for o in check.sequence(ops, f"order.{d}", InvalidPlan))
                 for d, ops in raw_order.items()}
    numbers = {}
    for key in ("claimed_objective_s", "lower_bound_s", "solve_time_s"):
        if doc.get(key) is not None:
            numbers[key] = check.number(doc[key], key, InvalidPlan)
    return Plan(
        stages=tuple(stages),
        micro_batches=check.integer(doc.get("micro_batches", 1), "micro_batches", InvalidPlan, minimum=1),
        schedule=schedule,
        virtual_stages=check.integer(doc.get("virtual_stages", 1), "virtual_stages", InvalidPlan, minimum=1),
        recompute=_recompute(doc.get("recompute", False)),
        sequence_parallel=_flag(doc.get("sequence_parallel", False), "sequence_parallel"),
        solver=check.string(doc.get("solver", "user"), "solver", InvalidPlan),
        solver_version=str(doc.get("solver_version", "")),
        options=dict(check.mapping(doc.get("options", {}), "options", InvalidPlan)),
        objective=_choice(doc.get("objective"), ("throughput", "latency"), "objective"),
        pass_=_choice(doc.get("pass"), ("forward", "training"), "pass"),
        graph_digest=doc.get("graph_digest"),
        topology_digest=doc.get("topology_digest"),
        problem_digest=doc.get("problem_digest"),
        status=status,
        order=order,
        metrics=dict(check.mapping(doc["metrics"], "metrics", InvalidPlan)) if doc.get("metrics") else None,
        stats=dict(check.mapping(doc.get("stats", {}), "stats", InvalidPlan)),
        notes=tuple(check.string(n, f"notes[{k}]", InvalidPlan, nonempty=False)
                    for k, n in enumerate(check.sequence(doc.get("notes", []), "notes", InvalidPlan))),
        warnings=_warnings(doc.get("warnings", [])),
        **numbers,
    )


def _warnings(value: Any) -> tuple[dict[str, str], ...]:
    out = []
    for i, item in enumerate(check.sequence(value, "warnings", InvalidPlan)):
        entry = check.mapping(item, f"warnings[{i}]", InvalidPlan)
        extra = sorted(set(entry) - {"code", "message"})
        if extra:
            raise InvalidPlan(f"warnings[{i}].{extra[0]}: unknown field (known: code, message)",
                              field=f"warnings[{i}].{extra[0]}")
        out.append({k: check.string(entry.get(k), f"warnings[{i}].{k}", InvalidPlan) for k in ("code", "message")})
    return tuple(out)


def _recompute(value: Any) -> Recompute:
    """``true``, ``false`` or a list of distinct stage indices (returned sorted)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, list):
        raise InvalidPlan(f"recompute: must be true, false or a list of stage indices, got {value!r}",
                          field="recompute")
    stages = [check.integer(k, f"recompute[{i}]", InvalidPlan) for i, k in enumerate(value)]
    if len(set(stages)) != len(stages):
        raise InvalidPlan("recompute: a stage index is listed twice", field="recompute")
    return tuple(sorted(stages))


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidPlan(f"{key}: must be true or false, got {value!r}", field=key)
    return value


def _choice(value: Any, allowed: tuple[str, ...], key: str) -> str | None:
    if value is None:
        return None
    if value not in allowed:
        raise InvalidPlan(f"{key}: must be one of {', '.join(allowed)}, got {value!r}", field=key)
    return str(value)


@dataclass(frozen=True, eq=False)
class ResolvedPlan:
    """A plan in index form: what the simulator and the memory check work on.

    ``stage_of[v]`` = stage of op ``v``; ``stage_ops[s]`` = op positions of stage ``s`` in
    topological order; ``stage_devices[s]`` = device positions of its replicas;
    ``order[d]`` = op positions in the order device ``d`` runs them (``None``: simulator's rule);
    ``recompute[s]`` = whether stage ``s`` recomputes its activations.
    """

    plan: Plan
    stage_of: IntArray
    stage_ops: list[IntArray]
    stage_devices: list[list[int]]
    order: dict[int, list[int]] | None
    recompute: tuple[bool, ...]

    @property
    def n_stages(self) -> int:
        return len(self.stage_ops)

    def tp(self, stage: int) -> int:
        """Tensor-parallel degree of stage ``stage`` (its devices are ``replicas(stage)`` groups of it)."""
        return self.plan.stages[stage].tp

    def replicas(self, stage: int) -> int:
        """Data-parallel replicas of stage ``stage``: ``len(stage_devices[stage]) / tp``."""
        return len(self.stage_devices[stage]) // self.plan.stages[stage].tp

    def tp_groups(self, stage: int) -> list[list[int]]:
        """The tensor-parallel groups of stage ``stage`` (device positions), one per replica."""
        t = self.plan.stages[stage].tp
        devs = self.stage_devices[stage]
        return [devs[k:k + t] for k in range(0, len(devs), t)]

    def shard_rings(self, stage: int) -> list[list[int]]:
        """Per tensor-parallel rank ``j``: the devices holding shard ``j`` in every replica (its
        data-parallel all-reduce ring)."""
        t = self.plan.stages[stage].tp
        devs = self.stage_devices[stage]
        return [devs[j::t] for j in range(t)]


def resolve_structure(problem: Problem, plan: Plan) -> ResolvedPlan:
    """Check a plan's structure against a problem and return its index form.

    Rejects (``InvalidPlan`` naming the op, device or stage): unknown or missing ops, an op in
    two stages, unknown devices, a device used twice, an empty stage when not allowed,
    dependencies pointing backwards in a throughput plan, a throughput stage whose replicas do not
    split the micro-batch's rows, a latency stage on more than one device, pins not honoured, and
    an ``order`` inconsistent with the stages.  Memory is the cost model's: :func:`solvers.validity.resolve_plan`
    checks both.
    """
    g, topo = problem.graph, problem.topology
    if plan.status == "infeasible" and not plan.stages:
        raise InvalidPlan("the plan is infeasible and places nothing", field="stages")
    stage_of = np.full(g.n_ops, -1, dtype=np.int64)
    stage_devices: list[list[int]] = []
    used: dict[int, int] = {}
    group_of = _rank_groups(plan)
    for s, stage in enumerate(plan.stages):
        if stage.tp < 1 or len(stage.devices) % stage.tp:
            raise InvalidPlan(f"stages[{s}].tp: {len(stage.devices)} devices are not a whole number of "
                              f"tensor-parallel groups of tp={stage.tp}", field=f"stages[{s}].tp")
        if not stage.ops and problem.settings.no_empty_stage:
            raise InvalidPlan(f"stages[{s}]: the stage is empty", field=f"stages[{s}].ops")
        _place_stage_ops(g.index, stage.ops, stage_of, s)
        devs = []
        for dev in stage.devices:
            d = topo.index.get(dev)
            if d is None:
                raise InvalidPlan(f"stages[{s}].devices: unknown device {dev!r}", field=f"stages[{s}].devices", ref=dev)
            if d in used and group_of[used[d]] != group_of[s]:
                raise InvalidPlan(f"stages[{s}].devices: device {dev!r} is already used by stage {used[d]}"
                                  + (f" (with {plan.virtual_stages} virtual stages per rank and schedule "
                                     f"{plan.schedule!r}, stage {s} runs on the rank of stage {group_of[s]})"
                                     if plan.virtual_stages > 1 else ""),
                                  field=f"stages[{s}].devices", ref=dev)
            used[d] = s
            devs.append(d)
        stage_devices.append(devs)
    for s, stage in enumerate(plan.stages):
        first = group_of[s]
        if first != s and stage.tp != plan.stages[first].tp:
            raise InvalidPlan(f"stages[{s}].tp: stage {s} runs on the rank group of stage {first}, whose tp is "
                              f"{plan.stages[first].tp}, got {stage.tp}", field=f"stages[{s}].tp")
        if first != s and stage.devices != plan.stages[first].devices:
            raise InvalidPlan(f"stages[{s}].devices: with {plan.virtual_stages} virtual stages per rank and schedule "
                              f"{plan.schedule!r}, stage {s} runs on the devices of stage {first} "
                              f"({list(plan.stages[first].devices)}), got {list(stage.devices)}",
                              field=f"stages[{s}].devices")
    missing = np.flatnonzero(stage_of < 0)
    if len(missing):
        op = g.nodes[int(missing[0])].id
        raise InvalidPlan(f"stages: op {op!r} is in no stage ({len(missing)} ops missing)", field="stages", ref=op)
    if problem.objective == "throughput":
        back = np.flatnonzero(stage_of[g.edge_src] > stage_of[g.edge_dst])
        if len(back):
            e = g.edges[int(back[0])]
            raise InvalidPlan(
                f"edge {e.src!r} -> {e.dst!r} goes from stage {stage_of[g.index[e.src]]} back to stage "
                f"{stage_of[g.index[e.dst]]}: a throughput plan's stages must follow the dependencies",
                field="stages", ref=e.src)
    if problem.objective == "throughput":
        check_replica_rows(plan, problem.micro_batch_rows(plan.micro_batches), exported_graph(g.attrs))
    else:
        check_one_device_per_op(plan)
    for op, target in problem.settings.pinned.items():
        s = int(stage_of[g.index[op]])
        if isinstance(target, int) and s != target:
            raise InvalidPlan(f"op {op!r} is pinned to stage {target} but placed in stage {s}", field="stages", ref=op)
        if isinstance(target, str) and topo.index[target] not in stage_devices[s]:
            raise InvalidPlan(f"op {op!r} is pinned to device {target!r} but its stage runs on "
                              f"{list(plan.stages[s].devices)}", field="stages", ref=op)
    pos = g.topo_position
    stage_ops = [np.flatnonzero(stage_of == s) for s in range(len(plan.stages))]
    stage_ops = [ops[np.argsort(pos[ops], kind="stable")] for ops in stage_ops]
    order = _resolve_order(problem, plan, stage_of, stage_devices)
    if not isinstance(plan.recompute, bool) and any(not 0 <= k < len(plan.stages) for k in plan.recompute):
        k = next(k for k in plan.recompute if not 0 <= k < len(plan.stages))
        raise InvalidPlan(f"recompute: stage {k} does not exist (the plan has {len(plan.stages)} stages)",
                          field="recompute")
    recompute = tuple(plan.recomputes(s) for s in range(len(plan.stages)))
    return ResolvedPlan(plan, stage_of, stage_ops, stage_devices, order, recompute)


def _place_stage_ops(index: Mapping[str, int], ops: Sequence[str], stage_of: IntArray, s: int) -> None:
    """Set ``stage_of`` of stage ``s``'s ``ops``; raise :class:`InvalidPlan` naming the first op
    that is unknown or already in a stage (this one included: an op listed twice)."""
    idx = list(map(index.get, ops))
    if None not in idx and len(set(idx)) == len(idx):
        at = np.asarray(idx, dtype=np.int64)
        if not bool((stage_of[at] >= 0).any()):
            stage_of[at] = s
            return
    for op, v in zip(ops, idx, strict=True):  # the first op at fault, in the stage's order
        if v is None:
            raise InvalidPlan(f"stages[{s}].ops: unknown op {op!r}", field=f"stages[{s}].ops", ref=op)
        if stage_of[v] >= 0:
            raise InvalidPlan(f"stages[{s}].ops: op {op!r} is already in stage {stage_of[v]}",
                              field=f"stages[{s}].ops", ref=op)
        stage_of[v] = s


def replicas_split_rows(replicas: int, rows: int, exported: bool = False) -> bool:
    """Whether ``replicas`` data-parallel replicas share a micro-batch of ``rows`` rows evenly
    (each replica runs ``rows / replicas`` whole samples; the runtime slices the batch so).

    ``exported``: the graph came from ``torch.export`` (:func:`exported_graph`), which specialises a
    dimension of size 1, so a slice of one row out of a larger micro-batch is refused: the model
    exported at 1 row can hold other ops than the graph (GPT-2's ``expand`` of its position ids), and
    the launcher, which re-exports each slice, cannot run such a plan (``placer launcher check``)."""
    return replicas >= 1 and rows % replicas == 0 and not (exported and 1 == rows // replicas < rows)


def exported_graph(attrs: Mapping[str, Any]) -> bool:
    """Whether a graph with these ``attrs`` was made by ``torch.export`` (``placer extract`` writes
    ``attrs.export``): its replicas may not run 1-row slices (:func:`replicas_split_rows`)."""
    return "export" in attrs


def check_replica_rows(plan: Plan, rows: int, exported: bool = False) -> None:
    """Raise :class:`InvalidPlan` (field ``stages[i].devices``) for the first stage whose replica
    count ``len(devices) / tp`` does not divide a micro-batch of ``rows`` rows, or, for a graph
    ``torch.export`` made, leaves each replica one row of a larger micro-batch (:func:`replicas_split_rows`)."""
    for s, stage in enumerate(plan.stages):
        if stage.tp < 1 or not stage.devices:
            continue
        replicas = len(stage.devices) // stage.tp
        if rows % replicas:
            raise InvalidPlan(f"stages[{s}].devices: the micro-batch of {rows} rows does not split evenly over "
                              f"{replicas} replicas (a stage's replica count must divide the rows)",
                              field=f"stages[{s}].devices")
        if not replicas_split_rows(replicas, rows, exported):
            raise InvalidPlan(f"stages[{s}].devices: {replicas} replicas leave each one row of a micro-batch of {rows} "
                              "rows; the graph was made by torch.export, which specialises a dimension of size 1, "
                              "so the model exported at 1 row need not hold the graph's ops (the launcher cannot "
                              "run it): use fewer replicas or more rows per micro-batch",
                              field=f"stages[{s}].devices")


def check_one_device_per_op(plan: Plan) -> None:
    """Raise :class:`InvalidPlan` (field ``stages[i].devices``) for the first stage of a latency plan
    that runs on more than one device.

    A latency plan places one batch op by op on devices, each op on exactly one device (MOIRAI
    §III-D, constraint (4c)); a stage is one device's ops.  A group of replicas splitting the
    batch, or a tensor-parallel group, is a throughput-plan construct (docs/formats.md), and the
    launcher runs neither in a latency plan.  Refusing them here is what makes the bounds the
    latency models prove hold for every plan the problem admits (docs/moirai.md, "Limits").
    """
    for s, stage in enumerate(plan.stages):
        if len(stage.devices) > 1:
            shown = ", ".join(repr(d) for d in stage.devices[:4]) + (", ..." if len(stage.devices) > 4 else "")
            kind = f"tensor-parallel groups of tp={stage.tp}" if stage.tp > 1 else "replicas"
            raise InvalidPlan(f"stages[{s}].devices: a latency plan places each op on one device, but stage {s} "
                              f"runs on {len(stage.devices)} devices ({shown}) as {kind}; replicated and "
                              "tensor-parallel stages belong to throughput plans", field=f"stages[{s}].devices")


def _rank_groups(plan: Plan) -> list[int]:
    """For each stage, the first stage of its rank group (itself when every stage has its own devices).

    With ``virtual_stages`` ``v > 1`` the ``R * v`` stages run on ``R`` rank groups, mapped the way the
    schedule needs (:func:`~solvers.model.schedules.stage_ranks`: round-robin, or V-shaped for ZBV and
    DualPipeV); the stages of one group list the same devices.
    """
    n, v = len(plan.stages), plan.virtual_stages
    if v == 1:
        return list(range(n))
    if n % v:
        raise InvalidPlan(f"virtual_stages: {n} stages are not {v} per rank (a multiple of {v})",
                          field="virtual_stages")
    if plan.schedule in ("gpipe", "1f1b"):
        raise InvalidPlan(f"virtual_stages: schedule {plan.schedule!r} runs one stage per rank; "
                          "interleaved-1f1b, looped-bfs, interleaved-zb, zbv and dualpipev run several",
                          field="virtual_stages")
    ranks = stage_ranks(plan.schedule, n // v, v)
    first: dict[int, int] = {}
    return [first.setdefault(r, j) for j, r in enumerate(ranks)]


def _resolve_order(problem: Problem, plan: Plan, stage_of: IntArray,
                   stage_devices: Sequence[Sequence[int]]) -> dict[int, list[int]] | None:
    if plan.order is None:
        return None
    g, topo = problem.graph, problem.topology
    out: dict[int, list[int]] = {}
    for dev, ops in plan.order.items():
        d = topo.index.get(dev)
        if d is None:
            raise InvalidPlan(f"order: unknown device {dev!r}", field="order", ref=dev)
        stage = next((s for s, devs in enumerate(stage_devices) if d in devs), None)
        if stage is None:
            raise InvalidPlan(f"order.{dev}: the device runs no stage", field=f"order.{dev}", ref=dev)
        idx = list(map(g.index.get, ops))
        if None in idx or not bool((stage_of[np.asarray(idx, dtype=np.int64)] == stage).all()):
            op = next(op for op, v in zip(ops, idx, strict=True) if v is None or stage_of[v] != stage)
            raise InvalidPlan(f"order.{dev}: op {op!r} does not run on device {dev!r}", field=f"order.{dev}", ref=op)
        if len(set(idx)) != len(idx) or len(idx) != int((stage_of == stage).sum()):
            raise InvalidPlan(f"order.{dev}: must list each op of stage {stage} exactly once",
                              field=f"order.{dev}", ref=dev)
        out[d] = cast(list[int], idx)  # no None left (checked above)
    return out
