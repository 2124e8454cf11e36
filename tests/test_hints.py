"""Commands zlstore prints for a person to run next (`next: zlstore ab ...`,
the resume line, `zlstore ab ROOT --rejected says why`) name the database
with --db when it is not the default one, and work pasted into a shell as
printed: the tests below paste them."""

import os
import subprocess
import sys
import time
from pathlib import Path

from zlstore import output
from zlstore.show import report
from zlstore.run.display import CardState
from zlstore.run.runner import CampaignResult

from .test_db_faults import copy_store
from .test_run import FAKE, base_env, interrupt, write_plan

ZLSTORE = [sys.executable, "-m", "zlstore"]


def shell_env(tmp_path, **extra):
    """The environment of a shell where `zlstore` is this checkout's, and no $ZLSTORE_DB."""
    env = base_env(tmp_path, **extra)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def paste(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """A printed command run as a person would: pasted into a shell."""
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def printed(text: str, prefix: str) -> str:
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    return line[len(prefix) :]


def test_the_next_line_of_a_campaign_names_its_database_and_works_pasted(tmp_path):
    (tmp_path / "stores").mkdir()
    plan = write_plan(tmp_path / "partition.tsv", [(0, "topk", "float16", 0.1)])
    env = shell_env(tmp_path)
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "campaign",
            "--plan",
            str(plan),
            "--rounds",
            "1",
            "--root",
            "runs/campaign_h",
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            "0.1",
            "--db",
            "stores/my.db",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    next_command = printed(result.stdout, "next: ")
    assert next_command == f"zlstore ab {tmp_path / 'runs' / 'campaign_h'} --db stores/my.db"
    pasted = paste(next_command, tmp_path, env)
    assert pasted.returncode == 0, pasted.stderr
    assert "campaign_h" in pasted.stdout and "topk" in pasted.stdout


def test_the_resume_line_of_an_interrupted_campaign_works_pasted(tmp_path):
    plan = write_plan(tmp_path / "partition.tsv", [(0, "quick", "", 0.1), (0, "slowop", "", 1.0)])
    env = shell_env(tmp_path, FAKE_SLOW="slowop", FAKE_SLOW_SLEEP=60)
    process = subprocess.Popen(
        ZLSTORE
        + [
            "run",
            "campaign",
            "--plan",
            str(plan),
            "--rounds",
            "1",
            "--root",
            "runs/campaign_r",
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            "0.1",
            "--db",
            "r.db",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "runs" / "campaign_r" / "logs" / "card0_slowop.log").exists():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        time.sleep(0.3)
        out, err = interrupt(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    resume = printed(out, "interrupted: continue with ")
    assert resume.endswith(" --db r.db")
    env["FAKE_SLOW_SLEEP"] = "0.1"
    pasted = paste(resume, tmp_path, env)
    assert pasted.returncode == 0, pasted.stderr
    assert "1 skipped as complete" in pasted.stdout
    assert printed(pasted.stdout, "next: ").endswith(" --db r.db")


def test_the_default_database_is_not_named_and_any_other_is_quoted(tmp_path, monkeypatch):
    cards = [CardState(0, [], done=1, cells=2)]
    result = CampaignResult(Path("/r/c d"), False, cards, [])
    assert report.campaign(result).endswith("\nnext: zlstore ab '/r/c d'")
    with output.hints_for("my runs/x.db"):
        assert report.campaign(result).endswith("\nnext: zlstore ab '/r/c d' --db 'my runs/x.db'")
        row = {"root": "ab_rlc_x", "n_rows": 0}
        assert (
            report.range_text(row)
            == "none: no row paired (zlstore ab ab_rlc_x --rejected --db 'my runs/x.db' says why)"
        )
    assert output.command("ab", "x") == "zlstore ab x"


def test_the_command_line_names_only_a_database_other_than_the_default(tmp_path, monkeypatch, example_store_path):
    from click.testing import CliRunner

    from zlstore.cli import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZLSTORE_DB", raising=False)
    copy_store(example_store_path, tmp_path / "zlstore.db")
    screen_root = "ab_rlc_20261012_101500"
    for argv, named in (
        (["ab", screen_root], None),
        (["ab", screen_root, "--db", "zlstore.db"], None),
        (["ab", screen_root, "--db", str(example_store_path)], str(example_store_path)),
    ):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 2, result.output
        hint = f"zlstore screen {screen_root}" + (f" --db {named}" if named else "") + " ("
        assert hint in result.stderr, result.stderr
