"""Shared Hypothesis strategies: small random DAGs, small topologies, valid plans.

Import what you need (``from tests.strategies import dag_graphs, topologies``); append new
strategies here rather than writing private ones.
"""

from __future__ import annotations

import math
import os
from typing import Any

from hypothesis import strategies as st

from solvers.model.graph import Edge, KindTimes, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology

PROFILE = os.environ.get("PLACER_HYPOTHESIS_PROFILE", "ci")  # "ci" (derandomized) or "fuzz" (random)
FUZZ_FACTOR = 10


def examples(n: int) -> int:
    """A property test's example count: ``n`` in the ``ci`` profile, ten times that in ``fuzz``."""
    return n * FUZZ_FACTOR if PROFILE == "fuzz" else n


HUGE_MEMORY_BYTES = 1e18  # devices big enough that memory never decides in property tests

_times = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
_sizes = st.sampled_from([0.0, 1e3, 1e6, 4e6])


OVERRIDE_KIND = "fast"  # device kind for which random graphs may carry per-kind ``times``


@st.composite
def dag_graphs(draw: st.DrawFn, min_ops: int = 1, max_ops: int = 10, edge_p: float = 0.35,
               with_params: bool = True, with_overrides: bool = True) -> OpGraph:
    """A random DAG: op ``op{i}`` may feed ``op{j}`` for ``i < j``; node records in shuffled order.

    With ``with_overrides`` some nodes carry ``times`` for device kind :data:`OVERRIDE_KIND`.
    """
    n = draw(st.integers(min_ops, max_ops))
    nodes = []
    for i in range(n):
        override = with_overrides and draw(st.integers(0, 3)) == 0
        times = {OVERRIDE_KIND: KindTimes(draw(_times), draw(_times))} if override else None
        nodes.append(Node(f"op{i}", "aten.x", draw(_times), draw(_times), times=times,
                          param_bytes=draw(_sizes) if with_params else 0.0, act_bytes=draw(_sizes)))
    edges = [Edge(f"op{i}", f"op{j}", draw(_sizes))
             for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < edge_p]
    perm = draw(st.permutations(range(n)))
    return OpGraph.build("random", [nodes[i] for i in perm], edges, profiled_batch_size=draw(st.integers(1, 4)))


@st.composite
def topologies(draw: st.DrawFn, min_devices: int = 1, max_devices: int = 6,
               kinds: tuple[str, ...] = ("GPU", OVERRIDE_KIND)) -> Topology:
    """A random connected topology: a spanning chain plus random extra links, varied speeds and kinds."""
    n = draw(st.integers(min_devices, max_devices))
    devices = [Device(f"d{i}", draw(st.sampled_from(kinds)), f"h{i // 2}", HUGE_MEMORY_BYTES,
                      draw(st.sampled_from([0.5, 1.0, 2.0]))) for i in range(n)]
    bandwidth = st.sampled_from([1e6, 1e7, 1e9])
    latency = st.sampled_from([0.0, 1e-3, 0.1])
    links = [Link(f"d{i}", f"d{i + 1}", draw(bandwidth), draw(latency)) for i in range(n - 1)]
    links += [Link(f"d{i}", f"d{j}", draw(bandwidth), draw(latency))
              for i in range(n) for j in range(i + 2, n) if draw(st.booleans())]
    return Topology.from_links("random", devices, links)


@st.composite
def convex_stages(draw: st.DrawFn, graph: OpGraph, max_stages: int) -> list[list[str]]:
    """Ops split into stages such that every edge goes to the same or a later stage (none empty)."""
    stage = [0] * graph.n_ops
    for v in graph.topo_order.tolist():
        low = max((stage[u] for u in graph.pred[v]), default=0)
        stage[v] = draw(st.integers(low, max(low, max_stages - 1)))
    used = sorted(set(stage))
    out: list[list[str]] = [[] for _ in used]
    for v in graph.topo_order.tolist():
        out[used.index(stage[v])].append(graph.nodes[v].id)
    return out


@st.composite
def device_groups(draw: st.DrawFn, topology: Topology, n_groups: int) -> list[list[str]]:
    """``n_groups`` disjoint non-empty device groups (random sizes, random devices)."""
    ids = list(draw(st.permutations([d.id for d in topology.devices])))
    extra = len(ids) - n_groups
    sizes = [1] * n_groups
    for _ in range(draw(st.integers(0, extra))):
        sizes[draw(st.integers(0, n_groups - 1))] += 1
    groups, at = [], 0
    for size in sizes:
        groups.append(ids[at:at + size])
        at += size
    return groups


