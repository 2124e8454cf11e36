"""Campaigns that stop when the answer is known (campaign.env
STOPPING=until-decided): an op's rounds run one at a time, and after each
the op stops once the statistics (sequential.py) call every range of it
decided, or at ROUNDS (MAX), or when its cells failed.

What the runner (locally: one step a round over every card, re-planned by
measured times) and a card deciding alone (on Slurm) share: the stopping
settings, each op's complete rounds and measured time per round from the
store, which ops still need a round, the stops, and the line said after a
round. Imports no runner or card: both import it."""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import names
from ..store import derive, macros, sequential
from ..read import files, layout
from ..db import now as utc_now
from ..db import write_transaction
from .plan import Op

PLANS_DIR = "plans"  # plans/step<N>.tsv: the ops each card runs in step N, with their rounds
Key = Tuple[str, str]  # (op, dtype); '' is the op's own set of dtypes


@dataclass(frozen=True)
class Stopping:
    """An until-decided campaign's bounds: at most max_rounds, at least min_rounds."""

    max_rounds: int
    min_rounds: int = layout.DEFAULT_MIN_ROUNDS


def stopping(env: Mapping[str, str]) -> Optional[Stopping]:
    """campaign.env's stopping settings; None for a fixed campaign (today's)."""
    if layout.stopping(env) != layout.STOPPING_UNTIL_DECIDED:
        return None
    return Stopping(int(env.get("ROUNDS") or 0), layout.min_rounds(env))


def env_items(rule: Optional[Stopping]) -> List[Tuple[str, object]]:
    """What campaign.env says of it (ROUNDS is written with the rest)."""
    if rule is None:
        return []
    return [(layout.STOPPING_KEY, layout.STOPPING_UNTIL_DECIDED), (layout.MIN_ROUNDS_KEY, rule.min_rounds)]


def step_path(root: Path, step: int) -> Path:
    return Path(root) / PLANS_DIR / f"step{step}.tsv"


def key(op: Op) -> Key:
    return (op.op, op.dtype)


def root_id(conn, root: Path) -> Optional[int]:
    row = conn.execute("SELECT id FROM roots WHERE path = ?", (str(Path(root).resolve()),)).fetchone()
    return row[0] if row else None


_CURRENT = """FROM cells JOIN roots ON roots.id = cells.root_id
    WHERE roots.path = ? AND cells.superseded_at IS NULL AND cells.round >= 1
      AND cells.side IN ('before', 'after')"""


# Per round (names.ROUND_KEY) from round 1 on of a root (its path) with a
# current cell ([[current_side]]), the RC of each side's (NULL where the
# side has none, or its cell no RC): of every op (_ROUNDS), or of one op's
# round (_ROUND: its op, dtype and round too). A round that a resumed op
# ran again in a new directory is another round key: its earlier, superseded
# one has no current cell.
_SIDES = """WITH rounds AS (
        SELECT DISTINCT [[round: c.{c} AS {k}]] FROM cells c
        WHERE c.root_id = (SELECT id FROM roots WHERE path = ?) AND c.round >= 1
          AND c.side IN ('before', 'after')<one op>
    ),
    sides AS (
        SELECT r.cell_op, r.cell_dtype, r.round,
            (SELECT cell_id FROM ([[current_side 'before' round: r]])) AS before_cell_id,
            (SELECT cell_id FROM ([[current_side 'after' round: r]])) AS after_cell_id
        FROM rounds r
    )
    SELECT s.cell_op, COALESCE(s.cell_dtype, ''), s.round, b.rc AS before_rc, a.rc AS after_rc
    FROM sides s LEFT JOIN cells b ON b.id = s.before_cell_id LEFT JOIN cells a ON a.id = s.after_cell_id
    WHERE s.before_cell_id IS NOT NULL OR s.after_cell_id IS NOT NULL"""
_ROUNDS = macros.statement("adaptive.rounds", _SIDES.replace("<one op>", ""))
_ROUND = macros.statement(
    "adaptive.round", _SIDES.replace("<one op>", " AND c.op = ? AND COALESCE(c.dtype, '') = ? AND c.round = ?")
)


