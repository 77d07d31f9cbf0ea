"""Solvers that run another family's solvers, composed above the solver families.

No family imports another, so where one solver runs another's, the composition lives here,
above both as the registry is (docs/architecture.md):

* Parmesan's safety net: with ``baseline_guard`` (the default), Parmesan also simulates the plans
  of ``even`` and ``pipedream`` (PipeDream's own cost model, its default, and Placer's) and keeps
  the best (docs/parmesan.md).  The registry's ``parmesan`` is :class:`ParmesanWithSafetyNet`, a
  :class:`~solvers.parmesan.solver.ParmesanSolver` handed :func:`parmesan_baselines`.
* MOIRAI's warm start: the plans of the list schedulers ``heft``, ``cpop``, ``m-etf``, ``m-sct``,
  ``m-topo`` (the baselines family) and ``celeritas`` are warm-start candidates (docs/moirai.md).
  The registry's ``moirai`` is :class:`MoiraiWithWarmStart`, a
  :class:`~solvers.moirai.solver.MoiraiSolver` handed :data:`MOIRAI_WARM_START`.
"""

from __future__ import annotations

from solvers.baselines.cpop import CPOPSolver
from solvers.baselines.even import EvenOptions, EvenSolver
from solvers.baselines.heft import HEFTSolver
from solvers.baselines.metf import METFSolver
from solvers.baselines.msct import MSCTSolver
from solvers.baselines.mtopo import MTopoSolver
from solvers.baselines.pipedream import PipeDreamOptions, PipeDreamSolver
from solvers.celeritas.solver import CeleritasSolver
from solvers.model.problem import Problem
from solvers.moirai.solver import MoiraiSolver
from solvers.moirai.warmstart import Heuristic
from solvers.parmesan.solver import Baseline, ParmesanSolver


def parmesan_baselines(problem: Problem) -> list[Baseline]:
    """``even``, and ``pipedream`` with either cost model unless ops are pinned (it takes no pins)."""
    baselines: list[Baseline] = [("even", EvenSolver(), EvenOptions())]
    if not problem.settings.pinned:
        baselines += [(f"pipedream-{model}", PipeDreamSolver(), PipeDreamOptions(cost_model=model))
                      for model in ("placer", "pipedream")]
    return baselines


class ParmesanWithSafetyNet(ParmesanSolver):
    """``parmesan`` as the registry serves it: its safety net runs ``even`` and ``pipedream``."""

    def __init__(self) -> None:
        super().__init__(safety_net=parmesan_baselines)


MOIRAI_WARM_START: tuple[Heuristic, ...] = (
    Heuristic("heft", HEFTSolver), Heuristic("cpop", CPOPSolver), Heuristic("m-etf", METFSolver),
    Heuristic("m-sct", MSCTSolver), Heuristic("m-topo", MTopoSolver), Heuristic("celeritas", CeleritasSolver),
)  # in this order: the first of equal makespans is kept


class MoiraiWithWarmStart(MoiraiSolver):
    """``moirai`` as the registry serves it: its warm start runs the list schedulers of :data:`MOIRAI_WARM_START`."""

    def __init__(self) -> None:
        super().__init__(warm_start=MOIRAI_WARM_START)
