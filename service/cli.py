"""The service's commands, plugged into ``placer`` through the ``placer.cli`` entry-point group:
``serve``, ``worker``, ``migrate`` and ``key create``.

Every ``placer`` command loads this module to build its parser, so it holds the parsers only:
each command names its handler in :mod:`service.commands` by import path (``module:function``,
as an entry point does), and ``placer`` imports that module (SQLAlchemy, FastAPI, the app:
about 1.8 s) only when one of these commands runs.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the service's subcommands to the ``placer`` parser."""
    p = sub.add_parser("serve", help="run the API server with its local worker pool",
                       description="Run the Placer service. Configuration: PLACER_* environment variables\n"
                                   "(docs/service.md); the options below override them.",
                       epilog=_example("placer serve --port 8000 --workers 4", "placer serve --demo"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", help="bind address (PLACER_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (PLACER_PORT, default 8000)")
    p.add_argument("--workers", type=int, help="local solver workers (PLACER_WORKERS; 0 = none)")
    p.add_argument("--demo", action="store_true",
                   help="create a demo project, key, inputs and comparison; print the key")
    p.set_defaults(func="service.commands:cmd_serve")

    p = sub.add_parser("worker", help="run a Celery worker for solver jobs (PLACER_BROKER_URL)",
                       description="Run solver jobs sent by API servers with PLACER_DISPATCH=celery. Each job\n"
                                   "runs in its own child process, killed at its time limit.",
                       epilog=_example("PLACER_BROKER_URL=redis://broker:6379/0 placer worker --concurrency 8"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=None,
                   help="solver jobs run at once by this worker (default: PLACER_WORKERS)")
    p.add_argument("--queues", nargs="+", default=None, help="broker queues to consume (default: PLACER_QUEUE)")
    p.set_defaults(func="service.commands:cmd_worker")

    p = sub.add_parser("migrate", help="upgrade the database (PLACER_DATABASE_URL) to the newest schema",
                       epilog=_example("PLACER_DATABASE_URL=postgresql+psycopg://placer@db/placer placer migrate"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func="service.commands:cmd_migrate")

    key = sub.add_parser("key", help="API keys (create)", epilog=_example("placer key create --project team-a"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    keys = key.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = keys.add_parser("create", help="create an API key for a project (created if new); prints only the key",
                        epilog=_example("placer key create --project team-a",
                                        "placer key create --project orchestrator --rate-limit 1000"),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--project", required=True, help="project name")
    p.add_argument("--rate-limit", type=float, default=None, metavar="N",
                   help="requests/s for this key, in a bucket of its own (0 = no limit; default: the "
                        "project's PLACER_RATE_LIMIT_PER_S, shared by its keys)")
    p.set_defaults(func="service.commands:cmd_keys_create")


def _example(*lines: str) -> str:
    """A command's examples, as ``placer`` shows them after its options."""
    return f"example{'s' if len(lines) > 1 else ''}:\n" + "\n".join(f"  {line}" for line in lines)
