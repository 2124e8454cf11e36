"""The ranges over rounds, their q-values and their findings.

A repeat run's or campaign's range is, per row identity (root, row op,
dtype, shape) and caliber, the spread of its paired rounds' ratios with the
statistics of a finding (zlstore/stats.py). STEPS computes again the ranges
of the row identities pairing.py queued in ab_stale_ranges; FAMILIES
adjusts each touched root's p-values for its whole family
(Benjamini-Hochberg); JUDGING stores the judgement the view
ab_range_unjudged makes (schema.sql: what a finding is), with the basis it
was made on, so that the views read it back while that basis holds. A
batch of a long ingest computes its ranges without their q-values
(PENDING): the family is adjusted once, by the run's final derivation.

derive.py runs these steps, in its order; the SQL holds
macros.render_schema's macros, rendered there.
"""

from .. import caliber


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


SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS ab_keys_unique (key_id INTEGER PRIMARY KEY, root_id, op, dtype, shape)",
    "CREATE TEMP TABLE IF NOT EXISTS ab_judged_now "
    "(range_rowid INTEGER PRIMARY KEY, finding, finding_position, to_settle, noise_floor, clears_floor, "
    "floor_note, floor_rows, floor_roots, json)",
    # Every derivation starts with no keys: STEPS fills it with those of the
    # ranges it computes, whose roots PENDING and FAMILIES then adjust.
    "DELETE FROM temp.ab_keys_unique",
]

