"""MOIRAI as registered: its warm start runs the list schedulers of the baselines and Celeritas.

The plans of ``heft``, ``cpop``, ``m-etf``, ``m-sct``, ``m-topo`` (the baselines family) and
``celeritas`` are MOIRAI's warm-start candidates (docs/moirai.md), so :class:`MoiraiWithWarmStart`,
the registry's ``moirai``, is a :class:`~solvers.moirai.solver.MoiraiSolver` handed
:data:`MOIRAI_WARM_START`.  Its Celeritas is the bare solver, without the list schedulers the
registry's ``celeritas`` keeps beside its plans: the warm start runs them itself.
"""

from __future__ import annotations

from solvers.baselines.cpop import CPOPSolver
from solvers.baselines.heft import HEFTSolver
from solvers.baselines.metf import METFSolver
from solvers.baselines.msct import MSCTSolver
from solvers.baselines.mtopo import MTopoSolver
from solvers.celeritas.solver import CeleritasSolver
from solvers.moirai.solver import MoiraiSolver
from solvers.moirai.warmstart import Heuristic

MOIRAI_WARM_START: tuple[Heuristic, ...] = (
    Heuristic("heft", HEFTSolver), Heuristic("cpop", CPOPSolver), Heuristic("m-etf", METFSolver),
    Heuristic("m-sct", MSCTSolver), Heuristic("m-topo", MTopoSolver), Heuristic("celeritas", CeleritasSolver),
)  # in this order: the first of equal makespans is kept


class MoiraiWithWarmStart(MoiraiSolver):
    """``moirai`` as the registry serves it: its warm start runs the list schedulers of :data:`MOIRAI_WARM_START`."""

    def __init__(self) -> None:
        super().__init__(warm_start=MOIRAI_WARM_START)
