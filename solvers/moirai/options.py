"""Options of the ``moirai`` solver (docs/moirai.md, "Options")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from solvers.base import SolverOptions


class MoiraiOptions(SolverOptions):
    """Options of ``moirai`` (docs/moirai.md)."""

    backend: Literal["cbc", "scip", "highs", "pulp-cbc", "cp-sat"] = Field(
        "cp-sat", description="engine for the one formulation: OR-Tools CBC / SCIP / HiGHS, PuLP CBC, or CP-SAT")
    fusion: bool = Field(True, description="coarsen by operator-fusion rules first (GCOF, Alg. 1)")
    fusion_rules: list[list[str]] | None = Field(
        None, description="fusion rules, each an ordered list of op types; default: docs/moirai.md")
    max_nodes: int = Field(60, ge=1, le=2000, description="largest graph (ops) the exact models see whole; "
                                                         "also the coarse MILP's node budget")
    coarse_milp: bool = Field(False, description="on larger graphs also solve the paper's coarsened MILP (GCOF + "
                                                 "node budget) and expand its plan to the ops")
    window_search: bool = Field(True, description="improve the schedule window by window with the model")
    window_nodes: int = Field(24, ge=2, le=2000, description="ops per window of the window search (doubles when "
                                                             "a pass finds nothing)")
    window_time_s: float = Field(2.0, gt=0, description="time limit of one window")
    warm_start: bool = Field(True, description="start from the best list schedule of the ops (HEFT, m-ETF, m-SCT, "
                                               "m-TOPO, Celeritas, our own, single device)")
    solve_time_limit_s: float = Field(60.0, gt=0, description="cap on the time after the warm start, within the "
                                                              "budget")
    threads: int = Field(1, ge=1, le=64, description="threads given to the back-end")
