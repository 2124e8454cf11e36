"""Store: one database, opened the way every writer needs it, and the
operations the CLI, the runners and datasette share."""

import contextlib
import functools
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from .. import db as dbmod
from . import derive, fingerprints, floors, migrations, roots
from ..read import ttgir, unchanged
from .ingest import Ingester
from .journal import RunRecord

PathLike = Union[str, os.PathLike]


def default_db_path() -> str:
    """$ZLSTORE_DB, else zlstore.db in the current directory."""
    return os.environ.get("ZLSTORE_DB") or "zlstore.db"


class Store:
    """A zlstore database. Opening one creates or upgrades its schema.

    create=False: the file must already be a zlstore store (the commands that
    only read never create one). A file that is not one this release may use
    (missing, damaged, foreign, newer) raises db.StoreError naming the file
    and the fault, and is left as it was (db.open_checked). check: run
    SQLite's quick_check first (default: for files up to
    db.QUICK_CHECK_MAX_BYTES). A store this user cannot write is read as it
    is; where its views are older than this release, views_outdated says so.

    read_only: open it for a command that only reads: no statement writes
    the file (SQLite's query_only refuses any: db.read_only), so nothing is
    upgraded, derived or filled in on open. What the writers keep (derive.py) is read as it
    is: an older schema through an upgraded copy, another build's views
    through this release's in the connection's temp schema (temp_views),
    and derived_stale says whether an edit by hand or a stopped run left
    work that `zlstore derive` (or any writer) does."""

    def __init__(
        self,
        path: Optional[PathLike] = None,
        create: bool = True,
        check: Optional[bool] = None,
        read_only: bool = False,
    ):
        self.path = Path(path or default_db_path())
        self.conn = dbmod.open_checked(self.path, create=create and not read_only, quick=check, read_only=read_only)
        self.views_outdated = False
        self.temp_views = False  # another build's views, read through this release's (read_only)
        self.read_from_copy: Optional[Path] = None  # an older read-only store: an upgraded copy of it
        self.derived_on_open = False  # what an edit by hand or a stopped run left, derived (refresh_pairs)
        try:
            if read_only:
                self.schema_version = self._read_schema()
            else:
                self.schema_version = self._ensure_schema()
                self.derived_on_open = self.refresh_pairs()
                self._backfill_screening_fingerprints()
        except BaseException:
            self.conn.close()
            raise

    def _read_schema(self) -> int:
        """The schema as a reader that may not write takes it (read_only)."""
        needs = migrations.reading_needs(self.conn)
        if needs == "tables":
            version = self._read_upgraded_copy()
            dbmod.read_only(self.conn)
            return version
        if needs == "views":
            migrations.temp_views(self.conn)
            self.temp_views = True
        dbmod.read_only(self.conn)
        return dbmod.user_version(self.conn)

    @property
    def derived_stale(self) -> bool:
        """Whether derived state waits for a writer: rounds to pair again or
        noise floors to compute (an edit by hand, a run stopped midway). An
        unjudged range is not: the views judge it on read."""
        return derive.pending(self.conn)

    def _migrate(self) -> int:
        """The schema created or brought up to this release, its derived tables
        with it (derive.derive)."""
        return migrations.ensure_schema(self.conn, defaults={"current_rule": ttgir.DEFAULT_RULE}, derive=derive.derive)

    def _ensure_schema(self) -> int:
        try:
            return self._migrate()
        except sqlite3.OperationalError as error:
            if not dbmod.is_readonly_error(error):
                raise
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version < dbmod.SCHEMA_VERSION:
                return self._read_upgraded_copy()
            self.views_outdated = True  # read with the views it has
            return version

    def _read_upgraded_copy(self) -> int:
        """An older store this user cannot write is read through a copy
        upgraded in a temporary directory (the store itself is left as it
        is), so that every command that only reads works on it."""
        scratch = Path(tempfile.mkdtemp(prefix="zlstore-read-"))
        copy = scratch / self.path.name
        with contextlib.closing(sqlite3.connect(copy)) as dest:
            self.conn.backup(dest)
        self.conn.close()
        self.read_from_copy = copy
        self.conn = dbmod.connect(copy)
        return self._migrate()

    def _backfill_screening_fingerprints(self):
        """Every rule's fingerprints for screening cells that a migration left
        without them (migrations.BACKFILL_SETTING); a read-only store is read as it is."""
        if self.setting(migrations.BACKFILL_SETTING) is None:
            return
        try:
            for rule in ttgir.RULES:
                self.compute_fingerprints(rule, root_kind="screen")
            with dbmod.write_transaction(self.conn):
                self.conn.execute("DELETE FROM settings WHERE key = ?", (migrations.BACKFILL_SETTING,))
        except sqlite3.OperationalError as error:
            if not dbmod.is_readonly_error(error):
                raise

    def require_writable(self):
        """Raise db.StoreError (one line: why) where this user cannot write the
        store: before a command that writes starts its work."""
        why = dbmod.write_refusal(self.path)
        if why is not None:
            raise dbmod.StoreError(dbmod.cannot_write(self.path, why))

    def derive(self, rejudge: bool = False) -> bool:
        """Bring every derived table up to date (derive.py), final, in a write
        transaction of its own: the last step of a writer whose earlier
        transactions derived only part (an ingest's batches, a merge's
        roots). rejudge: every range is judged again (a setting changed).
        Returns whether there was anything to do."""
        with dbmod.write_transaction(self.conn):
            return derive.derive(self.conn, rejudge=rejudge)

    def refresh_pairs(self) -> bool:
        """Derive what an edit by hand left stale (re-pair its rounds), and
        judge what a run stopped by a full disk left unjudged (derive.stale),
        or what was judged under another basis (derive.unjudged: a schema
        upgrade, a setting edited by hand): a reader would otherwise judge
        every range of the store on the fly, on every page. Called where
        a writer opens the store; a read-only store, or one on a full disk,
        is read as it is: the views judge an unjudged range when read."""
        stale = derive.stale(self.conn)
        if not stale and not derive.unjudged(self.conn):
            return False
        try:
            return self.derive(rejudge=not stale)
        except sqlite3.OperationalError as error:
            if dbmod.is_readonly_error(error) or dbmod.is_storage_failure(error):
                return False
            raise

    @functools.cached_property
    def db(self):
        """The connection as a sqlite_utils.Database, for queries as dicts
        and table introspection. Made on first use: importing sqlite_utils
        is a fair part of a command's start-up, and ingest needs none of it."""
        import sqlite_utils  # here: a fair part of start-up, which ingest need not pay

        return sqlite_utils.Database(self.conn)

    def close(self):
        self.conn.close()
        if self.read_from_copy is not None:
            shutil.rmtree(self.read_from_copy.parent, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- taking things in -----------------------------------------------------

    def ingest(
        self,
        paths: Union[PathLike, Iterable[PathLike]],
        progress: Optional[Callable[[int, int], None]] = None,
        rehash: bool = False,
    ) -> dict:
        """Store every cell under paths; returns the summary as a dict.
        rehash: read and hash every cell, trusting no stat signature."""
        return self.ingest_summary(paths, progress, rehash=rehash).as_dict()

    def ingest_summary(self, paths, progress=None, command="ingest", require_finished=False, rehash=False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        return Ingester(self, command=command, rehash=rehash).run(
            paths, progress=progress, require_finished=require_finished
        )

    def record(self, cell_dirs: Union[PathLike, Iterable[PathLike]]) -> dict:
        """Store finished cells now (a harness calls this after each cell);
        an unfinished cell (no cell.env with RC yet) is reported, not stored."""
        return self.ingest_summary(cell_dirs, command="record", require_finished=True).as_dict()

    def problems(self, root: Optional[PathLike] = None) -> list:
        """The problems with the input that are still open (open_problems),
        of one root (a name or path; LookupError if unknown) or of every
        path: each with its file, line, message, root and cell."""
        params: tuple  # the root's id and its path's bounds, where one is given
        where, params, found = "", (), None if root is None else self.root(root)
        if found is not None:
            # its own (a merged root's files are named where its source read them), or any under its path
            where = f" WHERE root_id = ? OR {unchanged.at_or_under_test('file')}"
            params = (found["id"], *unchanged.at_or_under(found["path"]))
        rows = [
            dict(r)
            for r in self.db.query(
                f"SELECT file, line, message, root, cell, command, found_at FROM open_problems{where} "
                "ORDER BY file, line, id",
                params,
            )
        ]
        of = None if found is None else [found["id"]]
        derived = (
            roots.claimed_twice(self.conn, of) + roots.missing_sides(self.conn, of) + roots.half_ingested(self.conn, of)
        )
        rows += [
            {
                "file": p.file,
                "line": None,
                "message": p.message,
                "root": name or None,
                "cell": None,
                "command": None,
                "found_at": None,
            }
            for name, p in derived
        ]
        return rows

    # -- rules ------------------------------------------------------------------

    def setting(self, key: str, default: Optional[str] = None) -> Optional[str]:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_setting(self, key: str, value: str):
        """Store a setting; the ranges are judged again under it where it is
        one that judging reads (derive.derive, rejudge)."""
        with dbmod.write_transaction(self.conn):
            self.conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
            derive.derive(self.conn, rejudge=True)

    @property
    def current_rule(self) -> str:
        """The rule every view judges under (judging_settings: the stored one
        where it names a rule, else the default)."""
        try:
            return self.conn.execute("SELECT current_rule FROM judging_settings").fetchone()[0]
        except sqlite3.OperationalError:  # read with another build's views (views_outdated)
            rule = self.setting("current_rule")
            # absent, or NULL by a hand edit: the default, as judging_settings reads it
            return ttgir.DEFAULT_RULE if rule is None else rule

    def set_rule(self, rule: str) -> int:
        """Make rule current for every view; computes its fingerprints first
        where the store lacks them. Returns how many it computed."""
        computed = self.compute_fingerprints(rule)
        self.set_setting("current_rule", ttgir.get_rule(rule).name)
        return computed

    def compute_fingerprints(self, rule: str, batch: int = 500, root_kind: Optional[str] = None) -> int:
        """Fingerprints under rule for every cell that lacks one (of roots of
        root_kind only, where given), computed from the IR stored in the
        database (fingerprints.lacking) and stored; returns how many."""
        rule_obj = ttgir.get_rule(rule)
        conn = self.conn
        new, rows = fingerprints.lacking(conn, str(self.path), rule_obj, batch, root_kind)
        if not rows:
            # no fingerprint lacked (at most some of the digests cached beside
            # them, which the next ingest stores): no write, so that a read
            # under any rule works on a store opened read-only
            return 0
        with dbmod.bulk_checkpoints(conn), dbmod.write_transaction(conn):
            # in key order: the workers answer in any order, and a B-tree
            # takes sorted keys with fewer page splits
            conn.executemany(
                "INSERT OR IGNORE INTO ir_digests (ir_hash, rule, digest) VALUES (?, ?, ?)",
                [(h, rule_obj.name, d) for h, d in sorted(new.items())],
            )
            conn.executemany("INSERT OR IGNORE INTO fingerprints (cell_id, rule, fingerprint) VALUES (?, ?, ?)", rows)
            floors.mark(conn, rule_obj.name)
            derive.derive(conn)
        return len(rows)

    # -- roots ------------------------------------------------------------------

    def roots(self, kind: Optional[str] = None) -> list:
        sql = "SELECT * FROM roots" + (" WHERE kind = ?" if kind else "") + " ORDER BY name"
        return [dict(r) for r in self.db.query(sql, (kind,) if kind else ())]

    def root(self, name_or_path: PathLike) -> dict:
        """A root by its directory name (ab_rlc_20261012_101500) or its path.
        Raises LookupError naming the known roots when there is none, or the
        candidates when a name is ambiguous."""
        text = str(name_or_path).rstrip("/")
        candidates = list(self.db.query("SELECT * FROM roots WHERE path IN (?, ?)", (str(Path(text).resolve()), text)))
        if not candidates:
            candidates = list(self.db.query("SELECT * FROM roots WHERE name = ?", (Path(text).name,)))
        if len(candidates) == 1:
            return dict(candidates[0])
        if candidates:
            paths = ", ".join(c["path"] for c in candidates)
            raise LookupError(f"root name {text!r} is ambiguous: {paths}; give its path")
        known = ", ".join(r["name"] for r in self.roots()) or "none: ingest a runs/ tree first"
        raise LookupError(f"no root {text!r} in {self.path}; known roots: {known}")

    def forget(self, name_or_path: PathLike) -> dict:
        """Remove a root (see root()) and everything derived from it, or the
        stored cells at or under a directory inside one root (a copy that
        claims another cell's side of a round, a copied repeat directory:
        roots.claimed_twice), in one transaction (roots.forget,
        roots.forget_cells), and log it as an ingest run of its own. Returns
        what was removed: the root's name and path (for cells, "cell": the
        directory's path in the root), and counts."""
        given = Path(str(name_or_path))
        at = str(given.resolve())
        cells = (
            []
            if self.conn.execute("SELECT 1 FROM roots WHERE path = ?", (at,)).fetchone()
            else self.conn.execute(
                f"SELECT c.id, roots.name, roots.path, c.root_id FROM (SELECT id, root_id FROM cells "
                f"WHERE {unchanged.AT_OR_UNDER}) c JOIN roots ON roots.id = c.root_id ORDER BY c.id",
                unchanged.at_or_under(at),
            ).fetchall()
        )
        if cells and given.is_symlink():
            # A link is never stored as a cell (an ingest names it and does
            # not enter it): forgetting what it points to would remove the
            # cell it copies, not the link.
            raise LookupError(
                f"{given} is a symbolic link to {at}, which the store holds: nothing of the link "
                "is stored; give the stored directory's own path to forget what is there"
            )
        if len({cell[3] for cell in cells}) > 1:
            raise LookupError(
                f"{at} holds cells of {len({cell[3] for cell in cells})} roots: give a root, or a directory inside one"
            )
        try:
            found = None if cells else self.root(name_or_path)  # None exactly where cells are forgotten
        except LookupError as error:
            raise LookupError(f"{error}; nor is a cell stored at or under {at}") from None
        with dbmod.write_transaction(self.conn):
            record = RunRecord(self.conn, "forget")
            record.start([at if found is None else found["path"]])
            cell_ids = [cell[0] for cell in cells]
            record.close_forgotten(cell_ids, None if found is None else found["id"])
            if found is None:
                summary = {
                    "root": cells[0][1],
                    "cell": os.path.relpath(at, cells[0][2]),
                    "path": at,
                    **roots.forget_cells(self.conn, cell_ids),
                }
            else:
                summary = {"root": found["name"], "path": found["path"], **roots.forget(self.conn, found["id"])}
            record.finish(summary)
        return summary
