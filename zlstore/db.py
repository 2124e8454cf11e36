"""Connections, the schema and migrations.

Several processes write one database at once (a writer per card, an ingest,
datasette reading), so every connection is set up the same way here: WAL,
a long busy timeout, foreign keys on, and write transactions that take the
write lock at their start (BEGIN IMMEDIATE) with a bounded retry."""

import contextlib
import hashlib
import random
import re
import sqlite3
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Dict, Iterator, List


from . import caliber, judge, pairing

SCHEMA_VERSION = 4
BUSY_TIMEOUT_MS = 60_000
WRITE_ATTEMPTS = 10


class SchemaError(Exception):
    """The database cannot be used by this release."""


class BusyStats:
    """How often SQLite still answered busy after its own timeout (benchmarks print it)."""

    retries = 0


def schema_source() -> str:
    """The text of schema.sql: shipped inside the wheel, or the checkout's top-level file."""
    packaged = resources.files("zlstore").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parent.parent / "schema.sql").read_text(encoding="utf-8")


_MACRO = re.compile(r"\[\[(caliber|verdicts|verdict|reasons|reason|timeout_rcs)(?: ([^:\]]*?))?(?:: (.*?))?\]\]")


def _sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _fill(template: str, item, position: int) -> str:
    """TEMPLATE with {position} and each of item's fields as SQL literals."""
    text = template.replace("{position}", str(position))
    for name, value in item._asdict().items():
        text = text.replace("{" + name + "}", _sql_literal(value))
    return text


def render_schema(text: str) -> str:
    """Expand the macros that keep caliber fields and verdict names defined once."""

    def expand(match):
        kind, arg, template = match.group(1), match.group(2), match.group(3)
        if kind == "timeout_rcs":
            return ", ".join(str(rc) for rc in judge.TIMEOUT_RCS)
        if kind == "caliber":
            sep = " " + arg.strip() + " " if arg else ", "
            return sep.join(template.replace("{f}", name) for name in caliber.NAMES)
        if kind in ("verdicts", "reasons"):
            items = judge.VERDICTS if kind == "verdicts" else judge.REASONS
            sep = " " + arg.strip() + " " if arg else ", "
            return sep.join(_fill(template, item, n) for n, item in enumerate(items, 1))
        names = judge.VERDICT_NAMES if kind == "verdict" else judge.REASON_NAMES
        if arg not in names:
            raise SchemaError(f"schema.sql names unknown {kind} {arg!r}; known: {', '.join(names)}")
        return "'" + arg + "'"

    return _MACRO.sub(expand, text)


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
    if buffer.strip() and not all(
        l.strip().startswith("--") or not l.strip() for l in buffer.splitlines()
    ):
        raise SchemaError("schema.sql ends in an incomplete statement: " + buffer.strip()[:80])
    return statements


def schema_parts() -> Dict[str, str]:
    """The rendered schema split at its section markers: tables and views."""
    text = render_schema(schema_source())
    _, _, rest = text.partition("\n-- @tables\n")
    tables, _, views = rest.partition("\n-- @views\n")
    return {"tables": tables, "views": views, "hash": hashlib.sha256(text.encode()).hexdigest()}


