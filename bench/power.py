"""The power table: how often zlstore's findings are right, over many seeds.

    python bench/power.py [--roots 40] [--out bench/power.json]

Generates repeat runs with known effects (tests/effects.py: every side of
every round draws its own log-normal noise), ingests them into one store
and reads each range's finding from the view, as `zlstore ab` does. Each
root mixes 10 shapes without effect, 10 at 1.10x and 10 at 2.5x under one
noise level and one round count, so that Benjamini-Hochberg works on a
realistic family; A/A roots (30 shapes without effect, noise from 0.1% to a
factor of e, like the real H200 campaign) give the false-finding rate of a
campaign in which the switch does nothing. Prints one table and writes it
as JSON. Targets (issue 12): no-effect ranges called faster or slower
<= 5%; a consistent 2.5x (noise up to 10%) found at 4 rounds >= 99%; 10%
found at 6 rounds with 2% noise >= 90%. Noise is the log-normal sigma of
one measurement (one side of one round); a round's ratio varies by about
sqrt(2) times as much.

    python bench/power.py --adaptive-only [--adaptive-roots 40]

The until-decided campaign (issue 42; zlstore/store/sequential.py), simulated
round by round: roots of 8 ops x 5 shapes (effects none / 2% / 10% / 2.5x,
two ops each; A/A roots all none) at noise 1% to 10%, MAX 12 rounds, at
least 3. After every round each running op's ranges are judged, an op all
of whose ranges are decided stops, the others run another round. The same
campaign is run with the anytime-valid rule (stats.anytime_t, anytime_p,
e-BH) and with today's t-test re-run after every round, and beside them
the fixed campaign at MAX. The statistics are stats.py's functions and the
finding is names.FINDINGS' CASE run by SQLite (macros: the view's own
condition); Benjamini-Hochberg is ranges.FAMILIES' rule, in numpy. No
store is written: a round costs microseconds, not an ingest (bench/run.py
reports these targets in a few seconds). Targets: A/A shapes called faster
or slower <= 5% (adaptive); cells spent adaptive / fixed <= 0.5 for the
same set of decided ranges (the ranges both campaigns decide, each costing
its op's rounds: the cells that measured it), on mixed roots, on A/A roots
and on both, beside the floor today's test re-run after every round
reaches (its interval is the narrowest at every round, but not valid);
2.5x decided by round 4 >= 0.95 (noise up to 10%), beside what that would
take of any rule at the worst noise; power at MAX at most 10 points below
the fixed campaign's."""

import argparse
import json
import math
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.effects import Shape, shape_key, write_repeat_root  # noqa: E402
from zlstore import Store, stats  # noqa: E402
from zlstore.show import judge  # noqa: E402
from zlstore.store import macros  # noqa: E402
from zlstore.names import DECIDING_FINDINGS  # noqa: E402

NOISE = (0.02, 0.05, 0.1, 0.3)  # per side and round: a measurement wanders by about this
ROUNDS = (3, 4, 6)
EFFECTS = (1.0, 1.1, 2.5)
PER_EFFECT = 10
AA_SIGMAS = (0.001, 0.005, 0.02, 0.1, 0.5, 1.0)  # an A/A campaign: quiet large shapes to launch-bound ones


def mixed_shapes(sigma):
    return [Shape(effect, sigma) for effect in EFFECTS for _ in range(PER_EFFECT)]


