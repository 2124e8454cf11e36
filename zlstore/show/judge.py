"""The queries behind the judging commands (library only, no click). The
names they judge by (verdicts, reasons, findings) are defined in names.py
and re-exported here for the commands that read them from this module."""

import json
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import caliber as _caliber
from ..store import derivedstate as _derived
from ..read import files as _files
from ..read import layout as _layout
from .. import output as _output
from .. import provenance as _provenance
from ..store import roots as _roots
from ..read import ttgir as _ttgir
from ..names import (  # noqa: F401 (re-exported for judge's callers; on this line, where a formatter keeps it)
    BY_NAME,
    FINDING_NAMES,
    FINDINGS,
    REASON_NAMES,
    REASONS,
    SETTINGS,
    TIMEOUT_RCS,
    VERDICT_ALIASES,
    VERDICT_NAMES,
    VERDICTS,
    Finding,
    Reason,
    Verdict,
    canonical_verdict,
)


# ---------------------------------------------------------------------------
# The queries behind the judging commands. The judgement itself is in the
# views (schema.sql: verdicts, ab_pairs, ab_rejected, ab_ranges,
# noise_floors); these functions pick rows out of them, and write the one
# file the harness still reads (screen.tsv). No click here: the CLI, the
# runners and datasette share them.


class JudgeError(ValueError):
    """A judging request that cannot be answered from what is stored."""


class CaliberMismatch(JudgeError):
    """Two roots that may not be compared: their calibers differ or are unknown.
    `differences` is [(field, value in a, value in b)]."""

    def __init__(self, differences: Sequence[Tuple[str, str, str]], a: str = "a", b: str = "b"):
        self.differences = list(differences)
        self.a, self.b = a, b
        detail = "; ".join(f"{field}: {va} in {a}, {vb} in {b}" for field, va, vb in self.differences)
        super().__init__(f"{a} and {b} were not measured under the same known caliber: {detail}")


def _rows(store, sql: str, params=()) -> List[dict]:
    return [dict(r) for r in store.db.query(sql, params)]


def _root(store, root) -> dict:
    """A roots row: `root` is a name, a path, or already a roots row.
    LookupError (with the known roots) when there is no such root."""
    return root if isinstance(root, dict) else store.root(root)


def _root_clause(store, root, column: str = "root_id", reader: Optional[str] = None) -> Tuple[str, tuple]:
    """SQL restricting a view to one root; nothing for root=None. reader:
    the command asking, which refuses a root of a kind it does not read
    (root_for)."""
    if root is None:
        return "", ()
    found = _root(store, root) if reader is None else root_for(store, root, reader)
    return f" AND {column} = ?", (found["id"],)


class WrongKind(JudgeError):
    """A root given to a command that does not read its kind."""


# The command that reads each kind of root, and what a root of it is called.
READER = {"screen": "screen", "repeat": "ab", "campaign": "ab"}
KIND_WORDS = {"screen": "a screening root", "repeat": "a repeat run", "campaign": "a campaign root"}


def root_for(store, root, command: str) -> dict:
    """The roots row of `root` when `zlstore command` reads its kind (ab:
    repeat runs and campaigns; the others: screening roots); otherwise
    WrongKind, saying what kind the root is and which command reads it."""
    found = _root(store, root)
    kind, name = found["kind"], found["name"]
    wanted = "ab" if command == "ab" else "screen"
    if READER.get(kind) == wanted:
        return found
    what = KIND_WORDS.get(kind, f"a {kind} root")
    if kind == "screen":
        raise WrongKind(
            f"{name} is {what}, not a repeat run or campaign: its verdicts and ranges are in "
            f"{_output.command('screen', name)} ({_output.command('ab', name, '--rejected')} lists "
            f"its unpaired rows)"
        )
    raise WrongKind(f"{name} is {what}, not a screening root: {_output.command(READER.get(kind, 'ab'), name)} reads it")


def resolve_rule(store, rule: Optional[str] = None) -> str:
    """The rule's name (the current one when None), with its fingerprints
    computed where the store lacks them. Only screening cells' fingerprints
    are judged (verdicts_by_rule, the noise floors), and an ingest gives
    them every rule: so a command that reads judges under any rule without
    writing, also on a store it cannot write. ValueError for an unknown rule."""
    if rule is None:
        return store.current_rule
    name = _ttgir.get_rule(rule).name
    store.compute_fingerprints(name, root_kind="screen")
    return name


