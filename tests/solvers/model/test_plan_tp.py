"""A stage's tensor-parallel degree ``tp`` and the plan's ``sequence_parallel`` (docs/formats.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from solvers.model.canonical import digest
from solvers.model.errors import InvalidPlan
from solvers.model.plan import PLAN_FORMAT, Plan, Stage, plan_from_document
from solvers.validity import resolve_plan
from tests.solvers.model.test_plan_resolve import make_problem

SCHEMA = json.loads((Path(__file__).parents[3] / "solvers/model/schemas/plan.v1.json").read_text())


def doc(*stages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"format": PLAN_FORMAT, "stages": list(stages), **extra}


def test_tp_round_trips_and_is_written_only_when_not_one() -> None:
    d = doc({"ops": ["a", "b"], "devices": ["g0", "g1"], "tp": 2}, {"ops": ["c", "d"], "devices": ["g2"]},
            sequence_parallel=True)
    jsonschema.validate(d, SCHEMA)
    p = plan_from_document(d)
    assert [s.tp for s in p.stages] == [2, 1] and [s.replicas for s in p.stages] == [1, 1]
    assert p.sequence_parallel
    out = p.to_document()
    assert out["stages"][0]["tp"] == 2 and "tp" not in out["stages"][1] and out["sequence_parallel"] is True
    assert plan_from_document(out) == p


def test_a_plan_without_tp_keeps_its_digest() -> None:
    old = plan_from_document(doc({"ops": ["a", "b"], "devices": ["g0"]}, {"ops": ["c", "d"], "devices": ["g1"]}))
    explicit = plan_from_document(doc({"ops": ["a", "b"], "devices": ["g0"], "tp": 1},
                                      {"ops": ["c", "d"], "devices": ["g1"], "tp": 1}, sequence_parallel=False))
    assert digest(old.to_document()) == digest(explicit.to_document())
    assert "sequence_parallel" not in old.to_document()


@pytest.mark.parametrize(("stage", "field", "words"), [
    ({"ops": ["a"], "devices": ["g0", "g1", "g2"], "tp": 2}, "stages[0].devices", "multiple of 2"),
    ({"ops": ["a"], "devices": ["g0"], "tp": 0}, "stages[0].tp", ">= 1"),
    ({"ops": ["a"], "devices": ["g0"], "tp": "2"}, "stages[0].tp", "integer"),
])
def test_bad_tp_names_the_stage_and_field(stage: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidPlan) as info:
        plan_from_document(doc(stage))
    assert info.value.field == field and field in str(info.value) and words in str(info.value)


def test_bad_sequence_parallel_is_named() -> None:
    with pytest.raises(InvalidPlan) as info:
        plan_from_document(doc({"ops": ["a"], "devices": ["g0"]}, sequence_parallel="yes"))
    assert info.value.field == "sequence_parallel"


def test_resolve_rejects_a_hand_built_stage_whose_devices_do_not_fill_its_groups() -> None:
    problem = make_problem()
    bad = Plan((Stage(("a", "b"), ("g0", "g1", "g2"), tp=2), Stage(("c", "d"), ("g3",))))
    with pytest.raises(InvalidPlan) as info:
        resolve_plan(problem, bad)
    assert info.value.field == "stages[0].tp"


def test_resolved_groups_are_replica_major() -> None:
    problem = make_problem()
    rp = resolve_plan(problem, Plan((Stage(("a", "b", "c", "d"), ("g0", "g1", "g2", "g3"), tp=2),)))
    assert rp.tp(0) == 2 and rp.replicas(0) == 2
    assert rp.tp_groups(0) == [[0, 1], [2, 3]]  # replica k: devices[k*tp:(k+1)*tp]
    assert rp.shard_rings(0) == [[0, 2], [1, 3]]  # rank j of every replica


def test_virtual_stages_of_one_rank_share_their_tp() -> None:
    problem = make_problem()
    devs = ("g0", "g1")
    p = Plan((Stage(("a",), devs, tp=2), Stage(("b",), ("g2", "g3"), tp=2), Stage(("c",), devs, tp=1),
              Stage(("d",), ("g2", "g3"), tp=2)), schedule="interleaved-1f1b", virtual_stages=2)
    with pytest.raises(InvalidPlan) as info:
        resolve_plan(problem, p)
    assert info.value.field == "stages[2].tp"
