"""The problem flags, declared once for ``placer solve``, ``placer job submit``,
``placer comparison submit``, ``placer simulate`` and ``placer plan evaluate``.

Locally ``--graph`` and ``--topology`` are files; on a server they are ids. The settings flags
become a ``placer.problem/v1`` settings object (:func:`settings_from_args`), the ``--option``
pairs a solver's options (:func:`options_from_pairs`, :func:`solver_options_from_pairs`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, cast

from solvers.calibration import apply_calibration, load_calibration
from solvers.model.documents import load_graph, load_topology
from solvers.model.errors import InvalidInput
from solvers.model.problem import SCHEDULES, Objective, Problem, settings_from_dict

if TYPE_CHECKING:
    from solvers.model.plan import Plan

OBJECTIVES = ("throughput", "latency")


def add_problem_flags(p: argparse.ArgumentParser, *, on_server: bool, objective_default: str | None = None,
                      settings: bool = True, solving: bool = True, per_solver_options: bool = False) -> None:
    """Add the problem flags to ``p``.

    Parameters
    ----------
    p
        The command's parser.
    on_server
        ``--graph`` and ``--topology`` name ids on the server rather than files.
    objective_default
        The default of ``--objective`` (``None``: the plan's, else throughput).
    settings
        Add the settings flags beyond ``--pass`` (stages, replicas, tensor parallelism, micro-batches,
        global batch, schedule, recompute, seed, settings).
    solving
        Add ``--option`` and ``--time-limit``.
    per_solver_options
        ``--option`` names its solver (``SOLVER.KEY=VALUE``; several solvers at once).
    """
    where = "id on the server" if on_server else "file (placer.opgraph/v1, JSON or gzip)"
    p.add_argument("--graph", required=True, help=f"the operator graph: {where}")
    p.add_argument("--topology", required=True, help="the topology: " + (
        "id on the server" if on_server else "file (placer.topology/v1)"))
    p.add_argument("--objective", choices=OBJECTIVES, default=objective_default,
                   help="throughput (time per sample; per iteration with --global-batch) or latency (one forward pass); default: "
                        + (objective_default or "the plan's, else throughput"))
    p.add_argument("--pass", dest="pass_", choices=("forward", "training"),
                   help="what one iteration runs (default: training for throughput, forward for latency)")
    if not on_server:
        p.add_argument("--calibration", metavar="FILE",
                       help="a placer.calibration/v1 file (`placer calibrate`): the graph and topology as it adjusts "
                            "them (docs/cost-model.md); the metrics name its digest as `calibration`")
    else:
        p.add_argument("--calibration", metavar="ID",
                       help="simulate with this stored calibration (`placer calibrations upload`), or `none`; "
                            "default: the one attached to the topology, if any")
    if settings:
        p.add_argument("--stages", type=int, help="exactly this many pipeline stages")
        p.add_argument("--replicas", type=int, help="data-parallel replicas of every stage")
        p.add_argument("--tp", type=int, metavar="N",
                       help="tensor-parallel degree of every stage, a power of two (gpipe, 1f1b or auto; default: "
                            "searched among 1, 2, 4, ... up to --max-tp)")
        p.add_argument("--max-tp", type=int, metavar="N",
                       help="largest tensor-parallel degree searched, a power of two (default: 8; 1: none)")
        p.add_argument("--tp-across-hosts", dest="tp_within_host", action="store_false", default=None,
                       help="let a tensor-parallel group span hosts (default: each group on one host)")
        p.add_argument("--micro-batches", help="a count or a comma-separated list of candidates, e.g. 4,8,16 "
                                               "(default: powers of two from 1 to twice the device count are searched)")
        p.add_argument("--global-batch", type=int, metavar="SAMPLES",
                       help="samples per iteration: each micro-batch count must divide it, the graph is scaled "
                            "to that micro-batch size and the iteration time is minimised (default: the time per "
                            "sample is)")
        p.add_argument("--schedule", choices=SCHEDULES,
                       help="the pipeline schedule (default: auto, every schedule searched with 1, 2 and 4 "
                            "virtual stages where it applies and the fastest per sample kept; a name fixes it)")
        p.add_argument("--virtual-stages", type=int, metavar="V",
                       help="stages per rank group of interleaved-1f1b, looped-bfs and interleaved-zb (zbv, "
                            "dualpipev: 2; default: searched among 1, 2, 4)")
        p.add_argument("--recompute", action=argparse.BooleanOptionalAction, default=None,
                       help="recompute activations in the backward pass in every stage (--no-recompute: in none; "
                            "default: in exactly the stages whose memory requires it)")
        p.add_argument("--seed", type=int, help="seed of randomised solvers")
        p.add_argument("--settings", metavar="JSON", help="JSON object of further problem settings (docs/formats.md)")
    if solving:
        if per_solver_options:
            p.add_argument("--option", action="append", default=[], metavar="SOLVER.KEY=VALUE",
                           help="an option of one solver (VALUE read as JSON when it parses, else as a string)")
        else:
            p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                           help="solver option (VALUE read as JSON when it parses, else as a string)")
        p.add_argument("--time-limit", type=float, metavar="SECONDS",
                       help="the solve's time budget in seconds (default: " + (
                           "the server's)" if on_server else "the solver's)"))


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The problem settings the flags give (``--settings`` first, the single flags over it)."""
    try:
        settings: dict[str, Any] = json.loads(args.settings) if getattr(args, "settings", None) else {}
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--settings: not JSON ({exc})", field="settings") from None
    if not isinstance(settings, dict):
        raise InvalidInput("--settings: must be a JSON object", field="settings")
    for key in ("stages", "replicas", "tp", "max_tp", "tp_within_host", "seed", "schedule", "virtual_stages",
                "global_batch"):
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "micro_batches", None):
        try:
            settings["micro_batches"] = [int(x) for x in str(args.micro_batches).split(",")]
        except ValueError:
            raise InvalidInput(f"--micro-batches: not a count or list: {args.micro_batches!r}",
                               field="micro_batches") from None
    if getattr(args, "recompute", None) is not None:
        settings["recompute"] = args.recompute
    if getattr(args, "pass_", None):
        settings["pass"] = args.pass_
    return settings


