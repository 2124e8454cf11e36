"""Partitioning a campaign across cards: longest-first, each op to the
currently lightest card. Pure: weights in, plan out (the store query that
finds the weights lives in runner.py).

The critical path can never be shorter than the heaviest single op;
partitioning only keeps the other cards from waiting (ARTIFACTS.md)."""

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..read import files
from .. import output
from ..read.layout import PARTITION_COLUMNS, repeated_columns


class PlanError(ValueError):
    """The plan cannot be made from what was given."""


@dataclass(frozen=True)
class Op:
    """One op of a campaign and its weight: its screening pair's time times the rounds."""

    op: str
    dtype: str = ""
    weight_s: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.op}:{self.dtype}" if self.dtype else self.op


@dataclass
class Card:
    card: int
    ops: List[Op] = field(default_factory=list)

    @property
    def weight_s(self) -> float:
        return sum(op.weight_s for op in self.ops)


@dataclass
class Plan:
    cards: List[Card]
    hash_makespan_s: float

    @property
    def ops(self) -> List[Op]:
        return [op for card in self.cards for op in card.ops]

    @property
    def makespan_s(self) -> float:
        """The critical path: the heaviest card."""
        return max((c.weight_s for c in self.cards), default=0.0)

    @property
    def critical_card(self) -> Optional[Card]:
        return max(self.cards, key=lambda c: (c.weight_s, -c.card)) if self.cards else None

    @property
    def heaviest(self) -> Optional[Op]:
        """The heaviest single op: the floor no plan can beat."""
        return max(self.ops, key=lambda o: o.weight_s, default=None)

    @property
    def heaviest_s(self) -> float:
        return self.heaviest.weight_s if self.heaviest else 0.0

    @property
    def total_s(self) -> float:
        return sum(c.weight_s for c in self.cards)

    @property
    def ideal_s(self) -> float:
        """The ideal share: total / cards."""
        return self.total_s / len(self.cards) if self.cards else 0.0

    def as_dict(self) -> dict:
        return {
            "cards": [
                {
                    "card": c.card,
                    "ops": [{"op": o.op, "dtype": o.dtype, "weight_s": seconds(o.weight_s)} for o in c.ops],
                    "weight_s": seconds(c.weight_s),
                }
                for c in self.cards
            ],
            "makespan_s": seconds(self.makespan_s),
            "heaviest_s": seconds(self.heaviest_s),
            "heaviest_op": self.heaviest.label if self.heaviest else None,
            "ideal_s": seconds(self.ideal_s),
            "hash_makespan_s": seconds(self.hash_makespan_s),
        }

    def rows(self) -> List[dict]:
        """One row per planned op: its card and weight."""
        return [
            {"card": c.card, "op": o.op, "dtype": o.dtype, "weight_s": seconds(o.weight_s)}
            for c in self.cards
            for o in c.ops
        ]


def seconds(value: float) -> float:
    """A weight as printed for scripts: 12 significant digits, which drops
    the binary noise of the sums (3.093, not 3.0930000000000004) and keeps
    every digit a timing has."""
    return float(f"{value:.12g}")


# More cards than any campaign has (eight a machine, a few machines): a
# plan keeps a list per card, and ten million of them is a hang, not a plan.
MAX_CARDS = 4096


def _check(ops: Sequence[Op], cards: int):
    if not 1 <= cards <= MAX_CARDS:
        raise PlanError(f"--cards must be from 1 to {MAX_CARDS}, not {cards}")
    seen = set()
    for op in ops:
        if op.weight_s is None or not op.weight_s > 0:
            raise PlanError(
                f"op {op.label} has no screening time (weight {op.weight_s!r}); a weight of zero would hide it"
            )
        if (op.op, op.dtype) in seen:
            raise PlanError(f"op {op.label} is listed twice")
        seen.add((op.op, op.dtype))


def lightest(cards: Sequence[Card]) -> Card:
    """The card with the least weight; ties go to the lowest card number."""
    return min(cards, key=lambda c: (c.weight_s, c.card))


