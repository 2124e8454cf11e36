"""Two stored cells that claim one side of a round (a cell directory copied
beside itself, a round directory copied with its cell.env): which process
measured that side cannot be told, so nothing of the round pairs or is
judged, every ingest names both cells, and forgetting the copy gives the
store it would hold without it."""

import json
import re
import shlex
import shutil
import sqlite3

import pytest

from zlstore import Store, db, names

from .judging import invoke, json_out, judged, screen_pairs

FAKE_LATENCY = re.compile(rb'"latency": [0-9.]+')


def copy_with_other_numbers(cell, copy):
    """A copy of a cell whose run.log holds other latencies: the numbers a
    wrong pairing would show."""
    shutil.copytree(cell, copy)
    log = copy / "run.log"
    log.write_bytes(FAKE_LATENCY.sub(b'"latency": 0.001', log.read_bytes()))


def screened_pair_with_range(manifest):
    """(root, op, dtype) of an IR_CHANGED screening pair: one that shows a range."""
    return next(
        (root, op, dtype)
        for root, op, dtype, spec in screen_pairs(manifest)
        if spec["verdict"]["v3"] == "IR_CHANGED" and dtype
    )


def reference(tmp_path, runs, name="reference.db"):
    db_path = tmp_path / name
    invoke(db_path, "ingest", runs)
    return db_path


def stored(db_path, sql, *params):
    with sqlite3.connect(db_path) as conn:
        return conn.execute(sql, params).fetchall()


def copied_after_cell(example_tree, tmp_path, name="{cell}.bak"):
    """An IR_CHANGED pair's after cell copied beside itself with other numbers
    (the copy's directory: name, {cell} the cell's), and what the store holds
    without the copy: (runs, expected, root, op, dtype, cell, copy, db_path)."""
    runs, manifest = example_tree
    expected = judged(reference(tmp_path, runs))
    root, op, dtype = screened_pair_with_range(manifest)
    cell = runs / root / f"{op}_{dtype}_after"
    copy = runs / root / name.format(cell=cell.name)
    copy_with_other_numbers(cell, copy)
    return runs, expected, root, op, dtype, cell, copy, tmp_path / "t.db"


def test_a_copied_screening_cell_makes_its_pair_a_duplicate_until_the_copy_is_forgotten(example_tree, tmp_path):
    runs, expected, root, op, dtype, cell, copy, db_path = copied_after_cell(example_tree, tmp_path)

    result = invoke(db_path, "ingest", runs)
    assert result.exit_code == names.EXIT_PROBLEMS
    claim = [line for line in result.stderr.splitlines() if names.DUPLICATE in line]
    assert len(claim) == 1 and f"{copy.name}: 2 stored cells claim the after side of {op} {dtype}" in claim[0]
    assert f"also: {cell.name}" in claim[0] and f"zlstore forget {copy} --db {db_path}" in claim[0]

    rows = [r for r in json_out(invoke(db_path, "screen", root, "--json")) if (r["op"], r["dtype"]) == (op, dtype)]
    assert [(r["verdict"], r["n_rows"], r["min"], r["range_label"]) for r in rows] == [
        (names.DUPLICATE, None, None, None)
    ]
    assert "2 cells claim the after side" in rows[0]["note"]
    # no side's values: they would be one claimant's, taken at random (rescore --write puts them in screen.tsv)
    assert {rows[0][f"{what}_{side}"] for what in ("cl", "fp", "elapsed", "rc") for side in ("before", "after")} == {
        None
    }
    assert {
        v
        for (v,) in stored(
            db_path, "SELECT verdict FROM verdicts_by_rule WHERE root = ? AND op = ? AND dtype = ?", root, op, dtype
        )
    } == {names.DUPLICATE}  # under every rule
    rejected = [
        r
        for r in json_out(invoke(db_path, "ab", "--rejected", "--json"))
        if (r["root"], r["op"], r["dtype"]) == (root, op, dtype)
    ]
    assert rejected and {r["reason"] for r in rejected} == {names.DUPLICATE}
    assert all(copy.name in r["differences"] and cell.name in r["differences"] for r in rejected)
    assert not stored(db_path, "SELECT 1 FROM ab_pairs WHERE root = ? AND op = ? AND dtype = ?", root, op, dtype)

    listed = invoke(db_path, "problems", root, "--json")
    assert listed.exit_code == names.EXIT_PROBLEMS
    assert [p["root"] for p in json.loads(listed.stdout) if names.DUPLICATE in p["message"]] == [root]

    # Deleting the copy's directory does not remove the stored cell: the
    # next ingest still names it, and says which one is gone.
    shutil.rmtree(copy)
    again = invoke(db_path, "ingest", runs, "--rehash")
    assert again.exit_code == names.EXIT_PROBLEMS
    assert "(gone from disk)" in next(line for line in again.stderr.splitlines() if names.DUPLICATE in line)
    printed = next(line for line in again.stderr.splitlines() if names.DUPLICATE in line).split("Forget the copy: ")[1]
    assert printed == f"zlstore forget {copy} --db {db_path}"

    forgot = invoke(db_path, *printed.split()[1:-2])  # as printed (invoke adds --db)
    assert forgot.exit_code == 0 and f"forgot cell {copy.name} of {root}" in forgot.stdout
    assert judged(db_path) == expected
    assert names.DUPLICATE not in invoke(db_path, "problems").output
    assert invoke(db_path, "forget", copy).exit_code == names.EXIT_USAGE  # gone already


