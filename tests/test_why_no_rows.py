"""Why a pair has no rows: `zlstore flaggems` loads zlstore's pytest plugin
(zlstore/pytest_plugins/zlstore_outcomes.py) into the benchmark, which
appends what pytest did with each test to the cell's run.log; the store
keeps the cell's outcome (cells.test_outcome, test_reason) and NO_ROWS and
MISSING_SIDE say it. Against the FlagGems stand-in (tests/flaggems_standin)."""

import json

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.read import outcomes
from zlstore.cli import cli

from . import effects
from .test_flaggems import CELL, SWITCH, VALUES, env_for, query, zl


@pytest.fixture(scope="module")
def screened(tmp_path_factory):
    """A screen of fft (its CUDA guard skips it: the stand-in's CUDA is off),
    an op no test is marked with, and abs at a dtype it does not run."""
    tmp = tmp_path_factory.mktemp("why_no_rows")
    db, root = tmp / "z.db", tmp / "runs" / "screen_nocuda"
    env = env_for(tmp, STANDIN_CUDA="0")
    result = zl(
        [
            "run",
            "screen",
            "--ops",
            "fft:float32,nosuch:float16,abs:int32",
            "--switch",
            SWITCH,
            "--values",
            ",".join(VALUES),
            "--cell-timeout",
            "60",
            "--command",
            CELL,
            "--root",
            str(root),
            "--db",
            str(db),
        ],
        env,
        cwd=tmp,
    )
    return {"db": db, "root": root, "env": env, "result": result}


def test_each_cell_keeps_what_pytest_did_with_its_tests(screened):
    cells = {(c["op"], c["side"]): c for c in query(screened["db"], "SELECT * FROM cells")}
    assert len(cells) == 6, screened["result"].stderr
    for side in ("before", "after"):
        assert (cells[("fft", side)]["test_outcome"], cells[("fft", side)]["test_reason"]) == (
            "skipped",
            "CUDA is not available",
        )
        assert cells[("nosuch", side)]["test_outcome"] == "deselected"
        assert cells[("nosuch", side)]["test_reason"].startswith("no test matched -m nosuch (")
        assert (cells[("abs", side)]["test_outcome"], cells[("abs", side)]["test_reason"]) == ("passed", None)
    log = (screened["root"] / "fft_float32_before" / "run.log").read_text()
    assert 'zlstore pytest: {"nodeid": "benchmark/test_fft.py::test_perf_fft", "outcome": "skipped"' in log


def test_no_rows_says_why(screened):
    result = CliRunner().invoke(cli, ["screen", "--json", "--db", str(screened["db"])])
    notes = {r["op"]: (r["verdict"], r["note"]) for r in json.loads(result.stdout)["rows"]}
    assert notes["fft"] == (
        "NO_ROWS",
        "before has no counted row (skipped: CUDA is not available); "
        "after has no counted row (skipped: CUDA is not available)",
    )
    assert notes["nosuch"][0] == "NO_ROWS" and "(deselected: no test matched -m nosuch (" in notes["nosuch"][1]
    assert (
        notes["abs"][0] == "NO_ROWS"
        and "(its tests passed and recorded no row at dtype int32: not among the op's dtypes?)" in notes["abs"][1]
    )
    human = CliRunner().invoke(cli, ["screen", "--db", str(screened["db"])]).stdout
    assert "    note: before has no counted row (skipped: CUDA is not available);" in human


def test_a_missing_side_says_why_where_pytest_said(tmp_path):
    """A round whose after side's tests were skipped: its rows are
    MISSING_SIDE, and --rejected says what pytest said."""
    effects.write_repeat_root(tmp_path / "runs", "ab_skip", [effects.Shape(1.0, 0.01)], rounds=3, seed=1)
    after = tmp_path / "runs" / "ab_skip" / "softmax" / "r2" / "after" / "run.log"
    after.write_text(
        "".join(
            outcomes.MARKER + json.dumps(r) + "\n"
            for r in (
                {
                    "nodeid": "benchmark/test_softmax.py::test_softmax",
                    "outcome": "skipped",
                    "when": "setup",
                    "reason": "CUDA is not available",
                },
                {"session": 0, "collected": 1, "deselected": 0, "markexpr": "softmax"},
            )
        )
    )
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
    rejected = json.loads(CliRunner().invoke(cli, ["ab", "--rejected", "--json", "--db", str(db)]).stdout)
    assert [(r["round"], r["reason"], r["why_missing"]) for r in rejected] == [
        (2, "MISSING_SIDE", "after: skipped: CUDA is not available")
    ]
    table = CliRunner().invoke(cli, ["ab", "--rejected", "--db", str(db)]).stdout
    assert "after: skipped: CUDA is not available" in table


def test_the_outcome_of_a_cell_from_its_records():
    passed = {"nodeid": "t::a", "outcome": "passed"}
    skipped = {"nodeid": "t::b", "outcome": "skipped", "reason": "CUDA is not available"}
    assert outcomes.summary([]) == (None, None)
    assert outcomes.summary([passed, skipped]) == ("passed", "1 of 2 tests skipped: CUDA is not available")
    assert outcomes.summary([skipped]) == ("skipped", "CUDA is not available")
    assert outcomes.summary(
        [{"nodeid": "t::a", "outcome": "passed"}, {"nodeid": "t::a", "outcome": "error", "reason": "teardown"}]
    ) == ("error", "teardown")
    assert outcomes.summary([{"session": 5, "collected": 0, "deselected": 0, "markexpr": "x"}]) == (
        "deselected",
        "no test collected",
    )