def verdicts(store, root=None, rule: Optional[str] = None, only: Optional[Sequence[str]] = None) -> List[dict]:
    """The verdict table (verdicts_by_rule under `rule`, else the current
    rule) for one root or every screening root; only the verdicts named in
    only, where given."""
    only = check_verdicts(only)
    where, params = _root_clause(store, root, reader="screen")
    rule = resolve_rule(store, rule)
    if only:
        where += f" AND verdict IN ({', '.join('?' * len(only))})"
        params += tuple(only)
    return _rows(
        store,
        f"SELECT * FROM verdicts_by_rule WHERE rule = ?{where} ORDER BY root, root_id, op, dtype",
        (rule, *params),
    )


def verdict_counts(rows: Sequence[dict]) -> Dict[str, int]:
    """How many rows have each verdict, in decision order; 'unjudged' counts
    pairs whose fingerprint under the rule is missing (none, normally)."""
    counts = {name: 0 for name in VERDICT_NAMES}
    for row in rows:
        key = row["verdict"] if row["verdict"] is not None else "unjudged"
        counts[key] = counts.get(key, 0) + 1
    return counts


def rescore(store, root=None, rule: Optional[str] = None) -> dict:
    """The judgement under `rule` (default: the current one) against the
    harness's original: screen.tsv.orig where the root has one, else
    screen.tsv. NO_KERNEL is NO_TRITON (ingest stores the current name), so
    it never counts as a move. Returns the rule, the moved pairs
    (root, op, dtype, from, to), counts by (from, to), and totals."""
    where, params = _root_clause(store, root, "v.root_id", reader="rescore")
    rule = resolve_rule(store, rule)
    rows = _rows(
        store,
        f"""
        SELECT v.root, v.op, v.dtype,
               CASE WHEN EXISTS (SELECT 1 FROM recorded_verdicts rv
                                 WHERE rv.root_id = v.root_id AND rv.file = '{_layout.SCREEN_TSV_ORIG}')
                    THEN v.orig_verdict ELSE v.recorded_verdict END AS "from",
               v.verdict AS "to"
        FROM verdicts_by_rule v
        WHERE v.rule = ?{where}
        ORDER BY v.root, v.op, v.dtype""",
        (rule, *params),
    )
    moved = [r for r in rows if r["from"] is not None and r["to"] is not None and r["from"] != r["to"]]
    counts: Dict[Tuple[str, str], int] = {}
    for r in moved:
        counts[(r["from"], r["to"])] = counts.get((r["from"], r["to"]), 0) + 1
    order = {name: i for i, name in enumerate(VERDICT_NAMES)}
    return {
        "rule": rule,
        "pairs": len(rows),
        "without_original": sum(1 for r in rows if r["from"] is None),
        "unchanged": sum(1 for r in rows if r["from"] is not None and r["from"] == r["to"]),
        "moved": moved,
        "counts": [
            {"from": f, "to": t, "n": n}
            for (f, t), n in sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 99), order.get(kv[0][1], 99)))
        ],
    }


def export_rows(store, root, rule: Optional[str] = None) -> List[dict]:
    """One root's verdict table in the harness's screen.tsv column order
    (layout.SCREEN_COLUMNS), rows in the order of its screen.tsv, new pairs
    after them by op and dtype."""
    found = root_for(store, root, "export")
    rule = resolve_rule(store, rule)
    # a side that compiled no .ttgir: what the harness writes, so that a
    # script comparing with its screen.tsv reads the same
    no_ir = {"fp_before": "b", "fp_after": "a"}
    columns = ", ".join(
        f"CASE WHEN {no_ir[c]}.n_kernels = 0 THEN '{_layout.NO_IR_FINGERPRINT}' ELSE v.[{c}] END AS [{c}]"
        if c in no_ir
        else f"v.[{c}]"
        for c in _layout.SCREEN_COLUMNS
    )
    return _rows(
        store,
        f"""
        SELECT {columns}
        FROM verdicts_by_rule v
        LEFT JOIN cells b ON b.id = v.before_cell_id
        LEFT JOIN cells a ON a.id = v.after_cell_id
        WHERE v.rule = ? AND v.root_id = ?
        ORDER BY (SELECT min(rv.line) FROM recorded_verdicts rv
                  WHERE rv.root_id = v.root_id AND rv.file = '{_layout.SCREEN_TSV}'
                    AND rv.op IS v.op AND rv.dtype IS v.dtype) IS NULL,
                 (SELECT min(rv.line) FROM recorded_verdicts rv
                  WHERE rv.root_id = v.root_id AND rv.file = '{_layout.SCREEN_TSV}'
                    AND rv.op IS v.op AND rv.dtype IS v.dtype),
                 v.op, v.dtype""",
        (rule, found["id"]),
    )


