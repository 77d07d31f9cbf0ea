"""``placer.run/v1``: what one launcher run measured (docs/formats.md), and measured against simulated.

A run record carries the digests of the plan, graph and topology it ran, the environment, every
rank's iteration times and peak memory, and (for the steps run under ``--profile-steps``) every
stage forward and backward and every point-to-point transfer with its bytes, so that the cost
model's free parameters can be fitted from it later.  Its ``summary`` uses the simulator's metric
names (docs/simulator.md), so a simulation and a run line up key by key:

- ``iteration_s``: the median measured iteration (slowest rank, between barriers; warm-up and
  profiled steps left out while other steps remain);
- ``stage_times_s``: per stage, per micro-batch, forward + backward compute (the median profiled
  forward plus the median profiled backward, slowest replica); ``null`` without profiled steps.  The
  simulator's figure also counts the stage's outbound transfers, listed here per transfer instead;
- ``peak_memory_bytes``: per device id, the CUDA allocator's peak (allocated), or the process's
  peak resident set on CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from solvers.model._check import integer, mapping, number, sequence, string
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput
from solvers.model.plan import Plan

RUN_FORMAT = "placer.run/v1"
RUN_KEYS = frozenset({"format", "plan_digest", "graph_digest", "topology_digest", "solver", "kind", "mode",
                      "micro_batches", "schedule", "steps", "warmup", "profile_steps", "rows_per_iteration",
                      "environment", "iterations_s", "ranks", "summary"})
RANK_KEYS = frozenset({"rank", "device", "stage", "replica", "hostname", "iterations_s", "profiled_steps",
                       "forward_s", "backward_s", "forward_stages", "backward_stages", "transfers", "memory"})
TRANSFER_KEYS = frozenset({"op", "step", "phase", "start_s", "duration_s", "bytes", "shape", "dtype"})
MEMORY_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_resident_bytes")
SUMMARY_KEYS = frozenset({"iteration_s", "stage_times_s", "peak_memory_bytes"})
ENVIRONMENT_KEYS = frozenset({"python", "torch", "placer", "device_kind", "threads", "world_size", "hostname",
                              "backend"})
PHASES = ("forward", "backward")


@dataclass(frozen=True)
class Transfer:
    """One send or receive of a profiled step, as the process group ran it (start and duration on this rank)."""

    op: str  # "send" | "recv"
    step: int
    start_s: float  # from the start of the step's profile
    duration_s: float  # posted to completed, waiting for the peer included
    bytes: int
    phase: str | None = None  # "forward" (activations) | "backward" (gradients) | None (not known)
    shape: tuple[int, ...] = ()
    dtype: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "step": self.step, "phase": self.phase, "start_s": self.start_s,
                "duration_s": self.duration_s, "bytes": self.bytes, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class RankRecord:
    """One rank's part: its device and stage, times per iteration, profiled ranges and peak memory."""

    rank: int
    device: str
    stage: int
    replica: int
    hostname: str
    iterations_s: tuple[float, ...]
    memory: dict[str, int | None]
    profiled_steps: tuple[int, ...] = ()
    forward_s: tuple[float, ...] = ()  # every stage forward (one micro-batch) of the profiled steps
    backward_s: tuple[float, ...] = ()  # every stage backward (one micro-batch) of the profiled steps
    transfers: tuple[Transfer, ...] = ()
    # a rank holding several stages (virtual stages): the stage of each forward_s / backward_s entry
    forward_stages: tuple[int, ...] = ()
    backward_stages: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"rank": self.rank, "device": self.device, "stage": self.stage, "replica": self.replica,
               "hostname": self.hostname, "iterations_s": list(self.iterations_s), "memory": dict(self.memory),
               "profiled_steps": list(self.profiled_steps), "forward_s": list(self.forward_s),
               "backward_s": list(self.backward_s), "transfers": [t.to_dict() for t in self.transfers]}
        if self.forward_stages or self.backward_stages:
            out |= {"forward_stages": list(self.forward_stages), "backward_stages": list(self.backward_stages)}
        return out

    def stage_entry(self, s: int) -> tuple[float, float | None, float] | None:
        """What this rank measured of stage ``s`` for one micro-batch: ``(forward, backward, split)``; ``None``
        when the rank did not run it or was not profiled.

        A rank of one stage: the median forward and the median backward.  A rank of several stages (its
        entries tagged by ``forward_stages`` / ``backward_stages``): the median forward of the stage and
        its backward time per forward.  Where a stage's backward entries outnumber its forwards, the
        schedule ran backwards as two actions (input and weight gradient: zero-bubble): the backward is
        their sum per forward, and ``split`` the share of micro-batches run so, ``(backwards - forwards) /
        forwards``.
        """
        if self.forward_stages:
            fwd = [t for t, j in zip(self.forward_s, self.forward_stages, strict=True) if j == s]
            bwd = [t for t, j in zip(self.backward_s, self.backward_stages, strict=True) if j == s]
        elif self.stage == s:
            fwd, bwd = list(self.forward_s), list(self.backward_s)
        else:
            return None
        if not fwd:
            return None
        if not bwd:
            return median(fwd), None, 0.0
        if len(bwd) <= len(fwd):
            return median(fwd), median(bwd), 0.0
        return median(fwd), sum(bwd) / len(fwd), min(1.0, (len(bwd) - len(fwd)) / len(fwd))

    def stage_time_s(self) -> dict[int, float]:
        """Per stage this rank ran, the forward + backward compute of one micro-batch (:meth:`stage_entry`;
        empty without profiles)."""
        stages = sorted(set(self.forward_stages)) if self.forward_stages else [self.stage]
        out = {}
        for s in stages:
            entry = self.stage_entry(s)
            if entry is not None:
                out[s] = entry[0] + (entry[1] or 0.0)
        return out

    @property
    def peak_memory_bytes(self) -> int | None:
        """The allocator's peak on CUDA, else the peak resident set."""
        m = self.memory
        return m.get("peak_allocated_bytes") if m.get("peak_allocated_bytes") is not None else m.get(
            "peak_resident_bytes")


