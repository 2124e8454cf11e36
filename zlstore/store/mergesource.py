"""The stores a merge reads, checked before the target is changed.

Each is copied privately (SQLite's backup, never the source's SQL), its
triggers and views dropped unread, brought to this release's schema where
it is older, and every table merge reads compared with this release's (columns,
types, clauses SQLite would evaluate, values, blobs). A source that fails a
check is refused (SourceError, naming the table and column) before the
target is changed."""

import collections
import contextlib
import hashlib
import os
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from .. import db as dbmod
from . import ddl, macros
from ..read import parse
from .store import Store


class SourceError(Exception):
    """A source that cannot be merged: missing, not a zlstore store, from a
    newer release, or the target itself. Raised before anything is merged."""


# The tables merge reads from a source. Each is checked against this
# release's definition of it before any of its rows is read (source_tables).
READ_TABLES = (
    "calibers",
    "environments",
    "roots",
    "cells",
    "measurements",
    "blobs",
    "kernels",
    "ir_digests",
    "fingerprints",
    "recorded_verdicts",
    "partitions",
    "op_stops",
    "ingest_runs",
    "ingest_problems",
)

# The values each declared type may hold in a source (typeof), as this
# release writes them: a column declared INTEGER holds integers (or NULL).
_TYPES = {"INTEGER": ("integer",), "REAL": ("real", "integer"), "TEXT": ("text",), "BLOB": ("blob", "text")}


def _read_only_uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path)) + "?mode=ro"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_source(path, target_path: Optional[Path] = None):
    """Refuse (SourceError) what cannot be a source at all, before the
    target is opened: a path that is not a regular file, a file that is not
    SQLite, the target itself (by name, or the same file through a link)."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"{path}: no such database file" if not path.exists() else f"{path}: not a regular file")
    if target_path is not None and Path(target_path).exists():
        try:
            same = os.path.samefile(path, target_path)
        except OSError:
            same = False
        if same:
            raise SourceError(
                f"{path} is the target database itself"
                + ("" if path.resolve() == Path(target_path).resolve() else " (the same file: a link)")
            )
    try:
        with open(path, "rb") as f:
            header = f.read(len(dbmod.SQLITE_MAGIC))
    except OSError as error:
        raise SourceError(f"{path}: cannot read it: {error.strerror}")
    if header != dbmod.SQLITE_MAGIC:
        raise SourceError(f"{path}: not a zlstore database (not an SQLite file)")


def _copy(path: Path, copy: Path):
    """A copy of the source at path, as its last commit left it, in copy: read
    with SQLite's backup (pages, never the source's SQL; through the source's
    WAL, writing nothing to it). Where SQLite cannot read the source in place
    without writing to it (a hot journal left by a writer killed mid-
    transaction; a WAL store in a directory this user cannot write), its
    files are copied and SQLite recovers the copy, as it would the source."""
    try:
        with (
            contextlib.closing(
                sqlite3.connect(_read_only_uri(path), uri=True, timeout=dbmod.BUSY_TIMEOUT_MS / 1000)
            ) as source,
            contextlib.closing(sqlite3.connect(copy)) as dest,
        ):
            dbmod.let_signals_in(source)
            source.backup(dest)
        return
    except sqlite3.DatabaseError as error:
        dbmod.raise_if_interrupted(error)
    for suffix in ("", "-journal", "-wal"):
        copy.with_name(copy.name + suffix).unlink(missing_ok=True)
    try:
        for suffix in ("", "-journal", "-wal"):
            if path.with_name(path.name + suffix).is_file():
                shutil.copyfile(path.with_name(path.name + suffix), copy.with_name(copy.name + suffix))
    except OSError as error:
        raise SourceError(f"{path}: cannot copy it to read it: {error.strerror}")


def _schema_of_this_release() -> Dict[str, List[tuple]]:
    """READ_TABLES as this release creates them: (name, declared type,
    not null, primary key, generated: its definition, else None) of each
    column."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for statement in dbmod.split_statements(macros.schema_parts()["tables"]):
            conn.execute(statement)
        sql = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
        return {
            t: [
                (r[1], r[2].upper(), r[3], r[5], _generated(sql[t], r[1]) if r[6] else None)
                for r in conn.execute(f"PRAGMA table_xinfo({t})")
            ]
            for t in READ_TABLES
        }


