"""Calibrations on the server: storing ``placer.calibration/v1`` documents, attaching one to a
topology, and choosing the one a job, a comparison or an evaluation simulates with
(docs/cost-model.md "Calibration", docs/api.md "Calibrations").

A request's ``calibration`` says which: absent (``null``), the calibration attached to the
topology, if any; ``"none"``, none; a calibration id, that one.  The calibration is applied by
the library's :func:`solvers.calibration.apply_calibration` (:func:`service.documents.load_problem`),
as ``placer solve --calibration`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import ACTIVE_STATES, CalibrationRow, Job, TopologyRow, new_id
from service.db.owned import get_owned
from service.documents import decompress, encode_canonical
from service.errors import Conflict
from solvers.calibration import Calibration, calibration_from_document
from solvers.calibration.apply import calibrated_topology, kind_speed
from solvers.model.errors import InvalidInput
from solvers.model.topology import Topology, topology_from_document

NO_CALIBRATION = "none"
"""A request's ``calibration`` that asks for none, even when the topology has one attached."""


@dataclass(frozen=True)
class Chosen:
    """The calibration a job simulates with: its id, its digest (part of the plan's cache key) and its body."""

    id: str
    digest: str
    body: bytes


def store_calibration(session: Session, project_id: str, cal: Calibration) -> tuple[CalibrationRow, bool]:
    """The stored row for ``cal`` (deduplicated by the digest of the whole document) and whether it was created now."""
    enc = encode_canonical(cal.to_document())
    found = session.scalar(select(CalibrationRow).where(CalibrationRow.project_id == project_id,
                                                        CalibrationRow.document_digest == enc.digest))
    if found is not None:
        return found, False
    row = CalibrationRow(id=new_id("cal"), project_id=project_id, digest=cal.digest, document_digest=enc.digest,
                         name=cal.name[:500], device_kinds=sorted(cal.devices), size_bytes=enc.size_bytes,
                         body=enc.body)
    try:
        with session.begin_nested():
            session.add(row)
        return row, True
    except IntegrityError:  # an identical upload committed first
        existing = session.scalar(select(CalibrationRow).where(CalibrationRow.project_id == project_id,
                                                               CalibrationRow.document_digest == enc.digest))
        if existing is None:
            raise
        return existing, False


def load_calibration_row(row: CalibrationRow) -> Calibration:
    """The stored document as the library's :class:`~solvers.calibration.Calibration`."""
    return calibration_from_document(decompress(row.body))


def check_fits(cal_row: CalibrationRow, topology_row: TopologyRow, field: str) -> None:
    """422 (``field``) unless the calibration covers every device kind of the topology (naming the first
    it lacks) and applies to it (one speed per kind, ``memory.process_bytes`` below every device's memory)."""
    topology: Topology = topology_from_document(decompress(topology_row.body))
    kinds = sorted({d.kind for d in topology.devices})
    fitted = set(cal_row.device_kinds)
    for kind in kinds:
        if kind not in fitted:
            have = ", ".join(sorted(fitted)) or "no device kind"
            raise InvalidInput(f"{field}: calibration {cal_row.id!r} is fitted for {have}, not for the device kind "
                               f"{kind!r} of topology {topology_row.id!r}", field=field, ref=kind)
    cal = load_calibration_row(cal_row)
    try:
        for kind in kinds:
            kind_speed(topology, kind)
        calibrated_topology(topology, cal)
    except InvalidInput as exc:
        raise InvalidInput(f"{field}: calibration {cal_row.id!r} does not apply to topology {topology_row.id!r}: "
                           f"{exc.message}", field=field, ref=exc.ref) from None


def choose(session: Session, project_id: str, topology_row: TopologyRow, requested: str | None,
           field: str = "calibration") -> Chosen | None:
    """The calibration a request on ``topology_row`` simulates with (module docstring), or None.

    A calibration id of another project is 404 naming ``field``; one that does not fit the topology
    is 422 naming ``field`` (:func:`check_fits`).
    """
    if requested == NO_CALIBRATION:
        return None
    if requested is None:
        if topology_row.calibration_id is None:
            return None
        row = session.get(CalibrationRow, topology_row.calibration_id)
        if row is None:  # detached by a concurrent delete
            return None
    else:
        row = get_owned(session, CalibrationRow, requested, project_id, "calibration", field=field)
        check_fits(row, topology_row, field)
    return Chosen(row.id, row.digest, row.body)


def chosen_by_id(session: Session, calibration_id: str | None) -> Chosen | None:
    """The calibration a stored job names (None when it names none or the calibration is gone)."""
    if calibration_id is None:
        return None
    row = session.get(CalibrationRow, calibration_id)
    return None if row is None else Chosen(row.id, row.digest, row.body)


def refuse_delete_if_used(session: Session, cal_id: str) -> None:
    """409 while a topology has the calibration attached or queued or running jobs simulate with it."""
    attached = list(session.scalars(select(TopologyRow.id).where(TopologyRow.calibration_id == cal_id).limit(3)))
    if attached:
        raise Conflict(f"calibration {cal_id!r} is attached to topology {', '.join(attached)}; detach it first "
                       "(DELETE /v1/topologies/{id}/calibration)", field="id", ref=cal_id)
    n = session.scalar(select(func.count()).select_from(Job).where(Job.calibration_id == cal_id,
                                                                   Job.state.in_(ACTIVE_STATES)))
    if n:
        raise Conflict(f"calibration {cal_id!r} is used by {n} queued or running job(s); cancel them or wait",
                       field="id", ref=cal_id)
