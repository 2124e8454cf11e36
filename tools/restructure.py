#!/usr/bin/env python3
"""Move zlstore's flat modules into one folder per stage (issue 44, "Running
in its own package"), and rename every reference to them.

Run from the top of a checkout whose tree is clean:

    python3 tools/restructure.py            # git mv, rewrite, then say what changed
    python3 tools/restructure.py --check    # only list what it would move; exit 1 if anything

It is re-runnable: a module already in its folder stays, an import already
pointing there is left alone. It refuses to do anything (exit status 2,
listing them) while zlstore/ holds a top-level module MOVES and STAYS do not
name: extend the mapping, then run it again.

What it rewrites, in zlstore/, tests/, bench/, docs/, README.md,
BENCHMARKS.md and pyproject.toml:
- Python imports, through the AST: relative ones inside the package (`from
  . import a, b`, `from .x import y`, `from .. import z`) recomputed from
  each module's new place, split where the names now live in different
  folders; absolute ones (`from zlstore import x`, `from zlstore.x import y`,
  `import zlstore.x`) likewise.
- Dotted names in any text: `zlstore.runner.f` (monkeypatch targets, `python
  -c` strings, the datasette entry point in pyproject.toml).
- Paths: `zlstore/runner.py` -> `zlstore/run/runner.py`.
- `from zlstore import x` lines inside Markdown (cog blocks).
- SPECIAL: the few places that find modules by file name (the layout cog,
  the stage and one-home tests, the walk test) or that reach files beside a
  module by `__file__`; each is an exact edit that fails loudly when neither
  its old nor its new text is found.
"""

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "zlstore"

# The folders, each with its __init__'s docstring (docs/development.md says
# why each exists).
FOLDERS = {
    "read": "Reading a runs tree: a cell's files, its values and its IR, without the store's derivations.",
    "store": "The store and its derivations: the schema, the writers (ingest, record, merge, forget) and the "
    "derived tables.",
    "show": "What the stored results say: the judging queries, the IR diffs and the reports.",
    "run": "Running screens and campaigns: cells written and recorded as they end; the commands that start them "
    "(commands.py).",
    "serve": "Serving a store in datasette: the plugin, the site's metadata and the server.",
}

# module (old, flat) -> its new dotted place under zlstore. Keep this the one
# list: STAYS are the modules that stay at the top (what every stage shares,
# and the front doors).
MOVES = {
    # reading a runs tree
    "layout": "read.layout",
    "runlog": "read.runlog",
    "outcomes": "read.outcomes",
    "ttgir": "read.ttgir",
    "parse": "read.parse",
    "parallel": "read.parallel",
    "unchanged": "read.unchanged",
    "files": "read.files",
    # the store and its derivations
    "macros": "store.macros",
    "ddl": "store.ddl",
    "migrations": "store.migrations",
    "floors": "store.floors",
    "pairing": "store.pairing",
    "ranges": "store.ranges",
    "derive": "store.derive",
    "sequential": "store.sequential",
    "roots": "store.roots",
    "rootwriter": "store.rootwriter",
    "cellwriter": "store.cellwriter",
    "fingerprints": "store.fingerprints",
    "ingest": "store.ingest",
    "merge": "store.merge",
    "store": "store.store",
    "journal": "store.journal",
    "cellingest": "store.cellingest",
    "mergesource": "store.mergesource",
    "mergecopy": "store.mergecopy",
    "screenpairs": "store.screenpairs",
    "derivedstate": "store.derivedstate",
    # showing: judging and reporting
    "judge": "show.judge",
    "history": "show.history",
    "irfacts": "show.irfacts",
    "irsummary": "show.irsummary",
    "irdiff": "show.irdiff",
    "irchanges": "show.irchanges",
    "report": "show.report",
    "forest": "show.forest",
    "document": "show.document",
    # running
    "harness": "run.harness",
    "procs": "run.procs",
    "plan": "run.plan",
    "adaptive": "run.adaptive",
    "display": "run.display",
    "runner": "run.runner",
    "card": "run.card",
    "slurm": "run.slurm",
    "flaggems": "run.flaggems",
    "cli_run": "run.commands",
    # serving
    "datasette_site": "serve.datasette_site",
    "serverlimits": "serve.serverlimits",
    "datasette_plugin": "serve.datasette_plugin",
    "serve": "serve.serve",
}
STAYS = {
    "__init__",
    "__main__",
    "names",
    "caliber",
    "provenance",
    "canonical",
    "stats",
    "errors",
    "db",
    "output",
    "interrupts",
    "forked",
    "clicommon",
    "pagenames",
    "cli",
}

