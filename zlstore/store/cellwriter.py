"""Writing one parsed cell's rows, inside the transaction its caller holds.

The writer (cellingest.py, for ingest.py) decides whether a cell is stored
and ingest.py owns the transaction; this writes what parse.py made of the cell: its cells row,
measurements, kernels, fingerprints, and the IR texts and digests the
store does not hold yet. What it stored it remembers (a campaign's rounds
compile the same IR), in two steps: pending while the cell's writes may
still be undone, known once they are kept."""

import os
import sqlite3
from typing import Dict, Optional, Tuple

from .. import caliber, provenance
from ..read import layout, parse, ttgir
from ..db import insert_sql, now
from ..read.parse import ParsedCell, bounded

_INSERT_CELL = insert_sql(
    "cells", ("root_id", "caliber_id", "environment_id", "stat_sig", "ingested_at") + parse.CELL_COLUMNS
)
_INSERT_KERNEL = insert_sql("kernels", ("cell_id",) + parse.Kernel._fields)
_INSERT_MEASUREMENT = insert_sql("measurements", parse.MEASUREMENT_COLUMNS)
_INSERT_DENSE_MEASUREMENT = insert_sql("measurements", parse.DENSE_COLUMNS)


class NotStored(Exception):
    """A cell zlstore will not store, and why; filename: what to name."""

    def __init__(self, message: str, filename: str):
        super().__init__(message)
        self.filename = filename


def stored_environment(conn: sqlite3.Connection, values: dict, schema: str = "main") -> int:
    """The id of the environments row of values (its key made from its
    fields), inserted where there is none: what an ingest and a merge both
    store."""
    key, fields = provenance.key(values), provenance.clean(values)
    conn.execute(insert_sql(f"{schema}.environments", ("key", *fields), "INSERT OR IGNORE"), (key, *fields.values()))
    return conn.execute(f"SELECT id FROM {schema}.environments WHERE key = ?", (key,)).fetchone()[0]


class _KnownBlobs(set):
    """Blob hashes known stored; others are looked up, and remembered when
    found. Only a forget deletes blobs (CellWriter.forget_stored forgets
    them all then), and a cell that fails rolls back only its own writes,
    whose hashes are still pending (CellWriter.pending_blobs), not found here."""

    def __init__(self, conn):
        super().__init__()
        self.conn = conn

    def __contains__(self, digest):
        if set.__contains__(self, digest):
            return True
        if self.conn.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone() is None:
            return False
        bounded(self)
        self.add(digest)
        return True


def _read_text_again(parsed: ParsedCell, ir_hash: str) -> bytes:
    """A text this run stored and another process's forget removed since:
    a worker sends each text once, so it is read again from the cell's file."""
    for name, cache_dir, kernel_hash, *_ in parsed.kernels:
        if kernel_hash == ir_hash:
            path = os.path.join(str(parsed.files.path), layout.TRITON_CACHE, cache_dir, name + ".ttgir")
            data = layout.read_bytes(path, str(parsed.ref.path))
            if ttgir.digest(data) != ir_hash:
                raise NotStored("its IR changed while it was ingested: ingest it again", path)
            return data
    raise NotStored(f"its IR text {ir_hash} is gone from the store", str(parsed.files.path))


