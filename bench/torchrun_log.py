"""What a failed torchrun run leaves to read: the root cause's first error line, and the output's tail.

torchrun's own summary of a failed run names the rank that failed first ("Root Cause (first
observed failure)") but not its error ("To enable traceback see ..."); the error is in that
rank's output, each line prefixed ``[rankN]:`` once the rank has a process group.  The other
ranks' errors (a peer that closed the connection) follow from it.
"""

from __future__ import annotations

import re

TAIL_LINES = 40
FAILED_LOG = "failed.log"  # beside run.json in a run's folder: the tail of a run that wrote no record

_ROOT_CAUSE_RANK = re.compile(
    r"Root Cause \(first observed failure\):\s*\[\d+\]:(?:\n[ \t]+\w+[ \t]*:.*)*?"
    r"\n[ \t]+rank[ \t]*:[ \t]*(\d+)"
)
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:[ ]?")
_ERROR = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::.*)?$")
_AGENT_ERROR = "ChildFailedError"


def root_cause_rank(output: str) -> int | None:
    """The global rank torchrun's summary names as the first observed failure, if it names one."""
    found = _ROOT_CAUSE_RANK.search(output)
    return int(found.group(1)) if found else None


def root_cause_line(output: str) -> str | None:
    """The first exception line (``Type: message``) of the root-cause rank's output, as ``rank N: ...``;
    without rank prefixes, the output's first exception line that is not torchrun's own."""
    rank = root_cause_rank(output)
    first_any = None
    for line in output.splitlines():
        prefix = _RANK_PREFIX.match(line)
        text = line[prefix.end() :] if prefix else line
        if not _ERROR.match(text) or _AGENT_ERROR in text:
            continue
        if prefix and rank is not None and int(prefix.group(1)) == rank:
            return f"rank {rank}: {text.strip()}"
        if first_any is None and (prefix is None or rank is None):
            first_any = text.strip()
    return first_any


def output_tail(output: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``output``."""
    return "\n".join(output.splitlines()[-lines:]) + "\n"
