"""Celeritas as registered: the list schedulers of the baselines compete with its own plans.

The paper's Adjusting Placement (§5.2) can lose to a list scheduler by tie-breaks, so the
registry's ``celeritas`` is a :class:`~solvers.celeritas.solver.CeleritasSolver` handed
:data:`CELERITAS_LIST_SCHEDULERS` (``heft``, ``cpop``, ``m-etf``, ``m-sct``, ``m-topo``): with its
option ``list_schedulers`` (on by default) it returns the best simulated plan of all
(docs/celeritas.md, "Deviations from the paper").
"""

from __future__ import annotations

from solvers.base import Solver
from solvers.baselines.cpop import CPOPSolver
from solvers.baselines.heft import HEFTSolver
from solvers.baselines.metf import METFSolver
from solvers.baselines.msct import MSCTSolver
from solvers.baselines.mtopo import MTopoSolver
from solvers.celeritas.solver import CeleritasSolver

CELERITAS_LIST_SCHEDULERS = ("heft", "cpop", "m-etf", "m-sct", "m-topo")  # the first of equal latencies is kept


def celeritas_list_schedulers() -> tuple[tuple[str, type[Solver]], ...]:
    """``(name, solver class)`` of :data:`CELERITAS_LIST_SCHEDULERS`, in that order (the solver calls it only
    when it runs them: a solve above the search's node budget does not)."""
    return (("heft", HEFTSolver), ("cpop", CPOPSolver), ("m-etf", METFSolver), ("m-sct", MSCTSolver),
            ("m-topo", MTopoSolver))


class CeleritasWithListSchedulers(CeleritasSolver):
    """``celeritas`` as the registry serves it: the list schedulers of :data:`CELERITAS_LIST_SCHEDULERS` compete."""

    def __init__(self) -> None:
        super().__init__(list_schedulers=celeritas_list_schedulers)
