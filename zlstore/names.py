"""The names zlstore's SQL and Python share, each defined once here: the
verdicts, the reasons a row does not pair and the findings (each with when
it applies, in words and as the SQL condition the views decide it by), the
round key, the judging thresholds' defaults, and the exit statuses.

This module imports nothing of zlstore, so that every other module may
import it. SQL reaches these names only through macros.render_schema's macros
(schema.sql and derive.py's steps): "[[verdict NAME]]" quotes a name and refuses
one not defined here; "[[case verdicts]]" is the CASE that decides a
verdict, from VERDICTS' conditions in their order (likewise reasons and
findings); "[[round: ...]]" spells the round key.

Each family's conditions read one row of named inputs and nothing else:
VERDICT_INPUTS, REASON_INPUTS and FINDING_INPUTS name its columns and say
what each holds; the SQL builds that row (the CTEs verdict_inputs,
reason_inputs and finding_inputs) right above the CASE that reads it.
FACTS are what the conditions are built from, one side at a time: a
screening pair's note says the same facts ("[[fact NAME SIDE]]")."""

from typing import Dict, NamedTuple, Optional, Tuple

# What a cell killed at its CELL_TIMEOUT exits with (timeout(1): 124; a
# SIGKILL after it: 137). zlstore records a cell its runner killed with the first.
TIMEOUT_RCS = (124, 137)
TIMEOUT_RC = TIMEOUT_RCS[0]

# The exit statuses of zlstore's commands (docs/cli.md: "Exit statuses").
EXIT_OK = 0  # everything done
EXIT_PROBLEMS = 1  # some input had problems (everything readable was stored); ab --fail-on: a range has a named finding
EXIT_USAGE = 2  # usage or environment error: bad path, bad --db, unknown or wrong-kind root, newer schema,
# a full disk, stdout that cannot be written (ENOSPC: one line on stderr)
EXIT_UNFINISHED = 3  # record: a cell without cell.env / RC yet (nothing of it stored)
EXIT_INTERNAL = 70  # a bug in zlstore (BSD's EX_SOFTWARE): the traceback is printed
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (zlstore ab | head): 128 + SIGPIPE


SIDES = ("before", "after")


class Inputs(NamedTuple):
    """The one row a family's conditions read, by column name (no join
    alias): the SQL builds it in a CTE of this name right above the CASE
    that reads it, and says the same there in a comment."""

    cte: str
    row: str  # what one row is
    sided: Dict[str, str]  # column -> what it holds, once per side: before_X and after_X
    common: Dict[str, str]  # column -> what it holds, once

    def columns(self) -> Tuple[str, ...]:
        return tuple(f"{side}_{c}" for c in self.sided for side in SIDES) + tuple(self.common)


class Verdict(NamedTuple):
    name: str
    when: str
    licenses: str
    range_label: Optional[str]  # what a speedup range of such a pair is, or None: no range
    # When it applies, in SQL over a VERDICT_INPUTS row (view
    # verdicts_by_rule, its CTE verdict_inputs).
    condition: str


# What a verdict's condition reads: NULL where the side has no current cell
# (macros.py's [[current_side]]).
VERDICT_INPUTS = Inputs(
    "verdict_inputs",
    "one screening pair (its before and after cell) under one fingerprint rule",
    {
        "cell_id": "the side's current cell (cells.id)",
        "rc": "its exit status",
        "n_counted": "how many counted measurements it holds",
        "ir_incomplete": "1 where its IR could not be read in full",
        "n_kernels": "how many .ttgir it compiled",
        "fingerprint": "its fingerprint under the rule (NULL: not computed)",
        "claims": "how many current cells claim the side (more than 1: a copy)",
        "copies": "how many other current cells hold its cell's files (0: none)",
        "caliber_id": "its cell's caliber (NULL: unknown): the pair's note reads it, no verdict does",
    },
    {},
)


_KILLED = ", ".join(str(rc) for rc in TIMEOUT_RCS)

# What holds of one side ({side}: before or after), or of the pair, over a
# row of inputs' columns: the conditions below are built from these, and a
# screening pair's note (verdicts_by_rule) says which hold, of which side,
# through "[[fact NAME SIDE]]" ("[[fact NAME]]"), so that the verdict and
# its note never say different things.
FACTS = {
    "claimed_twice": "{side}_claims > 1",
    "copied": "{side}_copies > 0",
    "missing": "{side}_cell_id IS NULL",
    "killed": f"{{side}}_rc IN ({_KILLED})",
    "uncounted": "{side}_n_counted = 0",
    "ir_unread": "{side}_ir_incomplete",
    "no_kernels": "{side}_n_kernels = 0",
    "caliber_unknown": "({side}_cell_id IS NOT NULL AND {side}_caliber_id IS NULL)",
    "unfingerprinted": "({side}_cell_id IS NOT NULL AND {side}_fingerprint IS NULL)",
    "calibers_differ": "before_caliber_id <> after_caliber_id",
}


