"""`zlstore run screen` and `zlstore run campaign` with a fake benchmark
command, as real processes: timeouts kill whole process groups, cells reach
the store while the run goes on, Ctrl-C leaves nothing behind, --resume
finishes the job."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zlstore.read import layout

from . import generator

HERE = Path(__file__).resolve().parent
FAKE = f"{sys.executable} {HERE / 'fake_bench.py'}"
ZLSTORE = [sys.executable, "-m", "zlstore"]


def base_env(tmp_path, **extra):
    env = dict(
        os.environ,
        PYTHONPATH=str(HERE.parent),
        FAKE_PID_DIR=str(tmp_path / "pids"),
        ZL_BACKEND="cuda",
        **{k: v for k, v in generator.SCREEN_CALIBER.items() if k != "ZL_BACKEND"},
    )
    env.pop("ZLSTORE_DB", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state == "Z"


def wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if not gone(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def descendants(pid: int) -> set:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def pid_files(tmp_path) -> set:
    directory = tmp_path / "pids"
    return {int(p.name) for p in directory.iterdir()} if directory.exists() else set()


def interrupt(process):
    """Ctrl-C as a terminal sends it: SIGINT to the zlstore process."""
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


def wait_until(process, ready, timeout=60.0, every=0.1):
    """Until ready() holds; fails, with the process's output, if it ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(every)


def interrupt_when(process, ready, timeout=60.0, every=0.1):
    """Ctrl-C the process once ready() holds; killed on the way out if anything failed. Returns (out, err)."""
    try:
        wait_until(process, ready, timeout, every)
        return interrupt(process)
    finally:
        if process.poll() is None:
            process.kill()


def query(db, sql, params=()):
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def write_plan(path, rows):
    path.write_text("card\top\tdtype\tweight_min\n" + "".join(f"{c}\t{o}\t{d}\t{w}\n" for c, o, d, w in rows))
    return path


# -- screen ------------------------------------------------------------------------


def test_screen_kills_a_hanging_side_with_its_children_and_judges_it_truncated(tmp_path):
    root, db = tmp_path / "runs" / "ab_rlc_fake", tmp_path / "s.db"
    env = base_env(tmp_path, FAKE_SAME_IR="rand", FAKE_HANG="sort:after", FAKE_SLEEP=0.1)
    started = time.monotonic()
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk:float16,rand,sort",
            "--switch",
            "FLAGTREE_MUSA_RLC_ENHANCE",
            "--command",
            f"{FAKE} cell",
            "--cell-timeout",
            "2",
            "--root",
            str(root),
            "--db",
            str(db),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr  # a side hit the timeout: recorded, and said
    assert "failed: sort after: killed at the cell timeout; see " in result.stdout
    assert time.monotonic() - started < 60
    # the hanging side and the sleeper it spawned are gone
    assert wait_gone(pid_files(tmp_path)) == []
    hung = layout.read_env(root / "sort_after" / "cell.env", [])
    assert hung is not None
    assert hung["RC"] == "124" and 1.5 < float(hung["ELAPSED_S"]) < 30
    assert hung["SWITCH_VALUE"] == "1" and hung["CELL_TIMEOUT"] == "2"
    good = layout.read_env(root / "topk_float16_before" / "cell.env", [])
    assert good is not None
    assert good["RC"] == "0" and good["OP"] == "topk" and good["DTYPE"] == "float16" and good["ROUND"] == "0"
    assert good["SWITCH"] == "FLAGTREE_MUSA_RLC_ENHANCE" and good["SWITCH_VALUE"] == "0"
    assert good["BENCH_LEVEL"] == "core" and good["ZL_BACKEND"] == "cuda"
    assert list(good)[-1] == "RC"
    root_env = layout.read_env(root / "root.env", [])
    assert root_env is not None
    assert root_env["KIND"] == "screen" and root_env["SWITCH"] == "FLAGTREE_MUSA_RLC_ENHANCE"
    assert root_env["SHAPE_MODE"] == "file"

    verdicts = dict(
        ((op, dtype), verdict) for op, dtype, verdict in query(db, "SELECT op, dtype, verdict FROM verdicts")
    )
    assert verdicts == {("topk", "float16"): "IR_CHANGED", ("rand", ""): "NO_IR_DIFF", ("sort", ""): "TRUNCATED"}
    screen_tsv = layout.read_tsv(root / "screen.tsv", [])
    assert screen_tsv is not None
    rows = {row["op"]: row for _, row in screen_tsv}
    assert rows["sort"]["verdict"] == "TRUNCATED" and rows["sort"]["rc_after"] == "124"
    assert rows["topk"]["verdict"] == "IR_CHANGED"
    assert "TRUNCATED" in result.stdout
    assert query(db, "SELECT count(*) FROM cells")[0][0] == 6


