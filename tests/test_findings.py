"""Findings (issue 12): what a repeat run's or campaign's rounds say per
shape, checked against scipy's own t-test and Benjamini-Hochberg on the
latencies the test wrote, against known effects under log-normal noise, and
on the real H200 trees (A/A runs: nothing there may be called faster or
slower)."""

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from zlstore import Store, db, stats
from zlstore.show import judge

from .effects import Shape, shape_key, write_repeat_root
from .judging import invoke, json_out

DATA = Path(__file__).parent / "data"
REAL = DATA / "real"
REAL_SCREEN, REAL_CAMPAIGN = "ab_rlc_20261130_025432", "campaign_20261130_030313"


def ranges_of(store, root):
    return {r["shape"]: r for r in judge.ab_ranges(store, root)}


def oracle(logs):
    """What scipy says of one shape's rounds: effect, interval, p."""
    n = len(logs)
    mean = sum(logs) / n
    test = scipy_stats.ttest_1samp(logs, 0.0)
    low, high = scipy_stats.t.interval(0.95, n - 1, loc=mean, scale=scipy_stats.sem(logs))
    return math.exp(mean), math.exp(low), math.exp(high), test.pvalue


# -- the statistics, against scipy ------------------------------------------------


def test_effect_interval_p_and_q_are_scipys(tmp_path):
    shapes = [Shape(1.0, 0.03), Shape(1.05, 0.03), Shape(1.3, 0.1), Shape(0.8, 0.02), Shape(1.0, 0.3), Shape(2.5, 0.05)]
    logs = write_repeat_root(tmp_path / "runs", "ab_effects", shapes, rounds=5, seed=1)
    with Store(tmp_path / "s.db") as store:
        store.ingest(tmp_path / "runs")
        got = ranges_of(store, "ab_effects")
    keys = sorted(logs)
    expected_q = dict(zip(keys, scipy_stats.false_discovery_control([oracle(logs[k])[3] for k in keys], method="bh")))
    for key in keys:
        effect, low, high, p = oracle(logs[key])
        row = got[key]
        assert row["rounds"] == 5
        assert row["effect"] == pytest.approx(effect, rel=1e-9)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), rel=1e-9)
        assert row["p_value"] == pytest.approx(p, rel=1e-7, abs=1e-300)
        assert row["q_value"] == pytest.approx(expected_q[key], rel=1e-7, abs=1e-300)


def test_the_t_functions_are_scipys_distribution():
    for df in (1, 2, 3, 5, 30):
        assert stats.t_critical(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), rel=1e-12)
    assert stats.t_test_p(0.1, 0.05, 4) == pytest.approx(2 * scipy_stats.t.sf(0.1 / (0.05 / 2), 3), rel=1e-12)
    assert stats.t_test_p(0.1, 0.05, stats.MIN_ROUNDS - 1) is None
    assert stats.t_test_p(0.0, 0.0, 4) == 1.0 and stats.t_test_p(0.2, 0.0, 4) == 0.0


# How many threads each OpenBLAS the import loaded runs (numpy's and scipy's
# each bundle one): asked of the library itself, which fixes its pool when it
# is loaded, not counted in /proc/self/task, where a thread just joined may
# linger for a while.
_LOAD_AND_ASK_OPENBLAS = """
import ctypes, os, threading
from zlstore import stats
stats.load_in_background()
next(t for t in threading.enumerate() if t.name == "zlstore-load-scipy").join()
assert stats.t_critical(3) > 3
libraries = sorted({line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()})
counts = []
for path in libraries:
    library = ctypes.CDLL(path)
    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"):
        if hasattr(library, name):
            counts.append(getattr(library, name)())
            break
    else:
        raise SystemExit(f"{path}: no openblas_get_num_threads")
print(",".join(map(str, counts)), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="finds the loaded OpenBLAS in /proc")
@pytest.mark.parametrize("users_setting", [None, "2"])
def test_the_background_import_starts_no_blas_threads_and_leaves_the_environment_as_it_was(users_setting):
    """An ingest's import of scipy runs beside its workers: numpy's OpenBLAS
    must not start a pool of threads there. A fresh process, since OpenBLAS
    reads the setting once, when it is loaded."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if users_setting:
        env["OPENBLAS_NUM_THREADS"] = users_setting
    out = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_ASK_OPENBLAS], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    threads, left = [int(n) for n in out[0].split(",")], out[1]
    assert threads, "the import loaded no OpenBLAS"
    if users_setting:  # the user's pool, the user's setting
        assert set(threads) == {int(users_setting)} and left == users_setting
    else:
        assert (set(threads), left) == ({1}, "None")


