"""Importers from other tools' profile formats into ``placer.opgraph/v1`` (docs/formats.md)."""

from solvers.model.importers.pipedream import import_pipedream
from solvers.model.importers.piper import import_piper

__all__ = ["import_pipedream", "import_piper"]
