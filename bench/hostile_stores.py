"""Hostile-store fuzzing of merge: N cases, each a copy of a real store (the
examples, ingested) with a few schema and data mutations (a column missing,
added, renamed or of another type, a generated column, a table turned into
a view over an endless query, a trigger, a table dropped, huge blobs, NULLs
and values of the wrong type (text that is not UTF-8 among them), rows whose
parent is gone, a user_version from -1 to far ahead, a damaged page; and,
since issue 46, a CHECK constraint, generated column, collation or index
expression of the source's own, and a blob that lies: a zlib bomb, a size
claim of 2^50, data that is not zlib, a hash or size not its own), merged by
`zlstore merge` in a process of its own under a timeout into a copy of a
target that already holds a root. Prints the cases tried, hangs, tracebacks
(or an exit status other than 0, 1 and 2), and targets left unsound:
SQLite's integrity and foreign-key checks fail, pairs left stale, a run left
unfinished, a refused source (exit 2) that changed the target at all, or a
source with one of issue 46's mutations that was merged at all.

    python bench/hostile_stores.py --cases 100 --seed 1

The figures are in docs/security.md (issues 33 and 46);
tests/test_hostile_stores.py holds one case of each kind."""

import argparse
import collections
import hashlib
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(REPO))

from tests import hostile_ir  # noqa: E402
from zlstore import db  # noqa: E402
from zlstore.store import derive, mergesource  # noqa: E402

ZLSTORE = [sys.executable, "-m", "zlstore"]
EXAMPLES = REPO / "examples" / "runs"
ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"


def columns(conn, table):
    return [(r[1], r[2], r[3], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]


def tables(conn):
    return [
        t
        for t in mergesource.READ_TABLES
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()
    ]


# Each mutation: (name, function(conn, rng) -> what it did, as a short text).
def drop_column(conn, rng):
    table = rng.choice(tables(conn))
    name = rng.choice(columns(conn, table))[0]
    conn.execute(f'ALTER TABLE {table} DROP COLUMN "{name}"')
    return f"{table}.{name} dropped"


def add_column(conn, rng):
    table = rng.choice(tables(conn))
    kind = rng.choice(
        [
            "TEXT",
            "INTEGER DEFAULT 7",
            "BLOB",
            "AS (zeroblob(50000000)) VIRTUAL",
            "AS (length(printf('%.*c', 100000000, 'x'))) VIRTUAL",
        ]
    )
    conn.execute(f"ALTER TABLE {table} ADD COLUMN extra {kind}")
    return f"{table}.extra {kind}"


def rename_column(conn, rng):
    table = rng.choice(tables(conn))
    name = rng.choice(columns(conn, table))[0]
    conn.execute(f'ALTER TABLE {table} RENAME COLUMN "{name}" TO "{name}_\x1b[31m"')
    return f"{table}.{name} renamed"


def retype_column(conn, rng):
    table = rng.choice(tables(conn))
    name, declared, _, _ = rng.choice(columns(conn, table))
    other = rng.choice([t for t in ("TEXT", "INTEGER", "REAL", "BLOB", "") if t != declared])
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = ?",
        (f"{name} {declared}", f"{name} {other}", table),
    )
    conn.execute("PRAGMA writable_schema = OFF")
    return f"{table}.{name} {declared} -> {other or 'no type'}"


def table_to_view(conn, rng):
    table = rng.choice(tables(conn))
    conn.execute(f"ALTER TABLE {table} RENAME TO {table}_real")
    body = f"SELECT t.* FROM {table}_real t, ({ENDLESS})" if rng.random() < 0.5 else f"SELECT * FROM {table}_real"
    conn.execute(f"CREATE VIEW {table} AS {body}")
    return f"{table} a view"


def add_trigger(conn, rng):
    table = rng.choice(tables(conn))
    conn.execute(f"CREATE TRIGGER hostile_{table} AFTER INSERT ON {table} BEGIN SELECT ({ENDLESS}); END")
    conn.execute(f"CREATE VIEW hostile_view AS {ENDLESS}")
    return f"trigger on {table}, an endless view"


def drop_table(conn, rng):
    table = rng.choice(tables(conn))
    conn.execute(f"DROP TABLE {table}")
    return f"{table} dropped"


def huge_value(conn, rng):
    table, column = rng.choice(
        [
            ("blobs", "text"),
            ("roots", "env"),
            ("cells", "relpath"),
            ("roots", "name"),
            ("measurements", "shape"),
            ("ingest_problems", "message"),
        ]
    )
    size = rng.choice([10 << 20, 60 << 20])
    try:
        conn.execute(f"UPDATE {table} SET {column} = zeroblob({size}) WHERE rowid = (SELECT min(rowid) FROM {table})")
    except sqlite3.DatabaseError:
        return f"{table}.{column}: huge value refused by its table"
    return f"{table}.{column} = {size >> 20} MB blob"


