"""`zlstore flaggems cell` and `zlstore flaggems repeat` as the --command of
`zlstore run screen` and `zlstore run campaign`, against a stand-in for
FlagGems' benchmark (tests/flaggems_standin: FlagGems' options and record
file, a Triton-like cache, no torch, no GPU), switch TRITON_F32_DEFAULT
ieee / tf32 as in the real H200 run; then the store judges what they wrote."""

import json
import os
import platform
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore.run import flaggems, harness, runner
from zlstore.show import irdiff
from zlstore.read import layout
from zlstore.cli import cli

from .real_caliber import REAL_CALIBER

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "flaggems_standin"
PY = shlex.quote(sys.executable)
ZLSTORE = [sys.executable, "-m", "zlstore"]
SWITCH, VALUES = "TRITON_F32_DEFAULT", ("ieee", "tf32")
PYTEST_ARGS = "-- --warmup 25 --iter 100"
CELL = f"{PY} -m zlstore flaggems cell --flaggems {shlex.quote(str(STANDIN))} --python {PY} {PYTEST_ARGS}"
# No --values: a campaign's repeats take the values its screening root ran.
REPEAT = (
    f"{PY} -m zlstore flaggems repeat {{op}} {{dtype}} "
    f"--flaggems {shlex.quote(str(STANDIN))} --python {PY} {PYTEST_ARGS}"
)


# What run screen, run campaign or the caller's shell may have set.
RUN_VARS = {
    "OUT_DIR",
    "OP",
    "DTYPE",
    "SIDE",
    "SWITCH",
    "SWITCH_VALUE",
    "SWITCH_VALUES",
    "CELL_TIMEOUT",
    "AB_ROOT",
    "ROUNDS",
    "CARD",
}


def env_for(tmp, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ZLSTORE_", "FLAGGEMS_", "STANDIN_", "PYTEST_", "TRITON_"))
        and k not in RUN_VARS
        and k not in REAL_CALIBER
    }
    env.update(
        REAL_CALIBER,
        PYTHONPATH=str(HERE.parent),
        STANDIN_PID_DIR=str(tmp / "pids"),
        STANDIN_TRACE=str(tmp / "trace.jsonl"),
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def query(db, sql, params=()):
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def zl(args, env, **kw):
    return subprocess.run(ZLSTORE + args, env=env, capture_output=True, text=True, timeout=180, **kw)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"


def survivors(tmp):
    directory = tmp / "pids"
    pids = [int(p.name) for p in directory.iterdir()] if directory.exists() else []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not gone(p)]


def traces(tmp):
    path = tmp / "trace.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def loc_paths(ttgir: Path):
    """The source paths of a .ttgir's `#loc = loc("path":line:col)` lines."""
    return {line.split('"')[1] for line in ttgir.read_text().splitlines() if line.startswith("#loc = loc(")}


def assert_cell_files(cell: Path):
    """What the cell command writes: index.tsv listing exactly the .ttgir
    files of the cell's own cache, and FlagGems' records in run.log with no
    result*.log left behind."""
    index = [line.split("\t") for line in (cell / "index.tsv").read_text().splitlines()]
    listed = {cell / path for _, _, path in index}
    assert listed == set((cell / "triton_cache").glob("*/*.ttgir")) and listed
    assert all(kernel == Path(path).stem and path.split("/")[1] == hsh for kernel, hsh, path in index)
    assert not list(cell.glob("result*.log"))
    log = (cell / "run.log").read_bytes()
    assert b"[INFO] Benchmark record logger enabled" in log and b'[INFO] {"op_name"' in log


# What the stand-in host has: two GPUs, as nvidia-smi lists them.
GPUS = ["0, GPU-5a1c0f2e-0000, NVIDIA H200, 570.86.15", "1, GPU-9b7d41aa-1111, NVIDIA H200, 570.86.15"]


