"""The service starts without torch: the `torch` extra is only for extraction and profiling."""

from __future__ import annotations

import subprocess
import sys


def test_service_app_and_cli_without_torch() -> None:
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from service.app import create_app\n"
            "from cli import build_parser\n"
            "app = create_app()\n"
            "assert app.routes\n"
            "build_parser()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