def null_or_wrong_type(conn, rng):
    table = rng.choice(tables(conn))
    name = rng.choice(columns(conn, table))[0]
    value = rng.choice([None, "text", b"\x00\xff", 1.5, -1, 2**62, "{not json", "not UTF-8"])
    if value == "not UTF-8":  # text SQLite keeps as given: bytes Python cannot decode
        conn.execute(
            f"UPDATE {table} SET \"{name}\" = CAST(X'C328FF' AS TEXT) WHERE rowid IN "
            f"(SELECT rowid FROM {table} ORDER BY random() LIMIT 3)"
        )
        return f"{table}.{name} = text that is not UTF-8"
    conn.execute("PRAGMA ignore_check_constraints = ON")
    try:
        conn.execute(
            f'UPDATE {table} SET "{name}" = ? WHERE rowid IN (SELECT rowid FROM {table} ORDER BY random() LIMIT 3)',
            (value,),
        )
    except sqlite3.DatabaseError:
        return f"{table}.{name} = {value!r} refused by its table"
    return f"{table}.{name} = {value!r}"


def orphan_rows(conn, rng):
    conn.execute("PRAGMA foreign_keys = OFF")
    table = rng.choice(["roots", "cells", "calibers", "ingest_runs"])
    conn.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} ORDER BY random() LIMIT 2)")
    return f"2 {table} rows deleted under their children"


def user_version(conn, rng):
    version = rng.choice([-1, 0, 1, 3, db.SCHEMA_VERSION - 1, db.SCHEMA_VERSION + 1, 2**31 - 1])
    conn.execute(f"PRAGMA user_version = {version}")
    return f"user_version {version}"


# Issue 46, item 3: what a schema asks SQLite to evaluate. A CHECK runs in
# quick_check and on every write; a generated column on every read; a
# collation in every comparison: each must be refused from the schema's
# text before any of it is evaluated.
HOSTILE_EXPRESSIONS = [
    "length(randomblob(900000000)) > 0",
    "zeroblob(1000000000) IS NOT NULL",
    "length(printf('%.*c', 900000000, 'x')) > 0",
    "1",
]


def _edit_schema(conn, table: str, old: str, new: str):
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = ?", (old, new, table))
    conn.execute("PRAGMA writable_schema = OFF")


def add_check(conn, rng):
    table = rng.choice(tables(conn))
    name, declared, _, _ = rng.choice(columns(conn, table))
    check = rng.choice(HOSTILE_EXPRESSIONS)
    if rng.random() < 0.5:  # on a column
        _edit_schema(conn, table, f"{name} {declared}", f"{name} {declared} CHECK ({check})")
        return f"{table}.{name} CHECK ({check})"
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    _edit_schema(conn, table, sql, sql[: sql.rindex(")")] + f", CHECK ({check}))")
    return f"{table} CHECK ({check})"


def add_generated(conn, rng):
    table = rng.choice(tables(conn))
    expression = rng.choice(["zeroblob(50000000)", "randomblob(900000000)", "length(printf('%.*c', 900000000, 'x'))"])
    if rng.random() < 0.5:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN extra AS ({expression}) VIRTUAL")
    else:  # STORED, which ALTER TABLE cannot add: in the schema's text, the rows as they are
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        _edit_schema(conn, table, sql, sql[: sql.rindex(")")] + f", extra AS ({expression}) STORED)")
    return f"{table}.extra AS ({expression})"


def add_collation(conn, rng):
    table = rng.choice(tables(conn))
    name, declared, _, _ = rng.choice(columns(conn, table))
    collation = rng.choice(["NOCASE", "RTRIM", "hostile_collation"])
    _edit_schema(conn, table, f"{name} {declared}", f"{name} {declared} COLLATE {collation}")
    return f"{table}.{name} COLLATE {collation}"


def add_index(conn, rng):
    table = rng.choice(tables(conn))
    name = rng.choice(columns(conn, table))[0]
    conn.execute(f'CREATE INDEX hostile_index ON {table} (abs("{name}")) WHERE "{name}" IS NOT NULL')
    return f"an index on abs({table}.{name})"


_BOMB = []


def lying_blob(conn, rng):
    """Issue 46, item 4: a blob whose row lies about it."""
    how = rng.choice(["bomb", "size 2^50", "not zlib", "hash", "size short", "size long"])
    row = conn.execute("SELECT rowid, size, data FROM blobs ORDER BY random() LIMIT 1").fetchone()
    if row is None:
        raise ValueError("no blob to lie about")
    rowid, size, data = row
    if how == "bomb":
        if not _BOMB:
            _BOMB.append(hostile_ir.bomb()[0])
        size, data = size, _BOMB[0]
    elif how == "size 2^50":
        size = 1 << 50
    elif how == "not zlib":
        data = b"\x00not zlib" * 100
    elif how == "hash":
        conn.execute("UPDATE blobs SET hash = ? WHERE rowid = ?", (hashlib.sha256(b"other").hexdigest(), rowid))
    elif how == "size short":
        size = max(size - 1, 0)
    else:
        size = size + 1
    conn.execute("UPDATE blobs SET size = ?, data = ? WHERE rowid = ?", (size, data, rowid))
    return f"a blob: {how}"