@st.composite
def throughput_cases(draw: st.DrawFn, max_ops: int = 10, max_devices: int = 6) -> tuple[Problem, Plan]:
    """A throughput problem and a valid pipeline plan (convex stages, replicas, either schedule)."""
    topo = draw(topologies(max_devices=max_devices))
    graph = draw(dag_graphs(max_ops=max_ops))
    stages = draw(convex_stages(graph, topo.n_devices))
    groups = draw(device_groups(topo, len(stages)))
    mb = draw(st.integers(1, 5))
    schedule = draw(st.sampled_from(["gpipe", "1f1b"]))
    recompute = draw(st.booleans())
    graph = with_rows_for(graph, [len(devs) for devs in groups])
    problem = Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(mb,), schedule=schedule))
    plan = Plan(tuple(Stage(tuple(ops), tuple(devs)) for ops, devs in zip(stages, groups, strict=True)),
                micro_batches=mb, schedule=schedule, recompute=recompute)
    return problem, plan


def with_rows_for(graph: OpGraph, replica_counts: list[int]) -> OpGraph:
    """``graph`` with its ``profiled_batch_size`` scaled by the least common multiple of
    ``replica_counts``, so that every such stage splits a micro-batch evenly (docs/formats.md)."""
    rows = graph.profiled_batch_size * math.lcm(*replica_counts)
    if rows == graph.profiled_batch_size:
        return graph
    return OpGraph.build(graph.name, list(graph.nodes), list(graph.edges), profiled_batch_size=rows,
                         attrs=dict(graph.attrs))


@st.composite
def latency_cases(draw: st.DrawFn, max_ops: int = 10, max_devices: int = 5) -> tuple[Problem, Plan]:
    """A latency problem and a valid plan placing every op on one device (any devices, any split)."""
    topo = draw(topologies(max_devices=max_devices))
    graph = draw(dag_graphs(max_ops=max_ops))
    pass_: Any = draw(st.sampled_from(["forward", "training"]))
    n_groups = draw(st.integers(1, topo.n_devices))
    groups = [[d] for d in draw(st.permutations([d.id for d in topo.devices]))[:n_groups]]
    owner = [draw(st.integers(0, n_groups - 1)) for _ in range(graph.n_ops)]
    used = sorted(set(owner))
    stages = tuple(Stage(tuple(graph.nodes[v].id for v in range(graph.n_ops) if owner[v] == g), tuple(groups[g]))
                   for g in used)
    problem = Problem(graph, topo, "latency", ProblemSettings(pass_=pass_))
    return problem, Plan(stages, micro_batches=draw(st.integers(1, 2)))


# ---- documents with every optional field (networkx and GraphML round trips) ---------------------
xml_text = st.text(st.characters(min_codepoint=0x20, blacklist_categories=("Cs",), blacklist_characters="\ufffe\uffff"),
                   min_size=1, max_size=8)
