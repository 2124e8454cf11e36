"""Reads never write: every command that only reads, and every page, runs
no statement that writes, on a store opened so that SQLite itself refuses
a write (query_only); a store that cannot be written (a file of mode 444 read
by another user, a read-only mount, datasette -i) answers all of them; and
`ab` runs the same few statements whatever the number of ranges."""

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.show import irchanges, judge
from zlstore import db as dbmod
from zlstore.cli import cli

from .test_db_faults import ZLSTORE, as_nobody, copy_store, shared_dir  # noqa: F401 (a fixture)

SCREEN_ROOT = "ab_rlc_20261012_101500"
CAMPAIGN = "campaign_20261013_090000"

# Every command that only reads, as a user types it (report writes its file, not the store).
READS = (
    ["screen", SCREEN_ROOT],
    ["ab", CAMPAIGN],
    ["ab", CAMPAIGN, "--json"],
    ["noise"],
    ["history", "topk:float16"],
    ["diff", SCREEN_ROOT, "abs:float16"],
    ["export", SCREEN_ROOT],
    ["roots"],
    ["problems"],
    ["compare", SCREEN_ROOT, "ab_rlc_20261014_083000"],
)

# A statement that writes, or takes the write lock: SQLite's trace
# callback sees each statement a connection runs (a trigger's as "--
# TRIGGER"). sqlite-utils' queries run inside a SAVEPOINT, which writes nothing.
WRITES = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|BEGIN\s+(IMMEDIATE|EXCLUSIVE)|VACUUM|REINDEX|ANALYZE"
    r"|PRAGMA\s+(journal_mode|user_version\s*=|wal_checkpoint)|--\s*TRIGGER)",
    re.IGNORECASE,
)


def digest(path: Path) -> tuple:
    """The database's bytes, and its WAL's where it holds any (a reader of a
    WAL store may leave an empty -wal and the -shm index behind: SQLite's
    shared memory, not the store)."""
    wal = Path(f"{path}-wal")
    held = wal.read_bytes() if wal.exists() else b""
    return hashlib.sha256(path.read_bytes()).hexdigest(), hashlib.sha256(held).hexdigest()