def fact(name: str, side: Optional[str] = None) -> str:
    """FACTS[name] (of one side, where it is a side's), as SQL."""
    if ("{side}" in FACTS[name]) != (side in SIDES):
        raise ValueError(f"fact {name!r} is of {'a side' if '{side}' in FACTS[name] else 'the pair'}, not {side!r}")
    return FACTS[name].format(side=side)


def either(*facts: str) -> str:
    """SQL: one of facts holds of a side (each fact of before, then of after)."""
    return " OR ".join(fact(name, side) for name in facts for side in SIDES)


def both(name: str) -> str:
    """SQL: the fact holds of both sides."""
    return " AND ".join(fact(name, side) for side in SIDES)


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
    Verdict(
        DUPLICATE,
        "a side is claimed by more than one stored cell, or another holds the same files (a copied cell directory?)",
        "nothing: which cell measured that side cannot be told; forget the copy (zlstore problems names both)",
        None,
        either("claimed_twice", "copied"),
    ),
    Verdict(
        "TRUNCATED",
        f"either side's RC is {' or '.join(map(str, TIMEOUT_RCS))} (killed at CELL_TIMEOUT)",
        "nothing: re-run with a larger timeout",
        None,
        either("killed"),
    ),
    Verdict(
        "NO_ROWS",
        "either side has no counted measurement",
        "nothing (usually the dtype)",
        None,
        either("missing", "uncounted"),
    ),
    Verdict(
        "IR_UNREAD",
        "a side's IR could not be read in full (cells.ir_incomplete)",
        "nothing: a side's IR could not be read in full; fix the files and ingest again",
        None,
        either("ir_unread"),
    ),
    Verdict(
        "NO_TRITON",
        "both sides compiled no .ttgir at all",
        "nothing: the Triton pass under test had nothing to act on",
        None,
        both("no_kernels"),
    ),
    Verdict(
        "IR_CHANGED",
        "the two fingerprints differ",
        "measure it with repeated rounds",
        "indicative (one round)",
        "before_fingerprint <> after_fingerprint",
    ),
    Verdict(
        "NO_IR_DIFF",
        "the fingerprints are equal",
        "skip it; its speedup range is the machine's noise floor for that op",
        "noise floor",
        "before_fingerprint = after_fingerprint",
    ),
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
    # When it applies, in SQL over a REASON_INPUTS row; None: every row
    # that does not pair and no reason before it takes (the last).
    condition: Optional[str]


# What a reason's condition (and PAIRED) reads: the columns of ab_slot_rows
# by the same names, and the round's claims and copies.
REASON_INPUTS = Inputs(
    "reason_inputs",
    "one row identity of a round (pairing._slot_rows), both sides side by side",
    {
        "measurement_id": "the side's row (measurements.id; NULL: the side lacks it)",
        "counted": "1 where that row is a counted measurement",
        "cell_id": "the side's current cell in the round (NULL: none)",
        "caliber_id": "that cell's caliber (NULL: unknown)",
        "claims": "how many current cells claim the side (more than 1: a copy)",
        "copies": "how many other current cells hold its cell's files (0: none)",
    },
    {},
)


# A side of a round (or of a screening pair) with no stored cell, or a row
# present on one side only.
MISSING_SIDE = "MISSING_SIDE"

# A row of a round is an A/B pair when it is present and counted on both
# sides, each side is one cell's, and both cells have the same known caliber
# (over a REASON_INPUTS row): the one definition of a pair ("[[case
# reasons]]" is NULL for it).
PAIRED = (
    "before_measurement_id IS NOT NULL AND after_measurement_id IS NOT NULL"
    " AND before_counted = 1 AND after_counted = 1"
    " AND before_claims = 1 AND after_claims = 1 AND before_copies = 0 AND after_copies = 0"
    " AND before_caliber_id = after_caliber_id"
)

# Why a measured row did not become an A/B pair, in order of precedence: a
# row gets the first that applies. A side two cells claim first: its row
# is nobody's in particular. Then caliber: a row under an unknown or
# different caliber could never pair, whatever else holds.
REASONS = (
    Reason(
        DUPLICATE,
        "more than one stored cell claims a side of the round, or another holds the same files "
        "(a copied cell directory?)",
        either("claimed_twice", "copied"),
    ),
    Reason("CALIBER_UNKNOWN", "at least one cell's caliber could not be established", either("caliber_unknown")),
    Reason("CALIBER_MISMATCH", "the two cells were measured under different calibers", fact("calibers_differ")),
    Reason(
        MISSING_SIDE,
        "the row (or its whole cell) exists on one side of the round only",
        "before_measurement_id IS NULL OR after_measurement_id IS NULL",
    ),
    Reason("NOT_COUNTED", "the row is not a counted measurement on at least one side", None),
)
REASON_NAMES = tuple(r.name for r in REASONS)


class Finding(NamedTuple):
    name: str
    when: str
    licenses: str
    # When it applies, in SQL over a FINDING_INPUTS row; None: every range
    # no other takes.
    condition: Optional[str]


