"""Storing the roots an ingest meets: each found in the store once per run,
and stored, brought up to date or moved here where the store's copy is not
what is on disk.

roots.py says which stored root a root is (by identity, wherever it is
seen); this writes its row, its recorded verdicts (screen.tsv) and its
partition, inside the writer's transactions (ingest.py)."""

import json
import sqlite3
from pathlib import Path
from typing import Callable, ContextManager, Dict, List, Mapping, Optional, Tuple

from .. import caliber, names
from ..read import layout
from . import roots, sequential
from ..db import insert_sql, now
from .journal import RunRecord
from ..read.layout import Problem

# A screen.tsv line as recorded_verdicts keeps it: where it was read; the
# file's columns (layout.SCREEN_COLUMNS), with the verdict's current name
# and, beside it, the name the file spelled; the columns the file had
# beyond those (extra, JSON).
_AFTER_VERDICT = layout.SCREEN_COLUMNS.index("verdict") + 1
RECORDED_VERDICT_COLUMNS = (
    ("root_id", "file", "line")
    + layout.SCREEN_COLUMNS[:_AFTER_VERDICT]
    + ("raw_verdict",)
    + layout.SCREEN_COLUMNS[_AFTER_VERDICT:]
    + ("extra",)
)
_INTEGER_COLUMNS = ("cl_before", "cl_after", "rc_before", "rc_after")
_REAL_COLUMNS = ("elapsed_before", "elapsed_after")


