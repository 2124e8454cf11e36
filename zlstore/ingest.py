"""Walking runs/ trees into the store, a cell whole or not at all.

Everything of a cell is read and parsed first, then written in one
transaction (`record`, a live writer) or in one savepoint of a batch that
commits every BATCH_SECONDS (a whole-tree ingest). Re-ingesting is cheap:
a stored cell whose files and directories have the same sizes and times is
skipped without listing or reading them (unchanged.py); where those changed,
the full scan and then a content hash decide.

This module is the writer, which owns the transaction and walks the tree:
a cell's files are read and parsed by parse.py, on a large tree in worker
processes (parallel.py); its root is stored by rootwriter.py, its rows
written by cellwriter.py."""

import contextlib
import gc
import io
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import db, derive, fingerprints, layout, parallel, parse, roots, stats, unchanged
from .cellwriter import CellWriter, NotStored
from .db import (
    bulk_cache,
    bulk_checkpoints,
    checkpoint_between_commits,
    is_storage_failure,
    retry_busy,
    scratch_in_memory,
    write_transaction,
)
from .layout import Problem
from .parse import ParsedCell, bounded
from .rootwriter import RootWriter

# What a summary reports, in the order it is printed.
COUNTS = (
    "roots",
    "cells_added",
    "cells_replaced",
    "cells_unchanged",
    "cells_unfinished",
    "cells_failed",
    "rows_added",
    "kernels_added",
    "ir_texts_added",
)