def longest_first(ops: Sequence[Op], cards: int) -> List[Card]:
    """Each op, heaviest first, to the currently lightest card."""
    result = [Card(n) for n in range(cards)]
    for op in sorted(ops, key=lambda o: (-o.weight_s, o.op, o.dtype)):
        lightest(result).ops.append(op)
    return result


def add_extra(plan_cards: List[Card], extra: Iterable[Op]) -> List[Card]:
    """Ops added after the plan, in the order given, each to the lightest
    card by weight (not by count: one heavy op outweighs three light ones)."""
    for op in extra:
        lightest(plan_cards).ops.append(op)
    return plan_cards


def hash_card(op: Op, cards: int) -> int:
    """A plain hash partition's card for an op: deterministic across runs
    (zlib.crc32, not Python's salted hash())."""
    return zlib.crc32(f"{op.op}:{op.dtype}".encode("utf-8")) % cards


def hash_makespan(ops: Sequence[Op], cards: int) -> float:
    loads = [0.0] * cards
    for op in ops:
        loads[hash_card(op, cards)] += op.weight_s
    return max(loads, default=0.0)


def make_plan(ops: Sequence[Op], cards: int, extra: Sequence[Op] = ()) -> Plan:
    """The longest-first plan of ops over cards, then extra ops each to the
    lightest card; with the hash partition's critical path for comparison."""
    _check(list(ops) + list(extra), cards)
    planned = add_extra(longest_first(ops, cards), extra)
    return Plan(planned, hash_makespan(list(ops) + list(extra), cards))


# -- partition.tsv: `card op dtype weight_min` -------------------------------


def _minutes(seconds: float) -> str:
    return format(round(seconds / 60.0, 4), "g")


