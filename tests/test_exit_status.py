"""Exit statuses a script can trust, the same in every command: 0 done; 1
some input had problems (everything readable was stored); 2 usage or
environment error; 3 record of an unfinished cell; 70 an internal error
(a bug, with its traceback); 130 interrupted; 141 stdout closed early. Each
through click's CliRunner and through a real process, where the status is
the process's own."""

import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from zlstore import Store, db
from zlstore.show import judge
from zlstore.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, cli

from .test_crash import make_tree, start_ingest, stored_cells
from .test_ingest import record, write_cell, write_root_env
from .test_run import FAKE, base_env

ZLSTORE = [sys.executable, "-m", "zlstore"]


@pytest.fixture
def scene(tmp_path):
    """A clean screening root, one with a cut-off run.log, a campaign root,
    an unfinished cell, a directory that is no cell, a store of all but the
    unfinished cell and the cut-off root, a store of that root, and a store
    from a newer release."""
    clean, cut = tmp_path / "runs" / "ab_rlc_clean", tmp_path / "runs2" / "ab_rlc_cut"
    for root in (clean, cut):
        write_root_env(root)
        for side, latency in (("before", 0.02), ("after", 0.018)):  # two processes: never the same run.log
            write_cell(root / f"topk_float16_{side}", record(latencies=((64, latency),)), env={"RC": 0})
    with open(cut / "topk_float16_after" / "run.log", "a") as log:
        log.write('\n[INFO] {"op_name": "topk", "res')
    campaign = tmp_path / "runs" / "campaign_x"
    campaign.mkdir()
    (campaign / "campaign.env").write_text("KIND=campaign\nROUNDS=1\nCARDS=1\n")
    write_cell(campaign / "card0" / "ab_1" / "topk" / "r1" / "before", record(), env={"RC": 0})
    unfinished = write_cell(campaign / "card0" / "ab_1" / "topk" / "r1" / "after", record())
    (tmp_path / "empty_dir").mkdir()
    store = tmp_path / "store.db"
    with Store(store) as s:
        s.ingest([clean, campaign])
    with Store(tmp_path / "cut.db") as s:
        s.ingest(cut)
    newer = tmp_path / "newer.db"
    with Store(newer) as s:
        s.conn.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    return {
        "clean": clean,
        "cut": cut,
        "campaign": campaign,
        "unfinished": unfinished,
        "empty_dir": tmp_path / "empty_dir",
        "store": store,
        "cut_store": tmp_path / "cut.db",
        "newer": newer,
        "tmp": tmp_path,
    }


