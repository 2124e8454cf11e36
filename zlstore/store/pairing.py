"""A/B pairing: which rows of a round's before and after cells pair.

A round is the before and the after cell of one op and dtype in one round
on one card of one root (names.ROUND_KEY). Triggers mark the round of every
inserted, deleted or edited cell in ab_stale_rounds; STEPS pairs exactly
those rounds again: the current cell of each side, rounds that several
cells claim or whose cell another copies (ab_duplicate_rounds), each row
identity of the two cells side by side, with why it does not pair where it
does not (ab_slot_rows), and a screening round's range (ab_round_ranges);
then it queues the row identities those rounds hold in ab_stale_ranges,
whose ranges ranges.py computes. derive.py runs the steps, inside the
writer's transaction.

The SQL here is the one definition of how rows pair; schema.sql documents
what the columns mean. It names the round key, reasons and verdicts through
macros.render_schema's macros, as schema.sql does, rendered where it runs
(derive.py): what a round is and why a row does not pair are defined in
names.py.
"""

import sqlite3

from . import macros

SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS ab_rounds_now ([[round: {k}]], "
    "before_cell_id, after_cell_id, before_caliber_id, after_caliber_id, before_claims, after_claims, "
    "before_copies, after_copies)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_keys_now (root_id, op, dtype, shape)",
]

# How many other current cells of its root hold the same files as a cell
# with counted rows (view cell_copies; its id: the column {cell} of ab_rounds_now).
_COPIES = "SELECT count(*) FROM cell_copies WHERE cell_id = ab_rounds_now.{cell}"

# The row identities the stale rounds hold: their ranges change too (read
# before the rounds are paired again, and after).
_KEYS_OF_ROUNDS = """INSERT INTO temp.ab_keys_now
        SELECT s.root_id, s.op, s.dtype, s.shape
        FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON [[round AND: s.{k} {is} r.{k}]]"""


def _slot_rows(slots: str) -> str:
    """The INSERT of the stale rounds' slot rows that `slots` gives: a
    SELECT of the round's rowid, the row identity (op, dtype, shape,
    occurrence), then id, counted, not_counted_reason, latency and fallback
    of its before row and of its after row (NULLs for a side without)."""
    return f"""INSERT INTO ab_slot_rows (
            [[round: {{k}}]], op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback, reason)
        WITH slots (round_id, op, dtype, shape, occurrence,
                    before_id, before_counted, before_not_counted, latency_before, before_fallback,
                    after_id, after_counted, after_not_counted, latency_after, after_fallback) AS ({slots}),
        -- The row the reason's CASE reads (names.REASON_INPUTS): a row
        -- identity of a round, both sides side by side; each before_X has
        -- its after_X. measurement_id: the side's row (NULL: it lacks it);
        -- counted: 1 where that row is a counted measurement; cell_id: the
        -- side's current cell in the round (NULL: none); caliber_id: that
        -- cell's caliber (NULL: unknown); claims: the current cells that
        -- claim the side (more than 1: a copy); copies: the other current
        -- cells that hold its cell's files (0: none). Beside them, the round
        -- and what the slot row keeps.
        reason_inputs AS (
            SELECT
                s.before_id AS before_measurement_id, s.after_id AS after_measurement_id,
                s.before_counted, s.after_counted,
                r.before_cell_id, r.after_cell_id, r.before_caliber_id, r.after_caliber_id,
                r.before_claims, r.after_claims, r.before_copies, r.after_copies,
                [[round: r.{{k}}]], s.op, s.dtype, s.shape, s.occurrence,
                s.before_not_counted, s.after_not_counted, s.latency_before, s.latency_after,
                s.before_fallback, s.after_fallback
            FROM slots s
            JOIN temp.ab_rounds_now r ON r.rowid = s.round_id
        )
        SELECT
            [[round: {{k}}]], op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback,
            [[case reasons]]
        FROM reason_inputs"""