# -- known effects ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_a_consistent_2_5x_at_4_rounds_is_faster_and_0_4x_slower(tmp_path, seed):
    shapes = [Shape(2.5, 0.05)] * 4 + [Shape(0.4, 0.05)] * 4 + [Shape(1.0, 0.05)] * 8
    write_repeat_root(tmp_path / "runs", "ab_known", shapes, rounds=4, seed=seed)
    with Store(tmp_path / "s.db") as store:
        store.ingest(tmp_path / "runs")
        got = ranges_of(store, "ab_known")
    findings = [got[shape_key(i)]["finding"] for i in range(len(shapes))]
    assert findings[:4] == ["faster"] * 4
    assert findings[4:8] == ["slower"] * 4
    assert set(findings[8:]) <= {"no change", "inconclusive"}


def test_a_zero_effect_is_rarely_faster_or_slower_and_quiet_shapes_prove_no_change(tmp_path):
    """A/A noise from very quiet to a card that varies by a factor of e, at
    3 to 5 rounds, in 12 roots: a t-test at 3 rounds is fooled now and then
    (its standard deviation rests on 2 degrees of freedom), Benjamini-Hochberg
    keeps that rare; bench/power.py measures the rate over many seeds."""
    sigmas = (0.001, 0.005, 0.02, 0.1, 0.5, 1.0)
    shapes = [Shape(1.0, sigma) for sigma in sigmas for _ in range(4)]
    for seed in range(12):
        write_repeat_root(tmp_path / "runs", f"ab_aa_{seed}", shapes, rounds=3 + seed % 3, seed=seed)
    with Store(tmp_path / "s.db") as store:
        store.ingest(tmp_path / "runs")
        rows = judge.ab_ranges(store)
    assert len(rows) == 12 * len(shapes)
    called = [r for r in rows if r["finding"] in ("faster", "slower")]
    assert len(called) <= 0.05 * len(rows), called
    by_sigma = {
        sigma: [r for r in rows if int(json.loads(r["shape"])[0][0]) - 1 in range(4 * i, 4 * i + 4)]
        for i, sigma in enumerate(sigmas)
    }
    # a very quiet card proves the equivalence; one varying by tens of percent cannot
    assert {r["finding"] for r in by_sigma[0.001]} == {"no change"}
    assert sum(r["finding"] == "no change" for r in by_sigma[0.005]) >= 0.75 * len(by_sigma[0.005])
    loud = [r for r in by_sigma[0.5] + by_sigma[1.0] if r["finding"] not in ("faster", "slower")]
    assert loud and all(r["finding"] == "inconclusive" and r["to_settle"] for r in loud)


def test_fewer_rounds_than_the_test_needs_is_said_and_tests_nothing(tmp_path):
    write_repeat_root(tmp_path / "runs", "ab_two", [Shape(2.5, 0.01)] * 3, rounds=2, seed=0)
    with Store(tmp_path / "s.db") as store:
        store.ingest(tmp_path / "runs")
        got = list(ranges_of(store, "ab_two").values())
    assert {r["finding"] for r in got} == {"too few rounds"}
    assert all(r["p_value"] is None and r["q_value"] is None and r["ci_low"] is None for r in got)
    assert all(r["to_settle"] == f"at least {stats.MIN_ROUNDS} paired rounds (2 so far)" for r in got)


