"""Connections to a store, and what can go wrong with them.

Several processes write one database at once (a writer per card, an ingest,
datasette reading), so every connection is set up the same way here: WAL,
a long busy timeout, foreign keys on, and write transactions that take the
write lock at their start (BEGIN IMMEDIATE) with a bounded retry."""

import contextlib
import datetime
import os
import random
import shlex
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional


from . import stats

# StoreError and SchemaError are caught as db.StoreError everywhere (the
# public name); they live in errors.py, which macros.py raises too.
from .errors import SchemaError, StoreError  # noqa: F401

# The schema version of this release: migrations.py takes an older store to
# it, check_contents refuses a newer one.
SCHEMA_VERSION = 18
# The oldest SQLite whose SQL the schema and the derivations use: MATERIALIZED
# common table expressions and RETURNING came in 3.35.0 (2021-03-12). Older
# ones fail deep inside a view with "near MATERIALIZED: syntax error".
SQLITE_MINIMUM = (3, 35, 0)
BUSY_TIMEOUT_MS = 60_000
WRITE_ATTEMPTS = 10


class BusyStats:
    """How often SQLite still answered busy after its own timeout (benchmarks print it)."""

    retries = 0


def now() -> str:
    """The time a store records (ingested_at, started_at, ...): ISO 8601 in
    UTC, to the microsecond: a merge keeps the newer of two contents, and
    two hosts ingest in the same second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def split_statements(sql: str) -> List[str]:
    """Split a script into statements without executescript(), which would
    commit the surrounding BEGIN IMMEDIATE transaction."""
    statements, buffer = [], ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(l.strip().startswith("--") or not l.strip() for l in buffer.splitlines()):
        raise SchemaError("schema.sql ends in an incomplete statement: " + buffer.strip()[:80])
    return statements


def user_version(conn) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def connect(path, wal: bool = True, immutable: bool = False) -> sqlite3.Connection:
    """Open (or create) a store's database with the settings every writer
    relies on. wal=False leaves the journal mode as the file has it (a file
    that may not be changed); immutable: read a file in a directory this user
    cannot write, which no writer can be using (open_checked decides)."""
    require_sqlite(path)
    target, uri = (f"{Path(path).resolve().as_uri()}?immutable=1", True) if immutable else (str(path), False)
    conn = sqlite3.connect(
        target, uri=uri, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    let_signals_in(conn)
    scratch_in_memory(conn, False)
    stats.register(conn)
    if wal:
        retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def require_sqlite(path, version: tuple = sqlite3.sqlite_version_info) -> None:
    """Refuse, naming both versions, an SQLite older than the SQL here needs,
    before anything is opened or created."""
    if tuple(version) < SQLITE_MINIMUM:
        needed, have = (".".join(map(str, v)) for v in (SQLITE_MINIMUM, version))
        raise StoreError(
            f"{path}: zlstore needs SQLite {needed} or newer, and this Python's sqlite3 module links "
            f"SQLite {have}: use a Python built against a newer SQLite"
        )


# -- Ctrl-C ----------------------------------------------------------------------

# Python runs a signal handler only between its own bytecodes: during one
# long SQLite statement with no Python function in it, Ctrl-C would wait for
# the statement to end. A progress handler calls into Python every this many
# of SQLite's steps (a few milliseconds of work at most), where a pending
# KeyboardInterrupt is raised and aborts the statement.
PROGRESS_STEPS = 20_000


def _let_python_run() -> int:
    return 0  # go on: the call itself is what lets a pending handler run


def let_signals_in(conn: sqlite3.Connection):
    """Ctrl-C reaches Python within milliseconds on this connection, whatever
    statement it runs."""
    conn.set_progress_handler(_let_python_run, PROGRESS_STEPS)


class _Interrupt:
    seen = False


# How soon a Ctrl-C that came inside the import system's own code is sent
# again (_on_interrupt).
_IMPORT_RETRY_S = 0.01


def _on_interrupt(signum, frame):
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
        # Raised here, KeyboardInterrupt could land between the import
        # system's taking its lock and the try that gives it back: the lock
        # stays held, and the next import in another thread (scipy, loaded
        # in the background by an ingest) waits forever. A Ctrl-C during an
        # ingest hung it so. Sent again once out of it.
        _send_again(signum)
        return
    _Interrupt.seen = True
    raise KeyboardInterrupt


def _send_again(signum: int):
    def again():
        if callable(signal.getsignal(signum)):  # not once Python is ending: the default would kill without a word
            os.kill(os.getpid(), signum)

    timer = threading.Timer(_IMPORT_RETRY_S, again)
    timer.daemon = True
    timer.start()


def interrupted(error: Optional[BaseException] = None) -> bool:
    """Whether Ctrl-C came (while interruptible() was on), or error is
    SQLite's report of a statement Ctrl-C stopped. A KeyboardInterrupt that
    lands inside one of zlstore's SQL functions (median) reaches Python as
    "user-defined function raised exception": the flag tells them apart."""
    return _Interrupt.seen or (error is not None and error_name(error) == "SQLITE_INTERRUPT")


def raise_if_interrupted(error: BaseException):
    """A statement Ctrl-C stopped is an interrupt, never a problem of the
    input: callers that turn SQL errors into problems call this first."""
    if interrupted(error):
        raise KeyboardInterrupt from None


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as Python's own handler does, and is
    remembered (interrupted()), so that an error it caused inside SQLite is
    known for what it was. Only in the main thread (where signals arrive)."""
    _Interrupt.seen = False
    try:
        previous = signal.signal(signal.SIGINT, _on_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        # what was there, or what it asks for once a command is over
        # (__main__'s: a Ctrl-C at the very end no longer raises anywhere)
        signal.signal(signal.SIGINT, getattr(previous, "after_command", previous))


def inserted_id(cursor: sqlite3.Cursor) -> int:
    """The rowid of the row an INSERT's cursor added (sqlite3 types lastrowid
    Optional: it is None only where nothing was ever inserted)."""
    rowid = cursor.lastrowid
    assert rowid is not None
    return rowid


def insert_sql(table: str, columns, verb: str = "INSERT") -> str:
    """An INSERT of these columns, a ? for each."""
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def scratch_in_memory(conn: sqlite3.Connection, memory: bool):
    """Where SQLite keeps its scratch: temporary tables, sorts and the
    journals of savepoints and statements. By default a file (FILE): a
    refresh's scratch stays in the page cache and spills beyond it, so its
    memory does not grow with the campaign (with MEMORY it grew 1.8 times at
    4 times the cells). A whole-tree ingest's batch asks for MEMORY
    (ingest._Batch): its scratch is bounded by the batch, and each cell's
    savepoint journal, written to a file, was a third of the writing
    process's system time. SQLite drops the temporary tables on a change
    (derive.py's steps create their own again) and refuses one inside a transaction:
    the setting is then left as it is."""
    if not conn.in_transaction:
        conn.execute(f"PRAGMA temp_store = {'MEMORY' if memory else 'FILE'}")


# -- checking a file before it is opened or changed ----------------------------

SQLITE_MAGIC = b"SQLite format 3\x00"

# Every open of a file up to this size runs PRAGMA quick_check first, so a
# damaged store is refused before a command prints anything read from it.
# quick_check reads every page: on the benchmark corpus's 82 MB store it
# took 0.15 s with the file in the page cache and 0.6 s from disk, about 2
# and 7 ms per MB; up to 16 MB that is at most about 0.03 / 0.1 s per
# command. A larger store is checked by `zlstore check` and when `zlstore
# serve` starts (docs/stores.md: "When the database is at fault").
QUICK_CHECK_MAX_BYTES = 16 << 20

# The tables that make an SQLite file a zlstore store (every release has had them).
STORE_TABLES = ("cells", "roots")


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def write_refusal(path) -> Optional[str]:
    """Why this user cannot change the database at path, or None: the file
    is read-only, or the directory SQLite creates its -wal and -shm (or
    -journal) in is not writable and they are not both there, writable."""
    path = Path(path)
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is read-only for this user"
    directory = path.parent
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    if all(os.access(_sidecar(path, s), os.W_OK) for s in ("-wal", "-shm")):
        return None
    return (
        f"its directory {directory} is not writable by this user "
        f"(SQLite writes {path.name}-wal and {path.name}-shm there)"
    )


def writable(path) -> bool:
    return write_refusal(path) is None


def _header_fault(path: Path, header: bytes, size: int) -> Optional[str]:
    """What the first 100 bytes of a file say is wrong with it as a database, or None."""
    if not header.startswith(SQLITE_MAGIC[: len(header)]):
        shown = header[:16].decode("ascii", "replace").replace("\ufffd", "?")
        return f"not an SQLite database (it starts with {shown!r})"
    if len(header) < 100:
        return f"not a whole SQLite database: {size} bytes, less than its 100-byte header"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, changes, valid_for = (int.from_bytes(header[i : i + 4], "big") for i in (28, 24, 92))
    # The size the header records is only valid where SQLite wrote it last
    # (valid_for == changes); a -wal or -journal with content may hold pages
    # a checkpoint or a rollback is still moving: SQLite's business then.
    busy = _has_content(_sidecar(path, "-wal")) or _has_content(_sidecar(path, "-journal"))
    if pages and changes == valid_for and not busy and size < pages * page_size:
        return (
            f"truncated: its header records {pages} pages of {page_size} bytes "
            f"({pages * page_size} bytes), the file has {size}"
        )
    return None


def check_path(path, create: bool) -> bool:
    """Refuse (StoreError), before SQLite opens it, a path that holds no
    database zlstore may open: missing (unless create), not a regular file,
    unreadable, not SQLite, or truncated. Returns whether it must be read as
    immutable: a WAL database, without its -wal and -shm, in a directory
    this user cannot write (SQLite could not read it otherwise)."""
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise StoreError(f"{path}: a symbolic link to nothing ({os.readlink(path)})")
        if not create:
            raise StoreError(
                f"no such database: {path} (zlstore init --db {shlex.quote(str(path))} creates one; "
                f"zlstore ingest RUNS --db {shlex.quote(str(path))} fills one)"
            )
        directory = path.parent
        if not directory.is_dir():
            raise StoreError(f"cannot create {path}: no such directory {directory}")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise StoreError(f"cannot create {path}: the directory {directory} is not writable by this user")
        return False
    if not path.is_file():
        raise StoreError(f"{path} is not a database file (it is a {'directory' if path.is_dir() else 'special file'})")
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError as error:
        raise StoreError(f"cannot read {path}: {error.strerror}") from None
    if size == 0:
        if create:
            return False
        raise StoreError(f"{path} is an empty file, not a zlstore database")
    fault = _header_fault(path, header, size)
    if fault:
        raise StoreError(f"{path}: {fault}")
    in_wal_mode = header[18:20] == b"\x02\x02"
    return in_wal_mode and not writable(path) and not _sidecar(path, "-shm").exists()


def check_contents(conn: sqlite3.Connection, path, create: bool, quick: Optional[bool] = None):
    """Refuse (StoreError) a database this release must not read or change:
    damaged (SQLite cannot read its schema, or quick_check fails; by default
    checked for files up to QUICK_CHECK_MAX_BYTES), from a newer release,
    or a foreign one: an SQLite file with tables, none of them zlstore's.
    Reads only: run before anything is written."""
    path = Path(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
            )
        ]
        version = user_version(conn)
    except sqlite3.DatabaseError as error:
        raise_if_interrupted(error)
        raise StoreError(fault_message(path, error)) from None
    if quick is None:
        quick = path.stat().st_size <= QUICK_CHECK_MAX_BYTES
    problems = integrity_problems(conn, limit=3) if quick else []
    if problems:
        raise StoreError(
            f"{path} is damaged (SQLite's quick_check: {'; '.join(problems)}); "
            f"restore it from a copy, or ingest the runs/ tree into a new database"
        )
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{path}: database schema version {version} is newer than this zlstore "
            f"(version {SCHEMA_VERSION}): upgrade zlstore"
        )
    if tables and not set(STORE_TABLES) <= set(tables):
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(
            f"{path} is an SQLite database but not a zlstore store (its tables: {shown}); "
            f"zlstore leaves it as it is: give another --db"
        )
    if not tables and not create:
        raise StoreError(f"{path} holds no zlstore store (an SQLite database without tables)")


