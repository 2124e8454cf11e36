"""A database file zlstore cannot use (truncated, damaged, not SQLite, another
program's SQLite file, from a newer release, missing) is refused by every
command with one line that names the file and the fault, exit status 2, and
the file left byte for byte as it was. A store this user cannot write (the
file, or its directory) is read as it is; a write says why in one line.
Real files throughout: copies of a real store, pages overwritten on disk,
and the read-only cases run as another user."""

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore import Store, db
from zlstore.cli import cli
from .nobody import SETPRIV, nobody_python

ZLSTORE = [sys.executable, "-m", "zlstore"]
SCREEN_ROOT = "ab_rlc_20261012_101500"
CAMPAIGN = "campaign_20261013_090000"


def copy_store(source: Path, dest: Path) -> Path:
    """A copy of a real store as one file (its WAL checked in first)."""
    conn = sqlite3.connect(source)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.copy(source, dest)
    return dest


def snapshot(directory: Path) -> dict:
    """Every file in directory: name -> sha256 of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


# -- the faulty files -------------------------------------------------------------


def truncated(good: Path, path: Path):
    copy_store(good, path)
    os.truncate(path, path.stat().st_size // 2)


def garbled(good: Path, path: Path):
    """A page of the cells table overwritten with random bytes, on disk."""
    copy_store(good, path)
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    try:
        page = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'cells' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 1"
        ).fetchone()[0]
    except sqlite3.OperationalError:  # an SQLite built without dbstat: the table's root page
        page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'cells'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(random.Random(13).randbytes(page_size))


def not_sqlite(good: Path, path: Path):
    path.write_text("op\tdtype\tverdict\ntopk\tfloat16\tIR_CHANGED\n" * 50)


def foreign(good: Path, path: Path):
    """Another program's SQLite database, in rollback-journal mode."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.executemany("INSERT INTO notes (text) VALUES (?)", [(f"note {n}",) for n in range(100)])
    conn.commit()
    conn.close()


