"""Pages of a listing: newest first, continued from an opaque cursor (the last id of a page)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select

MAX_PAGE = 500
"""The largest ``limit`` of a listing."""


def paginate(stmt: Select[Any], id_column: Any, cursor: str | None, limit: int) -> Select[Any]:
    """``stmt`` newest first from after ``cursor`` (the last id of the previous page), one row
    more than ``limit`` so that :func:`next_cursor` can tell whether another page follows."""
    if cursor:
        stmt = stmt.where(id_column < cursor)
    return stmt.order_by(id_column.desc()).limit(limit + 1)


def next_cursor(rows: list[Any], limit: int) -> tuple[list[Any], str | None]:
    """The page (at most ``limit`` rows of :func:`paginate`'s) and the cursor of the next one
    (``None`` on the last page)."""
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, str(rows[-1].id)
    return rows, None
