"""Taking a store made by an older release to this release's schema.

Each release's step (a migration), in version order, and ensure_schema,
which applies them, then schema.sql's tables, triggers and views."""

import hashlib
import json
import re
import sqlite3
from typing import Callable, Dict, Optional

from .. import db
from ..db import SchemaError, split_statements, user_version, write_transaction
from .macros import schema_parts


# Migrations bring a database made by an older release up to db.SCHEMA_VERSION.
# MIGRATIONS[n] takes a database at version n - 1 to version n. A new
# database gets the current schema.sql directly and db.SCHEMA_VERSION. Each is a
# fixed step that calls nothing that may change since (as llm's are): it
# changes tables only. What the writers derive from the stored cells (the
# A/B pairs, ranges and noise floors: derive.py) is not its business: a
# migration registered with rederive=True has them all computed again, by
# this release's derivation, once the schema is current (ensure_schema's
# derive); the views and triggers come from schema.sql.
MIGRATIONS: Dict[int, Callable[[sqlite3.Connection], None]] = {}
REDERIVE: set = set()


def migration(version: int, rederive: bool = False):
    """Register the function that takes a database to `version`."""

    def register(fn):
        MIGRATIONS[version] = fn
        if rederive:
            REDERIVE.add(version)
        return fn

    return register


# The tables release 2 added, as release 2 defined them: a migration is a
# fixed step, so that later ones (ALTER TABLE ... ADD COLUMN) find what
# they expect. (ensure_schema adds any table a release lacks afterwards.)
_RELEASE_2_TABLES = """
CREATE TABLE IF NOT EXISTS ab_stale_rounds (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER);
CREATE TABLE IF NOT EXISTS ab_slot_rows (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    op TEXT, dtype TEXT, shape TEXT NOT NULL, occurrence INTEGER NOT NULL,
    before_cell_id INTEGER, after_cell_id INTEGER, before_caliber_id INTEGER, after_caliber_id INTEGER,
    before_measurement_id INTEGER, after_measurement_id INTEGER, before_counted INTEGER, after_counted INTEGER,
    before_not_counted TEXT, after_not_counted TEXT, latency_before REAL, latency_after REAL,
    before_fallback INTEGER, after_fallback INTEGER, reason TEXT);
CREATE INDEX IF NOT EXISTS ab_slot_rows_round ON ab_slot_rows(root_id, cell_op, cell_dtype, round, card);
CREATE INDEX IF NOT EXISTS ab_slot_rows_key ON ab_slot_rows(root_id, op, dtype, shape);
CREATE TABLE IF NOT EXISTS ab_range_rows (
    root_id INTEGER NOT NULL, op TEXT, dtype TEXT, shape TEXT NOT NULL, caliber_id INTEGER,
    rounds INTEGER NOT NULL, min REAL, median REAL, max REAL, fallback INTEGER NOT NULL,
    fallback_rows INTEGER NOT NULL, cards INTEGER NOT NULL, rejected INTEGER NOT NULL,
    rejected_reasons TEXT, json_head TEXT, json_tail TEXT);
CREATE INDEX IF NOT EXISTS ab_range_rows_key ON ab_range_rows(root_id, op, dtype, shape, caliber_id);
CREATE TABLE IF NOT EXISTS ab_round_ranges (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    before_cell_id INTEGER NOT NULL, after_cell_id INTEGER NOT NULL, n_rows INTEGER NOT NULL,
    min REAL, median REAL, max REAL, fallback INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS ab_round_ranges_cells ON ab_round_ranges(before_cell_id, after_cell_id);
CREATE INDEX IF NOT EXISTS ab_round_ranges_round ON ab_round_ranges(root_id, cell_op, cell_dtype, round, card);
CREATE TABLE IF NOT EXISTS noise_floor_rows (
    rule TEXT NOT NULL, op TEXT, dtype TEXT, caliber_id INTEGER NOT NULL, n INTEGER NOT NULL,
    floor REAL, roots TEXT, fallback_rows INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS noise_floor_rows_key ON noise_floor_rows(rule, op, dtype, caliber_id);
CREATE TABLE IF NOT EXISTS ab_stale_floors (rule TEXT PRIMARY KEY);
"""


