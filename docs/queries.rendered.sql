-- GENERATED FILE: do not edit. Written by docs/rendered_sql.py
-- (.venv/bin/python docs/rendered_sql.py); tests/test_schema.py fails while it is stale.
--
-- Every other SQL text zlstore builds from the macros of render_schema
-- (schema.sql and the derivation are in schema.rendered.sql), expanded, by
-- the name it is registered under (zlstore/store/macros.py: statement): MODULE.WHAT
-- for a module's own, metadata.KEY... for the canned queries and dashboard
-- queries of zlstore/metadata.yaml that datasette runs. Edit the module or
-- metadata.yaml, never this.

-- ===== adaptive.round =====
WITH rounds AS (
        SELECT DISTINCT c.root_id AS root_id, c.pair_card AS card, c.repeat_dir AS repeat_dir, c.op AS cell_op, c.dtype AS cell_dtype, c.round AS round FROM cells c
        WHERE c.root_id = (SELECT id FROM roots WHERE path = ?) AND c.round >= 1
          AND c.side IN ('before', 'after') AND c.op = ? AND COALESCE(c.dtype, '') = ? AND c.round = ?
    ),
    sides AS (
        SELECT r.cell_op, r.cell_dtype, r.round,
            (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = r.root_id AND c.pair_card IS r.card AND c.repeat_dir IS r.repeat_dir AND c.op IS r.cell_op AND c.dtype IS r.cell_dtype AND c.round IS r.round AND c.side = 'before' AND c.superseded_at IS NULL)) AS before_cell_id,
            (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = r.root_id AND c.pair_card IS r.card AND c.repeat_dir IS r.repeat_dir AND c.op IS r.cell_op AND c.dtype IS r.cell_dtype AND c.round IS r.round AND c.side = 'after' AND c.superseded_at IS NULL)) AS after_cell_id
        FROM rounds r
    )
    SELECT s.cell_op, COALESCE(s.cell_dtype, ''), s.round, b.rc AS before_rc, a.rc AS after_rc
    FROM sides s LEFT JOIN cells b ON b.id = s.before_cell_id LEFT JOIN cells a ON a.id = s.after_cell_id
    WHERE s.before_cell_id IS NOT NULL OR s.after_cell_id IS NOT NULL;

-- ===== adaptive.rounds =====
WITH rounds AS (
        SELECT DISTINCT c.root_id AS root_id, c.pair_card AS card, c.repeat_dir AS repeat_dir, c.op AS cell_op, c.dtype AS cell_dtype, c.round AS round FROM cells c
        WHERE c.root_id = (SELECT id FROM roots WHERE path = ?) AND c.round >= 1
          AND c.side IN ('before', 'after')
    ),
    sides AS (
        SELECT r.cell_op, r.cell_dtype, r.round,
            (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = r.root_id AND c.pair_card IS r.card AND c.repeat_dir IS r.repeat_dir AND c.op IS r.cell_op AND c.dtype IS r.cell_dtype AND c.round IS r.round AND c.side = 'before' AND c.superseded_at IS NULL)) AS before_cell_id,
            (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = r.root_id AND c.pair_card IS r.card AND c.repeat_dir IS r.repeat_dir AND c.op IS r.cell_op AND c.dtype IS r.cell_dtype AND c.round IS r.round AND c.side = 'after' AND c.superseded_at IS NULL)) AS after_cell_id
        FROM rounds r
    )
    SELECT s.cell_op, COALESCE(s.cell_dtype, ''), s.round, b.rc AS before_rc, a.rc AS after_rc
    FROM sides s LEFT JOIN cells b ON b.id = s.before_cell_id LEFT JOIN cells a ON a.id = s.after_cell_id
    WHERE s.before_cell_id IS NOT NULL OR s.after_cell_id IS NOT NULL;

-- ===== irdiff.claimants =====
SELECT c.id, c.relpath FROM cells c
WHERE c.root_id = ? AND c.pair_card IS ? AND c.repeat_dir IS ? AND c.op IS ? AND c.dtype IS ? AND c.round IS ? AND c.side = ? AND c.superseded_at IS NULL ORDER BY c.id;

