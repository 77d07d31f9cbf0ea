"""Launcher bundles as the client receives them (``GET /v1/plans/{id}/launcher``): a zip holding
``launch.py``, ``README.md`` with one torchrun command per node, the plan, graph and manifest."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def torchrun_commands(bundle: bytes) -> list[str]:
    """The torchrun command of each node, as the bundle's README.md gives them."""
    with zipfile.ZipFile(io.BytesIO(bundle)) as z:
        readme = next((n for n in z.namelist() if n.rsplit("/", 1)[-1] == "README.md"), None)
        text = z.read(readme).decode("utf-8", "replace") if readme else ""
    return [line[line.index("torchrun"):].rstrip("`").strip() for line in text.splitlines()
            if "torchrun " in line and "--nproc-per-node" in line]


def unpack(bundle: bytes, folder: str | Path) -> list[Path]:
    """Write the bundle's files into ``folder`` (created); refuses names that leave it."""
    root = Path(folder).resolve()
    root.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(io.BytesIO(bundle)) as z:
        for name in z.namelist():
            target = (root / name).resolve()
            if root != target and root not in target.parents:
                raise ValueError(f"launcher bundle: {name!r} would be written outside {root}")
            if name.endswith("/"):
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
            written.append(target)
    return written
