"""The screening pairs: which (root, op, dtype) a screening root holds and
the current cell of each side, kept in a table for the views to read.

Every screening view (verdicts_by_rule, verdicts, screen_roots,
op_history's screening half, root_switches' axis) starts from the pairs.
Found on read, they were every pair of the store, built before a page's
filter on one root applied: in a team's store of 40 campaigns a root's
verdicts cost what the whole store's did (bench/web.py). So the writers
keep them in screen_pair_rows, indexed by root, and the views read that:
a page of one root reads its own rows.

What a pair depends on, and what marks it stale (screen_stale_pairs):
its sides' cells (every cell insert, delete or edit marks its round stale,
MARK copies a screening round's key here before pairing.py empties that
queue) and the verdicts the harness recorded (triggers on
recorded_verdicts). The verdict itself, its fingerprints, ranges and
notes stay in the views: they join the pair's cells by their keys.
derive.py runs MARK before pairing and STEPS after it, inside the
writer's transaction.
"""

SETUP = ["CREATE TEMP TABLE IF NOT EXISTS screen_pairs_now (root_id, op, dtype)"]

# The keys of the stale rounds of a screening root (or of one that was
# one: its rows go), read before pairing.py empties ab_stale_rounds.
MARK = [
    """INSERT INTO screen_stale_pairs (root_id, op, dtype)
        SELECT DISTINCT s.root_id, s.cell_op, s.cell_dtype FROM ab_stale_rounds s
        WHERE NOT EXISTS (SELECT 1 FROM roots WHERE roots.id = s.root_id AND roots.kind <> 'screen')
           OR s.root_id IN (SELECT root_id FROM screen_pair_rows)""",
]

STEPS = [
    "DELETE FROM temp.screen_pairs_now",
    "INSERT INTO temp.screen_pairs_now SELECT DISTINCT root_id, op, dtype FROM screen_stale_pairs",
    """DELETE FROM screen_pair_rows WHERE rowid IN (
        SELECT p.rowid FROM temp.screen_pairs_now n
        CROSS JOIN screen_pair_rows p ON p.root_id = n.root_id AND p.op IS n.op AND p.dtype IS n.dtype)""",
    # A pair is a (root, op, dtype) of a screening root that a cell of
    # either side or a verdict the harness recorded names; its side's cell
    # is the current one ([[current_side]]), claims counts the claimants.
    """INSERT INTO screen_pair_rows (
            root_id, op, dtype, before_cell_id, after_cell_id, before_claims, after_claims,
            recorded_verdict, orig_verdict, environment_differs)
        WITH k AS MATERIALIZED (
            SELECT n.root_id, n.op, n.dtype
            FROM temp.screen_pairs_now n
            JOIN roots ON roots.id = n.root_id AND roots.kind = 'screen'
            WHERE EXISTS (SELECT 1 FROM cells c WHERE c.root_id = n.root_id AND c.op IS n.op
                          AND c.dtype IS n.dtype AND c.side IN ('before', 'after'))
               OR EXISTS (SELECT 1 FROM recorded_verdicts rv WHERE rv.root_id = n.root_id
                          AND rv.op IS n.op AND rv.dtype IS n.dtype)
        ),
        -- field -> its values where the pair's two cells ran on different
        -- things (environment_differences), of the stale pairs' roots only
        differs AS MATERIALIZED (
            SELECT root_id, op, dtype, json_group_object(field, json("values")) AS environment_differs
            FROM environment_differences
            WHERE root_id IN (SELECT root_id FROM k)
            GROUP BY root_id, op, dtype
        )
        SELECT
            k.root_id, k.op, k.dtype,
            (SELECT cell_id FROM ([[current_side 'before' op: k]])),
            (SELECT cell_id FROM ([[current_side 'after' op: k]])),
            (SELECT claims FROM ([[current_side 'before' op: k]])),
            (SELECT claims FROM ([[current_side 'after' op: k]])),
            (SELECT rv.verdict FROM recorded_verdicts rv WHERE rv.root_id = k.root_id
                AND rv.file = 'screen.tsv' AND rv.op IS k.op AND rv.dtype IS k.dtype
                ORDER BY rv.line LIMIT 1),
            (SELECT rv.verdict FROM recorded_verdicts rv WHERE rv.root_id = k.root_id
                AND rv.file = 'screen.tsv.orig' AND rv.op IS k.op AND rv.dtype IS k.dtype
                ORDER BY rv.line LIMIT 1),
            d.environment_differs
        FROM k
        LEFT JOIN differs d ON d.root_id = k.root_id AND d.op IS k.op AND d.dtype IS k.dtype""",
    "DELETE FROM screen_stale_pairs",
]
