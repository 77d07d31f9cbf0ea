"""The problem: graph + topology + objective + settings (docs/formats.md).

``objective="throughput"``: synchronous pipelined training (GPipe or 1F1B) with stages and
replicas; minimise the iteration time.  ``objective="latency"``: one pass of one batch placed
op by op; minimise the makespan (``pass_="forward"`` for inference, ``"training"`` for
forward + backward).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from solvers.model import _check as check
from solvers.model.canonical import digest as _digest
from solvers.model.errors import InvalidProblem
from solvers.model.graph import OpGraph
from solvers.model.scaling import graph_at_batch
from solvers.model.settings import (
    OBJECTIVES,
    PASSES,
    SCHEDULES,
    Objective,
    Pass,
    ProblemSettings,
    Schedule,
    searched_micro_batches,
    settings_from_dict,
)
from solvers.model.topology import Topology

PROBLEM_FORMAT = "placer.problem/v1"

__all__ = [
    "OBJECTIVES", "PASSES", "PROBLEM_FORMAT", "SCHEDULES", "Objective", "Pass", "Problem",
    "ProblemSettings", "Schedule", "check_settings_fit", "problem_from_spec", "settings_from_dict",
]


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
        check_settings_fit(self.settings, self.graph.n_ops, self.topology.n_devices,
                           self.graph.index, self.topology.index, largest_host_devices(self.topology))
        if self.settings.global_batch is not None and self.objective != "throughput":
            raise InvalidProblem("settings.global_batch: applies to the throughput objective only (a latency "
                                 "problem places one batch of the graph's profiled_batch_size)",
                                 field="settings.global_batch")
        if self.objective == "latency":
            for key in ("replicas", "tp"):
                value = getattr(self.settings, key)
                if value is not None and value > 1:
                    raise InvalidProblem(f"settings.{key}: a latency plan places each op on one device, so {key} above 1 "
                                         f"applies to the throughput objective only (got {value})", field=f"settings.{key}")

    def with_settings(self, **changes: Any) -> Problem:
        return replace(self, settings=self.settings.model_copy(update=changes))

    def micro_batch_rows(self, micro_batches: int) -> int:
        """Rows (samples) of one micro-batch of a plan with ``micro_batches`` micro-batches:
        ``settings.global_batch / micro_batches`` with a global batch (rounded down where the count
        does not divide it, which :meth:`at_micro_batches` refuses), else the graph's ``profiled_batch_size``."""
        batch = self.settings.global_batch
        if batch is None or self.objective != "throughput":
            return self.graph.profiled_batch_size
        return max(1, batch // max(1, micro_batches))

    def at_micro_batches(self, micro_batches: int) -> Problem:
        """The problem a plan of ``micro_batches`` micro-batches is solved and scored on.

        Without ``settings.global_batch``: this problem.  With it: the graph scaled to
        ``global_batch / micro_batches`` samples per micro-batch
        (:func:`~solvers.model.scaling.graph_at_batch`) and ``micro_batches`` the only candidate.
        Raises :class:`InvalidProblem` (field ``settings.global_batch``) when the count does not
        divide the global batch.
        """
        batch = self.settings.global_batch
        if batch is None:
            return self
        if micro_batches < 1 or batch % micro_batches:
            raise InvalidProblem(f"settings.global_batch: {batch} samples do not split into {micro_batches} equal "
                                 "micro-batches", field="settings.global_batch")
        cache = self._per_micro_batches
        if micro_batches not in cache:
            size = batch // micro_batches
            if self.graph.profiled_batch_size == size and self.settings.micro_batches == (micro_batches,):
                cache[micro_batches] = self
            else:
                cache[micro_batches] = Problem(graph_at_batch(self.graph, size), self.topology, self.objective,
                                               self.settings.model_copy(update={"micro_batches": (micro_batches,)}))
        return cache[micro_batches]

    @cached_property
    def _per_micro_batches(self) -> dict[int, Problem]:
        """:meth:`at_micro_batches`' problems, built once per count."""
        return {}

    @property
    def micro_batch_candidates(self) -> tuple[int, ...]:
        """The micro-batch counts a throughput solver chooses among: ``settings.micro_batches``
        exactly as given, or (unset) :func:`~solvers.model.settings.searched_micro_batches` of
        the topology's device count."""
        given = self.settings.micro_batches
        return given if given is not None else searched_micro_batches(self.topology.n_devices)

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


def largest_host_devices(topology: Topology) -> int:
    """Devices of the topology's largest host (a tensor-parallel group within a host has at most these)."""
    return max(Counter(d.node for d in topology.devices).values(), default=0)


def check_settings_fit(settings: ProblemSettings, n_ops: int, n_devices: int,
                       op_ids: Container[str] | None = None, device_ids: Container[str] | None = None,
                       host_devices: int | None = None) -> None:
    """Check the settings against the size of the graph and the topology (docs/formats.md).

    ``stages`` at most the devices and, when every stage must hold an op (``no_empty_stage``), at
    most the ops; ``replicas`` x (``stages`` or 1) at most the devices; every pinned op and pinned
    device exists (``op_ids`` / ``device_ids``: the graph's and topology's ids; ``None`` skips the
    check, for a caller that knows there are no pins) and every pinned stage index and every key of
    ``stage_memory_caps_bytes`` is below the number of stages there can be (``stages``, or else the
    devices, or the fewer of ops and devices under ``no_empty_stage``).  ``tp`` x (``replicas`` or 1) x
    (``stages`` or 1) at most the devices, and with ``tp_within_host`` ``tp`` at most ``host_devices``
    (the largest host's devices; ``None`` skips the check).  Raises :class:`InvalidProblem` naming the setting
    (``settings.stages``, ``settings.pinned.<op>`` ...): the library and the service refuse alike.
    """
    s = settings
    if s.stages is not None and s.stages > n_devices:
        raise InvalidProblem(f"settings.stages: {s.stages} stages exceed the {n_devices} devices of the topology",
                             field="settings.stages")
    if s.stages is not None and s.no_empty_stage and s.stages > n_ops:
        raise InvalidProblem(f"settings.stages: {s.stages} stages exceed the {n_ops} ops of the graph (every stage "
                             "holds an op unless no_empty_stage is false)", field="settings.stages")
    if s.replicas is not None and s.replicas * (s.stages or 1) > n_devices:
        raise InvalidProblem(
            f"settings.replicas: {s.replicas} replicas x {s.stages or 1} stages = {s.replicas * (s.stages or 1)} "
            f"devices exceed the {n_devices} devices of the topology", field="settings.replicas")
    if s.tp is not None:
        used = s.tp * (s.replicas or 1) * (s.stages or 1)
        if used > n_devices:
            raise InvalidProblem(f"settings.tp: {s.tp} x {s.replicas or 1} replicas x {s.stages or 1} stages = {used} "
                                 f"devices exceed the {n_devices} devices of the topology", field="settings.tp")
        if s.tp_within_host and host_devices is not None and s.tp > host_devices:
            raise InvalidProblem(f"settings.tp: a tensor-parallel group of {s.tp} devices does not fit a host (the "
                                 f"largest has {host_devices}); set tp_within_host to false to let groups span hosts",
                                 field="settings.tp")
    most_stages = s.stages if s.stages is not None else max(1, min(n_ops, n_devices) if s.no_empty_stage else n_devices)
    for op, target in s.pinned.items():
        if op_ids is not None and op not in op_ids:
            raise InvalidProblem(f"settings.pinned: unknown op {op!r}", field=f"settings.pinned.{op}", ref=op)
        if isinstance(target, str) and device_ids is not None and target not in device_ids:
            raise InvalidProblem(f"settings.pinned.{op}: unknown device {target!r}",
                                 field=f"settings.pinned.{op}", ref=target)
        if isinstance(target, int) and target >= most_stages:
            raise InvalidProblem(f"settings.pinned.{op}: stage {target} does not exist (stages are numbered 0 to "
                                 f"{most_stages - 1})", field=f"settings.pinned.{op}", ref=op)
    for stage in s.stage_memory_caps_bytes:
        if stage >= most_stages:
            raise InvalidProblem(f"settings.stage_memory_caps_bytes.{stage}: stage {stage} does not exist (stages "
                                 f"are numbered 0 to {most_stages - 1})", field=f"settings.stage_memory_caps_bytes.{stage}")


def problem_from_spec(graph: OpGraph, topology: Topology, spec: Mapping[str, Any] | None) -> Problem:
    """Build a problem from a ``placer.problem/v1``-style mapping (objective + settings)."""
    spec = check.mapping(spec or {}, "", InvalidProblem)
    check.known_keys(spec, frozenset({"format", "objective", "settings", "graph_digest", "topology_digest"}),
                     "", InvalidProblem)
    objective = spec.get("objective", "throughput")
    return Problem(graph, topology, objective, settings_from_dict(spec.get("settings")))
