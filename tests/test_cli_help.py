"""Every command teaches: --help works and ends with an example, and the
command reference (docs/cli.md, which the README links) documents it."""

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from zlstore.cli import cli

REFERENCE = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()


def all_commands(group=cli, prefix=()):
    for name, command in sorted(group.commands.items()):
        if getattr(command, "hidden", False):
            continue
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from all_commands(command, prefix + (name,))


@pytest.mark.parametrize("path", [p for p, _ in all_commands()], ids=" ".join)
def test_help_has_an_example(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output


@pytest.mark.parametrize("path", [p for p, _ in all_commands()], ids=" ".join)
def test_readme_documents_command(path):
    assert "zlstore " + " ".join(path) in REFERENCE


@pytest.mark.parametrize("path,command", list(all_commands()), ids=[" ".join(p) for p, _ in all_commands()])
def test_examples_are_printed_as_written(path, command):
    """Click rewraps paragraphs; an example joined onto one line teaches nothing."""
    written = [line.strip() for line in command.help.split("Example")[-1].splitlines()
               if line.strip().startswith("zlstore")]
    printed = [line.strip() for line in CliRunner().invoke(cli, [*path, "--help"]).output.splitlines()]
    assert written and all(line in printed for line in written)


@pytest.mark.parametrize("path", [p for p, _ in all_commands()], ids=" ".join)
def test_example_lines_are_aligned(path):
    """An example block reads as one: every line of it at one indentation
    (a blank line inside ends click's \\b block and shifts what follows)."""
    printed = CliRunner().invoke(cli, [*path, "--help"]).output
    block = printed.split("Example:")[-1].split("Options:")[0]
    starts = {len(line) - len(line.lstrip()) for line in block.splitlines()
              if line.strip() and not line.startswith(" " * 12)}  # continuation lines go deeper
    assert len(starts) == 1, block
