"""``placer jobs ...`` and ``placer compare``: solves on a Placer server, waited on live."""

from __future__ import annotations

import argparse
import itertools
from typing import TYPE_CHECKING, Any

from cli._output import EXIT_FAILED, EXIT_OK, format_seconds, print_json
from cli._remote import LiveStatus, comparison_table, dump, make_client, remote_parser, show, show_list
from cli.local import _options, _settings

if TYPE_CHECKING:
    from client.models import Job
    from client.sync import Client

JOB_COLUMNS = ("id", "solver", "status", "plan_status", "objective", "created_at")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("jobs", help="solve jobs on the server (submit, list, show, cancel, wait)")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = remote_parser(verbs, "submit", "queue a solve (with --wait: follow it to the end)")
    p.add_argument("--solver", required=True)
    _add_problem_args(p)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="solver option (VALUE read as JSON when it parses, else as a string)")
    p.add_argument("--idempotency-key", help="default: a fresh one, so that retries never queue twice")
    _add_wait_args(p)
    p.set_defaults(func=cmd_submit)
    p = remote_parser(verbs, "list", "list jobs, newest first")
    for name in ("status", "solver", "graph", "topology", "comparison"):
        p.add_argument(f"--{name}")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_list)
    for verb, func, text in (("show", cmd_show, "one job"), ("cancel", cmd_cancel, "stop a queued or running job"),
                             ("wait", cmd_wait, "wait until a job finishes")):
        p = remote_parser(verbs, verb, text)
        p.add_argument("id")
        if verb == "wait":
            p.add_argument("--timeout", type=float, help="give up after this many seconds (exit 1)")
        p.set_defaults(func=func)

    p = remote_parser(sub, "compare", "run several solvers on one problem on the server")
    p.add_argument("--solvers", required=True, help="comma-separated solver names")
    _add_problem_args(p)
    p.add_argument("--option", action="append", default=[], metavar="SOLVER.KEY=VALUE",
                   help="an option of one solver")
    _add_wait_args(p)
    p.set_defaults(func=cmd_compare)


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--graph", required=True, help="graph id on the server")
    p.add_argument("--topology", required=True, help="topology id on the server")
    p.add_argument("--objective", choices=("throughput", "latency"), default="throughput")
    p.add_argument("--pass", dest="pass_", choices=("forward", "training"))
    p.add_argument("--stages", type=int)
    p.add_argument("--replicas", type=int)
    p.add_argument("--micro-batches", help="a count or a comma-separated list of candidates")
    p.add_argument("--schedule", choices=("1f1b", "gpipe"))
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--seed", type=int)
    p.add_argument("--settings", help="JSON object of further problem settings")
    p.add_argument("--time-limit", type=float, help="seconds (default: the server's)")
    p.add_argument("--no-cache", action="store_true", help="solve again even if an identical job has a plan")


def _add_wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true", help="wait for the result (a live status on a terminal)")
    p.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds (exit 1)")


def cmd_submit(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        job = c.submit(args.graph, args.topology, args.solver, objective=args.objective, settings=_settings(args),
                       options=_options(args.option), time_limit_s=args.time_limit, cache=not args.no_cache,
                       idempotency_key=args.idempotency_key)
        if not args.wait:
            _print_job(job, args.json, brief=True)
            return EXIT_OK
        return _wait_and_report(c, job.id, args)


def cmd_wait(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        return _wait_and_report(c, args.id, args)


def _wait_and_report(c: Client, job_id: str, args: argparse.Namespace) -> int:
    live = LiveStatus(job_id)
    try:
        job = c.wait(job_id, timeout=args.timeout, on_event=live.on_event)
    finally:
        live.close()
    _print_job(job, args.json, brief=True)
    return job_exit_code(job)


def job_exit_code(job: Job) -> int:
    """0 for a succeeded job with a usable plan; 1 failed, cancelled or infeasible."""
    return EXIT_OK if job.status == "succeeded" and job.plan_status != "infeasible" else EXIT_FAILED


def _print_job(job: Job, as_json: bool, brief: bool) -> None:
    if as_json or not brief:
        show(job, as_json)
        return
    line = f"{job.id}  {job.solver}  {job.status}"
    if job.plan_id:
        line += f"  plan {job.plan_id} ({job.plan_status})"
    if job.error is not None:
        line += f"  error {job.error.type}: {job.error.detail}"
    print(line)


def cmd_list(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        found = c.list_jobs(status=args.status, solver=args.solver, graph_id=args.graph, topology_id=args.topology,
                            comparison_id=args.comparison, page_size=min(max(args.limit, 1), 500))
        jobs = list(itertools.islice(found, max(args.limit, 0)))
    show_list(jobs, JOB_COLUMNS, args.json)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        _print_job(c.get_job(args.id), args.json, brief=False)
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        _print_job(c.cancel(args.id), args.json, brief=True)
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    with make_client(args) as c:
        cmp = c.compare(args.graph, args.topology, solvers, objective=args.objective, settings=_settings(args),
                        options=_solver_options(args.option), time_limit_s=args.time_limit,
                        cache=not args.no_cache)
        if args.wait:
            live = LiveStatus(cmp.id)
            try:
                cmp = c.wait_comparison(cmp, timeout=args.timeout, on_update=live.on_comparison)
            finally:
                live.close()
    if args.json:
        print_json(dump(cmp))
    else:
        print(f"comparison {cmp.id} ({cmp.objective}){'' if cmp.done else ': running'}")
        print(comparison_table(cmp))
        if cmp.best is not None:
            print(f"best: {cmp.best.solver} (plan {cmp.best.plan_id}, objective {format_seconds(cmp.best.objective_s)})")
    return EXIT_FAILED if args.wait and cmp.best_solver is None else EXIT_OK


def _solver_options(pairs: list[str]) -> dict[str, dict[str, Any]]:
    from solvers.model.errors import InvalidInput

    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        solver, dot, rest = pair.partition(".")
        if not dot or not solver:
            raise InvalidInput(f"--option {pair!r}: expected SOLVER.KEY=VALUE", field="option")
        out.setdefault(solver, {}).update(_options([rest]))
    return out
