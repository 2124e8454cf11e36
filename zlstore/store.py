"""Store: one database, opened the way every writer needs it, and the
operations the CLI, the runners and datasette share."""

import contextlib
import itertools
import multiprocessing
import os
import sqlite3
import zlib
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from . import db as dbmod
from . import ttgir
from .ingest import Ingester, _worker_count

PathLike = Union[str, os.PathLike]


_reader = None  # in a rescore worker: its own read-only connection


def _text_digests(job) -> list:
    """(hash, digest under rule) of stored IR texts; job: (database path,
    rule name, hashes). Run in a worker, which reads the texts itself."""
    global _reader
    path, rule, hashes = job
    if _reader is None:
        _reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=dbmod.BUSY_TIMEOUT_MS / 1000)
    marks = ", ".join("?" * len(hashes))
    return _digest_rows(rule, _reader.execute(f"SELECT hash, data FROM blobs WHERE hash IN ({marks})", hashes))


def _digest_rows(rule: str, rows) -> list:
    normalize = ttgir.get_rule(rule).normalize
    out = []
    for h, data in rows:
        text = zlib.decompress(data).decode("utf-8", "surrogateescape")
        normalized = normalize(text)
        # Left as it was, a text hashes to its own blob hash (the sha256 of
        # the bytes it was decoded from with surrogateescape).
        out.append((h, h if normalized is text else ttgir.digest(normalized)))
    return out


def default_db_path() -> str:
    """$ZLSTORE_DB, else zlstore.db in the current directory."""
    return os.environ.get("ZLSTORE_DB") or "zlstore.db"