def _tsv_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def screen_tsv_text(rows: Sequence[dict], columns: Optional[Sequence[str]] = None) -> str:
    """Rows as the harness writes screen.tsv: a header, tab-separated,
    empty for NULL (columns default to layout.SCREEN_COLUMNS)."""
    columns = list(columns or _layout.SCREEN_COLUMNS)
    lines = ["\t".join(columns)]
    lines.extend("\t".join(_tsv_value(row.get(c)) for c in columns) for row in rows)
    return "\n".join(lines) + "\n"


def write_screen_tsv(store, root, rule: Optional[str] = None) -> Path:
    """Write a screening root's screen.tsv from the verdicts under `rule`
    (default: the current one), the way the harness's RESCORE did: screen.tsv column order, then
    any extra columns the replaced file had, kept per (op, dtype). The file
    it replaces is kept as screen.tsv.orig, unless a .orig already exists:
    that one is the harness's original and is never overwritten. Returns
    the path written. Ingest the root again to update recorded_verdicts."""
    found = _root(store, root)
    rows = export_rows(store, found, rule)
    if not _roots.known_here(found["path"]):
        raise JudgeError(
            f"cannot write screen.tsv of {found['name']}: known here only from a merged store "
            "(ingest its tree on this host first)"
        )
    directory = Path(found["path"])
    if not directory.is_dir():
        raise JudgeError(f"root directory {directory} does not exist (moved since it was ingested?)")
    extras: Dict[Tuple[str, str], dict] = {}
    extra_columns: List[str] = []
    for rec in store.db.query(
        "SELECT op, dtype, extra FROM recorded_verdicts WHERE root_id = ? AND file = ? AND extra IS NOT NULL "
        "ORDER BY line",
        (found["id"], _layout.SCREEN_TSV),
    ):
        try:
            extra = json.loads(rec["extra"])
        except ValueError:
            continue
        extras.setdefault((rec["op"], rec["dtype"]), extra)
        extra_columns.extend(k for k in extra if k not in extra_columns and k not in _layout.SCREEN_COLUMNS)
    merged = [{**extras.get((row["op"], row["dtype"] or ""), {}), **row} for row in rows]
    data = screen_tsv_text(merged, list(_layout.SCREEN_COLUMNS) + extra_columns).encode("utf-8")
    path = directory / _layout.SCREEN_TSV
    _files.keep_once(path, directory / _layout.SCREEN_TSV_ORIG)  # never overwrites the original
    return _files.replace_atomic(path, data)


def rescore_write(store, root=None, rule: Optional[str] = None) -> List[Path]:
    """`rescore --write`: rewrite screen.tsv of one root (default: every
    screening root) from the verdicts under `rule` (default: the current
    one), then ingest
    the roots again so recorded_verdicts matches the files. Refuses
    (JudgeError) before writing anything when a root's directory is gone.
    Returns the paths written, in order."""
    targets = [root_for(store, root, "rescore")] if root is not None else store.roots(kind="screen")
    merged = [t["name"] for t in targets if not _roots.known_here(t["path"])]
    if merged:  # a path only a merged store named is not one to write into (docs/security.md)
        raise JudgeError(
            "cannot write screen.tsv: known here only from a merged store (ingest its tree on this "
            "host first): " + ", ".join(merged)
        )
    missing = [t["path"] for t in targets if not Path(t["path"]).is_dir()]
    if missing:
        raise JudgeError("cannot write screen.tsv: no such root directory: " + ", ".join(missing))
    written = [write_screen_tsv(store, target, rule) for target in targets]
    if targets:
        store.ingest([t["path"] for t in targets])
    return written


# Ranges in the order `zlstore ab` shows them: per root, findings first.
AB_ORDER = "root, root_id, finding_position, op, dtype, shape, caliber_id"
# --json's order: by key, the order the ranges are kept in (no sort of a
# campaign's thousands of JSON texts).
AB_KEY_ORDER = "root, root_id, op, dtype, shape, caliber_id"

