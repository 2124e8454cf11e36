"""Eight writers against one: the same cells recorded by one process, then
split over eight processes (one per card) writing one database at once.

Each writer records one cell per call, as `zlstore record "$OUT_DIR"` does
after each cell. Prints both throughputs (cells/s), their ratio, the busy
retries (db.BusyStats.retries: SQLite still answered busy after its busy
timeout) summed over the processes, and the failed writes. Target: eight
writers reach at least half the single writer's throughput with zero
failed writes. Ratios are printed, not asserted: timings depend on the box.

    python bench/concurrency.py                      # 8 x 150 cells, under a minute
    python bench/concurrency.py --cells-per-writer 300 --reader
"""

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import generator as testing  # noqa: E402

WRITER = r"""
import json, os, sys, time
from zlstore import Store, db
db_path, listing, go = sys.argv[1], sys.argv[2], sys.argv[3]
paths = json.loads(open(listing).read())
failed = 0
with Store(db_path) as store:
    open(listing + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    start = time.time()
    for path in paths:
        try:
            summary = store.record([path])
            if summary["cells_added"] + summary["cells_replaced"] + summary["cells_unchanged"] != 1:
                failed += 1
        except Exception as error:  # a failed write is what this benchmark counts
            print(repr(error), file=sys.stderr)
            failed += 1
    end = time.time()
print(json.dumps({"start": start, "end": end, "retries": db.BusyStats.retries, "failed": failed}))
"""

READER = r"""
import json, os, sqlite3, sys, time
path, stop = sys.argv[1], sys.argv[2]
queries, errors = 0, 0
conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
while not os.path.exists(stop):
    try:
        conn.execute("SELECT count(*) FROM cells").fetchone()
        conn.execute("SELECT * FROM cell_summary ORDER BY cell_id DESC LIMIT 20").fetchall()
        queries += 1
    except sqlite3.Error:
        errors += 1
    time.sleep(0.01)
print(json.dumps({"queries": queries, "errors": errors}))
"""


def write_cells(root: Path, writers: int, per_writer: int, rounds: int = 6):
    """A finished campaign: each writer's (card's) cells; run.log, one .ttgir, cell.env last."""
    root.mkdir(parents=True)
    (root / "campaign.env").write_text(
        f"KIND=campaign\nROUNDS={rounds}\nCARDS={writers}\nSWITCH=FLAGTREE_MUSA_RLC_ENHANCE\n"
        + "".join(f"{k}={v}\n" for k, v in testing.CAMPAIGN_CALIBER.items())
    )
    cards = []
    for card in range(writers):
        cells = []
        n = 0
        while len(cells) < per_writer:
            op = f"op{card}x{n}"
            n += 1
            for round_ in range(1, rounds + 1):
                for side in ("before", "after"):
                    if len(cells) == per_writer:
                        break
                    kernel = f"{op}_kernel"
                    text = testing.ttgir_text(kernel, variant=int(side == "after"), rlc=side == "after")
                    spec = testing.CellSpec(
                        op=op,
                        dtype="float16",
                        side=side,
                        round=round_,
                        card=card,
                        elapsed_s=30.0,
                        caliber=dict(testing.CAMPAIGN_CALIBER),
                        noise=False,
                        index_tsv=False,
                        rows=[testing.RowSpec(shape=[64 * k, 1024], latency=0.02 * k) for k in (1, 2, 3)],
                        kernels={kernel: text},
                    )
                    cell = root / f"card{card}" / "ab_bench" / op / f"r{round_}" / side
                    directory = cell / "triton_cache" / testing.cache_hash(kernel, side, text)
                    directory.mkdir(parents=True)
                    (directory / f"{kernel}.ttgir").write_text(text)
                    (cell / "run.log").write_bytes(testing.render_run_log(spec))
                    (cell / "cell.env").write_text("".join(f"{k}={v}\n" for k, v in testing.cell_env_items(spec)))
                    cells.append(str(cell))
        cards.append(cells)
    return cards


def run_writers(db: Path, lists, work: Path, reader: bool) -> dict:
    """One process per list, started together behind a barrier; the phase's
    throughput is all cells over first start to last end."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    from zlstore import Store

    Store(db).close()
    go = work / f"go.{db.stem}"
    stop = work / f"stop.{db.stem}"
    processes = []
    for n, cells in enumerate(lists):
        listing = work / f"{db.stem}.{n}.json"
        listing.write_text(json.dumps(cells))
        processes.append(
            (
                listing,
                subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(db), str(listing), str(go)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                ),
            )
        )
    reading = (
        subprocess.Popen([sys.executable, "-c", READER, str(db), str(stop)], stdout=subprocess.PIPE, text=True, env=env)
        if reader
        else None
    )
    while not all(Path(str(listing) + ".ready").exists() for listing, _ in processes):
        if any(p.poll() is not None for _, p in processes):
            break
        time.sleep(0.01)
    go.write_text("")
    results, errors = [], []
    for _, process in processes:
        out, err = process.communicate()
        if process.returncode != 0:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {process.returncode}")
            continue
        results.append(json.loads(out))
        if err.strip():
            errors.append(err.strip().splitlines()[-1])
    stop.write_text("")
    reader_result = json.loads(reading.communicate()[0]) if reading else None
    cells = sum(len(c) for c in lists)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results) if results else float("nan")
    conn = sqlite3.connect(db)
    try:
        stored = conn.execute("SELECT count(*) FROM cells").fetchone()[0]
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    return {
        "processes": len(lists),
        "cells": cells,
        "seconds": seconds,
        "cells_per_s": cells / seconds,
        "retries": sum(r["retries"] for r in results),
        "failed": sum(r["failed"] for r in results) + (len(lists) - len(results)),  # a crashed writer: all failed
        "stored": stored,
        "integrity": integrity,
        "errors": errors,
        "reader": reader_result,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--cells-per-writer", type=int, default=150)
    parser.add_argument("--reader", action="store_true", help="a reader loop of SELECTs beside the writers")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="zlstore-concurrency-"))
    try:
        started = time.time()
        cards = write_cells(work / "runs" / "campaign_bench", args.writers, args.cells_per_writer)
        generated = time.time() - started
        single = run_writers(work / "single.db", [[c for cells in cards for c in cells]], work, args.reader)
        many = run_writers(work / "many.db", cards, work, args.reader)
        ratio = many["cells_per_s"] / single["cells_per_s"]
        report = {
            "cells": single["cells"],
            "generated_s": generated,
            "single": single,
            "many": many,
            "ratio": ratio,
            "target_ratio": 0.5,
        }
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(
                f"{single['cells']} cells ({args.writers} x {args.cells_per_writer}), one record call per cell; "
                f"generated in {generated:.1f} s"
            )
            for name, r in (("1 writer", single), (f"{args.writers} writers", many)):
                print(
                    f"{name:>10}: {r['cells_per_s']:8.1f} cells/s  ({r['seconds']:.2f} s)  "
                    f"busy retries {r['retries']}  failed writes {r['failed']}  "
                    f"stored {r['stored']}/{r['cells']}  integrity {r['integrity']}"
                    + (
                        f"  reader {r['reader']['queries']} queries, {r['reader']['errors']} errors"
                        if r["reader"]
                        else ""
                    )
                )
                for error in r["errors"]:
                    print(f"            error: {error}")
            print(f"     ratio: {ratio:.2f} ({args.writers} writers / 1 writer; target >= 0.5 with 0 failed writes)")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
