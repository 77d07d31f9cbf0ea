"""``placer plan get|evaluate``: plans stored on a Placer server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli._output import EXIT_FAILED, EXIT_OK, format_seconds, print_json
from cli._parsers import Commands, command, verbs
from cli._remote import existing_file, make_client, remote_command
from cli.problem import add_problem_flags, settings_from_args


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer plan get`` and ``placer plan evaluate``."""
    group = verbs(command(sub, "plan", "plans on the server (get, evaluate)", ["placer plan get p_ID -o plan.json"]))
    p = remote_command(group, "get", "a stored placer.plan/v1 document", ["placer plan get p_ID -o plan.json"])
    p.add_argument("id", help="the plan's id")
    p.add_argument("-o", "--output", help="write it to this file (default: stdout)")
    p.set_defaults(func=cmd_get)
    p = remote_command(group, "evaluate", "score a plan with the server's simulator",
                       ["placer plan evaluate --graph g_ID --topology t_ID --plan plan.json --micro-batches 8"])
    add_problem_flags(p, on_server=True, objective_default="throughput", solving=False)
    p.add_argument("--plan", required=True, help="a placer.plan/v1 file")
    p.add_argument("--timeline", help="write the simulated timeline (JSON) to this file")
    p.set_defaults(func=cmd_evaluate)


def cmd_get(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        doc = c.get_plan(args.id).to_document()
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
        if args.json:
            print_json({"plan": args.id, "output": args.output})
        else:
            print(f"wrote {args.output}")
    else:
        print_json(doc)
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    plan = existing_file(args.plan, "plan")
    with make_client(args) as c:
        result = c.evaluate(args.graph, args.topology, plan, objective=args.objective, settings=settings_from_args(args),
                            timeline=bool(args.timeline), calibration=args.calibration)
    if args.timeline:
        Path(args.timeline).write_text(json.dumps(result.timeline or []))
    m = result.metrics
    if args.json:
        print_json(m)
    else:
        print(f"objective {format_seconds(m.get('objective_s'))}, throughput "
              f"{m.get('throughput_samples_per_s', 0.0):.4g} samples/s, latency {format_seconds(m.get('latency_s'))}, "
              f"efficiency {m.get('efficiency', 0.0):.1%}, bound {format_seconds(m.get('lower_bound_s'))}"
              + (f", calibration {result.calibration_id}" if result.calibration_id else ""))
    return EXIT_FAILED if result.plan.get("status") == "infeasible" else EXIT_OK
