"""The statistics behind a range and its finding: the median, and a paired
t-test on the log ratios of a range's rounds, with Benjamini-Hochberg
control over a root's ranges.

A round's before and after cells ran back to back, so the rounds of a range
are paired: each gives one log ratio d = ln(latency_before / latency_after).
The effect is exp(mean d), the geometric mean of the ratios; its interval is
exp(mean d +- t * sd / sqrt(n)); the p-value is the two-sided one-sample
t-test of mean d = 0. Latency noise is multiplicative, so its logarithm is
the scale on which it is close to normal, and a t-test there reaches
significance at 4 rounds where a rank test cannot (docs/judging.md, "How
zlstore decides", compares the anchors). ranges.py computes the columns in SQL with
the functions registered here; the views read what it stored.

This module imports nothing of zlstore. The distribution is scipy's, loaded
on first use: most commands never compute a range."""

import functools
import math
import os
import sqlite3
import threading
from typing import Optional

# Fewer paired rounds than this and a range gets no test, no interval and
# the finding 'too few rounds': at 2 rounds the t quantile is 12.7 and one
# round of a shared card decides everything.
MIN_ROUNDS = 3

# The interval's coverage: 95%, two-sided.
CONFIDENCE = 0.95


def _special():
    from scipy import special  # noqa: PLC0415 (0.2 s to import: only where a range is computed)

    return special


def load_in_background():
    """Import scipy's distribution in a thread, while an ingest's workers
    prepare its first cells: its batches need it for their ranges. Call it
    after the workers are forked (a fork during an import could leave the
    child holding the import lock), from the thread that forked them.

    OpenBLAS (numpy's) gets one thread: zlstore does no linear algebra, and
    the pool OpenBLAS starts on import spun for 0.2 s of CPU (the import took
    0.38-0.47 s of CPU, 0.17-0.22 s with one thread) on the cores the workers
    use. OpenBLAS reads the setting once, when it is loaded. It is set here,
    before the thread starts (setting a variable while another thread reads
    the environment is unsafe), and taken away as soon as the import is
    done, so no process zlstore starts later inherits it; a value the user
    set is left alone."""
    ours = "OPENBLAS_NUM_THREADS" not in os.environ
    if ours:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"

    def load():
        try:
            _special()
        finally:
            if ours:
                os.environ.pop("OPENBLAS_NUM_THREADS", None)

    threading.Thread(target=load, name="zlstore-load-scipy", daemon=True).start()


@functools.lru_cache(maxsize=256)
def t_critical(df) -> Optional[float]:
    """The Student t quantile at (1 + CONFIDENCE) / 2 with df degrees of
    freedom: an interval's half-width is this many standard errors."""
    if df is None or df < 1:
        return None
    return float(_special().stdtrit(df, (1 + CONFIDENCE) / 2))


def t_test_p(log_mean, log_sd, n) -> Optional[float]:
    """Two-sided p-value of the one-sample t-test of mean log ratio 0, from
    the mean, the sample standard deviation and the count (None under
    MIN_ROUNDS). Rounds that agree exactly (sd 0) give 1 at mean 0, else 0."""
    if n is None or log_mean is None or log_sd is None or n < MIN_ROUNDS:
        return None
    if log_sd == 0:
        return 1.0 if log_mean == 0 else 0.0
    t = log_mean / (log_sd / math.sqrt(n))
    return float(2 * _special().stdtr(n - 1, -abs(t)))


# The anytime-valid rule of an until-decided campaign (layout.STOPPING_UNTIL_DECIDED):
# the one-sample t-test's e-process. Its e-value is the Bayes factor of
# "the mean log ratio is not 0" with a normal prior N(0, g) on the
# standardized effect mean / sd and the right-Haar prior 1 / sd on the sd
# (Pérez-Ortiz, Lardy, de Heide and Grünwald, "E-statistics, group
# invariance and anytime-valid testing", Ann. Stat. 2024: the likelihood
# ratio of the t-statistics, the maximal invariant, so an e-process whose
# value may be read after every round). It depends on the data only
# through t and n, in closed form (Rouder et al. 2009, eq. 1 with g fixed):
#     E(t, n) = (1 + n g)^(-1/2) * ((1 + t^2 / v) / (1 + t^2 / (v (1 + n g))))^(n / 2),  v = n - 1.
# A mixture of e-values is one: ANYTIME_PRIOR weighs a few g, fixed in
# advance, over the standardized effects (mean / sd of a round's log ratio)
# campaigns meet, from about 1 (a 10% effect at 5% noise per side) to
# about 65 (2.5x at 1%). Each g caps what n rounds can show: E never
# exceeds (1 + n g)^((n - 1) / 2), so the wide g decides when the earliest
# rounds can count at all. e-BH's bar in a root of m ranges with k findings
# is m / (0.05 k), 40 to 80 in a root of 40: with g 2 and 20 alone, 3
# rounds could never pass it (their cap, 34); g = 200 lifts the cap to 201
# and a quiet large effect stops at round 3. g = 20 serves a large effect
# at moderate noise (2.5x at 5%: 13) at round 4, g = 2 the moderate effects
# of the last rounds (the interval at 12 rounds is t* 4.07, the narrowest
# one g gives, g = 1, 3.68). docs/judging.md says why these;
# bench/power.py measures them.
ANYTIME_PRIOR = ((0.4, 2.0), (0.3, 20.0), (0.3, 200.0))  # (weight, g): weights sum to 1


