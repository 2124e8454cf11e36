"""A SYNTHETIC A/A screening root and campaign on a dead axis, written by
the test generator (tests/generator.py): no GPU ran it, and nothing here is
a measurement.

It stands beside the real trees of tests/data/real in the store of several
switches and GPUs (tests/test_across_roots.py): the switch ZL_DEAD_AXIS
(off before, on after) changes nothing, so both sides compile the same IR
(every pair NO_IR_DIFF, the axis dead) and their latencies differ only by
the noise written here. Its cells say they ran on an H200 with a driver
and runtime of their own (ENV_*), under the caliber the real FlagGems runs
of 2026-12-05 used, with their bmm and softmax shapes: exactly what could
leak into their history and noise floors if roots were compared across
switches or machines. The noise is large on purpose (bmm's small shape
wanders by 27%), so that a leak shows.
"""

from pathlib import Path
from typing import Dict, List, Tuple

from . import generator
from .real_caliber import REAL_CALIBER

SWITCH = "ZL_DEAD_AXIS"
VALUES = ("off", "on")
SCREEN = "screen_dead_axis_20261205"
CAMPAIGN = "campaign_dead_axis_20261205"
STARTED_AT = "2026-12-05T12:50:00+00:00"  # between the real H200 and H100 runs
HOST = "synthetic-h200"
ROUNDS = 3
# What the cells claim to have run on: a GPU model the real trees do not
# record, so that its floors can never be the H100 campaign's.
ENVIRONMENT = {
    "ENV_GPU": "NVIDIA H200",
    "ENV_GPU_COUNT": "1",
    "ENV_DRIVER": "570.86.15",
    "ENV_RUNTIME": "cuda 12.8",
    "ENV_TRITON": "3.6.0",
    "ENV_HOSTNAME": HOST,
}
# (op, dtype): [(shape, after latency in ms, before / after ratio in the
# screen, the ratios of rounds 1..3)]
OPS: Dict[Tuple[str, str], List[Tuple[list, float, float, Tuple[float, float, float]]]] = {
    ("bmm", "float32"): [
        ([[2, 384, 384], [2, 384, 384]], 0.09, 1.27, (1.2, 0.8, 1.1)),
        ([[2, 4096, 4096], [2, 4096, 4096]], 3.2, 1.004, (1.001, 0.999, 1.0)),
        ([[16, 1024, 1024], [16, 1024, 1024]], 1.6, 0.997, (1.0, 1.002, 0.998)),
    ],
    ("softmax", "float32"): [
        ([[64, 64], 1], 0.008, 0.6, (1.5, 0.7, 1.1)),
        ([[4096, 4096], 1], 0.2, 1.003, (1.001, 0.999, 1.002)),
    ],
}


def _cell(path: Path, op: str, dtype: str, side: str, round_: int, ratio_of: Dict[str, float]) -> None:
    rows = [
        generator.RowSpec(shape=shape, latency=after * (ratio_of[str(shape)] if side == "before" else 1.0))
        for shape, after, _, _ in OPS[(op, dtype)]
    ]
    spec = generator.CellSpec(
        op=op,
        dtype=dtype,
        side=side,
        round=round_,
        card=0,
        started_at=STARTED_AT,
        caliber=dict(REAL_CALIBER),
        rows=rows,
        # the switch changes nothing: one IR on both sides
        kernels={f"{op}_kernel": generator.ttgir_text(f"{op}_kernel", seed=1)},
        extra_env={"SWITCH": SWITCH, "SWITCH_VALUE": VALUES[side == "after"], **ENVIRONMENT},
        noise=False,
    )
    generator.write_cell(path, spec)


def _env(path: Path, items: List[Tuple[str, str]]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in items))


def write(dest) -> Tuple[Path, Path]:
    """Write the screening root and the campaign under dest; their paths."""
    dest = Path(dest)
    screen, campaign = dest / SCREEN, dest / CAMPAIGN
    screen.mkdir(parents=True, exist_ok=True)
    common = [("SWITCH", SWITCH), ("SWITCH_VALUES", ",".join(VALUES)), ("HOST", HOST), *REAL_CALIBER.items()]
    _env(screen / "root.env", [("KIND", "screen"), *common, ("STARTED_AT", STARTED_AT)])
    for (op, dtype), shapes in OPS.items():
        ratios = {str(shape): screen_ratio for shape, _, screen_ratio, _ in shapes}
        for side in ("before", "after"):
            _cell(screen / generator.cell_dir_name(op, dtype, side), op, dtype, side, 0, ratios)
    campaign.mkdir(parents=True, exist_ok=True)
    _env(
        campaign / "campaign.env",
        [
            ("KIND", "campaign"),
            ("ROUNDS", str(ROUNDS)),
            ("CARDS", "1"),
            ("SCREEN_ROOT", f"/synthetic/runs/{SCREEN}"),
            *common,
            ("STARTED_AT", "2026-12-05T12:55:00+00:00"),
        ],
    )
    (campaign / "partition.tsv").write_text(
        "card\top\tdtype\tweight_min\n" + "".join(f"0\t{op}\t{dtype}\t1.0\n" for op, dtype in OPS)
    )
    for (op, dtype), shapes in OPS.items():
        for round_ in range(1, ROUNDS + 1):
            ratios = {str(shape): rounds[round_ - 1] for shape, _, _, rounds in shapes}
            for side in ("before", "after"):
                cell = campaign / "card0" / "ab_20261205_125500" / op / f"r{round_}" / side
                _cell(cell, op, dtype, side, round_, ratios)
    return screen, campaign