def test_screen_ctrl_c_kills_the_running_side(tmp_path):
    root, db = tmp_path / "runs" / "ab_rlc_int", tmp_path / "s.db"
    process = subprocess.Popen(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk",
            "--switch",
            "S",
            "--command",
            f"{FAKE} cell",
            "--root",
            str(root),
            "--db",
            str(db),
        ],
        env=base_env(tmp_path, FAKE_HANG="topk:before"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = interrupt_when(process, lambda: len(pid_files(tmp_path)) >= 2)  # the fake and its sleeper
    assert process.returncode == 130, err
    assert wait_gone(pid_files(tmp_path)) == []
    assert not (root / "topk_before" / "cell.env").exists()  # unfinished: not a cell yet
    assert query(db, "SELECT count(*) FROM cells") in ([], [(0,)])


def test_screen_refuses_an_existing_root(tmp_path):
    root = tmp_path / "runs" / "ab_rlc_fake"
    (root / "topk_before").mkdir(parents=True)
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk",
            "--switch",
            "S",
            "--command",
            "true",
            "--root",
            str(root),
            "--db",
            str(tmp_path / "x.db"),
        ],
        env=base_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "not empty" in result.stderr


@pytest.mark.parametrize("ops", ["../../escaped:float16", "..:float16", "topk:../x"])
def test_screen_refuses_an_op_name_that_would_put_its_cells_elsewhere(tmp_path, ops):
    """A cell directory is named after the op and dtype: '../../escaped'
    wrote cells outside the root, then failed with a traceback."""
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            ops,
            "--switch",
            "S",
            "--command",
            "true",
            "--root",
            str(tmp_path / "runs" / "r1"),
            "--db",
            str(tmp_path / "x.db"),
        ],
        env=base_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "is no op or dtype name" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.rglob("*") if p.is_dir()] == []  # no root, no cell anywhere


def test_screen_names_a_root_it_cannot_create(tmp_path):
    (tmp_path / "file").write_text("")
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk",
            "--switch",
            "S",
            "--command",
            "true",
            "--root",
            str(tmp_path / "file" / "r1"),
            "--db",
            str(tmp_path / "x.db"),
        ],
        env=base_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"cannot create the root {tmp_path / 'file' / 'r1'}" in result.stderr and "Traceback" not in result.stderr


# -- campaign ------------------------------------------------------------------------


