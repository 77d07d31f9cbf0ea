"""Everything a rank knows before it runs: plan, graph, manifest, its device, the rebuilt model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from launcher.runtime.data import DataSource
from launcher.runtime.gradsync import BUCKET_BYTES
from launcher.runtime.model import Rebuilt
from launcher.runtime.weights import WeightSource
from launcher.runtime.world import World
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan


@dataclass
class LaunchContext:
    plan: Plan
    graph: OpGraph
    manifest: dict[str, Any]
    world: World
    reference: Rebuilt
    stage_of: dict[str, int]
    data: DataSource
    weights: WeightSource  # where a rank's own parameters and buffers get their values (seeds or a file)
    export_device: str = "meta"
    autocast: bool = False  # pipeline stages run under bf16 autocast
    start_memory_bytes: int = 0  # resident set before the model was built (torch and the process group)
    bucket_bytes: int = BUCKET_BYTES  # largest bucket of one gradient all-reduce
    encode_non_float: bool = False  # integer and bool boundary values cross in a floating dtype (boundary_codec)

    @property
    def batch(self) -> int:
        """Rows of one micro-batch (the graph's batch)."""
        return self.reference.batch

    def stage_and_replica(self) -> tuple[int, int]:
        """(stage, replica) of this rank's device."""
        for s, stage in enumerate(self.plan.stages):
            if self.world.device in stage.devices:
                return s, stage.devices.index(self.world.device)
        raise AssertionError(f"device {self.world.device} is in no stage")


def replica_rows(micro_batches: int, rows: int, width: int, replica: int) -> torch.Tensor:
    """Row indices of the global batch that ``replica`` of a stage with ``width`` replicas runs.

    Micro-batch m is rows ``[m * rows, (m + 1) * rows)``; each replica takes an equal slice of
    every micro-batch (Parmesan Eq. 3), the slices of consecutive micro-batches concatenated.
    """
    share = rows // width
    return torch.cat([torch.arange(m * rows + replica * share, m * rows + (replica + 1) * share)
                      for m in range(micro_batches)])