def open_checked(
    path, create: bool = True, quick: Optional[bool] = None, read_only: bool = False
) -> sqlite3.Connection:
    """connect(), once check_path and check_contents found the file to be a
    zlstore store this release may use (or, with create, a new one): the
    file is switched to WAL only then, and only where this user may write.
    A file refused is left byte for byte as it was. read_only: the file is
    not switched to WAL (the caller then turns query_only on: read_only())."""
    path = Path(path)
    immutable = check_path(path, create and not read_only)
    conn = connect(path, wal=False, immutable=immutable)
    try:
        check_contents(conn, path, create and not read_only, quick)
        if not immutable and not read_only and writable(path):
            retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
            conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def read_only(conn: sqlite3.Connection):
    """From now on SQLite refuses every statement on conn that would change
    a database (PRAGMA query_only): a command that only reads cannot write,
    whatever it runs. Not the file's mode=ro: a read-only connection to a
    WAL store leaves a -wal and -shm behind it, which SQLite deletes when a
    connection that may write closes last."""
    conn.execute("PRAGMA query_only = ON")


def integrity_problems(conn: sqlite3.Connection, full: bool = False, limit: int = 20) -> List[str]:
    """SQLite's own check of every page: [] when the file is sound. quick_check
    (default) skips what integrity_check adds: that each index matches its
    table's rows and UNIQUE / NOT NULL hold."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = [r[0] for r in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
        problems = [] if rows == ["ok"] else rows
        problems += (
            [
                f"foreign key: {r[0]} row {r[1]} names a missing {r[2]} row"
                for r in conn.execute("PRAGMA foreign_key_check")
            ]
            if full
            else []
        )
    except sqlite3.DatabaseError as error:  # a page too damaged for the check to go on
        raise_if_interrupted(error)  # Ctrl-C stopped it: the file is not known to be damaged
        problems = [f"{pragma} stopped: {error}"]
    return problems


def error_name(error: BaseException) -> str:
    """SQLite's name for an error (SQLITE_READONLY_DIRECTORY), else ''."""
    return getattr(error, "sqlite_errorname", None) or ""


