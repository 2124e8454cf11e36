"""An until-decided campaign's stops live in its tree too (stops/*.tsv), so
that a store made from the tree alone (a team's store, a re-ingest after
the database is gone) shows the same stops as the store the campaign ran
with: op_stops and `ab --json`'s stop fields."""

import json
import shutil
import sqlite3

import pytest

from click.testing import CliRunner

from zlstore.read import layout
from zlstore.cli import cli as main

from .test_run import base_env, write_plan
from .test_until_decided import MAX, campaign, run

STOP_COLUMNS = "SELECT op, dtype, round, reason, recorded_at FROM op_stops ORDER BY op, dtype"


def op_stops(db):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(STOP_COLUMNS).fetchall()
    finally:
        conn.close()


def ab_stops(db, root):
    result = CliRunner().invoke(main, ["ab", str(root), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    return sorted((r["op"], r.get("dtype"), r.get("shape"), r["stop_round"], r["stop_reason"]) for r in rows)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A real until-decided campaign, run once: (its root, its store, its JSON stops)."""
    tmp_path = tmp_path_factory.mktemp("ran")
    root, db = tmp_path / "runs" / "campaign_ud", tmp_path / "u.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "bmm", "float16", 0.1), (1, "softmax", "float16", 0.1)])
    env = base_env(tmp_path, FAKE_SPEEDUP=2.5, FAKE_SAME_IR="softmax", FAKE_SLEEP=0.1)
    result = run(campaign(tmp_path, plan, root, db, "--rounds", MAX, "--until-decided", "--json"), env)
    assert result.returncode == 0, result.stderr
    return root, db, {(s["op"], s["round"], s["reason"]) for s in json.loads(result.stdout)["stops"]}


def test_a_fresh_ingest_of_the_tree_alone_shows_the_campaign_s_stops(ran, tmp_path):
    root, db, said = ran
    written = layout.read_stops(root / layout.STOPS_DIR / "campaign.tsv", [])
    assert {(s.op, s.round, s.reason) for s in written} == said
    assert op_stops(db) and {(op, r, why) for op, _, r, why, _ in op_stops(db)} == said

    # the tree moved to another host, read into a new store: the same stops, the same ab
    moved = tmp_path / "elsewhere" / "runs"
    shutil.copytree(root.parent, moved)
    fresh = tmp_path / "fresh.db"
    ingested = CliRunner().invoke(main, ["ingest", str(moved), "--db", str(fresh)])
    assert ingested.exit_code == 0, ingested.output
    assert op_stops(fresh) == op_stops(db)
    stopped = ab_stops(db, root)
    assert stopped and all(r[3] is not None for r in stopped)
    assert ab_stops(fresh, moved / root.name) == stopped
    # a re-ingest stores nothing twice
    again = CliRunner().invoke(main, ["ingest", str(moved), "--db", str(fresh)])
    assert again.exit_code == 0, again.output
    assert op_stops(fresh) == op_stops(db)


def test_a_line_that_is_not_a_stop_is_a_problem_naming_file_and_line_and_the_rest_is_stored(ran, tmp_path):
    root, db, _ = ran
    moved = tmp_path / "runs"
    shutil.copytree(root.parent, moved)
    stops = moved / root.name / layout.STOPS_DIR / "campaign.tsv"
    good = stops.read_text()
    assert good.count("\n") == 3  # the header and the two ops' stops
    stops.write_text(good + "mm\tfloat16\tfour\tdecided\t\n" + "softmax2\tfloat16\t3\tbored\t\n")
    fresh = tmp_path / "fresh.db"
    result = CliRunner().invoke(main, ["ingest", str(moved), "--db", str(fresh)])
    assert f"{stops}:4" in result.output and f"{stops}:5" in result.output, result.output
    assert op_stops(fresh) == op_stops(db)
