"""Campaigns that stop when the answer is known (issue 42): the anytime-valid
t-test against brute-force integration and under peeking, a root with
STOPPING=until-decided judged by it while a fixed one keeps today's test,
and the ops' stops: recorded once, kept, shown by every reader."""

import math
import random
import shutil

import pytest
from scipy import integrate
from scipy import stats as scipy_stats

from zlstore import Store, names, stats
from zlstore.show import judge
from zlstore.read import layout
from zlstore.store import sequential

from .effects import Shape, shape_key, write_repeat_root
from .judging import invoke, json_out

# -- the e-process -------------------------------------------------------------


def brute_force_evalue(logs, g):
    """The Bayes factor of mean != 0 by numerical integration: the normal
    likelihood of the rounds under a N(0, g) prior on mean / sd and the
    right-Haar prior 1 / sd, over the same with mean 0."""
    n, total, squares = len(logs), sum(logs), sum(x * x for x in logs)

    def likelihood(mean, sd):  # the product of the rounds' normal densities
        return (2 * math.pi * sd * sd) ** (-n / 2) * math.exp(
            -(squares - 2 * mean * total + n * mean * mean) / (2 * sd * sd)
        )

    def alternative(delta, sd):
        return likelihood(delta * sd, sd) * math.exp(-delta * delta / (2 * g)) / math.sqrt(2 * math.pi * g) / sd

    spread = max(abs(x) for x in logs) * 50
    wide = 12 * math.sqrt(g)  # the prior's mass beyond 12 of its sd is under 1e-30
    top, _ = integrate.dblquad(alternative, 1e-6, spread, -wide, wide, epsabs=0, epsrel=1e-7)
    bottom, _ = integrate.quad(lambda sd: likelihood(0.0, sd) / sd, 1e-6, spread, epsabs=0, epsrel=1e-9, limit=200)
    return top / bottom


@pytest.mark.parametrize("logs", [[0.05, 0.09, 0.02, 0.07], [0.3, -0.1, 0.2], [0.01, -0.02, 0.015, 0.0, -0.01]])
@pytest.mark.parametrize("g", sorted({g for _, g in stats.ANYTIME_PRIOR}))
def test_the_evalue_is_the_bayes_factor_integrated_by_brute_force(monkeypatch, logs, g):
    monkeypatch.setattr(stats, "ANYTIME_PRIOR", ((1.0, g),))
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    t = mean / (sd / math.sqrt(n))
    assert stats.t_evalue(t, n) == pytest.approx(brute_force_evalue(logs, g), rel=1e-5)


def test_the_mixture_weighs_its_bayes_factors():
    assert sum(w for w, _ in stats.ANYTIME_PRIOR) == pytest.approx(1.0)
    logs = [0.05, 0.09, 0.02, 0.07]
    expected = sum(w * brute_force_evalue(logs, g) for w, g in stats.ANYTIME_PRIOR)
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    assert stats.t_evalue(mean / (sd / 2), 4) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("n", range(3, 31))
def test_the_interval_ends_where_the_evalue_reaches_one_over_alpha(n):
    t = stats.anytime_t(n)
    level = 1 / (1 - stats.CONFIDENCE)
    if t is None:  # too few rounds for 95%: no t gets there
        assert stats.t_evalue(1e9, n) < level
        return
    assert stats.t_evalue(t, n) == pytest.approx(level, rel=1e-9)
    assert stats.t_evalue(t * 0.99, n) < level < stats.t_evalue(t * 1.01, n)
    # wider than the fixed-sample interval: the price of looking every round
    critical = stats.t_critical(n - 1)
    assert critical is not None and t > critical
    mean = t / math.sqrt(n)  # at sd 1, the mean whose t is t
    above, below = stats.anytime_p(mean * 1.0001, 1.0, n), stats.anytime_p(mean * 0.9999, 1.0, n)
    assert above is not None and below is not None
    assert above < 1 - stats.CONFIDENCE < below


def test_aa_ranges_looked_at_after_every_round_stay_under_alpha():
    """A/A ranges, tested after every round from 3 to 30: the fixed-sample
    t-test crosses p <= 0.05 at some look far more often than 5% (the
    inflation the issue names); the anytime-valid one stays under it."""
    rng = random.Random(42)
    ranges, looks = 1000, 30
    crossed = {"t": 0, "anytime": 0}
    for _ in range(ranges):
        logs = [rng.gauss(0, 0.05) for _ in range(looks)]
        seen = {"t": False, "anytime": False}
        total = squares = 0.0
        for n, x in enumerate(logs, 1):
            total += x
            squares += x * x
            if n < stats.MIN_ROUNDS:
                continue
            mean = total / n
            sd = math.sqrt(max(0.0, (squares - n * mean * mean) / (n - 1)))
            t_p, anytime_p = stats.t_test_p(mean, sd, n), stats.anytime_p(mean, sd, n)
            assert t_p is not None and anytime_p is not None
            seen["t"] |= t_p <= 0.05
            seen["anytime"] |= anytime_p <= 0.05
        for rule in crossed:
            crossed[rule] += seen[rule]
    assert crossed["anytime"] / ranges <= 0.05
    assert crossed["t"] / ranges >= 0.2


