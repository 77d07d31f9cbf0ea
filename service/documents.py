"""Uploaded documents: decoding request bodies, validation by the library, compressed storage.

Bodies are stored gzip-compressed as the canonical ``placer.*/v1`` document that the library
rebuilt from the upload, so that a download hands back exactly what solvers see.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any, cast

import orjson

from service.errors import PayloadTooLarge, UnsupportedMediaType
from solvers.calibration import apply_calibration, calibration_from_document
from solvers.model.canonical import canonical_bytes
from solvers.model.documents import parse_json
from solvers.model.errors import FormatError, MalformedJSON
from solvers.model.graph import OpGraph, graph_from_document
from solvers.model.importers import import_pipedream, import_piper
from solvers.model.problem import Objective, Problem, ProblemSettings, settings_from_dict
from solvers.model.topology import Topology, topology_from_document

IMPORT_FORMATS = ("pipedream", "piper")


def compress(doc: Any) -> bytes:
    """gzip of compact JSON (level 1: uploads are large, time matters more than ratio)."""
    return gzip.compress(json.dumps(doc, separators=(",", ":"), allow_nan=False).encode(), compresslevel=1, mtime=0)


@dataclass(frozen=True)
class Encoded:
    """A document in canonical form: its digest, its size and its gzip body for storage."""

    digest: str
    size_bytes: int
    body: bytes


def encode_canonical(doc: Any) -> Encoded:
    """Serialise once for both the digest (:mod:`solvers.model.canonical`) and the stored body."""
    text = canonical_bytes(doc)
    return Encoded("sha256:" + hashlib.sha256(text).hexdigest(), len(text),
                   gzip.compress(text, compresslevel=1, mtime=0))


def decompress(body: bytes) -> Any:
    return orjson.loads(gzip.decompress(body))


def load_problem(graph_body: bytes, topology_body: bytes, objective: str,
                 settings: ProblemSettings | dict[str, Any], calibration_body: bytes | None = None) -> Problem:
    """The problem of a job or an evaluation, rebuilt from the stored (gzip) documents; with a stored
    ``placer.calibration/v1`` the graph and topology as it adjusts them (the library's
    :func:`~solvers.calibration.apply_calibration`, as ``placer solve --calibration``)."""
    graph, topology = graph_from_document(decompress(graph_body)), topology_from_document(decompress(topology_body))
    if calibration_body is not None:
        graph, topology = apply_calibration(graph, topology, calibration_from_document(decompress(calibration_body)))
    return Problem(graph, topology, cast(Objective, objective), settings_from_dict(settings))


def decode_body(raw: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The request body, gunzipped when sent with ``Content-Encoding: gzip`` (or gzip magic).

    The decompressed size is bounded by ``max_bytes`` too (no decompression bombs).
    """
    encoding = (content_encoding or "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise UnsupportedMediaType(f"Content-Encoding {encoding!r} is not supported (use gzip or none)",
                                   field="Content-Encoding")
    if encoding in ("gzip", "x-gzip") or raw[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out = inflater.decompress(raw, max_bytes + 1)
        except zlib.error as exc:
            raise MalformedJSON(f"body: invalid gzip data: {exc}", field="body") from None
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise PayloadTooLarge(f"body: decompressed size exceeds the limit of {max_bytes} bytes", field="body")
        return out
    return raw


def parse_graph(raw: bytes, fmt: str | None, max_bytes: int, name: str | None = None) -> OpGraph:
    """Validate an uploaded graph: a ``placer.opgraph/v1`` document, or PipeDream ``graph.txt`` /
    Piper input JSON through the library's importers (``name`` names the imported graph)."""
    if fmt is None or fmt == "placer":
        return graph_from_document(parse_json(raw, "body", max_bytes, field="body"))
    if fmt == "pipedream":
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("body: a PipeDream graph.txt must be UTF-8 text", field="body") from None
        return import_pipedream(text, name or "pipedream")
    if fmt == "piper":
        doc = parse_json(raw, "body", max_bytes, field="body")
        if not isinstance(doc, dict):
            raise FormatError("body: a Piper input must be a JSON object", field="body")
        return import_piper(doc, name or "piper")
    raise FormatError(f"format: unknown import format {fmt!r}; valid: placer, {', '.join(IMPORT_FORMATS)}",
                      field="format", ref=fmt)


def parse_topology(raw: bytes, max_bytes: int) -> Topology:
    """Validate an uploaded ``placer.topology/v1`` document."""
    return topology_from_document(parse_json(raw, "body", max_bytes, field="body"))
