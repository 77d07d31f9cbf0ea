"""Parmesan (Liu et al.): op-level partitioning and optimal device mapping on general topologies.

Modules by algorithm step: :mod:`costs` (Eq. 3 / Eq. 14 reference costs), :mod:`clustering`
(§IV-B), :mod:`fronted` (Definition 2, down-closed set enumeration), :mod:`dp` (Eq. 2 / Eq. 13),
:mod:`refine` (§IV-C), :mod:`mapping` (§V, Alg. 1 and 2), :mod:`search` (Appendix B) and
:mod:`solver` (the registered back-end).
"""
