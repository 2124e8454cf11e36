"""Campaigns that stop when the answer is known: which ops of an
until-decided campaign still need a round, and why each one stopped.

A root with campaign.env STOPPING=until-decided (layout.STOPPING_UNTIL_DECIDED)
has its ranges judged by the anytime-valid rule (stats.py: the t-test
e-process and its confidence sequence), so that looking after every round
does not inflate false findings; docs/judging.md says why. The runner asks
undecided_ops after each round and records, with record_stops, the ops
that stop and why; ab_ranges shows each range's stop round and reason.
"""

import sqlite3
from typing import Iterable, List, Optional, Tuple

# Why an op of an until-decided campaign stopped running rounds, in the
# order shown: every range of it decided (faster, slower or no change under
# the anytime-valid rule); MAX rounds reached undecided; its cells failed.
DECIDED, MAX_ROUNDS, FAILED = "decided", "max rounds", "failed"
STOP_REASONS = (DECIDED, MAX_ROUNDS, FAILED)


def undecided_ops(conn: sqlite3.Connection, root_id: int, min_rounds: int) -> List[Tuple[str, Optional[str]]]:
    """(cell op, dtype) pairs of the campaign root that still need a round: fewer than
    min_rounds rounds, or some range not decided under the anytime-valid rule and not stopped."""
    # STAND-IN (adaptive-run) until adaptive-stats' body: today's fixed-sample findings
    stopped = _stopped(conn, root_id)
    ops = set(
        conn.execute("SELECT DISTINCT op, COALESCE(dtype, '') FROM cells WHERE root_id = ? AND op IS NOT NULL", (root_id,))
    )
    decided = set()
    for op, dtype in ops:  # a cell of dtype '' (the op's own set) holds ranges of every dtype
        rounds, open_ = conn.execute(
            "SELECT min(rounds), sum(finding IS NULL OR finding NOT IN ('faster', 'slower', 'no change')) "
            "FROM ab_ranges WHERE root_id = ? AND op = ? AND (? = '' OR dtype = ?)",
            (root_id, op, dtype, dtype),
        ).fetchone()
        if (rounds or 0) >= min_rounds and not open_:
            decided.add((op, dtype))
    return sorted(o for o in ops if o not in decided and o not in stopped)


def record_stops(
    conn: sqlite3.Connection, root_id: int, ops: Iterable[Tuple[str, Optional[str]]], round_: int, reason: str
) -> None:
    """Records that these ops stopped after round `round_` and why (a STOP_REASONS value),
    in the store, idempotently: what is decided stays decided (a --resume keeps it)."""
    # STAND-IN (adaptive-run) until adaptive-stats' body
    conn.execute(_TABLE)
    with conn:
        conn.executemany(
            "INSERT OR IGNORE INTO standin_op_stops VALUES (?, ?, ?, ?, ?)",
            [(root_id, op, dtype or "", round_, reason) for op, dtype in ops],
        )


_TABLE = (
    "CREATE TABLE IF NOT EXISTS standin_op_stops "
    "(root_id INTEGER, op TEXT, dtype TEXT, round INTEGER, reason TEXT, PRIMARY KEY (root_id, op, dtype))"
)


def _stopped(conn: sqlite3.Connection, root_id: int) -> set:
    conn.execute(_TABLE)
    return set(conn.execute("SELECT op, dtype FROM standin_op_stops WHERE root_id = ?", (root_id,)))
