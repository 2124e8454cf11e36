"""A/B pairing: ranges over rounds, every row that did not pair kept with its
reason, the caliber guard, the fallback annotation and the medians."""

import re

import pytest

from zlstore.show import judge
from zlstore.names import DUPLICATE

from .judging import by_key, invoke, json_out, median, screen_pairs


def campaign(manifest):
    return manifest["campaign"]


def range_key(key):
    op, dtype, shape = key.split("|", 2)
    return op, dtype, shape


def test_campaign_ranges_are_the_generators(example_store, example_source):
    _, manifest = example_source
    root = campaign(manifest)["root"]
    rows = [r for r in judge.ab_ranges(example_store, root) if r["rounds"]]
    got = by_key(rows, "op", "dtype", "shape")
    expected = {range_key(k): v for k, v in campaign(manifest)["ranges"].items()}
    assert set(got) == set(expected)
    for key, spec in expected.items():
        row = got[key]
        assert row["rounds"] == spec["n"] == len(spec["ratios"])
        assert row["min"] == pytest.approx(min(spec["ratios"]))
        assert row["max"] == pytest.approx(max(spec["ratios"]))
        assert row["median"] == pytest.approx(median(spec["ratios"]))
        assert bool(row["fallback"]) == spec["fallback"], key


def test_medians_of_odd_and_even_counts(example_store, example_source):
    _, manifest = example_source
    rows = by_key(judge.ab_ranges(example_store, campaign(manifest)["root"]), "op", "dtype", "shape")
    parities = set()
    for key, spec in campaign(manifest)["ranges"].items():
        ratios = sorted(spec["ratios"])
        n = len(ratios)
        parities.add(n % 2)
        expected = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
        assert rows[range_key(key)]["median"] == pytest.approx(expected)
    assert parities == {0, 1}, "the example campaign must have ranges of both even and odd length"


def rejected_set(rows):
    return {(r["op"], r["dtype"], r["shape"], r["round"], r["reason"]) for r in rows}


def test_campaign_rejections_are_the_generators(example_store, example_source):
    _, manifest = example_source
    root = campaign(manifest)["root"]
    rows = judge.ab_rejected(example_store, root)
    expected = campaign(manifest)["rejected"]
    assert rejected_set(rows) == {(e["op"], e["dtype"], e["shape"], e["round"], e["reason"]) for e in expected}
    got = by_key(rows, "op", "dtype", "shape", "round")
    for e in expected:
        row = got[(e["op"], e["dtype"], e["shape"], e["round"])]
        assert row["card"] == e["card"]
        assert row["cell_op"] == e["cell_op"]
        if e["fields"]:
            assert row["fields"].split(", ") == e["fields"], row
        if e["reason"] == "MISSING_SIDE":
            assert row["sides"] == e["present"]


def test_screen_rejections_are_the_generators(example_store, example_source):
    _, manifest = example_source
    expected = {
        (root, u["op"], u["dtype"], u["shape"], u["reason"])
        for root, _, _, spec in screen_pairs(manifest)
        for u in spec["unpaired"]
    }
    screen_roots = set(manifest["screen"])
    got = {
        (r["root"], r["op"], r["dtype"], r["shape"], r["reason"])
        for r in judge.ab_rejected(example_store)
        if r["root"] in screen_roots
    }
    assert got == expected


def test_every_reason_occurs_and_is_a_judge_name(example_store):
    reasons = {r["reason"] for r in judge.ab_rejected(example_store)}
    # The example tree holds no copied cell (test_duplicate_cells.py copies one).
    assert reasons == set(judge.REASON_NAMES) - {DUPLICATE}


def test_rejected_counts_on_each_range(example_store, example_source):
    _, manifest = example_source
    root = campaign(manifest)["root"]
    rows = by_key(judge.ab_ranges(example_store, root), "op", "dtype", "shape")
    expected: dict[tuple[str, str, str], int] = {}
    for e in campaign(manifest)["rejected"]:
        expected[(e["op"], e["dtype"], e["shape"])] = expected.get((e["op"], e["dtype"], e["shape"]), 0) + 1
    for key, row in rows.items():
        assert row["rejected"] == expected.get(key, 0), key


def test_cross_caliber_rows_never_pair(example_store, example_source):
    _, manifest = example_source
    case = campaign(manifest)["cases"]["caliber_mismatch"]
    pairs = judge._rows(
        example_store,
        "SELECT * FROM ab_pairs WHERE root = ? AND op = ? AND dtype = ? AND round = ?",
        (campaign(manifest)["root"], case["op"], case["dtype"], case["round"]),
    )
    assert pairs == []
    # and in general: every pair's two cells have one and the same known caliber
    mixed = example_store.conn.execute(
        """SELECT count(*) FROM ab_pairs p
           JOIN cells b ON b.id = p.before_cell_id JOIN cells a ON a.id = p.after_cell_id
           WHERE b.caliber_id IS NULL OR a.caliber_id IS NULL OR b.caliber_id <> a.caliber_id"""
    ).fetchone()[0]
    assert mixed == 0
    rejected = [
        r for r in judge.ab_rejected(example_store) if r["reason"] == "CALIBER_MISMATCH" and r["op"] == case["op"]
    ]
    assert rejected
    field = case["fields"][0]
    before, after = case["values"]
    assert all(r["differences"] == f"{field}: {before} before, {after} after" for r in rejected)


