"""The explicit list of solver back-ends (docs/architecture.md, docs/python.md).

Each entry names its class by import path, so ``import solvers`` stays fast and a back-end's
heavy dependencies load only when it is used.  Third-party back-ends register through the
entry-point group ``placer.solvers`` (value: ``package.module:SolverClass``).
Lookup is case-insensitive; an unknown name lists the valid ones.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from solvers.base import Solver
from solvers.model.errors import NotApplicable, PlacerError, SolverUnavailable, UnknownSolver
from solvers.model.schedules import PIPELINE_SCHEDULES

ENTRY_POINT_GROUP = "placer.solvers"

# name -> "module:Class".  Keep sorted by family; names are lower-case.
BUILTIN: dict[str, str] = {
    # baselines
    "even": "solvers.baselines.even:EvenSolver",
    "single": "solvers.baselines.single:SingleSolver",
    # parmesan family
    "parmesan": "solvers.composed.parmesan:ParmesanWithSafetyNet",
    "pipedream": "solvers.baselines.pipedream:PipeDreamSolver",
    # exact contiguous partition (Tarnawski et al.)
    "exact": "solvers.exact.solver:ExactSolver",
    # rannc family
    "rannc": "solvers.rannc.solver:RanncSolver",
    # moirai family
    "moirai": "solvers.composed.moirai:MoiraiWithWarmStart",
    # celeritas family and list-scheduling baselines
    "celeritas": "solvers.composed.celeritas:CeleritasWithListSchedulers",
    "m-topo": "solvers.baselines.mtopo:MTopoSolver",
    "m-etf": "solvers.baselines.metf:METFSolver",
    "m-sct": "solvers.baselines.msct:MSCTSolver",
    "heft": "solvers.baselines.heft:HEFTSolver",
    "cpop": "solvers.baselines.cpop:CPOPSolver",
    # portfolio
    "auto": "solvers.portfolio:AutoSolver",
}


# name -> the objectives it answers, for the built-in back-ends: what ``auto`` needs to pick its
# members without importing every back-end first (tests/solvers/test_registry.py checks each
# against its class).
BUILTIN_OBJECTIVES: dict[str, tuple[str, ...]] = {
    "even": ("throughput", "latency"), "single": ("latency",), "parmesan": ("throughput",),
    "pipedream": ("throughput",), "exact": ("throughput",), "rannc": ("throughput",), "moirai": ("latency",),
    "celeritas": ("latency",), "m-topo": ("latency",), "m-etf": ("latency",), "m-sct": ("latency",),
    "heft": ("latency",), "cpop": ("latency",), "auto": ("throughput", "latency"),
}


@dataclass(frozen=True)
class SolverInfo:
    """Catalogue entry: what the registry tells users about a solver."""

    name: str
    summary: str
    objectives: tuple[str, ...]
    version: str
    options_schema: dict[str, Any]
    schedules: tuple[str, ...] = ()  # the pipeline schedules its throughput plans run (docs/python.md)
    proven_schedules: tuple[str, ...] = ()  # those for which an ``optimal`` status is a proof
    tp_schedules: tuple[str, ...] = ()  # those under which it plans tensor-parallel stages (docs/tensor-parallel.md)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "objectives": list(self.objectives),
                "version": self.version, "options_schema": self.options_schema,
                "schedules": list(self.schedules), "proven_schedules": list(self.proven_schedules),
                "tp_schedules": list(self.tp_schedules)}


def _load(name: str, path: str) -> type[Solver]:
    """Import a back-end's class; a module or extra that is missing here is :class:`SolverUnavailable`."""
    module, _, attr = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except PlacerError:
        raise
    except (ImportError, AttributeError) as exc:
        raise SolverUnavailable(f"solver {name!r} cannot be loaded here: {type(exc).__name__}: {exc}",
                                field="solver", ref=name) from None
    return cls  # type: ignore[no-any-return]


@cache
def _table() -> dict[str, str]:
    table = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        table.setdefault(ep.name.lower(), ep.value)
    return table


def names() -> list[str]:
    """The registered solver names, built-in and from the ``placer.solvers`` entry points.

    Exported as ``solvers.solver_names``.  No solver module is imported.

    Parameters
    ----------
    None

    Returns
    -------
    names : list of str
        Lower-case names, sorted; each is a valid ``solver`` for :func:`~solvers.solving.solve`.

    Raises
    ------
    None

    Examples
    --------
    >>> from solvers import solver_names
    >>> "auto" in solver_names() and "parmesan" in solver_names()
    True
    """
    return sorted(_table())


