"""The verdicts view: every screening pair judged under every rule exactly as
the generator built it, the ranges only where a verdict licenses one, and the
`zlstore screen` table that prints them."""

import re
import shutil
from pathlib import Path

import pytest

from zlstore import Store
from zlstore.show import judge

from .judging import NO_RANGE, RULES, by_key, invoke, json_out, median, screen_pairs


def test_verdict_kinds_view_is_judge_py(example_store):
    rows = list(example_store.db.query("SELECT * FROM verdict_kinds ORDER BY position"))
    assert [r["verdict"] for r in rows] == list(judge.VERDICT_NAMES)
    assert [r["range_label"] for r in rows] == [v.range_label for v in judge.VERDICTS]
    reasons = list(example_store.db.query("SELECT reason FROM rejection_reasons ORDER BY position"))
    assert [r["reason"] for r in reasons] == list(judge.REASON_NAMES)


@pytest.mark.parametrize("rule", RULES)
def test_every_pair_under_every_rule(example_store, example_source, rule):
    _, manifest = example_source
    rows = by_key(judge.verdicts(example_store, rule=rule), "root", "op", "dtype")
    expected = {(root, op, dtype): spec["verdict"][rule] for root, op, dtype, spec in screen_pairs(manifest)}
    assert {key: row["verdict"] for key, row in rows.items()} == expected
    assert {row["rule"] for row in rows.values()} == {rule}


def test_the_verdicts_view_follows_the_current_rule(example_store, example_source):
    _, manifest = example_source
    for rule in ("v2", "v4", "v3"):
        example_store.set_rule(rule)
        rows = by_key(example_store.db.query("SELECT * FROM verdicts"), "root", "op", "dtype")
        assert {k: r["verdict"] for k, r in rows.items()} == {
            (root, op, dtype): spec["verdict"][rule] for root, op, dtype, spec in screen_pairs(manifest)
        }
    by_rule = example_store.conn.execute("SELECT DISTINCT rule FROM verdicts_by_rule ORDER BY rule").fetchall()
    assert [r[0] for r in by_rule] == list(RULES)


def moved_pairs(store, manifest, old, new, why):
    """The generator's pairs whose verdict differs between two rules, each
    with (its verdict under old, under new) as the store judges them."""
    moved = [
        (root, op, dtype, spec)
        for root, op, dtype, spec in screen_pairs(manifest)
        if spec["verdict"][old] != spec["verdict"][new]
    ]
    assert moved, why
    before, after = (by_key(judge.verdicts(store, rule=rule), "root", "op", "dtype") for rule in (old, new))
    return [
        (spec, (before[(root, op, dtype)]["verdict"], after[(root, op, dtype)]["verdict"]))
        for root, op, dtype, spec in moved
    ]


def test_annotation_only_pair_moves_from_v2_to_v3(example_store, example_source):
    source, manifest = example_source
    for spec, verdicts in moved_pairs(
        example_store, manifest, "v2", "v3", "the example tree must hold an annotation-only pair"
    ):
        assert verdicts == ("IR_CHANGED", "NO_IR_DIFF")
        # independently of the rules: the raw IR differs, and only where ttg.rlc-* sits
        before, after = (ir_texts(source / spec["cells"][side]) for side in ("before", "after"))
        assert before != after
        assert len(before) == len(after)
        for b, a in zip(before, after):
            b_lines, a_lines = b.splitlines(), a.splitlines()
            assert len(b_lines) == len(a_lines)
            differing = [(x, y) for x, y in zip(b_lines, a_lines) if x != y]
            assert all("ttg.rlc-" in x + y for x, y in differing), differing


def test_index_only_pair_moves_from_v1_to_v2(example_store, example_source):
    source, manifest = example_source
    for spec, verdicts in moved_pairs(
        example_store, manifest, "v1", "v2", "the example tree must hold a pair whose sides differ only in index.tsv"
    ):
        assert verdicts == ("IR_CHANGED", "NO_IR_DIFF")
        before, after = (source / spec["cells"][side] for side in ("before", "after"))
        assert ir_texts(before) == ir_texts(after)
        assert (before / "index.tsv").read_bytes() != (after / "index.tsv").read_bytes()


def ir_texts(cell: Path):
    return [p.read_text() for p in sorted(cell.rglob("*.ttgir"), key=lambda p: p.name)]


def test_no_kernel_is_read_as_no_triton(example_store, example_source):
    _, manifest = example_source
    cases = [(root, op, dtype) for root, op, dtype, spec in screen_pairs(manifest) if spec.get("orig") == "NO_KERNEL"]
    assert cases
    rows = by_key(judge.verdicts(example_store), "root", "op", "dtype")
    for key in cases:
        assert rows[key]["orig_verdict"] == "NO_TRITON"
        assert rows[key]["verdict"] == "NO_TRITON"
    raw = {r[0] for r in example_store.conn.execute("SELECT raw_verdict FROM recorded_verdicts")}
    assert "NO_KERNEL" in raw


@pytest.mark.parametrize("rule", RULES)
def test_ranges_only_where_the_verdict_licenses_one(example_store, example_source, rule):
    _, manifest = example_source
    rows = by_key(judge.verdicts(example_store, rule=rule), "root", "op", "dtype")
    for root, op, dtype, spec in screen_pairs(manifest):
        row = rows[(root, op, dtype)]
        verdict = spec["verdict"][rule]
        if verdict in NO_RANGE:
            assert (row["range_label"], row["n_rows"], row["min"], row["median"], row["max"]) == (None,) * 5, row
            continue
        assert row["range_label"] == {"IR_CHANGED": "indicative (one round)", "NO_IR_DIFF": "noise floor"}[verdict]
        ratios = spec["ratios"]
        assert row["n_rows"] == len(ratios)
        assert row["min"] == pytest.approx(min(ratios))
        assert row["max"] == pytest.approx(max(ratios))
        assert row["median"] == pytest.approx(median(ratios))


