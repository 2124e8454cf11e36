"""A small runs/ tree in which campaign ranges meet noise floors.

Here the screening root and the campaign share one caliber and their ops
are chosen so that every status of a range against its floor occurs, and
the campaign is unfinished so that progress has ops left.

Screening root (one shape per op; ratio = before / after):
  gelu float16  NO_IR_DIFF  1.02  -> floor 0.02
  silu float16  NO_IR_DIFF  0.98  -> floor 0.02
  exp  float32  NO_IR_DIFF  1.03  -> floor 0.03
  tanh float16  IR_CHANGED  1.10  (no floor for tanh)
  cos  float16  IR_CHANGED  1.05

Campaign, 3 rounds on 2 cards (partition: card 0 tanh, silu; card 1 cos,
gelu, exp): gelu 1.08 / 1.10 / 1.12 lies above its floor band, silu 0.90 /
0.92 / 0.91 below it, exp 1.01 / 0.99 within it (round 3 not written:
EXP_ROUND3 writes it later), tanh 1.10 / 1.12 / 1.09 has no floor, cos is
not started. The findings: gelu and tanh faster, silu slower (3 rounds that
agree within 2%: t-tests with p < 0.013, q < 0.015 over the 3 tested
ranges, intervals beyond 2%), exp too few rounds (2).
"""

from pathlib import Path

from . import generator

SCREEN = "ab_floor_20261020_090000"
CAMPAIGN = "campaign_20261021_080000"
CALIBER = dict(generator.CAMPAIGN_CALIBER)  # isolate_tuner_cache=1 on both sides
SWITCH = generator.SWITCH
ROUNDS = 3

SCREEN_PAIRS = {  # (op, dtype): (ratio, same IR, elapsed per side)
    ("gelu", "float16"): (1.02, True, 100.0),
    ("silu", "float16"): (0.98, True, 60.0),
    ("exp", "float32"): (1.03, True, 50.0),
    ("tanh", "float16"): (1.10, False, 300.0),
    ("cos", "float16"): (1.05, False, 200.0),
}
FLOORS = {("gelu", "float16"): 0.02, ("silu", "float16"): 0.02, ("exp", "float32"): 0.03}
PARTITION = [
    (0, "tanh", "float16"),
    (0, "silu", "float16"),
    (1, "cos", "float16"),
    (1, "gelu", "float16"),
    (1, "exp", "float32"),
]
CAMPAIGN_RATIOS = {  # rounds written now
    ("tanh", "float16"): (1.10, 1.12, 1.09),
    ("silu", "float16"): (0.90, 0.92, 0.91),
    ("gelu", "float16"): (1.08, 1.10, 1.12),
    ("exp", "float32"): (1.01, 0.99),
}
EXP_ROUND3 = 1.0
FLOOR_BAND = {
    ("gelu", "float16"): "range above the floor band",
    ("silu", "float16"): "range below the floor band",
    ("exp", "float32"): "range within the floor band",
    ("tanh", "float16"): "no floor measured",
}
FINDING = {
    ("gelu", "float16"): "faster",
    ("silu", "float16"): "slower",
    ("exp", "float32"): "too few rounds",
    ("tanh", "float16"): "faster",
}
SHAPE = [[4096, 4096]]
AFTER_MS = 0.2


def weight_min(op, dtype):
    return 2 * SCREEN_PAIRS[(op, dtype)][2] * ROUNDS / 60.0


def _env(items):
    return "".join(f"{k}={v}\n" for k, v in items)


def _caliber_env():
    return [(f.env, CALIBER[f.env]) for f in generator.CALIBER_FIELDS]


def _spec(op, dtype, side, rnd, card, ratio, same_ir, elapsed):
    after = AFTER_MS
    latency = round(after * ratio, 9) if side == "before" else after
    variant = 1 if (side == "after" and not same_ir) else 0
    return generator.CellSpec(
        op=op,
        dtype=dtype,
        side=side,
        round=rnd,
        card=card,
        elapsed_s=elapsed,
        started_at="2026-10-21T08:00:00",
        caliber=dict(CALIBER),
        rows=[generator.RowSpec(SHAPE, latency)],
        kernels={f"{op}_kernel": generator.ttgir_text(f"{op}_kernel", variant=variant)},
        extra_env={"SWITCH": SWITCH, "SWITCH_VALUE": "0" if side == "before" else "1"},
        noise=False,
    )


def campaign_cell_dir(dest, card, op, rnd, side):
    return Path(dest) / CAMPAIGN / f"card{card}" / f"ab_20261021_08000{card}" / op / f"r{rnd}" / side


def write_campaign_round(dest, op, dtype, rnd, ratio):
    """Write both cells of one campaign round; returns their directories."""
    card = next(c for c, o, d in PARTITION if (o, d) == (op, dtype))
    dirs = []
    for side in ("before", "after"):
        cell = campaign_cell_dir(dest, card, op, rnd, side)
        elapsed = SCREEN_PAIRS[(op, dtype)][2] * (1 + 0.02 * rnd)
        generator.write_cell(cell, _spec(op, dtype, side, rnd, card, ratio, False, elapsed))
        dirs.append(cell)
    return dirs


def make_floor_tree(dest) -> Path:
    dest = Path(dest)
    screen = dest / SCREEN
    screen.mkdir(parents=True, exist_ok=True)
    (screen / "root.env").write_text(
        _env(
            [("KIND", "screen"), ("SWITCH", SWITCH), ("HOST", generator.HOST), ("STARTED_AT", "2026-10-20T09:00:00")]
            + _caliber_env()
        )
    )
    for (op, dtype), (ratio, same_ir, elapsed) in SCREEN_PAIRS.items():
        for side in ("before", "after"):
            generator.write_cell(
                screen / generator.cell_dir_name(op, dtype, side), _spec(op, dtype, side, 0, 0, ratio, same_ir, elapsed)
            )
    campaign = dest / CAMPAIGN
    campaign.mkdir(parents=True, exist_ok=True)
    (campaign / "campaign.env").write_text(
        _env(
            [
                ("KIND", "campaign"),
                ("ROUNDS", str(ROUNDS)),
                ("CARDS", "2"),
                ("SWITCH", SWITCH),
                ("SCREEN_ROOT", f"../{SCREEN}"),
                ("HOST", generator.HOST),
                ("STARTED_AT", "2026-10-21T08:00:00"),
            ]
            + _caliber_env()
        )
    )
    (campaign / "partition.tsv").write_text(
        "card\top\tdtype\tweight_min\n"
        + "".join(f"{c}\t{op}\t{dtype}\t{weight_min(op, dtype):.2f}\n" for c, op, dtype in PARTITION)
    )
    for (op, dtype), ratios in CAMPAIGN_RATIOS.items():
        for rnd, ratio in enumerate(ratios, 1):
            write_campaign_round(dest, op, dtype, rnd, ratio)
    return dest
