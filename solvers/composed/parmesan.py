"""Parmesan as registered: its safety net runs ``even`` and ``pipedream``.

With ``baseline_guard`` (the default), Parmesan also simulates the plans of ``even`` and
``pipedream`` (PipeDream's own cost model, its default, and Placer's) and keeps the best
(docs/parmesan.md).  Those are the baselines family, so :class:`ParmesanWithSafetyNet`, the
registry's ``parmesan``, is a :class:`~solvers.parmesan.solver.ParmesanSolver` handed
:func:`parmesan_baselines`.
"""

from __future__ import annotations

from solvers.baselines.even import EvenOptions, EvenSolver
from solvers.baselines.pipedream import PipeDreamOptions, PipeDreamSolver
from solvers.model.problem import Problem
from solvers.parmesan.solver import Baseline, ParmesanSolver


def parmesan_baselines(problem: Problem) -> list[Baseline]:
    """``even``, and ``pipedream`` with either cost model unless ops are pinned (it takes no pins);
    ``pipedream`` without its own even guard, since ``even`` is in the net already."""
    baselines: list[Baseline] = [("even", EvenSolver(), EvenOptions())]
    if not problem.settings.pinned:
        baselines += [(f"pipedream-{model}", PipeDreamSolver(), PipeDreamOptions(cost_model=model, even_guard=False))
                      for model in ("placer", "pipedream")]
    return baselines


class ParmesanWithSafetyNet(ParmesanSolver):
    """``parmesan`` as the registry serves it: its safety net runs ``even`` and ``pipedream``."""

    def __init__(self) -> None:
        super().__init__(safety_net=parmesan_baselines)