def complete_rounds(conn, root: Path) -> Dict[Key, int]:
    """Per op, how many rounds from round 1 on have both sides recorded with
    an RC (a round after a gap does not count: it is run again)."""
    rounds: Dict[Key, set] = {}
    for op, dtype, round_, before, after in conn.execute(_ROUNDS, (str(Path(root).resolve()),)):
        if before is not None and after is not None:
            rounds.setdefault((op, dtype), set()).add(round_)
    done = {}
    for k, found in rounds.items():
        n = 0
        while n + 1 in found:
            n += 1
        done[k] = n
    return done


def recorded_ops(conn, root: Path) -> set:
    """The ops with any current cell in the root: the statistics know them."""
    return {
        (op, dtype)
        for op, dtype in conn.execute(
            f"SELECT DISTINCT cells.op, COALESCE(cells.dtype, '') {_CURRENT}", (str(Path(root).resolve()),)
        )
    }


def round_seconds(conn, root: Path) -> Dict[Key, float]:
    """Per op, its measured cell time per round: the elapsed time of its
    current cells over the rounds they make."""
    return {
        (op, dtype): total / rounds
        for op, dtype, total, rounds in conn.execute(
            f"""SELECT cells.op, COALESCE(cells.dtype, ''), SUM(cells.elapsed_s), COUNT(DISTINCT cells.round)
                {_CURRENT} AND cells.elapsed_s IS NOT NULL GROUP BY cells.op, COALESCE(cells.dtype, '')""",
            (str(Path(root).resolve()),),
        )
        if rounds and total and total > 0
    }


def round_ok(conn, root: Path, op: Key, round_: int) -> bool:
    """Both sides of the op's round recorded, each with RC 0."""
    rows = conn.execute(_ROUND, (str(Path(root).resolve()), op[0], op[1], round_)).fetchall()
    return bool(rows) and all(before == 0 and after == 0 for *_, before, after in rows)


def supersede_after(store, root: Path, op: Key, after: int, card: Optional[int] = None) -> int:
    """Mark the op's current cells of rounds past `after` superseded: an
    interrupted round runs again, in a new directory, and its earlier half
    must not claim the round twice. The complete rounds stay. Returns how
    many were marked."""
    conn = store.conn
    with write_transaction(conn):
        marked = conn.execute(
            """UPDATE cells SET superseded_at = ?
               WHERE root_id = (SELECT id FROM roots WHERE path = ?) AND op = ? AND COALESCE(dtype, '') = ?
                 AND (round IS NULL OR round > ?) AND superseded_at IS NULL AND (? IS NULL OR card IS ?)""",
            (utc_now(), str(Path(root).resolve()), op[0], op[1], after, card, card),
        ).rowcount
        if marked:
            derive.derive(conn)
    return marked


def undecided(conn, root: Path, ops: Sequence[Op], min_rounds: int) -> List[Op]:
    """Of these ops, those that still need a round: the statistics' answer
    for the ops the store has cells of; an op with none has not started."""
    rid = root_id(conn, root)
    wanted = set()
    if rid is not None:
        wanted = {(op, dtype or "") for op, dtype in sequential.undecided_ops(conn, rid, min_rounds)}
    recorded = recorded_ops(conn, root)
    return [op for op in ops if key(op) in wanted or key(op) not in recorded]


def recorded_stops(conn, root: Path) -> Dict[Key, Tuple[int, str]]:
    """The stops the store holds for the root (op_stops): op -> (round, reason)."""
    return {
        (op, dtype or ""): (round_, reason)
        for op, dtype, round_, reason in conn.execute(
            "SELECT op, dtype, round, reason FROM op_stops WHERE root_id = (SELECT id FROM roots WHERE path = ?)",
            (str(Path(root).resolve()),),
        )
    }


def record(
    conn, root: Path, ops: Iterable[Key], round_: int, reason: str, card: Optional[int] = None, tree: bool = True
):
    """The stops into the store and, unless tree is False (a submitter
    storing what a card wrote), into the tree's stops file of this writer
    (the campaign's, or card's when a card decides alone): a store made from
    the tree alone shows them too."""
    ops = list(ops)
    rid = root_id(conn, root)
    if ops and rid is not None:
        sequential.record_stops(conn, rid, ops, round_, reason)
        if tree:
            write_stops(conn, root, rid, ops, card)


