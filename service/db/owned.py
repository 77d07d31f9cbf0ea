"""Rows by id, scoped to the caller's project: another project's ids are "not found"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sqlalchemy.orm import Session
from sqlalchemy.orm.interfaces import ORMOption

from service.errors import NotFound

M = TypeVar("M")
R = TypeVar("R")


def get_owned(session: Session, model: type[M], obj_id: str, project_id: str, what: str, field: str = "id",
              options: Sequence[ORMOption] = ()) -> M:
    """The row ``obj_id`` of ``model`` if it belongs to ``project_id``; else 404 naming the id.

    ``options`` are loader options for the lookup (e.g. ``defer`` of a document body not needed).
    """
    return check_owned(session.get(model, obj_id, options=options), obj_id, project_id, what, field)


def check_owned(row: R | None, obj_id: str, project_id: str, what: str, field: str = "id") -> R:
    """``row`` if there is one and it belongs to ``project_id`` (its ``project_id``); else 404
    naming the id: another project's object is not found, not forbidden."""
    if row is None or getattr(row, "project_id", None) != project_id:
        raise NotFound(f"{what} {obj_id!r} not found", field=field, ref=obj_id)
    return row
