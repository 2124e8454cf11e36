"""The run record: a writing run's row in the run log and its problems, one
object for every writer.

The writers are ingest, record, merge, forget and a campaign's op that
failed outside any cell.

A run's row in `ingest_runs` names its process while it runs (host, pid,
the process's start time), so that a later writer can tell a run that was
killed from one that is still going, and close it (close_abandoned_runs);
its summary replaces that when it finishes. A problem in `ingest_problems`
stays open while what it names is stored as it was read (a cell's, a
root's own), or, where it names neither, until a later run covers its file;
a forget closes those of what it removed.

A merge carries the runs and problems of each source it reads into the
target's log (RunRecord.carry), matched by content, so that merging twice
adds nothing.

Everything here writes inside the transaction its caller holds, but for
RunRecord.problem and RunRecord.close_covered, which take the run's write
(RunRecord.write: an ingest's savepoint, where a batch is open), and
RunRecord.close and RunRecord.carry, each a transaction of its own. This is
the one module that writes ingest_runs and ingest_problems
(tests/test_journal.py)."""

import json
import os
import socket
import sqlite3
from pathlib import Path
from typing import Callable, ContextManager, Iterable, List, Optional, Sequence

from .. import db
from ..read import unchanged
from ..read.layout import Problem

# -- whose runs are unfinished ---------------------------------------------------


def _process_start(pid) -> Optional[str]:
    """When the process started (in clock ticks since boot: /proc), so that a
    pid used again by another process is not taken for the one recorded."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _running_owner() -> dict:
    return {"state": "running", "host": socket.gethostname(), "pid": os.getpid(), "pid_started": _process_start("self")}


def _gone(owner: dict) -> bool:
    """Whether the process an unfinished run's row names is known to have
    ended: on this host, and no process of that pid, or one started at
    another time. A run of another host is never judged from here."""
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        pass
    started = _process_start(owner["pid"])
    return started is not None and owner.get("pid_started") not in (None, started)


ABANDONED = "its process ended before the run finished (killed?); what it committed is kept"


def killed(summary: Optional[str], finished: bool) -> bool:
    """Whether a run's row (its summary, whether it has finished_at) is one
    whose process was killed before it finished it: closed as such by a
    later writer (close_abandoned_runs), or not yet, its process gone."""
    try:
        owner = json.loads(summary) if summary else {}
    except ValueError:
        return False
    if not isinstance(owner, dict):
        return False
    if finished:
        return owner.get("state") == "interrupted" and owner.get("why") == ABANDONED
    return owner.get("state") == "running" and _gone(owner)


def close_abandoned_runs(conn: sqlite3.Connection, by: Optional[int] = None) -> int:
    """Close the unfinished rows of runs (ingest, record, merge, forget)
    whose process ended without finishing them (a kill -9, a lost node):
    finished_at is set and the summary says interrupted. Inside the
    caller's write transaction. Returns how many."""
    closed = 0
    for run_id, summary in conn.execute("SELECT id, summary FROM ingest_runs WHERE finished_at IS NULL").fetchall():
        try:
            owner = json.loads(summary) if summary else {}
        except ValueError:
            continue
        if isinstance(owner, dict) and owner.get("state") == "running" and _gone(owner):
            owner.update(state="interrupted", closed_by=by, why=ABANDONED)
            conn.execute(
                "UPDATE ingest_runs SET finished_at = ?, summary = ? WHERE id = ?",
                (db.now(), json.dumps(owner), run_id),
            )
            closed += 1
    return closed


def insert_finished(conn: sqlite3.Connection, values: Sequence) -> int:
    """A run's row written finished, in the caller's transaction: values are
    its started_at, finished_at, command, paths (JSON) and summary (JSON)
    (a run carried from another store by a merge; log_problem's)."""
    return db.inserted_id(
        conn.execute(
            "INSERT INTO ingest_runs (started_at, finished_at, command, paths, summary) VALUES (?, ?, ?, ?, ?)", values
        )
    )


def log_problem(conn: sqlite3.Connection, command: str, paths: List[str], file: str, message: str):
    """A problem outside any cell (a campaign's op that failed), as a run of
    its own that is over when written, in a transaction of its own."""
    with db.write_transaction(conn):
        record = RunRecord(conn, command)
        record.logged(paths, {"problems": [message]})
        record.store([Problem(file, None, message)])


