"""Which kernels changed between two cells, and how (`zlstore diff`).

A fingerprint says only *that* two cells' IR differs. This module pairs the
kernels of two cells by name and says, per pair, whether the text a
fingerprint rule hashes is the same, with the tile shapes and the counts
that say what kind of change it is (convert_layout, num_warps, num_stages,
shared memory) and the unified diff of the normalized text (or of the text
as compiled), bounded (MAX_DIFF_BYTES and the rest); and first, over the
pairs, what changed (irsummary.py).

Two sides come from: a screening pair (`ROOT OP`), one round of a repeat
run or campaign (`ROOT OP --round N`), or the same side of two roots
(`ROOT_A:OP ROOT_B:OP`: two compiler builds; A is "before", B "after").

Kernels of one name on both sides are paired in this order, each step
over what the steps before left unpaired (PAIRING), each in linear time:

1. the same text under the rule in force (they are `same`);
2. the same text under the strictest rule (v4): they differ only in what
   it leaves out, e.g. source locations;
3. the same autotune config (tile shapes, num_warps, num_stages: what
   identifies a config, irfacts.py), the same signature (argument types
   and attributes: the specialization) and the same shared memory;
4. the same config and signature: shared memory is what a switch changes
   (on the H100 tf32 raised both of bmm's configs' shared memory, and
   pairing by it before the tile shapes paired 128x32 with 64x32);
5. the same config;
6. the same tile shapes;
7. in the order they were stored.

What is left over is `only before` or `only after`. Everything here reads
the store and the fingerprint rules (ttgir.py); nothing is written, and no
file of the runs/ tree is read: the IR is the stored IR.
"""

import bisect
import difflib
import json
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Type, cast

from isal import isal_zlib

from . import irfacts, irsummary
from ..read import layout, parse, ttgir
from ..store import macros
from .. import names, output

# The statuses of a pair of kernels, in the order a report lists them.
CHANGED, ONLY_BEFORE, ONLY_AFTER, SAME = "changed", "only before", "only after", "same"
STATUSES = (CHANGED, ONLY_BEFORE, ONLY_AFTER, SAME)

# How a pair was made (the steps of the module docstring), as reported.
PAIRING = (
    "same text under the rule",
    "same text under the strictest rule",
    "same config, signature and shared memory",
    "same config and signature",
    "same config",
    "same tile shapes",
    "stored order (by cache directory)",
)
BY_RULE, BY_STRICTEST, BY_SHARED, BY_SIGNATURE, BY_CONFIG, BY_TILES, BY_ORDER = PAIRING

# The bounds of one pair's unified diff: texts longer than MAX_DIFF_BYTES
# are not diffed; difflib (quadratic in bad cases) aligns at most
# MAX_ALIGNED_LINES a side of the lines between those both sides begin
# and end with, and past that the lines each side holds once anchor the
# alignment (_Anchored); the diff stops after MAX_DIFF_LINES lines, each
# cut to MAX_LINE_CHARS. Each cut says so in a line of its own.
MAX_DIFF_BYTES = 64 << 20
# A stored text claiming more than this is not unpacked at all.
MAX_STORED_BYTES = 256 << 20
# What isal raises on data that is not zlib (IsalError; its stubs call it an instance).
UNPACK_ERROR = cast(Type[Exception], isal_zlib.error)
MAX_ALIGNED_LINES = 5_000
MAX_DIFF_LINES = 5_000
MAX_LINE_CHARS = 4_000
# How a cut is said: a line that no diff reader takes for a line of the texts.
CUT = "\\ zlstore: "

SIDES = ("before", "after")

# Why the IR of two cells cannot answer (document["problem"]): the
# verdicts' own names where there is one.
IR_UNREAD, NO_TRITON = names.BY_NAME["IR_UNREAD"].name, names.BY_NAME["NO_TRITON"].name
MISSING_CELL = "no cell"

# What each kernel side reports besides its text: the stored columns.
COUNTS = ("convert_layouts", "num_warps", "num_stages", "shared")


class DiffError(ValueError):
    """A diff that cannot be made as asked (wrong kind of root, no such op,
    round or card): a usage error, with what would be right."""


@dataclass
class Side:
    """One cell of a diff, and where it came from."""

    label: str  # "before" / "after"; in the two-root form: A's or B's side
    root: str  # the root's name
    root_path: str
    kind: str  # screen, repeat, campaign
    op: str
    dtype: Optional[str]
    side: str  # the cell's own side
    round: Optional[int]
    card: Optional[int]
    cell_id: Optional[int]
    path: Optional[str]  # the cell directory
    rc: Optional[int] = None
    n_kernels: int = 0
    ir_incomplete: bool = False
    index_hash: Optional[str] = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(eq=False)  # a kernel is itself: two of equal fields are still two
class Kernel:
    """One stored kernel of a side, with its text under the rule."""

    id: int
    name: str
    cache_dir: Optional[str]
    path: str
    ir_hash: str
    convert_layouts: int
    num_warps: Optional[int]
    num_stages: Optional[int]
    shared: Optional[int]
    raw: bytes = field(repr=False, default=b"")
    digest: str = ""  # under the rule
    strictest_digest: str = ""  # under the strictest rule
    facts: Optional[irfacts.Facts] = field(repr=False, default=None)  # of the text under the rule
    readable: bool = True  # False: its stored bytes did not unpack (_stored_text); raw is empty
    # Its facts not read yet (_Pending): read when first asked (read_facts),
    # since a kernel paired by step 1 and summed up needs none.
    pending: Optional["_Pending"] = field(repr=False, default=None)

    def read_facts(self) -> Optional[irfacts.Facts]:
        if self.pending is not None:
            self.facts, self.pending = self.pending.facts(), None
        return self.facts

    def unread(self) -> bool:
        """Whether its facts are None, without reading them."""
        return self.pending.unread if self.pending is not None else self.facts is None

    def text(self) -> str:
        return self.raw.decode("utf-8", "surrogateescape")

    def tiles(self) -> object:
        """What identifies the autotune config's block sizes; a text not
        read (too long) is like no other."""
        facts = self.read_facts()
        return facts.tiles if facts is not None else ("unread", self.id)

    def config(self) -> tuple:
        return (self.tiles(), self.num_warps, self.num_stages)

    def signature(self) -> tuple:
        facts = self.read_facts()
        return (*self.config(), facts.signature if facts is not None else None)

    def specialized(self) -> tuple:
        return (*self.signature(), self.shared)

    def as_dict(self) -> dict:
        return {
            "cache_dir": self.cache_dir,
            "path": self.path,
            "ir_hash": self.ir_hash,
            **{c: getattr(self, c) for c in COUNTS},
            "tiles": self.tile_text(),
        }

    def tile_text(self) -> Optional[str]:
        facts = self.read_facts()
        return irfacts.tile_text(facts.tiles) if facts is not None else None


