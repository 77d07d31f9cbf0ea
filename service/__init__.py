"""Placer's web service: REST API, storage, job dispatch (DESIGN §7).

Built on the :mod:`solvers` library; the library never imports this package.
"""