def fake_nvidia_smi(tmp) -> Path:
    """A directory with an nvidia-smi that answers provenance's query as a
    two-GPU host does (and fails on any other)."""
    directory = tmp / "bin"
    directory.mkdir(exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text(
        '#!/bin/sh\ncase "$1" in --query-gpu=index,uuid,name,driver_version) ;; *) exit 9;; esac\n'
        + "".join(f"echo '{line}'\n" for line in GPUS)
    )
    script.chmod(0o755)
    return directory


def repo_commit():
    """This checkout's commit (the stand-in lives in it), or None without git."""
    done = subprocess.run(["git", "-C", str(HERE), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()[:12] if done.returncode == 0 else None


# == screen, then a campaign planned from it =======================================


# Far above what a stand-in cell that does not hang takes on a loaded machine
# (at 4-5 s, cells came out killed under load): only a hanging one waits it out.
CELL_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def screened(tmp_path_factory):
    """One screening pass: abs (its IR carries per-cell FlagGems cache paths),
    softmax (same IR), mm float32 (tf32 reaches tt.dot) and topk, whose
    after side hangs until CELL_TIMEOUT (CELL_TIMEOUT_S)."""
    tmp = tmp_path_factory.mktemp("flaggems_screen")
    db, root = tmp / "z.db", tmp / "runs" / "screen_h200"
    env = env_for(tmp, STANDIN_HANG="topk:tf32")
    env["PATH"] = f"{fake_nvidia_smi(tmp)}{os.pathsep}{env['PATH']}"
    had_pytest_cache = (STANDIN / ".pytest_cache").exists()
    started = time.monotonic()
    result = zl(
        [
            "run",
            "screen",
            "--ops",
            "abs:float16,softmax:float32,mm:float32,topk:float16",
            "--switch",
            SWITCH,
            "--values",
            ",".join(VALUES),
            "--cell-timeout",
            str(CELL_TIMEOUT_S),
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
    return {
        "tmp": tmp,
        "db": db,
        "root": root,
        "env": env,
        "result": result,
        "elapsed": time.monotonic() - started,
        "had_pytest_cache": had_pytest_cache,
    }


def test_screen_runs_flaggems_cells_and_the_store_judges_them(screened):
    result, root, db = screened["result"], screened["root"], screened["db"]
    # 1: topk's after side hung and was killed at its timeout (the rest ran cleanly)
    assert result.returncode == 1, result.stderr
    assert "topk:float16 after: RC 124" in result.stderr
    verdicts = {
        (r["op"], r["dtype"]): r
        for r in json.loads(zl(["screen", "--json", "--db", str(db)], screened["env"]).stdout)["rows"]
    }
    assert {k: v["verdict"] for k, v in verdicts.items()} == {
        ("abs", "float16"): "IR_CHANGED",  # only the loc paths differ: each cell has its own FlagGems cache
        ("softmax", "float32"): "NO_IR_DIFF",
        ("mm", "float32"): "IR_CHANGED",
        ("topk", "float16"): "TRUNCATED",
    }
    mm = verdicts[("mm", "float32")]
    assert (
        mm["range_label"] == "indicative (one round)" and 1.8 < mm["min"] <= mm["max"] < 2.2
    )  # tf32 halves the stand-in's mm
    assert verdicts[("softmax", "float32")]["range_label"] == "noise floor"
    assert verdicts[("topk", "float16")]["rc_after"] == 124 and verdicts[("topk", "float16")]["min"] is None
    # without locations (v4), abs's pair is the same code: the real H200 abs pair did the same
    v4 = {
        (r["op"], r["dtype"]): r["verdict"]
        for r in json.loads(zl(["screen", "--rule", "v4", "--json", "--db", str(db)], screened["env"]).stdout)["rows"]
    }
    assert v4[("abs", "float16")] == "NO_IR_DIFF" and v4[("mm", "float32")] == "IR_CHANGED"
    # the TRUNCATED side was killed at its cap with its sleeper, its first record kept
    assert survivors(screened["tmp"]) == []
    hung = root / "topk_float16_after"
    hung_env = layout.read_env(hung / "cell.env", [])
    assert hung_env is not None and hung_env["RC"] == "124"
    assert b"killed at" in (hung / "run.log").read_bytes()
    assert_cell_files(hung)


def test_screen_cells_carry_the_switch_values_the_caliber_and_their_sources(screened):
    root, db = screened["root"], screened["db"]
    root_env = layout.read_env(root / "root.env", [])
    assert root_env is not None
    assert root_env["SWITCH"] == SWITCH and root_env["SWITCH_VALUES"] == "ieee,tf32"
    cells = query(db, "SELECT * FROM cells ORDER BY path")
    assert len(cells) == 8
    for cell in cells:
        assert cell["switch"] == SWITCH
        assert cell["switch_value"] == dict(zip(layout.SIDES, VALUES))[cell["side"]]
        assert cell["caliber_id"] is not None and cell["caliber_missing"] is None
        assert cell["caliber_source"] == "cell.env"
        assert json.loads(cell["provenance"])["switch_value"] == "cell.env"
        path = Path(cell["path"])
        assert_cell_files(path)
        assert cell["n_kernels"] == len((path / "index.tsv").read_text().splitlines())
    calibers = query(db, "SELECT * FROM calibers")
    assert len(calibers) == 1 and calibers[0]["bench_level"] == "core" and calibers[0]["shape_mode"] == "default"
    # every generated kernel's IR points into its own cell's FlagGems cache
    for side in layout.SIDES:
        cell = root / f"abs_float16_{side}"
        (ttgir,) = (cell / "triton_cache").glob("*/abs_func_kernel_rank_1.ttgir")
        (source,) = loc_paths(ttgir)
        assert Path(source).parent == cell / "flaggems_cache" / "code_cache"


def test_no_record_file_or_pytest_cache_outside_the_cells(screened):
    """FlagGems writes its record file in its working directory: never the
    caller's, never the checkout every cell shares."""
    for directory in (screened["tmp"], STANDIN, STANDIN / "benchmark"):
        assert not list(directory.glob("result*.log"))
    assert screened["had_pytest_cache"] or not (STANDIN / ".pytest_cache").exists()
    for trace in traces(screened["tmp"]):
        cwd = Path(trace["cwd"])
        assert cwd.parent == screened["root"]
        assert trace["triton_cache"] == str(cwd / "triton_cache")
        assert trace["flaggems_cache"] == str(cwd / "flaggems_cache")
        assert trace["f32_default"] == dict(zip(layout.SIDES, VALUES))[cwd.name.rsplit("_", 1)[1]]


@pytest.fixture(scope="module")
def campaign(screened):
    """A campaign from the screening root on two cards: its IR_CHANGED ops
    (abs, mm: abs differs only in its loc() paths, planned with
    --include-hinted, as a real FlagGems campaign would need) plus topk, whose after side hangs: every such cell is killed at
    CELL_TIMEOUT by zlstore flaggems repeat itself."""
    tmp = screened["tmp"]
    root = tmp / "runs" / "campaign_h200"
    env = dict(screened["env"], CELL_TIMEOUT=str(CELL_TIMEOUT_S))
    result = zl(
        [
            "run",
            "campaign",
            "--screen-root",
            str(screened["root"]),
            "--cards",
            "2",
            "--rounds",
            "2",
            "--include-hinted",
            "--extra-ops",
            "topk:float16",
            "--command",
            REPEAT,
            "--root",
            str(root),
            "--poll",
            "0.2",
            "--db",
            str(screened["db"]),
        ],
        env,
        cwd=tmp,
    )
    return {"root": root, "result": result, "db": screened["db"], "env": env, "tmp": tmp}


def test_campaign_runs_flaggems_repeats_and_the_store_pairs_them(campaign):
    result, db, root = campaign["result"], campaign["db"], campaign["root"]
    assert result.returncode == 1, result.stderr  # topk's killed cells fail its op
    assert "topk:float16: exit status 1" in result.stdout
    ranges = json.loads(zl(["ab", str(root), "--json", "--db", str(db)], campaign["env"]).stdout)["rows"]
    by_op: dict[tuple[str, str], list[dict]] = {}
    for r in ranges:
        by_op.setdefault((r["op"], r["dtype"]), []).append(r)
    assert {k: len(v) for k, v in by_op.items() if k != ("topk", "float16")} == {
        ("abs", "float16"): 3,
        ("mm", "float32"): 3,
    }  # the core level's three shapes each
    for r in by_op[("mm", "float32")]:
        assert r["rounds"] == 2 and r["rejected"] == 0 and 1.8 < r["min"] <= r["max"] < 2.2
    for r in by_op[("abs", "float16")]:
        assert r["rounds"] == 2 and 0.9 < r["min"] <= r["max"] < 1.1
    cells = query(
        db,
        """SELECT cells.* FROM cells JOIN roots ON roots.id = cells.root_id
                         WHERE roots.path = ? ORDER BY cells.path""",
        (str(root),),
    )
    assert len(cells) == 12
    for cell in cells:
        path = Path(cell["path"])
        env = layout.read_env(path / "cell.env", [])
        assert env is not None
        assert list(env)[-1] == "RC" and env["NODEID"] == f"benchmark/test_{cell['op']}.py::-m {cell['op']}"
        assert cell["caliber_id"] is not None and cell["caliber_source"] == "cell.env"
        assert cell["switch_value"] == dict(zip(layout.SIDES, VALUES))[cell["side"]]
        assert path.relative_to(root).parts[:1] == (f"card{cell['card']}",)
        assert path.parent.name == f"r{cell['round']}" and path.parents[1].name == cell["op"]
        assert_cell_files(path)
        expected_rc = 124 if (cell["op"], cell["side"]) == ("topk", "after") else 0
        assert cell["rc"] == expected_rc, cell
    assert survivors(campaign["tmp"]) == []


def test_campaign_cards_ran_at_once_each_cell_in_its_own_directory_and_caches(campaign):
    runs = [t for t in traces(campaign["tmp"]) if Path(t["cwd"]).is_relative_to(campaign["root"])]
    starts = {t["cwd"]: t["time"] for t in runs if t["event"] == "start"}
    assert len(starts) == 12  # one benchmark per cell, each in its cell
    for cwd in starts:
        assert (Path(cwd) / "cell.env").is_file()
    cards = {Path(cwd).relative_to(campaign["root"]).parts[0] for cwd in starts}
    assert cards == {"card0", "card1"}
    for trace in runs:
        assert trace["triton_cache"] == str(Path(trace["cwd"]) / "triton_cache")
        assert trace["flaggems_cache"] == str(Path(trace["cwd"]) / "flaggems_cache")


# == one cell, by itself ======================================================================


def side_env(tmp, out, op="abs", dtype="float16", value="ieee", **extra):
    return env_for(
        tmp, OUT_DIR=out, OP=op, DTYPE=dtype, SIDE="before", SWITCH=SWITCH, SWITCH_VALUE=value, CELL_TIMEOUT=60, **extra
    )


def test_two_cells_at_once_share_no_working_directory_or_cache(tmp_path):
    """The same op twice at once: FlagGems would give both the same record
    file name, so a shared working directory would lose one's records."""
    outs = [tmp_path / "a" / "abs_float16_before", tmp_path / "b" / "abs_float16_before"]
    procs = []
    for out in outs:
        out.mkdir(parents=True)
        procs.append(
            subprocess.Popen(
                shlex.split(CELL),
                env=side_env(tmp_path, out, STANDIN_MEET=f"{tmp_path / 'meet'}:2"),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for proc in procs:
        assert proc.stdout is not None  # stdout=PIPE
        assert proc.wait(timeout=120) == 0, proc.stdout.read()
    spans: dict[str, dict[str, float]] = {}
    for trace in traces(tmp_path):
        spans.setdefault(trace["cwd"], {})[trace["event"]] = trace["time"]
    assert set(spans) == {str(out) for out in outs}
    (a, b) = spans.values()
    assert a["start"] < b["end"] and b["start"] < a["end"], "the two cells did not overlap"
    for out in outs:
        assert_cell_files(out)
        records = [line for line in (out / "run.log").read_bytes().splitlines() if line.startswith(b'[INFO] {"')]
        assert len(records) == 1 and b'"dtype": "torch.float16"' in records[0]
        (ttgir,) = (out / "triton_cache").glob("*/*.ttgir")
        assert {Path(p).parent for p in loc_paths(ttgir)} == {out / "flaggems_cache" / "code_cache"}


def test_a_cell_told_to_stop_kills_the_benchmark_and_keeps_its_records(tmp_path):
    """run screen kills the command's group at CELL_TIMEOUT (SIGTERM, then
    SIGKILL after a grace): the benchmark, in its own group, goes too, and
    run.log and index.tsv are written before."""
    out = tmp_path / "topk_before"
    out.mkdir()
    proc = subprocess.Popen(
        shlex.split(CELL),
        env=side_env(tmp_path, out, op="topk", STANDIN_HANG="topk"),
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists() or not any((tmp_path / "pids").iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=runner.KILL_GRACE_S + 5) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert survivors(tmp_path) == []
    assert b"stopped: the benchmark was killed" in (out / "run.log").read_bytes()
    assert_cell_files(out)


def test_an_op_without_its_own_test_file_runs_from_the_benchmark_directory(tmp_path):
    """Older FlagGems keeps several ops per file (test_unary_pointwise_perf.py):
    pytest then runs benchmark/ with -m <op>; an op no test is marked with is
    said so in run.log."""
    bench = flaggems.Benchmark(STANDIN, python=sys.executable)
    assert bench.test_path("abs") == "benchmark/test_abs.py" and bench.test_path("nosuchop") == "benchmark"
    assert flaggems.Benchmark(STANDIN, tests="benchmark/test_{op}.py").test_path("sum") == "benchmark/test_sum.py"
    env = env_for(tmp_path)
    run = flaggems.run_cell(bench, tmp_path / "cell", "nosuchop", "", SWITCH, "ieee", "core", 60, env)
    assert run.rc == flaggems.PYTEST_NO_TESTS and run.kernels == 0 and run.records == 0
    assert b"ran no test marked nosuchop in benchmark" in (tmp_path / "cell" / "run.log").read_bytes()


# == refusals: nothing is run ===============================================================


def cell_cli(env, *args):
    return CliRunner().invoke(
        cli, ["flaggems", "cell", "--flaggems", str(STANDIN), "--python", sys.executable, *args], env=env
    )


@pytest.mark.parametrize(
    "missing, message",
    [
        ("BENCH_LEVEL", "BENCH_LEVEL is not set"),
        ("OUT_DIR", "OUT_DIR not set"),
    ],
)
def test_a_cell_without_what_it_needs_is_a_usage_error(tmp_path, missing, message):
    env = side_env(tmp_path, tmp_path / "out")
    env[missing] = ""
    result = cell_cli(env)
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "out" / "triton_cache").exists()


def test_options_the_cell_sets_itself_are_refused(tmp_path):
    for args in (["--", "--level", "comprehensive"], ["--", "-m", "mm"], ["--", "--dtypes=float32"]):
        result = cell_cli(side_env(tmp_path, tmp_path / "out"), *args)
        assert result.exit_code == 2 and "is set by zlstore flaggems" in result.output, args
    result = cell_cli(side_env(tmp_path, tmp_path / "out", ZL_ISOLATE_TUNER_CACHE="0"))
    assert result.exit_code == 2 and "ZL_ISOLATE_TUNER_CACHE=0" in result.output
    result = CliRunner().invoke(cli, ["flaggems", "cell", "--flaggems", str(tmp_path)], env=side_env(tmp_path, "x"))
    assert result.exit_code == 2 and "not a FlagGems checkout" in result.output


def test_a_record_file_name_too_long_for_the_file_system_is_refused(tmp_path):
    checkout = tmp_path / ("x" * 120) / ("y" * 120)
    shutil.copytree(STANDIN, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    bench = flaggems.Benchmark(checkout, python=sys.executable)
    with pytest.raises(flaggems.FlagGemsError, match="over the 255"):
        flaggems.run_cell(bench, tmp_path / "cell", "abs", "float16", SWITCH, "ieee", "core", 60, env_for(tmp_path))
    assert not (tmp_path / "cell" / "run.log").exists()


def test_switch_values_are_two_different_values():
    assert harness.switch_values("ieee, tf32") == ("ieee", "tf32")
    for bad in ("ieee", "ieee,ieee", "ieee,", "ieee,tf32,tf32x3"):
        with pytest.raises(ValueError, match="before,after"):
            harness.switch_values(bad)


def test_a_repeat_takes_its_values_as_given_else_from_the_screening_root(tmp_path):
    screen, campaign = tmp_path / "screen_x", tmp_path / "campaign_x"
    screen.mkdir()
    campaign.mkdir()
    (screen / "root.env").write_text("KIND=screen\nSWITCH=TRITON_F32_DEFAULT\nSWITCH_VALUES=ieee,tf32x3\n")
    (campaign / "campaign.env").write_text("KIND=campaign\nSCREEN_ROOT=../screen_x\n")
    env = {"CAMPAIGN_ROOT": str(campaign)}
    assert flaggems.repeat_values(None, env) == ("ieee", "tf32x3")
    assert flaggems.repeat_values("tf32,ieee", env) == ("tf32", "ieee")
    assert flaggems.repeat_values(None, {}) == harness.DEFAULT_SWITCH_VALUES
    (screen / "root.env").write_text("KIND=screen\n")  # a screen from before --values
    assert flaggems.repeat_values(None, env) == harness.DEFAULT_SWITCH_VALUES


def test_run_screen_refuses_bad_values_before_writing_anything(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "screen",
            "--ops",
            "abs",
            "--switch",
            SWITCH,
            "--values",
            "tf32",
            "--command",
            "true",
            "--root",
            str(tmp_path / "root"),
            "--db",
            str(tmp_path / "z.db"),
        ],
    )
    assert result.exit_code == 2 and "before,after" in result.output  # a usage error
    assert not (tmp_path / "root").exists()


# == provenance: what the cells ran on ==============================================


def test_screen_cells_record_what_they_ran_on(screened):
    db, root = screened["db"], screened["root"]
    cells = query(db, "SELECT * FROM cell_summary WHERE root = ? ORDER BY relpath", (root.name,))
    assert len(cells) == 8
    for cell in cells:
        assert (cell["gpu"], cell["gpu_count"], cell["devices"], cell["driver"]) == (
            "NVIDIA H200",
            "1",
            "0",
            "570.86.15",
        ), cell  # run screen's card 0 sees one of the two
        assert cell["hostname"] == socket.gethostname() and cell["python"] == platform.python_version()
        assert cell["flaggems_commit"] == repo_commit()  # the checkout the benchmark ran from
    assert len({c["environment_id"] for c in cells}) == 1  # one row for the one environment
    env = layout.read_env(root / "abs_float16_before" / "cell.env", [])
    assert env is not None
    assert env["ENV_GPU"] == "NVIDIA H200" and list(env)[-1] == "RC"
    screen = zl(["screen", str(root), "--db", str(db)], screened["env"])
    assert "  ran on: NVIDIA H200 x1, driver 570.86.15" in screen.stdout.splitlines()[1]
    assert "environment" not in screen.stderr  # both sides ran on the same


def test_campaign_cells_record_the_gpu_of_their_card(campaign):
    db, root = campaign["db"], campaign["root"]
    cells = query(db, "SELECT card, devices, gpu, flaggems_commit FROM cell_summary WHERE root = ?", (root.name,))
    assert {(c["card"], c["devices"]) for c in cells} == {(0, "0"), (1, "1")}
    assert {c["gpu"] for c in cells} == {"NVIDIA H200"} and {c["flaggems_commit"] for c in cells} == {repo_commit()}
    ab = zl(["ab", str(root), "--db", str(db)], campaign["env"])
    assert "  ran on: NVIDIA H200 x1, driver 570.86.15" in ab.stdout
    assert "differ" not in ab.stderr  # each op's rounds ran on one card


def test_diff_pairs_the_autotuned_configs_of_a_real_switch(screened):
    """mm compiles two autotune configs per cell, and under tf32 each needs
    more shared memory (as bmm on the H100): the same launch configuration
    pairs nothing, and stored order alone paired block 64 with block 128.
    The block sizes pair them, and the diff is the dot's precision alone."""
    document = json.loads(
        zl(["diff", str(screened["root"]), "mm:float32", "--json", "--db", str(screened["db"])], screened["env"]).stdout
    )
    rows = document["kernels"]
    assert [(r["status"], r["paired_by"]) for r in rows] == [("changed", irdiff.BY_SIGNATURE)] * 2
    assert all(r["tiles_before"] == r["tiles_after"] for r in rows)
    assert sorted((r["shared_before"], r["shared_after"]) for r in rows) == [(32768, 49152), (65536, 98304)]
    for row in rows:
        changed = [
            line for line in row["diff"].splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        assert len(changed) == 2 and all("inputPrecision" in line for line in changed), row["diff"]
    said = {c["text"]: c["kernels"] for c in document["summary"]["changes"]}
    assert said == {"tt.dot: inputPrecision ieee -> tf32": 2}  # from the IR, no op named by hand