def is_readonly_error(error: BaseException) -> bool:
    """A write refused because the file or its directory is read-only."""
    return error_name(error).startswith("SQLITE_READONLY") or "readonly" in str(error)


def is_storage_failure(error: BaseException) -> bool:
    """Whether SQLite said the disk is full or failing: no write will do better."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None and sys.version_info >= (3, 11):  # the codes' names came with the codes, in 3.11
        return code & 0xFF in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)
    return "disk is full" in str(error) or "disk I/O error" in str(error)


# SQLite's primary error names that say the file or the machine is at fault
# (not zlstore's SQL): each is told in one line, with exit status 2.
ENVIRONMENT_ERRORS = (
    "SQLITE_READONLY",
    "SQLITE_CANTOPEN",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_PERM",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_AUTH",
    "SQLITE_NOLFS",
    "SQLITE_PROTOCOL",
)


def is_environment_error(error: BaseException) -> bool:
    """Whether a sqlite3 error comes from the file or the machine (read-only,
    damaged, full, locked) rather than from zlstore's own SQL."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    name = error_name(error)
    if name:
        return any(name == e or name.startswith(e + "_") for e in ENVIRONMENT_ERRORS)
    message = str(error).lower()  # Python before 3.11 names no error code
    return any(
        words in message
        for words in (
            "readonly",
            "read-only",
            "malformed",
            "not a database",
            "unable to open",
            "disk is full",
            "disk i/o",
            "locked",
            "busy",
        )
    )


