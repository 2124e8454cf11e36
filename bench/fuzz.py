"""Mutation fuzzing of ingest: N cases, each a copy of the example tree with
a few mutations (truncated records, bytes that are not UTF-8, a directory
where a file belongs, links out of the tree, FIFOs, huge lines, NUL bytes,
names that are not UTF-8, deep JSON, integers beyond 64 bits), ingested in a
forked child under an alarm. Prints the cases tried, crashes (a traceback or
an exit status other than 0 and 1), hangs, the good cells lost (cells no
mutation touched that were not stored as the unmutated tree's ingest stored
them) and the touched files no problem named.

    python bench/fuzz.py --cases 2000 --seed 1
    PYTHONPATH=/path/to/other/checkout python bench/fuzz.py --cases 2000 --seed 1   # the same cases, other code

The cases are tests/mutations.py's, which the test suite runs a few of
(tests/test_fuzz.py); the figures are in the resolution of issue 13."""

import argparse
import collections
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from tests import mutations  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", default="1")
    parser.add_argument("--mutations", type=int, default=2, help="per case")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        help="seconds an ingest may take before it counts as a hang (a clean one takes ~0.2)",
    )
    parser.add_argument("--work", default=None, help="scratch directory (default: a new one in /dev/shm)")
    parser.add_argument("--show", type=int, default=5, help="cases of each kind of failure to print")
    args = parser.parse_args(argv)

    import zlstore

    work = Path(
        args.work or tempfile.mkdtemp(prefix="zlstore-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    print(f"zlstore from {Path(zlstore.__file__).parent}; scratch {work}", file=sys.stderr)
    mutations.TIMEOUT_S = args.timeout
    fuzzer = mutations.Fuzzer(work)
    counts = collections.Counter()
    shown = collections.Counter()
    started = time.monotonic()
    try:
        for i in range(args.cases):
            touched, outcome = fuzzer.case(random.Random(f"{args.seed}:{i}"), args.mutations)
            counts["cases"] += 1
            kinds = []
            if outcome.status is None:
                kinds.append("hangs")
            if outcome.crashed:
                kinds.append("crashes")
            if outcome.lost:
                kinds.append("cases losing good cells")
                counts["good cells lost"] += len(outcome.lost)
            if outcome.unreported:
                kinds.append("cases with a touched file no problem names")
                counts["touched files no problem names"] += len(outcome.unreported)
            for kind in kinds:
                counts[kind] += 1
                if shown[kind] < args.show:
                    shown[kind] += 1
                    what = "; ".join(f"{t.how}: {t.path[len(str(work)) :]!r}" for t in touched)
                    print(
                        f"case {i} ({kind}): {what}\n    {outcome.detail.strip()[-400:] or outcome.lost[:3]}"
                        + (f" unreported: {[t.how for t in outcome.unreported]}" if outcome.unreported else ""),
                        file=sys.stderr,
                    )
            if (i + 1) % 100 == 0:
                print(
                    f"... {i + 1} cases, {time.monotonic() - started:.0f} s: {counts['crashes']} crashes, "
                    f"{counts['hangs']} hangs, {counts['good cells lost']} good cells lost",
                    file=sys.stderr,
                )
    finally:
        if args.work is None:
            mutations._remove(work)
    print(f"cases tried: {counts['cases']}")
    print(f"crashes: {counts['crashes']}")
    print(f"hangs: {counts['hangs']}")
    print(f"good cells lost: {counts['good cells lost']} (in {counts['cases losing good cells']} cases)")
    print(
        f"touched files no problem names: {counts['touched files no problem names']} "
        f"(in {counts['cases with a touched file no problem names']} cases)"
    )
    print(f"seconds: {time.monotonic() - started:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
