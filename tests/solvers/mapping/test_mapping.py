"""Device mapping (Alg. 1 + 2) equals brute force over device permutations; never worse than CS."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers.mapping.binary import BisectOptions, map_stages
from solvers.mapping.bounds import lower_bound
from solvers.mapping.heuristics import consecutive_mapping, p2p_mapping
from solvers.mapping.stage_graph import StageGraph, mapping_objective_s
from solvers.model.topology import Topology
from tests.solvers.parmesan.strategies import random_topology
from tests.strategies import examples


def random_stage_graph(seed: int, n_stages: int, replicas: int, skip: bool) -> StageGraph:
    rng = np.random.default_rng(seed)
    src = list(range(n_stages - 1))
    dst = list(range(1, n_stages))
    if skip and n_stages > 2:
        src.append(0)
        dst.append(n_stages - 1)
    return StageGraph(n_stages, replicas, rng.uniform(1e-3, 5e-3, n_stages), np.array(src, dtype=np.int64),
                      np.array(dst, dtype=np.int64), rng.uniform(1e6, 5e7, len(src)),
                      rng.uniform(0, 5e7, n_stages))


def brute_force(sg: StageGraph, topo: Topology, mode: str) -> float:
    n = sg.n_stages * sg.replicas
    best = np.inf
    for perm in itertools.permutations(range(topo.n_devices), n):
        place = np.array(perm, dtype=np.int64).reshape(sg.n_stages, sg.replicas)
        best = min(best, mapping_objective_s(sg, topo, place, mode))  # type: ignore[arg-type]
    return float(best)


SHAPES = [(2, 2), (3, 2), (2, 3), (4, 1), (3, 1), (5, 1), (6, 1)]


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(SHAPES), mode=st.sampled_from(["m", "ar"]),
       extra=st.integers(0, 1), skip=st.booleans())
def test_mapping_equals_brute_force(seed: int, shape: tuple[int, int], mode: str, extra: int, skip: bool) -> None:
    s, r = shape
    n_devices = min(7, s * r + extra)
    topo = random_topology(seed, n_devices)
    sg = random_stage_graph(seed, s, r, skip)
    result = map_stages(sg, topo, mode, BisectOptions(time.monotonic() + 20, eps_rel=1e-9))  # type: ignore[arg-type]
    expected = brute_force(sg, topo, mode)
    assert result.status == "optimal"
    assert result.objective_s == pytest.approx(expected, rel=1e-6)
    assert result.lower_bound_s <= expected * (1 + 1e-9)
    assert lower_bound(sg, topo, mode) <= expected * (1 + 1e-9)  # type: ignore[arg-type]
    assert mapping_objective_s(sg, topo, result.place, mode) == pytest.approx(result.objective_s)  # type: ignore[arg-type]
    assert sorted(result.place.ravel().tolist()) == sorted(set(result.place.ravel().tolist()))
    for heuristic in (consecutive_mapping(s, r), p2p_mapping(s, r)):
        assert result.objective_s <= mapping_objective_s(sg, topo, heuristic, mode) * (1 + 1e-12)  # type: ignore[arg-type]


def hierarchy(n_hosts: int, per_host: int, seed: int) -> Topology:
    """Hosts of identical GPUs (twin devices) with per-host intra bandwidth."""
    from solvers.model.topology import Device

    rng = np.random.default_rng(seed)
    n = n_hosts * per_host
    host = np.arange(n) // per_host
    intra = rng.uniform(5e9, 2e10, n_hosts)
    bw = np.where(host[:, None] == host[None, :], intra[host][:, None], 1e9)
    devices = [Device(f"d{i}", "GPU", f"h{host[i]}") for i in range(n)]
    return Topology.from_matrices("hier", devices, bw.tolist(), np.full((n, n), 1e-6).tolist())


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), shape=st.sampled_from([(2, 2), (3, 2), (2, 3), (6, 1), (3, 1)]),
       mode=st.sampled_from(["m", "ar"]), hosts=st.sampled_from([(2, 3), (3, 2), (2, 2), (1, 6)]))
def test_symmetry_breaking_keeps_exactness(seed: int, shape: tuple[int, int], mode: str,
                                           hosts: tuple[int, int]) -> None:
    s, r = shape
    topo = hierarchy(*hosts, seed)
    if s * r > topo.n_devices:
        return
    sg = random_stage_graph(seed, s, r, True)
    result = map_stages(sg, topo, mode, BisectOptions(time.monotonic() + 20, eps_rel=1e-9))  # type: ignore[arg-type]
    assert result.objective_s == pytest.approx(brute_force(sg, topo, mode), rel=1e-6)


def test_twin_classes_of_a_hierarchy() -> None:
    from solvers.mapping.symmetry import twin_classes

    topo = hierarchy(3, 2, 0)
    assert twin_classes(topo).tolist() == [0, 0, 2, 2, 4, 4]
    assert twin_classes(random_topology(0, 5)).tolist() == [0, 1, 2, 3, 4]


def test_timeout_returns_best_with_bound() -> None:
    topo = random_topology(5, 64)
    sg = random_stage_graph(5, 16, 4, True)
    started = time.monotonic()
    result = map_stages(sg, topo, "m", BisectOptions(started + 0.5, eps_rel=1e-12))
    assert time.monotonic() - started < 1.5
    assert result.lower_bound_s <= result.objective_s
    assert result.objective_s <= mapping_objective_s(sg, topo, consecutive_mapping(16, 4), "m")
    assert result.status in ("optimal", "feasible")


def test_parallel_workers_agree() -> None:
    topo = random_topology(11, 6)
    sg = random_stage_graph(11, 3, 2, False)
    one = map_stages(sg, topo, "m", BisectOptions(time.monotonic() + 20, eps_rel=1e-9))
    two = map_stages(sg, topo, "m", BisectOptions(time.monotonic() + 20, eps_rel=1e-9, workers=2, parallel_targets=2))
    assert one.objective_s == pytest.approx(two.objective_s, rel=1e-9)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), shape=st.sampled_from([(2, 2), (3, 2), (2, 3)]),
       mode=st.sampled_from(["m", "ar"]), hier=st.booleans())
def test_guarded_mapping_equals_constrained_brute_force(seed: int, shape: tuple[int, int], mode: str,
                                                        hier: bool) -> None:
    from solvers.mapping.binary import guard_cap_s

    s, r = shape
    topo = hierarchy(2, 3, seed) if hier else random_topology(seed, 6)
    sg = random_stage_graph(seed, s, r, True)
    other = "ar" if mode == "m" else "m"
    cap = guard_cap_s(sg, topo, mode)  # type: ignore[arg-type]
    best = np.inf
    for perm in itertools.permutations(range(topo.n_devices), s * r):
        place = np.array(perm, dtype=np.int64).reshape(s, r)
        if mapping_objective_s(sg, topo, place, other) <= cap:  # type: ignore[arg-type]
            best = min(best, mapping_objective_s(sg, topo, place, mode))  # type: ignore[arg-type]
    result = map_stages(sg, topo, mode, BisectOptions(time.monotonic() + 20, eps_rel=1e-9), guard=True)  # type: ignore[arg-type]
    assert result.objective_s == pytest.approx(best, rel=1e-6)
    assert mapping_objective_s(sg, topo, result.place, other) <= cap  # type: ignore[arg-type]