MUTATIONS = [
    add_check,
    add_generated,
    add_collation,
    add_index,
    lying_blob,
    lying_blob,
    drop_column,
    add_column,
    rename_column,
    retype_column,
    table_to_view,
    add_trigger,
    drop_table,
    huge_value,
    null_or_wrong_type,
    null_or_wrong_type,
    orphan_rows,
    user_version,
]


# Issue 46's: a source with any of these applied must be refused.
MUST_REFUSE = (add_check, add_generated, add_collation, add_index, lying_blob)


def damage_page(path: Path, rng) -> str:
    data = bytearray(path.read_bytes())
    page = 4096
    at = rng.randrange(1, max(2, len(data) // page)) * page + rng.randrange(0, page - 64)
    data[at : at + 64] = bytes(rng.randrange(256) for _ in range(64))
    path.write_bytes(bytes(data))
    return f"64 bytes at {at} overwritten"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unsound(target: Path) -> list:
    """What is wrong with the target after a merge: [] when sound."""
    faults = []
    with sqlite3.connect(target) as conn:
        faults += db.integrity_problems(conn, full=True)
        if derive.stale(conn):
            faults.append("pairs left stale")
        if conn.execute("SELECT count(*) FROM ingest_runs WHERE finished_at IS NULL").fetchone()[0]:
            faults.append("a run left unfinished")
    return faults


def case(rng, work: Path, source_base: Path, target_base: Path, timeout: float):
    source, target = work / "source.db", work / "target.db"
    for path in (source, target):
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copy(source_base, source)
    shutil.copy(target_base, target)
    done, must_refuse = [], False
    with sqlite3.connect(source, isolation_level=None) as conn:
        for mutation in rng.sample(MUTATIONS, rng.randint(1, 3)):
            try:
                done.append(mutation(conn, rng))
                must_refuse |= mutation in MUST_REFUSE
            except (sqlite3.DatabaseError, IndexError, ValueError) as error:
                done.append(f"{mutation.__name__} not applied ({error})")
    if rng.random() < 0.08:
        done.append(damage_page(source, rng))
    before = sha256(target)
    try:
        merged = subprocess.run(
            ZLSTORE + ["merge", str(source), "--db", str(target)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return done, "hang", "", []
    outcome = "ok" if merged.returncode in (0, 1) else "refused" if merged.returncode == 2 else "crash"
    if "Traceback" in merged.stderr:
        outcome = "crash"
    faults = unsound(target)
    if outcome == "refused" and sha256(target) != before:
        faults.append("refused, yet the target changed")
    if outcome == "ok" and must_refuse:
        faults.append("merged a source it must refuse (issue 46)")
    return done, outcome, merged.stderr.strip().splitlines()[-1:] if merged.stderr.strip() else [], faults


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--seed", default="1")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds a merge may take before it counts as a hang (a clean one takes ~2)",
    )
    parser.add_argument("--work", default=None)
    parser.add_argument("--show", type=int, default=5)
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="zlstore-hostile-"))
    started = time.monotonic()
    counts, shown = collections.Counter(), collections.Counter()
    try:
        source_base, target_base = work / "examples.db", work / "one-root.db"
        for db_path, what in ((source_base, EXAMPLES), (target_base, EXAMPLES / "ab_rlc_20261014_083000")):
            subprocess.run(ZLSTORE + ["ingest", str(what), "--db", str(db_path)], capture_output=True, check=False)
            with sqlite3.connect(db_path) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for i in range(args.cases):
            done, outcome, last, faults = case(
                random.Random(f"{args.seed}:{i}"), work, source_base, target_base, args.timeout
            )
            counts["cases"] += 1
            counts[outcome] += 1
            if faults:
                counts["targets unsound"] += 1
            for kind in [outcome] * (outcome in ("hang", "crash")) + ["targets unsound"] * bool(faults):
                if shown[kind] < args.show:
                    shown[kind] += 1
                    print(f"case {i} ({kind}): {'; '.join(done)}\n    {last} {faults}", file=sys.stderr)
            if (i + 1) % 20 == 0:
                print(f"... {i + 1} cases, {time.monotonic() - started:.0f} s", file=sys.stderr)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"cases tried: {counts['cases']} (merged: {counts['ok']}, refused with exit 2: {counts['refused']})")
    print(f"hangs: {counts['hang']}")
    print(f"tracebacks or other exit statuses: {counts['crash']}")
    print(f"targets left unsound: {counts['targets unsound']}")
    print(f"seconds: {time.monotonic() - started:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
