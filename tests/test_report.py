"""The text reports straight from rows: what a line says, and what it must
never say, without a CLI or a terminal in between."""

from pathlib import Path

from zlstore.show import judge, report
from zlstore.run.display import CardState
from zlstore.run.runner import CampaignResult


def pair(verdict, range_label=None, n_rows=3, fallback=0, **extra):
    """A verdicts row as the view gives it, with the columns the report reads."""
    row = {
        "root": "ab_rlc_x",
        "op": "topk",
        "dtype": "float16",
        "verdict": verdict,
        "recorded_verdict": verdict,
        "range_label": range_label,
        "n_rows": n_rows,
        "min": 0.98,
        "median": 1.0,
        "max": 1.02,
        "fallback": fallback,
        "caliber_id": None,
    }
    row.update(extra)
    return row


def ab_row(**extra):
    row = {
        "root": "campaign_x",
        "op": "softmax",
        "dtype": "float32",
        "shape": "[64,1024]",
        "rounds": 6,
        "min": 1.1,
        "median": 1.2,
        "max": 1.3,
        "rejected": 0,
        "rejected_reasons": None,
        "fallback": 0,
        "fallback_rows": 0,
        "clears_floor": None,
        "noise_floor": None,
        "effect": 1.2,
        "ci_low": 1.1,
        "ci_high": 1.3,
        "p_value": 0.001,
        "q_value": 0.002,
        "finding": "faster",
        "to_settle": None,
        "floor_note": None,
    }
    row.update(extra)
    return row


SETTINGS = {"current_rule": "v3", "strictest_rule": "v4", "q_max": 0.05, "min_effect": 0.02, "min_rounds": 3}


def test_a_pair_without_a_range_never_gets_a_range_line():
    for verdict in ("NO_ROWS", "TRUNCATED", "NO_TRITON"):
        text = report.screen([pair(verdict, n_rows=5)], "v4")
        assert "speedup range" not in text, text
        assert report.range_line(pair(verdict)) is None


def test_no_row_of_the_example_store_without_a_range_verdict_gets_a_range_line(example_store):
    rows = judge.verdicts(example_store)
    lines = {(r["root"], r["op"], r["dtype"]): report.range_line(r) for r in rows}
    for row in rows:
        line = lines[(row["root"], row["op"], row["dtype"])]
        if row["verdict"] in ("NO_ROWS", "TRUNCATED", "NO_TRITON"):
            assert line is None, row
        elif row["verdict"] == "NO_IR_DIFF":
            assert line is not None and "(noise floor; not a result)" in line
        elif row["verdict"] == "IR_CHANGED":
            assert line is not None and line.startswith("    speedup range (indicative (one round); not a result): ")


def test_no_screening_range_is_a_result():
    """One round per shape: the noise floor for NO_IR_DIFF, indicative for
    IR_CHANGED, never a result."""
    line = report.range_line(pair("NO_IR_DIFF", "noise floor"))
    assert (
        line == "    speedup range (noise floor; not a result): 0.98 .. 1 .. 1.02  "
        "(min .. median .. max of before/after over 3 rows)"
    )
    changed = report.range_line(pair("IR_CHANGED", judge.BY_NAME["IR_CHANGED"].range_label))
    assert changed is not None and changed.startswith("    speedup range (indicative (one round); not a result): ")


def test_a_hinted_pair_says_what_alone_differs():
    text = report.screen(
        [pair("IR_CHANGED", "indicative (one round)", hint="differs only in source locations: NO_IR_DIFF under v4")],
        "v3",
    )
    assert "\n    hint: differs only in source locations: NO_IR_DIFF under v4\n" in text
    assert "1 IR_CHANGED pair differs only in what the strictest rule leaves out" in text
    assert "hint:" not in report.screen([pair("IR_CHANGED", "indicative (one round)", hint=None)], "v3")


def test_a_range_with_no_paired_row_says_where_to_look():
    assert (
        report.range_text(pair("IR_CHANGED", "result", n_rows=0))
        == "none: no row paired (zlstore ab ab_rlc_x --rejected says why)"
    )


def test_a_range_with_fallback_rows_says_so():
    line = report.range_line(pair("IR_CHANGED", "result", fallback=1))
    assert line is not None and line.endswith(
        "; includes rows timed by the direct fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH)"
    )


def test_screen_ends_with_every_verdict_counted():
    rows = [pair("IR_CHANGED", "result"), pair("NO_ROWS", op="rand"), pair("NO_ROWS", op="sort")]
    last = report.screen(rows, "v2").split("\n")[-1]
    assert (
        last
        == "3 pairs under rule v2: 0 DUPLICATE_CELL, 0 TRUNCATED, 2 NO_ROWS, 0 IR_UNREAD, 0 NO_TRITON, 1 IR_CHANGED, 0 NO_IR_DIFF"
    )


def test_an_ab_row_with_rejected_rows_says_how_many_did_not_pair():
    assert (
        report.ab_note(ab_row(rejected=3, rejected_reasons="MISSING_SIDE"))
        == "3 rows did not pair (MISSING_SIDE; see --rejected)"
    )
    assert report.ab_note(ab_row(rejected=1, rejected_reasons="NOT_COUNTED")).startswith("1 row did not pair ")
    text = report.ab([ab_row(rejected=2, rejected_reasons="CALIBER_MISMATCH"), ab_row(op="topk")], SETTINGS)
    assert "2 rows did not pair (CALIBER_MISMATCH; see --rejected)" in text
    assert text.split("\n")[-1] == "1 with rows that did not pair, 0 with direct-fallback rows"


