"""Topology and op-graph generators (docs/formats.md; sources in docs/generators.md).

``generate_topology(kind, **params)`` and ``generate_graph(kind, **params)`` call the generator
registered under ``kind`` in :data:`TOPOLOGY_KINDS` / :data:`GRAPH_KINDS`; every generator has
keyword-only, typed, defaulted parameters (random ones take ``seed``) and is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solvers.generate._params import MAX_GENERATED_DEVICES, MAX_SEED, call_generator, coerce_params, parameter_types
from solvers.generate.cnn import cnn
from solvers.generate.grid import mesh2d, mesh3d, torus2d, torus3d
from solvers.generate.random_dag import random_dag
from solvers.generate.random_topologies import random_blk_1, random_blk_2, uniform_dist
from solvers.generate.topologies import dgx1, hierarchical, moirai_inter, moirai_intra
from solvers.generate.transformer import transformer
from solvers.model.graph import OpGraph
from solvers.model.topology import Topology

TOPOLOGY_KINDS: dict[str, Callable[..., Topology]] = {
    "hierarchical": hierarchical,
    "dgx1": dgx1,
    "mesh2d": mesh2d,
    "mesh3d": mesh3d,
    "torus2d": torus2d,
    "torus3d": torus3d,
    "random_blk_1": random_blk_1,
    "random_blk_2": random_blk_2,
    "uniform_dist": uniform_dist,
    "moirai_inter": moirai_inter,
    "moirai_intra": moirai_intra,
}

TOPOLOGY_SIZE_MAXIMA: dict[str, int] = {
    **dict.fromkeys(("nodes", "gpus_per_node", "devices", "nx", "ny", "nz"), MAX_GENERATED_DEVICES),
    "boxes": MAX_GENERATED_DEVICES // 8,
}
"""The most each size parameter of the topology generators may be on its own; together (nodes x
gpus_per_node, nx x ny x nz ...) they make at most :data:`MAX_GENERATED_DEVICES` devices."""

GRAPH_KINDS: dict[str, Callable[..., OpGraph]] = {
    "transformer": transformer,
    "cnn": cnn,
    "random_dag": random_dag,
}


def generate_topology(kind: str, **params: Any) -> Topology:
    """Generate a topology of a named kind (docs/generators.md).

    Parameters
    ----------
    kind : str
        A key of :data:`TOPOLOGY_KINDS` (case-insensitive): ``hierarchical``, ``dgx1``,
        ``mesh2d``, ``torus3d``, ``random_blk_1``, ``moirai_inter`` ...
    **params
        The kind's keyword parameters (:func:`parameter_types` lists them with their types and
        defaults); text values are converted (``"4"`` -> 4), dashes read as underscores.

    Returns
    -------
    topology : Topology
        Deterministic: the same parameters (``seed`` included) give the same topology.

    Raises
    ------
    InvalidInput
        Unknown kind or parameter, or a value of the wrong type or range (the message names it).

    Examples
    --------
    >>> from solvers import generate_topology
    >>> topology = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    >>> topology.n_devices, topology.devices[0].id
    (8, 'gpu0')
    >>> generate_topology("hierarchical", gpus=4)
    Traceback (most recent call last):
    ...
    solvers.model.errors.InvalidInput: topology 'hierarchical': unknown parameter 'gpus' (valid: ...)
    """
    return call_generator("topology", TOPOLOGY_KINDS, kind, params)


def generate_graph(kind: str, **params: Any) -> OpGraph:
    """Generate an operator graph of a named kind (docs/generators.md).

    Parameters
    ----------
    kind : str
        A key of :data:`GRAPH_KINDS` (case-insensitive): ``transformer``, ``cnn`` or
        ``random_dag``.
    **params
        The kind's keyword parameters (:func:`parameter_types` lists them with their types and
        defaults); text values are converted (``"4"`` -> 4), dashes read as underscores.

    Returns
    -------
    graph : OpGraph
        Deterministic: the same parameters (``seed`` included) give the same graph.

    Raises
    ------
    InvalidInput
        Unknown kind or parameter, or a value of the wrong type or range (the message names it).

    Examples
    --------
    >>> from solvers import generate_graph
    >>> graph = generate_graph("transformer", layers=2)
    >>> graph.n_ops, len(graph.edges)
    (31, 36)
    >>> generate_graph("random_dag", n_ops="100", seed=3).n_ops
    100
    >>> generate_graph("lstm")
    Traceback (most recent call last):
    ...
    solvers.model.errors.InvalidInput: unknown graph kind 'lstm' (valid: cnn, random_dag, transformer)
    """
    return call_generator("graph", GRAPH_KINDS, kind, params)


__all__ = ["GRAPH_KINDS", "MAX_GENERATED_DEVICES", "MAX_SEED", "TOPOLOGY_KINDS", "TOPOLOGY_SIZE_MAXIMA", "coerce_params",
           "generate_graph", "generate_topology", "parameter_types"]
