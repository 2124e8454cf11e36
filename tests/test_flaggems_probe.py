"""Can FlagGems' benchmark start? `zlstore flaggems` finds out before the
first cell (flaggems.probe), and so do `zlstore run screen` and `zlstore run
campaign` with it as their --command: on the H100, FlagGems' checkout
imported sqlalchemy, which the GPU's Python lacked, and every cell failed
with RC 4 before the screen said only that every side had failed. Here a
copy of the stand-in (tests/flaggems_standin) whose flag_gems imports a
module that is not installed plays that checkout."""

import json
import platform
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore.run import flaggems
from zlstore import provenance
from zlstore.cli import cli

from .real_caliber import REAL_CALIBER

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "flaggems_standin"
PY = shlex.quote(sys.executable)
ZLSTORE = [sys.executable, "-m", "zlstore"]
SWITCH = "TRITON_F32_DEFAULT"
# Named like FlagGems' own dependency, and installed nowhere.
ABSENT = "sqlalchemy_not_installed"


def env_for(tmp, **extra):
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if not k.startswith(("ZLSTORE_", "FLAGGEMS_", "STANDIN_", "PYTEST_", "TRITON_")) and k not in REAL_CALIBER
    }
    env.update(REAL_CALIBER, PYTHONPATH=str(HERE.parent), STANDIN_IMPORTS=str(tmp / "imports.jsonl"))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def imports(tmp):
    """The processes that imported the stand-in's flag_gems, by working directory."""
    path = tmp / "imports.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def copy_standin(tmp, git=False) -> Path:
    checkout = tmp / "FlagGems"
    shutil.copytree(STANDIN, checkout, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    if git:
        for args in (
            ["init", "-q"],
            ["add", "-A"],
            ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "stand-in"],
        ):
            subprocess.run(["git", "-C", str(checkout)] + args, check=True, capture_output=True)
    return checkout


def broken_standin(tmp) -> Path:
    """The stand-in as FlagGems' checkout was on the H100: flag_gems imports
    a module (in a submodule, as flag_gems/utils/models/sql.py imports
    sqlalchemy) that FLAGGEMS_PYTHON does not have."""
    checkout = copy_standin(tmp)
    package = checkout / "src" / "flag_gems"
    (package / "models.py").write_text(f"import {ABSENT}\n")
    with open(package / "__init__.py", "a") as init:
        init.write("\nfrom flag_gems import models  # noqa: E402,F401\n")
    return checkout


def zl(args, env, cwd):
    return subprocess.run(ZLSTORE + args, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)


def cell_command(checkout):
    return f"{PY} -m zlstore flaggems cell --flaggems {shlex.quote(str(checkout))} --python {PY}"


# == what the probe sees ==========================================================


def test_the_probe_reports_what_the_benchmark_runs_on(tmp_path):
    checkout = copy_standin(tmp_path, git=True)
    found = flaggems.probe(flaggems.Benchmark(checkout, python=sys.executable), env_for(tmp_path))
    assert tuple(found) == flaggems.PROBE_KEYS
    assert all(value is None or isinstance(value, str) for value in found.values())
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert found["flaggems_commit"] == head.stdout.strip()[: provenance.COMMIT_CHARS]
    assert found["flag_gems"] == "0.0.standin"  # flag_gems.__version__, imported from src/ (pytest.ini)
    assert found["python"] == platform.python_version()
    # the probe process imported flag_gems in a scratch directory, not the caller's
    (probe,) = imports(tmp_path)
    assert "zlstore-probe-" in probe["cwd"]


def test_flag_gems_run_from_its_source_has_no_version(tmp_path):
    """As on the H200: FlagGems imported from the checkout's src/, not
    installed, calls its version "unknown"; the probe says null (the commit
    names it)."""
    checkout = copy_standin(tmp_path)
    init = checkout / "src" / "flag_gems" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "0.0.standin"', '__version__ = "unknown"'))
    found = flaggems.probe(flaggems.Benchmark(checkout, python=sys.executable), env_for(tmp_path))
    assert found["flag_gems"] is None and found["python"] == platform.python_version()


