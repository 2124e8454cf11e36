"""The noise floor, whole: how it is computed, what it judges, and when it
is computed again (../shared/ARTIFACTS.md, Noise floors).

The rows of a NO_IR_DIFF screening pair measure the same code twice: the
floor of a screening root's (row op, row dtype, shape, caliber, machine)
under a rule is max |ratio - 1| over the paired rows of its NO_IR_DIFF
pairs under that rule, n the rows it rests on (STEPS, run by a final
derive.derive into noise_floor_rows). machine is what both sides of a pair
ran on (the view environment_machines: GPU model, driver, runtime); a pair
whose sides ran on two known machines measures no machine's noise and
gives none. A campaign's range is judged beside the floors of its own
shape and caliber from its own screening root (SCREEN_ROOT) and from roots
of its own known machine, never another's (the view ab_range_unjudged):
another machine's roots in the same store change nothing about it. It
clears its floor when the whole range lies outside 1 +- floor (CLEARS:
the view ab_range_judgements's clears_floor, through the "[[clears_floor]]"
macro). A rule's floors are computed again when they are marked stale
(ab_stale_floors): by mark() and mark_every() here, and by the trigger
fingerprints_delete_marks_floors for fingerprints deleted by hand.

This module imports nothing of zlstore: its SQL holds macros.render_schema's
macros, rendered where it runs (derive.py)."""

import sqlite3

# The floors of the stale rules, computed again.
STEPS = [
    "DELETE FROM noise_floor_rows WHERE rule IN (SELECT rule FROM ab_stale_floors)",
    """INSERT INTO noise_floor_rows (rule, root_id, op, dtype, shape, caliber_id, machine, n, floor, fallback_rows)
        WITH quiet AS MATERIALIZED (
            SELECT v.before_cell_id, v.after_cell_id, v.rule, v.root_id,
                   CASE WHEN mb.machine IS ma.machine THEN mb.machine END AS machine
            FROM verdicts_by_rule v
            JOIN cells cb ON cb.id = v.before_cell_id
            JOIN cells ca ON ca.id = v.after_cell_id
            LEFT JOIN environment_machines mb ON mb.environment_id = cb.environment_id
            LEFT JOIN environment_machines ma ON ma.environment_id = ca.environment_id
            WHERE v.rule IN (SELECT rule FROM ab_stale_floors) AND v.verdict = [[verdict NO_IR_DIFF]]
              AND (mb.machine IS NULL OR ma.machine IS NULL OR mb.machine = ma.machine)
        )
        SELECT quiet.rule, quiet.root_id, s.op, s.dtype, s.shape, s.before_caliber_id, quiet.machine, count(*),
               max(abs(s.latency_before / s.latency_after - 1)), sum(max(s.before_fallback, s.after_fallback))
        FROM quiet
        JOIN cells b ON b.id = quiet.before_cell_id
        JOIN ab_slot_rows s
            ON [[round AND: s.{k} {is} b.{c}]]
           AND s.before_cell_id = quiet.before_cell_id AND s.after_cell_id = quiet.after_cell_id
           AND s.reason IS NULL
        GROUP BY quiet.rule, quiet.root_id, s.op, s.dtype, s.shape, s.before_caliber_id, quiet.machine""",
    # the floors spelled as judging_basis reads them, written with them
    """INSERT OR REPLACE INTO noise_floor_texts (rule, text)
        SELECT rule, text FROM noise_floor_texts_now
        WHERE rule IN (SELECT rule FROM ab_stale_floors) AND text IS NOT NULL""",
    "DELETE FROM ab_stale_floors",
]

# Whether a range clears its floor, over the range r (min, max) and its
# floor's noise_floor_rows row, floors.
CLEARS = "(r.min > 1 + floors.floor OR r.max < 1 - floors.floor)"


def mark(conn: sqlite3.Connection, rule: str):
    """Mark a rule's noise floors stale (fingerprints under it were added)."""
    conn.execute("INSERT OR IGNORE INTO ab_stale_floors (rule) VALUES (?)", (rule,))


def mark_every(conn: sqlite3.Connection):
    """Mark every rule's noise floors stale: a screening pair was re-paired
    or removed, or cells gained fingerprints they lacked."""
    # the rules held, one index seek each (fingerprints_rule): DISTINCT
    # would read every fingerprint, in every merged root's transaction
    conn.execute("""INSERT OR IGNORE INTO ab_stale_floors (rule)
                    WITH RECURSIVE held (rule) AS (
                        SELECT min(rule) FROM fingerprints
                        UNION ALL SELECT (SELECT min(f.rule) FROM fingerprints f WHERE f.rule > held.rule)
                        FROM held WHERE held.rule IS NOT NULL)
                    SELECT rule FROM held WHERE rule IS NOT NULL
                    UNION SELECT current_rule FROM judging_settings""")
