"""Campaigns that stop when the answer is known (issue 42), run as real
processes with the fake benchmark: a round at a time, the command told
which ({round}, ROUND); an op with a big effect stops before MAX, an A/A
op does not stop on a finding; the ops that go on are re-planned longest
first by measured time; a resume keeps what was decided."""

import json
import subprocess

from zlstore import adaptive, layout, plan as planmod, sequential

from .test_campaign_runner import campaign
from .test_run import base_env, interrupt_when, query, write_plan

MAX = 6


def run(command, env, timeout=240):
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def stops(db, root):
    with_id = query(db, "SELECT id FROM roots WHERE path = ?", (str(root.resolve()),))
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        going = {tuple(o) for o in sequential.undecided_ops(conn, with_id[0][0], 3)}
    finally:
        conn.close()
    return going


def test_a_big_effect_stops_before_max_and_an_a_a_op_does_not_stop_on_a_finding(tmp_path):
    root, db = tmp_path / "runs" / "campaign_ud", tmp_path / "u.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "bmm", "float16", 0.1), (1, "softmax", "float16", 0.1)])
    env = base_env(tmp_path, FAKE_SPEEDUP=2.5, FAKE_SAME_IR="softmax")
    result = run(campaign(tmp_path, plan, root, db, "--rounds", MAX, "--until-decided", "--json"), env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    by_op = {s["op"]: (s["round"], s["reason"]) for s in summary["stops"]}
    assert by_op["bmm"][1] == "decided" and by_op["bmm"][0] < MAX
    assert by_op["softmax"] in ((MAX, "max rounds"),) or by_op["softmax"][1] == "decided"
    rounds = dict(query(db, "SELECT op, COUNT(DISTINCT round) FROM cells WHERE superseded_at IS NULL GROUP BY op"))
    assert rounds["bmm"] == by_op["bmm"][0] and rounds["softmax"] == by_op["softmax"][0]
    # each round ran alone, into its own repeat directory, round N told as ROUND=N and {round}
    logs = (root / "logs" / "card0_bmm_float16.log").read_text()
    assert [f"ROUND={n}" in logs for n in range(1, by_op["bmm"][0] + 1)] == [True] * by_op["bmm"][0]
    assert f"ROUND={by_op['bmm'][0] + 1}" not in logs
    assert "after round 1 of at most 6: 0 ops decided, 2 continue" in result.stderr
    assert f"after round {by_op['bmm'][0]} of at most 6: 1 ops decided" in result.stderr
    env_file = layout.read_env(root / "campaign.env", [])
    assert (env_file["STOPPING"], env_file["MIN_ROUNDS"], env_file["ROUNDS"]) == ("until-decided", "3", str(MAX))