class RootWriter:
    """The roots of one run, by path. What it needs of the run is given:
    record, the run's RunRecord (journal.py), which tells and stores the
    problems a root has (its own stay open while it is stored as it was
    read); write, a write transaction (or savepoint) of the run's;
    caliber_id, the id of a caliber, created where new; moved, the run's
    list of the roots it met at a new path."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        record: RunRecord,
        write: Callable[[], ContextManager],
        caliber_id: Callable[[Optional[tuple]], Optional[int]],
        moved: List[Dict[str, str]],
    ):
        self.conn, self.record, self.write, self.caliber_id, self.moved = conn, record, write, caliber_id, moved
        self.roots: Dict[Path, Tuple[layout.Root, int]] = {}

    def root(self, ref: layout.RootRef) -> Tuple[layout.Root, int]:
        """The stored root of ref (roots.py: known by what it is, wherever
        it is seen), stored or moved here first where it is not."""
        if ref.path in self.roots:
            return self.roots[ref.path]
        root = layout.load_root(ref)
        row = roots.stored_at(self.conn, str(ref.path))
        if row and row[1:] == (root.identity, root.files_sig):
            root_id = row[0]
        else:
            with self.write():  # looked up again inside: another writer may have been first
                root_id = self._place_root(root)
        self._stored_twice(root, root_id)
        self.roots[ref.path] = (root, root_id)
        return root, root_id

    def forget_gone(self):
        """Another process committed: forget the roots whose rows are no
        longer where they were (a forget, a move), to be looked up again."""
        stored = dict(self.conn.execute("SELECT id, path FROM roots").fetchall())
        for path, (_, root_id) in list(self.roots.items()):
            if stored.get(root_id) != str(path):
                del self.roots[path]

    def _place_root(self, root: layout.Root) -> int:
        """The id of the stored root that root is, brought up to date: the
        one at its path; else the one with its identity, moved here (the
        tree was moved or copied, or is seen from elsewhere), setting aside
        another root of its name stored at this path; else a new one."""
        path, identity = str(root.path), root.identity
        here = roots.stored_at(self.conn, path)
        same = roots.with_identity(self.conn, identity, path)
        root_id: Optional[int]
        files_sig: Optional[str]
        if here and (here[1] == identity or not same):
            # where not the same identity, its env file was edited here: read its files again
            root_id, files_sig = here[0], here[2] if here[1] == identity else None
        elif same:
            root_id = same[0][0]
            if here:
                away = roots.set_aside(self.conn, path)
                self.record.problem(
                    Problem(
                        path,
                        None,
                        f"the root stored at this path was another root named {root.name}: it is kept as {away}",
                    )
                )
            moved_from = roots.relocate(self.conn, root_id, path)
            self.moved.append({"root": root.name, "from": moved_from, "to": path})
            files_sig = self.conn.execute("SELECT files_sig FROM roots WHERE id = ?", (root_id,)).fetchone()[0]
        else:
            root_id = files_sig = None
            others = roots.namesakes(self.conn, root.name, identity)
            if others:
                self.record.problem(
                    Problem(path, None, roots.namesake_message(root.name, root.env_file, root.env, others))
                )
        if root_id is None or files_sig != root.files_sig:
            layout.check_root_numbers(root)
            known = root_id is not None
            root_id = self._upsert_root(root, root_id)
            if known:  # its problems were the old files': closed
                self.record.close_problems(root_id=root_id)
            self.record.store(root.problems, root_id=root_id, tell=True)
        return root_id

    def _stored_twice(self, root: layout.Root, root_id: int):
        """Name the other rows of the same root: a store made before roots
        were known by identity holds a moved tree twice."""
        for _, path in roots.with_identity(self.conn, root.identity):
            if path != str(root.path):
                self.record.problem(
                    Problem(
                        str(root.path),
                        None,
                        f"the same root ({root.name}, the same "
                        f"{root.env_file or 'name'}) is also stored from {path}, by an older zlstore: "
                        f"`zlstore forget '{path}'` removes that copy",
                    )
                )

    def _upsert_root(self, root: layout.Root, root_id: Optional[int]) -> int:
        env = root.env
        values = dict(
            path=str(root.path),
            name=root.name,
            kind=root.kind,
            switch=env.get("SWITCH"),
            host=env.get("HOST"),
            started_at=env.get("STARTED_AT"),
            rounds=layout.to_int(env.get("ROUNDS")),
            cards=layout.to_int(env.get("CARDS")),
            screen_root=env.get("SCREEN_ROOT"),
            caliber_id=self.caliber_id(caliber.complete(root.caliber())),
            env_file=root.env_file,
            env=json.dumps(env, sort_keys=True) if root.env_file else None,
            files_sig=root.files_sig,
            ingested_at=now(),
            identity=root.identity,
            stopping=layout.stopping(env) if root.env_file else None,
            min_rounds=layout.to_int(env.get(layout.MIN_ROUNDS_KEY)),
        )
        if root_id is None:
            root_id = self.conn.execute(insert_sql("roots", tuple(values)), tuple(values.values())).lastrowid
            assert root_id is not None  # an INSERT's cursor has its rowid
        else:
            assignments = ", ".join(f"{k} = ?" for k in values)
            self.conn.execute(f"UPDATE roots SET {assignments} WHERE id = ?", (*values.values(), root_id))
            self.conn.execute("DELETE FROM recorded_verdicts WHERE root_id = ?", (root_id,))
            self.conn.execute("DELETE FROM partitions WHERE root_id = ?", (root_id,))
        for file_name, rows in ((layout.SCREEN_TSV, root.screen), (layout.SCREEN_TSV_ORIG, root.screen_orig)):
            self.conn.executemany(
                insert_sql("recorded_verdicts", RECORDED_VERDICT_COLUMNS),
                [_verdict_row(root_id, file_name, line, row) for line, row in rows if row.get("op")],
            )
        self.conn.executemany(
            "INSERT INTO partitions (root_id, line, card, op, dtype, weight_min) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    root_id,
                    line,
                    layout.to_int(row.get("card")),
                    row["op"],
                    row.get("dtype") or "",
                    layout.to_float(row.get("weight_min")),
                )
                for line, row in root.partition
                if row.get("op")
            ],
        )
        for stop in root.stops:  # the campaign's stops/*.tsv: kept once stored, as the runner's own
            sequential.insert_stop(self.conn, root_id, stop.op, stop.dtype, stop.round, stop.reason, stop.recorded_at)
        return root_id


def _verdict_row(root_id: int, file_name: str, line: int, row: Mapping[str, str]) -> tuple:
    """A recorded_verdicts row (RECORDED_VERDICT_COLUMNS) of a screen.tsv line."""
    extra = {k: v for k, v in row.items() if k not in layout.SCREEN_COLUMNS}
    values: Dict[str, object] = {name: row.get(name) or None for name in layout.SCREEN_COLUMNS}
    values.update({name: layout.to_int(row.get(name)) for name in _INTEGER_COLUMNS})
    values.update({name: layout.to_float(row.get(name)) for name in _REAL_COLUMNS})
    values.update(
        root_id=root_id,
        file=file_name,
        line=line,
        dtype=row.get("dtype") or "",
        verdict=names.canonical_verdict(row.get("verdict")),
        raw_verdict=row.get("verdict") or None,
        extra=json.dumps(extra) if extra else None,
    )
    return tuple(values[name] for name in RECORDED_VERDICT_COLUMNS)
