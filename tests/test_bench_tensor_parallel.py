"""The published-configuration plans of bench/bench_tensor_parallel.py: stages of equal layers,
replica-major devices with each tensor-parallel group inside one host, scored by the simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.bench_tensor_parallel import (
    HETERO,
    MIST,
    TABLE1,
    Case,
    _layer_index,
    _score,
    _stage_degrees,
    megatron_gpt,
    published_plan,
    published_recompute,
    run_case,
    topology_for,
)
from solvers.generate.devices import GB, GiB
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Topology
from solvers.model.tp_rules import split_layout

SMALL = Case("gpt-small", 4, 256, 4, 2, 2, 16, 32, seq_len=128, vocab=1024)  # t 2, p 2, d 4 on 2 hosts


def test_published_plan_is_p_stages_of_equal_layers_on_host_local_groups() -> None:
    graph, topo = megatron_gpt(SMALL), topology_for(SMALL)
    plan = published_plan(SMALL, graph, topo, micro_batches=8)
    assert [s.tp for s in plan.stages] == [2, 2]
    placed = [op for s in plan.stages for op in s.ops]
    assert sorted(placed) == sorted(n.id for n in graph.nodes)
    layers = [{_layer_index(op) for op in s.ops} - {None} for s in plan.stages]
    assert layers == [{0, 1}, {2, 3}]
    assert "transformer.wte" in plan.stages[0].ops and "loss" in plan.stages[1].ops
    host = {d.id: d.node for d in topo.devices}
    for stage in plan.stages:
        assert len(stage.devices) == SMALL.t * SMALL.d
        groups = [stage.devices[k : k + SMALL.t] for k in range(0, len(stage.devices), SMALL.t)]
        assert all(len({host[d] for d in g}) == 1 for g in groups)
    assert set(plan.stages[0].devices).isdisjoint(plan.stages[1].devices)
    problem = Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,), global_batch=32))
    ms, why = _score(problem, plan, 32)
    assert why == "" and ms > 0


def test_the_generated_gpt_splits_under_megatron_rules() -> None:
    graph = megatron_gpt(SMALL)
    kinds = dict(zip((n.id for n in graph.nodes), split_layout(graph).kinds, strict=True))
    assert [kinds[f"transformer.h.3.{op}"] for op in ("attn.qkv", "attn.dense", "mlp.fc_up", "mlp.fc_down")] == [
        "column",
        "row",
        "column",
        "row",
    ]
    assert kinds["transformer.wte"] == "vocab_embedding"


def test_a_plan_that_does_not_fit_is_reported_with_the_simulators_reason() -> None:
    case = dataclasses.replace(SMALL, t=1, p=1, gpus=2)
    graph = megatron_gpt(case)
    topo = topology_for(dataclasses.replace(SMALL, gpus=8))
    devices = [dataclasses.replace(d, memory_bytes=1e6) for d in topo.devices]
    tiny = Topology.from_matrices("tiny", devices, topo.direct_bandwidth_Bps.tolist(), topo.direct_latency_s.tolist())
    problem = Problem(graph, tiny, settings=ProblemSettings(micro_batches=(8,), global_batch=16))
    ms, why = _score(problem, published_plan(case, graph, tiny, 8), 16)
    assert np.isnan(ms) and "stages[0]" in why


def test_heterogeneous_cluster_has_two_kinds_and_their_fabrics() -> None:
    topo = topology_for(HETERO)
    kinds = [d.kind for d in topo.devices]
    assert kinds == ["H100"] * 16 + ["A100"] * 16
    assert topo.devices[16].speed == pytest.approx(312.0 / 989.0)
    bw = topo.direct_bandwidth_Bps
    assert bw[0, 1] == pytest.approx(450 * GB) and bw[16, 17] == pytest.approx(300 * GB)
    assert bw[0, 8] == pytest.approx(25 * GB) and bw[8, 16] == pytest.approx(25 * GB)


def test_source_time_per_sample_follows_the_papers_flop_count() -> None:
    # 1.7B: 96 s l h^2 (1 + s/6h + V/16lh) FLOPs a sample over 137 TFLOP/s on each of 32 GPUs
    case = TABLE1["gpt-1.7b"]
    flops = 96 * 2048 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    assert case.measured_ms_per_sample() == pytest.approx(1e3 * flops / (137e12 * 32))
    assert case.measured_ms_per_sample() == pytest.approx(6.891, abs=1e-3)
    assert dataclasses.replace(case, achieved_TFLOPs=None).measured_ms_per_sample() is None


UNEVEN = dataclasses.replace(  # t 1, p 3, d 2 on one host of 8 (6 used), 1 + 2 + 3 layers, as Mist's splits
    SMALL, name="gpt-uneven", layers=6, t=1, p=3, gpus=8, layer_split=(1, 2, 3), checkpointed_layers=(1, 0, 2)
)


def test_published_plan_follows_the_sources_uneven_layer_split() -> None:
    graph, topo = megatron_gpt(UNEVEN), topology_for(UNEVEN)
    plan = published_plan(UNEVEN, graph, topo, micro_batches=4)
    layers = [{_layer_index(op) for op in s.ops} - {None} for s in plan.stages]
    assert layers == [{0}, {1, 2}, {3, 4, 5}]
    assert [s.devices for s in plan.stages] == [("gpu0", "gpu1"), ("gpu2", "gpu3"), ("gpu4", "gpu5")]
    assert "transformer.wte" in plan.stages[0].ops and "loss" in plan.stages[2].ops


def test_stage_layer_counts_default_to_equal_stages_with_the_remainder_last() -> None:
    assert dataclasses.replace(SMALL, layers=7, p=3).stage_layer_counts() == [2, 2, 3]
    assert UNEVEN.stage_layer_counts() == [1, 2, 3]


def test_recomputation_is_scored_per_stage_where_the_source_recomputes_some_stages() -> None:
    assert UNEVEN.recomputed_stages() == (0, 2)
    assert published_recompute(UNEVEN) == [False, True, (0, 2)]
    assert published_recompute(SMALL) == [False, True]  # the source states no per-stage recomputation
    every = dataclasses.replace(UNEVEN, checkpointed_layers=(1, 1, 1))
    assert published_recompute(every) == [False, True]  # every stage recomputes: the same as True


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layer_split": (1, 2)}, "each of the 3 stages"),
        ({"layer_split": (1, 2, 4)}, "6 layers in all"),
        ({"layer_split": (0, 3, 3)}, "at least one layer"),
        ({"checkpointed_layers": (1, 3, 0)}, r"between 0 and its layers \[1, 2, 3\]"),
        ({"checkpointed_layers": (1, 0)}, "each of the 3"),
    ],
)
def test_a_split_that_does_not_fit_the_case_is_refused_naming_it(
    changes: dict[str, tuple[int, ...]], message: str
) -> None:
    layer_split = changes.get("layer_split", UNEVEN.layer_split)
    checkpointed = changes.get("checkpointed_layers", UNEVEN.checkpointed_layers)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(UNEVEN, layer_split=layer_split, checkpointed_layers=checkpointed)


def test_mist_cases_match_their_configurations_and_cluster() -> None:
    for case in MIST.values():
        assert sum(case.stage_layer_counts()) == case.layers and case.t * case.p * case.d == case.gpus
    assert (MIST["mist-22b"].d, MIST["mist-22b"].global_batch // MIST["mist-22b"].d) == (4, 128)  # 128 steps of 4 rows
    topo = topology_for(MIST["mist-13b"])
    assert topo.n_devices == 16 and {d.memory_bytes for d in topo.devices} == {40 * GiB}
    bw = topo.direct_bandwidth_Bps
    assert bw[0, 1] == pytest.approx(300 * GB) and bw[0, 8] == pytest.approx(12.5 / 8 * GB)


def test_stage_degrees_lists_each_stages_replicas_and_degree_in_order() -> None:
    graph, topo = megatron_gpt(SMALL), topology_for(SMALL)
    plan = published_plan(SMALL, graph, topo, micro_batches=8)
    mixed = dataclasses.replace(plan, stages=(plan.stages[0], dataclasses.replace(plan.stages[1], tp=1)))
    assert _stage_degrees(plan) == "[4x2, 4x2]"
    assert _stage_degrees(mixed) == "[4x2, 8x1]"


def test_max_tp_8_alone_runs_only_the_tensor_parallel_solve(capsys: pytest.CaptureFixture[str]) -> None:
    run_case(SMALL, ["even"], 10.0, max_tps=(8,))
    solves = [line for line in capsys.readouterr().out.splitlines() if " max_tp=" in line]
    assert len(solves) == 1 and " max_tp=8:" in solves[0]
    assert "no-tp/placer n/a" in solves[0] and "stages (R x t) [" in solves[0]
