"""Ctrl-C and kill -9 at a writer: every merge, forget and ingest ends with
exit 130 and no traceback, invents no problem, leaves the store sound; a
killed run's log row is closed by the next writer (issue 33, items 4, 10).

Ctrl-C is a real SIGINT, sent by the process to itself from inside one of
zlstore's SQL functions (median, while the pairs are computed), where it
used to become "user-defined function raised exception": a place fixed in
the code, not a moment in time."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from zlstore import Store, db, stats
from zlstore.store import derive, journal

from .judging import invoke
from .test_roots import CAMPAIGN, ingest, settled  # noqa: F401


@pytest.fixture
def ctrl_c_in_median(monkeypatch):
    """The first median() computed sends SIGINT to this process."""
    finalize = stats.Median.finalize
    sent: list[int] = []

    def interrupted_finalize(self):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return finalize(self)

    monkeypatch.setattr(stats.Median, "finalize", interrupted_finalize)
    return sent


def sound(path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    assert db.integrity_problems(conn, full=True) == []
    return conn


def test_ctrl_c_inside_sql_during_a_merge(example_store_path, tmp_path, ctrl_c_in_median):
    with sqlite3.connect(example_store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    target = tmp_path / "t.db"
    result = invoke(target, "merge", example_store_path)
    assert ctrl_c_in_median == [1]
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output and result.stderr.strip().splitlines()[-1].startswith(
        "interrupted: the roots merged before it are kept, whole"
    )
    conn = sound(target)
    assert conn.execute("SELECT count(*) FROM ingest_problems WHERE message LIKE '%not merged%'").fetchone() == (0,)
    (state,) = conn.execute("SELECT summary FROM ingest_runs WHERE command = 'merge'").fetchone()
    assert json.loads(state)["state"] == "interrupted"
    conn.close()
    ctrl_c_in_median.append(2)  # no more Ctrl-C: the merge run again finishes as a clean one does
    again, clean = invoke(target, "merge", example_store_path), invoke(tmp_path / "c.db", "merge", example_store_path)
    assert again.exit_code == clean.exit_code
    with Store(target) as one, Store(tmp_path / "c.db") as other:
        assert one.problems() == other.problems()


def test_ctrl_c_inside_sql_during_an_ingest(example_tree, tmp_path, ctrl_c_in_median):
    tree, _ = example_tree
    target = tmp_path / "t.db"
    result = invoke(target, "ingest", tree)
    assert ctrl_c_in_median == [1]
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    conn = sound(target)
    assert conn.execute(
        "SELECT count(*) FROM ingest_problems WHERE closed_by IS NULL AND message LIKE '%not stored%'"
    ).fetchone() == (0,)
    (state,) = conn.execute("SELECT summary FROM ingest_runs WHERE command = 'ingest'").fetchone()
    assert json.loads(state)["state"] == "interrupted"


def test_ctrl_c_during_a_forget_changes_nothing(example_store_path, tmp_path, monkeypatch):
    target = tmp_path / "t.db"
    with sqlite3.connect(example_store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(example_store_path, target)
    derived = derive.derive

    def interrupted_derive(conn, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return derived(conn, **kwargs)

    monkeypatch.setattr(derive, "derive", interrupted_derive)
    result = invoke(target, "forget", CAMPAIGN)
    assert result.exit_code == 130 and "Traceback" not in result.output
    conn = sound(target)
    assert conn.execute("SELECT count(*) FROM roots WHERE name = ?", (CAMPAIGN,)).fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM ingest_runs WHERE command = 'forget'").fetchone() == (0,)


def test_a_killed_run_s_log_row_is_closed_by_the_next_writer(example_tree, tmp_path):
    tree, _ = example_tree
    target = tmp_path / "t.db"
    Store(target).close()
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import os, signal
from zlstore import Store, db
from zlstore.store.journal import RunRecord
store = Store({str(target)!r})
with db.write_transaction(store.conn):
    RunRecord(store.conn, "merge").start(["elsewhere.db"])
os.kill(os.getpid(), signal.SIGKILL)
""",
        ]
    )
    assert killed.returncode == -signal.SIGKILL
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM ingest_runs WHERE finished_at IS NULL").fetchone() == (1,)
    ingest(target, tree)
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM ingest_runs WHERE finished_at IS NULL").fetchone() == (0,)
        (summary,) = conn.execute("SELECT summary FROM ingest_runs WHERE command = 'merge'").fetchone()
    assert json.loads(summary)["state"] == "interrupted"


def test_a_running_run_of_a_live_process_is_left_open(tmp_path):
    """Not a timeout: a run whose process is alive (this one) stays open."""
    with Store(tmp_path / "t.db") as store:
        with db.write_transaction(store.conn):
            run_id = journal.RunRecord(store.conn, "ingest").start([])
        with db.write_transaction(store.conn):
            assert journal.close_abandoned_runs(store.conn) == 0
        assert store.conn.execute("SELECT finished_at FROM ingest_runs WHERE id = ?", (run_id,)).fetchone() == (None,)