-- ===== irdiff.side =====
WITH asked AS (
        SELECT DISTINCT c.root_id AS root_id, c.pair_card AS card, c.repeat_dir AS repeat_dir, c.op AS cell_op, c.dtype AS cell_dtype, c.round AS round, c.side FROM cells c
        WHERE c.root_id = :root AND c.op = :op AND c.dtype IS :dtype AND c.round IS :round
          AND (:card IS NULL OR c.card IS :card) AND c.side = :side
    ),
    sides AS (
        SELECT (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = a.root_id AND c.pair_card IS a.card AND c.repeat_dir IS a.repeat_dir AND c.op IS a.cell_op AND c.dtype IS a.cell_dtype AND c.round IS a.round AND c.side = a.side AND c.superseded_at IS NULL)) AS cell_id,
               (SELECT claims FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = a.root_id AND c.pair_card IS a.card AND c.repeat_dir IS a.repeat_dir AND c.op IS a.cell_op AND c.dtype IS a.cell_dtype AND c.round IS a.round AND c.side = a.side AND c.superseded_at IS NULL)) AS claims
        FROM asked a
    )
    SELECT c.*, s.claims, (SELECT count(*) FROM kernels k WHERE k.cell_id = c.id) AS stored_kernels
    FROM sides s JOIN cells c ON c.id = s.cell_id
    ORDER BY c.id;

-- ===== metadata.database.queries.campaign_findings.sql =====
SELECT root, op, dtype, shape, finding, rounds,
       round(effect, 6) AS effect, round(ci_low, 6) AS ci_low, round(ci_high, 6) AS ci_high,
       round(q_value, 6) AS q_value, to_settle,
       round(noise_floor, 6) AS noise_floor,
       CASE
           WHEN rounds = 0 THEN 'no paired rows'
           WHEN noise_floor IS NULL THEN 'no floor measured'
           WHEN min > 1 + noise_floor THEN 'range above the floor band'
           WHEN max < 1 - noise_floor THEN 'range below the floor band'
           ELSE 'range within the floor band'
       END AS floor_band,
       floor_note, floor_rows, floor_roots, q_max, min_effect,
       rejected, rejected_reasons, fallback, fallback_rows,
       backend, bench_level, cudagraph, isolate_tuner_cache, direct_repeat, shape_mode, flagtune
FROM ab_ranges
WHERE root_kind IN ('campaign', 'repeat') AND (:root = '' OR root = :root)
ORDER BY root, finding_position, op, dtype, shape;

-- ===== metadata.database.queries.campaign_progress.sql =====
WITH campaign AS (
    SELECT id, name, rounds FROM roots
    WHERE kind = 'campaign' AND name = coalesce(nullif(:root, ''), (
        SELECT name FROM roots WHERE kind = 'campaign'
        ORDER BY started_at DESC, id DESC LIMIT 1))
),
planned AS (
    SELECT campaign.id AS root_id, p.card, p.op, p.dtype, p.weight_min,
           2 * campaign.rounds AS cells_planned,
           (SELECT count(*) FROM cells
            WHERE cells.root_id = campaign.id AND cells.card IS p.card AND cells.op = p.op
              AND (cells.dtype IS NULL OR cells.dtype = p.dtype)
              AND cells.superseded_at IS NULL) AS cells_recorded
    FROM campaign JOIN partitions p ON p.root_id = campaign.id
),
recorded AS (
    SELECT cells.root_id, cells.card, count(*) AS cells, sum(cells.elapsed_s) AS elapsed_s,
           max(cells.started_at) AS last_started_at
    FROM campaign JOIN cells ON cells.root_id = campaign.id AND cells.superseded_at IS NULL
    GROUP BY cells.root_id, cells.card
),
cards AS (
    SELECT root_id, card FROM planned UNION SELECT root_id, card FROM recorded
),
left_ops AS (
    SELECT * FROM planned WHERE cells_planned IS NULL OR cells_recorded < cells_planned
)
SELECT roots.name AS root, cards.card,
       coalesce(recorded.cells, 0) AS cells_recorded,
       (SELECT sum(cells_planned) FROM planned p
        WHERE p.root_id = cards.root_id AND p.card IS cards.card) AS cells_planned,
       recorded.elapsed_s,
       (SELECT count(*) FROM planned p
        WHERE p.root_id = cards.root_id AND p.card IS cards.card
          AND p.cells_recorded >= p.cells_planned) AS ops_done,
       (SELECT count(*) FROM left_ops p
        WHERE p.root_id = cards.root_id AND p.card IS cards.card) AS ops_left,
       (SELECT p.op || CASE WHEN p.dtype <> '' THEN ' ' || p.dtype ELSE '' END FROM left_ops p
        WHERE p.root_id = cards.root_id AND p.card IS cards.card
        ORDER BY p.weight_min DESC, p.op LIMIT 1) AS heaviest_op_left,
       (SELECT max(p.weight_min) FROM left_ops p
        WHERE p.root_id = cards.root_id AND p.card IS cards.card) AS heaviest_left_min,
       (SELECT sum(p.weight_min) FROM planned p
        WHERE p.root_id = cards.root_id AND p.card IS cards.card) AS planned_min,
       recorded.last_started_at
