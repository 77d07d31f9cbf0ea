"""The input-gradient / weight-gradient split of backward times (zero-bubble schedules)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import Problem, generate_topology
from solvers.cost.backward_split import split_backward_s, weight_grad_fraction
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import plan_schedule
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import ProblemSettings
from solvers.model.schedules import BACKWARD_INPUT, BACKWARD_WEIGHT
from solvers.simulator._channels import ChannelTable
from solvers.simulator.schedule_engine import virtual_pipeline
from solvers.validity import resolve_plan


def test_ops_with_parameters_split_evenly_and_the_others_have_no_weight_gradient() -> None:
    graph = OpGraph.build("g", [Node("mm", "aten.mm", 1.0, 2.0, param_bytes=64.0), Node("relu", "aten.relu", 0.5, 0.5)],
                          [Edge("mm", "relu", 8.0)])
    assert weight_grad_fraction(graph).tolist() == [0.5, 0.0]
    inp, wgt = split_backward_s(graph, graph.bwd_s)
    assert inp.tolist() == [1.0, 0.5] and wgt.tolist() == [1.0, 0.0]
    np.testing.assert_array_equal(inp + wgt, graph.bwd_s)


def test_a_recorded_split_sets_the_share_and_the_engine_times_i_and_w_by_it() -> None:
    nodes = [Node("x", "aten.relu", 0.5, 0.5),
             Node("mm", "aten.mm", 1.0, 2.0, param_bytes=64.0, bwd_input_s=0.3, bwd_weight_s=0.9),
             Node("relu", "aten.relu", 0.5, 0.5), Node("mm2", "aten.mm", 1.0, 2.0, param_bytes=64.0),
             Node("out", "aten.relu", 0.5, 0.5)]
    graph = OpGraph.build("g", nodes, [Edge("x", "mm", 8.0), Edge("mm", "relu", 8.0), Edge("relu", "mm2", 8.0),
                                       Edge("mm2", "out", 8.0)])
    assert weight_grad_fraction(graph).tolist() == [0.0, 0.75, 0.0, 0.5, 0.0]  # recorded 0.9 / 1.2; estimated
    inp, wgt = split_backward_s(graph, graph.bwd_s)
    assert inp.tolist() == [0.5, 0.5, 0.5, 1.0, 0.5] and wgt.tolist() == [0.0, 1.5, 0.0, 1.0, 0.0]
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    problem = Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(4,)))
    first, second = (d.id for d in topo.devices)
    plan = Plan(stages=(Stage(("x",), (first,)), Stage(("mm",), (second,)), Stage(("relu", "mm2"), (second,)),
                        Stage(("out",), (first,))), schedule="zbv", virtual_stages=2, micro_batches=4)
    rp = resolve_plan(problem, plan)
    schedule = plan_schedule(rp.plan, rp.n_stages)
    pipe = virtual_pipeline(problem, ComputeModel(graph, topo), ChannelTable(topo), schedule, rp.stage_ops,
                            [rp.stage_devices[0], rp.stage_devices[1]], recompute=list(rp.recompute), allreduce=False)
    speed = topo.devices[0].speed
    # the first stage runs its backward whole at W (torch's PipelineStage): I 0, W its whole backward
    assert pipe.duration_s[BACKWARD_WEIGHT] == pytest.approx([0.5 / speed, 1.5 / speed, 1.0 / speed, 0.0])
    assert pipe.duration_s[BACKWARD_INPUT] == pytest.approx([0.0, 0.5 / speed, 1.5 / speed, 0.5 / speed])