# `ab --sort`: within each root, by finding (the default: findings first),
# by effect (the largest speedup first), by q (the strongest evidence
# first) or by key (op, dtype, shape). Ranges without a test (too few
# rounds) go last under effect and q. Each is a list of (column, how).
AB_SORTS = {
    "finding": (("finding_position", ""), ("op", ""), ("dtype", ""), ("shape", ""), ("caliber_id", "")),
    "effect": (
        ("p_value", " IS NULL"),
        ("effect", " DESC"),
        ("op", ""),
        ("dtype", ""),
        ("shape", ""),
        ("caliber_id", ""),
    ),
    "q": (("q_value", " IS NULL"), ("q_value", ""), ("op", ""), ("dtype", ""), ("shape", ""), ("caliber_id", "")),
    "op": (("op", ""), ("dtype", ""), ("shape", ""), ("caliber_id", "")),
}


def _ab_order(sort: Optional[str], prefix: str = "", root: str = "root") -> str:
    if sort not in AB_SORTS:
        raise ValueError(f"unknown sort {sort!r}: one of {', '.join(AB_SORTS)}")
    keys = [root, f"{prefix}root_id"] + [f"{prefix}{column}{how}" for column, how in AB_SORTS[sort]]
    return ", ".join(keys)


def check_findings(findings: Optional[Sequence[str]]) -> List[str]:
    """The finding names asked for, each one of names.FINDING_NAMES (JudgeError otherwise)."""
    unknown = [f for f in findings or () if f not in FINDING_NAMES]
    if unknown:
        raise JudgeError(f"unknown finding {', '.join(map(repr, unknown))}: one of {', '.join(FINDING_NAMES)}")
    return list(findings or ())


def check_verdicts(verdict_names: Optional[Sequence[str]]) -> List[str]:
    """The verdict names asked for, each one of names.VERDICT_NAMES (JudgeError otherwise)."""
    names = [canonical_verdict(v) for v in verdict_names or ()]
    unknown = [v for v in names if v not in VERDICT_NAMES]
    if unknown:
        raise JudgeError(f"unknown verdict {', '.join(map(repr, unknown))}: one of {', '.join(VERDICT_NAMES)}")
    return [v for v in names if v is not None]  # all of them: None is no verdict's name


def _ab_where(store, root, ops, findings, prefix: str = "") -> Tuple[str, tuple]:
    """SQL restricting ranges to one root, some row ops and some findings."""
    clauses, params = [], []
    if root is not None:
        clauses.append(f"{prefix}root_id = ?")
        params.append(_root(store, root)["id"])
    for column, values in (("op", list(ops or ())), ("finding", check_findings(findings))):
        if values:
            clauses.append(f"{prefix}{column} IN ({', '.join('?' * len(values))})")
            params.extend(values)
    return "".join(f" AND {c}" for c in clauses), tuple(params)


def ab_ranges(store, root=None, ops=None, findings=None, sort: str = "finding") -> List[dict]:
    """The A/B ranges of repeat runs and campaigns (ab_ranges), every key
    that has a paired or a rejected row, findings first (or as sort says:
    AB_SORTS), only of the row ops and findings given (all where none)."""
    where, params = _ab_where(store, root, ops, findings)
    return _rows(store, f"SELECT * FROM ab_ranges WHERE 1{where} ORDER BY {_ab_order(sort)}", params)


# The JSON of every range as ab_range_judgements gives it, for a store whose
# ranges are all judged under the current basis: read from the stored
# judgements along the key index, no sort and no view (a test holds the two
# to the same text).
_STORED_JSON = """
    SELECT j.json
    FROM roots CROSS JOIN ab_range_rows r ON r.root_id = roots.id CROSS JOIN ab_range_json j ON j.range_rowid = r.rowid
    WHERE roots.kind <> 'screen' {where}
    ORDER BY {order}"""


def _ab_source(store) -> bool:
    """Whether the stored judgements are today's (read ab_range_rows), or
    some must be judged on the read (the view ab_range_judgements): a
    read-only store whose settings were edited by hand. The writers keep
    them (derive.py): a read derives nothing."""
    return not _derived.unjudged(store.conn)