def test_the_thresholds_are_settings_and_every_view_reads_them(tmp_path):
    write_repeat_root(tmp_path / "runs", "ab_set", [Shape(1.5, 0.02)] * 3, rounds=4, seed=2)
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
    assert {r["finding"] for r in json_out(invoke(db, "ab", "--json"))} == {"faster"}
    shown = json_out(invoke(db, "rule", "--min-effect", "0.6", "--json"))
    assert (shown["min_effect"], shown["q_max"]) == (0.6, 0.05)
    # an effect of 1.5 is now inside the minimum effect: no change, proven
    assert {r["finding"] for r in json_out(invoke(db, "ab", "--json"))} == {"no change"}
    invoke(db, "rule", "--min-effect", "0.3", "--q-max", "1e-12")
    rows = json_out(invoke(db, "ab", "--json"))
    assert {r["finding"] for r in rows} == {"inconclusive"}
    assert {(r["q_max"], r["min_effect"]) for r in rows} == {(1e-12, 0.3)}
    table = invoke(db, "ab").stdout
    assert "q <= 1e-12 and the 95% interval beyond +-30%" in table


def test_plain_sqlite_sees_the_numbers_the_cli_prints(tmp_path):
    """The statistics are stored and the findings are SQL: a connection
    without anything of zlstore's registered reads the same rows."""
    write_repeat_root(tmp_path / "runs", "ab_plain", [Shape(1.2, 0.05), Shape(1.0, 0.05)] * 3, rounds=4, seed=5)
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
    cli_rows = json_out(invoke(db, "ab", "--json"))
    out = (
        subprocess.run(
            ["sqlite3", "-json", str(db), "SELECT * FROM ab_ranges ORDER BY " + judge.AB_KEY_ORDER],
            capture_output=True,
            text=True,
        )
        if shutil.which("sqlite3")
        else None
    )
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    plain = [dict(r) for r in conn.execute("SELECT * FROM ab_ranges ORDER BY " + judge.AB_KEY_ORDER)]
    assert [(r["shape"], r["finding"], r["to_settle"]) for r in plain] == [
        (r["shape"], r["finding"], r["to_settle"]) for r in cli_rows
    ]
    for r, c in zip(plain, cli_rows):  # `ab --json` writes 15 significant digits
        assert (r["effect"], r["q_value"]) == pytest.approx((c["effect"], c["q_value"]), rel=1e-14)
    if out is not None:
        assert out.returncode == 0, out.stderr
        assert [r["finding"] for r in json.loads(out.stdout)] == [r["finding"] for r in cli_rows]


def test_ab_json_is_the_view_row_for_row(tmp_path):
    write_repeat_root(tmp_path / "runs", "ab_json", [Shape(1.2, 0.05), Shape(1.0, 0.3)] * 2, rounds=3, seed=3)
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
        view = judge.ab_ranges(store)
    printed = json_out(invoke(db, "ab", "--json"))
    assert all(list(r)[-1] == "ir_changes" for r in printed)  # the CLI's, after the view's columns
    rows = [{k: v for k, v in r.items() if k != "ir_changes"} for r in printed]
    assert [list(r) for r in rows] == [list(v) for v in view]
    key = lambda r: (r["root"], r["op"], r["dtype"], r["shape"], r["caliber_id"] or 0)
    assert [key(r) for r in rows] == sorted(key(v) for v in view)  # --json: by key
    view = sorted(view, key=key)
    for r, v in zip(rows, view):
        for column in ("effect", "ci_low", "ci_high", "p_value", "q_value", "log_sd"):
            assert r[column] == pytest.approx(v[column], rel=1e-14)
        assert (r["finding"], r["to_settle"]) == (v["finding"], v["to_settle"])


def test_findings_come_first_and_the_summary_counts_them(tmp_path):
    shapes = [Shape(1.0, 0.5)] * 3 + [Shape(3.0, 0.02)] * 2 + [Shape(1.0, 0.001)] * 2
    write_repeat_root(tmp_path / "runs", "ab_order", shapes, rounds=4, seed=4)
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
    result = invoke(db, "ab")
    lines = [line for line in result.stdout.splitlines() if not line.startswith("    ")]  # notes below rows
    header = next(i for i, line in enumerate(lines) if line.startswith("op "))
    assert "  ran on: unknown (its cells record no environment)" in lines[1:header]
    at = lines[header].index("finding")
    findings = [line[at : at + len("too few rounds")].strip() for line in lines[header + 2 : header + 9]]
    assert findings == ["faster", "faster", "no change", "no change", "inconclusive", "inconclusive", "inconclusive"]
    assert "2 faster, 0 slower, 2 no change, 3 inconclusive, 0 too few rounds" in lines[-1]


