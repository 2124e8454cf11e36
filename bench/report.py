"""The report of a big campaign against its `ab --json` (issue 43):

    python bench/report.py

Generates a campaign of 5,000 ranges with the project's generator (2 cards
x 125 ops x 20 shapes, 3 rounds, 1 kernel a cell), ingests it, then times,
in each of --repeat iterations and in alternating order, the three commands
as a user runs them (subprocesses, wall clock, start-up included): `zlstore
ab CAMPAIGN --json`, `zlstore report CAMPAIGN -o FILE.md` and `zlstore
report CAMPAIGN --html -o FILE.html`. The figure is each report's time over
the `ab --json` of the same iteration, the median over the iterations
(target: at most 10). It checks what it times: the picture draws at most
forest.MAX_ROWS rows, and the Markdown holds every range.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from run import PYTHON, ZLSTORE, compile_package, machine, remove_db, run_command  # noqa: E402

from zlstore.show import forest  # noqa: E402

CAMPAIGN = "campaign_20261013_090000"
TARGET = 10.0


def generate(dest: Path, cards: int, ops: int, shapes: int) -> dict:
    """The generator's corpus: cards x ops ops of `shapes` shapes each, one range a shape."""
    manifest = dest.parent / "manifest.json"
    scale = ops / 60  # the generator's ops per card at scale 1
    run_command(
        [PYTHON, "-m", "tests.generator", str(dest), "--corpus", "--scale", f"{scale:.6f}", "--cards", str(cards)]
        + ["--rounds", "3", "--rows", str(shapes), "--kernels", "1", "--seed", "0", "--manifest", str(manifest)]
    )
    return json.loads(manifest.read_text())


def measure(args) -> dict:
    work = Path(args.work or tempfile.mkdtemp(prefix="zlstore-bench-report-"))
    runs, db = work / "runs", work / "store.db"
    started = time.perf_counter()
    log = lambda *a: print(f"[{time.perf_counter() - started:6.1f}s]", *a, file=sys.stderr, flush=True)
    log(f"generating {args.cards} cards x {args.ops} ops x {args.shapes} shapes in {runs}")
    manifest = generate(runs, args.cards, args.ops, args.shapes)
    remove_db(db)
    run_command(ZLSTORE + ["ingest", str(runs), "--db", str(db)])
    compile_package()
    ab = ZLSTORE + ["ab", CAMPAIGN, "--json", "--db", str(db)]
    md = ZLSTORE + ["report", CAMPAIGN, "-o", str(work / "report.md"), "--db", str(db)]
    page = ZLSTORE + ["report", CAMPAIGN, "--html", "-o", str(work / "report.html"), "--db", str(db)]
    ranges = len(json.loads(run_command(ab)["stdout"])["rows"])  # untimed: warms the page cache
    log(f"{manifest['campaign_cells']} campaign cells, {ranges} ranges")
    m: dict = {"ab": [], "md": [], "html": []}
    cpu: dict = {"ab": [], "md": [], "html": []}
    for i in range(args.repeat):
        order = [("ab", ab), ("md", md), ("html", page)]
        for name, argv in order if i % 2 == 0 else order[::-1]:
            ran = run_command(argv)
            m[name].append(ran["seconds"])
            cpu[name].append(ran["cpu"])
        log(
            f"iteration {i + 1}: ab --json {m['ab'][-1]:.2f} s, report md {m['md'][-1]:.2f} s, html {m['html'][-1]:.2f} s"
        )
    drawn = forest.read_back((work / "report.svg").read_text())
    assert len(drawn) <= forest.MAX_ROWS, len(drawn)
    text = (work / "report.md").read_text()
    assert f"all {ranges} ranges" in text, "the Markdown does not hold every range"
    return {"ranges": ranges, "drawn": len(drawn), "seconds": m, "cpu": cpu, "work": str(work)}


def table(result: dict) -> str:
    m = result["seconds"]
    lines = ["| figure | value | target | met |", "|---|---|---|---|"]
    lines.append(f"| ab --json ({result['ranges']} ranges) | {statistics.median(m['ab']):.2f} s | | |")
    for name, label in (("md", "report -o FILE.md"), ("html", "report --html")):
        ratios = [x / y for x, y in zip(m[name], m["ab"])]
        ratio = statistics.median(ratios)
        result[f"{name}_ratio"] = ratio
        lines.append(f"| {label} | {statistics.median(m[name]):.2f} s | | |")
        lines.append(
            f"| **{label} / ab --json** | **{ratio:.2f}** | <= {TARGET:g} | {'yes' if ratio <= TARGET else '**no**'} |"
        )
        cpu = statistics.median(x / y for x, y in zip(result["cpu"][name], result["cpu"]["ab"]))
        lines.append(f"| {label} / ab --json, CPU seconds | {cpu:.2f} | report | |")
    lines.append(
        f"| rows drawn | {result['drawn']} | <= {forest.MAX_ROWS} | {'yes' if result['drawn'] <= 60 else 'no'} |"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=int, default=2)
    ap.add_argument("--ops", type=int, default=125, help="ops per card (125 x 2 cards x 20 shapes: 5,000 ranges)")
    ap.add_argument("--shapes", type=int, default=20, help="shapes per op: one range each")
    ap.add_argument("--repeat", type=int, default=5, help="iterations; each figure is their median")
    ap.add_argument("--work", default=None, help="work directory (default: a new one under /tmp)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON to this file")
    args = ap.parse_args(argv)
    result = measure(args)
    print(table(result))
    print(f"\nmachine: {machine()}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["md_ratio"] <= TARGET and result["html_ratio"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
