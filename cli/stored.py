"""The server verbs of ``placer graph`` and ``placer topology``: inputs stored on a Placer server.

``upload``, ``list``, ``show`` and ``delete``; ``placer topology create KIND --name value ...``
has the server generate and store a topology, its parameters those of
``placer topology generate KIND --help-params``, checked and typed here first.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from cli._output import EXIT_OK, print_json
from cli._params import parse_params
from cli._parsers import Commands
from cli._remote import existing_file, make_client, remote_command, show, show_list
from solvers.generate import TOPOLOGY_KINDS, coerce_params
from solvers.model.errors import InvalidInput

GRAPH_COLUMNS = ("id", "name", "n_ops", "n_edges", "size_bytes", "created_at")
TOPOLOGY_COLUMNS = ("id", "name", "n_devices", "n_hosts", "size_bytes", "created_at")


def add_server_verbs(group: Commands[argparse.ArgumentParser], what: str) -> None:
    """``upload``, ``list``, ``show``, ``delete`` (and for topologies ``create``) on the noun ``what``."""
    plural = "operator graphs" if what == "graph" else "topologies"
    file = "bert.json" if what == "graph" else "topo.json"
    prefix = "g_" if what == "graph" else "t_"
    p = remote_command(group, "upload", "upload a document (gzip-encoded on the wire when large)",
                       [f"placer {what} upload {file}"] + (
                           ["placer graph upload profiles/resnet18/graph.txt --from pipedream --name resnet18"]
                           if what == "graph" else []))
    p.add_argument("file", help="a placer document (.json or .json.gz)" + (
        ", or another tool's profile with --from" if what == "graph" else ""))
    if what == "graph":
        p.add_argument("--from", dest="format", choices=("placer", "pipedream", "piper"),
                       help="the format of FILE, as in `placer graph import --from` (default: placer)")
        p.add_argument("--name", help="name of an imported graph")
    p.set_defaults(func=cmd_upload, kind=what)
    p = remote_command(group, "list", f"list the project's {plural}, newest first",
                       [f"placer {what} list --limit 10"])
    p.add_argument("--name", help=f"only the {plural} of this name")
    p.add_argument("--digest", help="only the one of this digest")
    if what == "topology":
        p.add_argument("--min-devices", type=int, help="only topologies with at least this many devices")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.set_defaults(func=cmd_list, kind=what)
    if what == "topology":
        p = remote_command(group, "create", "have the server generate and store a topology "
                           "(parameters: placer topology generate KIND --help-params)",
                           ["placer topology create mesh2d --nx 3 --ny 2"])
        p.add_argument("generator", metavar="KIND", help="a topology kind (docs/generators.md)")
        p.set_defaults(func=cmd_create, kind=what, accepts_params=True)
    p = remote_command(group, "show", f"metadata of one of the {plural} (or its document)",
                       [f"placer {what} show {prefix}ID", f"placer {what} show {prefix}ID --document"])
    p.add_argument("id", help=f"the {what}'s id")
    p.add_argument("--document", action="store_true", help="print the stored document instead")
    p.set_defaults(func=cmd_show, kind=what)
    p = remote_command(group, "delete", f"delete one of the {plural}", [f"placer {what} delete {prefix}ID"])
    p.add_argument("id", help=f"the {what}'s id")
    p.set_defaults(func=cmd_delete, kind=what)


def cmd_upload(args: argparse.Namespace) -> int:
    path = existing_file(args.file, "file")
    with make_client(args) as c:
        if args.kind == "graph":
            info: Any = c.upload_graph(path, format=args.format, name=args.name)
        else:
            info = c.upload_topology(path)
    if args.json:
        show(info, True)
    else:
        size = f"{info.n_ops} ops" if args.kind == "graph" else f"{info.n_devices} devices"
        print(f"{info.id}  {info.name} ({size}, digest {info.digest[:12]})")
    return EXIT_OK


def cmd_create(args: argparse.Namespace) -> int:
    func = TOPOLOGY_KINDS.get(args.generator.lower())
    if func is None:
        raise InvalidInput(f"unknown topology kind {args.generator!r}; valid kinds: {', '.join(sorted(TOPOLOGY_KINDS))}",
                           field="kind", ref=args.generator)
    where = f"topology {args.generator}"
    params = coerce_params(func, parse_params(func, args.params, where), where)
    with make_client(args) as c:
        info = c.generate_topology(args.generator.lower(), **params)
    if args.json:
        show(info, True)
    else:
        print(f"{info.id}  {info.name} ({info.n_devices} devices, digest {info.digest[:12]})")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        if args.kind == "graph":
            found: Any = c.list_graphs(name=args.name, digest=args.digest, page_size=min(args.limit, 500))
        else:
            found = c.list_topologies(name=args.name, digest=args.digest, min_devices=args.min_devices,
                                      page_size=min(args.limit, 500))
        items = list(itertools.islice(found, max(args.limit, 0)))
    show_list(items, GRAPH_COLUMNS if args.kind == "graph" else TOPOLOGY_COLUMNS, args.json)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        if args.document:
            print_json(c.graph_document(args.id) if args.kind == "graph" else c.topology_document(args.id))
            return EXIT_OK
        show(c.get_graph(args.id) if args.kind == "graph" else c.get_topology(args.id), args.json)
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        if args.kind == "graph":
            c.delete_graph(args.id)
        else:
            c.delete_topology(args.id)
    if args.json:
        print_json({"deleted": args.id})
    else:
        print(f"deleted {args.id}")
    return EXIT_OK
