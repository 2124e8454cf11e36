"""Datasette pages at scale: one campaign's pages in a team's store of many
campaigns against the same pages in a store of that campaign alone.

Builds two stores from the project's generator (tests/generator.py): one
campaign (with the screening root it was planned from) generated once, then
copied under other root names (hard links: the cells are the same files)
into N campaigns. `one.db` holds the first copy; `all.db` every copy. Then,
in-process (datasette's test client, no network), with datasette's default
time limit (sql_time_limit_ms 1000, not zlstore serve's 5000), each page is
asked once to warm it and timed five times (the median):

- the pages of one campaign: every table and view filtered to the
  campaign's root (`?root=NAME`), every canned query with the campaign's
  root (and an op of it), the front page, the database page and the
  charts: the figure is the worst ratio all / one (target <= 1.5);
- every table and view whole (its first page, with its count and facets)
  in the store of N campaigns: the figure is the slowest (target < 1000 ms).

A page that does not answer 200, or whose facets or count timed out,
is named. The defaults (40 campaigns of 2 cards x 15 ops, 20 shapes, 6
rounds: 420 cells and 600 ranges each, 16,800 cells in all) keep it
feasible on a 2-core machine in a few minutes; --ops-per-card and
--campaigns scale it.

    python bench/web.py                   # the defaults
    python bench/web.py --campaigns 8 --json web.json
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlencode

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from zlstore.serve import datasette_site  # noqa: E402
from zlstore.serve import serve as serving  # noqa: E402

PYTHON = sys.executable
SCREEN, CAMPAIGN = "ab_rlc_20261012_101500", "campaign_20261013_090000"
DATASETTE_DEFAULT_MS = 1000
REPEATS = 5


def generate(dest: Path, ops_per_card: int, cards: int, rows: int, rounds: int):
    """One campaign and its screening root (the generator's corpus)."""
    subprocess.run(
        [PYTHON, "-m", "tests.generator", str(dest), "--corpus", "--scale", f"{ops_per_card / 60:g}"]
        + ["--cards", str(cards), "--rounds", str(rounds), "--rows", str(rows), "--kernels", "1", "--force"],
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )


def _names(i: int):
    """The i-th copy's screening and campaign root names (a day apiece)."""
    day = 1 + i % 28
    month = 1 + (i // 28) % 12
    return f"ab_rlc_2026{month:02d}{day:02d}_101500", f"campaign_2026{month:02d}{day:02d}_120000"


def _rewrite(path: Path, old: str, new: str):
    """A hard-linked file rewritten as a file of its own."""
    text = path.read_text().replace(old, new)
    path.unlink()
    path.write_text(text)


def copy_campaign(base: Path, dest: Path, i: int) -> str:
    """Copy the generated campaign under the i-th names; returns the campaign's name."""
    screen, campaign = _names(i)
    dest.mkdir(parents=True)
    shutil.copytree(base / SCREEN, dest / screen, copy_function=os.link)
    shutil.copytree(base / CAMPAIGN, dest / campaign, copy_function=os.link)
    _rewrite(dest / campaign / "campaign.env", SCREEN, screen)
    return campaign


def ingest(db: Path, trees):
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    started = time.perf_counter()
    subprocess.run(
        [PYTHON, "-m", "zlstore", "ingest", *map(str, trees), "--db", str(db)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def _columns(ds, name: str) -> list:
    conn = ds.get_database(datasette_site.DB_NAME).connect()
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info([{name}])")]
    finally:
        conn.close()


def _relations(ds) -> list:
    conn = ds.get_database(datasette_site.DB_NAME).connect()
    try:
        return [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite%' ORDER BY name"
            )
        ]
    finally:
        conn.close()


def _an_op(ds, campaign: str) -> str:
    conn = ds.get_database(datasette_site.DB_NAME).connect()
    try:
        return conn.execute(
            "SELECT op FROM cells JOIN roots ON roots.id = cells.root_id WHERE roots.name = ? ORDER BY op LIMIT 1",
            (campaign,),
        ).fetchone()[0]
    finally:
        conn.close()


def pages(ds, campaign: str, screen: str) -> dict:
    """{"campaign": [path...], "whole": [path...]} for the store ds serves:
    the pages of one campaign (and of the screening root it was planned
    from), and every table and view whole."""
    db = datasette_site.DB_NAME
    op = _an_op(ds, campaign)
    metadata = ds.metadata() or {}
    queries = metadata.get("databases", {}).get(db, {}).get("queries", {})
    of_campaign = ["/", f"/{db}", "/-/dashboards/campaign?" + urlencode({"root": campaign})]
    whole = []
    for name in _relations(ds):
        whole.append(f"/{db}/{name}")
        if "root" in _columns(ds, name):
            of_campaign += [f"/{db}/{name}?" + urlencode({"root": root}) for root in (campaign, screen)]
    for name, query in queries.items():
        params = re.findall(r"(?<!:):(\w+)", query.get("sql", ""))
        values = {"root": campaign, "op": op}
        given = {p: values.get(p, "") for p in dict.fromkeys(params)}
        # a question of one campaign (or op) is one campaign's page; one of the whole store is a whole page
        (of_campaign if {"root", "op"} & set(given) else whole).append(f"/{db}/{quote(name)}?" + urlencode(given))
    return {"campaign": of_campaign, "whole": whole}


def timed(client, path: str) -> dict:
    client.get(path)  # warm
    times, status, text = [], None, ""
    for _ in range(REPEATS):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        status, text = response.status, response.text
    return {
        "ms": statistics.median(times),
        "status": status,
        "timed_out": "facets timed out" in text.lower() or "took too long" in text.lower(),
    }


def measure(db: Path, paths=None, kinds=("campaign", "whole")):
    """Each page's timing in the store at db: ({kind: {path: timing}}, paths)."""
    ds = serving.datasette_app(db, settings={"sql_time_limit_ms": DATASETTE_DEFAULT_MS})
    from datasette.utils.testing import TestClient

    client = TestClient(ds)
    paths = paths or pages(ds, *reversed(_names(0)))
    paths = {kind: listed for kind, listed in paths.items() if kind in kinds}
    measured: dict = {}
    for kind, listed in paths.items():
        for path in listed:
            measured.setdefault(kind, {})[path] = timed(client, path)
            print(f"  {db.name} {measured[kind][path]['ms']:8.1f} ms  {path}", file=sys.stderr, flush=True)
    return measured, paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=40)
    parser.add_argument("--ops-per-card", type=int, default=15)
    parser.add_argument("--cards", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--work", default=None, help="keep the trees and stores here (default: a temporary directory)")
    parser.add_argument("--reuse", action="store_true", help="reuse the stores in --work")
    parser.add_argument("--json", dest="json_file", default=None)
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="zlstore-web-"))
    work.mkdir(parents=True, exist_ok=True)
    one_db, all_db = work / "one.db", work / "all.db"
    built = {}
    if not (args.reuse and one_db.exists() and all_db.exists()):
        shutil.rmtree(work / "runs", ignore_errors=True)
        generate(work / "base", args.ops_per_card, args.cards, args.rows, args.rounds)
        trees = []
        for i in range(args.campaigns):
            copy_campaign(work / "base", work / "runs" / f"t{i:02d}", i)
            trees.append(work / "runs" / f"t{i:02d}")
        built["ingest_one_s"] = ingest(one_db, trees[:1])
        built["ingest_all_s"] = ingest(all_db, trees)
    # The store of one campaign, once opened by a writer (datasette_app):
    # brought up to date, as zlstore serve finds a store.
    one, paths = measure(one_db, kinds=("campaign",))
    every, paths = measure(all_db)
    rows = []
    for path in paths["campaign"]:
        a, b = one["campaign"][path], every["campaign"][path]
        rows.append({"page": path, "one_ms": a["ms"], "all_ms": b["ms"], "ratio": b["ms"] / a["ms"], **_flags(a, b)})
    whole = [
        {"page": path, "all_ms": every["whole"][path]["ms"], **_flags(every["whole"][path])} for path in paths["whole"]
    ]
    worst = max(rows, key=lambda r: r["ratio"])
    slowest = max(whole, key=lambda r: r["all_ms"])
    report = {
        "campaigns": args.campaigns,
        "ops_per_card": args.ops_per_card,
        "cards": args.cards,
        "rows": args.rows,
        "rounds": args.rounds,
        **built,
        "worst_ratio": worst,
        "slowest_whole": slowest,
        "pages": rows,
        "whole": whole,
    }
    for row in sorted(rows, key=lambda r: -r["ratio"]):
        print(f"{row['ratio']:6.2f}  {row['one_ms']:8.1f} {row['all_ms']:8.1f} ms  {row['status']}  {row['page']}")
    print()
    for row in sorted(whole, key=lambda r: -r["all_ms"]):
        print(f"        {row['all_ms']:8.1f} ms  {row['status']}  {row['page']}")
    print(
        f"\nworst ratio {worst['ratio']:.2f} ({worst['page']}; target <= 1.5); slowest whole page "
        f"{slowest['all_ms']:.0f} ms ({slowest['page']}; target < {DATASETTE_DEFAULT_MS})"
    )
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report, indent=1))
    return 0


def _flags(*measured) -> dict:
    statuses = {m["status"] for m in measured}
    return {
        "status": statuses.pop() if len(statuses) == 1 else "/".join(map(str, sorted(statuses))),
        "timed_out": any(m["timed_out"] for m in measured),
    }


if __name__ == "__main__":
    sys.exit(main())
