"""Repeated runs of one plan in the CPU benches (bench_calibration.run_pinned / run_plan ``repeat``): grouping
by plan, the median over runs, the pairs the runs decide, and the copies of a bundle the runs use."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

from bench.bench_calibration import (
    Case,
    by_plan,
    fitted_third,
    measured_iteration_s,
    measured_peaks_bytes,
    plan_name,
    repeat_folder,
    spread,
)
from bench.schedule_runs import agreement_on, decided_pairs
from solvers.model.run import RunRecord


def case(name: str, iteration_s: float, peak: float = 1.0) -> Case:
    # what the grouping reads of a run record: its summary (the run's median iteration and per-device peaks)
    run = SimpleNamespace(summary={"iteration_s": iteration_s, "peak_memory_bytes": {"cpu0": peak, "cpu1": 0}})
    return (name, cast(RunRecord, run), None, None, None)


def test_runs_are_grouped_by_plan_and_measured_by_their_median() -> None:
    cases = [case("b~r2", 0.30), case("a", 0.10), case("b", 0.20), case("b~r3", 0.90, peak=5.0), case("a~r2", 0.12)]
    groups = by_plan(cases)
    assert [name for name, _ in groups] == ["a", "b"]
    assert [c[0] for c in groups[1][1]] == ["b", "b~r2", "b~r3"]
    assert plan_name("gpt2-even-p2-mb4~r12") == "gpt2-even-p2-mb4"
    assert measured_iteration_s(groups[1][1]) == 0.30  # the median, not the mean (0.467)
    assert measured_iteration_s(groups[0][1]) == 0.11
    assert measured_peaks_bytes(groups[1][1]) == {"cpu0": 1.0}  # a device with no peak recorded is left out
    assert spread(groups[1][1]) == "3 runs, 200.0-900.0"
    assert spread([case("c", 0.1)]) == ""


def test_the_fitted_third_takes_whole_plans_and_matches_single_runs() -> None:
    single = [case(n, 0.1) for n in "abcdefg"]
    fit_on, held = fitted_third(single)
    assert [c[0] for c in fit_on] == ["a", "d", "g"]  # every third case by name, as before repeats
    assert [n for n, _ in held] == ["b", "c", "e", "f"]
    fit_on, held = fitted_third([*single, case("a~r2", 0.2), case("b~r2", 0.2)])
    assert [c[0] for c in fit_on] == ["a", "a~r2", "d", "g"]  # a plan's runs stay on one side
    assert [len(runs) for _, runs in held] == [2, 1, 1, 1]


def test_only_pairs_whose_repeated_runs_do_not_overlap_are_decided() -> None:
    runs = [[1.0, 1.1], [1.2, 1.3], [1.05, 1.25], [0.5]]
    # 0 < 1 apart; 2 overlaps both; 3 has one run, which cannot show its spread
    assert decided_pairs(runs) == {(0, 1)}
    measured = [1.05, 1.25, 1.15, 0.5]
    assert agreement_on({(0, 1)}, [2.0, 3.0, 0.0, 0.0], measured) == 1
    assert agreement_on({(0, 1)}, [3.0, 2.0, 0.0, 0.0], measured) == 0
    assert agreement_on({(0, 1)}, [2.0, 2.0, 0.0, 0.0], measured) == 0  # a predicted tie does not agree


def test_a_repeated_run_gets_a_clean_copy_of_the_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "runs" / "gpt2-even-p2-mb4"
    bundle.mkdir(parents=True)
    for name in ("launch.py", "plan.json", "run.json", "metrics.json", "failed.log"):
        (bundle / name).write_text(name)
    assert repeat_folder(bundle, 1) == ("gpt2-even-p2-mb4", bundle)
    name, copy = repeat_folder(bundle, 2)
    assert (name, copy) == ("gpt2-even-p2-mb4~r2", tmp_path / "runs" / "gpt2-even-p2-mb4~r2")
    assert sorted(p.name for p in copy.iterdir()) == ["launch.py", "plan.json"]  # no earlier run's output
    (copy / "run.json").write_text("old")
    assert not (repeat_folder(bundle, 2)[1] / "run.json").exists()  # made again, clean
