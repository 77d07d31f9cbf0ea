"""placer profile on CPU: positive per-op times that add up to a whole training step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from cli import main
from extract.build import example_source
from extract.profile import profile
from solvers.model.documents import load_graph

SMALL = {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000}


@pytest.fixture
def one_thread() -> object:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # two cores shared with other work: one thread keeps the timings steady
    yield None
    torch.set_num_threads(before)


def test_profile_times_add_up(one_thread: object) -> None:
    graph = profile(example_source("bert", SMALL, 8), repeats=7, warmup=2)
    ops = [n for n in graph.nodes if n.op != "input"]
    assert all(n.fwd_s > 0 for n in ops)
    linears = [n for n in ops if n.op == "aten.linear.default"]
    assert linears and all(n.bwd_s > 0 for n in linears)
    assert all(n.times and n.times["cpu"].fwd_s == n.fwd_s for n in ops)
    step_s = graph.attrs["profile"]["step_s"]
    total = float(graph.fwd_s.sum() + graph.bwd_s.sum())
    assert abs(total - step_s) <= 0.3 * step_s, (total, step_s)
    assert max(n.mem_fwd_bytes for n in linears) >= 8 * 128 * 256 * 4  # a linear's output at least


def test_profile_measures_saved_activations_and_peaks(one_thread: object) -> None:
    params = {"layers": 2, "hidden": 64, "heads": 2, "seq": 32, "vocab": 100, "dropout": 0}
    graph = profile(example_source("gpt2", params, 2), repeats=1, warmup=1)
    assert set(graph.attrs["profile"]["memory"]) == {"act_bytes", "mem_fwd_bytes", "mem_bwd_bytes", "estimate"}
    ops = [n for n in graph.nodes if n.op != "input"]
    tanh = [n for n in ops if n.op == "aten.tanh.default"]  # GELU's tanh keeps its output: 2 x 32 x 256 floats
    assert tanh and all(n.act_bytes == 2 * 32 * 256 * 4 for n in tanh)
    assert all(n.act_bytes == 0 for n in ops if n.op == "aten.view.default")  # a view saves nothing new
    measured, counted = graph.act_bytes.sum(), sum(n.attrs["estimate_bytes"][0] for n in ops)
    assert 0.8 * counted <= measured <= 1.2 * counted, (measured, counted)
    # the peak inside an op holds at least its output; a linear's output is 2 x 32 x 64 floats at least
    linears = [n for n in ops if n.op in ("aten.addmm.default", "aten.linear.default")]
    assert linears and all(n.mem_fwd_bytes >= 2 * 32 * 64 * 4 for n in linears)


def test_profile_several_batches_feed_graph_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  one_thread: object) -> None:
    out = tmp_path / "p.json"
    params = ["layers=1", "hidden=64", "heads=4", "seq=16", "vocab=500"]
    assert main(["profile", "--example", "bert", "--param", *params, "--batch", "1", "2",
                 "--repeats", "2", "--warmup", "1", "-o", str(out)]) == 0
    one, two = load_graph(tmp_path / "p.b1.json"), load_graph(tmp_path / "p.b2.json")
    assert one.ids == two.ids and (one.profiled_batch_size, two.profiled_batch_size) == (1, 2)
    scaled = tmp_path / "s.json"
    assert main(["graph", "scale", "--profiles", str(tmp_path / "p.b1.json"), str(tmp_path / "p.b2.json"),
                 "--batch", "8", "-o", str(scaled)]) == 0
    assert load_graph(scaled).profiled_batch_size == 8


def test_profile_measures_the_input_and_weight_gradients_apart(one_thread: object) -> None:
    params = {"layers": 1, "hidden": 256, "heads": 4, "seq": 64, "vocab": 500, "dropout": 0}
    graph = profile(example_source("bert", params, 4), repeats=3, warmup=1)
    assert "backward_split" in graph.attrs["profile"]
    ops = [n for n in graph.nodes if n.op != "input"]
    for n in ops:
        assert n.bwd_input_s is not None and n.bwd_weight_s is not None
        assert n.bwd_input_s + n.bwd_weight_s == pytest.approx(n.bwd_s)
    linears = [n for n in ops if n.op == "aten.linear.default"]
    assert linears and all(n.attrs is not None and min(n.attrs["gradient_s"]) > 0 for n in linears)
    assert all(n.bwd_weight_s > 0 for n in linears if n.bwd_s > 0)
    free = [n for n in ops if "gradient_s" not in (n.attrs or {})]  # ops that read no parameter
    assert any(n.op == "aten.gelu.default" for n in free) and all(n.bwd_weight_s == 0 for n in free)
    embedding = next(n for n in ops if n.op == "aten.embedding.default")
    assert embedding.attrs is not None and embedding.attrs["gradient_s"][0] == 0.0  # token ids take no gradient
    assert embedding.bwd_weight_s == embedding.bwd_s


def test_an_op_whose_whole_backward_is_its_weight_gradient_keeps_a_non_negative_split() -> None:
    """A clean-clone CI run: an embedding's split came out as -1.7e-21 s input gradient, since
    ``b * g / (0 + g)`` can round above ``b``; the graph was then refused on load."""
    from extract.profile import StepProfile, _measured
    from solvers.model.graph import Node

    bwd, grad = 0.00021659939713061338, 4.2211657558271735e-05  # b - b * g / g < 0 in doubles
    assert bwd - bwd * grad / (0.0 + grad) < 0
    step = StepProfile()
    step.fwd_s["emb"], step.bwd_s["emb"] = 1e-4, bwd
    node = _measured(Node("emb", "aten.embedding.default", 0.0, 0.0, 8.0, 0.0, 0.0, 0.0), [step], "cpu", (0.0, grad))
    assert node.bwd_input_s == 0.0 and node.bwd_weight_s == bwd


@pytest.mark.parametrize("bwd, grad", [
    (0.00021659939713061338, 4.2211657558271735e-05),  # b * g / g rounds above b
    (5.8758999999998195e-05, 0.0001107279995267163),  # b * g / g rounds below b: a clean-clone CI run
])
def test_an_input_that_takes_no_gradient_leaves_the_whole_backward_to_the_weight(bwd: float, grad: float) -> None:
    from extract.profile import StepProfile, _measured
    from solvers.model.graph import Node

    step = StepProfile()
    step.fwd_s["emb"], step.bwd_s["emb"] = 1e-4, bwd
    node = _measured(Node("emb", "aten.embedding.default", 0.0, 0.0, 8.0, 0.0, 0.0, 0.0), [step], "cpu", (0.0, grad))
    assert node.bwd_input_s == 0.0 and node.bwd_weight_s == node.bwd_s == bwd


@given(st.floats(1e-9, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_the_split_is_non_negative_and_sums_to_the_backward(bwd: float, g_input: float, g_weight: float) -> None:
    from extract.profile import StepProfile, _measured
    from solvers.model.graph import Node

    assume(g_input + g_weight > 0)
    step = StepProfile()
    step.fwd_s["op"], step.bwd_s["op"] = 1e-4, bwd
    node = _measured(Node("op", "aten.linear.default", 0.0, 0.0, 8.0, 0.0, 0.0, 0.0), [step], "cpu",
                     (g_input, g_weight))
    assert node.bwd_input_s is not None and node.bwd_weight_s is not None
    assert node.bwd_input_s >= 0.0 and node.bwd_weight_s >= 0.0
    assert node.bwd_input_s + node.bwd_weight_s == pytest.approx(bwd, rel=1e-12)
    if g_input == 0.0:
        assert node.bwd_input_s == 0.0 and node.bwd_weight_s == bwd
    if g_weight == 0.0:
        assert node.bwd_weight_s == 0.0 and node.bwd_input_s == bwd


def test_profile_runs_a_model_with_batch_norm_buffers(one_thread: object) -> None:
    """ResNet's batch norm reads its running statistics: buffers that take no gradient. The
    gradient split must time only what the training step differentiates; marking the buffers
    as needing a gradient made ``native_batch_norm`` refuse and the whole profile fail."""
    params = {"depths": "1,1", "hidden": 8, "image": 32}
    graph = profile(example_source("resnet", params, 2), repeats=1, warmup=1)
    norms = [n for n in graph.nodes if n.op == "aten.batch_norm.default"]
    assert norms and all(n.attrs is not None and "gradient_s" in n.attrs for n in norms)
    assert all(n.bwd_weight_s is not None and n.bwd_weight_s > 0 for n in norms)
    first_conv = next(n for n in graph.nodes if n.op == "aten.conv2d.default")
    assert first_conv.attrs is not None and first_conv.attrs["gradient_s"][0] == 0.0  # the image takes none
