"""One cell of an ingest or a record into the store, whole or not at all:
its root, the unchanged checks, and its rows written in the run's write.

A stored cell whose files have the same stat signature is unchanged
without being read; where they changed, the cell is parsed (here, or
already by a worker: parallel.py) and a content hash equal to the stored
one still leaves it unchanged; else its rows are written (cellwriter.py),
the old ones and their problems replaced. ingest.py holds the walk and the
batches, and says whose write a cell's is."""

import sqlite3
from pathlib import Path
from typing import Callable, ContextManager, Dict, List, Tuple, Union

from ..read import layout, parse, unchanged
from .cellwriter import CellWriter, NotStored
from .journal import RunRecord
from ..read.layout import Problem
from ..read.parse import ParsedCell, bounded
from .rootwriter import RootWriter

# The stat signature of a cell not read in full: matches no signature, so
# that the next ingest reads the cell again (a file inside triton_cache that
# is made readable keeps its directory's times).
UNREAD_SIG = "unread:"


class KnownCells(Dict[str, Tuple[int, str, str]]):
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


class CellIngest:
    """The cells of one run, each stored by store(). record: the run's
    RunRecord (a cell's problems, a root's); write: the run's write for a
    cell (ingest.Ingester._write: a transaction, or a savepoint of a batch);
    summary: the run's ingest.Summary, which counts the outcomes."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        record: RunRecord,
        write: Callable[[], ContextManager],
        summary,
        parser: parse.CellParser,
        rehash: bool = False,
    ):
        self.conn, self.record, self.write, self.summary = conn, record, write, summary
        self.parser = parser
        self.rehash = rehash  # read every cell: its content hash decides, not its stat signature
        self.root_refs: dict = {}  # layout.root_of's cache: markers per directory, roots per parent
        # Looked up per path (index hits): `zlstore record` of one cell must
        # not read every cell of the store.
        self.known = KnownCells(conn)
        self.cell_writer = CellWriter(conn)
        self.root_writer = RootWriter(
            conn, record=record, write=write, caliber_id=self.cell_writer.caliber_id, moved=summary.moved
        )

    def store(self, cell: Union[Path, str], require_finished: bool, prepared=None) -> str:  # noqa: C901 -- every way a cell may be refused
        """Store one cell; returns what happened: added, replaced, unchanged
        or unfinished (an error, for the caller to count as failed). cell: a
        str only where a worker prepared it (no Path per cell then)."""
        key, counts = str(cell), self.summary.counts
        if prepared is not None and isinstance(prepared[2], ParsedCell):
            # first: the worker sends each text once, and later cells of the
            # op need it even when this one goes no further
            self.cell_writer.packed.update(prepared[2].packed)
        if not layout.storable(key):
            raise NotStored(
                "its path holds bytes that are not UTF-8, which the store cannot keep as a path (rename the directory)",
                key,
            )
        if require_finished and not self.finished(cell):  # before the root: store nothing at all
            counts["cells_unfinished"] += 1
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
        known = self.known.get(key)
        stat_sig = files_sig + root.files_sig
        if known and not self.rehash and known[1] == stat_sig:
            counts["cells_unchanged"] += 1
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
            with self.write():
                self.conn.execute("UPDATE cells SET stat_sig = ? WHERE id = ?", (stat_sig, known[0]))
            self.known[key] = (known[0], stat_sig, known[2])
            counts["cells_unchanged"] += 1
            return "unchanged"
        cell_id, outcome = self._write(parsed, root_id, stat_sig)
        counts["ir_texts_added"] += self.cell_writer.kept(parsed)
        if not self.known.complete:  # a whole tree: each path comes once, keep nothing per cell
            self.known[key] = (cell_id, stat_sig, parsed.content_sig)
        counts["cells_" + outcome] += 1
        if outcome != "unchanged":  # an unchanged cell's problems were told when it was stored
            counts["rows_added"] += parsed.row_count
            counts["kernels_added"] += len(parsed.kernels)
            self.record.problems.extend(parsed.problems)
        return outcome

    def _write(self, parsed: ParsedCell, root_id: int, stat_sig: str) -> Tuple[int, str]:
        """The cell's rows, in the run's write: (its id, added, replaced or
        unchanged, where another writer stored the same content since)."""
        with self.write():
            # Another writer may have stored this cell since we looked.
            row = self.conn.execute(
                "SELECT id, content_sig FROM cells WHERE root_id = ? AND relpath = ?",
                (root_id, parsed.cell_columns()[1]),
            ).fetchone()
            if row and row[1] == parsed.content_sig:
                self.conn.execute("UPDATE cells SET stat_sig = ? WHERE id = ?", (stat_sig, row[0]))
                return row[0], "unchanged"
            if row:  # its problems were the old files': closed
                self.record.close_problems(cell_id=row[0])
                self.conn.execute("DELETE FROM cells WHERE id = ?", (row[0],))
            cell_id = self.cell_writer.write(parsed, root_id, stat_sig)
            if parsed.problems:
                self.record.store(parsed.problems, cell_id=cell_id)
            return cell_id, "replaced" if row else "added"

    def finished(self, cell: Union[Path, str]) -> bool:
        """The harness writes cell.env last, with RC: before that the cell is
        still running. A cell.env that cannot be read is not a running cell:
        NotStored, naming it."""
        refused: List[Problem] = []
        done = layout.finished(cell, refused, str(layout.locate_root(Path(cell), self.root_refs).path))
        if refused:
            raise NotStored(refused[0].message, refused[0].file)
        return done

    def forget_cached(self):
        """Another process committed: what this run remembers of the store
        may be gone (a forgotten root's id, its blobs and digests, a
        caliber). Forget it all (a root only if its row is gone): it is
        looked up again."""
        self.root_writer.forget_gone()
        self.cell_writer.forget_stored()
        self.known.clear()
        self.known.complete = False

    def forget_uncommitted(self):
        """A rolled-back transaction takes its blobs and calibers with it."""
        self.cell_writer.forget_uncommitted()