def test_campaign_records_cells_while_running_and_goes_on_after_a_failed_op(tmp_path):
    root, db = tmp_path / "runs" / "campaign_live", tmp_path / "c.db"
    plan = write_plan(
        tmp_path / "partition.tsv",
        [
            (0, "topk", "float16", 0.2),
            (0, "sort", "", 0.1),
            (1, "broken", "", 0.2),
            (1, "rand", "", 0.1),
            (2, "fft", "complex64", 0.2),
        ],
    )
    env = base_env(tmp_path, FAKE_SLEEP=0.4, FAKE_FAIL="broken")
    process = subprocess.Popen(
        ZLSTORE
        + [
            "run",
            "campaign",
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
            "1",
            "--db",
            str(db),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen_while_running = 0
    while process.poll() is None:
        rows = query(db, "SELECT count(*) FROM cells")
        if rows and rows[0][0] and process.poll() is None:
            seen_while_running = max(seen_while_running, rows[0][0])
        time.sleep(0.1)
    out, err = process.communicate(timeout=60)
    assert seen_while_running > 0, "no cell reached the store while the campaign ran"
    assert process.returncode == 1, err  # one op failed
    assert "failed: card 1 broken: exit status 3" in out

    cells = query(
        db,
        """SELECT op, dtype, card, count(*), count(DISTINCT round || side), min(rc), max(rc)
                         FROM cells GROUP BY op, dtype, card ORDER BY op""",
    )
    assert [tuple(r) for r in cells] == [
        ("broken", "", 1, 2, 2, 0, 0),  # round 1 only, then exit 3
        ("fft", "complex64", 2, 4, 4, 0, 0),
        ("rand", "", 1, 4, 4, 0, 0),  # card 1 went on after the failure
        ("sort", "", 0, 4, 4, 0, 0),
        ("topk", "float16", 0, 4, 4, 0, 0),
    ]
    problems = query(db, "SELECT file, message FROM ingest_problems")
    assert any("broken" in m and "status 3" in m for _, m in problems)
    # every card wrote under its own AB_ROOT, saw only its own device and the forced isolation
    for card, op in ((0, "topk_float16"), (1, "rand"), (2, "fft_complex64")):
        log = (root / "logs" / f"card{card}_{op}.log").read_text()
        assert f"AB_ROOT={root / f'card{card}'} " in log
        assert f"CUDA_VISIBLE_DEVICES={card} " in log and "ZL_ISOLATE_TUNER_CACHE=1" in log
    paths = query(db, "SELECT path, card FROM cells")
    assert all(Path(p).is_relative_to(root / f"card{c}") for p, c in paths)
    campaign_env = layout.read_env(root / "campaign.env", [])
    assert campaign_env is not None
    assert campaign_env["KIND"] == "campaign" and campaign_env["ROUNDS"] == "2" and campaign_env["CARDS"] == "3"
    assert campaign_env["ZL_ISOLATE_TUNER_CACHE"] == "1"
    assert (root / "partition.tsv").read_text() == plan.read_text()
    assert query(db, "SELECT DISTINCT isolate_tuner_cache FROM cell_summary") == [("1",)]
    # the display's last screen
    assert "current op" in err and "(finished)" in err and "failed: card 1 broken" in err


def test_ctrl_c_leaves_nothing_behind_and_resume_finishes(tmp_path):
    root, db = tmp_path / "runs" / "campaign_int", tmp_path / "i.db"
    plan = write_plan(
        tmp_path / "partition.tsv",
        [
            (0, "topk", "float16", 0.1),
            (0, "slowa", "", 1.0),
            (1, "rand", "", 0.1),
            (1, "slowb", "", 1.0),
        ],
    )
    env = base_env(tmp_path, FAKE_SLEEP=0.1, FAKE_SLOW="slowa,slowb", FAKE_SLOW_SLEEP=30)
    command = ZLSTORE + [
        "run",
        "campaign",
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
        "--db",
        str(db),
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait for the quick ops to be complete and the slow ones to be running
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = query(db, "SELECT count(*) FROM cells WHERE op IN ('topk', 'rand')")
            slow_started = [p for p in (root / "logs").glob("card*_slow*.log")] if (root / "logs").exists() else []
            if done and done[0][0] == 8 and len(slow_started) == 2 and len(pid_files(tmp_path)) >= 8:
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the quick ops did not finish in time")
        time.sleep(0.5)
        before = descendants(process.pid) | pid_files(tmp_path)
        assert len(before) >= 4  # workers and the slow ops' commands at least
        out, err = interrupt(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "--resume" in out
    assert wait_gone(before | pid_files(tmp_path)) == [], "a worker or a command survived Ctrl-C"
    assert "(interrupted)" in err
    kept = query(db, "SELECT count(*) FROM cells")[0][0]
    assert kept >= 8  # every recorded cell is kept

    env["FAKE_SLOW_SLEEP"] = "0.1"
    result = subprocess.run(
        command[: command.index("--plan")] + ["--resume", "--root", str(root), "--db", str(db)] + ["--poll", "0.2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "2 skipped as complete" in result.stdout
    assert "topk:float16 already complete" in result.stderr
    complete = query(
        db,
        """SELECT op, count(DISTINCT round || side) FROM cells
                            WHERE rc IS NOT NULL GROUP BY op ORDER BY op""",
    )
    assert [tuple(r) for r in complete] == [("rand", 4), ("slowa", 4), ("slowb", 4), ("topk", 4)]
    assert query(db, "SELECT count(*) FROM cells WHERE op IN ('topk', 'rand')")[0][0] == 8  # not rerun


# -- the JSON summaries -------------------------------------------------------------


def test_screen_and_campaign_end_with_a_json_summary(tmp_path):
    """--json: what a script needs from a run, on stdout, the progress on stderr."""
    screen_root, db = tmp_path / "runs" / "ab_rlc_json", tmp_path / "j.db"
    env = base_env(tmp_path, FAKE_SAME_IR="rand", FAKE_SLEEP=0.1)
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk:float16,rand",
            "--switch",
            "FLAGTREE_MUSA_RLC_ENHANCE",
            "--command",
            f"{FAKE} cell",
            "--root",
            str(screen_root),
            "--db",
            str(db),
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["root"] == str(screen_root) and summary["sides"] == 4 and summary["failed"] == []
    assert summary["switch"] == "FLAGTREE_MUSA_RLC_ENHANCE" and summary["switch_values"] == ["0", "1"]
    assert {(r["op"], r["dtype"]): r["verdict"] for r in summary["verdicts"]} == {
        (op, dtype): verdict for op, dtype, verdict in query(db, "SELECT op, dtype, verdict FROM verdicts")
    }
    assert list(summary["verdicts"][0]) == list(layout.SCREEN_COLUMNS)
    assert "topk:float16 before: RC 0" in result.stderr

    root = tmp_path / "runs" / "campaign_json"
    plan = write_plan(tmp_path / "partition.tsv", [(0, "topk", "float16", 0.1), (1, "rand", "", 0.1)])
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "campaign",
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
            "--db",
            str(db),
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["root"] == str(root) and not summary["interrupted"] and summary["failed"] == []
    assert summary["done"] == 2 and summary["skipped"] == 0
    assert (
        summary["cells"]
        == 8
        == query(db, "SELECT count(*) FROM cells WHERE root_id = (SELECT id FROM roots WHERE name = 'campaign_json')")[
            0
        ][0]
    )
    assert [(c["card"], c["done"], c["left"], c["cells"]) for c in summary["cards"]] == [(0, 1, 0, 4), (1, 1, 0, 4)]
    assert summary["resume"] is None and summary["next"] == f"zlstore ab {root} --db {db}"
    assert "current op" in result.stderr  # the status table went to stderr
