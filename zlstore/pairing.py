"""A/B pairing, kept up to date by the writers.

Pairing every measured row of a campaign on each read took seconds; a
campaign is written once and read many times. So the pairs (ab_slot_rows)
and the ranges over rounds (ab_range_rows) are tables. Triggers mark the
round of every inserted, deleted or edited cell in ab_stale_rounds (and
the rule of fingerprints deleted by hand in ab_stale_floors); refresh()
recomputes exactly those rounds, the ranges of the row identities they
touch and the noise floors they move, inside the writer's transaction,
before it commits. The views
(ab_slots, ab_pairs, ab_rejected, ab_ranges) read the tables. A range's
judgement, which depends on settings (thresholds, noise floors under the
current rule), is defined by a view (ab_range_unjudged) and stored with the
range under the basis it was made on; the views judge on the fly what was
stored under another (a setting edited by hand).

The SQL here is the one definition of how rows pair; schema.sql documents
what the columns mean. It names the round key, reasons and verdicts through
macros.render_schema's macros, as schema.sql does: what a round is and why a row
does not pair are defined in names.py, the noise floors in floors.py.
"""

import functools
import sqlite3

from . import caliber, floors, macros


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
    "CREATE TEMP TABLE IF NOT EXISTS ab_rounds_now ([[round: {k}]], "
    "before_cell_id, after_cell_id, before_caliber_id, after_caliber_id, before_claims, after_claims, "
    "before_copies, after_copies)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_keys_now (root_id, op, dtype, shape)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_keys_unique (key_id INTEGER PRIMARY KEY, root_id, op, dtype, shape)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_judged_now "
    "(range_rowid INTEGER PRIMARY KEY, finding, finding_position, to_settle, noise_floor, clears_floor, "
    "floor_note, json)",
    # Every refresh starts with no keys: _RANGES fills it with those of the
    # ranges it computes, whose roots _PENDING and _FAMILIES then adjust.
    "DELETE FROM temp.ab_keys_unique",
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
_STEPS = [
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
    # Their ranges are computed before the writer commits (_RANGES).
    """INSERT INTO ab_stale_ranges (root_id, op, dtype, shape)
        SELECT DISTINCT root_id, op, dtype, shape FROM temp.ab_keys_now""",
    "DELETE FROM ab_stale_rounds",
]

