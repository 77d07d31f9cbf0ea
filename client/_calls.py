"""What the sync and async clients share: request bodies, upload encoding, event-stream parsing.

Each API operation is built here as a :class:`client._http.Call`; :class:`client.sync.Client`
and :class:`client.asyncio.AsyncClient` only send it and parse the answer, so both speak the
same API (docs/api.md) the same way.
"""

from __future__ import annotations

import gzip
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import orjson

from client._http import Call
from client.models import JobEvent
from solvers.model.settings import ProblemSettings

GZIP_ABOVE_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
ImportFormat = Literal["placer", "pipedream", "piper"]
Objective = Literal["throughput", "latency"]


@runtime_checkable
class HasDocument(Protocol):
    """A ``solvers`` model object (OpGraph, Topology, Plan) that serialises itself."""

    def to_document(self) -> dict[str, Any]: ...


DocumentSource = Mapping[str, Any] | HasDocument | str | os.PathLike[str] | bytes
"""A document to upload: a dict, a ``solvers`` object, a file path (``.gz`` allowed) or raw bytes."""
SettingsLike = ProblemSettings | Mapping[str, Any] | None


def encode_document(source: DocumentSource, gzip_above_bytes: int = GZIP_ABOVE_BYTES) -> tuple[bytes, dict[str, str]]:
    """The request body and headers of an upload; gzip-encoded when larger than ``gzip_above_bytes``."""
    if isinstance(source, HasDocument):
        raw = orjson.dumps(source.to_document())
    elif isinstance(source, Mapping):
        raw = orjson.dumps(dict(source))
    elif isinstance(source, bytes):
        raw = source
    else:
        raw = Path(source).read_bytes()
    if raw.startswith(GZIP_MAGIC):
        return raw, {"Content-Encoding": "gzip"}
    if len(raw) > gzip_above_bytes:
        return gzip.compress(raw, compresslevel=6, mtime=0), {"Content-Encoding": "gzip"}
    return raw, {}


def upload(kind: Literal["graphs", "topologies"], source: DocumentSource, format: ImportFormat | None = None,
           name: str | None = None, gzip_above_bytes: int = GZIP_ABOVE_BYTES) -> Call:
    body, headers = encode_document(source, gzip_above_bytes)
    headers["Content-Type"] = "text/plain" if format == "pipedream" else "application/json"
    params = _params(format=format, name=name)
    # the server deduplicates by digest: a repeated upload returns the stored resource
    return Call("POST", f"/v1/{kind}", params=params or None, content=body, headers=headers, retry=True)


def upload_run(plan_id: str, source: DocumentSource, gzip_above_bytes: int = GZIP_ABOVE_BYTES) -> Call:
    body, headers = encode_document(source, gzip_above_bytes)
    headers["Content-Type"] = "application/json"
    # the server keeps one copy per (plan, digest): a repeated upload returns the stored record
    return Call("POST", f"/v1/plans/{plan_id}/runs", content=body, headers=headers, retry=True)


def upload_calibration(source: DocumentSource, gzip_above_bytes: int = GZIP_ABOVE_BYTES) -> Call:
    body, headers = encode_document(source, gzip_above_bytes)
    headers["Content-Type"] = "application/json"
    # the server deduplicates by the document's digest: a repeated upload returns the stored calibration
    return Call("POST", "/v1/calibrations", content=body, headers=headers, retry=True)


def attach_calibration(topology_id: str, calibration_id: str) -> Call:
    # setting the same attachment twice is setting it once
    return json_call("PUT", f"/v1/topologies/{topology_id}/calibration", {"calibration_id": calibration_id},
                     retry=True)


