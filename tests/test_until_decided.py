"""Campaigns that stop when the answer is known (issue 42), run as real
processes with the fake benchmark: a round at a time, the command told
which ({round}, ROUND); an op with a big effect stops before MAX, an A/A
op does not stop on a finding; the ops that go on are re-planned longest
first by measured time; a resume keeps what was decided."""

import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from zlstore import Store
from zlstore.run import adaptive, runner
from zlstore.read import layout
from zlstore.store import sequential
from zlstore.run import card as card_mod
from zlstore.run import plan as planmod
from zlstore.run.slurm import SlurmOptions

from .test_campaign_runner import campaign
from .test_run import FAKE, base_env, interrupt_when, query, write_plan

MAX = 6


@pytest.fixture
def cluster_env(slurm_cluster, tmp_path):
    return lambda **extra: {**base_env(tmp_path, **extra), **slurm_cluster}


def run(command, env, timeout=240):
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def stops(db, root):
    with_id = query(db, "SELECT id FROM roots WHERE path = ?", (str(root.resolve()),))
    conn = sqlite3.connect(db)
    try:
        going = {tuple(o) for o in sequential.undecided_ops(conn, with_id[0][0], 3)}
    finally:
        conn.close()
    return going


def test_a_big_effect_stops_before_max_and_an_a_a_op_does_not_stop_on_a_finding(tmp_path):
    root, db = tmp_path / "runs" / "campaign_ud", tmp_path / "u.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "bmm", "float16", 0.1), (1, "softmax", "float16", 0.1)])
    env = base_env(tmp_path, FAKE_SPEEDUP=2.5, FAKE_SAME_IR="softmax", FAKE_SLEEP=0.1)
    result = run(campaign(tmp_path, plan, root, db, "--rounds", MAX, "--until-decided", "--json"), env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    by_op = {s["op"]: (s["round"], s["reason"]) for s in summary["stops"]}
    assert by_op["bmm"][1] == "decided" and by_op["bmm"][0] < MAX
    assert by_op["softmax"] in ((MAX, "max rounds"),) or by_op["softmax"][1] == "decided"
    rounds = dict(query(db, "SELECT op, COUNT(DISTINCT round) FROM cells WHERE superseded_at IS NULL GROUP BY op"))
    assert rounds["bmm"] == by_op["bmm"][0] and rounds["softmax"] == by_op["softmax"][0]
    # each round ran alone, into its own repeat directory, round N told as ROUND=N and {round}
    logs = "".join(p.read_text() for p in (root / "logs").glob("card*_bmm_float16.log"))  # re-planned: any card
    assert [f"ROUND={n}" in logs for n in range(1, by_op["bmm"][0] + 1)] == [True] * by_op["bmm"][0]
    assert f"ROUND={by_op['bmm'][0] + 1}" not in logs
    assert "after round 1 of at most 6: 0 ops decided, 2 continue" in result.stderr
    assert f"after round {by_op['bmm'][0]} of at most 6: 1 ops decided" in result.stderr
    # what it saved: the decided ops' rounds left to MAX, at their own time per round
    spent = dict(query(db, "SELECT op, SUM(elapsed_s) / COUNT(DISTINCT round) FROM cells GROUP BY op"))
    saved = sum((MAX - r) * spent[op] for op, (r, reason) in by_op.items() if reason == "decided") / 3600
    assert saved > 0 and abs(summary["saved_cell_hours"] - saved) < 1e-6
    assert f"the decided ops saved {saved:.3g} cell-hours so far" in result.stderr
    env_file = layout.read_env(root / "campaign.env", [])
    assert env_file is not None
    assert (env_file["STOPPING"], env_file["MIN_ROUNDS"], env_file["ROUNDS"]) == ("until-decided", "3", str(MAX))


def test_the_ops_that_go_on_are_re_planned_longest_first_by_their_measured_times(tmp_path):
    # the plan puts the slow op alone on card 1 by a screen that called it quick; once measured, the
    # next round puts it first, on card 0, and the two quick ones on card 1
    root, db = tmp_path / "runs" / "campaign_re", tmp_path / "re.db"
    plan = write_plan(
        tmp_path / "partition.tsv",
        [(0, "sort", "", 0.2), (0, "rand", "", 0.2), (1, "slowa", "", 0.01)],
    )
    env = base_env(tmp_path, FAKE_SAME_IR="sort,rand,slowa", FAKE_SLEEP=0.1, FAKE_SLOW="slowa", FAKE_SLOW_SLEEP=0.4)
    result = run(campaign(tmp_path, plan, root, db, "--rounds", 2, "--until-decided", "--min-rounds", 2), env)
    assert result.returncode == 0, result.stderr
    first, _ = planmod.read_step_tsv(adaptive.step_path(root, 1))
    second, rounds = planmod.read_step_tsv(adaptive.step_path(root, 2))
    assert [[o.op for o in c.ops] for c in first.cards] == [["sort", "rand"], ["slowa"]]  # as the plan said
    measured = dict(
        query(
            db,
            "SELECT op, SUM(elapsed_s) FROM cells WHERE superseded_at IS NULL AND round = 1 GROUP BY op",
        )
    )
    assert measured["slowa"] > max(measured["sort"], measured["rand"])
    assert [c.ops[0].op for c in second.cards] == ["slowa", min(("sort", "rand"), key=lambda o: (-measured[o], o))]
    assert [len(c.ops) for c in second.cards] == [1, 2]
    assert abs(second.cards[0].ops[0].weight_s - measured["slowa"]) < 0.01  # minutes in the file: a rounding
    assert set(rounds.values()) == {2}
    # the op ran on another card in round 2, and its two rounds pair
    cards = query(db, "SELECT round, card FROM cells WHERE op = 'slowa' AND side = 'after' ORDER BY round")
    assert cards == [(1, 1), (2, 0)]
    assert "slowa stopped after round 2: max rounds" in result.stderr


def test_the_command_gets_its_round_and_one_that_ignores_it_stops_failed(tmp_path):
    root, db = tmp_path / "runs" / "campaign_rnd", tmp_path / "rnd.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "sort", "", 0.1)])
    env = base_env(tmp_path, FAKE_SPEEDUP=2.5)
    command = campaign(tmp_path, plan, root, db, "--rounds", 3, "--until-decided", "--min-rounds", 2)
    at = command.index("--command") + 1
    command[at] = "echo told {round} ROUND=$ROUND ROUNDS=$ROUNDS; " + command[at]
    result = run(command, env)
    assert result.returncode == 0, result.stderr
    log = (root / "logs" / "card0_sort.log").read_text()
    assert "told 1 ROUND=1 ROUNDS=3" in log and "told 2 ROUND=2 ROUNDS=3" in log

    # an old harness runs every round whatever ROUND says: its cells would claim rounds twice
    old = tmp_path / "runs" / "campaign_old"
    env["FAKE_IGNORE_ROUND"] = "1"
    result = run(campaign(tmp_path, plan, old, db, "--rounds", 3, "--until-decided", "--json"), env)
    assert result.returncode == 1
    assert json.loads(result.stdout)["stops"] == [{"op": "sort", "dtype": "", "round": 1, "reason": "failed"}]
    problems = [m for (m,) in query(db, "SELECT message FROM ingest_problems")]
    assert any("asked for round 1 (ROUND=1) but wrote round(s) 2, 3" in m for m in problems), problems


def test_without_the_option_a_campaign_gives_its_command_no_round(tmp_path):
    root, db = tmp_path / "runs" / "campaign_fixed", tmp_path / "f.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "sort", "", 0.1)])
    env = base_env(tmp_path, ROUND="7")  # inherited from a shell: not a round to run
    result = run(campaign(tmp_path, plan, root, db, "--rounds", 2), env)
    assert result.returncode == 0, result.stderr
    assert query(db, "SELECT round, count(*) FROM cells GROUP BY round") == [(1, 2), (2, 2)]
    env_file = layout.read_env(root / "campaign.env", [])
    assert env_file is not None and "STOPPING" not in env_file
    assert not (root / adaptive.PLANS_DIR).exists()


def test_resume_keeps_what_was_decided_and_takes_up_the_rest_after_its_complete_rounds(tmp_path):
    root, db = tmp_path / "runs" / "campaign_res", tmp_path / "res.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "bmm", "", 0.1), (1, "slowa", "", 0.1)])
    env = base_env(tmp_path, FAKE_SPEEDUP=2.5, FAKE_SAME_IR="slowa", FAKE_SLOW="slowa", FAKE_SLOW_SLEEP=1.0)
    command = campaign(tmp_path, plan, root, db, "--rounds", MAX, "--until-decided")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def bmm_stopped_and_slowa_half_way():  # its round's before side recorded, its after side running
        rows = dict(query(db, "SELECT op, count(*) FROM cells WHERE superseded_at IS NULL GROUP BY op"))
        return query(db, "SELECT reason FROM op_stops WHERE op = 'bmm'") and rows.get("slowa", 0) % 2 == 1

    out, err = interrupt_when(process, bmm_stopped_and_slowa_half_way, timeout=200, every=0.05)
    assert process.returncode == 130, err
    [(decided_at,)] = query(db, "SELECT round FROM op_stops WHERE op = 'bmm' AND reason = 'decided'")
    assert f"bmm stopped after round {decided_at}: decided" in err, err
    bmm_cells = query(db, "SELECT count(*) FROM cells WHERE op = 'bmm'")
    complete = query(
        db,
        "SELECT count(*) FROM (SELECT round FROM cells WHERE op = 'slowa' GROUP BY round HAVING count(*) = 2)",
    )[0][0]
    half = query(db, "SELECT count(*) FROM cells WHERE op = 'slowa' AND round = ?", (complete + 1,))[0][0]
    assert decided_at <= complete < MAX and half in (0, 1)  # the interrupt lands in its after side, as a rule

    env["FAKE_SLOW_SLEEP"] = "0.02"
    resumed = run(ZLSTORE_RESUME(root, db), env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"bmm: stopped before, after round {decided_at} (decided), not run again" in resumed.stderr
    said = f"slowa: goes on after its {complete} complete rounds" + (
        "; the 1 cells of its unfinished round are kept in the store, marked superseded" if half else "\n"
    )
    assert said in resumed.stderr, resumed.stderr
    assert query(db, "SELECT count(*) FROM cells WHERE op = 'bmm'") == bmm_cells  # not one more cell
    superseded = query(db, "SELECT round, count(*) FROM cells WHERE superseded_at IS NOT NULL GROUP BY round")
    assert superseded == ([(complete + 1, 1)] if half else [])
    current = query(db, "SELECT round, count(*) FROM cells WHERE op = 'slowa' AND superseded_at IS NULL GROUP BY round")
    assert current == [(r, 2) for r in range(1, MAX + 1)]  # every round once: none twice, none lost
    assert ("bmm", "") not in stops(db, root)


def ZLSTORE_RESUME(root, db):
    from .test_run import ZLSTORE

    return ZLSTORE + ["run", "campaign", "--resume", "--root", str(root), "--db", str(db), "--poll", "0.2"]


class TasksWithoutADatabase(runner.LocalLauncher):
    """The Slurm launcher's part, on this host: each card a process given
    no database (as an array task is), whose cells and stops this process
    records from the status files (records_here)."""

    records_here = True
    settle_s = 2.0

    def __init__(self, options, poll_s):
        super().__init__(Path("unused.db"), None, poll_s)

    def check(self, cards):
        pass

    def start(self, root, run_id, todo, step=None):
        assert step is None  # it stands in for the Slurm launcher, which is given no step
        for card, ops in sorted(todo.items()):
            argv = [sys.executable, "-m", "zlstore", "run", "card", str(root), "--card", str(card)]
            argv += ["--ops", ",".join(card_mod.op_spec(o) for o in ops), "--run-id", run_id, "--poll", "0.2"]
            with open(Path(root) / "logs" / f"card{card}.out", "ab") as out:
                self.procs[card] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)

    def where(self):
        return "tasks without a database"


def test_on_slurm_each_task_decides_its_own_ops_and_the_submitter_records_the_stops(tmp_path, monkeypatch):
    root, db = tmp_path / "runs" / "campaign_sl", tmp_path / "sl.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "bmm", "float16", 0.1), (1, "softmax", "float16", 0.1)])
    for k, v in base_env(tmp_path, FAKE_SPEEDUP=2.5, FAKE_SAME_IR="softmax").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(runner, "SlurmLauncher", TasksWithoutADatabase)
    stream = io.StringIO()
    with Store(db) as store:
        config = runner.campaign_config(
            store,
            plan_path=plan,
            rounds=MAX,
            command=f"{FAKE} repeat {{op}} {{dtype}}",
            root_dir=root,
            poll_s=0.2,
            slurm=SlurmOptions(),
            until_decided=True,
        )
        result = runner.run_campaign(store, config, stream=stream)
    said = stream.getvalue()
    assert not result.failed and not result.interrupted, said
    assert result.stops is not None, said
    by_op = {s["op"]: (s["round"], s["reason"]) for s in result.stops}
    assert by_op["bmm"][1] == "decided" and by_op["bmm"][0] < MAX, said
    assert f"card 0: bmm:float16 stopped after round {by_op['bmm'][0]}: decided" in said
    assert by_op["softmax"] == (MAX, "max rounds") or by_op["softmax"][1] == "decided"
    # the store holds every cell the tasks wrote, and the tasks wrote no database on the way
    rounds = dict(query(db, "SELECT op, COUNT(DISTINCT round) FROM cells WHERE superseded_at IS NULL GROUP BY op"))
    assert rounds == {op: r for op, (r, _) in by_op.items()}
    assert not [p for p in tmp_path.rglob("*.db") if p != db]
    assert adaptive.recorded_stops(sqlite3.connect(db), root) == {(op, "float16"): v for op, v in by_op.items()}
    # each task wrote its own ops' stops into the tree, the submitter none of its own,
    # and the tree alone gives a fresh store the same stops
    files = {p.name: [s.op for s in layout.read_stops(p, [])] for p in (root / layout.STOPS_DIR).iterdir()}
    assert files == {"card0.tsv": ["bmm"], "card1.tsv": ["softmax"]}
    fresh = tmp_path / "fresh.db"
    with Store(fresh) as again:
        again.ingest(root.parent)
    assert adaptive.recorded_stops(sqlite3.connect(fresh), root) == adaptive.recorded_stops(sqlite3.connect(db), root)


def test_on_a_slurm_cluster_until_decided_records_each_task_s_stops(cluster_env, tmp_path):
    root, db = tmp_path / "runs" / "campaign_slc", tmp_path / "slc.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "bmm", "float16", 0.1), (1, "softmax", "float16", 0.1)])
    env = cluster_env(FAKE_SPEEDUP=2.5, FAKE_SAME_IR="softmax")
    result = run(campaign(tmp_path, plan, root, db, "--rounds", MAX, "--until-decided", "--slurm", "--json"), env)
    assert result.returncode == 0, result.stderr
    by_op = {s["op"]: (s["round"], s["reason"]) for s in json.loads(result.stdout)["stops"]}
    assert by_op["bmm"][1] == "decided" and by_op["bmm"][0] < MAX
    assert by_op["softmax"] == (MAX, "max rounds") or by_op["softmax"][1] == "decided"
    assert not [p for p in tmp_path.rglob("*.db") if p != db]


def test_flaggems_repeat_runs_the_round_it_is_given_in_an_until_decided_campaign(tmp_path):
    """What the real-GPU run does on one card: two campaign cards on device 0
    (--devices 0,0), `zlstore flaggems repeat` as the command (here against
    the FlagGems stand-in), one round a run."""
    from .test_flaggems import REPEAT, SWITCH, VALUES, env_for

    root, db = tmp_path / "runs" / "campaign_fg", tmp_path / "fg.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "mm", "float32", 0.1), (1, "abs", "float16", 0.1)])
    env = env_for(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "zlstore", "run", "campaign", "--plan", str(plan), "--root", str(root)]
        + ["--rounds", "3", "--until-decided", "--min-rounds", "2", "--devices", "0,0", "--switch", SWITCH]
        + ["--command", REPEAT.replace("{dtype} ", "{dtype} --values " + ",".join(VALUES) + " ")]
        + ["--poll", "0.2", "--status-every", "100", "--db", str(db), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    stops = {s["op"]: (s["round"], s["reason"]) for s in json.loads(result.stdout)["stops"]}
    assert set(stops) == {"mm", "abs"} and all(reason != "failed" for _, reason in stops.values())
    cells = query(db, "SELECT op, round, side, path FROM cells WHERE superseded_at IS NULL ORDER BY op, round")
    for op, (last, _) in stops.items():
        mine = [(r, side, Path(p)) for o, r, side, p in cells if o == op]
        assert sorted((r, side) for r, side, _ in mine) == sorted(
            (r, s) for r in range(1, last + 1) for s in layout.SIDES
        )
        # one repeat directory per round: each run of the command wrote the round it was given
        assert len({p.parents[2] for _, _, p in mine}) == last
        for r, _, p in mine:
            cell_env = layout.read_env(p / "cell.env", [])
            assert cell_env is not None and cell_env["ROUND"] == str(r), p


def test_min_rounds_goes_with_until_decided_and_under_the_most_rounds(tmp_path):
    plan = write_plan(tmp_path / "partition.tsv", [(0, "sort", "", 0.1)])
    env = base_env(tmp_path)
    for extra, said in (
        (["--rounds", 4, "--min-rounds", 2], "--min-rounds goes with --until-decided"),
        (["--rounds", 4, "--until-decided", "--min-rounds", 5], "--min-rounds 5 is more than --rounds 4"),
    ):
        root = tmp_path / "runs" / "campaign_no"
        result = run(campaign(tmp_path, plan, root, tmp_path / "no.db", *extra), env)
        assert result.returncode == 2 and said in result.stderr, result.stderr
        assert not root.exists()
    # a resume is a campaign of the kind it started as
    fixed = tmp_path / "runs" / "campaign_fixed"
    assert run(campaign(tmp_path, plan, fixed, tmp_path / "no.db", "--rounds", 1), env).returncode == 0
    resumed = run(ZLSTORE_RESUME(fixed, tmp_path / "no.db") + ["--until-decided"], env)
    assert resumed.returncode == 2 and "is a campaign of fixed rounds" in resumed.stderr
