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
    """median(x), t_critical(df) and t_test_p(mean, sd, n) for the pairing
    SQL and the views (zlstore's connections and datasette's); SQLite's math
    functions where the library was built without them, so that the views
    read the same everywhere."""
    conn.create_aggregate("median", 1, Median)
    conn.create_function("t_critical", 1, t_critical, deterministic=True)
    conn.create_function("t_test_p", 3, t_test_p, deterministic=True)
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
