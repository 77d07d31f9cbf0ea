"""The numpy array types the library annotates with (one definition for every module)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["BoolArray", "FloatArray", "IntArray"]
