"""The IR change behind a finding: its op's change summary (irsummary.py)
in a root, and where a person reads the whole diff (the kernel_diff page
in datasette, `zlstore diff`). `ab --json` and `zlstore report` show it
per finding.

Which pair of cells stands for an op: a screening root's pair; for a
campaign or repeat run, the pair of its screening root (SCREEN_ROOT, the
root its ops were chosen from) where the store holds it, so that the link
to kernel_diff shows the same pair; else its own first round (and card)
with both sides."""

import json
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlencode

from . import irdiff, irsummary, judge, names, output

# What a finding says the switch did (names.FINDINGS' first two: faster,
# slower): the ranges that get their op's IR change.
SAID = names.FINDING_NAMES[:2]
# Where `zlstore serve` answers by default (serve.py), for a link in a
# document read away from the store.
SERVE_URL = "http://127.0.0.1:8001"

_FIRST_ROUND = (
    "SELECT b.round, b.card FROM cells b JOIN cells a ON a.root_id = b.root_id AND a.op IS b.op "
    "AND a.dtype IS b.dtype AND a.round IS b.round AND a.card IS b.card AND a.side = 'after' "
    "AND a.superseded_at IS NULL WHERE b.root_id = ? AND b.op = ? AND b.dtype IS ? AND b.side = 'before' "
    "AND b.superseded_at IS NULL ORDER BY b.round, b.card LIMIT 1"
)


def _screening_root(store, found: Mapping) -> Optional[dict]:
    """The screening pair's root: found itself, or a campaign's own
    screening root as the view root_screens resolves SCREEN_ROOT (the one
    definition, which the noise floors use too)."""
    if found["kind"] == "screen":
        return dict(found)
    row = store.conn.execute(
        "SELECT s.path FROM root_screens o JOIN roots s ON s.id = o.screen_root_id WHERE o.root_id = ?",
        (found["id"],),
    ).fetchone()
    return judge._root(store, row[0]) if row else None


def kernel_diff_url(root: str, op: str, dtype: Optional[str], rule: str, base: str = SERVE_URL) -> str:
    """The kernel_diff page of a screening pair, as zlstore serve shows it."""
    from .datasette_plugin import KERNEL_DIFF  # noqa: PLC0415 - datasette is imported only for a link
    from .datasette_site import DB_NAME  # noqa: PLC0415

    query = urlencode({"root": root, "op": op, "dtype": dtype or "", "rule": rule})
    return f"{base}/{DB_NAME}/{KERNEL_DIFF}?{query}"


def op_changes(store, root, op: str, dtype: Optional[str], rule: Optional[str] = None) -> dict:
    """What changed in op's IR in root (a name, path or roots row), before
    against after: the summary, a line of it, the pair it was read from,
    and where to read the whole diff (kernel_diff: only for a screening
    pair; the command always). "problem" where no pair of cells answers."""
    found = root if isinstance(root, Mapping) else judge._root(store, root)
    rule_name = judge.resolve_rule(store, rule)
    screen = _screening_root(store, found)
    where = screen or found
    spelled = op if dtype is None else f"{op}:{dtype}"
    result = {"root": where["name"], "op": op, "dtype": dtype, "rule": rule_name, "round": None, "card": None}
    try:
        if screen is not None:
            before, after = irdiff.pair_cells(store, screen["path"], op, dtype)
        else:
            first = store.conn.execute(_FIRST_ROUND, (found["id"], op, dtype)).fetchone()
            if first is None:
                raise irdiff.DiffError(f"no round of {spelled} in {found['name']} has both sides")
            before, after = irdiff.pair_cells(store, found["path"], op, dtype, first[0], first[1])
    except (irdiff.DiffError, LookupError) as error:
        return {**result, "text": None, "problem": str(error).strip("'\"")}
    document = irdiff.diff_sides(store.conn, before, after, rule_name, with_diff=False)
    summary = document["summary"]
    text = irsummary.one_line(summary)
    if not text:
        text = "IR differs; no operation or attribute changed" if document["ir_differs"] else "no kernel changed"
    command = ["diff", where["name"], spelled]
    if screen is None:
        command += ["--round", before.round] + (["--card", before.card] if before.card is not None else [])
    return {
        **result,
        "round": before.round if screen is None else None,
        "card": before.card if screen is None else None,
        "ir_differs": document["ir_differs"],
        "counts": document["counts"],
        "text": irdiff.printable(text),
        "summary": summary,
        "command": output.command(*command),
        "kernel_diff": kernel_diff_url(where["name"], op, dtype, rule_name) if screen is not None else None,
        "problem": document["problem"],
    }


def _cached(store, cache: Dict[tuple, dict], root, op: str, dtype: Optional[str]) -> dict:
    key = (root, op, dtype)
    if key not in cache:
        cache[key] = op_changes(store, root, op, dtype)
    return cache[key]


def brief(changes: Mapping) -> dict:
    """What a range carries of its op's change: no summary, the rest."""
    return {k: v for k, v in changes.items() if k != "summary"}


def for_findings(store, found: Mapping, rows: Sequence[Mapping]) -> List[dict]:
    """Per op and dtype with a finding among rows (ab's ranges of root
    found): its findings counted, and its IR change (op_changes)."""
    counted: Dict[Tuple[str, Optional[str]], Dict[str, int]] = {}
    for row in rows:
        if row.get("finding") in SAID:
            per = counted.setdefault((row["op"], row["dtype"]), {})
            per[row["finding"]] = per.get(row["finding"], 0) + 1
    cache: Dict[tuple, dict] = {}
    out = []
    for (op, dtype), per in counted.items():
        changes = _cached(store, cache, found["path"], op, dtype)
        out.append(
            {
                "op": op,
                "dtype": dtype,
                "findings": ", ".join(f"{n} {finding}" for finding, n in per.items()),
                "ir_change": changes["text"] or changes["problem"],
                **brief(changes),
            }
        )
    return out


def with_ir_changes(store, text: str) -> str:
    """ab's --json rows (output.json_text's layout, one object a line, as
    SQLite wrote them) with "ir_changes" last in each: a finding's op's IR
    change (brief), null for any other range; only a finding's line is
    parsed."""
    said = re.compile('"finding": ?"(?:' + "|".join(map(re.escape, SAID)) + ')"')
    lines = text.split("\n")
    cache: Dict[tuple, dict] = {}
    for k, line in enumerate(lines):
        end = line.rfind("}") + 1
        if not end:
            continue
        if not said.search(line):
            lines[k] = line[: end - 1] + ', "ir_changes": null}' + line[end:]
            continue
        start = line.find("{")
        row = json.loads(line[start:end])
        row["ir_changes"] = _brief_of(store, cache, row)
        lines[k] = line[:start] + json.dumps(row, ensure_ascii=False) + line[end:]
    return "\n".join(lines)


def with_ir_changes_rows(store, rows: Sequence[Mapping]) -> List[dict]:
    """ab's rows with "ir_changes" last, as with_ir_changes gives them."""
    cache: Dict[tuple, dict] = {}
    return [{**row, "ir_changes": _brief_of(store, cache, row)} for row in rows]


def _brief_of(store, cache: Dict[tuple, dict], row: Mapping) -> Optional[dict]:
    if row.get("finding") not in SAID or not row.get("root_path"):
        return None
    return brief(_cached(store, cache, row["root_path"], row["op"], row["dtype"]))
