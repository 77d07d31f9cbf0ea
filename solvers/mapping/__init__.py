"""Device mapping for general topologies (Parmesan §V), shared by the solver families.

The stage graph and the paper's instantiations (Eq. 6-9, :mod:`~solvers.mapping.stage_graph`),
the combined objective (:mod:`~solvers.mapping.objective`), the bounds of both
(:mod:`~solvers.mapping.bounds`, resting on :mod:`~solvers.mapping.unionfind` and
:mod:`~solvers.mapping.packing`), the heuristics (CS, p2p-first, random), Alg. 1 and 2
(:mod:`~solvers.mapping.binary`, :mod:`~solvers.mapping.dfs`; on the combined objective
:mod:`~solvers.mapping.search`), the host relaxation (:mod:`~solvers.mapping.hosts`) and the
plans built from a mapping (:mod:`~solvers.mapping.apply`).
"""