def test_a_checkout_copied_without_git_gives_its_commit_from_git_head(tmp_path):
    """The checkout carried to a GPU machine as files, its .git/HEAD kept."""
    checkout = copy_standin(tmp_path)
    (checkout / ".git").mkdir()
    (checkout / ".git" / "HEAD").write_text("ed2508bcb5a03000e9774734201d840ba362cd11\n")
    assert provenance.git_commit(checkout) == "ed2508bcb5a0"
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/master\n")
    (checkout / ".git" / "packed-refs").write_text("# pack-refs\n" + "ab" * 20 + " refs/heads/master\n")
    assert provenance.git_commit(checkout) == "ab" * 6


def test_the_probe_runs_once_per_process(tmp_path):
    bench = flaggems.Benchmark(copy_standin(tmp_path), python=sys.executable)
    env = env_for(tmp_path)
    first = flaggems.probe(bench, env)
    assert flaggems.probe(bench, env) == first
    assert len(imports(tmp_path)) == 1


# == a benchmark that cannot start: named before the first cell ======================


def test_the_probe_names_the_missing_module(tmp_path):
    bench = flaggems.Benchmark(broken_standin(tmp_path), python=sys.executable)
    with pytest.raises(flaggems.CannotStart) as caught:
        flaggems.probe(bench, env_for(tmp_path))
    assert caught.value.missing == ABSENT
    assert f"has no module '{ABSENT}'" in str(caught.value)
    assert "imported by src/flag_gems/models.py" in str(caught.value)


def test_flaggems_probe_prints_the_json_or_names_the_module(tmp_path):
    env = env_for(tmp_path)
    good = CliRunner().invoke(
        cli, ["flaggems", "probe", "--flaggems", str(copy_standin(tmp_path)), "--python", sys.executable], env=env
    )
    assert good.exit_code == 0, good.output
    assert set(json.loads(good.output)) == set(flaggems.PROBE_KEYS)
    bad = zl(
        ["flaggems", "probe", "--flaggems", str(broken_standin(tmp_path / "b")), "--python", sys.executable],
        env,
        tmp_path,
    )
    assert bad.returncode == 2 and ABSENT in bad.stderr and "Usage:" not in bad.stderr