@dataclass
class Pair:
    name: str
    status: str
    before: Optional[Kernel]
    after: Optional[Kernel]
    paired_by: Optional[str]  # PAIRING; None for a kernel of one side only
    note: Optional[str] = None
    diff: str = ""


# -- choosing the two cells ----------------------------------------------------


def parse_op(text: str) -> Tuple[str, Optional[str]]:
    """OP[:DTYPE] as (op, dtype); dtype None: not given, '' for `op:` (the
    op's own default set)."""
    op, sep, dtype = text.partition(":")
    if not op:
        raise DiffError(f"{text!r}: give an op, as OP or OP:DTYPE (topk, topk:float16)")
    if ":" in dtype:
        raise DiffError(f"{text!r}: give OP or OP:DTYPE")
    return op, (dtype if sep else None)


def names_an_op(text: str) -> bool:
    """Whether a command-line word is OP[:DTYPE] (not ROOT:OP[:DTYPE]): no
    colon, or one colon followed by a dtype name (or nothing)."""
    parts = text.split(":")
    return len(parts) == 1 or (len(parts) == 2 and (parts[1] == "" or parts[1] in layout.TORCH_DTYPES))


def parse_root_op(text: str) -> Tuple[str, str, Optional[str]]:
    """ROOT:OP[:DTYPE] as (root, op, dtype); a root may itself hold colons
    (a path): the dtype is the last part only when it is a dtype name."""
    parts = text.split(":")
    if len(parts) >= 3 and (parts[-1] in layout.TORCH_DTYPES or parts[-1] == ""):
        root, op, dtype = ":".join(parts[:-2]), parts[-2], parts[-1]
    elif len(parts) >= 2:
        root, op, dtype = ":".join(parts[:-1]), parts[-1], None
    else:
        raise DiffError(f"{text!r}: give ROOT:OP or ROOT:OP:DTYPE")
    if not root or not op:
        raise DiffError(f"{text!r}: give ROOT:OP or ROOT:OP:DTYPE")
    return root, op, dtype


def _spelled(op: str, dtype: Optional[str]) -> str:
    return op if dtype is None else f"{op}:{dtype}"


def _dtype(conn, root: dict, op: str, dtype: Optional[str]) -> Optional[str]:
    """The dtype of op's cells in root: the one given, or the only one there
    is. DiffError naming the root's ops, or the op's dtypes, otherwise."""
    found = [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT dtype FROM cells WHERE root_id = ? AND op = ? AND superseded_at IS NULL ORDER BY dtype",
            (root["id"], op),
        )
    ]
    if not found:
        ops = [
            _spelled(o, d)
            for o, d in conn.execute(
                "SELECT DISTINCT op, dtype FROM cells WHERE root_id = ? AND op IS NOT NULL ORDER BY op, dtype",
                (root["id"],),
            )
        ]
        raise DiffError(f"no op {op!r} in {root['name']}; its ops: {', '.join(ops) or 'none'}")
    if dtype is None:
        if len(found) > 1:
            raise DiffError(
                f"{op} has several dtypes in {root['name']}: {', '.join(_spelled(op, d) for d in found)}; name one"
            )
        return found[0]
    if dtype not in found:
        raise DiffError(
            f"no {op}:{dtype} in {root['name']}; {op} was run as {', '.join(_spelled(op, d) for d in found)}"
        )
    return dtype


# The current cell of the side asked for ([[current_side]], the one
# definition) of each round (names.ROUND_KEY) that has a cell of that side
# of op and dtype in that round (on that card, where given), with how many
# cells claim it; and the cells that claim the side of a round (its key's
# values, then the side).
_SIDE = macros.statement(
    "irdiff.side",
    """WITH asked AS (
        SELECT DISTINCT [[round: c.{c} AS {k}]], c.side FROM cells c
        WHERE c.root_id = :root AND c.op = :op AND c.dtype IS :dtype AND c.round IS :round
          AND (:card IS NULL OR c.card IS :card) AND c.side = :side
    ),
    sides AS (
        SELECT (SELECT cell_id FROM ([[current_side a.side round: a]])) AS cell_id,
               (SELECT claims FROM ([[current_side a.side round: a]])) AS claims
        FROM asked a
    )
    SELECT c.*, s.claims, (SELECT count(*) FROM kernels k WHERE k.cell_id = c.id) AS stored_kernels
    FROM sides s JOIN cells c ON c.id = s.cell_id
    ORDER BY c.id""",
)
_CLAIMANTS = macros.statement("irdiff.claimants", "SELECT c.id, c.relpath FROM [[side_cells ? round: ?]] ORDER BY c.id")


