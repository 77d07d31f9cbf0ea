"""Reading a launcher bundle: the torchrun commands of its README, unpacking it safely."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from client.bundles import torchrun_commands, unpack

README = """# Launcher for plan abc

Run on each host, in this folder:

- `node0`: `torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint $RDZV_HOST:29500 --rdzv-id placer launch.py --host node0`
- `node1`: `torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint $RDZV_HOST:29500 --rdzv-id placer launch.py --host node1`

Options of `launch.py`: `--steps N`; torchrun starts one process per device.
"""


def bundle(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def test_torchrun_commands_one_per_node() -> None:
    commands = torchrun_commands(bundle({"README.md": README, "launch.py": "print()"}))
    assert len(commands) == 2 and all(c.startswith("torchrun --nnodes 2") for c in commands)
    assert commands[1].endswith("launch.py --host node1")
    assert torchrun_commands(bundle({"launch.py": ""})) == []


def test_unpack_writes_inside_the_folder_only(tmp_path: Path) -> None:
    written = unpack(bundle({"README.md": README, "sub/plan.json": "{}"}), tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written) == ["README.md", "sub/plan.json"]
    with pytest.raises(ValueError, match="outside"):
        unpack(bundle({"../evil.py": ""}), tmp_path / "out2")