# Exact edits: (file, old text, new text). Applied when old is there; fine
# when new is there already; an error when neither is.
SPECIAL = [
    # schema.sql outside a wheel: the checkout's top, now two folders up from macros.py
    (
        "zlstore/store/macros.py",
        'return (Path(__file__).resolve().parent.parent / "schema.sql")',
        'return (Path(__file__).resolve().parents[2] / "schema.sql")',
    ),
    # the pytest plugins stay at the package's top (outcomes.py, in read/, imports one)
    (
        "zlstore/run/flaggems.py",
        'PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugins"',
        'PLUGIN_DIR = Path(__file__).resolve().parents[1] / "pytest_plugins"',
    ),
    # the layout (cog): modules by their path under zlstore/, in every folder
    (
        "tests/readme_tour.py",
        '    """module file name -> the index of its stage in STAGES."""',
        '    """module path under zlstore/ (run/runner.py) -> the index of its stage in STAGES."""',
    ),
    (
        "tests/readme_tour.py",
        '    present = {p.name for p in package.glob("*.py")}',
        "    present = {\n"
        "        p.relative_to(package).as_posix()\n"
        '        for p in package.rglob("*.py")\n'
        '        if "pytest_plugins" not in p.parts and (p.parent == package or p.name != "__init__.py")\n'
        "    }",
    ),
    # the stages of the import guard: by path, a folder's modules too
    (
        "tests/test_imports.py",
        "    return {module: by_file[path.name] for module, path in MODULES.items() if path.parent == PACKAGE}",
        "    return {\n"
        "        module: by_file[path.relative_to(PACKAGE).as_posix()]\n"
        "        for module, path in MODULES.items()\n"
        "        if path.relative_to(PACKAGE).as_posix() in by_file\n"
        "    }",
    ),
    (
        "tests/test_imports.py",
        '        if module.count(".") == 1\n',
        '        if module != "zlstore" and ".pytest_plugins" not in module\n',
    ),
    # the one-home guards read every module, in every folder
    (
        "tests/test_one_home.py",
        '    return sorted(PACKAGE.glob("*.py"))',
        '    return sorted(p for p in PACKAGE.rglob("*.py") if "pytest_plugins" not in p.parts)',
    ),
    # the walk's `module.name` and `module.py`: a module found by its name in any folder
    (
        "tests/test_walk.py",
        '        return (REPO / "zlstore" / name).is_file()',
        '        return any((REPO / "zlstore").rglob(name))',
    ),
    (
        "tests/test_walk.py",
        '        target = importlib.import_module(CLASSES.get(first, f"zlstore.{first}"))',
        '        found = sorted((REPO / "zlstore").rglob(f"{first}.py"))\n'
        '        dotted = ".".join(found[0].relative_to(REPO).with_suffix("").parts) if found else f"zlstore.{first}"\n'
        "        target = importlib.import_module(CLASSES.get(first, dotted))",
    ),
]

# __import__("zlstore.x.y") returns zlstore: the attribute path below it is the folder's too
SPECIAL.append(
    (
        "tests/test_reads.py",
        '__import__("zlstore.store.roots").roots.held',
        '__import__("zlstore.store.roots").store.roots.held',
    )
)

