"""The service's ``placer`` commands (``serve``, ``worker``, ``migrate``, ``key create``): the
handlers that :mod:`service.cli`'s parsers name, loaded only when one of them runs."""

from __future__ import annotations

import argparse
import gc
import socket
import sys

import uvicorn

from service.app import create_app
from service.auth import create_key
from service.config import ServiceConfig, load_config
from service.db import migrate
from service.db.engine import Database
from service.demo import DEMO_PROJECT, Demo, seed_demo
from service.protocol import header_deadline_protocol


def cmd_worker(args: argparse.Namespace) -> int:
    """``placer worker``: a Celery worker for solver jobs (the celery extra; ``placer serve`` runs without it)."""
    from service.jobs.worker import run_worker

    cfg = load_config()
    concurrency = cfg.workers if args.concurrency is None else args.concurrency
    if concurrency < 1:
        print("placer worker: --concurrency must be at least 1", file=sys.stderr)
        return 2
    queues = [q for arg in (args.queues or [cfg.queue]) for q in arg.split(",") if q]
    return run_worker(cfg, concurrency, queues, loglevel=cfg.log_level.upper())


def cmd_migrate(args: argparse.Namespace) -> int:
    """``placer migrate``: upgrade the database to the newest schema."""
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
    """``placer key create``: print a new API key for a project."""
    rate = args.rate_limit
    if rate is not None and not rate >= 0:
        print(f"placer key create: --rate-limit must be a number >= 0 (got {rate:g})", file=sys.stderr)
        return 2
    cfg = load_config()
    db = Database(cfg.database_url)
    try:
        if cfg.migrate_on_start:
            migrate.upgrade(db.engine)
        with db.session() as s:
            key = create_key(s, args.project, rate)
    finally:
        db.dispose()
    print(key)
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server that prints ``banner`` once it listens, so the banner ends the start-up output."""

    def __init__(self, config: uvicorn.Config, banner: str) -> None:
        super().__init__(config)
        self.banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.banner:
            print(self.banner, flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    """``placer serve``: the API server with its local worker pool (``--demo``: seeded first)."""
    cfg = load_config(host=args.host, port=args.port, workers=args.workers)
    url = f"http://{cfg.host}:{cfg.port}"
    print(f"Placer service on {url}  (dashboard: {url}/, API docs: {url}/docs, database: {cfg.database_url})",
          file=sys.stderr,
          flush=True)
    banner = demo_banner(url, _seed_demo(cfg)) if args.demo else ""
    app = create_app(cfg)
    # The modules, schemas and routes built so far live as long as the process: out of the
    # collector's sight, a full collection under load no longer walks them (it paused every
    # request for 135-175 ms, docs/benchmarks.md "Load").
    gc.collect()
    gc.freeze()
    # headers slower than header_timeout_s get 408 (service.protocol); on SIGTERM requests in flight
    # have graceful_shutdown_s to finish, then they are cancelled and the server exits
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level,
                            http=header_deadline_protocol(cfg.header_timeout_s),
                            timeout_graceful_shutdown=cfg.graceful_shutdown_s)
    _Server(config, banner).run()
    return 0


def _seed_demo(cfg: ServiceConfig) -> Demo:
    """Migrate and create the demo project, its inputs and comparison."""
    db = Database(cfg.database_url)
    try:
        migrate.upgrade(db.engine)
        with db.session() as s:
            return seed_demo(s, cfg)
    finally:
        db.dispose()


def demo_banner(url: str, demo: Demo) -> str:
    """What ``placer serve --demo`` prints once the server listens: its last lines are the dashboard,
    the key to sign in with and the demo comparison's page."""
    return (f"\nPlacer demo ({', '.join(demo.solvers)} on {demo.graph_name}; API docs: {url}/docs)\n"
            f"  dashboard:  {url}/\n"
            f"  API key:    {demo.key}  (project '{DEMO_PROJECT}': sign in with it)\n"
            f"  comparison: {url}/comparisons/{demo.comparison_id}\n")
