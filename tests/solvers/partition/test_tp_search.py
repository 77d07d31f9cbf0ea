"""Tensor parallelism in the search: the settings, the degrees searched and the groups that run them."""

from __future__ import annotations

from typing import Any

import pytest

from bench.bench_tp_search import with_megatron_names
from solvers import generate_graph, generate_topology, solve, solving
from solvers.base import Budget
from solvers.model.errors import InvalidProblem
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings, settings_from_dict
from solvers.model.topology import Device, Link, Topology
from solvers.partition.schedules import base_settings
from solvers.partition.tp import tp_degrees, tp_groups
from solvers.solving import _against_unsplit
from tests.solvers.exact.test_exact_tp import one_host, problem
from tests.solvers.simulator.test_tensor_parallel import mlp_graph


def hosts(per_host: int, n_hosts: int, intra_Bps: float = 300e9, inter_Bps: float = 25e9,
          kinds: tuple[str, ...] = ("H100",)) -> Topology:
    """``n_hosts`` hosts of ``per_host`` devices (host ``h`` of kind ``kinds[h % len(kinds)]``), all pairs linked."""
    devices = [Device(f"h{h}g{i}", kinds[h % len(kinds)], f"h{h}", 80e9) for h in range(n_hosts) for i in range(per_host)]
    links = [Link(a.id, b.id, intra_Bps if a.node == b.node else inter_Bps, 1e-6)
             for k, a in enumerate(devices) for b in devices[k + 1:]]
    return Topology.from_links("hosts", devices, links)


def test_settings_parse_and_keep_old_digests() -> None:
    s = settings_from_dict({"tp": 4, "max_tp": 2, "tp_within_host": False})
    assert (s.tp, s.max_tp, s.tp_within_host) == (4, 2, False)
    assert settings_from_dict(s.to_dict()) == s
    default = settings_from_dict({})
    assert (default.tp, default.max_tp, default.tp_within_host) == (None, 8, True)
    assert not {"tp", "max_tp", "tp_within_host"} & set(default.to_dict())  # digests from before stay


@pytest.mark.parametrize(("raw", "field", "message"), [
    ({"tp": 3}, "settings.tp", "power of two"),
    ({"tp": 0}, "settings.tp", "greater than or equal to 1"),
    ({"max_tp": 6}, "settings.max_tp", "power of two"),
    ({"tp": True}, "settings.tp", "integer"),
    ({"tp_within_host": "yes"}, "settings.tp_within_host", "true or false"),
    ({"tp": 2, "schedule": "zbv"}, "settings.tp", "gpipe or 1f1b only"),
])
def test_bad_settings_name_the_field(raw: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidProblem, match=message) as err:
        settings_from_dict(raw)
    assert err.value.field == field


def test_tp_must_fit_the_devices_and_a_host() -> None:
    g = mlp_graph()
    with pytest.raises(InvalidProblem, match="exceed the 16 devices") as err:
        Problem(g, hosts(8, 2), settings=ProblemSettings(tp=8, replicas=2, stages=2))
    assert err.value.field == "settings.tp"
    with pytest.raises(InvalidProblem, match="does not fit a host") as err:
        Problem(g, hosts(8, 2), settings=ProblemSettings(tp=16))
    assert err.value.field == "settings.tp"
    Problem(g, hosts(8, 2), settings=ProblemSettings(tp=16, tp_within_host=False))  # allowed across hosts


