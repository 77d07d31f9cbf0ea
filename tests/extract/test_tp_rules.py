"""The tensor-parallel rules (solvers.model.tp_rules) on real graphs of every ``--example`` transformer."""

from __future__ import annotations

import re
from typing import Any

import pytest

from extract.build import example_source
from extract.extract import extract
from solvers.model.graph import OpGraph
from solvers.model.tp_rules import (
    COLUMN,
    REPLICATED,
    ROW,
    SEQUENCE,
    SHARDED,
    VOCAB_EMBEDDING,
    VOCAB_HEAD,
    rule_kind,
    split_layout,
)

BATCH, SEQ, HIDDEN = 2, 16, 64
PARAMS: dict[str, dict[str, Any]] = {
    "gpt2": {"layers": 2, "hidden": HIDDEN, "heads": 4, "seq": SEQ, "vocab": 1000},
    "bert": {"layers": 2, "hidden": HIDDEN, "heads": 4, "seq": SEQ, "vocab": 1000},
    "llama": {"layers": 2, "hidden": HIDDEN, "heads": 4, "intermediate": 128, "seq": SEQ, "vocab": 500},
    "t5": {"layers": 1, "hidden": HIDDEN, "heads": 4, "intermediate": 128, "seq": SEQ, "vocab": 500},
    "vit": {"layers": 2, "hidden": HIDDEN, "heads": 4, "image": 32, "patch": 8},
    "swin": {"depths": (1, 1), "heads": (2, 4), "hidden": 32, "image": 32, "window": 4},
}
ATT = "(SelfAttention|EncDecAttention)"
# module paths (layer indices as N) of the column- and row-parallel ops of each example
EXPECTED: dict[str, dict[str, set[str]]] = {
    "gpt2": {COLUMN: {"transformer.h.N.attn.c_attn", "transformer.h.N.mlp.c_fc"},
             ROW: {"transformer.h.N.attn.c_proj", "transformer.h.N.mlp.c_proj"},
             VOCAB_EMBEDDING: {"transformer.wte"}, VOCAB_HEAD: {"lm_head"}},
    "bert": {COLUMN: {f"encoder.layer.N.attention.self.{x}" for x in ("query", "key", "value")}
             | {"encoder.layer.N.intermediate.dense"},
             ROW: {"encoder.layer.N.attention.output.dense", "encoder.layer.N.output.dense"},
             VOCAB_EMBEDDING: {"embeddings.word_embeddings"}, VOCAB_HEAD: set()},
    "llama": {COLUMN: {f"layers.N.self_attn.{x}_proj" for x in "qkv"} | {"layers.N.mlp.gate_proj", "layers.N.mlp.up_proj"},
              ROW: {"layers.N.self_attn.o_proj", "layers.N.mlp.down_proj"},
              VOCAB_EMBEDDING: {"embed_tokens"}, VOCAB_HEAD: set()},
    "t5": {COLUMN: {f"{side}.block.N.layer.N.SelfAttention.{x}" for side in ("encoder", "decoder") for x in "qkv"}
           | {f"decoder.block.N.layer.N.EncDecAttention.{x}" for x in "qkv"}
           | {f"{side}.block.N.layer.N.DenseReluDense.wi" for side in ("encoder", "decoder")},
           ROW: {f"{side}.block.N.layer.N.{m}" for side in ("encoder", "decoder") for m in ("SelfAttention.o",
                                                                                           "DenseReluDense.wo")}
           | {"decoder.block.N.layer.N.EncDecAttention.o"},
           VOCAB_EMBEDDING: {"encoder.embed_tokens", "decoder.embed_tokens"}, VOCAB_HEAD: set()},
    "vit": {COLUMN: {f"layers.N.attention.{x}_proj" for x in "qkv"} | {"layers.N.mlp.fc1"},
            ROW: {"layers.N.attention.o_proj", "layers.N.mlp.fc2"}, VOCAB_EMBEDDING: set(), VOCAB_HEAD: set()},
    "swin": {COLUMN: {f"encoder.layers.N.blocks.N.attention.{x}_proj" for x in "qkv"} | {"encoder.layers.N.blocks.N.mlp.fc1"},
             ROW: {"encoder.layers.N.blocks.N.attention.o_proj", "encoder.layers.N.blocks.N.mlp.fc2"},
             VOCAB_EMBEDDING: set(), VOCAB_HEAD: set()},
}