def test_a_diff_of_a_side_two_cells_claim_names_both_until_the_copy_is_forgotten(example_tree, tmp_path):
    """zlstore diff reads a side's cell as the pairing does ([[current_side]]):
    where two claim it, it names both instead of reading one of them."""
    runs, _, root, op, dtype, cell, copy, db_path = copied_after_cell(example_tree, tmp_path)
    invoke(db_path, "ingest", runs)
    refused = invoke(db_path, "diff", root, f"{op}:{dtype}", "--no-diff")
    assert refused.exit_code == names.EXIT_USAGE
    assert f"2 cells claim the after side ({names.DUPLICATE}): {cell.name}, {copy.name}" in refused.stderr
    assert invoke(db_path, "forget", copy).exit_code == 0
    read = invoke(db_path, "diff", root, f"{op}:{dtype}", "--no-diff", "--json")
    assert read.exit_code != names.EXIT_USAGE and json.loads(read.stdout)["after"]["path"] == str(cell)


def test_a_round_directory_copied_with_its_cell_env_pairs_nothing_of_that_round(example_tree, tmp_path):
    runs, manifest = example_tree
    expected = judged(reference(tmp_path, runs))
    op_dir = next(p for p in sorted(runs.glob("*/card*/*/topk")))
    copy = op_dir / "r9"
    for side in ("before", "after"):
        copy_with_other_numbers(op_dir / "r1" / side, copy / side)
    db_path = tmp_path / "t.db"

    result = invoke(db_path, "ingest", runs)
    assert result.exit_code == names.EXIT_PROBLEMS
    for side in ("before", "after"):  # the copy says otherwise than its path
        assert f"r9/{side}/cell.env: ROUND=1 here, but the path says round 9" in result.stderr
    assert result.stderr.count("side of topk") == 2 and names.DUPLICATE in result.stderr

    campaign_root = op_dir.relative_to(runs).parts[0]
    card = int(op_dir.relative_to(runs / campaign_root).parts[0].removeprefix("card"))
    assert not stored(
        db_path, "SELECT 1 FROM ab_pairs WHERE root = ? AND op = 'topk' AND card = ? AND round = 1", campaign_root, card
    )
    rejected = stored(
        db_path,
        "SELECT DISTINCT reason FROM ab_rejected WHERE root = ? AND op = 'topk' AND card = ? AND round = 1",
        campaign_root,
        card,
    )
    assert rejected == [(names.DUPLICATE,)]
    ranges = [r for r in json_out(invoke(db_path, "ab", campaign_root, "--json")) if r["op"] == "topk"]
    assert ranges and all(names.DUPLICATE in (r["rejected_reasons"] or "") for r in ranges)
    assert all(r["max"] is None or r["max"] < 100 for r in ranges)  # the copy's 0.001 ms never paired

    for side in ("before", "after"):
        assert invoke(db_path, "forget", copy / side).exit_code == 0
    assert judged(db_path) == expected


