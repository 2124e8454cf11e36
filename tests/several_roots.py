"""The store of several switches and GPUs (issue 41), as trees: the real
FlagGems runs of 2026-12-05 (tests/data/real/flaggems_20261205: a screen
and a campaign on an H200 whose cells recorded no environment, and on an
H100 whose cells did), the real H200 tf32 screen and campaign of
2026-11-30 (tests/data/real), the real H100 runs of 2026-12-07
(tests/data/real/flaggems_20261207: a tf32 screen of the autotuned baddbmm
and bmm, and an A/A screen on the dead axis ZL_DEAD_AXIS, named `_h200`
after the kind asked for), and a SYNTHETIC A/A screen and campaign on the
same dead axis written by the test generator (tests/dead_axis_tree.py: no
GPU ran it), kept because no real dead-axis campaign exists.
tests/test_across_roots.py and the docs' history and noise transcripts
(docs/provenance.md, docs/judging.md) read them."""

import tarfile
from pathlib import Path
from typing import Dict

from . import dead_axis_tree

REAL = Path(__file__).resolve().parent / "data" / "real"
ARCHIVES = {
    "h200": (REAL / "flaggems_20261205" / "a_h200_runs.txz", "runs"),
    "h100": (REAL / "flaggems_20261205" / "b_h100_runs.txz", "runs"),
    "tf32_screen": (REAL / "h200_tf32_screen.txz", "runs"),
    "tf32_campaign": (REAL / "h200_tf32_campaign.txz", "runs2"),
    "h100_1207": (REAL / "flaggems_20261207" / "runs_h100.txz", "runs"),
}
# the roots of the 2026-12-07 H100 tree
DEAD_SCREEN = "screen_dead_h200"
TF32_SCREEN_H100 = "screen_tf32_h200"
# The order a shared store ingests them in: the H100 tree last, so that its
# roots find every other machine's already there.
ORDER = ("h200", "tf32_screen", "tf32_campaign", "dead_axis", "h100_1207", "h100")


def unpack(dest) -> Dict[str, Path]:
    """Unpack the real trees and write the synthetic one under dest: name ->
    the directory to ingest."""
    dest = Path(dest)
    paths = {}
    for name, (archive, top) in ARCHIVES.items():
        with tarfile.open(archive) as tar:
            tar.extractall(dest / name, filter="data")
        paths[name] = dest / name / top
    dead_axis_tree.write(dest / "dead_axis")
    paths["dead_axis"] = dest / "dead_axis"
    return paths
