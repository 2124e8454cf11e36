"""Why a cell has the rows it has, as pytest saw it: the lines the
zlstore_outcomes plugin appended to the cell's run.log, read back and
summed up into one outcome per cell (passed, skipped, deselected, failed,
error) with its reason, which NO_ROWS and MISSING_SIDE show."""

import json
from typing import List, Optional, Tuple

from ..pytest_plugins.zlstore_outcomes import MARKER

_MARKER = MARKER.encode()
# Of a test's reports, the one that says most: an error over a failure
# over a skip over a pass.
_RANK = {"error": 4, "failed": 3, "skipped": 2, "passed": 1}


def read(data: bytes) -> List[dict]:
    """The plugin's records in a run.log, in order (none where it did not run)."""
    if _MARKER not in data:
        return []
    records = []
    for line in data.split(b"\n"):
        at = line.find(_MARKER)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(_MARKER) :].decode("utf-8", "replace").rstrip("\r"))
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def summary(records: List[dict]) -> Tuple[Optional[str], Optional[str]]:
    """(outcome, reason) of a cell from its records; (None, None) where the
    plugin left none. passed: some test passed (the reason names skips
    beside it); deselected: no test was selected (-m matched none)."""
    if not records:
        return None, None
    tests: dict = {}
    for record in records:
        if "nodeid" in record and record.get("outcome") in _RANK:
            kept = tests.get(record["nodeid"])
            if kept is None or _RANK[record["outcome"]] > _RANK[kept["outcome"]]:
                tests[record["nodeid"]] = record
    session: dict = next((r for r in reversed(records) if "session" in r), {})
    by = {name: [t for t in tests.values() if t["outcome"] == name] for name in _RANK}
    reasons = lambda found: "; ".join(dict.fromkeys(t.get("reason") or "" for t in found if t.get("reason"))) or None
    if by["passed"]:
        skipped = by["skipped"]
        return "passed", (f"{len(skipped)} of {len(tests)} tests skipped: {reasons(skipped)}" if skipped else None)
    for name in ("error", "failed", "skipped"):
        if by[name]:
            return name, reasons(by[name])
    if session.get("deselected"):
        expr = session.get("markexpr")
        return "deselected", (
            f"no test matched -m {expr}" if expr else "every test deselected"
        ) + f" ({session['deselected']} deselected)"
    return "deselected", "no test collected"
