"""The published-configuration plans of bench/bench_tensor_parallel.py: stages of equal layers,
replica-major devices with each tensor-parallel group inside one host, scored by the simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.bench_tensor_parallel import (
    HETERO,
    TABLE1,
    Case,
    _layer_index,
    _score,
    megatron_gpt,
    published_plan,
    topology_for,
)
from solvers.generate.devices import GB
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
