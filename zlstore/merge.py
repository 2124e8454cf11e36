"""Merging stores made elsewhere (another host, a Slurm task, a colleague's
laptop) into one, by content.

A root is matched by what it is (roots.py: its name and env file), a cell by
its path inside its root, an IR text by its hash: merging a store twice adds
nothing. Each root is merged in one transaction, whole or not at all. A cell
both stores hold with different content keeps the newer (its ingested_at),
and the summary and the ingest log say which. A source's problems come
along, open while the target holds what they name as the source read it,
and the summary counts those open, as an ingest counts its own. What the
writers derive (the A/B pairs, ranges and noise floors) is not copied but
recomputed in the target, inside the same transaction (derive.py), so the
target's views see the merged roots as if they had been ingested there. A
source is only read: one from an older release is read through a migrated
copy, never upgraded in place, and one from a newer release is refused
before anything is merged.

    from zlstore import Store, merge
    with Store("all.db") as target:
        summary = merge.merge(target, ["host1.db", "host2.db"])
"""

import collections
import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import db as dbmod
from . import caliber, ddl, derive, floors, macros, parse, provenance, roots, sequential
from .db import now
from .cellwriter import stored_environment
from .fingerprints import cell_rules
from .ingest import plural
from .layout import Problem
from .store import Store

# What a summary counts, in the order it is printed.
COUNTS = (
    "roots",
    "roots_added",
    "cells_added",
    "cells_replaced",
    "cells_unchanged",
    "rows_added",
    "kernels_added",
    "ir_texts_added",
    "log_runs_added",
)
CHUNK_CELLS = 1024  # cells copied per statement group: the progress bar moves this often


# An open problem of the target that is the same as {row}'s (another copy
# of it: two stores that ingested the same tree both found it).
_OPEN_TWIN = """SELECT 1 FROM main.ingest_problems o WHERE o.closed_by IS NULL {other}
                AND o.file = {row}.file AND o.line IS {row}.line AND o.message = {row}.message
                AND o.cell_id IS {row}.cell_id AND o.root_id IS {row}.root_id"""


# A source's run as the target keeps it. One the source had not finished
# (its process killed, or still running when the copy was taken) is closed
# in the target, shown as interrupted, its summary kept inside: the same
# text each time that source is merged, so that it is matched, not added again.
_CARRIED_SUMMARY = """CASE WHEN s.finished_at IS NULL
                           THEN json_object('state', 'interrupted', 'why', 'unfinished in its store when merged',
                                            'summary', s.summary)
                           ELSE s.summary END"""


class SourceError(Exception):
    """A source that cannot be merged: missing, not a zlstore store, from a
    newer release, or the target itself. Raised before anything is merged."""


@dataclass
class MergeSummary:
    sources: List[str] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    conflicts: List[dict] = field(default_factory=list)  # cells and roots both stores hold, differently
    problems: List[Problem] = field(default_factory=list)  # found by this merge
    # The problems open in the target that the sources' ingests found (carried
    # by this merge or an earlier one), and this merge's own.
    open_problems: Optional[int] = None
    stopped = False  # a merge is whole roots or nothing: it never stops half-way

    def problem_count(self) -> int:
        """ingest.Summary's question, asked by the command line of every
        summary: the problems open in what was merged, its own included."""
        return len(self.problems) if self.open_problems is None else max(self.open_problems, len(self.problems))

    def as_dict(self) -> dict:
        return {
            "sources": self.sources,
            **self.counts,
            "conflicts": self.conflicts,
            "problems": [p.as_dict() for p in self.problems],
            "open_problems": self.problem_count(),
        }

    def line(self) -> str:
        c = self.counts
        return (
            f"{plural(len(self.sources), 'store')}, {plural(c['roots'], 'root')} ({c['roots_added']} new), cells: "
            f"{c['cells_added']} added, {c['cells_replaced']} replaced, {c['cells_unchanged']} unchanged; "
            f"{c['rows_added']} rows, {c['kernels_added']} kernels, {c['ir_texts_added']} new IR texts, "
            f"{c['log_runs_added']} ingest runs logged; {plural(len(self.conflicts), 'conflict')}, "
            f"{plural(self.problem_count(), 'problem')}"
        )


