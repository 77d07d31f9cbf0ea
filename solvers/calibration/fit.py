"""Fit a calibration to run records by least squares (docs/cost-model.md "Calibration").

Three bounded fits (:func:`scipy.optimize.least_squares`, relative residuals ``predicted / measured - 1``,
robust ``soft_l1`` loss by default):

1. **compute and channels** from the profiled parts of the runs.  A stage of ``R`` replicas of device
   kind ``K`` runs one micro-batch forward in ``f_s = sum_v (a_{K,c(v)} t_K(v) + o_K) / R`` and its
   backward in ``b_s = sum_{v: bwd>0} (a_{K,c(v)} u_K(v) + o_K) / R`` (``+ f_s`` with recomputation),
   ``t_K``, ``u_K`` being the uncalibrated forward and backward times of op ``v`` on ``K``, ``c(v)`` its
   op class (:func:`~solvers.calibration.document.op_class`), ``a`` the scales and ``o`` the launch
   overhead; the measured figure is a rank's median ``forward_s`` / ``backward_s`` times the run's
   profiler ratio ``rho`` (:func:`~solvers.model.run.profiler_ratio`: the plain over the
   profiled iteration; those figures come from the steps run under ``torch.profiler``, which are
   slower; a transfer, one op, is taken as recorded).  Where some run's ``rho`` is below 1 the fits run
   twice, with the stage times scaled by ``rho`` and as recorded, and the one whose calibrated iterations
   of the fitted runs come closer (median relative error) is kept (``fit.observations.profiled_stages_scaled``):
   a profiled step can be slower for work outside the stages (the profiler's start and stop, building
   its trace) or for one step's noise, and then scaling the stage times by ``rho`` under-counts them.
   A transfer of
   ``n`` bytes on a channel of class ``h`` takes ``l_h + n / B_h`` (latency, bandwidth); the measured
   figure is the fastest send or receive of that size in the run (a recorded duration includes waiting
   for the peer; the fastest is the one whose peer was ready), the class being that of the rank's peers
   (ranks whose peers span both classes are left out).  A class whose seconds per byte runs to its bound
   0 (no transfer size showed a bandwidth: on one host a send ends once its data are buffered), or whose
   fit predicts its own transfers no closer than the topology's latency and bandwidth (median relative
   error), is left out of the calibration, keeping the topology's figures, and named in ``fit.unidentified``.
   A weak pull (weight 0.05 on the logarithms) holds a kind's op-class scales together where the data
   do not tell them apart (a few stages whose ops mix the classes in like proportions).
   A rank of several stages tags its entries (``forward_stages``, ``backward_stages``); a stage whose
   backward entries outnumber its forwards ran its backward as input and weight gradient parts
   (zero-bubble schedules): its backward figure is their sum per forward, with the split share
   ``s = (backwards - forwards) / forwards`` (:meth:`~solvers.model.run.RankRecord.stage_entry`), and fit 1 leaves it out.
1b. **split backward**: per device kind with split stages, ``k`` in :data:`SPLIT_BACKWARD_BOUNDS` such
   that a split stage's backward is ``b_s (1 + s (k - 1))``, ``b_s`` fit 1's prediction run whole
   (:func:`_fit_split_backward`); a kind without split stages gets no ``split_backward``.
2. **iterations**: the collective efficiency ``e`` (every all-reduce takes ``1/e`` times the ring
   model; when some run all-reduces), the step overhead ``z_0 + z_1 P`` of a training iteration
   (``P`` the parameter bytes of the largest stage; ``z_1`` when the runs' ``P`` differ; a latency
   plan's training pass steps the optimizer too) and, per device kind that latency runs used, the
   op-level execution overhead ``d_K`` (every op's forward and backward task of a latency plan: the
   launcher runs such a plan op by op, which no stage run shows) from the measured iteration times
   (``summary.iteration_s``) against the simulator's on the calibrated problem; when no run was
   profiled, a per-kind compute scale (one for all op classes) too.
3. **memory**: per rank, ``measured peak = p + (1 + q) * (m_s + r * e_s + u * o_s)``, ``m_s`` the memory
   model's bytes of the rank's stage (:func:`solvers.cost.memory.plan_memory_bytes`), ``e_s`` the kept bytes
   of the iteration's micro-batches beyond those in flight (:func:`solvers.cost.memory.finished_micro_batch_bytes`),
   ``o_s`` what a latency plan's op-level runner keeps beyond the model (every op's output and received
   tensor, :func:`solvers.cost.memory.op_level_kept_bytes`), ``p`` the per-process constant, ``q`` the
   fraction, ``r`` in [0, 1] the share of a finished micro-batch's kept bytes that the peak still holds
   and ``u`` in [0, 1] the share of ``o_s`` (``q`` fixed at 0 when every stage has the same ``m_s``, ``r``
   at 0 when no run has micro-batches beyond those in flight, ``u`` at 0 without a latency run).  On CPU
   the resident set of a 1F1B stage grows with the iteration's micro-batches, not only with those in
   flight (docs/benchmarks.md "Calibration").

Fits 1 and 2 then check what the runs determine: where the Jacobian of the observations is short of full
rank (:func:`~solvers.calibration.identify.undetermined`), the parameters left out by subset selection
are held at neutral values (an overhead or latency at 0, an op-class scale at its kind's others, the
efficiency at 1, a step overhead at 0, a kind factor at 1), the others fitted again, and
``fit.unidentified`` names them.

The result names the digests of the runs it came from, per kind of figure the median and largest
relative error before and after the fit, and the parameters that ended at an artificial bound (an
op-class scale at 10^-3 or 10^3, the efficiency at 0.01): the runs do not decide them, or they measure
something the model lacks (a loaded machine's noise).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

import numpy as np

from solvers.calibration.apply import apply_calibration, channel_class, kind_speed
from solvers.calibration.document import (
    OP_CLASSES,
    SPLIT_BACKWARD_BOUNDS,
    Calibration,
    ChannelCalibration,
    KindCalibration,
    MemoryCalibration,
    StepCalibration,
    op_class,
)
from solvers.calibration.identify import jacobian, undetermined
from solvers.cost.memory import (
    finished_micro_batch_bytes,
    op_level_kept_bytes,
    plan_memory_bytes,
    shared_param_stages,
)
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan, plan_from_document
from solvers.model.problem import Problem
from solvers.model.run import RunRecord, check_run_matches, profiler_ratio, run_from_document
from solvers.model.topology import Topology
from solvers.simulator import simulate
from solvers.validity import problem_for_plan, resolve_plan

# a channel's seconds per byte at or below this (1 PB/s) ran to its bound 0: no transfer size showed a
# bandwidth (on one host, sends that end once the data are buffered), and the class keeps the topology's figures
UNSEEN_S_PER_BYTE = 1e-15
PRIOR_WEIGHT = 0.05  # the pull of every op-class scale towards the kind's geometric mean of them
SCALE_BOUNDS = (1e-3, 1e3)
EFFICIENCY_LOW = 0.01


@dataclass(frozen=True)
class _Case:
    """One run with its problem (uncalibrated, at the plan's micro-batch size) and plan."""

    run: RunRecord
    problem: Problem
    plan: Plan
    graph: OpGraph
    topology: Topology


@dataclass(frozen=True)
class _StageObs:
    kind: str
    fwd: np.ndarray  # per op class: sum of the uncalibrated forward times / R
    bwd: np.ndarray  # per op class: sum of the uncalibrated backward times / R
    n_fwd: float  # ops / R
    n_bwd: float  # ops with a backward / R
    recompute: bool
    measured_fwd: float
    measured_bwd: float | None
    split: float = 0.0  # share of the micro-batches whose backward ran as two actions (input, weight gradient)


@dataclass(frozen=True)
class _TransferObs:
    cls: str
    bytes: float
    measured: float
    nominal: float  # the topology's own time for it: its channel's latency + bytes / bandwidth



def _least_squares(*args: Any, **kwargs: Any) -> Any:
    """:func:`scipy.optimize.least_squares`, imported on first use: every ``placer`` command loads this module
    (``placer calibrate``), and ``scipy.optimize`` alone takes about half a second to import."""
    from scipy.optimize import least_squares

    return least_squares(*args, **kwargs)

def _cases(runs: Sequence[RunRecord | Mapping[str, Any]], graphs: Sequence[OpGraph],
           topologies: Sequence[Topology], plans: Sequence[Plan | Mapping[str, Any]]) -> list[_Case]:
    if not runs:
        raise InvalidInput("runs: at least one run record is needed", field="runs")
    for name, seq in (("graphs", graphs), ("topologies", topologies), ("plans", plans)):
        if len(seq) != len(runs):
            raise InvalidInput(f"{name}: {len(seq)} given for {len(runs)} runs (one per run)", field=name)
    out = []
    for i, (raw, graph, topo, p) in enumerate(zip(runs, graphs, topologies, plans, strict=True)):
        run = raw if isinstance(raw, RunRecord) else run_from_document(raw)
        plan = p if isinstance(p, Plan) else plan_from_document(p)
        if run.graph_digest != graph.digest:
            raise InvalidInput(f"runs[{i}].graph_digest: the run's {run.graph_digest} is not the graph's "
                               f"{graph.digest}", field=f"runs[{i}].graph_digest")
        if run.topology_digest is not None and run.topology_digest != topo.digest:
            raise InvalidInput(f"runs[{i}].topology_digest: the run's {run.topology_digest} is not the topology's "
                               f"{topo.digest}", field=f"runs[{i}].topology_digest")
        try:
            check_run_matches(run, plan)
        except InvalidInput as exc:
            raise InvalidInput(f"runs[{i}].{exc}", field=f"runs[{i}].{exc.field}") from None
        out.append(_Case(run, run_problem(run, graph, topo, plan), plan, graph, topo))
    return out


def run_problem(run: RunRecord, graph: OpGraph, topology: Topology, plan: Plan) -> Problem:
    """The problem whose simulation of ``plan`` is what ``run`` measured: its objective (``throughput``: the
    iteration; ``latency``: one pass, training or forward as the run's mode), at the plan's micro-batch size."""
    objective = "throughput" if run.kind == "throughput" else "latency"
    problem = Problem(graph, topology, objective)  # type: ignore[arg-type]
    if objective == "latency":
        problem = problem.with_settings(pass_="training" if run.mode == "training" else "forward")
    return problem_for_plan(problem, plan)


def _stage_obs(case: _Case, scaled: bool = True) -> list[_StageObs]:
    """The case's stage observations; with ``scaled``, the profiled stage times times the run's profiler ratio."""
    problem, plan = case.problem, case.plan
    g, topo = problem.graph, problem.topology
    index = {d.id: i for i, d in enumerate(topo.devices)}
    classes = np.array([OP_CLASSES.index(op_class(n.op)) for n in g.nodes])
    rho = profiler_ratio(case.run) if scaled else 1.0  # the profiled stage times as a plain step runs them
    out = []
    for s, stage in enumerate(plan.stages):
        timed = [t for t in (r.stage_entry(s) for r in case.run.ranks) if t is not None]
        kinds = {topo.devices[index[d]].kind for d in stage.devices}
        if not timed or len(kinds) != 1:
            continue
        kind = kinds.pop()
        speed = kind_speed(topo, kind)
        ops = np.array([g.index[o] for o in stage.ops], dtype=np.int64)
        r = len(stage.devices)
        fwd, bwd = np.zeros(len(OP_CLASSES)), np.zeros(len(OP_CLASSES))
        for v in ops:
            node = g.nodes[v]
            t = node.times.get(kind) if node.times else None
            f, b = (t.fwd_s, t.bwd_s) if t is not None else (node.fwd_s / speed, node.bwd_s / speed)
            fwd[classes[v]] += f / r
            bwd[classes[v]] += b / r
        n_bwd = sum(1 for v in ops if (g.nodes[v].times or {}).get(kind, g.nodes[v]).bwd_s > 0) / r
        f_s, b_s, split = max(timed, key=lambda t: t[0] + (t[1] or 0.0))
        out.append(_StageObs(kind, fwd, bwd, len(ops) / r, n_bwd, plan.recomputes(s), rho * f_s,
                             rho * b_s if b_s is not None else None, split))
    return out


def _transfer_obs(case: _Case) -> list[_TransferObs]:
    problem, plan = case.problem, case.plan
    topo = problem.topology
    index = {d.id: i for i, d in enumerate(topo.devices)}
    rp = resolve_plan(problem, plan, check_memory=False)
    peers: dict[int, set[int]] = defaultdict(set)
    for (a, b), size in group_traffic_bytes(problem.graph, rp.stage_of).items():
        if a != b and size > 0:
            peers[a].add(b)
            peers[b].add(a)
    fastest: dict[tuple[str, int], tuple[float, float]] = {}
    for rank in case.run.ranks:
        if not rank.transfers:
            continue
        me = index[rank.device]
        others = sorted({d for t in peers[rank.stage] for d in rp.stage_devices[t] if d != me})
        classes = {channel_class(topo, me, d) for d in others}
        if len(classes) != 1:
            continue
        cls = classes.pop()
        peer = others[0]
        for t in rank.transfers:
            if t.bytes > 0 and t.duration_s > 0:
                key = (cls, t.bytes)
                nominal = float(topo.latency_s[me, peer] + t.bytes / topo.bandwidth_Bps[me, peer])
                fastest[key] = min(fastest.get(key, (t.duration_s, nominal)), (t.duration_s, nominal))
    return [_TransferObs(cls, float(n), d, nominal) for (cls, n), (d, nominal) in sorted(fastest.items())]


class _Layout:
    """Where each free parameter of fit 1 sits in the vector."""

    def __init__(self, stages: list[_StageObs], transfers: list[_TransferObs]) -> None:
        self.kinds = sorted({s.kind for s in stages})
        self.scale: dict[tuple[str, int], int] = {}
        self.overhead: dict[str, int] = {}
        for kind in self.kinds:
            seen = np.zeros(len(OP_CLASSES), dtype=bool)
            for s in stages:
                if s.kind == kind:
                    seen |= (s.fwd > 0) | (s.bwd > 0)
            for c in np.flatnonzero(seen):
                self.scale[(kind, int(c))] = len(self.scale)
        n = len(self.scale)
        for kind in self.kinds:
            self.overhead[kind] = n
            n += 1
        self.channels: dict[str, tuple[int, int]] = {}
        for cls in sorted({t.cls for t in transfers}):
            self.channels[cls] = (n, n + 1)  # latency (s), seconds per byte
            n += 2
        self.size = n

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.zeros(self.size), np.full(self.size, np.inf)
        for i in self.scale.values():
            lo[i], hi[i] = SCALE_BOUNDS
        for i in self.overhead.values():
            hi[i] = 1.0
        return lo, hi

    def start(self, stages: list[_StageObs], transfers: list[_TransferObs]) -> np.ndarray:
        x = np.zeros(self.size)
        for i in self.scale.values():
            x[i] = 1.0
        for cls, (li, bi) in self.channels.items():
            mine = [t for t in transfers if t.cls == cls]
            x[li] = min(t.measured for t in mine) / 2
            x[bi] = max(median(t.measured / t.bytes for t in mine), 1e-15)
        return x

    def scales(self, x: np.ndarray, kind: str) -> np.ndarray:
        return np.array([x[self.scale[(kind, c)]] if (kind, c) in self.scale else 1.0 for c in range(len(OP_CLASSES))])


def _predict_stage(layout: _Layout, x: np.ndarray, s: _StageObs) -> tuple[float, float]:
    a = layout.scales(x, s.kind)
    o = x[layout.overhead[s.kind]]
    f = float(a @ s.fwd + o * s.n_fwd)
    b = float(a @ s.bwd + o * s.n_bwd)
    return f, b + f if s.recompute else b


def _rel(pred: float, measured: float) -> float:
    return pred / measured - 1.0 if measured > 0 else 0.0


def _data_residuals(layout: _Layout, x: np.ndarray, stages: list[_StageObs],
                    transfers: list[_TransferObs]) -> np.ndarray:
    out = []
    for s in stages:
        f, b = _predict_stage(layout, x, s)
        out.append(_rel(f, s.measured_fwd))
        if s.measured_bwd is not None:
            out.append(_rel(b, s.measured_bwd))
    for t in transfers:
        li, bi = layout.channels[t.cls]
        out.append(_rel(x[li] + t.bytes * x[bi], t.measured))
    return np.array(out, dtype=np.float64)


def _hold(layout: _Layout, x: np.ndarray, held: Sequence[int]) -> np.ndarray:
    """``x`` with the ``held`` parameters at their neutral values: an overhead or a latency at 0, an op-class
    scale at the geometric mean of its kind's other scales (1 when all of them are held)."""
    out = x.copy()
    held_set = set(held)
    for i in held_set:
        if i in layout.overhead.values() or any(i == li for li, _ in layout.channels.values()):
            out[i] = 0.0
    for kind in layout.kinds:
        mine = [i for (k, _), i in layout.scale.items() if k == kind]
        free = [i for i in mine if i not in held_set]
        neutral = float(np.exp(np.mean(np.log(out[free])))) if free else 1.0
        for i in mine:
            if i in held_set:
                out[i] = neutral
    return out


def _fit_compute(stages: list[_StageObs], transfers: list[_TransferObs],
                 loss: str) -> tuple[_Layout, np.ndarray, list[int]]:
    """Fit 1 of the module docstring; the layout, the parameters and those the observations do not determine
    (held at neutral values, :func:`_hold`)."""
    layout = _Layout(stages, transfers)
    if layout.size == 0:
        return layout, np.zeros(0), []

    def run(held: list[int], x_start: np.ndarray) -> np.ndarray:
        free = np.array([i for i in range(layout.size) if i not in held], dtype=np.int64)

        def full(z: np.ndarray) -> np.ndarray:
            x = x_start.copy()
            x[free] = z
            return _hold(layout, x, held)

        def residuals(z: np.ndarray) -> np.ndarray:
            x = full(z)
            prior: list[float] = []
            for kind in layout.kinds:
                logs = np.log([x[i] for (k, _), i in layout.scale.items() if k == kind and i not in held])
                prior.extend(PRIOR_WEIGHT * (logs - logs.mean()) if len(logs) > 1 else [])
            return np.concatenate([_data_residuals(layout, x, stages, transfers), np.array(prior)])

        lo, hi = layout.bounds()
        z0 = np.clip(x_start[free], lo[free], hi[free])
        fit = _least_squares(residuals, z0, bounds=(lo[free], hi[free]), loss=loss, f_scale=0.1, x_scale="jac")
        return full(np.asarray(fit.x, dtype=np.float64))

    lo, hi = layout.bounds()
    x0 = np.clip(layout.start(stages, transfers), lo, hi)
    x = run([], x0)
    typical = np.maximum(np.abs(x0), 1e-6)
    for i in layout.overhead.values():
        typical[i] = max(float(x[i]), 1e-6)
    jac = jacobian(lambda v: _data_residuals(layout, v, stages, transfers), x, typical)
    keep = np.ones(layout.size)
    for i in layout.overhead.values():
        keep[i] = 0.999  # of a scale and an overhead that the runs cannot tell apart, the scale stays
    for li, _ in layout.channels.values():
        keep[li] = 0.999  # of a latency and a bandwidth, the bandwidth
    held = undetermined(jac, keep)
    if held:
        x = run(held, _hold(layout, x, held))
    return layout, x, held


def _fit_split_backward(layout: _Layout, x: np.ndarray, stages: list[_StageObs], loss: str) -> dict[str, float]:
    """Fit 1b of the module docstring: per device kind with split backwards among the observations, ``k``
    such that a stage whose backward ran as two actions for a share ``s`` of its micro-batches takes
    ``b (1 + s (k - 1))``, ``b`` fit 1's backward run whole; kinds without such observations get none."""
    out: dict[str, float] = {}
    for kind in sorted({s.kind for s in stages if s.split and s.measured_bwd}):
        obs = [(s.split, _predict_stage(layout, x, s)[1], float(s.measured_bwd)) for s in stages
               if s.kind == kind and s.split and s.measured_bwd]

        def residuals(z: np.ndarray, obs: list[tuple[float, float, float]] = obs) -> np.ndarray:
            return np.array([_rel(b * (1.0 + share * (z[0] - 1.0)), m) for share, b, m in obs])

        lo, hi = SPLIT_BACKWARD_BOUNDS
        fit = _least_squares(residuals, np.array([1.0]), bounds=([lo], [hi]), loss=loss, f_scale=0.1)
        out[kind] = float(fit.x[0])
    return out


def _parameter_names(layout: _Layout) -> list[str]:
    names = [""] * layout.size
    for (k, cls), i in layout.scale.items():
        names[i] = f"devices.{k}.scale.{OP_CLASSES[cls]}"
    for k, i in layout.overhead.items():
        names[i] = f"devices.{k}.launch_overhead_s"
    for c, (li, bi) in layout.channels.items():
        names[li], names[bi] = f"channels.{c}.latency_s", f"channels.{c}.bandwidth_Bps"
    return names


def _unhelpful_channels(layout: _Layout, x: np.ndarray, transfers: list[_TransferObs]) -> list[str]:
    """The channel classes the fit leaves to the topology's figures: a seconds per byte at its bound 0
    (no transfer size showed a bandwidth), or a fit that predicts the class's own transfers no closer
    (median relative error) than the topology's latency and bandwidth do."""
    out = []
    for cls, (li, bi) in layout.channels.items():
        mine = [t for t in transfers if t.cls == cls]
        fitted = median(abs(_rel(float(x[li] + t.bytes * x[bi]), t.measured)) for t in mine)
        nominal = median(abs(_rel(t.nominal, t.measured)) for t in mine)
        if x[bi] <= UNSEEN_S_PER_BYTE or fitted >= nominal:
            out.append(cls)
    return out


def _calibration(layout: _Layout, x: np.ndarray, efficiency: float, kind_factor: Mapping[str, float],
                 memory: MemoryCalibration, step: StepCalibration, left_out: Sequence[str] = (),
                 split_backward: Mapping[str, float] | None = None,
                 dataflow: Mapping[str, float] | None = None) -> Calibration:
    dataflow = dataflow or {}
    devices = {}
    for kind in sorted(set(layout.kinds) | set(kind_factor) | set(dataflow)):
        factor = kind_factor.get(kind, 1.0)
        scales = layout.scales(x, kind) if kind in layout.kinds else np.ones(len(OP_CLASSES))
        devices[kind] = KindCalibration({c: float(scales[i] * factor) for i, c in enumerate(OP_CLASSES)},
                                        float(x[layout.overhead[kind]]) if kind in layout.overhead else 0.0,
                                        float(dataflow.get(kind, 0.0)))
    channels = {cls: ChannelCalibration(float(x[li]), 1.0 / float(x[bi]))
                for cls, (li, bi) in layout.channels.items() if cls not in left_out}
    return Calibration(devices, channels, efficiency, memory, step=step, split_backward=dict(split_backward or {}))


def _iteration_errors(cases: list[_Case], cal: Calibration | None) -> list[float]:
    out = []
    for case in cases:
        measured = case.run.summary.get("iteration_s")
        if not measured:
            continue
        g, t = apply_calibration(case.problem.graph, case.problem.topology, cal)
        problem = Problem(g, t, case.problem.objective, case.problem.settings)
        out.append(_rel(float(simulate(problem, case.plan).metrics["objective_s"]), float(measured)))
    return out


def _allreduces(case: _Case) -> bool:
    """Whether the simulator runs an all-reduce for this plan: a replicated stage, or a tied weight read in
    several stages."""
    if any(len(s.devices) > 1 for s in case.plan.stages):
        return True
    rp = resolve_plan(case.problem, case.plan, check_memory=False)
    return bool(shared_param_stages(case.problem, rp.stage_of))


def _largest_stage_params(case: _Case) -> float:
    g = case.problem.graph
    return max((float(g.param_bytes[[g.index[o] for o in st.ops]].sum()) for st in case.plan.stages if st.ops),
               default=0.0)


Maker = Callable[[float, Mapping[str, float], StepCalibration, Mapping[str, float]], Calibration]


def _dataflow_kinds(cases: list[_Case]) -> list[str]:
    """The device kinds that timed latency runs (op-level plans, run op by op) ran on."""
    return sorted({c.problem.topology.devices[c.problem.topology.index[d]].kind for c in cases
                   if c.run.summary.get("iteration_s") and c.problem.objective == "latency"
                   for st in c.plan.stages for d in st.devices})


def _fit_iterations(cases: list[_Case], make: Maker, free_kinds: list[str], loss: str
                    ) -> tuple[float, dict[str, float], StepCalibration, dict[str, float], list[str], list[str]]:
    """Fit 2 of the module docstring: the efficiency (where some run all-reduces), the step overhead (its
    per-byte term where the runs' largest stages differ in parameters), the op-level execution overhead
    per device kind of the latency runs and the per-kind factors of ``free_kinds``; also the names of what
    was fitted and of what the runs do not determine (held at the neutral efficiency 1, step and op-level
    overheads 0, factor 1)."""
    timed = [c for c in cases if c.run.summary.get("iteration_s")]
    training = [c for c in timed if c.problem.training]  # a latency plan's training pass steps the optimizer too
    fit_efficiency = any(_allreduces(c) for c in timed)
    params = [_largest_stage_params(c) for c in training]
    fit_per_byte = bool(params) and max(params) - min(params) > 1e-3 * max(max(params), 1.0)
    dataflow_kinds = _dataflow_kinds(timed)
    names = (["collective_efficiency"] * fit_efficiency + ["step.fixed_s"] * bool(training) +
             ["step.per_param_byte_s"] * fit_per_byte + [f"devices.{k}.scale (all classes)" for k in free_kinds] +
             [f"devices.{k}.dataflow_overhead_s" for k in dataflow_kinds])
    if not names:
        return 1.0, {}, StepCalibration(), {}, [], []

    def unpack(x: np.ndarray) -> tuple[float, dict[str, float], StepCalibration, dict[str, float]]:
        values = dict(zip(names, (float(v) for v in x), strict=True))
        step = StepCalibration(values.get("step.fixed_s", 0.0) * 1e-3,  # fitted in ms
                               values.get("step.per_param_byte_s", 0.0) / 2**30)  # fitted in s per GiB
        return (values.get("collective_efficiency", 1.0),
                {k: values[f"devices.{k}.scale (all classes)"] for k in free_kinds}, step,
                {k: values[f"devices.{k}.dataflow_overhead_s"] * 1e-3 for k in dataflow_kinds})  # fitted in ms

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.array(_iteration_errors(timed, make(*unpack(x))), dtype=np.float64)

    box = {"collective_efficiency": (EFFICIENCY_LOW, 1.0, 0.9), "step.fixed_s": (0.0, 1e5, 1e-3),
           "step.per_param_byte_s": (0.0, 1e4, 1e-3),
           **{f"devices.{k}.dataflow_overhead_s": (0.0, 1e3, 1e-2) for k in dataflow_kinds}}
    lo = np.array([box.get(n, (SCALE_BOUNDS[0], 0, 0))[0] for n in names])
    hi = np.array([box.get(n, (0, SCALE_BOUNDS[1], 0))[1] for n in names])
    x0 = np.array([box.get(n, (0, 0, 1.0))[2] for n in names])
    neutral = np.array([0.0 if n.startswith("step.") or n.endswith("_overhead_s") else 1.0 for n in names])

    def run(held: list[int], start: np.ndarray) -> np.ndarray:
        free = np.array([i for i in range(len(names)) if i not in held], dtype=np.int64)

        def full(z: np.ndarray) -> np.ndarray:
            x = start.copy()
            x[free] = z
            x[held] = neutral[held]
            return x

        if free.size == 0:
            return full(np.zeros(0))
        fit = _least_squares(lambda z: residuals(full(z)), start[free], bounds=(lo[free], hi[free]), loss=loss,
                            f_scale=0.1, diff_step=1e-3)
        return full(np.asarray(fit.x, dtype=np.float64))

    x = run([], x0)
    held = undetermined(jacobian(residuals, x, np.maximum(np.abs(x), 1.0)))
    if held:
        x = run(held, x)
    return (*unpack(x), names, [names[i] for i in held])


MemoryObs = tuple[float, float, float, float]  # m_s, e_s, o_s, the measured peak


def _memory_obs(cases: list[_Case]) -> list[MemoryObs]:
    """Per rank with a peak: the modelled bytes ``m_s``, the finished micro-batches' kept bytes ``e_s``, the
    bytes a latency plan's op-level runner keeps beyond the model ``o_s`` and the measured peak (fit 3 of
    the module docstring)."""
    out = []
    for case in cases:
        rp = resolve_plan(case.problem, case.plan, check_memory=False)
        need = plan_memory_bytes(case.problem, rp)
        finished = finished_micro_batch_bytes(case.problem, rp)
        outputs = op_level_kept_bytes(case.problem, rp)
        for r in case.run.ranks:
            peak = r.peak_memory_bytes
            if peak and 0 <= r.stage < len(need):
                out.append((float(need[r.stage]), float(finished[r.stage]), float(outputs[r.stage]), float(peak)))
    return out


def _predicted_peak(memory: MemoryCalibration, modelled: float, finished: float, outputs: float) -> float:
    return memory.process_bytes + (1.0 + memory.fraction) * (modelled + memory.retained * finished +
                                                             memory.kept_outputs * outputs)


def _fit_memory(obs: list[MemoryObs], loss: str) -> tuple[MemoryCalibration, list[str], list[str]]:
    """Fit 3 of the module docstring; the calibration, the parameters fitted and those the ranks do not
    determine (held: ``q``, ``r`` and ``u`` at 0), by the rank of the relative residuals' Jacobian in ``p``,
    ``q``, ``r``, ``u`` (:func:`~solvers.calibration.identify.undetermined`; of alike columns ``p``, then
    ``q``, stay)."""
    if not obs:
        return MemoryCalibration(), [], []
    m = np.array([o[0] for o in obs])
    e = np.array([o[1] for o in obs])
    k = np.array([o[2] for o in obs])
    y = np.array([o[3] for o in obs])
    names = ["memory.process_bytes", "memory.fraction", "memory.retained", "memory.kept_outputs"]
    candidates = ([0] + [1] * bool(np.ptp(m) > 1e-6 * max(float(m.max()), 1.0)) + [2] * bool((e > 0).any()) +
                  [3] * bool((k > 0).any()))
    columns = np.column_stack([1.0 / y, m / y, e / y, k / y])[:, candidates]
    held_cols = undetermined(columns, np.array([1.0, 0.999, 0.998, 0.997])[candidates])
    free = [c for i, c in enumerate(candidates) if i not in held_cols]
    held = [names[c] for i, c in enumerate(candidates) if i in held_cols]

    def share(x: np.ndarray, c: int) -> float:
        return float(x[c]) if c in free else 0.0

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.asarray((x[0] + (1.0 + share(x, 1)) * (m + share(x, 2) * e + share(x, 3) * k)) / y - 1.0,
                          dtype=np.float64)

    x0 = np.array([max(float(np.median(y - m)), 0.0), 0.0, 0.0, 0.0])
    fit = _least_squares(residuals, x0, bounds=([0.0, 0.0, 0.0, 0.0], [np.inf, 10.0, 1.0, 1.0]), loss=loss,
                        f_scale=0.05, x_scale=[max(float(np.median(y)), 1.0), 1.0, 1.0, 1.0])
    x = np.asarray(fit.x, dtype=np.float64)
    return (MemoryCalibration(float(x[0]), share(x, 1), share(x, 2), share(x, 3)), [names[c] for c in free], held)


def _summary(errors: Sequence[float]) -> dict[str, float | int] | None:
    if not errors:
        return None
    a = np.abs(np.asarray(errors))
    return {"count": len(errors), "median_relative": float(np.median(a)), "max_relative": float(a.max())}


def fit_calibration(runs: Sequence[RunRecord | Mapping[str, Any]], graphs: Sequence[OpGraph],
                    topologies: Sequence[Topology], plans: Sequence[Plan | Mapping[str, Any]], *,
                    loss: str = "soft_l1", name: str = "") -> Calibration:
    """Fit the cost model's free parameters to ``runs`` (module docstring); one graph, topology and plan per run.

    Raises :class:`InvalidInput` naming the field when a run is not of its plan, graph or topology
    (``runs[2].graph_digest``), when the lists differ in length, or when ``loss`` is unknown.
    """
    if loss not in ("linear", "soft_l1", "huber", "cauchy", "arctan"):
        raise InvalidInput(f"loss: must be linear, soft_l1, huber, cauchy or arctan, got {loss!r}", field="loss")
    cases = _cases(runs, graphs, topologies, plans)
    transfers = [t for c in cases for t in _transfer_obs(c)]  # the same for both fits below
    mem = _memory_obs(cases)
    cal = _fit(cases, transfers, mem, loss, name, scaled=True)
    if any(profiler_ratio(c.run) < 1.0 for c in cases):
        as_recorded = _fit(cases, transfers, mem, loss, name, scaled=False)
        if _iteration_median(as_recorded) < _iteration_median(cal):
            cal = as_recorded
    return cal


def _iteration_median(cal: Calibration) -> float:
    summary = cal.fit["residuals"]["iteration_s"]["calibrated"]
    return float(summary["median_relative"]) if summary else 0.0


def _fit(cases: list[_Case], transfers: list[_TransferObs], mem: list[MemoryObs], loss: str,
         name: str, *, scaled: bool) -> Calibration:
    """The three fits of the module docstring on the cases' transfer and memory observations; ``scaled``: the
    profiled stage times times each run's profiler ratio."""
    stages = [s for c in cases for s in _stage_obs(c, scaled)]
    # fit 1 on backwards run whole; a split one's cost over that is fit 1b (split_backward)
    layout, x, held = _fit_compute([replace(s, measured_bwd=None) if s.split else s for s in stages], transfers, loss)
    unidentified = [_parameter_names(layout)[i] for i in held]
    split_backward = _fit_split_backward(layout, x, stages, loss)
    left_out = _unhelpful_channels(layout, x, transfers)
    unidentified += [f"channels.{c}" for c in left_out]
    memory, memory_params, memory_held = _fit_memory(mem, loss)
    unidentified += memory_held
    kinds_all = sorted({c.problem.topology.devices[i].kind for c in cases for st in c.plan.stages
                        for i in (c.problem.topology.index[d] for d in st.devices)})
    free_kinds = [] if stages else kinds_all

    def make(eff: float, factors: Mapping[str, float], step: StepCalibration,
             dataflow: Mapping[str, float]) -> Calibration:
        return _calibration(layout, x, eff, factors, memory, step, left_out, split_backward, dataflow)

    efficiency, factors, step, dataflow, iteration_params, iteration_held = _fit_iterations(cases, make, free_kinds,
                                                                                            loss)
    unidentified += iteration_held
    cal = make(efficiency, factors, step, dataflow)
    before_stage, after_stage, after_transfer = [], [], []
    for s in stages:
        f, b = _predict_stage(layout, x, s)
        b *= 1.0 + s.split * (split_backward.get(s.kind, 1.0) - 1.0)
        f0 = float(s.fwd.sum())
        b0 = float(s.bwd.sum()) + (f0 if s.recompute else 0.0)
        before_stage.append(_rel(f0, s.measured_fwd))
        after_stage.append(_rel(f, s.measured_fwd))
        if s.measured_bwd is not None:
            before_stage.append(_rel(b0, s.measured_bwd))
            after_stage.append(_rel(b, s.measured_bwd))
    for t in transfers:  # a class left out keeps the topology's figures
        ch = cal.channels.get(t.cls)
        after_transfer.append(_rel(ch.latency_s + t.bytes / ch.bandwidth_Bps if ch else t.nominal, t.measured))
    residuals = {
        "stage_s": {"uncalibrated": _summary(before_stage), "calibrated": _summary(after_stage)},
        "transfer_s": {"uncalibrated": _summary([_rel(t.nominal, t.measured) for t in transfers]),
                       "calibrated": _summary(after_transfer)},
        "iteration_s": {"uncalibrated": _summary(_iteration_errors(cases, None)),
                        "calibrated": _summary(_iteration_errors(cases, cal))},
        "peak_memory_bytes": {"uncalibrated": _summary([_rel(m, y) for m, _, _, y in mem]),
                              "calibrated": _summary([_rel(_predicted_peak(memory, m, e, o), y) for m, e, o, y in mem])}}
    fitted = ([n for n in (f"devices.{k}.scale.{OP_CLASSES[c]}" for k, c in layout.scale) if n not in unidentified] +
              [n for n in (f"devices.{k}.launch_overhead_s" for k in layout.overhead) if n not in unidentified] +
              [f"channels.{c}" for c in layout.channels if f"channels.{c}" not in unidentified] +
              [n for n in iteration_params if n not in unidentified] +
              [f"split_backward.{k}" for k in split_backward] +
              memory_params)
    at_bounds = [f"devices.{k}.scale.{OP_CLASSES[c]}" for k, c in layout.scale
                 if f"devices.{k}.scale.{OP_CLASSES[c]}" not in unidentified and not SCALE_BOUNDS[0] * 1.001 < cal.devices[k].scale[OP_CLASSES[c]] < SCALE_BOUNDS[1] / 1.001]
    if "collective_efficiency" in iteration_params and cal.collective_efficiency <= EFFICIENCY_LOW * 1.001:
        at_bounds.append("collective_efficiency")
    fit = {"runs": [digest(c.run.to_document()) for c in cases], "residuals": residuals, "parameters": fitted,
           "at_bounds": at_bounds, "unidentified": unidentified,
           "observations": {"stages": len(stages), "transfers": len(transfers), "iterations":
                            sum(1 for c in cases if c.run.summary.get("iteration_s")), "ranks": len(mem),
                            "profiler_ratios": [profiler_ratio(c.run) for c in cases],
                            "profiled_stages_scaled": scaled and any(profiler_ratio(c.run) < 1.0 for c in cases)}}
    return Calibration(cal.devices, cal.channels, cal.collective_efficiency, cal.memory, fit, name, cal.step,
                       split_backward=cal.split_backward)
