"""``placer calibrations upload|list|show|attach|detach|delete``: ``placer.calibration/v1`` documents on a
server, and the calibration a topology's jobs simulate with (docs/cost-model.md "Calibration")."""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from cli._output import EXIT_OK, format_table, print_json
from cli._parsers import Commands, command, verbs
from cli._remote import dump, existing_file, make_client, remote_command, show, show_list
from client.models import CalibrationInfo, TopologyInfo
from client.sync import Client

COLUMNS = ("id", "name", "device_kinds", "digest", "created_at")


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer calibrations upload|list|show|attach|detach|delete``."""
    group = verbs(command(sub, "calibrations", "calibrations on the server (upload, list, show, attach, detach, "
                                               "delete)",
                          ["placer calibrations upload calibration.json --attach t_ID"]))
    p = remote_command(group, "upload", "upload a calibration file (placer.calibration/v1, `placer calibrate`)",
                       ["placer calibrations upload calibration.json",
                        "placer calibrations upload calibration.json --attach t_ID"],
                       description="The server checks every field and refuses a bad one naming it (exit code 2); "
                                   "the same document uploaded again is stored once.")
    p.add_argument("file", help="the calibration file (placer.calibration/v1, JSON or gzip)")
    p.add_argument("--attach", metavar="TOPOLOGY_ID", help="attach it to this topology too")
    p.set_defaults(func=cmd_upload)
    p = remote_command(group, "list", "list the project's calibrations, newest first",
                       ["placer calibrations list", "placer calibrations list --json"])
    p.add_argument("--digest", help="only those with these parameters (the digest metrics.calibration names)")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.set_defaults(func=cmd_list)
    p = remote_command(group, "show", "one calibration: its fitted parameters and residuals (or its document)",
                       ["placer calibrations show cal_ID", "placer calibrations show cal_ID --document"])
    p.add_argument("id", help="the calibration's id")
    p.add_argument("--document", action="store_true", help="print the stored document instead")
    p.set_defaults(func=cmd_show)
    p = remote_command(group, "attach", "attach a calibration to a topology: its jobs, comparisons and "
                                        "evaluations simulate with it",
                       ["placer calibrations attach cal_ID --topology t_ID"],
                       description="Refused naming the device kind (exit code 2) when the calibration is not fitted "
                                   "for every device kind of the topology. A job asks for none with "
                                   "`placer job submit ... --calibration none`.")
    p.add_argument("id", help="the calibration's id")
    p.add_argument("--topology", required=True, help="the topology's id")
    p.set_defaults(func=cmd_attach)
    p = remote_command(group, "detach", "detach a topology's calibration",
                       ["placer calibrations detach --topology t_ID"])
    p.add_argument("--topology", required=True, help="the topology's id")
    p.set_defaults(func=cmd_detach)
    p = remote_command(group, "delete", "delete a calibration (refused while it is attached or in use, exit code 1)",
                       ["placer calibrations delete cal_ID"])
    p.add_argument("id", help="the calibration's id")
    p.set_defaults(func=cmd_delete)


def upload_and_attach(c: Client, source: Any, topology_id: str | None) -> tuple[CalibrationInfo, TopologyInfo | None]:
    """Upload a calibration (a path or a document) and attach it to ``topology_id`` when given."""
    info = c.upload_calibration(source)
    return info, None if topology_id is None else c.attach_calibration(topology_id, info.id)


def report_upload(info: CalibrationInfo, topology: TopologyInfo | None, as_json: bool) -> None:
    if as_json:
        print_json({**dump(info), "attached_to": None if topology is None else topology.id})
        return
    print(f"{info.id}  {info.name or '-'} ({', '.join(info.device_kinds) or 'no device kind'}, digest "
          f"{info.digest[:19]})" + ("" if topology is None else f", attached to {topology.id}"))


def cmd_upload(args: argparse.Namespace) -> int:
    path = existing_file(args.file, "file")
    with make_client(args) as c:
        info, topology = upload_and_attach(c, path, args.attach)
    report_upload(info, topology, args.json)
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        items = list(itertools.islice(c.list_calibrations(digest=args.digest, page_size=min(max(args.limit, 1), 500)),
                                      max(args.limit, 0)))
    show_list(items, COLUMNS, args.json)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        doc = c.calibration_document(args.id)
        info = None if args.document else c.get_calibration(args.id)
    if info is None:
        print_json(doc)
        return EXIT_OK
    if args.json:
        print_json({**dump(info), "document": doc})
        return EXIT_OK
    show(info, False)
    rows = [(kind, cls, f"{scale:.4g}") for kind, kc in sorted(doc.get("devices", {}).items())
            for cls, scale in sorted(kc.get("scale", {}).items())]
    if rows:
        print(format_table(["device kind", "op class", "scale"], rows))
    for what, sides in sorted((doc.get("fit") or {}).get("residuals", {}).items()):
        after = (sides or {}).get("calibrated") or {}
        if "median_relative" in after:
            print(f"residual {what}: median {100 * after['median_relative']:.1f} %")
    return EXIT_OK


def cmd_attach(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        topology = c.attach_calibration(args.topology, args.id)
    if args.json:
        show(topology, True)
    else:
        print(f"attached {topology.calibration_id} to {topology.id}")
    return EXIT_OK


def cmd_detach(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        topology = c.detach_calibration(args.topology)
    if args.json:
        show(topology, True)
    else:
        print(f"detached the calibration of {topology.id}")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        c.delete_calibration(args.id)
    if args.json:
        print_json({"deleted": args.id})
    else:
        print(f"deleted {args.id}")
    return EXIT_OK