# -- screening: one round is never a result; hints; a dead axis --------------------


def test_a_switch_that_changes_no_ir_is_a_dead_axis(tmp_path):
    from . import generator

    root = tmp_path / "runs" / "ab_dead"
    root.mkdir(parents=True)
    (root / "root.env").write_text(
        "KIND=screen\nSWITCH=FLAGTREE_TYPO_ENHANCE\n"
        + "".join(f"{k}={v}\n" for k, v in generator.SCREEN_CALIBER.items())
    )
    for op in ("abs", "exp"):
        for side in ("before", "after"):
            generator.write_cell(
                root / f"{op}_float16_{side}",
                generator.CellSpec(
                    op=op,
                    dtype="float16",
                    side=side,
                    round=0,
                    card=0,
                    rows=[generator.RowSpec([[64, 64]], 0.01)],
                    noise=False,
                    kernels={f"{op}_kernel": generator.ttgir_text(f"{op}_kernel")},
                ),
            )
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(root)
        assert judge.screen_roots(store)[0]["axis"] == "dead"
    result = invoke(db, "screen")
    assert "the switch FLAGTREE_TYPO_ENHANCE changed no IR in any of its 2 pairs, even under v4" in result.stderr
    assert "the switch changed no IR, even under v4" in result.stdout
    # one pair that changes makes it live, and the warning goes
    (root / "exp_float16_after" / "triton_cache").rename(tmp_path / "old_cache")
    generator.write_cell(
        root / "exp_float16_after",
        generator.CellSpec(
            op="exp",
            dtype="float16",
            side="after",
            round=0,
            card=0,
            rows=[generator.RowSpec([[64, 64]], 0.01)],
            noise=False,
            kernels={"exp_kernel": generator.ttgir_text("exp_kernel", variant=1)},
        ),
    )
    with Store(db) as store:
        store.ingest(root)
        assert judge.screen_roots(store)[0]["axis"] == "live"
    assert "warning" not in invoke(db, "screen").stderr


# -- the real H200 trees -----------------------------------------------------------


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    """The real screen and 3-round campaign (FlagGems on an H200, an A/A
    switch in effect), ingested once."""
    top = tmp_path_factory.mktemp("real")
    for archive in sorted(REAL.glob("*.txz")):
        subprocess.run(["tar", "xJf", str(archive), "-C", str(top)], check=True)
    db = top / "real.db"
    with Store(db) as store:
        summary = store.ingest([top / "runs", top / "runs2"])
    assert summary["cells_added"] == 24
    return db


def test_real_campaign_has_no_finding_of_faster_or_slower(real_store):
    rows = json_out(invoke(real_store, "ab", REAL_CAMPAIGN, "--json"))
    assert len(rows) == 19 and {r["rounds"] for r in rows} == {3}
    assert not [r for r in rows if r["finding"] in ("faster", "slower")]
    # the large shapes agree to 0.1% over their rounds: that is a proven "no change"
    big = {r["shape"]: r["finding"] for r in rows}
    assert big['{"dim":-1,"k":5,"x":[10000,65536]}'] == "no change"
    # a tiny launch-bound kernel that moved 2.3x-5.2x in every round is not a finding
    tiny = next(r for r in rows if r["shape"] == '{"dim":-1,"k":32,"x":[8,512,32]}')
    assert tiny["min"] > 2 and tiny["finding"] == "inconclusive" and tiny["q_value"] > 0.05
    table = invoke(real_store, "ab", REAL_CAMPAIGN).stdout
    assert "19 ranges: 0 faster, 0 slower," in table


