"""Stores whose IR blobs a hostile source could hold (issue 46, items 1 and
4): a pair's kernels made huge, or a blob that lies about itself. Used by
tests/test_hostile_pages.py, tests/test_hostile_stores.py and
bench/hostile_stores.py."""

import hashlib
import sqlite3
import zlib
from typing import Tuple


def first_pair(conn: sqlite3.Connection) -> Tuple[str, str, str, int, int]:
    """(root, op, dtype, before cell, after cell) of a screening pair whose cells have kernels."""
    return conn.execute(
        """SELECT root, op, dtype, before_cell_id, after_cell_id FROM verdicts_by_rule
           WHERE before_cell_id IN (SELECT cell_id FROM kernels) AND after_cell_id IN (SELECT cell_id FROM kernels)
           ORDER BY root, op, dtype LIMIT 1"""
    ).fetchone()


def text_of(lines: int, seed: str) -> bytes:
    return "".join(f"%{i} = addi %{seed}, %c : i{i % 97}\n" for i in range(lines)).encode()


def put_blob(conn: sqlite3.Connection, raw: bytes, size=None, data=None, digest=None) -> str:
    """A blob row for raw (or what a hostile store claims of it): its hash."""
    digest = digest or hashlib.sha256(raw).hexdigest()
    conn.execute(
        "INSERT OR REPLACE INTO blobs (hash, kind, size, data, markers) VALUES (?, 'ttgir', ?, ?, NULL)",
        (digest, len(raw) if size is None else size, zlib.compress(raw, 1) if data is None else data),
    )
    return digest


def huge_pair(path, lines: int = 1_000_000):
    """Every kernel of the first pair's two cells: one IR text of `lines`
    lines, a little different on each side (issue 46, item 1). Returns
    (root, op, dtype)."""
    with sqlite3.connect(path) as conn:
        root, op, dtype, before, after = first_pair(conn)
        for cell, seed in ((before, "b"), (after, "a")):
            digest = put_blob(conn, text_of(lines, seed))
            conn.execute("UPDATE kernels SET ir_hash = ? WHERE cell_id = ?", (digest, cell))
    return root, op, dtype


def bomb() -> Tuple[bytes, int]:
    """(zlib data, what it inflates to): a few hundred KB inflating to 300 MB."""
    inflater = zlib.compressobj(9)
    chunk = b"\0" * (1 << 20)
    data = b"".join(inflater.compress(chunk) for _ in range(300)) + inflater.flush()
    return data, 300 << 20


def lying_blob(path, how: str) -> str:
    """The first pair's before kernel pointed at a blob that lies (how:
    'bomb', 'size' (a claim of 2^50 bytes), 'not zlib', 'hash' (bytes that
    are not the ones its hash names), 'short' (a size claim past its bytes)).
    Returns the blob's hash."""
    raw = text_of(100, "x")
    with sqlite3.connect(path) as conn:
        _, _, _, before, _ = first_pair(conn)
        if how == "bomb":
            data, _ = bomb()
            digest = put_blob(conn, raw, size=len(raw), data=data, digest=hashlib.sha256(b"bomb").hexdigest())
        elif how == "size":
            digest = put_blob(conn, raw, size=1 << 50)
        elif how == "not zlib":
            digest = put_blob(conn, raw, data=b"\x00not zlib at all" * 10)
        elif how == "hash":
            digest = put_blob(conn, raw, digest=hashlib.sha256(b"other bytes").hexdigest())
        elif how == "short":
            digest = put_blob(conn, raw, size=len(raw) + 10)
        else:
            raise ValueError(how)
        conn.execute("UPDATE kernels SET ir_hash = ? WHERE cell_id = ?", (digest, before))
    return digest
