"""The format names of the op-graph and topology documents and the fields each of their records
may carry (docs/formats.md; docs/formats.md).

Shared by the document loaders (:mod:`solvers.model.graph`, :mod:`solvers.model.topology`) and
the networkx views (:mod:`solvers.model.interop`), which refuse a field the format does not know.
"""

from __future__ import annotations

GRAPH_FORMAT = "placer.opgraph/v1"
TOPOLOGY_FORMAT = "placer.topology/v1"

GRAPH_KEYS = frozenset({"format", "name", "profiled_batch_size", "nodes", "edges", "attrs"})
NODE_KEYS = frozenset(
    {"id", "op", "fwd_s", "bwd_s", "times", "param_bytes", "act_bytes", "mem_fwd_bytes",
     "mem_bwd_bytes", "constant", "layer", "attrs", "bwd_input_s", "bwd_weight_s"}
)
EDGE_KEYS = frozenset({"src", "dst", "bytes"})

TOPOLOGY_KEYS = frozenset({"format", "name", "devices", "links", "bandwidth_Bps", "latency_s", "attrs"})
DEVICE_KEYS = frozenset({"id", "kind", "node", "memory_bytes", "speed", "attrs",
                         "base_memory_bytes"})
LINK_KEYS = frozenset({"src", "dst", "bandwidth_Bps", "latency_s", "bidirectional"})