def test_a_store_of_release_9_pairs_again_and_refuses_the_duplicated_round(example_tree, tmp_path):
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    copy_with_other_numbers(runs / root / f"{op}_{dtype}_after", runs / root / f"{op}_{dtype}_after.bak")
    db_path = tmp_path / "t.db"
    invoke(db_path, "ingest", runs)
    # As release 9 stored it: the latest cell of each side paired.
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE ab_slot_rows SET reason = NULL WHERE reason = ?", (names.DUPLICATE,))
        conn.execute("PRAGMA user_version = 9")
    assert stored(db_path, "SELECT count(*) FROM ab_slot_rows WHERE reason = ?", names.DUPLICATE) == [(0,)]
    with Store(db_path):
        pass
    assert stored(db_path, "PRAGMA user_version") == [(db.SCHEMA_VERSION,)]
    assert stored(db_path, "SELECT count(*) FROM ab_slot_rows WHERE reason = ?", names.DUPLICATE)[0][0] > 0
    assert not stored(db_path, "SELECT 1 FROM ab_pairs WHERE root = ? AND op = ? AND dtype = ?", root, op, dtype)


def with_env_value(cell_env, key, value):
    """cell.env with KEY=value in place of any KEY line it had."""
    lines = [line for line in cell_env.read_text().splitlines() if not line.startswith(f"{key}=")]
    cell_env.write_text("\n".join([*lines, f"{key}={value}"]) + "\n")


def test_a_cell_named_without_its_dtype_whose_cell_env_names_it_is_no_problem(example_tree, tmp_path):
    # `<op>_<side>` says no dtype, not which (ARTIFACTS.md's own layout has
    # topk_before/): a cell.env DTYPE says which, and nothing disagrees.
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    for side in ("before", "after"):
        cell = runs / root / f"{op}_{side}"
        (runs / root / f"{op}_{dtype}_{side}").rename(cell)
        with_env_value(cell / "cell.env", "DTYPE", dtype)
    db_path = tmp_path / "t.db"

    result = invoke(db_path, "ingest", runs)
    assert "DTYPE=" not in result.stderr and names.DUPLICATE not in result.stderr
    rows = [r for r in json_out(invoke(db_path, "screen", root, "--json")) if r["op"] == op]
    assert [(r["dtype"], r["verdict"]) for r in rows] == [(dtype, "IR_CHANGED")]


def test_a_cell_env_dtype_other_than_the_one_its_name_gives_is_named(example_tree, tmp_path):
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    other = "bfloat16" if dtype != "bfloat16" else "float16"
    with_env_value(runs / root / f"{op}_{dtype}_after" / "cell.env", "DTYPE", other)

    result = invoke(tmp_path / "t.db", "ingest", runs)
    assert f"{op}_{dtype}_after/cell.env: DTYPE={other} here, but the path says dtype {dtype}" in result.stderr


def test_a_copy_whose_name_holds_a_newline_is_named_whole_and_forgotten_as_printed(example_tree, tmp_path):
    # the copy's name holds the original's as its second line
    runs, expected, root, op, dtype, cell, copy, db_path = copied_after_cell(
        example_tree, tmp_path, "{cell} copy\n{cell}"
    )
    invoke(db_path, "ingest", runs)

    claims = [p for p in json.loads(invoke(db_path, "problems", "--json").stdout) if names.DUPLICATE in p["message"]]
    assert [p["file"] for p in claims] == [str(copy)]
    message = claims[0]["message"]
    assert message.startswith(f"2 stored cells claim the after side of {op} {dtype}")
    assert f"(also: {cell.name});" in message and "gone from disk" not in message
    printed = shlex.split(message.split("Forget the copy: ")[1])
    assert printed == ["zlstore", "forget", str(copy), "--db", str(db_path)]
    assert invoke(db_path, *printed[1:-2]).exit_code == 0
    assert judged(db_path) == expected


def test_a_merge_that_brings_a_second_claimant_names_the_claim_as_an_ingest_does(example_tree, tmp_path):
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    cell = runs / root / f"{op}_{dtype}_after"
    copy = runs / root / f"{op}_{dtype}_after.bak"
    target = reference(tmp_path, runs, "target.db")  # the original only
    copy_with_other_numbers(cell, copy)
    source = reference(tmp_path, runs, "source.db")  # both: its ingest named the claim
    only_copy = tmp_path / "only_copy.db"
    shutil.copy(source, only_copy)
    assert invoke(only_copy, "forget", cell).exit_code == 0

    for sources, into in (([only_copy], target), ([source], tmp_path / "empty.db")):
        merged = invoke(into, "merge", *sources, "--json")
        assert merged.exit_code == names.EXIT_PROBLEMS
        claim = [line for line in merged.stderr.splitlines() if names.DUPLICATE in line]
        assert len(claim) == 1 and f"{copy.name}: 2 stored cells claim the after side of {op} {dtype}" in claim[0]
        assert any(names.DUPLICATE in p["message"] for p in json.loads(merged.stdout)["problems"])


