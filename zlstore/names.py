"""The names zlstore's SQL and Python share, each defined once here: the
verdicts, the reasons a row does not pair and the findings (each with when
it applies, in words and as the SQL condition the views decide it by), the
round key, the judging thresholds' defaults, and the exit statuses.

This module imports nothing of zlstore, so that every other module may
import it. SQL reaches these names only through macros.render_schema's macros
(schema.sql and pairing.py): "[[verdict NAME]]" quotes a name and refuses
one not defined here; "[[case verdicts]]" is the CASE that decides a
verdict, from VERDICTS' conditions in their order (likewise reasons and
findings); "[[round: ...]]" spells the round key."""

from typing import NamedTuple, Optional

# What a cell killed at its CELL_TIMEOUT exits with (timeout(1): 124; a
# SIGKILL after it: 137). zlstore records a cell its runner killed with the first.
TIMEOUT_RCS = (124, 137)
TIMEOUT_RC = TIMEOUT_RCS[0]

# The exit statuses of zlstore's commands (docs/cli.md: "Exit statuses").
EXIT_OK = 0             # everything done
EXIT_PROBLEMS = 1       # some input had problems (everything readable was stored); ab --fail-on: a range has a named finding
EXIT_USAGE = 2          # usage or environment error: bad path, bad --db, unknown or wrong-kind root, newer schema,
                        # a full disk, stdout that cannot be written (ENOSPC: one line on stderr)
EXIT_UNFINISHED = 3     # record: a cell without cell.env / RC yet (nothing of it stored)
EXIT_INTERNAL = 70      # a bug in zlstore (BSD's EX_SOFTWARE): the traceback is printed
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (zlstore ab | head): 128 + SIGPIPE


class Verdict(NamedTuple):
    name: str
    when: str
    licenses: str
    range_label: Optional[str]  # what a speedup range of such a pair is, or None: no range
    # When it applies, in SQL over the pair's cells b (before) and a (after),
    # NULL where a side has none, their fingerprints fb and fa under the
    # rule judged, how many current cells claim each side
    # (pairs.before_claims, after_claims), and the pairing's duplicate rounds
    # of b and a (db, da: ab_duplicate_rounds, whose before_copies /
    # after_copies count the other cells that hold its cell's files) (view
    # verdicts_by_rule).
    condition: str


_KILLED = ", ".join(str(rc) for rc in TIMEOUT_RCS)

# A side of a round (or a screening pair) that more than one current cell
# claims: a copied cell directory (`cp -r X_after X_after.bak`, a round
# directory copied with its cell.env) holds other numbers under the same
# name, and which process measured the side cannot be told. Or a side whose
# cell, with counted rows, holds the very files another current cell of its
# root holds (cells.content_sig): no two benchmark processes write the same
# run.log, so one is a copy (a repeat directory copied to `ab_X.bak`, a
# round copied into another card), and its rounds would count the same
# measurement twice. Nothing of such a round is paired or judged
# (DUPLICATE_CELL below, first of each).
DUPLICATE = "DUPLICATE_CELL"

