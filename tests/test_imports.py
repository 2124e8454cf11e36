"""zlstore's modules import one another one way, with no circle, and an
import inside a function says why it is not at the module's top (a heavy
library only one command needs, a command's start-up, a circle it would
close). Read through Python's ast and tokenize, so that a formatter's layout
changes nothing."""

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

import zlstore
from tests import readme_tour

PACKAGE = Path(zlstore.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(tree: ast.Module, in_functions: bool):
    """The import statements run when the module is imported (in_functions
    False: at its top, in its if, try, with and class blocks, but not under
    TYPE_CHECKING), or those inside its functions (in_functions True)."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if is_type_checking(child):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inner == in_functions:
                found.append(child)
            visit(child, inner)

    visit(tree, False)
    return found


def imported_modules(module: str, node) -> set:
    """The zlstore modules an import statement of module loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            if MODULES[module].name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target for alias in node.names]
    found = set()
    for name in names:
        while name and name not in MODULES:  # import zlstore.x.y: the deepest module it names
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all of these tests."""
    return ast.parse(path.read_text())


def graph(in_functions: bool = False) -> dict:
    """module -> the zlstore modules it imports at its top (in_functions:
    and inside its functions too)."""
    edges = {}
    for module, path in MODULES.items():
        tree = parsed(path)
        statements = imports(tree, in_functions=False) + (imports(tree, in_functions=True) if in_functions else [])
        edges[module] = set().union(*(imported_modules(module, n) for n in statements))
        edges[module].discard(module)
    return edges


def cycle(edges: dict):
    """One import circle of edges, as the list of its modules, or None."""
    state = {}

    def visit(module, path):
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target, path + [target])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def test_the_graph_is_read_and_a_circle_is_found():
    # the guard sees every module, a subpackage's too, and every kind of import: relative
    # (`from . import db as dbmod`, `from .store import Store`, `from .. import x`) and absolute
    edges = graph()
    assert {"zlstore", "zlstore.cli", "zlstore.pytest_plugins.zlstore_outcomes"} <= set(MODULES)
    assert {"zlstore.db", "zlstore.clicommon", "zlstore.run.commands"} <= edges["zlstore.cli"]
    assert "zlstore.store.store" in edges["zlstore.clicommon"]
    in_subpackage = "zlstore.pytest_plugins.zlstore_compat"
    for statement, found in (
        ("from . import zlstore_outcomes", "zlstore.pytest_plugins.zlstore_outcomes"),
        ("from .. import Store", "zlstore"),
        ("import zlstore.cli", "zlstore.cli"),
        ("from zlstore.cli import x", "zlstore.cli"),
        ("import json", None),
    ):
        assert imported_modules(in_subpackage, ast.parse(statement).body[0]) == ({found} if found else set())
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("in_functions", [False, True], ids=["module level", "in functions too"])
def test_no_import_circle(in_functions):
    """Not even through an import inside a function (a lazy import that
    hides a circle: datasette_plugin and serve had one)."""
    assert cycle(graph(in_functions)) is None


def test_names_is_a_leaf_and_db_imports_only_leaves():
    every = {
        module.rpartition(".")[2]: {t.rpartition(".")[2] for t in targets}
        for module, targets in graph(in_functions=True).items()
        if module != "zlstore" and ".pytest_plugins" not in module
    }
    leaves = {m for m, imported in every.items() if not imported}
    assert every["names"] == set() and every["floors"] == set()
    # db.py: connections and faults; macros.py, the SQL rendering, the one part of the plumbing with
    # domain imports
    assert every["db"] <= leaves and every["errors"] == set()
    assert every["macros"] <= leaves | {"ttgir"} and every["ttgir"] <= leaves  # ttgir: canonical JSON, names
    assert every["migrations"] <= {"db", "macros"}


# -- stages: a module imports from its own stage and the stages before it ----


def stage_of_module() -> dict:
    """zlstore module (dotted) -> its stage's index in readme_tour.STAGES;
    the plugins zlstore flaggems loads into the benchmark are standalone
    files, in no stage."""
    by_file = readme_tour.stage_of()
    return {
        module: by_file[path.relative_to(PACKAGE).as_posix()]
        for module, path in MODULES.items()
        if path.relative_to(PACKAGE).as_posix() in by_file
    }


def forward_imports(edges: dict, stage: dict) -> list:
    """'a (stage i) imports b (stage j)' for every import of a later stage."""
    return sorted(
        f"{module} (stage {stage[module]}) imports {target} (stage {stage[target]})"
        for module, targets in edges.items()
        if module in stage
        for target in targets
        if target in stage and stage[target] > stage[module]
    )


def test_a_module_imports_only_from_its_stage_and_the_stages_before():
    assert forward_imports({"a": {"b", "c"}, "b": {"a"}}, {"a": 0, "b": 1, "c": 0}) == [
        "a (stage 0) imports b (stage 1)"
    ]
    stage = stage_of_module()
    assert {"zlstore", "zlstore.cli", "zlstore.store.derive", "zlstore.db"} <= set(stage)
    assert (
        stage["zlstore.db"] < stage["zlstore.read.parse"] < stage["zlstore.store.derive"] < stage["zlstore.show.judge"]
    )
    assert forward_imports(graph(), stage) == []


def comment_lines(source: str) -> set:
    """The lines with a comment that says something: not only a `noqa` or
    `type: ignore` directive."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = re.sub(
                r"noqa(:\s*[A-Z]+[0-9]+(,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?", "", token.string.lstrip("#")
            )
            if re.search(r"\w", text):
                lines.add(token.start[0])
    return lines


def unexplained(path: Path) -> list:
    """The imports inside path's functions without a comment on their line
    (any of them, for one that spans several) or on the line above."""
    source = path.read_text()
    said = comment_lines(source)
    return [
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for node in imports(ast.parse(source), in_functions=True)
        if not said & set(range(node.lineno - 1, node.end_lineno + 1))
    ]


def test_the_comment_guard_finds_an_unexplained_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n\n\ndef f():\n    import json  # noqa: PLC0415\n\n    # why\n"
        "    import re\n    from x import (a,\n                   b)  # why\n"
    )
    assert unexplained(module) == ["m.py:5: import json"]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_an_import_inside_a_function_says_why(path):
    assert unexplained(path) == []
