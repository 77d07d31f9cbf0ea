"""The asyncio client against a real ``placer serve``: the same API, awaited."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from client import AsyncClient, NotFound, WaitTimeout
from client._http import RetryPolicy
from client.models import JobEvent
from solvers.generate import generate_graph, generate_topology
from tests.calibration_docs import calibration_doc
from tests.client.conftest import Server


def test_upload_submit_wait_compare(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, server.key) as c:
            g, t = await asyncio.gather(
                c.upload_graph(generate_graph("random_dag", n_ops=20, seed=21)),
                c.upload_topology(generate_topology("hierarchical", nodes=1, gpus_per_node=4)))
            assert (await c.get_graph(g.id)) == g
            job = await c.submit(g, t, "even", settings={"micro_batches": [2]})
            seen: list[JobEvent] = []
            done = await c.wait(job, timeout=60, on_event=seen.append)
            assert done.status == "succeeded" and seen[-1].event == "end"
            assert (await c.job_plan(done)).micro_batches == 2
            assert [e async for e in c.events(job, after=0)][-1].event == "end"
            assert job.id in [j.id async for j in c.list_jobs(page_size=1)]
            cmp = await c.compare(g, t, ["even", "pipedream"], settings={"micro_batches": [2]})
            finished = await c.wait_comparison(cmp, timeout=60)
            assert finished.done and finished.best_solver in ("even", "pipedream")
            assert finished.best is not None and finished.best.plan_id
            scored = await c.evaluate(g, t, await c.get_plan(finished.best.plan_id), settings={"micro_batches": [2]})
            assert scored.metrics["objective_s"] == pytest.approx(finished.best.objective_s)
            assert [x.id async for x in c.list_graphs(name=g.name)] == [g.id]
            await c.delete_graph(g)
            with pytest.raises(NotFound):
                await c.get_graph(g.id)
            assert (await c.health()).status == "ok" and any(s.name == "even" for s in await c.solvers())

    asyncio.run(scenario())


def test_wait_timeout_names_the_job(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, server.key) as c:
            g = await c.upload_graph(generate_graph("random_dag", n_ops=10, seed=22))
            t = await c.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
            job = await c.submit(g, t, "sleepy", options={"sleep_s": 20.0}, cache=False)
            with pytest.raises(WaitTimeout) as err:
                await c.wait(job, timeout=0.5)
            assert err.value.resource_id == job.id
            await c.cancel(job)
            assert (await c.wait(job, timeout=30)).status == "cancelled"

    asyncio.run(scenario())


def test_async_retries_on_503(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [503, 503, 200]
    delays: list[float] = []

    async def no_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr("client._http.asyncio.sleep", no_sleep)

    def handle(request: httpx.Request) -> httpx.Response:
        status = answers.pop(0)
        return httpx.Response(status, json={"status": "ok"} if status == 200 else {"detail": "busy"})

    async def scenario() -> None:
        async with AsyncClient("http://placer.test", "k", transport=httpx.MockTransport(handle),
                               retry=RetryPolicy(max_retries=3)) as c:
            assert (await c.health()).status == "ok"

    asyncio.run(scenario())
    assert len(delays) == 2 and not answers


def test_upload_list_and_read_back_a_run_record(server: Server) -> None:
    from client import InvalidInput
    from tests.run_records import synthetic_run

    async def scenario() -> None:
        async with AsyncClient(server.url, server.key) as c:
            g = await c.upload_graph(generate_graph("random_dag", n_ops=12, seed=23))
            t = await c.generate_topology("hierarchical", nodes=1, gpus_per_node=2)
            # one stage per rank, as synthetic_run records it
            done = await c.wait(await c.submit(g, t, "even", settings={"stages": 2, "micro_batches": 2,
                                                                      "schedule": "1f1b"}), timeout=60)
            assert done.plan_id and done.warnings == []
            doc = synthetic_run((await c.get_plan(done.plan_id)).to_document())
            run = await c.upload_run(done.plan_id, doc)
            assert run.world_size == 2 and run.iteration_s == doc["summary"]["iteration_s"]
            assert [r.id async for r in c.list_runs(done.plan_id)] == [run.id]
            assert await c.run_document(done.plan_id, run.id) == doc
            with pytest.raises(InvalidInput) as err:
                await c.upload_run(done.plan_id, {**doc, "plan_digest": "sha256:0"})
            assert err.value.field == "plan_digest"

    asyncio.run(scenario())


def test_calibrations_awaited(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, server.key) as c:
            t = await c.upload_topology(generate_topology("hierarchical", nodes=1, gpus_per_node=2))
            cal = await c.upload_calibration(calibration_doc(scale=1.5, name="async"))
            assert (await c.get_calibration(cal)) == cal
            assert cal.id in [x.id async for x in c.list_calibrations(digest=cal.digest)]
            assert (await c.calibration_document(cal))["name"] == "async"
            assert (await c.attach_calibration(t, cal)).calibration_id == cal.id
            assert (await c.detach_calibration(t)).calibration_id is None
            await c.delete_calibration(cal)
            with pytest.raises(NotFound):
                await c.get_calibration(cal.id)

    asyncio.run(scenario())