def partition_tsv(plan: Plan) -> bytes:
    """The plan in the harness's format; "\\n" line ends on every platform
    (a trailing \\r would ride into the last field and break the number)."""
    lines = ["\t".join(PARTITION_COLUMNS)]
    for card in plan.cards:
        for op in card.ops:
            lines.append(f"{card.card}\t{op.op}\t{op.dtype}\t{_minutes(op.weight_s)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_partition_tsv(plan: Plan, path) -> Path:
    """Whole or not at all, through no planted link (files.replace_atomic)."""
    return files.replace_atomic(path, partition_tsv(plan))


# -- a round's plan (until-decided campaigns): partition.tsv's columns and the round --


def step_tsv(plan: Plan, rounds: Dict[Tuple[str, str], int]) -> bytes:
    """One step of an until-decided campaign: partition.tsv's rows, each
    with the round its op runs in this step (a resumed op may be a round
    behind the others)."""
    lines = ["\t".join(PARTITION_COLUMNS + ("round",))]
    for card in plan.cards:
        for op in card.ops:
            lines.append(f"{card.card}\t{op.op}\t{op.dtype}\t{_minutes(op.weight_s)}\t{rounds[(op.op, op.dtype)]}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_step_tsv(plan: Plan, rounds: Dict[Tuple[str, str], int], path) -> Path:
    return files.replace_atomic(path, step_tsv(plan, rounds))


def read_step_tsv(path) -> Tuple[Plan, Dict[Tuple[str, str], int]]:
    """A step's plan and each op's round."""
    plan = read_partition_tsv(path)
    lines = [line.rstrip("\r") for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    header = [h.strip() for h in lines[0].split("\t")]
    if "round" not in header:
        raise PlanError(f"{path}: no round column in the header {header}")
    rounds = {}
    for number, line in enumerate(lines[1:], 2):
        row = dict(zip(header, (v.strip() for v in line.split("\t"))))
        try:
            rounds[(row["op"], row.get("dtype") or "")] = int(row["round"])
        except (KeyError, ValueError) as error:
            raise PlanError(f"{path}:{number}: {error}") from None
    return plan, rounds


def read_partition_tsv(path) -> Plan:
    """A partition.tsv back as a plan (columns matched by name; the card
    count is the highest card number plus one)."""
    path = Path(path)
    text = path.read_bytes().decode("utf-8")
    lines = [line.rstrip("\r") for line in text.splitlines() if line.strip()]
    if not lines:
        raise PlanError(f"{path}: empty partition")
    header = [h.strip() for h in lines[0].split("\t")]
    repeated = repeated_columns(header)
    if repeated:
        raise PlanError(f"{path}:1: the header names a column twice: {repeated}")
    missing = [c for c in ("card", "op") if c not in header]
    if missing:
        raise PlanError(f"{path}: no {', '.join(missing)} column in the header {header}")
    rows: List[Tuple[int, Op]] = []
    for number, line in enumerate(lines[1:], 2):
        row = dict(zip(header, (v.strip() for v in line.split("\t"))))
        try:
            card = int(row["card"])
            weight = float(row.get("weight_min") or "nan") * 60.0
        except ValueError as error:
            raise PlanError(f"{path}:{number}: {error}") from None
        if card < 0 or not row.get("op"):
            raise PlanError(f"{path}:{number}: needs a card >= 0 and an op")
        rows.append((card, Op(row["op"], row.get("dtype") or "", weight)))
    cards = [Card(n) for n in range(max(card for card, _ in rows) + 1)]
    for card, op in rows:
        cards[card].ops.append(op)
    ops = [op for _, op in rows]
    known = [op for op in ops if op.weight_s == op.weight_s]  # NaN: no weight column
    return Plan(cards, hash_makespan(known, len(cards)))


def parse_op_spec(text: str) -> List[Tuple[str, Optional[str]]]:
    """`topk:float16,fft:complex64,rand` -> [(op, dtype or None)]; None means
    "the one pair the root has for this op"."""
    specs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        op, sep, dtype = item.partition(":")
        op, dtype = op.strip(), dtype.strip().removeprefix("torch.")
        if not op:
            raise PlanError(f"no op name in {item!r}")
        for name in (op, dtype):
            if "/" in name or "\0" in name or name in (".", ".."):
                raise PlanError(
                    f"{name!r} in {item!r} is no op or dtype name: a cell directory is named "
                    "after them, and a '/' or a '.' or '..' alone would put it elsewhere"
                )
        specs.append((op, dtype if sep else None))
    return specs


def describe(plan: Plan) -> str:
    """The plan for people: per card its weight and ops (each with its
    own), then the critical path, the floor, the ideal share and the hash
    partition's critical path. Every weight in one unit, minutes when the
    critical path is 2 minutes or more, else seconds."""
    unit, per = ("min", 60.0) if plan.makespan_s >= 120 else ("s", 1.0)

    def amount(value):
        return output.cell_text(float(value) / per)

    rows = [
        {
            "card": card.card,
            "weight": card.weight_s / per,
            "ops": ", ".join(f"{o.label} ({amount(o.weight_s)})" for o in card.ops) or "(idle)",
        }
        for card in plan.cards
    ]
    critical = plan.critical_card
    heaviest = plan.heaviest
    lines = [output.table(rows, ["card", "weight", "ops"], ["card", f"weight ({unit})", f"ops (weight in {unit})"]), ""]
    lines.append(
        f"critical path    {amount(plan.makespan_s)} {unit}" + (f" (card {critical.card})" if critical else "")
    )
    lines.append(
        f"heaviest op      {amount(plan.heaviest_s)} {unit}"
        + (f" ({heaviest.label}): the floor no plan can beat" if heaviest else "")
    )
    lines.append(
        f"ideal share      {amount(plan.ideal_s)} {unit} "
        f"(total {amount(plan.total_s)} {unit} / {len(plan.cards)} cards)"
    )
    lines.append(f"hash partition   {amount(plan.hash_makespan_s)} {unit} critical path (crc32 of op:dtype mod cards)")
    return "\n".join(lines)
