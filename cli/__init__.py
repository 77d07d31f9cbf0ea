"""The ``placer`` command line.

Command groups are modules with a ``register(subparsers)`` function.  The local commands and
the remote ones (``remote_*``: a Placer server through :class:`client.Client`) are listed here; other distributions' commands (the service's ``serve``, ``worker``, ``migrate``,
``keys``) plug in through the entry-point group ``placer.cli`` so that this package never
imports the service.

Exit codes: 0 success, 1 the work failed (e.g. infeasible plan, failed job), 2 bad input or
usage, 3 a remote/service error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from cli import launcher_cmd, local, remote_inputs, remote_jobs, remote_plans, torch_cmds
from cli._output import report_error
from cli._remote import add_server_options

ENTRY_POINT_GROUP = "placer.cli"
LOCAL_GROUPS = (local, torch_cmds, launcher_cmd)
REMOTE_GROUPS = (remote_inputs, remote_jobs, remote_plans)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="placer", description="Placement optimizer for deep learning.")
    add_server_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in (*LOCAL_GROUPS, *REMOTE_GROUPS):
        group.register(sub)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        ep.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_params", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.params = extra
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one place turns errors into messages and exit codes
        return report_error(exc, getattr(args, "json", False))
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
