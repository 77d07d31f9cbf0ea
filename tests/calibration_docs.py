"""A small valid ``placer.calibration/v1`` written by hand, for the tests of what stores and applies one
(the service, the client, ``placer calibrations``); tests/solvers/calibration fits real ones."""

from __future__ import annotations

from typing import Any

from solvers.calibration import OP_CLASSES


def calibration_doc(kind: str = "H100", scale: float = 3.0, name: str = "slow-h100") -> dict[str, Any]:
    """Every op on devices of ``kind`` takes ``scale`` times the model's time; the rest as the model says."""
    return {"format": "placer.calibration/v1", "name": name,
            "devices": {kind: {"scale": dict.fromkeys(OP_CLASSES, scale), "launch_overhead_s": 0.0}},
            "channels": {}, "collective_efficiency": 1.0, "memory": {"process_bytes": 0.0, "fraction": 0.0},
            "step": {"fixed_s": 0.0, "per_param_byte_s": 0.0},
            "fit": {"runs": ["sha256:run"], "parameters": [f"devices.{kind}.scale.{c}" for c in OP_CLASSES],
                    "residuals": {"stage_s": {
                        "uncalibrated": {"count": 4, "median_relative": 0.6, "max_relative": 0.7},
                        "calibrated": {"count": 4, "median_relative": 0.02, "max_relative": 0.05}}}}}