def aa_shapes():
    return [Shape(1.0, sigma) for sigma in AA_SIGMAS for _ in range(PER_EFFECT // 2)]


def generate(top: Path, roots: int) -> dict:
    """Write every root; returns name -> (kind, sigma, rounds, shapes)."""
    plan = {}
    for sigma in NOISE:
        for rounds in ROUNDS:
            for seed in range(roots):
                name = f"ab_s{int(sigma * 1000):04d}_r{rounds}_{seed:03d}"
                write_repeat_root(top, name, mixed_shapes(sigma), rounds, seed)
                plan[name] = ("mixed", sigma, rounds, mixed_shapes(sigma))
    for rounds in ROUNDS:
        for seed in range(roots):
            name = f"ab_aa_r{rounds}_{seed:03d}"
            write_repeat_root(top, name, aa_shapes(), rounds, seed)
            plan[name] = ("aa", None, rounds, aa_shapes())
    return plan


def tally(store, plan) -> dict:
    """Per (kind, sigma, rounds, effect): ranges and how each was called."""
    counts = defaultdict(lambda: defaultdict(int))
    roots_with_false = defaultdict(int)
    for name, (kind, sigma, rounds, shapes) in plan.items():
        got = {r["shape"]: r["finding"] for r in judge.ab_ranges(store, name)}
        false_here = 0
        for i, shape in enumerate(shapes):
            finding = got[shape_key(i)]
            key = (kind, sigma, rounds, shape.effect)
            counts[key]["ranges"] += 1
            counts[key][finding] += 1
            if shape.effect == 1.0 and finding in ("faster", "slower"):
                false_here += 1
            if shape.effect > 1 and finding == "faster":
                counts[key]["found"] += 1
        if kind == "aa":
            roots_with_false[rounds] += bool(false_here)
    return counts, roots_with_false


def table(counts, roots_with_false, roots) -> list:
    rows = []
    for (kind, sigma, rounds, effect), c in sorted(
        counts.items(), key=lambda kv: (kv[0][0] == "aa", kv[0][1] or 0, kv[0][2], kv[0][3])
    ):
        n = c["ranges"]
        row = {
            "roots": "A/A, noise 0.1% to x2.7" if kind == "aa" else f"mixed, noise {sigma:.0%}",
            "rounds": rounds,
            "effect": effect,
            "ranges": n,
            "faster": c["faster"] / n,
            "slower": c["slower"] / n,
            "no change": c["no change"] / n,
            "inconclusive": c["inconclusive"] / n,
            "too few rounds": c["too few rounds"] / n,
        }
        if effect == 1.0:
            row["called (false)"] = (c["faster"] + c["slower"]) / n
        else:
            row["found"] = c["found"] / n
        if kind == "aa":
            row["roots with any false finding"] = roots_with_false[rounds] / roots
        rows.append(row)
    return rows


def targets(rows) -> list:
    def share(kind_prefix, rounds, effect, sigma_text, key):
        picked = [
            r
            for r in rows
            if r["roots"].startswith(kind_prefix)
            and r["rounds"] == rounds
            and r["effect"] == effect
            and (sigma_text is None or sigma_text in r["roots"])
        ]
        return min(r[key] for r in picked) if key == "found" else max(r[key] for r in picked)

    worst_false = max(r["called (false)"] for r in rows if r["effect"] == 1.0)
    # "a consistent 2.5x": rounds that agree within 10%; at 30% a round says little
    consistent = min(share("mixed", 4, 2.5, f"noise {sigma:.0%}", "found") for sigma in NOISE if sigma <= 0.1)
    return [
        ("no-effect ranges called faster or slower (worst cell)", worst_false, "<= 0.05", worst_false <= 0.05),
        ("2.5x found at 4 rounds, noise up to 10%", consistent, ">= 0.99", consistent >= 0.99),
        (
            "10% found at 6 rounds, 2% noise",
            share("mixed", 6, 1.1, "noise 2%", "found"),
            ">= 0.90",
            share("mixed", 6, 1.1, "noise 2%", "found") >= 0.90,
        ),
    ]


# ---------------------------------------------------------------- until decided (issue 42)

ADAPTIVE_NOISE = (0.01, 0.02, 0.05, 0.10)  # per side and round, as NOISE
ADAPTIVE_EFFECTS = (1.0, 1.02, 1.10, 2.5)
MAX_ROUNDS = 12
SHAPES_PER_OP = 5
OPS_PER_EFFECT = 2
ADAPTIVE_SEED = 42


class _Judge:
    """A root's findings at given rounds per range, under a rule ("anytime":
    an until-decided root's; "fixed": today's), as ranges.py and the view
    make them: stats.py's test, Benjamini-Hochberg over the root, and
    names.FINDINGS' CASE run by SQLite."""

    def __init__(self):
        import sqlite3  # noqa: PLC0415

        self.conn = sqlite3.connect(":memory:")
        stats.register(self.conn)
        self.conn.execute(
            "CREATE TABLE finding_inputs (i, rounds, ci_low, ci_high, q_value, q_max, min_effect, min_rounds)"
        )
        self.case = macros.render_schema("SELECT [[case findings]] FROM finding_inputs ORDER BY i")
        self.settings = (float(judge_settings["q_max"]), float(judge_settings["min_effect"]), stats.MIN_ROUNDS)

    def __call__(self, logs, rounds, rule):
        import numpy as np  # noqa: PLC0415

        means = np.array([logs[i, :n].mean() for i, n in enumerate(rounds)])
        sds = np.array([logs[i, :n].std(ddof=1) if n > 1 else np.nan for i, n in enumerate(rounds)])
        test = stats.anytime_p if rule == "anytime" else stats.t_test_p
        p = [test(float(m), float(sd), int(n)) for m, sd, n in zip(means, sds, rounds)]
        q = benjamini_hochberg(p)
        q_max, min_effect, min_rounds = self.settings
        rows = []
        for i, (m, sd, n) in enumerate(zip(means, sds, rounds)):
            crit = (stats.anytime_t(int(n)) if rule == "anytime" else stats.t_critical(int(n) - 1)) if n >= 3 else None
            low = high = None
            if crit is not None and np.isfinite(sd):
                low, high = math.exp(m - crit * sd / math.sqrt(n)), math.exp(m + crit * sd / math.sqrt(n))
            rows.append((i, int(n), low, high, q[i], q_max, min_effect, min_rounds))
        self.conn.execute("DELETE FROM finding_inputs")
        self.conn.executemany("INSERT INTO finding_inputs VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return [finding for (finding,) in self.conn.execute(self.case)], p


judge_settings = {"q_max": "0.05", "min_effect": "0.02"}


def benjamini_hochberg(p):
    """q-values of the tested ranges (None: untested), as ranges.FAMILIES adjusts a root's."""
    tested = sorted((value, i) for i, value in enumerate(p) if value is not None)
    q = [None] * len(p)
    smallest = 1.0
    for rank in range(len(tested), 0, -1):
        value, i = tested[rank - 1]
        smallest = min(smallest, value * len(tested) / rank)
        q[i] = min(1.0, smallest)
    return q


def run_campaign(logs, ops, rule, judge_at):
    """One campaign, round by round: an op runs until every range of it is
    decided (at least stats.MIN_ROUNDS rounds, at most MAX_ROUNDS). Returns
    the final findings, each op's rounds, and per range whether a finding
    faster or slower was shown at any look."""
    import numpy as np  # noqa: PLC0415

    n_ops = int(ops.max()) + 1
    running = np.ones(n_ops, bool)
    done = np.zeros(n_ops, int)
    called_ever = np.zeros(len(ops), bool)
    findings = None
    for round_ in range(1, MAX_ROUNDS + 1):
        done[running] = round_
        if round_ < stats.MIN_ROUNDS:
            continue
        findings, _ = judge_at(logs, done[ops], rule)
        called_ever |= np.array([f in ("faster", "slower") for f in findings])
        decided = np.array([f in DECIDING_FINDINGS for f in findings])
        for op in np.nonzero(running)[0]:
            if decided[ops == op].all():
                running[op] = False
        if not running.any():
            break
    return findings, done, called_ever


def crossing(logs, test):
    """Per range, whether its p-value is <= 0.05 at some look 3..MAX (every
    round run): the plain peeking figure, no band and no correction."""
    import numpy as np  # noqa: PLC0415

    crossed = np.zeros(len(logs), bool)
    for n in range(stats.MIN_ROUNDS, MAX_ROUNDS + 1):
        x = logs[:, :n]
        for i in range(len(logs)):
            p = test(float(x[i].mean()), float(x[i].std(ddof=1)), n)
            crossed[i] |= p is not None and p <= 0.05
    return crossed


def simulate_adaptive(roots: int = 40, seed: int = ADAPTIVE_SEED) -> dict:
    """Counts per (noise, effect) over `roots` mixed and `roots` A/A roots per noise."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    judge_at = _Judge()
    counts = defaultdict(lambda: defaultdict(float))
    for sigma in ADAPTIVE_NOISE:
        for kind in ("mixed", "aa"):
            effects = np.repeat(ADAPTIVE_EFFECTS if kind == "mixed" else (1.0,) * 4, OPS_PER_EFFECT * SHAPES_PER_OP)
            ops = np.arange(len(effects)) // SHAPES_PER_OP
            for _ in range(roots):
                noise = rng.standard_normal((2, len(effects), MAX_ROUNDS))
                logs = np.log(effects)[:, None] + sigma * (noise[0] - noise[1])
                adaptive, a_rounds, a_ever = run_campaign(logs, ops, "anytime", judge_at)
                peeking, p_rounds, p_ever = run_campaign(logs, ops, "fixed", judge_at)
                fixed, _ = judge_at(logs, np.full(len(effects), MAX_ROUNDS), "fixed")
                t_crossed = crossing(logs, stats.t_test_p) if kind == "aa" else None
                e_crossed = crossing(logs, stats.anytime_p) if kind == "aa" else None
                if kind == "mixed":
                    _round_four(counts[(sigma, 2.5)], logs, ops, effects, judge_at)
                for i, effect in enumerate(effects):
                    c = counts[(sigma, float(effect))]
                    c["ranges"] += 1
                    rounds = a_rounds[ops[i]]
                    c["adaptive_called"] += adaptive[i] in ("faster", "slower")
                    c["adaptive_called_ever"] += bool(a_ever[i])
                    c["peeking_called"] += peeking[i] in ("faster", "slower")
                    c["peeking_called_ever"] += bool(p_ever[i])
                    c["fixed_called"] += fixed[i] in ("faster", "slower")
                    c["adaptive_found"] += adaptive[i] == "faster"
                    c["fixed_found"] += fixed[i] == "faster"
                    c["adaptive_decided"] += adaptive[i] in DECIDING_FINDINGS
                    c["fixed_decided"] += fixed[i] in DECIDING_FINDINGS
                    c["adaptive_rounds"] += rounds
                    c["decided_by_4"] += rounds <= 4 and adaptive[i] in DECIDING_FINDINGS
                    # cells spent for the same set of decided ranges: a range's
                    # cells are its op's rounds (every shape of an op is measured
                    # by the same cells), counted over the ranges the fixed
                    # campaign at MAX decides and the other campaign decides too
                    if fixed[i] in DECIDING_FINDINGS:
                        if adaptive[i] in DECIDING_FINDINGS:
                            c[f"{kind}_both_decided"] += 1
                            c[f"{kind}_both_adaptive_rounds"] += rounds
                        if peeking[i] in DECIDING_FINDINGS:
                            c[f"{kind}_peeking_both_decided"] += 1
                            c[f"{kind}_peeking_both_rounds"] += p_rounds[ops[i]]
                    if t_crossed is not None:
                        c["aa_ranges"] += 1
                        c["t_crossed"] += bool(t_crossed[i])
                        c["e_crossed"] += bool(e_crossed[i])
    return {key: dict(value) for key, value in counts.items()}


def _round_four(c, logs, ops, effects, judge_at):
    """What deciding the 2.5x ops at round 4 takes, whatever the rule: each
    such op's largest fixed-sample t-test p-value at 4 rounds over its
    shapes (an op stops only with every shape decided), and whether today's
    test, looking once at round 4 and never else, decides the op there."""
    import numpy as np  # noqa: PLC0415

    at_four = np.full(len(effects), 4)
    findings, p = judge_at(logs, at_four, "fixed")
    for op in np.unique(ops[effects == 2.5]):
        mine = np.nonzero(ops == op)[0]
        c.setdefault("round4_op_p", []).append(max(p[i] for i in mine))
        c["round4_ops"] = c.get("round4_ops", 0) + 1
        c["round4_one_look_decided"] = c.get("round4_one_look_decided", 0) + all(
            findings[i] in DECIDING_FINDINGS for i in mine
        )
    # Benjamini-Hochberg's bar for a root's k smallest p-values, k the 2.5x ranges
    c["round4_bar"] = float(judge_settings["q_max"]) * int((effects == 2.5).sum()) / len(effects)


def adaptive_rows(counts: dict) -> list:
    """The table of the until-decided campaign: one row per (noise, effect)."""
    rows = []
    for (sigma, effect), c in sorted(counts.items()):
        n = c["ranges"]
        rows.append(
            {
                "noise": sigma,
                "effect": effect,
                "ranges": int(n),
                "adaptive called (any look)": c["adaptive_called_ever"] / n,
                "today's test re-run, called (any look)": c["peeking_called_ever"] / n,
                "fixed at MAX called": c["fixed_called"] / n,
                "adaptive found": c["adaptive_found"] / n,
                "fixed at MAX found": c["fixed_found"] / n,
                "adaptive decided": c["adaptive_decided"] / n,
                "fixed at MAX decided": c["fixed_decided"] / n,
                "adaptive rounds / MAX": c["adaptive_rounds"] / n / MAX_ROUNDS,
                "cells / fixed's, same decided ranges": _same_decided(c),
                "decided by round 4": c["decided_by_4"] / n,
                "A/A p <= 0.05 at some look, t-test": c["t_crossed"] / c["aa_ranges"] if c.get("aa_ranges") else None,
                "A/A p <= 0.05 at some look, anytime": c["e_crossed"] / c["aa_ranges"] if c.get("aa_ranges") else None,
            }
        )
    return rows


def _same_decided(c):
    both = sum(c.get(f"{kind}_both_decided", 0) for kind in ("mixed", "aa"))
    rounds = sum(c.get(f"{kind}_both_adaptive_rounds", 0) for kind in ("mixed", "aa"))
    return rounds / (both * MAX_ROUNDS) if both else None


def adaptive_targets(counts: dict) -> list:
    """(what, value, target, met) for the until-decided campaign (issue 42)."""
    nulls = [c for (_, effect), c in counts.items() if effect == 1.0]
    worst_adaptive = max(c["adaptive_called_ever"] / c["ranges"] for c in nulls)
    worst_peeking = max(c["peeking_called_ever"] / c["ranges"] for c in nulls)
    crossed_t = sum(c.get("t_crossed", 0) for c in nulls) / sum(c.get("aa_ranges", 0) for c in nulls)
    crossed_e = sum(c.get("e_crossed", 0) for c in nulls) / sum(c.get("aa_ranges", 0) for c in nulls)

    def spent_over(kinds, prefix="both_adaptive_rounds", decided="both_decided"):
        both = sum(c.get(f"{k}_{decided}", 0) for c in counts.values() for k in kinds)
        return sum(c.get(f"{k}_{prefix}", 0) for c in counts.values() for k in kinds) / (both * MAX_ROUNDS)

    def floor(kinds):
        return spent_over(kinds, "peeking_both_rounds", "peeking_both_decided")

    spent = {kinds: spent_over(kinds) for kinds in (("mixed",), ("aa",), ("mixed", "aa"))}
    all_spent = sum(c["adaptive_rounds"] for c in counts.values()) / (
        sum(c["ranges"] for c in counts.values()) * MAX_ROUNDS
    )
    by_4 = {sigma: c["decided_by_4"] / c["ranges"] for (sigma, effect), c in counts.items() if effect == 2.5}
    effects = [c for (_, effect), c in counts.items() if effect > 1.0]
    power_fixed = sum(c["fixed_found"] for c in effects) / sum(c["ranges"] for c in effects)
    power_adaptive = sum(c["adaptive_found"] for c in effects) / sum(c["ranges"] for c in effects)
    gaps = {
        (sigma, effect): (c["fixed_found"] - c["adaptive_found"]) / c["ranges"]
        for (sigma, effect), c in counts.items()
        if effect > 1.0
    }
    worst_gap_cell = max(gaps, key=gaps.get)
    import numpy as np  # noqa: PLC0415

    worst_sigma = max(ADAPTIVE_NOISE)
    four = counts[(worst_sigma, 2.5)]
    # an op decided at round 4 by 95% of the seeds: every shape's p at round 4
    # must pass, so the rule must reject at round 4 wherever the op's largest
    # p is under its 95% quantile; a true null's p (uniform) is under it as
    # often, and the t-test's region is the most powerful of those that do
    # not depend on the unit of time (uniformly most powerful invariant)
    needed = float(np.quantile(four["round4_op_p"], 0.95))
    checks = [
        (
            "A/A shapes called faster or slower at any look, adaptive rule (worst noise)",
            worst_adaptive,
            "<= 0.05",
            worst_adaptive <= 0.05,
        ),
        ("  beside it: today's test re-run after every round (worst noise)", worst_peeking, "report", None),
        (
            "  A/A p <= 0.05 at some look of 3..12, no band or correction: t-test / anytime",
            f"{crossed_t:.3f} / {crossed_e:.3f}",
            "report",
            None,
        ),
        *(
            (
                f"cells spent, adaptive / fixed at MAX, same decided ranges, {name}",
                spent[kinds],
                # the floor: today's test re-run after every round, whose
                # interval is the narrowest at each round (and not valid)
                f"<= 0.5 (floor {floor(kinds):.3f})",
                spent[kinds] <= 0.5,
            )
            for name, kinds in (
                ("mixed roots", ("mixed",)),
                ("A/A roots", ("aa",)),
                ("every root", ("mixed", "aa")),
            )
        ),
        ("  over every range, decided or not, A/A roots too", all_spent, "report", None),
        ("2.5x decided by round 4, worst noise up to 10%", min(by_4.values()), ">= 0.95", min(by_4.values()) >= 0.95),
        (
            "  per noise " + " / ".join(f"{s:.0%}" for s in sorted(by_4)),
            " / ".join(f"{by_4[s]:.3f}" for s in sorted(by_4)),
            "report",
            None,
        ),
        (
            f"  at {worst_sigma:.0%} noise, today's test looking at round 4 alone decides, of the 2.5x ops",
            four["round4_one_look_decided"] / four["round4_ops"],
            "report",
            None,
        ),
        (
            f"  at {worst_sigma:.0%} noise, share of the error budget any rule must spend on round 4 alone "
            f"(p {needed:.4f} against BH's bar {four['round4_bar']:.4f})",
            needed / four["round4_bar"],
            "report",
            None,
        ),
        (
            "power at MAX (2% / 10% / 2.5x shapes found), fixed minus adaptive, points",
            100 * (power_fixed - power_adaptive),
            "<= 10",
            power_fixed - power_adaptive <= 0.10,
        ),
        (
            f"  worst cell: {worst_gap_cell[1]:g}x at {worst_gap_cell[0]:.0%} noise, points",
            100 * gaps[worst_gap_cell],
            "report",
            None,
        ),
    ]
    # the counts are numpy's: a met must be JSON's bool, a value a float
    return [
        (what, float(value) if isinstance(value, float) else value, target, None if met is None else bool(met))
        for what, value, target, met in checks
    ]


def print_adaptive(counts: dict):
    rows = adaptive_rows(counts)
    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(_cell(row[h]) for h in header) + " |")
    print()
    for what, value, target, met in adaptive_targets(counts):
        print(
            f"{what}: {_cell(value)} (target {target}"
            + ("" if met is None else f": {'met' if met else 'NOT met'}")
            + ")"
        )


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roots", type=int, default=40, help="roots per (noise, rounds) cell (default 40)")
    parser.add_argument("--out", default=str(REPO / "bench" / "power.json"))
    parser.add_argument("--adaptive-roots", type=int, default=40, help="roots per noise of the until-decided table")
    parser.add_argument("--adaptive-only", action="store_true", help="only the until-decided campaign's table")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    adaptive_counts = simulate_adaptive(args.adaptive_roots)
    print(f"until decided: {args.adaptive_roots} mixed and A/A roots per noise, {time.perf_counter() - t0:.0f} s")
    print_adaptive(adaptive_counts)
    adaptive_checks = [c for c in adaptive_targets(adaptive_counts) if c[3] is not None]
    if args.adaptive_only:
        return 0 if all(c[3] for c in adaptive_checks) else 1
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zlstore-power-") as work:
        top = Path(work) / "runs"
        plan = generate(top, args.roots)
        with Store(Path(work) / "power.db") as store:
            summary = store.ingest(top)
            counts, roots_with_false = tally(store, plan)
    rows = table(counts, roots_with_false, args.roots)
    checks = targets(rows)
    header = [
        "roots",
        "rounds",
        "effect",
        "ranges",
        "faster",
        "slower",
        "no change",
        "inconclusive",
        "too few rounds",
        "found",
        "called (false)",
        "roots with any false finding",
    ]
    print(f"{summary['cells_added']} cells, {len(plan)} roots, {time.perf_counter() - t0:.0f} s")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print(
            "| "
            + " | ".join(
                (f"{row[h]:.3f}" if isinstance(row.get(h), float) and h != "effect" else str(row.get(h, "")))
                for h in header
            )
            + " |"
        )
    print()
    for what, value, target, met in checks:
        print(f"{what}: {value:.3f} (target {target}: {'met' if met else 'NOT met'})")
    Path(args.out).write_text(
        json.dumps(
            {
                "roots_per_cell": args.roots,
                "rows": rows,
                "targets": [dict(zip(("what", "value", "target", "met"), c)) for c in checks],
                "until_decided": {
                    "roots_per_noise": args.adaptive_roots,
                    "rows": adaptive_rows(adaptive_counts),
                    "targets": [
                        dict(zip(("what", "value", "target", "met"), c)) for c in adaptive_targets(adaptive_counts)
                    ],
                },
            },
            indent=2,
        )
    )
    return 0 if all(c[3] for c in checks + adaptive_checks) else 1


if __name__ == "__main__":
    sys.exit(main())
