"""``/v1/solvers``: the catalogue of registered back-ends with their option schemas."""

from __future__ import annotations

from fastapi import APIRouter

from service.boundary import PlacerRoute
from service.schemas import SolverOut
from solvers import registry
from solvers.model.errors import PlacerError

router = APIRouter(prefix="/v1", tags=["solvers"], route_class=PlacerRoute)


def catalogue() -> list[SolverOut]:
    """Every registered solver; one whose module or extra is missing is listed as unavailable."""
    out = []
    for name in registry.names():
        try:
            info = registry.info(name)
        except PlacerError as exc:
            out.append(SolverOut(name=name, summary="", objectives=[], version="", options_schema={},
                                 available=False, unavailable_reason=str(exc)))
            continue
        out.append(SolverOut(**info.to_dict()))
    return out


@router.get("/solvers", response_model=list[SolverOut])
def list_solvers() -> list[SolverOut]:
    """The solver catalogue (no API key needed)."""
    return catalogue()
