"""Rescoring: the judgement under a rule against the harness's original
(screen.tsv.orig where it exists, else screen.tsv), and --write rewriting
screen.tsv the way the harness's RESCORE did, never losing the original."""

import csv
import json
import io

import pytest

from zlstore import Store
from zlstore.show import judge
from zlstore.read import layout

from .judging import RULES, has_orig, invoke, json_out, original_verdict, screen_pairs


def expected_moves(manifest, rule):
    moves = set()
    for root, op, dtype, spec in screen_pairs(manifest):
        original = original_verdict(manifest, root, spec)
        if original is not None and original != spec["verdict"][rule]:
            moves.add((root, op, dtype, original, spec["verdict"][rule]))
    return moves


@pytest.mark.parametrize("rule", RULES)
def test_moves_and_counts_under_every_rule(example_store, example_source, rule):
    _, manifest = example_source
    result = judge.rescore(example_store, rule=rule)
    moved = {(m["root"], m["op"], m["dtype"], m["from"], m["to"]) for m in result["moved"]}
    assert moved == expected_moves(manifest, rule)
    counts: dict[tuple[str, str], int] = {}
    for *_, f, t in expected_moves(manifest, rule):
        counts[(f, t)] = counts.get((f, t), 0) + 1
    assert {(c["from"], c["to"]): c["n"] for c in result["counts"]} == counts
    assert result["pairs"] == sum(1 for _ in screen_pairs(manifest))
    assert example_store.current_rule == "v3"  # the library call does not switch rules


def test_the_example_has_moves_to_count(example_source):
    _, manifest = example_source
    assert expected_moves(manifest, "v3"), "rescoring the example under v3 must move something"
    assert expected_moves(manifest, "v1") != expected_moves(manifest, "v3")


def test_no_kernel_is_never_a_move(example_store, example_source):
    _, manifest = example_source
    no_kernel = {
        (root, op, dtype) for root, op, dtype, spec in screen_pairs(manifest) if spec.get("orig") == "NO_KERNEL"
    }
    assert no_kernel
    for rule in RULES:
        moved = {(m["root"], m["op"], m["dtype"]) for m in judge.rescore(example_store, rule=rule)["moved"]}
        assert not moved & no_kernel


def test_cli_json_gives_the_moved_pairs_and_the_totals(example_store, example_source):
    _, manifest = example_source
    printed = json.loads(invoke(example_store.path, "rescore", "--json").stdout)
    result, rows = printed["summary"], printed["rows"]
    assert result["moved"] == len(rows)
    assert all(list(r) == ["root", "op", "dtype", "from", "to"] for r in rows)
    assert {tuple(r.values()) for r in rows} == expected_moves(manifest, "v3")
    pairs = list(screen_pairs(manifest))
    assert result["rule"] == "v3" and result["pairs"] == len(pairs)
    without = sum(1 for root, _, _, spec in pairs if original_verdict(manifest, root, spec) is None)
    assert result["without_original"] == without
    assert result["unchanged"] == len(pairs) - without - len(rows)
    assert sum(c["n"] for c in result["counts"]) == len(rows)
    # the other formats give the moved pairs, the same ones
    csv_rows = list(csv.DictReader(io.StringIO(invoke(example_store.path, "rescore", "--csv").stdout)))
    assert [tuple(r.values()) for r in csv_rows] == [tuple(r.values()) for r in rows]


def test_cli_table_prints_counts(example_store_path, example_source):
    _, manifest = example_source
    result = invoke(example_store_path, "rescore", "ab_rlc_20261012_101500")
    assert result.exit_code == 0, result.output
    moves = [m for m in expected_moves(manifest, "v3") if m[0] == "ab_rlc_20261012_101500"]
    for f, t in {(m[3], m[4]) for m in moves}:
        n = sum(1 for m in moves if (m[3], m[4]) == (f, t))
        assert f"{f} -> {t}: {n}" in result.stdout
    assert f"{len(moves)} moved" in result.stdout


def test_rule_option_views_without_switching(example_store, example_source):
    """--rule means one thing in every command: judge under it, for this
    output only. `zlstore rule RULE` is the one way to switch."""
    _, manifest = example_source
    result = json.loads(invoke(example_store.path, "rescore", "--rule", "v1", "--json").stdout)
    assert result["summary"]["rule"] == "v1"
    assert {tuple(r.values()) for r in result["rows"]} == expected_moves(manifest, "v1")
    with Store(example_store.path) as store:
        assert store.current_rule == "v3"
        assert {r["rule"] for r in store.db.query("SELECT rule FROM verdicts")} == {"v3"}
    assert json_out(invoke(example_store.path, "rule", "v1", "--json"))["current_rule"] == "v1"
    with Store(example_store.path) as store:
        assert store.current_rule == "v1"
        assert {r["rule"] for r in store.db.query("SELECT rule FROM verdicts")} == {"v1"}
    moved = json_out(invoke(example_store.path, "rescore", "--json"))
    assert {tuple(r.values()) for r in moved} == expected_moves(manifest, "v1")


def read_tsv(path):
    return list(csv.DictReader(io.StringIO(path.read_text()), delimiter="\t"))


