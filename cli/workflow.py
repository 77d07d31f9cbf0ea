"""The workflow verbs on local files (no server): ``placer validate``, ``placer solve`` and
``placer simulate``, and ``placer catalogue list``, the solvers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cli._output import EXIT_FAILED, EXIT_OK, format_seconds, format_table, print_json
from cli._parsers import Commands, command, verbs
from cli.problem import add_problem_flags, options_from_pairs, problem_from_args
from launcher.compare import compare
from solvers import registry
from solvers.advice import PlanWarning, next_steps, problem_warnings
from solvers.base import ProgressEvent
from solvers.model.canonical import digest
from solvers.model.documents import load_plan, parse_document, read_json, write_json
from solvers.model.errors import InvalidInput
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.model.schedules import PIPELINE_SCHEDULES
from solvers.model.topology import Topology
from solvers.simulator import simulate
from solvers.simulator.trace import chrome_trace
from solvers.solving import solve
from solvers.validity import resolve_plan

SIMULATED = ("objective_s", "iteration_s", "latency_s", "throughput_samples_per_s", "samples_per_iteration",
             "time_per_sample_s", "bottleneck_stage_s", "bubble_fraction", "lower_bound_s", "efficiency")


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer validate``, ``placer solve``, ``placer simulate`` and ``placer catalogue list``."""
    _register_validate(sub)
    _register_solve(sub)
    _register_simulate(sub)
    group = verbs(command(sub, "catalogue", "the solver catalogue: every registered solver",
                          ["placer catalogue list"]))
    p = command(group, "list", "list every registered solver with its summary, objectives and options schema",
                ["placer catalogue list", "placer catalogue list --json"])
    p.add_argument("--json", action="store_true", help="print the catalogue as JSON (with each options schema)")
    p.set_defaults(func=cmd_catalogue_list)


# ---- validate ------------------------------------------------------------------------------
def _register_validate(sub: Commands[argparse.ArgumentParser]) -> None:
    p = command(sub, "validate", "validate a graph, topology, plan or problem document",
                ["placer validate bert.json", "placer validate plan.json --graph bert.json --topology topo.json"],
                description="Validates any document by its `format`. A plan given with --graph and --topology "
                            "is also checked against them (every op placed once, devices used once, "
                            "dependencies, pins, memory).")
    p.add_argument("file", help="JSON document (gzip allowed)")
    p.add_argument("--graph", help="with a plan: the graph to check it against")
    p.add_argument("--topology", help="with a plan: the topology to check it against")
    p.add_argument("--objective", choices=("throughput", "latency"), help="with a plan: override its objective")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    obj = parse_document(read_json(args.file))
    info: dict[str, Any] = {"ok": True, "file": args.file}
    if isinstance(obj, OpGraph):
        info.update(format="placer.opgraph/v1", name=obj.name, nodes=obj.n_ops, edges=len(obj.edges), digest=obj.digest)
    elif isinstance(obj, Topology):
        info.update(format="placer.topology/v1", name=obj.name, devices=obj.n_devices, hosts=len(obj.hosts),
                    digest=obj.digest)
    elif isinstance(obj, Plan):
        info.update(format="placer.plan/v1", stages=len(obj.stages), status=obj.status)
        if args.graph or args.topology:
            problem = problem_from_args(args, obj)
            resolve_plan(problem, obj)
            info["checked_against"] = {"graph": problem.graph.digest, "topology": problem.topology.digest}
    else:
        info.update(format="placer.problem/v1")
    if args.json:
        print_json(info)
    else:
        details = ", ".join(f"{k}={v}" for k, v in info.items() if k not in ("ok", "file"))
        print(f"ok: {args.file}: {details}")
    return EXIT_OK


