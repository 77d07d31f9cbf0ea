"""The ``placer`` command line.

Every command is a verb on one noun (``placer graph upload``, ``placer job submit``) or a
workflow verb (``placer solve``). The nouns and verbs are modules with a ``register(commands)``
function, listed here; other distributions' commands (the service's ``serve``, ``worker``,
``migrate``, ``key``) plug in through the entry-point group ``placer.cli``, so that this
package never imports the service. A plugged-in command may name its handler by import path
(``"module:function"``, as an entry point does): that module loads only when the command runs,
so a plugin's heavy modules cost nothing to the other commands. Nothing imports this package:
it is the top.

Exit codes: 0 success, 1 the work failed (e.g. infeasible plan, failed job), 2 bad input or
usage, 3 a remote/service error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from cli import calibrate, calibrations, files, jobs, launcher_cmd, plans, runs, stored, torch_cmds, workflow
from cli._output import EXIT_BAD_INPUT, report_error
from cli._parsers import Commands, command, verbs
from cli._remote import add_server_options
from cli.renamed import renamed_message

ENTRY_POINT_GROUP = "placer.cli"
INTRO = ("Placement optimizer for deep learning. Local commands read and write files; the server "
         "commands (upload, list, show, delete, create, submit, cancel, wait, get, evaluate) talk to a "
         "Placer server.")
EXAMPLES = ("examples:\n"
            "  placer graph generate transformer --layers 24 -o bert.json\n"
            "  placer topology generate hierarchical --nodes 4 --gpus-per-node 4 -o topo.json\n"
            "  placer solve --graph bert.json --topology topo.json --micro-batches 8 -o plan.json\n"
            "  placer job submit --graph g_ID --topology t_ID --micro-batches 8 --wait")


def build_parser() -> argparse.ArgumentParser:
    """The whole ``placer`` parser, plugged-in commands included."""
    parser = argparse.ArgumentParser(prog="placer", description=textwrap.fill(INTRO, 79), epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _register_inputs(sub)
    workflow.register(sub)
    torch_cmds.register(sub)
    jobs.register(sub)
    plans.register(sub)
    runs.register(sub)
    calibrate.register(sub)
    calibrations.register(sub)
    launcher_cmd.register(sub)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        ep.load()(sub)
    return parser


def _register_inputs(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer graph`` and ``placer topology``: local files and the server's stored inputs."""
    group = verbs(command(sub, "graph", "operator graphs: generate, import, export, scale (local files); "
                          "upload, list, show, delete (server)",
                          ["placer graph generate transformer --layers 24 -o bert.json", "placer graph upload bert.json"]))
    files.add_file_verbs(group, "graph")
    stored.add_server_verbs(group, "graph")
    group = verbs(command(sub, "topology", "topologies: generate, import, export, measure (local files); "
                          "upload, list, show, delete, create (server)",
                          ["placer topology generate hierarchical --nodes 4 --gpus-per-node 4 -o topo.json",
                           "placer topology upload topo.json"]))
    files.add_file_verbs(group, "topology")
    torch_cmds.add_measure_verb(group)
    stored.add_server_verbs(group, "topology")


def _handler(func: Callable[[argparse.Namespace], int] | str) -> Callable[[argparse.Namespace], int]:
    """A command's handler: the function itself, or the one a plugin names by ``"module:function"``."""
    if not isinstance(func, str):
        return func
    module, _, name = func.partition(":")
    loaded: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
    return loaded


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``placer`` with ``argv`` (default: the process's arguments); returns the exit code."""
    old = renamed_message(sys.argv[1:] if argv is None else argv)
    if old is not None:
        sys.stderr.write(old + "\n")
        return EXIT_BAD_INPUT
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_params", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.params = extra
    try:
        code: int = _handler(args.func)(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one place turns errors into messages and exit codes
        return report_error(exc, getattr(args, "json", False))
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
