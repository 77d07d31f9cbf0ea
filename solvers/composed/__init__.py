"""Solvers that run another family's solvers, composed above the solver families.

No family imports another, so where one solver runs another's, the composition lives here,
above both as the registry is (docs/architecture.md), one module per composed solver so that
loading one loads only the families it runs:

* :mod:`solvers.composed.parmesan`: Parmesan's safety net.  With ``baseline_guard`` (the
  default), Parmesan also simulates the plans of ``even`` and ``pipedream`` and keeps the best
  (docs/parmesan.md); the registry's ``parmesan`` is
  :class:`~solvers.composed.parmesan.ParmesanWithSafetyNet`.
* :mod:`solvers.composed.moirai`: MOIRAI's warm start.  The plans of the list schedulers
  ``heft``, ``cpop``, ``m-etf``, ``m-sct``, ``m-topo`` (the baselines family) and ``celeritas``
  are warm-start candidates (docs/moirai.md); the registry's ``moirai`` is
  :class:`~solvers.composed.moirai.MoiraiWithWarmStart`.
* :mod:`solvers.composed.celeritas`: the list schedulers ``heft``, ``cpop``, ``m-etf``, ``m-sct``
  and ``m-topo`` compete with Celeritas' own plans (option ``list_schedulers``); the registry's
  ``celeritas`` is :class:`~solvers.composed.celeritas.CeleritasWithListSchedulers`.
"""
