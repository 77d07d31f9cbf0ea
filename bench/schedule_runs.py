"""Pipeline schedules run on CPU: does the simulator order them as the runs do (docs/benchmarks.md)?

One model graph profiled here (one thread), over 2 CPU processes (one rank group each, no replicas, no
tensor parallelism: pipelines only):
``placer solve --schedule X --virtual-stages V`` for every schedule of :data:`SCHEDULES` and each
micro-batch count; the distinct plans run under torchrun (bench/pinned.py: each rank on a core of
its own); per plan the simulated iteration (uncalibrated, and with a calibration where one is given)
beside the measured one, then over all plans the Spearman rank correlation and the share of plan
pairs whose order the simulator gets right (pairwise agreement; pairs measured within ``tie`` of
each other count as ties and are left out).  With the schedule plans at two micro-batch counts or more,
:func:`report_held_out` fits a calibration on the calibration plans' fitted third and the schedule plans
at the fewest micro-batches (their split backwards give ``split_backward``) and reports the others.
"""

from __future__ import annotations

import json
import statistics
from itertools import combinations
from pathlib import Path

from scipy.stats import spearmanr

from bench.bench_calibration import Case, by_plan, fitted_third, measured_iteration_s, rel, spread, topology
from solvers.calibration import Calibration, apply_calibration
from solvers.calibration.fit import fit_calibration, run_problem
from solvers.simulator import simulate

MODEL = "gpt2"
PARAMS = ["layers=8", "hidden=128", "heads=4", "seq=64", "vocab=512", "dropout=0"]
SCHEDULES = {"gpipe": 1, "1f1b": 1, "interleaved-1f1b": 2, "looped-bfs": 2, "interleaved-zb": 2, "zbv": 2,
             "dualpipev": 2}  # schedule -> virtual stages per rank group
PROCESSES = 2


def solve_requests(out: Path, graph: Path, mbs: list[int], solver: str = "rannc",
                   time_limit_s: float = 10) -> list[tuple[Path, list[str]]]:
    """Every schedule plan file (``sched-SCHEDULE-vV-mbM``) and its ``placer solve`` arguments."""
    topo = topology(out, PROCESSES)
    requests = []
    for mb in mbs:
        for schedule, v in SCHEDULES.items():
            path = out / f"sched-{schedule}-v{v}-mb{mb}.json"
            requests.append((path, ["solve", "--solver", solver, "--graph", str(graph), "--topology", str(topo),
                                    "--micro-batches", str(mb), "--replicas", "1", "--tp", "1", "--schedule", schedule,
                                    "--virtual-stages", str(v), "--time-limit", f"{time_limit_s:g}", "--quiet",
                                    "-o", str(path)]))
    return requests


def pipelined(plan: Path) -> bool:
    """Whether the plan uses both processes (a one-stage plan does not tell the schedules apart)."""
    doc = json.loads(plan.read_text())
    return len({d for s in doc["stages"] if s["ops"] for d in s["devices"]}) == PROCESSES


def pairwise_agreement(predicted: list[float], measured: list[float], tie: float = 0.0) -> tuple[int, int]:
    """(pairs ordered alike, pairs compared): pairs whose measured times differ by at most ``tie``
    (relative) are not compared; a pair predicted equal is compared and counts as not ordered alike."""
    agree = compared = 0
    for i, j in combinations(range(len(measured)), 2):
        if abs(measured[i] - measured[j]) <= tie * max(measured[i], measured[j]):
            continue
        compared += 1
        if predicted[i] != predicted[j]:  # a pair the simulator ties is not ordered: it does not agree
            agree += (predicted[i] < predicted[j]) == (measured[i] < measured[j])
    return agree, compared


def decided_pairs(runs: list[list[float]]) -> set[tuple[int, int]]:
    """The pairs (i < j) of plans whose runs do not overlap: every run of one faster than every run of the
    other.  Only plans with two runs or more decide a pair: one run cannot show its own spread."""
    return {(i, j) for i, j in combinations(range(len(runs)), 2)
            if min(len(runs[i]), len(runs[j])) >= 2 and (max(runs[i]) < min(runs[j]) or max(runs[j]) < min(runs[i]))}


def agreement_on(pairs: set[tuple[int, int]], predicted: list[float], measured: list[float]) -> int:
    """How many of ``pairs`` the prediction orders as measured (a predicted tie does not agree)."""
    return sum(predicted[i] != predicted[j] and (predicted[i] < predicted[j]) == (measured[i] < measured[j])
               for i, j in pairs)


