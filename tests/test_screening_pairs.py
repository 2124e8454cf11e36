"""A screening pair is one before and one after cell of an op and dtype,
whatever card each ran on (ARTIFACTS.md, A/B pairing); a pair with a cell
on one side only is a missing side, named at ingest and in screen, not a
dtype without rows."""

import shutil

from zlstore import Store
from zlstore.show import judge

from .judging import invoke

ROOT = "ab_rlc_20261014_083000"  # every pair with both cells and paired rows


def one_root(example_tree, tmp_path):
    runs, _ = example_tree
    root = tmp_path / "one" / ROOT
    shutil.copytree(runs / ROOT, root)
    return root


def verdict_rows(db_path):
    with Store(db_path) as store:
        return {(r["op"], r["dtype"]): r for r in judge.verdicts(store, ROOT)}


def test_a_side_without_cell_env_pairs_with_a_side_on_card_0(example_tree, tmp_path):
    root = one_root(example_tree, tmp_path)
    assert "CARD=0" in (root / "topk_float16_after" / "cell.env").read_text()
    whole = tmp_path / "whole.db"
    assert invoke(whole, "ingest", root).exit_code == 0
    (root / "topk_float16_before" / "cell.env").unlink()  # an older harness wrote none
    db_path = tmp_path / "t.db"
    result = invoke(db_path, "ingest", root)
    assert result.exit_code == 0, result.output
    row, expected = verdict_rows(db_path)[("topk", "float16")], verdict_rows(whole)[("topk", "float16")]
    assert row["n_rows"] == expected["n_rows"] > 0
    assert (row["min"], row["median"], row["max"]) == (expected["min"], expected["median"], expected["max"])
    assert invoke(db_path, "ab", ROOT, "--rejected", "--json").stdout.strip() == "[]"


def test_a_side_on_another_card_pairs(example_tree, tmp_path):
    root = one_root(example_tree, tmp_path)
    env = root / "softmax_float32_after" / "cell.env"
    env.write_text(env.read_text().replace("CARD=0", "CARD=3"))
    db_path = tmp_path / "t.db"
    assert invoke(db_path, "ingest", root).exit_code == 0
    assert verdict_rows(db_path)[("softmax", "float32")]["n_rows"] > 0


def test_a_missing_side_is_a_problem_at_ingest_and_its_own_note(example_tree, tmp_path):
    root = one_root(example_tree, tmp_path)
    for after in root.glob("*_after"):
        shutil.rmtree(after)
    (root / "screen.tsv").unlink()
    db_path = tmp_path / "t.db"
    result = invoke(db_path, "ingest", root)
    assert result.exit_code == 1, result.output
    assert "4 problems" in result.stdout
    assert result.stderr.count("MISSING_SIDE") == 4
    assert "topk float16 has a cell on the before side and none on the after side" in result.stderr
    problems = invoke(db_path, "problems", ROOT)
    assert problems.exit_code == 1 and problems.stdout.count("MISSING_SIDE") == 4
    rows = verdict_rows(db_path)
    assert {r["verdict"] for r in rows.values()} == {"NO_ROWS"}
    for row in rows.values():
        assert "MISSING_SIDE: no after cell stored" in row["note"]
        assert "MISSING_SIDE" in row["licenses"] and "dtype" not in row["licenses"]
    assert invoke(db_path, "screen", ROOT).stdout.count("MISSING_SIDE: no after cell stored") == 4


def test_a_side_without_rows_is_not_a_missing_side(example_store):
    """The example's NO_ROWS pairs have both cells: the dtype's note, no problem."""
    rows = [r for r in judge.verdicts(example_store) if r["verdict"] == "NO_ROWS"]
    assert rows and not any("MISSING_SIDE" in (r["note"] or "") + r["licenses"] for r in rows)
    assert not [p for p in example_store.problems() if "MISSING_SIDE" in p["message"]]


def test_recording_one_side_of_a_screen_is_no_problem_yet(example_tree, tmp_path):
    root = one_root(example_tree, tmp_path)
    result = invoke(tmp_path / "t.db", "record", root / "topk_float16_before")
    assert result.exit_code == 0 and "MISSING_SIDE" not in result.output


def test_a_store_of_release_10_keeps_one_range_per_screening_pair(example_store_path, tmp_path):
    import sqlite3

    from zlstore import db

    path = tmp_path / "old.db"
    shutil.copy(example_store_path, path)
    with Store(path) as store:
        expected = len(judge.verdicts(store))
    with sqlite3.connect(path) as conn:  # as release 10 keyed them: by the cells' card
        for table in ("ab_slot_rows", "ab_round_ranges"):
            conn.execute(f"UPDATE {table} SET card = 0 WHERE round = 0")
        conn.execute("PRAGMA user_version = 10")
    with Store(path) as store:
        assert len(judge.verdicts(store)) == expected
        assert (
            store.conn.execute("SELECT count(*) FROM ab_round_ranges WHERE card IS NOT NULL AND round = 0").fetchone()[
                0
            ]
            == 0
        )
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION


def test_the_kept_pairs_follow_a_verdict_edited_by_hand_a_new_cell_and_a_forgotten_root(example_tree, tmp_path):
    """The writers keep the screening pairs (screen_pair_rows): a recorded
    verdict edited by hand shows once derived, a cell added later makes its
    side current, and a forgotten root leaves none of its pairs."""
    import sqlite3

    root = one_root(example_tree, tmp_path)
    db_path = tmp_path / "t.db"
    assert invoke(db_path, "record", root / "topk_float16_before").exit_code == 0
    assert verdict_rows(db_path)[("topk", "float16")]["after_cell_id"] is None
    assert invoke(db_path, "record", root / "topk_float16_after").exit_code == 0
    assert verdict_rows(db_path)[("topk", "float16")]["after_cell_id"] is not None
    assert invoke(db_path, "ingest", root).exit_code == 0
    recorded = verdict_rows(db_path)[("topk", "float16")]["recorded_verdict"]
    edited = "NO_IR_DIFF" if recorded != "NO_IR_DIFF" else "IR_CHANGED"
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "UPDATE recorded_verdicts SET verdict = ? WHERE op = 'topk' AND dtype = 'float16' AND file = 'screen.tsv'",
            (edited,),
        )
    assert invoke(db_path, "derive").exit_code == 0
    assert verdict_rows(db_path)[("topk", "float16")]["recorded_verdict"] == edited
    assert invoke(db_path, "forget", ROOT).exit_code == 0
    with Store(db_path) as store:
        assert store.conn.execute("SELECT count(*) FROM screen_pair_rows").fetchone()[0] == 0
        assert store.conn.execute("SELECT count(*) FROM screen_stale_pairs").fetchone()[0] == 0
