"""The harness's own ways, for the benchmark to measure the store against.

Before zlstore, the shell harness answered two questions by going back to the
files every time:

* RESCORE=<root>: re-judge a root under a fingerprint rule by re-reading and
  re-hashing every .ttgir on disk (`rescore` below: the same normalization
  functions as the store, applied file by file, no cache).
* batch_summary.py --ab: re-read every run.log, pair the rows of each
  round's before and after logs by (op, dtype, shape) in Python, keep rows
  that succeeded on both sides under the same caliber, and print a
  min / median / max range per row identity over the rounds, annotated when a
  fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH) row is in it (`ab_summary`).

    python bench/harness.py rescore RUNS_DIR [--rule v4]
    python bench/harness.py ab CAMPAIGN_ROOT
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

from zlstore import caliber
from zlstore.read import ttgir

INFO = b"[INFO] {"
MARKER = b"BENCHMARK_DIRECT_NO_CUDAGRAPH"


def _cells(top: str):
    """Every cell directory (holding run.log or cell.env) under top, not
    entering triton_cache."""
    for directory, subdirs, names in os.walk(top):
        if "run.log" in names or "cell.env" in names:
            subdirs[:] = []
            yield directory, names
        else:
            subdirs[:] = sorted(d for d in subdirs if d != "triton_cache")


def rescore(top: str, rule: str = "v4") -> dict:
    """Every cell's fingerprint under rule, from the .ttgir files on disk."""
    r = ttgir.get_rule(rule)
    fingerprints = {}
    files = 0
    for cell, names in _cells(top):
        pairs = []
        cache = os.path.join(cell, "triton_cache")
        for directory, _, cache_files in os.walk(cache):
            for name in cache_files:
                if name.endswith(".ttgir"):
                    with open(os.path.join(directory, name), "rb") as f:
                        text = f.read().decode("utf-8", "surrogateescape")
                    pairs.append((name[:-6], ttgir.text_digest(r, text)))
                    files += 1
        index = None
        if r.hashes_index and "index.tsv" in names:
            with open(os.path.join(cell, "index.tsv"), "rb") as f:
                index = hashlib.sha256(f.read()).hexdigest()
        fingerprints[cell] = ttgir.combine(r, pairs, index)
    return {"cells": len(fingerprints), "ttgir": files, "fingerprints": fingerprints}


def _read_env(path: str) -> dict:
    env = {}
    try:
        with open(path, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                key, sep, value = line.strip().partition("=")
                if sep:
                    env[key.strip()] = value.strip()
    except FileNotFoundError:
        pass
    return env


def _rows(path: str):
    """(op, dtype, shape) -> (latency or None, fallback) for one run.log."""
    out = {}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return out
    fallback = False
    for line in data.split(b"\n"):
        if MARKER in line:
            fallback = True
        if not line.startswith(INFO):
            continue
        try:
            record = json.loads(line[7:])
        except ValueError:
            continue
        if not isinstance(record, dict) or "result" not in record:
            continue
        op = record.get("op_name")
        dtype = str(record.get("dtype") or "").replace("torch.", "")
        for row in record["result"] or ():
            shape = json.dumps(row.get("shape_detail"), sort_keys=True, separators=(",", ":"))
            latency = row.get("latency")
            ok = (
                not row.get("error_msg")
                and isinstance(latency, (int, float))
                and latency > 0
                and latency != float("inf")
            )
            out[(op, dtype, shape)] = (latency if ok else None, fallback)
        fallback = False
    return out


def ab_summary(top: str) -> list:
    """The A/B ranges of a campaign (or repeat) root, from its run.logs."""
    sides = {}
    for cell, _names in _cells(top):
        parent, side = os.path.split(cell)
        if side not in ("before", "after"):
            continue
        env = _read_env(os.path.join(cell, "cell.env"))
        cal = caliber.complete(caliber.from_env(env))
        sides[(parent, side)] = (cal, _rows(os.path.join(cell, "run.log")))
    ratios, rejected = {}, {}
    for (parent, side), (cal_b, before) in sides.items():
        if side != "before":
            continue
        cal_a, after = sides.get((parent, "after"), (None, {}))
        for key in before.keys() | after.keys():
            b, a = before.get(key), after.get(key)
            if b and a and b[0] is not None and a[0] is not None and cal_b is not None and cal_b == cal_a:
                ratios.setdefault((key, cal_b), []).append((b[0] / a[0], b[1] or a[1]))
            else:
                rejected[key] = rejected.get(key, 0) + 1
    out = []
    for ((op, dtype, shape), cal), values in sorted(ratios.items(), key=lambda kv: (kv[0][0], kv[0][1] or ())):
        rs = [v for v, _ in values]
        out.append(
            {
                "op": op,
                "dtype": dtype,
                "shape": shape,
                "rounds": len(rs),
                "min": min(rs),
                "median": statistics.median(rs),
                "max": max(rs),
                "fallback": int(any(f for _, f in values)),
                "rejected": rejected.get((op, dtype, shape), 0),
                **dict(zip(caliber.NAMES, cal)),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    rs = sub.add_parser("rescore")
    rs.add_argument("top")
    rs.add_argument("--rule", default="v4")
    ab = sub.add_parser("ab")
    ab.add_argument("top")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    if args.what == "rescore":
        result = rescore(args.top, args.rule)
        print(json.dumps({"cells": result["cells"], "ttgir": result["ttgir"], "seconds": time.perf_counter() - t}))
    else:
        rows = ab_summary(args.top)
        json.dump(rows, sys.stdout)
        print(file=sys.stderr)
        print(json.dumps({"ranges": len(rows), "seconds": time.perf_counter() - t}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