def _cell(
    conn, root: dict, op: str, dtype: Optional[str], side: str, round_: Optional[int], card: Optional[int], label: str
) -> Side:
    """The one current cell of root holding that side of op (in that round,
    on that card where given). DiffError where the root is of the wrong
    kind for the round asked, or where several cells claim the side."""
    kind = root["kind"]
    if kind == "screen":
        if round_ not in (None, 0):
            raise DiffError(f"{root['name']} is a screening root: its one pair is round 0; drop --round")
        if card is not None:
            raise DiffError(f"{root['name']} is a screening root: its pair is one whatever the card; drop --card")
        round_ = 0
    elif round_ is None:
        rounds = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT round FROM cells WHERE root_id = ? AND op = ? AND dtype IS ? AND round IS NOT NULL "
                "AND superseded_at IS NULL ORDER BY round",
                (root["id"], op, dtype),
            )
        ]
        raise DiffError(
            f"{root['name']} is a {kind} root: give --round N (its rounds of {_spelled(op, dtype)}: "
            f"{', '.join(map(str, rounds)) or 'none'})"
        )
    cursor = conn.execute(
        _SIDE, {"root": root["id"], "op": op, "dtype": dtype, "round": round_, "card": card, "side": side}
    )
    columns = [d[0] for d in cursor.description]
    rows = [dict(zip(columns, r)) for r in cursor.fetchall()]
    where = (
        f"{_spelled(op, dtype)} in {root['name']}"
        + (f", round {round_}" if kind != "screen" else "")
        + (f", card {card}" if card is not None else "")
    )
    if not rows:
        if kind != "screen":
            rounds = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT round FROM cells WHERE root_id = ? AND op = ? AND dtype IS ? AND side = ? "
                    "AND superseded_at IS NULL" + (" AND card IS ?" if card is not None else "") + " ORDER BY round",
                    [root["id"], op, dtype, side] + ([card] if card is not None else []),
                )
            ]
            raise DiffError(f"no {side} cell of {where}; its rounds: {', '.join(map(str, rounds)) or 'none'}")
        return Side(label, root["name"], root["path"], kind, op, dtype, side, round_, card, None, None)
    if len(rows) > 1 or rows[0]["claims"] > 1:
        cards = sorted({r["card"] for r in rows}, key=lambda c: (c is None, c))
        if card is None and len(cards) > 1:
            raise DiffError(f"{where}: the {side} side ran on cards {', '.join(map(str, cards))}; give --card")
        claimants = sorted(
            claimant
            for r in rows
            for claimant in conn.execute(_CLAIMANTS, (*(r[c.cells] for c in names.ROUND_KEY), side))
        )
        raise DiffError(
            f"{where}: {len(claimants)} cells claim the {side} side ({names.DUPLICATE}): "
            f"{', '.join(relpath for _, relpath in claimants)}; forget the copy (zlstore forget)"
        )
    c = rows[0]
    return Side(
        label,
        root["name"],
        root["path"],
        kind,
        op,
        dtype,
        side,
        c["round"],
        c["card"],
        c["id"],
        c["path"],
        c["rc"],
        c["stored_kernels"],
        bool(c["ir_incomplete"]),
        c["index_hash"],
    )


def pair_cells(
    store, root, op: str, dtype: Optional[str] = None, round_: Optional[int] = None, card: Optional[int] = None
) -> Tuple[Side, Side]:
    """The before and after cells of op in root: its screening pair, or
    round round_ (on card, where several ran it) of a repeat run or campaign."""
    found = store.root(root)
    dtype = _dtype(store.conn, found, op, dtype)
    before, after = (_cell(store.conn, found, op, dtype, side, round_, card, side) for side in SIDES)
    return before, after


def same_side_cells(
    store,
    a: Tuple[str, str, Optional[str]],
    b: Tuple[str, str, Optional[str]],
    side: str = "before",
    round_: Optional[int] = None,
    card: Optional[int] = None,
) -> Tuple[Side, Side]:
    """The `side` cell of (root, op, dtype) a and of b: one side under two
    compiler builds. a is reported as before, b as after. round_ and card
    choose the cell of a repeat run or campaign; a screening root has one."""
    if side not in SIDES:
        raise DiffError(f"--side is before or after, not {side!r}")
    cells = []
    for (root, op, dtype), label in zip((a, b), ("A", "B")):
        found = store.root(root)
        screen = found["kind"] == "screen"  # its pair is round 0: --round and --card are the other root's
        cells.append(
            _cell(
                store.conn,
                found,
                op,
                _dtype(store.conn, found, op, dtype),
                side,
                None if screen else round_,
                None if screen else card,
                f"{label}: {found['name']} {side}",
            )
        )
    return cells[0], cells[1]


# -- the kernels and their pairs -------------------------------------------------


class _Pending:
    """A text's facts under a rule (_facts), read once when first asked:
    parsing is most of a diff's cost, and a summary needs only the changed
    pairs' facts. Whether they are None (unread) is known without reading."""

    def __init__(self, rule: ttgir.Rule, raw: bytes):
        self.text = _fact_text(rule, raw)
        self.unread = self.text is None or not irfacts.readable(self.text)
        self._facts: Optional[irfacts.Facts] = None
        self._read = False

    def facts(self) -> Optional[irfacts.Facts]:
        if not self._read:
            self._facts = None if self.unread or self.text is None else irfacts.read(self.text)
            self._read, self.text = True, None
        return self._facts


def _kernels(
    conn, side: Side, rule: ttgir.Rule, strictest: ttgir.Rule, facts: Optional[Dict[str, _Pending]] = None
) -> List[Kernel]:
    """side's kernels; facts: their pending facts by digest under rule
    (texts of one digest have one normalized text, so one reading: a
    pair the rule calls the same is read once), shared by both sides."""
    if side.cell_id is None:
        return []
    kernels = []
    facts = {} if facts is None else facts
    # The digests the store holds (those its fingerprints were made of: the
    # verdict and this diff agree), computed only where it has none.
    for row in conn.execute(
        "SELECT k.id, k.name, k.cache_dir, k.ir_hash, k.convert_layouts, k.num_warps, k.num_stages, k.shared, "
        "b.size, b.data, "
        "(SELECT digest FROM ir_digests d WHERE d.ir_hash = k.ir_hash AND d.rule = ?), "
        "(SELECT digest FROM ir_digests d WHERE d.ir_hash = k.ir_hash AND d.rule = ?) "
        "FROM kernels k JOIN blobs b ON b.hash = k.ir_hash WHERE k.cell_id = ? ORDER BY k.id",
        (rule.name, strictest.name, side.cell_id),
    ):
        kid, name, cache_dir, ir_hash, cl, warps, stages, shared, size, data, digest, strictest_digest = row
        path = "/".join(p for p in (side.path, layout.TRITON_CACHE, cache_dir, name + ".ttgir") if p)
        raw = _stored_text(data, size, f"the stored IR of {path} (blob {ir_hash})")
        readable = raw is not None
        if raw is None:  # not read: equal only to the same stored bytes
            raw, digest, strictest_digest = b"", digest or ir_hash, strictest_digest or ir_hash
        digest = digest or ttgir.raw_digest(rule, raw, ir_hash)
        pending = None
        if readable:
            pending = facts.get(digest)
            if pending is None:
                pending = facts[digest] = _Pending(rule, raw)
        kernels.append(
            Kernel(
                kid,
                name,
                cache_dir,
                path,
                ir_hash,
                cl,
                warps,
                stages,
                shared,
                raw,
                digest,
                strictest_digest or ttgir.raw_digest(strictest, raw, ir_hash),
                None,
                readable,
                pending,
            )
        )
    return kernels