def get_solver_class(name: str) -> type[Solver]:
    """The solver class for ``name`` (case-insensitive).

    Raises :class:`UnknownSolver` (listing the valid names) or :class:`SolverUnavailable`
    (registered, but its code or an extra is missing here).
    """
    key = name.strip().lower()
    # a built-in name wins over any entry point (_table), so it needs no scan of the installed distributions
    path = BUILTIN.get(key) or _table().get(key)
    if path is None:
        raise UnknownSolver(f"unknown solver {name!r}; valid solvers: {', '.join(names())}",
                            field="solver", ref=name)
    return _load(key, path)


def canonical_name(name: str) -> str:
    """The registered name for ``name`` (case-insensitive), without importing its back-end;
    :class:`UnknownSolver` (listing the valid names) if there is none."""
    key = name.strip().lower()
    if key not in _table():
        raise UnknownSolver(f"unknown solver {name!r}; valid solvers: {', '.join(names())}",
                            field="solver", ref=name)
    return key


def objectives(name: str) -> tuple[str, ...]:
    """The objectives solver ``name`` answers: for a built-in back-end whose registration is
    unchanged, without importing it (:data:`BUILTIN_OBJECTIVES`); otherwise its class's."""
    key = canonical_name(name)
    if key in BUILTIN_OBJECTIVES and _table()[key] == BUILTIN.get(key):
        return BUILTIN_OBJECTIVES[key]
    return tuple(get_solver_class(key).objectives)


def solver_for(name: str, objective: str) -> type[Solver]:
    """The solver class for ``name``, checked to answer ``objective``.

    Raises what :func:`get_solver_class` raises, and :class:`NotApplicable` when the solver
    does not answer the objective.
    """
    cls = get_solver_class(name)
    if objective not in cls.objectives:
        raise NotApplicable(
            f"solver {cls.name!r} answers the {', '.join(cls.objectives)} objective, not {objective!r}",
            field="objective", ref=cls.name)
    return cls


def info(name: str) -> SolverInfo:
    """A solver's catalogue entry.  Every throughput solver plans every schedule of
    :data:`~solvers.model.schedules.PIPELINE_SCHEDULES`: :func:`~solvers.solving.solve` runs its own
    GPipe / 1F1B plan and cuts its rank groups into ``R * v`` stages for the others
    (:mod:`solvers.partition.schedules`).  ``proven_schedules`` comes from the class's optional
    ``proven_schedules`` (``exact``: GPipe and 1F1B, what its model covers); none elsewhere.
    ``tp_schedules`` from the class's optional ``tp_schedules``: the schedules under which its plans may
    have tensor-parallel stages (``exact``, ``pipedream``: GPipe and 1F1B, which the engines that time
    such stages run); none elsewhere."""
    cls = get_solver_class(name)
    throughput = "throughput" in cls.objectives
    return SolverInfo(cls.name, cls.summary, tuple(cls.objectives), cls.version,
                      cls.options_type.model_json_schema(), PIPELINE_SCHEDULES if throughput else (),
                      tuple(getattr(cls, "proven_schedules", ())) if throughput else (),
                      tuple(getattr(cls, "tp_schedules", ())) if throughput else ())


def catalogue() -> list[SolverInfo]:
    """Every registered solver with its summary, objectives, version and options schema.

    Parameters
    ----------
    None

    Returns
    -------
    catalogue : list of SolverInfo
        Sorted by name.  ``objectives`` says which problems a solver answers (``throughput``,
        ``latency``); ``options_schema`` is the JSON Schema of its options; ``schedules`` the pipeline
        schedules its throughput plans run (``settings.schedule`` ``auto``, the default, searches them; a
        name fixes one), ``proven_schedules`` those under which its ``optimal`` is a proof,
        ``tp_schedules`` those under which it plans tensor-parallel stages.

    Raises
    ------
    SolverUnavailable
        A registered back-end cannot be loaded here: its module or an extra it needs is missing
        (each entry imports its solver's module).

    Examples
    --------
    >>> from solvers import catalogue
    >>> {"celeritas", "moirai", "auto"} <= {info.name for info in catalogue() if "latency" in info.objectives}
    True
    >>> next(info for info in catalogue() if info.name == "auto").options_schema["properties"]["workers"]["anyOf"][0]
    {'minimum': 1, 'type': 'integer'}
    """
    return [info(n) for n in names()]