# The module list (cog) is wider by the folders' names: zlstore/serve/datasette_plugin.py.
SPECIAL += [
    ("docs/development.md", "readme_tour.layout(width=29)", "readme_tour.layout(width=36)"),
    ("docs/development.md", "{'schema.sql':<29}", "{'schema.sql':<36}"),
    ("docs/development.md", "{path:<29}", "{path:<36}"),
]

# Paragraphs replaced whole: (file, how the paragraph starts, the new one).
PARAGRAPHS = [
    (
        "docs/development.md",
        "**Stages, not subpackages.**",
        """**Stages as folders.** The package's tree shows its stages; a reader
listing it sees where a result is read, stored, shown, run and served.
`tools/restructure.py` made the move (issue 44) and says which module went
where (`MOVES`). Each folder, and why it earns one:

- `zlstore/` itself holds what every stage shares (names, the caliber,
  provenance, canonical JSON, statistics, connections, output, Ctrl-C,
  worker processes) and the front doors (`Store` through `__init__.py`,
  `cli.py`, `clicommon.py`, `__main__.py`). The shared modules get no
  folder of their own: every stage imports them, and `from .. import
  names` reads as what it is, the package's own vocabulary. `forked.py`
  is here rather than in `run/`: an ingest's workers (`read/parallel.py`)
  are forked through it too.
- `read/`: a runs tree read, a cell's files, values and IR, without the
  store. The one stage with no database: nothing in it imports the store,
  so it can be read, and changed, alone.
- `store/`: the schema (`macros`, `ddl`, `migrations`), the derivation
  (`pairing`, `ranges`, `floors`, `derive`, `sequential`), the writers
  (`roots`, `rootwriter`, `cellwriter`, `fingerprints`, `ingest`, `merge`)
  and `Store` itself (`store/store.py`; `from zlstore import Store` as
  before). One folder, not three: each writer runs the derivation inside
  its own transaction, and both use the macros, so three folders would
  import one another both ways. `sequential.py` is here rather than in
  `run/`: a merge records an op's stops.
- `show/`: what the stored results say, reading only: the judging
  queries, history, the IR's facts, diffs and summaries, the reports and
  the document.
- `run/`: running screens and campaigns (`runner`, `card`, `plan`,
  `slurm`, `flaggems`, `harness`, `procs`, `adaptive`, `display`), the
  kind of module datasette groups in `views/`, with the commands that
  start them beside them: `run/commands.py` (`zlstore plan`, `zlstore run
  ...`, `zlstore flaggems ...`, and `running_options`, the one
  declaration of the options they share). The commands import
  `clicommon.py`, so the stage list below names them with the front doors.
- `serve/`: the store in datasette: the plugin, the site's metadata and
  canned queries, the server's limits, `zlstore serve`. `metadata.yaml`
  stays at the package's top, package data beside `schema.sql`'s place in
  the wheel: `show/forest.py` reads the chart it defines too.
- `pytest_plugins/`: standalone files loaded into FlagGems' benchmark, in
  no stage.

A module keeps its name in its folder, even where the folder has the same
name (`store/store.py`, `serve/serve.py`), so that the docs, the one-home
table above and `git log --follow` name it as before. Each folder's
`__init__.py` holds only its docstring: importing one module of a stage
loads nothing else of it.""",
    ),
]

TEXT_SUFFIXES = {".py", ".md", ".toml", ".sql", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".sh"}
TOP_FILES = ["README.md", "BENCHMARKS.md", "pyproject.toml", ".ci/run", "schema.sql"]
SCOPES = ["zlstore", "tests", "bench", "docs"]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def old_path(old: str) -> Path:
    return PACKAGE / f"{old}.py"


def new_path(old: str) -> Path:
    return PACKAGE.joinpath(*MOVES[old].split(".")).with_suffix(".py")


def unknown_modules() -> list:
    """Top-level modules of zlstore/ the mapping does not know."""
    known = set(MOVES) | STAYS
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in known and p.stem not in FOLDERS)


# -- dotted names: old -> new ----------------------------------------------------------

