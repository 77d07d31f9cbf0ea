"""Topology generators: shapes, paper figures, determinism, parameter errors."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.generate import (
    MAX_GENERATED_DEVICES,
    TOPOLOGY_KINDS,
    TOPOLOGY_SIZE_MAXIMA,
    generate_topology,
    parameter_types,
)
from solvers.generate.devices import MB_PER_US_IN_BPS
from solvers.generate.grid import hop_bandwidth_GBps, hop_matrix
from solvers.generate.topologies import DGX1_NVLINKS
from solvers.model.errors import InvalidInput
from solvers.model.topology import topology_from_document

GB = 1e9


@pytest.mark.parametrize("kind", sorted(TOPOLOGY_KINDS))
def test_every_kind_generates_a_valid_round_tripping_topology(kind: str) -> None:
    topo = generate_topology(kind)
    again = topology_from_document(topo.to_document())
    assert again.digest == topo.digest
    assert topo.n_devices >= 4


@pytest.mark.parametrize("kind", sorted(TOPOLOGY_KINDS))
def test_every_kind_has_keyword_only_typed_defaulted_parameters(kind: str) -> None:
    import inspect

    func = TOPOLOGY_KINDS[kind]
    assert func.__doc__ and func.__doc__.strip().splitlines()[0]
    for name, param in inspect.signature(func).parameters.items():
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert param.default is not inspect.Parameter.empty, name
    types = parameter_types(func)
    assert all(t in (int, float, bool, str) for t, _ in types.values())


@pytest.mark.parametrize("kind", ["random_blk_1", "random_blk_2", "uniform_dist"])
def test_random_kinds_are_deterministic_per_seed(kind: str) -> None:
    a = generate_topology(kind, seed=3)
    b = generate_topology(kind, seed=3)
    c = generate_topology(kind, seed=4)
    assert a.digest == b.digest
    assert a.digest != c.digest


def test_hierarchical_matches_parmesan_appendix() -> None:
    topo = generate_topology("hierarchical")
    bw = topo.direct_bandwidth_Bps
    assert topo.n_devices == 16 and len(topo.hosts) == 4
    assert bw[0, 1] == pytest.approx(11 * GB)
    assert bw[0, 4] == pytest.approx(1.1 * GB)
    big = generate_topology("hierarchical", nodes=3, gpus_per_node=8)
    assert big.n_devices == 24 and len(big.hosts) == 3


@pytest.mark.parametrize("kind", ["hierarchical", "mesh2d", "torus2d", "mesh3d", "torus3d"])
def test_general_purpose_generators_default_to_current_hardware(kind: str) -> None:
    topo = generate_topology(kind)
    assert {(d.kind, d.memory_bytes) for d in topo.devices} == {("H100", 80 * 2**30)}
    old = generate_topology(kind, device="TitanV")  # older presets by name, with their memory
    assert {(d.kind, d.memory_bytes) for d in old.devices} == {("TitanV", 12 * 2**30)}
    sized = generate_topology(kind, device="V100", memory_gib="16")  # an explicit size wins
    assert {(d.kind, d.memory_bytes) for d in sized.devices} == {("V100", 16 * 2**30)}


@pytest.mark.parametrize("kind", ["hierarchical", "mesh2d", "torus2d", "mesh3d", "torus3d"])
def test_cpu_devices_match_the_kind_that_placer_profile_records(kind: str) -> None:
    """``placer profile --device cpu`` records device kind ``cpu``; a generated CPU topology has that kind,
    spelled as the table does whatever the case given, and the table's memory per socket."""
    for spelling in ("cpu", "CPU"):
        topo = generate_topology(kind, device=spelling)
        assert {(d.kind, d.memory_bytes) for d in topo.devices} == {("cpu", 256 * 2**30)}
        assert topo.devices[0].id == "cpu0"
    assert {d.kind for d in generate_topology(kind, device="h100").devices} == {"H100"}


def test_paper_testbeds_keep_their_devices() -> None:
    assert {d.kind for d in generate_topology("dgx1").devices} == {"V100"}
    assert {d.kind for d in generate_topology("random_blk_1").devices} == {"V100"}
    with pytest.raises(InvalidInput, match="unknown device kind 'TPUv9'"):
        generate_topology("hierarchical", device="TPUv9")