def _stored_text(data: bytes, size: int, name: str) -> Optional[bytes]:
    """A stored text's bytes; None where its size is past MAX_STORED_BYTES
    but one an ingest stores (too long to diff: shown as not diffed). A blob
    that claims more than that, or lies about its
    size or is no zlib stream (a damaged store, a merged one taken on trust)
    is refused by name (parse.unpacked's BlobError): never more than size +
    1 bytes are made, so a zlib bomb costs no more."""
    if isinstance(size, int) and MAX_STORED_BYTES < size <= parse.MAX_BLOB_BYTES:
        return None
    return parse.unpacked(data, size, name)


def _fact_text(rule: ttgir.Rule, raw: bytes) -> Optional[str]:
    """The text whose facts a kernel has: raw normalized by rule; None
    for a raw text past irfacts' bounds (not normalized either)."""
    if len(raw) > irfacts.MAX_CHARS or raw.count(b"\n") > irfacts.MAX_LINES:
        return None
    return rule.normalized(raw.decode("utf-8", "surrogateescape"))


def _facts(rule: ttgir.Rule, raw: bytes) -> Optional[irfacts.Facts]:
    text = _fact_text(rule, raw)
    return irfacts.read(text) if text is not None else None


def _take(before: List[Kernel], after: List[Kernel], key, how: str, pairs: List[tuple]):
    """Pair each unpaired before kernel with the first unpaired after kernel
    of equal key, in stored order; remove both from the lists. Each key is
    computed once: linear in the kernels."""
    waiting: Dict[object, deque] = {}
    for a in after:
        waiting.setdefault(key(a), deque()).append(a)
    left, taken = [], set()
    for b in before:
        queue = waiting.get(key(b))
        if queue:
            a = queue.popleft()
            pairs.append((b, a, how))
            taken.add(id(a))
        else:
            left.append(b)
    before[:] = left
    after[:] = [a for a in after if id(a) not in taken]


# Each step's key, in PAIRING's order.
_STEPS = (
    (lambda k: k.digest, BY_RULE),
    (lambda k: k.strictest_digest, BY_STRICTEST),
    (Kernel.specialized, BY_SHARED),
    (Kernel.signature, BY_SIGNATURE),
    (Kernel.config, BY_CONFIG),
    (Kernel.tiles, BY_TILES),
    (lambda k: None, BY_ORDER),
)
assert tuple(how for _, how in _STEPS) == PAIRING


def pair_kernels(before: Sequence[Kernel], after: Sequence[Kernel]) -> List[tuple]:
    """(before kernel or None, after kernel or None, how) for every kernel
    of both sides: by name, then as PAIRING says for several of one name."""
    by_name: Dict[str, Tuple[list, list]] = {}
    for k in before:
        by_name.setdefault(k.name, ([], []))[0].append(k)
    for k in after:
        by_name.setdefault(k.name, ([], []))[1].append(k)
    pairs: List[tuple] = []
    for name in sorted(by_name):
        b, a = by_name[name]
        found: List[tuple] = []
        for key, how in _STEPS:
            if not (b and a):
                break
            _take(b, a, key, how, found)
        found.extend((k, None, None) for k in b)
        found.extend((None, k, None) for k in a)
        pairs.extend(found)
    return pairs


