"""Graph generators: structure, FLOP-derived numbers, sizes, determinism, errors."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.generate import GRAPH_KINDS, generate_graph
from solvers.generate.devices import DEVICES, device_spec
from solvers.model.errors import InvalidInput
from solvers.model.graph import graph_from_document
from tests.strategies import examples


@pytest.mark.parametrize("kind", sorted(GRAPH_KINDS))
def test_every_kind_generates_a_valid_round_tripping_graph(kind: str) -> None:
    graph = generate_graph(kind)
    assert graph_from_document(graph.to_document()).digest == graph.digest
    assert (graph.fwd_s > 0).all()
    func = GRAPH_KINDS[kind]
    assert func.__doc__
    for name, param in inspect.signature(func).parameters.items():
        assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is not inspect.Parameter.empty, name


def test_bert_op_level_structure_and_numbers() -> None:
    g = generate_graph("transformer", layers=2, hidden=64, heads=4, seq_len=16, micro_batch=2, vocab=100)
    ops = {n.op for n in g.nodes}
    assert {"aten.addmm", "aten.bmm", "aten._softmax", "aten.gelu", "aten.native_layer_norm", "aten.add",
            "aten.embedding", "aten.mm"} <= ops
    per_layer = [n for n in g.nodes if n.layer and n.layer.startswith("encoder.layer.1")]
    assert len(per_layer) == 12
    qkv = g.nodes[g.index["encoder.layer.0.attention.self.qkv"]]
    assert qkv.layer == "encoder.layer.0.attention.self"
    assert qkv.param_bytes == (3 * 64 * 64 + 3 * 64) * 2
    assert qkv.bwd_s == pytest.approx(2 * qkv.fwd_s)
    assert qkv.act_bytes == 2 * 16 * 3 * 64 * 2
    edge = g.edges[next(i for i, e in enumerate(g.edges) if e.src == qkv.id and e.dst.endswith("scores"))]
    assert edge.bytes == 2 * 16 * 64 * 2 * 2  # q and k slices
    assert g.profiled_batch_size == 2


def test_matmul_time_is_flop_derived() -> None:
    big = generate_graph("transformer", layers=1, hidden=4096, heads=32, seq_len=2048, micro_batch=4, device="A100")
    up = big.nodes[big.index["encoder.layer.0.intermediate.fc_up"]]
    t = 4 * 2048
    flops = 2 * t * 4096 * 4 * 4096
    assert up.fwd_s == pytest.approx(flops / (device_spec("A100").fp16_flops * 0.5))
    h100 = generate_graph("transformer", layers=1, hidden=4096, heads=32, seq_len=2048, micro_batch=4, device="H100")
    assert h100.nodes[h100.index[up.id]].fwd_s < up.fwd_s


def test_gpt_is_causal_pre_ln() -> None:
    g = generate_graph("transformer", causal=True, layers=3, hidden=64, heads=2, seq_len=8, vocab=50)
    assert "transformer.h.2.ln_1" in g.index and "transformer.ln_f" in g.index
    assert g.attrs["model"] == "gpt"


def test_granularities() -> None:
    kw = {"layers": 4, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 100}
    op = generate_graph("transformer", **kw)
    head = generate_graph("transformer", granularity="head", **kw)
    layer = generate_graph("transformer", granularity="layer", **kw)
    assert head.n_ops == op.n_ops + 4 * (3 * 4 - 3 + 1)
    assert [n.id for n in layer.nodes] == ["embeddings", *(f"encoder.layer.{i}" for i in range(4)), "cls", "loss"]
    assert layer.fwd_s.sum() == pytest.approx(op.fwd_s.sum())
    assert layer.param_bytes.sum() == pytest.approx(op.param_bytes.sum())


def test_transformer_reaches_tens_of_thousands_of_ops() -> None:
    g = generate_graph("transformer", layers=256, hidden=256, heads=32, seq_len=32, granularity="head")
    assert g.n_ops > 20_000


def test_resnet_parameter_counts() -> None:
    r50 = generate_graph("cnn")
    assert r50.param_bytes.sum() / 4 == pytest.approx(25.5e6, rel=0.02)
    r152 = generate_graph("cnn", blocks="3,8,36,3")
    assert r152.param_bytes.sum() / 4 == pytest.approx(60.2e6, rel=0.02)  # Parmesan Table VII: 60M
    ops = {n.op for n in r50.nodes}
    assert {"aten.convolution", "aten.batch_norm", "aten.relu", "aten.add", "aten.max_pool2d"} <= ops
    conv = r50.nodes[r50.index["layer1.0.conv2"]]
    assert conv.layer == "layer1.0" and conv.param_bytes == 64 * 64 * 9 * 4


def test_semantic_fpn_has_skip_connections() -> None:
    g = generate_graph("cnn", fpn=True, image_size=512, num_classes=150, micro_batch=2)
    assert g.param_bytes.sum() / 4 == pytest.approx(28.5e6, rel=0.05)  # Parmesan Table VII: about 30M
    lateral_inputs = [e.src for e in g.edges if e.dst.startswith("neck.lateral_convs")]
    assert len(lateral_inputs) == 4


def test_random_dag_sizes_and_determinism() -> None:
    small = generate_graph("random_dag", n_ops=10, seed=1)
    assert small.n_ops == 10
    assert generate_graph("random_dag", n_ops=300, seed=7).digest == generate_graph("random_dag", n_ops=300,
                                                                                    seed=7).digest
    assert generate_graph("random_dag", n_ops=300, seed=7).digest != generate_graph("random_dag", n_ops=300,
                                                                                    seed=8).digest
    g = generate_graph("random_dag", n_ops=2000, width=10, edge_prob=0.2, seed=3)
    assert all(len(p) >= 1 for i, p in enumerate(g.pred) if g.nodes[i].layer != "block.0")
    for e in g.edges[:50]:
        assert e.bytes == g.nodes[g.index[e.src]].act_bytes


def test_graph_parameter_errors() -> None:
    with pytest.raises(InvalidInput, match="unknown graph kind 'lstm'"):
        generate_graph("lstm")
    with pytest.raises(InvalidInput, match="unknown parameter 'depth'"):
        generate_graph("cnn", depth=50)
    with pytest.raises(InvalidInput, match="must be a multiple of 'heads'"):
        generate_graph("transformer", hidden=100, heads=12)
    with pytest.raises(InvalidInput, match="granularity"):
        generate_graph("transformer", granularity="block")
    with pytest.raises(InvalidInput, match="unknown device kind"):
        generate_graph("cnn", device="TPU")
    with pytest.raises(InvalidInput, match="'edge_prob' must be in"):
        generate_graph("random_dag", edge_prob=2.0)
    with pytest.raises(InvalidInput, match="blocks"):
        generate_graph("cnn", blocks="3,x")
    assert "V100" in DEVICES


def test_random_dag_range_order_is_checked() -> None:
    with pytest.raises(InvalidInput, match="'fwd_min_s' must be <= 'fwd_max_s'"):
        generate_graph("random_dag", fwd_min_s=1.0, fwd_max_s=0.5)
    with pytest.raises(InvalidInput, match="'bytes_min' must be <= 'bytes_max'"):
        generate_graph("random_dag", bytes_min=1e9)


def test_efficiency_and_dtype_are_checked() -> None:
    with pytest.raises(InvalidInput, match="'compute_efficiency' is a fraction"):
        generate_graph("transformer", compute_efficiency=1.5)
    with pytest.raises(InvalidInput, match="'dtype_bytes' must be one of 2, 4"):
        generate_graph("cnn", dtype_bytes=8)
    fp32 = generate_graph("transformer", layers=1, dtype_bytes=4)
    fp16 = generate_graph("transformer", layers=1, dtype_bytes=2)
    assert fp32.param_bytes.sum() == 2 * fp16.param_bytes.sum()
    assert fp32.fwd_s.sum() > fp16.fwd_s.sum()


@settings(max_examples=examples(25), deadline=None)
@given(layers=st.integers(1, 4), heads=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([4, 8]),
       seq_len=st.integers(1, 32), micro_batch=st.integers(1, 4), causal=st.booleans(),
       granularity=st.sampled_from(["op", "head", "layer"]), dtype_bytes=st.sampled_from([2, 4]))
def test_transformer_property(layers: int, heads: int, head_dim: int, seq_len: int, micro_batch: int,
                              causal: bool, granularity: str, dtype_bytes: int) -> None:
    g = generate_graph("transformer", layers=layers, hidden=heads * head_dim, heads=heads, seq_len=seq_len,
                       micro_batch=micro_batch, vocab=64, causal=causal, granularity=granularity,
                       dtype_bytes=dtype_bytes)
    h = heads * head_dim
    per_layer = (12 * h * h + 13 * h) * dtype_bytes  # qkv, proj, ffn (ffn_mult 4), two layer norms
    embeddings = (64 * h + seq_len * h) * dtype_bytes + (0 if causal else 2 * h * dtype_bytes)
    head = 64 * h * dtype_bytes + (2 * h * dtype_bytes if causal else 0)
    assert g.param_bytes.sum() == pytest.approx(layers * per_layer + embeddings + head)
    assert sum(1 for p in g.pred if not p) == (1 if granularity == "layer" else 2)
    assert sum(1 for s in g.succ if not s) == 1


@settings(max_examples=examples(25), deadline=None)
@given(n_ops=st.integers(1, 400), width=st.integers(1, 12), edge_prob=st.floats(0, 1), max_skip=st.integers(1, 4),
       seed=st.integers(0, 2**31))
def test_random_dag_property(n_ops: int, width: int, edge_prob: float, max_skip: int, seed: int) -> None:
    g = generate_graph("random_dag", n_ops=n_ops, width=width, edge_prob=edge_prob, max_skip=max_skip, seed=seed)
    assert g.n_ops == n_ops
    assert (g.edge_src < g.edge_dst).all()  # layered: edges point forward in node order
    layer = [int((n.layer or "block.0").split(".")[1]) for n in g.nodes]
    assert all(0 < layer[d] - layer[s] <= max_skip for s, d in zip(g.edge_src.tolist(), g.edge_dst.tolist(),
                                                                       strict=True))
    assert all(g.pred[v] for v in range(n_ops) if layer[v] > 0)
    assert (g.fwd_s >= 1e-4 * (1 - 1e-9)).all() and (g.fwd_s <= 1e-2 * (1 + 1e-9)).all()
