"""The benchmark suite: the store against the floor and the harness's own ways.

    python bench/run.py --scale 1

Generates the benchmark corpus with the project's generator (scale 1: 8 cards
x 60 ops x 6 rounds x 2 sides, 20 rows and 3 kernels of 5-50 KB TTGIR per
cell, the same IR in every round, plus the screening root it was planned
from), measures each figure several times with the two sides of each ratio
taken in the same iteration, prints one table of medians and ratios, and
writes it to bench/results.json. The scale-4 corpus is generated only for
the peak-memory figure (under /dev/shm where it has room: only memory is
measured on it); every corpus is deleted at the end (--keep keeps them).
Timings are wall-clock: whole commands as a user runs them (subprocesses)
where start-up is a fair part, library calls where start-up would hide the
work; the `how` column says which. A figure under a second (re-ingest,
rescore, ab query) is, in each iteration, the median of --samples calls.
"""

import argparse
import concurrent.futures
import contextlib
import json
import os
import platform
import resource
import sqlite3
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
import merge as merge_bench  # noqa: E402
import power  # noqa: E402
from zlstore import Store  # noqa: E402
from zlstore.show import judge  # noqa: E402

PYTHON = sys.executable
ZLSTORE = [PYTHON, "-m", "zlstore"]
CAMPAIGN = "campaign_20261013_090000"


# ---------------------------------------------------------------- helpers


def tree_bytes(top: Path) -> int:
    total = 0
    for directory, _, names in os.walk(top):
        for name in names:
            total += os.lstat(os.path.join(directory, name)).st_size
    return total


