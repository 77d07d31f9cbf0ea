"""``placer runs upload|list``: launcher run records (``run.json``, ``placer.run/v1``) of plans on a server."""

from __future__ import annotations

import argparse

from cli._output import EXIT_OK, format_seconds, format_table, print_json
from cli._parsers import Commands, command, verbs
from cli._remote import existing_file, make_client, remote_command


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer runs upload`` and ``placer runs list``."""
    group = verbs(command(sub, "runs", "launcher run records of a plan on the server (upload, list)",
                          ["placer runs upload run.json --plan p_ID"]))
    p = remote_command(group, "upload", "upload a launcher run record (run.json) of a stored plan",
                       ["placer runs upload run.json --plan p_ID"],
                       description="The server checks the record against the plan (plan, graph and topology "
                                   "digests, devices, stages) and refuses one of another plan naming the field "
                                   "(exit code 2). The dashboard's plan page then shows it beside the simulation.")
    p.add_argument("file", help="the run.json launch.py wrote (placer.run/v1)")
    p.add_argument("--plan", required=True, help="the plan's id")
    p.set_defaults(func=cmd_upload)
    p = remote_command(group, "list", "list a plan's run records, newest first",
                       ["placer runs list --plan p_ID", "placer runs list --plan p_ID --json"])
    p.add_argument("--plan", required=True, help="the plan's id")
    p.set_defaults(func=cmd_list)


def cmd_upload(args: argparse.Namespace) -> int:
    source = existing_file(args.file, "file")
    with make_client(args) as c:
        run = c.upload_run(args.plan, source)
    if args.json:
        print_json(run.model_dump(mode="json"))
    else:
        print(f"uploaded {run.id} for plan {run.plan_id}: {run.world_size} rank(s) on {run.device_kind}, "
              f"iteration {format_seconds(run.iteration_s)}" + (", profiled" if run.profiled else ""))
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        runs = list(c.list_runs(args.plan))
    if args.json:
        print_json([r.model_dump(mode="json") for r in runs])
    else:
        print(format_table(["run", "ranks", "device", "iteration", "profiled", "uploaded"],
                           [(r.id, r.world_size, r.device_kind, format_seconds(r.iteration_s),
                             "yes" if r.profiled else "no", r.created_at.isoformat(timespec="seconds"))
                            for r in runs]))
    return EXIT_OK