def test_the_ab_summary_counts_findings_and_states_the_thresholds():
    rows = [
        ab_row(),
        ab_row(finding="inconclusive", to_settle="more rounds: at least 9 in all"),
        ab_row(finding="no change"),
        ab_row(finding="too few rounds", rounds=2, ci_low=None, ci_high=None),
    ]
    text = report.ab(rows, SETTINGS)
    assert text.split("\n")[-1] == (
        "4 ranges: 1 faster, 0 slower, 1 no change, 1 inconclusive, 1 too few rounds (rule v3; faster / slower: "
        "q <= 0.05 and the 95% interval beyond +-2%; no change: the interval within it; at least 3 rounds)"
    )
    assert "more rounds: at least 9 in all" in text


def test_a_finding_within_the_noise_floor_says_so_and_a_missing_floor_says_why():
    assert report.ab_note(ab_row(clears_floor=0, noise_floor=0.5)).startswith(
        "its range lies within its shape's noise floor"
    )
    assert report.ab_note(ab_row(clears_floor=1, noise_floor=0.05)) == ""
    assert report.ab_note(ab_row(finding="no change", clears_floor=0, noise_floor=0.5)) == ""
    assert (
        report.floor_text(ab_row(floor_note="none under this caliber; 0.02 where bench_level=comprehensive"))
        == "none under this caliber; 0.02 where bench_level=comprehensive"
    )
    assert report.floor_text(ab_row(noise_floor=0.05)) == "+-0.05"


def test_the_ab_report_leaves_the_rows_as_they_were():
    rows = [ab_row(rejected=1, rejected_reasons="MISSING_SIDE")]
    report.ab(rows, SETTINGS)
    assert "note" not in rows[0]


def test_a_rejected_row_shows_its_differences_else_why_it_was_not_counted():
    base = {
        "root": "c",
        "card": 0,
        "round": 1,
        "op": "topk",
        "dtype": "",
        "shape": "[1]",
        "sides": "both",
        "reason": "CALIBER_MISMATCH",
        "fields": "GPU_ARCH",
    }
    text = report.rejected(
        [
            {**base, "differences": "GPU_ARCH: a in before, b in after", "not_counted": None},
            {**base, "reason": "NOT_COUNTED", "differences": None, "not_counted": "error_msg"},
        ]
    )
    lines = text.split("\n")
    assert lines[0].split()[-1] == "detail"
    assert lines[2].endswith("GPU_ARCH: a in before, b in after") and lines[3].endswith("error_msg")


def test_noise_floors_are_headed_as_not_results_even_when_there_are_none():
    assert report.noise([]).startswith("noise floors, not results, per shape and machine (caliber = ")
    assert "\n" not in report.noise([])


def test_a_compare_side_without_a_range_is_blank_and_one_with_no_rows_says_so():
    row = {"range_label_a": None, "n_rows_a": 0, "range_label_b": "indicative (one round)", "n_rows_b": 0}
    assert report.compare_range(row, "a") == ""
    assert report.compare_range(row, "b") == "(indicative (one round): no row paired)"


def test_rescore_with_nothing_moved_prints_only_the_totals():
    result = {"rule": "v3", "pairs": 4, "moved": [], "counts": [], "unchanged": 3, "without_original": 1}
    assert report.rescore(result) == "rule v3: 4 pairs, 0 moved, 3 unchanged, 1 without a harness verdict"


def test_an_interrupted_campaign_says_how_to_resume_not_what_is_next():
    cards = [
        CardState(0, [], done=2, cells=8),
        CardState(1, [], done=1, skipped=1, failed=["card 1 x: exit status 3"], cells=2),
    ]
    text = report.campaign(CampaignResult(Path("/r/c"), True, cards, []))
    assert text.split("\n") == [
        "/r/c: 3 ops run, 1 skipped as complete, 1 failed; 10 cells recorded",
        "failed: card 1 x: exit status 3",
        "interrupted: continue with zlstore run campaign --resume --root /r/c",
    ]
    finished = report.campaign(CampaignResult(Path("/r/c"), False, cards, []))
    assert finished.endswith("\nnext: zlstore ab /r/c") and "--resume" not in finished


def test_a_shape_under_two_calibers_says_which_row_is_which():
    rows = [
        ab_row(root_id=1, caliber_id=1, cudagraph="0", backend="cuda"),
        ab_row(root_id=1, caliber_id=2, cudagraph="1", backend="cuda"),
        ab_row(root_id=1, op="topk", caliber_id=1, cudagraph="0", backend="cuda"),
    ]
    notes = report.caliber_notes(rows)
    assert notes == {
        0: "one of 2 calibers of this shape: cudagraph=0",
        1: "one of 2 calibers of this shape: cudagraph=1",
    }
    text = report.ab(rows, SETTINGS)
    assert "one of 2 calibers of this shape: cudagraph=1" in text


def test_too_few_rounds_show_no_effect():
    text = report.ab(
        [
            ab_row(
                finding="too few rounds",
                rounds=2,
                p_value=None,
                q_value=None,
                ci_low=None,
                ci_high=None,
                effect=1.87654,
            )
        ],
        SETTINGS,
    )
    assert "1.877" not in text and "too few rounds" in text
