"""The JSON Schemas agree with the loaders: valid documents pass, structurally bad ones fail both."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings

from solvers.generate import GRAPH_KINDS, TOPOLOGY_KINDS, generate_graph, generate_topology
from solvers.model.errors import InvalidInput
from solvers.model.graph import OpGraph, graph_from_document
from solvers.model.plan import Plan, Stage, plan_from_document
from solvers.model.problem import problem_from_spec
from solvers.model.schemas import SCHEMA_NAMES, generated_problem_schema, load_schema
from solvers.model.topology import Topology, topology_from_document
from solvers.validity import resolve_plan
from tests.strategies import dag_graphs, examples, topologies

EXAMPLES = Path(__file__).resolve().parents[2] / "data" / "examples"


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema(name))


def schema_ok(name: str, doc: Any) -> bool:
    return bool(validator(name).is_valid(doc))


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schemas_are_valid_draft_2020_12(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(load_schema(name))
    assert load_schema(name)["properties"]["format"]["const"] == f"placer.{name}/v1"


def test_problem_settings_schema_is_generated_from_the_code() -> None:
    """One definition of the settings: the checked-in schema is what the code generates
    (``python -m solvers.model.schemas`` rewrites it after a change to ``ProblemSettings``)."""
    assert load_schema("problem") == generated_problem_schema()


@pytest.mark.parametrize("kind", sorted(GRAPH_KINDS))
def test_generated_graphs_validate(kind: str) -> None:
    doc = json.loads(json.dumps(generate_graph(kind).to_document()))
    validator("opgraph").validate(doc)


@pytest.mark.parametrize("kind", sorted(TOPOLOGY_KINDS))
def test_generated_topologies_validate(kind: str) -> None:
    validator("topology").validate(json.loads(json.dumps(generate_topology(kind).to_document())))


def test_golden_examples_validate_and_load() -> None:
    graph = graph_from_document(json.loads((EXAMPLES / "opgraph.json").read_text()))
    validator("opgraph").validate(json.loads((EXAMPLES / "opgraph.json").read_text()))
    for name in ("topology_links.json", "topology_matrix.json"):
        doc = json.loads((EXAMPLES / name).read_text())
        validator("topology").validate(doc)
        topology_from_document(doc)
    topo = topology_from_document(json.loads((EXAMPLES / "topology_links.json").read_text()))
    plan_doc = json.loads((EXAMPLES / "plan_minimal.json").read_text())
    validator("plan").validate(plan_doc)
    spec = json.loads((EXAMPLES / "problem.json").read_text())
    validator("problem").validate(spec)
    problem = problem_from_spec(graph, topo, spec)
    resolved = resolve_plan(problem, plan_from_document(plan_doc))
    assert resolved.n_stages == 2


def test_full_plan_and_problem_documents_validate() -> None:
    g = generate_graph("random_dag", n_ops=30)
    t = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    plan = Plan(stages=(Stage(tuple(g.ids), ("gpu0",)),), solver="even", status="feasible", claimed_objective_s=1.0,
                lower_bound_s=0.5, solve_time_s=0.1, order={"gpu0": tuple(g.ids)}, metrics={"iteration_s": 1.0},
                graph_digest=g.digest, notes=("x",))
    validator("plan").validate(json.loads(json.dumps(plan.to_document())))
    validator("plan").validate({"format": "placer.plan/v1", "status": "infeasible", "stages": []})
    spec = problem_from_spec(g, t, {"objective": "latency", "settings": {"pass": "training"}}).spec()
    validator("problem").validate(json.loads(json.dumps(spec)))


def _graph_doc() -> dict[str, Any]:
    return json.loads((EXAMPLES / "opgraph.json").read_text())


def _topo_doc() -> dict[str, Any]:
    return json.loads((EXAMPLES / "topology_links.json").read_text())


def _plan_doc() -> dict[str, Any]:
    return json.loads((EXAMPLES / "plan_minimal.json").read_text())


def _problem_doc() -> dict[str, Any]:
    return json.loads((EXAMPLES / "problem.json").read_text())


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return edit


_DELETE = object()

GRAPH_BREAKS = {
    "format": _set(("format",), "placer.opgraph/v2"),
    "unknown top key": _set(("nodez",), []),
    "no nodes": _set(("nodes",), []),
    "nodes not array": _set(("nodes",), {}),
    "node missing id": _set(("nodes", 0, "id"), _DELETE),
    "node missing fwd_s": _set(("nodes", 0, "fwd_s"), _DELETE),
    "node missing op": _set(("nodes", 0, "op"), _DELETE),
    "empty id": _set(("nodes", 0, "id"), ""),
    "negative time": _set(("nodes", 1, "fwd_s"), -1),
    "string time": _set(("nodes", 1, "bwd_s"), "1"),
    "bool number": _set(("nodes", 1, "param_bytes"), True),
    "unknown node key": _set(("nodes", 1, "speed"), 2),
    "negative weight gradient": _set(("nodes", 1, "bwd_weight_s"), -1),
    "bad constant": _set(("nodes", 1, "constant"), 1),
    "bad layer": _set(("nodes", 1, "layer"), 3),
    "bad times": _set(("nodes", 0, "times", "H100", "fwd_s"), -1),
    "times unknown key": _set(("nodes", 0, "times", "H100", "flops"), 1),
    "edge missing dst": _set(("edges", 0, "dst"), _DELETE),
    "edge negative bytes": _set(("edges", 0, "bytes"), -3),
    "edge unknown key": _set(("edges", 0, "weight"), 1),
    "batch zero": _set(("profiled_batch_size",), 0),
    "batch fraction": _set(("profiled_batch_size",), 1.5),
    "attrs list": _set(("attrs",), [1]),
}

TOPOLOGY_BREAKS = {
    "format": _set(("format",), "placer.topology/v0"),
    "no devices": _set(("devices",), []),
    "device missing memory": _set(("devices", 0, "memory_bytes"), _DELETE),
    "zero speed": _set(("devices", 0, "speed"), 0),
    "negative memory": _set(("devices", 0, "memory_bytes"), -1),
    "unknown device key": _set(("devices", 0, "gpus"), 2),
    "zero bandwidth": _set(("links", 0, "bandwidth_Bps"), 0),
    "negative latency": _set(("links", 0, "latency_s"), -1),
    "link missing src": _set(("links", 0, "src"), _DELETE),
    "bidirectional string": _set(("links", 0, "bidirectional"), "yes"),
    "links and matrix": _set(("bandwidth_Bps",), [[0, 1, 1], [1, 0, 1], [1, 1, 0]]),
    "latency without bandwidth": _set(("latency_s",), [[0, 1, 1], [1, 0, 1], [1, 1, 0]]),
    "unknown top key": _set(("hosts",), []),
}

PLAN_BREAKS = {
    "format": _set(("format",), "placer.plan/v2"),
    "no stages": _set(("stages",), []),
    "stages missing": _set(("stages",), _DELETE),
    "stage without devices": _set(("stages", 0, "devices"), []),
    "stage device missing": _set(("stages", 0, "devices"), _DELETE),
    "op not a string": _set(("stages", 0, "ops", 0), 7),
    "stage unknown key": _set(("stages", 0, "replicas"), 2),
    "bad status": _set(("status",), "great"),
    "bad schedule": _set(("schedule",), "zb"),
    "zero micro-batches": _set(("micro_batches",), 0),
    "recompute string": _set(("recompute",), "no"),
    "negative claim": _set(("claimed_objective_s",), -1),
    "order not arrays": _set(("order",), {"gpu0": "fc1"}),
    "unknown key": _set(("stagez",), []),
}

PROBLEM_BREAKS = {
    "bad objective": _set(("objective",), "speed"),
    "unknown key": _set(("objectiv",), "latency"),
    "unknown setting": _set(("settings", "micro_batch"), 4),
    "zero micro-batches": _set(("settings", "micro_batches"), [0]),
    "empty micro-batches": _set(("settings", "micro_batches"), []),
    "bad schedule": _set(("settings", "schedule"), "zb"),
    "bad pass": _set(("settings", "pass"), "backward"),
    "headroom one": _set(("settings", "memory_headroom"), 1.0),
    "stages zero": _set(("settings", "stages"), 0),
    "time limit zero": _set(("settings", "time_limit_s"), 0),
    "seed negative": _set(("settings", "seed"), -1),
    "pin bool": _set(("settings", "pinned", "fc1"), True),
    "cap key": _set(("settings", "stage_memory_caps_bytes"), {"first": 1}),
    "recompute int": _set(("settings", "recompute"), 1),
}


def _loads_graph(doc: Any) -> None:
    graph_from_document(doc)


def _loads_problem(doc: Any) -> None:
    graph = graph_from_document(_graph_doc())
    topo = topology_from_document(_topo_doc())
    problem_from_spec(graph, topo, doc)


CASES = [
    ("opgraph", _graph_doc, _loads_graph, GRAPH_BREAKS),
    ("topology", _topo_doc, topology_from_document, TOPOLOGY_BREAKS),
    ("plan", _plan_doc, plan_from_document, PLAN_BREAKS),
    ("problem", _problem_doc, _loads_problem, PROBLEM_BREAKS),
]


@pytest.mark.parametrize(("schema", "base", "load", "label"), [
    (schema, base, load, label) for schema, base, load, breaks in CASES for label in breaks
], ids=lambda v: v if isinstance(v, str) else "")
def test_structural_rejections_agree(schema: str, base: Callable[[], dict[str, Any]],
                                     load: Callable[[Any], Any], label: str) -> None:
    breaks = dict(CASES[[c[0] for c in CASES].index(schema)][3])
    doc = copy.deepcopy(base())
    assert schema_ok(schema, doc)
    load(copy.deepcopy(doc))
    breaks[label](doc)
    with pytest.raises(InvalidInput):
        load(copy.deepcopy(doc))
    assert not schema_ok(schema, doc), f"schema accepts what the loader rejects: {label}"


@settings(max_examples=examples(30), deadline=None)
@given(graph=dag_graphs(max_ops=8), topo=topologies(max_devices=5))
def test_random_documents_validate(graph: OpGraph, topo: Topology) -> None:
    validator("opgraph").validate(json.loads(json.dumps(graph.to_document())))
    validator("topology").validate(json.loads(json.dumps(topo.to_document())))
