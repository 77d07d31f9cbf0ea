"""The problem: graph + topology + objective + settings (docs/formats.md).

``objective="throughput"``: synchronous pipelined training (GPipe or 1F1B) with stages and
replicas; minimise the iteration time.  ``objective="latency"``: one pass of one batch placed
op by op; minimise the makespan (``pass_="forward"`` for inference, ``"training"`` for
forward + backward).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from solvers.model import _check as check
from solvers.model.canonical import digest as _digest
from solvers.model.errors import InvalidProblem
from solvers.model.graph import OpGraph
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
    "ProblemSettings", "Schedule", "problem_from_spec", "settings_from_dict",
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
        return replace(self, settings=self.settings.model_copy(update=changes))

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


def problem_from_spec(graph: OpGraph, topology: Topology, spec: Mapping[str, Any] | None) -> Problem:
    """Build a problem from a ``placer.problem/v1``-style mapping (objective + settings)."""
    spec = check.mapping(spec or {}, "", InvalidProblem)
    check.known_keys(spec, frozenset({"format", "objective", "settings", "graph_digest", "topology_digest"}),
                     "", InvalidProblem)
    objective = spec.get("objective", "throughput")
    return Problem(graph, topology, objective, settings_from_dict(spec.get("settings")))