def _lines(text: str) -> List[str]:
    """A text's lines with their ends, split at "\\n" alone (a "\\r" or a
    form feed is the line's own text, as diff(1) has it)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _normalized(rule: ttgir.Rule, kernel: Optional[Kernel], raw: bool) -> List[str]:
    if kernel is None:
        return []
    text = kernel.text()
    return _lines(text if raw else rule.normalized(text))


def _common(a: List[str], b: List[str]) -> Tuple[int, int]:
    """How many lines a and b begin with, and end with, in common."""
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def _hunks(a: List[str], b: List[str], context: int, cut: List[str]) -> List[str]:
    """The hunks of a unified diff of a and b, as difflib makes them, for
    the lines between those both begin and end with; past
    MAX_ALIGNED_LINES of them a side, aligned on the lines each side holds
    once (_Anchored: linear but for a sort) instead of by difflib alone
    (quadratic in bad cases)."""
    head, tail = _common(a, b)
    start = max(0, head - context)
    a_mid, b_mid = a[start : len(a) - max(0, tail - context)], b[start : len(b) - max(0, tail - context)]
    if max(len(a_mid), len(b_mid)) > MAX_ALIGNED_LINES:
        matcher: difflib.SequenceMatcher = _Anchored(a_mid, b_mid, cut)
    else:
        matcher = difflib.SequenceMatcher(None, a_mid, b_mid)
    out = []
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(
            f"@@ -{_span(start + first[1], last[2] - first[1])} +{_span(start + first[3], last[4] - first[3])} @@\n"
        )
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in a_mid[i1:i2])
                continue
            room = MAX_DIFF_LINES + 1 - len(out)  # unified_diff cuts at MAX_DIFF_LINES: the rest is not made
            out.extend("-" + line for line in a_mid[i1 : i1 + max(0, min(i2 - i1, room))])
            room = MAX_DIFF_LINES + 1 - len(out)
            out.extend("+" + line for line in b_mid[j1 : j1 + max(0, min(j2 - j1, room))])
        if len(out) > MAX_DIFF_LINES:
            break
    return out


class _Anchored(difflib.SequenceMatcher):
    """The opcodes of two long texts: the lines that each side holds once,
    in the longest order both keep (patience diff's anchors), are equal;
    between two anchors, difflib aligns what lies there where it is short,
    and what is not short is one replacement (cut says so)."""

    def __init__(self, a: List[str], b: List[str], cut: List[str]):
        super().__init__(None, [], [], autojunk=False)  # no index of b: the opcodes are made here
        self._ops = self._anchored(a, b, cut)

    def get_opcodes(self):  # get_grouped_opcodes reads it
        return self._ops

    @staticmethod
    def _anchored(a: List[str], b: List[str], cut: List[str]) -> List[tuple]:
        seen_a, seen_b = Counter(a), Counter(b)
        where_b = {line: j for j, line in enumerate(b) if seen_b[line] == 1}
        pairs = [(i, where_b[line]) for i, line in enumerate(a) if seen_a[line] == 1 and line in where_b]
        if any(p[1] >= q[1] for p, q in zip(pairs, pairs[1:])):  # a line moved
            pairs = _longest_increasing(pairs)
        ops: List[tuple] = []
        long_gaps = 0
        run_i = run_j = i0 = j0 = 0  # the equal lines a[run_i:i0], b[run_j:j0] run on to here
        for i, j in pairs + [(len(a), len(b))]:
            if i == i0 and j == j0:
                i0, j0 = i + 1, j + 1
                continue
            ops.append(("equal", run_i, i0, run_j, j0))
            if i == i0 or j == j0:
                ops.append(("delete" if i > i0 else "insert", i0, i, j0, j))
            elif i - i0 <= ALIGNED_GAP and j - j0 <= ALIGNED_GAP:
                gap = difflib.SequenceMatcher(None, a[i0:i], b[j0:j]).get_opcodes()
                ops.extend((tag, i0 + p, i0 + q, j0 + r, j0 + t) for tag, p, q, r, t in gap)
            else:
                long_gaps += 1
                ops.append(("replace", i0, i, j0, j))
            run_i, run_j, i0, j0 = i, j, i + 1, j + 1
        ops.append(("equal", run_i, min(i0, len(a)), run_j, min(j0, len(b))))
        if long_gaps:
            cut.append(
                f"{long_gaps} stretches of more than {ALIGNED_GAP} lines between lines of one side's own "
                "are not aligned"
            )
        return _merged(ops)


# Between two anchors, difflib aligns at most this many lines a side.
ALIGNED_GAP = 2_000


def _longest_increasing(pairs: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The longest run of pairs (sorted by their first) whose second
    rises too: patience sorting, n log n."""
    tops: List[int] = []  # per length, the smallest second ending such a run
    ends: List[int] = []  # per length, the index of the pair ending it
    back = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = bisect.bisect_left(tops, j)
        if pos == len(tops):
            tops.append(j)
            ends.append(k)
        else:
            tops[pos], ends[pos] = j, k
        back[k] = ends[pos - 1] if pos else -1
    run, k = [], ends[-1] if ends else -1
    while k >= 0:
        run.append(pairs[k])
        k = back[k]
    return run[::-1]


def _merged(ops: List[tuple]) -> List[tuple]:
    """Opcodes with empty ones dropped and neighbours of one tag joined."""
    out: List[tuple] = []
    for tag, i1, i2, j1, j2 in ops:
        if i1 == i2 and j1 == j2:
            continue
        if out and out[-1][0] == tag and out[-1][2] == i1 and out[-1][4] == j1:
            out[-1] = (tag, out[-1][1], i2, out[-1][3], j2)
        else:
            out.append((tag, i1, i2, j1, j2))
    return out or [("equal", 0, 0, 0, 0)]


def _span(start: int, length: int) -> str:
    """A hunk's range as unified diff writes it (1-based; empty: the line before)."""
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def unified_diff(
    rule: ttgir.Rule,
    before: Optional[Kernel],
    after: Optional[Kernel],
    raw: bool = False,
    labels: Tuple[str, str] = SIDES,
    context: int = 3,
) -> str:
    """The unified diff of the two kernels' texts as the rule hashes them
    (raw: as compiled), headed by their file paths ('' where equal),
    within the bounds above: each cut is a line of its own, starting with
    CUT. Text that is not UTF-8 shows as \\x escapes, so that the diff is
    valid in JSON and sends no byte to a terminal that it would obey."""
    what = "as compiled" if raw else f"normalized by {rule.name}"
    heads = [
        f"{k.path} ({label}, {what})" if k is not None else f"/dev/null ({label}: no such kernel)"
        for k, label in zip((before, after), labels)
    ]
    lines = [f"--- {heads[0]}\n", f"+++ {heads[1]}\n"]
    large = [k for k in (before, after) if k is not None and len(k.raw) > MAX_DIFF_BYTES]
    cut: List[str] = []
    if any(k is not None and not k.readable for k in (before, after)):
        cut.append("not diffed: a stored text does not unpack to the size the store gives it")
        hunks: List[str] = []
    elif large:
        size = max(len(k.raw) for k in large) / (1 << 20)
        cut.append(f"not diffed: {size:.0f} MB, over the {MAX_DIFF_BYTES >> 20} MB a text this diff reads")
        hunks = []
    else:
        hunks = _hunks(_normalized(rule, before, raw), _normalized(rule, after, raw), context, cut)
    if not hunks and not cut:
        return ""
    if len(hunks) > MAX_DIFF_LINES:
        cut.append(f"cut after {MAX_DIFF_LINES} lines")
        hunks = hunks[:MAX_DIFF_LINES]
    for line in hunks:
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f"... [{len(line) - MAX_LINE_CHARS} characters cut]\n"
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    lines.extend(f"{CUT}{note} (the whole texts: the files above)\n" for note in cut)
    return printable("".join(lines))


# A lone surrogate: a byte that is not UTF-8, as surrogateescape decodes it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """text with each byte that was not UTF-8 (a lone surrogate) as a \\x
    escape: JSON takes it, and no C1 control byte (0x9b: a terminal's CSI)
    reaches a terminal raw."""
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(
        lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}" if ord(m.group()) >= 0xDC80 else f"\\u{ord(m.group()):04x}",
        text,
    )


def _status(before: Optional[Kernel], after: Optional[Kernel]) -> str:
    if before is None:
        return ONLY_AFTER
    if after is None:
        return ONLY_BEFORE
    return SAME if before.digest == after.digest else CHANGED


def diff_sides(
    conn,
    before: Side,
    after: Side,
    rule: str,
    raw: bool = False,
    kernel: Optional[str] = None,
    with_diff: bool = True,
    context: int = 3,
    rows: bool = True,
) -> dict:
    """The kernel pairs of two cells under rule: a document with the rule,
    both sides, a count per status, notes where the IR cannot say much (no
    kernels, IR not read in full), and per pair its status, how it was
    paired, each side's counts and path, and the unified diff (of the raw
    texts where they differ, with raw). kernel: only the pairs of that
    kernel name. rows=False: no pair rows ("kernels" empty), for a caller
    that wants the summary and counts only: a same pair's facts (its
    tiles) are then never read."""
    rule_obj = ttgir.get_rule(rule)
    strictest = ttgir.get_rule(ttgir.STRICTEST_RULE)
    facts: Dict[str, _Pending] = {}
    kernels = {s.label: _kernels(conn, s, rule_obj, strictest, facts) for s in (before, after)}
    made = pair_kernels(kernels[before.label], kernels[after.label])
    ignored = ttgir.ignored_beyond(rule_obj, strictest)
    pairs = []
    for b, a, how in made:
        name = (b or a).name
        if kernel is not None and name != kernel:
            continue
        status = _status(b, a)
        note = None
        if status == CHANGED and b.strictest_digest == a.strictest_digest and ignored:
            note = f"differs only in what {strictest.name} leaves out: {', '.join(ignored)}"
        pair = Pair(name, status, b, a, how, note)
        shown = status != SAME or (raw and b.ir_hash != a.ir_hash)
        if with_diff and shown:
            pair.diff = unified_diff(rule_obj, b, a, raw, (before.label, after.label), context)
        pairs.append(pair)
    if kernel is not None and not pairs:
        known = sorted({k.name for ks in kernels.values() for k in ks})
        raise DiffError(f"no kernel {kernel!r} on either side; the kernels: {', '.join(known) or 'none'}")
    document = _document(rule_obj, before, after, pairs, made, raw, kernel, rows)
    document["summary"] = summary_of(pairs)
    return document


def summary_of(pairs: Sequence[Pair]) -> dict:
    """The change summary (irsummary.summarize) of a diff's pairs: the
    changed ones, over every pair with both sides."""
    facts = [
        (p.name, p.before.read_facts() if p.before else None, p.after.read_facts() if p.after else None)
        for p in pairs
        if p.status != SAME
    ]
    unread = sum(
        1 for p in pairs if p.before is not None and p.after is not None and (p.before.unread() or p.after.unread())
    )
    summary = irsummary.summarize(facts, unread)
    summary["pairs"] = sum(1 for p in pairs if p.before is not None and p.after is not None)
    return summary


def _document(
    rule: ttgir.Rule,
    before: Side,
    after: Side,
    pairs: List[Pair],
    made: List[tuple],
    raw: bool,
    kernel: Optional[str],
    rows: bool = True,
) -> dict:
    counts = {s: 0 for s in STATUSES}
    for p in pairs:
        counts[p.status] += 1
    everything = [_status(b, a) for b, a, _ in made]
    # The cells' fingerprints are equal exactly when every kernel found its
    # equal (a multiset: step 1 pairs all equal texts), and for v1 the
    # index.tsv bytes are too.
    differs = any(s != SAME for s in everything) or (rule.hashes_index and before.index_hash != after.index_hash)
    notes, problems = [], []
    for s in (before, after):
        if s.cell_id is None:
            notes.append(f"{s.label}: no cell stored for this side")
            problems.append(MISSING_CELL)
        elif s.ir_incomplete:
            notes.append(
                f"{s.label}: its IR was not read in full ({IR_UNREAD}): kernels may be missing from "
                f"this side, and a difference may be only that; zlstore problems {s.root} names the files"
            )
            problems.append(IR_UNREAD)
    if all(s.cell_id is not None and s.n_kernels == 0 for s in (before, after)):
        notes.append(
            f"neither side compiled a .ttgir ({NO_TRITON}): no IR to compare; "
            "the op may have run through aten or a vendor library"
        )
        problems.append(NO_TRITON)
    if rule.hashes_index and before.index_hash != after.index_hash:
        notes.append(f"index.tsv differs ({rule.name} hashes it: its cache hashes differ by side)")
    notes.extend(_strictest_note(rule, pairs))
    return {
        "rule": rule.name,
        "rule_description": rule.description,
        "raw": raw,
        "kernel": kernel,
        "before": before.as_dict(),
        "after": after.as_dict(),
        "ir_differs": differs,
        "counts": counts,
        "notes": notes,
        "problem": problems[0] if problems else None,
        "pairing": list(PAIRING),
        "kernels": [_pair_dict(p) for p in pairs] if rows else [],
    }


def _strictest_note(rule: ttgir.Rule, pairs: List[Pair]) -> List[str]:
    changed = [p for p in pairs if p.status == CHANGED]
    if changed and all(p.note for p in changed) and all(p.status in (SAME, CHANGED) for p in pairs):
        return [f"every changed kernel {changed[0].note} ({ttgir.STRICTEST_RULE} sees no difference)"]
    return []


def _pair_dict(p: Pair) -> dict:
    row = {"kernel": p.name, "status": p.status, "paired_by": p.paired_by, "note": p.note}
    for side, k in zip(SIDES, (p.before, p.after)):
        for c in COUNTS:
            row[f"{c}_{side}"] = getattr(k, c) if k is not None else None
    for side, k in zip(SIDES, (p.before, p.after)):
        row[f"tiles_{side}"] = k.tile_text() if k is not None else None
    for side, k in zip(SIDES, (p.before, p.after)):
        row[f"cache_dir_{side}"] = k.cache_dir if k is not None else None
        row[f"path_{side}"] = k.path if k is not None else None
    row["diff"] = p.diff
    return row


# Columns of a pair row without its text, for --csv, --tsv and -t.
ROW_COLUMNS = (
    ("kernel", "status", "paired_by", "note")
    + tuple(f"{c}_{s}" for s in SIDES for c in COUNTS)
    + tuple(f"tiles_{s}" for s in SIDES)
    + tuple(f"{w}_{s}" for s in SIDES for w in ("cache_dir", "path"))
)


def _stored_side(conn, label: str, cell_id) -> Side:
    """A Side for a stored cell by its id (none: an empty side)."""
    row = None
    if cell_id is not None and str(cell_id).strip():
        row = conn.execute(
            "SELECT c.id, c.path, c.op, c.dtype, c.side, c.round, c.card, c.rc, c.ir_incomplete, c.index_hash, "
            "(SELECT count(*) FROM kernels k WHERE k.cell_id = c.id), r.name, r.path, r.kind "
            "FROM cells c JOIN roots r ON r.id = c.root_id WHERE c.id = ?",
            (int(cell_id),),
        ).fetchone()
    if row is None:
        return Side(label, "", "", "", "", None, label, None, None, None, None)
    cid, path, op, dtype, side, round_, card, rc, incomplete, index_hash, n, rname, rpath, kind = row
    return Side(
        label, rname, rpath, kind, op, dtype, side, round_, card, cid, path, rc, n, bool(incomplete), index_hash
    )


def current_rule(conn) -> str:
    """The current rule of the store on conn (judging_settings)."""
    return conn.execute("SELECT current_rule FROM judging_settings").fetchone()[0]


def kernel_diff_json(conn, before_cell_id, after_cell_id, rule: Optional[str] = None) -> str:
    """The pairs of two stored cells as a JSON array, under rule (None or
    '': the current one), as the text shows them (each count one value, or
    'before -> after'): the SQL function zlstore_kernel_diff, which the
    canned query kernel_diff reads."""
    before, after = (
        _stored_side(conn, label, cell_id) for label, cell_id in zip(SIDES, (before_cell_id, after_cell_id))
    )
    rows = diff_sides(conn, before, after, rule or current_rule(conn))["kernels"]
    return json.dumps(
        [
            {
                "kernel": r["kernel"],
                "status": r["status"],
                **{c: _value(r, c) for c in ("tiles", *COUNTS)},
                "paired_by": r["paired_by"],
                "note": r["note"],
                "diff": r["diff"],
            }
            for r in rows
        ]
    )


def ir_changes_json(conn, before_cell_id, after_cell_id, rule: Optional[str] = None) -> str:
    """What changed in two stored cells' IR (the summary, as `zlstore diff`
    prints it first) as a JSON array: per change its text, the kernel
    pairs it happened in, and the pairs there are: the SQL function
    zlstore_ir_changes, which the canned query ir_changes reads."""
    before, after = (
        _stored_side(conn, label, cell_id) for label, cell_id in zip(SIDES, (before_cell_id, after_cell_id))
    )
    summary = diff_sides(conn, before, after, rule or current_rule(conn), with_diff=False, rows=False)["summary"]
    return json.dumps(
        [{"change": printable(c["text"]), "kernels": c["kernels"], "of": summary["pairs"]} for c in summary["changes"]]
    )


def register(conn) -> None:
    """zlstore_kernel_diff and zlstore_ir_changes (before_cell_id,
    after_cell_id, rule) on conn."""
    conn.create_function("zlstore_kernel_diff", 3, lambda b, a, rule: kernel_diff_json(conn, b, a, rule))
    conn.create_function("zlstore_ir_changes", 3, lambda b, a, rule: ir_changes_json(conn, b, a, rule))


# -- the command's one call -------------------------------------------------------


def diff(
    store,
    first: str,
    second: str,
    rule: Optional[str] = None,
    round_: Optional[int] = None,
    card: Optional[int] = None,
    side: Optional[str] = None,
    raw: bool = False,
    kernel: Optional[str] = None,
    with_diff: bool = True,
) -> dict:
    """What `zlstore diff FIRST SECOND` says: FIRST a root and SECOND
    OP[:DTYPE] (its screening pair, or round round_ of a repeat run or
    campaign), or both ROOT:OP[:DTYPE] (the same side of two roots: side,
    default before). rule: default the current one. The document of
    diff_sides, with the form ("pair", "round" or "roots") and, for a
    screening pair, its verdict and hint under the rule."""
    from . import judge  # noqa: PLC0415 - judge imports much; only this needs it

    rule_name = judge.resolve_rule(store, rule)
    if names_an_op(second):
        if side is not None:
            raise DiffError("--side is for two roots (ROOT_A:OP ROOT_B:OP); a pair has both sides")
        op, dtype = parse_op(second)
        before, after = pair_cells(store, first, op, dtype, round_, card)
        form = "pair" if before.kind == "screen" else "round"
    else:
        a, b = parse_root_op(first), parse_root_op(second)
        before, after = same_side_cells(store, a, b, side or "before", round_, card)
        form = "roots"
    document = {
        "form": form,
        "current_rule": store.current_rule,
        **diff_sides(store.conn, before, after, rule_name, raw, kernel, with_diff),
    }
    if form == "pair":
        verdict = store.conn.execute(
            "SELECT verdict, hint, note FROM verdicts_by_rule v JOIN cells c ON c.id = ? "
            "WHERE v.root_id = c.root_id AND v.op IS c.op AND v.dtype IS c.dtype AND v.rule = ?",
            (before.cell_id if before.cell_id is not None else after.cell_id, rule_name),
        ).fetchone()
        document["verdict"], document["hint"], document["verdict_note"] = verdict or (None, None, None)
    return _printable_all(document)


def _printable_all(value):
    """A document with printable() applied to every string in it (a kernel
    name or path holding a byte that is not UTF-8, too): valid JSON."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {k: _printable_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_printable_all(v) for v in value]
    return value


