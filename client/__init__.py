"""Placer's client side: the HTTP client, the ``placer`` CLI, and local tooling."""