# What a finding's condition reads: a range's statistics (ab_range_rows)
# with the thresholds beside it (judging_settings).
FINDING_INPUTS = Inputs(
    "finding_inputs",
    "one range of ab_range_rows with the thresholds it is judged under",
    {},
    {
        "rounds": "its paired rounds",
        "ci_low": "the low end of its effect's 95% interval (NULL under min_rounds)",
        "ci_high": "the high end",
        "q_value": "its p-value adjusted over the root's tested ranges (Benjamini-Hochberg)",
        "q_max": "the false-discovery rate a finding is held to",
        "min_effect": "the smallest change worth a finding, as a fraction",
        "min_rounds": "fewer paired rounds get no test (stats.MIN_ROUNDS)",
    },
)


# What a repeat run's or campaign's range says about the switch, in the
# order they are shown (findings first). The view ab_range_judgements
# decides them ("[[case findings]]") from the statistics in
# zlstore/stats.py and the thresholds in SETTINGS; the conditions never
# overlap (under min_rounds a range has no interval).
FINDINGS = (
    Finding(
        "faster",
        "q_value <= q_max and the whole interval lies above 1 + min_effect",
        "saying the switch made this shape faster, by about the effect",
        "q_value <= q_max AND ci_low > 1 + min_effect",
    ),
    Finding(
        "slower",
        "q_value <= q_max and the whole interval lies below 1 / (1 + min_effect)",
        "saying the switch made this shape slower, by about the effect",
        "q_value <= q_max AND ci_high < 1 / (1 + min_effect)",
    ),
    Finding(
        "no change",
        "the whole interval lies within 1 / (1 + min_effect) .. 1 + min_effect",
        "saying that any change is smaller than min_effect (an equivalence result)",
        "ci_low > 1 / (1 + min_effect) AND ci_high < 1 + min_effect",
    ),
    Finding(
        "inconclusive",
        "none of the above: the interval straddles a bound, or q_value > q_max",
        "nothing yet: to_settle says what would settle it (more rounds, a quieter card)",
        None,
    ),
    Finding(
        "too few rounds",
        "fewer paired rounds than the test needs (min_rounds)",
        "nothing: run more rounds",
        "rounds < min_rounds",
    ),
)
FINDING_NAMES = tuple(f.name for f in FINDINGS)
# The findings that say the switch changed a shape (faster, slower): what a
# report shows first.
EFFECT_FINDINGS = FINDING_NAMES[:2]

# The findings that decide a range: an until-decided campaign's op stops
# once every range of it has one (zlstore/store/sequential.py); the others need
# rounds.
DECIDING_FINDINGS = FINDING_NAMES[:3]

# A campaign's stopping rules (campaign.env STOPPING, read by
# layout.stopping into roots.stopping): "fixed", every op runs ROUNDS rounds
# and today's t-test judges it; "until-decided", an op stops once its ranges
# are decided and the anytime-valid test judges it (zlstore/store/sequential.py).
STOPPINGS = ("fixed", "until-decided")

# Why an op of an until-decided campaign stopped running rounds, in the
# order shown: every range of it decided; MAX rounds reached with some
# range undecided; its cells failed (the runner says so). Stored in
# op_stops, and in the campaign tree's stops/*.tsv (layout.STOPS_DIR).
DECIDED, MAX_ROUNDS, FAILED = "decided", "max rounds", "failed"
STOP_REASONS = (DECIDED, MAX_ROUNDS, FAILED)

# The settings judging reads (the settings table), with their defaults:
# current_rule, the fingerprint rule the verdicts use (ttgir.RULES);
# q_max, the false-discovery rate a finding is held to; min_effect, the
# smallest change (as a fraction, 0.02 = 2%) worth calling faster or slower.
SETTINGS = {"current_rule": "v3", "q_max": "0.05", "min_effect": "0.02"}


class RoundColumn(NamedTuple):
    name: str  # in ab_stale_rounds, ab_slot_rows, ab_round_ranges and ab_duplicate_rounds
    cells: str  # the cells column it is taken from
    same: str  # how two rows' values are compared: '=' (never NULL) or 'IS'
    type: str  # its declaration in those tables


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


# A range of a repeat run or campaign as ranges.py computes it (the table
# ab_range_rows, but for its judgement): its key, its rounds' range and
# statistics, and its JSON fragments. "[[range: TEMPLATE]]" repeats
# TEMPLATE per column ({c}).
RANGE_COLUMNS = (
    "root_id",
    "op",
    "dtype",
    "shape",
    "caliber_id",
    "rounds",
    "min",
    "median",
    "max",
    "latency_before",
    "latency_after",
    "fallback",
    "fallback_rows",
    "cards",
    "rejected",
    "rejected_reasons",
    "log_mean",
    "log_sd",
    "effect",
    "ci_low",
    "ci_high",
    "p_value",
    "q_value",
    "json_head",
    "json_tail",
    "stop_round",
    "stop_reason",
)
