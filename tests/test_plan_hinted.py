"""plan leaves out by default the IR_CHANGED pairs that differ only in what
the strictest rule leaves out (FlagGems' loc() cache paths), says so, and
--include-hinted plans them."""

import json

from .judging import invoke

ROOT = "ab_rlc_20261012_101500"  # abs:float16 differs only in source locations


def planned_ops(document):
    return {op["op"] for card in document["cards"] for op in card["ops"]}


def test_a_location_only_change_is_left_out_and_named(example_store_path):
    result = invoke(example_store_path, "plan", ROOT, "--cards", "2")
    assert result.exit_code == 0, result.output
    assert "abs:float16" not in result.stdout and "topk:float16" in result.stdout
    assert "left out: abs:float16: IR_CHANGED, but differs only in source locations" in result.stderr
    assert "--include-hinted" in result.stderr
    document = json.loads(invoke(example_store_path, "plan", ROOT, "--cards", "2", "--json").stdout)
    assert [(r["op"], r["dtype"]) for r in document["left_out"]] == [("abs", "float16")]
    assert "abs" not in planned_ops(document) and "topk" in planned_ops(document)


def test_include_hinted_puts_them_back(example_store_path):
    result = invoke(example_store_path, "plan", ROOT, "--cards", "2", "--include-hinted")
    assert result.exit_code == 0 and "abs:float16" in result.stdout and "left out" not in result.stderr
    document = json.loads(invoke(example_store_path, "plan", ROOT, "--cards", "2", "--include-hinted", "--json").stdout)
    assert document["left_out"] == [] and "abs" in planned_ops(document)


def test_an_op_named_with_ops_is_planned_as_asked(example_store_path):
    result = invoke(example_store_path, "plan", ROOT, "--cards", "2", "--ops", "abs:float16")
    assert result.exit_code == 0 and "abs:float16" in result.stdout and "left out" not in result.stderr


def test_run_campaign_planning_from_a_screen_says_what_it_left_out(example_tree, tmp_path):
    import sqlite3
    import subprocess

    from .test_run import FAKE, ZLSTORE, base_env

    runs, _ = example_tree
    db = tmp_path / "t.db"
    assert invoke(db, "ingest", runs / ROOT).exit_code == 1  # its sort record cut off by a timeout kill
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "campaign",
            "--screen-root",
            ROOT,
            "--cards",
            "1",
            "--rounds",
            "1",
            "--root",
            str(tmp_path / "c"),
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            "0.2",
            "--status-every",
            "100",
            "--db",
            str(db),
        ],
        env=base_env(tmp_path, FAKE_SLEEP=0.01),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("left out: abs:float16") == 1
    with sqlite3.connect(db) as conn:
        ran = {
            op
            for (op,) in conn.execute(
                "SELECT DISTINCT op FROM cells WHERE root_id IN (SELECT id FROM roots WHERE kind = 'campaign')"
            )
        }
    assert ran and "abs" not in ran
