"""CLI test fixtures: the remote commands run against the same real ``placer serve`` as the client's tests."""

from tests.client.conftest import server

__all__ = ["server"]
