"""Every bad input of extract / profile exits 2, names the cause and writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli import main

M = "tests.extract.models"


@pytest.mark.parametrize(("argv", "expected"), [
    (["no_such_package.models:make"], "cannot import module 'no_such_package.models'"),
    ([f"{M}:missing"], "has no attribute 'missing'"),
    ([f"{M}:raises"], "the callable raised RuntimeError: checkpoint shard 3 is missing"),
    ([f"{M}:not_a_module"], "the callable returned int"),
    ([f"{M}:mlp_module_only"], "describe them with --input"),
    ([f"{M}:branchy"], "data-dependent control flow"),
    ([f"{M}:mlp_module_only", "--input", "x=3xq"], "the shape must be integers"),
    (["--example", "bert", "--param", "layers=two"], "--param layers='two': expected int"),
    (["--example", "bert", "--param", "depth=3"], "--param depth: unknown for example 'bert'"),
    (["--example", "nope"], "--example 'nope': unknown"),
    (["--example", "bert", "--device-kind", "TPU"], "--device-kind 'TPU': unknown"),
    (["--example", "bert", "--granularity", "module:0"], "--granularity 'module:0'"),
    (["--example", "bert", f"{M}:mlp"], "give either SPEC"),
])
def test_bad_input_exits_2(argv: list[str], expected: str, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.json"
    assert main(["extract", *argv, "-o", str(out)]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_data_dependent_says_what_to_try(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.json"
    assert main(["profile", f"{M}:branchy", "-o", str(out), "--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert "torch.cond" in err and not out.exists()


def test_missing_torch_names_the_extra(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['torch'] = None; from cli import main; "
            f"sys.exit(main(['extract', '{M}:mlp', '-o', '{tmp_path / 'g.json'}']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "pip install 'placer[torch]'" in result.stderr
    assert not (tmp_path / "g.json").exists()
