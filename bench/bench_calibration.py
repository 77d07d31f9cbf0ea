"""Calibration on CPU: run many plans, fit on a third, predict the rest (docs/cost-model.md "Calibration").

``.venv/bin/python -m bench.bench_calibration [--out DIR] [--models gpt2,bert,vit] [--solvers ...]
[--micro-batches 1,2,4] [--procs 2,3,4] [--steps 8] [--profile-steps 1] [--limit N] [--cores N] [--deadline-s S]
[--repeat K]``:

1. ``placer profile --example MODEL`` (small sizes, see ``MODELS``; micro-batch of ``--batch`` rows,
   one thread) for every model;
2. a CPU topology per process count (``cpu0 .. cpuN-1`` on one host, the links' figures nominal: the
   calibration learns what a transfer costs);
3. ``placer solve`` with every solver, micro-batch count and process count (throughput, 1F1B; a
   latency-only solver, ``celeritas``, once per model and process count: an op-level plan of one
   training pass); distinct plans only (the same stages, devices and micro-batches once);
4. every plan's bundle under ``torchrun --standalone`` (gloo, ``OMP_NUM_THREADS=1``, one process per
   device) for ``--steps`` iterations, 2 warm-up, ``--profile-steps`` profiled (1 by default): its ``run.json``;
   one plan at a time, or with ``--cores N`` side by side on N cores, each rank pinned to a core of
   its own (bench/pinned.py), none started that would end after ``--deadline-s``; with ``--repeat K``
   every plan K times, in rounds, and a plan's measured iteration is the median over its runs;
5. fit a calibration on every third run (``fit_calibration``; it prints what the runs do not determine
   and each run's profiler ratio), predict the others with and without it, and print per held-out plan the measured and predicted iteration and the largest per-rank
   memory error; then the median relative error of the iteration time, the Spearman rank correlation
   and the memory errors, calibrated beside uncalibrated, and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from scipy.stats import spearmanr

from bench.pinned import Job, pool_cores, rank_pinned, run_jobs
from bench.torchrun_log import FAILED_LOG, output_tail, root_cause_line
from cli import main as placer
from solvers.calibration import Calibration, apply_calibration, fit_calibration
from solvers.calibration.fit import run_problem
from solvers.model.canonical import digest
from solvers.model.documents import load_graph, load_plan, load_topology
from solvers.model.run import RunRecord, run_from_document
from solvers.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
MODELS = {
    "gpt2": ["layers=4", "hidden=128", "heads=4", "seq=64", "vocab=2000", "dropout=0"],
    "bert": ["layers=4", "hidden=128", "heads=4", "seq=64", "vocab=2000", "dropout=0"],
    "vit": ["layers=4", "hidden=128", "heads=4", "image=64", "patch=8", "dropout=0"],
}
SOLVERS = ("even", "parmesan", "rannc", "pipedream", "celeritas", "exact")
LATENCY_SOLVERS = frozenset({"celeritas"})  # solvers of the latency objective only


def topology(out: Path, n: int) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 8e9} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e10, "latency_s": 1e-5}
             for i in range(n) for j in range(i + 1, n)]
    path = out / f"topo{n}.json"
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices,
                                "links": links}))
    return path


def profile_argv(out: Path, model: str, batch: int, params: list[str] | None = None,
                 name: str | None = None) -> tuple[Path, list[str]]:
    """The graph file of ``placer profile --example MODEL`` (one thread) and its ``placer`` arguments."""
    graph = out / f"{name or model}.json"
    return graph, ["profile", "--example", model, "--param", *(MODELS[model] if params is None else params),
                   "--batch", str(batch), "--device", "cpu", "--threads", "1", "--repeats", "5", "-o", str(graph)]


def profile(out: Path, model: str, batch: int) -> Path:
    graph, argv = profile_argv(out, model, batch)
    if not graph.exists():
        assert placer(argv) == 0
    return graph


def solve_requests(out: Path, graphs: dict[str, Path], solvers: list[str], mbs: list[int], procs: list[int],
                   time_limit_s: float = 20) -> list[tuple[Path, list[str]]]:
    """Every plan file to solve and its ``placer`` arguments: each model, process count, solver and
    micro-batch count (1F1B; a latency solver once per model and process count)."""
    requests = []
    for model, graph in graphs.items():
        for n in procs:
            topo = topology(out, n)
            for solver in solvers:
                latency = solver in LATENCY_SOLVERS  # an op-level plan of one training pass: no micro-batches
                for mb in mbs[:1] if latency else mbs:
                    path = out / f"{model}-{solver}-p{n}-mb{mb}.json"
                    shape = (["--objective", "latency", "--pass", "training"] if latency else
                             ["--micro-batches", str(mb), "--schedule", "1f1b"])
                    requests.append((path, ["solve", "--solver", solver, "--graph", str(graph), "--topology",
                                            str(topo), *shape, "--time-limit", f"{time_limit_s:g}", "--quiet",
                                            "-o", str(path)]))
    return requests


def distinct_plans(paths: list[Path]) -> list[Path]:
    """The plan files that exist, one per distinct plan (the same model, stages, devices and micro-batches
    once: the first by name)."""
    made: dict[str, Path] = {}
    for path in sorted(p for p in paths if p.exists()):
        doc = json.loads(path.read_text())
        key = digest({"model": path.stem.split("-")[0],
                      "stages": [[s["ops"], s["devices"]] for s in doc["stages"] if s["ops"]],
                      "mb": doc["micro_batches"], "schedule": doc.get("schedule"), "v": doc.get("virtual_stages")})
        made.setdefault(key, path)
    return sorted(made.values())


def solve_all(out: Path, graphs: dict[str, Path], solvers: list[str], mbs: list[int], procs: list[int]) -> list[Path]:
    for path, argv in solve_requests(out, graphs, solvers, mbs, procs):
        if not path.exists() and placer(argv) != 0:
            path.unlink(missing_ok=True)
    return distinct_plans([path for path, _ in solve_requests(out, graphs, solvers, mbs, procs)])


def plan_model(plan: Path) -> tuple[str, int]:
    """The model and process count a plan file's name (``MODEL-SOLVER-pN-mbM``) carries."""
    found = re.fullmatch(r"(\w+)-.+-p(\d+)-mb\d+", plan.stem)
    if found is None:
        raise ValueError(f"plan file {plan}: its name is not MODEL-SOLVER-pN-mbM")
    return found.group(1), int(found.group(2))