def plural(n: int, noun: str) -> str:
    """'1 problem', '2 problems': a count with its noun, as a sentence says it."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


@dataclass
class Summary:
    counts: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    problems: List[Problem] = field(default_factory=list)  # found by this run
    unfinished: List[str] = field(default_factory=list)
    moved: List[Dict[str, str]] = field(default_factory=list)  # roots seen at a new path: root, from, to
    # The stored problems still open in what the run covered, its own
    # included (open_problems): a file that is still bad stays counted.
    open_problems: Optional[int] = None
    state: str = "complete"  # or "stopped: <why>" (a full disk): the counts are what was committed

    @property
    def stopped(self) -> bool:
        return self.state != "complete"

    def problem_count(self) -> int:
        return len(self.problems) if self.open_problems is None else max(self.open_problems, len(self.problems))

    def as_dict(self) -> dict:
        return {
            **self.counts,
            "problems": [p.as_dict() for p in self.problems],
            "open_problems": self.problem_count(),
            "state": self.state,
            "unfinished": self.unfinished,
            "moved": self.moved,
        }

    def line(self) -> str:
        c = self.counts
        return (
            f"{plural(c['roots'], 'root')}, cells: {c['cells_added']} added, {c['cells_replaced']} replaced, "
            f"{c['cells_unchanged']} unchanged"
            + (f", {c['cells_unfinished']} unfinished" if c["cells_unfinished"] else "")
            + (f", {c['cells_failed']} failed" if c["cells_failed"] else "")
            + f"; {c['rows_added']} rows, {c['kernels_added']} kernels, "
            f"{c['ir_texts_added']} new IR texts; {plural(self.problem_count(), 'problem')}"
            + (f"; {plural(len(self.moved), 'root')} moved" if self.moved else "")
        )


# The stat signature of a cell not read in full: matches no signature, so
# that the next ingest reads the cell again (a file inside triton_cache that
# is made readable keeps its directory's times).
UNREAD_SIG = "unread:"

BATCH_SECONDS = 2.0  # a whole-tree ingest commits its cells this often
# ... and pairs the rounds of its last cells this often, uncommitted, and
# computes their ranges: the run's last commit, paid after the workers are
# done, then pairs only the cells written after the last of these (0.05 s,
# not 0.3 s, at the end of a 6,720-cell ingest) and computes their ranges
# (0.03 s, not 0.45 s), and the rest is done while the workers work.
PAIR_CELLS = 400


class CellPaths:
    """The cell directories found, in order, as strings: one NUL-joined
    string per input path, not an object per cell (a campaign has tens of
    thousands; an ingest's memory must not grow with the tree)."""

    def __init__(self):
        self.parts: List[Tuple[str, str]] = []
        self.count = 0

    def add(self, top: Path, found: Iterable[str]) -> int:
        base, joined, n = str(top), io.StringIO(), 0
        for cell in found:
            joined.write(str(cell)[len(base) :])
            joined.write("\0")
            n += 1
        if n:
            self.parts.append((base, joined.getvalue()))
            self.count += n
        return n

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        for base, joined in self.parts:
            start = 0
            while start < len(joined):
                end = joined.index("\0", start)
                yield base + joined[start:end]
                start = end + 1


class _KnownCells(Dict[str, Tuple[int, str, str]]):
    """path -> (id, stat_sig, content_sig), read from the cells table on first use."""

    def __init__(self, conn):
        super().__init__()
        self.conn = conn

    complete = False  # after preload(): a path not in the dict is not stored

    def preload(self, tops):
        """Every stored cell under tops, one query per top: an ingest of a
        whole tree asks once, not once per cell."""
        for top in map(str, tops):
            for path, *row in self.conn.execute(
                f"SELECT path, id, stat_sig, content_sig FROM cells WHERE {unchanged.AT_OR_UNDER}",
                unchanged.at_or_under(top),
            ):
                self[path] = tuple(row)
        self.complete = True

    def get(self, key, default=None):
        if not dict.__contains__(self, key):
            if self.complete:
                return default
            row = self.conn.execute("SELECT id, stat_sig, content_sig FROM cells WHERE path = ?", (key,)).fetchone()
            if row is None:
                return default
            self[key] = tuple(row)
        return dict.get(self, key, default)


class StoreStopped(Exception):
    """The database cannot take more writes (disk full, I/O error): the run
    stops, with what it committed."""


def _resolved(path) -> Path:
    """An input path made absolute, links resolved where they can be (a
    loop or a name too long is left for the walk to name)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _outermost(paths: List[Path]) -> List[Path]:
    """paths, in their order, without one given twice or lying inside another
    (`ingest runs runs/X`): each cell is then found, read and counted once.
    A path that does not exist is kept, to be named."""
    given = set(paths)
    return [
        path
        for path in dict.fromkeys(paths)
        if not os.path.lexists(path) or not any(parent in given for parent in path.parents)
    ]


_BOUNDS = ("at", "low", "high")  # unchanged.at_or_under's, by name


def _file_at_or_under(prefix: str = "") -> str:
    """A file column's test for a path and every path under it, given
    _file_bounds(path, prefix): several paths in one query, each its prefix."""
    return unchanged.at_or_under_test("file", *(f":{prefix}{name}" for name in _BOUNDS))


def _file_bounds(path: str, prefix: str = "") -> dict:
    return {prefix + name: bound for name, bound in zip(_BOUNDS, unchanged.at_or_under(path))}


class _Batch:
    """The cells of a whole-tree ingest share a transaction for up to
    BATCH_SECONDS, each cell in a savepoint of its own: a cell is still stored
    whole or not at all, but the commit, which writes every page the cells
    touched into the WAL, and the derivation (derive.py, not final: the
    rounds' pairs and the ranges) are paid once per batch instead of once
    per cell. Other writers wait at most about that long for the lock. A
    live writer (`record`) commits each cell at once."""

    def __init__(self, conn: sqlite3.Connection, seconds: Optional[float] = None):
        self.conn = conn
        self.started: Optional[float] = None  # time.monotonic() at the batch's BEGIN; None while none is open
        self.seconds = BATCH_SECONDS if seconds is None else seconds
        self.unpaired = 0  # cells written since their rounds were last paired

    def open(self) -> bool:
        """Begin the batch's transaction where none is open; whether it did."""
        if self.conn.in_transaction:
            return False
        scratch_in_memory(self.conn, True)
        retry_busy(lambda: self.conn.execute("BEGIN IMMEDIATE"))
        self.started = time.monotonic()
        return True

    def due(self) -> bool:
        return self.started is not None and time.monotonic() - self.started >= self.seconds

    def written(self):
        """A cell was written: every PAIR_CELLS cells, derive what they
        changed (their rounds' pairs and ranges), not final, while the
        workers prepare the next ones."""
        self.unpaired += 1
        if self.unpaired >= PAIR_CELLS and self.conn.in_transaction:
            derive.derive(self.conn, final=False)
            self.unpaired = 0

    def commit(self, last: bool = False):
        """Commit the cells written so far, derived first, not final (their
        rounds re-paired and their ranges computed; their roots' q-values and
        findings wait for the run's final derivation, Ingester.run: a root's
        family is adjusted once, not per batch), and check the WAL in while
        the workers go on. The last batch leaves it to the run's last
        commits, which check in both at once. (The final derivation does not
        join the last batch's transaction: its scratch, which grows with the
        campaign, would then be in memory.)"""
        if self.conn.in_transaction:
            derive.derive(self.conn, final=False)
            retry_busy(lambda: self.conn.execute("COMMIT"))
            if not last:
                checkpoint_between_commits(self.conn)
        self.started, self.unpaired = None, 0
        scratch_in_memory(self.conn, False)

    def rollback(self):
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.started, self.unpaired = None, 0
        scratch_in_memory(self.conn, False)


# A whole-tree ingest allocates millions of small objects (a row is a
# tuple, a record a dict) and keeps few: with Python's default threshold
# (700) each worker ran about 500 collections, 0.2 s of its CPU, on cores
# the writing process shares. Cycles are still collected, less often.
YOUNG_COLLECTION_OBJECTS = 10_000


@contextlib.contextmanager
def fewer_collections(bulk: bool = True):
    """Python's cyclic garbage collector less often while a bulk write runs
    (and in the workers it forks), as it was after."""
    before = gc.get_threshold()
    if bulk and before[0] and before[0] < YOUNG_COLLECTION_OBJECTS:
        gc.set_threshold(YOUNG_COLLECTION_OBJECTS, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


class Ingester:
    """One ingest or record run over one store."""

    def __init__(self, store, command: str = "ingest", rehash: bool = False):
        self.store = store
        self.conn: sqlite3.Connection = store.conn
        self.command = command
        self.summary = Summary()
        self.root_refs: dict = {}  # layout.root_of's cache: markers per directory, roots per parent
        # Looked up per path (index hits): `zlstore record` of one cell must
        # not read every cell of the store.
        self.cells = _KnownCells(self.conn)
        self.run_id: Optional[int] = None
        self.cell_writer = CellWriter(self.conn)
        self.root_writer = RootWriter(
            self.conn,
            write=self._write,
            problem=self.problem,
            store_problems=self._store_problems,
            close_problems=self._close_problems,
            caliber_id=self.cell_writer.caliber_id,
            summary=self.summary,
        )
        self.roots = self.root_writer.roots  # the roots met, by path: the run counts them
        self.roots_met: set = set()  # by _find: roots of cells found, as strings
        self.batch: Optional[_Batch] = None  # a whole-tree ingest's open batch
        self.bulk = False  # a whole tree's cells, written in batches (_write_cells)
        self.data_version: Optional[int] = None  # the store's, when this run last took the lock
        self.parser = parse.CellParser(fingerprints.ingest_rules(self.conn))
        self.rehash = rehash  # read every cell: its content hash decides, not its stat signature

    # -- the run -----------------------------------------------------------

    def run(
        self, paths: Iterable, progress: Optional[Callable[[int, int], None]] = None, require_finished: bool = False
    ) -> Summary:
        """Store the cells under paths: the run's row; the cells found; the
        cells written, in batches each derived before it commits; the
        problems closed and counted; the run's summary row; then the final
        derivation (derive.py). On a full disk (or a failing one) the run
        stops at once: the summary counts what was committed, and its state
        names the cause; the next run, with space, stores the rest."""
        paths = _outermost([_resolved(p) for p in paths])
        try:
            self._start(paths)
            cells = self._found(paths, require_finished)
            self._write_cells(cells, paths, require_finished, progress)
            self._count_open_problems(paths)
        except (KeyboardInterrupt, sqlite3.DatabaseError) as error:
            if not isinstance(error, KeyboardInterrupt) and not db.interrupted(error):
                raise
            # Ctrl-C (in Python, or inside SQLite): what was committed is
            # kept; the run's row says it was interrupted
            self._forget_uncommitted()
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self._finish("interrupted")
            raise KeyboardInterrupt from None
        except StoreStopped as stop:
            self.summary.state = f"stopped: {stop}"
            self._forget_uncommitted()
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.summary.counts["roots"] = self._stored_roots()
        else:
            self.summary.counts["roots"] = len({root_id for _, root_id in self.roots.values()})
        # After a bulk write, its settings again for the run's last two
        # transactions: the final derivation rewrites every range (with the
        # default 2 MB of page cache it spilled), and the WAL, which holds the
        # last batch, is checked in once, after it (by the close, or the next
        # commit past its size), not by each of the two commits.
        with bulk_checkpoints(self.conn, self.bulk), bulk_cache(self.conn, self.bulk):
            self._finish()  # the run's summary row: a transaction of its own, nothing derived in it
            self._derive_final()  # then the run's final derivation: a transaction of its own
        return self.summary

    def _start(self, paths: List[Path]):
        """The run's row in ingest_runs (state running), in a transaction of
        its own: a log row, which derives nothing."""
        with self._write(deriving=False):
            self.run_id = db.start_run(self.conn, self.command, [str(p) for p in paths])

    def _found(self, paths: List[Path], require_finished: bool) -> "CellPaths":
        """The cells under paths to store (_find); a path that holds none is a problem."""
        cells = CellPaths()
        for path in paths:
            if not os.path.lexists(path):
                self.problem(Problem(str(path), None, "no such file or directory"))
                continue
            if not self._find(path, cells, require_finished):
                self.problem(Problem(str(path), None, "no cell directories found (no run.log or cell.env)"))
        return cells

    def _write_cells(self, cells: "CellPaths", paths: List[Path], require_finished: bool, progress):
        """Store the cells found (_write_all): prepared by worker processes
        where there are many; a whole tree's in batches, each derived before
        it commits (_Batch.commit); a record's or a small tree's each in a
        transaction of its own, derived before it commits (_write)."""
        workers = 0 if require_finished else parallel.worker_count(len(cells))
        if workers or len(cells) > parallel.PARALLEL_MIN_CELLS:  # a forked worker must not query the store
            self.cells.preload(paths)
        prepared = (
            parallel.prepared(cells, workers, parallel.Preparer(self.parser, self.cells, self.rehash))
            if workers
            else ((cell, None) for cell in cells)
        )
        bulk = self.bulk = len(cells) > parallel.PARALLEL_MIN_CELLS
        # closing: the workers end with it
        with (
            contextlib.closing(prepared),
            bulk_checkpoints(self.conn, bulk),
            bulk_cache(self.conn, bulk),
            fewer_collections(bulk),
        ):
            self._write_all(
                prepared,
                len(cells),
                _Batch(self.conn) if bulk and not require_finished else None,
                require_finished,
                progress,
            )

    def _count_open_problems(self, paths: List[Path]):
        """Close the problems the run's paths no longer have, and count those
        still open, with the rounds claimed twice and the screening pairs
        missing a side (roots.py), which are named, not stored."""
        self._close_covered(paths)
        self.summary.open_problems = self._open_problems(paths)
        root_ids = sorted({root_id for _, root_id in self.roots.values()})
        twice = roots.claimed_twice(self.conn, root_ids, [str(path) for path in paths])
        self.summary.problems.extend(problem for _, problem in twice)
        self.summary.open_problems += len(twice)
        # a record stores a screen's cells one by one: its before side waits for its after
        missing = roots.missing_sides(self.conn, root_ids) if self.command != "record" else []
        self.summary.problems.extend(problem for _, problem in missing)
        self.summary.open_problems += len(missing)

    def _finish(self, state: Optional[str] = None):
        """The run's row gets its summary (what was committed, nothing else;
        after Ctrl-C, state 'interrupted'), in a transaction of its own that
        derives nothing: on a full disk this small one may still fit where
        the final derivation does not."""
        if self.run_id is None:
            return
        try:
            with write_transaction(self.conn):
                db.finish_run(self.conn, self.run_id, self.summary.as_dict(), state)
        except sqlite3.DatabaseError as error:
            if state is None and not is_storage_failure(error):
                raise
            # interrupted, or a full disk: the next writer closes the row (db.close_abandoned_runs)

    def _derive_final(self):
        """The run's final derivation (Store.derive), in a transaction of its
        own: the stale noise floors, the q-values of the roots it touched and
        their findings. After Ctrl-C a run does not get here: the next writer
        derives what is left. On a full disk a range left unjudged is judged
        by the views when read (ab_range_unjudged), and stored by the next
        writer that has room."""
        if self.run_id is None:  # the run's row could not be written: nor anything else
            return
        try:
            self.store.derive()
        except sqlite3.OperationalError as error:
            if not is_storage_failure(error):
                raise

    def _stored_roots(self) -> int:
        """The roots this run met that are stored (after a rollback, some may not be)."""
        ids = [root_id for _, root_id in self.roots.values()]
        return sum(1 for root_id in ids if self.conn.execute("SELECT 1 FROM roots WHERE id = ?", (root_id,)).fetchone())

    def _close_covered(self, paths: List[Path]):
        """Close the earlier problems under paths that no stored cell or root
        holds (a cell that could not be stored, a directory that could not be
        listed): this run looked at their files again, and named what it found."""
        where = f"closed_by IS NULL AND run_id < :run AND cell_id IS NULL AND root_id IS NULL AND {_file_at_or_under()}"
        covered = [{"run": self.run_id, **_file_bounds(str(path))} for path in paths]
        covered = [
            bounds
            for bounds in covered  # most runs close nothing: no write lock for them
            if self.conn.execute(f"SELECT 1 FROM ingest_problems WHERE {where} LIMIT 1", bounds).fetchone()
        ]
        if covered:
            with self._write(deriving=False):
                for bounds in covered:
                    self.conn.execute(f"UPDATE ingest_problems SET closed_by = :run WHERE {where}", bounds)

    def _open_problems(self, paths: List[Path]) -> int:
        """The problems still open in what this run covered, and its own."""
        clauses = " OR ".join(_file_at_or_under(f"p{i}_") for i in range(len(paths)))
        bounds = {k: v for i, path in enumerate(paths) for k, v in _file_bounds(str(path), f"p{i}_").items()}
        return self.conn.execute(
            f"SELECT count(*) FROM ingest_problems WHERE closed_by IS NULL AND (run_id = :run OR {clauses or '0'})",
            {"run": self.run_id, **bounds},
        ).fetchone()[0]

    def _write_all(self, prepared, total: int, batch: Optional[_Batch], require_finished: bool, progress):  # noqa: C901 -- every way a batch may be undone
        """Store each (cell, what a worker prepared) in batches, or each in
        a transaction of its own (batch None). The summary counts a batch's
        cells when it commits: a batch rolled back (a full disk) counts none."""
        self.batch = batch
        committed = (dict(self.summary.counts), len(self.summary.problems))
        try:
            try:
                for done, (cell, ready) in enumerate(prepared, 1):
                    if done == 1 and batch:  # the workers are forked by now
                        stats.load_in_background()
                    self.cell(cell if ready is not None else Path(cell), require_finished, ready)
                    if batch and batch.due():
                        batch.commit()
                        committed = (dict(self.summary.counts), len(self.summary.problems))
                    elif batch:
                        batch.written()
                    if progress:
                        progress(done, total)
                if batch:
                    batch.commit(last=True)
            except sqlite3.OperationalError as error:  # a walk's listings, a batch's commit
                if is_storage_failure(error):
                    raise StoreStopped(error) from error
                raise
        except (KeyboardInterrupt, SystemExit):
            if batch:  # every cell written so far is whole: keep them
                batch.commit()
            raise
        except BaseException:
            if batch:
                batch.rollback()
                self.summary.counts = committed[0]
                del self.summary.problems[committed[1] :]
            raise
        finally:
            self.batch = None

    def _find(self, top: Path, cells: "CellPaths", require_finished: bool = False) -> int:
        """Add the cells under top to cells, but for those stored unchanged:
        these are only counted, and their roots looked up (as a cell's are,
        by the first cell of each). Returns how many cells were found."""
        try:
            if require_finished or self.rehash:  # a harness's record: new cells, each to be seen finished first
                walked: List[Problem] = []
                n = cells.add(top, layout.cell_paths(str(top), walked))
                for problem in walked:
                    self.problem(problem)
                return n
            found = unchanged.sort_out(self.conn, str(top), parallel.worker_count)
            cells.add(top, found.changed)
        except sqlite3.OperationalError as error:  # the walk's listings (walked_dirs)
            if is_storage_failure(error):
                raise StoreStopped(error) from error
            raise
        for problem in found.problems:
            self.problem(problem)
        self.summary.counts["cells_unchanged"] += found.unchanged
        for _, root, kind, parts, first_unchanged in found.roots:
            if root not in self.roots_met:
                self.roots_met.add(root)
                if first_unchanged:  # else that first cell is ingested, and looks its root up then
                    self.root_writer.root(layout.RootRef(Path(root), kind, parts))
        return found.cells

    @contextlib.contextmanager
    def _write(self, deriving: bool = True):
        """A cell's writes: a transaction of their own, or a savepoint in a
        whole-tree ingest's batch. A full disk is StoreStopped.
        deriving=False: log rows only (the run's row, problems), which mark
        nothing stale: no result is computed as a side effect of them."""
        try:
            began = self.batch.open() if self.batch is not None else False
            outermost = not self.conn.in_transaction
            with write_transaction(self.conn):
                if began or outermost:
                    self._see_other_writers()
                yield
                if outermost and deriving:
                    # A transaction of its own (a record's cell, each cell of
                    # a small ingest, a root placed outside a batch) derives
                    # before it commits, final: a committed store never holds
                    # stale pairs. A batch derives at its commit (_Batch.commit).
                    derive.derive(self.conn)
        except sqlite3.OperationalError as error:
            if is_storage_failure(error):
                raise StoreStopped(error) from error
            raise

    def problem(self, problem: Problem, store: bool = True):
        self.summary.problems.append(problem)
        if store and self.run_id is not None:
            with self._write(deriving=False):
                self._store_problems([problem])

    def _store_problems(self, problems: List[Problem], cell_id: Optional[int] = None, root_id: Optional[int] = None):
        """A cell's (or a root's) problems stay open while it is stored as
        it was read; others until a later run covers their file (open_problems)."""
        self.conn.executemany(
            "INSERT INTO ingest_problems (run_id, file, line, message, cell_id, root_id) VALUES (?, ?, ?, ?, ?, ?)",
            [(self.run_id, p.file, p.line, p.message, cell_id, root_id) for p in problems],
        )

    def _close_problems(self, cell_id: Optional[int] = None, root_id: Optional[int] = None):
        """Close the open problems of a cell, or a root's own (not its
        cells'): they were its old files'."""
        where = "cell_id = ?" if root_id is None else "root_id = ? AND cell_id IS NULL"
        self.conn.execute(
            f"UPDATE ingest_problems SET closed_by = ? WHERE {where} AND closed_by IS NULL",
            (self.run_id, cell_id if root_id is None else root_id),
        )

    # -- one cell ----------------------------------------------------------

    def cell(self, cell: Path, require_finished: bool = False, prepared=None) -> str:
        """Store one cell; returns what happened: added, replaced, unchanged,
        unfinished or failed."""
        try:
            return self._cell(cell, require_finished, prepared)
        except (KeyboardInterrupt, SystemExit, StoreStopped):
            self._forget_uncommitted()
            raise
        except Exception as error:  # one bad cell never stops the run
            self._forget_uncommitted()
            db.raise_if_interrupted(error)  # Ctrl-C inside SQLite is no problem of the cell
            if is_storage_failure(error):
                raise StoreStopped(error) from error
            self.summary.counts["cells_failed"] += 1
            if isinstance(error, (layout.Unreadable, NotStored)):
                problem = Problem(error.filename or str(cell), None, f"not stored: {error}")
            elif isinstance(error, OSError):
                problem = Problem(
                    error.filename or str(cell), None, f"not stored: cannot read: {error.strerror or error}"
                )
            else:
                problem = Problem(str(cell), None, f"not stored: {type(error).__name__}: {error}")
            self.problem(problem)
            return "failed"

    def _cell(self, cell: Union[Path, str], require_finished: bool, prepared=None) -> str:  # noqa: C901 -- every way a cell may be refused
        """cell: a str only where a worker prepared it (no Path per cell then)."""
        key = str(cell)
        if prepared is not None and isinstance(prepared[2], ParsedCell):
            # first: the worker sends each text once, and later cells of the
            # op need it even when this one goes no further
            self.cell_writer.packed.update(prepared[2].packed)
        if not layout.storable(key):
            raise NotStored(
                "its path holds bytes that are not UTF-8, which the store cannot keep as a path (rename the directory)",
                key,
            )
        if require_finished and not self._finished(cell):  # before the root: store nothing at all
            self.summary.counts["cells_unfinished"] += 1
            self.summary.unfinished.append(key)
            return "unfinished"
        if prepared is not None and isinstance(prepared[2], tuple):
            prepared = None  # the worker failed on it: fail here, the same way
        if prepared is None:
            cell_path = Path(cell)
            bounded(self.root_refs, parse.ROOT_CACHE_ENTRIES)
            ref = layout.locate_root(cell_path, self.root_refs)
        else:
            ref, files_sig, parsed = prepared
        root, root_id = self.root_writer.root(ref)
        if prepared is None:
            files, parsed = parse.scan_cell(cell_path), None
            files_sig = files.stat_sig
        known = self.cells.get(key)
        stat_sig = files_sig + root.files_sig
        if known and not self.rehash and known[1] == stat_sig:
            self.summary.counts["cells_unchanged"] += 1
            return "unchanged"
        if parsed is None:
            if prepared is not None:  # the worker saw it unchanged; this process does not
                files = parse.scan_cell(Path(cell))
                stat_sig = files.stat_sig + root.files_sig
            parsed = self.parser.parse(files, ref, root)
        else:
            parsed.root = root
        if parsed.reread:
            stat_sig = UNREAD_SIG
        if known and known[2] == parsed.content_sig:
            with self._write():
                self.conn.execute("UPDATE cells SET stat_sig = ? WHERE id = ?", (stat_sig, known[0]))
            self.cells[key] = (known[0], stat_sig, known[2])
            self.summary.counts["cells_unchanged"] += 1
            return "unchanged"
        with self._write():
            # Another writer may have stored this cell since we looked.
            row = self.conn.execute(
                "SELECT id, content_sig FROM cells WHERE root_id = ? AND relpath = ?",
                (root_id, parsed.cell_columns()[1]),
            ).fetchone()
            if row and row[1] == parsed.content_sig:
                outcome = "unchanged"
                self.conn.execute("UPDATE cells SET stat_sig = ? WHERE id = ?", (stat_sig, row[0]))
                cell_id = row[0]
            else:
                if row:  # its problems were the old files': closed
                    self._close_problems(cell_id=row[0])
                    self.conn.execute("DELETE FROM cells WHERE id = ?", (row[0],))
                cell_id = self.cell_writer.write(parsed, root_id, stat_sig)
                if parsed.problems:
                    self._store_problems(parsed.problems, cell_id=cell_id)
                outcome = "replaced" if row else "added"
        self.summary.counts["ir_texts_added"] += self.cell_writer.kept(parsed)
        if not self.cells.complete:  # a whole tree: each path comes once, keep nothing per cell
            self.cells[key] = (cell_id, stat_sig, parsed.content_sig)
        self.summary.counts["cells_" + outcome] += 1
        if outcome != "unchanged":  # an unchanged cell's problems were told when it was stored
            self.summary.counts["rows_added"] += parsed.row_count
            self.summary.counts["kernels_added"] += len(parsed.kernels)
            self.summary.problems.extend(parsed.problems)
        return outcome

    def _see_other_writers(self):
        """Called with the write lock just taken. Where another process
        committed since (PRAGMA data_version moved: a forget, a record,
        another ingest), what this run remembers of the store may be gone:
        a forgotten root's id, its blobs and digests, a caliber. Forget it
        all (a root only if its row is gone): it is looked up again. A kernel
        written against a blob that a forget removed failed its cell."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if self.data_version is not None and version != self.data_version:
            self.root_writer.forget_gone()
            self.cell_writer.forget_stored()
            self.cells.clear()
            self.cells.complete = False
        self.data_version = version

    def _forget_uncommitted(self):
        """A rolled-back transaction takes its blobs and calibers with it."""
        self.cell_writer.forget_uncommitted()

    def _finished(self, cell: Union[Path, str]) -> bool:
        """The harness writes cell.env last, with RC: before that the cell is
        still running. A cell.env that cannot be read is not a running cell:
        NotStored, naming it."""
        refused: List[Problem] = []
        done = layout.finished(cell, refused, str(layout.locate_root(Path(cell), self.root_refs).path))
        if refused:
            raise NotStored(refused[0].message, refused[0].file)
        return done