# -- the text for people -------------------------------------------------------------


def _plain(text: str, **_style) -> str:
    return text


def _value(row: dict, column: str) -> str:
    """A count on both sides: one value where equal, 'b -> a' where not."""
    b, a = row[f"{column}_before"], row[f"{column}_after"]
    shown = ["" if v is None else str(v) for v in (b, a)]
    if row["status"] == ONLY_BEFORE:
        return shown[0]
    if row["status"] == ONLY_AFTER:
        return shown[1]
    return shown[0] if b == a else f"{shown[0]} -> {shown[1]}"


_STATUS_COLOR = {CHANGED: "yellow", ONLY_BEFORE: "red", ONLY_AFTER: "green"}
_DIFF_COLOR = (("+++", None), ("---", None), ("+", "green"), ("-", "red"), ("@@", "cyan"))


def _heading(document: dict) -> List[str]:
    before, after = document["before"], document["after"]
    what = _spelled(before["op"] or after["op"], before["dtype"] if before["op"] else after["dtype"])
    rule = document["rule"] + (" (the current rule)" if document.get("current_rule") == document["rule"] else "")
    form = document.get("form")
    if form == "roots":
        lines = [f"{what}, {before['side']} side of two roots, under {rule}"]
    elif form == "round":
        card = f", card {before['card']}" if before["card"] is not None else ""
        lines = [f"{what} in {before['root']}, round {before['round']}{card}, under {rule}"]
    else:
        verdict = f": {document['verdict']}" if document.get("verdict") else ""
        lines = [f"{what} in {before['root'] or after['root']}, screening pair, under {rule}{verdict}"]
        if document.get("hint"):
            lines.append(f"hint: {document['hint']}")
    for side in (before, after):
        where = side["path"] or "(no cell stored)"
        lines.append(f"{side['label']}: {where} ({side['n_kernels']} kernels)")
    return lines