FROM cards
JOIN roots ON roots.id = cards.root_id
LEFT JOIN recorded ON recorded.root_id = cards.root_id AND recorded.card IS cards.card
ORDER BY cards.card;

-- ===== metadata.database.queries.ir_changes.sql =====
WITH pair AS (
    SELECT before_cell_id, after_cell_id, rule
    FROM verdicts_by_rule
    WHERE root = :root AND op = :op AND dtype = :dtype
      AND rule = coalesce(nullif(:rule, ''), (SELECT current_rule FROM judging_settings))
    LIMIT 1
)
SELECT json_extract(c.value, '$.change') AS change,
       json_extract(c.value, '$.kernels') AS kernels,
       json_extract(c.value, '$.of') AS of_pairs,
       pair.rule
FROM pair, json_each(zlstore_ir_changes(pair.before_cell_id, pair.after_cell_id, pair.rule)) c
ORDER BY c.key;

-- ===== metadata.database.queries.kernel_diff.sql =====
WITH pair AS (
    SELECT before_cell_id, after_cell_id, rule
    FROM verdicts_by_rule
    WHERE root = :root AND op = :op AND dtype = :dtype
      AND rule = coalesce(nullif(:rule, ''), (SELECT current_rule FROM judging_settings))
    LIMIT 1
)
SELECT json_extract(k.value, '$.kernel') AS kernel,
       json_extract(k.value, '$.status') AS status,
       json_extract(k.value, '$.tiles') AS tiles,
       json_extract(k.value, '$.convert_layouts') AS convert_layout,
       json_extract(k.value, '$.num_warps') AS num_warps,
       json_extract(k.value, '$.num_stages') AS num_stages,
       json_extract(k.value, '$.shared') AS shared,
       json_extract(k.value, '$.paired_by') AS paired_by,
       json_extract(k.value, '$.note') AS note,
       pair.rule,
       json_extract(k.value, '$.diff') AS ir_diff
FROM pair, json_each(zlstore_kernel_diff(pair.before_cell_id, pair.after_cell_id, pair.rule)) k
ORDER BY k.key;

-- ===== metadata.database.queries.noise_floor.sql =====
SELECT op, dtype, shape, gpu, driver, runtime, backend, bench_level, cudagraph, isolate_tuner_cache, direct_repeat, shape_mode, flagtune, n, round(floor, 6) AS floor,
       round(1 - floor, 6) AS band_low, round(1 + floor, 6) AS band_high,
       roots, n_roots, fallback_rows, rule
FROM noise_floors
WHERE op = :op
ORDER BY dtype, gpu IS NULL, gpu, driver, runtime, roots, backend, bench_level, cudagraph, isolate_tuner_cache, direct_repeat, shape_mode, flagtune, shape;

-- ===== metadata.database.queries.rejected_by_reason.sql =====
SELECT j.root, j.reason, j.op, j.dtype,
       count(*) AS rows,
       count(DISTINCT j.shape) AS shapes,
       group_concat(DISTINCT j.round) AS rounds,
       group_concat(DISTINCT j.card) AS cards,
       group_concat(DISTINCT j.sides) AS sides,
       group_concat(DISTINCT j.differences) AS differences,
       group_concat(DISTINCT j.fields) AS fields,
       group_concat(DISTINCT j.not_counted) AS not_counted
FROM ab_rejected j
LEFT JOIN rejection_reasons rr ON rr.reason = j.reason
-- one root's rows by its index; every root's when :root is empty
WHERE j.root IN (SELECT name FROM roots WHERE name = :root UNION ALL SELECT name FROM roots WHERE :root = '')
GROUP BY j.root, j.reason, j.op, j.dtype
ORDER BY j.root, rr.position, j.op, j.dtype;

