"""The bundle without torchrun: files, README commands, manifest, zip, ruff, placement, refusals at build time."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher import build_bundle, bundle_zip, write_bundle
from launcher.placement import device_slots, torchrun_command
from launcher.runtime.context import replica_rows
from launcher.runtime.uneven import pieces
from launcher.structure import op_stage, structure_digest
from solvers.model.documents import load_graph, load_plan
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage
from solvers.model.topology import topology_from_document
from tests.launcher.conftest import solve, topology

FILES = {"launch.py", "README.md", "plan.json", "graph.json", "manifest.json"}


@pytest.fixture(scope="module")
def cnn_plan(workdir: Path, graphs: Callable[[str], Path]) -> tuple[Path, Path]:
    graph = graphs("cnn")
    return solve(workdir, graph, "even", 2, "--micro-batches", "2", "--stages", "2", "--schedule", "1f1b"), graph


def test_bundle_files_manifest_and_readme(workdir: Path, cnn_plan: tuple[Path, Path]) -> None:
    plan_path, graph_path = cnn_plan
    plan, graph = load_plan(plan_path), load_graph(graph_path)
    topo = topology_from_document(topology(2))
    bundle = build_bundle(plan, graph, topo)
    assert set(bundle.files) == FILES
    manifest = json.loads(bundle.files["manifest.json"])
    assert manifest["graph_digest"] == graph.digest and manifest["graph_structure_digest"] == structure_digest(graph)
    assert manifest["source"]["spec"] == "tests.launcher.models:cnn" and manifest["kind"] == "throughput"
    assert {"torch", "transformers", "placer"} <= set(manifest["versions"])
    assert [d["device"] for d in manifest["devices"]] == ["cpu0", "cpu1"]
    readme = bundle.files["README.md"].decode()
    assert "torchrun --nnodes 1 --nproc-per-node 2 --standalone launch.py --host h0" in readme
    assert "$" not in readme.replace("$RDZV_HOST", "")


def test_generated_files_pass_ruff(workdir: Path, cnn_plan: tuple[Path, Path]) -> None:
    plan_path, graph_path = cnn_plan
    folder = workdir / "ruff-bundle"
    write_bundle(build_bundle(load_plan(plan_path), load_graph(graph_path)), folder)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(root / "pyproject.toml"),
                           "--no-cache", str(folder / "launch.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_zip_in_memory_holds_the_same_files(cnn_plan: tuple[Path, Path]) -> None:
    plan, graph = load_plan(cnn_plan[0]), load_graph(cnn_plan[1])
    data = bundle_zip(plan, graph, folder="plan-1")
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert sorted(names) == sorted(f"plan-1/{f}" for f in FILES)
    assert bundle_zip(plan, graph, folder="plan-1") == data  # deterministic


def test_two_hosts_get_one_command_each_and_a_rendezvous_placeholder() -> None:
    topo = topology_from_document(topology(4, hosts=2))
    plan = Plan((Stage(("a",), ("cpu3", "cpu0")), Stage(("b",), ("cpu2", "cpu1"))))
    slots = device_slots(plan, topo)
    assert [(s.device, s.host, s.local_index, s.local_rank) for s in slots] == [
        ("cpu0", "h0", 0, 0), ("cpu1", "h0", 1, 1), ("cpu2", "h1", 0, 0), ("cpu3", "h1", 1, 1)]
    assert torchrun_command(slots, "h1") == ("torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d "
                                             "--rdzv-endpoint $RDZV_HOST:29500 --rdzv-id placer launch.py --host h1")


def test_refused_at_build_time(cnn_plan: tuple[Path, Path]) -> None:
    plan, graph = load_plan(cnn_plan[0]), load_graph(cnn_plan[1])
    with pytest.raises(InvalidPlan, match="not in the topology"):
        build_bundle(plan.with_(stages=(Stage(plan.stages[0].ops, ("gpu9",)), plan.stages[1])), graph,
                     topology_from_document(topology(2)))
    with pytest.raises(InvalidPlan, match="infeasible"):
        build_bundle(plan.with_(status="infeasible", stages=()), graph)
    with pytest.raises(InvalidPlan, match="solved on graph"):
        build_bundle(plan.with_(graph_digest="sha256:0"), graph)
    with pytest.raises(InvalidPlan, match="leaves 1 op"):
        op_stage(graph, plan.with_(stages=(plan.stages[0], Stage(plan.stages[1].ops[:-1], plan.stages[1].devices))))


def test_reexport_has_the_extracted_structure(graphs: Callable[[str], Path]) -> None:
    from launcher.runtime.model import check_structure, rebuild

    graph = load_graph(graphs("cnn"))
    check_structure(rebuild(graph.attrs["source"]), structure_digest(graph), None, graph)


def test_row_slices_and_pieces() -> None:
    assert replica_rows(2, 4, 2, 1).tolist() == [2, 3, 6, 7]
    assert [(p.sender, p.receiver, p.lo, p.hi) for p in pieces(6, 2, 3)] == [
        (0, 0, 0, 2), (0, 1, 2, 3), (1, 1, 3, 4), (1, 2, 4, 6)]


def test_module_granularity_graph_expands_to_fx_ops(workdir: Path) -> None:
    from launcher.runtime.model import check_structure, rebuild
    from launcher.runtime.partition import assign_stages
    from tests.launcher.conftest import MODELS, placer

    path = workdir / "cnn-modules.json"
    assert placer(["extract", *MODELS["cnn"], "--batch", "4", "--granularity", "module:1", "-o", str(path)]) == 0
    graph = load_graph(path)
    rebuilt = rebuild(graph.attrs["source"])
    check_structure(rebuilt, structure_digest(graph), 1, graph)
    ids = graph.ids
    plan = Plan((Stage(tuple(ids[:3]), ("cpu0",)), Stage(tuple(ids[3:]), ("cpu1",))))
    stage_of = op_stage(graph, plan)
    assert {"conv2d", "linear"} <= set(stage_of) and len(stage_of) > len(ids)
    assignment = assign_stages(rebuilt.module, stage_of)
    assert assignment["linear"] == 1
