"""A fake benchmark command for the runner tests: writes cells the way the
harness does (run.log with `[INFO] {json}` records, triton_cache/<hash>/*.ttgir,
cell.env last), with chosen latencies, sleeps, failures and hangs.

    fake_bench.py repeat OP [DTYPE]   plays ab_repeat.sh: $AB_ROOT/ab_<ts>/<op>/r<R>/<side>/
                                      for R in 1..$ROUNDS (R = $ROUND alone where it is
                                      set, unless FAKE_IGNORE_ROUND), cell.env included
    fake_bench.py cell                plays one screening cell in $OUT_DIR ($OP, $DTYPE,
                                      $SIDE, $SWITCH_VALUE); prints its run.log records to
                                      stdout and leaves cell.env to zlstore

Controls (environment):
    FAKE_SLEEP      seconds each cell takes (spent in a child process), default 0
    FAKE_SLOW       ops whose cells take FAKE_SLOW_SLEEP seconds instead (default 3)
    FAKE_LATENCY    FlagGems latency of the before side in ms, default 0.02
    FAKE_SPEEDUP    before / after latency ratio where the IR changed, default 1.25
    FAKE_SAME_IR    ops (comma-separated) whose after side compiles the same IR
                    (with the switch's ttg.rlc-* annotations only): NO_IR_DIFF
    FAKE_HANG       op:side items (or op) whose cell hangs, with a child sleeper (in
                    repeat, after making the cell's directory and the start of its run.log)
    FAKE_FAIL       ops whose repeat run stops after round 1 with exit status 3
    FAKE_PID_DIR    a directory to leave one file per process started (name = pid)
    FAKE_IGNORE_ROUND  1: run every round even where $ROUND names one (an old harness)
"""

import datetime
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zlstore.caliber import CALIBER_FIELDS  # noqa: E402
from tests.generator import (  # noqa: E402
    CellSpec,
    RowSpec,
    cache_hash,
    cell_env_items,
    render_run_log,
    ttgir_text,
    write_cell,
)

SHAPES = ([64, 1024], [256, 1024], [1024, 4096])


def _items(name):
    return {i.strip() for i in os.environ.get(name, "").split(",") if i.strip()}


def _pid(pid):
    directory = os.environ.get("FAKE_PID_DIR")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / str(pid)).write_text("")


def _spend(seconds):
    """The benchmark's time, spent in a child process like the real one."""
    if seconds <= 0:
        return
    child = subprocess.Popen(["sleep", str(seconds)])
    _pid(child.pid)
    child.wait()


def _hang():
    child = subprocess.Popen(["sleep", "1000"])
    _pid(child.pid)
    while True:
        time.sleep(1000)


def cell_sleep(op):
    if op in _items("FAKE_SLOW"):
        return float(os.environ.get("FAKE_SLOW_SLEEP", "3"))
    return float(os.environ.get("FAKE_SLEEP", "0"))


@functools.lru_cache(maxsize=256)
def kernels(op, side):
    """The after side compiles different IR unless FAKE_SAME_IR lists the op;
    either way it carries the switch's annotations."""
    same = op in _items("FAKE_SAME_IR")
    variant = 0 if side == "before" or same else 1
    return {f"{op}_kernel": ttgir_text(f"{op}_kernel", variant=variant, rlc=(side == "after"))}


def rows(op, side, round_):
    base = float(os.environ.get("FAKE_LATENCY", "0.02"))
    speedup = 1.0 if op in _items("FAKE_SAME_IR") else float(os.environ.get("FAKE_SPEEDUP", "1.25"))
    jitter = 1.0 + 0.01 * ((round_ * 7 + len(op) + (3 if side == "after" else 0)) % 5 - 2)
    out = []
    for n, shape in enumerate(SHAPES):
        latency = base * (n + 1) * jitter
        if side == "after":
            latency /= speedup
        out.append(RowSpec(shape=shape, latency=round(latency, 6)))
    return out


def caliber_env():
    return {f.env: os.environ[f.env] for f in CALIBER_FIELDS if os.environ.get(f.env)}


def spec(op, dtype, side, round_, card, elapsed, rc=0):
    return CellSpec(
        op=op,
        dtype=dtype,
        side=side,
        round=round_,
        card=card,
        rc=rc,
        elapsed_s=elapsed,
        started_at=datetime.datetime.now().isoformat(timespec="seconds"),
        caliber=caliber_env(),
        rows=rows(op, side, round_),
        kernels=kernels(op, side),
        index_tsv=False,
        noise=False,
        extra_env={
            "SWITCH": os.environ.get("SWITCH", "FLAGTREE_MUSA_RLC_ENHANCE"),
            "SWITCH_VALUE": "0" if side == "before" else "1",
        },
    )


