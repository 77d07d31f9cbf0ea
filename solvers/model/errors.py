"""The one error hierarchy of Placer.

Every error a user can cause carries a precise message naming what is wrong, and,
where it applies, the offending ``field`` (a JSON path such as ``nodes[3].fwd_s``) and
``ref`` (an op, device or stage id).  The service maps these classes to RFC 9457
problem+json in one handler, using ``type_slug``, ``title`` and ``http_status``.
"""

from __future__ import annotations

from typing import Any


class PlacerError(Exception):
    """Base class of every error Placer raises on purpose."""

    type_slug = "placer-error"
    title = "Placer error"
    http_status = 400

    def __init__(self, message: str, *, field: str | None = None, ref: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.ref = ref

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON-able mapping (problem+json members without ``status``)."""
        out: dict[str, Any] = {"type": self.type_slug, "title": self.title, "detail": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.ref is not None:
            out["ref"] = self.ref
        return out


class InvalidInput(PlacerError):
    """A document or argument is malformed or inconsistent."""

    type_slug = "invalid-input"
    title = "Invalid input"
    http_status = 422


class FormatError(InvalidInput):
    """A document is not JSON, has an unknown ``format``, or is over the size limit."""

    type_slug = "invalid-format"
    title = "Invalid document format"


class MalformedJSON(FormatError):
    """A document cannot be parsed: not JSON, not UTF-8, nested deeper than the parser allows, or
    (a request body) not valid gzip."""

    type_slug = "malformed-body"
    title = "Malformed document"
    http_status = 400


class InvalidGraph(InvalidInput):
    type_slug = "invalid-graph"
    title = "Invalid operator graph"


class InvalidTopology(InvalidInput):
    type_slug = "invalid-topology"
    title = "Invalid topology"


class InvalidProblem(InvalidInput):
    type_slug = "invalid-problem"
    title = "Invalid problem"


class InvalidPlan(InvalidInput):
    type_slug = "invalid-plan"
    title = "Invalid plan"


class InvalidOptions(InvalidInput):
    type_slug = "invalid-options"
    title = "Invalid solver options"


class UnknownSolver(InvalidInput):
    type_slug = "unknown-solver"
    title = "Unknown solver"


class NotApplicable(InvalidInput):
    """The solver does not answer the problem's objective (or pass)."""

    type_slug = "solver-not-applicable"
    title = "Solver not applicable to this problem"


class MissingExtra(PlacerError):
    """An optional dependency is not installed; the message names the extra to install."""

    type_slug = "missing-extra"
    title = "Optional dependency missing"
    http_status = 501

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"the optional module {module!r} is not installed; install it with "
            f"pip install 'placer[{extra}]'",
            ref=extra,
        )
        self.module = module
        self.extra = extra


class SolverUnavailable(PlacerError):
    """A registered solver whose code cannot be loaded here (a module or an extra is missing)."""

    type_slug = "solver-unavailable"
    title = "Solver unavailable"
    http_status = 501


class SolverFailure(PlacerError):
    """A solver broke (a bug or a back-end crash), as opposed to an infeasible result."""

    type_slug = "solver-failure"
    title = "Solver failure"
    http_status = 500


def require(module: str, extra: str) -> Any:
    """Import an optional module, or raise :class:`MissingExtra` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtra(module, extra) from exc