def newer(good: Path, path: Path):
    copy_store(good, path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()


def empty(good: Path, path: Path):
    path.write_bytes(b"")


FAULTS = {
    "truncated": (truncated, "truncated"),
    "garbled": (garbled, "damaged"),
    "not_sqlite": (not_sqlite, "not an SQLite database"),
    "foreign": (foreign, "not a zlstore store"),
    "newer": (newer, "newer than this zlstore"),
}


@pytest.fixture
def runs(example_source):
    """The session's example tree: every command below is refused before it
    reads a file of it (and none of them writes into a tree)."""
    return example_source[0]


def commands(runs: Path):
    """Every command that opens the store, with arguments that would work on a good one."""
    cell = runs / SCREEN_ROOT / "topk_float16_before"
    return {
        "screen": ["screen"],
        "ab": ["ab", CAMPAIGN],
        "noise": ["noise"],
        "compare": ["compare", SCREEN_ROOT, SCREEN_ROOT],
        "export": ["export", SCREEN_ROOT],
        "serve": ["serve", "--get", "/zlstore.json"],
        "rescore": ["rescore"],
        "plan": ["plan", SCREEN_ROOT],
        "check": ["check"],
        "init": ["init"],
        "ingest": ["ingest", str(runs)],
        "record": ["record", str(cell)],
    }


COMMANDS = [
    "screen",
    "ab",
    "noise",
    "compare",
    "export",
    "serve",
    "rescore",
    "plan",
    "check",
    "init",
    "ingest",
    "record",
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_faulty_file_is_refused_by_name_and_left_as_it_was(fault, command, example_store_path, runs, tmp_path):
    make, words = FAULTS[fault]
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    path = store_dir / "results.db"
    make(example_store_path, path)
    before = snapshot(store_dir)
    result = CliRunner().invoke(cli, [*commands(runs)[command], "--db", str(path)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert str(path) in result.stderr and words in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert snapshot(store_dir) == before  # byte for byte; no -wal, -shm or -journal left either


@pytest.mark.parametrize("fault", list(FAULTS) + ["empty"])
def test_a_faulty_file_through_a_real_process(fault, example_store_path, tmp_path):
    make = FAULTS[fault][0] if fault in FAULTS else empty
    path = tmp_path / "results.db"
    make(example_store_path, path)
    before = snapshot(tmp_path)
    result = subprocess.run(ZLSTORE + ["screen", "--db", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # no table printed from a file that is not sound
    assert len(result.stderr.strip().splitlines()) == 1 and str(path) in result.stderr
    assert snapshot(tmp_path) == before


def test_a_garbled_page_is_found_before_a_command_reads_around_it(example_store_path, tmp_path):
    """noise reads no page of cells: without the check on open it would
    print its table from a damaged file, exit 0 (as before this check)."""
    path = tmp_path / "results.db"
    garbled(example_store_path, path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM noise_floors").fetchone()[0] > 0  # reads on, regardless
    assert db.integrity_problems(conn) != []
    conn.close()
    result = CliRunner().invoke(cli, ["noise", "--db", str(path)])
    assert result.exit_code == 2 and result.stdout == "" and "damaged" in result.stderr
    result = CliRunner().invoke(cli, ["check", "--db", str(path)])
    assert result.exit_code == 2 and "problem: " in result.stderr and "damaged" in result.stderr
    assert result.stdout == ""
    result = CliRunner().invoke(cli, ["check", "--db", str(path), "--json"])  # a script reads what is wrong
    assert result.exit_code == 2 and "damaged" in result.stderr
    assert json.loads(result.stdout)["problems"] == [
        line.removeprefix("problem: ") for line in result.stderr.splitlines() if line.startswith("problem: ")
    ]


def test_quick_check_on_open_is_for_small_files_and_check_does_any(example_store_path, tmp_path, monkeypatch):
    path = tmp_path / "results.db"
    garbled(example_store_path, path)
    monkeypatch.setattr(db, "QUICK_CHECK_MAX_BYTES", 1024)  # as if the store were a large one
    with pytest.raises(sqlite3.DatabaseError):  # not refused on open, but SQLite trips over the page when it reads it
        with Store(path, create=False) as store:
            store.conn.execute("SELECT * FROM cells").fetchall()
    result = CliRunner().invoke(cli, ["check", "--db", str(path)])
    assert result.exit_code == 2 and "problem:" in result.stderr
    good = copy_store(example_store_path, tmp_path / "good.db")
    result = CliRunner().invoke(cli, ["check", "--db", str(good), "--full"])
    assert result.exit_code == 0 and "ok (integrity_check" in result.output


def test_the_file_is_switched_to_wal_only_once_it_is_known_a_store(tmp_path, example_store_path):
    path = tmp_path / "results.db"
    copy_store(example_store_path, path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    assert CliRunner().invoke(cli, ["screen", "--db", str(path)]).exit_code == 0
    assert path.read_bytes()[18:20] == b"\x01\x01"  # a read writes nothing, the journal mode included
    assert CliRunner().invoke(cli, ["derive", "--db", str(path)]).exit_code == 0
    assert path.read_bytes()[18:20] == b"\x02\x02"  # a zlstore store: WAL, for its concurrent writers


# -- a missing database ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["screen", "ab", "noise", "compare", "export", "serve", "rescore", "plan", "check"])
def test_a_command_that_reads_never_creates_a_database(command, runs, tmp_path):
    path = tmp_path / "typo.db"
    result = CliRunner().invoke(cli, [*commands(runs)[command], "--db", str(path)])
    assert result.exit_code == 2
    assert f"no such database: {path}" in result.stderr
    assert not list(tmp_path.glob("typo.db*"))


def test_a_missing_database_through_a_real_process(tmp_path):
    result = subprocess.run(
        ZLSTORE + ["noise", "--db", "typo.db"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "no such database: typo.db" in result.stderr
    assert not list(tmp_path.iterdir())


def test_the_hint_for_a_missing_database_is_a_command_that_runs_as_printed(tmp_path):
    result = subprocess.run(
        ZLSTORE + ["noise", "--db", "my runs.db"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "zlstore init --db 'my runs.db' creates one" in result.stderr
    init = subprocess.run(ZLSTORE + ["init", "--db", "my runs.db"], cwd=tmp_path, capture_output=True, timeout=60)
    assert init.returncode == 0 and (tmp_path / "my runs.db").is_file()


def test_a_new_database_in_a_missing_directory_is_named(tmp_path, runs):
    path = tmp_path / "no" / "such" / "dir" / "x.db"
    result = CliRunner().invoke(cli, ["ingest", str(runs), "--db", str(path)])
    assert result.exit_code == 2 and f"no such directory {path.parent}" in result.stderr


# -- read-only: as another user (root ignores permission bits) -------------------------


def as_nobody(argv, **kwargs):
    """argv (this Python's) run as user nobody where this is root, by a
    Python that reaches this checkout's zlstore as nobody (nobody_python);
    as this user otherwise."""
    if os.geteuid() == 0:
        python, env = nobody_python()
        argv = SETPRIV + python + list(argv[1:])
        kwargs.setdefault("env", env)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture
def shared_dir():
    """A directory another user can reach (pytest's own are private to this one)."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("needs setpriv to run a command as another user")
    path = Path(tempfile.mkdtemp(prefix="zlstore-ro-"))
    path.chmod(0o755)
    probe = as_nobody([sys.executable, "-c", "import zlstore"], cwd=path)
    if probe.returncode != 0:
        shutil.rmtree(path)
        pytest.skip(f"user nobody cannot run this Python and zlstore: {probe.stderr.strip()[-200:]}")
    yield path
    for p in path.rglob("*"):
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(path)


READ_ONLY_CASES = {
    # file mode, directory mode: neither writable by nobody
    "read-only file": (0o444, 0o755),
    "read-only directory": (0o666, 0o555),
}


@pytest.mark.parametrize("case", list(READ_ONLY_CASES))
def test_a_store_this_user_cannot_write_is_read_and_a_write_says_why(
    case, shared_dir, example_store_path, example_source
):
    file_mode, dir_mode = READ_ONLY_CASES[case]
    store_dir = shared_dir / "store"
    store_dir.mkdir()
    path = copy_store(example_store_path, store_dir / "results.db")
    expected = CliRunner().invoke(cli, ["screen", SCREEN_ROOT, "--db", str(path)]).output
    path.chmod(file_mode)
    store_dir.chmod(dir_mode)
    before = snapshot(store_dir)

    for argv in (
        ["screen", SCREEN_ROOT],
        ["noise"],
        ["ab", CAMPAIGN],
        ["export", SCREEN_ROOT, "--csv"],
        ["serve", "--get", "/zlstore/roots.json?_shape=array"],
        ["check"],
        ["rescore", "--rule", "v4"],
        ["rule"],
    ):
        read = as_nobody(ZLSTORE + [*argv, "--db", str(path)], cwd=shared_dir)
        assert read.returncode == 0, (argv, read.stderr)
    assert as_nobody(ZLSTORE + ["screen", SCREEN_ROOT, "--db", str(path)], cwd=shared_dir).stdout == expected

    runs = shared_dir / "runs"
    shutil.copytree(example_source[0], runs)
    why = "the file is read-only" if case == "read-only file" else f"its directory {store_dir} is not writable"
    for argv in (
        ["ingest", str(runs)],
        ["record", str(runs / SCREEN_ROOT / "topk_float16_before")],
        ["rule", "v4"],
        ["rule", "--q-max", "0.01"],
        ["init"],
    ):
        write = as_nobody(ZLSTORE + [*argv, "--db", str(path)], cwd=shared_dir)
        if argv == ["init"]:  # init of a current store writes nothing: it reports
            assert write.returncode == 0, write.stderr
            continue
        assert write.returncode == 2, (argv, write.stderr)
        assert (
            write.stderr.strip()
            == f"Error: cannot write {path}: {why}"
            + (
                " by this user (SQLite writes results.db-wal and results.db-shm there)"
                if "directory" in why
                else " for this user"
            )
            + "; commands that only read it still work"
        )
    assert snapshot(store_dir) == before


def test_an_older_store_that_cannot_be_written_is_read_through_an_upgraded_copy(shared_dir):
    """tests/data/store-v3.db, read-only for nobody: every command that only
    reads answers from an upgraded copy; the file stays byte for byte; a
    command that writes refuses in one line."""
    from . import floor_tree

    path = shared_dir / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store-v3.db", path)
    path.chmod(0o444)
    before = path.read_bytes()
    result = as_nobody(ZLSTORE + ["screen", floor_tree.SCREEN, "--json", "--db", str(path)], cwd=shared_dir)
    assert result.returncode == 0, result.stderr
    assert f"note: {path} is from an older zlstore and read-only for this user" in result.stderr
    assert {r["op"] for r in json.loads(result.stdout)["rows"]} == {op for op, _ in floor_tree.SCREEN_PAIRS}
    found = as_nobody(ZLSTORE + ["ab", floor_tree.CAMPAIGN, "--json", "--db", str(path)], cwd=shared_dir)
    assert (
        found.returncode == 0
        and {(r["op"], r["dtype"]): r["finding"] for r in json.loads(found.stdout)["rows"]} == floor_tree.FINDING
    )
    write = as_nobody(ZLSTORE + ["rule", "v4", "--db", str(path)], cwd=shared_dir)
    assert write.returncode == 2, write.stderr
    assert (
        write.stderr.strip().splitlines()[-1]
        == f"Error: cannot write {path}: the file is read-only for this user; commands that only read it still work"
    )
    assert path.read_bytes() == before and not list(shared_dir.glob("old.db-*"))


def test_a_store_with_views_of_another_build_is_read_through_this_builds_views(shared_dir, example_store_path):
    path = copy_store(example_store_path, shared_dir / "other.db")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE settings SET value = 'another build' WHERE key = 'schema_hash'")
    conn.commit()
    conn.close()
    path.chmod(0o444)
    result = as_nobody(ZLSTORE + ["screen", SCREEN_ROOT, "--db", str(path)], cwd=shared_dir)
    assert result.returncode == 0, result.stderr
    assert "views from another zlstore build" not in result.stderr  # this build's, as temp views: no warning
    assert "IR_CHANGED" in result.stdout