def json_call(method: str, path: str, body: Mapping[str, Any], retry: bool,
              idempotency_key: str | None = None) -> Call:
    headers = {"Content-Type": "application/json"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    return Call(method, path, content=orjson.dumps(dict(body)), headers=headers, retry=retry)


def settings_body(settings: SettingsLike) -> dict[str, Any]:
    """Problem settings as the API takes them (a ``ProblemSettings`` is checked on the client first)."""
    if settings is None:
        return {}
    if isinstance(settings, ProblemSettings):
        return settings.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return dict(settings)


def new_key(given: str | Literal[False] | None) -> str | None:
    """The Idempotency-Key to send: the caller's, a fresh uuid4 by default, none if ``False``."""
    if given is False:
        return None
    return given or str(uuid.uuid4())


def submit(graph_id: str, topology_id: str, solver: str, objective: Objective, settings: SettingsLike,
           options: Mapping[str, Any] | None, time_limit_s: float | None, cache: bool,
           idempotency_key: str | None, calibration: str | None = None) -> Call:
    body = {"graph_id": graph_id, "topology_id": topology_id, "solver": solver, "objective": objective,
            "settings": settings_body(settings), "options": dict(options or {}), "cache": cache,
            **_params(time_limit_s=time_limit_s, calibration=calibration)}
    return json_call("POST", "/v1/jobs", body, retry=idempotency_key is not None, idempotency_key=idempotency_key)


def compare(graph_id: str, topology_id: str, solvers: Sequence[str], objective: Objective, settings: SettingsLike,
            options: Mapping[str, Mapping[str, Any]] | None, time_limit_s: float | None, cache: bool,
            idempotency_key: str | None, calibration: str | None = None,
            sweep: Mapping[str, Sequence[Any]] | None = None) -> Call:
    body = {"graph_id": graph_id, "topology_id": topology_id, "solvers": list(solvers), "objective": objective,
            "settings": settings_body(settings), "options": {k: dict(v) for k, v in (options or {}).items()},
            "cache": cache, **_params(time_limit_s=time_limit_s, calibration=calibration),
            **({"sweep": {k: list(v) for k, v in sweep.items()}} if sweep else {})}
    return json_call("POST", "/v1/comparisons", body, retry=idempotency_key is not None,
                     idempotency_key=idempotency_key)


def evaluate(graph_id: str, topology_id: str, plan: DocumentSource, objective: Objective, settings: SettingsLike,
             timeline: bool, calibration: str | None = None) -> Call:
    if isinstance(plan, HasDocument):
        doc = plan.to_document()
    elif isinstance(plan, Mapping):
        doc = dict(plan)
    else:
        doc = orjson.loads(plan if isinstance(plan, bytes) else _read_text(plan))
    body = {"graph_id": graph_id, "topology_id": topology_id, "objective": objective,
            "settings": settings_body(settings), "plan": doc, "timeline": timeline, **_params(calibration=calibration)}
    return json_call("POST", "/v1/plans:evaluate", body, retry=True)  # a pure computation: safe to repeat


def generate_topology(kind: str, params: Mapping[str, Any]) -> Call:
    # the same kind and parameters make the same document, which the server deduplicates
    return json_call("POST", "/v1/topologies:generate", {"kind": kind, "params": dict(params)}, retry=True)


def get(path: str, **params: Any) -> Call:
    return Call("GET", path, params=_params(**params) or None)


def delete(path: str) -> Call:
    return Call("DELETE", path)


def _read_text(path: str | os.PathLike[str]) -> bytes:
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if raw.startswith(GZIP_MAGIC) else raw


def _params(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class EventParser:
    """Server-Sent Events (the subset the service sends): ``id``, ``event``, ``data``, comments."""

    def __init__(self) -> None:
        self.last_id: int | None = None
        self._id: int | None = None
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> JobEvent | None:
        """One line of the stream; an event when ``line`` is the blank line that ends it."""
        if not line:
            if not self._data:
                self._event, self._id = "message", None
                return None
            try:
                data = orjson.loads("\n".join(self._data))
            except orjson.JSONDecodeError:
                data = {"text": "\n".join(self._data)}
            event = JobEvent(id=self._id, event=self._event, data=data if isinstance(data, dict) else {"value": data})
            if self._id is not None:
                self.last_id = self._id
            self._id, self._event, self._data = None, "message", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and value.isdigit():
            self._id = int(value)
        return None