# -- a store -------------------------------------------------------------------

# 1.1x at 2% noise over 4 rounds: today's test calls it faster; the
# anytime-valid interval is wider and does not (yet)
SHAPES = [Shape(1.1, 0.02)] * 3 + [Shape(2.5, 0.01)] * 2 + [Shape(1.0, 0.002)] * 2


def until_decided_copy(runs, name, copy_name, min_rounds=None):
    """The same rounds as name's, in a root whose env says STOPPING=until-decided."""
    shutil.copytree(runs / name, runs / copy_name)
    env = runs / copy_name / layout.ROOT_ENV
    extra = f"{layout.STOPPING_KEY}={layout.STOPPING_UNTIL_DECIDED}\n"
    if min_rounds is not None:
        extra += f"{layout.MIN_ROUNDS_KEY}={min_rounds}\n"
    env.write_text(env.read_text() + extra)


@pytest.fixture
def two_roots(tmp_path):
    runs = tmp_path / "runs"
    logs = write_repeat_root(runs, "ab_fixed", SHAPES, rounds=4, seed=7)
    until_decided_copy(runs, "ab_fixed", "ab_adaptive", min_rounds=4)
    db_path = tmp_path / "s.db"
    with Store(db_path) as store:
        store.ingest(runs)
    return db_path, logs


def root_id(store, name):
    return store.conn.execute("SELECT id FROM roots WHERE name = ?", (name,)).fetchone()[0]


def test_an_until_decided_root_is_judged_by_the_anytime_rule_a_fixed_one_as_today(two_roots):
    db_path, logs = two_roots
    with Store(db_path) as store:
        stored = {
            name: row
            for name, row in store.conn.execute("SELECT name, json_object('s', stopping, 'm', min_rounds) FROM roots")
        }
        fixed = {r["shape"]: r for r in judge.ab_ranges(store, "ab_fixed")}
        adaptive = {r["shape"]: r for r in judge.ab_ranges(store, "ab_adaptive")}
    assert stored == {"ab_fixed": '{"s":"fixed","m":null}', "ab_adaptive": '{"s":"until-decided","m":4}'}
    for i in range(len(SHAPES)):
        key = shape_key(i)
        x = logs[key]
        n, mean = len(x), sum(x) / len(x)
        sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
        # today's test, from scipy, where the root is fixed
        low, high = scipy_stats.t.interval(0.95, n - 1, loc=mean, scale=sd / math.sqrt(n))
        assert fixed[key]["p_value"] == pytest.approx(scipy_stats.ttest_1samp(x, 0.0).pvalue, rel=1e-6)
        assert (fixed[key]["ci_low"], fixed[key]["ci_high"]) == pytest.approx((math.exp(low), math.exp(high)))
        assert fixed[key]["stopping"] == "fixed"
        # the e-process's, from the brute-force Bayes factor, where it is until-decided
        e = sum(w * brute_force_evalue(x, g) for w, g in stats.ANYTIME_PRIOR)
        assert adaptive[key]["p_value"] == pytest.approx(min(1.0, 1 / e), rel=1e-4)
        anytime_t = stats.anytime_t(n)
        assert anytime_t is not None
        half = anytime_t * sd / math.sqrt(n)
        assert adaptive[key]["ci_low"] == pytest.approx(math.exp(mean - half))
        assert adaptive[key]["stopping"] == "until-decided"
        # the same rounds: an interval valid after every round is wider
        assert adaptive[key]["ci_low"] < fixed[key]["ci_low"] and adaptive[key]["ci_high"] > fixed[key]["ci_high"]
    moderate = [shape_key(i) for i, s in enumerate(SHAPES) if s.effect == 1.1]
    assert {fixed[k]["finding"] for k in moderate} == {"faster"}
    assert "inconclusive" in {adaptive[k]["finding"] for k in moderate}
    large = [shape_key(i) for i, s in enumerate(SHAPES) if s.effect == 2.5]
    assert {adaptive[k]["finding"] for k in large} == {"faster"}


