"""Noise floors: how far one measurement of an operator and shape wanders,
from the NO_IR_DIFF pairs under the current rule, always labelled as a
noise floor. The example tree's cells record no environment: every floor
is one screening root's (ARTIFACTS.md, Noise floors)."""

import pytest

from zlstore import caliber
from zlstore.show import judge

from .judging import invoke, json_out, screen_pairs


def expected_floors(manifest, rule):
    """(row op, row dtype, shape, caliber, root) -> (n, floor) from the
    NO_IR_DIFF pairs' paired rows."""
    floors: dict[tuple, tuple[int, float]] = {}
    for root, _, _, spec in screen_pairs(manifest):
        if spec["verdict"][rule] != "NO_IR_DIFF":
            continue
        cal = tuple(manifest["root_info"][root]["caliber"][name] for name in caliber.NAMES)
        for row in spec["paired_rows"]:
            key = (row["op"], row["dtype"], row["shape"], cal, root)
            n, floor = floors.get(key, (0, 0.0))
            floors[key] = (n + 1, max(floor, abs(row["ratio"] - 1)))
    return floors


def got_floors(rows):
    return {(r["op"], r["dtype"], r["shape"], tuple(r[name] for name in caliber.NAMES), r["roots"]): r for r in rows}


@pytest.mark.parametrize("rule", ["v3", "v2"])
def test_floors_under_the_current_rule(example_store, example_source, rule):
    _, manifest = example_source
    example_store.set_rule(rule)
    expected = expected_floors(manifest, rule)
    assert expected
    got = got_floors(judge.noise_floors(example_store))
    assert set(got) == set(expected)
    for key, (n, floor) in expected.items():
        row = got[key]
        assert row["n"] == n
        assert row["floor"] == pytest.approx(floor)
        assert row["n_roots"] == 1 and row["gpu"] is None  # no environment recorded: never pooled
        assert row["label"] == "noise floor"
        assert row["rule"] == rule


def test_switching_the_rule_changes_the_floors(example_store, example_source):
    _, manifest = example_source
    v2, v3 = expected_floors(manifest, "v2"), expected_floors(manifest, "v3")
    assert set(v2) != set(v3), "an annotation-only pair is NO_IR_DIFF under v3 only"
    example_store.set_rule("v2")
    assert set(got_floors(judge.noise_floors(example_store))) == set(v2)


def test_op_filter(example_store, example_source):
    _, manifest = example_source
    op = sorted(expected_floors(manifest, "v3"))[0][0]
    rows = judge.noise_floors(example_store, op)
    assert rows and {r["op"] for r in rows} == {op}


def test_cli_labels_every_floor(example_store_path, example_source):
    _, manifest = example_source
    result = invoke(example_store_path, "noise")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "not results" in lines[0]
    body = [l for l in lines[3:] if l.strip()]
    assert len(body) == len(expected_floors(manifest, "v3"))
    assert all("unknown" in l for l in body)
    rows = json_out(invoke(example_store_path, "noise", "--op", "softmax", "--json"))
    assert rows and all(r["label"] == "noise floor" and r["op"] == "softmax" for r in rows)


def test_ranges_are_judged_against_the_floor_of_their_caliber(example_store, example_source):
    """The example campaign is measured under its screens' caliber (campaigns
    force isolate_tuner_cache=1, and so did the screens): their floors apply
    to it; under another caliber, none does."""
    _, manifest = example_source
    root = manifest["campaign"]["root"]
    screen_root = manifest["comparable_roots"][0][0]
    conn = example_store.conn
    screen_caliber = conn.execute("SELECT caliber_id FROM roots WHERE name = ?", (screen_root,)).fetchone()[0]
    campaign_caliber = conn.execute(
        "SELECT caliber_id FROM cells WHERE root_id = (SELECT id FROM roots WHERE name = ?) "
        "GROUP BY caliber_id ORDER BY count(*) DESC LIMIT 1",
        (root,),
    ).fetchone()[0]
    assert campaign_caliber == screen_caliber
    fields = ", ".join(caliber.NAMES)
    values = ", ".join("'7'" if name == "direct_repeat" else name for name in caliber.NAMES)
    with conn:  # another direct_repeat: another caliber, one no screen was measured under
        other = conn.execute(
            f"INSERT INTO calibers ({fields}) SELECT {values} FROM calibers WHERE id = ?", (screen_caliber,)
        ).lastrowid
        conn.execute(
            "UPDATE cells SET caliber_id = ? WHERE caliber_id = ? AND root_id = (SELECT id FROM roots WHERE name = ?)",
            (other, campaign_caliber, root),
        )
    example_store.derive()  # an edit by hand: the explicit step derives it (a read never does)
    assert all(r["noise_floor"] is None and r["clears_floor"] is None for r in judge.ab_ranges(example_store, root))
    with conn:
        conn.execute("UPDATE cells SET caliber_id = ? WHERE caliber_id = ?", (screen_caliber, other))
    # the campaign's cells record no machine: its floors are its own
    # screening root's (SCREEN_ROOT), per shape, and no other root's
    example_store.derive()
    floors = {
        (op, dtype, shape): (n, floor)
        for (op, dtype, shape, _, floor_root), (n, floor) in expected_floors(manifest, "v3").items()
        if floor_root == manifest["campaign"]["screen_root"]
    }
    judged = 0
    for row in judge.ab_ranges(example_store, root):
        key = (row["op"], row["dtype"], row["shape"])
        if key not in floors or not row["rounds"]:
            assert row["noise_floor"] is None
            continue
        judged += 1
        n, floor = floors[key]
        assert row["noise_floor"] == pytest.approx(floor)
        assert (row["floor_rows"], row["floor_roots"]) == (n, manifest["campaign"]["screen_root"])
        assert row["clears_floor"] == int(row["min"] > 1 + floor or row["max"] < 1 - floor)
    assert judged
