"""Campaigns that stop when the answer is known: which ops of an
until-decided campaign still need a round, and why each one stopped.

A root with campaign.env STOPPING=until-decided (layout.STOPPING_UNTIL_DECIDED)
has its ranges tested by the anytime-valid rule (stats.py: the t-test's
e-process, its confidence sequence, e-BH over the root), so that looking
after every round does not inflate false findings; docs/judging.md says
why. The runner asks undecided_ops after each round and records, with
record_stops, the ops that stop and why (op_stops); each range shows its
op's stop (ab_ranges.stop_round, stop_reason).
"""

import datetime
import sqlite3
from typing import Iterable, List, Optional, Tuple

from . import derive
from .. import names
from ..db import write_transaction
from ..names import DECIDING_FINDINGS


# The (cell op, dtype) pairs of a root that still need a round: every op of
# its cells (or of its plan, where none ran yet), less those stopped, that
# ran fewer than the floor of rounds, has a range not decided, or has none.
_UNDECIDED = f"""
WITH ops AS (
    SELECT DISTINCT op, dtype FROM cells
    WHERE root_id = :root AND op IS NOT NULL AND side IN ('before', 'after') AND superseded_at IS NULL
    UNION
    SELECT p.op, p.dtype FROM partitions p
    WHERE p.root_id = :root AND NOT EXISTS (
        SELECT 1 FROM cells c WHERE c.root_id = :root AND c.op = p.op AND coalesce(c.dtype, '') = p.dtype)
),
ran AS (
    SELECT op, dtype, count(DISTINCT round) AS rounds FROM cells
    WHERE root_id = :root AND side IN ('before', 'after') AND superseded_at IS NULL
    GROUP BY op, dtype
),
keys AS (  -- the ranges of each op's rounds: (the cells' op and dtype, the rows')
    SELECT DISTINCT cell_op AS run_op, cell_dtype AS run_dtype, op, dtype, shape FROM ab_slot_rows WHERE root_id = :root
),
undecided AS (
    SELECT DISTINCT k.run_op, k.run_dtype
    FROM keys k
    JOIN ab_range_judgements j ON j.root_id = :root AND j.op IS k.op AND j.dtype IS k.dtype AND j.shape = k.shape
    WHERE j.finding NOT IN ({", ".join(f"'{name}'" for name in DECIDING_FINDINGS)})
)
SELECT ops.op, ops.dtype FROM ops
LEFT JOIN ran ON ran.op = ops.op AND ran.dtype IS ops.dtype
WHERE NOT EXISTS (SELECT 1 FROM op_stops st
                  WHERE st.root_id = :root AND st.op = ops.op AND coalesce(st.dtype, '') = coalesce(ops.dtype, ''))
  AND (coalesce(ran.rounds, 0) < :min_rounds
       OR EXISTS (SELECT 1 FROM undecided u WHERE u.run_op = ops.op AND u.run_dtype IS ops.dtype)
       OR NOT EXISTS (SELECT 1 FROM keys k WHERE k.run_op = ops.op AND k.run_dtype IS ops.dtype))
ORDER BY ops.op, ops.dtype
"""


def undecided_ops(conn: sqlite3.Connection, root_id: int, min_rounds: int) -> List[Tuple[str, Optional[str]]]:
    """(cell op, dtype) pairs of the campaign root that still need a round: fewer than
    min_rounds rounds, or some range not decided under the anytime-valid rule and not stopped.
    Brings the store's derived tables up to date first (a write, where they
    are stale), so that the findings read are the round's just stored."""
    if derive.stale(conn):
        with write_transaction(conn):
            derive.derive(conn)
    rows = conn.execute(_UNDECIDED, {"root": root_id, "min_rounds": min_rounds}).fetchall()
    return [(op, dtype) for op, dtype in rows]


def record_stops(
    conn: sqlite3.Connection, root_id: int, ops: Iterable[Tuple[str, Optional[str]]], round_: int, reason: str
) -> None:
    """Records that these ops stopped after round `round_` and why (a names.STOP_REASONS value),
    in the store, idempotently: what is decided stays decided (a --resume keeps it).
    An op already stopped keeps its first stop; its ranges show it
    (ab_ranges.stop_round, stop_reason), computed again in the same transaction."""
    if reason not in names.STOP_REASONS:
        raise ValueError(f"unknown stop reason {reason!r}: one of {', '.join(names.STOP_REASONS)}")
    if round_ < 0:
        raise ValueError(f"a stop after round {round_}: rounds count from 1")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with write_transaction(conn):
        for op, dtype in ops:
            insert_stop(conn, root_id, op, dtype, round_, reason, now)
        derive.derive(conn)


def insert_stop(
    conn: sqlite3.Connection,
    root_id: int,
    op: str,
    dtype: Optional[str],
    round_: int,
    reason: str,
    recorded_at: Optional[str],
) -> bool:
    """One stop into op_stops, inside the caller's transaction, unless the
    op already has one (the first stop stays); its ranges are marked for
    derive.derive. Also how ingest reads a campaign tree's stops/*.tsv, so
    that a store made from the tree alone shows the same stops. Returns
    whether it was new."""
    stopped = conn.execute(
        "SELECT 1 FROM op_stops WHERE root_id = ? AND op = ? AND coalesce(dtype, '') = coalesce(?, '')",
        (root_id, op, dtype),
    ).fetchone()
    if stopped:
        return False
    conn.execute(
        "INSERT INTO op_stops (root_id, op, dtype, round, reason, recorded_at) VALUES (?, ?, ?, ?, ?, ?)",
        (root_id, op, dtype, round_, reason, recorded_at),
    )
    conn.execute(
        """INSERT INTO ab_stale_ranges (root_id, op, dtype, shape)
           SELECT DISTINCT root_id, op, dtype, shape FROM ab_slot_rows
           WHERE root_id = ? AND cell_op IS ? AND coalesce(cell_dtype, '') = coalesce(?, '')""",
        (root_id, op, dtype),
    )
    return True
