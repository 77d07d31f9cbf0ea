"""What ``exact``'s DP runs over: the ideals of the whole graph or, past the ideal budget, of a
relaxation without light ops (:mod:`solvers.exact.relax`; docs/exact.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from solvers.arrays import IntArray
from solvers.base import Budget
from solvers.exact.ideals import Ideals, enumerate_ideals
from solvers.exact.relax import light_ops, reduce_problem
from solvers.exact.stage_model import StageModel, stage_model
from solvers.model.problem import Problem

# the relaxations tried in turn: (the fraction of the whole graph's work under which an op is light,
# whether only light ops whose ancestors and descendants are all light are left out)
RELAXATIONS = ((1e-6, True), (1e-6, False), (1e-4, False))


@dataclass(frozen=True)
class Space:
    """What the DP runs over: the ideals of ``problem`` (the whole one, or a relaxation without
    light ops whose ops sit at ``kept`` in the whole graph: :mod:`solvers.exact.relax`), or
    ``None`` and the ``reason``."""

    ideals: Ideals | None
    problem: Problem
    model: StageModel
    kept: IntArray | None
    notes: tuple[str, ...]
    reason: str | None


def ideal_space(problem: Problem, max_ideals: int, model: StageModel, budget: Budget) -> Space:
    """The ideals of the whole graph; past the budget, of the first relaxation that fits it
    (ops of work at most ``RELAXATIONS[k]`` of the total left out); else why none."""
    started = time.monotonic()
    deadline = started + budget.remaining_s()
    graph = problem.graph

    def out_of_time() -> Space:
        return Space(None, problem, model, None, (), f"time: the {budget.stated_limit_s():g} s limit ran out while "
                      f"enumerating the ideals ({time.monotonic() - started:.1f} s)")

    ideals = enumerate_ideals(graph, max_ideals, deadline)
    if ideals is not None:
        return Space(ideals, problem, model, None, (), None)
    if time.monotonic() > deadline:
        return out_of_time()
    whole = f"ideals: more than {max_ideals:,} in the whole graph ({graph.n_ops} ops)"
    tried: set[int] = set()
    for fraction, detached in RELAXATIONS:
        removed = light_ops(graph, model.work_s, fraction, detached)
        if len(removed) in tried or not 0 < len(removed) < graph.n_ops:
            continue
        tried.add(len(removed))
        reduced = reduce_problem(problem, removed, model.work_s)
        found = enumerate_ideals(reduced.problem.graph, max_ideals, deadline)
        if found is not None:
            note = (f"{whole}: the DP ran on a relaxation without the {len(removed)} "
                    f"{'detached ' if detached else ''}ops of work at most {fraction:g} of the total ({reduced.removed_work_s:.3g} s in all; {found.count:,} ideals), "
                    "each placed afterwards between its neighbours' stages")
            return Space(found, reduced.problem, stage_model(reduced.problem), reduced.kept, (note,), None)
        if time.monotonic() > deadline:
            return out_of_time()
    return Space(None, problem, model, None, (), f"{whole} and in its relaxations without light ops")
