"""The run record is one object in one module: only journal.py writes the
run log's rows and problems (ingest_runs, ingest_problems), whichever
writer runs (ingest, record, merge, forget, a campaign's op), and the
migrations that shape those tables. The writers it serves stay the size of
their one job. Read through the AST, so that a formatter changes nothing."""

import ast
import re
from pathlib import Path

import zlstore

PACKAGE = Path(zlstore.__file__).resolve().parent

# A statement that writes a row of the run log, however it is spelled.
WRITES_LOG = re.compile(
    r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+(?:main\.)?ingest_(?:runs|problems)\b",
    re.I,
)
MAY_WRITE_LOG = {"journal.py", "migrations.py"}  # file names: both live in store/

# The writers' classes, by module: the walk and the batches, the run of a merge.
LIMITS = {("store/ingest.py", "Ingester"): 300, ("store/merge.py", "Merger"): 300}


def sql_texts(source: str) -> list:
    """(line, text) of every string in source, an f-string's literal parts joined."""
    found, tree = [], ast.parse(source)
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
            found.append((node.lineno, text))
    return found


def log_writes(path: Path) -> list:
    return [f"{path.name}:{line}" for line, text in sql_texts(path.read_text()) if WRITES_LOG.search(text)]


def test_the_guard_finds_a_run_row_written_by_hand(tmp_path):
    hand = tmp_path / "store.py"
    hand.write_text(
        'conn.execute("UPDATE ingest_runs SET finished_at = ? WHERE id = ?", (at, run_id))\n'
        'conn.execute(f"""INSERT INTO ingest_problems (run_id, file) VALUES ({run}, ?)""", (f,))\n'
        'conn.execute("SELECT count(*) FROM ingest_problems")\n'
    )
    assert log_writes(hand) == ["store.py:1", "store.py:2"]


def test_only_the_run_record_writes_the_run_log():
    assert log_writes(PACKAGE / "store" / "journal.py")  # the guard reads the module that does write it
    outside = [w for path in sorted(PACKAGE.rglob("*.py")) if path.name not in MAY_WRITE_LOG for w in log_writes(path)]
    assert outside == []


def test_the_writers_stay_the_size_of_their_job():
    for (module, name), limit in LIMITS.items():
        tree = ast.parse((PACKAGE / module).read_text())
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
        assert cls.end_lineno is not None and cls.end_lineno - cls.lineno + 1 <= limit, (module, name)