def forget_as_printed(db_path, result):
    """Run the forget a claim printed on stderr; returns the path it named."""
    line = next(line for line in result.stderr.splitlines() if names.DUPLICATE in line)
    printed = shlex.split(line.split("Forget the copy: ")[1])
    assert invoke(db_path, *printed[1:-2]).exit_code == 0
    return printed[2]


def test_the_copy_to_forget_is_the_one_out_of_its_place_whichever_was_stored_last(example_tree, tmp_path):
    # The original stored again after its copy (its run.log appended to).
    runs, expected, root, op, dtype, cell, copy, db_path = copied_after_cell(example_tree, tmp_path)
    invoke(db_path, "ingest", runs)
    with open(cell / "run.log", "a") as log:
        log.write("\n")
    again = invoke(db_path, "ingest", runs)
    assert "1 replaced" in again.stdout
    assert forget_as_printed(db_path, again) == str(copy)
    shutil.rmtree(copy)
    assert judged(db_path) == expected

    # A copy that sorts before the original: a fresh store holds it first.
    copy = runs / root / "bak" / cell.name
    copy_with_other_numbers(cell, copy)
    db_path = tmp_path / "fresh.db"
    assert forget_as_printed(db_path, invoke(db_path, "ingest", runs)) == str(copy)
    assert judged(db_path) == expected


def test_forget_of_a_symbolic_link_to_a_stored_cell_forgets_nothing(example_tree, tmp_path):
    # An ingest names a link to a cell directory and stores nothing of it;
    # forgetting the link must not remove the cell it points to.
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    cell = runs / root / f"{op}_{dtype}_after"
    link = runs / root / f"{cell.name}.bak"
    link.symlink_to(cell.name)
    db_path = reference(tmp_path, runs, "t.db")
    expected = judged(db_path)

    result = invoke(db_path, "forget", link)
    assert result.exit_code == names.EXIT_USAGE and "is a symbolic link to" in result.output
    assert judged(db_path) == expected
    linked_parent = tmp_path / "linked"  # a link above the cell is no link to it
    linked_parent.symlink_to(runs)
    assert invoke(db_path, "forget", linked_parent / root / cell.name).exit_code == 0


def test_a_copy_named_without_the_dtype_its_original_s_name_gives_is_the_one_to_forget(example_tree, tmp_path):
    runs, manifest = example_tree
    expected = judged(reference(tmp_path, runs))
    root, op, dtype = screened_pair_with_range(manifest)
    cell = runs / root / f"{op}_{dtype}_before"
    copy = runs / root / f"{op}_before"  # sorts first: stored first
    copy_with_other_numbers(cell, copy)
    with_env_value(copy / "cell.env", "DTYPE", dtype)
    db_path = tmp_path / "t.db"

    assert forget_as_printed(db_path, invoke(db_path, "ingest", runs)) == str(copy)
    assert judged(db_path) == expected


def copy_repeat_dir(op_dir):
    """cp -r card0/ab_X card0/ab_X.bak: the same cells under another repeat directory."""
    repeat_dir = op_dir.parent
    shutil.copytree(repeat_dir, repeat_dir.with_name(repeat_dir.name + ".bak"))
    return repeat_dir.with_name(repeat_dir.name + ".bak")


def copy_op_into_another_card(op_dir):
    """The op's rounds copied into another card's repeat directory (their cell.env still says CARD=0)."""
    campaign_root = op_dir.parents[2]
    target = next(d for d in sorted(campaign_root.glob("card*/*")) if d != op_dir.parent) / op_dir.name
    shutil.copytree(op_dir, target)
    return target


def copy_round_without_round_in_cell_env(op_dir):
    """An older harness's cells (no ROUND= in cell.env) and r1 copied to r9: the path alone gives round 9."""
    for env in op_dir.glob("r*/*/cell.env"):
        env.write_text("".join(line for line in env.read_text().splitlines(True) if not line.startswith("ROUND=")))
    shutil.copytree(op_dir / "r1", op_dir / "r9")
    return op_dir / "r9"


