"""The service starts without torch: the `torch` extra is only for extraction and profiling."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_service_app_and_cli_without_torch() -> None:
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from service.app import create_app\n"
            "from cli import build_parser\n"
            "app = create_app()\n"
            "assert app.routes\n"
            "build_parser()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_serve_demo_needs_only_the_core_dependencies(tmp_path: Path) -> None:
    """What ``make run`` installs (``pip install -e .``, no extras) serves and seeds the demo: the
    checked-in extracted GPT-2, whose plans can be launched; the banner ends with the dashboard,
    the key and the demo comparison's page."""
    extras = ("torch", "transformers", "celery", "redis", "psycopg", "ortools", "pulp", "playwright", "pytest")
    code = ("import sys\n"
            f"for name in {extras!r}: sys.modules[name] = None\n"
            "from service.commands import _seed_demo, demo_banner\n"
            "from service.config import load_config\n"
            f"cfg = load_config(database_url='sqlite:///{tmp_path / 'demo.db'}')\n"
            "demo = _seed_demo(cfg)\n"
            "print(demo.graph_name)\n"
            "print(demo_banner('http://127.0.0.1:8000', demo), end='')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "demo-gpt2-4L"
    assert lines[-3] == "  dashboard:  http://127.0.0.1:8000/"
    assert lines[-2].startswith("  API key:    plc_")
    assert re.fullmatch(r"  comparison: http://127\.0\.0\.1:8000/comparisons/cmp_\w+", lines[-1])


def test_the_demo_graph_records_its_model() -> None:
    from service.demo import demo_graph

    graph = demo_graph()
    assert graph.attrs["source"]["example"] == "gpt2" and graph.attrs["source"]["params"]["dropout"] == 0.0
    assert 10 < len(graph.nodes) < 100