def _generated(create_sql: str, column: str) -> Optional[str]:
    """A generated column's definition in a CREATE TABLE (after ALTER TABLE
    ADD COLUMN, SQLite keeps the added text there too), whitespace made
    single: compared whole, so that a source's expression, never
    evaluated, is this release's own."""
    match = re.search(r"(?:^|[,(\s])" + re.escape(column) + r"\s+(.*?\b(?:VIRTUAL|STORED))\b", create_sql, re.S | re.I)
    return " ".join(match.group(1).split()) if match else None


def _expressions_of_this_release() -> Dict[Tuple[str, str], collections.Counter]:
    """{(type, name): the clauses SQLite evaluates (ddl.expressions)} of every
    table and index this release creates."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for statement in dbmod.split_statements(macros.schema_parts()["tables"]):
            conn.execute(statement)
        return {
            (kind, name): collections.Counter((_folded(column), key) for column, key, _ in ddl.expressions(sql))
            for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL")
        }


def _folded(column: Optional[str]) -> Optional[str]:
    return column.lower() if column is not None else None


def source_expressions(conn: sqlite3.Connection, path: Path):
    """Refuse (SourceError, naming the table or index and the clause) a
    source whose schema asks SQLite to evaluate anything this release's
    does not: a CHECK constraint, a DEFAULT, a generated column, a COLLATE,
    an index's expression or WHERE clause of its own. Read from the text
    of the schema (ddl.expressions), before quick_check or a migration
    could evaluate any of it: a source's SQL never runs."""
    ours = _expressions_of_this_release()
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'index') AND sql IS NOT NULL"
    ).fetchall()
    for kind, name, sql in rows:
        allowed = collections.Counter(ours.get((kind, name), ()))
        for column, key, written in ddl.expressions(sql):
            if allowed[(_folded(column), key)] > 0:
                allowed[(_folded(column), key)] -= 1
                continue
            raise SourceError(
                f"{path}: {kind} {name}{f', column {column}' if column else ''}: {written}: "
                "not a clause of this release's schema (a source's SQL is never evaluated)"
            )


def _plain(conn: sqlite3.Connection, path: Path) -> Dict[str, str]:
    """Drop the copy's triggers and views, unread: nothing of the source's
    SQL runs in this process (a view over an endless query, a trigger).
    Its planner statistics (sqlite_stat1, 4) go too: they would choose how
    merge's own queries run over it. Returns what was dropped: {name: kind}."""
    try:
        objects = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')").fetchall()
        for kind, name in sorted(objects):
            conn.execute(f"DROP {kind.upper()} IF EXISTS {_quoted(name)}")
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('sqlite_stat1', 'sqlite_stat4')"
        ).fetchall():
            conn.execute(f"DROP TABLE {name}")
    except _UNREADABLE as error:
        dbmod.raise_if_interrupted(error)
        raise SourceError(f"{path}: not a zlstore database ({_said(error)})")
    return {name: kind for kind, name in objects}