def bundle(out: Path, plan: Path, graph: Path, topo: Path) -> tuple[Path, int]:
    """``placer launcher build`` of the plan into ``out/runs/<plan>``; the folder and its process count."""
    folder = out / "runs" / plan.stem
    if not (folder / "manifest.json").exists():
        with contextlib.redirect_stdout(io.StringIO()) as said:  # "wrote FOLDER ...": printed on failure only
            code = placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "--topology", str(topo),
                           "-o", str(folder)])
        if code != 0:
            raise RuntimeError(f"placer launcher build {plan}: exit {code}\n{said.getvalue()}")
    return folder, len(json.loads((folder / "manifest.json").read_text())["devices"])


def launch_args(steps: int, warmup: int = 2, profile_steps: int = 1) -> list[str]:
    """launch.py's arguments: ``steps`` iterations, ``warmup`` left out, ``profile_steps`` profiled, no autocast."""
    return ["launch.py", "--steps", str(steps), "--warmup", str(warmup), "--profile-steps", str(profile_steps),
            "--autocast", "none"]


def torchrun_argv(devices: int, worker: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(devices), *worker]


def run_result(name: str, folder: Path, returncode: int | None, output: str) -> Path | None:
    """The run's ``run.json``; None (the reason printed) when the launcher refused the plan, the run failed
    or was stopped at the deadline: then the output's last lines are kept in ``FOLDER/failed.log`` and the
    reason is the refusal, or the first error line of torchrun's root-cause rank (bench/torchrun_log.py)."""
    record = folder / "run.json"
    if returncode == 0 and record.exists():
        return record
    (folder / FAILED_LOG).write_text(output_tail(output))
    refused = [line for line in output.splitlines() if line.startswith("launch.py: refused")]
    cause = root_cause_line(output) or " | ".join(output.strip().splitlines()[-4:])
    why = (refused[0] if refused else "stopped at the deadline" if returncode is None else
           f"exit {returncode}: {cause}")
    print(f"skipped {name}: {why} (the output's tail: {folder / FAILED_LOG})", flush=True)
    return None


def expected_run_s(plan: Path, steps: int) -> float:
    """A generous guess of a run's wall time: start-up plus twice the simulated iterations (steps and the
    profiled one)."""
    metrics = json.loads(plan.read_text()).get("metrics") or {}
    return 12.0 + 2.0 * (steps + 1) * float(metrics.get("iteration_s") or metrics.get("objective_s") or 1.0)


