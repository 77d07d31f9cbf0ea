"""Small problems every solver must handle (used by the contract suite)."""

from __future__ import annotations

from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology

GiB = float(2**30)


def diamond_graph(n_layers: int = 4, param_bytes: float = 1e6) -> OpGraph:
    """A chain of diamonds (so there are several topological orders): in -> (a, b) -> join -> ..."""
    nodes = [Node("in", "aten.embedding", 1e-3, 2e-3, param_bytes, 4e6, 1e6, 1e6)]
    edges = []
    prev = "in"
    for i in range(n_layers):
        a, b, j = f"l{i}.a", f"l{i}.b", f"l{i}.join"
        nodes += [Node(a, "aten.mm", 2e-3 * (1 + i % 2), 4e-3, param_bytes, 4e6, 1e6, 2e6),
                  Node(b, "aten.mm", 1.5e-3, 3e-3, param_bytes, 4e6, 1e6, 2e6),
                  Node(j, "aten.add", 2e-4, 2e-4, 0.0, 4e6, 1e6, 1e6)]
        edges += [Edge(prev, a, 4e6), Edge(prev, b, 4e6), Edge(a, j, 4e6), Edge(b, j, 4e6)]
        prev = j
    nodes.append(Node("loss", "aten.nll_loss", 1e-4, 1e-4, 0.0, 1e3, 1e3, 1e3))
    edges.append(Edge(prev, "loss", 4e6))
    return OpGraph.build("diamonds", nodes, edges, profiled_batch_size=8)


def two_node_topology(gpus_per_node: int = 2, memory_bytes: float = 16 * GiB,
                      speeds: tuple[float, ...] | None = None) -> Topology:
    """Two hosts of ``gpus_per_node`` devices: 10 GB/s inside a host, 1 GB/s between hosts."""
    devices = []
    for h in range(2):
        for g in range(gpus_per_node):
            i = h * gpus_per_node + g
            speed = speeds[i] if speeds else 1.0
            devices.append(Device(f"h{h}g{g}", "V100", f"h{h}", memory_bytes, speed))
    links = []
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            same = a.node == b.node
            links.append(Link(a.id, b.id, 10e9 if same else 1e9, 5e-6 if same else 2e-5))
    return Topology.from_links("two-hosts", devices, links)


def throughput_problem(seed: int = 0) -> Problem:
    return Problem(diamond_graph(), two_node_topology(), "throughput",
                   ProblemSettings(micro_batches=(4,), seed=seed))


def latency_problem(pass_: str = "forward", seed: int = 0) -> Problem:
    topo = two_node_topology(speeds=(1.0, 1.5, 0.8, 1.0))
    return Problem(diamond_graph(), topo, "latency", ProblemSettings(pass_=pass_, seed=seed))  # type: ignore[arg-type]


def infeasible_problem(objective: str) -> Problem:
    """Parameters far larger than any device's memory: nothing can fit."""
    graph = diamond_graph(param_bytes=4 * GiB)
    topo = two_node_topology(memory_bytes=1 * GiB)
    return Problem(graph, topo, objective, ProblemSettings())  # type: ignore[arg-type]


def larger_problem(objective: str, n_layers: int = 60) -> Problem:
    """Big enough that exact solvers cannot finish within a short time limit."""
    graph = diamond_graph(n_layers)
    topo = two_node_topology(gpus_per_node=4)  # one micro-batch count, so that iteration times compare
    return Problem(graph, topo, objective, ProblemSettings(micro_batches=(4,)))  # type: ignore[arg-type]


def one_stage_problem() -> Problem:
    """Throughput with one stage replicated on every device: no stage-to-stage traffic at all."""
    return Problem(diamond_graph(), two_node_topology(), "throughput",
                   ProblemSettings(micro_batches=(4,), stages=1, replicas=4))


def one_device_problem(objective: str) -> Problem:
    """A topology of a single device: one stage, no communication of any kind."""
    topo = Topology.from_links("one-device", [Device("g0", "V100", "h0", 16 * GiB, 1.0)], [])
    return Problem(diamond_graph(), topo, objective, ProblemSettings(micro_batches=(4,)))  # type: ignore[arg-type]


def demo_problem() -> Problem:
    """The problem ``make run``'s demo seeded before it took a checked-in extracted GPT-2
    (service/demo.py): a 4-layer, 1024-wide transformer on two hosts of four GPUs, 8 micro-batches."""
    graph = generate_graph("transformer", layers=4, hidden=1024, heads=16, name="demo-transformer-4L")
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    return Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(8,)))