def test_a_quiet_large_effect_is_decided_at_three_rounds_in_a_root_of_forty(tmp_path):
    """e-BH's bar in a root of 40 ranges with 10 findings is 40 / (0.05 x 10)
    = 80. A 2.5x whose rounds agree within 1% passes it at round 3: the
    prior's wide component lets 3 rounds show that much (with g 2 and 20
    alone no e-value at 3 rounds could exceed 34, and such an op ran a
    round it did not need); the shapes without effect are not called."""
    bar = 40 / (0.05 * 10)
    assert stats.t_evalue(1e6, 3) > bar
    shapes = [Shape(2.5, 0.01)] * 10 + [Shape(1.0, 0.01)] * 30
    runs = tmp_path / "runs"
    write_repeat_root(runs, "ab_quiet", shapes, rounds=3, seed=3)
    env = runs / "ab_quiet" / layout.ROOT_ENV
    env.write_text(env.read_text() + f"{layout.STOPPING_KEY}={layout.STOPPING_UNTIL_DECIDED}\n")
    with Store(tmp_path / "s.db") as store:
        store.ingest(runs)
        found = {r["shape"]: r["finding"] for r in judge.ab_ranges(store, "ab_quiet")}
        rid = root_id(store, "ab_quiet")
        assert {r for (r,) in store.conn.execute("SELECT stopping FROM roots WHERE id = ?", (rid,))} == {
            "until-decided"
        }
    assert [found[shape_key(i)] for i in range(10)] == ["faster"] * 10
    assert not {found[shape_key(i)] for i in range(10, 40)} & {"faster", "slower"}


def test_undecided_ops_and_their_stops(two_roots):
    db_path, _ = two_roots
    with Store(db_path) as store:
        adaptive = root_id(store, "ab_adaptive")
        # a floor of rounds keeps an op running whatever its ranges say
        assert sequential.undecided_ops(store.conn, adaptive, min_rounds=5) == [("softmax", "float16")]
        # 1.1x at 4 rounds is not decided yet under the anytime rule
        assert sequential.undecided_ops(store.conn, adaptive, min_rounds=3) == [("softmax", "float16")]
        # under the fixed rule every range of the same rounds is decided
        assert sequential.undecided_ops(store.conn, root_id(store, "ab_fixed"), min_rounds=3) == []
        sequential.record_stops(store.conn, adaptive, [("softmax", "float16")], 4, names.MAX_ROUNDS)
        assert sequential.undecided_ops(store.conn, adaptive, min_rounds=3) == []


def stops(store, name):
    return {(r["stop_round"], r["stop_reason"]) for r in judge.ab_ranges(store, name)}


def test_record_stops_is_idempotent_and_keeps_the_first_stop(two_roots):
    db_path, _ = two_roots
    with Store(db_path) as store:
        adaptive = root_id(store, "ab_adaptive")
        assert stops(store, "ab_adaptive") == {(None, None)}
        op = ("softmax", "float16")
        sequential.record_stops(store.conn, adaptive, [op], 3, names.DECIDED)
        sequential.record_stops(store.conn, adaptive, [op], 3, names.DECIDED)
        # a resumed campaign that asks again: what was decided stays decided
        sequential.record_stops(store.conn, adaptive, [op], 4, names.MAX_ROUNDS)
        rows = store.conn.execute("SELECT op, dtype, round, reason FROM op_stops").fetchall()
        assert rows == [("softmax", "float16", 3, "decided")]
        assert stops(store, "ab_adaptive") == {(3, "decided")}
        assert stops(store, "ab_fixed") == {(None, None)}
        with pytest.raises(ValueError, match="stop reason"):
            sequential.record_stops(store.conn, adaptive, [op], 4, "bored")
    # the stop outlives a re-ingest of the root and the reopening of the store
    with Store(db_path) as store:
        store.ingest(db_path.parent / "runs")
        assert stops(store, "ab_adaptive") == {(3, "decided")}


def test_stop_round_and_reason_in_ab_json_and_text(two_roots):
    db_path, _ = two_roots
    with Store(db_path) as store:
        sequential.record_stops(store.conn, root_id(store, "ab_adaptive"), [("softmax", "float16")], 4, "max rounds")
    rows = json_out(invoke(db_path, "ab", "ab_adaptive", "--json"))
    assert {(r["stopping"], r["stop_round"], r["stop_reason"]) for r in rows} == {("until-decided", 4, "max rounds")}
    rows = json_out(invoke(db_path, "ab", "ab_fixed", "--json"))
    assert {(r["stopping"], r["stop_round"], r["stop_reason"]) for r in rows} == {("fixed", None, None)}
    text = invoke(db_path, "ab", "ab_adaptive").output
    assert "stopped after round 4: max rounds" in text
    assert "anytime-valid" in text