def cannot_write(path, why: str) -> str:
    return f"cannot write {path}: {why}; commands that only read it still work"


def fault_message(path, error: BaseException) -> str:
    """One line that says why the database at path could not be read or
    written, for an environment error (is_environment_error)."""
    path = Path(path)
    name = error_name(error)
    if is_readonly_error(error):
        return cannot_write(path, write_refusal(path) or str(error))
    if (
        name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
        or "malformed" in str(error)
        or "not a database" in str(error)
    ):
        return (
            f"{path} is damaged or not a database (SQLite: {error}); "
            f"restore it from a copy, or ingest the runs/ tree into a new database"
        )
    if name == "SQLITE_FULL" or "disk is full" in str(error):
        return f"cannot write {path}: the disk is full (SQLite: {error})"
    return f"{path}: {error}" + (f" ({name})" if name else "")


def _is_busy(error: sqlite3.OperationalError) -> bool:
    message = str(error).lower()
    return "locked" in message or "busy" in message


def retry_busy(operation: Callable, attempts: int = WRITE_ATTEMPTS):
    """Run operation, retrying with jittered backoff where SQLite answers busy
    even after its busy timeout (a checkpoint, a schema change elsewhere)."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return operation()
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or attempt == attempts - 1:
                raise
            BusyStats.retries += 1
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)


# Bulk writes (a whole-tree ingest, a rescore) check the WAL into the
# database every BULK_CHECKPOINT_PAGES, not every 1000: a checkpoint syncs
# twice (about 50 ms on a VM's disk), and a bulk write's commits rewrite the
# same pages. Same durability; the WAL grows larger meanwhile, and a later
# commit past that size, or the last connection to close, checks it in.
BULK_CHECKPOINT_PAGES = 16384


def checkpoint_between_commits(conn: sqlite3.Connection):
    """Check the WAL into the database between two commits of a bulk write
    (an ingest's batches), as far as readers allow (PASSIVE: it waits for
    none). Paid there, while an ingest's workers go on preparing cells, the
    checkpoint is not left to the run's last commit, which would check in a
    WAL past BULK_CHECKPOINT_PAGES alone (0.3 s at the end of a 6,720-cell
    ingest). One that fails (a full disk) loses nothing: the WAL keeps what
    was committed, and the next commit or close checks it in."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.OperationalError:
        pass