def run_plan(out: Path, plan: Path, graph: Path, topo: Path, steps: int, profile_steps: int = 1,
             k: int = 1) -> Path | None:
    """The ``run.json`` of the plan's ``k``-th run (:func:`repeat_folder`), run here unpinned (a first run found in
    ``out`` is reused); None when the launcher refuses the plan (the reason printed)."""
    built, devices = bundle(out, plan, graph, topo)
    found = built.parent / (built.name if k == 1 else f"{built.name}{REPEAT_MARK}{k}") / "run.json"
    if found.exists():
        return found
    name, folder = repeat_folder(built, k)
    print(f"running {name} at load average {os.getloadavg()}", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(torchrun_argv(devices, launch_args(steps, profile_steps=profile_steps)), cwd=folder, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    return run_result(name, folder, done.returncode, done.stdout + done.stderr)


Case = tuple[str, RunRecord, Any, Any, Any]


def load_case(name: str, record: Path, graph: Path, topo: Path, plan: Path) -> Case:
    return (name, run_from_document(json.loads(record.read_text())), load_graph(graph), load_topology(topo),
            load_plan(plan))


def rel(pred: float, measured: float) -> float:
    return abs(pred / measured - 1.0)


REPEAT_MARK = "~r"  # a plan's K-th run (K >= 2) is named PLAN~rK; its first run is named PLAN


def plan_name(run_name: str) -> str:
    """The plan a run belongs to: ``PLAN`` for ``PLAN`` and ``PLAN~rK``."""
    return run_name.split(REPEAT_MARK)[0]


def by_plan(cases: list[Case]) -> list[tuple[str, list[Case]]]:
    """The runs grouped by plan, plans by name, each plan's runs in name order (its first run first)."""
    groups: dict[str, list[Case]] = {}
    for case in sorted(cases, key=lambda c: c[0]):
        groups.setdefault(plan_name(case[0]), []).append(case)
    return sorted(groups.items())


def measured_iteration_s(runs: list[Case]) -> float:
    """The plan's measured iteration: the median over its runs of each run's median iteration."""
    return statistics.median(float(c[1].summary["iteration_s"]) for c in runs)


def spread(runs: list[Case]) -> str:
    """The plan's runs' iterations, lowest to highest in ms with the count (empty for one run)."""
    its = sorted(float(c[1].summary["iteration_s"]) for c in runs)
    return "" if len(its) < 2 else f"{len(its)} runs, {its[0] * 1e3:.1f}-{its[-1] * 1e3:.1f}"


def measured_peaks_bytes(runs: list[Case]) -> dict[str, float]:
    """Per device the median over the plan's runs of the recorded peak memory (devices with a peak)."""
    peaks: dict[str, list[float]] = {}
    for c in runs:
        for device, value in c[1].summary["peak_memory_bytes"].items():
            if value:
                peaks.setdefault(device, []).append(float(value))
    return {d: statistics.median(v) for d, v in peaks.items()}


def fitted_third(cases: list[Case]) -> tuple[list[Case], list[tuple[str, list[Case]]]]:
    """Every third plan by name (all its runs) to fit on, and the other plans with their runs, held out."""
    groups = by_plan(cases)
    fit_on = [c for i, (_, runs) in enumerate(groups) if i % 3 == 0 for c in runs]
    return fit_on, [g for i, g in enumerate(groups) if i % 3 != 0]


def fit_and_predict(cases: list[Case], out: Path) -> Calibration | None:
    """Fit on every third case (by name), predict the others with and without the fit; print the table
    and the summary lines (docstring, step 5).  The calibration, or None with fewer than one case."""
    if not cases:
        print("no run finished: nothing to fit")
        return None
    fit_on, held = fitted_third(cases)
    if not held:
        print("one plan only: predicting the runs it was fitted on (no held-out plan)")
        held = by_plan(fit_on)
    repeated = any(len(runs) > 1 for _, runs in by_plan(cases))
    cal = fit_calibration([c[1] for c in fit_on], [c[2] for c in fit_on], [c[3] for c in fit_on],
                          [c[4] for c in fit_on])
    (out / "calibration.json").write_text(json.dumps(cal.to_document(), indent=1))
    print(f"fitted on {len(fit_on)} runs: {', '.join(cal.fit['parameters'])}")
    print(f"not determined by these runs: {', '.join(cal.fit['unidentified']) or 'none'}; at a bound: "
          f"{', '.join(cal.fit['at_bounds']) or 'none'}; profiler ratios (plain / profiled iteration): "
          f"{', '.join(f'{r:.2f}' for r in cal.fit['observations']['profiler_ratios'])}")
    print(json.dumps({k: v.to_dict() for k, v in cal.devices.items()}), json.dumps(
        {k: v.to_dict() for k, v in cal.channels.items()}), f"efficiency {cal.collective_efficiency:.3g}",
        f"memory {cal.memory.to_dict()}", f"step {cal.step.to_dict()}")
    # with repeated runs, "measured" is the median over a plan's runs (each a median of its steps)
    print("| plan | measured ms | uncalibrated ms | calibrated ms | memory error uncal. | memory error cal. |"
          + (" runs, ms |" if repeated else ""))
    print("|---|---|---|---|---|---|" + ("---|" if repeated else ""))
    measured, before, after, mem_before, mem_after = [], [], [], [], []
    for name, runs in held:
        _, run, graph, topo, plan = runs[0]
        m = measured_iteration_s(runs)
        g, t = apply_calibration(graph, topo, cal)
        sim0 = simulate(run_problem(run, graph, topo, plan), plan).metrics
        sim1 = simulate(run_problem(run, g, t, plan), plan).metrics
        peaks = measured_peaks_bytes(runs)
        e0 = max(rel(sim0["peak_memory_bytes"][d], v) for d, v in peaks.items())
        e1 = max(rel(sim1["peak_memory_bytes"][d], v) for d, v in peaks.items())
        measured.append(m)
        before.append(sim0["objective_s"])
        after.append(sim1["objective_s"])
        mem_before.append(e0)
        mem_after.append(e1)
        print(f"| {name} | {m * 1e3:.1f} | {sim0['objective_s'] * 1e3:.1f} | {sim1['objective_s'] * 1e3:.1f} | "
              f"{e0:.1%} | {e1:.1%} |" + (f" {spread(runs) or '1 run'} |" if repeated else ""), flush=True)
    for label, pred, mem in (("uncalibrated", before, mem_before), ("calibrated", after, mem_after)):
        errors = [rel(p, m) for p, m in zip(pred, measured, strict=True)]
        rho = spearmanr(pred, measured).statistic if len(pred) > 2 else float("nan")
        print(f"{label}: {len(pred)} held-out plans, iteration median relative error {statistics.median(errors):.1%}, "
              f"Spearman {rho:.3f}; per-rank peak memory: largest error {max(mem):.1%}, "
              f"plans within 10 % {sum(e <= 0.1 for e in mem)}/{len(mem)}")
    return cal


def repeat_folder(folder: Path, k: int) -> tuple[str, Path]:
    """The name and folder of the plan's ``k``-th run (1: the bundle itself; else a copy of the bundle beside it,
    without any earlier run's output)."""
    if k == 1:
        return folder.name, folder
    name = f"{folder.name}{REPEAT_MARK}{k}"
    copy = folder.parent / name
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("run.json", "metrics.json", FAILED_LOG))
    return name, copy


def run_pinned(out: Path, items: list[tuple[Path, Path, Path]], steps: int, cores: list[int],
               deadline: float, profile_steps: int = 1, repeat: int = 1) -> list[Case]:
    """Every (plan, graph, topology) bundle under torchrun, side by side on ``cores`` (each rank on a core of
    its own, bench/pinned.py); new runs start only while they can end before ``deadline`` (monotonic).
    With ``repeat`` K > 1 every plan runs K times, in rounds (every plan once, then every plan again...), each
    run in its own copy of the bundle and on the cores the pool gives it then: a deadline cuts the later rounds."""
    bundles = []
    for plan, graph, topo in items:
        try:
            folder, devices = bundle(out, plan, graph, topo)
        except RuntimeError as err:
            print(f"skipped {plan.stem}: {err}", flush=True)
            continue
        if devices > len(cores):
            print(f"skipped {plan.stem}: {devices} processes, {len(cores)} cores", flush=True)
            continue
        bundles.append((plan, graph, topo, folder, devices))
    jobs, where = [], {}
    for k in range(1, repeat + 1):
        for plan, graph, topo, built, devices in bundles:
            name, folder = repeat_folder(built, k)
            (folder / "run.json").unlink(missing_ok=True)
            (folder / FAILED_LOG).unlink(missing_ok=True)
            jobs.append(Job(name, [], folder, cores=devices, expected_s=expected_run_s(plan, steps), timeout_s=600,
                            extra_env={"CUDA_VISIBLE_DEVICES": ""}))  # CPU runs (gloo) on a machine with GPUs too
            where[name] = (plan, graph, topo, folder)
    cases = []

    def done(job: Job) -> None:
        plan, graph, topo, folder = where[job.name]
        print(f"ran {job.name} on cores {','.join(map(str, job.pinned))} in {job.wall_s:.1f} s "
              f"(started at {job.started_at_s:.0f} s, load {os.getloadavg()[0]:.1f})", flush=True)
        record = run_result(job.name, folder, job.returncode, job.output)
        if record is not None:
            cases.append(load_case(job.name, record, graph, topo, plan))

    started = run_jobs(jobs, cores, deadline, on_done=done,
                       argv_for=lambda job, pinned: torchrun_argv(job.cores, rank_pinned(pinned, launch_args(steps, profile_steps=profile_steps))))
    if len(started) < len(jobs):
        print(f"{len(jobs) - len(started)} runs not started: they would have ended after the deadline", flush=True)
    return cases


def round_robin(items: list[T], group: Callable[[T], str]) -> list[T]:
    """The items in rounds, one of each group a round (groups by name), each group's items in their order:
    a deadline that cuts the tail leaves every group a share."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(group(item), []).append(item)
    rounds = [(i, key, x) for key, members in groups.items() for i, x in enumerate(members)]
    return [x for _, _, x in sorted(rounds, key=lambda r: (r[0], r[1]))]


def interleave(plans: list[Path]) -> list[Path]:
    """The plans in rounds: one per model and solver a round, and each model and solver's plans in rounds
    over the process counts, so that a deadline leaves every model, solver and process count a share."""
    by_procs = round_robin(sorted(plans), lambda plan: str(plan_model(plan)[1]))
    return round_robin(by_procs, lambda plan: plan.stem.split("-p")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_calibration")
    parser.add_argument("--models", default="gpt2,bert,vit")
    parser.add_argument("--solvers", default=",".join(SOLVERS))
    parser.add_argument("--micro-batches", default="1,2,4")
    parser.add_argument("--procs", default="2,3,4")
    parser.add_argument("--batch", type=int, default=12,
                        help="rows per micro-batch of the profile (12: splits over 2, 3 and 4 replicas)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--profile-steps", type=int, default=1,
                        help="steps run under torch.profiler (their median gives the stage and transfer times)")
    parser.add_argument("--limit", type=int, default=0, help="run at most this many plans (0: all)")
    parser.add_argument("--cores", type=int, default=-1,
                        help="run the plans side by side on this many cores, each rank pinned to one "
                             "(0: all but one; default -1: one plan at a time, unpinned)")
    parser.add_argument("--deadline-s", type=float, default=0.0,
                        help="start no run that would end later than this many seconds after the start (0: none)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every plan this many times, in rounds; a plan's measured iteration is the median "
                             "over its runs")
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + args.deadline_s if args.deadline_s > 0 else float("inf")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()}", flush=True)
    graphs = {m: profile(out, m, args.batch) for m in args.models.split(",")}
    plans = interleave(solve_all(out, graphs, args.solvers.split(","), [int(x) for x in args.micro_batches.split(",")],
                                 [int(x) for x in args.procs.split(",")]))
    if args.limit:
        plans = plans[:args.limit]
    print(f"{len(plans)} distinct plans", flush=True)
    if args.cores >= 0:
        items = [(plan, graphs[plan_model(plan)[0]], topology(out, plan_model(plan)[1])) for plan in plans]
        cases = run_pinned(out, items, args.steps, pool_cores(args.cores), deadline, args.profile_steps, args.repeat)
    else:
        cases = []
        for k in range(1, args.repeat + 1):
            for plan in plans:
                model, n = plan_model(plan)
                topo = topology(out, n)
                record = run_plan(out, plan, graphs[model], topo, args.steps, args.profile_steps, k)
                if record is not None:
                    cases.append(load_case(record.parent.name, record, graphs[model], topo, plan))
    fit_and_predict(cases, out)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
