"""Answers of ``GET /v1/plans/{id}`` kept in memory.

Plans are immutable and are never deleted through the API, so a plan's answer (its compact
JSON and its project, for the ownership check) is kept in a bounded LRU after its first read
and served from there afterwards, with an ``ETag`` (:mod:`service.api.etags`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple


class CachedPlan(NamedTuple):
    """A plan's answer: its project and its compact JSON."""

    project_id: str
    data: bytes


class PlanCache:
    """Answers of ``GET /v1/plans/{id}``: plan id -> (project id, compact JSON), least recently
    used first out, at most ``max_bytes`` of JSON in all (0: off).

    Used on the event loop only (the route is a coroutine), so it takes no lock.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, CachedPlan] = OrderedDict()

    def get(self, plan_id: str) -> CachedPlan | None:
        """The plan's answer if kept (now the most recently used), else ``None``."""
        hit = self._entries.get(plan_id)
        if hit is not None:
            self._entries.move_to_end(plan_id)
        return hit

    def put(self, plan_id: str, project_id: str, data: bytes) -> None:
        """Keep a plan's answer, dropping the least recently used beyond ``max_bytes``."""
        if len(data) > self.max_bytes // 4 or plan_id in self._entries:
            return  # off, or a single document too large to be worth a quarter of the cache
        self._entries[plan_id] = CachedPlan(project_id, data)
        self.bytes += len(data)
        while self.bytes > self.max_bytes:
            _, (_, old) = self._entries.popitem(last=False)
            self.bytes -= len(old)
