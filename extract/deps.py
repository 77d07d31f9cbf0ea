"""The optional torch / transformers dependency: one clear error when it is missing."""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

from solvers.model.errors import InvalidInput

EXTRA_HINT = "install the torch extra: pip install 'placer[torch]'"


def require_torch(what: str = "this command", transformers: bool = False) -> None:
    """Import torch (and transformers) or raise :class:`InvalidInput` naming the extra."""
    names = ["torch", "transformers"] if transformers else ["torch"]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise InvalidInput(f"{what} needs {name}, which is not installed ({exc}); {EXTRA_HINT}",
                               field=name) from None


def versions() -> dict[str, str]:
    """Installed versions of torch and transformers (``"absent"`` when not installed)."""
    out: dict[str, str] = {}
    for name in ("torch", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out
