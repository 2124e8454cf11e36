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
    document = json.loads(invoke(example_store_path, "plan", ROOT, "--cards", "2", "--include-hinted",
                                 "--json").stdout)
    assert document["left_out"] == [] and "abs" in planned_ops(document)


def test_an_op_named_with_ops_is_planned_as_asked(example_store_path):
    result = invoke(example_store_path, "plan", ROOT, "--cards", "2", "--ops", "abs:float16")
    assert result.exit_code == 0 and "abs:float16" in result.stdout and "left out" not in result.stderr
