"""`zlstore run campaign --slurm` on a real Slurm: Debian's slurmctld and
four slurmd "nodes" on this machine (the slurm_cluster fixture), the fake
benchmark as the op command. The same campaign run locally and on Slurm
gives the same store; a task killed by scancel mid-op is named, its cells
kept, and --resume runs only what it left."""

import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from click.testing import CliRunner

from zlstore import Store
from zlstore.serve import serve as serving
from zlstore.run import slurm
from zlstore.cli import cli
from zlstore.run.plan import Op

from .test_plan import write_screen_root
from .test_run import FAKE, ZLSTORE, base_env, interrupt_when, pid_files, query, wait_gone, wait_until, write_plan


def copy_db(source: Path, dest: Path):
    with sqlite3.connect(source) as src, sqlite3.connect(dest) as dst:
        src.backup(dst)


def zl(args, env, timeout=180):
    return subprocess.run(ZLSTORE + [str(a) for a in args], env=env, capture_output=True, text=True, timeout=timeout)


def invoke(*args):
    """A read-only command in this process: no interpreter to start."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def campaign_progress(db, root):
    status, text = serving.get(serving.datasette_app(db), f"/zlstore/campaign_progress.json?root={root}&_shape=array")
    assert status == 200, text
    return {row["card"]: row for row in json.loads(text)}


# -- without a cluster: what zlstore reads from Slurm and writes for it ---------------

# `scontrol -o show job 7` on the test cluster, trimmed: two pending tasks on one line, one cancelled.
SCONTROL = """\
JobId=7 ArrayJobId=7 ArrayTaskId=4-5 JobName=zlstore:c UserId=root(0) JobState=PENDING Reason=Resources Dependency=(null) Requeue=0 ExitCode=0:0 ReqNodeList=(null) NodeList=(null) BatchHost=(null)
JobId=10 ArrayJobId=7 ArrayTaskId=2 JobName=zlstore:c UserId=root(0) JobState=RUNNING Reason=None Dependency=(null) ExitCode=0:0 ReqNodeList=(null) ExcNodeList=(null) NodeList=n3 BatchHost=n3
JobId=9 ArrayJobId=7 ArrayTaskId=1 JobName=zlstore:c UserId=root(0) JobState=CANCELLED Reason=None Dependency=(null) ExitCode=143:0 ReqNodeList=(null) NodeList=n2
JobId=8 ArrayJobId=7 ArrayTaskId=0 JobName=zlstore:c UserId=root(0) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=143:0 NodeList=n1
JobId=11 ArrayJobId=7 ArrayTaskId=3 JobName=zlstore:c UserId=root(0) JobState=COMPLETED Reason=None Dependency=(null) ExitCode=0:0 NodeList=n4
"""


def test_scontrol_states_per_card():
    tasks = slurm.parse_jobs(SCONTROL)
    assert sorted(tasks) == [0, 1, 2, 3, 4, 5]
    assert (tasks[4].state, tasks[4].ended, tasks[4].node, tasks[4].job) == ("pending (Resources)", False, "", "7_4")
    assert tasks[5].state == "pending (Resources)"
    assert (tasks[2].state, tasks[2].node, tasks[2].ended) == ("running", "n3", False)  # not ReqNodeList
    assert (tasks[1].state, tasks[1].exit_code, tasks[1].reason) == ("cancelled", 143, "")
    assert (tasks[0].state, tasks[0].reason, tasks[0].raw_state, tasks[0].ended) == (
        "timeout",
        "TimeLimit",
        "TIMEOUT",
        True,
    )
    assert (tasks[3].state, tasks[3].exit_code) == ("done", 0)
    assert slurm._task_ids("1,3,5-7%2") == [1, 3, 5, 6, 7]


def test_array_script_runs_each_card_s_ops_with_no_database(tmp_path):
    script = slurm.array_script(
        tmp_path / "c x", "run1", {0: [Op("topk", "float16", 1.0)], 3: [Op("rand", "", 1.0), Op("sort", "", 2.0)]}
    )
    assert "0) OPS=topk:float16 ;;" in script and "3) OPS=rand:,sort: ;;" in script
    assert "--device inherit" in script and "--db" not in script and "'" + str(tmp_path / "c x") + "'" in script
    argv = slurm.sbatch_argv(
        tmp_path,
        [3, 0],
        slurm.SlurmOptions(partition="gpu", time="1:00:00", sbatch_args=["--qos=high"]),
        "gpu:1",
        tmp_path / "s.sh",
        "/work",
    )
    assert "--array=0,3" in argv and "--partition=gpu" in argv and "--gres=gpu:1" in argv
    assert "--time=1:00:00" in argv and "--qos=high" in argv and "--no-requeue" in argv
    assert argv[-1] == str(tmp_path / "s.sh")
    # no gres unless asked for, where the cluster has none
    assert not any(a.startswith("--gres") for a in slurm.request_flags(slurm.SlurmOptions(), None))


# -- on the cluster ------------------------------------------------------------------------


@pytest.fixture
def cluster_env(slurm_cluster, tmp_path):
    def make(**extra):
        return {**base_env(tmp_path, **extra), **slurm_cluster}

    return make


def test_a_slurm_campaign_gives_the_same_store_as_a_local_one(cluster_env, tmp_path):
    env = cluster_env(FAKE_SLEEP=0.05, FAKE_SAME_IR="rand")
    ops = {
        ("topk", "float16"): (3.0, 3.2, True),
        ("sort", ""): (2.0, 2.1, True),
        ("rand", ""): (1.0, 1.0, False),
        ("fft", "complex64"): (1.5, 1.4, True),
    }
    write_screen_root(tmp_path / "runs" / "ab_rlc_eq", ops)
    base, plan = tmp_path / "base.db", tmp_path / "partition.tsv"
    with Store(base) as store:
        store.ingest(tmp_path / "runs")
    spec = ",".join(f"{op}:{dtype}" for op, dtype in ops)
    assert (
        invoke("plan", "ab_rlc_eq", "--ops", spec, "--cards", 4, "--rounds", 2, "--out", plan, "--db", base).exit_code
        == 0
    )

    runs = {}
    for where in ("local", "slurm"):
        db = tmp_path / f"{where}.db"
        copy_db(base, db)
        root = tmp_path / where / "campaign_eq"
        command = [
            "run",
            "campaign",
            "--plan",
            plan,
            "--rounds",
            2,
            "--screen-root",
            "ab_rlc_eq",
            "--root",
            root,
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            0.1,
            "--status-every",
            100,
            "--db",
            db,
        ]
        runs[where] = zl(command + (["--slurm"] if where == "slurm" else []), env)
        assert runs[where].returncode == 0, runs[where].stderr

    # the four tasks ran on the four nodes, and their commands had no database
    err = runs["slurm"].stderr
    assert {m for m in re.findall(r"on (n\d) running", err)} == {"n1", "n2", "n3", "n4"}, err
    assert "no --gres: the partition has no GPU GRES" in err
    logs = tmp_path / "slurm" / "campaign_eq" / "logs"
    assert all("ZLSTORE_DB=None" in log.read_text() for log in logs.glob("card*_*.log"))
    assert sorted(p.name for p in tmp_path.rglob("*.db")) == ["base.db", "local.db", "slurm.db"]

    def store_view(where):
        db = tmp_path / f"{where}.db"
        ab = [
            {k: v for k, v in row.items() if k != "root_path"}  # local/ and slurm/ are two trees
            for row in json.loads(invoke("ab", "campaign_eq", "--json", "--db", db).stdout)["rows"]
        ]
        screen = json.loads(invoke("screen", "--json", "--db", db).stdout)["rows"]
        per_root = query(
            db,
            "SELECT roots.name, count(*) FROM cells JOIN roots ON roots.id = cells.root_id "
            "GROUP BY roots.name ORDER BY roots.name",
        )
        cells = sorted(
            query(
                db,
                "SELECT root, card, op, dtype, round, side, rc, n_rows, n_counted, n_kernels, "
                "backend, bench_level, isolate_tuner_cache FROM cell_summary",
            )
        )
        return ab, screen, per_root, cells

    local, on_slurm = store_view("local"), store_view("slurm")
    assert len(local[0]) == 12  # 4 ops x 3 shapes
    assert all(r["rounds"] == 2 and not r["rejected"] for r in local[0])
    assert len(local[1]) == 4 and local[2] == [("ab_rlc_eq", 8), ("campaign_eq", 16)]
    assert on_slurm == local


def test_a_task_cancelled_mid_op_is_named_its_cells_kept_and_resume_runs_only_its_ops(cluster_env, tmp_path):
    root, db = tmp_path / "runs" / "campaign_kill", tmp_path / "k.db"
    plan = write_plan(
        tmp_path / "partition.tsv",
        [
            (0, "topk", "float16", 0.1),
            (0, "slowa", "", 1.0),
            (1, "rand", "", 0.1),
        ],
    )
    env = cluster_env(FAKE_SLEEP=0.05, FAKE_SLOW="slowa", FAKE_SLOW_SLEEP=0.6)
    command = ZLSTORE + [
        "run",
        "campaign",
        "--slurm",
        "--plan",
        str(plan),
        "--rounds",
        "2",
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
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(
            process,
            lambda: query(db, "SELECT 1 FROM cells WHERE op = 'slowa' AND round = 1 AND side = 'after'"),
            timeout=90,
        )
        job = (root / "slurm" / "jobs.tsv").read_text().splitlines()[1].split("\t")[1]
        subprocess.run(["scancel", f"{job}_0"], env=env, check=True, timeout=30)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err
    assert re.search(
        rf"failed: card 0: Slurm task {job}_0 on n\d ended CANCELLED, during slowa; 1 of 2 ops done; "
        "its recorded cells are kept",
        out,
    ), out
    assert f"continue with zlstore run campaign --slurm --resume --root {root} --db {db}" in out
    assert "card 0" in err and "cancelled" in err
    kept = query(db, "SELECT round, side FROM cells WHERE op = 'slowa' ORDER BY round, side")
    assert (1, "after") in kept and (1, "before") in kept  # the cells it finished stay
    assert query(db, "SELECT count(*) FROM cells WHERE op = 'rand'")[0][0] == 4  # card 1 went on

    env["FAKE_SLOW_SLEEP"] = "0.05"
    resumed = subprocess.run(
        ZLSTORE
        + [
            "run",
            "campaign",
            "--slurm",
            "--resume",
            "--root",
            str(root),
            "--db",
            str(db),
            "--poll",
            "0.2",
            "--status-every",
            "100",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "1 ops run, 2 skipped as complete" in resumed.stdout
    assert "slowa runs again from the start" in resumed.stderr
    jobs = (root / "slurm" / "jobs.tsv").read_text().splitlines()
    assert len(jobs) == 3 and jobs[2].split("\t")[2] == "0"  # only card 0 resubmitted
    # exactly the plan's rounds: the cancelled run's cells are superseded, not a third round
    ab = json.loads(invoke("ab", "campaign_kill", "--json", "--db", db).stdout)["rows"]
    assert {(r["op"], r["rounds"], r["rejected"]) for r in ab} == {(op, 2, 0) for op in ("topk", "slowa", "rand")}
    superseded = query(db, "SELECT count(*) FROM cells WHERE op = 'slowa' AND superseded_at IS NOT NULL")[0][0]
    assert superseded >= 2
    progress = campaign_progress(db, "campaign_kill")
    assert [(progress[c]["cells_recorded"], progress[c]["cells_planned"]) for c in (0, 1)] == [(8, 8), (4, 4)]


def test_ctrl_c_cancels_the_array_and_leaves_nothing_running(cluster_env, tmp_path):
    root, db = tmp_path / "runs" / "campaign_int", tmp_path / "i.db"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "slowa", "", 1.0), (1, "slowb", "", 1.0)])
    env = cluster_env(FAKE_SLOW="slowa,slowb", FAKE_SLOW_SLEEP=60)
    process = subprocess.Popen(
        ZLSTORE
        + [
            "run",
            "campaign",
            "--slurm",
            "--plan",
            str(plan),
            "--rounds",
            "1",
            "--root",
            str(root),
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            "0.2",
            "--db",
            str(db),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = interrupt_when(process, lambda: len(pid_files(tmp_path)) >= 4)  # both commands and their sleepers
    assert process.returncode == 130, err
    assert f"interrupted: continue with zlstore run campaign --slurm --resume --root {root} --db {db}" in out
    job = (root / "slurm" / "jobs.tsv").read_text().splitlines()[1].split("\t")[1]
    states = slurm.parse_jobs(
        subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True, text=True).stdout
    )
    assert {t.raw_state for t in states.values()} == {"CANCELLED"} and all(t.ended for t in states.values())
    assert wait_gone(pid_files(tmp_path)) == [], "an op command survived scancel"
    assert err.count("(interrupted)") == 2
