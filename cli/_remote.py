"""What the remote commands share: the server options, the client, output, live status.

The server is ``--url`` / ``--api-key`` (on ``placer`` itself or on the command), else
``PLACER_URL`` / ``PLACER_API_KEY``. Errors of the client carry their exit code
(:mod:`client.errors`): 2 bad input or unknown id, 3 server unreachable, unauthorised or
failing, 1 a conflict or a wait that timed out.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cli._output import format_seconds, format_table, print_json
from cli._parsers import Commands, command
from client.sync import Client
from solvers.model.errors import InvalidInput

if TYPE_CHECKING:
    from pydantic import BaseModel

    from client.models import Comparison, JobEvent


def add_server_options(parser: argparse.ArgumentParser, top_level: bool = False) -> None:
    """``--url`` and ``--api-key``; on a command they override the top-level ones only when given."""
    default = None if top_level else argparse.SUPPRESS
    parser.add_argument("--url", default=default, help="the Placer server (default: PLACER_URL, else "
                        "http://127.0.0.1:8000)")
    parser.add_argument("--api-key", default=default, help="API key (default: PLACER_API_KEY)")


def remote_command(group: Commands[argparse.ArgumentParser], name: str, help_text: str, examples: Sequence[str],
                   description: str | None = None) -> argparse.ArgumentParser:
    """A command that talks to the server: ``--url``, ``--api-key`` and ``--json`` on it."""
    p = command(group, name, help_text, examples, description)
    add_server_options(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def make_client(args: argparse.Namespace) -> Client:
    """The HTTP client of the server the options (or the environment) name."""
    return Client(getattr(args, "url", None), getattr(args, "api_key", None))


def existing_file(path: str, field: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"--{field}: no such file {path!r}", field=field, ref=path)
    return p


def dump(model: BaseModel) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", by_alias=True))


def show(model: BaseModel, as_json: bool) -> None:
    """One resource: JSON, or ``key: value`` lines."""
    data = dump(model)
    if as_json:
        print_json(data)
        return
    for key, value in data.items():
        print(f"{key}: {'-' if value is None else value}")


def show_list(items: Sequence[BaseModel], columns: Sequence[str], as_json: bool) -> None:
    if as_json:
        print_json([dump(m) for m in items])
        return
    rows = [[dump(m).get(c) for c in columns] for m in items]
    print(format_table(columns, rows) if rows else "(none)")


def comparison_table(cmp: Comparison) -> str:
    """Per solver: the comparison key and its own bound in the key's unit (per sample unless the
    global batch is fixed), objective, throughput or latency, efficiency, solve time and status;
    best first."""
    throughput = cmp.objective == "throughput"
    per_sample = cmp.ranked_by == "time_per_sample_s"
    headers = ["solver", "status", "time/sample" if per_sample else "objective", "bound" + ("/sample" if per_sample
               else ""), "iteration" if per_sample else None, "throughput/s" if throughput else "latency",
               "efficiency", "solve time", "job"]
    rows = []
    for r in sorted(cmp.rows, key=lambda r: (cmp.key_s(r) is None, cmp.key_s(r) or 0.0, r.solver)):
        rate = (f"{r.throughput_samples_per_s:.4g}" if r.throughput_samples_per_s is not None else None) \
            if throughput else format_seconds(r.latency_s)
        efficiency = f"{r.efficiency:.1%}" if r.efficiency is not None else None
        mark = " *" if r.job_id == (cmp.best_job_id or "") or (not cmp.best_job_id and r.solver == cmp.best_solver) \
            else ""
        swept = "".join(f" {k}={v}" for k, v in r.swept.items())
        rows.append([r.solver + swept + mark, r.status, format_seconds(cmp.key_s(r)), format_seconds(r.lower_bound_key_s),
                     format_seconds(r.objective_s), rate, efficiency, format_seconds(r.solve_time_s), r.job_status])
    keep = [i for i, h in enumerate(headers) if h is not None]
    return format_table([str(headers[i]) for i in keep], [[row[i] for i in keep] for row in rows])


class LiveStatus:
    """A one-line progress bar on stderr while waiting, only when stdout is a terminal."""

    WIDTH = 24

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.status = "queued"
        self.fraction: float | None = None
        self.message = ""
        self._drawn = False

    def on_event(self, event: JobEvent) -> None:
        if event.event == "state":
            self.status = str(event.data.get("status", self.status))
        elif event.event == "progress":
            fraction = event.data.get("fraction")
            self.fraction = float(fraction) if isinstance(fraction, int | float) else self.fraction
            self.message = str(event.data.get("message") or "")
        self.draw()

    def on_comparison(self, cmp: Comparison) -> None:
        finished = sum(r.job_status in ("succeeded", "failed", "cancelled") for r in cmp.rows)
        self.status = "done" if cmp.done else "running"
        self.fraction = finished / len(cmp.rows) if cmp.rows else None
        self.message = f"{finished}/{len(cmp.rows)} solvers finished"
        self.draw()

    def line(self) -> str:
        filled = round((self.fraction or 0.0) * self.WIDTH)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        percent = f"{self.fraction:4.0%}" if self.fraction is not None else "   -"
        return f"{self.label} [{bar}] {percent} {self.status}{': ' + self.message if self.message else ''}"

    def draw(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[2K" + self.line()[:160])
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