-- ===== metadata.database.queries.rule_moves.sql =====
SELECT a.root, a.op, a.dtype,
       a.rule AS rule_a, a.verdict AS verdict_a,
       b.rule AS rule_b, b.verdict AS verdict_b,
       a.fp_before AS fp_before_a, a.fp_after AS fp_after_a,
       b.fp_before AS fp_before_b, b.fp_after AS fp_after_b,
       a.cl_before, a.cl_after,
       b.range_label AS range_label_b, b.hint AS hint_b, b.n_rows,
       round(b.min, 6) AS min, round(b.median, 6) AS median, round(b.max, 6) AS max
FROM verdicts_by_rule a
JOIN verdicts_by_rule b
    ON b.root_id = a.root_id AND b.op IS a.op AND b.dtype IS a.dtype
   AND b.rule = coalesce(nullif(:rule_b, ''), (SELECT current_rule FROM judging_settings))
WHERE (a.rule = :rule_a OR (:rule_a = '' AND a.rule <> b.rule))
  AND a.verdict IS NOT b.verdict
ORDER BY a.root, a.op, a.dtype, a.rule;

-- ===== metadata.database.queries.screening_cost.sql =====
WITH campaign AS (
    SELECT c.id, c.name, c.rounds, s.id AS screen_id, s.name AS screen_root
    FROM roots c
    LEFT JOIN roots s ON s.kind = 'screen' AND (
        c.screen_root = s.path OR c.screen_root = s.name OR c.screen_root LIKE '%/' || s.name)
    WHERE c.kind = 'campaign' AND (:root = '' OR c.name = :root)
),
repeats AS (
    SELECT campaign.id AS root_id, cells.op, cells.dtype,
           count(*) AS cells, count(DISTINCT cells.round) AS rounds,
           sum(cells.elapsed_s) AS repeat_s
    FROM campaign JOIN cells ON cells.root_id = campaign.id AND cells.superseded_at IS NULL
    GROUP BY campaign.id, cells.op, cells.dtype
)
SELECT root, screen_root, op, dtype, screen_verdict, screen_s, rounds, cells, repeat_s,
       round(repeat_s / screen_s, 3) AS repeat_per_screen,
       round(repeat_s / screen_s / rounds, 3) AS per_round,
       planned_min, actual_min
FROM (
    -- each op's screening pair looked up in its root by index, not joined to every pair
    SELECT campaign.name AS root, campaign.screen_root, repeats.op, repeats.dtype,
           (SELECT v.verdict FROM verdicts v WHERE v.root_id = campaign.screen_id
               AND v.op = repeats.op AND v.dtype IS repeats.dtype) AS screen_verdict,
           (SELECT v.elapsed_before + v.elapsed_after FROM verdicts v WHERE v.root_id = campaign.screen_id
               AND v.op = repeats.op AND v.dtype IS repeats.dtype) AS screen_s,
           repeats.rounds, repeats.cells, repeats.repeat_s,
           (SELECT p.weight_min FROM partitions p WHERE p.root_id = campaign.id
               AND p.op = repeats.op AND p.dtype IS repeats.dtype) AS planned_min,
           round(repeats.repeat_s / 60.0, 2) AS actual_min
    FROM campaign
    JOIN repeats ON repeats.root_id = campaign.id
    ORDER BY campaign.name, repeats.repeat_s DESC LIMIT -1)  -- kept whole: each lookup once;

-- ===== metadata.plugins.datasette-dashboards.campaign.charts.progress.query =====
WITH campaign AS (
    SELECT id, rounds FROM roots
    WHERE kind = 'campaign' AND name = coalesce(nullif(:root, ''), (
        SELECT name FROM roots WHERE kind = 'campaign'
        ORDER BY started_at DESC, id DESC LIMIT 1))
)
SELECT 'card ' || card AS card, 'planned' AS what, sum(2 * campaign.rounds) AS cells
FROM campaign JOIN partitions p ON p.root_id = campaign.id GROUP BY card
UNION ALL
SELECT 'card ' || card, 'recorded', count(*)
FROM campaign JOIN cells ON cells.root_id = campaign.id AND cells.superseded_at IS NULL GROUP BY card;

