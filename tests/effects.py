"""Repeat runs with known effects, for the findings tests and the power
benchmark (bench/power.py).

Each shape of a repeat root has a true effect (before / after latency) and a
noise level: every side of every round draws its own log-normal factor with
that sigma, so a round's log ratio is normal with sd sigma * sqrt(2), the
model the t-test assumes. What the store says of each shape is compared
with what was written, never with numbers read back from the store."""

import json
import math
import random
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from . import generator

BASE_MS = 0.5


class Shape(NamedTuple):
    effect: float  # true latency before / latency after
    sigma: float  # log-normal noise per side and round


def shape_detail(i: int) -> list:
    return [[i + 1, 1024]]


def shape_key(i: int) -> str:
    """The shape as the store keys it (canonical JSON)."""
    return json.dumps(shape_detail(i), separators=(",", ":"))


def write_repeat_root(
    dest,
    name: str,
    shapes: Sequence[Shape],
    rounds: int,
    seed: int,
    op: str = "softmax",
    dtype: str = "float16",
    started_at: Optional[str] = None,
    environment: Callable[[str, int], Dict[str, str]] = lambda side, rnd: {},
    caliber: Optional[Dict[str, str]] = None,
) -> Dict[str, List[float]]:
    """A repeat root dest/name with `rounds` rounds of one op over `shapes`
    (STARTED_AT in its root.env where given; environment(side, round): the
    ENV_* keys of that cell's cell.env; caliber: variables that differ from
    generator.SCREEN_CALIBER). Returns the written log ratios per shape key
    (the oracle's input)."""
    rng = random.Random(f"{name}:{seed}")
    root = Path(dest) / name
    root.mkdir(parents=True, exist_ok=True)
    caliber = dict(generator.SCREEN_CALIBER, **(caliber or {}))
    (root / "root.env").write_text(
        "KIND=repeat\n"
        + f"SWITCH={generator.SWITCH}\n"
        + (f"STARTED_AT={started_at}\n" if started_at else "")
        + "".join(f"{k}={v}\n" for k, v in caliber.items())
    )
    logs: Dict[str, List[float]] = {shape_key(i): [] for i in range(len(shapes))}
    for rnd in range(1, rounds + 1):
        rows: Dict[str, List[generator.RowSpec]] = {"before": [], "after": []}
        for i, shape in enumerate(shapes):
            before = round(BASE_MS * math.exp(rng.gauss(0, shape.sigma)), 9)
            after = round(BASE_MS / shape.effect * math.exp(rng.gauss(0, shape.sigma)), 9)
            rows["before"].append(generator.RowSpec(shape_detail(i), before))
            rows["after"].append(generator.RowSpec(shape_detail(i), after))
            logs[shape_key(i)].append(math.log(before / after))
        for side in ("before", "after"):
            generator.write_cell(
                root / op / f"r{rnd}" / side,
                generator.CellSpec(
                    op=op,
                    dtype=dtype,
                    side=side,
                    round=rnd,
                    card=0,
                    caliber=dict(caliber),
                    rows=rows[side],
                    index_tsv=False,
                    noise=False,
                    extra_env={
                        "SWITCH": generator.SWITCH,
                        "SWITCH_VALUE": "0" if side == "before" else "1",
                        **environment(side, rnd),
                    },
                ),
            )
    return logs
