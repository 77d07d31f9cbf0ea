"""``placer launcher``: a plan becomes a folder that torchrun runs on the nodes (docs/launcher.md)."""

from __future__ import annotations

import argparse

from client.cli._output import EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("launcher", help="write the launcher bundle of a plan (launch.py, README.md, plan, manifest)")
    p.add_argument("--plan", required=True)
    p.add_argument("--graph", required=True, help="the graph the plan was solved on (from `placer extract`)")
    p.add_argument("--topology", help="device id -> host and local index; without it, one host")
    p.add_argument("-o", "--output", required=True, help="folder to write the bundle into")
    p.set_defaults(func=cmd_launcher)


def cmd_launcher(args: argparse.Namespace) -> int:
    from launcher.bundle import build_bundle, write_bundle
    from launcher.placement import device_slots, hosts, torchrun_command
    from solvers.model.documents import load_graph, load_plan, load_topology

    plan, graph = load_plan(args.plan), load_graph(args.graph)
    topology = load_topology(args.topology) if args.topology else None
    bundle = build_bundle(plan, graph, topology)
    write_bundle(bundle, args.output)
    slots = device_slots(plan, topology)
    print(f"wrote {args.output}/ ({', '.join(bundle.files)}); run in that folder:")
    for host, _ in hosts(slots):
        print(f"  on {host}: {torchrun_command(slots, host)}")
    return EXIT_OK
