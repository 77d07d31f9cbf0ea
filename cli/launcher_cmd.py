"""``placer launcher``: a plan becomes a folder that torchrun runs on the nodes (docs/launcher.md).

``placer launcher --plan P --graph G [--topology T] -o DIR`` builds the bundle locally;
``placer launcher get PLAN_ID`` (:mod:`cli.remote_plans`) downloads a server's.
"""

from __future__ import annotations

import argparse

from cli._output import EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from cli.remote_plans import register_launcher_verbs

    p = sub.add_parser("launcher", help="write a plan's launcher bundle (launch.py, README.md, plan, manifest); "
                       "`placer launcher get PLAN_ID` downloads a server's")
    p.add_argument("--plan", help="the plan (placer.plan/v1)")
    p.add_argument("--graph", help="the graph the plan was solved on (from `placer extract` or `placer profile`)")
    p.add_argument("--topology", help="device id -> host and local index; without it, one host")
    p.add_argument("-o", "--output", help="folder to write the bundle into")
    p.set_defaults(func=cmd_launcher, launcher_parser=p)
    register_launcher_verbs(p.add_subparsers(dest="verb", metavar="VERB"))


def cmd_launcher(args: argparse.Namespace) -> int:
    from launcher.bundle import build_bundle, write_bundle
    from launcher.placement import device_slots, hosts, torchrun_command
    from solvers.model.documents import load_graph, load_plan, load_topology

    missing = [f"--{k}" for k in ("plan", "graph", "output") if not getattr(args, k)]
    if missing:
        args.launcher_parser.error(f"the following arguments are required: {', '.join(missing)} "
                                   "(or `placer launcher get PLAN_ID`)")
    plan, graph = load_plan(args.plan), load_graph(args.graph)
    topology = load_topology(args.topology) if args.topology else None
    bundle = build_bundle(plan, graph, topology)
    write_bundle(bundle, args.output)
    slots = device_slots(plan, topology)
    print(f"wrote {args.output}/ ({', '.join(bundle.files)}); run in that folder:")
    for host, _ in hosts(slots):
        print(f"  on {host}: {torchrun_command(slots, host)}")
    return EXIT_OK