# The ranges of the stale row identities, computed again (a new range has
# no q-value yet: FAMILIES).
STEPS = [
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
            root_id, op, dtype, shape, caliber_id, rounds, min, median, max, latency_before, latency_after,
            fallback, fallback_rows, cards, rejected, rejected_reasons, log_mean, log_sd,
            effect, ci_low, ci_high, p_value, json_head, json_tail, stop_round, stop_reason)
        WITH keyed AS MATERIALIZED (
            SELECT k.key_id, [[round: s.{{k}}]], s.reason,
                   s.before_caliber_id AS caliber_id,
                   CASE WHEN s.reason IS NULL THEN s.latency_before / s.latency_after END AS ratio,
                   s.latency_before, s.latency_after,
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
                   avg(latency_before) AS round_before, avg(latency_after) AS round_after,
                   sum(fallback) AS fallback_rows
            FROM keyed WHERE reason IS NULL
            GROUP BY key_id, caliber_id, [[round: {{k}}]]
        ),
        ranges AS (
            SELECT key_id, caliber_id, count(*) AS rounds, exp(min(round_log)) AS min,
                median(exp(round_log)) AS median, exp(max(round_log)) AS max, max(fallback) AS fallback,
                median(round_before) AS latency_before, median(round_after) AS latency_after,
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
        -- An until-decided campaign's op stops once its ranges are decided
        -- (zlstore/store/sequential.py): each range shows the stop of the cell
        -- op and dtype whose rounds it comes from (the latest, where a
        -- row op's shape was measured by the cells of two).
        stopped AS MATERIALIZED (
            SELECT c.key_id, max(st.round) AS stop_round, st.reason AS stop_reason
            FROM (  -- nothing to read in a store without stops (every fixed campaign's): asked once
                SELECT DISTINCT key_id, root_id, cell_op AS op, cell_dtype AS dtype FROM keyed
                WHERE EXISTS (SELECT 1 FROM op_stops)
            ) c
            JOIN op_stops st ON st.root_id = c.root_id AND st.op IS c.op AND coalesce(st.dtype, '') = coalesce(c.dtype, '')
            GROUP BY c.key_id
        ),
        -- A fixed-round root is tested by the t-test; an until-decided one
        -- (roots.stopping) by the anytime-valid t-test, whose interval and
        -- p-value hold whenever the rounds stopped (zlstore/stats.py).
        tested AS (
            SELECT g.*, exp(g.log_mean) AS effect,
                   CASE WHEN g.rounds >= [[min_rounds]]
                        THEN CASE WHEN g.anytime THEN anytime_t(g.rounds) ELSE t_critical(g.rounds - 1) END
                             * g.log_sd / sqrt(g.rounds) END AS half_width,
                   CASE WHEN g.anytime THEN anytime_p(g.log_mean, g.log_sd, g.rounds)
                        ELSE t_test_p(g.log_mean, g.log_sd, g.rounds) END AS p_value
            FROM (
                SELECT k.key_id, k.root_id, k.op, k.dtype, k.shape, ranges.caliber_id, ranges.rounds,
                       ranges.min, ranges.median, ranges.max, ranges.latency_before, ranges.latency_after,
                       ranges.fallback, ranges.fallback_rows, ranges.cards,
                       coalesce(rejected.rejected, 0) AS rejected, rejected.rejected_reasons,
                       ranges.log_mean, ranges.log_sd,
                       roots.stopping IS [[until_decided]] AS anytime
                FROM ranges
                JOIN temp.ab_keys_unique k ON k.key_id = ranges.key_id
                JOIN roots ON roots.id = k.root_id
                LEFT JOIN rejected ON rejected.key_id = ranges.key_id
                UNION ALL
                SELECT k.key_id, k.root_id, k.op, k.dtype, k.shape, NULL, 0,
                       NULL, NULL, NULL, NULL, NULL, 0, 0, 0, rejected.rejected, rejected.rejected_reasons, NULL, NULL, 0
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
            b.latency_before, b.latency_after, b.fallback, b.fallback_rows, b.cards, b.rejected, b.rejected_reasons, b.log_mean, b.log_sd,
            b.effect, b.ci_low, b.ci_high, b.p_value,
            {
        _json_fields(
            "roots.name AS root",
            "b.op",
            "b.dtype",
            "b.shape",
            "b.rounds",
            "b.effect",
            "b.ci_low",
            "b.ci_high",
            "b.p_value",
        )
    },
            {
        _json_fields(
            "b.min",
            "b.median",
            "b.max",
            "b.latency_before",
            "b.latency_after",
            "b.fallback",
            "b.fallback_rows",
            "b.rejected",
            "b.rejected_reasons",
            "b.log_mean",
            "b.log_sd",
            "b.cards",
            "roots.kind AS root_kind",
            "b.caliber_id",
            *[f"calibers.{name}" for name in caliber.NAMES],
            "b.root_id",
            "roots.stopping",
            "stopped.stop_round",
            "stopped.stop_reason",
        )
    },
            stopped.stop_round, stopped.stop_reason
        FROM bounded b
        JOIN roots ON roots.id = b.root_id
        LEFT JOIN calibers ON calibers.id = b.caliber_id
        LEFT JOIN stopped ON stopped.key_id = b.key_id""",
    "DELETE FROM ab_stale_ranges",
]

# After the ranges of an ingest's batch (derive, not final), which commits
# before the run's final derivation adjusts their roots' q-values: every q-value
# of those roots is taken away, so that what is left to adjust (a tested
# range without one) outlives the commit, and no reader meanwhile takes a
# q-value of the old family for one of the new.
PENDING = [
    """UPDATE ab_range_rows SET q_value = NULL
        WHERE q_value IS NOT NULL AND root_id IN (SELECT root_id FROM temp.ab_keys_unique)""",
]

# Benjamini-Hochberg over all of a root's tested ranges, q = min over the
# ranks from its own up of p * m / rank, at most 1, for the roots of the
# ranges just computed and every root with a tested range still without a
# q-value (PENDING). A range whose q-value moves is judged again. Once per
# write, not per batch of a long ingest: each range a batch adds changes its
# root's family.
FAMILIES = [
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
JUDGING = [
    "DELETE FROM temp.ab_judged_now",
    """INSERT INTO temp.ab_judged_now
        SELECT range_rowid, finding, finding_position, to_settle, noise_floor, clears_floor, floor_note,
               floor_rows, floor_roots, json
        FROM ab_range_unjudged""",
    """UPDATE ab_range_rows SET finding = j.finding, finding_position = j.finding_position,
            to_settle = j.to_settle, noise_floor = j.noise_floor, clears_floor = j.clears_floor,
            floor_note = j.floor_note, floor_rows = j.floor_rows, floor_roots = j.floor_roots, judged = 1
        FROM temp.ab_judged_now j WHERE ab_range_rows.rowid = j.range_rowid""",
    """INSERT OR REPLACE INTO ab_range_json (range_rowid, json)
        SELECT range_rowid, json FROM temp.ab_judged_now""",
    """INSERT INTO ab_judgement_basis (id, basis) SELECT 1, basis FROM judging_basis WHERE true
        ON CONFLICT (id) DO UPDATE SET basis = excluded.basis WHERE basis IS NOT excluded.basis""",
    "DELETE FROM temp.ab_judged_now",
]
