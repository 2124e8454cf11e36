"""A store handed to `zlstore merge` is input like any runs/ tree: read as
data, never run as code, checked table by table before a row is read, its
paths not trusted (issue 33, items 1, 2, 6, 7, 11; issue 32's item 4).
bench/hostile_stores.py mutates a real store many more ways."""

import hashlib
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from zlstore import Store, db
from zlstore.store import merge, mergesource, roots

from .judging import invoke
from .test_roots import SCREEN, ingest, settled  # noqa: F401

ZLSTORE = [sys.executable, "-m", "zlstore"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def source(example_store_path, tmp_path) -> Path:
    """A private copy of the ingested example store, whole in one file."""
    with sqlite3.connect(example_store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = tmp_path / "source.db"
    shutil.copy(example_store_path, path)
    return path


def mutate(path: Path, *statements: str):
    with sqlite3.connect(path, isolation_level=None) as conn:
        for statement in statements:
            conn.execute(statement)


def _schema_edit(table: str, old: str, new: str) -> list:
    """Statements that change table's definition in place (a clause ALTER
    TABLE cannot add), its rows left as they are."""
    return [
        "PRAGMA ignore_check_constraints = ON",
        "PRAGMA writable_schema = ON",
        f"UPDATE sqlite_master SET sql = replace(sql, '{old}', '{new}') WHERE name = '{table}'",
        "PRAGMA writable_schema = OFF",
    ]


ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT c2.* FROM c2, (SELECT max(n) FROM r)"

# (what is done to the source, what the refusal must name)
REFUSED = {
    "a view over an endless query in place of a table": (
        ["ALTER TABLE calibers RENAME TO c2", f"CREATE VIEW calibers AS {ENDLESS}"],
        "table calibers: a view",
    ),
    "a view in place of kernels": (
        ["ALTER TABLE kernels RENAME TO k2", "CREATE VIEW kernels AS SELECT * FROM k2"],
        "table kernels: a view",
    ),
    "no roots.identity": (["ALTER TABLE roots DROP COLUMN identity"], "table roots, column identity: missing"),
    "no roots.env": (  # SQLite drops only a column no view reads, and views read it: they go first
        [
            "PRAGMA writable_schema = ON",
            "DELETE FROM sqlite_master WHERE type = 'view'",
            "PRAGMA writable_schema = OFF",
            "ALTER TABLE roots DROP COLUMN env",
        ],
        "table roots, column env: missing",
    ),
    "a column this release lacks": (["ALTER TABLE cells ADD COLUMN evil TEXT"], "table cells, column evil"),
    "a generated column": (
        ["ALTER TABLE roots ADD COLUMN big AS (zeroblob(100000000)) VIRTUAL"],
        "table roots, column big",
    ),
    "text in an INTEGER column": (
        ["UPDATE cells SET rc = 'zero' WHERE id = (SELECT min(id) FROM cells)"],
        "table cells, column rc: a value not INTEGER",
    ),
    "NULL where NOT NULL": (
        [
            "PRAGMA ignore_check_constraints = ON",
            "PRAGMA writable_schema = ON",
            "UPDATE sqlite_master SET sql = replace(sql, 'relpath TEXT NOT NULL', 'relpath TEXT') WHERE name = 'cells'",
            "PRAGMA writable_schema = OFF",
        ],
        "table cells, column relpath",
    ),
    "a root's env that is not JSON": (["UPDATE roots SET env = '{not json'"], "table roots, column env: not a JSON"),
    "text that is not UTF-8": (
        ["UPDATE roots SET name = CAST(X'C328' AS TEXT) WHERE id = (SELECT min(id) FROM roots)"],
        "table roots, column name: text that is not UTF-8",
    ),
    # issue 46, item 3: what the schema asks SQLite to evaluate, refused from its text before quick_check
    "a CHECK constraint of the source's own": (
        _schema_edit(
            "measurements",
            "cell_id INTEGER NOT NULL REFERENCES",
            "cell_id INTEGER NOT NULL CHECK (length(randomblob(900000000)) > 0) REFERENCES",
        ),
        "table measurements, column cell_id: CHECK (length(randomblob(900000000)) > 0)",
    ),
    "a table constraint of the source's own": (
        [
            "PRAGMA writable_schema = ON",
            "UPDATE sqlite_master SET sql = rtrim(rtrim(sql), ')') || ', CHECK (zeroblob(1000000000) IS NOT NULL))' "
            "WHERE name = 'roots'",
            "PRAGMA writable_schema = OFF",
        ],
        "table roots: CHECK (zeroblob(1000000000) IS NOT NULL)",
    ),
    "a collation": (
        _schema_edit("roots", "name TEXT NOT NULL,", "name TEXT NOT NULL COLLATE NOCASE,"),
        "table roots, column name: COLLATE NOCASE",
    ),
    "an extra table with a CHECK": (
        ["CREATE TABLE extra (x CHECK (length(randomblob(900000000)) > 0))"],
        "table extra, column x: CHECK",
    ),
    "an index on an expression": (["CREATE INDEX evil ON cells(abs(id))"], "index evil: ON (abs(id))"),
    "user_version -1": (["PRAGMA user_version = -1"], "schema version -1"),
    "user_version 0": (["PRAGMA user_version = 0"], "does not migrate"),
    "user_version 1": (["PRAGMA user_version = 1"], "does not migrate"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_source_that_does_not_match_is_refused_naming_table_and_column(source, tmp_path, case):
    statements, named = REFUSED[case]
    mutate(source, *statements)
    target = tmp_path / "t.db"
    # a real process, bounded: a source read as code could hang it forever (issue 33, item 1)
    done = subprocess.run(
        ZLSTORE + ["merge", str(source), "--db", str(target)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert not target.exists()  # refused before the target is even created


def test_a_refused_source_leaves_an_existing_target_byte_for_byte(source, example_store_path, tmp_path):
    target = tmp_path / "t.db"
    shutil.copy(example_store_path, target)
    before = sha256(target)
    mutate(source, "ALTER TABLE calibers RENAME TO c2", f"CREATE VIEW calibers AS {ENDLESS}")
    result = invoke(target, "merge", source)
    assert result.exit_code == 2 and "table calibers: a view" in result.output
    assert sha256(target) == before


def test_three_empty_tables_are_not_a_store(tmp_path):
    fake = tmp_path / "fake.db"
    mutate(fake, "CREATE TABLE roots (x)", "CREATE TABLE cells (x)", "CREATE TABLE measurements (x)")
    result = invoke(tmp_path / "t.db", "merge", fake)
    assert result.exit_code == 2 and "does not migrate" in result.output and "Traceback" not in result.output


def test_the_source_s_triggers_and_views_never_run_nor_come_along(source, tmp_path):
    """A trigger that would stop any write, and a view over an endless query
    beside the tables: both dropped unread in the private copy."""
    mutate(
        source,
        "CREATE TRIGGER no_writes BEFORE INSERT ON ingest_runs BEGIN SELECT RAISE(ABORT, 'no'); END",
        "CREATE VIEW endless AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r",
        "ANALYZE",
        "UPDATE sqlite_stat1 SET stat = '1000000000 1 1'",
    )  # the planner's figures: not the source's word
    target = tmp_path / "t.db"
    result = invoke(target, "merge", source, "--json")
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["cells_added"] > 0
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name IN ('no_writes', 'endless')").fetchone() == (
            0,
        )
    with sqlite3.connect(source) as conn:  # the source itself is only read
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name IN ('no_writes', 'endless')").fetchone() == (
            2,
        )


def test_a_source_hard_linked_to_the_target_is_the_target_itself(example_store_path, tmp_path):
    target = tmp_path / "t.db"
    shutil.copy(example_store_path, target)
    os.link(target, tmp_path / "link.db")
    result = invoke(target, "merge", tmp_path / "link.db")
    assert result.exit_code == 2, result.output
    assert "is the target database itself (the same file: a link)" in result.output


def test_a_source_with_a_hot_journal_is_read_as_its_last_commit(source, tmp_path):
    """A writer killed mid-transaction leaves a hot journal: SQLite cannot
    read the source read-only; merge recovers a copy, never the source."""
    mutate(source, "PRAGMA journal_mode = DELETE")
    with sqlite3.connect(source) as conn:
        committed = conn.execute("SELECT count(*) FROM cells").fetchone()[0]
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import os, sqlite3
conn = sqlite3.connect({str(source)!r}, isolation_level=None)
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN")
conn.execute("DELETE FROM measurements")
conn.execute("DELETE FROM blobs")
os._exit(0)  # no commit, no rollback: the journal is left hot
""",
        ]
    )
    assert killed.returncode == 0
    journal = source.with_name(source.name + "-journal")
    assert journal.exists() and journal.stat().st_size > 0
    before = sha256(source), sha256(journal)
    target = tmp_path / "t.db"
    result = invoke(target, "merge", source, "--json")
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["cells_added"] == committed
    assert (sha256(source), sha256(journal)) == before  # the source and its journal untouched


def test_paths_from_a_source_are_not_trusted(example_tree, tmp_path):
    """A merged root is at no path of this host: rescore --write writes
    nothing into the directory the source named (it exists here: the very
    tree), until an ingest on this host finds the tree and moves it there."""
    tree, _ = example_tree
    ingest(tmp_path / "a.db", tree / SCREEN)
    target = tmp_path / "t.db"
    assert invoke(target, "merge", tmp_path / "a.db").exit_code in (0, 1)
    with Store(target) as store:
        path = store.root(SCREEN)["path"]
        assert path.startswith(roots.MERGED)
        assert (
            store.conn.execute("SELECT count(*) FROM cells WHERE path NOT LIKE ? || '/%'", (path,)).fetchone()[0] == 0
        )
    before = sorted(p.name for p in (tree / SCREEN).iterdir())
    written = invoke(target, "rescore", SCREEN, "--write")
    assert written.exit_code == 2
    assert "known here only from a merged store" in written.output
    assert sorted(p.name for p in (tree / SCREEN).iterdir()) == before  # no screen.tsv.orig, nothing written
    ingest(target, tree / SCREEN)  # this host finds the tree: the root moves to where it is
    with Store(target) as store:
        assert store.root(SCREEN)["path"] == str(tree / SCREEN)
    assert invoke(target, "rescore", SCREEN, "--write").exit_code == 0
    assert (tree / SCREEN / "screen.tsv.orig").exists()


def test_two_stores_of_one_tree_list_each_open_problem_once(example_tree, tmp_path):
    """Issue 32, item 4: both stores ingested the same tree, whose one
    run.log is cut off: the merged store lists that problem once."""
    tree, _ = example_tree
    ingest(tmp_path / "a.db", tree)
    ingest(tmp_path / "b.db", tree)
    target = tmp_path / "all.db"
    result = invoke(target, "merge", tmp_path / "a.db", tmp_path / "b.db")
    assert result.exit_code == 1, result.output
    assert result.stdout.rstrip().endswith("0 conflicts, 1 problem")
    listed = invoke(target, "problems", "--json")
    assert len(json.loads(listed.stdout)) == 1
    again = invoke(target, "merge", tmp_path / "b.db", tmp_path / "a.db")  # merged again, either order
    assert again.stdout.rstrip().endswith("0 conflicts, 1 problem")
    assert len(json.loads(invoke(target, "problems", "--json").stdout)) == 1


def _limited(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_stops_the_merge_at_the_first_failure(source, tmp_path):
    """No file may grow past a limit (RLIMIT_FSIZE: writes fail as on a full
    disk): the merge stops at the first failure, exit 2, the cause said
    once; no root is a problem of the source, and the target is sound."""
    target = tmp_path / "t.db"
    Store(target).close()
    size = source.stat().st_size
    done = subprocess.run(
        ZLSTORE + ["merge", str(source), "--db", str(target)],
        capture_output=True,
        text=True,
        preexec_fn=_limited(size + (64 << 10)),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and ("disk" in lines[0] or "full" in lines[0]), done.stderr
    assert "Traceback" not in done.stderr and "not merged" not in done.stderr
    with Store(target) as store:
        assert db.integrity_problems(store.conn, full=True) == []
        assert store.conn.execute(
            "SELECT count(*) FROM ingest_problems WHERE message LIKE '%not merged%'"
        ).fetchone() == (0,)
        assert store.conn.execute("SELECT count(*) FROM ingest_runs WHERE finished_at IS NULL").fetchone() == (0,)


def test_refused_messages_escape_what_the_source_names(source, tmp_path):
    mutate(source, 'ALTER TABLE cells ADD COLUMN "evil\x1b[2J" TEXT')
    result = invoke(tmp_path / "t.db", "merge", source)
    assert result.exit_code == 2
    assert "\x1b" not in result.output and "evil\\x1b[2J" in result.output


def test_check_source_refuses_what_is_not_a_regular_sqlite_file(tmp_path):
    with pytest.raises(merge.SourceError, match="not a regular file"):
        merge.check_source("/dev/zero")
    (tmp_path / "text.db").write_text("hello")
    with pytest.raises(merge.SourceError, match="not an SQLite file"):
        merge.check_source(tmp_path / "text.db")


def test_a_few_cases_of_the_hostile_store_fuzzer(tmp_path):
    """bench/hostile_stores.py, bounded: no hang, no traceback, every target sound."""
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parent.parent / "bench" / "hostile_stores.py"),
            "--cases",
            "6",
            "--seed",
            "test",
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cases tried: 6")
    assert lines[1:4] == ["hangs: 0", "tracebacks or other exit statuses: 0", "targets left unsound: 0"], done.stderr


def test_a_source_s_unfinished_run_is_closed_as_interrupted_once(source, tmp_path):
    """A run its own store never finished (killed there) comes closed, shown
    as interrupted; merging that store again adds no second copy."""
    mutate(source, "UPDATE ingest_runs SET finished_at = NULL")
    target = tmp_path / "t.db"
    for _ in range(2):
        assert invoke(target, "merge", source).exit_code in (0, 1)
    with sqlite3.connect(target) as conn, sqlite3.connect(source) as original:
        assert conn.execute("SELECT count(*) FROM ingest_runs WHERE finished_at IS NULL").fetchone() == (0,)
        carried = [json.loads(s) for (s,) in conn.execute("SELECT summary FROM ingest_runs WHERE command = 'ingest'")]
        assert len(carried) == original.execute("SELECT count(*) FROM ingest_runs").fetchone()[0]
    assert all(s["state"] == "interrupted" for s in carried)


def test_a_generated_column_is_read_only_as_this_release_defines_it(source, tmp_path):
    """cells.pair_card is this release's own generated column: a source whose
    expression for it is another (its SQL would run on a read) is refused."""
    mutate(
        source,
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = replace(sql, 'ELSE card END', 'ELSE card * 2 END') WHERE name = 'cells'",
    )
    result = invoke(tmp_path / "t.db", "merge", source)
    assert result.exit_code == 2, result.output
    assert "table cells, column pair_card" in result.output
    assert not (tmp_path / "t.db").exists()


def test_a_source_s_check_constraint_never_runs_even_in_quick_check(source, tmp_path):
    """The CHECK of issue 46's item 3 would allocate 900 MB per row in
    quick_check: refused from the schema's text, before any check runs."""
    with sqlite3.connect(source) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
    mutate(source, *REFUSED["a CHECK constraint of the source's own"][0])
    target = tmp_path / "t.db"
    shutil.copy(source, tmp_path / "untouched.db")
    before = sha256(source)
    limit = 512 << 20  # a CHECK that ran would need 900 MB: MemoryError, not a refusal
    done = subprocess.run(
        ZLSTORE + ["merge", str(source), "--db", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit + (256 << 20), limit + (256 << 20))),
    )
    assert done.returncode == 2, done.stderr
    assert "CHECK (length(randomblob(900000000)) > 0): not a clause of this release's schema" in done.stderr
    assert sha256(source) == before and not target.exists()


def test_this_release_s_own_clauses_pass(source, tmp_path):
    """Every CHECK, DEFAULT, generated column and partial index this
    release writes is its own: an untouched store merges."""
    mergesource.source_expressions(sqlite3.connect(source), source)  # nothing raised
    result = invoke(tmp_path / "t.db", "merge", source)
    assert result.exit_code in (0, 1), result.output


# issue 46, item 4: (how the blob lies, what the refusal says)
LYING_BLOBS = {
    "bomb": "inflates past the",
    "size": "over the 256 MB a blob may inflate to",
    "not zlib": "not a zlib stream",
    "hash": "do not hash to it",
    "short": "not the",
}


@pytest.mark.parametrize("how", sorted(LYING_BLOBS))
def test_a_blob_that_lies_is_refused_by_name(source, example_store_path, tmp_path, how):
    from . import hostile_ir

    digest = hostile_ir.lying_blob(source, how)
    target = tmp_path / "t.db"
    shutil.copy(example_store_path, target)
    before = sha256(target)
    limit = 1 << 30  # a bomb inflated whole would take 300 MB more than the cap lets it
    done = subprocess.run(
        ZLSTORE + ["merge", str(source), "--db", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    assert done.returncode == 2, done.stderr
    assert f"table blobs, blob {digest}" in done.stderr and LYING_BLOBS[how] in done.stderr
    assert "Traceback" not in done.stderr
    assert sha256(target) == before


@pytest.mark.parametrize("how", ["bomb", "size", "not zlib"])
def test_diff_never_inflates_a_lying_blob(source, how):
    """A store that holds one (damaged, or merged by an older release):
    `zlstore diff` refuses it by name, within the size it claims."""
    from . import hostile_ir

    hostile_ir.lying_blob(source, how)
    with sqlite3.connect(source) as conn:
        root, op, dtype, _, _ = hostile_ir.first_pair(conn)
    done = subprocess.run(
        ZLSTORE + ["diff", root, f"{op}:{dtype}", "--db", str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)),
    )
    assert done.returncode == 2, done.stderr
    assert LYING_BLOBS[how] in done.stderr and "Traceback" not in done.stderr