def test_a_cell_that_cannot_start_names_the_module_and_runs_nothing(tmp_path):
    checkout = broken_standin(tmp_path)
    out = tmp_path / "abs_float16_before"
    out.mkdir()
    env = env_for(
        tmp_path,
        OUT_DIR=out,
        OP="abs",
        DTYPE="float16",
        SIDE="before",
        SWITCH=SWITCH,
        SWITCH_VALUE="ieee",
        CELL_TIMEOUT=60,
    )
    result = subprocess.run(
        shlex.split(cell_command(checkout)), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 2 and f"no module '{ABSENT}'" in result.stderr
    assert list(out.iterdir()) == []  # no run.log, no caches: pytest never started


def test_run_screen_names_the_missing_module_before_the_first_cell(tmp_path):
    """What the H100 run needed: one line naming sqlalchemy, not a minute of
    cells that each fail with RC 4."""
    checkout = broken_standin(tmp_path)
    root, db = tmp_path / "runs" / "screen_x", tmp_path / "z.db"
    result = zl(
        [
            "run",
            "screen",
            "--ops",
            "abs:float16,softmax:float32",
            "--switch",
            SWITCH,
            "--values",
            "ieee,tf32",
            "--command",
            cell_command(checkout),
            "--root",
            str(root),
            "--db",
            str(db),
        ],
        env_for(tmp_path),
        tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert f"no module '{ABSENT}'" in result.stderr and "nothing was run" in result.stderr
    assert not root.exists()
    assert not db.exists() or sqlite3.connect(db).execute("SELECT count(*) FROM cells").fetchone() == (0,)


def test_run_screen_probes_once_and_its_cells_do_not_again(tmp_path):
    checkout = copy_standin(tmp_path)
    root, db = tmp_path / "runs" / "screen_ok", tmp_path / "z.db"
    result = zl(
        [
            "run",
            "screen",
            "--ops",
            "abs:float16,softmax:float32",
            "--switch",
            SWITCH,
            "--values",
            "ieee,tf32",
            "--command",
            cell_command(checkout) + " -- --warmup 1 --iter 2",
            "--root",
            str(root),
            "--db",
            str(db),
            "--json",
        ],
        env_for(tmp_path),
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["flaggems"]["flag_gems"] == "0.0.standin"
    by_where = [("probe" if "zlstore-probe-" in i["cwd"] else Path(i["cwd"]).parent.name) for i in imports(tmp_path)]
    # one probe (run screen's), then one pytest per side, each in its cell
    assert by_where == ["probe", "screen_ok", "screen_ok", "screen_ok", "screen_ok"]


def test_cells_record_what_the_benchmarks_own_python_saw(tmp_path):
    """Provenance from the probe: flag_gems' version is what FLAGGEMS_PYTHON
    imports (the runner's Python has no flag_gems), the commit the
    checkout's, in every cell.env of a screen and of a repeat."""
    checkout = copy_standin(tmp_path, git=True)
    commit = provenance.git_commit(checkout)
    assert commit is not None  # the copy is a git checkout
    root, db = tmp_path / "runs" / "screen_p", tmp_path / "z.db"
    env = env_for(tmp_path)
    result = zl(
        [
            "run",
            "screen",
            "--ops",
            "abs:float16",
            "--switch",
            SWITCH,
            "--values",
            "ieee,tf32",
            "--command",
            cell_command(checkout) + " -- --warmup 1 --iter 2",
            "--root",
            str(root),
            "--db",
            str(db),
        ],
        env,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    ab_root = tmp_path / "runs" / "card0"
    result = zl(
        [
            "flaggems",
            "repeat",
            "abs",
            "float16",
            "--ab-root",
            str(ab_root),
            "--switch",
            SWITCH,
            "--values",
            "ieee,tf32",
            "--rounds",
            "1",
            "--flaggems",
            str(checkout),
            "--python",
            sys.executable,
            "--",
            "--warmup",
            "1",
            "--iter",
            "2",
        ],
        env,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    cells = sorted(root.glob("*/cell.env")) + sorted(ab_root.glob("*/abs/r1/*/cell.env"))
    assert len(cells) == 4
    for cell_env in cells:
        values = dict(line.split("=", 1) for line in cell_env.read_text().splitlines())
        assert values["ENV_FLAG_GEMS"] == "0.0.standin", cell_env
        assert values["ENV_FLAGGEMS_COMMIT"] == commit and len(commit) == provenance.COMMIT_CHARS
        assert values["ENV_PYTHON"] == platform.python_version()


def test_run_campaign_names_the_missing_module_before_the_first_op(tmp_path):
    checkout = broken_standin(tmp_path)
    plan = tmp_path / "partition.tsv"
    plan.write_text("card\top\tdtype\tweight_min\n0\tabs\tfloat16\t1\n1\tsoftmax\tfloat32\t1\n")
    root, db = tmp_path / "runs" / "campaign_x", tmp_path / "z.db"
    repeat = (
        f"{PY} -m zlstore flaggems repeat {{op}} {{dtype}} --values ieee,tf32 "
        f"--flaggems {shlex.quote(str(checkout))} --python {PY}"
    )
    result = zl(
        [
            "run",
            "campaign",
            "--plan",
            str(plan),
            "--switch",
            SWITCH,
            "--rounds",
            "2",
            "--command",
            repeat,
            "--root",
            str(root),
            "--db",
            str(db),
        ],
        env_for(tmp_path),
        tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert f"no module '{ABSENT}'" in result.stderr
    assert not root.exists()


def test_a_repeat_that_cannot_start_writes_nothing(tmp_path):
    checkout = broken_standin(tmp_path)
    ab_root = tmp_path / "card0"
    result = zl(
        [
            "flaggems",
            "repeat",
            "abs",
            "float16",
            "--ab-root",
            str(ab_root),
            "--switch",
            SWITCH,
            "--values",
            "ieee,tf32",
            "--rounds",
            "2",
            "--flaggems",
            str(checkout),
            "--python",
            sys.executable,
        ],
        env_for(tmp_path),
        tmp_path,
    )
    assert result.returncode == 2 and ABSENT in result.stderr
    assert not ab_root.exists()


@pytest.mark.parametrize(
    "command, expected",
    [
        ("zlstore flaggems cell --flaggems ~/FlagGems -- --warmup 25", True),
        ("/opt/venv/bin/zlstore flaggems repeat {op} {dtype} --flaggems ~/FlagGems", True),
        ("cd x && zlstore flaggems cell", True),
        ("bash run_cell.sh {op} {dtype}", False),
        ("zlstore flaggems --help", False),
        ("echo flaggems cell", False),
        ("zlstore flaggems cell 'unclosed", False),
    ],
)
def test_which_commands_run_flaggems(command, expected):
    assert flaggems.runs_flaggems(command) is expected


# == a FLAGGEMS_PYTHON that gives garbage (issue 46, item 9) =======================


def fake_python(tmp, body: str) -> Path:
    """A FLAGGEMS_PYTHON that ignores the probe and runs body ($3: where
    the probe's result goes)."""
    path = tmp / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


GARBAGE = {
    "output that is not UTF-8": ("printf 'boom \\377\\376 here\\n'; exit 1", "boom"),
    "a probe.json that is a list": ("echo '[1, 2]' > \"$4\"", "not a JSON object"),
    "a probe.json whose env is a number": ('echo \'{"env": 5}\' > "$4"', "env is not an object"),
    "a probe.json whose gpu is a number": ('echo \'{"env": {"gpu": 5}}\' > "$4"', "env.gpu is not text"),
    "a probe.json whose error is a list": ('echo \'{"error": [1]}\' > "$4"', "is not text"),
    "a probe.json that is not UTF-8": ('printf \'{"env": "\\377"}\' > "$4"', "not JSON"),
    "300 MB on one line": ("head -c 300000000 /dev/zero | tr '\\0' x; exit 3", "exit status 3"),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_from_flaggems_python_is_a_named_exit_2(tmp_path, case):
    body, named = GARBAGE[case]
    python = fake_python(tmp_path, body)
    done = subprocess.run(
        ZLSTORE + ["flaggems", "probe", "--flaggems", str(copy_standin(tmp_path)), "--python", str(python)],
        env=env_for(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
    )
    err = done.stderr.decode("utf-8")  # what it says is UTF-8 whatever the Python printed
    assert done.returncode == 2, err[-2000:]
    assert "FlagGems cannot start" in err and named in err and "Traceback" not in err
    assert len(err) < 5000  # an excerpt, not the output echoed


def test_a_hung_probe_s_children_die_with_it(tmp_path, monkeypatch):
    import os
    import time

    pids = tmp_path / "pids"
    python = fake_python(tmp_path, f"sleep 600 & echo $! > {pids}; sleep 600")
    monkeypatch.setattr(flaggems, "PROBE_TIMEOUT_S", 1.0)
    with pytest.raises(flaggems.CannotStart, match="took over 1 s"):
        flaggems.probe(flaggems.Benchmark(copy_standin(tmp_path), python=str(python)), env_for(tmp_path))
    child = int(pids.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as stat:  # reaped by nobody in a container: a zombie is dead
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the probe's background child {child} outlived it")
