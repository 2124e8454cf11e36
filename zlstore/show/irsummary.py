"""What changed in an op's kernels, in a few lines: the summary `zlstore
diff` prints first, and `ab` and the report show beside a finding.

Computed from the kernels' normalized IR (irfacts.py), never from a list
of op names: per pair of kernels, the operations whose count changed, an
operation that took another's place (it vanished, one new to the kernel
appeared as many times, on the same shapes, where the alignment of the
two sequences of operations puts them together), and per operation present
on both sides (or taking another's place) the attribute values it gained
or lost. Then per change, the number of pairs it happened in, of the
pairs of the op: "tt.dot -> ttng.warp_group_dot in 40 of 51"; operations
first, then the layouts (an alias's kind: `#ttg.nvidia_mma +1`).
"""

import difflib
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from .irfacts import Facts

# Operations aligned per kernel for the replacements, between those both
# kernels begin and end with (difflib is quadratic in bad cases); past
# this, counts only.
MAX_ALIGNED = 1_000
# Lines of the summary the text shows (--json has them all).
SHOWN = 12

REPLACED, COUNT, ATTRIBUTE, ONLY = "replaced", "count", "attribute", "only"


def _replacements(before: Facts, after: Facts, gone: Dict[str, int], new: Dict[str, int]) -> Dict[str, str]:
    """vanished op -> the new op that took its place, one for one: as many
    of it as there were of the old, on the same shapes, giving as many
    results, in a block the alignment of the two sequences of operations
    replaced."""
    if not gone or not new:
        return {}
    b_ops, a_ops = before.ops, after.ops
    head = 0
    while head < min(len(b_ops), len(a_ops)) and b_ops[head] == a_ops[head]:
        head += 1
    tail = 0
    while tail < min(len(b_ops), len(a_ops)) - head and b_ops[-1 - tail] == a_ops[-1 - tail]:
        tail += 1
    b_ops, a_ops = b_ops[head : len(b_ops) - tail], a_ops[head : len(a_ops) - tail]
    if max(len(b_ops), len(a_ops)) > MAX_ALIGNED:
        return {}
    partners: Dict[str, List[str]] = {}
    matcher = difflib.SequenceMatcher(None, b_ops, a_ops, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "replace":
            continue
        olds = [o for o in dict.fromkeys(b_ops[i1:i2]) if o in gone]
        news = [o for o in dict.fromkeys(a_ops[j1:j2]) if o in new]
        for old in olds:
            partners.setdefault(old, []).extend(
                n
                for n in news
                if new[n] == gone[old]
                and after.shapes.get(n) == before.shapes.get(old)
                and after.results.get(n) == before.results.get(old)
            )
    found, taken = {}, set()
    for old, candidates in partners.items():
        for candidate in candidates:
            if candidate not in taken:
                found[old] = candidate
                taken.add(candidate)
                break
    return found


def _attribute_changes(op: str, was: dict, now: dict) -> List[tuple]:
    changes = []
    for key in sorted(set(was) | set(now)):
        b, a = was.get(key, frozenset()), now.get(key, frozenset())
        if b != a:
            changes.append((ATTRIBUTE, op, key, tuple(sorted(b)), tuple(sorted(a))))
    return changes


def pair_changes(before: Optional[Facts], after: Optional[Facts]) -> List[tuple]:
    """The changes from one kernel to the other, as hashable tuples:
    (REPLACED, old, new), (COUNT, op, delta),
    (ATTRIBUTE, op, key, values before, values after)."""
    if before is None or after is None:
        return []
    names = set(before.counts) | set(after.counts)
    gone = {o: before.counts[o] for o in names if o in before.counts and o not in after.counts}
    new = {o: after.counts[o] for o in names if o in after.counts and o not in before.counts}
    replaced = _replacements(before, after, gone, new)
    took = set(replaced.values())
    changes: List[tuple] = [(REPLACED, old, n) for old, n in sorted(replaced.items())]
    for op in sorted(names):
        delta = after.counts.get(op, 0) - before.counts.get(op, 0)
        if delta and op not in replaced and op not in took:
            changes.append((COUNT, op, delta))
    for op in sorted(names):
        if op in before.attrs and op in after.attrs:
            changes.extend(_attribute_changes(op, before.attrs[op], after.attrs[op]))
    for old, n in sorted(replaced.items()):
        changes.extend(_attribute_changes(n, before.attrs.get(old, {}), after.attrs.get(n, {})))
    return changes


def summarize(pairs: Sequence[Tuple[str, Optional[Facts], Optional[Facts]]], unread: int = 0) -> dict:
    """The summary of an op's kernel pairs ((kernel name, before facts,
    after facts); None where that side has no kernel): each change with
    the number of pairs it happened in, most frequent first, and the
    pairs counted. unread: pairs whose text was too long to read."""
    both = [(b, a) for _, b, a in pairs if b is not None and a is not None]
    seen: Counter = Counter()
    for b, a in both:
        seen.update(set(pair_changes(b, a)))
    only = Counter((("before" if a is None else "after"), name) for name, b, a in pairs if (b is None) != (a is None))
    changes = [
        {"change": list(change), "kernels": n, "text": change_text(change)}
        for change, n in sorted(seen.items(), key=lambda item: (_order(item[0]), -item[1], repr(item[0])))
    ]
    changes.extend(
        {"change": [ONLY, side, name], "kernels": n, "text": f"{name} only {side}"}
        for (side, name), n in sorted(only.items())
    )
    return {"pairs": len(both), "unread": unread, "changes": changes}


def _order(change: tuple) -> tuple:
    """Operations before layouts (`#ttg.blocked`: an alias's kind), and
    replacements, then attributes, then counts."""
    return (change[1].startswith(("#", "!")), (REPLACED, ATTRIBUTE, COUNT).index(change[0]))


def _values(values: tuple) -> str:
    return ", ".join(values) if values else "(none)"


def change_text(change: tuple) -> str:
    """One change in words, without its count."""
    kind = change[0]
    if kind == REPLACED:
        return f"{change[1]} -> {change[2]}"
    if kind == COUNT:
        return f"{change[1]} {change[2]:+d}"
    _, op, key, was, now = change
    entry = lambda values: f"{key} = {_values(values)}" if any(values) else key  # noqa: E731
    if not was:
        return f"{op}: {entry(now)} added"
    if not now:
        return f"{op}: {entry(was)} removed"
    return f"{op}: {key} {_values(was)} -> {_values(now)}"


def lines(summary: dict, shown: int = SHOWN) -> List[str]:
    """The summary as lines of text: each change 'in N of M', at most shown
    of them, then how many more there are."""
    total = summary["pairs"]
    out = []
    for change in summary["changes"][:shown]:
        if change["change"][0] == ONLY:
            out.append(f"{change['text']}: {change['kernels']}")
        else:
            out.append(f"{change['text']} in {change['kernels']} of {total}")
    rest = len(summary["changes"]) - shown
    if rest > 0:
        out.append(f"... and {rest} more (--json has every one)")
    if summary.get("unread"):
        n = summary["unread"]
        out.append(f"{n} kernel pair{'s' if n != 1 else ''} too long to read (irfacts.py's caps): not summed up")
    return out


def one_line(summary: dict, most: int = 3) -> str:
    """The first changes joined on one line, for a table cell ('' when
    nothing changed): what `ab` and the report show per finding."""
    picked = [c for c in summary["changes"] if c["change"][0] != ONLY][:most]
    if not picked:
        return ""
    total = summary["pairs"]
    text = "; ".join(f"{c['text']} in {c['kernels']} of {total}" for c in picked)
    more = len(summary["changes"]) - len(picked)
    return text + (f"; {more} more" if more > 0 else "")
