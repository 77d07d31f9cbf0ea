"""Output helpers of the CLI: JSON for scripts, tables for people, errors to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from solvers.model.errors import InvalidInput, PlacerError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_REMOTE = 3


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def report_error(exc: BaseException, as_json: bool) -> int:
    """Print an error to stderr (as problem-like JSON with ``--json``) and return the exit code."""
    if isinstance(exc, PlacerError):
        code = EXIT_BAD_INPUT if isinstance(exc, InvalidInput) else EXIT_FAILED
        body = exc.to_dict()
    else:
        remote = getattr(exc, "problem", None)
        if isinstance(remote, dict):  # the HTTP client's errors carry their exit code (client.errors)
            code, body = int(getattr(exc, "exit_code", EXIT_REMOTE)), remote
        else:
            code, body = EXIT_FAILED, {"type": "internal-error", "title": type(exc).__name__, "detail": str(exc)}
    if as_json:
        sys.stderr.write(json.dumps(body, sort_keys=True) + "\n")
    else:
        sys.stderr.write(f"error: {body.get('detail', body)}\n")
    return code


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"
