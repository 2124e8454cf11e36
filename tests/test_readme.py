"""The README runs as printed: its tour and the commands under Judging, each
through bash in a fresh copy of the repository's examples/ (the venv
activated as the tour says), answer what the README shows. `cog --check
README.md` (.ci/run) keeps the generated parts current; this test keeps
what is printed runnable."""

import json
import os
import re

from click.testing import CliRunner

from zlstore.cli import cli

from .readme_tour import ACTIVATE, REPO, Sandbox, section, steps

README = (REPO / "README.md").read_text(encoding="utf-8")
# A server would not return: the test asks it for its front page instead (--get).
SERVER = re.compile(r"^(zlstore serve|datasette)\b(?!.*--get)")


def tour():
    return steps(section(README, "A tour")) + steps(section(README, "Judging"))


def as_run(command):
    return f"{command} --get /" if SERVER.match(command) else command


def test_the_tour_starts_in_the_venv():
    commands = [command for command, _ in tour()]
    assert commands[0] == ACTIVATE
    # one way to reach the venv throughout: activated once, then bare zlstore and python
    assert not [c for c in commands[1:] if ".venv/bin/" in c]
    assert len([c for c, output in tour() if output]) >= 8, "the tour shows what its commands print"


def test_the_tour_runs_as_printed(tmp_path):
    printed = tour()
    results = Sandbox(tmp_path / "clone").run([as_run(command) for command, _ in printed])
    for (command, expected), (output, status) in zip(printed, results):
        got = [line.rstrip() for line in output.splitlines()]
        while got and not got[-1]:
            got.pop()
        if expected is None:  # shown without output: it must run cleanly
            assert status == 0, f"{command}\n{output}"
        else:
            assert got == expected, f"$ {command}: the README shows something else (cog -r README.md?)"


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
