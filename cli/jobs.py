"""``placer job ...`` and ``placer comparison submit``: solves on a Placer server, waited on live."""

from __future__ import annotations

import argparse
import itertools
from typing import TYPE_CHECKING

from cli._output import EXIT_FAILED, EXIT_OK, format_seconds, print_json
from cli._parsers import Commands, command, verbs
from cli._remote import LiveStatus, comparison_table, dump, make_client, remote_command, show, show_list
from cli.problem import (
    add_problem_flags,
    options_from_pairs,
    settings_from_args,
    solver_options_from_pairs,
    sweep_from_pairs,
)

if TYPE_CHECKING:
    from client.models import Job
    from client.sync import Client

JOB_COLUMNS = ("id", "solver", "status", "plan_status", "objective", "created_at")
ON_SERVER = "--graph g_ID --topology t_ID"


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer job submit|list|show|cancel|wait`` and ``placer comparison submit``."""
    group = verbs(command(sub, "job", "solve jobs on the server (submit, list, show, cancel, wait)",
                          [f"placer job submit --solver parmesan {ON_SERVER} --micro-batches 8 --wait"]))
    p = remote_command(group, "submit", "queue a solve (with --wait: follow it to the end)",
                       [f"placer job submit --solver parmesan {ON_SERVER} --micro-batches 8 --wait",
                        f"placer job submit --solver pipedream {ON_SERVER} --option mapping=p2p"])
    p.add_argument("--solver", default="auto",
                   help="a solver of `placer catalogue list` (default: auto, the whole portfolio)")
    _add_job_flags(p, per_solver_options=False)
    p.add_argument("--idempotency-key", help="default: a fresh one, so that retries never queue twice")
    p.set_defaults(func=cmd_submit)
    p = remote_command(group, "list", "list jobs, newest first", ["placer job list --status running --limit 10"])
    p.add_argument("--status", help="only jobs in this state (queued, running, succeeded, failed, cancelled)")
    p.add_argument("--solver", help="only jobs of this solver")
    p.add_argument("--graph", help="only jobs on this graph id")
    p.add_argument("--topology", help="only jobs on this topology id")
    p.add_argument("--comparison", help="only the jobs of this comparison id")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.set_defaults(func=cmd_list)
    for verb, func, text in (("show", cmd_show, "one job"), ("cancel", cmd_cancel, "stop a queued or running job"),
                             ("wait", cmd_wait, "wait until a job finishes")):
        p = remote_command(group, verb, text, [f"placer job {verb} j_ID"])
        p.add_argument("id", help="the job's id")
        if verb == "wait":
            p.add_argument("--timeout", type=float, help="give up after this many seconds (exit 1)")
        p.set_defaults(func=func)

    group = verbs(command(sub, "comparison", "several solvers on one problem on the server",
                          [f"placer comparison submit --solvers even,pipedream,parmesan {ON_SERVER} --wait"]))
    p = remote_command(group, "submit", "run several solvers on one problem on the server",
                       [f"placer comparison submit --solvers even,pipedream,parmesan {ON_SERVER} --wait",
                        f"placer comparison submit --solvers pipedream,rannc {ON_SERVER} --option pipedream.mapping=p2p",
                        f"placer comparison submit --solvers even,parmesan {ON_SERVER} --sweep micro_batches=4,8,16 "
                        "--sweep schedule=gpipe,1f1b",
                        f"placer comparison submit --solvers even,parmesan {ON_SERVER} --sweep tp=1,2,4"])
    p.add_argument("--solvers", required=True, help="comma-separated solver names")
    p.add_argument("--sweep", action="append", default=[], metavar="SETTING=V1,V2",
                   help="run every solver once per value of a setting (micro_batches, schedule, tp); repeat the "
                        "flag to sweep several: one job per solver and combination")
    _add_job_flags(p, per_solver_options=True)
    p.set_defaults(func=cmd_compare)


def _add_job_flags(p: argparse.ArgumentParser, per_solver_options: bool) -> None:
    add_problem_flags(p, on_server=True, objective_default="throughput", per_solver_options=per_solver_options)
    p.add_argument("--no-cache", action="store_true", help="solve again even if an identical job has a plan")
    p.add_argument("--wait", action="store_true", help="wait for the result (a live status on a terminal)")
    p.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds (exit 1)")


def cmd_submit(args: argparse.Namespace) -> int:
    with make_client(args) as c:
        job = c.submit(args.graph, args.topology, args.solver, objective=args.objective, settings=settings_from_args(args),
                       options=options_from_pairs(args.option), time_limit_s=args.time_limit, cache=not args.no_cache,
                       idempotency_key=args.idempotency_key, calibration=args.calibration)
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


def _swept(values: dict[str, object]) -> str:
    return f" [{', '.join(f'{k}={v}' for k, v in values.items())}]" if values else ""


def cmd_compare(args: argparse.Namespace) -> int:
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    with make_client(args) as c:
        cmp = c.compare(args.graph, args.topology, solvers, objective=args.objective, settings=settings_from_args(args),
                        options=solver_options_from_pairs(args.option), time_limit_s=args.time_limit,
                        cache=not args.no_cache, calibration=args.calibration,
                        sweep=sweep_from_pairs(args.sweep) or None)
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
            unit = " per sample" if cmp.ranked_by == "time_per_sample_s" else ""
            print(f"best: {cmp.best.solver}{_swept(cmp.best.swept)} (plan {cmp.best.plan_id}, {format_seconds(cmp.key_s(cmp.best))}{unit}, "
                  f"objective {format_seconds(cmp.best.objective_s)})")
    return EXIT_FAILED if args.wait and cmp.best_solver is None else EXIT_OK