@pytest.mark.parametrize(
    "make_copy", [copy_repeat_dir, copy_op_into_another_card, copy_round_without_round_in_cell_env]
)
def test_cells_that_hold_another_cell_s_files_count_no_round_twice(example_tree, tmp_path, make_copy):
    # Nothing here claims another cell's side: the copies are rounds of their
    # own, and would count each measurement twice (a 3-round "inconclusive"
    # became a 6-round "faster").
    runs, _ = example_tree
    op_dir = next(p for p in sorted(runs.glob("*/card*/*/topk")))
    if make_copy is copy_round_without_round_in_cell_env:
        make_copy(op_dir)
        shutil.rmtree(op_dir / "r9")  # the reference: the same cells without the copy
    reference_db = reference(tmp_path, runs)
    expected = judged(reference_db)
    campaign_root = op_dir.relative_to(runs).parts[0]

    def topk_rounds(db_path):
        return {r["shape"]: r for r in json_out(invoke(db_path, "ab", campaign_root, "--json")) if r["op"] == "topk"}

    before = topk_rounds(reference_db)
    copy = make_copy(op_dir)
    db_path = tmp_path / "t.db"

    result = invoke(db_path, "ingest", runs)
    assert result.exit_code == names.EXIT_PROBLEMS
    named = [line for line in result.stderr.splitlines() if "hold the same files" in line]
    assert len(named) == len(list(copy.glob("**/cell.env")))  # each copied cell once
    assert all(f"zlstore forget {copy / ''}".rstrip("/") in line for line in named)  # the copy, never the original
    after = topk_rounds(db_path)
    assert after.keys() == before.keys()
    for shape, got in after.items():  # the copied rounds and their originals count no more
        assert got["rounds"] < before[shape]["rounds"] and names.DUPLICATE in got["rejected_reasons"]
        assert got["finding"] not in ("faster", "slower")

    shutil.rmtree(copy)
    forgot = invoke(db_path, "forget", copy)  # the directory of copies at once
    assert forgot.exit_code == 0, forgot.output
    assert judged(db_path) == expected


def test_plan_names_a_pair_it_leaves_out_because_a_copy_kept_it_from_being_judged(example_tree, tmp_path):
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    db_path = reference(tmp_path, runs, "t.db")
    planned = json_out(invoke(db_path, "plan", root, "--cards", 2, "--rounds", 2, "--json"))
    assert op in {o["op"] for card in planned["cards"] for o in card["ops"]} and planned["not_planned"] == []
    copy_with_other_numbers(runs / root / f"{op}_{dtype}_after", runs / root / f"{op}_{dtype}_after.bak")
    invoke(db_path, "ingest", runs)
    planned = json_out(invoke(db_path, "plan", root, "--cards", 2, "--rounds", 2, "--json"))
    assert op not in {o["op"] for card in planned["cards"] for o in card["ops"]}
    assert planned["not_planned"] == [{"op": op, "dtype": dtype, "verdict": names.DUPLICATE}]
    text = invoke(db_path, "plan", root, "--cards", 2, "--rounds", 2)
    assert text.exit_code == 0 and f"warning: {op}:{dtype} is {names.DUPLICATE}" in text.stderr


def test_a_record_names_only_the_copies_of_what_it_records_and_a_forget_closes_the_copy_s_problems(
    example_tree, tmp_path
):
    runs, manifest = example_tree
    root, op, dtype = screened_pair_with_range(manifest)
    copy = runs / root / f"{op}_{dtype}_after.bak"
    copy_with_other_numbers(runs / root / f"{op}_{dtype}_after", copy)
    with open(copy / "run.log", "a") as log:  # the copy has an open problem of its own
        log.write('[INFO] {"op_name": "' + op + '", "res')
    db_path = tmp_path / "t.db"
    assert invoke(db_path, "ingest", runs).exit_code == names.EXIT_PROBLEMS
    other = next(p for p in sorted((runs / root).iterdir()) if p.is_dir() and not p.name.startswith(op))
    recorded = invoke(db_path, "record", other)
    assert recorded.exit_code == 0 and names.DUPLICATE not in recorded.stderr, recorded.stderr  # another cell's copy
    recorded = invoke(db_path, "record", copy)
    assert recorded.exit_code == names.EXIT_PROBLEMS and names.DUPLICATE in recorded.stderr

    def open_files():
        return {p["file"] for p in json.loads(invoke(db_path, "problems", "--json").stdout)}

    assert str(copy / "run.log") in open_files()
    assert invoke(db_path, "forget", copy).exit_code == 0
    assert not {f for f in open_files() if f.startswith(str(copy))}  # nothing of the copy is left open
    assert open_files()  # the example's own cut-off log still is