"""Non-empty text that XML can carry (no control characters)."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
"""Any JSON value (what a document's ``attrs`` may hold)."""

_attrs = st.none() | st.dictionaries(st.text(max_size=5), json_values, min_size=1, max_size=3)
_numbers = st.floats(0.0, 1e12, allow_nan=False) | st.sampled_from([0.0, 1e-9, 1e18])


@st.composite
def full_graphs(draw: st.DrawFn, max_ops: int = 8, ids: st.SearchStrategy[str] = xml_text) -> OpGraph:
    """A random DAG using every field of ``placer.opgraph/v1``: ids of any text, ``layer``,
    ``constant``, per-kind ``times`` for several kinds, nested ``attrs`` on nodes and on the graph,
    a recorded backward split on some nodes, and edges in an order that is not grouped by source."""
    names = draw(st.lists(ids, min_size=1, max_size=max_ops, unique=True))
    nodes = []
    for op_id in names:
        kinds = draw(st.lists(xml_text, max_size=3, unique=True))
        times = {k: KindTimes(draw(_numbers), draw(_numbers)) for k in kinds} or None
        split = draw(st.just((None, None)) | st.tuples(st.floats(1e-6, 1e12), _numbers))
        nodes.append(Node(op_id, draw(xml_text), draw(_numbers), draw(_numbers), draw(_numbers), draw(_numbers),
                          draw(_numbers), draw(_numbers), draw(st.booleans()), draw(st.none() | st.just("") | xml_text),
                          times, draw(_attrs), *split))
    pairs = [(i, j) for i in range(len(names)) for j in range(i + 1, len(names)) if draw(st.booleans())]
    pairs = draw(st.permutations(pairs))
    edges = [Edge(names[i], names[j], draw(_numbers)) for i, j in pairs]
    perm = draw(st.permutations(range(len(nodes))))
    return OpGraph.build(draw(xml_text), [nodes[i] for i in perm], edges, draw(st.integers(1, 512)),
                         draw(_attrs))


def _devices(draw: st.DrawFn, n: int) -> list[Device]:
    return [Device(f"d{i}", draw(xml_text), draw(xml_text), draw(_numbers), draw(st.sampled_from([0.5, 1.0, 3.0])),
                   draw(_attrs)) for i in range(n)]


@st.composite
def asymmetric_topologies(draw: st.DrawFn, max_devices: int = 6) -> Topology:
    """A connected topology of links in any order, some one-way with different figures each way
    (a one-way ring keeps it connected), with ``attrs`` on devices and topology."""
    n = draw(st.integers(1, max_devices))
    bandwidth = st.sampled_from([1e6, 2.5e9, 1e11])
    latency = st.sampled_from([0.0, 1e-6, 0.25])
    links = []
    if n > 1:
        ring_bidirectional = draw(st.booleans())
        links = [Link(f"d{i}", f"d{(i + 1) % n}", draw(bandwidth), draw(latency), ring_bidirectional)
                 for i in range(n - 1 if ring_bidirectional else n)]
        used = {(link.src, link.dst) for link in links} | {(link.dst, link.src) for link in links if link.bidirectional}
        for i in range(n):
            for j in range(n):
                if i != j and (f"d{i}", f"d{j}") not in used and draw(st.booleans()):
                    both = (f"d{j}", f"d{i}") not in used and draw(st.booleans())
                    links.append(Link(f"d{i}", f"d{j}", draw(bandwidth), draw(latency), both))
                    used |= {(f"d{i}", f"d{j}")} | ({(f"d{j}", f"d{i}")} if both else set())
    links = draw(st.permutations(links))
    return Topology.from_links(draw(xml_text), _devices(draw, n), links, draw(_attrs))


@st.composite
def matrix_topologies(draw: st.DrawFn, max_devices: int = 5) -> Topology:
    """A topology given as asymmetric bandwidth and latency matrices (a one-way ring keeps it
    connected), with latency entries also where a pair has no channel."""
    n = draw(st.integers(1, max_devices))
    ring = {(i, (i + 1) % n) for i in range(n)}
    bw = [[0.0 if i == j else draw(st.sampled_from([1e6, 3e9] if (i, j) in ring else [0.0, 1e6, 3e9]))
           for j in range(n)] for i in range(n)]
    lat = [[0.0 if i == j else draw(st.sampled_from([0.0, 1e-5, 0.5])) for j in range(n)] for i in range(n)]
    return Topology.from_matrices(draw(xml_text), _devices(draw, n), bw, lat, draw(_attrs))


@st.composite
def partition_problems(draw: st.DrawFn, max_ops: int = 7, max_stages: int = 3, max_replicas: int = 2,
                       zero_bytes: bool = False, idle_ops: bool = False) -> Problem:
    """A throughput problem with fixed ``S`` stages of ``R`` replicas on ``S x R`` identical devices
    joined by identical channels; memory sometimes binds (the exact DP's home ground).  ``idle_ops``:
    some source ops are model inputs and some ops constants (a stage of those only cannot run)."""
    graph = draw(dag_graphs(min_ops=1, max_ops=max_ops, with_overrides=False))
    if idle_ops:
        kinds = [draw(st.sampled_from(["compute", "input", "constant"] if not graph.pred[graph.index[n.id]]
                                      else ["compute", "compute", "constant"])) for n in graph.nodes]
        nodes = [Node(n.id, "input" if k == "input" else n.op, 0.0 if k == "input" else n.fwd_s,
                      0.0 if k == "input" else n.bwd_s, n.param_bytes if k == "compute" else 0.0, n.act_bytes,
                      constant=k == "constant") for n, k in zip(graph.nodes, kinds, strict=True)]
        graph = OpGraph.build(graph.name, nodes, list(graph.edges), profiled_batch_size=graph.profiled_batch_size)
    if zero_bytes:
        graph = OpGraph.build(graph.name, list(graph.nodes), [Edge(e.src, e.dst, 0.0) for e in graph.edges],
                              profiled_batch_size=graph.profiled_batch_size)
    n_stages = draw(st.integers(1, min(max_stages, graph.n_ops)))
    replicas = draw(st.integers(1, max_replicas))
    graph = with_rows_for(graph, [replicas])
    memory = draw(st.sampled_from([HUGE_MEMORY_BYTES, 2e7, 6e7]))
    devices = [Device(f"d{i}", "GPU", f"h{i}", memory) for i in range(n_stages * replicas)]
    bandwidth, latency = draw(st.sampled_from([1e6, 1e9])), draw(st.sampled_from([0.0, 1e-3]))
    links = [Link(a.id, b.id, bandwidth, latency) for i, a in enumerate(devices) for b in devices[i + 1:]]
    topo = Topology.from_links("identical", devices, links)
    settings = ProblemSettings(micro_batches=(draw(st.integers(1, 4)),), stages=n_stages, replicas=replicas,
                        schedule=draw(st.sampled_from(["gpipe", "1f1b"])), recompute=draw(st.booleans()),
                        memory_headroom=0.0)
    return Problem(graph, topo, "throughput", settings)


@st.composite
def memory_bound_latency_problems(draw: st.DrawFn, max_ops: int = 5, max_devices: int = 3, min_devices: int = 1,
                                  node_size: int | None = None,
                                  edge_sizes: tuple[float, ...] = (0.0, 1e6, 4e6, 3e7),
                                  memory_shares: tuple[float, ...] = (0.3, 0.45, 0.6, 0.8, 1.5)) -> Problem:
    """A small latency problem whose devices may be too small for the whole graph: mostly a chain
    (each ``op{i} -> op{i+1}`` edge is likely) with some skip edges, device memories drawn as shares of
    the graph's need on one or two nodes, asymmetric channels (slower between nodes), and sometimes one
    op pinned to a device.  ``node_size``: device ``k`` is on node ``k // node_size`` (default: a random
    one of two); ``edge_sizes``: the bytes an edge may carry; ``memory_shares``: a device's memory as
    shares of the graph's need."""
    n = draw(st.integers(2, max_ops))
    unit = 2**26
    nodes = [Node(f"op{i}", "aten.x", draw(_times) + 0.25, draw(_times), param_bytes=draw(st.integers(0, 4)) * unit,
                  act_bytes=draw(st.integers(0, 2)) * unit, mem_fwd_bytes=draw(st.integers(0, 2)) * unit)
             for i in range(n)]
    edge_bytes = st.sampled_from(edge_sizes)
    edges = [Edge(f"op{i}", f"op{i + 1}", draw(edge_bytes)) for i in range(n - 1) if draw(st.integers(0, 5))]
    edges += [Edge(f"op{i}", f"op{j}", draw(edge_bytes))
              for i in range(n) for j in range(i + 2, n) if draw(st.integers(0, 3)) == 0]
    pass_: Any = draw(st.sampled_from(["forward", "training"]))
    factor = 2.0 if pass_ == "training" else 1.0  # a training pass holds gradients beside the parameters
    need = sum(nd.param_bytes * factor + nd.act_bytes for nd in nodes) + 2 * unit
    n_dev = draw(st.integers(min_devices, max_devices))
    node = [draw(st.integers(0, 1)) if node_size is None else k // node_size for k in range(n_dev)]
    devices = [Device(f"d{k}", f"K{k}", f"h{node[k]}", need * draw(st.sampled_from(memory_shares)),
                      draw(st.sampled_from([0.5, 1.0, 2.0]))) for k in range(n_dev)]
    inside, across = st.sampled_from([1e9, 1e10]), st.sampled_from([1e8, 1e9])  # channels across nodes are slower
    bandwidth = [[draw(inside if node[a] == node[b] else across) for b in range(n_dev)] for a in range(n_dev)]
    near, far = st.sampled_from([0.0, 1e-3]), st.sampled_from([1e-3, 0.05])
    latency = [[draw(near if node[a] == node[b] else far) for b in range(n_dev)] for a in range(n_dev)]
    topology = Topology.from_matrices("small", devices, bandwidth, latency)
    pinned = {f"op{draw(st.integers(0, n - 1))}": f"d{draw(st.integers(0, n_dev - 1))}"} if draw(st.booleans()) else {}
    settings = ProblemSettings(pass_=pass_, optimizer_bytes_per_param_byte=1.0, pinned=pinned)
    return Problem(OpGraph.build("memory-bound", nodes, edges), topology, "latency", settings)
