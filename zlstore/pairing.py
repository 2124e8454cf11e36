"""A/B pairing, kept up to date by the writers.

Pairing every measured row of a campaign on each read took seconds; a
campaign is written once and read many times. So the pairs (ab_slot_rows)
and the ranges over rounds (ab_range_rows) are tables. Triggers mark the
round of every inserted, deleted or edited cell in ab_stale_rounds (and
the rule of fingerprints deleted by hand in ab_stale_floors); refresh()
recomputes exactly those rounds, the ranges of the row identities they
touch and the noise floors they move, inside the writer's transaction,
before it commits. The views
(ab_slots, ab_pairs, ab_rejected, ab_ranges) read the tables; judging that
depends on settings (noise floors under the current rule) stays in the views.

The SQL here is the one definition of how rows pair; schema.sql documents
what the columns mean.
"""

import functools
import sqlite3
import statistics

from . import caliber, stats

# A round, as the triggers record it and as cells are matched to it.
_ROUND_MATCH = """
    {a}.root_id = {b}.root_id AND {a}.{op} IS {b}.cell_op AND {a}.{dtype} IS {b}.cell_dtype
    AND {a}.round IS {b}.round AND {a}.card IS {b}.card AND {a}.repeat_dir IS {b}.repeat_dir"""


def _round_match(a: str, b: str, cells: bool = False) -> str:
    """SQL matching a's round with b's (an ab_stale_rounds-shaped row);
    cells=True when a is the cells table (op / dtype instead of cell_*)."""
    return _ROUND_MATCH.format(a=a, b=b, op="op" if cells else "cell_op", dtype="dtype" if cells else "cell_dtype")


def _json_fields(*columns: str) -> str:
    """SQL for the JSON text of these columns as members of an object, without
    its braces: a fragment of ab_ranges' JSON (`zlstore ab --json`) kept with
    the range, which the view joins with the members it judges on each read.
    Written '"key": value, "key": value' (json_quote: what json_object
    writes for a value), the layout json.dumps gives every other --json.
    A column is "expression AS key", or a qualified column keyed by its name."""
    members = []
    for column in columns:
        expression, _, key = column.partition(" AS ")
        members.append(f"'\"{key or expression.split('.')[-1]}\": ' || json_quote({expression})")
    return " || ', ' || ".join(members)


_SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS ab_rounds_now (root_id, card, repeat_dir, cell_op, cell_dtype, round, "
    "before_cell_id, after_cell_id, before_caliber_id, after_caliber_id)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_keys_now (root_id, op, dtype, shape)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_keys_unique (key_id INTEGER PRIMARY KEY, root_id, op, dtype, shape)",
]

