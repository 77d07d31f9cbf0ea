"""Placer's client side today: the ``placer`` command line (``client.cli``) and local tooling
(``client.demo``: every applicable solver on generated inputs, compared), running the library
in-process with no server.

The HTTP client for the service is not here yet; until it is, talk to a server with any HTTP
client against its OpenAPI schema (docs/api.md).  This package never imports ``service``.
"""
