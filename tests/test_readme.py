"""The pages run as printed: the README's quickstart, and docs/tour.md with
the commands under docs/judging.md's "Judging" after it, each through bash
in a fresh copy of the repository's examples/ (the venv activated as the
tour says), answer what the pages show. `cog --check` (.ci/run) keeps the
generated parts current; this test keeps what is printed runnable."""

import json
import os
import re

from click.testing import CliRunner

from zlstore.cli import cli

from .readme_tour import ACTIVATE, REPO, Sandbox, page, pages, section, steps

# A server would not return: the test asks it for its front page instead (--get).
SERVER = re.compile(r"^(zlstore serve|datasette)\b(?!.*--get)")


def quickstart():
    return steps(section(page("README.md"), "Quickstart: your own runs"))


def tour():
    return steps(page("docs/tour.md")) + steps(section(page("docs/judging.md"), "Judging"))


def as_run(command):
    return f"{command} --get /" if SERVER.match(command) else command


def test_the_tour_starts_in_the_venv():
    commands = [command for command, _ in tour()]
    assert commands[0] == ACTIVATE
    # one way to reach the venv throughout: activated once, then bare zlstore and python
    assert not [c for c in commands[1:] if ".venv/bin/" in c]
    assert len([c for c, output in tour() if output]) >= 8, "the tour shows what its commands print"


def runs_as_printed(printed, where):
    results = Sandbox(where).run([as_run(command) for command, _ in printed])
    for (command, expected), (output, status) in zip(printed, results):
        got = [line.rstrip() for line in output.splitlines()]
        while got and not got[-1]:
            got.pop()
        if expected is None:  # shown without output: it must run cleanly
            assert status == 0, f"{command}\n{output}"
        else:
            assert got == expected, f"$ {command}: the page shows something else (cog -r it?)"


def test_the_tour_runs_as_printed(tmp_path):
    runs_as_printed(tour(), tmp_path / "clone")


def test_the_quickstart_starts_in_the_venv_and_shows_screen_and_ab():
    printed = quickstart()
    commands = [command for command, _ in printed]
    assert commands[0] == ACTIVATE
    assert not [c for c in commands[1:] if ".venv/bin/" in c]
    shown = [c.split()[1] for c, output in printed if output]
    assert {"ingest", "screen", "ab"} <= set(shown), shown


def test_the_quickstart_runs_as_printed(tmp_path):
    runs_as_printed(quickstart(), tmp_path / "clone")


def test_cog_covers_every_page_with_a_generated_part():
    """.ci/run checks exactly the pages that have a cog part, README.md and the tour among them."""
    checked = {path.relative_to(REPO).as_posix() for path in pages()}
    assert {"README.md", "docs/tour.md", "docs/judging.md", "docs/cli.md"} <= checked
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "cog --check" in ci and "readme_tour.pages()" in ci


def test_problem_paths_are_printed_as_the_tree_was_named(example_tree, tmp_path, monkeypatch):
    """Relative below the current directory, as the tour shows them; absolute in --json."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(example_tree[0].parent)
    (example_tree[0] / "ab_rlc_20261012_101500" / "abs_float16_before" / "cell.env").write_text("RC\n")
    result = CliRunner().invoke(cli, ["ingest", "runs", "--db", str(tmp_path / "t.db")])
    problems = [line for line in result.stderr.splitlines() if line.startswith("problem: ")]
    assert problems and all(line.startswith("problem: runs/") for line in problems), result.stderr
    result = CliRunner().invoke(cli, ["ingest", "runs", "--json", "--db", str(tmp_path / "t2.db")])
    files = [p["file"] for p in json.loads(result.stdout)["problems"]]
    assert files and all(os.path.isabs(f) for f in files)
    monkeypatch.chdir(tmp_path / "elsewhere")
    outside = CliRunner().invoke(cli, ["ingest", "../runs", "--db", str(tmp_path / "t3.db")])
    problems = [line for line in outside.stderr.splitlines() if line.startswith("problem: ")]
    assert problems and all(line.startswith(f"problem: {example_tree[0].resolve()}/") for line in problems)