# In the order they are decided: the first that applies wins ("[[case
# verdicts]]"); a pair none applies to (a fingerprint not computed) has none.
VERDICTS = (
    Verdict(DUPLICATE, "a side is claimed by more than one stored cell, or another holds the same files "
                       "(a copied cell directory?)",
            "nothing: which cell measured that side cannot be told; forget the copy (zlstore problems names both)",
            None, "pairs.before_claims > 1 OR pairs.after_claims > 1 OR db.before_copies > 0 OR da.after_copies > 0"),
    Verdict("TRUNCATED", f"either side's RC is {' or '.join(map(str, TIMEOUT_RCS))} (killed at CELL_TIMEOUT)",
            "nothing: re-run with a larger timeout", None,
            f"b.rc IN ({_KILLED}) OR a.rc IN ({_KILLED})"),
    Verdict("NO_ROWS", "either side has no counted measurement",
            "nothing (usually the dtype)", None,
            "b.id IS NULL OR a.id IS NULL OR b.n_counted = 0 OR a.n_counted = 0"),
    Verdict("IR_UNREAD", "a side's IR could not be read in full (cells.ir_incomplete)",
            "nothing: a side's IR could not be read in full; fix the files and ingest again", None,
            "b.ir_incomplete OR a.ir_incomplete"),
    Verdict("NO_TRITON", "both sides compiled no .ttgir at all",
            "nothing: the Triton pass under test had nothing to act on", None,
            "b.n_kernels = 0 AND a.n_kernels = 0"),
    Verdict("IR_CHANGED", "the two fingerprints differ",
            "measure it with repeated rounds", "indicative (one round)",
            "fb.fingerprint <> fa.fingerprint"),
    Verdict("NO_IR_DIFF", "the fingerprints are equal",
            "skip it; its speedup range is the machine's noise floor for that op",
            "noise floor",
            "fb.fingerprint = fa.fingerprint"),
)
VERDICT_NAMES = tuple(v.name for v in VERDICTS)
BY_NAME = {v.name: v for v in VERDICTS}

# Older harness files spell a verdict differently; read them as the current name.
VERDICT_ALIASES = {"NO_KERNEL": "NO_TRITON"}


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
    # When it applies, in SQL over the round r (its before_cell_id,
    # after_cell_id, before_caliber_id, after_caliber_id, and how many
    # current cells claim each side: before_claims, after_claims, and how
    # many others hold the files of its cell: before_copies, after_copies) and the row's two
    # sides in it s (before_id, after_id: their measurements ids, NULL where
    # the side lacks the row; before_counted, after_counted); None: every
    # row that does not pair and no reason before it takes (the last).
    condition: Optional[str]


# A side of a round (or of a screening pair) with no stored cell, or a row
# present on one side only.
MISSING_SIDE = "MISSING_SIDE"

# A row of a round is an A/B pair when it is present and counted on both
# sides, each side is one cell's, and both cells have the same known caliber
# (over r and s, as Reason.condition): the one definition of a pair ("[[case
# reasons]]" is NULL for it).
PAIRED = ("s.before_id IS NOT NULL AND s.after_id IS NOT NULL AND s.before_counted = 1 AND s.after_counted = 1"
          " AND r.before_claims = 1 AND r.after_claims = 1 AND r.before_copies = 0 AND r.after_copies = 0"
          " AND r.before_caliber_id = r.after_caliber_id")

# Why a measured row did not become an A/B pair, in order of precedence: a
# row gets the first that applies. A side two cells claim first: its row
# is nobody's in particular. Then caliber: a row under an unknown or
# different caliber could never pair, whatever else holds.
REASONS = (
    Reason(DUPLICATE, "more than one stored cell claims a side of the round, or another holds the same files "
                      "(a copied cell directory?)",
           "r.before_claims > 1 OR r.after_claims > 1 OR r.before_copies > 0 OR r.after_copies > 0"),
    Reason("CALIBER_UNKNOWN", "at least one cell's caliber could not be established",
           "(r.before_cell_id IS NOT NULL AND r.before_caliber_id IS NULL)"
           " OR (r.after_cell_id IS NOT NULL AND r.after_caliber_id IS NULL)"),
    Reason("CALIBER_MISMATCH", "the two cells were measured under different calibers",
           "r.before_caliber_id <> r.after_caliber_id"),
    Reason(MISSING_SIDE, "the row (or its whole cell) exists on one side of the round only",
           "s.before_id IS NULL OR s.after_id IS NULL"),
    Reason("NOT_COUNTED", "the row is not a counted measurement on at least one side", None),
)
REASON_NAMES = tuple(r.name for r in REASONS)


class Finding(NamedTuple):
    name: str
    when: str
    licenses: str
    # When it applies, in SQL over the range r (an ab_range_rows row: rounds,
    # ci_low, ci_high, q_value) and the thresholds t (judging_settings:
    # q_max, min_effect, min_rounds); None: every range no other takes.
    condition: Optional[str]


