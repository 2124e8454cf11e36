"""What README.md and docs/ show, made from the real thing: cog's generators
in those pages call these (`cog -r FILE` regenerates, `cog --check` fails in
CI when a page and the code disagree; .ci/run checks every page with a cog
part), and tests/test_readme.py runs the quickstart and the tour as printed.

Commands run as a reader runs them: through bash, in a temporary copy of
the repository's examples/ with this venv linked in as .venv and activated
as the tour says (nothing else of this environment on PATH)."""

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
ACTIVATE = ". .venv/bin/activate"
_DONE = "@@ zlstore readme: command done @@"
# What a reader's shell would not have set: zlstore's and the harness's
# variables; and the terminal's width (a page shows the text as a pipe gets it).
_UNSET = re.compile(
    r"^(ZLSTORE_|ZL_|FAKE_|BENCH_LEVEL$|SHAPE_MODE$|USE_FLAGTUNE$|CELL_TIMEOUT$|VIRTUAL_ENV$|PYTHON|COLUMNS$|LINES$)"
)


class Sandbox:
    """A directory holding a copy of examples/ and .venv, where commands run as printed."""

    def __init__(self, root: Optional[Path] = None):
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="zlstore-readme-"))
        shutil.copytree(REPO / "examples", self.root / "examples")
        (self.root / ".venv").symlink_to(VENV, target_is_directory=True)
        if root is None:
            import atexit

            atexit.register(shutil.rmtree, self.root, True)

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not _UNSET.match(k)}
        venv_bin = str(VENV / "bin")
        env["PATH"] = os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) != os.path.realpath(venv_bin)
        )
        return env

    def run(self, commands: Sequence[str], timeout: float = 600) -> List[Tuple[str, int]]:
        """Run commands in order in one bash (its state, $? included, carries
        from one to the next); (stdout and stderr as a terminal shows them,
        exit status) for each."""
        script = []
        for command in commands:
            # the brace group closes on a line of its own: a command may end in a # comment
            script.append(f'{{ {command}\n}} 2>&1; __rc=$?; echo; echo "{_DONE} $__rc"; (exit $__rc)')
        done = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=self.root,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        parts = re.split(rf"\n{re.escape(_DONE)} (\d+)\n", done.stdout)
        if len(parts) != 2 * len(commands) + 1:
            raise RuntimeError(f"bash stopped before the last command: {done.stdout}")
        return [(parts[i], int(parts[i + 1])) for i in range(0, len(parts) - 1, 2)]

    def transcript(self, *commands: str) -> str:
        """The commands as a README code block: each '$ command', then what it printed.
        Every block runs in the venv (the tour activates it once, first)."""
        outputs = self.run([ACTIVATE, *commands])[1:]
        lines = []
        for command, (output, _) in zip(commands, outputs):
            lines.append(f"$ {command}")
            lines.extend(output.splitlines())
        return code_block(lines)


def several_roots_setup(db: str) -> List[str]:
    """Commands that unpack the store of several switches and GPUs
    (tests/several_roots.py: the real trees and the synthetic dead-axis
    one, whose names say which is which) under trees/ and ingest them into db, in its order."""
    from . import several_roots

    unpack = f"PYTHONPATH={REPO} python -c 'from tests import several_roots; several_roots.unpack(\"trees\")'"
    top = {name: archive[1] for name, archive in several_roots.ARCHIVES.items()}
    return [
        ACTIVATE,
        unpack,
        *(
            f"zlstore ingest trees/{name}/{top.get(name, '')} --db {db}".replace("/ --db", " --db")
            for name in several_roots.ORDER
        ),
    ]


def real_sandbox(name: str, *trees: str) -> Sandbox:
    """A Sandbox at a fixed place, /tmp/zlstore-docs-NAME (the paths a
    transcript prints are the same from run to run), with the real trees
    of tests/data/real (paths below it) unpacked into it."""
    import atexit

    root = Path("/tmp") / f"zlstore-docs-{name}"
    shutil.rmtree(root, ignore_errors=True)
    box = Sandbox(root)
    atexit.register(shutil.rmtree, root, True)
    for tree in trees:
        subprocess.run(["tar", "xJf", str(REPO / "tests" / "data" / "real" / tree), "-C", str(root)], check=True)
    return box


def code_block(lines: Sequence[str]) -> str:
    """A fenced console block; trailing blanks dropped (tables pad their last column).
    (Fenced, not indented: cog re-indents what it writes to its marker's column.)"""
    return "```console\n" + "".join(f"{line}".rstrip() + "\n" for line in lines) + "```\n"