# Past this many kernel rows, the default text groups equal rows (--full
# lists each): an autotuned op's 51 kernels fit a screen.
GROUP_PAST = 12
_TABLE = ("kernel", "status", "tiles", *COUNTS, "paired by", "note")
_HEADERS = ("kernel", "status", "tiles", "convert_layout", "num_warps", "num_stages", "shared", "paired by", "note")


def _table_rows(rows: List[dict], grouped: bool) -> List[Tuple[dict, dict]]:
    """(table row, a pair row it stands for): one per pair, or with grouped
    one per distinct table row with the number of pairs it stands for."""
    table = [
        (
            {
                "kernel": r["kernel"],
                "status": r["status"],
                **{c: _value(r, c) for c in ("tiles", *COUNTS)},
                "paired by": r["paired_by"] or "",
                "note": r["note"] or "",
            },
            r,
        )
        for r in rows
    ]
    if not grouped:
        return table
    groups: Dict[tuple, list] = {}
    for shown, row in table:
        groups.setdefault(tuple(shown.values()), [shown, row, 0])[2] += 1
    return [({"kernels": n, **shown}, row) for shown, row, n in groups.values()]


def text(document: dict, style=_plain, escape=lambda line: line, full: bool = False) -> str:
    """diff_sides' document as `zlstore diff` prints it: where the sides
    came from, what changed (the summary), the kernel table (past
    GROUP_PAST pairs, equal rows grouped), the count per status with the
    notes, and with full every pair's row and diff. style(text, fg=...,
    bold=...): how to color (click.style on a terminal; the default leaves
    text plain); escape(text): what each line's own text becomes first (for
    a terminal: its control characters shown, so that an IR text or a path
    colors nothing but what style does)."""
    lines: List[Tuple[str, dict]] = [(line, {}) for line in _heading(document)]
    summary = document.get("summary")
    if summary and (summary["changes"] or document["counts"][CHANGED]):
        lines.append(("", {}))
        lines.append((f"what changed, of {summary['pairs']} kernel pairs:", {"bold": True}))
        said = irsummary.lines(summary) or ["no operation or attribute: --full shows how the texts differ"]
        lines.extend((f"  {line}", {}) for line in said)
    rows = document["kernels"]
    grouped = not full and len(rows) > GROUP_PAST
    if rows:
        table = _table_rows(rows, grouped)
        columns = (["kernels"] if grouped else []) + list(_TABLE)
        headers = (["kernels"] if grouped else []) + list(_HEADERS)
        rendered = output.table([shown for shown, _ in table], columns, headers=headers, align=["left"] * len(headers))
        body = rendered.split("\n")
        lines.append(("", {}))
        lines.extend((line, {}) for line in body[:2])
        for line, (_, row) in zip(body[2:], table):
            color = _STATUS_COLOR.get(row["status"])
            lines.append((line, {"fg": color} if color else {}))
    counts = ", ".join(f"{n} {status}" for status, n in document["counts"].items() if n)
    lines.append(("", {}))
    lines.append((f"{counts or 'no kernels'} ({document['rule']}: {document['rule_description']})", {}))
    if grouped:
        lines.append((f"{len(rows)} kernel pairs, equal rows grouped; --full lists each with its diff", {}))
    elif not full and any(r["status"] != SAME for r in rows):
        lines.append(("--full shows each pair's diff", {}))
    lines.extend((f"note: {note}", {}) for note in document["notes"])
    for row in rows if full else ():
        if row["diff"]:
            lines.append(("", {}))
            for line in row["diff"].rstrip("\n").split("\n"):
                color = next((c for prefix, c in _DIFF_COLOR if line.startswith(prefix)), None)
                if line.startswith(("+++", "---")):
                    lines.append((line, {"bold": True}))
                else:
                    lines.append((line, {"fg": color} if color else {}))
    return "\n".join(style(escape(printable(line)), **how) if how else escape(printable(line)) for line, how in lines)