def t_evalue(t: float, n: int) -> float:
    """The e-value of the anytime-valid t-test at n paired rounds with
    t-statistic t (ANYTIME_PRIOR's mixture of Bayes factors); 1 under 2 rounds."""
    if n < 2:
        return 1.0
    v = n - 1
    total = 0.0
    for weight, g in ANYTIME_PRIOR:
        k = 1 + n * g
        # on the log scale: (1 + t^2 / v)^(n/2) overflows at t of 1e150
        log_e = -0.5 * math.log(k) + 0.5 * n * (math.log1p(t * t / v) - math.log1p(t * t / (v * k)))
        total += weight * math.exp(min(log_e, 700.0))
    return total


@functools.lru_cache(maxsize=256)
def anytime_t(n) -> Optional[float]:
    """The |t| at which the e-value reaches 1 / (1 - CONFIDENCE) at n rounds:
    the half-width of the anytime-valid confidence sequence in standard
    errors (the set of means m whose e-process for mean = m has not reached
    it: mean +- anytime_t * sd / sqrt(n)). None where no t reaches it (too
    few rounds for this confidence): the interval is the whole line."""
    if n is None or n < 2:
        return None
    level = 1 / (1 - CONFIDENCE)
    low, high = 0.0, 1.0
    while t_evalue(high, n) < level:
        high *= 2
        if high > 1e12:
            return None
    for _ in range(200):  # bisection: the e-value grows with |t|
        middle = (low + high) / 2
        if t_evalue(middle, n) < level:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return high


def anytime_p(log_mean, log_sd, n) -> Optional[float]:
    """The anytime-valid p-value of mean log ratio 0: min(1, 1 / e-value) (None
    under MIN_ROUNDS). Benjamini-Hochberg over these is e-BH (Wang and Ramdas
    2022), valid whatever the dependence between ranges and whenever each
    stopped. Rounds that agree exactly (sd 0) give 1 at mean 0, else 0."""
    if n is None or log_mean is None or log_sd is None or n < MIN_ROUNDS:
        return None
    if log_sd == 0:
        return 1.0 if log_mean == 0 else 0.0
    t = log_mean / (log_sd / math.sqrt(n))
    return min(1.0, 1.0 / t_evalue(t, n))


class Median:
    """median(x): the middle value, or the mean of the two middle values for
    an even count; NULLs are skipped. The one definition of a range's median
    (every median zlstore shows is computed by it)."""

    def __init__(self):
        self.values = []

    def step(self, value):
        if value is not None:
            self.values.append(value)

    def finalize(self):
        if not self.values:
            return None
        values = sorted(self.values)
        middle = len(values) // 2
        if len(values) % 2:
            return values[middle]
        # halves first: (a + b) / 2 overflows to infinity for two values near
        # the largest float (median(1e308, 1e308)); halving is exact, so for
        # every other pair this is statistics.median's answer, bit for bit
        return values[middle - 1] / 2 + values[middle] / 2


_MATH = {"ln": (1, math.log), "exp": (1, math.exp), "sqrt": (1, math.sqrt), "ceil": (1, math.ceil)}


def register(conn: sqlite3.Connection):
    """median(x), t_critical(df), t_test_p(mean, sd, n), anytime_t(n) and
    anytime_p(mean, sd, n) for the pairing
    SQL and the views (zlstore's connections and datasette's); SQLite's math
    functions where the library was built without them, so that the views
    read the same everywhere."""
    conn.create_aggregate("median", 1, Median)
    conn.create_function("t_critical", 1, t_critical, deterministic=True)
    conn.create_function("t_test_p", 3, t_test_p, deterministic=True)
    conn.create_function("anytime_t", 1, anytime_t, deterministic=True)
    conn.create_function("anytime_p", 3, anytime_p, deterministic=True)
    try:
        conn.execute("SELECT ln(1), exp(0), sqrt(1), ceil(0.5)").fetchone()
    except sqlite3.OperationalError:
        for name, (arity, fn) in _MATH.items():
            conn.create_function(name, arity, _null_safe(fn), deterministic=True)


def _null_safe(fn):
    def call(value):
        try:
            return None if value is None else fn(value)
        except (ValueError, OverflowError):
            return None

    return call