def db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def remove_db(path: Path):
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _tree_rss_kb(pid: int) -> int:
    """Resident KB of pid and every descendant (main ingest process and its workers)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, ()))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


@contextlib.contextmanager
def tree_rss_sampler(pid: int, enabled: bool):
    """Sample the RSS of pid's process tree every 50 ms while the block runs;
    yields a one-element list holding the peak in KB."""
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.wait(0.05):
            peak[0] = max(peak[0], _tree_rss_kb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    if enabled:
        sampler.start()
    try:
        yield peak
    finally:
        stop.set()
        if enabled:
            sampler.join()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_command(argv, sample_memory=False) -> dict:
    """Run a command; its wall seconds, CPU seconds (its own and its
    children's: the suite runs one command at a time), and, when sampled,
    the peak RSS of its whole process tree."""
    start, cpu = time.perf_counter(), _children_cpu()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    with tree_rss_sampler(process.pid, sample_memory) as peak:
        out, err = process.communicate()
        seconds = time.perf_counter() - start
    if process.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({process.returncode}): {err.decode()[-2000:]}")
    return {"seconds": seconds, "cpu": _children_cpu() - cpu, "stdout": out.decode(), "peak_tree_kb": peak[0]}


TIME = "/usr/bin/time"


def run_ingest_command(runs: Path, db_path: Path, sample_memory=False) -> dict:
    """`zlstore ingest RUNS --db DB` as a user runs it, with its peak RSS.

    Launched through /usr/bin/time: a child forked from this (large) process
    would carry this process's RSS high-water mark into its own ru_maxrss."""
    report = Path(f"{db_path}.time")
    launcher = [TIME, "-f", "%M %e %U %S", "-o", str(report)] if os.path.exists(TIME) else []
    start = time.perf_counter()
    process = subprocess.Popen(
        launcher + ZLSTORE + ["ingest", str(runs), "--db", str(db_path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    with tree_rss_sampler(process.pid, sample_memory) as peak:
        out = process.stdout.read()
        err = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise RuntimeError(f"zlstore ingest failed: {err.decode()[-2000:]}")
    summary = json.loads(out)
    maxrss, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    if launcher:
        fields = report.read_text().split()
        report.unlink()
        maxrss, cpu = int(fields[-4]), float(fields[-2]) + float(fields[-1])
    return {"seconds": seconds, "cpu": cpu, "maxrss_kb": maxrss, "peak_tree_kb": peak[0], "summary": summary}


def settle(corpus: Optional[Path] = None):
    """Write out, untimed, what the steps before left dirty in the page
    cache. Every timed command syncs (an SQLite checkpoint does), and ext4
    makes that sync wait for the other files' pending writes too: without
    this, the first command of each iteration paid for the merge, rescores
    and stores of the iteration before (an iteration's ratio came out 1.5-1.8
    with the floor first, 2.0-2.2 with the ingest first). Then, given the
    corpus the timed command reads, read it (warm_cache)."""
    os.sync()
    if corpus is not None:
        warm_cache(corpus)


def warm_cache(corpus: Path):
    """Read every file of the corpus, untimed, so that the command timed next
    reads it from the page cache, as the warm-up ingest meant every timed
    command to. Once is not enough on a machine whose kernel pages out memory
    it finds cold, page cache included (the Firecracker VM of BENCHMARKS.md's
    figures runs DAMON's pageout scheme: /sys/kernel/mm/damon/admin): an
    ingest or a floor run a few seconds after the warm-up read 19-184 MB of
    the corpus back from disk (/proc/diskstats), and the floor took 2.4-3.5 s
    for the same work. The floor, the ingest and the harness's two passes
    each start warm."""
    for directory, _, names in os.walk(corpus):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def compile_package():
    """zlstore's modules compiled to bytecode, untimed, as an installed
    package has them. Where PYTHONDONTWRITEBYTECODE is set (or the checkout
    is read-only) and a module changed since its .pyc, every timed command
    compiled it again: 0.1 s a command with none compiled."""
    import compileall  # noqa: PLC0415

    import zlstore  # noqa: PLC0415

    compileall.compile_dir(str(Path(zlstore.__file__).parent), quiet=1)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def median(values):
    return statistics.median(values) if values else None


def ab_cli_available() -> bool:
    probe = subprocess.run(ZLSTORE + ["ab", "--help"], capture_output=True, cwd=REPO)
    return probe.returncode == 0 and b"--json" in probe.stdout


# ---------------------------------------------------------------- measures


def forget_rule(db_path: Path, rule: str):
    """Make the store lack a rule: delete its fingerprints and IR digests."""
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("DELETE FROM fingerprints WHERE rule = ?", (rule,))
        conn.execute("DELETE FROM ir_digests WHERE rule = ?", (rule,))
    conn.close()


def store_rescore(db_path: Path, rule: str):
    """Store.compute_fingerprints(rule) after the rule was forgotten; returns
    (seconds, fingerprints computed, fingerprints by cell path)."""
    forget_rule(db_path, rule)
    with Store(db_path) as store:
        seconds, computed = timed(store.compute_fingerprints, rule)
        rows = store.conn.execute(
            "SELECT cells.path, f.fingerprint FROM fingerprints f JOIN cells ON cells.id = f.cell_id WHERE f.rule = ?",
            (rule,),
        ).fetchall()
    return seconds, computed, dict(rows)


def median_of(samples: int, measure, *args) -> float:
    """The median of samples calls of measure(*args), each giving seconds. A
    figure under a second is taken this way: one call is at the mercy of
    another tenant's burst, which a run of several seconds averages out."""
    return statistics.median(measure(*args) for _ in range(samples))


def reingest(runs: Path, db_path: Path, cells: int) -> float:
    """Store.ingest(RUNS) of the unchanged tree, on a new connection."""
    with Store(db_path) as store:
        seconds, summary = timed(store.ingest, runs)
    assert summary["cells_unchanged"] == cells, summary
    return seconds


def store_ab(db_path: Path, use_cli: bool):
    """The campaign's A/B ranges as `zlstore ab CAMPAIGN --json` prints them:
    the library call that builds that text, and the command when it exists."""
    with Store(db_path) as store:
        root = store.root(CAMPAIGN)
        seconds, text = timed(judge.ab_ranges_json, store, root)
        rows = json.loads(text)
    command = None
    if use_cli:
        command = run_command(ZLSTORE + ["ab", CAMPAIGN, "--db", str(db_path), "--json"])
        command["rows"] = len(json.loads(command.pop("stdout"))["rows"])
    return seconds, len(rows), command


def concurrency_figure() -> dict:
    script = BENCH / "concurrency.py"
    if not script.exists():
        return {"available": False, "why": "bench/concurrency.py is not there (issue 4)"}
    start = time.perf_counter()
    result = run_command([PYTHON, str(script), "--json"])
    report = json.loads(result["stdout"])
    report["seconds"] = time.perf_counter() - start
    report["available"] = True
    return report


# ---------------------------------------------------------------- the suite


def generate(dest: Path, scale: float) -> dict:
    """The project's generator (python -m tests.generator --corpus), in its own
    process: the corpus is not held in this one's memory."""
    manifest_file = dest.parent / f"{dest.name}.manifest.json"
    run_command(
        [
            PYTHON,
            "-m",
            "tests.generator",
            str(dest),
            "--corpus",
            "--scale",
            f"{scale:g}",
            "--cards",
            "8",
            "--rounds",
            "6",
            "--rows",
            "20",
            "--kernels",
            "3",
            "--seed",
            "0",
            "--manifest",
            str(manifest_file),
        ]
    )
    manifest = json.loads(manifest_file.read_text())
    manifest_file.unlink()
    manifest["tree_bytes"] = tree_bytes(dest)
    return manifest


SHM = Path("/dev/shm")


def memory_work_dir(args, work: Path) -> Path:
    """Where the scale-4 corpus goes. Only its ingest's peak RSS is measured,
    which a file system in memory does not change (file pages are not a
    process's RSS), so it goes to /dev/shm where that has room: writing and
    deleting 2.6 GB there does not queue on the disk that the timed figures
    read from, nor make a run over its ten minutes when that disk is slow."""
    if args.memory_work:
        return Path(args.memory_work)
    needed = 4e9 * args.scale
    if not args.work and SHM.is_dir() and shutil.disk_usage(SHM).free > needed:
        return Path(tempfile.mkdtemp(prefix="zlstore-bench-", dir=SHM))
    return work


def suite(args) -> dict:
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="zlstore-bench-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    work4 = memory_work_dir(args, work)
    work4.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    log = lambda *a: print(f"[{time.perf_counter() - started:6.1f}s]", *a, file=sys.stderr, flush=True)
    runs = work / "runs"
    results = {"work": str(work), "memory_work": str(work4)}
    try:
        runs4 = work4 / "runs4"
        memory = not args.skip_memory
        log(
            f"generating the scale-{args.scale:g} corpus in {runs}"
            + (f" and, alongside, the scale-{4 * args.scale:g} one for peak memory in {runs4}" if memory else "")
        )
        with concurrent.futures.ThreadPoolExecutor(2) as both:  # two generator processes, nothing timed meanwhile
            later4 = both.submit(timed, generate, runs4, 4 * args.scale) if memory else None
            seconds, manifest = timed(generate, runs, args.scale)
            seconds4, manifest4 = later4.result() if memory else (None, None)
        results["corpus"] = {
            k: manifest[k] for k in ("cells", "campaign_cells", "rows", "ttgir_files", "distinct_ttgir", "tree_bytes")
        }
        results["corpus"]["generate_s"] = seconds
        log(
            f"{manifest['cells']} cells, {manifest['rows']} rows, {manifest['ttgir_files']} .ttgir "
            f"({manifest['distinct_ttgir']} distinct), {manifest['tree_bytes'] / 1e6:.0f} MB in {seconds:.0f} s"
        )
        use_cli = ab_cli_available()
        floor_db, db_path = work / "floor.db", work / "store.db"
        compile_package()
        # Warm-up: one untimed ingest reads every file once, so that every
        # timed run below starts from the same (warm) page cache.
        remove_db(db_path)
        warm = run_ingest_command(runs, db_path, sample_memory=True)
        results["memory1_tree_kb"] = warm["peak_tree_kb"]
        m = {
            k: []
            for k in (
                "floor",
                "floor_cpu",
                "ingest",
                "ingest_cpu",
                "ingest_rss",
                "reingest",
                "reingest_cmd",
                "rescore",
                "harness_rescore",
                "ab_library",
                "ab_command",
                "harness_ab",
                "merge",
            )
        }
        for i in range(args.repeat):
            order = ("floor", "ingest") if i % 2 == 0 else ("ingest", "floor")
            for what in order:
                if what == "floor":
                    remove_db(floor_db)
                    settle(runs)
                    r = run_command([PYTHON, str(BENCH / "floor.py"), str(runs), str(floor_db)])
                    m["floor"].append(r["seconds"])
                    m["floor_cpu"].append(r["cpu"])
                else:
                    remove_db(db_path)
                    settle(runs)
                    r = run_ingest_command(runs, db_path)
                    assert r["summary"]["cells_added"] == manifest["cells"], r["summary"]
                    m["ingest"].append(r["seconds"])
                    m["ingest_cpu"].append(r["cpu"])
                    m["ingest_rss"].append(r["maxrss_kb"])
            settle()
            m["merge"].append(merge_bench.merge_once(db_path, work, manifest["cells"]))  # the store just ingested
            settle()
            m["reingest"].append(median_of(args.samples, reingest, runs, db_path, manifest["cells"]))
            if i == 0:  # the whole command once, for the record (start-up included)
                m["reingest_cmd"].append(run_ingest_command(runs, db_path)["seconds"])
            log(
                f"round {i + 1}: floor {m['floor'][-1]:.1f} s, ingest {m['ingest'][-1]:.1f} s, "
                f"merge {m['merge'][-1]:.1f} s, re-ingest {m['reingest'][-1]:.2f} s"
            )

            samples = [store_rescore(db_path, args.rule) for _ in range(args.samples)]
            assert all(computed == manifest["cells"] for _, computed, _ in samples)
            stored = samples[-1][2]
            m["rescore"].append(statistics.median(seconds for seconds, _, _ in samples))
            if i < args.harness_repeat:
                warm_cache(runs)
                h_seconds, h = timed(harness.rescore, str(runs), args.rule)
                assert h["fingerprints"] == stored, "the harness and the store disagree"
                m["harness_rescore"].append(h_seconds)
            if args.extra_rule and i == 0:
                seconds, computed, stored = store_rescore(db_path, args.extra_rule)
                m["rescore_extra"] = [seconds]
                h_seconds, h = timed(harness.rescore, str(runs), args.extra_rule)
                assert h["fingerprints"] == stored, "the harness and the store disagree"
                m["harness_rescore_extra"] = [h_seconds]
                m["ingest_for_extra"] = [m["ingest"][-1]]
            seconds, n_rows, command = store_ab(db_path, use_cli and i == 0)
            m["ab_library"].append(
                statistics.median([seconds] + [store_ab(db_path, False)[0] for _ in range(args.samples - 1)])
            )
            if command:
                m["ab_command"].append(command["seconds"])
            warm_cache(runs / CAMPAIGN)
            h_seconds, h_rows = timed(harness.ab_summary, str(runs / CAMPAIGN))
            m["harness_ab"].append(h_seconds)
            log(
                f"round {i + 1}: rescore {m['rescore'][-1]:.2f} s"
                + (f" (harness {m['harness_rescore'][-1]:.1f} s)" if i < args.harness_repeat else "")
                + f", ab {m['ab_library'][-1]:.3f} s ({n_rows} ranges)"
                + (f", ab command {m['ab_command'][-1]:.2f} s" if command else "")
                + f" (harness {h_seconds:.1f} s, {len(h_rows)} ranges)"
            )
        results["db_bytes"] = db_bytes(db_path)
        results["measurements"] = m
        results["ab_via"] = "command" if use_cli else "library"
        remove_db(floor_db)

        if not args.skip_concurrency:
            log("8 writers / 1 writer (bench/concurrency.py)")
            results["concurrency"] = concurrency_figure()

        if memory:
            log(
                f"scale {4 * args.scale:g}: {manifest4['cells']} cells, {manifest4['tree_bytes'] / 1e6:.0f} MB "
                f"(generated in {seconds4:.0f} s)"
            )
            db4 = work4 / "store4.db"
            remove_db(db4)
            r4 = run_ingest_command(runs4, db4, sample_memory=True)
            log(
                f"scale-{4 * args.scale:g} ingest {r4['seconds']:.1f} s, peak RSS {r4['maxrss_kb'] / 1024:.0f} MB "
                f"(largest process), {r4['peak_tree_kb'] / 1024:.0f} MB (process tree)"
            )
            remove_db(db4)
            results["memory4"] = {
                "cells": manifest4["cells"],
                "seconds": r4["seconds"],
                "maxrss_kb": r4["maxrss_kb"],
                "peak_tree_kb": r4["peak_tree_kb"],
                "tree_bytes": manifest4["tree_bytes"],
            }
    finally:
        if not args.keep:  # rm, two at once: unlinking is most of it on this disk
            for rm in [subprocess.Popen(["rm", "-rf", "--", str(d)]) for d in (runs4, runs)]:
                rm.wait()
            subprocess.run(["rm", "-rf", "--", *{str(work), str(work4)}])
    results["suite_seconds"] = time.perf_counter() - started
    return results


# ---------------------------------------------------------------- the table


def table(results: dict, args) -> dict:
    m = results["measurements"]
    med = {k: median(v) for k, v in m.items()}

    def ratios(a, b):
        """Each iteration's ratio of a to b, and their median."""
        pairs = [x / y for x, y in zip(m[a], m[b])]
        return median(pairs)

    rows = []

    def row(figure, how, value, unit, target=None, ok=None, n=None):
        rows.append({"figure": figure, "how": how, "value": value, "unit": unit, "target": target, "met": ok, "n": n})

    cmd = "command (subprocess, wall)"
    lib = "library call (in-process, wall)"
    row("floor", "python bench/floor.py RUNS DB: " + cmd, med["floor"], "s", n=len(m["floor"]))
    row("ingest", "zlstore ingest RUNS --db DB (new db): " + cmd, med["ingest"], "s", n=len(m["ingest"]))
    r = ratios("ingest", "floor")
    row("ingest / floor", "per-iteration ratio, median", r, "x", "<= 2.0", r <= 2.0)
    if m.get("floor_cpu") and m.get("ingest_cpu"):
        row(
            "ingest CPU / floor CPU",
            f"CPU seconds (user + system; the ingest's main process and its workers) "
            f"{med['ingest_cpu']:.2f} s / {med['floor_cpu']:.2f} s, per-iteration ratio, median: what other "
            "tenants move least (on two cores the ingest's wall is about its CPU over two, plus its serial "
            "start and end)",
            ratios("ingest_cpu", "floor_cpu"),
            "x",
            "report",
        )
    row(
        "merge",
        "zlstore merge DB --db MERGED (the store just ingested, into a new db): " + cmd,
        med["merge"],
        "s",
        n=len(m["merge"]),
    )
    r = ratios("ingest", "merge")
    row(
        "merge / ingest throughput",
        "cells/s of the merge over cells/s of the ingest (the same cells), per iteration (bench/merge.py)",
        r,
        "x",
        ">= 1.0",
        r >= 1.0,
    )
    short = f", each iteration the median of {args.samples} calls"
    row("re-ingest", "Store.ingest(RUNS), unchanged tree: " + lib + short, med["reingest"], "s", n=len(m["reingest"]))
    row(
        "re-ingest (command)",
        "zlstore ingest RUNS again: " + cmd + ", start-up included, first iteration",
        med["reingest_cmd"],
        "s",
    )
    r = ratios("reingest", "ingest")
    row("re-ingest / ingest", "library re-ingest / ingest command, per iteration", r, "x", "<= 0.03", r <= 0.03)
    row(
        "rescore",
        f"Store.compute_fingerprints('{args.rule}') after deleting its fingerprints and IR digests: " + lib + short,
        med["rescore"],
        "s",
        n=len(m["rescore"]),
    )
    r = ratios("rescore", "ingest")
    row("rescore / ingest", "per iteration", r, "x", "<= 0.05", r <= 0.05)
    row(
        "harness rescore",
        f"re-read + normalize + hash every .ttgir under {args.rule} (bench/harness.py): " + lib,
        med["harness_rescore"],
        "s",
        n=len(m["harness_rescore"]),
    )
    k = len(m["harness_rescore"])
    r = median([x / y for x, y in zip(m["harness_rescore"], m["rescore"][:k])])
    row("harness rescore / store rescore", "per iteration", r, "x", ">= 10", r >= 10)
    if m.get("rescore_extra"):
        x = args.extra_rule
        row(f"rescore, {x} (supplement)", f"the same under {x} (one iteration): " + lib, m["rescore_extra"][0], "s")
        row(
            f"rescore / ingest, {x}",
            "supplement, not the target row",
            m["rescore_extra"][0] / m["ingest_for_extra"][0],
            "x",
        )
        row(f"harness rescore, {x}", "supplement: " + lib, m["harness_rescore_extra"][0], "s")
        row(
            f"harness rescore / store rescore, {x}",
            "supplement, not the target row",
            m["harness_rescore_extra"][0] / m["rescore_extra"][0],
            "x",
        )
    row(
        "harness A/B summary",
        "re-read every campaign run.log, pair in Python (bench/harness.py): " + lib,
        med["harness_ab"],
        "s",
        n=len(m["harness_ab"]),
    )
    row(
        "ab query",
        f"judge.ab_ranges_json(store, '{CAMPAIGN}'), the text `zlstore ab --json` prints "
        "(ab_ranges, as JSON built by SQLite): " + lib + short,
        med["ab_library"],
        "s",
        n=len(m["ab_library"]),
    )
    if m["ab_command"]:
        row("ab command", f"zlstore ab {CAMPAIGN} --json: " + cmd + ", first iteration", med["ab_command"], "s")
    r = ratios("harness_ab", "ab_library")
    row("log re-parse / ab query", "harness A/B summary / ab library call, per iteration", r, "x", ">= 50", r >= 50)
    if m["ab_command"]:
        r = m["harness_ab"][0] / m["ab_command"][0]
        row(
            "log re-parse / ab command",
            "harness A/B summary / zlstore ab --json (start-up included), first iteration",
            r,
            "x",
        )
    if "memory4" in results:
        rss1 = median(m["ingest_rss"])
        rss4 = results["memory4"]["maxrss_kb"]
        row(
            "peak RSS, scale 1",
            "zlstore ingest: /usr/bin/time %M (largest process: main or a worker)",
            rss1 / 1024,
            "MB",
            n=len(m["ingest_rss"]),
        )
        row("peak RSS, scale 4", "the same, the scale-4 corpus (one run)", rss4 / 1024, "MB")
        row("peak memory, scale 4 / scale 1", "ratio of the two above", rss4 / rss1, "x", "<= 1.2", rss4 / rss1 <= 1.2)
        tree1, tree4 = results["memory1_tree_kb"], results["memory4"]["peak_tree_kb"]
        row(
            "peak RSS, process tree, scale 4 / scale 1",
            f"main + workers summed, sampled every 50 ms: {tree4 / 1024:.0f} MB / {tree1 / 1024:.0f} MB",
            tree4 / tree1,
            "x",
            "<= 1.2",
            tree4 / tree1 <= 1.2,
        )
    size = results["db_bytes"] / results["corpus"]["tree_bytes"]
    row(
        "database / tree size",
        f"{results['db_bytes'] / 1e6:.1f} MB db / "
        f"{results['corpus']['tree_bytes'] / 1e6:.0f} MB runs tree (apparent sizes)",
        size,
        "x",
        "report",
    )
    conc = results.get("concurrency")
    if conc and conc.get("available"):
        row(
            "8 writers / 1 writer",
            f"bench/concurrency.py --json ({conc['cells']} cells, "
            f"failed writes {conc['single']['failed']} / {conc['many']['failed']})",
            conc["ratio"],
            "x",
            ">= 0.5",
            conc["ratio"] >= 0.5 and conc["many"]["failed"] == 0,
        )
    elif conc:
        row("8 writers / 1 writer", conc["why"], None, "", ">= 0.5", None)
    rows.extend(adaptive_rows(results.get("adaptive") or (), args.adaptive_roots))
    return {
        "rows": rows,
        "machine": machine(),
        "command": " ".join(["python", "bench/run.py"] + sys.argv[1:]),
        "corpus": results["corpus"],
        "suite_seconds": results["suite_seconds"],
        "ab_via": results.get("ab_via"),
        "raw": m,
        "memory4": results.get("memory4"),
        "concurrency": conc,
    }


def adaptive_rows(targets, roots: int) -> list:
    """The until-decided campaign's targets (power.adaptive_targets) as rows of the table."""
    how = f"bench/power.py --adaptive-only --adaptive-roots {roots}: simulated, no timing"
    return [
        {
            # a few figures in one text go into the figure's name
            "figure": what if isinstance(value, float) else f"{what}: {value}",
            "how": how,
            "value": value if isinstance(value, float) else None,
            "unit": "",
            "target": target,
            "met": met,
            "n": None,
        }
        for what, value, target, met in targets
    ]


def machine() -> dict:
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "load_average_at_end": os.getloadavg(),
    }


def render(t: dict) -> str:
    lines = ["| figure | value | target | met | how |", "|---|---|---|---|---|"]
    for r in t["rows"]:
        v = r["value"]
        value = (
            ("" if r["target"] == "report" else "n/a")
            if v is None
            else (f"{v:.3f} {r['unit']}" if v < 10 else f"{v:.1f} {r['unit']}")
        )
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        n = f" (median of {r['n']})" if r.get("n") else ""
        lines.append(f"| {r['figure']} | {value}{n} | {r['target'] or ''} | {met} | {r['how']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="corpus size (1: 5,760 campaign cells)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="iterations of each scale-1 measurement (five: this machine moves an iteration by up "
        "to a fifth, and a median of three landed either side of a target)",
    )
    ap.add_argument("--harness-repeat", type=int, default=3, help="iterations of the (slow) harness rescore")
    ap.add_argument(
        "--samples",
        type=int,
        default=3,
        help="calls per iteration of each figure under a second (re-ingest, rescore, ab query): "
        "the iteration's value is their median",
    )
    ap.add_argument(
        "--rule",
        default="v3",
        help="the rule the store is made to lack for the rescore figures "
        "(default v3, the current rule: what the harness's RESCORE re-judged against)",
    )
    ap.add_argument("--extra-rule", default="", help="also measure this rule once (e.g. v4), as a supplement")
    ap.add_argument("--work", default=None, help="work directory (default: a new one under /tmp)")
    ap.add_argument(
        "--memory-work",
        default=None,
        help="work directory of the scale-4 corpus (default: a new one under /dev/shm where it has "
        "room, else the work directory)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the corpora and databases")
    ap.add_argument("--skip-memory", action="store_true", help="no scale-4 corpus / peak memory figure")
    ap.add_argument("--skip-concurrency", action="store_true")
    ap.add_argument(
        "--adaptive-roots",
        type=int,
        default=40,
        help="roots per noise of the until-decided campaign's simulated targets, as BENCHMARKS.md's "
        "(0: none; 1-3 s a root)",
    )
    ap.add_argument("--json", default=str(BENCH / "results.json"), help="where to write the table")
    args = ap.parse_args(argv)
    results = suite(args)
    if args.adaptive_roots:  # no timing: after the timed figures, never among them
        results["adaptive"] = power.adaptive_targets(power.simulate_adaptive(args.adaptive_roots))
    t = table(results, args)
    text = render(t)
    print(text)
    print(f"\nsuite: {results['suite_seconds']:.0f} s; machine: {t['machine']}")
    Path(args.json).write_text(json.dumps(t, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