-- ===== metadata.plugins.datasette-dashboards.campaign.charts.ranges.query =====
WITH root AS (
    SELECT coalesce(nullif(:root, ''), (
        SELECT name FROM roots WHERE kind = 'campaign'
        ORDER BY started_at DESC, id DESC LIMIT 1)) AS name
)
SELECT op || CASE WHEN dtype <> '' THEN ' ' || dtype ELSE '' END || ' ' || shape AS label,
       op, dtype, shape, rounds, effect, ci_low, ci_high, q_value, finding, finding_position,
       to_settle, noise_floor, 1 / (1 + min_effect) AS band_low, 1 + min_effect AS band_high
FROM ab_ranges
WHERE root = (SELECT name FROM root) AND rounds > 0
ORDER BY finding_position, op, dtype, shape;

-- ===== metadata.plugins.datasette-dashboards.campaign.charts.verdicts.query =====
SELECT v.root, coalesce(v.verdict, 'not judged') AS verdict, count(*) AS pairs,
       coalesce(k.position, 99) AS position
FROM verdicts v LEFT JOIN verdict_kinds k ON k.verdict = v.verdict
GROUP BY v.root, v.verdict
ORDER BY v.root, position;

-- ===== metadata.plugins.datasette-dashboards.campaign.filters.root.query =====
SELECT name FROM roots WHERE kind IN ('campaign', 'repeat') ORDER BY started_at DESC, name;

-- ===== metadata.plugins.datasette-dashboards.history.charts.effect_over_time.query =====
WITH chosen AS (
    SELECT coalesce(nullif(:op, ''), (
        SELECT op FROM op_history WHERE kind <> 'screen'
        GROUP BY op ORDER BY count(DISTINCT root_id) DESC, op LIMIT 1)) AS op
)
SELECT started_at, root,
       coalesce(switch, '(unnamed switch)') || ' ' || coalesce(before_value, '?') || '->'
       || coalesce(after_value, '?') || CASE WHEN axis = 'dead' THEN ' (dead axis)' ELSE '' END
       || ': ' || op || CASE WHEN dtype <> '' THEN ' ' || dtype ELSE '' END || ' ' || shape AS label,
       switch, rounds, effect, ci_low, ci_high, q_value, finding
FROM op_history
WHERE op = (SELECT op FROM chosen) AND kind <> 'screen' AND ci_low IS NOT NULL
  AND (:switch = '' OR switch = :switch)
ORDER BY started_at, label;

-- ===== metadata.plugins.datasette-dashboards.history.filters.op.query =====
SELECT DISTINCT op FROM op_history WHERE kind <> 'screen' ORDER BY op;

-- ===== metadata.plugins.datasette-dashboards.history.filters.switch.query =====
SELECT DISTINCT switch FROM op_history WHERE kind <> 'screen' AND switch IS NOT NULL ORDER BY switch;

-- ===== pairing.every_round =====
INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT DISTINCT root_id, pair_card, repeat_dir, op, dtype, round FROM cells WHERE side IN ('before', 'after');

-- ===== roots.claimants =====
SELECT c.id, c.relpath, c.path, c.op, c.dtype, c.side, c.round, c.card, c.repeat_dir FROM cells c
WHERE c.root_id = ? AND c.pair_card IS ? AND c.repeat_dir IS ? AND c.op IS ? AND c.dtype IS ? AND c.round IS ? AND c.side = ? AND c.superseded_at IS NULL ORDER BY c.id;

-- ===== runner.hinted_ops =====
SELECT op, COALESCE(dtype, ''), hint FROM verdicts WHERE root_id = ? AND hint IS NOT NULL ORDER BY op, dtype;

-- ===== runner.ir_changed_ops =====
SELECT op, COALESCE(dtype, '') FROM verdicts WHERE root_id = ? AND verdict = 'IR_CHANGED' ORDER BY op, dtype;

-- ===== runner.ir_changed_unhinted_ops =====
SELECT op, COALESCE(dtype, '') FROM verdicts WHERE root_id = ? AND verdict = 'IR_CHANGED' AND hint IS NULL ORDER BY op, dtype;

-- ===== runner.unjudged_ops =====
SELECT op, COALESCE(dtype, ''), verdict FROM verdicts WHERE root_id = ? AND verdict IN ('DUPLICATE_CELL', 'IR_UNREAD') ORDER BY op, dtype;