@pytest.fixture(scope="module", params=sorted(PARAMS))
def example(request: pytest.FixtureRequest) -> tuple[str, OpGraph]:
    name = str(request.param)
    return name, extract(example_source(name, PARAMS[name], BATCH))


def _paths(graph: OpGraph, kinds: tuple[str, ...], kind: str) -> set[str]:
    return {re.sub(r"\.\d+(?=\.|$)", ".N", node.layer or "") for node, k in zip(graph.nodes, kinds, strict=True)
            if k == kind}


def test_rules_find_every_pair_embedding_and_head(example: tuple[str, OpGraph]) -> None:
    name, graph = example
    kinds = split_layout(graph).kinds
    for kind, paths in EXPECTED[name].items():
        assert _paths(graph, kinds, kind) == paths, (name, kind)
    matmuls = [(n.layer, k) for n, k in zip(graph.nodes, kinds, strict=True)
               if re.match(r"aten\.(linear|addmm|mm)\.", n.op)]
    assert all(k in (COLUMN, ROW, VOCAB_HEAD) or re.search(r"pooler|downsample", layer or "")
               for layer, k in matmuls), name  # only the pooler and Swin's patch merging stay replicated


def test_ops_between_a_pair_run_on_the_shard(example: tuple[str, OpGraph]) -> None:
    name, graph = example
    kinds = split_layout(graph).kinds
    for node, kind in zip(graph.nodes, kinds, strict=True):
        if node.op.startswith("aten.scaled_dot_product_attention"):
            assert kind == SHARDED, (name, node.id)  # attention per head
        if re.match(r"aten\.(gelu|silu|relu|tanh)\.", node.op) and "pooler" not in (node.layer or ""):
            assert kind == SHARDED, (name, node.id)  # the MLP's activation between up and down
        if node.layer is None or re.search(r"(^|\.)(embeddings?|rotary_emb)$|Model$", node.layer):
            assert kind in (REPLICATED, SEQUENCE, VOCAB_EMBEDDING), (name, node.id)
    norms = [k for n, k in zip(graph.nodes, kinds, strict=True) if re.search(r"Norm$", str((n.attrs or {}).get("module")))]
    assert norms and set(norms) == {SEQUENCE}, name


def test_collective_bytes_are_the_hidden_activation(example: tuple[str, OpGraph]) -> None:
    name, graph = example
    layout = split_layout(graph)
    rows = [v for v, k in enumerate(layout.kinds) if k == ROW]
    columns = [v for v, k in enumerate(layout.kinds) if k == COLUMN]
    # one forward reduction per row; one backward reduction per distinct input of a pair's columns
    assert all(layout.output_reduce_bytes[v] > 0 for v in rows)
    assert sum(layout.input_gather_bytes[v] > 0 for v in columns) == len(rows) + (name == "t5")
    if name in ("gpt2", "bert", "llama", "t5"):
        hidden_bytes = BATCH * SEQ * HIDDEN * 4  # float32 [batch, seq, hidden]
        assert set(layout.output_reduce_bytes[rows].tolist()) == {hidden_bytes}
        assert set(layout.input_gather_bytes[columns].tolist()) <= {0.0, hidden_bytes}


def test_rules_are_first_match_and_default_to_replicated() -> None:
    assert rule_kind("encoder.layer.0.attention.output.dense", "aten.linear.default", "Linear") == ROW
    assert rule_kind("encoder.layer.0.output.dense", "aten.linear.default", "Linear") == ROW
    assert rule_kind("encoder.layer.0.attention.output.dense", "aten.view.default", "Linear") == REPLICATED
    assert rule_kind("pooler.dense", "aten.linear.default", "Linear") == REPLICATED
    assert rule_kind(None, "aten.dropout.default", None) == SEQUENCE
    assert rule_kind("h.0.ln_1", "aten.layer_norm.default", "LayerNorm") == SEQUENCE