@migration(2, rederive=True)
def _pairs_kept_in_tables(conn):
    """Release 2 keeps the A/B pairs and ranges in tables (pairing.py):
    create them (ensure_schema's derive fills them). Rows pair by their
    occurrence in the cell, now a column."""
    conn.execute("ALTER TABLE measurements ADD COLUMN occurrence INTEGER")
    conn.execute(
        """UPDATE measurements SET occurrence = o.n FROM (
               SELECT id, row_number() OVER (PARTITION BY cell_id, op_name, dtype, shape ORDER BY id) AS n
               FROM measurements) o
           WHERE o.id = measurements.id"""
    )
    for statement in split_statements(_RELEASE_2_TABLES):
        conn.execute(statement)


@migration(3)
def _blob_markers(conn):
    """Release 3 records which fingerprint rule triggers each stored text
    holds (blobs.markers), so that a rescore digests a text its rule leaves
    alone without reading it. Texts stored before are read, as before."""
    conn.execute("ALTER TABLE blobs ADD COLUMN markers TEXT")


@migration(4, rederive=True)
def _findings(conn):
    """Release 4 tests each range over its rounds (zlstore/stats.py): the
    statistics are new columns of ab_range_rows, filled by re-pairing every
    round (ensure_schema's derive). Screening cells get a fingerprint under every rule (the verdicts'
    hint and screen_roots read the strictest): Store computes those the
    store lacks when it next opens it for writing (BACKFILL_SETTING)."""
    for column in (
        "log_mean REAL",
        "log_sd REAL",
        "effect REAL",
        "ci_low REAL",
        "ci_high REAL",
        "p_value REAL",
        "q_value REAL",
    ):
        conn.execute(f"ALTER TABLE ab_range_rows ADD COLUMN {column}")
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, '1')", (BACKFILL_SETTING,))


# Set by a migration: screening cells may lack fingerprints under some rule.
BACKFILL_SETTING = "backfill_screen_fingerprints"


@migration(5)
def _superseded_cells(conn):
    """Release 5 keeps the cells of an interrupted campaign op that a
    resumed campaign ran again from the start (cells.superseded_at): kept
    and shown, never paired. Marking one re-pairs its round: schema.sql's
    trigger cells_update_marks_rounds watches the new column."""
    conn.execute("ALTER TABLE cells ADD COLUMN superseded_at TEXT")