def stops_path(root: Path, card: Optional[int] = None) -> Path:
    return Path(root) / layout.STOPS_DIR / (f"card{card}.tsv" if card is not None else "campaign.tsv")


def write_stops(conn, root: Path, rid: int, ops: Sequence[Key], card: Optional[int] = None) -> Path:
    """Add the ops' stops, as the store holds them (the first stop of each),
    to this writer's stops file, rewritten whole (a kill leaves the old one
    or the new one, never half); the stops already in it stay."""
    path = stops_path(root, card)
    kept = {(s.op, s.dtype): s for s in layout.read_stops(path, [])} if path.is_file() else {}
    wanted = {(op, dtype or "") for op, dtype in ops}
    for op, dtype, round_, reason, at in conn.execute(
        "SELECT op, coalesce(dtype, ''), round, reason, recorded_at FROM op_stops WHERE root_id = ? ORDER BY id",
        (rid,),
    ):
        if (op, dtype) in wanted:
            kept.setdefault((op, dtype), layout.Stop(op, dtype, round_, reason, at))
    path.parent.mkdir(exist_ok=True)
    return files.replace_atomic(path, layout.stops_tsv(kept.values()))


@dataclass
class Progress:
    """What stopped so far (op -> (round, reason)) and each op's time per round."""

    rule: Stopping
    stops: Dict[Key, Tuple[int, str]]
    seconds: Dict[Key, float]

    def saved_hours(self) -> float:
        """Cell-hours the decided ops did not spend: their rounds left to MAX
        at their measured time per round."""
        return (
            sum(
                max(0, self.rule.max_rounds - round_) * self.seconds.get(k, 0.0)
                for k, (round_, reason) in self.stops.items()
                if reason == names.DECIDED
            )
            / 3600.0
        )

    def line(self, round_: int, going_on: int) -> str:
        counts = {reason: 0 for reason in names.STOP_REASONS}
        for _, reason in self.stops.values():
            counts[reason] = counts.get(reason, 0) + 1
        failed = f", {counts[names.FAILED]} failed" if counts[names.FAILED] else ""
        at_max = f", {counts[names.MAX_ROUNDS]} stopped at max rounds" if counts[names.MAX_ROUNDS] else ""
        return (
            f"after round {round_} of at most {self.rule.max_rounds}: {counts[names.DECIDED]} ops decided, "
            f"{going_on} continue{failed}{at_max}; the decided ops saved {self.saved_hours():.3g} cell-hours so far "
            f"(their rounds left to {self.rule.max_rounds} at their measured times)"
        )

    def as_rows(self) -> List[dict]:
        return [
            {"op": op, "dtype": dtype, "round": round_, "reason": reason}
            for (op, dtype), (round_, reason) in sorted(self.stops.items())
        ]


def after_round(
    store,
    root: Path,
    rule: Stopping,
    ran: Mapping[Key, int],
    failed: Iterable[Key],
    progress: Progress,
    card: Optional[int] = None,
):
    """The stops after ops ran their rounds (ran: op -> the round it ran):
    failed ones (the command failed or a side lacks RC 0), decided ones (not
    among the statistics' undecided), and those at MAX. Records them and
    returns the ops that go on."""
    conn = store.conn
    failed = set(failed) | {k for k, r in ran.items() if not round_ok(conn, root, k, r)}
    by_round: Dict[Tuple[int, str], List[Key]] = {}
    ok = [k for k in ran if k not in failed]
    wanted = {key(op) for op in undecided(conn, root, [Op(*k) for k in ok], rule.min_rounds)}
    going_on = []
    for k in ran:
        if k in failed:
            reason = names.FAILED
        elif k not in wanted:
            reason = names.DECIDED
        elif ran[k] >= rule.max_rounds:
            reason = names.MAX_ROUNDS
        else:
            going_on.append(k)
            continue
        by_round.setdefault((ran[k], reason), []).append(k)
        progress.stops[k] = (ran[k], reason)
    for (round_, reason), ops in sorted(by_round.items()):
        record(conn, root, ops, round_, reason, card)
    progress.seconds.update(round_seconds(conn, root))
    return going_on
