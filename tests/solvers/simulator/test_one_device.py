"""The op-level engine's numpy-built lists for one-device groups equal the edge-by-edge ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.simulator._channels import ChannelTable
from solvers.simulator._one_device import one_device, one_device_lists
from solvers.simulator.dataflow import _general_lists
from solvers.validity import resolve_plan
from tests.strategies import examples, latency_cases


@settings(max_examples=examples(200), deadline=None)
@given(latency_cases(max_ops=12))
def test_one_device_lists_equal_the_general_ones(case: tuple[Problem, Plan]) -> None:
    """Successor deltas, messages (transfers and consumers, in order), channel ids and the traffic
    of every channel (the same float sums) are the same on both paths."""
    problem, plan = case
    rp = resolve_plan(problem, plan)
    assert one_device(rp)
    general, fast = ChannelTable(problem.topology), ChannelTable(problem.topology)
    assert one_device_lists(problem, rp, fast, plan.micro_batches) == _general_lists(problem, rp, general,
                                                                                      plan.micro_batches)
    assert fast.pairs == general.pairs and fast.ids == general.ids
    assert list(fast.traffic_bytes.items()) == list(general.traffic_bytes.items())


def test_replicated_or_shared_groups_take_the_general_path() -> None:
    graph = generate_graph("random_dag", n_ops=4, seed=1)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    problem = Problem(graph, topology, "latency")
    replicated = Plan((Stage(tuple(graph.ids), ("gpu0", "gpu1")),))
    with pytest.raises(InvalidPlan, match="places each op on one device"):  # a latency plan may not replicate
        resolve_plan(problem, replicated)
    # replicas (a throughput plan's, which the op-level engine runs too) take the general path
    batched = generate_graph("transformer", layers=1)
    whole = Plan((Stage(tuple(batched.ids), ("gpu0", "gpu1")),))
    assert not one_device(resolve_plan(Problem(batched, topology, "throughput"), whole))
    split = Plan((Stage(tuple(graph.ids[:2]), ("gpu0",)), Stage(tuple(graph.ids[2:]), ("gpu1",))))
    assert one_device(resolve_plan(problem, split))