def test_dgx1_wiring_is_the_hybrid_cube_mesh() -> None:
    links = DGX1_NVLINKS
    assert (links == links.T).all()
    assert (links.sum(axis=1) == 6).all()  # six NVLink ports per V100
    topo = generate_topology("dgx1", boxes=2)
    bw = topo.direct_bandwidth_Bps / GB
    assert topo.n_devices == 16
    assert bw[0, 3] == pytest.approx(43.2) and bw[0, 1] == pytest.approx(21.4)
    assert bw[0, 5] == pytest.approx(10.1)  # no NVLink: PCIe
    assert bw[0, 8] == pytest.approx(1.4)  # another box: Ethernet
    assert {d.kind for d in topo.devices} == {"V100"}
    assert topo.devices[0].memory_bytes == 32 * 2**30


def test_table_ix_hop_bandwidths() -> None:
    assert hop_bandwidth_GBps(1) == 78.1
    assert hop_bandwidth_GBps(10) == 1.46
    assert hop_bandwidth_GBps(20) == 0.098
    assert hop_bandwidth_GBps(25) == 0.088
    assert hop_bandwidth_GBps(40) == 0.078
    assert hop_bandwidth_GBps(52) == 0.068


def test_mesh_and_torus_hops() -> None:
    mesh = hop_matrix((4, 4), torus=False)
    torus = hop_matrix((4, 4), torus=True)
    assert mesh[0, 15] == 6 and torus[0, 15] == 2
    assert mesh[0, 3] == 3 and torus[0, 3] == 1
    topo = generate_topology("torus2d")
    assert topo.direct_bandwidth_Bps[0, 15] == pytest.approx(39.0 * GB)
    cube = generate_topology("mesh3d", nx=2, ny=3, nz=4)
    assert cube.n_devices == 24
    assert cube.direct_bandwidth_Bps[0, 23] == pytest.approx(hop_bandwidth_GBps(1 + 2 + 3) * GB)


def test_random_blk_1_structure() -> None:
    topo = generate_topology("random_blk_1", devices=20, nodes=5, seed=1)
    bw = topo.direct_bandwidth_Bps / MB_PER_US_IN_BPS  # back to MB/us
    host = np.array([int(d.node[4:]) for d in topo.devices])
    assert len(set(host.tolist())) == 5
    across = host[:, None] != host[None, :]
    assert np.allclose(bw[across], 1e-4)
    for k in range(5):
        block = bw[np.ix_(host == k, host == k)]
        off = block[~np.eye(len(block), dtype=bool)]
        if len(off):
            assert np.allclose(off, off[0]) and 1e-4 <= off[0] <= 1e-2


def test_random_blk_2_inter_node_bandwidth_decays_with_distance() -> None:
    topo = generate_topology("random_blk_2", devices=16, nodes=4, seed=2)
    bw = topo.direct_bandwidth_Bps / MB_PER_US_IN_BPS
    host = np.array([int(d.node[4:]) for d in topo.devices])
    same = (host[:, None] == host[None, :]) & ~np.eye(16, dtype=bool)
    base = bw[same].mean() / 10
    i, j = np.nonzero(host[:, None] != host[None, :])
    assert np.allclose(bw[i, j], base / np.abs(host[i] - host[j]))
    assert (bw[same] >= 1e-5).all() and (bw[same] <= 1e-2).all()


def test_uniform_dist_range_and_conversion() -> None:
    topo = generate_topology("uniform_dist", devices=12, seed=5)
    bw = topo.direct_bandwidth_Bps
    off = bw[~np.eye(12, dtype=bool)]
    assert (off >= 1e-5 * MB_PER_US_IN_BPS).all() and (off <= 1e-2 * MB_PER_US_IN_BPS).all()
    assert pytest.approx(1e6 / 1024 * 1e9) == MB_PER_US_IN_BPS