def merge(target, sources: Sequence, progress: Optional[Callable[[int, int], None]] = None) -> dict:
    """Merge the stores at sources into target (a Store); returns the
    summary as a dict. progress(done, total) counts source cells."""
    return Merger(target).run(sources, progress).as_dict()


def newer_than(a: tuple, b: tuple) -> bool:
    """Whether (ingested_at, content hash) a is newer than b: the later
    ingest, and between two of the same instant the greater hash, so that
    merging in either order keeps the same one."""
    return tuple(v or "" for v in a) > tuple(v or "" for v in b)


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


def _columns(conn, schema: str, table: str) -> List[str]:
    return [row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({table})")]


class Merger:
    """One merge run into one target store."""

    def __init__(self, target):
        self.target = target
        self.conn: sqlite3.Connection = target.conn
        self.summary = MergeSummary()
        self.run_id: Optional[int] = None
        self.done = 0
        self.total = 0
        self.progress = None

    def run(self, sources: Sequence, progress=None, copies: Optional[List[Path]] = None) -> MergeSummary:
        """Merge sources; copies: their prepared_sources, where the caller
        made them already (the command line does, before it opens the target)."""
        paths = [Path(p) for p in sources]
        self.summary.sources = [str(p) for p in paths]
        self.progress = progress
        for path in paths:
            check_source(path, self.target.path)
        # every source copied and checked before anything is merged: one refused leaves the target as it was
        with (
            contextlib.nullcontext(copies) if copies is not None else prepared_sources(paths, self.target.path)
        ) as copies:
            for copy in copies:
                with contextlib.closing(sqlite3.connect(copy)) as conn:
                    self.total += conn.execute("SELECT count(*) FROM cells").fetchone()[0]
            with dbmod.write_transaction(self.conn):
                self.run_id = dbmod.start_run(self.conn, "merge", [str(p.resolve()) for p in paths])
            try:
                self._merge_all(paths, copies)
            except KeyboardInterrupt:
                self._close_run("interrupted")
                raise
            except sqlite3.DatabaseError as error:  # a full disk: the first failure stops the merge
                if dbmod.interrupted(error):  # Ctrl-C inside SQLite (in one of zlstore's SQL functions)
                    self._close_run("interrupted")
                    raise KeyboardInterrupt from None
                self._close_run("stopped", str(error))
                raise
        return self.summary

    def _close_run(self, state: str, why: Optional[str] = None):
        """The run's row says how it ended, where the store still takes a write."""
        assert self.run_id is not None  # merge() started the run
        try:
            with dbmod.write_transaction(self.conn):
                dbmod.finish_run(
                    self.conn, self.run_id, {**self.summary.as_dict(), **({"why": why} if why else {})}, state
                )
        except sqlite3.DatabaseError:
            pass  # the next writer closes it (db.close_abandoned_runs)

    def _merge_all(self, paths: List[Path], copies: List[Path]):
        merged_roots = set()
        self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS merge_carried (run_id INTEGER PRIMARY KEY)")
        self.conn.execute("DELETE FROM temp.merge_carried")
        with dbmod.bulk_checkpoints(self.conn):
            for path, copy in zip(paths, copies):
                with self._attached(copy):
                    self.conn.execute(
                        "CREATE TEMP TABLE IF NOT EXISTS merge_roots (src_id INTEGER PRIMARY KEY, dst_id INTEGER)"
                    )
                    self.conn.execute("DELETE FROM temp.merge_roots")
                    for source_root in self._source_roots():
                        root_id = self._merge_root(path, source_root)
                        if root_id is not None:
                            merged_roots.add(root_id)
                    self._merge_log()
            # Each root's transaction derived its rounds' pairs and ranges;
            # the floors, q-values and judgements, which move with every root,
            # are derived once, here: the merge's final derivation.
            self.target.derive()
            self._complete_fingerprints()
        self.summary.counts["roots"] = len(merged_roots)
        self.summary.open_problems = self.conn.execute(
            "SELECT count(*) FROM ingest_problems WHERE closed_by IS NULL "
            "AND (run_id = ? OR run_id IN (SELECT run_id FROM temp.merge_carried))",
            (self.run_id,),
        ).fetchone()[0]
        # A side of a round two cells claim, as an ingest names it: the merge
        # may have brought the second claimant, or the source held both.
        twice = roots.claimed_twice(self.conn, sorted(merged_roots))
        self.summary.problems.extend(problem for _, problem in twice)
        self.summary.open_problems += len(twice)
        assert self.run_id is not None  # merge() started the run
        with dbmod.write_transaction(self.conn):
            dbmod.finish_run(self.conn, self.run_id, self.summary.as_dict())

    @contextlib.contextmanager
    def _attached(self, copy: Path):
        """The private copy of a source (prepared_sources) as schema src, read-only."""
        self.conn.execute("ATTACH DATABASE ? AS src", ("file:" + urllib.parse.quote(str(copy)) + "?mode=ro",))
        self.shared_columns: Dict[str, List[str]] = {}
        try:
            attached = next(r[2] for r in self.conn.execute("PRAGMA database_list") if r[1] == "src")
            if Path(attached).resolve() != copy.resolve():  # an SQLite that does not take URIs in ATTACH
                raise SourceError(f"{copy}: could not be opened read-only (SQLite attached {attached!r})")
            yield
        finally:
            self.conn.execute("DETACH DATABASE src")

    def _shared(self, table: str) -> List[str]:
        """The target's columns of table that the attached source has (all
        of them: source_tables checked), asked of SQLite once per source."""
        if table not in self.shared_columns:
            source = set(_columns(self.conn, "src", table))
            self.shared_columns[table] = [c for c in _columns(self.conn, "main", table) if c in source]
        return self.shared_columns[table]

    def _source_roots(self) -> List[dict]:
        cursor = self.conn.execute("SELECT * FROM src.roots ORDER BY id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def _problem(self, problem: Problem):
        """A problem of this merge: in the summary and the ingest log."""
        self.summary.problems.append(problem)
        self.conn.execute(
            "INSERT INTO ingest_problems (run_id, file, line, message) VALUES (?, ?, ?, ?)",
            (self.run_id, problem.file, problem.line, problem.message),
        )

    # -- one root, in one transaction -------------------------------------------

    def _merge_root(self, source_path: Path, source: dict) -> Optional[int]:
        """Merge one root of the attached source; its id in the target, or
        None where it could not be merged (a problem says why)."""
        counts_before = dict(self.summary.counts)
        kept = len(self.summary.conflicts), len(self.summary.problems)
        cells_before = self.done
        try:
            with dbmod.write_transaction(self.conn):
                self._calibers()
                root_id = self._root_row(source_path, source)
                self._cells(source_path, source, root_id)
                self._stops(source, root_id)
                derive.derive(self.conn, final=False)  # the rest once per merge (_merge_all)
                self.conn.execute("INSERT INTO temp.merge_roots VALUES (?, ?)", (source["id"], root_id))
            return root_id
        except sqlite3.DatabaseError as error:
            # The transaction rolled back: nothing of this root counts. Ctrl-C,
            # or the target's disk failing, stops the merge here (the root is
            # not a problem of the source, and the next would fail the same way).
            dbmod.raise_if_interrupted(error)
            if dbmod.is_environment_error(error):
                raise
            self.summary.counts = counts_before
            del self.summary.conflicts[kept[0] :], self.summary.problems[kept[1] :]
            self.done = cells_before
            with dbmod.write_transaction(self.conn):
                self._problem(
                    Problem(str(source_path), None, f"root {source['name']} ({source['path']}) not merged: {error}")
                )
            self._advance(
                self.conn.execute("SELECT count(*) FROM src.cells WHERE root_id = ?", (source["id"],)).fetchone()[0]
            )  # passed over: the bar still ends full
            return None

    def _stops(self, source: dict, root_id: int):
        """The source's op stops of an until-decided campaign that the target
        lacks (sequential.record_stops: a stop once written is kept, so the
        stores of a --slurm campaign's tasks, each with its own ops', add up),
        with their ranges computed again to show them."""
        added = self.conn.execute(
            f"""INSERT INTO main.op_stops (root_id, op, dtype, round, reason, recorded_at)
               SELECT ?, s.op, s.dtype, s.round, s.reason, s.recorded_at FROM src.op_stops s
               WHERE s.root_id = ? AND s.reason IN ({", ".join("?" * len(sequential.STOP_REASONS))}) AND NOT EXISTS (
                   SELECT 1 FROM main.op_stops t
                   WHERE t.root_id = ? AND t.op = s.op AND coalesce(t.dtype, '') = coalesce(s.dtype, ''))
               ORDER BY s.id""",
            (root_id, source["id"], *sequential.STOP_REASONS, root_id),
        ).rowcount
        if added:
            self.conn.execute(
                """INSERT INTO ab_stale_ranges (root_id, op, dtype, shape)
                   SELECT DISTINCT root_id, op, dtype, shape FROM ab_slot_rows WHERE root_id = ?""",
                (root_id,),
            )

    def _calibers(self):
        """Every source caliber in the target, and temp.merge_calibers: source id -> target id."""
        fields = ", ".join(caliber.NAMES)
        self.conn.execute(f"INSERT OR IGNORE INTO main.calibers ({fields}) SELECT {fields} FROM src.calibers")
        self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS merge_calibers (src_id INTEGER PRIMARY KEY, dst_id INTEGER)")
        self.conn.execute("DELETE FROM temp.merge_calibers")
        match = " AND ".join(f"t.{n} = s.{n}" for n in caliber.NAMES)
        self.conn.execute(
            f"INSERT INTO temp.merge_calibers SELECT s.id, t.id FROM src.calibers s JOIN main.calibers t ON {match}"
        )
        self._environments()

    def _environments(self):
        """Every source environment in the target, and temp.merge_environments:
        source id -> target id. Its key is made again from its fields, which
        are read as data: the source's own key is not trusted to match them."""
        self.conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS merge_environments (src_id INTEGER PRIMARY KEY, dst_id INTEGER)"
        )
        self.conn.execute("DELETE FROM temp.merge_environments")
        cursor = self.conn.execute(f"SELECT id, {', '.join(provenance.NAMES)} FROM src.environments")
        for row in cursor.fetchall():
            fields = provenance.clean(dict(zip(provenance.NAMES, row[1:])))
            if fields:
                self.conn.execute(
                    "INSERT OR REPLACE INTO temp.merge_environments VALUES (?, ?)",
                    (row[0], stored_environment(self.conn, fields)),
                )

    def _root_row(self, source_path: Path, source: dict) -> int:
        """The target's root for the source's: the one with its identity,
        brought up to date where the source's files are newer, or a new one."""
        same = roots.with_identity(self.conn, source["identity"], source["path"])
        if same:
            root_id = same[0][0]
            files_sig, ingested_at = self.conn.execute(
                "SELECT files_sig, ingested_at FROM roots WHERE id = ?", (root_id,)
            ).fetchone()
            if files_sig != source["files_sig"]:
                newer = newer_than((source["ingested_at"], source["files_sig"]), (ingested_at, files_sig))
                target_path = self.conn.execute("SELECT path FROM roots WHERE id = ?", (root_id,)).fetchone()[0]
                self._conflict(
                    source_path,
                    source["name"],
                    target_path,
                    None,
                    newer,
                    source["ingested_at"],
                    ingested_at,
                    "its root files (env, screen.tsv, partition.tsv)",
                )
                if newer:
                    self._copy_root_row(source, root_id)
            return root_id
        self.summary.counts["roots_added"] += 1
        # Where the source says the root is, is another host's word: the
        # root is kept at no path of this host until an ingest here finds it.
        path = roots.merged_path(self.conn, source["identity"])
        others = roots.namesakes(self.conn, source["name"], source["identity"])
        if others:
            env = json.loads(source["env"]) if source["env"] else {}
            self._problem(Problem(path, None, roots.namesake_message(source["name"], source["env_file"], env, others)))
        return self._copy_root_row(source, None, path)

    def _copy_root_row(self, source: dict, root_id: Optional[int], path: Optional[str] = None) -> int:
        """Insert the source's root row (at path), or overwrite root_id's
        with it but for its path; its recorded verdicts and plan come along."""
        columns = [c for c in self._shared("roots") if c in source and c not in ("id", "path", "caliber_id")]
        values = [source[c] for c in columns]
        caliber_id = self.conn.execute(
            "SELECT dst_id FROM temp.merge_calibers WHERE src_id = ?", (source["caliber_id"],)
        ).fetchone()
        columns.append("caliber_id")
        values.append(caliber_id[0] if caliber_id else None)
        if root_id is None:
            columns.append("path")
            values.append(path)
            root_id = dbmod.inserted_id(self.conn.execute(dbmod.insert_sql("roots", columns), values))
        else:
            self.conn.execute(
                f"UPDATE roots SET {', '.join(c + ' = ?' for c in columns)} WHERE id = ?", (*values, root_id)
            )
            # its problems were the old files': closed, as an ingest closes them
            self.conn.execute(
                "UPDATE ingest_problems SET closed_by = ? WHERE root_id = ? AND cell_id IS NULL AND closed_by IS NULL",
                (self.run_id, root_id),
            )
        for table in ("recorded_verdicts", "partitions"):
            self.conn.execute(f"DELETE FROM main.{table} WHERE root_id = ?", (root_id,))
            copied = [c for c in self._shared(table) if c not in ("id", "root_id")]
            self.conn.execute(
                f"INSERT INTO main.{table} (root_id, {', '.join(copied)}) "
                f"SELECT ?, {', '.join(copied)} FROM src.{table} WHERE root_id = ? ORDER BY id",
                (root_id, source["id"]),
            )
        return root_id

    def _conflict(
        self,
        source_path: Path,
        root_name: str,
        where: str,
        cell: Optional[str],
        newer: bool,
        source_at: Optional[str],
        target_at: Optional[str],
        what: str = "its content",
    ):
        kept = "source" if newer else "target"
        self.summary.conflicts.append(
            {
                "root": root_name,
                "cell": cell,
                "kept": kept,
                "source": str(source_path),
                "source_ingested_at": source_at,
                "target_ingested_at": target_at,
            }
        )
        newer_text = (
            f"the source's from {source_path} (ingested {source_at}), replacing the target's (ingested {target_at})"
            if newer
            else f"the target's (ingested {target_at}; {source_path}'s: {source_at})"
        )
        if source_at == target_at:
            newer_text += (
                "; both were ingested at the same time, so the one whose content hash sorts last "
                "was kept (the same whichever store is merged first)"
            )
        self._problem(
            Problem(where, None, f"{what} differs between the target and {source_path}: kept the newer, {newer_text}")
        )

    def _cells(self, source_path: Path, source: dict, root_id: int):
        """Copy the source root's cells the target lacks, or holds with older
        different content, with their rows, kernels, texts and fingerprints."""
        conn = self.conn
        conn.execute("""CREATE TEMP TABLE IF NOT EXISTS merge_cells (
                            src_id INTEGER PRIMARY KEY, relpath TEXT, content_sig TEXT, ingested_at TEXT,
                            dst_id INTEGER, dst_content_sig TEXT, dst_ingested_at TEXT, copy INTEGER)""")
        conn.execute("DELETE FROM temp.merge_cells")
        conn.execute(
            """INSERT INTO temp.merge_cells
                        SELECT s.id, s.relpath, s.content_sig, s.ingested_at, t.id, t.content_sig, t.ingested_at, 0
                        FROM src.cells s LEFT JOIN main.cells t ON t.root_id = ? AND t.relpath = s.relpath
                        WHERE s.root_id = ?""",
            (root_id, source["id"]),
        )
        conn.execute("""UPDATE temp.merge_cells SET copy = 1 WHERE dst_id IS NULL
                        OR (dst_content_sig IS NOT content_sig
                            AND (coalesce(ingested_at, ''), coalesce(content_sig, ''))
                              > (coalesce(dst_ingested_at, ''), coalesce(dst_content_sig, '')))""")
        target_path = conn.execute("SELECT path FROM roots WHERE id = ?", (root_id,)).fetchone()[0]
        for relpath, newer, source_at, target_at in conn.execute(
            """SELECT relpath, copy, ingested_at, dst_ingested_at FROM temp.merge_cells
                   WHERE dst_id IS NOT NULL AND dst_content_sig IS NOT content_sig ORDER BY src_id"""
        ).fetchall():
            self._conflict(
                source_path,
                source["name"],
                target_path.rstrip("/") + "/" + relpath,
                relpath,
                bool(newer),
                source_at,
                target_at,
            )
        unchanged, replaced = conn.execute(
            "SELECT count(*) FILTER (WHERE copy = 0), count(*) FILTER (WHERE copy = 1 AND dst_id IS NOT NULL) "
            "FROM temp.merge_cells"
        ).fetchone()
        self.summary.counts["cells_unchanged"] += unchanged
        self.summary.counts["cells_replaced"] += replaced
        self.summary.counts["cells_added"] += conn.execute(
            "SELECT count(*) FROM temp.merge_cells WHERE copy = 1 AND dst_id IS NULL"
        ).fetchone()[0]
        self._advance(unchanged)
        conn.execute(
            """UPDATE ingest_problems SET closed_by = ? WHERE closed_by IS NULL
                        AND cell_id IN (SELECT dst_id FROM temp.merge_cells WHERE copy = 1)""",
            (self.run_id,),
        )  # the replaced content's: closed, as an ingest closes them
        conn.execute("DELETE FROM main.cells WHERE id IN (SELECT dst_id FROM temp.merge_cells WHERE copy = 1)")
        # The cells of equal content may lack fingerprints under rules the source computed.
        added = (
            0
            if not unchanged
            else conn.execute("""INSERT OR IGNORE INTO main.fingerprints (cell_id, rule, fingerprint)
                                SELECT c.dst_id, f.rule, f.fingerprint
                                FROM temp.merge_cells c CROSS JOIN src.fingerprints f ON f.cell_id = c.src_id
                                WHERE c.copy = 0""").rowcount
        )
        if added:
            self._digests("WHERE copy = 0")
            floors.mark_every(conn)
        cell_columns = [
            c for c in self._shared("cells") if c not in ("id", "root_id", "caliber_id", "environment_id", "path")
        ]
        chunks = [row[0] for row in conn.execute("SELECT src_id FROM temp.merge_cells WHERE copy = 1 ORDER BY src_id")]
        for at in range(0, len(chunks), CHUNK_CELLS):
            low, high = chunks[at], chunks[min(at + CHUNK_CELLS, len(chunks)) - 1]
            self._copy_cells(root_id, target_path, cell_columns, low, high)
            self._advance(min(CHUNK_CELLS, len(chunks) - at))

    def _digests(self, where: str):
        """The source's digests of the texts of temp.merge_cells rows (where)."""
        self.conn.execute(f"""INSERT OR IGNORE INTO main.ir_digests (ir_hash, rule, digest)
                              SELECT d.ir_hash, d.rule, d.digest FROM src.ir_digests d
                              WHERE d.ir_hash IN (SELECT k.ir_hash FROM temp.merge_cells c
                                                  JOIN src.kernels k ON k.cell_id = c.src_id {where})
                                AND d.ir_hash IN (SELECT hash FROM main.blobs)""")

    def _copy_cells(self, root_id: int, root_path: str, cell_columns: List[str], low: int, high: int):
        """Copy the cells of temp.merge_cells marked copy with src_id in
        [low, high], in source order."""
        conn, counts = self.conn, self.summary.counts
        chunk = f"c.copy = 1 AND c.src_id BETWEEN {int(low)} AND {int(high)}"
        blob_columns = self._shared("blobs")
        needed = f"""SELECT k.ir_hash FROM temp.merge_cells c JOIN src.kernels k ON k.cell_id = c.src_id WHERE {chunk}
                     UNION SELECT s.index_hash FROM temp.merge_cells c JOIN src.cells s ON s.id = c.src_id
                     WHERE {chunk} AND s.index_hash IS NOT NULL"""
        for kind, count in (("ttgir", "ir_texts_added"), ("index.tsv", None)):
            added = conn.execute(
                f"""INSERT OR IGNORE INTO main.blobs ({", ".join(blob_columns)})
                    SELECT {", ".join("b." + c for c in blob_columns)} FROM src.blobs b
                    WHERE b.kind = ? AND b.hash IN ({needed})
                      AND NOT EXISTS (SELECT 1 FROM main.blobs t WHERE t.hash = b.hash)""",
                (kind,),
            ).rowcount
            if count:
                counts[count] += added
        self._digests(f"WHERE {chunk}")
        conn.execute(
            f"""INSERT INTO main.cells (root_id, caliber_id, environment_id, path, {", ".join(cell_columns)})
                SELECT ?, m.dst_id, e.dst_id, ? || s.relpath, {", ".join("s." + c for c in cell_columns)}
                FROM temp.merge_cells c JOIN src.cells s ON s.id = c.src_id
                LEFT JOIN temp.merge_calibers m ON m.src_id = s.caliber_id
                LEFT JOIN temp.merge_environments e ON e.src_id = s.environment_id
                WHERE {chunk} ORDER BY c.src_id""",
            (root_id, root_path.rstrip("/") + "/"),
        )
        conn.execute(
            f"""UPDATE temp.merge_cells AS c SET dst_id = t.id FROM main.cells t
                         WHERE t.root_id = ? AND t.relpath = c.relpath AND {chunk}""",
            (root_id,),
        )
        for table, count in (("measurements", "rows_added"), ("kernels", "kernels_added"), ("fingerprints", None)):
            columns = [col for col in self._shared(table) if col not in ("id", "cell_id")]
            order = "x.cell_id, x.rule" if table == "fingerprints" else "x.id"
            added = conn.execute(
                f"""INSERT INTO main.{table} (cell_id, {", ".join(columns)})
                    SELECT c.dst_id, {", ".join("x." + col for col in columns)}
                    FROM temp.merge_cells c JOIN src.{table} x ON x.cell_id = c.src_id
                    WHERE {chunk} ORDER BY {order}"""
            ).rowcount
            if count:
                counts[count] += added

    def _advance(self, cells: int):
        self.done += cells
        if self.progress and cells:
            self.progress(self.done, self.total)

    # -- the ingest log ---------------------------------------------------------

    def _merge_log(self):
        """The source's ingest runs and their problems that the target lacks
        (the same start, command, paths and summary), in one transaction.
        Each problem of the source, brought now or by an earlier merge, is
        tied to the target's cell or root it names, and is open there while
        it is open in the source and the target holds what it names as the
        source read it (a cell of the same content, root files of the same
        signature), as an ingest keeps its own; one the source closed is
        closed. One that names neither stays as the target has it."""
        conn = self.conn
        with dbmod.write_transaction(conn):
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS merge_runs (src_id INTEGER PRIMARY KEY, dst_id INTEGER, new INTEGER)"
            )
            conn.execute("DELETE FROM temp.merge_runs")
            conn.execute(f"""INSERT INTO temp.merge_runs
                            SELECT s.id, (SELECT min(t.id) FROM main.ingest_runs t WHERE t.started_at = s.started_at
                                          AND t.command IS s.command AND t.paths IS s.paths
                                          AND t.summary IS {_CARRIED_SUMMARY}), 0
                            FROM src.ingest_runs s""")
            missing = conn.execute(
                f"""SELECT s.id, s.started_at, coalesce(s.finished_at, :now), s.command, s.paths, {_CARRIED_SUMMARY}
                    FROM src.ingest_runs s JOIN temp.merge_runs m ON m.src_id = s.id
                    WHERE m.dst_id IS NULL ORDER BY s.id""",
                {"now": now()},
            ).fetchall()
            for source_id, *values in missing:
                run_id = conn.execute(
                    "INSERT INTO ingest_runs (started_at, finished_at, command, paths, summary) VALUES (?, ?, ?, ?, ?)",
                    values,
                ).lastrowid
                conn.execute("UPDATE temp.merge_runs SET dst_id = ?, new = 1 WHERE src_id = ?", (run_id, source_id))
            conn.execute("DROP TABLE IF EXISTS temp.merge_problems")
            conn.execute(
                """CREATE TEMP TABLE merge_problems AS
                            SELECT p.id AS src_id, r.dst_id AS run_id, r.new, p.file, p.line, p.message,
                                   tc.id AS cell_id, CASE WHEN p.root_id IS NOT NULL THEN mr.dst_id END AS root_id,
                                   p.cell_id IS NOT NULL OR p.root_id IS NOT NULL AS tied,
                                   CASE WHEN p.closed_by IS NOT NULL THEN coalesce(closer.dst_id, :run)
                                        WHEN p.cell_id IS NOT NULL AND (tc.id IS NULL
                                             OR tc.content_sig IS NOT sc.content_sig) THEN :run
                                        WHEN p.cell_id IS NULL AND p.root_id IS NOT NULL AND (tr.id IS NULL
                                             OR tr.files_sig IS NOT sr.files_sig) THEN :run END AS closed_by
                            FROM src.ingest_problems p
                            JOIN temp.merge_runs r ON r.src_id = p.run_id
                            LEFT JOIN temp.merge_runs closer ON closer.src_id = p.closed_by
                            LEFT JOIN src.cells sc ON sc.id = p.cell_id
                            LEFT JOIN src.roots sr ON sr.id = coalesce(p.root_id, sc.root_id)
                            LEFT JOIN temp.merge_roots mr ON mr.src_id = sr.id
                            LEFT JOIN main.roots tr ON tr.id = mr.dst_id
                            LEFT JOIN main.cells tc ON tc.root_id = mr.dst_id AND tc.relpath = sc.relpath""",
                {"run": self.run_id},
            )
            # One problem is listed once: two stores that ingested the same
            # tree both found it, and a copy of one open in the target (the
            # same file, line, message, cell or root) comes closed by this merge.
            conn.execute(
                f"""INSERT INTO ingest_problems (run_id, file, line, message, cell_id, root_id, closed_by)
                            SELECT run_id, file, line, message, cell_id, root_id,
                                   coalesce(closed_by, CASE WHEN EXISTS ({_OPEN_TWIN.format(row="p", other="")})
                                                            THEN :run END)
                            FROM temp.merge_problems p WHERE new ORDER BY src_id""",
                {"run": self.run_id},
            )
            conn.execute(f"""UPDATE main.ingest_problems AS t
                            SET cell_id = coalesce(p.cell_id, t.cell_id), root_id = coalesce(p.root_id, t.root_id),
                                closed_by = CASE WHEN p.closed_by IS NOT NULL THEN coalesce(t.closed_by, p.closed_by)
                                                 WHEN p.tied AND NOT EXISTS ({_OPEN_TWIN.format(row="t", other="AND o.id <> t.id")})
                                                 THEN NULL ELSE t.closed_by END
                            FROM temp.merge_problems p
                            WHERE NOT p.new AND t.run_id = p.run_id AND t.file = p.file AND t.line IS p.line
                              AND t.message = p.message""")
            conn.execute("INSERT OR IGNORE INTO temp.merge_carried SELECT dst_id FROM temp.merge_runs")
            self.summary.counts["log_runs_added"] += len(missing)

    def _complete_fingerprints(self):
        """Every cell fingerprinted as an ingest would have it (fingerprints.cell_rules:
        a screening cell under every rule, another under the current rule and
        those that change no text), and under every rule some cell of a
        repeat run or campaign holds in the target now (a source may have
        computed one, `zlstore rescore --rule v4`, that the target had not,
        and the other way round): from the stored IR, as a rescore would."""
        held = [
            r
            for (r,) in self.conn.execute(
                """SELECT DISTINCT rule FROM fingerprints WHERE cell_id IN (
                   SELECT cells.id FROM cells JOIN roots ON roots.id = cells.root_id WHERE roots.kind <> 'screen')"""
            )
        ]
        for rule in dict.fromkeys([r.name for r in cell_rules(self.conn, "campaign")] + held):
            self.target.compute_fingerprints(rule)
        for rule in cell_rules(self.conn, "screen"):
            self.target.compute_fingerprints(rule.name, root_kind="screen")
