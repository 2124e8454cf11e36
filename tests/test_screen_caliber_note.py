"""plan and run campaign say once, before running, where the screening root
was measured under another caliber than the campaign's: its noise floors
will not apply to the campaign's ranges."""

import shutil
import subprocess

from .judging import invoke
from .test_run import FAKE, ZLSTORE, base_env

ROOT = "ab_rlc_20261014_083000"
NOTE = "was screened under another caliber than this campaign's"


def screened_without_isolation(example_tree, tmp_path):
    """A copy of a screening root as screened with ZL_ISOLATE_TUNER_CACHE=0."""
    runs, _ = example_tree
    root = tmp_path / "old" / ROOT
    shutil.copytree(runs / ROOT, root)
    for env in [root / "root.env", *root.glob("*/cell.env")]:
        env.write_text(env.read_text().replace("ZL_ISOLATE_TUNER_CACHE=1", "ZL_ISOLATE_TUNER_CACHE=0"))
    return root


def test_plan_says_once_when_the_screen_used_another_caliber(example_tree, tmp_path):
    db = tmp_path / "t.db"
    assert invoke(db, "ingest", screened_without_isolation(example_tree, tmp_path)).exit_code == 0
    result = invoke(db, "plan", ROOT, "--cards", "2", "--ops", "topk:float16")
    assert result.exit_code == 0, result.output
    assert result.stderr.count(NOTE) == 1
    assert "ZL_ISOLATE_TUNER_CACHE=0 there, 1 here" in result.stderr


def test_plan_says_nothing_when_the_screen_used_the_campaigns_caliber(example_store_path):
    result = invoke(example_store_path, "plan", ROOT, "--cards", "2")
    assert result.exit_code == 0 and NOTE not in result.stderr


def test_run_campaign_says_it_before_running(example_tree, tmp_path):
    db = tmp_path / "t.db"
    screen_root = screened_without_isolation(example_tree, tmp_path)
    assert invoke(db, "ingest", screen_root).exit_code == 0
    env = base_env(tmp_path, FAKE_SLEEP=0.01)
    result = subprocess.run(
        ZLSTORE
        + [
            "run",
            "campaign",
            "--screen-root",
            ROOT,
            "--ops",
            "topk:float16",
            "--cards",
            "1",
            "--rounds",
            "1",
            "--root",
            str(tmp_path / "runs" / "c"),
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            "0.2",
            "--status-every",
            "100",
            "--db",
            str(db),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(NOTE) == 1
    assert result.stderr.index(NOTE) < result.stderr.index("topk")
