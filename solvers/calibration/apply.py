"""Apply a calibration: the graph and topology as the cost model should see them (docs/cost-model.md).

:func:`apply_calibration` returns adjusted copies, so every solver and the simulator use the
calibrated figures without knowing of calibrations:

- **compute**: for each device kind of the topology that the calibration covers, every op gets
  ``times`` for that kind: ``scale[class] * t + launch_overhead_s`` for its forward and (when not 0)
  its backward, ``t`` being the graph's ``times`` for the kind if it has them, else the reference
  time ``/ speed`` of the kind's devices;
- **channels**: every pair of devices of a calibrated channel class (same host: the same ``node``)
  gets the class's latency and bandwidth (the topology becomes full matrices);
- **collectives**: ``attrs.calibration.collective_efficiency`` of the topology divides every
  all-reduce time (:func:`solvers.cost.comm.allreduce_s`);
- **tensor parallelism**: ``attrs.calibration.tp_efficiency`` (device kind -> ``e``) makes a split op
  of a group of ``t`` take ``time / (t e)`` (:mod:`solvers.cost.tensor_parallel`);
- **memory**: each device's ``memory_bytes`` becomes ``(memory_bytes - process_bytes) / (1 + fraction)``,
  so a solver's memory check on the modelled bytes is the check of the measured peak
  ``process_bytes + (1 + fraction) * modelled``, which the simulator reports as ``peak_memory_bytes``;
  ``attrs.calibration.retained`` makes the modelled bytes of a GPipe / 1F1B stage count that share of
  the kept bytes of the micro-batches it is not holding in flight
  (:func:`solvers.cost.memory.held_micro_batches`, used by every solver and the simulator), and
  ``attrs.calibration.kept_outputs`` makes a latency plan's device count that share of what the op-level
  runner keeps beyond the model (:func:`solvers.cost.memory.op_level_kept_bytes`);
- **split backward**: ``attrs.calibration.split_backward`` (device kind -> ``k``) makes a backward
  that a zero-bubble schedule runs as two actions take ``k`` times its whole time, each part in
  proportion (:func:`solvers.cost.calibrated.split_backward_factor`, the action-list engine and the
  schedule search's estimates);
- **step**: ``attrs.calibration.step_fixed_s`` and ``step_per_param_byte_s`` of the topology add a
  training iteration's work beyond the pipeline to ``iteration_s``
  (:func:`solvers.cost.calibrated.step_overhead_s`);
- **op-level execution**: ``attrs.calibration.dataflow_overhead_s`` (device kind -> seconds, where not 0)
  is added by the op-level simulator of latency plans to every op's forward and backward task on a
  device of that kind (:func:`solvers.cost.calibrated.dataflow_overhead_s`).

The copies carry ``attrs.calibration`` (the calibration's digest and the source document's digest):
a plan solved on them names the source graph and topology (:func:`solvers.cost.calibrated.source_digest`), so it launches with
the files it was solved from, and every simulation reports ``metrics.calibration``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from solvers.calibration.document import Calibration, op_class
from solvers.cost.calibrated import source_digest
from solvers.model.errors import InvalidInput
from solvers.model.graph import OpGraph
from solvers.model.graph_records import KindTimes
from solvers.model.topology import Topology


def kind_speed(topology: Topology, kind: str) -> float:
    """The speed of the devices of ``kind``; :class:`InvalidInput` when they differ (a calibration is per kind)."""
    speeds = {d.speed for d in topology.devices if d.kind == kind}
    if len(speeds) > 1:
        raise InvalidInput(f"devices.{kind}: the topology's {kind!r} devices have different speeds "
                           f"({', '.join(f'{s:g}' for s in sorted(speeds))}); a calibration scales one kind at one "
                           "speed: give them different kinds", field=f"devices.{kind}", ref=kind)
    return speeds.pop() if speeds else 1.0


def channel_class(topology: Topology, a: int, b: int) -> str:
    """``same_host`` when devices ``a`` and ``b`` share a ``node``, else ``cross_host``."""
    return "same_host" if topology.devices[a].node == topology.devices[b].node else "cross_host"


def calibrated_graph(graph: OpGraph, topology: Topology, cal: Calibration) -> OpGraph:
    """The graph with ``times`` for every calibrated device kind of the topology (module docstring)."""
    if _already(graph, cal):
        return graph
    kinds = sorted({d.kind for d in topology.devices} & set(cal.devices))
    speeds = {k: kind_speed(topology, k) for k in kinds}
    nodes = []
    for node in graph.nodes:
        times = dict(node.times or {})
        cls = op_class(node.op)
        for k in kinds:
            kc = cal.devices[k]
            base = times.get(k)
            fwd, bwd = (base.fwd_s, base.bwd_s) if base is not None else (node.fwd_s / speeds[k],
                                                                           node.bwd_s / speeds[k])
            scale = float(kc.scale.get(cls, 1.0))
            times[k] = KindTimes(scale * fwd + kc.launch_overhead_s,
                                 scale * bwd + (kc.launch_overhead_s if bwd > 0 else 0.0))
        nodes.append(replace(node, times=times or None))
    attrs = {**dict(graph.attrs), "calibration": {"digest": cal.digest, "source_digest": source_digest(graph)}}
    return OpGraph.build(graph.name, nodes, list(graph.edges), graph.profiled_batch_size, attrs)


def calibrated_topology(topology: Topology, cal: Calibration) -> Topology:
    """The topology with the calibrated channels, memory and collective efficiency (module docstring)."""
    if _already(topology, cal):
        return topology
    n = topology.n_devices
    bw = np.array(topology.bandwidth_Bps, dtype=np.float64, copy=True)
    lat = np.array(topology.latency_s, dtype=np.float64, copy=True)
    for a in range(n):
        for b in range(n):
            ch = cal.channels.get(channel_class(topology, a, b)) if a != b else None
            if ch is not None:
                bw[a, b], lat[a, b] = ch.bandwidth_Bps, ch.latency_s
    mem = cal.memory
    dataflow = {k: kc.dataflow_overhead_s for k, kc in sorted(cal.devices.items()) if kc.dataflow_overhead_s}
    devices = []
    for d in topology.devices:
        usable = (d.memory_bytes - mem.process_bytes) / (1.0 + mem.fraction)
        if usable <= 0:
            raise InvalidInput(f"memory.process_bytes: {mem.process_bytes:.0f} bytes exceed device {d.id!r}'s "
                               f"{d.memory_bytes:.0f}", field="memory.process_bytes", ref=d.id)
        devices.append(replace(d, memory_bytes=usable))
    info: dict[str, Any] = {"digest": cal.digest, "source_digest": source_digest(topology),
                            "collective_efficiency": cal.collective_efficiency,
                            "process_bytes": mem.process_bytes, "fraction": mem.fraction,
                            **({"retained": mem.retained} if mem.retained else {}),
                            **({"kept_outputs": mem.kept_outputs} if mem.kept_outputs else {}),
                            "step_fixed_s": cal.step.fixed_s, "step_per_param_byte_s": cal.step.per_param_byte_s,
                            **({"tp_efficiency": dict(cal.tp_efficiency)} if cal.tp_efficiency else {}),
                            **({"split_backward": dict(cal.split_backward)} if cal.split_backward else {}),
                            **({"dataflow_overhead_s": dataflow} if dataflow else {})}
    return Topology.from_matrices(topology.name, devices, np.where(np.isfinite(bw), bw, 0.0).tolist(), lat.tolist(),
                                  {**dict(topology.attrs), "calibration": info})


def apply_calibration(graph: OpGraph, topology: Topology, cal: Calibration | None) -> tuple[OpGraph, Topology]:
    """``(graph, topology)`` as ``cal`` says the cost model should see them (module docstring); unchanged for None.

    Examples
    --------
    >>> from solvers import generate_graph, generate_topology
    >>> from solvers.calibration import Calibration, KindCalibration
    >>> g, t = generate_graph("random_dag", n_ops=4, seed=1), generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    >>> cal = Calibration({t.devices[0].kind: KindCalibration({"elementwise": 2.0, "matmul": 2.0})})
    >>> g2, t2 = apply_calibration(g, t, cal)
    >>> kind = t.devices[0].kind
    >>> all(abs(n2.times[kind].fwd_s - 2 * n.fwd_s / t.devices[0].speed) < 1e-15 for n, n2 in zip(g.nodes, g2.nodes))
    True
    """
    if cal is None:
        return graph, topology
    return calibrated_graph(graph, topology, cal), calibrated_topology(topology, cal)


def _already(doc: OpGraph | Topology, cal: Calibration) -> bool:
    info = (doc.attrs or {}).get("calibration")
    if not isinstance(info, dict):
        return False
    if info.get("digest") != cal.digest:
        raise InvalidInput(f"calibration: the {type(doc).__name__.lower()} is already calibrated by "
                           f"{info.get('digest')}; apply a calibration to the source document", field="calibration")
    return True
