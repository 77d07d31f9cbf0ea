"""The MILP of MOIRAI §III-D as data: a back-end-neutral linear model and the variable indices
that read a solution back (the variables are listed in :mod:`solvers.moirai.formulation`).

:mod:`solvers.moirai.formulation` fills them, :mod:`solvers.moirai.hint` assigns them from a
schedule, and the back-ends (:mod:`solvers.moirai.backends`) solve them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from solvers.moirai.instance import Instance

Terms = Iterable[tuple[int, float]]


@dataclass
class LinearModel:
    """Variables with bounds and integrality, rows ``lb <= sum(coef * var) <= ub``, a minimised objective."""

    names: list[str] = field(default_factory=list)
    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    rows: list[tuple[tuple[tuple[int, float], ...], float, float]] = field(default_factory=list)
    objective: dict[int, float] = field(default_factory=dict)
    hint: dict[int, float] = field(default_factory=dict)

    def var(self, name: str, lb: float, ub: float, integer: bool = False) -> int:
        self.names.append(name)
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(integer)
        return len(self.names) - 1

    def row(self, terms: Terms, lb: float = float("-inf"), ub: float = float("inf")) -> None:
        merged: dict[int, float] = {}
        for v, c in terms:
            merged[v] = merged.get(v, 0.0) + c
        self.rows.append((tuple((v, c) for v, c in merged.items() if c != 0.0), lb, ub))


@dataclass
class Message:
    """Communication node: producer ``task``'s send ``slot`` to device ``dst``; consumers with
    positive / zero bytes."""

    task: int
    slot: int
    dst: int
    consumers: list[tuple[int, float]]
    zero_consumers: list[int]
    S: int = -1
    C: int = -1
    T: int = -1
    z: int = -1
    u: dict[int, int] = field(default_factory=dict)  # source device k' -> u_{q k' dst}


@dataclass
class Formulation:
    """The model plus the variable indices needed to read a solution back."""

    inst: Instance
    model: LinearModel
    scale: float  # model time units per second
    horizon_s: float
    x: list[dict[int, int]]  # x[u][k]; a missing k = not allowed
    S: list[int]
    C: list[int]
    messages: list[Message]
    delta: dict[tuple[int, int], int]
    cmax: int