def test_degrees_searched() -> None:
    g = mlp_graph()
    assert tp_degrees(Problem(g, hosts(8, 4))) == (1, 2, 4, 8)
    assert tp_degrees(Problem(g, hosts(4, 2))) == (1, 2, 4)  # within a host of 4
    assert tp_degrees(Problem(g, hosts(4, 2), settings=ProblemSettings(tp_within_host=False))) == (1, 2, 4, 8)
    assert tp_degrees(Problem(g, hosts(8, 4), settings=ProblemSettings(max_tp=2))) == (1, 2)
    assert tp_degrees(Problem(g, hosts(8, 4), settings=ProblemSettings(tp=4))) == (4,)
    assert tp_degrees(Problem(g, hosts(8, 4), "latency")) == (1,)
    # nothing to split: no column/row pair in the graph
    plain = OpGraph.build("plain", [n.__class__(n.id, n.op, n.fwd_s) for n in g.nodes], list(g.edges))
    assert tp_degrees(Problem(plain, hosts(8, 4))) == (1,)
    # a schedule asked for by name that the action-list engine times: its solver plans without tp
    zbv = Problem(g, hosts(8, 4), settings=ProblemSettings(schedule="zbv"))
    assert tp_degrees(Problem(g, hosts(8, 4), settings=base_settings(zbv.settings))) == (1,)
    auto = ProblemSettings(schedule="auto")
    assert tp_degrees(Problem(g, hosts(8, 4), settings=base_settings(auto))) == (1, 2, 4, 8)


def test_groups_take_the_widest_links_of_one_host_and_kind() -> None:
    topo = hosts(4, 2)
    groups = tp_groups(topo, 4)
    assert [[topo.devices[d].id for d in grp] for grp in groups] == [
        ["h0g0", "h0g1", "h0g2", "h0g3"], ["h1g0", "h1g1", "h1g2", "h1g3"]]
    assert tp_groups(topo, 8) == []  # within hosts of 4: none
    assert sorted(map(sorted, tp_groups(topo, 8, within_host=False))) == [list(range(8))]
    assert tp_groups(topo, 1) == [[d] for d in range(8)]


def test_groups_follow_the_measured_links_inside_a_host() -> None:
    """Two NVLink pairs in a host of four joined by PCIe otherwise: each pair of 2 is an NVLink pair."""
    devices = [Device(f"g{i}", "A100", "h0", 80e9) for i in range(4)]
    fast = {(0, 2), (1, 3)}
    links = [Link(f"g{a}", f"g{b}", 300e9 if (a, b) in fast else 16e9, 1e-6) for a in range(4) for b in range(a + 1, 4)]
    topo = Topology.from_links("nvlink-pairs", devices, links)
    assert tp_groups(topo, 2) == [[0, 2], [1, 3]]


def test_a_group_is_one_device_kind() -> None:
    """A heterogeneous cluster: hosts of H100 and of A100; no group mixes them, even across hosts."""
    topo = hosts(2, 4, kinds=("H100", "A100"))
    for within in (True, False):
        for grp in tp_groups(topo, 2, within) + tp_groups(topo, 4, within):
            assert len({topo.devices[d].kind for d in grp}) == 1
    assert len(tp_groups(topo, 4, within_host=False)) == 2  # two hosts of each kind


def test_auto_covers_tp_and_a_split_plan_competes_as_gpipe_or_1f1b_only() -> None:
    plan = solve(problem(one_host(2, 1e9, 23e6), 1), "auto", time_limit_s=30)
    assert [(s.devices, s.tp) for s in plan.stages] == [(("d0", "d1"), 2)]
    searched = solve(problem(one_host(2, 1e9, 23e6), 1, schedule="auto"), "exact", time_limit_s=30)
    assert searched.stages[0].tp == 2 and searched.schedule in ("gpipe", "1f1b")
    assert set(searched.stats["schedule_candidates"]) == {"1f1b/1", "gpipe/1"}