def test_moirai_testbeds_follow_table_iii() -> None:
    inter = generate_topology("moirai_inter")
    assert [d.kind for d in inter.devices] == ["RTX2080Ti", "T4", "P4", "RTX3060Ti"]
    assert [d.memory_bytes / 2**30 for d in inter.devices] == [11, 16, 8, 8]
    bw = inter.direct_bandwidth_Bps
    assert bw[0, 1] == pytest.approx(44.26e9 / 8) and bw[1, 0] == pytest.approx(42.39e9 / 8)  # asymmetric
    intra = generate_topology("moirai_intra")
    assert [d.kind for d in intra.devices] == ["V100", "V100", "P100", "P100"]
    assert intra.devices[0].speed == 1.0 and intra.devices[2].speed < 1.0
    assert intra.direct_bandwidth_Bps[0, 1] == pytest.approx(1170.04e9 / 8)


def test_unknown_kind_lists_valid_ones() -> None:
    with pytest.raises(InvalidInput, match=r"unknown topology kind 'ring'.*hierarchical"):
        generate_topology("ring")


def test_unknown_parameter_lists_valid_ones() -> None:
    with pytest.raises(InvalidInput, match=r"unknown parameter 'gpus'.*gpus_per_node"):
        generate_topology("hierarchical", gpus=3)


def test_parameter_types_are_checked_and_strings_coerced() -> None:
    with pytest.raises(InvalidInput, match="'nodes' must be int"):
        generate_topology("hierarchical", nodes=2.5)
    assert generate_topology("hierarchical", nodes="2", gpus_per_node="2").n_devices == 4
    with pytest.raises(InvalidInput, match="'nodes' must be finite and > 0"):
        generate_topology("hierarchical", nodes=0)
    with pytest.raises(InvalidInput, match="'nodes' must be between 1 and devices"):
        generate_topology("random_blk_1", devices=4, nodes=9)
    with pytest.raises(InvalidInput, match="unknown device kind 'Z80'"):
        generate_topology("moirai_inter", reference="Z80")


@pytest.mark.parametrize(("kind", "params", "field"), [
    ("hierarchical", {"nodes": 10**12}, "nodes"),
    ("hierarchical", {"nodes": 64, "gpus_per_node": 16}, "nodes"),
    ("dgx1", {"boxes": MAX_GENERATED_DEVICES // 8 + 1}, "boxes"),
    ("mesh2d", {"nx": 100_000, "ny": 100_000}, "nx"),
    ("torus2d", {"nx": 2, "ny": MAX_GENERATED_DEVICES}, "ny"),
    ("mesh3d", {"nx": 8, "ny": 8, "nz": 9}, "nz"),
    ("torus3d", {"nz": 10**9}, "nz"),
    ("random_blk_1", {"devices": MAX_GENERATED_DEVICES + 1}, "devices"),
    ("random_blk_2", {"devices": 10**6, "nodes": 8}, "devices"),
    ("uniform_dist", {"devices": 10**18}, "devices"),
])
def test_sizes_beyond_the_device_limit_are_refused_naming_the_parameter(kind: str, params: dict[str, int],
                                                                       field: str) -> None:
    with pytest.raises(InvalidInput, match=str(MAX_GENERATED_DEVICES)) as err:
        generate_topology(kind, **params)
    assert err.value.field == field and field in str(err.value)


@pytest.mark.parametrize(("kind", "params"), [("dgx1", {"boxes": 64}), ("mesh3d", {"nx": 8, "ny": 8, "nz": 8})])
def test_the_device_limit_itself_is_accepted(kind: str, params: dict[str, int]) -> None:
    assert generate_topology(kind, **params).n_devices == MAX_GENERATED_DEVICES


def test_size_maxima_are_the_generators_own() -> None:
    """Each size parameter alone at its schema maximum (others at 1 where they multiply) is accepted; one more is not."""
    for kind, func in TOPOLOGY_KINDS.items():
        types = parameter_types(func)
        sizes = [name for name in types if name in TOPOLOGY_SIZE_MAXIMA]
        for name in sizes:
            ones = {other: 1 for other in sizes if other != name and other != "nodes"}
            if kind.startswith("random_blk") and name == "devices":
                ones["nodes"] = 1
            with pytest.raises(InvalidInput) as err:
                generate_topology(kind, **{**ones, name: TOPOLOGY_SIZE_MAXIMA[name] + 1})
            assert err.value.field == name, (kind, name)
