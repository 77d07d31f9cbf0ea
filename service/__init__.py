"""Placer's web service: REST API, storage, job dispatch (docs/service.md).

Built on the :mod:`solvers` library; the library never imports this package.
"""
