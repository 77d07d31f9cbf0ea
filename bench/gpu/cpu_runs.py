"""CPU runs on a quiet many-core machine: calibration held out, and schedules ordered as they run.

``python3 bench/gpu/cpu_runs.py --out DIR --keep DEST --deadline-s 290`` (``bench/gpu/cpu_runs.sh``
prepares a machine that has PyTorch but not Placer's other packages).  The pool is every core but
one (core 0 stays with this driver); each job runs under ``taskset`` on cores of its own with
``OMP_NUM_THREADS=1``, each torchrun rank pinned to one core (bench/pinned.py).  Steps, each timed:

1. profile, one thread per model, side by side: the calibration models of bench/bench_calibration.py
   (``--models``) and the schedule model of bench/schedule_runs.py, all on this machine;
2. solve, one core per solve, side by side: every calibration model, solver, micro-batch count
   (1F1B) and process count (bench_calibration.solve_requests), and every schedule of
   bench/schedule_runs.py at each ``--schedule-micro-batches`` count over 2 processes; distinct plans;
3. bundles (``placer launcher build``), then every plan under torchrun (``--repeat K``: K times, in
   rounds), side by side on disjoint cores, calibration and schedule plans interleaved so that the
   deadline cuts both alike; no run
   starts that would end after the deadline (its expected time: start-up plus twice the simulated
   iterations), and one still running then is stopped;
4. the calibration fitted on a third of the runs and the rest predicted, uncalibrated beside
   calibrated, peak memory per rank (bench_calibration.fit_and_predict); then the schedule plans'
   simulated against measured iteration, Spearman and pairwise order agreement
   (bench/schedule_runs.report, with that calibration too); then the schedule plans at all but the
   fewest micro-batches, calibrated on that third and the schedule plans at the fewest
   (bench/schedule_runs.report_held_out: zero-bubble runs give the split backward's cost).

Every graph, plan, topology, run.json and the calibration are copied to ``--keep`` (``files/``
and ``runs/``), and the last 40 lines of the output of every run that failed (``runs/PLAN.failed.log``;
its "skipped" line names the root-cause rank's first error): what the tables were computed from comes back with them, and ``--report-from KEPT``
prints the tables again from those files (here, after ``tar -xzf cpu_runs.tar.gz -C KEPT``).  Run it anywhere with fewer
cores by ``--cores N`` (and smaller ``--models``/``--solvers``/``--procs``) to check the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(ROOT))

from bench import bench_calibration as calib  # noqa: E402
from bench import schedule_runs as sched  # noqa: E402
from bench.pinned import Job, pool_cores, python_m, run_jobs  # noqa: E402
from bench.torchrun_log import FAILED_LOG  # noqa: E402


def timed(title: str, started: float) -> None:
    print(f"## {title} ({time.monotonic() - started:.1f} s, load {os.getloadavg()[0]:.1f})", flush=True)


def run_placer_jobs(requests: list[tuple[Path, list[str]]], cores: list[int], deadline: float,
                    expected_s: float) -> None:
    """``python -m cli ARGS`` for every (output, args) whose output is missing, one core each; failures
    printed and their output removed."""
    jobs = [Job(path.stem, python_m("cli", *argv), ROOT, expected_s=expected_s, timeout_s=max(60.0, 4 * expected_s))
            for path, argv in requests if not path.exists()]
    by_name = {path.stem: path for path, _ in requests}
    done = run_jobs(jobs, cores, deadline)
    if len(done) < len(jobs):
        print(f"  {len(jobs) - len(done)} of {len(jobs)} not started: they would have ended after the deadline",
              flush=True)
    for job in done:
        if job.returncode != 0:
            by_name[job.name].unlink(missing_ok=True)
            tail = " | ".join(job.output.strip().splitlines()[-3:])
            print(f"  {job.name}: exit {job.returncode} after {job.wall_s:.1f} s: {tail}", flush=True)


def merge(first: list[tuple[Path, Path, Path]], second: list[tuple[Path, Path, Path]],
          second_span: float = 1.0) -> list[tuple[Path, Path, Path]]:
    """Both lists in one: ``first`` spread evenly over the whole, ``second`` over its first ``second_span``
    (so that a deadline cuts both, ``second`` less)."""
    tagged = [((i + 0.5) / len(first), 0, x) for i, x in enumerate(first)]
    tagged += [((i + 0.5) / len(second) * second_span, 1, x) for i, x in enumerate(second)]
    return [x for _, _, x in sorted(tagged, key=lambda t: (t[0], t[1]))]


def keep(out: Path, dest: Path) -> None:
    """Graphs, topologies, plans, the calibration and the summary (``dest/files``), every run.json
    (``dest/runs/PLAN.json``) and the output's tail of every run that wrote none (``dest/runs/PLAN.failed.log``,
    bench_calibration.run_result); bench/gpu/cpu_runs.sh tars ``dest``."""
    (dest / "files").mkdir(parents=True, exist_ok=True)
    (dest / "runs").mkdir(parents=True, exist_ok=True)
    for path in out.glob("*.json"):
        shutil.copy(path, dest / "files" / path.name)
    for record in (out / "runs").glob("*/run.json"):
        shutil.copy(record, dest / "runs" / f"{record.parent.name}.json")
    for log in (out / "runs").glob(f"*/{FAILED_LOG}"):
        shutil.copy(log, dest / "runs" / f"{log.parent.name}.{FAILED_LOG}")


def report(cal_cases: list[calib.Case], sched_cases: list[calib.Case], out: Path) -> None:
    """Step 4: the calibration table, then the schedules' (with that calibration)."""
    print("\n## calibration: fitted on a third, predicting the rest", flush=True)
    calibration = calib.fit_and_predict(cal_cases, out) if cal_cases else None
    print("\n## schedules: simulated against measured, 2 processes", flush=True)
    sched.report(sched_cases, calibration)
    print("\n## schedules: calibrated on the fewest micro-batches too, the other counts held out", flush=True)
    sched.report_held_out(cal_cases, sched_cases)