# The joins are written CROSS JOIN where the stale rounds must drive: SQLite
# keeps that order, and these few rounds are looked up through the indexes
# instead of every stored row being scanned.
_STEPS = [
    "DELETE FROM temp.ab_rounds_now",
    "DELETE FROM temp.ab_keys_now",
    "DELETE FROM temp.ab_keys_unique",
    """INSERT INTO temp.ab_rounds_now (root_id, card, repeat_dir, cell_op, cell_dtype, round)
       SELECT DISTINCT root_id, card, repeat_dir, cell_op, cell_dtype, round FROM ab_stale_rounds""",
    # A round's cell of a side is the latest stored one that no later run
    # of its op superseded (a resumed campaign's earlier, interrupted run).
    f"""UPDATE temp.ab_rounds_now SET
        before_cell_id = (SELECT max(c.id) FROM cells c
                          WHERE {_round_match('c', 'ab_rounds_now', cells=True)} AND c.side = 'before'
                            AND c.superseded_at IS NULL),
        after_cell_id = (SELECT max(c.id) FROM cells c
                         WHERE {_round_match('c', 'ab_rounds_now', cells=True)} AND c.side = 'after'
                           AND c.superseded_at IS NULL)""",
    """UPDATE temp.ab_rounds_now SET
        before_caliber_id = (SELECT caliber_id FROM cells WHERE id = before_cell_id),
        after_caliber_id = (SELECT caliber_id FROM cells WHERE id = after_cell_id)""",
    # The row identities these rounds held: their ranges change too.
    f"""INSERT INTO temp.ab_keys_now
        SELECT s.root_id, s.op, s.dtype, s.shape
        FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON {_round_match('s', 'r')}""",
    f"""DELETE FROM ab_slot_rows WHERE rowid IN (
        SELECT s.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON {_round_match('s', 'r')})""",
    # Each row identity of a round (the row's own op, dtype and canonical
    # shape, and its occurrence: the n-th such row of a cell pairs with the
    # n-th on the other side), both sides side by side, and why it is not a
    # pair where it is not: the first that applies of rejection_reasons.
    """INSERT INTO ab_slot_rows (
            root_id, card, repeat_dir, cell_op, cell_dtype, round, op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback, reason)
        WITH slots AS (
            SELECT r.rowid AS round_id, mb.op_name AS op, mb.dtype, mb.shape, mb.occurrence,
                   mb.id AS before_id, mb.counted AS before_counted, mb.not_counted_reason AS before_not_counted,
                   mb.latency AS latency_before, mb.fallback AS before_fallback,
                   ma.id AS after_id, ma.counted AS after_counted, ma.not_counted_reason AS after_not_counted,
                   ma.latency AS latency_after, ma.fallback AS after_fallback
            FROM temp.ab_rounds_now r
            CROSS JOIN measurements mb ON mb.cell_id = r.before_cell_id
            LEFT JOIN measurements ma
                ON ma.cell_id = r.after_cell_id AND ma.op_name IS mb.op_name AND ma.dtype IS mb.dtype
               AND ma.shape = mb.shape AND ma.occurrence = mb.occurrence
            UNION ALL
            SELECT r.rowid, ma.op_name, ma.dtype, ma.shape, ma.occurrence,
                   NULL, NULL, NULL, NULL, NULL,
                   ma.id, ma.counted, ma.not_counted_reason, ma.latency, ma.fallback
            FROM temp.ab_rounds_now r
            CROSS JOIN measurements ma ON ma.cell_id = r.after_cell_id
            WHERE NOT EXISTS (
                SELECT 1 FROM measurements mb
                WHERE mb.cell_id = r.before_cell_id AND mb.op_name IS ma.op_name AND mb.dtype IS ma.dtype
                  AND mb.shape = ma.shape AND mb.occurrence = ma.occurrence)
        )
        SELECT
            r.root_id, r.card, r.repeat_dir, r.cell_op, r.cell_dtype, r.round, s.op, s.dtype, s.shape,
            s.occurrence, r.before_cell_id, r.after_cell_id, r.before_caliber_id, r.after_caliber_id,
            s.before_id, s.after_id, s.before_counted, s.after_counted, s.before_not_counted,
            s.after_not_counted, s.latency_before, s.latency_after, s.before_fallback, s.after_fallback,
            CASE
                WHEN s.before_id IS NOT NULL AND s.after_id IS NOT NULL
                 AND s.before_counted = 1 AND s.after_counted = 1
                 AND r.before_caliber_id = r.after_caliber_id
                    THEN NULL
                WHEN (r.before_cell_id IS NOT NULL AND r.before_caliber_id IS NULL)
                  OR (r.after_cell_id IS NOT NULL AND r.after_caliber_id IS NULL)
                    THEN {reason_caliber_unknown}
                WHEN r.before_caliber_id <> r.after_caliber_id THEN {reason_caliber_mismatch}
                WHEN s.before_id IS NULL OR s.after_id IS NULL THEN {reason_missing_side}
                ELSE {reason_not_counted}
            END
        FROM slots s
        JOIN temp.ab_rounds_now r ON r.rowid = s.round_id""",
    f"""INSERT INTO temp.ab_keys_now
        SELECT s.root_id, s.op, s.dtype, s.shape
        FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON {_round_match('s', 'r')}""",
    f"""DELETE FROM ab_round_ranges WHERE rowid IN (
        SELECT g.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_round_ranges g ON {_round_match('g', 'r')})""",
    # A screening round's range (what its verdict shows): n_rows, min, median
    # (the middle ratio, or the mean of the two middle ones) and max over its
    # paired rows.
    f"""INSERT INTO ab_round_ranges (
            root_id, card, repeat_dir, cell_op, cell_dtype, round, before_cell_id, after_cell_id,
            n_rows, min, median, max, fallback)
        SELECT s.root_id, s.card, s.repeat_dir, s.cell_op, s.cell_dtype, s.round, s.before_cell_id,
            s.after_cell_id, count(*), min(s.latency_before / s.latency_after),
            median(s.latency_before / s.latency_after), max(s.latency_before / s.latency_after),
            max(max(s.before_fallback, s.after_fallback))
        FROM temp.ab_rounds_now r
        JOIN roots ON roots.id = r.root_id AND roots.kind = 'screen'
        CROSS JOIN ab_slot_rows s ON {_round_match('s', 'r')} AND s.reason IS NULL
        GROUP BY r.rowid""",
    """INSERT INTO temp.ab_keys_unique (root_id, op, dtype, shape)
        SELECT DISTINCT root_id, op, dtype, shape FROM temp.ab_keys_now""",
    """DELETE FROM ab_range_rows WHERE rowid IN (
        SELECT g.rowid FROM temp.ab_keys_unique k
        CROSS JOIN ab_range_rows g ON g.root_id = k.root_id AND g.op IS k.op AND g.dtype IS k.dtype
         AND g.shape = k.shape)""",
    # Per (root, row op, dtype, shape, caliber) of a repeat run or campaign (a
    # screening root's ranges are its rounds'): min, median and max over the
    # paired rounds, and the statistics of a finding (zlstore/stats.py): the
    # mean and sample standard deviation of ln(ratio), the effect exp(mean),
    # its interval and the t-test's p-value, from MIN_ROUNDS rounds on. Every
    # key's rows that did not pair are counted beside it, and a key with no
    # pair at all gets a row of its own (caliber_id NULL).
    f"""INSERT INTO ab_range_rows (
            root_id, op, dtype, shape, caliber_id, rounds, min, median, max,
            fallback, fallback_rows, cards, rejected, rejected_reasons, log_mean, log_sd,
            effect, ci_low, ci_high, p_value, json_head, json_tail)
        WITH keyed AS MATERIALIZED (
            SELECT k.key_id, s.card, s.repeat_dir, s.cell_op, s.cell_dtype, s.round, s.reason,
                   s.before_caliber_id AS caliber_id,
                   CASE WHEN s.reason IS NULL THEN s.latency_before / s.latency_after END AS ratio,
                   max(s.before_fallback, s.after_fallback) AS fallback
            FROM temp.ab_keys_unique k
            JOIN roots ON roots.id = k.root_id AND roots.kind <> 'screen'
            CROSS JOIN ab_slot_rows s ON s.root_id = k.root_id AND s.op IS k.op AND s.dtype IS k.dtype
             AND s.shape = k.shape
        ),
        -- A round is one before and one after process: a shape its cells
        -- recorded twice is one observation of that round (the mean of its
        -- log ratios), never two rounds.
        per_round AS (
            SELECT key_id, caliber_id, avg(ln(ratio)) AS round_log
            FROM keyed WHERE reason IS NULL
            GROUP BY key_id, caliber_id, card, repeat_dir, cell_op, cell_dtype, round
        ),
        over_rounds AS (
            SELECT key_id, caliber_id, count(*) AS rounds, avg(round_log) AS log_mean,
                CASE WHEN count(*) > 1 THEN sqrt(max(0.0,
                    (sum(round_log * round_log) - count(*) * avg(round_log) * avg(round_log)) / (count(*) - 1)))
                END AS log_sd
            FROM per_round
            GROUP BY key_id, caliber_id
        ),
        ranges AS (
            SELECT r.key_id, r.caliber_id, o.rounds, min(r.ratio) AS min, median(r.ratio) AS median,
                max(r.ratio) AS max, max(r.fallback) AS fallback, sum(r.fallback) AS fallback_rows,
                count(DISTINCT r.card) AS cards, o.log_mean, o.log_sd
            FROM keyed r
            JOIN over_rounds o ON o.key_id = r.key_id AND o.caliber_id = r.caliber_id
            WHERE r.reason IS NULL
            GROUP BY r.key_id, r.caliber_id
        ),
        rejected AS MATERIALIZED (
            SELECT key_id, count(*) AS rejected, group_concat(DISTINCT reason) AS rejected_reasons
            FROM keyed WHERE reason IS NOT NULL
            GROUP BY key_id
        ),
        tested AS (
            SELECT g.*, exp(g.log_mean) AS effect,
                   CASE WHEN g.rounds >= {stats.MIN_ROUNDS}
                        THEN t_critical(g.rounds - 1) * g.log_sd / sqrt(g.rounds) END AS half_width,
                   t_test_p(g.log_mean, g.log_sd, g.rounds) AS p_value
            FROM (
                SELECT k.root_id, k.op, k.dtype, k.shape, ranges.caliber_id, ranges.rounds,
                       ranges.min, ranges.median, ranges.max, ranges.fallback, ranges.fallback_rows, ranges.cards,
                       coalesce(rejected.rejected, 0) AS rejected, rejected.rejected_reasons,
                       ranges.log_mean, ranges.log_sd
                FROM ranges
                JOIN temp.ab_keys_unique k ON k.key_id = ranges.key_id
                LEFT JOIN rejected ON rejected.key_id = ranges.key_id
                UNION ALL
                SELECT k.root_id, k.op, k.dtype, k.shape, NULL, 0,
                       NULL, NULL, NULL, 0, 0, 0, rejected.rejected, rejected.rejected_reasons, NULL, NULL
                FROM rejected
                JOIN temp.ab_keys_unique k ON k.key_id = rejected.key_id
                WHERE NOT EXISTS (SELECT 1 FROM keyed WHERE keyed.key_id = rejected.key_id AND keyed.reason IS NULL)
            ) g
        ),
        bounded AS (
            SELECT t.*, exp(t.log_mean - t.half_width) AS ci_low, exp(t.log_mean + t.half_width) AS ci_high
            FROM tested t
        )
        SELECT b.root_id, b.op, b.dtype, b.shape, b.caliber_id, b.rounds, b.min, b.median, b.max,
            b.fallback, b.fallback_rows, b.cards, b.rejected, b.rejected_reasons, b.log_mean, b.log_sd,
            b.effect, b.ci_low, b.ci_high, b.p_value,
            {_json_fields("roots.name AS root", "b.op", "b.dtype", "b.shape", "b.rounds", "b.effect",
                          "b.ci_low", "b.ci_high", "b.p_value")},
            {_json_fields("b.min", "b.median", "b.max", "b.fallback", "b.fallback_rows", "b.rejected",
                          "b.rejected_reasons", "b.log_mean", "b.log_sd", "b.cards", "roots.kind AS root_kind",
                          "b.caliber_id", *[f"calibers.{name}" for name in caliber.NAMES], "b.root_id")}
        FROM bounded b
        JOIN roots ON roots.id = b.root_id
        LEFT JOIN calibers ON calibers.id = b.caliber_id""",
    # The q-value of every tested range of the roots whose ranges moved:
    # Benjamini-Hochberg over all of a root's tested ranges, q = min over the
    # ranks from its own up of p * m / rank, at most 1.
    """UPDATE ab_range_rows SET q_value = adjusted.q_value FROM (
            SELECT range_rowid, min(1.0, min(p_value * family / rank) OVER (
                       PARTITION BY root_id ORDER BY rank DESC ROWS UNBOUNDED PRECEDING)) AS q_value
            FROM (
                SELECT rowid AS range_rowid, root_id, p_value,
                       count(*) OVER (PARTITION BY root_id) AS family,
                       row_number() OVER (PARTITION BY root_id ORDER BY p_value, rowid) AS rank
                FROM ab_range_rows
                WHERE root_id IN (SELECT DISTINCT root_id FROM temp.ab_keys_unique) AND p_value IS NOT NULL
            )
        ) adjusted
        WHERE ab_range_rows.rowid = adjusted.range_rowid""",
    "DELETE FROM ab_stale_rounds",
]