def source_tables(conn: sqlite3.Connection, path: Path, dropped: Optional[Dict[str, str]] = None):  # noqa: C901 -- a check per way a source's table may differ from this release's
    """Refuse (SourceError, naming the table and the column) a source whose
    READ_TABLES are not each a plain table with this release's columns,
    declared types and primary key, or whose values are not of those types
    (NULL where NOT NULL, text in an INTEGER column, a root's env that is
    not a JSON object). Reads the schema, then one pass over each table."""
    expected = _schema_of_this_release()
    kinds = {name: (kind, "") for name, kind in (dropped or {}).items()}
    kinds.update(
        {name: (kind, sql or "") for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")}
    )
    for table, columns in expected.items():
        kind, sql = kinds.get(table, (None, ""))
        if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            raise SourceError(
                f"{path}: table {table}: "
                + ("missing" if kind is None else f"a {kind}, not a table (never read)")
                + " (not a zlstore store of this release's schema)"
            )
        found = {r[1]: (r[1], r[2].upper(), r[3], r[5], r[6]) for r in conn.execute(f"PRAGMA table_xinfo({table})")}
        for name, declared, notnull, pk, generated in columns:
            if name not in found:
                raise SourceError(f"{path}: table {table}, column {name}: missing")
            _, got_type, got_notnull, got_pk, hidden = found.pop(name)
            got_generated = _generated(sql, name) if hidden else None
            if generated is not None and got_generated == generated:
                continue  # this release's own generated column, as it defines it
            if (got_type, bool(got_notnull), bool(got_pk), hidden) != (declared, bool(notnull), bool(pk), 0):

                def said(kind, nn, key, generated=0):
                    return (
                        f"{kind or 'without a type'}{' NOT NULL' if nn else ''}{' PRIMARY KEY' if key else ''}"
                        f"{' GENERATED' if generated else ''}"
                    )

                raise SourceError(
                    f"{path}: table {table}, column {name}: declared "
                    f"{said(got_type, got_notnull, got_pk, hidden)}, not {said(declared, notnull, pk)}"
                )
        if found:
            raise SourceError(
                f"{path}: table {table}, column {next(iter(found))}: not a column of this release's {table}"
            )
        tests = []
        for name, declared, notnull, _, generated in columns:
            if generated is not None:
                continue
            if declared in _TYPES:
                allowed = ", ".join(f"'{t}'" for t in _TYPES[declared] + (() if notnull else ("null",)))
                tests.append(
                    (
                        f"typeof({_quoted(name)}) NOT IN ({allowed})",
                        name,
                        f"a value not {declared}" + (" (or NULL where NOT NULL)" if notnull else ""),
                    )
                )
            elif notnull:
                tests.append((f"{_quoted(name)} IS NULL", name, "NULL where NOT NULL"))
        if table == "roots":
            tests.append(
                ("env IS NOT NULL AND (NOT json_valid(env) OR json_type(env) <> 'object')", "env", "not a JSON object")
            )
        if not tests:
            continue
        case = " ".join(f"WHEN {test} THEN {i}" for i, (test, _, _) in enumerate(tests))
        bad = conn.execute(
            f"SELECT CASE {case} END FROM {_quoted(table)} "
            f"WHERE {' OR '.join('(' + t + ')' for t, _, _ in tests)} LIMIT 1"
        ).fetchone()
        if bad is not None:
            _, name, what = tests[bad[0]]
            raise SourceError(f"{path}: table {table}, column {name}: {what}")
    _text_is_utf8(conn, path, expected)
    _blobs_sound(conn, path)


def _blobs_sound(conn: sqlite3.Connection, path: Path):
    """Refuse (SourceError, naming the blob) a source blob that is not what
    its row says: its data not one zlib stream, a size over
    parse.MAX_BLOB_BYTES or not its inflated size (a zlib bomb costs at
    most the size it claims: parse.unpacked), a hash not the sha256 of its
    bytes. One at a time: the memory is one blob's."""
    for digest, size, data in conn.execute("SELECT hash, size, data FROM blobs"):
        name = f"table blobs, blob {digest}"
        try:
            raw = parse.unpacked(data, size, name)
        except parse.BlobError as error:
            raise SourceError(f"{path}: {error}") from None
        if hashlib.sha256(raw).hexdigest() != digest:
            raise SourceError(f"{path}: {name}: its bytes do not hash to it (sha256 {hashlib.sha256(raw).hexdigest()})")


# What reading a damaged or hostile file can raise: SQLite's errors, and
# text (an error message quoting a damaged schema, a value) that is not UTF-8.
_UNREADABLE = (sqlite3.DatabaseError, UnicodeDecodeError)


def _said(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError):
        return f"text that is not UTF-8 where SQLite reads its schema or an error: damaged? ({error.reason})"
    return str(error)


# The tables whose text merge reads into Python (a root's row, a conflict's
# cell, the ingest log's runs), each value checked to be UTF-8 first.
TEXT_READ_TABLES = ("calibers", "environments", "roots", "cells", "ingest_runs")


def _text_is_utf8(conn: sqlite3.Connection, path: Path, expected: Dict[str, List[tuple]]):
    conn.text_factory = bytes
    try:
        for table in TEXT_READ_TABLES:
            names = [
                name for name, declared, _, _, generated in expected[table] if declared == "TEXT" and not generated
            ]
            for row in conn.execute(f"SELECT {', '.join(_quoted(n) for n in names)} FROM {table}"):
                for name, value in zip(names, row):
                    if isinstance(value, bytes):
                        try:
                            value.decode("utf-8")
                        except UnicodeDecodeError:
                            raise SourceError(f"{path}: table {table}, column {name}: text that is not UTF-8")
    finally:
        conn.text_factory = str


def _open_copy(copy: Path, path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(copy, isolation_level=None)
    dbmod.let_signals_in(conn)
    try:
        conn.execute("PRAGMA trusted_schema = OFF")
        conn.execute("PRAGMA journal_mode = DELETE")  # the copy is this process's alone
    except _UNREADABLE as error:
        conn.close()
        dbmod.raise_if_interrupted(error)
        raise SourceError(f"{path}: not a zlstore database ({_said(error)})")
    return conn


def prepare_source(path: Path, copy: Path) -> int:
    """Make copy a private, checked copy of the source at path: triggers and
    views dropped unread, brought to this release's schema where it is
    older (migrations run on the copy), every table merge reads checked
    (source_tables). Returns the source's schema version; SourceError,
    naming the table and column, for anything that does not match."""
    _copy(path, copy)
    conn = _open_copy(copy, path)
    try:
        dropped = _plain(conn, path)
        source_expressions(conn, path)  # before quick_check, which evaluates CHECK constraints
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        damaged = dbmod.integrity_problems(conn)
        if damaged:
            raise SourceError(
                f"{path} is damaged (SQLite's quick_check: {damaged[0]}): nothing merged; "
                "merge a sound copy, or ingest its runs/ tree again"
            )
        if version > dbmod.SCHEMA_VERSION:
            raise SourceError(
                f"{path}: schema version {version} is newer than this zlstore's "
                f"({dbmod.SCHEMA_VERSION}): upgrade zlstore to merge it"
            )
        if version < 0:
            raise SourceError(f"{path}: schema version {version} is not one zlstore writes")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"roots", "cells", "measurements"} <= tables:
            raise SourceError(f"{path}: not a zlstore database (no roots, cells and measurements tables)")
    except _UNREADABLE as error:
        dbmod.raise_if_interrupted(error)
        raise SourceError(f"{path}: not a zlstore database ({_said(error)})")
    finally:
        conn.close()
    if version < dbmod.SCHEMA_VERSION:
        try:
            Store(copy).close()  # migrations run on the copy
        except (sqlite3.DatabaseError, dbmod.StoreError, ValueError, TypeError) as error:  # UnicodeError: a ValueError
            dbmod.raise_if_interrupted(error)
            raise SourceError(
                f"{path}: a store of schema version {version} that does not migrate to {dbmod.SCHEMA_VERSION} ({error})"
            )
        conn = _open_copy(copy, path)
        try:
            _plain(conn, path)  # the views and triggers the migration made are this release's: not read either
        finally:
            conn.close()
    conn = _open_copy(copy, path)
    try:
        source_tables(conn, path, dropped)
    except _UNREADABLE as error:
        dbmod.raise_if_interrupted(error)
        raise SourceError(f"{path}: not a zlstore database ({_said(error)})")
    finally:
        conn.close()
    return version


@contextlib.contextmanager
def prepared_sources(paths: Sequence[Path], target_path: Optional[Path]) -> Iterator[List[Path]]:
    """Private checked copies of every source (prepare_source), in a
    temporary directory removed afterwards: all are checked before anything
    is merged, and the merge reads only them."""
    scratch = Path(tempfile.mkdtemp(prefix="zlstore-merge-"))
    try:
        copies = []
        for n, path in enumerate(paths):
            check_source(path, target_path)
            copy = scratch / f"source{n}.db"
            prepare_source(path, copy)
            copies.append(copy)
        yield copies
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
