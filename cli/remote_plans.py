"""``placer plans get|evaluate`` and ``placer launcher get``: plans stored on a Placer server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli._output import EXIT_FAILED, EXIT_OK, format_seconds, print_json
from cli._remote import existing_file, make_client, remote_parser
from cli.local import _settings
from client.bundles import torchrun_commands


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("plans", help="plans on the server (get, evaluate)")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = remote_parser(verbs, "get", "a stored placer.plan/v1 document")
    p.add_argument("id")
    p.add_argument("-o", "--output", help="write it to this file (default: stdout)")
    p.set_defaults(func=cmd_get)
    p = remote_parser(verbs, "evaluate", "score a plan with the server's simulator")
    p.add_argument("--graph", required=True, help="graph id on the server")
    p.add_argument("--topology", required=True, help="topology id on the server")
    p.add_argument("--plan", required=True, help="a placer.plan/v1 file")
    p.add_argument("--objective", choices=("throughput", "latency"), default="throughput")
    p.add_argument("--pass", dest="pass_", choices=("forward", "training"))
    p.add_argument("--micro-batches")
    p.add_argument("--settings", help="JSON object of further problem settings")
    p.add_argument("--timeline", help="write the simulated timeline (JSON) to this file")
    p.set_defaults(func=cmd_evaluate)



def register_launcher_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``placer launcher get``; the ``launcher`` command itself is :mod:`cli.launcher_cmd`'s."""
    p = remote_parser(verbs, "get", "download a plan's launcher bundle (zip) and print its torchrun commands")
    p.add_argument("id", metavar="PLAN_ID")
    p.add_argument("-o", "--output", help="the zip file (default: launcher-PLAN_ID.zip)")
    p.set_defaults(func=cmd_launcher_get)


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
        result = c.evaluate(args.graph, args.topology, plan, objective=args.objective, settings=_settings(args),
                            timeline=bool(args.timeline))
    if args.timeline:
        Path(args.timeline).write_text(json.dumps(result.timeline or []))
    m = result.metrics
    if args.json:
        print_json(m)
    else:
        print(f"objective {format_seconds(m.get('objective_s'))}, throughput "
              f"{m.get('throughput_samples_per_s', 0.0):.4g} samples/s, latency {format_seconds(m.get('latency_s'))}, "
              f"efficiency {m.get('efficiency', 0.0):.1%}, bound {format_seconds(m.get('lower_bound_s'))}")
    return EXIT_FAILED if result.plan.get("status") == "infeasible" else EXIT_OK


def cmd_launcher_get(args: argparse.Namespace) -> int:
    output = Path(args.output or f"launcher-{args.id}.zip")
    with make_client(args) as c:
        bundle = c.download_launcher(args.id, output)
    commands = torchrun_commands(bundle)
    if args.json:
        print_json({"plan": args.id, "output": str(output), "bytes": len(bundle), "torchrun": commands})
    else:
        print(f"wrote {output} ({len(bundle)} bytes)")
        for line in commands:
            print(f"  {line}")
    return EXIT_OK