def test_a_merge_adds_up_the_stops_of_each_tasks_store(tmp_path, two_roots):
    """--slurm: each task's store records its own ops' stops; merged, the
    root has them all and its ranges show them."""
    db_path, _ = two_roots
    other = tmp_path / "other.db"
    shutil.copy(db_path, other)
    with Store(other) as store:
        sequential.record_stops(store.conn, root_id(store, "ab_adaptive"), [("softmax", "float16")], 5, "decided")
    result = invoke(db_path, "merge", other)
    assert result.exit_code in (0, 1), result.output
    with Store(db_path) as store:
        assert stops(store, "ab_adaptive") == {(5, "decided")}


def test_the_report_of_an_until_decided_campaign_says_its_test_and_stops(two_roots, tmp_path):
    db_path, _ = two_roots
    with Store(db_path) as store:
        sequential.record_stops(store.conn, root_id(store, "ab_adaptive"), [("softmax", "float16")], 4, "max rounds")
    out = tmp_path / "report.md"
    result = invoke(db_path, "report", "ab_adaptive", "--md", "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "anytime-valid" in text and "stopped after round 4: max rounds" in text
    fixed = tmp_path / "fixed.md"
    assert invoke(db_path, "report", "ab_fixed", "--md", "-o", fixed).exit_code == 0
    assert "anytime-valid" not in fixed.read_text() and "stopped after" not in fixed.read_text()


def test_datasette_and_plain_sqlite_see_the_stop_in_ab_ranges(two_roots):
    """The view datasette shows: read with plain sqlite3, nothing of zlstore loaded."""
    import sqlite3  # noqa: PLC0415

    db_path, _ = two_roots
    with Store(db_path) as store:
        sequential.record_stops(store.conn, root_id(store, "ab_adaptive"), [("softmax", "float16")], 3, "decided")
    conn = sqlite3.connect(db_path)
    rows = conn.execute(
        "SELECT DISTINCT root, stopping, stop_round, stop_reason FROM ab_ranges ORDER BY root"
    ).fetchall()
    assert rows == [("ab_adaptive", "until-decided", 3, "decided"), ("ab_fixed", "fixed", None, None)]


def test_a_store_of_release_14_learns_each_roots_stopping(two_roots):
    """Upgraded, a store whose roots were stored before STOPPING was read
    takes it from each root's stored env file, and judges the until-decided
    root's ranges by the anytime rule (the migration computes them again)."""
    import sqlite3  # noqa: PLC0415

    from zlstore import db  # noqa: PLC0415

    db_path, _ = two_roots
    with Store(db_path) as store:
        expected = {(r["root"], r["shape"]): (r["p_value"], r["ci_low"]) for r in judge.ab_ranges(store)}
    with sqlite3.connect(db_path) as conn:  # as release 14 left it (the columns, empty: the migration keeps them)
        conn.execute("UPDATE roots SET stopping = NULL, min_rounds = NULL")
        conn.execute("UPDATE ab_range_rows SET p_value = NULL, ci_low = NULL")
        conn.execute("DELETE FROM settings WHERE key = 'schema_hash'")
        conn.execute("PRAGMA user_version = 14")
    with Store(db_path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
        got = {(r["root"], r["shape"]): (r["p_value"], r["ci_low"]) for r in judge.ab_ranges(store)}
        assert {r["stopping"] for r in judge.ab_ranges(store, "ab_adaptive")} == {"until-decided"}
    assert got.keys() == expected.keys()
    for key, (p_value, ci_low) in expected.items():
        assert got[key] == (pytest.approx(p_value), pytest.approx(ci_low))


def test_forgetting_a_root_forgets_its_stops(two_roots):
    db_path, _ = two_roots
    with Store(db_path) as store:
        sequential.record_stops(store.conn, root_id(store, "ab_adaptive"), [("softmax", "float16")], 3, "decided")
    assert invoke(db_path, "forget", "ab_adaptive").exit_code == 0
    with Store(db_path) as store:
        assert store.conn.execute("SELECT count(*) FROM op_stops").fetchone()[0] == 0


def test_what_would_settle_an_until_decided_range_is_a_lower_bound(two_roots):
    db_path, _ = two_roots
    with Store(db_path) as store:
        notes = {
            r["root"]: r["to_settle"]
            for r in judge.ab_ranges(store)
            if r["finding"] == "inconclusive" and r["to_settle"]
        }
    assert "more under the anytime-valid interval" in notes["ab_adaptive"]
    assert all("anytime" not in text for root, text in notes.items() if root == "ab_fixed")
