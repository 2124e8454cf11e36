"""Merge throughput against ingest throughput, on the same corpus.

A multi-host campaign reaches one store by merging the stores made where
it ran (`zlstore merge`): merging must not be slower, per cell, than
ingesting the tree would have been. Each iteration ingests the corpus into
a new store (`zlstore ingest RUNS --db DB`) and merges that store into a
new one (`zlstore merge DB --db MERGED`), both commands timed the same way;
the figure is merge cells/s over ingest cells/s (target >= 1.0).

    python bench/merge.py --scale 1         # alone: generates its corpus
    python bench/run.py --scale 1           # within the suite (run.py calls merge_once)
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run  # noqa: E402


def merge_command(source: Path, target: Path) -> dict:
    """`zlstore merge SOURCE --db TARGET --json` into a new target: its wall
    seconds and summary."""
    run.remove_db(target)
    result = run.run_command(run.ZLSTORE + ["merge", str(source), "--db", str(target), "--json"])
    result["summary"] = json.loads(result.pop("stdout"))
    return result


# Tables whose row counts must be the same in the merged store as in its source.
SAME_COUNTS = ("cells", "measurements", "kernels", "fingerprints", "blobs", "ab_slot_rows", "ab_range_rows",
               "ab_round_ranges", "noise_floor_rows")


def counts(db_path: Path) -> dict:
    with run.contextlib.closing(run.sqlite3.connect(db_path)) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SAME_COUNTS}


def merge_once(source: Path, work: Path, cells: int) -> float:
    """Merge the ingested corpus (source) into a new store; its seconds.
    Every cell must arrive, and the pairs, ranges and floors recomputed in
    the target must be as many as the source's."""
    target = work / "merged.db"
    result = merge_command(source, target)
    assert result["summary"]["cells_added"] == cells, result["summary"]
    assert counts(target) == counts(source), (counts(target), counts(source))
    run.remove_db(target)
    return result["seconds"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None)
    args = ap.parse_args(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="zlstore-bench-merge-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    runs, store = work / "runs", work / "store.db"
    try:
        if not runs.exists():
            manifest = run.generate(runs, args.scale)
        else:
            manifest = {"cells": None}
        run.remove_db(store)
        warm = run.run_ingest_command(runs, store)  # untimed: every file read once, page cache warm
        cells = warm["summary"]["cells_added"]
        assert manifest["cells"] in (None, cells)
        ingests, merges = [], []
        for i in range(args.repeat):
            run.remove_db(store)
            ingests.append(run.run_ingest_command(runs, store)["seconds"])
            merges.append(merge_once(store, work, cells))
            print(f"iteration {i + 1}: ingest {ingests[-1]:.2f} s, merge {merges[-1]:.2f} s, "
                  f"merge / ingest throughput {ingests[-1] / merges[-1]:.2f}", file=sys.stderr)
        ratio = statistics.median(i / m for i, m in zip(ingests, merges))
        print(json.dumps({"cells": cells, "ingest_s": ingests, "merge_s": merges,
                          "merge_over_ingest_throughput": ratio, "target": ">= 1.0", "met": ratio >= 1.0}))
    finally:
        if not args.work:
            run.subprocess.run(["rm", "-rf", "--", str(work)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
