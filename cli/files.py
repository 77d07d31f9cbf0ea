"""The local verbs of ``placer graph`` and ``placer topology``: documents on disk, no server.

``generate`` (the generators of docs/generators.md), ``import`` (another tool's profile, or
GraphML), ``export`` (GraphML, and for graphs Graphviz DOT) and for graphs ``scale`` (Celeritas'
Standard Evaluation).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli._output import EXIT_OK, format_table, print_json
from cli._params import describe_params, parse_params
from cli._parsers import Commands, command
from cli.problem import load_problem
from solvers import generate
from solvers.model.documents import load_graph, load_plan, load_topology, read_json, write_json
from solvers.model.dot import to_dot
from solvers.model.errors import InvalidInput
from solvers.model.graph import OpGraph, graph_from_document
from solvers.model.graphml import read_graphml, to_graphml
from solvers.model.importers import import_pipedream, import_piper
from solvers.model.scaling import scale_graph
from solvers.model.topology import Topology, topology_from_document
from solvers.validity import resolve_plan

EXAMPLES = {
    "graph": ["placer graph generate transformer --layers 24 -o bert.json",
              "placer graph generate transformer --help-params"],
    "topology": ["placer topology generate hierarchical --nodes 4 --gpus-per-node 4 -o topo.json",
                 "placer topology generate mesh2d --help-params"],
}


def add_file_verbs(group: Commands[argparse.ArgumentParser], what: str) -> None:
    """``generate``, ``import``, ``export`` (and for graphs ``scale``) on the noun ``what``."""
    p = command(group, "generate", f"generate a {what}; `placer {what} generate KIND --help-params` lists its parameters",
                EXAMPLES[what],
                description=f"Generate a {what} of a kind of docs/generators.md. Parameters are given as "
                            "--name value (dashes or underscores); --help-params lists the kind's parameters, "
                            "types and defaults.")
    p.add_argument("kind", help=f"the {what} kind (docs/generators.md)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--help-params", action="store_true", help="list the kind's parameters")
    p.add_argument("--json", action="store_true", help="print the output file, name and digest as JSON")
    p.set_defaults(func=cmd_generate, what=what, accepts_params=True)
    _add_import(group, what)
    _add_export(group, what)
    if what == "graph":
        _add_graph_tools(group)


def _add_import(group: Commands[argparse.ArgumentParser], what: str) -> None:
    if what == "graph":
        p = command(group, "import", "convert another tool's profile (or a GraphML file) into a placer graph",
                    ["placer graph import --from pipedream profiles/resnet18/graph.txt -o resnet18.json",
                     "placer graph import --from graphml bert.graphml -o bert.json"],
                    description="Convert a PipeDream graph.txt or a Piper input JSON into placer.opgraph/v1. "
                                "--from graphml reads a GraphML file (the attribute names of docs/formats.md); "
                                "it is the exact inverse of `placer graph export`.")
        p.add_argument("--from", dest="source", choices=("pipedream", "piper", "graphml"), required=True,
                       help="the format of FILE")
    else:
        p = command(group, "import", "read a topology from a GraphML file",
                    ["placer topology import --from graphml topo.graphml -o topo.json"],
                    description="Read a GraphML file (the attribute names of docs/formats.md) into "
                                "placer.topology/v1; the exact inverse of `placer topology export`.")
        p.add_argument("--from", dest="source", choices=("graphml",), default="graphml",
                       help="the format of FILE (graphml, the default)")
    p.add_argument("file", help="the file to convert")
    p.add_argument("-o", "--output", required=True, help="the placer document to write")
    p.add_argument("--name", help=f"{what} name (default: the file's folder or stem; GraphML: its own name)")
    p.add_argument("--json", action="store_true", help="print the output file, name, size and digest as JSON")
    p.set_defaults(func=cmd_import)


def _add_export(group: Commands[argparse.ArgumentParser], what: str) -> None:
    fmt = "opgraph" if what == "graph" else "topology"
    stem = "bert" if what == "graph" else "topo"
    formats = ("graphml", "dot") if what == "graph" else ("graphml",)
    examples = [f"placer {what} export {stem}.json -o {what}.graphml"]
    description = (f"Write a {what} as GraphML for networkx, yEd or Gephi, exactly (docs/formats.md); "
                   f"`placer {what} import --from graphml` reads it back.")
    if what == "graph":
        examples.append("placer graph export --format dot bert.json --plan plan.json --topology topo.json -o bert.dot")
        description += " --format dot writes Graphviz DOT; with a plan, one cluster per stage."
    p = command(group, "export", f"write a {what} in another tool's format ({', '.join(formats)})", examples,
                description=description)
    p.add_argument("file", help=f"a placer.{fmt}/v1 document")
    p.add_argument("--format", choices=formats, default="graphml", help="the format to write (default: graphml)")
    if what == "graph":
        p.add_argument("--plan", help="with --format dot: a plan of the graph, its stages drawn as clusters")
        p.add_argument("--topology", help="with --plan: the topology the plan runs on")
        p.add_argument("--objective", choices=("throughput", "latency"), help="with --plan: override its objective")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_export, what=what, json=False)


def _add_graph_tools(group: Commands[argparse.ArgumentParser]) -> None:
    p = command(group, "scale", "estimate the graph at a large batch size from small-batch profiles",
                ["placer graph scale --profiles p.b1.json p.b2.json p.b4.json --batch 64 -o p.b64.json"],
                description="Celeritas' Standard Evaluation (§4.2.1): from profiles of the same model at several "
                            "small batch sizes (default: each profile's profiled_batch_size), fit a line per "
                            "node and field and write the graph estimated at the target batch size.")
    p.add_argument("--profiles", nargs="+", required=True, help="profiles of the same model (placer.opgraph/v1)")
    p.add_argument("--batch-sizes", nargs="+", type=int,
                   help="the batch size of each profile (default: each profile's profiled_batch_size)")
    p.add_argument("--batch", type=int, required=True, help="the target batch size")
    p.add_argument("-o", "--output", required=True, help="the estimated graph to write")
    p.add_argument("--json", action="store_true", help="print the output file, digest and batch size as JSON")
    p.set_defaults(func=cmd_scale)


def cmd_generate(args: argparse.Namespace) -> int:
    kinds = generate.TOPOLOGY_KINDS if args.what == "topology" else generate.GRAPH_KINDS
    func = kinds.get(args.kind.lower())
    if func is None:
        raise InvalidInput(f"unknown {args.what} kind {args.kind!r}; valid kinds: {', '.join(sorted(kinds))}",
                           field="kind", ref=args.kind)
    if args.help_params:
        rows = describe_params(func)
        print(f"{args.what} {args.kind}: {(func.__doc__ or '').strip().splitlines()[0]}")
        print(format_table(["parameter", "type", "default"], [("--" + n.replace("_", "-"), t, d) for n, t, d in rows]))
        return EXIT_OK
    params = parse_params(func, args.params, f"{args.what} {args.kind}")
    obj = (generate.generate_topology if args.what == "topology" else generate.generate_graph)(args.kind, **params)
    doc = obj.to_document()
    if args.output:
        write_json(doc, args.output)
        size = f"{obj.n_devices} devices" if isinstance(obj, Topology) else f"{obj.n_ops} ops"
        if args.json:
            print_json({"output": args.output, "digest": obj.digest, "name": obj.name})
        else:
            print(f"wrote {args.output}: {args.what} {obj.name!r}, {size}")
    else:
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.source == "graphml":
        return _import_graphml(args)
    name = args.name or (path.parent.name if path.name == "graph.txt" else path.stem)
    if args.source == "pipedream":
        try:
            text = path.read_text()
        except OSError as exc:
            raise InvalidInput(f"{path}: cannot read: {exc.strerror}", field="file") from None
        graph = import_pipedream(text, name)
    else:
        graph = import_piper(read_json(path), name)
    write_json(graph.to_document(), args.output)
    info = {"output": args.output, "name": graph.name, "nodes": graph.n_ops, "edges": len(graph.edges),
            "digest": graph.digest}
    print_json(info) if args.json else print(f"wrote {args.output}: {graph.n_ops} nodes, {len(graph.edges)} edges")
    return EXIT_OK


def _import_graphml(args: argparse.Namespace) -> int:
    obj = read_graphml(args.file)
    if args.name:
        doc = {**obj.to_document(), "name": args.name}
        obj = graph_from_document(doc) if isinstance(obj, OpGraph) else topology_from_document(doc)
    write_json(obj, args.output)
    if isinstance(obj, OpGraph):
        info = {"output": args.output, "name": obj.name, "nodes": obj.n_ops, "edges": len(obj.edges),
                "digest": obj.digest}
        summary = f"{obj.n_ops} nodes, {len(obj.edges)} edges"
    else:
        info = {"output": args.output, "name": obj.name, "devices": obj.n_devices, "digest": obj.digest}
        summary = f"topology, {obj.n_devices} devices"
    print_json(info) if args.json else print(f"wrote {args.output}: {summary}")
    return EXIT_OK


def cmd_scale(args: argparse.Namespace) -> int:
    profiles = [load_graph(path) for path in args.profiles]
    sizes = args.batch_sizes or [g.profiled_batch_size for g in profiles]
    graph = scale_graph(profiles, sizes, args.batch)
    write_json(graph.to_document(), args.output)
    if args.json:
        print_json({"output": args.output, "digest": graph.digest, "profiled_batch_size": graph.profiled_batch_size})
    else:
        print(f"wrote {args.output}: {graph.n_ops} ops at batch size {graph.profiled_batch_size}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "dot":
        text = _dot(args)
    elif getattr(args, "plan", None):
        raise InvalidInput("--plan draws a plan's stages in DOT only: add --format dot", field="plan")
    else:
        text = to_graphml(load_graph(args.file) if args.what == "graph" else load_topology(args.file))
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _dot(args: argparse.Namespace) -> str:
    graph = load_graph(args.file)
    resolved = None
    if args.plan:
        if not args.topology:
            raise InvalidInput("--plan needs --topology", field="topology")
        plan = load_plan(args.plan)
        resolved = resolve_plan(load_problem(args.file, args.topology, args.objective, {}, plan), plan,
                                check_memory=False)
    return to_dot(graph, resolved)