# -- a merged store's log: matched by content ----------------------------------

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


# -- the problems under a run's paths ------------------------------------------

_BOUNDS = ("at", "low", "high")  # unchanged.at_or_under's, by name


def _file_at_or_under(prefix: str = "") -> str:
    """A file column's test for a path and every path under it, given
    _file_bounds(path, prefix): several paths in one query, each its prefix."""
    return unchanged.at_or_under_test("file", *(f":{prefix}{name}" for name in _BOUNDS))


def _file_bounds(path: str, prefix: str = "") -> dict:
    return {prefix + name: bound for name, bound in zip(_BOUNDS, unchanged.at_or_under(path))}


class RunRecord:
    """One writing run as the store logs it: its row in ingest_runs and the
    problems it finds. problems: the list of those the run found (its
    summary's), told as they come; write: the run's write transaction for a
    problem told on its own (an ingest's savepoint inside a batch), by
    default a transaction of its own."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        command: str,
        problems: Optional[List[Problem]] = None,
        write: Optional[Callable[[], ContextManager]] = None,
    ):
        self.conn = conn
        self.command = command
        self.run_id: Optional[int] = None  # None until start(): nothing is stored then
        self.problems: List[Problem] = [] if problems is None else problems
        self.write: Callable[[], ContextManager] = write or (lambda: db.write_transaction(conn))

    # -- the run's row -------------------------------------------------------

    def start(self, paths: Iterable) -> int:
        """The run's row (state running, naming this process until finish),
        in the caller's write transaction; the runs an earlier killed
        process left unfinished are closed first."""
        close_abandoned_runs(self.conn)
        self.run_id = db.inserted_id(
            self.conn.execute(
                "INSERT INTO ingest_runs (started_at, command, paths, summary) VALUES (?, ?, ?, ?)",
                (db.now(), self.command, json.dumps([str(p) for p in paths]), json.dumps(_running_owner())),
            )
        )
        return self.run_id

    def logged(self, paths: Iterable, summary: dict) -> int:
        """The row of a run that is over as it is logged (log_problem's),
        written finished, in the caller's transaction."""
        at = db.now()
        self.run_id = insert_finished(
            self.conn, (at, at, self.command, json.dumps([str(p) for p in paths]), json.dumps(summary))
        )
        return self.run_id

    def finish(self, summary: dict, state: Optional[str] = None):
        """The run's row gets its summary (state: 'interrupted' where Ctrl-C
        stopped it; what it committed is kept), in the caller's transaction."""
        assert self.run_id is not None  # start() wrote the row
        if state is not None:
            summary = {**summary, "state": state}
        self.conn.execute(
            "UPDATE ingest_runs SET finished_at = ?, summary = ? WHERE id = ?",
            (db.now(), json.dumps(summary), self.run_id),
        )

    def close(self, summary: dict, state: Optional[str] = None, why: Optional[str] = None):
        """finish, in a transaction of its own that derives nothing, where the
        store still takes a write: after Ctrl-C (a state), or on a full or
        failing disk, the next writer closes the row (close_abandoned_runs)."""
        if self.run_id is None:  # the row could not be written: nor anything else
            return
        try:
            with db.write_transaction(self.conn):
                self.finish({**summary, **({"why": why} if why else {})}, state)
        except sqlite3.DatabaseError as error:
            if state is None and not db.is_storage_failure(error):
                raise

    # -- its problems --------------------------------------------------------

    def problem(self, problem: Problem):
        """Tell a problem of the run and store it, in the run's write (told
        only, where the run's row could not be written)."""
        self.problems.append(problem)
        if self.run_id is not None:
            with self.write():
                self.store([problem])

    def store(
        self, problems: List[Problem], cell_id: Optional[int] = None, root_id: Optional[int] = None, tell: bool = False
    ):
        """Store problems of the run (tell: and tell them), in the caller's
        transaction. A cell's (or a root's) stay open while it is stored as
        it was read; others until a later run covers their file (open_count)."""
        self.conn.executemany(
            "INSERT INTO ingest_problems (run_id, file, line, message, cell_id, root_id) VALUES (?, ?, ?, ?, ?, ?)",
            [(self.run_id, p.file, p.line, p.message, cell_id, root_id) for p in problems],
        )
        if tell:
            self.problems.extend(problems)

    def close_problems(self, cell_id: Optional[int] = None, root_id: Optional[int] = None):
        """Close the open problems of a cell, or a root's own (not its
        cells'): they were its old files'."""
        where = "cell_id = ?" if root_id is None else "root_id = ? AND cell_id IS NULL"
        self.conn.execute(
            f"UPDATE ingest_problems SET closed_by = ? WHERE {where} AND closed_by IS NULL",
            (self.run_id, cell_id if root_id is None else root_id),
        )

    def close_problems_of_cells(self, cells_sql: str):
        """Close the open problems of the cells a query selects (a merge's
        cells it replaced): their content is gone."""
        self.conn.execute(
            f"UPDATE ingest_problems SET closed_by = ? WHERE closed_by IS NULL AND cell_id IN ({cells_sql})",
            (self.run_id,),
        )

    def close_forgotten(self, cell_ids: List[int], root_id: Optional[int]):
        """Close every open problem of a root (its own, its cells'), or of
        cells: what is forgotten has none left (a later ingest of its files
        names them again)."""
        self.conn.execute(
            "UPDATE ingest_problems SET closed_by = ? WHERE closed_by IS NULL AND (cell_id IN "
            "(SELECT value FROM json_each(?)) OR root_id = ? OR cell_id IN (SELECT id FROM cells WHERE root_id = ?))",
            (self.run_id, json.dumps(cell_ids), root_id, root_id),
        )

    def close_covered(self, paths: List[Path]):
        """Close the earlier problems under paths that no stored cell or root
        holds (a cell that could not be stored, a directory that could not be
        listed): this run looked at their files again, and named what it
        found. In the run's write, taken only where there is one to close."""
        where = f"closed_by IS NULL AND run_id < :run AND cell_id IS NULL AND root_id IS NULL AND {_file_at_or_under()}"
        covered = [{"run": self.run_id, **_file_bounds(str(path))} for path in paths]
        covered = [
            bounds
            for bounds in covered  # most runs close nothing: no write lock for them
            if self.conn.execute(f"SELECT 1 FROM ingest_problems WHERE {where} LIMIT 1", bounds).fetchone()
        ]
        if covered:
            with self.write():
                for bounds in covered:
                    self.conn.execute(f"UPDATE ingest_problems SET closed_by = :run WHERE {where}", bounds)

    def open_count(self, paths: Sequence[Path] = (), carried_runs: Optional[str] = None) -> int:
        """The problems still open that this run found, those under paths
        (what an ingest covered), and those of the runs a query selects (the
        runs a merge carried)."""
        clauses = [_file_at_or_under(f"p{i}_") for i in range(len(paths))]
        if carried_runs is not None:
            clauses.append(f"run_id IN ({carried_runs})")
        bounds = {k: v for i, path in enumerate(paths) for k, v in _file_bounds(str(path), f"p{i}_").items()}
        return self.conn.execute(
            "SELECT count(*) FROM ingest_problems WHERE closed_by IS NULL "
            f"AND (run_id = :run OR {' OR '.join(clauses) or '0'})",
            {"run": self.run_id, **bounds},
        ).fetchone()[0]

    # -- a merged store's log ----------------------------------------------

    def carry(self) -> int:
        """A merge's: the runs and problems of the source attached as src
        (merge.Merger) that the target lacks (the same start, command,
        paths and summary), in one transaction.
        Each problem of the source, brought now or by an earlier merge, is
        tied to the target's cell or root it names, and is open there while
        it is open in the source and the target holds what it names as the
        source read it (a cell of the same content, root files of the same
        signature), as an ingest keeps its own; one the source closed is
        closed. One that names neither stays as the target has it. Returns how
        many runs it added."""
        conn = self.conn
        with db.write_transaction(conn):
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
                {"now": db.now()},
            ).fetchall()
            for source_id, *values in missing:
                run_id = insert_finished(conn, values)
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
            return len(missing)
