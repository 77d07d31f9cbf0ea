"""The service's commands, plugged into ``placer`` through the ``placer.cli`` entry-point group:
``serve``, ``worker``, ``migrate`` and ``keys create``.

Every ``placer`` command loads this module to build its parser, so each command imports the
service's modules (SQLAlchemy, FastAPI, the app: about 1.8 s) only when it runs; at module
level they took ``placer --help`` from 0.6 s to 2.4 s.
"""

from __future__ import annotations

import argparse
import gc
import sys

from service.config import load_config


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the service's subcommands to the ``placer`` parser."""
    p = sub.add_parser("serve", help="run the API server with its local worker pool",
                       description="Run the Placer service. Configuration: PLACER_* environment variables "
                                   "(docs/service.md); the options below override them.")
    p.add_argument("--host", help="bind address (PLACER_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (PLACER_PORT, default 8000)")
    p.add_argument("--workers", type=int, help="local solver workers (PLACER_WORKERS; 0 = none)")
    p.add_argument("--demo", action="store_true",
                   help="create a demo project, key, inputs and comparison; print the key")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("worker", help="run a Celery worker for solver jobs (PLACER_BROKER_URL)",
                       description="Run solver jobs sent by API servers with PLACER_DISPATCH=celery. Each job "
                                   "runs in its own child process, killed at its time limit.")
    p.add_argument("--concurrency", type=int, default=None,
                   help="solver jobs run at once by this worker (default: PLACER_WORKERS)")
    p.add_argument("--queues", nargs="+", default=None, help="broker queues to consume (default: PLACER_QUEUE)")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("migrate", help="upgrade the database (PLACER_DATABASE_URL) to the newest schema")
    p.set_defaults(func=cmd_migrate)

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    p = keys.add_parser("create", help="create an API key for a project (created if new); prints only the key")
    p.add_argument("--project", required=True, help="project name")
    p.set_defaults(func=cmd_keys_create)


def cmd_worker(args: argparse.Namespace) -> int:
    from service.jobs.worker import run_worker

    cfg = load_config()
    concurrency = cfg.workers if args.concurrency is None else args.concurrency
    if concurrency < 1:
        print("placer worker: --concurrency must be at least 1", file=sys.stderr)
        return 2
    queues = [q for arg in (args.queues or [cfg.queue]) for q in arg.split(",") if q]
    return run_worker(cfg, concurrency, queues, loglevel=cfg.log_level.upper())


def cmd_migrate(args: argparse.Namespace) -> int:
    from service.db import migrate
    from service.db.engine import Database

    cfg = load_config()
    db = Database(cfg.database_url)
    try:
        migrate.upgrade(db.engine)
        print(f"database at revision {migrate.current_revision(db.engine)} (head {migrate.head_revision()})",
              file=sys.stderr)
    finally:
        db.dispose()
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    from service.auth import create_key
    from service.db import migrate
    from service.db.engine import Database

    cfg = load_config()
    db = Database(cfg.database_url)
    try:
        if cfg.migrate_on_start:
            migrate.upgrade(db.engine)
        with db.session() as s:
            key = create_key(s, args.project)
    finally:
        db.dispose()
    print(key)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app

    cfg = load_config(host=args.host, port=args.port, workers=args.workers)
    url = f"http://{cfg.host}:{cfg.port}"
    if args.demo:
        _seed_demo(cfg, url)
    print(f"Placer service on {url}  (dashboard: {url}/, API docs: {url}/docs, database: {cfg.database_url})",
          file=sys.stderr,
          flush=True)
    app = create_app(cfg)
    # The modules, schemas and routes built so far live as long as the process: out of the
    # collector's sight, a full collection under load no longer walks them (it paused every
    # request for 135-175 ms, docs/benchmarks.md "Load").
    gc.collect()
    gc.freeze()
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level)
    return 0


def _seed_demo(cfg: object, url: str) -> None:
    from service.config import ServiceConfig
    from service.db import migrate
    from service.db.engine import Database
    from service.demo import seed_demo

    assert isinstance(cfg, ServiceConfig)
    db = Database(cfg.database_url)
    try:
        migrate.upgrade(db.engine)
        with db.session() as s:
            demo = seed_demo(s, cfg)
    finally:
        db.dispose()
    print(f"\nPlacer demo: {url}\n"
          f"  dashboard:                 {url}/  (sign in with the key below)\n"
          f"  API key (project 'demo'):  {demo.key}\n"
          f"  comparison of {', '.join(demo.solvers)}:\n"
          f"    curl -H 'Authorization: Bearer {demo.key}' {url}/v1/comparisons/{demo.comparison_id}\n"
          f"  API docs: {url}/docs\n", flush=True)