# What a repeat run's or campaign's range says about the switch, in the
# order they are shown (findings first). The view ab_range_judgements
# decides them ("[[case findings]]") from the statistics in
# zlstore/stats.py and the thresholds in SETTINGS; the conditions never
# overlap (under min_rounds a range has no interval).
FINDINGS = (
    Finding("faster", "q_value <= q_max and the whole interval lies above 1 + min_effect",
            "saying the switch made this shape faster, by about the effect",
            "r.q_value <= t.q_max AND r.ci_low > 1 + t.min_effect"),
    Finding("slower", "q_value <= q_max and the whole interval lies below 1 / (1 + min_effect)",
            "saying the switch made this shape slower, by about the effect",
            "r.q_value <= t.q_max AND r.ci_high < 1 / (1 + t.min_effect)"),
    Finding("no change", "the whole interval lies within 1 / (1 + min_effect) .. 1 + min_effect",
            "saying that any change is smaller than min_effect (an equivalence result)",
            "r.ci_low > 1 / (1 + t.min_effect) AND r.ci_high < 1 + t.min_effect"),
    Finding("inconclusive", "none of the above: the interval straddles a bound, or q_value > q_max",
            "nothing yet: to_settle says what would settle it (more rounds, a quieter card)", None),
    Finding("too few rounds", "fewer paired rounds than the test needs (min_rounds)",
            "nothing: run more rounds",
            "r.rounds < t.min_rounds"),
)
FINDING_NAMES = tuple(f.name for f in FINDINGS)

# The settings judging reads (the settings table), with their defaults:
# current_rule, the fingerprint rule the verdicts use (ttgir.RULES);
# q_max, the false-discovery rate a finding is held to; min_effect, the
# smallest change (as a fraction, 0.02 = 2%) worth calling faster or slower.
SETTINGS = {"current_rule": "v3", "q_max": "0.05", "min_effect": "0.02"}


class RoundColumn(NamedTuple):
    name: str   # in ab_stale_rounds, ab_slot_rows, ab_round_ranges and ab_duplicate_rounds
    cells: str  # the cells column it is taken from
    same: str   # how two rows' values are compared: '=' (never NULL) or 'IS'
    type: str   # its declaration in those tables


# A round: the before and after cell of one cell op and dtype in one round
# on one card of one root (and one repeat directory of a campaign card); a
# screening pair (round 0) on any card (cells.pair_card).
# Its rows pair with each other (pairing.py); the triggers in schema.sql
# mark the round of every cell that changes. "[[round: TEMPLATE]]" repeats
# TEMPLATE per column ({k} name, {c} cells column, {is} comparison, {type}
# declaration).
ROUND_KEY = (
    RoundColumn("root_id", "root_id", "=", "INTEGER NOT NULL"),
    RoundColumn("card", "pair_card", "IS", "INTEGER"),  # NULL in a screening pair: its cells' card never keys it
    RoundColumn("repeat_dir", "repeat_dir", "IS", "TEXT"),
    RoundColumn("cell_op", "op", "IS", "TEXT"),
    RoundColumn("cell_dtype", "dtype", "IS", "TEXT"),
    RoundColumn("round", "round", "IS", "INTEGER"),
)


# A range of a repeat run or campaign as pairing.py computes it (the table
# ab_range_rows, but for its judgement): its key, its rounds' range and
# statistics, and its JSON fragments. "[[range: TEMPLATE]]" repeats
# TEMPLATE per column ({c}).
RANGE_COLUMNS = (
    "root_id", "op", "dtype", "shape", "caliber_id", "rounds", "min", "median", "max",
    "fallback", "fallback_rows", "cards", "rejected", "rejected_reasons", "log_mean", "log_sd",
    "effect", "ci_low", "ci_high", "p_value", "q_value", "json_head", "json_tail",
)