def _steps(steps) -> list:
    """The statements with the reason and verdict names filled in from
    judge.py ({reason_caliber_unknown}, {verdict_no_ir_diff}, ...)."""
    from . import judge

    names = {f"{{reason_{n.lower()}}}": n for n in judge.REASON_NAMES}
    names.update({f"{{verdict_{n.lower()}}}": n for n in judge.VERDICT_NAMES})
    filled = []
    for step in steps:
        for placeholder, name in names.items():
            step = step.replace(placeholder, "'" + name + "'")
        if "{reason_" in step or "{verdict_" in step:
            raise ValueError("pairing.py names a reason or verdict judge.py does not define")
        filled.append(step)
    return filled


# The noise floors of the stale rules (ab_stale_floors): per (rule, row op,
# dtype, caliber), floor = max |ratio - 1| over the paired rows of every
# NO_IR_DIFF screening pair under that rule, n = the rows it rests on.
_FLOOR_STEPS = [
    "DELETE FROM noise_floor_rows WHERE rule IN (SELECT rule FROM ab_stale_floors)",
    """INSERT INTO noise_floor_rows (rule, op, dtype, caliber_id, n, floor, roots, fallback_rows)
        WITH quiet AS MATERIALIZED (
            SELECT v.before_cell_id, v.after_cell_id, v.rule
            FROM verdicts_by_rule v
            WHERE v.rule IN (SELECT rule FROM ab_stale_floors) AND v.verdict = {verdict_no_ir_diff}
        )
        SELECT quiet.rule, s.op, s.dtype, s.before_caliber_id, count(*),
               max(abs(s.latency_before / s.latency_after - 1)), group_concat(DISTINCT roots.name),
               sum(max(s.before_fallback, s.after_fallback))
        FROM quiet
        JOIN cells b ON b.id = quiet.before_cell_id
        JOIN ab_slot_rows s
            ON s.root_id = b.root_id AND s.cell_op IS b.op AND s.cell_dtype IS b.dtype AND s.round IS b.round
           AND s.card IS b.card AND s.repeat_dir IS b.repeat_dir
           AND s.before_cell_id = quiet.before_cell_id AND s.after_cell_id = quiet.after_cell_id
           AND s.reason IS NULL
        JOIN roots ON roots.id = s.root_id
        GROUP BY quiet.rule, s.op, s.dtype, s.before_caliber_id""",
    "DELETE FROM ab_stale_floors",
]

