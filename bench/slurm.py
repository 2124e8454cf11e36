"""Campaigns beyond one host: two figures, each a ratio against a baseline
measured in the same run (never a timed assertion).

    python bench/slurm.py [--cards 8] [--repeat 3] [--json bench/results-slurm.json]

1. Submit to running. A one-machine Slurm (tests/slurm/start_slurm.sh,
   --cards slurmd "nodes" of one CPU each, started here and stopped at the
   end) runs `zlstore run campaign --slurm` over a plan of one op per card
   (the fake benchmark, tests/fake_bench.py, whose op sleeps). The figure is
   the time from starting the command to every card's op command running
   (each card's status file says its op started), per card; target under
   2 s per card. Its baseline, in the same iteration: a bare
   `sbatch --array=0-N-1 --wrap 'sleep 60'` to every task RUNNING in
   scontrol, Slurm's own floor on this machine.

2. A 64-card plan (8 hosts x 8 cards) from the seed's weights. The seed's
   one batch (tests/test_plan.py: topk alone 70.6 min against an ideal
   share of 45.4 on 8 cards; 17 ops) is far too small to fill 64 cards, so
   the sweep is the batch repeated, each copy of an op (another dtype or
   variant of it) weighing the seed's weight times a factor in [0.5, 1.5)
   drawn from random.Random(copy): 1, 4, 16 and 48 copies (48: 816 ops,
   about 290 card-hours, the "hundreds of card-hours" of a full sweep).
   The figure is the longest-first plan's critical path against
   max(ideal share, heaviest op), the floor no plan can beat; target within
   1.1x. Its baseline, in the same run: a plain hash partition's critical
   path against the same floor.
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from tests.slurm.cluster import Cluster, missing_programs  # noqa: E402
from tests.test_plan import SEED_MINUTES  # noqa: E402  the seed's batch, in minutes for 6 rounds
from tests import generator  # noqa: E402
from zlstore.run import slurm  # noqa: E402
from zlstore.run.plan import Op, make_plan  # noqa: E402

PYTHON = sys.executable
FAKE = f"{PYTHON} {REPO / 'tests' / 'fake_bench.py'}"


# ---------------------------------------------------------------- the 64-card plan


def sweep(copies: int) -> list:
    """The seed's batch `copies` times, each copy's weight the seed's times a factor in [0.5, 1.5)."""
    ops = []
    for copy in range(copies):
        rnd = random.Random(copy)
        for (op, dtype), minutes in sorted(SEED_MINUTES.items()):
            factor = 1.0 if copy == 0 else 0.5 + rnd.random()
            ops.append(Op(op if copy == 0 else f"{op}_v{copy}", dtype, minutes * 60 * factor))
    return ops


def plan_figures() -> list:
    """The seed's batch on its own 8 cards (its critical path is topk: the
    floor), then on 64 cards, then sweeps of 4, 16 and 48 copies on 64."""
    rows = []
    for cards, copies in ((8, 1), (64, 1), (64, 4), (64, 16), (64, 48)):
        ops = sweep(copies)
        t0 = time.perf_counter()
        plan = make_plan(ops, cards)
        took = time.perf_counter() - t0
        floor = max(plan.ideal_s, plan.heaviest_s)
        rows.append(
            {
                "cards": cards,
                "copies": copies,
                "ops": len(ops),
                "card_hours": plan.total_s / 3600,
                "critical_min": plan.makespan_s / 60,
                "ideal_min": plan.ideal_s / 60,
                "heaviest_min": plan.heaviest_s / 60,
                "floor_min": floor / 60,
                "ratio": plan.makespan_s / floor,
                "hash_ratio": plan.hash_makespan_s / floor,
                "plan_seconds": took,
            }
        )
    return rows


# ---------------------------------------------------------------- submit to running


def sbatch_floor(env: dict, cards: int) -> float:
    """sbatch of a bare array to every task RUNNING, as scontrol says."""
    t0 = time.monotonic()
    job = subprocess.run(
        ["sbatch", "--parsable", f"--array=0-{cards - 1}", "--output=/dev/null", "--wrap", "sleep 60"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        while True:
            out = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True, text=True).stdout
            tasks = slurm.parse_jobs(out)
            if len(tasks) == cards and all(t.state == "running" for t in tasks.values()):
                return time.monotonic() - t0
            time.sleep(0.02)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)


