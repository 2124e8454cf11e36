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

    from zlstore import Store
    from zlstore.store import merge
    with Store("all.db") as target:
        summary = merge.merge(target, ["host1.db", "host2.db"])
"""

import contextlib
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from .. import db as dbmod
from . import derive, roots
from .fingerprints import cell_rules
from .ingest import plural
from .journal import RunRecord
from ..read.layout import Problem
from .mergecopy import SourceCopier
from .mergesource import SourceError, check_source, prepared_sources

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


class Merger:
    """One merge run into one target store: the sources checked
    (mergesource.py), each root copied in a transaction of its own
    (mergecopy.py), the run's row and problems through its RunRecord
    (journal.py)."""

    def __init__(self, target):
        self.target = target
        self.conn: sqlite3.Connection = target.conn
        self.summary = MergeSummary()
        self.record = RunRecord(self.conn, "merge", self.summary.problems)
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
                self.record.start(p.resolve() for p in paths)
            try:
                self._merge_all(paths, copies)
            except KeyboardInterrupt:
                self.record.close(self.summary.as_dict(), "interrupted")
                raise
            except sqlite3.DatabaseError as error:  # a full disk: the first failure stops the merge
                if dbmod.interrupted(error):  # Ctrl-C inside SQLite (in one of zlstore's SQL functions)
                    self.record.close(self.summary.as_dict(), "interrupted")
                    raise KeyboardInterrupt from None
                self.record.close(self.summary.as_dict(), "stopped", str(error))
                raise
        return self.summary

    def _merge_all(self, paths: List[Path], copies: List[Path]):
        merged_roots = set()
        self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS merge_carried (run_id INTEGER PRIMARY KEY)")
        self.conn.execute("DELETE FROM temp.merge_carried")
        with dbmod.bulk_checkpoints(self.conn):
            for path, copy in zip(paths, copies):
                with self._attached(copy):
                    copier = SourceCopier(self.conn, self.summary, self.record, self._advance)
                    self.conn.execute(
                        "CREATE TEMP TABLE IF NOT EXISTS merge_roots (src_id INTEGER PRIMARY KEY, dst_id INTEGER)"
                    )
                    self.conn.execute("DELETE FROM temp.merge_roots")
                    for source_root in self._source_roots():
                        root_id = self._merge_root(copier, path, source_root)
                        if root_id is not None:
                            merged_roots.add(root_id)
                    self.summary.counts["log_runs_added"] += self.record.carry()
            # Each root's transaction derived its rounds' pairs and ranges;
            # the floors, q-values and judgements, which move with every root,
            # are derived once, here: the merge's final derivation.
            self.target.derive()
            self._complete_fingerprints()
        self.summary.counts["roots"] = len(merged_roots)
        # this merge's problems, and those open of the runs it carried (this time or before)
        self.summary.open_problems = self.record.open_count(carried_runs="SELECT run_id FROM temp.merge_carried")
        # A side of a round two cells claim, as an ingest names it: the merge
        # may have brought the second claimant, or the source held both.
        twice = roots.claimed_twice(self.conn, sorted(merged_roots))
        self.summary.problems.extend(problem for _, problem in twice)
        self.summary.open_problems += len(twice)
        with dbmod.write_transaction(self.conn):
            self.record.finish(self.summary.as_dict())

    @contextlib.contextmanager
    def _attached(self, copy: Path):
        """The private copy of a source (prepared_sources) as schema src, read-only."""
        self.conn.execute("ATTACH DATABASE ? AS src", ("file:" + urllib.parse.quote(str(copy)) + "?mode=ro",))
        try:
            attached = next(r[2] for r in self.conn.execute("PRAGMA database_list") if r[1] == "src")
            if Path(attached).resolve() != copy.resolve():  # an SQLite that does not take URIs in ATTACH
                raise SourceError(f"{copy}: could not be opened read-only (SQLite attached {attached!r})")
            yield
        finally:
            self.conn.execute("DETACH DATABASE src")

    def _source_roots(self) -> List[dict]:
        cursor = self.conn.execute("SELECT * FROM src.roots ORDER BY id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def _merge_root(self, copier: SourceCopier, source_path: Path, source: dict) -> Optional[int]:
        """Merge one root of the attached source, in one transaction
        (SourceCopier.root, then its rounds derived, not final); its id in
        the target, or None where it could not be merged (a problem says why)."""
        counts_before = dict(self.summary.counts)
        kept = len(self.summary.conflicts), len(self.summary.problems)
        cells_before = self.done
        try:
            with dbmod.write_transaction(self.conn):
                root_id = copier.root(source_path, source)
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
            self.record.problem(
                Problem(str(source_path), None, f"root {source['name']} ({source['path']}) not merged: {error}")
            )
            self._advance(
                self.conn.execute("SELECT count(*) FROM src.cells WHERE root_id = ?", (source["id"],)).fetchone()[0]
            )  # passed over: the bar still ends full
            return None

    def _advance(self, cells: int):
        self.done += cells
        if self.progress and cells:
            self.progress(self.done, self.total)

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
