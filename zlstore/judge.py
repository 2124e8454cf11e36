"""Verdict and rejection-reason names: defined here once. The views in
schema.sql may only use these names (db.py refuses a schema that names any
other), and every command reads them from here."""

from typing import NamedTuple, Optional


class Verdict(NamedTuple):
    name: str
    when: str
    licenses: str
    range_label: Optional[str]  # what a speedup range of such a pair is, or None: no range


# In the order they are decided: the first that applies wins.
VERDICTS = (
    Verdict("TRUNCATED", "either side's RC is 124 or 137 (killed at CELL_TIMEOUT)",
            "nothing: re-run with a larger timeout", None),
    Verdict("NO_ROWS", "either side has no counted measurement",
            "nothing (usually the dtype)", None),
    Verdict("NO_TRITON", "both sides compiled no .ttgir at all",
            "nothing: the Triton pass under test had nothing to act on", None),
    Verdict("IR_CHANGED", "the two fingerprints differ",
            "measure it with repeated rounds", "result"),
    Verdict("NO_IR_DIFF", "the fingerprints are equal",
            "skip it; its speedup range is the machine's noise floor for that op",
            "noise floor"),
)
VERDICT_NAMES = tuple(v.name for v in VERDICTS)
BY_NAME = {v.name: v for v in VERDICTS}

# Older harness files spell a verdict differently; read them as the current name.
VERDICT_ALIASES = {"NO_KERNEL": "NO_TRITON"}

TIMEOUT_RCS = (124, 137)


def canonical_verdict(raw: Optional[str]) -> Optional[str]:
    """The current name of a verdict as a harness file spelled it."""
    if raw is None:
        return None
    raw = raw.strip()
    if raw == "":
        return None
    return VERDICT_ALIASES.get(raw, raw)


class Reason(NamedTuple):
    name: str
    meaning: str


# Why a measured row did not become an A/B pair, in order of precedence: a
# row gets the first that applies. Caliber first: a row under an unknown or
# different caliber could never pair, whatever else holds.
REASONS = (
    Reason("CALIBER_UNKNOWN", "at least one cell's caliber could not be established"),
    Reason("CALIBER_MISMATCH", "the two cells were measured under different calibers"),
    Reason("MISSING_SIDE", "the row (or its whole cell) exists on one side of the round only"),
    Reason("NOT_COUNTED", "the row is not a counted measurement on at least one side"),
)
REASON_NAMES = tuple(r.name for r in REASONS)
