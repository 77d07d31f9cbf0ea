"""The problem: graph + topology + objective + settings (DESIGN §3).

``objective="throughput"``: synchronous pipelined training (GPipe or 1F1B) with stages and
replicas; minimise the iteration time.  ``objective="latency"``: one pass of one batch placed
op by op; minimise the makespan (``pass_="forward"`` for inference, ``"training"`` for
forward + backward).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from solvers.model import _check as check
from solvers.model.canonical import digest as _digest
from solvers.model.errors import InvalidProblem
from solvers.model.graph import OpGraph
from solvers.model.topology import Topology

PROBLEM_FORMAT = "placer.problem/v1"
Objective = Literal["throughput", "latency"]
Schedule = Literal["1f1b", "gpipe"]
Pass = Literal["forward", "training"]
OBJECTIVES: tuple[str, ...] = ("throughput", "latency")
SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe")
PASSES: tuple[str, ...] = ("forward", "training")

DEFAULT_MICRO_BATCHES = 4


@dataclass(frozen=True)
class ProblemSettings:
    """Problem settings.  Every field has a documented default (docs/formats.md).

    ``micro_batches``: candidate micro-batch counts per iteration (throughput; a solver picks
    one, the first is the default).  ``stages`` / ``replicas``: fix S and R, or ``None`` to let
    the solver choose.  ``pinned``: op id -> device id (str) or stage index (int).
    ``stage_memory_caps_bytes``: stage index -> cap per device of that stage.
    ``memory_headroom``: fraction of every device's memory kept free.
    """

    micro_batches: tuple[int, ...] = (DEFAULT_MICRO_BATCHES,)
    schedule: Schedule = "1f1b"
    pass_: Pass = "forward"
    recompute: bool = False
    optimizer_bytes_per_param_byte: float = 3.0
    memory_headroom: float = 0.0
    stages: int | None = None
    replicas: int | None = None
    pinned: Mapping[str, str | int] = field(default_factory=dict)
    stage_memory_caps_bytes: Mapping[int, float] = field(default_factory=dict)
    no_empty_stage: bool = True
    time_limit_s: float | None = None
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass"] = out.pop("pass_")
        out["micro_batches"] = list(self.micro_batches)
        out["pinned"] = dict(sorted(self.pinned.items()))
        out["stage_memory_caps_bytes"] = {str(k): v for k, v in sorted(self.stage_memory_caps_bytes.items())}
        return out


_SETTINGS_KEYS = frozenset(ProblemSettings().to_dict())


def settings_from_dict(raw: Mapping[str, Any] | None, where: str = "settings") -> ProblemSettings:
    """Validate a settings mapping (JSON names; unknown keys rejected)."""
    if raw is None:
        return ProblemSettings()
    raw = check.mapping(raw, where, InvalidProblem)
    check.known_keys(raw, _SETTINGS_KEYS, where, InvalidProblem)
    kw: dict[str, Any] = {}
    if "micro_batches" in raw:
        mb = raw["micro_batches"]
        items = [mb] if isinstance(mb, int) and not isinstance(mb, bool) else check.sequence(
            mb, f"{where}.micro_batches", InvalidProblem, nonempty=True)
        kw["micro_batches"] = tuple(
            check.integer(m, f"{where}.micro_batches", InvalidProblem, minimum=1) for m in items)
    for key, allowed in (("schedule", SCHEDULES), ("pass", PASSES)):
        if key in raw:
            if raw[key] not in allowed:
                raise InvalidProblem(f"{where}.{key}: must be one of {', '.join(allowed)}, got {raw[key]!r}",
                                     field=f"{where}.{key}")
            kw["pass_" if key == "pass" else key] = raw[key]
    for key in ("recompute", "no_empty_stage"):
        if key in raw:
            kw[key] = check.boolean(raw[key], f"{where}.{key}", InvalidProblem)
    if "optimizer_bytes_per_param_byte" in raw:
        kw["optimizer_bytes_per_param_byte"] = check.number(
            raw["optimizer_bytes_per_param_byte"], f"{where}.optimizer_bytes_per_param_byte", InvalidProblem)
    if "memory_headroom" in raw:
        head = check.number(raw["memory_headroom"], f"{where}.memory_headroom", InvalidProblem)
        if head >= 1.0:
            raise InvalidProblem(f"{where}.memory_headroom: must be < 1, got {head}", field=f"{where}.memory_headroom")
        kw["memory_headroom"] = head
    for key in ("stages", "replicas"):
        if raw.get(key) is not None:
            kw[key] = check.integer(raw[key], f"{where}.{key}", InvalidProblem, minimum=1)
    if raw.get("time_limit_s") is not None:
        kw["time_limit_s"] = check.number(raw["time_limit_s"], f"{where}.time_limit_s", InvalidProblem, positive=True)
    if "seed" in raw:
        kw["seed"] = check.integer(raw["seed"], f"{where}.seed", InvalidProblem)
    if "pinned" in raw:
        pins = check.mapping(raw["pinned"], f"{where}.pinned", InvalidProblem)
        out: dict[str, str | int] = {}
        for op, target in pins.items():
            if isinstance(target, bool) or not isinstance(target, str | int):
                raise InvalidProblem(f"{where}.pinned.{op}: must be a device id or a stage index, got {target!r}",
                                     field=f"{where}.pinned.{op}", ref=str(op))
            out[str(op)] = target
        kw["pinned"] = out
    if "stage_memory_caps_bytes" in raw:
        caps = check.mapping(raw["stage_memory_caps_bytes"], f"{where}.stage_memory_caps_bytes", InvalidProblem)
        kw["stage_memory_caps_bytes"] = {
            check.integer(int(k) if str(k).isdigit() else k, f"{where}.stage_memory_caps_bytes.{k}", InvalidProblem):
            check.number(v, f"{where}.stage_memory_caps_bytes.{k}", InvalidProblem)
            for k, v in caps.items()
        }
    return ProblemSettings(**kw)


@dataclass(frozen=True, eq=False)
class Problem:
    """What a solver receives: everything needed to produce and score a plan."""

    graph: OpGraph
    topology: Topology
    objective: Objective = "throughput"
    settings: ProblemSettings = field(default_factory=ProblemSettings)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise InvalidProblem(f"objective: must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}",
                                 field="objective")
        s = self.settings
        for op, target in s.pinned.items():
            if op not in self.graph.index:
                raise InvalidProblem(f"settings.pinned: unknown op {op!r}", field=f"settings.pinned.{op}", ref=op)
            if isinstance(target, str) and target not in self.topology.index:
                raise InvalidProblem(f"settings.pinned.{op}: unknown device {target!r}",
                                     field=f"settings.pinned.{op}", ref=target)
        if s.stages is not None and s.replicas is not None and s.stages * s.replicas > self.topology.n_devices:
            raise InvalidProblem(
                f"settings: stages x replicas = {s.stages * s.replicas} exceeds the "
                f"{self.topology.n_devices} devices of the topology", field="settings.stages")

    def with_settings(self, **changes: Any) -> Problem:
        return replace(self, settings=replace(self.settings, **changes))

    @property
    def training(self) -> bool:
        """True when a backward pass is part of the objective."""
        return self.objective == "throughput" or self.settings.pass_ == "training"

    def spec(self) -> dict[str, Any]:
        """The ``placer.problem/v1`` document (graph and topology by digest)."""
        return {"format": PROBLEM_FORMAT, "objective": self.objective, "settings": self.settings.to_dict(),
                "graph_digest": self.graph.digest, "topology_digest": self.topology.digest}

    @cached_property
    def digest(self) -> str:
        return _digest(self.spec())


def problem_from_spec(graph: OpGraph, topology: Topology, spec: Mapping[str, Any] | None) -> Problem:
    """Build a problem from a ``placer.problem/v1``-style mapping (objective + settings)."""
    spec = check.mapping(spec or {}, "", InvalidProblem)
    check.known_keys(spec, frozenset({"format", "objective", "settings", "graph_digest", "topology_digest"}),
                     "", InvalidProblem)
    objective = spec.get("objective", "throughput")
    return Problem(graph, topology, objective, settings_from_dict(spec.get("settings")))