# -- reading the pages back: the tour as printed ---------------------------------


def pages() -> List[Path]:
    """README.md and every page under docs/ that has a cog part: the files
    `cog --check` must cover."""
    candidates = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [path for path in candidates if "[[[cog" in path.read_text(encoding="utf-8")]


def page(name: str) -> str:
    """A page (README.md, docs/tour.md, ...) without HTML comments (cog's generators live in them)."""
    return re.sub(r"<!--.*?-->", "", (REPO / name).read_text(encoding="utf-8"), flags=re.S)


def section(text: str, title: str) -> str:
    """The body of the README section '## title', up to the next '## ',
    without HTML comments (cog's generators live in them)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if match is None:
        raise LookupError(f"README.md has no section '## {title}'")
    return re.sub(r"<!--.*?-->", "", match.group(1), flags=re.S)


def code_blocks(text: str) -> List[List[str]]:
    """The code blocks of a markdown text (fenced, or indented by four
    spaces), each as its lines without the fence or the indent. A block
    fenced as ```text is a picture of something (a directory tree), not
    commands: it is left out."""
    blocks: List[List[str]] = []
    current: List[str] = []
    blank, fenced, shown = 0, False, True
    for line in text.splitlines():
        if fenced:
            if line.startswith("```"):
                if shown:
                    blocks.append(current)
                current, fenced = [], False
            else:
                current.append(line)
        elif line.startswith("```"):
            if current:
                blocks.append(current)
            current, blank, fenced, shown = [], 0, True, line[3:].strip() != "text"
        elif line.startswith("    "):
            current.extend([""] * blank)
            current.append(line[4:])
            blank = 0
        elif not line.strip() and current:
            blank += 1
        else:
            if current:
                blocks.append(current)
            current, blank = [], 0
    if current:
        blocks.append(current)
    return blocks


def steps(text: str) -> List[Tuple[str, Optional[List[str]]]]:
    """(command, the output printed after it) for each '$ command' of a
    transcript block; (command, None) for each line of a block of bare
    commands (shown without output)."""
    out: List[Tuple[str, Optional[List[str]]]] = []
    for block in code_blocks(text):
        if block[0].startswith("$ "):
            for line in block:
                if line.startswith("$ "):
                    printed: List[str] = []
                    out.append((line[2:], printed))
                else:
                    printed.append(line)
        else:
            out.extend((line, None) for line in block if line.strip())
    return [(command, _trimmed(output)) for command, output in out]


def _trimmed(lines):
    if lines is None:
        return None
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


# -- the command reference and the layout ---------------------------------------------


def commands():
    """(words, click command) for every command, in the order `zlstore --help` lists them."""
    import click

    from zlstore.cli import cli

    def walk(group, prefix):
        for name in group.list_commands(None):
            command = group.get_command(None, name)
            if command.hidden:
                continue
            yield (*prefix, name), command
            if isinstance(command, click.Group):
                yield from walk(command, (*prefix, name))

    return list(walk(cli, ()))


