"""``placer launcher``: a plan becomes a folder that torchrun runs on the nodes (docs/launcher.md).

``placer launcher build --plan P --graph G [--topology T] -o DIR`` builds the bundle locally;
``placer launcher check`` proves on the meta device that a plan launches; ``placer launcher verify``
runs one step under torchrun beside the single-process model; ``placer launcher get
PLAN_ID`` downloads a server's bundle.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli._output import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, print_json
from cli._parsers import Commands, command, verbs
from cli._remote import make_client, remote_command
from client.bundles import torchrun_commands
from extract import require_torch
from launcher.bundle import build_bundle, write_bundle
from launcher.check import check_plan, format_report
from launcher.placement import device_slots, hosts, torchrun_command
from launcher.verify import format_report as format_verify
from launcher.verify import verify_plan
from solvers.model.documents import load_graph, load_plan, load_topology
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan
from solvers.model.topology import Topology


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
    _plan_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write the bundle into")
    p.set_defaults(func=cmd_build)
    p = command(group, "check", "prove that a plan launches: every stage built on the meta device, every boundary traced",
                ["placer launcher check --plan plan.json --graph graph.json --topology topo.json"],
                description="Does what every rank does before it runs, on the meta device (no process, no "
                            "memory): rebuilds and exports the model, compares it with the graph, builds every "
                            "stage, checks the replica slices, and traces every value that crosses a stage "
                            "boundary (dtype, shape, contiguity, the stages it crosses). Prints ok and the trace, "
                            "or refused and the reason (exit 2). Needs the torch extra.")
    _plan_arguments(p)
    p.add_argument("--json", action="store_true", help="print the report (ok, reason, boundaries, tied) as JSON")
    p.set_defaults(func=cmd_check)
    p = command(group, "verify", "run one training step under torchrun beside the single-process model and compare",
                ["placer launcher verify --plan plan.json --graph graph.json --topology topo.json"],
                description="Checks the plan (as `placer launcher check`), writes its bundle with every device on "
                            "this host, runs one training step under `torchrun --standalone` (the plan's world "
                            "size, gloo on CPU, one thread per process) and the same step on the model in one "
                            "process, and prints the largest relative difference of the loss and of every "
                            "parameter's gradient (tied ones included). Exit 0 when every difference is <= 1e-5 "
                            "(float32), 1 naming the first parameter that differs, 2 when the plan would not "
                            "launch. A model with dropout draws other random numbers in each process: extract "
                            "it with dropout 0 (`--param dropout=0`) to verify it.")
    _plan_arguments(p)
    p.add_argument("--data", help="package.module:callable giving batches and loss (as launch.py --data)")
    p.add_argument("--keep", metavar="DIR", help="write the bundle and the step's files here (default: a temporary "
                                                  "folder, removed)")
    p.add_argument("--timeout", type=float, default=600, help="seconds the torchrun step may take (default 600)")
    p.add_argument("--json", action="store_true", help="print every difference as JSON")
    p.set_defaults(func=cmd_verify)
    p = remote_command(group, "get", "download a plan's launcher bundle (zip) and print its torchrun commands",
                       ["placer launcher get p_ID -o run.zip"])
    p.add_argument("id", metavar="PLAN_ID", help="the plan's id on the server")
    p.add_argument("-o", "--output", help="the zip file (default: launcher-PLAN_ID.zip)")
    p.set_defaults(func=cmd_get)


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True, help="the plan (placer.plan/v1)")
    p.add_argument("--graph", required=True,
                   help="the graph the plan was solved on (from `placer extract` or `placer profile`)")
    p.add_argument("--topology", help="device id -> host and local index; without it, one host")


def _plan_inputs(args: argparse.Namespace) -> tuple[Plan, OpGraph, Topology | None]:
    """The plan, graph and (optional) topology the ``--plan``, ``--graph``, ``--topology`` files hold."""
    return load_plan(args.plan), load_graph(args.graph), load_topology(args.topology) if args.topology else None


def cmd_check(args: argparse.Namespace) -> int:
    require_torch("placer launcher check")
    plan, graph, topology = _plan_inputs(args)
    report = check_plan(plan, graph, topology)
    if args.json:
        print_json(report.to_dict())
    else:
        print(format_report(report))
    return EXIT_OK if report.ok else EXIT_BAD_INPUT


def cmd_verify(args: argparse.Namespace) -> int:
    require_torch("placer launcher verify")
    plan, graph, topology = _plan_inputs(args)
    report = verify_plan(plan, graph, topology, data=args.data, folder=Path(args.keep) if args.keep else None,
                         timeout_s=args.timeout)
    if args.json:
        print_json(report.to_dict())
    else:
        print(format_verify(report))
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_build(args: argparse.Namespace) -> int:
    plan, graph, topology = _plan_inputs(args)
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
