"""Every `om` command says what it does: a line in `om --help`, and a description in its own
`om COMMAND --help` (argparse shows only the description there, never the listed line)."""

import argparse

import pytest

from omstream.cli import build_parser, main


def subcommands(parser: argparse.ArgumentParser, prefix: str = "om") -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, its help line, its parser) of every command and sub-action, depth first."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{prefix} {name}", lines.get(name) or "", sub))
                found += subcommands(sub, f"{prefix} {name}")
    return found


ALL = subcommands(build_parser())


def test_the_commands_are_all_found():
    names = {name for name, _, _ in ALL}
    assert {"om broker", "om topics", "om tail", "om dlq list", "om demo", "om simulate"} <= names
    assert len(ALL) >= 25


@pytest.mark.parametrize("name, line, parser", ALL, ids=[name for name, _, _ in ALL])
def test_every_command_has_a_help_line_and_a_description(name, line, parser):
    assert line.strip(), f"{name} has no line in its parent's --help"
    assert (parser.description or "").strip(), f"`{name} --help` does not say what it does"


@pytest.mark.parametrize("command", [["broker"], ["topics"]])
def test_broker_and_topics_help_say_what_they_do(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert "broker" in description.lower() or "topics" in description.lower()
    assert "ACTION" in out and "create" in out
