"""Copying what the target lacks of one source store into it, by content.

Each root's row, cells and their rows, recorded verdicts, plan and op stops
are copied from the source attached as src, in the transaction
merge.Merger holds for the root (the source's run log is carried by the
run record: journal.RunRecord.carry). What is copied is matched by
content (a root by its identity, a cell by its path inside its root, an IR
text by its hash), so that copying twice adds nothing; the problems a copy
finds are the merge's own, through its run record (journal.py)."""

import json
import sqlite3
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .. import db as dbmod
from .. import caliber, names, provenance
from . import floors, roots
from .cellwriter import stored_environment
from .journal import RunRecord
from ..read.layout import Problem

CHUNK_CELLS = 1024  # cells copied per statement group: the progress bar moves this often


def newer_than(a: tuple, b: tuple) -> bool:
    """Whether (ingested_at, content hash) a is newer than b: the later
    ingest, and between two of the same instant the greater hash, so that
    merging in either order keeps the same one."""
    return tuple(v or "" for v in a) > tuple(v or "" for v in b)


def _columns(conn, schema: str, table: str) -> List[str]:
    return [row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({table})")]


class SourceCopier:
    """What the target lacks of the source attached as src, copied. summary:
    the merge's MergeSummary (counts and conflicts); record: its RunRecord;
    advance(cells): the progress, in source cells passed."""

    def __init__(self, conn: sqlite3.Connection, summary, record: RunRecord, advance: Callable[[int], None]):
        self.conn, self.summary, self.record, self.advance = conn, summary, record, advance
        self.shared_columns: Dict[str, List[str]] = {}

    def root(self, source_path: Path, source: dict) -> int:
        """Copy one source root (a row of src.roots), in the caller's
        transaction: the calibers and environments its cells need, its row,
        its cells, its op stops. Returns the target root's id."""
        self._calibers()
        root_id = self._root_row(source_path, source)
        self._cells(source_path, source, root_id)
        self._stops(source, root_id)
        return root_id

    def _shared(self, table: str) -> List[str]:
        """The target's columns of table that the attached source has (all
        of them: source_tables checked), asked of SQLite once per source."""
        if table not in self.shared_columns:
            source = set(_columns(self.conn, "src", table))
            self.shared_columns[table] = [c for c in _columns(self.conn, "main", table) if c in source]
        return self.shared_columns[table]

    def _stops(self, source: dict, root_id: int):
        """The source's op stops of an until-decided campaign that the target
        lacks (sequential.record_stops: a stop once written is kept, so the
        stores of a --slurm campaign's tasks, each with its own ops', add up),
        with their ranges computed again to show them."""
        added = self.conn.execute(
            f"""INSERT INTO main.op_stops (root_id, op, dtype, round, reason, recorded_at)
               SELECT ?, s.op, s.dtype, s.round, s.reason, s.recorded_at FROM src.op_stops s
               WHERE s.root_id = ? AND s.reason IN ({", ".join("?" * len(names.STOP_REASONS))}) AND NOT EXISTS (
                   SELECT 1 FROM main.op_stops t
                   WHERE t.root_id = ? AND t.op = s.op AND coalesce(t.dtype, '') = coalesce(s.dtype, ''))
               ORDER BY s.id""",
            (root_id, source["id"], *names.STOP_REASONS, root_id),
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
            self.record.store(
                [Problem(path, None, roots.namesake_message(source["name"], source["env_file"], env, others))],
                tell=True,
            )
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
            self.record.close_problems(root_id=root_id)  # the old files': closed, as an ingest closes them
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
        self.record.store(
            [
                Problem(
                    where, None, f"{what} differs between the target and {source_path}: kept the newer, {newer_text}"
                )
            ],
            tell=True,
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
        self.advance(unchanged)
        # the replaced content's: closed, as an ingest closes them
        self.record.close_problems_of_cells("SELECT dst_id FROM temp.merge_cells WHERE copy = 1")
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
            self.advance(min(CHUNK_CELLS, len(chunks) - at))

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