def ab_ranges_json(store, root=None, ops=None, findings=None, sort: Optional[str] = None) -> str:
    """ab_ranges() as a JSON array of objects, the same keys in the same
    order, the ranges by key (AB_KEY_ORDER; or as sort says), laid out as every --json is
    (output.json_text: one object a line, as sqlite-utils query prints
    rows). A campaign has thousands of ranges: the JSON of each is stored
    with its judgement (ab_range_json), so no Python object is
    made per value, and nothing is judged on the read where the store is
    up to date (the view ab_range_judgements judges what is not). Reals are
    written with 15 significant digits (SQLite's JSON)."""
    if not _ab_source(store):
        where, params = _ab_where(store, root, ops, findings)
        order = AB_KEY_ORDER if sort is None else _ab_order(sort)
        rows = f"SELECT json FROM ab_range_judgements WHERE 1{where} ORDER BY {order}"
    else:
        where, params = _ab_where(store, root, ops, findings, "r.")
        order = (
            "roots.name, r.root_id, r.op, r.dtype, r.shape, r.caliber_id"
            if sort is None
            else _ab_order(sort, "r.", "roots.name")
        )
        rows = _STORED_JSON.format(where=where, order=order)
    # Joined here, not by group_concat: SQLite grows its string by copying
    # (the campaign's 9 MB took 0.030 s that way, 0.018 s this one). The
    # brackets go onto the first and last texts, so that the 9 MB text is
    # made once: "[" + joined + "]" copied it twice more (0.024 s against
    # 0.0135 s, the best of 40).
    texts = [text for (text,) in store.conn.execute(rows, params)]
    if not texts:
        return "[]"
    texts[0] = "[" + texts[0]
    texts[-1] += "]"
    return ",\n ".join(texts)


def ab_summary(store, root=None, ops=None, findings=None) -> dict:
    """What `zlstore ab` says under its tables, as data (every --json's
    "summary"): how many ranges, the count of each finding (in the order
    they are shown), how many have rows that did not pair or rows timed by
    the direct fallback, and the rule and thresholds they were judged by.
    Counted by SQLite over the same ranges ab_ranges_json reads."""
    if _ab_source(store):
        where, params = _ab_where(store, root, ops, findings, "r.")
        source = f"ab_range_rows r JOIN roots ON roots.id = r.root_id AND roots.kind <> 'screen' WHERE 1{where}"
    else:
        where, params = _ab_where(store, root, ops, findings)
        source = f"ab_range_judgements r WHERE 1{where}"
    counted = {
        row["finding"]: row
        for row in _rows(
            store,
            f"""
        SELECT r.finding, count(*) AS n, sum(r.rejected > 0) AS unpaired, sum(r.fallback > 0) AS fallback
        FROM {source} GROUP BY r.finding""",
            params,
        )
    }
    summary = _ab_summary(counted, judging_settings(store))
    summary["switches"] = [  # the switch of each root shown, by its values (ieee -> tf32)
        {k: row[k] for k in ("root", "switch", "before_value", "after_value")}
        for row in root_switches(store, root).values()
        if row["kind"] != "screen"
    ]
    return summary


def ab_summary_of(rows: Sequence[dict], settings: Mapping) -> dict:
    """ab_summary() of ranges already read (ab_ranges rows)."""
    counted: Dict[str, dict] = {}
    for row in rows:
        count = counted.setdefault(row["finding"], {"n": 0, "unpaired": 0, "fallback": 0})
        count["n"] += 1
        count["unpaired"] += 1 if row["rejected"] else 0
        count["fallback"] += 1 if row["fallback"] else 0
    return _ab_summary(counted, settings)


def _ab_summary(counted: Dict[str, dict], settings: Mapping) -> dict:
    return {
        "ranges": sum(row["n"] for row in counted.values()),
        "findings": {**{name: 0 for name in FINDING_NAMES}, **{name: row["n"] for name, row in counted.items()}},
        "with_unpaired_rows": sum(row["unpaired"] or 0 for row in counted.values()),
        "with_fallback_rows": sum(row["fallback"] or 0 for row in counted.values()),
        "rule": settings["current_rule"],
        "q_max": settings["q_max"],
        "min_effect": settings["min_effect"],
        "min_rounds": settings["min_rounds"],
        "settings_note": settings.get("settings_note"),
    }