# The ranges of the stale row identities, computed again (a new range has
# no q-value yet: _FAMILIES).
_RANGES = [
    """INSERT INTO temp.ab_keys_unique (root_id, op, dtype, shape)
        SELECT DISTINCT root_id, op, dtype, shape FROM ab_stale_ranges""",
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
            SELECT k.key_id, [[round: s.{{k}}]], s.reason,
                   s.before_caliber_id AS caliber_id,
                   CASE WHEN s.reason IS NULL THEN s.latency_before / s.latency_after END AS ratio,
                   max(s.before_fallback, s.after_fallback) AS fallback
            FROM temp.ab_keys_unique k
            JOIN roots ON roots.id = k.root_id AND roots.kind <> 'screen'
            CROSS JOIN ab_slot_rows s ON s.root_id = k.root_id AND s.op IS k.op AND s.dtype IS k.dtype
             AND s.shape = k.shape
        ),
        -- A round is one before and one after process: a shape its cells
        -- recorded twice is one observation of that round, its ratio the
        -- geometric mean of the twice (never two rounds). The range is over
        -- the rounds' ratios.
        per_round AS (
            SELECT key_id, caliber_id, card, avg(ln(ratio)) AS round_log, max(fallback) AS fallback,
                   sum(fallback) AS fallback_rows
            FROM keyed WHERE reason IS NULL
            GROUP BY key_id, caliber_id, [[round: {{k}}]]
        ),
        ranges AS (
            SELECT key_id, caliber_id, count(*) AS rounds, exp(min(round_log)) AS min,
                median(exp(round_log)) AS median, exp(max(round_log)) AS max, max(fallback) AS fallback,
                sum(fallback_rows) AS fallback_rows, count(DISTINCT card) AS cards, avg(round_log) AS log_mean,
                CASE WHEN count(*) > 1 THEN sqrt(max(0.0,
                    (sum(round_log * round_log) - count(*) * avg(round_log) * avg(round_log)) / (count(*) - 1)))
                END AS log_sd
            FROM per_round
            GROUP BY key_id, caliber_id
        ),
        rejected AS MATERIALIZED (
            SELECT key_id, count(*) AS rejected, group_concat(DISTINCT reason) AS rejected_reasons
            FROM keyed WHERE reason IS NOT NULL
            GROUP BY key_id
        ),
        tested AS (
            SELECT g.*, exp(g.log_mean) AS effect,
                   CASE WHEN g.rounds >= [[min_rounds]]
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
        bounded AS MATERIALIZED (
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
    "DELETE FROM ab_stale_ranges",
]

# After the ranges of an ingest's batch (refresh, not final), which commits
# before the run's last write adjusts their roots' q-values: every q-value
# of those roots is taken away, so that what is left to adjust (a tested
# range without one) outlives the commit, and no reader meanwhile takes a
# q-value of the old family for one of the new.
_PENDING = [
    """UPDATE ab_range_rows SET q_value = NULL
        WHERE q_value IS NOT NULL AND root_id IN (SELECT root_id FROM temp.ab_keys_unique)""",
]

# Benjamini-Hochberg over all of a root's tested ranges, q = min over the
# ranks from its own up of p * m / rank, at most 1, for the roots of the
# ranges just computed and every root with a tested range still without a
# q-value (_PENDING). A range whose q-value moves is judged again. Once per
# write, not per batch of a long ingest: each range a batch adds changes its
# root's family.
_FAMILIES = [
    """UPDATE ab_range_rows SET q_value = adjusted.q_value, judged = NULL FROM (
            SELECT range_rowid, min(1.0, min(p_value * family / rank) OVER (
                       PARTITION BY root_id ORDER BY rank DESC ROWS UNBOUNDED PRECEDING)) AS q_value
            FROM (
                SELECT rowid AS range_rowid, root_id, p_value,
                       count(*) OVER (PARTITION BY root_id) AS family,
                       row_number() OVER (PARTITION BY root_id ORDER BY p_value, rowid) AS rank
                FROM ab_range_rows
                WHERE p_value IS NOT NULL AND root_id IN (
                    SELECT root_id FROM temp.ab_keys_unique
                    UNION SELECT root_id FROM ab_range_rows
                          WHERE judged IS NULL AND p_value IS NOT NULL AND q_value IS NULL)
            )
        ) adjusted
        WHERE ab_range_rows.rowid = adjusted.range_rowid AND ab_range_rows.q_value IS NOT adjusted.q_value""",
]

# Then the judgement of every range whose stored one cannot be read
# (schema.sql: ab_range_unjudged), stored with it.
_JUDGING = [
    "DELETE FROM temp.ab_judged_now",
    """INSERT INTO temp.ab_judged_now
        SELECT range_rowid, finding, finding_position, to_settle, noise_floor, clears_floor, floor_note, json
        FROM ab_range_unjudged""",
    """UPDATE ab_range_rows SET finding = j.finding, finding_position = j.finding_position,
            to_settle = j.to_settle, noise_floor = j.noise_floor, clears_floor = j.clears_floor,
            floor_note = j.floor_note, judged = 1
        FROM temp.ab_judged_now j WHERE ab_range_rows.rowid = j.range_rowid""",
    """INSERT OR REPLACE INTO ab_range_json (range_rowid, json)
        SELECT range_rowid, json FROM temp.ab_judged_now""",
    """INSERT INTO ab_judgement_basis (id, basis) SELECT 1, basis FROM judging_basis WHERE true
        ON CONFLICT (id) DO UPDATE SET basis = excluded.basis WHERE basis IS NOT excluded.basis""",
    "DELETE FROM temp.ab_judged_now",
]

# A re-paired screening round can move every rule's floors.
_SCREEN_ROUNDS = """
    SELECT 1 FROM temp.ab_rounds_now r JOIN roots ON roots.id = r.root_id AND roots.kind = 'screen' LIMIT 1"""
_EVERY_ROUND = macros.render_schema("""
    INSERT INTO ab_stale_rounds ([[round: {k}]])
    SELECT DISTINCT [[round: {c}]] FROM cells WHERE side IN ('before', 'after')""")


@functools.lru_cache(maxsize=None)
def _prepared() -> tuple:
    """(setup, round steps, floor steps, range steps, a batch's pending
    steps, q-value and judging steps) with their macros expanded, once per
    process."""
    return tuple([macros.render_schema(step) for step in steps]
                 for steps in (_SETUP, _STEPS, floors.STEPS, _RANGES, _PENDING, _FAMILIES + _JUDGING))


def _any(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


def _unjudged_rows(conn: sqlite3.Connection) -> bool:
    """Ranges to compute again, or computed and not judged since."""
    return _any(conn, "ab_stale_ranges") or _any(conn, "ab_range_rows WHERE judged IS NULL")


def unjudged(conn: sqlite3.Connection) -> bool:
    """Whether a range's stored judgement cannot be read: the range is to
    be computed again, it has none, or it was made under another basis (the
    settings, this release, the current rule's noise floors)."""
    if _unjudged_rows(conn):
        return True
    return not conn.execute("SELECT current OR NOT EXISTS (SELECT 1 FROM ab_range_rows) "
                            "FROM judging_basis").fetchone()[0]


def stale(conn: sqlite3.Connection) -> bool:
    """Whether refresh() has work to do. A judgement made under another
    basis is not (the views judge such a range on the fly): the next write
    that judges stores it again."""
    return _any(conn, "ab_stale_rounds") or _any(conn, "ab_stale_floors") or _unjudged_rows(conn)


def refresh(conn: sqlite3.Connection, final: bool = True, rejudge: bool = False) -> bool:
    """Recompute the stale rounds' pairs and the ranges of the row
    identities the rounds hold, then (final) the stale noise floors, the
    q-values of the ranges' roots and their judgements. Where anything is
    judged, every range whose judgement was made under another basis
    (judging_basis) is judged again with it; rejudge: those ranges in any
    case (a setting changed). A floor that moves alone (a rescore) leaves
    the judging to the views until then: a rescore that puts back what was
    there judges nothing.
    Call it, on a connection from db.connect (which has median()), inside
    the transaction that made them stale, before it commits: final unless
    a later commit of the same run will call it again (an ingest's batches:
    their ranges are computed while the workers prepare the next cells, and
    a reader in between judges them on the fly, without their q-values).
    Returns whether there was anything to do."""
    rounds = _any(conn, "ab_stale_rounds")
    floors_stale = final and _any(conn, "ab_stale_floors")
    judge = final and (rejudge or _unjudged_rows(conn))
    if not rounds and not floors_stale and not judge and not _any(conn, "ab_stale_ranges"):
        return False
    setup, round_steps, floor_steps, range_steps, pending_steps, judging_steps = _prepared()
    for statement in setup:
        conn.execute(statement)
    if rounds:
        for statement in round_steps:
            conn.execute(statement)
        if conn.execute(_SCREEN_ROUNDS).fetchone() is not None:
            floors.mark_every(conn)
    if _any(conn, "ab_stale_ranges"):
        for statement in range_steps + ([] if final else pending_steps):
            conn.execute(statement)
    if final and _any(conn, "ab_stale_floors"):  # a batch's screening rounds move every floor: once
        for statement in floor_steps:
            conn.execute(statement)
    if final and (rejudge or _unjudged_rows(conn)):
        for statement in judging_steps:
            conn.execute(statement)
    return True


def mark_every_round(conn: sqlite3.Connection):
    """Mark every round stale: all pairs and ranges are computed again."""
    conn.execute(_EVERY_ROUND)


def derive(conn: sqlite3.Connection, every: bool = False) -> bool:
    """Bring the pairs, ranges and noise floors up to date (refresh), every
    round of them computed again where every (a migration asked for it:
    migrations.ensure_schema)."""
    if every:
        mark_every_round(conn)
    return refresh(conn)
