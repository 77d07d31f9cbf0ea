"""The device topology ``placer.topology/v1`` (docs/formats.md).

Devices and either ``links`` or full ``bandwidth_Bps`` / ``latency_s`` matrices.  A pair of
devices with a direct link uses it; a pair with no direct link talks over the *widest path* (largest bottleneck bandwidth; among
those found, the smaller summed latency), as MOIRAI §III-C does.  A topology in which some
device cannot reach another is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from solvers.model import _check as check
from solvers.model.canonical import digest as _digest
from solvers.model.errors import InvalidTopology
from solvers.model.fields import DEVICE_KEYS, LINK_KEYS, TOPOLOGY_FORMAT, TOPOLOGY_KEYS
from solvers.model.interop import topology_document_from_networkx, topology_to_networkx

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["MAX_DEVICES", "TOPOLOGY_FORMAT", "Device", "Link", "Topology", "topology_from_document"]

MAX_DEVICES = 16_384

FloatMatrix = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Device:
    """One accelerator. ``speed`` is relative to the reference device the graph was profiled on.

    ``base_memory_bytes``: what one training process holds on the device before any tensor of a
    plan (the runtime itself: on a GPU the CUDA context and communicator buffers, on a CPU the
    interpreter, torch and gloo); ``placer topology measure`` measures it, 0 when unknown.
    """

    id: str
    kind: str = "GPU"
    node: str = "node0"
    memory_bytes: float = float(16 * 2**30)
    speed: float = 1.0
    attrs: Mapping[str, Any] | None = None
    base_memory_bytes: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "node": self.node,
                               "memory_bytes": self.memory_bytes, "speed": self.speed}
        if self.base_memory_bytes:
            out["base_memory_bytes"] = self.base_memory_bytes
        if self.attrs:
            out["attrs"] = dict(self.attrs)
        return out


@dataclass(frozen=True, slots=True)
class Link:
    """A direct channel. ``bidirectional`` links carry the same figures both ways."""

    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float = 0.0
    bidirectional: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "bandwidth_Bps": self.bandwidth_Bps,
                "latency_s": self.latency_s, "bidirectional": self.bidirectional}


@dataclass(frozen=True, eq=False)
class Topology:
    """A validated, connected topology.

    ``direct_bandwidth_Bps[i, j]`` is the direct channel i -> j (0 = none); the ``*_path_*``
    matrices give the effective channel after widest-path routing (diagonal: inf / 0).
    """

    name: str
    devices: tuple[Device, ...]
    direct_bandwidth_Bps: FloatMatrix
    direct_latency_s: FloatMatrix
    links: tuple[Link, ...] | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_links(cls, name: str, devices: Sequence[Device], links: Sequence[Link],
                   attrs: Mapping[str, Any] | None = None) -> Topology:
        """Build from link records (validated, routed, connectivity checked)."""
        devices = tuple(devices)
        index = _device_index(devices)
        n = len(devices)
        bw = np.zeros((n, n))
        lat = np.zeros((n, n))
        for j, link in enumerate(links):
            for end in ("src", "dst"):
                name_ = getattr(link, end)
                if name_ not in index:
                    raise InvalidTopology(f"links[{j}].{end}: unknown device {name_!r}",
                                          field=f"links[{j}].{end}", ref=name_)
            a, b = index[link.src], index[link.dst]
            if a == b:
                raise InvalidTopology(f"links[{j}]: self-link on device {link.src!r}",
                                      field=f"links[{j}]", ref=link.src)
            pairs = [(a, b), (b, a)] if link.bidirectional else [(a, b)]
            for x, y in pairs:
                if bw[x, y] > 0:
                    raise InvalidTopology(
                        f"links[{j}]: a second link {devices[x].id!r} -> {devices[y].id!r}",
                        field=f"links[{j}]", ref=devices[x].id)
                bw[x, y] = link.bandwidth_Bps
                lat[x, y] = link.latency_s
        topo = cls(name, devices, bw, lat, tuple(links), dict(attrs or {}))
        topo._check_connected()
        return topo

    @classmethod
    def from_matrices(cls, name: str, devices: Sequence[Device], bandwidth_Bps: Any,
                      latency_s: Any = None, attrs: Mapping[str, Any] | None = None) -> Topology:
        """Build from full matrices in device order (0 bandwidth = no direct link)."""
        devices = tuple(devices)
        _device_index(devices)
        n = len(devices)
        bw = _matrix(bandwidth_Bps, n, "bandwidth_Bps")
        lat = np.zeros((n, n)) if latency_s is None else _matrix(latency_s, n, "latency_s")
        np.fill_diagonal(bw, 0.0)
        np.fill_diagonal(lat, 0.0)
        topo = cls(name, devices, bw, lat, None, dict(attrs or {}))
        topo._check_connected()
        return topo

    # ---- routing -------------------------------------------------------------------
    @cached_property
    def _routes(self) -> tuple[FloatMatrix, FloatMatrix]:
        """Routes of pairs without a direct link: widest paths by a Floyd–Warshall sweep over
        (max bottleneck, then min latency).  Pairs with a direct link keep it.

        Hand-written: networkx has no widest-path routine; the numpy sweep routes 576 devices in
        0.49 s (``bench.bench_graph_algorithms``)."""
        bw = self.direct_bandwidth_Bps.copy()
        lat = np.where(bw > 0, self.direct_latency_s, np.inf)
        n = len(self.devices)
        np.fill_diagonal(bw, np.inf)
        np.fill_diagonal(lat, 0.0)
        for k in range(n):
            cand_bw = np.minimum(bw[:, k : k + 1], bw[k : k + 1, :])
            cand_lat = lat[:, k : k + 1] + lat[k : k + 1, :]
            better = (cand_bw > bw) | ((cand_bw == bw) & (cand_lat < lat))
            if better.any():
                bw = np.where(better, cand_bw, bw)
                lat = np.where(better, cand_lat, lat)
        direct = self.direct_bandwidth_Bps > 0  # a direct link is used as it is (docs/formats.md)
        return np.where(direct, self.direct_bandwidth_Bps, bw), np.where(direct, self.direct_latency_s, lat)

    @property
    def bandwidth_Bps(self) -> FloatMatrix:
        """Effective bandwidth i -> j (widest path); ``inf`` on the diagonal."""
        return self._routes[0]

    @property
    def latency_s(self) -> FloatMatrix:
        """Summed latency of the chosen path i -> j; 0 on the diagonal."""
        return self._routes[1]

    def _check_connected(self) -> None:
        for d in self.devices:
            check.number(d.memory_bytes, f"devices[{d.id}].memory_bytes", InvalidTopology, ref=d.id)
            check.number(d.base_memory_bytes, f"devices[{d.id}].base_memory_bytes", InvalidTopology, ref=d.id)
            if d.base_memory_bytes > d.memory_bytes:
                raise InvalidTopology(f"devices[{d.id}].base_memory_bytes: {d.base_memory_bytes:.0f} exceeds the "
                                      f"device's memory_bytes {d.memory_bytes:.0f}",
                                      field=f"devices[{d.id}].base_memory_bytes", ref=d.id)
            check.number(d.speed, f"devices[{d.id}].speed", InvalidTopology, positive=True, ref=d.id)
        bw = self.bandwidth_Bps
        missing = np.argwhere(bw <= 0)
        if len(missing):
            a, b = (int(x) for x in missing[0])
            raise InvalidTopology(
                f"the topology is disconnected: device {self.devices[a].id!r} cannot reach "
                f"{self.devices[b].id!r}", field="links", ref=self.devices[a].id)

    # ---- lookups -------------------------------------------------------------------
    @cached_property
    def index(self) -> dict[str, int]:
        return {d.id: i for i, d in enumerate(self.devices)}

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @cached_property
    def speed(self) -> npt.NDArray[np.float64]:
        return np.array([d.speed for d in self.devices], dtype=np.float64)

    @cached_property
    def memory_bytes(self) -> npt.NDArray[np.float64]:
        return np.array([d.memory_bytes for d in self.devices], dtype=np.float64)

    @cached_property
    def hosts(self) -> list[str]:
        """Host ids in first-seen order."""
        return list(dict.fromkeys(d.node for d in self.devices))

    @cached_property
    def digest(self) -> str:
        return _digest(self.to_document())

    # ---- networkx ------------------------------------------------------------------
    def to_networkx(self) -> nx.DiGraph:
        """This topology as a ``networkx.DiGraph`` (attribute names in docs/formats.md).

        Parameters
        ----------
        None

        Returns
        -------
        g : networkx.DiGraph
            Nodes are device ids, in the topology's order, with ``kind``, ``node`` (the host),
            ``memory_bytes``, ``speed`` and ``attrs`` (where set).  Each link is one edge
            ``src -> dst`` with ``bandwidth_Bps``, ``latency_s``, ``bidirectional`` and
            ``position`` (its index in ``links``); a bidirectional link is not repeated
            backwards.  A topology given as matrices has ``g.graph["matrices"] = True`` and one
            edge per ordered pair with a direct channel (or a latency entry), carrying
            ``bandwidth_Bps`` and ``latency_s``.  ``g.graph`` holds ``format``, ``name`` and
            ``attrs`` (where set).

        Raises
        ------
        None

        Examples
        --------
        >>> from solvers import generate_topology
        >>> g = generate_topology("hierarchical", nodes=2, gpus_per_node=2).to_networkx()
        >>> g.nodes["gpu0"]["node"], g.graph["matrices"], g.number_of_edges()
        ('node0', True, 12)
        >>> g.edges["gpu0", "gpu1"]["bandwidth_Bps"]
        11000000000.0
        """
        return topology_to_networkx(self)

    @classmethod
    def from_networkx(cls, g: nx.Graph, *, name: str | None = None) -> Topology:
        """Build and validate a topology from a networkx graph (the inverse of :meth:`to_networkx`).

        Parameters
        ----------
        g : networkx.DiGraph or networkx.Graph
            Node keys are device ids (strings) with the device fields of
            ``placer.topology/v1`` as attributes (``memory_bytes`` required).  Each edge is a
            link with ``bandwidth_Bps`` and optionally ``latency_s``, ``bidirectional`` and
            ``position`` (links are put in ``position`` order, those without one last).  An
            edge of a ``DiGraph`` is one direction unless ``bidirectional`` is true; an edge of
            an undirected ``Graph`` is bidirectional.  With ``g.graph["matrices"]`` true the
            edges fill the bandwidth and latency matrices instead.  Any other attribute is
            refused: put other data under ``attrs``.
        name : str, optional
            Overrides ``g.graph["name"]`` (default ``"topology"``).

        Returns
        -------
        topology : Topology
            For a graph made by :meth:`to_networkx`, the same document and digest as the original.

        Raises
        ------
        InvalidTopology
            ``g`` is a multigraph, an id is not a string, an attribute is unknown, or the
            topology is not valid (two links one way, a device that cannot reach another ...);
            the message names the device or link.

        Examples
        --------
        >>> import networkx as nx
        >>> from solvers import Topology
        >>> g = nx.Graph(name="pair")
        >>> g.add_node("a", kind="A100", memory_bytes=80e9)
        >>> g.add_node("b", kind="A100", memory_bytes=80e9)
        >>> g.add_edge("a", "b", bandwidth_Bps=300e9, latency_s=2e-6)
        >>> topology = Topology.from_networkx(g)
        >>> topology.bandwidth_Bps[1, 0]
        np.float64(300000000000.0)
        >>> Topology.from_networkx(topology.to_networkx()).digest == topology.digest
        True
        """
        return topology_from_document(topology_document_from_networkx(g, name=name))

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": TOPOLOGY_FORMAT, "name": self.name,
                               "devices": [d.to_dict() for d in self.devices]}
        if self.links is not None:
            doc["links"] = [link.to_dict() for link in self.links]
        else:
            doc["bandwidth_Bps"] = self.direct_bandwidth_Bps.tolist()
            doc["latency_s"] = self.direct_latency_s.tolist()
        if self.attrs:
            doc["attrs"] = dict(self.attrs)
        return doc


def _device_index(devices: Sequence[Device]) -> dict[str, int]:
    if not devices:
        raise InvalidTopology("devices: the topology has no devices", field="devices")
    if len(devices) > MAX_DEVICES:
        raise InvalidTopology(f"devices: {len(devices)} devices exceed the limit of {MAX_DEVICES}",
                              field="devices")
    index: dict[str, int] = {}
    for i, d in enumerate(devices):
        if d.id in index:
            raise InvalidTopology(f"devices[{i}].id: duplicate id {d.id!r}", field=f"devices[{i}].id", ref=d.id)
        index[d.id] = i
    return index


def _matrix(raw: Any, n: int, name: str) -> FloatMatrix:
    rows = check.sequence(raw, name, InvalidTopology)
    if len(rows) != n:
        raise InvalidTopology(f"{name}: expected {n} rows (one per device), got {len(rows)}", field=name)
    out = np.zeros((n, n))
    for i, row in enumerate(rows):
        row = check.sequence(row, f"{name}[{i}]", InvalidTopology)
        if len(row) != n:
            raise InvalidTopology(f"{name}[{i}]: expected {n} entries, got {len(row)}", field=f"{name}[{i}]")
        for j, v in enumerate(row):
            out[i, j] = check.number(v, f"{name}[{i}][{j}]", InvalidTopology)
    return out


def _device_from_dict(raw: Any, i: int) -> Device:
    where = f"devices[{i}]"
    raw = check.mapping(raw, where, InvalidTopology)
    check.known_keys(raw, DEVICE_KEYS, where, InvalidTopology)
    if "id" not in raw:
        raise check.fail(InvalidTopology, f"{where}.id", "missing")
    dev_id = check.string(raw["id"], f"{where}.id", InvalidTopology)
    if "memory_bytes" not in raw:
        raise check.fail(InvalidTopology, f"{where}.memory_bytes", "missing", dev_id)
    attrs = raw.get("attrs")
    return Device(
        id=dev_id,
        kind=check.string(raw.get("kind", "GPU"), f"{where}.kind", InvalidTopology),
        node=check.string(raw.get("node", "node0"), f"{where}.node", InvalidTopology),
        memory_bytes=check.number(raw["memory_bytes"], f"{where}.memory_bytes", InvalidTopology, ref=dev_id),
        speed=check.number(raw.get("speed", 1.0), f"{where}.speed", InvalidTopology, positive=True, ref=dev_id),
        base_memory_bytes=check.number(raw.get("base_memory_bytes", 0.0), f"{where}.base_memory_bytes",
                                       InvalidTopology, ref=dev_id),
        attrs=dict(check.shallow(check.mapping(attrs, f"{where}.attrs", InvalidTopology), f"{where}.attrs",
                                 InvalidTopology)) if attrs is not None else None,
    )


def _link_from_dict(raw: Any, j: int) -> Link:
    where = f"links[{j}]"
    raw = check.mapping(raw, where, InvalidTopology)
    check.known_keys(raw, LINK_KEYS, where, InvalidTopology)
    for key in ("src", "dst", "bandwidth_Bps"):
        if key not in raw:
            raise check.fail(InvalidTopology, f"{where}.{key}", "missing")
    return Link(
        src=check.string(raw["src"], f"{where}.src", InvalidTopology),
        dst=check.string(raw["dst"], f"{where}.dst", InvalidTopology),
        bandwidth_Bps=check.number(raw["bandwidth_Bps"], f"{where}.bandwidth_Bps", InvalidTopology, positive=True),
        latency_s=check.number(raw.get("latency_s", 0.0), f"{where}.latency_s", InvalidTopology),
        bidirectional=check.boolean(raw.get("bidirectional", True), f"{where}.bidirectional", InvalidTopology),
    )


def topology_from_document(doc: Any) -> Topology:
    """Validate a ``placer.topology/v1`` document and build the topology."""
    doc = check.mapping(doc, "", InvalidTopology)
    fmt = doc.get("format")
    if fmt != TOPOLOGY_FORMAT:
        raise InvalidTopology(f"format: expected {TOPOLOGY_FORMAT!r}, got {fmt!r}", field="format")
    check.known_keys(doc, TOPOLOGY_KEYS, "", InvalidTopology)
    name = check.string(doc.get("name", "topology"), "name", InvalidTopology)
    raw_devices = check.sequence(doc.get("devices"), "devices", InvalidTopology, nonempty=True)
    devices = [_device_from_dict(raw, i) for i, raw in enumerate(raw_devices)]
    attrs = doc.get("attrs")
    if attrs is not None:
        attrs = dict(check.shallow(check.mapping(attrs, "attrs", InvalidTopology), "attrs", InvalidTopology))
    has_links = "links" in doc
    has_matrix = "bandwidth_Bps" in doc
    if has_links and has_matrix:
        raise InvalidTopology("give either links or bandwidth_Bps/latency_s matrices, not both", field="links")
    if has_matrix:
        return Topology.from_matrices(name, devices, doc["bandwidth_Bps"], doc.get("latency_s"), attrs)
    if "latency_s" in doc:
        raise InvalidTopology("latency_s: a latency matrix needs a bandwidth_Bps matrix", field="latency_s")
    raw_links = check.sequence(doc.get("links", []), "links", InvalidTopology)
    links = [_link_from_dict(raw, j) for j, raw in enumerate(raw_links)]
    return Topology.from_links(name, devices, links, attrs)