def screen_summary(rows: Sequence[dict], rule: str) -> dict:
    """What `zlstore screen` says under its tables, as data: the rule, how
    many pairs, the count of each verdict, how many IR_CHANGED pairs differ
    only in what the strictest rule leaves out (hinted)."""
    return {
        "rule": rule,
        "pairs": len(rows),
        "verdicts": verdict_counts(rows),
        "hinted": sum(1 for row in rows if row.get("hint")),
    }


def noise_summary(rows: Sequence[dict]) -> dict:
    """What `zlstore noise` says with its table, as data: how many floors,
    and that a floor is not a result."""
    return {
        "floors": len(rows),
        "rows": sum(row["n"] or 0 for row in rows),
        "note": "noise floors, not results: a range means something only where it clears the floor of its shape "
        "on its machine",
    }


def rescore_summary(result: dict) -> dict:
    """rescore()'s totals without its moved pairs (they are the rows)."""
    return {
        "rule": result["rule"],
        "pairs": result["pairs"],
        "moved": len(result["moved"]),
        "unchanged": result["unchanged"],
        "without_original": result["without_original"],
        "counts": result["counts"],
    }


def failing_ranges(store, root=None, fail_on: Sequence[str] = (), ops=None) -> List[dict]:
    """The ranges (of one root, some row ops) whose finding is one of
    fail_on: what `ab --fail-on` exits 1 for."""
    if not fail_on:
        return []
    return ab_ranges(store, root, ops, fail_on, sort="op")


def judging_settings(store) -> dict:
    """The current rule, the strictest rule and a finding's thresholds
    (q_max, min_effect, min_rounds): the view judging_settings."""
    return _rows(store, "SELECT * FROM judging_settings")[0]


def screen_roots(store, root=None) -> List[dict]:
    """Per screening root: whether its switch's axis is live (screen_roots)."""
    where, params = _root_clause(store, root)
    return _rows(store, f"SELECT * FROM screen_roots WHERE 1{where} ORDER BY root", params)


def ab_rejected(store, root=None) -> List[dict]:
    """Every row that did not pair, with its reason (ab_rejected)."""
    where, params = _root_clause(store, root)
    return _rows(
        store,
        f"SELECT * FROM ab_rejected WHERE 1{where} "
        "ORDER BY root, card, repeat_dir, round, op, dtype, shape, occurrence",
        params,
    )


def noise_floors(store, op: Optional[str] = None) -> List[dict]:
    """The noise floors (noise_floors), optionally of one row op: per
    shape and machine, in an order that is the same in every store."""
    where, params = ("", ()) if op is None else (" AND op = ?", (op,))
    return _rows(
        store,
        f"SELECT * FROM noise_floors WHERE 1{where} "
        f"ORDER BY op, dtype, gpu IS NULL, gpu, driver, runtime, roots, {', '.join(_caliber.NAMES)}, shape",
        params,
    )


def root_calibers(store, root) -> List[dict]:
    """The known calibers a root was measured under: its own env file's and
    its cells'. Empty when none is known."""
    found = _root(store, root)
    fields = ", ".join(_caliber.NAMES)
    return _rows(
        store,
        f"""
        SELECT id, {fields} FROM calibers
        WHERE id = (SELECT caliber_id FROM roots WHERE id = :root)
           OR id IN (SELECT caliber_id FROM cells WHERE root_id = :root)
        ORDER BY id""",
        {"root": found["id"]},
    )


def caliber_differences(a: Sequence[dict], b: Sequence[dict]) -> List[Tuple[str, str, str]]:
    """[(field, value in a, value in b)] for every field that keeps the two
    sets of calibers from being one and the same known caliber: a field
    that differs, varies within a root ('x|y'), or is unknown."""

    def values(calibers, field):
        found = sorted({str(c[field]) for c in calibers})
        return "|".join(found) if found else "unknown"

    if len(a) == 1 and len(b) == 1 and a[0]["id"] == b[0]["id"]:
        return []
    differences = []
    for field in _caliber.NAMES:
        va, vb = values(a, field), values(b, field)
        if va != vb or "|" in va or va == "unknown":
            differences.append((field, va, vb))
    return differences


