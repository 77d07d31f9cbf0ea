"""Calibration of the cost model to measured runs (docs/cost-model.md "Calibration"): the
``placer.calibration/v1`` document, its fit to run records and its application to a graph and topology."""

from solvers.calibration.apply import apply_calibration
from solvers.calibration.document import (
    CALIBRATION_FORMAT,
    CHANNEL_CLASSES,
    OP_CLASSES,
    Calibration,
    ChannelCalibration,
    KindCalibration,
    MemoryCalibration,
    StepCalibration,
    calibration_from_document,
    load_calibration,
    op_class,
)
from solvers.calibration.fit import fit_calibration
from solvers.cost.calibrated import calibration_digest, source_digest

__all__ = [
    "CALIBRATION_FORMAT", "CHANNEL_CLASSES", "OP_CLASSES", "Calibration", "ChannelCalibration", "KindCalibration",
    "MemoryCalibration", "StepCalibration", "apply_calibration", "calibration_digest", "calibration_from_document", "fit_calibration",
    "load_calibration", "op_class", "source_digest",
]
