"""``run.json``: one real torchrun run of a server's plan writes a ``placer.run/v1`` record whose stages and
devices are the plan's; the client and ``placer runs`` upload it to that server and read it back."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import pytest

from cli import main as placer
from client.bundles import unpack
from client.errors import InvalidInput as ClientInvalidInput
from launcher.runtime.loop import settled_steps
from launcher.runtime.main import check_args, parse_args
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput
from solvers.model.run import run_from_document
from solvers.model.schemas import load_schema
from tests.client.conftest import Server, running_server
from tests.launcher.conftest import torchrun


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("runs-server")) as srv:
        yield srv


@pytest.fixture(scope="module")
def profiled_run(server: Server, workdir: Path, graphs: Callable[[str], Path]) -> tuple[Path, Path, str]:
    """The server's two-stage 1F1B plan of the CNN (its sends and receives posted together), its launcher
    run for one profiled training step:
    (bundle folder, plan file, plan id)."""
    with server.client() as c:
        graph = c.upload_graph(graphs("cnn"))
        topology = c.upload_topology(workdir / "topo2.json")
        job = c.wait(c.submit(graph.id, topology.id, "even", settings={"stages": 2, "micro_batches": 2,
                                                                       "schedule": "1f1b"}), timeout=60)
        assert job.plan_id
        folder = workdir / "cnn-run-record"
        unpack(c.download_launcher(job.plan_id), folder)
    folder = folder / f"placer-launcher-{job.plan_id}"
    run = torchrun(folder, 2, "--profile-steps", "1", kept=True)
    assert run.code == 0, run.log[-4000:]
    return folder, folder / "plan.json", job.plan_id


@pytest.mark.slow
def test_run_json_is_valid_and_lines_up_with_the_plan(profiled_run: tuple[Path, Path, Path]) -> None:
    folder, plan_path, _ = profiled_run
    doc = json.loads((folder / "run.json").read_text())
    jsonschema.Draft202012Validator(load_schema("run")).validate(doc)
    run = run_from_document(doc)
    plan = json.loads(plan_path.read_text())
    assert run.plan_digest == json.loads((folder / "manifest.json").read_text())["plan_digest"]
    assert run.plan_digest == digest(json.loads((folder / "plan.json").read_text()))
    assert run.graph_digest == plan["graph_digest"] and run.topology_digest == plan["topology_digest"]
    devices = [d for s in plan["stages"] for d in s["devices"]]
    assert sorted(r.device for r in run.ranks) == sorted(devices)
    assert {r.device: r.stage for r in run.ranks} == {d: i for i, s in enumerate(plan["stages"]) for d in s["devices"]}
    assert set(run.summary["peak_memory_bytes"]) == set(devices)
    assert all(v and v > 0 for v in run.summary["peak_memory_bytes"].values())
    assert run.summary["iteration_s"] == run.iterations_s[0] > 0
    # metrics.json counts the same iterations as run.json's summary
    assert json.loads((folder / "metrics.json").read_text())["iteration_s"] == run.summary["iteration_s"]
    stage_times = run.summary["stage_times_s"]
    assert stage_times is not None and len(stage_times) == len(plan["stages"]) and min(stage_times) > 0
    for r in run.ranks:  # two micro-batches: two forwards and two backwards per stage
        assert len(r.forward_s) == 2 and len(r.backward_s) == 2 and r.profiled_steps == (0,)
        assert r.memory["peak_resident_bytes"] and r.memory["peak_allocated_bytes"] is None
    sends = {r.stage: [t for t in r.transfers if t.op == "send"] for r in run.ranks}
    recvs = {r.stage: [t for t in r.transfers if t.op == "recv"] for r in run.ranks}
    # stage 0 sends activations and receives gradients, stage 1 the other way round: two per micro-batch
    assert [t.phase for t in sends[0]] == ["forward"] * 4 and [t.phase for t in recvs[0]] == ["backward"] * 4
    assert [t.phase for t in sends[1]] == ["backward"] * 4 and [t.phase for t in recvs[1]] == ["forward"] * 4
    assert all(t.bytes > 0 and t.duration_s >= 0 for ts in sends.values() for t in ts)
    env = run.environment
    assert env["world_size"] == 2 and env["device_kind"] == "cpu" and env["threads"] == 1 and env["backend"] == "gloo"


@pytest.mark.slow
def test_upload_to_the_server_read_back_and_refuse_another_plans_run(
        server: Server, profiled_run: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    folder, _, plan_id = profiled_run
    record = folder / "run.json"
    with server.client() as c:
        stored = c.upload_run(plan_id, record)
        assert stored.plan_id == plan_id and stored.world_size == 2 and stored.profiled
        assert stored.device_kind == "cpu" and stored.iteration_s == json.loads(record.read_text())["summary"][
            "iteration_s"]
        assert [r.id for r in c.list_runs(plan_id)] == [stored.id]
        assert c.run_document(plan_id, stored.id) == json.loads(record.read_text())
        other = json.loads(record.read_text())
        other["graph_digest"] = "sha256:" + "0" * 64
        with pytest.raises(ClientInvalidInput) as err:
            c.upload_run(plan_id, other)
        assert err.value.status == 422 and err.value.field == "graph_digest"
    remote = ["--url", server.url, "--api-key", server.key]
    assert placer(["runs", "upload", str(record), "--plan", plan_id, *remote]) == 0
    assert f"uploaded {stored.id} for plan {plan_id}: 2 rank(s) on cpu" in capsys.readouterr().out
    assert placer(["runs", "list", "--plan", plan_id, "--json", *remote]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [stored.id]


def test_the_figures_leave_out_the_warm_up_and_the_profiled_steps_where_others_follow() -> None:
    assert settled_steps(20, 5, 3) == 8  # 12 plain steps remain: the profiler's overhead stays out
    assert settled_steps(20, 5, 0) == 5
    assert settled_steps(8, 5, 3) == 5  # nothing would remain: the profiled steps count
    assert settled_steps(1, 0, 1) == 0


def test_profile_steps_beyond_the_steps_are_refused_before_any_work() -> None:
    check_args(parse_args(["--steps", "3", "--warmup", "1", "--profile-steps", "2"]))
    for argv in (["--steps", "1", "--warmup", "0", "--profile-steps", "2"], ["--steps", "3", "--profile-steps", "3"],
                 ["--profile-steps", "-1"]):
        with pytest.raises(InvalidInput, match="--profile-steps") as err:
            check_args(parse_args(argv))
        assert err.value.field == "profile_steps"