def test_even_and_odd_medians_in_the_verdicts(example_store, example_source):
    _, manifest = example_source
    rows = by_key(judge.verdicts(example_store), "root", "op", "dtype")
    counts = set()
    for root, op, dtype, spec in screen_pairs(manifest):
        ratios = sorted(spec["ratios"])
        if rows[(root, op, dtype)]["range_label"] is None or not ratios:
            continue
        n = len(ratios)
        counts.add(n % 2)
        expected = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
        assert rows[(root, op, dtype)]["median"] == pytest.approx(expected)
    assert counts == {0, 1}, "the example tree must give ranges of both even and odd length"


def test_columns_and_recorded_verdicts(example_store, example_source):
    _, manifest = example_source
    rows = by_key(judge.verdicts(example_store), "root", "op", "dtype")
    for root, op, dtype, spec in screen_pairs(manifest):
        row = rows[(root, op, dtype)]
        assert row["recorded_verdict"] == spec["recorded"]
        assert row["orig_verdict"] == spec["orig_canonical"]
        assert [row["cl_before"], row["cl_after"]] == spec["convert_layouts"]
        assert [row["elapsed_before"], row["elapsed_after"]] == pytest.approx(spec["elapsed"])
        assert row["backend"] == manifest["root_info"][root]["caliber"]["backend"]
        assert row["bench_level"] == manifest["root_info"][root]["caliber"]["bench_level"]
        if spec["verdict"]["v3"] == "TRUNCATED":
            assert {row["rc_before"], row["rc_after"]} & set(judge.TIMEOUT_RCS)


def test_a_pair_with_a_missing_side_is_listed_as_no_rows(example_tree, tmp_path):
    tree, manifest = example_tree
    root, op, dtype, spec = next(
        p for p in screen_pairs(manifest) if p[3]["verdict"]["v3"] == "IR_CHANGED" and p[0] != "ab_rlc_20261012_101500"
    )
    shutil.rmtree(tree / spec["cells"]["after"])
    with Store(tmp_path / "missing.db") as store:
        store.ingest(tree)
        row = by_key(judge.verdicts(store, root), "op", "dtype")[(op, dtype)]
    assert row["verdict"] == "NO_ROWS"
    assert "no after cell" in row["note"]
    assert row["range_label"] is None and row["n_rows"] is None
    assert row["recorded_verdict"] == spec["recorded"]


def table_lines(output):
    return [line for line in output.splitlines() if line.strip()]


def test_screen_prints_a_labelled_range_only_where_the_view_has_one(example_store_path, example_source):
    _, manifest = example_source
    result = invoke(example_store_path, "screen")
    assert result.exit_code == 0, result.output
    lines = table_lines(result.stdout)
    expected = {(root, op): spec["verdict"]["v3"] for root, op, _, spec in screen_pairs(manifest)}
    seen = 0
    root = None
    for i, line in enumerate(lines):
        if line.split()[0] in manifest["screen"]:
            root = line.split()[0]
            continue
        words = line.split()
        verdict = next((w for w in words if w in judge.VERDICT_NAMES), None)
        if verdict is None or (root, words[0]) not in expected:
            continue
        seen += 1
        assert verdict == expected[(root, words[0])], line
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if verdict in NO_RANGE:
            assert "speedup range" not in following, (line, following)
        elif verdict == "IR_CHANGED":
            assert following.strip().startswith("speedup range (indicative (one round); not a result):"), following
        else:
            assert following.strip().startswith("speedup range (noise floor; not a result):"), following
    assert seen == len(expected)


def test_screen_ends_with_counts_per_verdict(example_store_path, example_source):
    _, manifest = example_source
    result = invoke(example_store_path, "screen")
    last = result.stdout.strip().splitlines()[-1]
    counts = {name: 0 for name in judge.VERDICT_NAMES}
    for *_, spec in screen_pairs(manifest):
        counts[spec["verdict"]["v3"]] += 1
    for name, n in counts.items():
        assert re.search(rf"\b{n} {name}\b", last), (name, n, last)


def test_screen_rule_option_does_not_change_the_current_rule(example_store, example_source):
    _, manifest = example_source
    rows = json_out(invoke(example_store.path, "screen", "--rule", "v2", "--json"))
    assert {(r["root"], r["op"], r["dtype"]): r["verdict"] for r in rows} == {
        (root, op, dtype): spec["verdict"]["v2"] for root, op, dtype, spec in screen_pairs(manifest)
    }
    assert example_store.current_rule == "v3"


def test_screen_json_keys_are_the_view_columns(example_store_path):
    rows = json_out(invoke(example_store_path, "screen", "ab_rlc_20261014_083000", "--json"))
    with Store(example_store_path) as store:
        columns = [c.name for c in store.db["verdicts"].columns]
    assert rows and all(list(r) == columns for r in rows)
    assert {r["root"] for r in rows} == {"ab_rlc_20261014_083000"}


def test_screen_root_by_path(example_store_path, example_source):
    source, _ = example_source
    rows = json_out(invoke(example_store_path, "screen", source / "ab_rlc_20261015_120000", "--json"))
    assert {r["root"] for r in rows} == {"ab_rlc_20261015_120000"}


def test_unknown_root_is_a_usage_error(example_store_path):
    result = invoke(example_store_path, "screen", "ab_rlc_nope")
    assert result.exit_code == 2
    assert "ab_rlc_nope" in result.output and "ab_rlc_20261012_101500" in result.output