class CellWriter:
    """Writes parsed cells into one store, inside its caller's transaction
    or savepoint. The caller says when those writes are kept (kept) or
    undone (forget_uncommitted), and when another process may have removed
    what was known stored (forget_stored)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        # Looked up per hash (index hits): `zlstore record` of one cell must
        # not read every blob of the store.
        self.blobs = _KnownBlobs(conn)
        self.pending_blobs: Dict[str, str] = {}  # written in the open transaction: known once it commits
        self.packed: Dict[str, Tuple[int, bytes, Optional[str]]] = {}  # from workers, until stored
        self.digested: set = set()  # texts whose digests this run stored
        self.pending_digested: set = set()
        self.caliber_ids: Dict[tuple, int] = {}
        self.environment_ids: Dict[str, int] = {}

    def write(self, parsed: ParsedCell, root_id: int, stat_sig: str) -> int:
        """Insert the cell's rows (not its problems: the caller's, with its
        run); returns its id."""
        caliber_id = self.caliber_id(parsed.values["caliber"])
        if parsed.index and parsed.index[0] not in self.pending_blobs and parsed.index[0] not in self.blobs:
            self._insert_blob(parsed.index[0], "index.tsv", parsed.index[1])
        environment_id = self.environment_id(parsed.values.get("environment"))
        cell_id = self.conn.execute(
            _INSERT_CELL, (root_id, caliber_id, environment_id, stat_sig, now(), *parsed.cell_columns())
        ).lastrowid
        assert cell_id is not None  # an INSERT's cursor has its rowid
        for dense, rows in parsed.insert_runs():
            self.conn.executemany(
                _INSERT_DENSE_MEASUREMENT if dense else _INSERT_MEASUREMENT, [(cell_id, *row) for row in rows]
            )
        for ir_hash, (raw, _) in parsed.texts.items():
            if ir_hash not in self.pending_blobs and ir_hash not in self.blobs:
                packed = self.packed.get(ir_hash)
                if raw is None and packed is None:  # stored by this run, then a forget removed it
                    raw = _read_text_again(parsed, ir_hash)
                self._insert_blob(ir_hash, "ttgir", raw, packed)
        self.conn.executemany(_INSERT_KERNEL, [(cell_id, *k) for k in parsed.kernels])
        assert parsed.fingerprints is not None  # CellParser.parse computed them
        fingerprints, digests = parsed.fingerprints
        digests = [d for d in digests if d[0] not in self.digested]  # stored by this run already
        self.pending_digested.update(d[0] for d in digests)
        if digests:
            self.conn.executemany("INSERT OR IGNORE INTO ir_digests (ir_hash, rule, digest) VALUES (?, ?, ?)", digests)
        self.conn.executemany(
            "INSERT INTO fingerprints (cell_id, rule, fingerprint) VALUES (?, ?, ?)",
            [(cell_id, rule, fingerprint) for rule, fingerprint in fingerprints],
        )
        return cell_id

    def _insert_blob(
        self, digest: str, kind: str, raw: Optional[bytes], packed: Optional[Tuple[int, bytes, Optional[str]]] = None
    ):
        """raw bytes, or what a worker made of them (parse.packed)."""
        if raw is None:
            assert packed is not None  # write reads a text again where it has neither
            size, data, markers = packed
        else:
            size, data, markers = parse.packed(raw, kind)
        self.conn.execute(
            "INSERT OR IGNORE INTO blobs (hash, kind, size, data, markers) VALUES (?, ?, ?, ?, ?)",
            (digest, kind, size, data, markers),
        )
        self.pending_blobs[digest] = kind

    def caliber_id(self, values: Optional[tuple]) -> Optional[int]:
        """The id of a complete caliber, created on first use inside the
        caller's transaction; None stays None."""
        if values is None:
            return None
        if values not in self.caliber_ids:
            where = " AND ".join(f"{n} = ?" for n in caliber.NAMES)
            row = self.conn.execute(f"SELECT id FROM calibers WHERE {where}", values).fetchone()
            if row is None:
                self.conn.execute(insert_sql("calibers", caliber.NAMES, "INSERT OR IGNORE"), values)
                row = self.conn.execute(f"SELECT id FROM calibers WHERE {where}", values).fetchone()
            self.caliber_ids[values] = row[0]
        return self.caliber_ids[values]

    def environment_id(self, values: Optional[dict]) -> Optional[int]:
        """The id of an environment (provenance.py), created on first use
        inside the cell's transaction; None (none recorded) stays None."""
        if not values:
            return None
        key = provenance.key(values)
        if key not in self.environment_ids:
            self.environment_ids[key] = stored_environment(self.conn, values)
        return self.environment_ids[key]

    def kept(self, parsed: ParsedCell) -> int:
        """The writes of parsed are kept (its savepoint released or its
        transaction committed): what they stored is known stored, and the
        texts a worker sent for the cell are no longer needed. Returns how
        many IR texts they added."""
        bounded(self.blobs)
        bounded(self.digested, 4 * parse.CACHE_ENTRIES)  # an entry per text: a campaign has thousands
        self.digested.update(self.pending_digested)
        self.pending_digested.clear()
        added = 0
        for digest, kind in self.pending_blobs.items():
            self.blobs.add(digest)
            added += kind == "ttgir"
        self.pending_blobs.clear()
        for ir_hash in parsed.texts:  # stored now, by this cell or an earlier one
            self.packed.pop(ir_hash, None)
        return added

    def forget_uncommitted(self):
        """A rolled-back transaction takes its blobs and calibers with it."""
        self.pending_blobs.clear()
        self.pending_digested.clear()
        self.caliber_ids.clear()
        self.environment_ids.clear()

    def forget_stored(self):
        """Another process committed (a forget may have removed blobs,
        digests, calibers, environments): everything is looked up again."""
        self.blobs.clear()
        self.digested.clear()
        self.caliber_ids.clear()
        self.environment_ids.clear()