def report(cases: list[Case], calibration: Calibration | None, tie: float = 0.02) -> None:
    """Print per plan simulated against measured, then the rank correlation and pairwise agreement.  With
    repeated runs a plan's measured iteration is the median over its runs, and the pairs its runs decide
    (:func:`decided_pairs`) are counted apart."""
    groups = by_plan(cases)
    if len(groups) < 2:
        print(f"schedules: {len(groups)} plan(s) ran, too few to compare")
        return
    repeated = any(len(runs) > 1 for _, runs in groups)
    print("| plan | schedule | v | micro-batches | measured ms | simulated ms | calibrated ms |"
          + (" runs, ms |" if repeated else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if repeated else ""))
    measured, uncal, cal = [], [], []
    for name, runs in groups:
        _, run, graph, topo, plan = runs[0]
        m = measured_iteration_s(runs)
        s0 = simulate(run_problem(run, graph, topo, plan), plan).metrics["objective_s"]
        s1 = float("nan")
        if calibration is not None:
            g, t = apply_calibration(graph, topo, calibration)
            s1 = simulate(run_problem(run, g, t, plan), plan).metrics["objective_s"]
        measured.append(m)
        uncal.append(s0)
        cal.append(s1)
        print(f"| {name} | {plan.schedule} | {plan.virtual_stages} | {plan.micro_batches} | {m * 1e3:.1f} | "
              f"{s0 * 1e3:.1f} | {s1 * 1e3:.1f} |" + (f" {spread(runs) or '1 run'} |" if repeated else ""), flush=True)
    columns = [("uncalibrated", uncal)] + ([("calibrated", cal)] if calibration is not None else [])
    decided = decided_pairs([[float(c[1].summary["iteration_s"]) for c in runs] for _, runs in groups])
    for label, pred in columns:
        rho = spearmanr(pred, measured).statistic if len(pred) > 2 else float("nan")
        agree, compared = pairwise_agreement(pred, measured)
        agree_tie, compared_tie = pairwise_agreement(pred, measured, tie)
        error = statistics.median(rel(p, m) for p, m in zip(pred, measured, strict=True))
        print(f"schedules, {label}: {len(pred)} plans, Spearman {rho:.3f}, pairs ordered as measured "
              f"{agree}/{compared} (measured more than {tie:.0%} apart: {agree_tie}/{compared_tie}"
              + (f"; whose runs do not overlap: {agreement_on(decided, pred, measured)}/{len(decided)}"
                 if repeated else "") + f"), iteration median relative error {error:.1%}")
    plans = [runs[0][4] for _, runs in groups]

    def order(xs: list[tuple[int, float]]) -> str:
        return " < ".join(plans[i].schedule for i, _ in sorted(xs, key=lambda x: x[1]))

    for mb in sorted({p.micro_batches for p in plans}):
        mine = [i for i, p in enumerate(plans) if p.micro_batches == mb]
        line = f"  {mb} micro-batches: measured {order([(i, measured[i]) for i in mine])}"
        mine_decided = {(i, j) for i, j in decided if i in mine and j in mine}
        for label, pred in columns:
            agree, compared = pairwise_agreement([pred[i] for i in mine], [measured[i] for i in mine], tie)
            line += f"; {label} {order([(i, pred[i]) for i in mine])} (pairs {agree}/{compared}"
            line += (f", whose runs do not overlap {agreement_on(mine_decided, pred, measured)}/{len(mine_decided)})"
                     if repeated else ")")
        print(line)


def report_held_out(cal_cases: list[Case], cases: list[Case]) -> None:
    """Fit on every third calibration plan (by name, as bench_calibration.fit_and_predict) and the schedule
    plans at the fewest micro-batches; report the schedule plans at the other counts (:func:`report`)."""
    counts = sorted({c[4].micro_batches for c in cases})
    if len(counts) < 2:
        print(f"schedules held out: the plans ran at {len(counts)} micro-batch count(s), too few to hold one out")
        return
    third, _ = fitted_third(cal_cases)
    fit_on = third + [c for c in cases if c[4].micro_batches == counts[0]]
    held = [c for c in cases if c[4].micro_batches != counts[0]]
    cal = fit_calibration([c[1] for c in fit_on], [c[2] for c in fit_on], [c[3] for c in fit_on],
                          [c[4] for c in fit_on])
    print(f"fitted on {len(third)} calibration runs and the {len(fit_on) - len(third)} schedule runs at "
          f"{counts[0]} micro-batches: split_backward {dict(cal.split_backward) or 'none'}; predicting "
          f"{len(held)} schedule plans at {', '.join(map(str, counts[1:]))} micro-batches", flush=True)
    report(held, cal)
