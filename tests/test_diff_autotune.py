"""zlstore diff on an autotuned op, on real trees: FlagGems' baddbmm and bmm
with their whole autotune lists (12 configs each) on an H100, Triton 3.6,
TRITON_F32_DEFAULT ieee -> tf32 (tests/data/real/flaggems_20261207). baddbmm
compiled 51 kernels a side, bmm 15; tf32 raises most configs' shared
memory, so pairing by shared memory before tile shapes joined 24 of 51
baddbmm kernels with another config's. Every pair must join one config,
and the summary must say what the switch did, checked here against the
files themselves, not against what zlstore read from them."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zlstore import Store
from zlstore.show import irdiff

REAL = Path(__file__).resolve().parent / "data" / "real" / "flaggems_20261207"
ROOT = "screen_tf32_h200"  # the name the device's call gave it; it ran on an H100 (README.md)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tree = REAL / "runs_h100.txz"
    if not tree.is_file():
        pytest.skip(f"the real trees are not here ({tree})")
    dest = tmp_path_factory.mktemp("hopper")
    subprocess.run(["tar", "xJf", str(tree), "-C", str(dest)], check=True)
    path = dest / "hopper.db"
    with Store(path) as opened:
        opened.ingest(dest / "runs")
    return path


def block_sizes(path: str) -> tuple:
    """A kernel's block sizes as its file says: the extents of its ranges."""
    return tuple(sorted(set(re.findall(r"tt\.make_range \{end = (\d+) ", Path(path).read_text()))))


def launch(path: str) -> tuple:
    meta = json.loads(Path(path).with_suffix(".json").read_text())
    return meta["num_warps"], meta["num_stages"]


@pytest.mark.parametrize("op, kernels", [("baddbmm", 51), ("bmm", 15)])
def test_every_pair_joins_one_autotune_config(store, op, kernels):
    with Store(store) as opened:
        document = irdiff.diff(opened, ROOT, f"{op}:float32", with_diff=False)
    pairs = [r for r in document["kernels"] if r["kernel"] == f"{op}_kernel"]
    assert len(pairs) + 3 == kernels and {r["status"] for r in pairs} == {"changed"}
    configs = {(block_sizes(r["path_before"]), launch(r["path_before"])) for r in pairs}
    assert len(configs) >= 4  # several autotune configs, and several shapes of each
    for row in pairs:
        assert block_sizes(row["path_before"]) == block_sizes(row["path_after"]), row
        assert launch(row["path_before"]) == launch(row["path_after"]), row
        assert row["tiles_before"] == row["tiles_after"]
    # the switch changed shared memory: it could not have paired them
    assert sum(r["shared_before"] != r["shared_after"] for r in pairs) >= len(pairs) // 2


def test_the_summary_says_what_the_switch_did(store):
    """baddbmm: ieee's tt.dot on FMA layouts becomes a wgmma where the tile
    allows it, and keeps tt.dot with tf32 precision where it does not."""
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", "diff", ROOT, "baddbmm", "--db", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with Store(store) as opened:
        document = irdiff.diff(opened, ROOT, "baddbmm", with_diff=False)
    pairs = [r for r in document["kernels"] if r["status"] == "changed"]
    text = {side: [Path(r[f"path_{side}"]).read_text() for r in pairs] for side in ("before", "after")}
    wgmma = sum(
        " tt.dot " in b and " tt.dot " not in a and " ttng.warp_group_dot " in a for b, a in zip(*text.values())
    )
    tf32 = sum("inputPrecision = tf32" in a and "inputPrecision" not in b for b, a in zip(*text.values()))
    assert (wgmma, tf32) == (40, 8)  # as the files say
    summary = done.stdout.split("\nwhat changed, of 51 kernel pairs:\n")[1].split("\n\n")[0].split("\n")
    assert summary[0] == f"  tt.dot -> ttng.warp_group_dot in {wgmma} of 51"
    assert f"  tt.dot: inputPrecision = tf32 added in {tf32} of 51" in summary
    assert len(done.stdout.splitlines()) <= 50  # 51 kernels a side fit a screen
    said = {c["text"]: c["kernels"] for c in document["summary"]["changes"]}
    assert said["tt.dot -> ttng.warp_group_dot"] == wgmma and document["summary"]["pairs"] == 51
