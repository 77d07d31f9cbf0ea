"""PipeDream ``graph.txt`` and Piper JSON importers, tested on every file in shared/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solvers.model.errors import InvalidGraph
from solvers.model.graph import graph_from_document
from solvers.model.importers import import_pipedream, import_piper

_ROOT = Path(__file__).resolve().parents[3]  # the repository root
DATA = next((p for p in (_ROOT / "shared" / "data", _ROOT.parent / "shared" / "data") if p.is_dir()),
            _ROOT / "shared" / "data")
PIPEDREAM = sorted((DATA / "pipedream" / "profiles").glob("*/graph.txt"))
PIPER = sorted((DATA / "piper").glob("*.json"))
pytestmark = pytest.mark.skipif(not PIPEDREAM, reason="shared/data not present")


def test_the_data_folder_has_all_files() -> None:
    assert len(PIPEDREAM) == 14 and len(PIPER) == 3


@pytest.mark.parametrize("path", PIPEDREAM, ids=lambda p: p.parent.name)
def test_every_pipedream_profile_loads_and_validates(path: Path) -> None:
    name = path.parent.name
    text = path.read_text()
    g = import_pipedream(text, name)
    assert graph_from_document(g.to_document()).digest == g.digest
    full = import_pipedream(text, name, keep_inputs=True)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert full.n_ops == sum(1 for ln in lines if not ln.startswith("\t"))
    assert len(full.edges) == sum(1 for ln in lines if ln.startswith("\t"))
    assert not any(n.op.startswith("Input") for n in g.nodes if not g.pred[g.index[n.id]])
    assert g.profiled_batch_size == (64 if "gnmt" in name else 128)


@pytest.mark.parametrize(("name", "ops", "edges", "full_ops", "full_edges"), [
    ("alexnet", 22, 22, 23, 23), ("resnet50", 176, 192, 177, 193), ("gnmt", 37, 46, 48, 58),
    ("gnmt_large", 77, 102, 96, 122), ("nasnetalarge", 1250, 1467, 1251, 1468),
])
def test_pipedream_counts(name: str, ops: int, edges: int, full_ops: int, full_edges: int) -> None:
    text = (DATA / "pipedream" / "profiles" / name / "graph.txt").read_text()
    g = import_pipedream(text, name)
    full = import_pipedream(text, name, keep_inputs=True)
    assert (g.n_ops, len(g.edges), full.n_ops, len(full.edges)) == (ops, edges, full_ops, full_edges)


def test_pipedream_units_and_alexnet_input_dropped() -> None:
    text = (DATA / "pipedream" / "profiles" / "alexnet" / "graph.txt").read_text()
    g = import_pipedream(text, "alexnet")
    assert "node1" not in g.index and g.attrs["dropped"] == ["node1"]
    full = import_pipedream(text, "alexnet", keep_inputs=True)
    assert full.nodes[full.index["node1"]].fwd_s == pytest.approx(0.635902)  # 635.902 ms
    assert g.fwd_s.sum() < 0.1


SAMPLE = """\
node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=0.0, parameter_size=0.000
node2 -- LSTM(2048, 1024) -- forward_compute_time=3.190, backward_compute_time=5.348, activation_size=[600.0; 20.0; 30.0], parameter_size=64.000
node3 -- __getitem__(1) -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=20.0, parameter_size=0.000
node4 -- __getitem__(0) -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=600.0, parameter_size=0.000
node5 -- Linear(1024, 10) -- forward_compute_time=1.5, backward_compute_time=2.5, activation_size=40.0, parameter_size=41000.0
\tnode1 -- node2
\tnode2 -- node3
\tnode2 -- node4
\tnode4 -- node5
"""


def test_multi_output_getitem_edges_and_sink_dropping() -> None:
    g = import_pipedream(SAMPLE, "toy", profiled_batch_size=16)
    assert sorted(g.index) == ["node2", "node4", "node5"]  # Input source and __getitem__ sink dropped
    lstm = g.nodes[g.index["node2"]]
    assert lstm.op == "LSTM" and lstm.act_bytes == 650.0 and lstm.fwd_s == pytest.approx(3.19e-3)
    assert lstm.attrs == {"module": "LSTM(2048, 1024)"}
    sizes = {(e.src, e.dst): e.bytes for e in g.edges}
    assert sizes == {("node2", "node4"): 600.0, ("node4", "node5"): 600.0}
    full = import_pipedream(SAMPLE, "toy", keep_inputs=True)
    assert {(e.src, e.dst): e.bytes for e in full.edges}[("node2", "node3")] == 20.0
    assert g.profiled_batch_size == 16


@pytest.mark.parametrize(("bad", "line", "what"), [
    (SAMPLE.replace("node3 -- __getitem__(1) -- ", "node3 __getitem__(1) -- "), 3, "expected 'id -- description"),
    (SAMPLE.replace("forward_compute_time=1.5", "forward_compute_time=fast"), 5, "not a number"),
    (SAMPLE.replace("forward_compute_time=1.5", "forward_compute_time=-1.5"), 5, ">= 0"),
    (SAMPLE.replace("forward_compute_time=1.5", "forward_compute_time=nan"), 5, "finite"),
    (SAMPLE.replace(", parameter_size=41000.0", ""), 5, "lacks parameter_size"),
    (SAMPLE.replace("\tnode4 -- node5", "\tnode4 -- node9"), 9, "unknown node 'node9'"),
    (SAMPLE.replace("\tnode4 -- node5", "\tnode4"), 9, "expected an edge"),
    (SAMPLE + SAMPLE.splitlines()[1] + "\n", 10, "duplicate node 'node2'"),
])
def test_pipedream_errors_name_the_line(bad: str, line: int, what: str) -> None:
    with pytest.raises(InvalidGraph) as info:
        import_pipedream(bad, "toy")
    assert f"line {line}" in info.value.message and what in info.value.message


def test_pipedream_cycle_and_empty() -> None:
    with pytest.raises(InvalidGraph, match="cycle"):
        import_pipedream(SAMPLE + "\tnode5 -- node2\n", "toy")
    with pytest.raises(InvalidGraph, match="no nodes"):
        import_pipedream("\n\n", "toy")


@pytest.mark.parametrize(("name", "ops", "edges", "batch", "unit"), [
    ("bert32a100", 37, 67, 1, 1.0), ("gnmt", 78, 104, 64, 1e-3), ("resnet", 177, 193, 128, 1e-3),
])
def test_every_piper_input_loads(name: str, ops: int, edges: int, batch: int, unit: float) -> None:
    doc = json.loads((DATA / "piper" / f"{name}.json").read_text())
    g = import_piper(doc, name)
    assert (g.n_ops, len(g.edges), g.profiled_batch_size, g.attrs["time_unit_s"]) == (ops, edges, batch, unit)
    assert graph_from_document(g.to_document()).digest == g.digest
    assert g.attrs["bandwidth_Bps"] == doc["bandwidth"] and g.attrs["max_devices"] == doc["maxDevices"]
    node = doc["nodes"][5]
    vanilla = next(t for t in node["TMPCs"]["1"] if t["id"] == "vanilla")
    mine = g.nodes[g.index[str(node["id"])]]
    assert mine.fwd_s + mine.bwd_s == pytest.approx(vanilla["timePerSample"] * unit)
    assert mine.bwd_s == pytest.approx(2 * mine.fwd_s)
    assert mine.param_bytes == vanilla["parameterSize"] and mine.act_bytes == vanilla["memoryUsageA"]


def test_piper_resnet_matches_the_pipedream_profile() -> None:
    """The bundled Piper resnet input is PipeDream's resnet50 profile: fwd + bwd of node72 agree."""
    piper = import_piper(json.loads((DATA / "piper" / "resnet.json").read_text()), "resnet")
    pipedream = import_pipedream((DATA / "pipedream" / "profiles" / "resnet50" / "graph.txt").read_text(), "resnet50")
    relu = pipedream.nodes[pipedream.index["node72"]]
    mine = next(n for n in piper.nodes if n.op == "node72")
    assert mine.fwd_s + mine.bwd_s == pytest.approx(relu.fwd_s + relu.bwd_s)


def test_piper_explicit_units_and_errors() -> None:
    doc = json.loads((DATA / "piper" / "gnmt.json").read_text())
    g = import_piper(doc, "gnmt", time_unit_s=1.0, profiled_batch_size=2)
    assert g.attrs["time_unit_s"] == 1.0 and g.profiled_batch_size == 2
    bad = json.loads(json.dumps(doc))
    bad["nodes"][3]["TMPCs"]["1"][0]["timePerSample"] = -1
    with pytest.raises(InvalidGraph) as info:
        import_piper(bad, "gnmt")
    assert info.value.field == "nodes[3].TMPCs.1.timePerSample"
    bad = json.loads(json.dumps(doc))
    del bad["nodes"][2]["TMPCs"]["1"]
    with pytest.raises(InvalidGraph, match=r"nodes\[2\]\.TMPCs\.1"):
        import_piper(bad, "gnmt")
    bad = json.loads(json.dumps(doc))
    bad["edges"][4]["destId"] = 99999
    with pytest.raises(InvalidGraph, match="unknown node '99999'"):
        import_piper(bad, "gnmt")
    with pytest.raises(InvalidGraph, match="nodes"):
        import_piper({"edges": []}, "x")