def campaign_to_running(env: dict, work: Path, cards: int, iteration: int) -> dict:
    """run campaign --slurm to every card's op command started; then Ctrl-C (scancel)."""
    plan = work / f"partition{iteration}.tsv"
    plan.write_text("card\top\tdtype\tweight_min\n" + "".join(f"{c}\tslow{c}\t\t1\n" for c in range(cards)))
    root = work / f"campaign_{iteration}"
    db = work / f"bench{iteration}.db"
    run_env = dict(
        env,
        FAKE_SLOW=",".join(f"slow{c}" for c in range(cards)),
        FAKE_SLOW_SLEEP="120",
        PYTHONPATH=str(REPO),
        **generator.SCREEN_CALIBER,
    )
    t0 = time.monotonic()
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "zlstore",
            "run",
            "campaign",
            "--slurm",
            "--plan",
            str(plan),
            "--rounds",
            "1",
            "--root",
            str(root),
            "--command",
            f"{FAKE} repeat {{op}} {{dtype}}",
            "--poll",
            "0.1",
            "--status-every",
            "1000",
            "--db",
            str(db),
        ],
        env=run_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started, running = {}, None
    try:
        while len(started) < cards:
            if process.poll() is not None:
                raise RuntimeError(f"run campaign --slurm ended early: exit {process.returncode}")
            if running is None and (root / "slurm" / "jobs.tsv").exists():
                job = (root / "slurm" / "jobs.tsv").read_text().splitlines()[-1].split("\t")[1]
                tasks = slurm.job_tasks(job) or {}
                if len(tasks) == cards and all(t.state == "running" for t in tasks.values()):
                    running = time.monotonic() - t0
            for card in range(cards):
                if card in started:
                    continue
                try:
                    doc = json.loads((root / "status" / f"card{card}.json").read_text())
                except (OSError, ValueError):
                    continue
                if any(e["event"] == "start" for e in doc["events"]):
                    started[card] = time.monotonic() - t0
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    return {
        "all": max(started.values()),
        "first": min(started.values()),
        "running": running if running is not None else float("nan"),
    }


def submit_figures(cards: int, repeat: int) -> dict:
    if missing_programs():
        return {
            "available": False,
            "why": "Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)",
        }
    cluster = Cluster(cards)
    os.environ.update(cluster.env)  # for zlstore.run.slurm's own scontrol calls here
    work = Path(tempfile.mkdtemp(prefix="zlstore-bench-campaign-"))
    try:
        floors, runs = [], []
        for i in range(repeat):
            floors.append(sbatch_floor(dict(os.environ), cards))
            runs.append(campaign_to_running(dict(os.environ), work, cards, i))
        return {
            "available": True,
            "cards": cards,
            "sbatch": floors,
            "campaign": [r["all"] for r in runs],
            "first_card": [r["first"] for r in runs],
            "tasks_running": [r["running"] for r in runs],
        }
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- the table


def table(submit: dict, plans: list) -> list:
    rows = []
    if submit.get("available"):
        n = submit["cards"]
        campaign = statistics.median(submit["campaign"])
        floor = statistics.median(submit["sbatch"])
        per_card = campaign / n
        rows.append(
            (
                "run campaign --slurm to every card's op running",
                f"{campaign:.2f} s for {n} cards",
                "",
                f"median of {len(submit['campaign'])}; first card {statistics.median(submit['first_card']):.2f} s",
            )
        )
        rows.append(("... per card", f"{per_card:.3f} s", "< 2 s", "yes" if per_card < 2 else "**no**"))
        rows.append(
            (
                "... of which: to every task RUNNING in scontrol",
                f"{statistics.median(submit['tasks_running']):.2f} s",
                "",
                "the rest is each task's `zlstore run card` starting and starting its op",
            )
        )
        rows.append(
            (
                "bare sbatch array to every task RUNNING (baseline)",
                f"{floor:.2f} s",
                "",
                f"median of {len(submit['sbatch'])}",
            )
        )
        ratios = [c / f for c, f in zip(submit["campaign"], submit["sbatch"])]
        rows.append(("zlstore / bare sbatch", f"{statistics.median(ratios):.2f} x", "report", ""))
    else:
        rows.append(("run campaign --slurm to every card's op running", "n/a", "< 2 s per card", submit["why"]))
    for p in plans:
        rows.append(
            (
                f"{p['cards']}-card plan, {p['ops']} ops ({p['card_hours']:.0f} card-hours): critical path / "
                "max(ideal, heaviest)",
                f"{p['ratio']:.3f} x",
                "<= 1.1",
                ("yes" if p["ratio"] <= 1.1 else "**no**")
                + f"; {p['critical_min']:.1f} min against ideal {p['ideal_min']:.1f}, heaviest "
                f"{p['heaviest_min']:.1f}; hash partition {p['hash_ratio']:.2f} x; planned in "
                f"{p['plan_seconds'] * 1000:.0f} ms",
            )
        )
    return rows


def render(rows: list) -> str:
    lines = ["| figure | value | target | met / notes |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=int, default=8, help="cards (and slurmd nodes) for the submit figure")
    ap.add_argument("--repeat", type=int, default=3, help="iterations of the submit figure")
    ap.add_argument("--skip-submit", action="store_true", help="only the plan figure")
    ap.add_argument("--json", default=str(BENCH / "results-slurm.json"))
    args = ap.parse_args(argv)
    plans = plan_figures()
    submit = (
        {"available": False, "why": "--skip-submit"} if args.skip_submit else submit_figures(args.cards, args.repeat)
    )
    rows = table(submit, plans)
    print(render(rows))
    Path(args.json).write_text(
        json.dumps({"submit": submit, "plans": plans, "rows": rows, "load_average_at_end": os.getloadavg()}, indent=1)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