def test_real_abs_gets_the_v4_hint(real_store):
    rows = {r["op"]: r for r in json_out(invoke(real_store, "screen", "--json"))}
    assert rows["abs"]["verdict"] == "IR_CHANGED"
    assert rows["abs"]["hint"] == "differs only in source locations: NO_IR_DIFF under v4"
    assert all(r["hint"] is None for op, r in rows.items() if op != "abs")
    text = invoke(real_store, "screen").stdout
    assert "    hint: differs only in source locations: NO_IR_DIFF under v4" in text
    # its one IR_CHANGED pair is location-only: nothing to plan by default
    refused = invoke(real_store, "plan", REAL_SCREEN, "--cards", "2", "--rounds", "3")
    assert refused.exit_code == 2 and "--include-hinted" in refused.stderr
    plan = invoke(real_store, "plan", REAL_SCREEN, "--cards", "2", "--rounds", "3", "--json", "--include-hinted")
    assert json.loads(plan.stdout)["hints"] == [
        {"op": "abs", "dtype": "float16", "hint": "differs only in source locations: NO_IR_DIFF under v4"}
    ]


def test_real_screen_axis_is_unknown_because_mm_was_truncated(real_store):
    with Store(real_store) as store:
        (axis,) = judge.screen_roots(store)
    assert (axis["axis"], axis["truncated"], axis["ir_changed"], axis["ir_changed_strictest"]) == ("unknown", 1, 1, 0)
    assert "warning" not in invoke(real_store, "screen").stderr


def test_a_release_3_store_upgrades_to_findings(tmp_path):
    """tests/data/store-v3.db holds the floor tree as release 3 stored it
    (made by the code at e4e9785; no statistics, no v4 fingerprints): the
    first open re-pairs every round into findings and fingerprints its
    screening cells under every rule."""
    from . import floor_tree

    path = tmp_path / "old.db"
    shutil.copy(DATA / "store-v3.db", path)
    before = sqlite3.connect(path)
    assert before.execute("PRAGMA user_version").fetchone()[0] == 3
    assert before.execute("SELECT count(*) FROM fingerprints WHERE rule = 'v4'").fetchone()[0] == 0
    before.close()
    with Store(path) as store:
        assert store.schema_version == db.SCHEMA_VERSION
        rows = judge.ab_ranges(store, floor_tree.CAMPAIGN)
        assert {(r["op"], r["dtype"]): r["finding"] for r in rows} == floor_tree.FINDING
        lacking = store.conn.execute(
            "SELECT count(*) FROM cells JOIN roots ON roots.id = cells.root_id WHERE roots.kind = 'screen' "
            "AND (SELECT count(*) FROM fingerprints f WHERE f.cell_id = cells.id) < 4"
        ).fetchone()[0]
        assert lacking == 0
        assert store.setting("backfill_screen_fingerprints") is None
        assert judge.screen_roots(store)[0]["axis"] == "live"


def test_a_range_too_noisy_to_settle_names_the_cause_it_can_see(tmp_path):
    """An inconclusive range whose rounds vary too much for 30 rounds says
    why in the reader's words: a round timed only a few times
    (direct_repeat=1) is the cause it can see; with many timings a round,
    the card."""
    noisy = [Shape(1.05, 0.6)]
    write_repeat_root(tmp_path / "runs", "ab_once", noisy, rounds=4, seed=3, caliber={"ZL_DIRECT_REPEAT": "1"})
    write_repeat_root(tmp_path / "runs", "ab_many", noisy, rounds=4, seed=3)
    with Store(tmp_path / "s.db") as store:
        store.ingest(tmp_path / "runs")
        once = next(iter(ranges_of(store, "ab_once").values()))
        many = next(iter(ranges_of(store, "ab_many").values()))
    assert once["finding"] == many["finding"] == "inconclusive"
    assert once["to_settle"].startswith("steadier rounds: a round varies by about ")
    assert "each timed only 1x (direct_repeat): a larger ZL_DIRECT_REPEAT" in once["to_settle"]
    assert many["to_settle"].startswith("a quieter card: a round varies by about ")
    assert "direct_repeat" not in many["to_settle"]