def help_text(words: Sequence[str]) -> str:
    from click.testing import CliRunner

    from zlstore.cli import cli

    result = CliRunner().invoke(cli, [*words, "--help"], prog_name="zlstore", terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def command_table() -> str:
    """| command | what it does |, from each command's usage and first help line."""
    import click

    rows = ["| command | what it does |", "|---|---|"]
    for words, command in commands():
        ctx = click.Context(command, info_name=" ".join(("zlstore", *words)))
        arguments = [piece for piece in command.collect_usage_pieces(ctx) if piece != "[OPTIONS]"]
        usage = " ".join(("zlstore", *words, *arguments))
        what = first_sentence(command.help or "", limit=120).replace("|", "\\|")
        rows.append(f"| `{usage}` | {what} |")
    return "\n".join(rows) + "\n"


def command_reference() -> str:
    """zlstore --help and every command's, each folded under its name."""
    parts = []
    for words in [(), *(words for words, _ in commands())]:
        name = " ".join(("zlstore", *words))
        parts.append(
            f"<details><summary><code>{name} --help</code></summary>\n\n"
            f"```\n{help_text(words).rstrip()}\n```\n\n</details>\n"
        )
    return "\n".join(parts)


def first_sentence(text: str, limit: int = 150) -> str:
    """A text's first sentence; a long one up to its first ':' or ',' outside parentheses."""
    paragraph = " ".join(text.split("\n\n")[0].split())
    match = re.match(r"(.+?)[.!?](?:\s|$)", paragraph + " ")
    assert match, f"no sentence in {paragraph!r}"
    sentence = match.group(1)
    if len(sentence) > limit:
        depth = 0
        for i, char in enumerate(sentence):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and char in ":,":
                return sentence[:i]
    return sentence


def summary_line(path: Path) -> str:
    """What a module is for: its docstring's first sentence."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise ValueError(f"{path.relative_to(REPO)} has no docstring: say in one sentence what it is for")
    return first_sentence(doc)


# zlstore's modules by stage, in the order a result flows through them: a
# module imports, at its top, only from its own stage and the stages before
# it (tests/test_imports.py), so a stage can be read without those after
# it. The stages are not subpackages: docs/development.md says why.
STAGES = (
    (
        "shared by every stage: names, the caliber, provenance, statistics, connections, output",
        (
            "names.py",
            "caliber.py",
            "provenance.py",
            "canonical.py",
            "stats.py",
            "errors.py",
            "pagenames.py",
            "db.py",
            "output.py",
            "interrupts.py",
            "forked.py",
        ),
    ),
    (
        "reading a runs tree: a cell's files, its values, its IR, without the store's derivations",
        (
            "read/layout.py",
            "read/runlog.py",
            "read/outcomes.py",
            "read/ttgir.py",
            "read/parse.py",
            "read/parallel.py",
            "read/unchanged.py",
            "read/files.py",
        ),
    ),
    (
        "the store and its derivations: schema, writers, the derived tables",
        (
            "store/macros.py",
            "store/ddl.py",
            "store/migrations.py",
            "store/floors.py",
            "store/pairing.py",
            "store/screenpairs.py",
            "store/ranges.py",
            "store/derivedstate.py",
            "store/derive.py",
            "store/sequential.py",
            "store/roots.py",
            "store/journal.py",
            "store/rootwriter.py",
            "store/cellwriter.py",
            "store/fingerprints.py",
            "store/cellingest.py",
            "store/ingest.py",
            "store/mergesource.py",
            "store/mergecopy.py",
            "store/merge.py",
            "store/store.py",
        ),
    ),
    (
        "judging and reporting: what the stored results say",
        (
            "show/judge.py",
            "show/history.py",
            "show/irfacts.py",
            "show/irsummary.py",
            "show/irdiff.py",
            "show/irchanges.py",
            "show/report.py",
            "show/forest.py",
            "show/document.py",
        ),
    ),
    (
        "running screens and campaigns: cells written as they end",
        (
            "run/harness.py",
            "run/procs.py",
            "run/plan.py",
            "run/adaptive.py",
            "run/display.py",
            "run/runner.py",
            "run/card.py",
            "run/slurm.py",
            "run/flaggems.py",
        ),
    ),
    (
        "serving: the store in datasette",
        ("serve/datasette_site.py", "serve/serverlimits.py", "serve/datasette_plugin.py", "serve/serve.py"),
    ),
    (
        "the front doors: the library's API and the command line",
        ("__init__.py", "clicommon.py", "run/commands.py", "cli.py", "__main__.py"),
    ),
)


def stage_of() -> dict:
    """module path under zlstore/ (run/runner.py) -> the index of its stage in STAGES."""
    return {name: i for i, (_, names) in enumerate(STAGES) for name in names}


def layout(width: int = 28) -> str:
    """`zlstore/<module>  what it is` for each module of the package, stage
    by stage (STAGES); a module in no stage, in two, or listed and gone is
    an error."""
    package = REPO / "zlstore"
    present = {
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if "pytest_plugins" not in p.parts and (p.parent == package or p.name != "__init__.py")
    }
    listed = [name for _, names in STAGES for name in names]
    if set(listed) != present or len(listed) != len(set(listed)):
        twice = sorted({name for name in listed if listed.count(name) > 1})
        raise ValueError(
            f"STAGES and zlstore/ differ: in no stage {sorted(present - set(listed))}, "
            f"listed but gone {sorted(set(listed) - present)}, in two stages {twice}"
        )
    return "".join(
        f"# {what}\n"
        + "".join(f"{'zlstore/' + name:<{width}}{summary_line(package / name)}\n" for name in names)
        + "\n"
        for what, names in STAGES
    )