@pytest.mark.parametrize("solver", ["exact", "rannc", "pipedream", "parmesan"])
def test_solvers_keep_each_group_on_one_host_and_kind(solver: str) -> None:
    """A heterogeneous cluster (hosts of H100 and of A100, 2 each): with ``tp`` 2 every group of every
    stage is one host's pair, joined by its NVLink-class link."""
    topo = hosts(2, 4, kinds=("H100", "A100"))
    p = Problem(mlp_graph(), topo, settings=ProblemSettings(micro_batches=(2,), tp=2))
    plan = solve(p, solver, time_limit_s=30)
    assert plan.stages
    for stage in plan.stages:
        assert stage.tp == 2
        for k in range(0, len(stage.devices), 2):
            pair = [topo.devices[topo.index[d]] for d in stage.devices[k:k + 2]]
            assert pair[0].node == pair[1].node and pair[0].kind == pair[1].kind


def test_a_plan_without_tp_under_another_schedule_competes_with_the_split_plan() -> None:
    """Tensor-parallel stages run GPipe or 1F1B only; on 8 devices of 3 GiB joined at 100 GB/s the best split
    plan (1F1B) is slower per sample than 4 unsplit stages under interleaved zero-bubble, so ``max_tp`` 8 must
    return the latter: never slower than ``max_tp`` 1."""
    graph = with_megatron_names(generate_graph("transformer", layers=8, causal=True, hidden=2048, heads=16,
                                               seq_len=1024, micro_batch=4, vocab=50257, device="H100"), "gpt-8")
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=8, device="H100", intra_bandwidth_GBps=100.0,
                             memory_gib=3)
    plans = {mtp: solve(Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(16,), max_tp=mtp)), "rannc",
                        time_limit_s=30) for mtp in (1, 8)}
    assert plans[8].metrics["objective_s"] <= plans[1].metrics["objective_s"] * (1 + 1e-9)
    assert all(stage.tp == 1 for stage in plans[8].stages) and plans[8].schedule not in ("gpipe", "1f1b")
    candidates = plans[8].stats["tp_candidates"]
    assert candidates["unsplit"] < candidates["split"]
    assert any("no tensor parallelism" in note for note in plans[8].notes)
    assert "tp_candidates" not in plans[1].stats  # nothing split, nothing to compare


def test_the_unsplit_search_is_skipped_and_said_when_the_time_is_spent() -> None:
    plan = solve(problem(one_host(2, 1e9, 25e6), 1), "exact", time_limit_s=20)
    assert plan.stages[0].tp == 2
    called: list[Problem] = []
    kept = _against_unsplit(problem(one_host(2, 1e9, 25e6), 1), plan, Budget(0.0), lambda p: called.append(p) or plan)
    assert kept.stages == plan.stages and not called
    assert kept.stats["tp_candidates"]["unsplit"] is None
    assert any("time limit was spent" in note for note in kept.notes)


def test_a_solver_that_may_split_leaves_part_of_the_limit_to_the_unsplit_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """An anytime solver spends the limit it is given: the split search gets ``1 - UNSPLIT_RESERVE`` of it, and
    the unsplit plan that competes with a split one is solved on what the whole limit leaves; with ``max_tp`` 1
    nothing is kept back."""
    seen: list[tuple[int, float | None]] = []
    original = solving._solve_deciding_recompute

    def recording(solver: Any, on: Problem, options: Any, budget: Budget, progress: Any) -> Any:
        seen.append((on.settings.max_tp, budget.time_limit_s))
        return original(solver, on, options, budget, progress)

    monkeypatch.setattr(solving, "_solve_deciding_recompute", recording)
    plan = solve(problem(one_host(2, 1e9, 25e6), 1), "exact", time_limit_s=30)
    assert plan.stages[0].tp == 2 and plan.stats["tp_candidates"]["unsplit"] is not None
    (split_tp, split_s), (unsplit_tp, unsplit_s) = seen
    assert split_tp == 8 and split_s is not None and split_s <= 30 * (1 - solving.UNSPLIT_RESERVE)
    assert unsplit_tp == 1 and unsplit_s == 30  # the solve's own budget: its limit counts from the call
    seen.clear()
    solve(problem(one_host(2, 1e9, 25e6), 1, max_tp=1), "exact", time_limit_s=30)
    assert [s for _, s in seen] == [30]
