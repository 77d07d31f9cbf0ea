"""``placer launcher``: a plan becomes a folder that torchrun runs on the nodes (docs/launcher.md).

``placer launcher build --plan P --graph G [--topology T] -o DIR`` builds the bundle locally;
``placer launcher get PLAN_ID`` downloads a server's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli._output import EXIT_OK, print_json
from cli._parsers import Commands, command, verbs
from cli._remote import make_client, remote_command
from client.bundles import torchrun_commands
from launcher.bundle import build_bundle, write_bundle
from launcher.placement import device_slots, hosts, torchrun_command
from solvers.model.documents import load_graph, load_plan, load_topology


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer launcher build`` and ``placer launcher get``."""
    noun = command(sub, "launcher", "a plan's launcher bundle: build it here, or get a server's",
                   ["placer launcher build --plan plan.json --graph profile.json --topology topo.json -o run/",
                    "placer launcher get p_ID"])
    group = verbs(noun)
    p = command(group, "build", "write a plan's launcher bundle (launch.py, README.md, plan, graph, manifest)",
                ["placer launcher build --plan plan.json --graph profile.json --topology topo.json -o run/"],
                description="Write the plan's launcher bundle into DIR: launch.py (the torchrun entry point on "
                            "every node), README.md (the torchrun command per host), plan.json, graph.json, "
                            "manifest.json. The graph must come from `placer extract` or `placer profile`. "
                            "Running it needs placer with the torch extra on every node (docs/launcher.md).")
    p.add_argument("--plan", required=True, help="the plan (placer.plan/v1)")
    p.add_argument("--graph", required=True,
                   help="the graph the plan was solved on (from `placer extract` or `placer profile`)")
    p.add_argument("--topology", help="device id -> host and local index; without it, one host")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write the bundle into")
    p.set_defaults(func=cmd_build)
    p = remote_command(group, "get", "download a plan's launcher bundle (zip) and print its torchrun commands",
                       ["placer launcher get p_ID -o run.zip"])
    p.add_argument("id", metavar="PLAN_ID", help="the plan's id on the server")
    p.add_argument("-o", "--output", help="the zip file (default: launcher-PLAN_ID.zip)")
    p.set_defaults(func=cmd_get)


def cmd_build(args: argparse.Namespace) -> int:
    plan, graph = load_plan(args.plan), load_graph(args.graph)
    topology = load_topology(args.topology) if args.topology else None
    bundle = build_bundle(plan, graph, topology)
    write_bundle(bundle, args.output)
    slots = device_slots(plan, topology)
    print(f"wrote {args.output}/ ({', '.join(bundle.files)}); run in that folder:")
    for host, _ in hosts(slots):
        print(f"  on {host}: {torchrun_command(slots, host)}")
    return EXIT_OK


def cmd_get(args: argparse.Namespace) -> int:
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