def compare(store, root_a, root_b, rule: Optional[str] = None) -> dict:
    """Two screening roots side by side per (op, dtype): verdicts and ranges.
    Only when both were measured under one and the same known caliber;
    otherwise CaliberMismatch naming every differing field and its values."""
    a, b = root_for(store, root_a, "compare"), root_for(store, root_b, "compare")
    calibers_a, calibers_b = root_calibers(store, a), root_calibers(store, b)
    differences = caliber_differences(calibers_a, calibers_b)
    if differences:
        raise CaliberMismatch(differences, a["name"], b["name"])
    rule = resolve_rule(store, rule)
    side = ("verdict", "recorded_verdict", "n_rows", "min", "median", "max", "range_label", "fallback")
    select = ",\n".join(f"{s}.[{c}] AS [{c}_{s}]" for s in ("a", "b") for c in side)
    rows = _rows(
        store,
        f"""
        WITH a AS (SELECT * FROM verdicts_by_rule WHERE rule = :rule AND root_id = :a),
             b AS (SELECT * FROM verdicts_by_rule WHERE rule = :rule AND root_id = :b),
             keys AS (SELECT op, dtype FROM a UNION SELECT op, dtype FROM b)
        SELECT keys.op, keys.dtype, {select}
        FROM keys
        LEFT JOIN a ON a.op IS keys.op AND a.dtype IS keys.dtype
        LEFT JOIN b ON b.op IS keys.op AND b.dtype IS keys.dtype
        ORDER BY keys.op, keys.dtype""",
        {"rule": rule, "a": a["id"], "b": b["id"]},
    )
    return {
        "a": a["name"],
        "b": b["name"],
        "rule": rule,
        "caliber": {k: v for k, v in calibers_a[0].items() if k != "id"},
        "rows": rows,
    }


# -- what the cells ran on (provenance.py) -------------------------------------


def root_environments(store, root=None) -> Dict[int, List[dict]]:
    """Per root id: the environments its current cells ran in (root_environments),
    most cells first; an environment_id of None: cells that recorded none."""
    where, params = _root_clause(store, root)
    by_root: Dict[int, List[dict]] = {}
    for row in _rows(
        store, f"SELECT * FROM root_environments WHERE 1{where} ORDER BY root_id, cells DESC, environment_id", params
    ):
        by_root.setdefault(row["root_id"], []).append(row)
    return by_root


def root_switches(store, root=None) -> Dict[int, dict]:
    """Per root id: its switch and the switch's values before and after
    (the view root_switches; a value None where no cell or env file says).
    Not its axis: that judges every screening pair of the store."""
    where, params = _root_clause(store, root)
    columns = "root_id, root, kind, switch, before_value, after_value"
    return {row["root_id"]: row for row in _rows(store, f"SELECT {columns} FROM root_switches WHERE 1{where}", params)}


def root_names(store) -> Dict[int, str]:
    """Every stored root's name by its id."""
    return dict(store.conn.execute("SELECT id, name FROM roots").fetchall())


def _differences(store, view: str, root=None) -> Dict[tuple, Dict[str, dict]]:
    where, params = _root_clause(store, root)
    out: Dict[tuple, Dict[str, dict]] = {}
    for row in _rows(store, f'SELECT root_id, op, dtype, field, "values", by_side FROM {view} WHERE 1{where}', params):
        fields = out.setdefault((row["root_id"], row["op"], row["dtype"]), {})
        fields[row["field"]] = {
            "values": json.loads(row["values"]),
            "by_side": json.loads(row["by_side"]) if row["by_side"] else None,
        }
    order = {name: i for i, name in enumerate(_provenance.NAMES)}
    return {k: dict(sorted(v.items(), key=lambda item: order.get(item[0], len(order)))) for k, v in out.items()}


def environment_differences(store, root=None) -> Dict[tuple, Dict[str, dict]]:
    """Per (root id, cell op, dtype): the provenance fields in which its
    cells differ, each with its values and which side had which
    (environment_differences). A screening pair's two sides, or a campaign
    op's rounds, that ran on two GPU models or Triton builds."""
    return _differences(store, "environment_differences", root)


def range_environment_differences(store, root=None) -> Dict[tuple, Dict[str, dict]]:
    """environment_differences per A/B range key (root id, row op, dtype)."""
    return _differences(store, "range_environment_differences", root)


def with_environment_differs(rows: Sequence[dict]) -> List[dict]:
    """Rows of verdicts or ab_ranges with their environment_differs column
    (JSON text, as datasette shows it) as an object, for --json and CSV."""
    return [
        {
            **row,
            "environment_differs": json.loads(row["environment_differs"]) if row.get("environment_differs") else None,
        }
        for row in rows
    ]