def repeat(op, dtype):
    """ab_repeat.sh: N rounds of before/after into a fresh timestamped directory."""
    root = Path(os.environ["AB_ROOT"])
    rounds = int(os.environ.get("ROUNDS", "1"))
    card = int(os.environ.get("CARD", "0"))
    sleep = cell_sleep(op)
    print(
        f"fake_bench repeat {op} {dtype!r}: AB_ROOT={root} ROUNDS={rounds} CARD={card} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
        f"MUSA_VISIBLE_DEVICES={os.environ.get('MUSA_VISIBLE_DEVICES')} "
        f"ZL_ISOLATE_TUNER_CACHE={os.environ.get('ZL_ISOLATE_TUNER_CACHE')} "
        f"ZLSTORE_DB={os.environ.get('ZLSTORE_DB')} CELL_TIMEOUT={os.environ.get('CELL_TIMEOUT')}",
        flush=True,
    )
    run_dir = root / datetime.datetime.now().strftime("ab_%Y%m%d_%H%M%S")
    while run_dir.exists():  # one round a run: two runs in a second
        run_dir = run_dir.with_name(run_dir.name + "_")
    asked = os.environ.get("ROUND") if not os.environ.get("FAKE_IGNORE_ROUND") else None
    print(f"fake_bench repeat ROUND={asked}", flush=True)
    for round_ in [int(asked)] if asked else range(1, rounds + 1):
        for side in ("before", "after"):
            if op in _items("FAKE_HANG") or f"{op}:{side}" in _items("FAKE_HANG"):
                # as the harness does: the cell's directory and the start of its run.log, then nothing
                cell = run_dir / op / f"r{round_}" / side
                cell.mkdir(parents=True, exist_ok=True)
                (cell / "run.log").write_text("[INFO] Benchmark record logger enabled\n")
                _hang()
            t0 = time.monotonic()
            _spend(sleep)
            write_cell(run_dir / op / f"r{round_}" / side, spec(op, dtype, side, round_, card, time.monotonic() - t0))
        if op in _items("FAKE_FAIL"):
            print(f"fake_bench: {op} fails after round {round_}", flush=True)
            return 3
    return 0


def cell():
    """One screening cell: records to stdout (zlstore sends them to run.log),
    kernels into $OUT_DIR, no cell.env."""
    out = Path(os.environ["OUT_DIR"])
    op, dtype, side = os.environ["OP"], os.environ.get("DTYPE", ""), os.environ["SIDE"]
    if op in _items("FAKE_HANG") or f"{op}:{side}" in _items("FAKE_HANG"):
        sys.stdout.write("[INFO] Benchmark record logger enabled\n")
        sys.stdout.flush()
        _hang()
    _spend(cell_sleep(op))
    one = spec(op, dtype, side, 0, int(os.environ.get("CARD", "0")), 0.0)
    sys.stdout.buffer.write(render_run_log(one))
    sys.stdout.flush()
    for name, text in one.kernels.items():
        directory = out / "triton_cache" / cache_hash(name, side, text)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.ttgir").write_text(text)
    return 0


def write_light_cell(cell, one):
    """A cell with only what zlstore reads (run.log, the .ttgir, cell.env last):
    quicker to write in bulk than write_cell's full Triton cache."""
    for name, text in one.kernels.items():
        directory = cell / "triton_cache" / cache_hash(name, one.side, text)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.ttgir").write_text(text)
    (cell / "run.log").write_bytes(render_run_log(one))
    (cell / "cell.env").write_text("".join(f"{k}={v}\n" for k, v in cell_env_items(one)))


def make_campaign_tree(root, cards, ops_per_card, rounds, caliber=None):
    """A finished campaign written in one go (for the concurrency test):
    campaign.env, then card<N>/ab_fake/<op>/r<R>/<side>/ cells; returns
    each card's cell directories."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    env = dict(caliber or {})
    (root / "campaign.env").write_text(
        f"KIND=campaign\nROUNDS={rounds}\nCARDS={cards}\nSWITCH=FLAGTREE_MUSA_RLC_ENHANCE\n"
        + "".join(f"{k}={v}\n" for k, v in env.items())
    )
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        per_card = []
        for card in range(cards):
            cells = []
            for n in range(ops_per_card):
                op = f"op{card}x{n}"
                for round_ in range(1, rounds + 1):
                    for side in ("before", "after"):
                        cell = root / f"card{card}" / "ab_fake" / op / f"r{round_}" / side
                        write_light_cell(cell, spec(op, "float16", side, round_, card, 1.0))
                        cells.append(cell)
            per_card.append(cells)
        return per_card
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv):
    _pid(os.getpid())
    if len(argv) >= 2 and argv[0] == "repeat":
        return repeat(argv[1], argv[2] if len(argv) > 2 else "")
    if argv and argv[0] == "cell":
        return cell()
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
