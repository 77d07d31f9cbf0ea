"""How every ``placer`` command is declared: a help line, a description and an example.

A command is a verb on a noun (``placer graph upload``) or a workflow verb (``placer solve``);
:func:`command` adds one with its example as the epilog, laid out as written.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence

Commands = argparse._SubParsersAction  # the type of ``parser.add_subparsers()``
WIDTH = 88  # descriptions are wrapped here, so that the help reads the same on every terminal


def command(group: Commands[argparse.ArgumentParser], name: str, help_text: str, examples: Sequence[str],
            description: str | None = None) -> argparse.ArgumentParser:
    """Add the command ``name`` to ``group``; ``examples`` are whole command lines, shown after the options."""
    lines = "\n".join(f"  {line}" for line in examples)
    text = textwrap.fill(description or _sentence(help_text), WIDTH)
    return group.add_parser(name, help=help_text, description=text,
                            epilog=f"example{'s' if len(examples) > 1 else ''}:\n{lines}",
                            formatter_class=argparse.RawDescriptionHelpFormatter)


def verbs(parser: argparse.ArgumentParser, required: bool = True) -> Commands[argparse.ArgumentParser]:
    """The verbs of a noun (``placer graph VERB``)."""
    return parser.add_subparsers(dest="verb", metavar="VERB", required=required)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
