"""The grammar of ``placer``: every option has a help line and every command an example,
the old spellings name the new ones (exit 2), and docs/cli.md is what the parser prints."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli import build_parser, main
from cli.reference import commands, reference

ROOT = Path(__file__).resolve().parents[2]
OLD_SPELLINGS = {
    ("graphs", "list"): "placer graph upload|list|show|delete",
    ("topologies", "generate", "mesh2d"): "placer topology upload|list|show|delete|create",
    ("jobs", "submit", "--solver", "even"): "placer job submit|list|show|cancel|wait",
    ("plans", "get", "p_1"): "placer plan get|evaluate",
    ("compare", "--solvers", "even,single"): "placer comparison submit",
    ("solvers", "--json"): "placer catalogue list",
    ("keys", "create", "--project", "a"): "placer key create",
    ("import", "--from", "graphml", "t.graphml", "-o", "t.json"): "placer graph import --from pipedream|piper|graphml",
    ("measure-topology", "-o", "topo.json"): "placer topology measure",
    ("launcher", "--plan", "p.json", "--graph", "g.json", "-o", "run"): "placer launcher build --plan P --graph G",
    ("--url", "http://h:1", "graphs", "upload", "g.json"): "placer graph upload",
    ("graph", "graphml", "g.json"): "placer graph export --format graphml",
    ("graph", "dot", "g.json", "-o", "g.dot"): "placer graph export --format dot",
    ("topology", "graphml", "t.json"): "placer topology export --format graphml",
}


def all_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    return list(commands(build_parser()))


def test_every_option_has_a_help_line_and_every_command_an_example() -> None:
    found = all_commands()
    assert len(found) > 30
    for name, parser in found:
        example = parser.epilog or ""
        assert "example" in example and ("placer " in example or "-m cli " in example), f"{name}: no example"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"{name} {'/'.join(action.option_strings) or action.dest}: no help"


def test_one_noun_per_command_and_no_two_names_a_letter_apart() -> None:
    names = [name.split()[1:] for name, _ in all_commands()]
    assert all(len(words) <= 2 for words in names)
    nouns = {words[0] for words in names}
    assert not nouns & {"graphs", "topologies", "jobs", "plans", "solvers", "keys", "compare", "import",
                        "measure-topology"}
    levels = [nouns] + [{words[1] for words in names if len(words) == 2 and words[0] == noun} for noun in nouns]
    for level in levels:
        for a in level:
            for b in level:
                assert a >= b or not _one_edit(a, b), (a, b)


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` are one letter apart (one changed, added or dropped)."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def test_launcher_verbs() -> None:
    verbs = {name for name, _ in all_commands() if name.startswith("placer launcher ")}
    assert verbs == {"placer launcher build", "placer launcher check", "placer launcher get", "placer launcher verify"}


@pytest.mark.parametrize("argv", sorted(OLD_SPELLINGS), ids=lambda argv: " ".join(argv))
def test_an_old_spelling_names_the_new_one(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert OLD_SPELLINGS[argv] in err


def test_solve_defaults_to_auto() -> None:
    args = build_parser().parse_args(["solve", "--graph", "g.json", "--topology", "t.json", "-o", "p.json"])
    assert args.solver == "auto"


def test_problem_flags_are_the_same_locally_and_on_the_server() -> None:
    found = dict(all_commands())

    def flags(name: str) -> dict[str, tuple[object, ...]]:
        return {a.option_strings[0]: (a.type, a.choices, a.nargs) for a in found[name]._actions
                if a.option_strings and a.option_strings[-1] not in ("--help", "--url", "--api-key", "--json")}

    local, job, comparison = flags("placer solve"), flags("placer job submit"), flags("placer comparison submit")
    shared = set(local) & set(job)
    assert {"--objective", "--pass", "--stages", "--replicas", "--micro-batches", "--schedule", "--recompute",
            "--settings", "--option", "--time-limit", "--seed"} <= shared
    assert all(local[f] == job[f] == comparison[f] for f in shared - {"--solver"})


def test_docs_cli_md_is_generated_from_the_parser() -> None:
    assert (ROOT / "docs" / "cli.md").read_text() == reference(), \
        "docs/cli.md is stale: python -m cli.reference > docs/cli.md"


@pytest.mark.parametrize("argv", [["solve", "--graph", "g.json", "--topology", "t.json", "-o", "p.json"],
                                  ["job", "submit", "--graph", "g_1", "--topology", "t_1"]])
def test_the_solver_defaults_to_auto_locally_and_on_the_server(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).solver == "auto"
