"""docs/development.md walks one cell from `zlstore ingest` to its stored
finding, naming a function, a module or a table column at each hop. A
rename that leaves the walk naming what is gone fails here, so that the
page keeps reading top to bottom as the code does."""

import importlib
import re
from pathlib import Path

import pytest

from zlstore import Store

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "development.md"

# The classes the walk names by their own name, and the module of each.
CLASSES = {
    "Store": "zlstore.store.store",
    "Ingester": "zlstore.store.ingest",
    "_Batch": "zlstore.store.ingest",
    "RootWriter": "zlstore.store.rootwriter",
    "RunRecord": "zlstore.store.journal",
    "CellIngest": "zlstore.store.cellingest",
    "Merger": "zlstore.store.merge",
    "CellWriter": "zlstore.store.cellwriter",
}


def walk() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("### One cell, from `zlstore ingest` to its stored finding")
    return text[start : text.index("\n## ", start)]


def named(section: str) -> list:
    """The dotted names the walk puts in backticks (`journal.close_abandoned_runs`,
    `Ingester._write`, `ab_range_rows.q_value`, `rootwriter.py`)."""
    return sorted(set(re.findall(r"`([A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)+)`", section)))


def resolves(name: str, columns: dict) -> bool:
    first, *rest = name.split(".")
    if rest == ["py"]:
        return any((REPO / "zlstore").rglob(name))
    return in_code(first, rest) or (first in columns and rest[0] in columns[first])  # roots: a module and a table


def in_code(first: str, rest: list) -> bool:
    try:
        found = sorted((REPO / "zlstore").rglob(f"{first}.py"))
        dotted = ".".join(found[0].relative_to(REPO).with_suffix("").parts) if found else f"zlstore.{first}"
        target = importlib.import_module(CLASSES.get(first, dotted))
    except ModuleNotFoundError:
        return False
    for attribute in [first, *rest] if first in CLASSES else rest:
        if not hasattr(target, attribute):
            return False
        target = getattr(target, attribute)
    return True


@pytest.fixture(scope="module")
def columns(tmp_path_factory) -> dict:
    """Every table and view of a new store, with its columns."""
    with Store(tmp_path_factory.mktemp("walk") / "s.db") as store:
        relations = [r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        return {r: {c[1] for c in store.conn.execute(f"PRAGMA table_info('{r}')")} for r in relations}


def test_every_hop_names_what_exists(columns):
    names = named(walk())
    assert {"Ingester.run", "Store.derive", "CellWriter.write", "ranges.JUDGING"} <= set(names)
    assert [name for name in names if not resolves(name, columns)] == []


def test_the_check_catches_a_name_that_is_gone(columns):
    assert not resolves("Ingester._close_covered_gone", columns)
    assert not resolves("pairing.refresh", columns)
    assert not resolves("ab_range_rows.no_such_column", columns)
    assert not resolves("nosuchmodule.py", columns)
    assert resolves("ab_range_rows.q_value", columns) and resolves("parallel.Preparer.prepare", columns)
