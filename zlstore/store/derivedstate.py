"""Whether the writers' derived state is current (derive.py keeps it):
the questions a reader asks on open, apart from the derivation itself, so
that judge.py asks them without importing what derive.py runs (its final
step sums up IR changes through irdiff, which reads through judge)."""

import sqlite3


def _any(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


# The queues of work for derive(): rounds, floors, ranges, screening pairs.
_QUEUES = ("ab_stale_rounds", "ab_stale_floors", "ab_stale_ranges", "screen_stale_pairs")


def _any_of(conn: sqlite3.Connection, tables) -> bool:
    """Whether any of the tables holds a row: one statement (a reader asks on open)."""
    tests = " OR ".join(f"EXISTS (SELECT 1 FROM {table})" for table in tables)
    return bool(conn.execute(f"SELECT {tests}").fetchone()[0])


def _unjudged_rows(conn: sqlite3.Connection) -> bool:
    """Ranges to compute again, or computed and not judged since."""
    return _any(conn, "ab_stale_ranges") or _any(conn, "ab_range_rows WHERE judged IS NULL")


def unjudged(conn: sqlite3.Connection) -> bool:
    """Whether a range's stored judgement cannot be read: the range is to
    be computed again, it has none, or it was made under another basis (the
    settings, this release, the current rule's noise floors)."""
    if _unjudged_rows(conn):
        return True
    readable = conn.execute("SELECT current OR NOT EXISTS (SELECT 1 FROM ab_range_rows) FROM judging_basis")
    return not readable.fetchone()[0]


def pending(conn: sqlite3.Connection) -> bool:
    """Whether a reader would see pairs or noise floors older than the
    cells: rounds or floors marked stale and not derived since (an edit by
    hand, a run stopped midway). Ranges merely unjudged the views judge on read."""
    return _any_of(conn, _QUEUES)


def stale(conn: sqlite3.Connection) -> bool:
    """Whether derive() has work to do. A judgement made under another
    basis is not (the views judge such a range on the fly): the next write
    that judges stores it again."""
    return _any_of(conn, ("ab_stale_rounds", "ab_stale_floors", "screen_stale_pairs")) or _unjudged_rows(conn)