@dataclass(frozen=True)
class RunRecord:
    """A ``placer.run/v1`` document (see the module docstring)."""

    plan_digest: str
    graph_digest: str
    topology_digest: str | None
    solver: str
    kind: str  # "throughput" | "latency"
    mode: str  # "training" | "inference"
    micro_batches: int
    schedule: str
    steps: int
    warmup: int
    profile_steps: int
    rows_per_iteration: int
    environment: dict[str, Any]
    iterations_s: tuple[float, ...]
    ranks: tuple[RankRecord, ...]
    summary: dict[str, Any] = field(default_factory=dict)

    def to_document(self) -> dict[str, Any]:
        return {"format": RUN_FORMAT, "plan_digest": self.plan_digest, "graph_digest": self.graph_digest,
                "topology_digest": self.topology_digest, "solver": self.solver, "kind": self.kind, "mode": self.mode,
                "micro_batches": self.micro_batches, "schedule": self.schedule, "steps": self.steps,
                "warmup": self.warmup, "profile_steps": self.profile_steps,
                "rows_per_iteration": self.rows_per_iteration, "environment": dict(self.environment),
                "iterations_s": list(self.iterations_s), "ranks": [r.to_dict() for r in self.ranks],
                "summary": dict(self.summary)}


def run_summary(ranks: Sequence[RankRecord], n_stages: int, warmup: int) -> dict[str, Any]:
    """The summary under the simulator's metric names (module docstring), from the ranks' parts."""
    steps = min((len(r.iterations_s) for r in ranks), default=0)
    slowest = [max(r.iterations_s[i] for r in ranks) for i in range(steps)]
    profiled = set().union(*(r.profiled_steps for r in ranks)) if ranks else set()
    kept = [t for i, t in enumerate(slowest) if i >= warmup and i not in profiled] or slowest[warmup:] or slowest
    stage_times: list[float] | None = [0.0] * n_stages
    for r in ranks:
        times = r.stage_time_s()
        if not times or stage_times is None or not all(0 <= s < n_stages for s in times):
            stage_times = None
            continue
        for s, per_mb in times.items():
            stage_times[s] = max(stage_times[s], per_mb)
    return {"iteration_s": median(kept) if kept else None, "stage_times_s": stage_times,
            "peak_memory_bytes": {r.device: r.peak_memory_bytes for r in ranks}}


