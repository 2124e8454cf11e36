"""The derivation: what the writers compute from the stored cells, one named step.

Pairing every measured row of a campaign on each read took seconds; a
campaign is written once and read many times. So the pairs, the ranges
over rounds, their findings and the noise floors are tables, and every
writer calls derive() inside its own write transaction, before it commits:
a committed store never holds stale pairs. Triggers in schema.sql only mark
work (the four stale queues); they compute nothing. derive() runs, in
this order, the steps of:

1. pairing.py: the stale rounds paired again; their row identities queued
   for their ranges; a screening round among them marks every rule's
   noise floors stale; screenpairs.py: the screening pairs of those
   rounds (marked before pairing) and of changed recorded verdicts found
   again;
2. ranges.py: the stale ranges computed again; not final, their roots'
   q-values are taken away until the final derivation (ranges.PENDING);
3. floors.py, final only: the stale noise floors;
4. ranges.py, final only: Benjamini-Hochberg over each touched root's
   family, then the judgement of every range whose stored one cannot be
   read;
5. irchanges.py, final only: the IR change of each op with a faster or
   slower range that lacks one (derive_changes), which `ab --json` reads.

Final is the default: a batch of a whole-tree ingest and a merged root
pass final=False, because the run's own final derivation follows
(Ingester.run, merge.Merger); their ranges meanwhile are judged on read.

The entry points: derive(conn, final=True, rejudge=False, every=False),
inside the caller's transaction; Store.derive(), final, in a transaction
of its own (the last step of an ingest, a record and a merge); stale(conn),
whether derive() has work to do (Store.refresh_pairs asks before it
writes); unjudged(conn), whether a stored judgement cannot be read as it
is; statements(), the SQL each stage runs, rendered (its copy is the
second half of docs/schema.rendered.sql).

Every derived table, what it is derived from, who refreshes it and how a
reader knows it is current (docs/development.md shows this list):

- `ab_stale_rounds` (a queue). From a cell inserted, deleted or edited, a
  root's kind changed, a row edited (triggers `cells_*_marks_round*`,
  `roots_kind_marks_rounds`, `measurements_*_marks_round`), and
  `pairing.mark_every_round` (`derive(every=True)`). Emptied by
  `pairing.STEPS`. Current when empty: `stale()` is false.
- `ab_slot_rows`, the pairs. From the current cell of each side of a stale
  round (`[[current_side]]`) and their measurements; why a row does not
  pair is the first of `names.REASONS` that applies. Refreshed by
  `pairing.STEPS`, every writer.
  Current when `ab_stale_rounds` is empty.
- `ab_round_ranges`. From the paired rows of a screening round. Refreshed
  by `pairing.STEPS`. Current as `ab_slot_rows`.
- `ab_duplicate_rounds`. Rounds a side of which several current cells
  claim, or whose cell another copies (view `cell_copies`). Refreshed by
  `pairing.STEPS`. Current as `ab_slot_rows`.
- `screen_stale_pairs` (a queue). From the keys (root, cell op, dtype)
  of stale rounds of a screening root (`screenpairs.MARK`, before
  pairing), a recorded verdict inserted, deleted or edited and a root's
  kind changed (triggers `recorded_verdicts_*_marks_pair`,
  `roots_kind_marks_rounds`). Emptied by `screenpairs.STEPS`. Current when
  empty.
- `screen_pair_rows`, the screening pairs. From a screening root's cells
  of either side and its recorded verdicts: the current cell of each side
  (`[[current_side]]`), its claimants, the recorded verdicts and
  `environment_differences`. Refreshed by `screenpairs.STEPS`, every
  writer. Current when `screen_stale_pairs` is empty.
- `ab_stale_ranges` (a queue). From the row identities (root, op, dtype,
  shape) of the rounds just paired again. Filled by `pairing.STEPS`,
  emptied by `ranges.STEPS`. Current when empty.
- `ab_range_rows`, the range and its statistics. From `ab_slot_rows` over a
  key's rounds, with stats.py's functions. Refreshed by `ranges.STEPS`;
  its `q_value` only by a final derivation (`ranges.FAMILIES`:
  Benjamini-Hochberg over a root's family; `ranges.PENDING` takes those
  of a batch's roots away until then). Current when `ab_stale_ranges` is empty and no
  tested range lacks a q-value (`unjudged()` is false).
- `ab_range_rows`, its finding, floor columns and `judged`. From the view
  `ab_range_unjudged`: the range, the settings, the noise floors.
  Refreshed by a final derivation (`ranges.JUDGING`), every range again
  with `rejudge` when a setting changes (`Store.set_setting`). Current when
  `judged` is set and `judging_basis.current`; where not, the view
  `ab_range_judgements` judges the range on read, so a reader never sees a
  stale finding, only a slower one.
- `ab_range_json`. From the judged range's `ab_ranges` row as `--json`
  prints it. Refreshed by `ranges.JUDGING`; trigger
  `ab_range_rows_delete_drops_json`. Current as the judgement.
- `ab_judgement_basis`. From the view `judging_basis` (the settings, the
  rule, the schema's hash, the current rule's floors, each campaign's own
  screening root) when the judgements
  were stored. Refreshed by `ranges.JUDGING`. Current when
  `judging_basis.current`.
- `ab_stale_floors` (a queue). From a rule's fingerprints added
  (`floors.mark`: `Store.compute_fingerprints`) or deleted by hand
  (trigger `fingerprints_delete_marks_floors`), and every rule when a
  screening round is paired again or cells gain fingerprints they lacked
  (`floors.mark_every`). Emptied by `floors.STEPS`, final only. Current
  when empty.
- `noise_floor_rows`, per screening root, row op, dtype, shape, caliber
  and machine. From `verdicts_by_rule`'s NO_IR_DIFF screening pairs, their
  cells' environments (`environment_machines`) and their `ab_slot_rows`.
  Refreshed by `floors.STEPS`, final only. Current when `ab_stale_floors`
  is empty.
- `noise_floor_texts`, per rule. From `noise_floor_rows`, spelled as
  `judging_basis` reads them (view `noise_floor_texts_now`). Refreshed by
  `floors.STEPS` with the floors; a floor edited by hand drops its rule's
  (triggers `noise_floor_rows_*_drops_text`). Current when present:
  judging_basis spells the floors itself where it is not.

- `ir_change_rows`. From the findings (`ab_range_rows.finding` faster or
  slower) and the op's pair of cells (its campaign's screening pair, else
  its first round): irchanges.op_changes' summary, under the current rule.
  Refreshed by a final derivation (`irchanges.derive_changes`): a row whose
  cells are gone, superseded or no longer the pair goes, a missing one is
  summed up. Current when every finding's op has one; a reader without one
  sums it up on read.

Caches, outside derive(): `ir_digests` (an IR text's digest under a rule:
written with the cell's fingerprints by ingest and
`Store.compute_fingerprints`; keyed by the text's hash, never stale),
`walked_dirs` (a walk's directory listings with their times: unchanged.py
trusts a listing only while the directory's times are the same), and the
settings `schema_hash` (ensure_schema recreates the views and triggers
when schema.sql's rendered hash differs) and `backfill_screen_fingerprints`
(Store fills a screening cell's missing fingerprints when it next opens
the store for writing).
"""

