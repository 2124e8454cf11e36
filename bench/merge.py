"""Merge throughput against ingest throughput, on the same corpus.

A multi-host campaign reaches one store by merging the stores made where
it ran (`zlstore merge`): merging must not be slower, per cell, than
ingesting the tree would have been. Each iteration ingests the corpus into
a new store (`zlstore ingest RUNS --db DB`) and merges that store into a
new one (`zlstore merge DB --db MERGED`), both commands timed the same way;
the figure is merge cells/s over ingest cells/s (target >= 1.0).

    python bench/merge.py --scale 1         # alone: generates its corpus
    python bench/merge.py --roots 1200      # many small roots: merge within 2x of their ingest
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
SAME_COUNTS = (
    "cells",
    "measurements",
    "kernels",
    "fingerprints",
    "blobs",
    "ab_slot_rows",
    "ab_range_rows",
    "ab_round_ranges",
    "noise_floor_rows",
)


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


# Many small roots (issue 33, item 5): a merge did the whole of the pairs'
# refresh once per root, so its time grew with the square of the roots
# (1,200 roots: 89 s; their ingest: a few). Each small root is one
# screening pair of the examples under a name of its own.
EXAMPLE_ROOT = BENCH.parent / "examples" / "runs" / "ab_rlc_20261012_101500"
SMALL_ROOT_PAIR = ("abs_float16_before", "abs_float16_after")
MANY_ROOTS_TARGET = 2.0  # merge seconds / ingest seconds, at most


def small_roots(runs: Path, count: int) -> int:
    """count screening roots of one pair each under runs; returns the cells."""
    import shutil

    header, *lines = (EXAMPLE_ROOT / "screen.tsv").read_text().splitlines()
    row = next(line for line in lines if line.startswith("abs\tfloat16\t"))
    for n in range(count):
        root = runs / f"ab_rlc_202701{1 + n // 1440 % 28:02d}_{n % 24:02d}{n // 24 % 60:02d}00"  # each its own name
        root.mkdir(parents=True)
        env = (
            (EXAMPLE_ROOT / "root.env")
            .read_text()
            .replace("STARTED_AT=2026-10-12T10:15:00", f"STARTED_AT=2027-01-01T00:00:{n % 60:02d}")
        )
        (root / "root.env").write_text(env)
        (root / "screen.tsv").write_text(header + "\n" + row + "\n")
        for cell in SMALL_ROOT_PAIR:
            shutil.copytree(EXAMPLE_ROOT / cell, root / cell, symlinks=True)
    return count * len(SMALL_ROOT_PAIR)


def many_roots(count: int, repeat: int, work: Path) -> dict:
    """Ingest count small roots into a store, merge that store into a new
    one: seconds of each (median of repeat), and their ratio."""
    runs, store = work / "roots", work / "roots.db"
    cells = small_roots(runs, count)
    run.remove_db(store)
    run.run_ingest_command(runs, store)  # untimed: the page cache warm
    ingests, merges = [], []
    for i in range(repeat):
        run.remove_db(store)
        ingests.append(run.run_ingest_command(runs, store)["seconds"])
        merges.append(merge_once(store, work, cells))
        print(
            f"iteration {i + 1}: {count} roots, ingest {ingests[-1]:.2f} s, merge {merges[-1]:.2f} s", file=sys.stderr
        )
    ratio = statistics.median(merges) / statistics.median(ingests)
    return {
        "roots": count,
        "cells": cells,
        "ingest_s": ingests,
        "merge_s": merges,
        "merge_over_ingest_seconds": ratio,
        "target": f"<= {MANY_ROOTS_TARGET}",
        "met": ratio <= MANY_ROOTS_TARGET,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None)
    ap.add_argument(
        "--roots",
        type=int,
        default=None,
        help="instead: merge N small roots (one screening pair each) against ingesting them",
    )
    args = ap.parse_args(argv)
    if args.roots:
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="zlstore-bench-roots-", dir="/tmp"))
        try:
            print(json.dumps(many_roots(args.roots, args.repeat, work)))
        finally:
            if not args.work:
                run.subprocess.run(["rm", "-rf", "--", str(work)])
        return 0
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
            print(
                f"iteration {i + 1}: ingest {ingests[-1]:.2f} s, merge {merges[-1]:.2f} s, "
                f"merge / ingest throughput {ingests[-1] / merges[-1]:.2f}",
                file=sys.stderr,
            )
        ratio = statistics.median(i / m for i, m in zip(ingests, merges))
        print(
            json.dumps(
                {
                    "cells": cells,
                    "ingest_s": ingests,
                    "merge_s": merges,
                    "merge_over_ingest_throughput": ratio,
                    "target": ">= 1.0",
                    "met": ratio >= 1.0,
                }
            )
        )
    finally:
        if not args.work:
            run.subprocess.run(["rm", "-rf", "--", str(work)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
