"""``placer graphs ...`` and ``placer topologies ...``: inputs stored on a Placer server.

(The singular ``placer graph`` / ``placer topology`` are the local tools.) ``placer topologies
generate KIND --name value ...`` has the server generate and store a topology; its parameters
are those of ``placer topology generate KIND --help-params``, checked and typed here first.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from cli._output import EXIT_OK, print_json
from cli._remote import existing_file, make_client, remote_parser, show, show_list

GRAPH_COLUMNS = ("id", "name", "n_ops", "n_edges", "size_bytes", "created_at")
TOPOLOGY_COLUMNS = ("id", "name", "n_devices", "n_hosts", "size_bytes", "created_at")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for kind in ("graphs", "topologies"):
        what = "operator graphs" if kind == "graphs" else "topologies"
        group = sub.add_parser(kind, help=f"{what} on the server (upload, list, show, delete)")
        verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
        p = remote_parser(verbs, "upload", "upload a document (gzip-encoded on the wire when large)")
        p.add_argument("file", help="a placer document (.json or .json.gz)" + (
            ", or an importer format with --format" if kind == "graphs" else ""))
        if kind == "graphs":
            p.add_argument("--format", choices=("placer", "pipedream", "piper"), help="importer format of FILE")
            p.add_argument("--name", help="name of an imported graph")
        p.set_defaults(func=cmd_upload, kind=kind)
        p = remote_parser(verbs, "list", f"list the project's {what}, newest first")
        p.add_argument("--name")
        p.add_argument("--digest")
        if kind == "topologies":
            p.add_argument("--min-devices", type=int)
        p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
        p.set_defaults(func=cmd_list, kind=kind)
        if kind == "topologies":
            p = remote_parser(verbs, "generate", "have the server generate and store a topology "
                              "(parameters: placer topology generate KIND --help-params)")
            p.add_argument("generator", metavar="KIND", help="a topology kind (docs/generators.md)")
            p.set_defaults(func=cmd_generate, kind=kind, accepts_params=True)
        for verb, func, text in (("show", cmd_show, "metadata of one"), ("delete", cmd_delete, "delete one")):
            p = remote_parser(verbs, verb, text)
            p.add_argument("id")
            if verb == "show":
                p.add_argument("--document", action="store_true", help="print the stored document instead")
            p.set_defaults(func=func, kind=kind)


def cmd_upload(args: argparse.Namespace) -> int:
    path = existing_file(args.file, "file")
    with make_client(args) as c:
        if args.kind == "graphs":
            info: Any = c.upload_graph(path, format=args.format, name=args.name)
        else:
            info = c.upload_topology(path)
    if args.json:
        show(info, True)
    else:
        size = f"{info.n_ops} ops" if args.kind == "graphs" else f"{info.n_devices} devices"
        print(f"{info.id}  {info.name} ({size}, digest {info.digest[:12]})")
    return EXIT_OK


def cmd_generate(args: argparse.Namespace) -> int:
    from cli._params import parse_params
    from solvers.generate import TOPOLOGY_KINDS, coerce_params
    from solvers.model.errors import InvalidInput

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
        if args.kind == "graphs":
            found: Any = c.list_graphs(name=args.name, digest=args.digest, page_size=min(args.limit, 500))
        else:
            found = c.list_topologies(name=args.name, digest=args.digest, min_devices=args.min_devices,
                                      page_size=min(args.limit, 500))
        items = list(itertools.islice(found, max(args.limit, 0)))
    show_list(items, GRAPH_COLUMNS if args.kind == "graphs" else TOPOLOGY_COLUMNS, args.json)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        if args.document:
            print_json(c.graph_document(args.id) if args.kind == "graphs" else c.topology_document(args.id))
            return EXIT_OK
        show(c.get_graph(args.id) if args.kind == "graphs" else c.get_topology(args.id), args.json)
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        if args.kind == "graphs":
            c.delete_graph(args.id)
        else:
            c.delete_topology(args.id)
    if args.json:
        print_json({"deleted": args.id})
    else:
        print(f"deleted {args.id}")
    return EXIT_OK