# A re-paired screening round can move every rule's floors.
_SCREEN_ROUNDS = """
    SELECT 1 FROM temp.ab_rounds_now r JOIN roots ON roots.id = r.root_id AND roots.kind = 'screen' LIMIT 1"""
_EVERY_RULE_STALE = """
    INSERT OR IGNORE INTO ab_stale_floors (rule)
    SELECT DISTINCT rule FROM fingerprints
    UNION SELECT current_rule FROM judging_settings"""


class Median:
    """median(x): the middle value, or the mean of the two middle values for
    an even count; NULLs are skipped. The one definition of a range's median
    (every median zlstore shows is computed by it, here)."""

    def __init__(self):
        self.values = []

    def step(self, value):
        if value is not None:
            self.values.append(value)

    def finalize(self):
        return statistics.median(self.values) if self.values else None


def register(conn: sqlite3.Connection):
    """Make median() available on a connection (zlstore's and datasette's)."""
    conn.create_aggregate("median", 1, Median)
    stats.register(conn)


@functools.lru_cache(maxsize=None)
def _prepared() -> tuple:
    """(round steps, floor steps), the names filled in once per process."""
    return _steps(_STEPS), _steps(_FLOOR_STEPS)


def _any(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


def stale(conn: sqlite3.Connection) -> bool:
    return _any(conn, "ab_stale_rounds") or _any(conn, "ab_stale_floors")


def refresh(conn: sqlite3.Connection) -> bool:
    """Recompute the stale rounds' pairs and their keys' ranges, then the
    stale noise floors. Call it, on a connection from db.connect (which has
    median()), inside the transaction that made them stale, before it
    commits. Returns whether there was anything to do."""
    rounds = _any(conn, "ab_stale_rounds")
    if not rounds and not _any(conn, "ab_stale_floors"):
        return False
    round_steps, floor_steps = _prepared()
    for statement in _SETUP:
        conn.execute(statement)
    if rounds:
        for statement in round_steps:
            conn.execute(statement)
        if conn.execute(_SCREEN_ROUNDS).fetchone() is not None:
            mark_every_floor(conn)
    if _any(conn, "ab_stale_floors"):
        for statement in floor_steps:
            conn.execute(statement)
    return True


def mark_floors(conn: sqlite3.Connection, rule: str):
    """Mark a rule's noise floors stale (its fingerprints were just added)."""
    conn.execute("INSERT OR IGNORE INTO ab_stale_floors (rule) VALUES (?)", (rule,))


def mark_every_floor(conn: sqlite3.Connection):
    """Mark every rule's noise floors stale (a screening root was removed)."""
    conn.execute(_EVERY_RULE_STALE)


def mark_every_round(conn: sqlite3.Connection):
    """Mark every round stale (a database from before these tables existed)."""
    conn.execute(
        """INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
           SELECT DISTINCT root_id, card, repeat_dir, op, dtype, round FROM cells
           WHERE side IN ('before', 'after')""")