def test_pairs_and_rejections_account_for_every_row(example_store):
    conn = example_store.conn
    rows = conn.execute(
        "SELECT count(*) FROM measurements m JOIN cells c ON c.id = m.cell_id WHERE c.side IN ('before', 'after')"
    ).fetchone()[0]
    pairs = conn.execute("SELECT count(*) FROM ab_pairs").fetchone()[0]
    rejected = conn.execute(
        "SELECT coalesce(sum(CASE sides WHEN 'both' THEN 2 ELSE 1 END), 0) FROM ab_rejected"
    ).fetchone()[0]
    assert 2 * pairs + rejected == rows


def test_precedence_when_several_reasons_apply(example_store, example_source):
    """Caliber first: a mismatched round whose rows are also uncounted or
    one-sided is still CALIBER_MISMATCH; an unknown caliber wins over all."""
    _, manifest = example_source
    root = campaign(manifest)["root"]
    conn = example_store.conn
    mismatch = campaign(manifest)["cases"]["caliber_mismatch"]
    unknown = campaign(manifest)["cases"]["caliber_unknown"]
    rows = by_key(judge.ab_rejected(example_store, root), "op", "round", "shape")
    m_row = next(r for k, r in rows.items() if k[:2] == (mismatch["op"], mismatch["round"]))
    u_row = next(r for k, r in rows.items() if k[:2] == (unknown["op"], unknown["round"]))
    with conn:
        conn.execute("UPDATE measurements SET counted = 0 WHERE id = ?", (m_row["before_measurement_id"],))
        conn.execute("DELETE FROM measurements WHERE id = ?", (u_row["after_measurement_id"],))
    example_store.derive()  # an edit by hand: the explicit step derives it (a read never does)
    after = by_key(judge.ab_rejected(example_store, root), "op", "round", "shape")
    assert after[(m_row["op"], m_row["round"], m_row["shape"])]["reason"] == "CALIBER_MISMATCH"
    assert after[(u_row["op"], u_row["round"], u_row["shape"])]["reason"] == "CALIBER_UNKNOWN"
    assert after[(u_row["op"], u_row["round"], u_row["shape"])]["sides"] == "before"


def test_missing_side_beats_not_counted(example_store, example_source):
    _, manifest = example_source
    both = [
        (root, u)
        for root, _, _, spec in screen_pairs(manifest)
        for u in spec["unpaired"]
        if u["reason"] == "MISSING_SIDE"
    ]
    rows = by_key(judge.ab_rejected(example_store), "root", "op", "shape")
    # a row present on one side only and not counted there is MISSING_SIDE
    one_sided_uncounted = [
        rows[(root, u["op"], u["shape"])] for root, u in both if rows[(root, u["op"], u["shape"])]["not_counted"]
    ]
    assert one_sided_uncounted, "the example must hold a one-sided row that is also not counted"
    assert all(r["reason"] == "MISSING_SIDE" for r in one_sided_uncounted)


def test_ab_cli_lines_say_fallback_and_unpaired(example_store_path, example_source):
    _, manifest = example_source
    root = campaign(manifest)["root"]
    result = invoke(example_store_path, "ab", root)
    assert result.exit_code == 0, result.output
    lines, last = {}, None
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) >= 3 and words[2].startswith("["):
            last = (words[0], words[1], words[2])
            lines[last] = line
        elif line.startswith("    ") and last is not None:  # the range's note, on lines of its own below it
            lines[last] += " " + " ".join(words)
        else:
            last = None
    rejected = {(e["op"], e["dtype"], e["shape"]) for e in campaign(manifest)["rejected"]}
    for key, spec in campaign(manifest)["ranges"].items():
        line = lines[range_key(key)]
        assert ("direct fallback" in line) == spec["fallback"], line
        if range_key(key) in rejected:
            assert re.search(r"\b1 row did not pair\b", line), line
        else:
            assert "did not pair" not in line, line


def test_ab_rejected_cli_and_json(example_store_path, example_source):
    _, manifest = example_source
    root = campaign(manifest)["root"]
    rows = json_out(invoke(example_store_path, "ab", root, "--rejected", "--json"))
    assert rejected_set(rows) == {
        (e["op"], e["dtype"], e["shape"], e["round"], e["reason"]) for e in campaign(manifest)["rejected"]
    }
    text = invoke(example_store_path, "ab", root, "--rejected").stdout
    for reason in set(judge.REASON_NAMES) - {DUPLICATE}:
        assert reason in text


def test_ab_help_states_the_precedence():
    from click.testing import CliRunner

    from zlstore.cli import cli

    text = CliRunner().invoke(cli, ["ab", "--help"]).output
    positions = [text.index(name) for name in judge.REASON_NAMES]
    assert positions == sorted(positions)


def test_ab_on_a_screening_root_points_to_screen(example_store_path):
    result = invoke(example_store_path, "ab", "ab_rlc_20261012_101500")
    assert result.exit_code == 2
    assert "zlstore screen ab_rlc_20261012_101500" in result.output


def test_ab_json_keys_are_the_view_columns(example_store_path):
    rows = json_out(invoke(example_store_path, "ab", "--json"))
    from zlstore import Store

    with Store(example_store_path) as store:
        # and last, what a finding's op's IR did (irchanges.py): null for any other range
        assert list(rows[0]) == [c.name for c in store.db["ab_ranges"].columns] + ["ir_changes"]