# ---- loading -------------------------------------------------------------------------------------
def _keys(doc: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    extra = sorted(set(doc) - known)
    if extra:
        f = f"{where}.{extra[0]}" if where else extra[0]
        raise InvalidInput(f"{f}: unknown field (known: {', '.join(sorted(known))})", field=f)


def _required(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        f = f"{where}.{key}" if where else key
        raise InvalidInput(f"{f}: missing", field=f)
    return doc[key]


def _numbers(value: Any, where: str) -> tuple[float, ...]:
    return tuple(number(v, f"{where}[{i}]", InvalidInput) for i, v in enumerate(sequence(value, where, InvalidInput)))


def _choice(value: Any, where: str, allowed: Sequence[str]) -> str:
    text = string(value, where, InvalidInput)
    if text not in allowed:
        raise InvalidInput(f"{where}: must be one of {', '.join(allowed)}, got {text!r}", field=where)
    return text


def _transfer(doc: Any, where: str) -> Transfer:
    d = mapping(doc, where, InvalidInput)
    _keys(d, TRANSFER_KEYS, where)
    phase = d.get("phase")
    shape = sequence(d.get("shape", []), f"{where}.shape", InvalidInput)
    return Transfer(
        op=_choice(_required(d, "op", where), f"{where}.op", ("send", "recv")),
        step=integer(_required(d, "step", where), f"{where}.step", InvalidInput),
        start_s=number(_required(d, "start_s", where), f"{where}.start_s", InvalidInput),
        duration_s=number(_required(d, "duration_s", where), f"{where}.duration_s", InvalidInput),
        bytes=integer(_required(d, "bytes", where), f"{where}.bytes", InvalidInput),
        phase=None if phase is None else _choice(phase, f"{where}.phase", PHASES),
        shape=tuple(integer(v, f"{where}.shape[{i}]", InvalidInput) for i, v in enumerate(shape)),
        dtype=string(d.get("dtype", ""), f"{where}.dtype", InvalidInput, nonempty=False))


def _memory(doc: Any, where: str) -> dict[str, int | None]:
    d = mapping(doc, where, InvalidInput)
    _keys(d, frozenset(MEMORY_KEYS), where)
    return {k: None if d.get(k) is None else integer(d[k], f"{where}.{k}", InvalidInput) for k in MEMORY_KEYS}


def _rank(doc: Any, where: str) -> RankRecord:
    d = mapping(doc, where, InvalidInput)
    _keys(d, RANK_KEYS, where)
    transfers = sequence(d.get("transfers", []), f"{where}.transfers", InvalidInput)
    profiled = sequence(d.get("profiled_steps", []), f"{where}.profiled_steps", InvalidInput)
    return RankRecord(
        rank=integer(_required(d, "rank", where), f"{where}.rank", InvalidInput),
        device=string(_required(d, "device", where), f"{where}.device", InvalidInput),
        stage=integer(_required(d, "stage", where), f"{where}.stage", InvalidInput),
        replica=integer(d.get("replica", 0), f"{where}.replica", InvalidInput),
        hostname=string(d.get("hostname", ""), f"{where}.hostname", InvalidInput, nonempty=False),
        iterations_s=_numbers(_required(d, "iterations_s", where), f"{where}.iterations_s"),
        memory=_memory(_required(d, "memory", where), f"{where}.memory"),
        profiled_steps=tuple(integer(v, f"{where}.profiled_steps[{i}]", InvalidInput) for i, v in enumerate(profiled)),
        forward_s=_numbers(d.get("forward_s", []), f"{where}.forward_s"),
        backward_s=_numbers(d.get("backward_s", []), f"{where}.backward_s"),
        forward_stages=_stages(d.get("forward_stages", []), len(_numbers(d.get("forward_s", []), where)),
                               f"{where}.forward_stages"),
        backward_stages=_stages(d.get("backward_stages", []), len(_numbers(d.get("backward_s", []), where)),
                                f"{where}.backward_stages"),
        transfers=tuple(_transfer(t, f"{where}.transfers[{i}]") for i, t in enumerate(transfers)))


def _stages(value: Any, entries: int, where: str) -> tuple[int, ...]:
    """The stage of each of ``entries`` profiled ranges (empty: all the rank's own stage)."""
    items = sequence(value, where, InvalidInput)
    if items and len(items) != entries:
        raise InvalidInput(f"{where}: {len(items)} stage(s) for {entries} profiled range(s)", field=where)
    return tuple(integer(v, f"{where}[{i}]", InvalidInput, minimum=0) for i, v in enumerate(items))


def _summary(doc: Any) -> dict[str, Any]:
    d = mapping(doc, "summary", InvalidInput)
    _keys(d, SUMMARY_KEYS, "summary")
    it = d.get("iteration_s")
    stages = d.get("stage_times_s")
    peaks = mapping(d.get("peak_memory_bytes", {}), "summary.peak_memory_bytes", InvalidInput)
    return {"iteration_s": None if it is None else number(it, "summary.iteration_s", InvalidInput),
            "stage_times_s": None if stages is None else list(_numbers(stages, "summary.stage_times_s")),
            "peak_memory_bytes": {str(k): None if v is None else integer(v, f"summary.peak_memory_bytes.{k}",
                                                                          InvalidInput) for k, v in peaks.items()}}


def run_from_document(doc: Any) -> RunRecord:
    """Validate a ``placer.run/v1`` document; :class:`InvalidInput` names the field at fault."""
    d = mapping(doc, "document", InvalidInput)
    if d.get("format") != RUN_FORMAT:
        raise InvalidInput(f"format: expected {RUN_FORMAT!r}, got {d.get('format')!r}", field="format")
    _keys(d, RUN_KEYS, "")
    env = mapping(d.get("environment", {}), "environment", InvalidInput)
    _keys(env, ENVIRONMENT_KEYS, "environment")
    ranks = tuple(_rank(r, f"ranks[{i}]")
                  for i, r in enumerate(sequence(_required(d, "ranks", ""), "ranks", InvalidInput, nonempty=True)))
    seen: dict[str, int] = {}
    for i, r in enumerate(ranks):
        if r.device in seen:
            raise InvalidInput(f"ranks[{i}].device: {r.device!r} is also ranks[{seen[r.device]}]'s",
                               field=f"ranks[{i}].device", ref=r.device)
        seen[r.device] = i
    topo = d.get("topology_digest")
    return RunRecord(
        plan_digest=string(_required(d, "plan_digest", ""), "plan_digest", InvalidInput),
        graph_digest=string(_required(d, "graph_digest", ""), "graph_digest", InvalidInput),
        topology_digest=None if topo is None else string(topo, "topology_digest", InvalidInput),
        solver=string(d.get("solver", "user"), "solver", InvalidInput),
        kind=_choice(_required(d, "kind", ""), "kind", ("throughput", "latency")),
        mode=_choice(_required(d, "mode", ""), "mode", ("training", "inference")),
        micro_batches=integer(_required(d, "micro_batches", ""), "micro_batches", InvalidInput, minimum=1),
        schedule=string(d.get("schedule", ""), "schedule", InvalidInput, nonempty=False),
        steps=integer(_required(d, "steps", ""), "steps", InvalidInput),
        warmup=integer(d.get("warmup", 0), "warmup", InvalidInput),
        profile_steps=integer(d.get("profile_steps", 0), "profile_steps", InvalidInput),
        rows_per_iteration=integer(d.get("rows_per_iteration", 1), "rows_per_iteration", InvalidInput, minimum=1),
        environment=dict(env),
        iterations_s=_numbers(_required(d, "iterations_s", ""), "iterations_s"),
        ranks=ranks,
        summary=_summary(_required(d, "summary", "")))


def check_run_matches(run: RunRecord, plan: Plan) -> None:
    """Refuse a run of another plan, graph or topology, or whose ranks are not the plan's devices and stages
    (:class:`InvalidInput` naming the field)."""
    for name, want, got in (("graph_digest", plan.graph_digest, run.graph_digest),
                            ("topology_digest", plan.topology_digest, run.topology_digest),
                            ("plan_digest", digest(plan.to_document()), run.plan_digest)):
        if want is not None and got is not None and want != got:
            raise InvalidInput(f"{name}: the run's {got} is not the plan's {want} (a run of another "
                               f"{name.removesuffix('_digest')})", field=name)
    stage_of: dict[str, int] = {}  # a device's first stage (the rank's stage with virtual stages)
    for s, stage in enumerate(plan.stages):
        for d in stage.devices:
            stage_of.setdefault(d, s)
    for i, r in enumerate(run.ranks):
        if stage_of.get(r.device, r.stage) != r.stage or r.device not in stage_of:
            where = "device" if r.device not in stage_of else "stage"
            raise InvalidInput(f"ranks[{i}].{where}: device {r.device!r} stage {r.stage} is not in the plan's stages",
                               field=f"ranks[{i}].{where}", ref=r.device)


def profiler_ratio(run: RunRecord) -> float:
    """The factor from profiled to plain step times of ``run`` (module docstring), at most 1.

    The profiler records every op, so it adds time in proportion to a stage's ops; with every stage
    ``1 + d`` times slower under it, the iteration (stages, the waits for them and the bubbles) is too,
    and ``rho = 1 / (1 + d)`` is the ratio of the plain to the profiled iteration.  1 when the run has no
    plain or no profiled step after its warm-up; capped at 1 (the profiler only adds work: a ratio
    above 1 is the noise of the few steps).
    """
    steps = min((len(r.iterations_s) for r in run.ranks), default=0)
    slowest = [max(r.iterations_s[i] for r in run.ranks) for i in range(steps)]
    profiled = sorted({s for r in run.ranks for s in r.profiled_steps if 0 <= s < steps})
    plain = [t for i, t in enumerate(slowest) if i >= run.warmup and i not in profiled]
    timed = [slowest[i] for i in profiled]
    if not plain or not timed or median(timed) <= 0:
        return 1.0
    return min(1.0, median(plain) / median(timed))



@dataclass(frozen=True)
class LinedUp:
    """One figure measured beside the simulator's, under the simulator's key (``stage_times_s[1]``)."""

    key: str
    unit: str  # "s" | "bytes"
    measured: float | None
    simulated: float | None

    @property
    def relative_error(self) -> float | None:
        """(measured - simulated) / simulated; None where either is missing or the simulated is 0."""
        if self.measured is None or not self.simulated:
            return None
        return (self.measured - self.simulated) / self.simulated

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "unit": self.unit, "measured": self.measured, "simulated": self.simulated,
                "relative_error": self.relative_error}


def line_up(run: RunRecord, metrics: Mapping[str, Any]) -> list[LinedUp]:
    """The run's summary beside a simulation's metrics, key by key: iteration, every stage, every device's memory.

    The profiled stage times are taken at the run's :func:`profiler_ratio` (the profiler's own time left out),
    as ``placer simulate --compare`` and the calibration fit take them."""
    s = run.summary
    sim_stages = list(metrics.get("stage_times_s") or [])
    rho = profiler_ratio(run)
    got_stages = [None if t is None else float(t) * rho for t in s.get("stage_times_s") or []]
    rows = [LinedUp("iteration_s", "s", s.get("iteration_s"), metrics.get("iteration_s"))]
    for i in range(max(len(sim_stages), len(got_stages))):
        rows.append(LinedUp(f"stage_times_s[{i}]", "s", got_stages[i] if i < len(got_stages) else None,
                            sim_stages[i] if i < len(sim_stages) else None))
    sim_mem = dict(metrics.get("peak_memory_bytes") or {})
    got_mem = dict(s.get("peak_memory_bytes") or {})
    for device in sorted(set(sim_mem) | set(got_mem)):
        rows.append(LinedUp(f"peak_memory_bytes[{device}]", "bytes", got_mem.get(device), sim_mem.get(device)))
    return rows