def _json_object(text):
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _release_6_identity(name: str, env_file: Optional[str], env: Optional[dict]) -> str:
    """A root's identity as release 6 defined it (layout.root_identity then):
    its directory name and its env file's settings, hashed."""
    text = json.dumps([name, env_file, dict(env) if env_file and env is not None else None], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@migration(6)
def _roots_by_identity(conn):
    """Release 6 knows a root by what it is, its name and env file
    (layout.root_identity), not by where it was: a tree moved, copied or seen from
    another host is the same root, and a cell is its path inside its root.
    Each stored root's identity comes from what its row holds."""
    conn.execute("ALTER TABLE roots ADD COLUMN identity TEXT")
    conn.executemany(
        "UPDATE roots SET identity = ? WHERE id = ?",
        [
            (_release_6_identity(name, env_file, _json_object(env)), root_id)
            for root_id, name, env_file, env in conn.execute("SELECT id, name, env_file, env FROM roots").fetchall()
        ],
    )
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS cells_relpath ON cells(root_id, relpath)")


@migration(7)
def _problems_stay_open(conn):
    """Release 7 keeps a problem open while what it names is stored as it
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
    for table, column, where in (
        ("cells", "cell_id", ""),
        ("roots", "root_id", "AND instr(substr(p.file, length(o.path) + 2), '/') = 0"),
    ):
        conn.execute(f"""
            UPDATE ingest_problems SET {column} = (
                SELECT o.id FROM (SELECT id, path, ingested_at FROM {table} WHERE path <= ingest_problems.file
                                  ORDER BY path DESC LIMIT 1) o
                JOIN ingest_problems p ON p.id = ingest_problems.id
                JOIN ingest_runs r ON r.id = p.run_id
                WHERE substr(p.file, 1, length(o.path) + 1) = o.path || '/' {where}
                  AND o.ingested_at BETWEEN r.started_at AND coalesce(r.finished_at, o.ingested_at))
            WHERE cell_id IS NULL""")


@migration(8, rederive=True)
def _spaced_range_json(conn):
    """Release 8 writes each range's kept JSON as every --json writes its
    rows ('"key": value, ...', json.dumps' layout), and counts a shape
    recorded twice in one round as one round: every round is paired again
    (rederive), which rewrites ab_range_rows."""


@migration(9)
def _judgements_stored(conn):
    """Release 9 keeps each range's judgement with it (ab_range_rows,
    made under ab_judgement_basis): reading a campaign's findings no longer
    judges thousands of ranges. The new columns start empty; the ranges are
    judged once the schema is current (ensure_schema's derive)."""
    for column in (
        "finding TEXT",
        "finding_position INTEGER",
        "to_settle TEXT",
        "noise_floor REAL",
        "clears_floor INTEGER",
        "floor_note TEXT",
        "judged INTEGER",
    ):
        conn.execute(f"ALTER TABLE ab_range_rows ADD COLUMN {column}")


@migration(10, rederive=True)
def _duplicate_cells(conn):
    """Release 10 pairs no row of a round side that more than one cell
    claims, or whose cell another one's copies (names.DUPLICATE), and keeps
    such rounds in ab_duplicate_rounds: every round is paired again
    (ensure_schema's derive), which fills it. Cells are found by content."""
    conn.execute("""CREATE TABLE IF NOT EXISTS ab_duplicate_rounds (
        root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
        before_claims INTEGER NOT NULL, after_claims INTEGER NOT NULL,
        before_copies INTEGER NOT NULL, after_copies INTEGER NOT NULL)""")
    conn.execute("CREATE INDEX IF NOT EXISTS ab_duplicate_rounds_root ON ab_duplicate_rounds(root_id)")
    conn.execute("CREATE INDEX IF NOT EXISTS cells_content ON cells(root_id, content_sig)")


def _add_columns(conn, table: str, *columns: str) -> None:
    """ALTER TABLE ADD COLUMN each "name TYPE ..." the table lacks: a store
    rebuilt since, or relabelled by hand as the tests make older releases,
    may have it already (table_xinfo: generated columns too)."""
    present = {row[1] for row in conn.execute(f"PRAGMA table_xinfo({table})")}
    for column in columns:
        if column.split()[0] not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


@migration(11)
def _environments(conn):
    """Release 11 records what each cell ran on: cells point at a row of
    environments (created from schema.sql's tables); older cells at none."""
    _add_columns(conn, "cells", "environment_id INTEGER REFERENCES environments(id)")  # rebuilt since


@migration(12)
def _kernel_shared_memory(conn):
    """Release 12 keeps each kernel's shared memory (kernels.shared, from
    the "shared" of its .json), shown by zlstore diff. Kernels stored
    before have none (NULL: not known); a cell's files are not read again
    while they are unchanged, so forget a root and ingest it to fill them.
    A store whose version was set back over a table that has it (a test
    replaying an older release's migrations) keeps the column it has."""
    _add_columns(conn, "kernels", "shared INTEGER")


@migration(13, rederive=True)
def _screening_pairs_on_any_card(conn):
    """Release 13 pairs a screening pair's cells whatever card each ran on
    (a side without cell.env has no card): the round key takes the card
    from cells.pair_card, NULL in round 0. Every round is paired again."""
    _add_columns(
        conn, "cells", "pair_card INTEGER GENERATED ALWAYS AS (CASE WHEN round = 0 THEN NULL ELSE card END) VIRTUAL"
    )
    # what was derived under the old key: the rederive keeps it under the new one
    for table in ("ab_slot_rows", "ab_round_ranges", "ab_duplicate_rounds", "ab_stale_rounds"):
        conn.execute(f"DELETE FROM {table} WHERE round = 0")


@migration(14)
def _test_outcomes(conn):
    """Release 14 keeps what pytest did with each cell's tests (zlstore
    flaggems' plugin; zlstore/read/outcomes.py): cells.test_outcome (passed,
    skipped, deselected, failed, error) and cells.test_reason, which
    NO_ROWS and MISSING_SIDE show. Cells stored before have neither (NULL)."""
    _add_columns(conn, "cells", "test_outcome TEXT", "test_reason TEXT")


@migration(15, rederive=True)
def _floors_per_shape_and_machine(conn):
    """Release 15 keeps a noise floor per screening root, shape and machine
    (GPU model, driver, runtime), and a range's floor with the rows and
    roots it rests on (ab_range_rows.floor_rows, floor_roots): a campaign is
    judged only beside its own machine's floors (ARTIFACTS.md, Noise
    floors). The floors are derived: the old table goes (schema.sql's
    tables create the new one) and every round is paired again, which
    computes them all."""
    conn.execute("DROP TABLE IF EXISTS noise_floor_rows")
    _add_columns(conn, "ab_range_rows", "floor_rows INTEGER", "floor_roots TEXT")


@migration(16, rederive=True)
def _side_latencies(conn):
    """Release 16 keeps each range's latency before and after (the median
    over its rounds, in the benchmark's unit), which ab and the report show
    beside the effect: every range is computed again (rederive)."""
    _add_columns(conn, "ab_range_rows", "latency_before REAL", "latency_after REAL")


@migration(17, rederive=True)
def _until_decided_campaigns(conn):
    """Release 17 runs campaigns until their ranges are decided
    (zlstore/store/sequential.py): a root keeps its stopping rule and floor of
    rounds (roots.stopping, min_rounds, from its env file's STOPPING and
    MIN_ROUNDS), an op of such a campaign when and why it stopped (op_stops,
    created from schema.sql's tables), and each range its op's stop
    (ab_range_rows.stop_round, stop_reason). Every range is computed again
    (rederive): its JSON gains those keys, and an until-decided root's ranges
    are tested by the anytime-valid rule."""
    _add_columns(conn, "roots", "stopping TEXT", "min_rounds INTEGER")
    _add_columns(conn, "ab_range_rows", "stop_round INTEGER", "stop_reason TEXT")
    # layout.stopping and layout.min_rounds as release 17 defines them, over
    # the env file each root's row holds
    conn.execute(
        """UPDATE roots SET
               stopping = CASE WHEN lower(trim(json_extract(env, '$.STOPPING'))) = 'until-decided'
                               THEN 'until-decided' ELSE 'fixed' END,
               min_rounds = CASE WHEN trim(json_extract(env, '$.MIN_ROUNDS')) GLOB '[0-9]*'
                                  AND trim(json_extract(env, '$.MIN_ROUNDS')) NOT GLOB '*[^0-9]*'
                                 THEN CAST(trim(json_extract(env, '$.MIN_ROUNDS')) AS INTEGER) END
           WHERE env_file IS NOT NULL AND json_valid(env)"""
    )


@migration(18, rederive=True)
def _screening_pairs_kept(conn):
    """Release 18 keeps the screening pairs in a table (screen_pair_rows,
    created from schema.sql's tables), so that a page of one screening root
    reads its own pairs, and the IR change of each op with a finding
    (ir_change_rows), so that `ab --json` reads it: every round is paired
    again (rederive), which finds every screening pair, and the final
    derivation sums up the IR changes."""


def _stored_schema_hash(conn):
    try:
        row = conn.execute("SELECT value FROM settings WHERE key = 'schema_hash'").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def ensure_schema(
    conn: sqlite3.Connection, defaults: Optional[Dict[str, str]] = None, derive: Optional[Callable[..., object]] = None
) -> int:
    """Create or upgrade the schema; recreate the views and triggers when
    schema.sql changed. derive(conn, every=...) then brings what the writers
    derive up to date in the same transaction (Store passes derive.derive);
    every: a migration asked for all of it to be computed again. Returns the
    schema version. Safe when several processes open a new database at
    once: all of it happens inside one BEGIN IMMEDIATE."""
    parts = schema_parts()
    if user_version(conn) == db.SCHEMA_VERSION and _stored_schema_hash(conn) == parts["hash"]:
        return db.SCHEMA_VERSION
    # A table rebuilt in schema.sql's column order (_columns_in_schema_order)
    # is dropped and created again: with foreign keys on, dropping cells would
    # cascade to every measurement. The pragma is a no-op inside a
    # transaction, so it is set here, and foreign_key_check runs before commit.
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        return _ensure_schema(conn, parts, defaults, derive)
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def _ensure_schema(conn, parts, defaults, derive) -> int:
    with write_transaction(conn):
        version = user_version(conn)
        if version > db.SCHEMA_VERSION:  # check_contents says so first, naming the file
            raise SchemaError(
                f"database schema version {version} is newer than this zlstore "
                f"(version {db.SCHEMA_VERSION}): upgrade zlstore"
            )
        existing = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        migrated = range(max(version, 1) + 1, db.SCHEMA_VERSION + 1) if version > 0 or "cells" in existing else ()
        for target in migrated:
            MIGRATIONS[target](conn)
        recreate = bool(migrated) or _stored_schema_hash(conn) != parts["hash"]
        if recreate:
            _drop_views_and_triggers(conn)
        if migrated:
            _columns_in_schema_order(conn, parts["tables"])
        for statement in split_statements(parts["tables"]):
            conn.execute(statement)
        if recreate:
            for statement in split_statements(parts["triggers"]) + split_statements(parts["views"]):
                conn.execute(statement)
        conn.execute(
            "INSERT INTO settings (key, value) VALUES ('schema_hash', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (parts["hash"],),
        )
        for key, value in (defaults or {}).items():
            conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)", (key, value))
        if derive is not None:
            derive(conn, every=any(target in REDERIVE for target in migrated))
        conn.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION}")
    return db.SCHEMA_VERSION