# The joins are written CROSS JOIN where the stale rounds must drive: SQLite
# keeps that order, and these few rounds are looked up through the indexes
# instead of every stored row being scanned.
STEPS = [
    "DELETE FROM temp.ab_rounds_now",
    "DELETE FROM temp.ab_keys_now",
    """INSERT INTO temp.ab_rounds_now ([[round: {k}]])
       SELECT DISTINCT [[round: {k}]] FROM ab_stale_rounds""",
    # A round's cell of a side is its current one ([[current_side]]: the
    # latest that no later run superseded). Where several claim a side
    # (names.DUPLICATE), none of its rows pairs.
    """UPDATE temp.ab_rounds_now SET
        (before_cell_id, before_claims) = ([[current_side 'before' round: ab_rounds_now]]),
        (after_cell_id, after_claims) = ([[current_side 'after' round: ab_rounds_now]])""",
    # The other current cells of the root that hold the files of a side's
    # cell, where it has counted rows: copies (names.DUPLICATE).
    f"""UPDATE temp.ab_rounds_now SET
        before_copies = ({_COPIES.format(cell="before_cell_id")}),
        after_copies = ({_COPIES.format(cell="after_cell_id")})""",
    """DELETE FROM ab_duplicate_rounds WHERE rowid IN (
        SELECT d.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_duplicate_rounds d ON [[round AND: d.{k} {is} r.{k}]])""",
    """INSERT INTO ab_duplicate_rounds ([[round: {k}]], before_claims, after_claims, before_copies, after_copies)
        SELECT [[round: {k}]], before_claims, after_claims, before_copies, after_copies FROM temp.ab_rounds_now
        WHERE before_claims > 1 OR after_claims > 1 OR before_copies > 0 OR after_copies > 0""",
    """UPDATE temp.ab_rounds_now SET
        before_caliber_id = (SELECT caliber_id FROM cells WHERE id = before_cell_id),
        after_caliber_id = (SELECT caliber_id FROM cells WHERE id = after_cell_id)""",
    # The row identities these rounds held: their ranges change too.
    _KEYS_OF_ROUNDS,
    """DELETE FROM ab_slot_rows WHERE rowid IN (
        SELECT s.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON [[round AND: s.{k} {is} r.{k}]])""",
    # Each row identity of a round (the row's own op, dtype and canonical
    # shape, and its occurrence: the n-th such row of a cell pairs with the
    # n-th on the other side), both sides side by side, and why it is not a
    # pair where it is not: the first that applies of rejection_reasons.
    # Every before row, with its after row where there is one; then the
    # after rows that have none.
    _slot_rows("""
            SELECT r.rowid, mb.op_name, mb.dtype, mb.shape, mb.occurrence,
                   mb.id, mb.counted, mb.not_counted_reason, mb.latency, mb.fallback,
                   ma.id, ma.counted, ma.not_counted_reason, ma.latency, ma.fallback
            FROM temp.ab_rounds_now r
            CROSS JOIN measurements mb ON mb.cell_id = r.before_cell_id
            LEFT JOIN measurements ma
                ON ma.cell_id = r.after_cell_id AND ma.op_name IS mb.op_name AND ma.dtype IS mb.dtype
               AND ma.shape = mb.shape AND ma.occurrence = mb.occurrence"""),
    # An after row is looked for only in a round where the statement above
    # paired fewer after rows than the after cell has (most rounds pair
    # them all): a test per round, not a lookup per row.
    _slot_rows("""
            SELECT r.rowid, ma.op_name, ma.dtype, ma.shape, ma.occurrence,
                   NULL, NULL, NULL, NULL, NULL,
                   ma.id, ma.counted, ma.not_counted_reason, ma.latency, ma.fallback
            FROM temp.ab_rounds_now r
            CROSS JOIN measurements ma ON ma.cell_id = r.after_cell_id
             AND (SELECT count(*) FROM measurements a WHERE a.cell_id = r.after_cell_id)
               > (SELECT count(DISTINCT p.after_measurement_id) FROM ab_slot_rows p
                  WHERE [[round AND: p.{k} {is} r.{k}]])
            WHERE NOT EXISTS (
                SELECT 1 FROM measurements mb
                WHERE mb.cell_id = r.before_cell_id AND mb.op_name IS ma.op_name AND mb.dtype IS ma.dtype
                  AND mb.shape = ma.shape AND mb.occurrence = ma.occurrence)"""),
    _KEYS_OF_ROUNDS,
    """DELETE FROM ab_round_ranges WHERE rowid IN (
        SELECT g.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_round_ranges g ON [[round AND: g.{k} {is} r.{k}]])""",
    # A screening round's range (what its verdict shows): n_rows, min, median
    # (the middle ratio, or the mean of the two middle ones) and max over its
    # paired rows.
    """INSERT INTO ab_round_ranges (
            [[round: {k}]], before_cell_id, after_cell_id,
            n_rows, min, median, max, fallback)
        SELECT [[round: s.{k}]], s.before_cell_id,
            s.after_cell_id, count(*), min(s.latency_before / s.latency_after),
            median(s.latency_before / s.latency_after), max(s.latency_before / s.latency_after),
            max(max(s.before_fallback, s.after_fallback))
        FROM temp.ab_rounds_now r
        JOIN roots ON roots.id = r.root_id AND roots.kind = 'screen'
        CROSS JOIN ab_slot_rows s ON [[round AND: s.{k} {is} r.{k}]] AND s.reason IS NULL
        GROUP BY r.rowid""",
    # Their ranges are computed before the writer commits (ranges.STEPS).
    """INSERT INTO ab_stale_ranges (root_id, op, dtype, shape)
        SELECT DISTINCT root_id, op, dtype, shape FROM temp.ab_keys_now""",
    "DELETE FROM ab_stale_rounds",
]


# A re-paired screening round can move every rule's floors.
_SCREEN_ROUNDS = """
    SELECT 1 FROM temp.ab_rounds_now r JOIN roots ON roots.id = r.root_id AND roots.kind = 'screen' LIMIT 1"""
_EVERY_ROUND = macros.statement(
    "pairing.every_round",
    """
    INSERT INTO ab_stale_rounds ([[round: {k}]])
    SELECT DISTINCT [[round: {c}]] FROM cells WHERE side IN ('before', 'after')""",
)


def screening_rounds_paired(conn: sqlite3.Connection) -> bool:
    """Whether the rounds STEPS just paired hold a screening round: its
    pairs feed the noise floors (floors.py) of every rule."""
    return conn.execute(_SCREEN_ROUNDS).fetchone() is not None


def mark_every_round(conn: sqlite3.Connection):
    """Mark every round stale: all pairs and ranges are computed again."""
    conn.execute(_EVERY_ROUND)