# A whole-tree ingest's batches each touch about 30 MB of pages: with
# SQLite's default 2 MB of page cache, the writing process spilled and read
# back pages all along (141,000 writes and 114,000 reads for 6,720 cells;
# 108,000 and 68,000 with this). The run's final derivation, which rewrites
# every range of a campaign, keeps it too (25 ms less of an ingest's serial
# end). The cache is bounded: memory does not grow with the campaign.
BULK_CACHE_KIB = 16384


@contextlib.contextmanager
def bulk_cache(conn: sqlite3.Connection, bulk: bool = True) -> Iterator[None]:
    """A larger page cache (BULK_CACHE_KIB) while a bulk write runs."""
    before = conn.execute("PRAGMA cache_size").fetchone()[0]
    if bulk:
        conn.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size = {before}")


@contextlib.contextmanager
def bulk_checkpoints(conn: sqlite3.Connection, bulk: bool = True) -> Iterator[None]:
    checkpoint = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    if bulk and 0 < checkpoint < BULK_CHECKPOINT_PAGES:
        conn.execute(f"PRAGMA wal_autocheckpoint = {BULK_CHECKPOINT_PAGES}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA wal_autocheckpoint = {checkpoint}")


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that holds the write lock from its first statement:
    a deferred one would fail with 'database is locked' when it tries to
    upgrade while another writer holds the lock. Rolls back on any exception,
    KeyboardInterrupt included; a kill -9 is SQLite's journal's business.

    Inside an open transaction (an ingest's batch of cells) it is a savepoint
    instead: its writes are kept or undone as one, and commit with the batch."""
    if conn.in_transaction:
        yield from _savepoint(conn)
        return
    retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"))
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        retry_busy(lambda: conn.execute("COMMIT"))


# One name for every savepoint: they nest strictly, and SQLite's RELEASE and
# ROLLBACK TO take the most recent of a name. A name per savepoint would be
# a new statement each time, compiled for every cell of an ingest.
SAVEPOINT = "zl_cell"


def _savepoint(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute(f"SAVEPOINT {SAVEPOINT}")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # some errors (disk full) end the whole transaction
            conn.execute(f"ROLLBACK TO {SAVEPOINT}")
            conn.execute(f"RELEASE {SAVEPOINT}")
        raise
    else:
        conn.execute(f"RELEASE {SAVEPOINT}")