def _drop_views_and_triggers(conn: sqlite3.Connection) -> None:
    for kind in ("view", "trigger"):
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,)).fetchall():
            conn.execute(f"DROP {kind.upper()} IF EXISTS [{name}]")


_CREATE_TABLE = re.compile(r"^(?:\s*--[^\n]*\n)*\s*CREATE TABLE IF NOT EXISTS (\w+) \(")


def _columns_in_schema_order(conn: sqlite3.Connection, tables_sql: str) -> None:
    """Rebuild each table whose columns an upgrade left in another order than
    schema.sql's: ALTER TABLE ADD COLUMN appends, while schema.sql lists a
    column where it belongs. Afterwards an upgraded store has the same tables,
    columns in order, indexes, triggers and views as a new one (test_schema),
    so that `SELECT *`, `.schema` and datasette show both alike. Indexes go
    with the old table; schema.sql's CREATE INDEX statements, run next, make
    them again. Foreign keys are off (ensure_schema): nothing cascades."""
    wanted = sqlite3.connect(":memory:")
    for statement in split_statements(tables_sql):
        wanted.execute(statement)
    for statement in split_statements(tables_sql):
        match = _CREATE_TABLE.match(statement)
        if not match:
            continue
        name = match.group(1)
        columns = [row[1] for row in wanted.execute(f"PRAGMA table_info([{name}])")]
        have = [row[1] for row in conn.execute(f"PRAGMA table_info([{name}])")]
        if not have or have == columns or sorted(have) != sorted(columns):
            continue  # new (created next), already in order, or not this release's table: the migrations' business
        listed = ", ".join(f"[{c}]" for c in columns)
        conn.execute(_CREATE_TABLE.sub(f"CREATE TABLE [zl_reordered_{name}] (", statement, count=1))
        conn.execute(f"INSERT INTO [zl_reordered_{name}] ({listed}) SELECT {listed} FROM [{name}]")
        conn.execute(f"DROP TABLE [{name}]")
        conn.execute(f"ALTER TABLE [zl_reordered_{name}] RENAME TO [{name}]")
        broken = conn.execute("PRAGMA foreign_key_check").fetchmany(3)
        if broken:
            raise SchemaError(
                f"rebuilding {name} left rows whose references are missing (table, rowid, parent): {broken}"
            )
    wanted.close()


def reading_needs(conn: sqlite3.Connection) -> Optional[str]:
    """What a reader that may not write needs before this release's views
    answer on conn: None (the store is current), 'views' (its views are
    another build's: temp_views) or 'tables' (an older schema version: an
    upgraded copy)."""
    if user_version(conn) < db.SCHEMA_VERSION:
        return "tables"
    return None if _stored_schema_hash(conn) == schema_parts()["hash"] else "views"


def temp_views(conn: sqlite3.Connection):
    """This release's views in conn's temp schema, which SQLite searches
    before the store's own: a reader of a store whose views another build
    wrote gets today's views without writing the file."""
    for statement in split_statements(schema_parts()["views"]):
        conn.execute(statement.replace("CREATE VIEW", "CREATE TEMP VIEW", 1))
