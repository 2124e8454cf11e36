"""Walking runs/ trees into the store, a cell whole or not at all.

Everything of a cell is read and parsed first, then written in one
transaction (`record`, a live writer) or in one savepoint of a batch that
commits every BATCH_SECONDS (a whole-tree ingest). Re-ingesting is cheap:
a stored cell whose files and directories have the same sizes and times is
skipped without listing or reading them (unchanged.py); where those changed,
the full scan and then a content hash decide.

This module is the writer, which owns the transaction and walks the tree:
a cell's files are read and parsed by parse.py, on a large tree in worker
processes (parallel.py); each cell is stored by cellingest.py (its root by
rootwriter.py, its rows by cellwriter.py); the run's row and its problems
are its run record (journal.py)."""

import contextlib
import gc
import io
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .. import db, stats
from . import derive, fingerprints, roots
from ..read import layout, parallel, parse, unchanged
from .cellingest import CellIngest
from .cellwriter import NotStored
from ..db import (
    bulk_cache,
    bulk_checkpoints,
    checkpoint_between_commits,
    is_storage_failure,
    retry_busy,
    scratch_in_memory,
    write_transaction,
)
from .journal import RunRecord
from ..read.layout import Problem

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
    """One ingest or record run over one store: the walk and the batches. A
    cell is stored by cellingest.CellIngest; the run's row and its problems
    are its RunRecord (journal.py)."""

    def __init__(self, store, command: str = "ingest", rehash: bool = False):
        self.store = store
        self.conn: sqlite3.Connection = store.conn
        self.command = command
        self.summary = Summary()
        # a problem told on its own is a log row: its write derives nothing
        self.record = RunRecord(self.conn, command, self.summary.problems, write=lambda: self._write(deriving=False))
        self.rehash = rehash  # read every cell: its content hash decides, not its stat signature
        self.cell_ingest = CellIngest(
            self.conn,
            self.record,
            self._write,
            self.summary,
            parse.CellParser(fingerprints.ingest_rules(self.conn)),
            rehash,
        )
        self.root_writer = self.cell_ingest.root_writer
        self.roots = self.root_writer.roots  # the roots met, by path: the run counts them
        self.roots_met: set = set()  # by _find: roots of cells found, as strings
        self.batch: Optional[_Batch] = None  # a whole-tree ingest's open batch
        self.bulk = False  # a whole tree's cells, written in batches (_write_cells)
        self.data_version: Optional[int] = None  # the store's, when this run last took the lock

    # -- the run -----------------------------------------------------------

    def run(
        self, paths: Iterable, progress: Optional[Callable[[int, int], None]] = None, require_finished: bool = False
    ) -> Summary:
        """Store the cells under paths: the run's row (RunRecord.start, in a
        transaction of its own that derives nothing); the cells found; the
        cells written, in batches each derived before it commits; the
        problems closed and counted; the run's summary row; then the final
        derivation (derive.py). On a full disk (or a failing one) the run
        stops at once: the summary counts what was committed, and its state
        names the cause; the next run, with space, stores the rest."""
        paths = _outermost([_resolved(p) for p in paths])
        try:
            with self._write(deriving=False):
                self.record.start(paths)
            cells = self._found(paths, require_finished)
            self._write_cells(cells, paths, require_finished, progress)
            self._count_open_problems(paths)
        except (KeyboardInterrupt, sqlite3.DatabaseError) as error:
            if not isinstance(error, KeyboardInterrupt) and not db.interrupted(error):
                raise
            # Ctrl-C (in Python, or inside SQLite): what was committed is
            # kept; the run's row says it was interrupted
            self.cell_ingest.forget_uncommitted()
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self._finish("interrupted")
            raise KeyboardInterrupt from None
        except StoreStopped as stop:
            self.summary.state = f"stopped: {stop}"
            self.cell_ingest.forget_uncommitted()
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

    def _found(self, paths: List[Path], require_finished: bool) -> "CellPaths":
        """The cells under paths to store (_find); a path that holds none is a problem."""
        cells = CellPaths()
        for path in paths:
            if not os.path.lexists(path):
                self.record.problem(Problem(str(path), None, "no such file or directory"))
                continue
            if not self._find(path, cells, require_finished):
                self.record.problem(Problem(str(path), None, "no cell directories found (no run.log or cell.env)"))
        return cells

    def _write_cells(self, cells: "CellPaths", paths: List[Path], require_finished: bool, progress):
        """Store the cells found (_write_all): prepared by worker processes
        where there are many; a whole tree's in batches, each derived before
        it commits (_Batch.commit); a record's or a small tree's each in a
        transaction of its own, derived before it commits (_write)."""
        workers = 0 if require_finished else parallel.worker_count(len(cells))
        known = self.cell_ingest.known
        if workers or len(cells) > parallel.PARALLEL_MIN_CELLS:  # a forked worker must not query the store
            known.preload(paths)
        prepared = (
            parallel.prepared(cells, workers, parallel.Preparer(self.cell_ingest.parser, known, self.rehash))
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
        """Close the problems the run's paths no longer have
        (RunRecord.close_covered), and count those still open
        (RunRecord.open_count), with the rounds claimed twice and the
        screening pairs missing a side (roots.py), which are named, not stored."""
        self.record.close_covered(paths)
        self.summary.open_problems = self.record.open_count(paths)
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
        derives nothing (RunRecord.close): on a full disk this small one may
        still fit where the final derivation does not."""
        self.record.close(self.summary.as_dict(), state)

    def _derive_final(self):
        """The run's final derivation (Store.derive), in a transaction of its
        own: the stale noise floors, the q-values of the roots it touched and
        their findings. After Ctrl-C a run does not get here: the next writer
        derives what is left. On a full disk a range left unjudged is judged
        by the views when read (ab_range_unjudged), and stored by the next
        writer that has room."""
        if self.record.run_id is None:  # the run's row could not be written: nor anything else
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
                    self.record.problem(problem)
                return n
            found = unchanged.sort_out(self.conn, str(top), parallel.worker_count)
            cells.add(top, found.changed)
        except sqlite3.OperationalError as error:  # the walk's listings (walked_dirs)
            if is_storage_failure(error):
                raise StoreStopped(error) from error
            raise
        for problem in found.problems:
            self.record.problem(problem)
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

    def cell(self, cell: Path, require_finished: bool = False, prepared=None) -> str:
        """Store one cell (CellIngest.store); returns what happened: added,
        replaced, unchanged, unfinished or failed. One bad cell never stops
        the run: it is a problem."""
        try:
            return self.cell_ingest.store(cell, require_finished, prepared)
        except (KeyboardInterrupt, SystemExit, StoreStopped):
            self.cell_ingest.forget_uncommitted()
            raise
        except Exception as error:
            self.cell_ingest.forget_uncommitted()
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
            self.record.problem(problem)
            return "failed"

    def _see_other_writers(self):
        """Called with the write lock just taken. Where another process
        committed since (PRAGMA data_version moved: a forget, a record,
        another ingest), what this run remembers of the store may be gone
        (CellIngest.forget_cached). A kernel written against a blob that a
        forget removed failed its cell."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if self.data_version is not None and version != self.data_version:
            self.cell_ingest.forget_cached()
        self.data_version = version
