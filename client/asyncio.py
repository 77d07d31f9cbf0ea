"""The asyncio client: :class:`AsyncClient` has the methods of :class:`client.sync.Client`, awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel

from client import _calls
from client._calls import DocumentSource, ImportFormat, Objective, SettingsLike
from client._http import (
    DEFAULT_TIMEOUT_S,
    AsyncTransport,
    Call,
    RetryPolicy,
    check,
    default_headers,
    resolve_settings,
)
from client._wait import TRANSIENT, EventFollower, Ref, launcher_error, ref_id, wait_timeout
from client.errors import NotFound
from client.models import (
    CalibrationInfo,
    Comparison,
    Evaluation,
    GraphInfo,
    Health,
    Job,
    JobEvent,
    Page,
    RunInfo,
    SolverInfo,
    TopologyInfo,
)
from solvers.model.plan import Plan, plan_from_document

M = TypeVar("M", bound=BaseModel)
OnEvent = Callable[[JobEvent], None]


class AsyncClient:
    """A Placer server: ``AsyncClient()`` reads ``PLACER_URL`` and ``PLACER_API_KEY``.

    ``timeout`` is each HTTP request's (seconds); ``retry`` how transient failures are retried;
    ``transport`` an httpx transport to use instead of the network. Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 *, retry: RetryPolicy | None = None, gzip_above_bytes: int = _calls.GZIP_ABOVE_BYTES,
                 poll_interval_s: float = 0.5, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url, api_key = resolve_settings(base_url, api_key)
        self.timeout = timeout
        self.gzip_above_bytes = gzip_above_bytes
        self.poll_interval_s = poll_interval_s
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=default_headers(api_key), timeout=timeout,
                                       transport=transport)
        self._t = AsyncTransport(self._http, retry or RetryPolicy())

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.base_url!r})"

    # ---- plumbing -------------------------------------------------------------------------
    async def _json(self, call: Call) -> Any:
        return (await self._t.send(call)).json()

    async def _model(self, model: type[M], call: Call) -> M:
        return model.model_validate(await self._json(call))

    async def _iterate(self, model: type[M], path: str, page_size: int, params: dict[str, Any]) -> AsyncIterator[M]:
        cursor: str | None = None
        while True:
            page = Page[Any].model_validate(
                await self._json(_calls.get(path, limit=page_size, cursor=cursor, **params)))
            for item in page.items:
                yield model.model_validate(item)
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # ---- graphs and topologies ------------------------------------------------------------
    async def upload_graph(self, source: DocumentSource, *, format: ImportFormat | None = None,
                     name: str | None = None) -> GraphInfo:
        """Upload a ``placer.opgraph/v1`` document (or a PipeDream / Piper profile with ``format``)."""
        return await self._model(GraphInfo, _calls.upload("graphs", source, format, name, self.gzip_above_bytes))

    async def get_graph(self, graph: Ref) -> GraphInfo:
        return await self._model(GraphInfo, _calls.get(f"/v1/graphs/{ref_id(graph)}"))

    def list_graphs(self, *, name: str | None = None, digest: str | None = None,
                    page_size: int = 50) -> AsyncIterator[GraphInfo]:
        """Every graph of the project, newest first (pages are fetched as the iterator goes)."""
        return self._iterate(GraphInfo, "/v1/graphs", page_size, {"name": name, "digest": digest})

    async def graph_document(self, graph: Ref) -> dict[str, Any]:
        """The stored ``placer.opgraph/v1`` document."""
        return dict(await self._json(_calls.get(f"/v1/graphs/{ref_id(graph)}/document")))

    async def delete_graph(self, graph: Ref) -> None:
        await self._t.send(_calls.delete(f"/v1/graphs/{ref_id(graph)}"))

    async def upload_topology(self, source: DocumentSource) -> TopologyInfo:
        """Upload a ``placer.topology/v1`` document."""
        return await self._model(TopologyInfo, _calls.upload("topologies", source, None, None, self.gzip_above_bytes))

    async def generate_topology(self, kind: str, **params: Any) -> TopologyInfo:
        """Have the server generate and store a topology (kinds: docs/generators.md)."""
        return await self._model(TopologyInfo, _calls.generate_topology(kind, params))

    async def get_topology(self, topology: Ref) -> TopologyInfo:
        return await self._model(TopologyInfo, _calls.get(f"/v1/topologies/{ref_id(topology)}"))

    def list_topologies(self, *, name: str | None = None, digest: str | None = None, min_devices: int | None = None,
                        page_size: int = 50) -> AsyncIterator[TopologyInfo]:
        return self._iterate(TopologyInfo, "/v1/topologies", page_size,
                             {"name": name, "digest": digest, "min_devices": min_devices})

    async def topology_document(self, topology: Ref) -> dict[str, Any]:
        return dict(await self._json(_calls.get(f"/v1/topologies/{ref_id(topology)}/document")))

    async def delete_topology(self, topology: Ref) -> None:
        await self._t.send(_calls.delete(f"/v1/topologies/{ref_id(topology)}"))

    async def attach_calibration(self, topology: Ref, calibration: Ref) -> TopologyInfo:
        """Attach a stored calibration to a topology (replacing any): jobs, comparisons and evaluations on it
        simulate with it. :class:`~client.errors.InvalidInput` naming ``calibration_id`` when it is not fitted for
        a device kind of the topology (the kind is the error's ``ref``)."""
        return await self._model(TopologyInfo, _calls.attach_calibration(ref_id(topology), ref_id(calibration)))

    async def detach_calibration(self, topology: Ref) -> TopologyInfo:
        """Detach the topology's calibration (none attached is no error)."""
        return await self._model(TopologyInfo, Call("DELETE", f"/v1/topologies/{ref_id(topology)}/calibration",
                                                  retry=True))

    # ---- calibrations ----------------------------------------------------------------------
    async def upload_calibration(self, source: DocumentSource) -> CalibrationInfo:
        """Upload a ``placer.calibration/v1`` document (``placer calibrate``'s output); the server answers 422
        naming the field at fault, and stores an identical document once."""
        return await self._model(CalibrationInfo, _calls.upload_calibration(source, self.gzip_above_bytes))

    async def get_calibration(self, calibration: Ref) -> CalibrationInfo:
        return await self._model(CalibrationInfo, _calls.get(f"/v1/calibrations/{ref_id(calibration)}"))

    def list_calibrations(self, *, digest: str | None = None, page_size: int = 50) -> AsyncIterator[CalibrationInfo]:
        """Every calibration of the project, newest first (``digest``: those with these parameters)."""
        return self._iterate(CalibrationInfo, "/v1/calibrations", page_size, {"digest": digest})

    async def calibration_document(self, calibration: Ref) -> dict[str, Any]:
        """The stored ``placer.calibration/v1`` document."""
        return dict(await self._json(_calls.get(f"/v1/calibrations/{ref_id(calibration)}/document")))

    async def delete_calibration(self, calibration: Ref) -> None:
        """Delete a calibration (a ``Conflict`` while it is attached to a topology or queued or running jobs use it)."""
        await self._t.send(_calls.delete(f"/v1/calibrations/{ref_id(calibration)}"))

    # ---- jobs -------------------------------------------------------------------------------
    async def submit(self, graph: Ref, topology: Ref, solver: str, *, objective: Objective = "throughput",
               settings: SettingsLike = None, options: Mapping[str, Any] | None = None,
               time_limit_s: float | None = None, cache: bool = True,
               idempotency_key: str | Literal[False] | None = None, calibration: str | None = None) -> Job:
        """Queue a solve. A fresh ``Idempotency-Key`` makes the POST safe to retry (``False``: none).
        ``calibration``: ``None`` simulates with the topology's attached calibration, ``"none"`` with none, a
        calibration id with that one."""
        call = _calls.submit(ref_id(graph), ref_id(topology), solver, objective, settings, options, time_limit_s,
                             cache, _calls.new_key(idempotency_key), calibration)
        return await self._model(Job, call)

    async def get_job(self, job: Ref) -> Job:
        return await self._model(Job, _calls.get(f"/v1/jobs/{ref_id(job)}"))

    def list_jobs(self, *, status: str | None = None, solver: str | None = None, graph_id: str | None = None,
                  topology_id: str | None = None, comparison_id: str | None = None,
                  page_size: int = 50, include_settings: bool = False) -> AsyncIterator[Job]:
        return self._iterate(Job, "/v1/jobs", page_size, {
            "status": status, "solver": solver, "graph_id": graph_id, "topology_id": topology_id,
            "comparison_id": comparison_id, "include": "settings" if include_settings else None})

    async def cancel(self, job: Ref) -> Job:
        """Ask a queued or running job to stop (:class:`~client.errors.Conflict` once it finished)."""
        return await self._model(Job, Call("POST", f"/v1/jobs/{ref_id(job)}:cancel", retry=True))

    def events(self, job: Ref, *, after: int | None = None, timeout: float | None = None) -> AsyncIterator[JobEvent]:
        """The job's event stream (Server-Sent Events) after event id ``after``, until its ``end``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._follow(EventFollower(ref_id(job), after), deadline)

    async def wait(self, job: Ref, timeout: float | None = None, *, on_event: OnEvent | None = None) -> Job:
        """Block until the job finishes and return it: follows the event stream, and polls when
        the stream is not available. Raises :class:`~client.errors.WaitTimeout` (naming the job)
        when ``timeout`` seconds pass first."""
        job_id = ref_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        after: int | None = None
        for _ in range(3):  # a stream that breaks is reopened where it stopped, twice
            follower = EventFollower(job_id, after)
            try:
                async for event in self._follow(follower, deadline):
                    if on_event is not None:
                        on_event(event)
            except TRANSIENT:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                after = follower.parser.last_id
                continue
            if follower.ended:
                found = await self.get_job(job_id)
                if found.done:
                    return found
            after = follower.parser.last_id
        return await self._poll(job_id, deadline, timeout, on_event)

    async def _follow(self, follower: EventFollower, deadline: float | None) -> AsyncIterator[JobEvent]:
        timeout = httpx.Timeout(self.timeout, read=follower.read_s(self.timeout, deadline))
        async with self._http.stream("GET", follower.path, headers=follower.headers(), timeout=timeout) as response:
            if response.status_code >= 400:
                await response.aread()
                check(response)
            async for line in response.aiter_lines():
                event = follower.feed(line)
                if event is not None:
                    yield event
                    if follower.ended:
                        return

    async def _poll(self, job_id: str, deadline: float | None, timeout: float | None, on_event: OnEvent | None) -> Job:
        follower = EventFollower(job_id, None)
        while True:
            found = await self.get_job(job_id)
            for event in follower.changes(found):
                if on_event is not None:
                    on_event(event)
            if found.done:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise wait_timeout("job", job_id, found.status, timeout)
            await asyncio.sleep(follower.poll_delay_s(self.poll_interval_s, deadline))

    async def job_plan(self, job: Ref) -> Plan:
        """The plan of a succeeded job (:class:`~client.errors.Conflict` before it succeeded)."""
        return plan_from_document(await self._json(_calls.get(f"/v1/jobs/{ref_id(job)}/plan")))

    # ---- comparisons ---------------------------------------------------------------------
    async def compare(self, graph: Ref, topology: Ref, solvers: Sequence[str], *, objective: Objective = "throughput",
                settings: SettingsLike = None, options: Mapping[str, Mapping[str, Any]] | None = None,
                time_limit_s: float | None = None, cache: bool = True,
                idempotency_key: str | Literal[False] | None = None, calibration: str | None = None,
                sweep: Mapping[str, Sequence[Any]] | None = None) -> Comparison:
        """Run several solvers on one problem (one job each); ``options`` maps a solver to its options.
        ``sweep`` (``{"micro_batches": [4, 8], "schedule": ["gpipe", "1f1b"], "tp": [1, 2]}``) runs every
        solver once per combination of the swept settings' values; ``calibration`` as in :meth:`submit`."""
        call = _calls.compare(ref_id(graph), ref_id(topology), solvers, objective, settings, options, time_limit_s,
                              cache, _calls.new_key(idempotency_key), calibration, sweep)
        return await self._model(Comparison, call)

    async def get_comparison(self, comparison: Ref) -> Comparison:
        return await self._model(Comparison, _calls.get(f"/v1/comparisons/{ref_id(comparison)}"))

    async def delete_comparison(self, comparison: Ref) -> None:
        """Delete a comparison (a ``Conflict`` while its jobs are queued or running); its jobs and plans stay."""
        await self._t.send(_calls.delete(f"/v1/comparisons/{ref_id(comparison)}"))

    def list_comparisons(self, *, graph_id: str | None = None, topology_id: str | None = None,
                         page_size: int = 20, include_settings: bool = False) -> AsyncIterator[Comparison]:
        return self._iterate(Comparison, "/v1/comparisons", page_size,
                             {"graph_id": graph_id, "topology_id": topology_id,
                              "include": "settings" if include_settings else None})

    async def wait_comparison(self, comparison: Ref, timeout: float | None = None, *,
                              on_update: Callable[[Comparison], None] | None = None) -> Comparison:
        """Poll until every job of the comparison finished; :class:`~client.errors.WaitTimeout` after ``timeout``."""
        cmp_id = ref_id(comparison)
        deadline = None if timeout is None else time.monotonic() + timeout
        follower = EventFollower(cmp_id, None)
        while True:
            found = await self.get_comparison(cmp_id)
            if on_update is not None:
                on_update(found)
            if found.done:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise wait_timeout("comparison", cmp_id, "running", timeout)
            await asyncio.sleep(follower.poll_delay_s(self.poll_interval_s, deadline))

    # ---- plans ---------------------------------------------------------------------------
    async def get_plan(self, plan_id: str) -> Plan:
        """A stored ``placer.plan/v1`` document, as the solvers' :class:`~solvers.model.plan.Plan`."""
        return plan_from_document(await self._json(_calls.get(f"/v1/plans/{plan_id}")))

    async def upload_run(self, plan_id: str, source: DocumentSource) -> RunInfo:
        """Upload a launcher run record (``run.json``, ``placer.run/v1``) of a stored plan.

        The server checks the record against the plan (digests, devices, stages) and answers 422 naming
        the field that differs; the same record uploaded twice is stored once.
        """
        return await self._model(RunInfo, _calls.upload_run(plan_id, source, self.gzip_above_bytes))

    def list_runs(self, plan_id: str, *, page_size: int = 50) -> AsyncIterator[RunInfo]:
        """The plan's run records, newest first."""
        return self._iterate(RunInfo, f"/v1/plans/{plan_id}/runs", page_size, {})

    async def run_document(self, plan_id: str, run_id: str) -> dict[str, Any]:
        """A stored run record (``placer.run/v1``)."""
        return dict(await self._json(_calls.get(f"/v1/plans/{plan_id}/runs/{run_id}")))

    async def evaluate(self, graph: Ref, topology: Ref, plan: DocumentSource, *, objective: Objective = "throughput",
                 settings: SettingsLike = None, timeline: bool = False,
                 calibration: str | None = None) -> Evaluation:
        """Score a plan (a document, a ``Plan``, or a file) with the server's simulator (with the topology's attached
        calibration, unless ``calibration`` is ``"none"`` or another calibration's id)."""
        return await self._model(Evaluation, _calls.evaluate(ref_id(graph), ref_id(topology), plan, objective, settings,
                                                       timeline, calibration))

    async def download_launcher(self, plan_id: str, path: str | Path | None = None) -> bytes:
        """The plan's launcher bundle (a zip: launch.py, README.md with the torchrun commands, ...),
        also written to ``path`` when given. :class:`~client.errors.LauncherUnavailable` when the
        server does not build launchers."""
        try:
            data = (await self._t.send(_calls.get(f"/v1/plans/{plan_id}/launcher"))).content
        except NotFound as exc:
            raise launcher_error(exc, plan_id) from exc
        if path is not None:
            Path(path).write_bytes(data)
        return data

    # ---- catalogue and health ------------------------------------------------------------
    async def solvers(self) -> list[SolverInfo]:
        """The solver catalogue (names, objectives, options schemas, availability)."""
        return [SolverInfo.model_validate(s) for s in await self._json(_calls.get("/v1/solvers"))]

    async def health(self) -> Health:
        return await self._model(Health, _calls.get("/healthz"))

    async def ready(self) -> Health:
        """``/readyz``: database reachable and migrated (:class:`~client.errors.ServerError` if not)."""
        return await self._model(Health, _calls.get("/readyz"))