OLD_DOTTED = {f"zlstore.{old}": f"zlstore.{new}" for old, new in MOVES.items()}
NEW_MODULES = set(OLD_DOTTED.values()) | {f"zlstore.{folder}" for folder in FOLDERS}
# The modules still at their old place when this run began: while store.py
# is, `zlstore.store` names that module, not the folder it goes into.
PENDING = {old for old in MOVES if (PACKAGE / f"{old}.py").exists()}


def mapped(dotted: str) -> str:
    """A dotted name (a module, or a name in one) at its new place; one
    already there is returned as it is."""
    folder_named = dotted.count(".") == 1 and dotted.partition(".")[2] in PENDING
    if not folder_named and (
        dotted in NEW_MODULES or any(dotted.startswith(m + ".") for m in NEW_MODULES if m.count(".") == 2)
    ):
        return dotted
    for old, new in OLD_DOTTED.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old) :]
    return dotted


def rewrite_dotted(text: str) -> str:
    """zlstore.<old>[.rest] -> zlstore.<new>[.rest] anywhere in a text, but a
    name already new (zlstore.store.pairing, zlstore.serve.serve) or one
    that is not a module (zlstore.db, the file) stays."""

    def one(match):
        name = match.group(0)
        return mapped(name)

    return re.sub(r"(?<![\w.])zlstore(?:\.[A-Za-z_]\w*)+", one, text)


def rewrite_paths(text: str) -> str:
    """zlstore/<old>.py -> zlstore/<new path>.py; and a renamed module's bare file name."""
    for old, new in MOVES.items():
        text = re.sub(rf"(?<![\w.-])zlstore/{re.escape(old)}\.py\b", f"zlstore/{new.replace('.', '/')}.py", text)
        if old.rpartition(".")[2] != new.rpartition(".")[2]:  # a renamed module: its bare file name too
            text = re.sub(rf"(?<![\w/.-]){re.escape(old)}\.py\b", new.replace(".", "/") + ".py", text)
    return text


# -- Python imports, through the AST ------------------------------------------------------


def module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str, modules: set) -> bool:
    return dotted in modules


def absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative(from_package: str, target: str) -> str:
    """`from X import` text that reaches target (a dotted module or package) from a module of from_package."""
    here, there = from_package.split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def statements_for(node, module, is_package, inside_package, known, new_module=None):
    """The import statements node becomes, or None where it stays as it is.
    module: the dotted name node's relative import is resolved against (the
    file's place before the move); new_module: where the file goes (its
    relative imports are spelled from there). known: every dotted module,
    under its old or its new name."""
    new_module = new_module or module
    package = new_module if is_package else new_module.rpartition(".")[0]

    def spell(target):
        return relative(package, target) if inside_package else target

    if isinstance(node, ast.Import):
        names = []
        changed = False
        for alias in node.names:
            new = mapped(alias.name)
            changed |= new != alias.name
            names.append(new + (f" as {alias.asname}" if alias.asname else ""))
        return [f"import {', '.join(names)}"] if changed else None
    target = absolute(module, is_package, node)
    if not (target == "zlstore" or target.startswith("zlstore.")):
        return None
    groups: dict = {}
    changed = False
    for alias in node.names:
        full = f"{target}.{alias.name}"
        if full in known:  # a module: it may now live in another folder, or under another name
            new = mapped(full)
            parent, _, base = new.rpartition(".")
            asname = alias.asname or (alias.name if base != alias.name else None)
            changed |= new != full
            groups.setdefault(parent, []).append(base + (f" as {asname}" if asname and asname != base else ""))
        else:  # a name in the module target
            new_target = mapped(target)
            changed |= new_target != target
            groups.setdefault(new_target, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
    if not changed and not (inside_package and new_module != module):
        return None
    return [f"from {spell(where)} import {', '.join(names)}" for where, names in groups.items()]


NOTES: list = []


def respelled(node, new: list, lines: list) -> bool:
    """Where node becomes one statement of the same names from one place,
    change only its `from X` in lines, so that the rest of it (its layout,
    its comments) stays as written; whether it did."""
    if len(new) != 1 or not isinstance(node, ast.ImportFrom):
        return False
    same = re.match(r"from (\S+) import (.*)", new[0])
    spelled = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
    if not same or same.group(2) != spelled:
        return False
    first = node.lineno - 1
    head = re.compile(r"from\s+[.\w]+\s+import")
    line = lines[first]
    lines[first] = line[: node.col_offset] + head.sub(f"from {same.group(1)} import", line[node.col_offset :], count=1)
    return True


def rewrite_imports(path: Path, source: str, module: str, new_module: str, known: set) -> str:
    """source with its zlstore imports pointing at the new places. module:
    the dotted name the file's relative imports are resolved against (its
    place before the move)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    inside = module == "zlstore" or module.startswith("zlstore.")
    is_package = path.name == "__init__.py"
    lines = source.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import) and not any(a.name.startswith("zlstore.") for a in node.names):
            continue
        if (
            isinstance(node, ast.ImportFrom)
            and inside
            and not node.level
            and not (node.module or "").startswith("zlstore")
        ):
            continue
        new = statements_for(node, module, is_package, inside and node.level > 0, known, new_module)
        if new is None:
            continue
        first, last = node.lineno - 1, node.end_lineno - 1
        if respelled(node, new, lines):
            continue
        indent = lines[first][: node.col_offset]
        tail = lines[last][node.end_col_offset :].rstrip("\n")
        comment = tail.strip()
        if comment and not comment.startswith("#"):  # `import x; y`: leave it to a person
            raise SystemExit(f"{path}:{node.lineno}: an import shares its line; rewrite it by hand")
        above = lines[first - 1].strip() if first else ""
        if any("#" in line for line in lines[first:last]):
            NOTES.append(f"{path.relative_to(REPO)}:{node.lineno}: a comment inside an import rewritten: check it")
        text = []
        for i, statement in enumerate(new):
            said = comment or (above if i and above.startswith("#") else "")
            text.append(indent + statement + (f"  {said}" if said else "") + "\n")
        edits.append((first, last, text))
    for first, last, text in sorted(edits, reverse=True):
        lines[first : last + 1] = text
    return "".join(lines)


def rewrite_text_imports(text: str, known: set) -> str:
    """`from zlstore import a, b` written as text: on a line of a cog block
    in Markdown, or inside a string of Python code (`python -c "import os;
    from zlstore import parallel"`). Where the names now live in several
    folders, the statements are joined as the text around them is: a line
    each, or `; ` inside a line."""

    def one(match):
        start, names = match.group(1), match.group(2)
        try:
            node = ast.parse(f"from zlstore import {names.strip()}").body[0]
        except SyntaxError:
            return match.group(0)
        new = statements_for(node, "docs", False, False, known)
        if new is None:
            return match.group(0)
        indent = start if start.strip() == "" else ""
        joiner = "\n" + indent if start.strip() == "" else "; "
        return start + joiner.join(new)

    return re.sub(r"(?m)(^[ \t]*|[\"';][ \t]*)from zlstore import ([A-Za-z_][\w ,]*?)[ \t]*(?=\\n|;|\"|'|$)", one, text)


# -- the run ---------------------------------------------------------------------------------


def text_files() -> list:
    listed = git("ls-files", *SCOPES, *TOP_FILES).splitlines()
    return [REPO / p for p in listed if (REPO / p).is_file() and (Path(p).suffix in TEXT_SUFFIXES or p == ".ci/run")]


def refusals(pending: list) -> list:
    """Why this run must not start: modules the mapping does not know, a
    module both at its old place and its new one, changes not committed."""
    found = [
        f"zlstore/{m}.py is a module the mapping does not know: add it to MOVES (or STAYS) in tools/restructure.py"
        for m in unknown_modules()
    ]
    found += [
        f"zlstore/{old}.py and {new_path(old).relative_to(REPO)} both exist"
        for old in MOVES
        if old_path(old).exists() and new_path(old).exists()
    ]
    if pending and git("status", "--porcelain", "--untracked-files=no").strip():
        found.append("the tree has changes not committed: commit them first, so that this run's can be read apart")
    return found


def rewrite_texts(rewrite, suffixes=None) -> None:
    for path in text_files():
        if suffixes and path.suffix not in suffixes:
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite(path, text)
        if new != text:
            path.write_text(new, encoding="utf-8")


def move(pending: list) -> None:
    for folder, doc in FOLDERS.items():
        init = PACKAGE / folder / "__init__.py"
        if not init.exists():
            init.parent.mkdir(exist_ok=True)
            init.write_text(f'"""{doc}"""\n', encoding="utf-8")
            git("add", str(init.relative_to(REPO)))
    # store.py and serve.py go into folders of their own name: git mv works
    # file by file, and the folder is made above, so no name is taken twice
    for old in pending:
        git("mv", str(old_path(old).relative_to(REPO)), str(new_path(old).relative_to(REPO)))


def restage() -> None:
    """The STAGES of tests/readme_tour.py: each module by its path under zlstore/."""
    tour = REPO / "tests" / "readme_tour.py"
    text = tour.read_text(encoding="utf-8")
    start = text.index("STAGES = (")
    end = text.index("\n)\n", start)

    def staged(match):
        name = match.group(1)
        return f'"{MOVES[name].replace(".", "/")}.py"' if name in MOVES else match.group(0)

    text = text[:start] + re.sub(r'"(\w+)\.py"', staged, text[start:end]) + text[end:]
    tour.write_text(text, encoding="utf-8")


def exact_edits() -> list:
    """SPECIAL and PARAGRAPHS applied; what found nothing."""
    failed = []
    for name, old, new in SPECIAL:
        path = REPO / name
        text = path.read_text(encoding="utf-8")
        if old in text:
            path.write_text(text.replace(old, new), encoding="utf-8")
        elif new not in text:
            failed.append(f"{name}: neither {old.strip()!r} nor its replacement")
    for name, start, new in PARAGRAPHS:
        path = REPO / name
        text = path.read_text(encoding="utf-8")
        if new in text:
            continue
        if start not in text:
            failed.append(f"{name}: no paragraph starting {start!r}")
            continue
        at = text.index(start)
        end = text.find("\n\n", at)
        path.write_text(text[:at] + new + text[end if end >= 0 else len(text) :], encoding="utf-8")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list what would move")
    args = parser.parse_args()

    pending = [old for old in MOVES if old_path(old).exists()]
    refused = refusals(pending)
    if refused:
        print("restructure: nothing done:\n  " + "\n  ".join(refused), file=sys.stderr)
        return 2
    if args.check:
        for old in pending:
            print(f"zlstore/{old}.py -> {new_path(old).relative_to(REPO)}")
        return 1 if pending else 0
    known = set(OLD_DOTTED) | NEW_MODULES | {module_of(p) for p in PACKAGE.rglob("*.py")}

    # 1. every text: dotted names (zlstore.runner.f) and paths (zlstore/runner.py)
    rewrite_texts(lambda path, text: rewrite_paths(rewrite_dotted(text)))

    # 2. the Python imports, before anything moves: each file's relative
    # imports resolved from where it is, spelled from where it goes
    def imports(path, text):
        module = module_of(path)
        goes = f"zlstore.{MOVES[path.stem]}" if path.parent == PACKAGE and path.stem in PENDING else module
        return rewrite_imports(path, text, module, goes, known)

    rewrite_texts(imports, {".py"})

    # 3. the folders and the moves; then what names modules by their place
    move(pending)
    rewrite_texts(lambda path, text: rewrite_text_imports(text, known), {".md", ".py"})
    restage()
    failed = exact_edits()
    if failed:
        print("restructure: these exact edits found nothing:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 2
    for note in NOTES:
        print(f"restructure: {note}", file=sys.stderr)
    print(
        f"restructure: {len(pending)} modules moved. Next: pip install -e . (the datasette entry point), "
        "ruff format, cog -r on every page with a cog part, then the tests (docs/development.md)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
