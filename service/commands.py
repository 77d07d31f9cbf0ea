"""The service's ``placer`` commands (``serve``, ``worker``, ``migrate``, ``key create``): the
handlers that :mod:`service.cli`'s parsers name, loaded only when one of them runs."""

from __future__ import annotations

import argparse
import gc
import sys

import uvicorn

from service.app import create_app
from service.auth import create_key
from service.config import ServiceConfig, load_config
from service.db import migrate
from service.db.engine import Database
from service.demo import seed_demo
from service.jobs.worker import run_worker
from service.protocol import header_deadline_protocol


def cmd_worker(args: argparse.Namespace) -> int:
    """``placer worker``: a Celery worker for solver jobs."""
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


def cmd_serve(args: argparse.Namespace) -> int:
    """``placer serve``: the API server with its local worker pool (``--demo``: seeded first)."""
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
    # headers slower than header_timeout_s get 408 (service.protocol); on SIGTERM requests in flight
    # have graceful_shutdown_s to finish, then they are cancelled and the server exits
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level,
                http=header_deadline_protocol(cfg.header_timeout_s),
                timeout_graceful_shutdown=cfg.graceful_shutdown_s)
    return 0


def _seed_demo(cfg: ServiceConfig, url: str) -> None:
    """Migrate, create the demo project and print how to reach it."""
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
