"""Graphs, plans and bundles for the launcher tests, and the torchrun runs they check.

Graphs are extracted in this process once per session; every run is a real
``python -m torch.distributed.run --standalone`` with gloo and one thread per process.  The
single-process reference is the eager model on the same global batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from cli import main as placer
from tests.launcher.worlds import REPO, WORLDS, Worlds

MODELS = {"bert": ["tests.launcher.models:bert"], "cnn": ["tests.launcher.models:cnn"],
          "constants": ["tests.launcher.models:constants"], "causal_lm": ["tests.launcher.models:causal_lm"],
          "gpt2": ["--example", "gpt2", "--param", "layers=2", "hidden=32", "heads=2", "seq=8", "vocab=64",
                   "dropout=0"],
          "gpt2_text": ["--example", "gpt2", "--param", "layers=2", "hidden=32", "heads=2", "seq=16", "vocab=256",
                        "dropout=0"]}


def topology(n: int, hosts: int = 1) -> dict[str, Any]:
    """n CPU devices on `hosts` hosts, links fast enough that splitting a tiny model pays."""
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": f"h{i * hosts // n}", "memory_bytes": 8e9} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e12, "latency_s": 1e-9}
             for i in range(n) for j in range(i + 1, n)]
    return {"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices, "links": links}


@pytest.fixture(scope="session", autouse=True)
def kept_worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    """The session's kept torchrun worlds (:data:`tests.launcher.worlds.WORLDS`), stopped at its end."""
    WORLDS.folder = tmp_path_factory.mktemp("worlds")
    yield WORLDS
    WORLDS.close()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("launcher")
    for n in (2, 3, 4):
        (root / f"topo{n}.json").write_text(json.dumps(topology(n)))
    return root


@pytest.fixture(scope="session")
def graphs(workdir: Path) -> Callable[[str], Path]:
    """Model name -> its extracted graph (batch 4), made once."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            path = workdir / f"{name}.json"
            assert placer(["extract", *MODELS[name], "--batch", "4", "--device-kind", "cpu", "-o", str(path)]) == 0
            made[name] = path
        return made[name]

    return get


def solve(workdir: Path, graph: Path, solver: str, devices: int, *args: str) -> Path:
    out = workdir / f"{graph.stem}-{solver}-{devices}-{abs(hash(args))}.json"
    code = placer(["solve", "--solver", solver, "--graph", str(graph), "--topology", str(workdir / f"topo{devices}.json"),
                   "--quiet", "-o", str(out), *args])
    assert code == 0
    return out


def bundle(workdir: Path, plan: Path, graph: Path, devices: int, name: str) -> Path:
    folder = workdir / name
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph),
                   "--topology", str(workdir / f"topo{devices}.json"), "-o", str(folder)]) == 0
    return folder


@dataclass
class Run:
    code: int
    log: str
    steps: list[dict[str, Any]]
    metrics: dict[str, Any] | None


def torchrun(folder: Path, nproc: int, *args: str, timeout_s: float = 150, preload: Path | None = None,
             kept: bool = False) -> Run:
    """``launch.py`` under torchrun with gloo, one thread per process; the first step saved per rank.

    ``preload``: a folder put first on ``PYTHONPATH`` (its ``sitecustomize.py`` runs in every process).
    ``kept``: the run as ``launch.py`` would make it, in the session's kept world of ``nproc`` processes
    (tests/launcher/worlds.py) rather than a torchrun of its own; ``code`` and ``log`` are the job's.
    """
    step_dir = folder / "step"
    launch_args = ["--steps", "1", "--warmup", "0", "--save-step", str(step_dir), *args]
    if kept:
        assert preload is None, "a kept world has no preloaded sitecustomize"
        code, log = WORLDS.get(nproc).run({"runs": [{"folder": str(folder), "args": launch_args}]}, timeout_s)
    else:
        path = [str(preload)] if preload is not None else []
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([*path, str(REPO)])}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "launch.py", *launch_args]
        done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s)
        code, log = done.returncode, done.stdout + done.stderr
    return _collected(code, log, step_dir, folder / "metrics.json")


def _collected(code: int, log: str, step_dir: Path, metrics_path: Path) -> Run:
    steps = [torch.load(p) for p in sorted(step_dir.glob("rank*.pt"))] if step_dir.exists() else []
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else None
    return Run(code, log, steps, metrics)


def torchrun_many(runs: Sequence[tuple[Path, str, Sequence[str]]], nproc: int, timeout_s: float = 400) -> dict[str, Run]:
    """Several ``launch.py`` runs, ``(folder, name, args)``, one after the other in the session's kept torchrun
    world of ``nproc`` processes (tests/launcher/worlds.py): each gives the :class:`Run` that
    ``torchrun(folder, nproc, *args)`` gives (its first step saved in ``folder/step-NAME``, its metrics in
    ``folder/metrics-NAME.json``); ``code`` and ``log`` are the job's."""
    spec = [{"folder": str(folder), "args": ["--steps", "1", "--warmup", "0", "--save-step", f"step-{name}",
                                             "--metrics", f"metrics-{name}.json", "--run-record", f"run-{name}.json",
                                             *args]}
            for folder, name, args in runs]
    names = [name for _, name, _ in runs]
    assert len(set(names)) == len(names), f"run names repeat: {names}"
    code, log = WORLDS.get(nproc).run({"runs": spec}, timeout_s)
    return {name: _collected(code, log, folder / f"step-{name}", folder / f"metrics-{name}.json")
            for folder, name, _ in runs}


