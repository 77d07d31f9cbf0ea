"""placer extract: valid graphs, exact parameter bytes, stable digests, solvable, rebuildable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from cli import main
from extract.build import build, example_source
from extract.estimate import device_spec
from extract.export import export_model, fx_nodes_by_id
from extract.extract import extract
from extract.granularity import merge_modules
from solvers.cost.backward_split import weight_grad_fraction
from solvers.model.documents import load_graph
from solvers.model.graph import OpGraph, graph_from_document

TINY: dict[str, dict[str, Any]] = {
    "bert": {"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "vocab": 1000},
    "gpt2": {"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "vocab": 1000},
    "vit": {"layers": 2, "hidden": 64, "heads": 4, "image": 32, "patch": 8},
    "resnet": {"depths": "1,1", "hidden": 16, "image": 32},
}


@pytest.fixture(scope="module")
def bert_tiny() -> OpGraph:
    """The tiny BERT at batch 2, extracted once for the tests that only read it."""
    return extract(example_source("bert", TINY["bert"], 2))


def real_param_bytes(source: dict[str, Any]) -> int:
    """Parameter bytes of the real (CPU) model, tied parameters once."""
    module = build(source, device="cpu").module
    return sum(p.numel() * p.element_size() for p in module.parameters())


@pytest.mark.parametrize("name", sorted(TINY))
def test_extract_example(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.json"
    params = [f"{k}={v}" for k, v in TINY[name].items()]
    assert main(["extract", "--example", name, "--param", *params, "--batch", "2", "-o", str(out)]) == 0
    graph = graph_from_document(json.loads(out.read_text()))
    source = graph.attrs["source"]
    assert graph.param_bytes.sum() == real_param_bytes(source) == graph.attrs["model_param_bytes"]
    assert graph.profiled_batch_size == 2
    assert (graph.fwd_s > 0).any() and (graph.bwd_s > 0).any() and graph.act_bytes.sum() > 0
    assert graph.attrs["versions"]["torch"] == torch.__version__
    again = extract(source)
    assert again.digest == graph.digest
    # the launcher's path: rebuild from attrs, re-export, find every op id as an FX node
    program = export_model(build(source, device="meta"))
    assert list(fx_nodes_by_id(program)) == graph.ids
    assert set(graph.ids) <= {n.name for n in program.module().graph.nodes}  # the unlifted module too


@pytest.mark.parametrize(("name", "params"), [
    ("llama", {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "seq": 16, "vocab": 500}),
    ("t5", {"layers": 1, "hidden": 64, "heads": 4, "intermediate": 128, "seq": 16, "vocab": 500}),
    ("swin", {"depths": (1, 1), "heads": (2, 4), "hidden": 32, "image": 32, "window": 4}),
])
def test_other_examples(name: str, params: dict[str, Any]) -> None:
    source = example_source(name, params, 2)
    graph = extract(source)
    assert graph.param_bytes.sum() == real_param_bytes(source)
    assert not [n.id for n in graph.nodes if (n.attrs or {}).get("not_counted")]
    assert graph.n_ops > 20 and (graph.bwd_s > 0).any() and graph.act_bytes.sum() > 0


def test_gpt2_tied_embedding_counted_once() -> None:
    source = example_source("gpt2", TINY["gpt2"], 1)
    graph = extract(source)
    module = build(source, device="meta").module
    assert module.transformer.wte.weight is module.lm_head.weight  # type: ignore[union-attr]
    holders = [n for n in graph.nodes if n.param_bytes == 1000 * 64 * 4]
    assert len(holders) == 1 and holders[0].op == "aten.embedding.default"
    head = [n for n in graph.nodes if n.layer == "lm_head"]
    assert len(head) == 1 and head[0].op == "aten.linear.default" and head[0].param_bytes == 0


def test_estimate_uses_the_flop_counter(bert_tiny: OpGraph) -> None:
    graph = bert_tiny
    linear = [n for n in graph.nodes if n.op == "aten.linear.default" and n.layer == "encoder.layer.0.intermediate.dense"]
    assert len(linear) == 1
    node = linear[0]
    assert node.attrs is not None
    assert node.attrs["flops_fwd"] == 2 * (2 * 16) * 64 * 256  # 2 * tokens * in * out
    assert node.attrs["flops_bwd"] == 2 * node.attrs["flops_fwd"]  # input and weight gradients
    assert node.attrs["flops_bwd_weight"] == node.attrs["flops_fwd"]  # dW = X^T dY: one GEMM of the forward's size
    slower = extract(example_source("bert", TINY["bert"], 2), device_kind="V100")
    assert slower.fwd_s.sum() > graph.fwd_s.sum()


def test_extract_is_solvable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g, t, p = tmp_path / "g.json", tmp_path / "t.json", tmp_path / "p.json"
    assert main(["extract", "--example", "bert", "--param", *[f"{k}={v}" for k, v in TINY["bert"].items()],
                 "-o", str(g)]) == 0
    assert main(["topology", "generate", "hierarchical", "-o", str(t)]) == 0
    assert main(["solve", "--solver", "even", "--graph", str(g), "--topology", str(t), "--stages", "2",
                 "-o", str(p), "--quiet"]) == 0
    assert main(["simulate", "--graph", str(g), "--topology", str(t), "--plan", str(p), "--json"]) == 0


def test_module_granularity_keeps_totals(bert_tiny: OpGraph, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    graph = bert_tiny
    merged = merge_modules(graph, 3)
    assert {"encoder.layer.0", "encoder.layer.1"} <= set(merged.ids)
    assert merged.nodes[merged.index["encoder.layer.0"]].op == "BertLayer"
    assert merged.param_bytes.sum() == graph.param_bytes.sum()
    assert merged.fwd_s.sum() == pytest.approx(graph.fwd_s.sum())
    assert merged.bwd_weight_s.sum() == pytest.approx(graph.bwd_weight_s.sum())  # every member records its split
    assert merged.bwd_input_s.sum() == pytest.approx(graph.bwd_input_s.sum())
    members = [op for n in merged.nodes for op in (n.attrs or {})["ops"]]
    assert members == graph.ids  # every op in exactly one module, in order
    assert merged.edges and len(merged.topo_order) == merged.n_ops
    out = tmp_path / "m.json"
    assert main(["extract", "--example", "bert", "--param", "layers=2", "hidden=64", "heads=4", "seq=16",
                 "vocab=1000", "--granularity", "module:3", "-o", str(out)]) == 0
    assert load_graph(out).ids == merged.ids


def test_spec_with_inputs_and_module_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["extract", "tests.extract.models:mlp", "--batch", "5", "-o", str(a)]) == 0
    graph = load_graph(a)
    assert graph.profiled_batch_size == 5 and graph.param_bytes.sum() == (16 * 32 + 32 + 32 * 4 + 4) * 4
    assert graph.nodes[0].op == "input" and graph.attrs["source"]["spec"] == "tests.extract.models:mlp"
    assert main(["extract", "tests.extract.models:mlp_module_only", "--input", "x=7x16", "-o", str(b)]) == 0
    assert load_graph(b).profiled_batch_size == 7


def test_extract_records_the_backward_split_by_the_roofline() -> None:
    graph = extract(example_source("bert", TINY["bert"], 2))
    spec = device_spec("H100")
    peak = spec.fp32_flops  # the example computes in float32
    for node in graph.nodes:
        assert node.attrs is not None and not node.attrs.get("not_counted")
        assert node.bwd_input_s is not None and node.bwd_weight_s is not None
        attrs = node.attrs
        assert node.bwd_weight_s == max(attrs["flops_bwd_weight"] / peak, attrs["bytes_bwd_weight"] / spec.bandwidth_Bps)
        assert node.bwd_input_s == pytest.approx(max((attrs["flops_bwd"] - attrs["flops_bwd_weight"]) / peak,
                                                     (attrs["bytes_bwd"] - attrs["bytes_bwd_weight"]) / spec.bandwidth_Bps))
        if node.param_bytes == 0:
            assert node.bwd_weight_s == 0.0
    dense = next(n for n in graph.nodes if n.layer == "encoder.layer.0.intermediate.dense" and n.param_bytes)
    assert dense.bwd_weight_s is not None and dense.bwd_weight_s > 0
    share = weight_grad_fraction(graph)[graph.index[dense.id]]
    assert share == dense.bwd_weight_s / (dense.bwd_input_s + dense.bwd_weight_s)
    assert graph_from_document(graph.to_document()).nodes[graph.index[dense.id]] == dense