def test_ctrl_c_while_a_statement_runs_in_sqlite_alone(tmp_path):
    """A statement with no Python in it (an endless recursive query) still
    ends at Ctrl-C: the connection's progress handler lets Python's handler
    run. The query never ends by itself, so when SIGINT comes does not
    matter; without the handler the process would run until the timeout."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import os, signal, sqlite3, threading
from zlstore import db
conn = db.connect({str(tmp_path / "t.db")!r})
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
with db.interruptible():
    try:
        conn.execute("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r").fetchone()
    except (KeyboardInterrupt, sqlite3.OperationalError) as error:
        print("stopped", db.interrupted(error))
""",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["stopped", "True"], done.stderr


def test_ctrl_c_while_the_command_line_is_imported():
    """SIGINT as zlstore.cli starts to be imported (a finder on sys.meta_path
    sends it): "interrupted" (nothing done), exit 130, no traceback."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            """
import os, signal, sys
class Ring:
    def find_spec(self, name, path, target=None):
        if name == "zlstore.cli":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Ring())
sys.argv = ["zlstore", "--version"]
from zlstore.__main__ import main
main()
""",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        done.returncode == 130
        and done.stderr == "interrupted before the command started: nothing was read or written\n"
        and done.stdout == ""
    )


# -- Ctrl-C during SQLite's integrity check (issue 46, item 8) ---------------------


@pytest.fixture
def ctrl_c_in_quick_check(monkeypatch):
    """Every integrity check sends SIGINT to this process from inside the
    PRAGMA (SQLite's progress handler): Ctrl-C while SQLite checks pages."""
    check = db.integrity_problems

    def interrupted_check(conn, *args, **kwargs):
        conn.set_progress_handler(lambda: os.kill(os.getpid(), signal.SIGINT), 1)
        try:
            return check(conn, *args, **kwargs)
        finally:
            db.let_signals_in(conn)

    monkeypatch.setattr(db, "integrity_problems", interrupted_check)


@pytest.mark.parametrize(
    "args",
    [
        ["check"],
        ["check", "--full"],
        ["serve", "--get", "/zlstore/roots.json"],  # the check every open of a small store makes
        ["merge", "SOURCE"],  # the source's check, in its private copy
    ],
)
def test_an_interrupted_integrity_check_is_interrupted_not_damaged(
    example_store_path, tmp_path, ctrl_c_in_quick_check, args
):
    store = tmp_path / "s.db"
    shutil.copy(example_store_path, store)
    target = tmp_path / "t.db" if args[0] == "merge" else store
    result = invoke(target, *[str(store) if a == "SOURCE" else a for a in args])
    assert result.exit_code == 130, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("interrupted")
    assert "damaged" not in result.output and "restore" not in result.output and "Traceback" not in result.output


# -- Ctrl-C at the very end of an ingest (issue 46, item 12) ---------------------------


def _ingest_with(tmp_path, tree, setup: str):
    """`zlstore ingest tree` as the zlstore command runs it (__main__.main),
    after setup (Python run first in the same process)."""
    program = (
        "import atexit, contextlib, os, signal, sys\n"
        + setup
        + f"\nsys.argv = ['zlstore', 'ingest', {str(tree)!r}, '--db', {str(tmp_path / 't.db')!r}]\n"
        + "from zlstore.__main__ import main\nmain()\n"
    )
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)


def _ended_as_one(done):
    """exit 130 and 'interrupted' as the last line, or the command's own
    ending without a word of it; never a traceback."""
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert "Cannot operate on a closed database" not in done.stderr
    if done.returncode == 130:
        assert done.stderr.strip().splitlines()[-1].startswith("interrupted")
    else:
        assert done.returncode in (0, 1) and "interrupted" not in done.stderr, (done.returncode, done.stderr)


def test_ctrl_c_once_the_command_is_over_ends_it_as_interrupted(example_tree, tmp_path):
    tree, _ = example_tree
    setup = (
        "from zlstore import db\n"
        "real = db.interruptible\n"
        "@contextlib.contextmanager\n"
        "def then_ctrl_c():\n"
        "    try:\n"
        "        with real():\n"
        "            yield\n"
        "    finally:\n"
        "        os.kill(os.getpid(), signal.SIGINT)  # the command is over: its database closed, its summary printed\n"
        "db.interruptible = then_ctrl_c\n"
    )
    done = _ingest_with(tmp_path, tree, setup)
    _ended_as_one(done)
    assert done.returncode == 130


def test_ctrl_c_in_python_s_own_ending_prints_no_traceback(example_tree, tmp_path):
    """A Ctrl-C in an atexit callback: it used to print 'Exception ignored
    ... SystemExit: 130' and exit 0 after saying interrupted."""
    tree, _ = example_tree
    done = _ingest_with(tmp_path, tree, "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))")
    _ended_as_one(done)


def test_ctrl_c_inside_the_import_system_is_raised_once_out_of_it(monkeypatch):
    """Raised in importlib's own code, KeyboardInterrupt can leave the import
    lock held, and a thread importing scipy in the background then hangs the
    ingest (seen at its end). The Ctrl-C is sent again a moment later."""
    namespace: dict = {}
    exec(compile("import sys\nframe = sys._getframe()", "<frozen importlib._bootstrap>", "exec"), namespace)
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        db._on_interrupt(signal.SIGINT, namespace["frame"])  # no KeyboardInterrupt here
        for _ in range(200):
            if received:
                break
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert received == [signal.SIGINT]
    with pytest.raises(KeyboardInterrupt):
        db._on_interrupt(signal.SIGINT, sys._getframe())
    db._Interrupt.seen = False