class Store:
    """A zlstore database. Opening one creates or upgrades its schema."""

    def __init__(self, path: Optional[PathLike] = None):
        self.path = Path(path or default_db_path())
        self.db = dbmod.connect(self.path)
        self.schema_version = dbmod.ensure_schema(self.db, defaults={"current_rule": ttgir.DEFAULT_RULE})

    @property
    def conn(self):
        return self.db.conn

    def close(self):
        self.db.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- taking things in -----------------------------------------------------

    def ingest(self, paths: Union[PathLike, Iterable[PathLike]],
               progress: Optional[Callable[[int, int], None]] = None) -> dict:
        """Store every cell under paths; returns the summary as a dict."""
        return self.ingest_summary(paths, progress).as_dict()

    def ingest_summary(self, paths, progress=None, command="ingest", require_finished=False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        return Ingester(self, command=command).run(paths, progress=progress, require_finished=require_finished)

    def record(self, cell_dirs: Union[PathLike, Iterable[PathLike]]) -> dict:
        """Store finished cells now (a harness calls this after each cell);
        an unfinished cell (no cell.env with RC yet) is reported, not stored."""
        return self.ingest_summary(cell_dirs, command="record", require_finished=True).as_dict()

    # -- rules ------------------------------------------------------------------

    def setting(self, key: str, default: Optional[str] = None) -> Optional[str]:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_setting(self, key: str, value: str):
        with dbmod.write_transaction(self.conn):
            self.conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    @property
    def current_rule(self) -> str:
        return self.setting("current_rule", ttgir.DEFAULT_RULE)

    def set_rule(self, rule: str) -> int:
        """Make rule current for every view; computes its fingerprints first
        where the store lacks them. Returns how many it computed."""
        computed = self.compute_fingerprints(rule)
        self.set_setting("current_rule", ttgir.get_rule(rule).name)
        return computed

    def compute_fingerprints(self, rule: str, batch: int = 500) -> int:
        """Fingerprints under rule for every cell that lacks one, from the IR
        stored in the database (never from the runs/ tree). Each distinct IR
        text is normalized once."""
        rule_obj = ttgir.get_rule(rule)
        conn = self.conn
        missing_texts = [h for (h,) in conn.execute(
            """SELECT DISTINCT kernels.ir_hash FROM kernels
               WHERE NOT EXISTS (SELECT 1 FROM ir_digests d WHERE d.ir_hash = kernels.ir_hash AND d.rule = ?)""",
            (rule_obj.name,),
        )]
        # Normalizing is the work: with many texts, worker processes read and
        # normalize them while this one writes their digests, a batch at a time.
        workers = _worker_count(len(missing_texts) // 8)
        with contextlib.ExitStack() as stack:
            if workers:
                pool = stack.enter_context(multiprocessing.get_context("fork").Pool(workers))
                jobs = [(str(self.path), rule_obj.name, missing_texts[i:i + 25])
                        for i in range(0, len(missing_texts), 25)]
                found = pool.imap(_text_digests, jobs)
            else:
                found = (_digest_rows(rule_obj.name, conn.execute(
                    f"SELECT hash, data FROM blobs WHERE hash IN ({', '.join('?' * len(chunk))})", chunk).fetchall())
                    for chunk in (missing_texts[i:i + batch] for i in range(0, len(missing_texts), batch)))
            digests = []
            for part in itertools.chain(found, [None]):
                if part:
                    digests.extend((h, rule_obj.name, digest) for h, digest in part)
                if digests and (part is None or len(digests) >= batch):
                    with dbmod.write_transaction(conn):
                        conn.executemany("INSERT OR IGNORE INTO ir_digests (ir_hash, rule, digest) VALUES (?, ?, ?)",
                                         digests)
                    digests = []
        cells = conn.execute(
            """SELECT cells.id, cells.index_hash FROM cells
               WHERE NOT EXISTS (SELECT 1 FROM fingerprints f WHERE f.cell_id = cells.id AND f.rule = ?)
               ORDER BY cells.id""",
            (rule_obj.name,),
        ).fetchall()
        computed = 0
        for start in range(0, len(cells), batch):
            chunk = cells[start:start + batch]
            ids = [c[0] for c in chunk]
            marks = ", ".join("?" * len(ids))
            pairs = {cell_id: [] for cell_id in ids}
            for cell_id, name, digest in conn.execute(
                f"""SELECT kernels.cell_id, kernels.name, d.digest FROM kernels
                    JOIN ir_digests d ON d.ir_hash = kernels.ir_hash AND d.rule = ?
                    WHERE kernels.cell_id IN ({marks})""",
                (rule_obj.name, *ids),
            ):
                pairs[cell_id].append((name, digest))
            rows = [
                (cell_id, rule_obj.name,
                 ttgir.combine(rule_obj, pairs[cell_id], index_hash if rule_obj.hashes_index else None))
                for cell_id, index_hash in chunk
            ]
            with dbmod.write_transaction(conn):
                conn.executemany(
                    "INSERT OR IGNORE INTO fingerprints (cell_id, rule, fingerprint) VALUES (?, ?, ?)", rows
                )
            computed += len(rows)
        return computed

    # -- roots ------------------------------------------------------------------

    def roots(self, kind: Optional[str] = None) -> list:
        sql = "SELECT * FROM roots" + (" WHERE kind = ?" if kind else "") + " ORDER BY name"
        return [dict(r) for r in self.db.query(sql, (kind,) if kind else ())]

    def root(self, name_or_path: PathLike) -> dict:
        """A root by its directory name (ab_rlc_20261012_101500) or its path.
        Raises LookupError naming the known roots when there is none, or the
        candidates when a name is ambiguous."""
        text = str(name_or_path).rstrip("/")
        candidates = list(self.db.query("SELECT * FROM roots WHERE path = ?", (str(Path(text).resolve()),)))
        if not candidates:
            candidates = list(self.db.query("SELECT * FROM roots WHERE name = ?", (Path(text).name,)))
        if len(candidates) == 1:
            return dict(candidates[0])
        if candidates:
            paths = ", ".join(c["path"] for c in candidates)
            raise LookupError(f"root name {text!r} is ambiguous: {paths}; give its path")
        known = ", ".join(r["name"] for r in self.roots()) or "none: ingest a runs/ tree first"
        raise LookupError(f"no root {text!r} in {self.path}; known roots: {known}")
