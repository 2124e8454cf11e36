"""A kill -9 in the middle of an ingest leaves only whole cells, and the next
ingest completes the job."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

from zlstore import Store
from zlstore.store.fingerprints import cell_rules

from .test_ingest import IR, record, write_cell, write_root_env

CELLS = 600


def make_tree(root):
    write_root_env(root)
    rows = tuple((n, 0.01 + n / 1e6) for n in range(1, 120))
    for n in range(CELLS // 2):
        for side in ("before", "after"):
            write_cell(
                root / f"op{n:04d}_float16_{side}",
                record(f"op{n:04d}", latencies=rows),
                env={"RC": 0},
                kernels={f"h{n}{side}/k{n}.ttgir": IR + f"// {n}\n"},
            )


def stored_cells(db_path):
    try:
        conn = sqlite3.connect(db_path, timeout=5)
        try:
            return conn.execute("SELECT count(*) FROM cells").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0


def start_ingest(root, db_path, **popen) -> subprocess.Popen:
    """`zlstore ingest ROOT` in a process of its own, committing in batches
    of a fifth of a second: it commits several times before it is done,
    however fast this machine is, so that a signal lands after one of them."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import zlstore.store.ingest; zlstore.store.ingest.BATCH_SECONDS = 0.2; from zlstore.cli import cli; cli()",
            "ingest",
            str(root),
            "--db",
            str(db_path),
        ],
        **popen,
    )


def killed_mid_ingest(tmp_path):
    """A big tree's ingest killed with SIGKILL once it stored 10 cells: the
    tree, the store and the dead process."""
    root = tmp_path / "ab_rlc_big"
    make_tree(root)
    db_path = tmp_path / "crash.db"
    Store(db_path).close()
    process = start_ingest(root, db_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while stored_cells(db_path) < 10 and time.time() < deadline and process.poll() is None:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return root, db_path, process


def test_kill_9_mid_ingest_leaves_whole_cells(tmp_path):
    root, db_path, process = killed_mid_ingest(tmp_path)
    assert process.returncode == -signal.SIGKILL

    with Store(db_path) as store:
        conn = store.conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        stored = conn.execute("SELECT count(*) FROM cells").fetchone()[0]
        assert 0 < stored < CELLS, "the kill must land mid-ingest"
        # Every stored cell is whole: its rows, kernels and fingerprints are all there.
        partial = conn.execute(
            """SELECT cells.id FROM cells
               WHERE n_rows != (SELECT count(*) FROM measurements m WHERE m.cell_id = cells.id)
                  OR n_kernels != (SELECT count(*) FROM kernels k WHERE k.cell_id = cells.id)
                  OR (SELECT count(*) FROM fingerprints f WHERE f.cell_id = cells.id) != ?
                  OR n_rows != 119""",
            (len(cell_rules(conn, "screen")),),
        ).fetchall()
        assert partial == []
        summary = store.ingest(root)
        assert summary["cells_added"] == CELLS - stored
        assert summary["cells_unchanged"] == stored
        assert conn.execute("SELECT count(*) FROM cells").fetchone()[0] == CELLS
        assert conn.execute("SELECT count(*) FROM measurements").fetchone()[0] == CELLS * 119


def test_a_root_cut_by_kill_9_says_so_until_an_ingest_completes_it(tmp_path):
    """Issue 46, item 10: screen used to exit 0 with the missing pairs
    NO_ROWS, and once a later writer closed the killed run, problems said
    there were none. Now both name the run and the command that completes
    it, until that ingest has run."""
    from click.testing import CliRunner

    from zlstore.cli import cli

    def zl(*args):
        return CliRunner().invoke(cli, [*map(str, args), "--db", str(db_path)])

    root, db_path, process = killed_mid_ingest(tmp_path)
    assert 0 < stored_cells(db_path) < CELLS, "the kill must land mid-ingest"

    def says_half_ingested(result):
        return "half-ingested" in result.output and f"zlstore ingest {root}" in result.output

    # before any other writer, the run is still 'running' in the log, its process gone
    shown, problems = zl("screen"), zl("problems")
    assert shown.exit_code == 1 and says_half_ingested(shown), shown.output
    assert problems.exit_code == 1 and says_half_ingested(problems), problems.output
    # another writer closes the killed run: the root is still half-ingested
    (tmp_path / "empty").mkdir()
    zl("ingest", tmp_path / "empty")
    assert says_half_ingested(zl("problems", root.name))
    assert zl("screen").exit_code == 1
    # the ingest that completes it
    assert zl("ingest", root).exit_code == 0
    problems, shown = zl("problems", root.name), zl("screen")
    assert problems.exit_code == 0 and "half-ingested" not in problems.output, problems.output
    assert shown.exit_code == 0 and "half-ingested" not in shown.output