import sqlite3
from typing import Callable, Dict, List

from . import floors, macros, pairing, ranges, screenpairs
from .derivedstate import _any, _unjudged_rows, pending, stale, unjudged  # noqa: F401 (derive.pending etc. for its callers)

# The stages of a derivation, in the order derive() runs them: a name, what
# it does (docs/rendered_sql.py's headings), and its statements.
STAGES = (
    (
        "setup",
        "the scratch tables (pairing.SETUP, ranges.SETUP, screenpairs.SETUP)",
        pairing.SETUP + ranges.SETUP + screenpairs.SETUP,
    ),
    ("mark", "the stale rounds' screening pairs marked, before pairing (screenpairs.MARK)", screenpairs.MARK),
    ("rounds", "the stale rounds paired again (pairing.STEPS)", pairing.STEPS),
    ("pairs", "the stale screening pairs found again (screenpairs.STEPS)", screenpairs.STEPS),
    ("ranges", "the stale ranges computed again (ranges.STEPS)", ranges.STEPS),
    ("pending", "a batch's pending ranges, final=False only (ranges.PENDING)", ranges.PENDING),
    ("floors", "the stale noise floors, final only (floors.STEPS)", floors.STEPS),
    (
        "judging",
        "q-values and judgements, final only (ranges.FAMILIES, ranges.JUDGING)",
        ranges.FAMILIES + ranges.JUDGING,
    ),
)