@pytest.fixture
def private_store(example_tree, tmp_path):
    """A store over a private copy of the example tree: --write may change its files."""
    tree, manifest = example_tree
    with Store(tmp_path / "private.db") as store:
        store.ingest(tree)
        yield store, tree, manifest


def test_write_keeps_the_replaced_file_as_orig(private_store):
    store, tree, manifest = private_store
    root = next(r for r in manifest["screen"] if not has_orig(manifest, r))
    screen_tsv = tree / root / layout.SCREEN_TSV
    before = screen_tsv.read_bytes()
    result = invoke(store.path, "rescore", root, "--rule", "v2", "--write")
    assert result.exit_code == 0, result.output
    assert store.current_rule == "v3"  # written under v2, judged under v3 still
    assert (tree / root / layout.SCREEN_TSV_ORIG).read_bytes() == before
    rows = read_tsv(screen_tsv)
    assert list(rows[0])[: len(layout.SCREEN_COLUMNS)] == list(layout.SCREEN_COLUMNS)
    assert {(r["op"], r["dtype"]): r["verdict"] for r in rows} == {
        (op, dtype): spec["verdict"]["v2"] for r, op, dtype, spec in screen_pairs(manifest) if r == root
    }
    # the store followed the file: recorded verdicts are the new ones, the original is kept
    with Store(store.path) as reopened:
        for row in judge.verdicts(reopened, root, "v2"):
            assert row["recorded_verdict"] == row["verdict"]
            spec = manifest["screen"][root][f"{row['op']}|{row['dtype']}"]
            assert row["orig_verdict"] == spec["recorded"]


def test_write_never_overwrites_an_existing_orig(private_store):
    store, tree, manifest = private_store
    root = next(r for r in manifest["screen"] if has_orig(manifest, r))
    orig = tree / root / layout.SCREEN_TSV_ORIG
    original = orig.read_bytes()
    for rule in ("v1", "v3"):
        result = invoke(store.path, "rescore", root, "--rule", rule, "--write")
        assert result.exit_code == 0, result.output
        assert orig.read_bytes() == original
        rows = read_tsv(tree / root / layout.SCREEN_TSV)
        assert {(r["op"], r["dtype"]): r["verdict"] for r in rows} == {
            (op, dtype): spec["verdict"][rule] for r, op, dtype, spec in screen_pairs(manifest) if r == root
        }
    # moves are still counted against the harness's original, not against what --write wrote
    result = judge.rescore(store, root)
    assert {(m["op"], m["dtype"], m["from"]) for m in result["moved"]} == {
        (op, dtype, original_verdict(manifest, root, spec))
        for r, op, dtype, spec in screen_pairs(manifest)
        if r == root and original_verdict(manifest, root, spec) != spec["verdict"]["v3"]
    }


def test_write_screen_tsv_is_the_library_entry_point(private_store):
    store, tree, manifest = private_store
    root = next(iter(manifest["screen"]))
    path = judge.write_screen_tsv(store, root)
    assert path == tree / root / layout.SCREEN_TSV
    rows = read_tsv(path)
    specs = {(op, dtype): spec for r, op, dtype, spec in screen_pairs(manifest) if r == root}
    assert {(r["op"], r["dtype"]) for r in rows} == set(specs)
    for r in rows:
        spec = specs[(r["op"], r["dtype"])]
        assert r["verdict"] == spec["verdict"]["v3"]
        assert [float(r["elapsed_before"]), float(r["elapsed_after"])] == pytest.approx(spec["elapsed"])
        assert r["bench_level"] == manifest["root_info"][root]["caliber"]["bench_level"]


def test_write_refuses_a_campaign_root(private_store):
    store, _, manifest = private_store
    result = invoke(store.path, "rescore", manifest["campaign"]["root"], "--write")
    assert result.exit_code == 2
    assert "not a screening root" in result.output


def test_screen_shows_the_harness_verdict_beside_a_rewrite(private_store):
    """After rescore --write, screen.tsv holds zlstore's rewrite: screen's
    table shows it as `recorded` and the harness's original (screen.tsv.orig)
    as `orig` wherever the two differ, not only the rewrite."""
    store, tree, manifest = private_store
    root = next(r for r in manifest["screen"] if not has_orig(manifest, r))
    assert invoke(store.path, "rescore", root, "--rule", "v2", "--write").exit_code == 0
    moved = {
        (op, dtype): (spec["recorded"], spec["verdict"]["v2"])
        for r, op, dtype, spec in screen_pairs(manifest)
        if r == root and spec["recorded"] != spec["verdict"]["v2"]
    }
    assert moved
    result = invoke(store.path, "screen", root)
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if line.startswith("op "))
    assert header.split()[:5] == ["op", "dtype", "verdict", "recorded", "orig"]
    for line in result.stdout.splitlines():
        words = line.split()
        key = next(((op, dtype) for op, dtype in moved if words[:1] == [op] and (not dtype or words[1] == dtype)), None)
        if key is not None:
            original, rewrite = moved[key]
            assert [rewrite, original] == [w for w in words if w in (original, rewrite)][-2:], line
    untouched = invoke(
        store.path, "screen", next(r for r in manifest["screen"] if r != root and not has_orig(manifest, r))
    ).stdout
    assert " orig " not in untouched.splitlines()[1]