def reference(folder: Path, data_spec: str | None = None) -> tuple[float, dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
    """The single-process step: eager model, the same global batch, the same loss."""
    from torch.utils._pytree import tree_leaves

    from extract.source import InputSpec
    from launcher.runtime.data import load_data
    from launcher.runtime.seeded import seeded_model

    manifest = json.loads((folder / "manifest.json").read_text())
    plan = json.loads((folder / "plan.json").read_text())
    source = manifest["source"]
    rows = source["batch"] * (1 if manifest["kind"] == "latency" else plan["micro_batches"])
    model = seeded_model(source)
    data = load_data(data_spec, [InputSpec.from_dict(s) for s in manifest["inputs"]], model)
    inputs, target = data.batch(0, rows)
    outputs = tuple(x for x in tree_leaves(model(**inputs)) if isinstance(x, torch.Tensor))
    loss = data.loss(outputs, target)
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, tuple(o.detach() for o in outputs)


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 1e-5, floor: float = 1e-9) -> None:
    """Relative to the largest entry; ``floor`` for gradients that are zero up to rounding (a key bias)."""
    scale = float(want.abs().max())
    err = float((got - want).abs().max())
    assert err <= rel * scale + floor, f"{what}: max error {err:.3g} > {rel:g} x {scale:.3g} + {floor:g}"


def assert_same_steps(again: Run, first: Run, what: str) -> None:
    """``again`` ran and gave ``first``'s losses to the bit and its gradients (a recomputed run of the same
    dropout streams, say)."""
    assert again.code == 0, again.log[-4000:]
    assert [s["loss"] for s in again.steps] == [s["loss"] for s in first.steps]
    for mine, theirs in zip(again.steps, first.steps, strict=True):
        assert mine["grads"].keys() == theirs["grads"].keys()
        for name, grad in theirs["grads"].items():
            assert_close(mine["grads"][name], grad, f"{what} gradient of {name}")


def check_inference_outputs(run: Run, folder: Path) -> None:
    """A ``launch.py --inference`` run of a two-stage plan: forward passes only, both devices of the last stage
    return the whole outputs, each equal to the single-process forward."""
    assert run.code == 0, run.log[-4000:]
    _, _, want = reference(folder)
    assert [s["stage"] for s in run.steps if s["outputs"] is not None] == [1, 1]
    assert all(s["loss"] is None and not s["grads"] for s in run.steps)
    for outputs in (s["outputs"] for s in run.steps if s["outputs"] is not None):
        assert len(outputs) == len(want)
        for have, expected in zip(outputs, want, strict=True):
            assert_close(have, expected, "inference output")


def check_training_step(run: Run, folder: Path, nproc: int, data_spec: str | None = None) -> None:
    """The loss and every parameter gradient equal the single-process model's (relative 1e-5)."""
    assert run.code == 0, run.log[-4000:]
    assert len(run.steps) == nproc
    loss, grads, _ = reference(folder, data_spec)
    losses = [s["loss"] for s in run.steps if s["loss"] is not None]
    assert losses, "no rank reported a loss"
    for got in losses:
        assert abs(got - loss) <= 1e-5 * abs(loss), (got, loss)
    seen: set[str] = set()
    for step in run.steps:
        for name, grad in step["grads"].items():
            assert name in grads, f"rank {step['device']} has a gradient for unknown parameter {name}"
            assert_close(grad, grads[name], f"gradient of {name} on {step['device']}")
            seen.add(name)
    assert seen == set(grads), f"parameters without a gradient: {sorted(set(grads) - seen)}"


def cut_plan(workdir: Path, graph: Path, first: Callable[[list[dict[str, Any]]], list[str]], name: str,
             schedule: str = "gpipe") -> Path:
    """A 2-stage plan on 2 devices whose stage 0 holds the ops ``first(nodes)`` gives, stage 1 the rest."""
    nodes = json.loads(graph.read_text())["nodes"]
    mine = set(first(nodes))
    stages = [{"ops": [n["id"] for n in nodes if n["id"] in mine], "devices": ["cpu0"]},
              {"ops": [n["id"] for n in nodes if n["id"] not in mine], "devices": ["cpu1"]}]
    path = workdir / f"{name}.json"
    path.write_text(json.dumps({"format": "placer.plan/v1", "solver": "user", "status": "feasible", "stages": stages,
                                "micro_batches": 2, "schedule": schedule, "objective": "throughput"}))
    return path


def stage_counts(plan: Path) -> list[int]:
    return [len(s["devices"]) for s in json.loads(plan.read_text())["stages"]]


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def ops_of(plan: Path) -> Sequence[Sequence[str]]:
    return [s["ops"] for s in json.loads(plan.read_text())["stages"]]