# Each stage's statements with their macros expanded, registered as
# "derive.STAGE.N" (macros.STATEMENTS).
_STATEMENTS = {
    name: [macros.statement(f"derive.{name}.{n}", step) for n, step in enumerate(steps, 1)] for name, _, steps in STAGES
}


# The steps of a final derivation written in Python, after the SQL's: a
# module registers its own on import (irchanges.derive_changes, each
# finding's IR change: the command line and `from zlstore import Store`
# import it), so that this module imports none of what they read (irdiff
# reads through judge). A writer without it leaves the IR changes to be
# summed up on read, as a store of an older release has them.
FINAL_STEPS: List[Callable[[sqlite3.Connection], object]] = []


def statements() -> Dict[str, List[str]]:
    """Each stage's statements, rendered."""
    return _STATEMENTS


def _run(conn: sqlite3.Connection, stage: str):
    for statement in statements()[stage]:
        conn.execute(statement)


def derive(conn: sqlite3.Connection, final: bool = True, rejudge: bool = False, every: bool = False) -> bool:
    """Bring the derived tables up to date: the stale rounds' pairs and the
    ranges of the row identities the rounds hold, then (final) the stale
    noise floors, the q-values of the ranges' roots and their judgements.
    Where anything is judged, every range whose judgement was made under
    another basis (judging_basis) is judged again with it; rejudge: those
    ranges in any case (a setting changed). A floor that moves alone (a
    rescore) leaves the judging to the views until then: a rescore that puts
    back what was there judges nothing. every: every round is paired again
    first (a migration asked for it: migrations.ensure_schema).
    Call it, on a connection from db.connect (which has median()), inside
    the transaction that made them stale, before it commits: final unless
    a later commit of the same run will call it again (an ingest's batches:
    their ranges are computed while the workers prepare the next cells, and
    a reader in between judges them on the fly, without their q-values).
    Returns whether there was anything to do."""
    if every:
        pairing.mark_every_round(conn)
    rounds = _any(conn, "ab_stale_rounds")
    floors_stale = final and _any(conn, "ab_stale_floors")
    judge = final and (rejudge or _unjudged_rows(conn))
    pairs = _any(conn, "screen_stale_pairs")
    if not rounds and not pairs and not floors_stale and not judge and not _any(conn, "ab_stale_ranges"):
        return False
    _run(conn, "setup")
    if rounds:
        _run(conn, "mark")
        _run(conn, "rounds")
        if pairing.screening_rounds_paired(conn):
            floors.mark_every(conn)
    if _any(conn, "screen_stale_pairs"):
        _run(conn, "pairs")
    if _any(conn, "ab_stale_ranges"):
        _run(conn, "ranges")
        if not final:
            _run(conn, "pending")
    if final and _any(conn, "ab_stale_floors"):  # a batch's screening rounds move every floor: once
        _run(conn, "floors")
    if final and (rejudge or _unjudged_rows(conn)):
        _run(conn, "judging")
    if final:
        for step in FINAL_STEPS:
            step(conn)
    return True