def options_from_pairs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a solver's options; VALUE is read as JSON when it parses."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise InvalidInput(f"--option {pair!r}: expected KEY=VALUE", field="option")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def solver_options_from_pairs(pairs: list[str]) -> dict[str, dict[str, Any]]:
    """``SOLVER.KEY=VALUE`` pairs as the options of each solver."""
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        solver, dot, rest = pair.partition(".")
        if not dot or not solver:
            raise InvalidInput(f"--option {pair!r}: expected SOLVER.KEY=VALUE", field="option")
        out.setdefault(solver, {}).update(options_from_pairs([rest]))
    return out


def sweep_from_pairs(pairs: list[str]) -> dict[str, list[int | str]]:
    """``SETTING=V1,V2,...`` pairs (``--sweep micro_batches=4,8,16``, ``--sweep tp=1,2,4``) as a comparison's ``sweep``;
    whole numbers become integers.  The server checks the names and values."""
    out: dict[str, list[int | str]] = {}
    for pair in pairs:
        name, eq, values = pair.partition("=")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not eq or not name.strip() or not items:
            raise InvalidInput(f"--sweep {pair!r}: expected SETTING=V1,V2,... (e.g. micro_batches=4,8,16)",
                               field="sweep")
        out[name.strip()] = [int(v) if v.isdigit() else v for v in items]
    return out


def problem_from_args(args: argparse.Namespace, plan: Plan | None = None) -> Problem:
    """The problem named by ``--graph``, ``--topology``, ``--objective`` and the settings flags."""
    return load_problem(args.graph, args.topology, args.objective, settings_from_args(args), plan,
                        getattr(args, "calibration", None))


def load_problem(graph_path: str | None, topology_path: str | None, objective: str | None,
                 settings: dict[str, Any], plan: Plan | None = None, calibration: str | None = None) -> Problem:
    """Load the documents and build the problem; a plan supplies the objective and pass it was made for; a
    calibration file adjusts the graph and topology (:func:`solvers.calibration.apply_calibration`)."""
    if not graph_path or not topology_path:
        raise InvalidInput("--graph and --topology are both needed", field="graph" if not graph_path else "topology")
    graph, topology = load_graph(graph_path), load_topology(topology_path)
    if calibration:
        graph, topology = apply_calibration(graph, topology, load_calibration(calibration))
    chosen = objective or (plan.objective if plan is not None and plan.objective else "throughput")
    if plan is not None and "pass" not in settings and plan.pass_:
        settings = {**settings, "pass": plan.pass_}
    return Problem(graph, topology, cast(Objective, chosen), settings_from_dict(settings))
