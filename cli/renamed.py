"""The spellings the ``placer`` command had before it became one noun-verb grammar.

An old command answers with one line on stderr naming the new spelling, exit 2, before any
parsing; none of them appears in ``placer --help``.
"""

from __future__ import annotations

from collections.abc import Sequence

RENAMED = {
    "graphs": "placer graph upload|list|show|delete",
    "topologies": "placer topology upload|list|show|delete|create",
    "jobs": "placer job submit|list|show|cancel|wait",
    "plans": "placer plan get|evaluate",
    "compare": "placer comparison submit",
    "solvers": "placer catalogue list",
    "keys": "placer key create",
    "import": "placer graph import --from pipedream|piper|graphml (a topology: placer topology import)",
    "measure-topology": "placer topology measure",
}
RENAMED_VERBS = {
    ("graph", "graphml"): "placer graph export --format graphml",
    ("graph", "dot"): "placer graph export --format dot",
    ("topology", "graphml"): "placer topology export --format graphml",
}
LAUNCHER_BUILD = "placer launcher build --plan P --graph G [--topology T] -o DIR"
GLOBAL_OPTIONS_WITH_VALUE = ("--url", "--api-key")


def renamed_message(argv: Sequence[str]) -> str | None:
    """The line to answer when ``argv`` spells a command the old way, else ``None``."""
    words = list(argv)
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in GLOBAL_OPTIONS_WITH_VALUE else 1
    if i >= len(words):
        return None
    old = words[i]
    if old in RENAMED:
        return f"placer: `placer {old}` is now `{RENAMED[old]}`"
    following = words[i + 1] if i + 1 < len(words) else ""
    if (old, following) in RENAMED_VERBS:
        return f"placer: `placer {old} {following}` is now `{RENAMED_VERBS[old, following]}`"
    if old == "launcher" and following.startswith("-") and following not in ("-h", "--help"):
        return f"placer: `placer launcher {following} ...` is now `{LAUNCHER_BUILD}`"
    return None
