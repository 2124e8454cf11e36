"""The campaign runner's failure paths (issue 13), locally, as real
processes: an op that hangs is killed at its bound and recorded TRUNCATED;
a resumed campaign shows exactly the plan's rounds, the interrupted run's
cells kept but superseded; a missing caliber variable is named before
anything runs; `zlstore run card` on its own."""

import json
import shutil
import subprocess
import time

import pytest

from zlstore import Store
from zlstore.run import card, runner
from zlstore.read import layout
from zlstore.run.display import CardState
from zlstore.run.plan import Op, read_partition_tsv

from . import generator
from .test_run import FAKE, ZLSTORE, base_env, interrupt_when, pid_files, query, wait_gone, write_plan
from .test_slurm import campaign_progress, invoke, zl


def campaign(tmp_path, plan, root, db, *extra):
    return ZLSTORE + [
        "run",
        "campaign",
        "--plan",
        str(plan),
        "--root",
        str(root),
        "--command",
        f"{FAKE} repeat {{op}} {{dtype}}",
        "--poll",
        "0.2",
        "--status-every",
        "100",
        "--db",
        str(db),
        *[str(e) for e in extra],
    ]


def test_an_op_that_hangs_is_killed_at_its_bound_recorded_truncated_and_the_card_goes_on(tmp_path):
    root, db = tmp_path / "runs" / "campaign_hang", tmp_path / "h.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "hung", "", 0.01), (0, "sort", "", 0.01), (1, "rand", "", 0.01)])
    env = base_env(tmp_path, FAKE_SLEEP=0.05, FAKE_HANG="hung:after")
    started = time.monotonic()
    result = subprocess.run(
        campaign(tmp_path, plan, root, db, "--rounds", 1, "--cell-timeout", 0.5),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert 1.5 <= took < 60  # the bound: (2 x 1 round + 1) x CELL_TIMEOUT 0.5 s
    assert "failed: card 0 hung: killed at its op timeout" in result.stdout
    assert wait_gone(pid_files(tmp_path)) == [], "the hung op or its sleeper survived"
    cells = query(db, "SELECT op, round, side, rc FROM cell_summary ORDER BY op, round, side")
    assert cells == [
        ("hung", 1, "after", 124),
        ("hung", 1, "before", 0),  # TRUNCATED, and the side before it
        ("rand", 1, "after", 0),
        ("rand", 1, "before", 0),
        ("sort", 1, "after", 0),
        ("sort", 1, "before", 0),
    ]  # card 0 went on
    hung = next(root.glob("card0/*/hung/r1/after"))
    env_file = layout.read_env(hung / "cell.env", [])
    assert env_file is not None
    assert env_file["RC"] == "124" and env_file["CELL_TIMEOUT"] == "0.5" and list(env_file)[-1] == "RC"
    assert query(db, "SELECT caliber_id IS NOT NULL FROM cells WHERE rc = 124") == [(1,)]  # its caliber is known
    problems = [m for (m,) in query(db, "SELECT message FROM ingest_problems")]
    assert any("hung" in m and "killed at its timeout of 1.5 s" in m and "RC 124" in m for m in problems), problems
    campaign_env = layout.read_env(root / "campaign.env", [])
    assert campaign_env is not None and campaign_env["CELL_TIMEOUT"] == "0.5"
    assert "CELL_TIMEOUT=0.5" in (root / "logs" / "card0_hung.log").read_text()


def test_resume_shows_exactly_the_plan_s_rounds_and_keeps_the_interrupted_cells_superseded(tmp_path):
    root, db = tmp_path / "runs" / "campaign_resume", tmp_path / "r.db"
    plan = write_plan(
        tmp_path / "partition.tsv", [(0, "topk", "float16", 0.1), (0, "slowa", "", 1.0), (1, "rand", "", 0.1)]
    )
    env = base_env(tmp_path, FAKE_SLEEP=0.05, FAKE_SLOW="slowa", FAKE_SLOW_SLEEP=0.3)
    command = campaign(tmp_path, plan, root, db, "--rounds", 3)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = interrupt_when(
        process,
        lambda: query(db, "SELECT count(*) FROM cells WHERE op = 'slowa'") not in ([], [(0,)], [(1,)], [(2,)]),
        every=0.05,
    )
    assert process.returncode == 130, err
    interrupted = query(db, "SELECT count(*) FROM cells WHERE op = 'slowa'")[0][0]
    assert 3 <= interrupted < 6  # a round and a half at least: what made a 4th round before

    env["FAKE_SLOW_SLEEP"] = "0.05"
    resumed = subprocess.run(
        ZLSTORE + ["run", "campaign", "--resume", "--root", str(root), "--db", str(db), "--poll", "0.2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "2 skipped as complete" in resumed.stdout
    assert f"slowa runs again from the start; the {interrupted} cells of its earlier run" in resumed.stderr

    ab = json.loads(invoke("ab", "campaign_resume", "--json", "--db", db).stdout)["rows"]
    assert {(r["op"], r["rounds"], r["rejected"]) for r in ab} == {(op, 3, 0) for op in ("topk", "slowa", "rand")}
    rejected = invoke("ab", "campaign_resume", "--rejected", "--db", db)
    assert "every row paired" in rejected.stderr and "MISSING_SIDE" not in rejected.stdout
    # the interrupted cells stay, marked, all from the earlier repeat directory
    marked = query(db, "SELECT count(*), count(DISTINCT repeat_dir) FROM cell_summary WHERE superseded_at IS NOT NULL")
    assert marked == [(interrupted, 1)]
    assert query(db, "SELECT count(*) FROM cells WHERE op = 'slowa' AND superseded_at IS NULL") == [(6,)]
    progress = campaign_progress(db, "campaign_resume")
    assert [(progress[c]["cells_recorded"], progress[c]["cells_planned"]) for c in (0, 1)] == [(12, 12), (6, 6)]


def test_missing_caliber_variables_are_named_before_anything_runs(tmp_path):
    env = base_env(tmp_path)
    for name in ("BENCH_LEVEL", "SHAPE_MODE"):
        env.pop(name)
    root, db = tmp_path / "runs" / "ab_rlc_x", tmp_path / "x.db"
    screen = zl(
        ["run", "screen", "--ops", "topk", "--switch", "S", "--command", f"{FAKE} cell", "--root", root, "--db", db],
        env,
    )
    assert screen.returncode == 2, screen.stderr
    assert "BENCH_LEVEL (bench_level), SHAPE_MODE (shape_mode) are not set" in screen.stderr
    assert not root.exists() and pid_files(tmp_path) == set()

    plan = write_plan(tmp_path / "partition.tsv", [(0, "topk", "float16", 0.1)])
    croot = tmp_path / "runs" / "campaign_x"
    for extra in ([], ["--slurm"]):  # refused before Slurm is even asked
        result = subprocess.run(
            campaign(tmp_path, plan, croot, db, "--rounds", 1, *extra),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert "BENCH_LEVEL (bench_level), SHAPE_MODE (shape_mode)" in result.stderr
        assert "ZL_ISOLATE_TUNER_CACHE" not in result.stderr  # forced to 1 by campaigns
        assert not croot.exists()


def test_resume_refuses_an_environment_whose_caliber_differs_from_the_campaign_s(tmp_path):
    root, db = tmp_path / "runs" / "campaign_cal", tmp_path / "c.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "topk", "float16", 0.1)])
    env = base_env(tmp_path)
    config = runner.CampaignConfig(
        root, read_partition_tsv(plan), f"{FAKE} repeat {{op}} {{dtype}}", rounds=1, backend="cuda"
    )
    runner.prepare_campaign(config, runner.campaign_caliber(config, env))  # as run campaign starts one
    env["BENCH_LEVEL"] = "comprehensive"
    result = zl(["run", "campaign", "--resume", "--root", root, "--db", db], env)
    assert result.returncode == 2
    assert "BENCH_LEVEL=comprehensive here, core in campaign.env" in result.stderr
    env.pop("BENCH_LEVEL")  # campaign.env gives it: the cards measure under core
    assert zl(["run", "campaign", "--resume", "--root", root, "--db", db, "--poll", 0.1], env).returncode == 0
    assert query(db, "SELECT DISTINCT bench_level FROM cell_summary") == [("core",)]
    # the root deleted and made again: a new campaign there would add its rounds to the stored ones
    shutil.rmtree(root)
    env["BENCH_LEVEL"] = "core"
    again = subprocess.run(
        campaign(tmp_path, plan, root, db, "--rounds", 1), env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 2 and "the store already holds 2 cells of a campaign there" in again.stderr


def test_run_card_alone_records_into_its_database_and_reports_json_lines(tmp_path):
    root, db = tmp_path / "runs" / "campaign_card", tmp_path / "card.db"
    plan = write_plan(
        tmp_path / "partition.tsv", [(0, "topk", "float16", 0.1), (1, "rand", "", 0.1), (1, "sort", "", 0.1)]
    )
    env = base_env(tmp_path)
    # a campaign root to run cards of, as run campaign writes it before starting them
    config = runner.CampaignConfig(
        root, read_partition_tsv(plan), f"{FAKE} repeat {{op}} {{dtype}}", rounds=1, backend="cuda"
    )
    runner.prepare_campaign(config, runner.campaign_caliber(config, env))
    result = zl(["run", "card", root, "--card", 1, "--ops", "sort", "--db", db, "--run-id", "r1"], env)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == ["start", "cells", "cells", "done", "finished"] or [
        e["event"] for e in events if e["event"] != "cells"
    ] == ["start", "done", "finished"]
    status = json.loads((root / "status" / "card1.json").read_text())
    assert status["run_id"] == "r1" and status["state"] == "finished" and status["events"] == events
    assert query(db, "SELECT op, card, count(*) FROM cells GROUP BY op") == [("sort", 1, 2)]
    assert "CUDA_VISIBLE_DEVICES=1 " in (root / "logs" / "card1_sort.log").read_text()

    for args, message in ((["--card", 5], "no card 5"), (["--card", 1, "--ops", "topk"], "not one of card 1's ops")):
        bad = zl(["run", "card", root, *args], env)
        assert bad.returncode == 2 and message in bad.stderr


def test_a_card_past_its_estimate_says_so_instead_of_counting_down():
    state = CardState(
        0,
        [Op("topk", "", 10.0)],
        current=Op("topk", "", 10.0),
        current_since=100.0,
        timeout_s=50.0,
        remaining=[Op("sort", "", 5.0)],
    )
    assert state.estimate_s(104.0) == pytest.approx(11.0)
    assert state.estimate_s(120.0) is None  # past its weight: not known
    assert state.current_text(120.0) == "topk (past its estimate; op timeout in 0:00:30)"
    assert card.op_timeout_s(2400, 6) == 13 * 2400


def test_a_superseded_cell_is_never_paired_and_marking_one_re_pairs_its_round(tmp_path):
    runs = tmp_path / "runs"
    generator.make_example_tree(runs)
    with Store(tmp_path / "s.db") as store:
        store.ingest(runs)
        before = {
            (r["op"], r["shape"]): r["rounds"]
            for r in store.db.query(
                "SELECT op, shape, rounds FROM ab_ranges WHERE root = 'campaign_20261013_090000' AND rounds > 0"
            )
        }
        op, shape = next(iter(sorted(before)))
        cell_id = store.conn.execute(
            """SELECT before_cell_id FROM ab_pairs WHERE root = 'campaign_20261013_090000' AND op = ? AND shape = ?
               ORDER BY round LIMIT 1""",
            (op, shape),
        ).fetchone()[0]
        # by hand, as the next zlstore command finds it
        store.conn.execute("UPDATE cells SET superseded_at = '2026-01-01T00:00:00+00:00' WHERE id = ?", (cell_id,))
    with Store(tmp_path / "s.db") as store:
        after = store.conn.execute(
            "SELECT rounds FROM ab_ranges WHERE root = 'campaign_20261013_090000' AND op = ? AND shape = ?", (op, shape)
        ).fetchone()[0]
        assert after == before[(op, shape)] - 1
        assert (
            store.conn.execute(
                "SELECT count(*) FROM ab_pairs WHERE before_cell_id = ? OR after_cell_id = ?", (cell_id, cell_id)
            ).fetchone()[0]
            == 0
        )
