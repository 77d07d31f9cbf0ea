"""``placer.run/v1``: the loader and the JSON Schema agree, errors name the field, the summary and the
line-up with a simulation use the simulator's keys."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput
from solvers.model.plan import Plan, Stage
from solvers.model.run import RankRecord, Transfer, check_run_matches, line_up, run_from_document, run_summary
from solvers.model.schemas import load_schema

PLAN = Plan(stages=(Stage(("a",), ("cpu0",)), Stage(("b",), ("cpu1",))), micro_batches=2, graph_digest="sha256:g",
            topology_digest="sha256:t")


def rank(r: int, stage: int, forward_s: tuple[float, ...] = (0.002, 0.004)) -> RankRecord:
    return RankRecord(rank=r, device=f"cpu{r}", stage=stage, replica=0, hostname="h", iterations_s=(0.5, 0.1, 0.2, 0.3),
                      memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_resident_bytes": 100 + r},
                      profiled_steps=(1,), forward_s=forward_s, backward_s=(0.01, 0.01),
                      transfers=(Transfer("send", 1, 0.0, 0.001, 4096, "forward", (4, 256), "float"),))


def document() -> dict[str, Any]:
    ranks = [rank(0, 0), rank(1, 1, (0.001, 0.001))]
    return {"format": "placer.run/v1", "plan_digest": digest(PLAN.to_document()), "graph_digest": "sha256:g",
            "topology_digest": "sha256:t", "solver": "user", "kind": "throughput", "mode": "training",
            "micro_batches": 2, "schedule": "1f1b", "steps": 4, "warmup": 1, "profile_steps": 1,
            "rows_per_iteration": 8, "environment": {"device_kind": "cpu", "world_size": 2, "threads": 1},
            "iterations_s": [0.5, 0.1, 0.2, 0.3], "ranks": [r.to_dict() for r in ranks],
            "summary": run_summary(ranks, 2, 1)}


def test_summary_uses_the_simulators_keys() -> None:
    summary = document()["summary"]
    # warm-up (step 0) and the profiled step 1 left out: the median of 0.2 and 0.3
    assert summary["iteration_s"] == pytest.approx(0.25)
    assert summary["stage_times_s"] == pytest.approx([0.003 + 0.01, 0.001 + 0.01])
    assert summary["peak_memory_bytes"] == {"cpu0": 100, "cpu1": 101}
    unprofiled = run_summary([rank(0, 0, ())], 2, 0)
    assert unprofiled["stage_times_s"] is None


def test_a_valid_record_loads_round_trips_and_validates() -> None:
    doc = document()
    jsonschema.Draft202012Validator(load_schema("run")).validate(doc)
    run = run_from_document(doc)
    assert run.to_document() == doc
    check_run_matches(run, PLAN)


BREAKS = {
    "format": (lambda d: d.update(format="placer.run/v0"), "format"),
    "unknown key": (lambda d: d.update(rank=1), "rank"),
    "no ranks": (lambda d: d.update(ranks=[]), "ranks"),
    "missing summary": (lambda d: d.pop("summary"), "summary"),
    "bad kind": (lambda d: d.update(kind="training"), "kind"),
    "negative iteration": (lambda d: d["iterations_s"].__setitem__(0, -1), "iterations_s[0]"),
    "rank without memory": (lambda d: d["ranks"][1].pop("memory"), "ranks[1].memory"),
    "bad transfer op": (lambda d: d["ranks"][0]["transfers"][0].update(op="put"), "ranks[0].transfers[0].op"),
    "fractional bytes": (lambda d: d["ranks"][0]["transfers"][0].update(bytes=1.5), "ranks[0].transfers[0].bytes"),
    "unknown environment key": (lambda d: d["environment"].update(gpus=1), "environment.gpus"),
    "duplicate device": (lambda d: d["ranks"][1].update(device="cpu0"), "ranks[1].device"),
}


@pytest.mark.parametrize("label", sorted(BREAKS))
def test_loader_and_schema_refuse_alike_naming_the_field(label: str) -> None:
    doc = copy.deepcopy(document())
    change, field = BREAKS[label]
    change(doc)
    with pytest.raises(InvalidInput) as err:
        run_from_document(doc)
    assert err.value.field == field and str(err.value).startswith(field)
    if label != "duplicate device":  # a rule the schema cannot state
        assert not jsonschema.Draft202012Validator(load_schema("run")).is_valid(doc)


def test_a_run_of_another_plan_is_refused_naming_the_digest() -> None:
    run = run_from_document(document())
    for change, field in (({"graph_digest": "sha256:x"}, "graph_digest"), ({"micro_batches": 4}, "plan_digest"),
                          ({"topology_digest": "sha256:y"}, "topology_digest")):
        with pytest.raises(InvalidInput) as err:
            check_run_matches(run, PLAN.with_(**change))
        assert err.value.field == field
    swapped = PLAN.with_(stages=(Stage(("a",), ("cpu1",)), Stage(("b",), ("cpu0",))))
    doc = {**document(), "plan_digest": digest(swapped.to_document())}  # digests agree, ranks do not
    with pytest.raises(InvalidInput) as err:
        check_run_matches(run_from_document(doc), swapped)
    assert err.value.field == "ranks[0].stage"


def test_line_up_pairs_measured_and_simulated_key_by_key() -> None:
    run = run_from_document(document())
    rows = {r.key: r for r in line_up(run, {"iteration_s": 0.2, "stage_times_s": [0.013, 0.0],
                                             "peak_memory_bytes": {"cpu0": 50.0, "cpu1": 202.0}})}
    assert list(rows) == ["iteration_s", "stage_times_s[0]", "stage_times_s[1]", "peak_memory_bytes[cpu0]",
                          "peak_memory_bytes[cpu1]"]
    assert rows["iteration_s"].relative_error == pytest.approx(0.25)
    assert rows["stage_times_s[0]"].relative_error == pytest.approx(0.0)
    assert rows["stage_times_s[1]"].relative_error is None  # simulated 0: no relative error
    assert rows["peak_memory_bytes[cpu0]"].relative_error == pytest.approx(1.0)
    assert rows["peak_memory_bytes[cpu1]"].unit == "bytes" and rows["peak_memory_bytes[cpu1]"].relative_error == -0.5


def test_a_rank_with_several_stages_times_each_and_round_trips() -> None:
    """Virtual stages: the stage of every profiled range; a split backward's two parts added per forward."""
    plan = Plan(stages=(Stage(("a",), ("cpu0",)), Stage(("b",), ("cpu1",)), Stage(("c",), ("cpu1",)),
                        Stage(("d",), ("cpu0",))), micro_batches=2, schedule="zbv", virtual_stages=2)
    r0 = RankRecord(rank=0, device="cpu0", stage=0, replica=0, hostname="h", iterations_s=(0.5, 0.2),
                    memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_resident_bytes": 1},
                    profiled_steps=(1,), forward_s=(0.001, 0.003, 0.002, 0.002), forward_stages=(0, 3, 0, 3),
                    backward_s=(0.004, 0.001, 0.004, 0.001, 0.002, 0.002, 0.002, 0.002),
                    backward_stages=(3, 3, 3, 3, 0, 0, 0, 0))
    r1 = RankRecord(rank=1, device="cpu1", stage=1, replica=0, hostname="h", iterations_s=(0.5, 0.3),
                    memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_resident_bytes": 1},
                    profiled_steps=(1,), forward_s=(0.001, 0.001), forward_stages=(1, 2),
                    backward_s=(0.002, 0.002), backward_stages=(2, 1))
    assert r0.stage_time_s() == pytest.approx({0: 0.0015 + 0.004, 3: 0.0025 + 0.005})
    summary = run_summary([r0, r1], 4, 1)
    assert summary["stage_times_s"] == pytest.approx([0.0055, 0.003, 0.003, 0.0075])
    doc = {**document(), "plan_digest": digest(plan.to_document()), "ranks": [r0.to_dict(), r1.to_dict()],
           "iterations_s": [0.5, 0.3], "steps": 2, "summary": summary, "graph_digest": "sha256:g",
           "topology_digest": None, "schedule": "zbv"}
    jsonschema.validate(doc, load_schema("run"))
    run = run_from_document(doc)
    assert run.ranks[0] == r0
    check_run_matches(run, plan)  # cpu0 holds stages 0 and 3: the rank's stage is its first
    assert "forward_stages" not in rank(0, 0).to_dict()  # one stage per rank: the record is as before
    bad = copy.deepcopy(doc)
    bad["ranks"][1]["forward_stages"] = [1]
    with pytest.raises(InvalidInput, match=r"ranks\[1\].forward_stages: 1 stage\(s\) for 2 profiled range\(s\)"):
        run_from_document(bad)


def test_a_rank_of_one_stage_whose_backward_ran_split_counts_both_parts() -> None:
    """Zero-bubble with one stage per rank: two backward entries per forward (input and weight gradient);
    the stage's backward is their sum per forward, as the calibration fit reads it."""
    r = RankRecord(rank=0, device="cpu0", stage=0, replica=0, hostname="h", iterations_s=(0.5,),
                   memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_resident_bytes": 1},
                   profiled_steps=(0,), forward_s=(0.001, 0.001), backward_s=(0.003, 0.001, 0.003, 0.001))
    assert r.stage_entry(0) == pytest.approx((0.001, 0.004, 1.0))
    assert r.stage_entry(1) is None
    assert r.stage_time_s() == pytest.approx({0: 0.005})
    plain = RankRecord(rank=1, device="cpu1", stage=1, replica=0, hostname="h", iterations_s=(0.5,),
                       memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_resident_bytes": 1},
                       profiled_steps=(0,), forward_s=(0.001, 0.003), backward_s=(0.002, 0.004))
    assert plain.stage_entry(1) == pytest.approx((0.002, 0.003, 0.0))
    assert plain.stage_time_s() == pytest.approx({1: 0.005})