CASES = {
    # name: (argv from the scene, the status)
    "ingest, clean": (lambda s: ["ingest", s["clean"], "--db", s["tmp"] / "n.db"], 0),
    "ingest, a cut-off run.log": (lambda s: ["ingest", s["cut"], "--db", s["tmp"] / "n.db"], 1),
    "ingest, a path that does not exist": (lambda s: ["ingest", s["tmp"] / "nope", "--db", s["tmp"] / "n.db"], 2),
    "merge, a clean store": (lambda s: ["merge", s["store"], "--db", s["tmp"] / "m.db"], 0),
    "merge, a store whose cut-off run.log is still open": (
        lambda s: ["merge", s["cut_store"], "--db", s["tmp"] / "m.db"],
        1,
    ),
    "screen, an unknown root": (lambda s: ["screen", "nosuch", "--db", s["store"]], 2),
    "export, a root of the wrong kind": (lambda s: ["export", "campaign_x", "--db", s["store"]], 2),
    "screen, a newer schema": (lambda s: ["screen", "--db", s["newer"]], 2),
    "noise, a missing --db": (lambda s: ["noise", "--db", s["tmp"] / "typo.db"], 2),
    "record, unfinished": (lambda s: ["record", s["unfinished"], "--db", s["store"]], 3),
    "record, a directory that is no cell": (lambda s: ["record", s["empty_dir"], "--db", s["store"]], 2),
    "record, a path that does not exist": (lambda s: ["record", s["tmp"] / "nope", "--db", s["store"]], 2),
    "serve --get, no leading slash": (lambda s: ["serve", "--get", "zlstore.json", "--db", s["store"]], 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_exit_status_through_click(case, scene):
    argv, status = CASES[case]
    result = CliRunner().invoke(cli, [str(a) for a in argv(scene)])
    assert result.exit_code == status, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if case.startswith("ingest, a path"):
        assert not (scene["tmp"] / "n.db").exists()  # creates nothing


@pytest.mark.parametrize("case", list(CASES))
def test_exit_status_of_a_real_process(case, scene):
    argv, status = CASES[case]
    result = subprocess.run(ZLSTORE + [str(a) for a in argv(scene)], capture_output=True, text=True, timeout=120)
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr


def test_record_that_stored_nothing_says_so(scene):
    result = CliRunner().invoke(cli, ["record", str(scene["empty_dir"]), "--db", str(scene["store"])])
    assert result.exit_code == 2
    assert "no cell directories found" in result.stderr and "nothing recorded" in result.stderr


# -- a bug: its traceback, and a status of its own ---------------------------------

BROKEN = "import zlstore.show.judge as j; j.verdicts = lambda *a, **k: 1 / 0; from zlstore.cli import cli; cli()"


def test_an_internal_error_exits_70_with_its_traceback(scene, monkeypatch):
    monkeypatch.setattr(judge, "verdicts", lambda *a, **k: 1 / 0)
    result = CliRunner().invoke(cli, ["screen", "--db", str(scene["store"])])
    assert result.exit_code == EXIT_INTERNAL == 70
    assert "internal error: ZeroDivisionError" in result.stderr and "Traceback" in result.stderr


def test_an_internal_error_of_a_real_process(scene):
    result = subprocess.run(
        [sys.executable, "-c", BROKEN, "screen", "--db", str(scene["store"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 70, result.stderr
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("zlstore: internal error: ZeroDivisionError")


# -- Ctrl-C -------------------------------------------------------------------------


def test_ctrl_c_in_any_command_exits_130_in_one_line(scene, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(judge, "verdicts", interrupted)
    result = CliRunner().invoke(cli, ["screen", "--db", str(scene["store"])])
    assert result.exit_code == EXIT_INTERRUPTED == 130
    assert result.stderr == (
        f"interrupted: nothing was written (the command only reads); to finish: zlstore screen --db {scene['store']}\n"
    )


def interrupt_when(process, ready, timeout=60):
    """SIGINT to the process's group, as a terminal's Ctrl-C, once ready()."""
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert process.poll() is None, process.communicate()
    os.killpg(process.pid, signal.SIGINT)
    return process.communicate(timeout=60)


def test_ctrl_c_to_a_real_process(scene, tmp_path):
    started = tmp_path / "started"
    code = (
        "import time, pathlib, zlstore.show.judge as j; "
        f"j.verdicts = lambda *a, **k: (pathlib.Path({str(started)!r}).touch(), time.sleep(60)); "
        "from zlstore.cli import cli; cli()"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, "screen", "--db", str(scene["store"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _, err = interrupt_when(process, started.exists)
    assert process.returncode == 130
    assert err.startswith("interrupted: nothing was written") and err.count("\n") == 1


def test_ctrl_c_mid_ingest_keeps_what_was_stored_and_exits_130(tmp_path):
    root = tmp_path / "ab_rlc_big"
    make_tree(root)
    db_path = tmp_path / "big.db"
    Store(db_path).close()
    process = start_ingest(
        root, db_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    _, err = interrupt_when(process, lambda: stored_cells(db_path) >= 10)
    assert process.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err
    assert last.startswith("interrupted: every cell stored before it is kept, whole") and last.endswith(
        f"to finish: zlstore ingest {root} --db {db_path}"
    ), last
    with Store(db_path) as store:
        stored = store.conn.execute("SELECT count(*) FROM cells").fetchone()[0]
        assert stored >= 10
        assert store.ingest(root)["cells_unchanged"] == stored  # whole cells, kept


# -- a reader that goes away ----------------------------------------------------------


def test_a_closed_stdout_ends_quietly_with_141(example_store_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the answer comes: `| true`
    process = subprocess.Popen(
        ZLSTORE + ["export", "ab_rlc_20261012_101500", "--db", str(example_store_path)],
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    err = process.communicate(timeout=60)[1].decode()
    assert process.returncode == 141, err
    assert err == ""


# -- run screen: when every side failed, it says so ---------------------------------


def test_run_screen_whose_every_side_failed_is_not_a_success(tmp_path):
    root, db_path = tmp_path / "runs" / "ab_rlc_broken", tmp_path / "s.db"
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk,fft:complex64",
            "--switch",
            "S",
            "--command",
            "no-such-benchmark-command {op}",
            "--cell-timeout",
            "30",
            "--root",
            str(root),
            "--db",
            str(db_path),
        ],
        env=base_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "failed: topk before: RC 127 (the shell found no such command); see " in result.stdout
    assert "every side failed (RC 127): nothing was measured" in result.stdout
    assert result.stdout.count("failed: ") == 4


def test_run_screen_with_some_failed_sides_exits_1(tmp_path):
    root, db_path = tmp_path / "runs" / "ab_rlc_fake", tmp_path / "s.db"
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "screen",
            "--ops",
            "topk:float16,rand",
            "--switch",
            "S",
            "--command",
            f"test {{op}} != rand && {FAKE} cell",
            "--cell-timeout",
            "30",
            "--root",
            str(root),
            "--db",
            str(db_path),
        ],
        env=base_env(tmp_path, FAKE_SLEEP=0.05),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("failed: ")]
    assert [line.split(";")[0] for line in failed] == ["failed: rand before: RC 1", "failed: rand after: RC 1"]
    assert "every side failed" not in result.stdout