@pytest.fixture
def traced(monkeypatch):
    """Every statement every store connection runs, in order."""
    statements: list = []
    connect = dbmod.connect

    def tracing(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(dbmod, "connect", tracing)
    return statements


def run(argv, db: Path, tmp_path: Path):
    if argv[0] == "report":
        argv = argv + ["-o", str(tmp_path / "report.md")]
    return CliRunner().invoke(cli, argv + ["--db", str(db)], catch_exceptions=False)


@pytest.mark.parametrize("argv", READS + (["report", CAMPAIGN],), ids=lambda argv: " ".join(argv))
def test_a_read_runs_no_write_statement_and_leaves_the_file_as_it_was(argv, example_store_path, tmp_path, traced):
    db = copy_store(example_store_path, tmp_path / "store.db")
    with Store(db):  # a writer's open: the WAL and its index exist, as on a store in use
        pass
    before = digest(db)
    traced.clear()
    result = run(argv, db, tmp_path)
    assert result.exit_code in (0, 1), result.output
    assert traced, "the trace saw nothing: the test would prove nothing"
    assert [s for s in traced if WRITES.match(s)] == []
    assert digest(db) == before


def test_a_read_of_a_store_with_edits_not_derived_says_so_and_derives_nothing(example_store, tmp_path, traced):
    """An edit by hand leaves rounds stale: a read says how to derive them
    and writes nothing; `zlstore derive` is the step that does."""
    conn = example_store.conn
    with dbmod.write_transaction(conn):
        conn.execute("UPDATE measurements SET latency = latency * 2 WHERE id = (SELECT min(id) FROM measurements)")
    db = example_store.path
    example_store.close()
    traced.clear()
    result = CliRunner().invoke(cli, ["ab", CAMPAIGN, "--db", str(db)])
    assert f"zlstore derive --db {db} brings it up to date" in result.stderr
    assert [s for s in traced if WRITES.match(s)] == []
    derived = CliRunner().invoke(cli, ["derive", "--db", str(db)])
    assert derived.exit_code == 0 and "derived" in derived.output
    with Store(db, read_only=True) as again:
        assert not again.derived_stale


def test_a_store_written_by_another_build_is_read_through_this_builds_views(example_store_path, tmp_path, traced):
    """Its views are another build's: a read takes this release's as temp views, writing nothing."""
    db = copy_store(example_store_path, tmp_path / "other.db")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE settings SET value = 'another build' WHERE key = 'schema_hash'")
    conn.execute("DROP VIEW store_roots")  # this build's newest view, which the other build lacks
    conn.commit()
    conn.close()
    before = digest(db)
    traced.clear()
    result = CliRunner().invoke(cli, ["roots", "--json", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert CAMPAIGN in result.stdout
    assert [s for s in traced if WRITES.match(s) and not s.lstrip().startswith("CREATE TEMP VIEW")] == []
    assert digest(db) == before


def _ab_statements(db: Path, traced: list, argv) -> int:
    traced.clear()
    result = CliRunner().invoke(cli, argv + ["--db", str(db)])
    assert result.exit_code == 0, result.output
    return len(traced)


def _ops_with_findings(db: Path) -> int:
    with Store(db) as store:
        rows = judge.ab_ranges(store, CAMPAIGN)
    return len({(r["op"], r["dtype"]) for r in rows if r["finding"] in irchanges.SAID})


def test_ab_runs_the_same_statements_whatever_the_number_of_ranges(example_store_path, tmp_path, traced):
    """ab of the examples' campaign (13 ranges) and of a generated campaign
    of 2 cards x 4 ops x 6 shapes (48 ranges): the text runs as many
    statements; --json as many too, whatever the number of ops with a
    finding: their IR change summaries are the writers' (ir_change_rows),
    read in one statement. docs/sql.md gives the counts."""
    from . import generator

    generator.make_campaign_corpus(tmp_path / "runs", cards=2, ops=4, rounds=3, rows=6, kernels=1)
    big = tmp_path / "big.db"
    with Store(big) as store:
        store.ingest(tmp_path / "runs")
        ranges = store.conn.execute("SELECT count(*) FROM ab_range_rows").fetchone()[0]
    small = copy_store(example_store_path, tmp_path / "small.db")
    with Store(small) as store:
        assert store.conn.execute("SELECT count(*) FROM ab_range_rows").fetchone()[0] < ranges
    text = {_ab_statements(db, traced, ["ab", CAMPAIGN]) for db in (small, big)}
    assert len(text) == 1 and text.pop() <= AB_STATEMENTS["text"]
    ops = {db: _ops_with_findings(db) for db in (small, big)}
    assert ops[small] != ops[big], "the two campaigns would not tell a per-op cost from a fixed one"
    counted = {db: _ab_statements(db, traced, ["ab", CAMPAIGN, "--json"]) for db in (small, big)}
    per_op = (counted[big] - counted[small]) / (ops[big] - ops[small])
    assert per_op == AB_STATEMENTS["per op with a finding"], per_op
    assert counted[small] - per_op * ops[small] <= AB_STATEMENTS["json"]


# The statements `zlstore ab ROOT` (and --json) runs, opening the store
# included: docs/sql.md says them.
AB_STATEMENTS = {"text": 43, "json": 36, "per op with a finding": 0}


def test_every_read_answers_from_a_read_only_file_of_another_user(shared_dir, example_store_path):  # noqa: F811
    """A file of mode 444 in a directory nobody may write, read by nobody."""
    db = copy_store(example_store_path, shared_dir / "ro.db")
    db.chmod(0o444)
    before = digest(db)
    out = shared_dir / "out"  # where nobody writes the report, not beside the store
    out.mkdir()
    os.chown(out, 65534, 65534)
    for argv in READS + (["report", CAMPAIGN, "-o", str(out / "report.md")],):
        result = as_nobody(ZLSTORE + argv + ["--db", str(db)], cwd=out)
        assert result.returncode in (0, 1), (argv, result.stderr)
        assert "cannot" not in result.stderr, (argv, result.stderr)
    assert digest(db) == before


def test_every_read_answers_from_a_read_only_mount(example_store_path, tmp_path):
    """The store's directory bound read-only in a mount namespace of its own
    (unshare, as root): SQLite cannot write there, whoever asks."""
    if not shutil.which("unshare") or not shutil.which("mount"):
        pytest.skip("needs unshare and mount (util-linux)")
    directory = tmp_path / "mounted"
    directory.mkdir()
    db = copy_store(example_store_path, directory / "store.db")
    before = digest(db)
    statuses = tmp_path / "statuses"
    commands = [
        " ".join(ZLSTORE + argv + ["--db", str(db)]) + f" >/dev/null 2>>{tmp_path}/stderr; echo $? >>{statuses}"
        for argv in READS
    ]
    script = (
        f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} || exit 98; "
        f"touch {directory}/probe 2>/dev/null && exit 99; " + "; ".join(commands)
    )
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", f"mount --bind {directory} {directory}"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()[-200:]}")
    result = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode not in (98, 99), "no read-only mount: the test would prove nothing"
    stderr = (tmp_path / "stderr").read_text()
    # exit 1 from problems: it lists the example's cut-off run.log
    assert statuses.read_text().split() == ["1" if argv == ["problems"] else "0" for argv in READS], stderr
    assert "cannot" not in stderr and "readonly" not in stderr.lower(), stderr
    assert digest(db) == before


def test_every_page_answers_from_datasette_immutable(example_store_path, tmp_path):
    """`datasette -i store.db` (immutable: datasette reads it as a file no one
    writes) with zlstore's plugin: every table, view and canned query answers,
    and no page runs a write statement."""
    from datasette.app import Datasette
    from datasette.plugins import pm
    from datasette.utils.testing import TestClient

    from zlstore.serve import datasette_plugin

    db = copy_store(example_store_path, tmp_path / "store.db")
    db.chmod(0o444)
    before = digest(db)
    statements: list = []

    class Trace:
        @staticmethod
        @datasette_plugin.hookimpl
        def prepare_connection(conn, database):
            if database == "store":  # not datasette's own in-memory _internal
                conn.set_trace_callback(statements.append)

    if not pm.is_registered(datasette_plugin):
        pm.register(datasette_plugin, name="zlstore")
    pm.register(Trace, name="trace")
    try:
        # Without suggested facets (as zlstore serve): they are datasette's own
        # SELECTs, one per column re-running each view (most of this test's
        # time), never the plugin's; every page's own queries and the
        # plugin's hooks still run.
        ds = Datasette(immutables=[str(db)], settings={"suggest_facets": False})
        client = TestClient(ds)
        names = [
            r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        ]
        queries = (ds.metadata() or {}).get("databases", {}).get("store", {}).get("queries", {})
        assert queries, "the plugin's canned queries are missing: the test would prove little"
        paths = ["/", "/store"] + [f"/store/{name}" for name in names] + [f"/store/{name}" for name in queries]
        for path in paths:
            response = client.get(path)
            assert response.status == 200, (path, response.status)
    finally:
        pm.unregister(name="trace")
    assert statements
    assert [s for s in statements if WRITES.match(s)] == []
    assert digest(db) == before


def test_the_python_api_reads_read_only(example_store_path, tmp_path):
    db = copy_store(example_store_path, tmp_path / "store.db")
    with Store(db, read_only=True) as store:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.conn.execute("DELETE FROM settings")
        assert {r["root"] for r in __import__("zlstore.store.roots").store.roots.held(store.conn)} >= {
            CAMPAIGN,
            SCREEN_ROOT,
        }
    assert sys.modules["zlstore.store.roots"]