def kept_cases(kept: Path) -> tuple[list[calib.Case], list[calib.Case]]:
    """The calibration and schedule cases of a ``--keep`` folder (the returned files, unpacked)."""
    files = kept / "files"
    cal_cases, sched_cases = [], []
    for record in sorted((kept / "runs").glob("*.json")):
        plan = files / f"{calib.plan_name(record.stem)}.json"
        if record.stem.startswith("sched-"):
            graph, topo = files / "schedmodel.json", files / f"topo{sched.PROCESSES}.json"
            sched_cases.append(calib.load_case(record.stem, record, graph, topo, plan))
        else:
            model, n = calib.plan_model(plan)
            cal_cases.append(calib.load_case(record.stem, record, files / f"{model}.json", files / f"topo{n}.json", plan))
    return cal_cases, sched_cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/placer-cpu-runs"))
    parser.add_argument("--keep", type=Path, default=None, help="copy graphs, plans and run records here")
    parser.add_argument("--deadline-s", type=float, default=290.0,
                        help="seconds from the start by which every run has ended (the tables follow)")
    parser.add_argument("--report-s", type=float, default=25.0,
                        help="seconds kept after the runs for the fit and the tables")
    parser.add_argument("--solve-budget-s", type=float, default=70.0, help="seconds the solves may take (from their start)")
    parser.add_argument("--cores", type=int, default=0, help="cores of the pool (0: all but one)")
    parser.add_argument("--models", default="gpt2,bert,vit")
    parser.add_argument("--solvers", default=",".join(calib.SOLVERS))
    parser.add_argument("--micro-batches", default="1,2,4")
    parser.add_argument("--procs", default="2,3,4")
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--schedule-micro-batches", default="4,8")
    parser.add_argument("--schedule-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every plan this many times, in rounds, each on the cores the pool gives it then; "
                             "a plan's measured iteration is the median over its runs")
    parser.add_argument("--solve-time-limit-s", type=float, default=8.0)
    parser.add_argument("--limit", type=int, default=0, help="run at most this many calibration plans (0: all)")
    parser.add_argument("--schedule-limit", type=int, default=0, help="run at most this many schedule plans")
    parser.add_argument("--report-from", type=Path, default=None, metavar="KEPT",
                        help="run nothing: print the tables again from a --keep folder (the returned files)")
    args = parser.parse_args(argv)
    if args.report_from is not None:
        args.out.mkdir(parents=True, exist_ok=True)  # the fitted calibration.json goes there
        report(*kept_cases(args.report_from), args.out)
        return 0
    # an outer timeout's SIGTERM ends the run through the finally below: what ran is kept
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.monotonic()
    deadline = started + args.deadline_s
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cores = pool_cores(args.cores)
    # every child on CPU: the launcher takes CUDA (NCCL, cuda:LOCAL_INDEX) wherever torch sees a GPU
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA hidden: "
          f"{not torch.cuda.is_available()}), {os.cpu_count()} cores, pool {cores}, "
          f"load {os.getloadavg()}, deadline {args.deadline_s:g} s", flush=True)
    try:
        models = [m for m in args.models.split(",") if m]
        profiles = {m: calib.profile_argv(out, m, args.batch) for m in models}
        sched_graph, sched_argv = calib.profile_argv(out, sched.MODEL, args.schedule_batch, sched.PARAMS, "schedmodel")
        run_placer_jobs([*profiles.values(), (sched_graph, sched_argv)], cores, deadline, expected_s=30)
        timed("profiled", started)
        graphs = {m: g for m, (g, _) in profiles.items() if g.exists()}
        cal_requests = calib.solve_requests(out, graphs, args.solvers.split(","),
                                            [int(x) for x in args.micro_batches.split(",")],
                                            [int(x) for x in args.procs.split(",")], args.solve_time_limit_s)
        sched_requests = (sched.solve_requests(out, sched_graph, [int(x) for x in args.schedule_micro_batches.split(",")])
                          if sched_graph.exists() else [])
        solve_deadline = min(deadline, time.monotonic() + args.solve_budget_s)
        # in rounds over model and process count: solves the budget cuts are spread over the grid
        spread = calib.round_robin(cal_requests, lambda r: calib.plan_model(r[0])[0] + str(calib.plan_model(r[0])[1]))
        run_placer_jobs(sched_requests + spread, cores, solve_deadline, expected_s=args.solve_time_limit_s + 6)
        cal_plans = calib.interleave(calib.distinct_plans([p for p, _ in cal_requests]))
        # every schedule at the fewest micro-batches first: a cut takes the larger counts, not a schedule
        sched_plans = sorted((p for p in calib.distinct_plans([p for p, _ in sched_requests]) if sched.pipelined(p)),
                             key=lambda p: (json.loads(p.read_text())["micro_batches"], p.name))
        if args.limit:
            cal_plans = cal_plans[:args.limit]
        if args.schedule_limit:
            sched_plans = sched_plans[:args.schedule_limit]
        timed(f"solved: {len(cal_plans)} distinct calibration plans, {len(sched_plans)} schedule plans", started)
        items = [(p, graphs[calib.plan_model(p)[0]], calib.topology(out, calib.plan_model(p)[1])) for p in cal_plans]
        sched_items = [(p, sched_graph, calib.topology(out, sched.PROCESSES)) for p in sched_plans]
        # the schedule plans within the first 70 % of the queue: fewer, and each one counts toward the 8
        cases = calib.run_pinned(out, merge(items, sched_items, 0.7), args.steps, cores, deadline - args.report_s,
                                 repeat=args.repeat)
        names = {p.stem for p in sched_plans}
        cal_cases = [c for c in cases if calib.plan_name(c[0]) not in names]
        sched_cases = [c for c in cases if calib.plan_name(c[0]) in names]
        timed(f"ran {len(calib.by_plan(cal_cases))} calibration and {len(calib.by_plan(sched_cases))} schedule plans "
              f"({len(cases)} runs)", started)
        report(cal_cases, sched_cases, out)
        summary = {"calibration_plans": len(cal_cases), "schedule_plans": len(sched_cases), "cores": cores,
                   "wall_s": time.monotonic() - started, "load": os.getloadavg()}
        (out / "summary.json").write_text(json.dumps(summary))
    finally:
        if args.keep is not None:
            keep(out, args.keep.resolve())
    timed("done", started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
