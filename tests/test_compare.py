"""compare: two screening roots side by side only under one and the same
known caliber; otherwise refused, naming every differing field and value."""

import csv
import io
import json

import pytest

from zlstore import caliber
from zlstore.show import judge

from .judging import invoke, json_out, screen_pairs


def test_comparable_roots_side_by_side(example_store_path, example_source):
    _, manifest = example_source
    a, b = manifest["comparable_roots"][0]
    rows = json_out(invoke(example_store_path, "compare", a, b, "--json"))
    specs = {root: {(op, dtype): spec for r, op, dtype, spec in screen_pairs(manifest) if r == root} for root in (a, b)}
    assert {(r["op"], r["dtype"]) for r in rows} == set(specs[a]) | set(specs[b])
    for row in rows:
        key = (row["op"], row["dtype"])
        for side, root in (("a", a), ("b", b)):
            spec = specs[root].get(key)
            assert row[f"verdict_{side}"] == (spec["verdict"]["v3"] if spec else None)
    text = invoke(example_store_path, "compare", a, b)
    assert text.exit_code == 0 and a in text.stdout and b in text.stdout


@pytest.mark.parametrize("index", [0, 1])
def test_different_calibers_are_refused_naming_fields_and_values(example_store_path, example_source, index):
    _, manifest = example_source
    a, b, fields = manifest["incomparable_roots"][index]
    result = invoke(example_store_path, "compare", a, b)
    assert result.exit_code == 2
    cal_a, cal_b = manifest["root_info"][a]["caliber"], manifest["root_info"][b]["caliber"]
    differing = [f for f in caliber.NAMES if cal_a[f] != cal_b[f]]
    assert differing == fields
    for field in fields:
        assert field in result.output
        assert cal_a[field] in result.output and cal_b[field] in result.output
    for field in set(caliber.NAMES) - set(fields):
        assert f"{field}:" not in result.output
    assert result.stdout == ""  # no table at all


def test_library_raises_caliber_mismatch(example_store, example_source):
    _, manifest = example_source
    a, b, fields = manifest["incomparable_roots"][0]
    with pytest.raises(judge.CaliberMismatch) as raised:
        judge.compare(example_store, a, b)
    cal_a, cal_b = manifest["root_info"][a]["caliber"], manifest["root_info"][b]["caliber"]
    assert raised.value.differences == [(f, cal_a[f], cal_b[f]) for f in fields]


def test_unknown_caliber_is_refused(example_store, example_source):
    _, manifest = example_source
    a, b = manifest["comparable_roots"][0]
    with example_store.conn:
        root_id = example_store.root(b)["id"]
        example_store.conn.execute("UPDATE roots SET caliber_id = NULL WHERE id = ?", (root_id,))
        example_store.conn.execute("UPDATE cells SET caliber_id = NULL WHERE root_id = ?", (root_id,))
    with pytest.raises(judge.CaliberMismatch) as raised:
        judge.compare(example_store, a, b)
    assert {vb for _, _, vb in raised.value.differences} == {"unknown"}
    result = invoke(example_store.path, "compare", a, b)
    assert result.exit_code == 2 and "unknown" in result.output


def test_a_root_of_mixed_calibers_is_refused(example_store, example_source):
    _, manifest = example_source
    a, b = manifest["comparable_roots"][0]
    other = example_store.conn.execute(
        "SELECT caliber_id FROM cells WHERE root_id = ? AND caliber_id IS NOT NULL LIMIT 1",
        (example_store.root(manifest["incomparable_roots"][0][1])["id"],),
    ).fetchone()[0]
    with example_store.conn:
        example_store.conn.execute(
            "UPDATE cells SET caliber_id = ? WHERE id = (SELECT min(id) FROM cells WHERE root_id = ?)",
            (other, example_store.root(b)["id"]),
        )
    with pytest.raises(judge.CaliberMismatch) as raised:
        judge.compare(example_store, a, b)
    assert any("|" in vb for _, _, vb in raised.value.differences)


def test_compare_takes_screening_roots_only(example_store_path, example_source):
    _, manifest = example_source
    result = invoke(example_store_path, "compare", manifest["roots"][0], manifest["campaign"]["root"])
    assert result.exit_code == 2
    assert "not a screening root" in result.output


@pytest.mark.parametrize("index", [0, 1])
def test_a_refusal_is_json_with_json(example_store_path, example_source, index):
    """A script asking for JSON gets the refusal as JSON on stdout, with
    every differing field and its value in each root; still exit 2, and
    the one-line error on stderr."""
    _, manifest = example_source
    a, b, fields = manifest["incomparable_roots"][index]
    cal_a, cal_b = manifest["root_info"][a]["caliber"], manifest["root_info"][b]["caliber"]
    result = invoke(example_store_path, "compare", a, b, "--json")
    assert result.exit_code == 2
    refusal = json.loads(result.stdout)
    assert refusal["a"] == a and refusal["b"] == b and refusal["error"].startswith("refusing to compare: ")
    assert refusal["differences"] == [{"field": f, "a": cal_a[f], "b": cal_b[f]} for f in fields]
    assert result.stderr.startswith("Error: refusing to compare: ")
    rows = list(csv.DictReader(io.StringIO(invoke(example_store_path, "compare", a, b, "--csv").stdout)))
    assert rows == [{"field": f, "a": cal_a[f], "b": cal_b[f]} for f in fields]
