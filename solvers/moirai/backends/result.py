"""What a back-end returns: an honest status, the variable values, objective and proven bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# (incumbent in model units or None, proven bound in model units or None)
Report = Callable[[float | None, float | None], None]

BACKENDS: tuple[str, ...] = ("cbc", "scip", "highs", "pulp-cbc", "cp-sat")


@dataclass(frozen=True)
class BackendResult:
    """``status``: ``optimal`` (proved), ``feasible`` (a solution, no proof), ``infeasible`` (proved),
    ``unknown`` (nothing found).  ``values[i]`` = value of model variable ``i`` (times in model
    units); CP-SAT, which builds its own model, fills at least the placement and start times."""

    status: str
    values: list[float] | None = None
    objective: float | None = None
    bound: float | None = None
    message: str = ""