def connect(path) -> sqlite3.Connection:
    """Open (or create) a store's database with the settings every writer relies on."""
    conn = sqlite3.connect(
        str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA temp_store = MEMORY")  # re-pairing's scratch tables and sorts
    pairing.register(conn)
    retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


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


# Migrations bring a database made by an older release up to SCHEMA_VERSION.
# MIGRATIONS[n] takes a database at version n - 1 to version n. A new
# database gets the current schema.sql directly and SCHEMA_VERSION.
MIGRATIONS: Dict[int, Callable[[sqlite3.Connection], None]] = {}


def migration(version: int):
    """Register the function that takes a database to `version`."""

    def register(fn):
        MIGRATIONS[version] = fn
        return fn

    return register


@migration(2)
def _pairs_kept_in_tables(conn):
    """Release 2 keeps the A/B pairs and ranges in tables (pairing.py): create
    them and mark every stored round stale; ensure_schema then fills them.
    Rows pair by their occurrence in the cell, now a column."""
    conn.execute("ALTER TABLE measurements ADD COLUMN occurrence INTEGER")
    conn.execute(
        """UPDATE measurements SET occurrence = o.n FROM (
               SELECT id, row_number() OVER (PARTITION BY cell_id, op_name, dtype, shape ORDER BY id) AS n
               FROM measurements) o
           WHERE o.id = measurements.id""")
    for statement in split_statements(schema_parts()["tables"]):
        try:
            conn.execute(statement)
        except sqlite3.OperationalError as error:
            # An index on a column a later migration adds: ensure_schema
            # creates it once the migrations have run.
            if not (statement.startswith("CREATE INDEX") and "no such column" in str(error)):
                raise
    pairing.mark_every_round(conn)


@migration(3)
def _blob_markers(conn):
    """Release 3 records which fingerprint rule triggers each stored text
    holds (blobs.markers), so that a rescore digests a text its rule leaves
    alone without reading it. Texts stored before are read, as before."""
    conn.execute("ALTER TABLE blobs ADD COLUMN markers TEXT")


@migration(4)
def _problems_stay_open(conn):
    """Release 4 keeps a problem open while what it names is stored as it
    was read (ingest_problems.cell_id, root_id, closed_by: the view
    open_problems), and marks a cell whose IR could not be read in full
    (cells.ir_incomplete). A problem stored before is tied to the cell or
    root that the same run stored, where one did; the others are closed by
    the next run that covers their file."""
    conn.execute("ALTER TABLE cells ADD COLUMN ir_incomplete INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE ingest_problems ADD COLUMN cell_id INTEGER REFERENCES cells(id) ON DELETE SET NULL")
    conn.execute("ALTER TABLE ingest_problems ADD COLUMN root_id INTEGER REFERENCES roots(id) ON DELETE SET NULL")
    conn.execute("ALTER TABLE ingest_problems ADD COLUMN closed_by INTEGER")
    # The cell or root holding a file is the one with the greatest path not
    # after it, if that path is a prefix of it (an index lookup per problem).
    for table, column, where in (("cells", "cell_id", ""),
                                 ("roots", "root_id", "AND instr(substr(p.file, length(o.path) + 2), '/') = 0")):
        conn.execute(f"""
            UPDATE ingest_problems SET {column} = (
                SELECT o.id FROM (SELECT id, path, ingested_at FROM {table} WHERE path <= ingest_problems.file
                                  ORDER BY path DESC LIMIT 1) o
                JOIN ingest_problems p ON p.id = ingest_problems.id
                JOIN ingest_runs r ON r.id = p.run_id
                WHERE substr(p.file, 1, length(o.path) + 1) = o.path || '/' {where}
                  AND o.ingested_at BETWEEN r.started_at AND coalesce(r.finished_at, o.ingested_at))
            WHERE cell_id IS NULL""")


def _user_version(conn) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _stored_schema_hash(conn):
    try:
        row = conn.execute("SELECT value FROM settings WHERE key = 'schema_hash'").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def ensure_schema(conn: sqlite3.Connection, defaults: Dict[str, str] = None) -> int:
    """Create or upgrade the schema; recreate the views when schema.sql changed.
    Returns the schema version. Safe when several processes open a new
    database at once: all of it happens inside one BEGIN IMMEDIATE."""
    parts = schema_parts()
    if _user_version(conn) == SCHEMA_VERSION and _stored_schema_hash(conn) == parts["hash"]:
        return SCHEMA_VERSION
    with write_transaction(conn):
        version = _user_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"database schema version {version} is newer than this zlstore "
                f"(version {SCHEMA_VERSION}): upgrade zlstore"
            )
        existing = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version > 0 or "cells" in existing:
            for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[target](conn)
        for statement in split_statements(parts["tables"]):
            conn.execute(statement)
        if _stored_schema_hash(conn) != parts["hash"]:
            views = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
            for view in views:
                conn.execute(f"DROP VIEW IF EXISTS [{view}]")
            for statement in split_statements(parts["views"]):
                conn.execute(statement)
        conn.execute(
            "INSERT INTO settings (key, value) VALUES ('schema_hash', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (parts["hash"],),
        )
        for key, value in (defaults or {}).items():
            conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)", (key, value))
        pairing.refresh(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return SCHEMA_VERSION