# ---- solve -------------------------------------------------------------------------------
def _register_solve(sub: Commands[argparse.ArgumentParser]) -> None:
    p = command(sub, "solve", "solve locally (no server) and write the plan",
                ["placer solve --graph bert.json --topology topo.json --micro-batches 8 -o plan.json",
                 "placer solve --solver parmesan --graph bert.json --topology topo.json --time-limit 60 -o plan.json"],
                description="Solves locally and writes the plan; the plan carries the simulator's metrics. "
                            "The summary line is followed by the solver's notes (why a budget ran out, what "
                            "an optimal is for) and warnings about the graph's times (measured on a device kind "
                            "the topology lacks, roofline estimates); --json returns them too. "
                            "--option values are read as JSON when they parse (--option alpha=1, "
                            "--option mapping='\"p2p\"' or --option mapping=p2p). Exit code 1 when the plan "
                            "is infeasible (the plan is still written).")
    p.add_argument("--solver", default="auto",
                   help="a solver of `placer catalogue list` (default: auto, the whole portfolio)")
    add_problem_flags(p, on_server=False)
    p.add_argument("-o", "--output", required=True, help="the plan file to write (placer.plan/v1)")
    p.add_argument("--json", action="store_true", help="print the plan's metrics as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_solve)


def cmd_solve(args: argparse.Namespace) -> int:
    problem = problem_from_args(args)
    show = not args.quiet and sys.stderr.isatty()

    def progress(event: ProgressEvent) -> None:
        if show:
            best = format_seconds(event.incumbent_s)
            sys.stderr.write(f"\r[{'#' * int(20 * event.fraction):<20}] {event.fraction:4.0%} best {best} ")
            sys.stderr.flush()

    plan = solve(problem, args.solver, options_from_pairs(args.option), time_limit_s=args.time_limit,
                 progress=progress)
    if show:
        sys.stderr.write("\n")
    write_json(plan.to_document(), args.output)
    if args.json:
        print_json({"status": plan.status, "output": args.output, "solve_time_s": plan.solve_time_s,
                    "claimed_objective_s": plan.claimed_objective_s, "metrics": plan.metrics,
                    "notes": list(plan.notes), "warnings": [dict(w) for w in plan.warnings]})
    else:
        _print_summary(plan.solver, plan.status, plan.metrics, plan.solve_time_s)
        for note in plan.notes:
            print(f"  note: {note}")
        _print_warnings(plan.warnings)
        print(f"wrote {args.output}")
    return EXIT_FAILED if plan.status == "infeasible" else EXIT_OK


def _print_warnings(warnings: Any) -> None:
    for w in warnings:
        print(f"  warning: {w['message']}")


def _print_summary(solver: str, status: str, metrics: Any, solve_time_s: float | None) -> None:
    if not metrics:
        print(f"{solver}: {status}")
        return
    print(f"{solver}: {status}; objective {format_seconds(metrics['objective_s'])}, "
          f"throughput {metrics['throughput_samples_per_s']:.4g} samples/s "
          f"({metrics['micro_batches']} micro-batches, {metrics.get('samples_per_iteration', 0):g} samples), "
          f"efficiency {metrics['efficiency']:.1%}, solved in {format_seconds(solve_time_s)}")


# ---- simulate ------------------------------------------------------------------------------
def _register_simulate(sub: Commands[argparse.ArgumentParser]) -> None:
    p = command(sub, "simulate", "score a plan with the simulator",
                ["placer simulate --graph bert.json --topology topo.json --plan plan.json",
                 "placer simulate --graph profile.json --topology topo.json --plan plan.json --compare run/metrics.json"],
                description="Scores a plan, including a hand-written one holding only `format`, `stages`, "
                            "`micro_batches` and `schedule`. --json prints one object with objective_s, "
                            "iteration_s, throughput_samples_per_s, latency_s, stage_times_s, "
                            "bottleneck_stage_s, bubble_fraction, peak_memory_bytes, busy_s, bytes_per_channel, "
                            "lower_bound_s, efficiency, samples_per_iteration, time_per_sample_s "
                            "(docs/simulator.md), and warnings about the graph's times. The objective comes from "
                            "--objective, else from the plan's `objective` field, else throughput. --compare "
                            "sets a launcher run's measured iteration time and per-stage times beside the "
                            "simulator's and the cost model's (docs/launcher.md) and says what to do next: "
                            "profile, calibrate or re-plan.")
    add_problem_flags(p, on_server=False, settings=False, solving=False)
    p.add_argument("--plan", required=True, help="the plan file (placer.plan/v1)")
    p.add_argument("--global-batch", type=int, metavar="SAMPLES",
                   help="the problem's global batch, when the plan was solved with one: the graph is scaled to "
                        "global batch / the plan's micro-batches samples per micro-batch")
    p.add_argument("--schedule", choices=PIPELINE_SCHEDULES,
                   help="score the plan's stages under this pipeline schedule instead of its own")
    p.add_argument("--virtual-stages", type=int, metavar="V",
                   help="read the plan's stages as V per rank group (docs/formats.md) instead of its own count")
    p.add_argument("--engine", choices=("auto", "stage", "op"), default="auto",
                   help="the simulator's engine: stage level, op level, or auto (the plan decides)")
    p.add_argument("--timeline", help="write the timeline (device, task, start, end; a pipeline task's kind, "
                                      "stage, chunk, rank and micro-batch) as JSON here")
    p.add_argument("--trace", metavar="FILE",
                   help="write the timeline as a Chrome trace (Trace Event Format: chrome://tracing, Perfetto) here")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    p.add_argument("--compare", metavar="RUN",
                   help="a launcher run's run.json (or metrics.json) to set beside the prediction")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    loaded_digest = digest(plan.to_document())  # before --schedule / --virtual-stages change it
    if args.virtual_stages is not None and args.virtual_stages < 1:
        raise InvalidInput(f"--virtual-stages: must be an integer >= 1, got {args.virtual_stages}",
                           field="virtual_stages")
    if args.schedule is not None or args.virtual_stages is not None:
        plan = plan.with_(schedule=args.schedule or plan.schedule,
                          virtual_stages=args.virtual_stages if args.virtual_stages is not None else plan.virtual_stages)
    problem = problem_from_args(args, plan)
    result = simulate(problem, plan, timeline=bool(args.timeline or args.trace), engine=args.engine)
    if args.timeline:
        Path(args.timeline).write_text(json.dumps([e.to_dict() for e in result.timeline or []]))
    if args.trace:
        Path(args.trace).write_text(json.dumps(chrome_trace(result.timeline or [], {
            "solver": plan.solver, "schedule": plan.schedule, "virtual_stages": plan.virtual_stages})))
    m = result.metrics
    warnings = problem_warnings(problem.graph, problem.topology)
    if args.compare:
        return _print_comparison(args, problem, plan, m, warnings, loaded_digest)
    if args.json:
        print_json({**m, "warnings": [w.to_dict() for w in warnings]})
        return EXIT_OK
    print(format_table(["metric", "value"], [(k, m[k]) for k in SIMULATED]))
    _print_warnings([w.to_dict() for w in warnings])
    return EXIT_OK


def _print_comparison(args: argparse.Namespace, problem: Problem, plan: Plan, metrics: Any,
                      warnings: list[PlanWarning], plan_digest: str) -> int:
    rows = compare(problem.graph, problem.topology, plan, metrics, read_json(args.compare), plan_digest)
    stages = [r.ratio for r in rows if r.what.startswith("stage ")]
    advice = next_steps(rows[0].ratio, stages, warnings)
    if args.json:
        print_json({"metrics": metrics, "comparison": [r.to_dict() for r in rows],
                    "warnings": [w.to_dict() for w in warnings], "next_steps": advice})
        return EXIT_OK
    print(format_table(["", "measured", "simulated", "measured / simulated"],
                       [(r.what, format_seconds(r.measured_s), format_seconds(r.simulated_s), f"{r.ratio:.3g}")
                        for r in rows]))
    ratios = [r.measured_s / r.profiled_s for r in rows if r.profiled_s and r.measured_s != r.profiled_s]
    if ratios:
        print(f"stage rows: the profiled times x {ratios[0]:.3g}, the run's plain over profiled steps (the "
              "profiler's own time left out)")
    _print_warnings([w.to_dict() for w in warnings])
    for step in advice:
        print(f"next: {step}")
    return EXIT_OK


# ---- catalogue list -----------------------------------------------------------------------
def cmd_catalogue_list(args: argparse.Namespace) -> int:
    cat = registry.catalogue()
    if args.json:
        print_json([c.to_dict() for c in cat])
    else:
        print(format_table(["solver", "objectives", "summary"], [(c.name, ",".join(c.objectives), c.summary) for c in cat]))
    return EXIT_OK
