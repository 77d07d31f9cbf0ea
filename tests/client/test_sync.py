"""The synchronous client against a real ``placer serve``: every operation of the API."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from client import Client, Conflict, InvalidInput, NotFound, Unauthorized, WaitTimeout
from client.models import GraphInfo, Job, JobEvent
from solvers.generate import generate_graph, generate_topology
from solvers.model.settings import ProblemSettings
from tests.calibration_docs import calibration_doc
from tests.client.conftest import Server

DATA = Path("/work/shared/data")


def test_upload_get_list_document_delete(client: Client, tmp_path: Path) -> None:
    graph = generate_graph("random_dag", n_ops=30, seed=11)
    info = client.upload_graph(graph)
    assert isinstance(info, GraphInfo) and info.n_ops == 30 and info.digest == graph.digest
    assert client.get_graph(info.id) == info
    assert client.graph_document(info)["format"] == "placer.opgraph/v1"
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph.to_document()))
    assert client.upload_graph(path).id == info.id  # the same document is deduplicated
    assert client.upload_graph(graph.to_document()).id == info.id
    client.delete_graph(info.id)
    with pytest.raises(NotFound) as err:
        client.get_graph(info.id)
    assert err.value.status == 404 and err.value.ref == info.id and err.value.problem["type"] == "/problems/not-found"


def test_large_documents_go_gzip_encoded(server: Server, tmp_path: Path) -> None:
    graph = generate_graph("random_dag", n_ops=400, seed=3)
    with server.client(gzip_above_bytes=1024) as small_threshold:
        info = small_threshold.upload_graph(graph)
    assert info.digest == graph.digest
    gz = tmp_path / "t.json.gz"
    topology = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    gz.write_bytes(gzip.compress(json.dumps(topology.to_document()).encode()))
    with server.client() as c:
        assert c.upload_topology(gz).digest == topology.digest


def test_pagination_follows_cursors(client: Client) -> None:
    ids = {client.upload_graph(generate_graph("random_dag", n_ops=8, seed=100 + i), ).id for i in range(5)}
    listed = [g.id for g in client.list_graphs(page_size=2)]
    assert ids <= set(listed) and listed == sorted(listed, reverse=True) and len(listed) == len(set(listed))
    named = generate_graph("random_dag", n_ops=8, seed=100)
    assert [g.digest for g in client.list_graphs(digest=named.digest)] == [named.digest]


def test_topologies_generate_list_filter(client: Client) -> None:
    big = client.generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    assert big.n_devices == 8 and big.n_hosts == 2
    assert client.get_topology(big.id) == big
    assert big.id in {t.id for t in client.list_topologies(min_devices=8)}
    assert client.topology_document(big)["format"] == "placer.topology/v1"
    client.delete_topology(big)
    with pytest.raises(InvalidInput) as err:
        client.generate_topology("no-such-kind")
    assert err.value.status == 422 and err.value.field is not None


def test_importer_formats(client: Client) -> None:
    pipedream = next(DATA.glob("**/graph.txt"), None)
    if pipedream is None:
        pytest.skip("no PipeDream profile in /work/shared/data")
    info = client.upload_graph(pipedream, format="pipedream", name="pd")
    assert info.name == "pd" and info.n_ops > 0
    piper = client.upload_graph(DATA / "piper" / "bert32a100.json", format="piper", name="bert")
    assert piper.name == "bert" and piper.n_ops > 0


def test_submit_wait_plan_and_events(client: Client) -> None:
    g = client.upload_graph(generate_graph("random_dag", n_ops=24, seed=1))
    t = client.upload_topology(generate_topology("hierarchical", nodes=1, gpus_per_node=4))
    job = client.submit(g, t, "even", settings=ProblemSettings(micro_batches=(4,)), time_limit_s=30, cache=False)
    assert isinstance(job, Job) and job.settings.micro_batches == (4,)
    seen: list[JobEvent] = []
    done = client.wait(job, timeout=60, on_event=seen.append)
    assert done.status == "succeeded" and done.plan_id and done.done
    assert seen[-1].event == "end" and any(e.event == "state" for e in seen)
    plan = client.job_plan(done)
    assert plan.micro_batches == 4 and plan.metrics is not None
    assert client.get_plan(done.plan_id).to_document() == plan.to_document()
    replay = list(client.events(job, after=0))
    assert replay[-1].event == "end" and [e.id for e in replay if e.id is not None] == sorted(
        e.id for e in replay if e.id is not None)
    assert job.id in {j.id for j in client.list_jobs(solver="even")}
    listed = {j.id: j.settings for j in client.list_jobs(solver="even")}
    assert listed[job.id] is None  # lists carry settings only when asked
    asked = {j.id: j.settings for j in client.list_jobs(solver="even", include_settings=True)}
    assert asked[job.id] is not None and asked[job.id].micro_batches == (4,)
    with pytest.raises(Conflict):
        client.cancel(job)


def test_idempotency_key_returns_the_same_job(client: Client) -> None:
    g = client.upload_graph(generate_graph("random_dag", n_ops=12, seed=4))
    t = client.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    a = client.submit(g, t, "even", idempotency_key="nightly-1")
    b = client.submit(g, t, "even", idempotency_key="nightly-1")
    c = client.submit(g, t, "even")
    assert a.id == b.id != c.id
    with pytest.raises(InvalidInput) as err:
        client.submit(g, t, "greedy-does-not-exist", idempotency_key="nightly-1")
    assert err.value.field == "Idempotency-Key"


def test_wait_timeout_names_the_job_and_cancel(client: Client) -> None:
    g = client.upload_graph(generate_graph("random_dag", n_ops=12, seed=5))
    t = client.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    job = client.submit(g, t, "sleepy", options={"sleep_s": 20.0}, cache=False)
    with pytest.raises(WaitTimeout) as err:
        client.wait(job, timeout=0.5)
    assert err.value.resource_id == job.id and job.id in str(err.value)
    assert client.cancel(job).cancel_requested
    assert client.wait(job, timeout=30).status == "cancelled"
    with pytest.raises(Conflict) as conflict:
        client.job_plan(job)
    assert conflict.value.status == 409


def test_invalid_input_names_the_field(client: Client) -> None:
    g = client.upload_graph(generate_graph("random_dag", n_ops=12, seed=6))
    t = client.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    with pytest.raises(InvalidInput) as err:
        client.submit(g, t, "even", options={"no_such_option": 1})
    assert err.value.field is not None and "no_such_option" in err.value.field
    with pytest.raises(InvalidInput) as bad_doc:
        client.upload_graph({"format": "placer.opgraph/v1", "nodes": [], "edges": [{"src": "a", "dst": "b"}]})
    assert bad_doc.value.status == 422 and bad_doc.value.field


def test_compare_and_evaluate(client: Client) -> None:
    g = client.upload_graph(generate_graph("random_dag", n_ops=24, seed=7))
    t = client.generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    cmp = client.compare(g, t, ["even", "pipedream"], settings={"micro_batches": [4]}, time_limit_s=30)
    done = client.wait_comparison(cmp, timeout=60)
    assert done.done and {r.solver for r in done.rows} == {"even", "pipedream"}
    assert done.best is not None and done.best.plan_id
    assert {c.id: c.settings for c in client.list_comparisons(graph_id=g.id)} == {cmp.id: None}
    full = next(iter(client.list_comparisons(graph_id=g.id, include_settings=True)))
    assert full.settings is not None and full.settings.micro_batches == (4,)
    plan = client.get_plan(done.best.plan_id)
    scored = client.evaluate(g, t, plan, settings={"micro_batches": [4]}, timeline=True)
    assert scored.metrics["objective_s"] == pytest.approx(done.best.objective_s)
    assert scored.timeline
    client.delete_comparison(cmp)
    assert list(client.list_comparisons(graph_id=g.id)) == []
    assert client.get_job(done.rows[0].job_id).comparison_id is None  # its jobs stay


def test_solvers_health_and_auth(server: Server) -> None:
    with Client(server.url, "plc_not_a_key") as wrong:
        names = {s.name for s in wrong.solvers()}  # the catalogue needs no key
        assert {"even", "parmesan", "sleepy"} <= names
        assert wrong.health().status == "ok" and wrong.ready().database == "ok"
        with pytest.raises(Unauthorized) as err:
            next(wrong.list_graphs())
        assert err.value.status == 401


def test_environment_defaults(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLACER_URL", server.url)
    monkeypatch.setenv("PLACER_API_KEY", server.key)
    with Client() as c:
        assert c.base_url == server.url
        list(c.list_topologies())


def test_launcher_bundle_needs_an_extracted_model(client: Client) -> None:
    """A generated graph records no model to rebuild: 422 naming why (the orchestrator example
    downloads the bundle of an extracted model)."""
    g = client.upload_graph(generate_graph("random_dag", n_ops=12, seed=8))
    t = client.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    job = client.wait(client.submit(g, t, "even"), timeout=60)
    assert job.plan_id
    with pytest.raises(InvalidInput, match="placer extract"):
        client.download_launcher(job.plan_id)
    with pytest.raises(NotFound):
        client.download_launcher("plan_does_not_exist")


def test_readme_client_example_runs(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).parents[2] / "README.md").read_text()
    block = next(b.split("```", 1)[0] for b in text.split("```python\n")[1:] if "from client import Client" in b)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLACER_URL", server.url)
    monkeypatch.setenv("PLACER_API_KEY", server.key)
    (tmp_path / "bert.json").write_text(json.dumps(generate_graph("transformer", layers=2).to_document()))
    exec(compile(block, "README.md", "exec"), {})
    status, throughput = capsys.readouterr().out.split()
    assert status == "succeeded" and float(throughput) > 0


def test_parallel_retries_with_one_key_get_one_job(server: Server) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with server.client() as c:
        g = c.upload_graph(generate_graph("random_dag", n_ops=12, seed=9))
        t = c.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
        with ThreadPoolExecutor(8) as pool:
            jobs = list(pool.map(lambda _: c.submit(g, t, "even", idempotency_key="parallel-1"), range(8)))
    assert len({j.id for j in jobs}) == 1


def test_calibrations_upload_attach_simulate_detach_delete(client: Client, tmp_path: Path) -> None:
    g = client.upload_graph(generate_graph("random_dag", n_ops=12, seed=31))
    t = client.upload_topology(generate_topology("hierarchical", nodes=1, gpus_per_node=4))
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(calibration_doc()))
    cal = client.upload_calibration(path)
    assert cal.device_kinds == ["H100"] and client.upload_calibration(calibration_doc()).id == cal.id
    assert client.get_calibration(cal.id) == cal and cal.id in [c.id for c in client.list_calibrations()]
    assert client.calibration_document(cal)["name"] == "slow-h100"
    with pytest.raises(InvalidInput) as err:
        client.attach_calibration(t, client.upload_calibration(calibration_doc(kind="A100")))
    assert err.value.field == "calibration_id" and err.value.ref == "H100"
    assert client.attach_calibration(t, cal).calibration_id == cal.id
    with pytest.raises(Conflict):
        client.delete_calibration(cal)
    settings = {"stages": 2, "micro_batches": 2}
    job = client.wait(client.submit(g, t, "even", settings=settings), timeout=60)
    plain = client.wait(client.submit(g, t, "even", settings=settings, calibration="none"), timeout=60)
    assert job.calibration_id == cal.id and plain.calibration_id is None and not plain.cached
    calibrated, uncalibrated = client.get_plan(str(job.plan_id)), client.get_plan(str(plain.plan_id))
    assert calibrated.metrics["calibration"] == cal.digest and uncalibrated.metrics["calibration"] is None
    assert calibrated.metrics["iteration_s"] > 2 * uncalibrated.metrics["iteration_s"]
    assert client.evaluate(g, t, uncalibrated, settings=settings).calibration_id == cal.id
    assert client.detach_calibration(t).calibration_id is None
    client.delete_calibration(cal)
    with pytest.raises(NotFound):
        client.get_calibration(cal.id)


def test_tensor_parallel_settings_through_the_server(client: Client) -> None:
    """``tp`` fixes the degree of the server's plan; a degree no host holds is refused naming settings.tp."""
    g = client.upload_graph(generate_graph("transformer", layers=2, causal=True))
    t = client.upload_topology(generate_topology("hierarchical", nodes=2, gpus_per_node=2))
    job = client.submit(g, t, "exact", settings=ProblemSettings(micro_batches=(4,), tp=2), time_limit_s=30, cache=False)
    assert job.settings.tp == 2
    done = client.wait(job, timeout=60)
    assert done.status == "succeeded"
    assert all(s.tp == 2 for s in client.job_plan(done).stages)
    with pytest.raises(InvalidInput) as err:
        client.submit(g, t, "exact", settings={"tp": 4})
    assert err.value.status == 422 and err.value.field == "settings.tp" and "does not fit a host" in str(err.value)
