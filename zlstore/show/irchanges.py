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
import sqlite3
from typing import Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlencode

from ..store import derive
from . import irdiff, irsummary, judge
from .. import names, output, pagenames

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
    query = urlencode({"root": root, "op": op, "dtype": dtype or "", "rule": rule})
    return f"{base}/{pagenames.DB_NAME}/{pagenames.KERNEL_DIFF}?{query}"


def op_changes(store, root, op: str, dtype: Optional[str], rule: Optional[str] = None) -> dict:
    """What changed in op's IR in root (a name, path or roots row), before
    against after: the summary, a line of it, the pair it was read from,
    and where to read the whole diff (kernel_diff: only for a screening
    pair; the command always). "problem" where no pair of cells answers."""
    return _op_changes(store, root, op, dtype, rule)[0]


def _op_changes(store, root, op: str, dtype: Optional[str], rule: Optional[str] = None) -> tuple:
    """op_changes, with the screening root (None: the root's own first
    round), the cell ids it was read from (None where no pair answered) and
    the words of its command (output.command's, which adds the --db of the
    command that prints it)."""
    found = root if isinstance(root, Mapping) else judge._root(store, root)
    rule_name = judge.resolve_rule(store, rule)
    screen = _screening_root(store, found)
    where = screen or found
    spelled = op if dtype is None else f"{op}:{dtype}"
    result = {"root": where["name"], "op": op, "dtype": dtype, "rule": rule_name, "round": None, "card": None}
    screen_id = screen["id"] if screen is not None else None
    try:
        if screen is not None:
            before, after = irdiff.pair_cells(store, screen["path"], op, dtype)
        else:
            first = store.conn.execute(_FIRST_ROUND, (found["id"], op, dtype)).fetchone()
            if first is None:
                raise irdiff.DiffError(f"no round of {spelled} in {found['name']} has both sides")
            before, after = irdiff.pair_cells(store, found["path"], op, dtype, first[0], first[1])
    except (irdiff.DiffError, LookupError) as error:
        return {**result, "text": None, "problem": str(error).strip("'\"")}, screen_id, None, None, None
    document = irdiff.diff_sides(store.conn, before, after, rule_name, with_diff=False, rows=False)
    summary = document["summary"]
    text = irsummary.one_line(summary)
    if not text:
        text = "IR differs; no operation or attribute changed" if document["ir_differs"] else "no kernel changed"
    command = ["diff", where["name"], spelled]
    if screen is None:
        command += ["--round", before.round] + (["--card", before.card] if before.card is not None else [])
    changes = {
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
    return changes, screen_id, before.cell_id, after.cell_id, command


# What a reader asks of the IR changes the writers stored (derive_changes):
# those of one root's ops under the current rule, in one statement.
_STORED = (
    "SELECT c.op, c.dtype, c.changes FROM ir_change_rows c JOIN roots ON roots.id = c.root_id "
    "WHERE roots.path = ? AND c.rule = (SELECT current_rule FROM judging_settings)"
)


def _stored(store, root_path: str) -> Dict[tuple, dict]:
    """The stored IR changes of root_path's ops, by (op, dtype): what the
    last writer derived (none in a store whose writer predates them)."""
    try:
        rows = store.conn.execute(_STORED, (root_path,)).fetchall()
    except sqlite3.OperationalError:  # another build's tables, read as they are
        return {}
    stored = {(op, dtype): json.loads(text) for op, dtype, text in rows}
    for changes in stored.values():
        if changes.get("command") is not None:  # its words: printed for this command's --db
            changes["command"] = output.command(*changes["command"])
    return stored


def _cached(store, cache: Dict[str, Dict[tuple, dict]], root: str, op: str, dtype: Optional[str]) -> dict:
    """root_path's op's IR change: stored by the writers, else summed up
    now (a store derived by an older release, or an op the writers have
    not seen with a finding yet: its ranges judged on read)."""
    if root not in cache:
        cache[root] = _stored(store, root)
    per_root = cache[root]
    if (op, dtype) not in per_root:
        per_root[(op, dtype)] = op_changes(store, root, op, dtype)
    return per_root[(op, dtype)]


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
    cache: Dict[str, Dict[tuple, dict]] = {}
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
    cache: Dict[str, Dict[tuple, dict]] = {}
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
    cache: Dict[str, Dict[tuple, dict]] = {}
    return [{**row, "ir_changes": _brief_of(store, cache, row)} for row in rows]


def _brief_of(store, cache: Dict[str, Dict[tuple, dict]], row: Mapping) -> Optional[dict]:
    if row.get("finding") not in SAID or not row.get("root_path"):
        return None
    return brief(_cached(store, cache, row["root_path"], row["op"], row["dtype"]))


# The writers' part (derive_changes). A stored change whose cells are no
# longer what it would be read from goes: a cell gone or superseded, the
# campaign's own screening root another (root_screens), the screening
# pair's current cells others (screen_pair_rows), its root gone; and one
# no pair answered, where this derivation paired its root's rounds or its
# screening root's pairs again (derive's scratch tables: their last ones).
_STALE = """DELETE FROM ir_change_rows WHERE
    (before_cell_id IS NULL AND (root_id IN (SELECT root_id FROM temp.ab_rounds_now)
                                 OR screen_root_id IN (SELECT root_id FROM temp.screen_pairs_now)))
    OR root_id NOT IN (SELECT id FROM roots)
    OR NOT EXISTS (SELECT 1 FROM cells c WHERE c.id = before_cell_id AND c.superseded_at IS NULL)
    OR NOT EXISTS (SELECT 1 FROM cells c WHERE c.id = after_cell_id AND c.superseded_at IS NULL)
    OR screen_root_id IS NOT (SELECT o.screen_root_id FROM root_screens o WHERE o.root_id = ir_change_rows.root_id)
    OR (screen_root_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM screen_pair_rows p WHERE p.root_id = ir_change_rows.screen_root_id
        AND p.before_cell_id = ir_change_rows.before_cell_id AND p.after_cell_id = ir_change_rows.after_cell_id))"""

# The (root, row op, dtype) with a faster or slower range whose change
# under the current rule is not stored.
_WANTED = f"""SELECT DISTINCT r.root_id, roots.path, r.op, r.dtype
    FROM ab_range_rows r JOIN roots ON roots.id = r.root_id AND roots.kind <> 'screen'
    WHERE r.judged IS NOT NULL AND r.finding IN ({", ".join("?" for _ in SAID)})
      AND NOT EXISTS (SELECT 1 FROM ir_change_rows c WHERE c.root_id = r.root_id AND c.op IS r.op
                      AND c.dtype IS r.dtype AND c.rule = ?)
    ORDER BY r.root_id, r.op, r.dtype"""


# The change another campaign of the same screening root stored for the
# op: read from the same screening pair, it says the same.
_SHARED = """SELECT c.screen_root_id, c.before_cell_id, c.after_cell_id, c.changes FROM ir_change_rows c
    WHERE c.screen_root_id = (SELECT o.screen_root_id FROM root_screens o WHERE o.root_id = ?)
      AND c.op IS ? AND c.dtype IS ? AND c.rule = ? AND c.before_cell_id IS NOT NULL LIMIT 1"""


class _OnConnection:
    """What op_changes reads of a Store, on a writer's connection inside
    its transaction (derive.derive has the connection, not the Store)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.current_rule = conn.execute("SELECT current_rule FROM judging_settings").fetchone()[0]

    def root(self, path: str) -> dict:
        cursor = self.conn.execute("SELECT * FROM roots WHERE path = ?", (path,))
        columns = [d[0] for d in cursor.description]
        row = cursor.fetchone()
        if row is None:
            raise LookupError(f"no root {path!r}")
        return dict(zip(columns, row))


def derive_changes(conn: sqlite3.Connection) -> int:
    """Store the IR change of every (root, op, dtype) with a faster or
    slower range under the current rule that lacks one, after taking away
    those whose cells moved (_STALE); a writer's final derivation calls it
    (derive.derive), so that `ab --json` reads them. Returns how many it
    summed up."""
    conn.execute(_STALE)
    store = _OnConnection(conn)
    wanted = conn.execute(_WANTED, (*SAID, store.current_rule)).fetchall()
    for root_id, path, op, dtype in wanted:
        shared = conn.execute(_SHARED, (root_id, op, dtype, store.current_rule)).fetchone()
        if shared is not None:  # another campaign of the same screening root: the same pair, the same change
            screen_id, before_id, after_id, text = shared
        else:
            changes, screen_id, before_id, after_id, words = _op_changes(store, path, op, dtype)
            if words is not None:
                changes["command"] = words
            text = json.dumps(brief(changes))
        conn.execute(
            "INSERT INTO ir_change_rows (root_id, op, dtype, rule, screen_root_id, before_cell_id, after_cell_id, changes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (root_id, op, dtype, store.current_rule, screen_id, before_id, after_id, text),
        )
    return len(wanted)


derive.FINAL_STEPS.append(derive_changes)
