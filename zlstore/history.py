"""One operator across every root that measured it, in time order
(`zlstore history`): a switch is tested again after every compiler change,
and the question is since when an op is faster, and what changed then.

Each entry is a root: a campaign's or repeat run's range per shape (effect,
interval, finding), or a screening pair's verdict with its labelled range;
with what the root ran on (provenance.py) and what changed in it, and in its
caliber, from the entry before. A shape whose finding changes between
consecutive campaigns is a flip, shown with both intervals. The rows are
the view op_history; this module orders them into entries."""

import json
from typing import Dict, List, Optional

from . import caliber as _caliber
from . import judge, provenance
from .canonical import json_encoder

_CANONICAL = json_encoder(ascii=False)


class HistoryError(LookupError):
    """No root measured the op (or not with that dtype or shape)."""


def canonical_shape(text: str) -> str:
    """A shape as the store keeps it (canonical JSON), from what a person
    types: `[[4096, 4096]]` is `[[4096,4096]]`. Text that is no JSON is
    taken as it is."""
    try:
        return _CANONICAL.encode(json.loads(text))
    except ValueError:
        return text


def _main_environment(environments: List[dict]) -> Optional[Dict[str, str]]:
    """The environment most of a root's cells recorded; None when none did."""
    known = [e for e in environments if e.get("environment_id") is not None]
    if not known:
        return None
    return provenance.clean({name: known[0].get(name) for name in provenance.DESCRIBED})


def _calibers(store) -> Dict[int, Dict[str, str]]:
    rows = store.conn.execute(f"SELECT id, {', '.join(_caliber.NAMES)} FROM calibers").fetchall()
    return {row[0]: dict(zip(_caliber.NAMES, row[1:])) for row in rows}


def _caliber_changes(before: Optional[dict], after: Optional[dict]) -> List[str]:
    if not before or not after:
        return []
    return [f"{name} {before[name]} -> {after[name]}" for name in _caliber.NAMES if before[name] != after[name]]


def history(store, op: str, dtype: Optional[str] = None, shape: Optional[str] = None) -> dict:
    """Every root that measured op (with dtype; a campaign's ranges only of
    shape), oldest first: {"op", "dtype", "shape", "rule", "entries",
    "flips"}. Each entry: root, kind, started_at, environment (what most of
    its cells ran on, None: unknown), changes (from the entry before:
    provenance, then caliber), and its ranges (campaign, repeat) or
    verdicts (screen). HistoryError when no root measured it."""
    where, params = ["op = ?"], [op]
    if dtype is not None:
        where.append("dtype = ?")
        params.append(dtype)
    if shape is not None:
        where.append("(shape = ? OR kind = 'screen')")
        params.append(canonical_shape(shape))
    rows = [
        dict(r)
        for r in store.db.query(
            f"SELECT * FROM op_history WHERE {' AND '.join(where)} "
            "ORDER BY started_at, root_id, dtype, shape, caliber_id",
            params,
        )
    ]
    if not rows:
        what = op + (f":{dtype}" if dtype is not None else "") + (f" shape {shape}" if shape is not None else "")
        measured = [r[0] for r in store.conn.execute("SELECT DISTINCT op FROM op_history ORDER BY op")]
        raise HistoryError(f"no stored root measured {what}; ops with results: {', '.join(measured) or 'none'}")
    environments = judge.root_environments(store)
    calibers = _calibers(store)
    entries: List[dict] = []
    for row in rows:
        if not entries or entries[-1]["root_id"] != row["root_id"]:
            entries.append(
                {
                    "root": row["root"],
                    "kind": row["kind"],
                    "started_at": row["started_at"],
                    "environment": _main_environment(environments.get(row["root_id"], [])),
                    "caliber": calibers.get(row["caliber_id"]),
                    "changes": [],
                    "results": [],
                    "root_id": row["root_id"],
                }
            )
        entries[-1]["results"].append(
            {
                k: row[k]
                for k in (
                    "op",
                    "dtype",
                    "shape",
                    "rounds",
                    "effect",
                    "ci_low",
                    "ci_high",
                    "q_value",
                    "finding",
                    "verdict",
                    "range_label",
                    "min",
                    "median",
                    "max",
                )
            }
        )
    for before, after in zip(entries, entries[1:]):
        if before["environment"] is not None and after["environment"] is not None:
            after["changes"] = provenance.changes(before["environment"], after["environment"])
        elif (before["environment"] is None) != (after["environment"] is None):
            after["changes"] = [
                "environment " + ("unknown -> recorded" if before["environment"] is None else "recorded -> unknown")
            ]
        after["changes"] += _caliber_changes(before["caliber"], after["caliber"])
    return {
        "op": op,
        "dtype": dtype,
        "shape": canonical_shape(shape) if shape is not None else None,
        "rule": store.current_rule,
        "entries": entries,
        "flips": flips(entries),
    }


def flips(entries: List[dict]) -> List[dict]:
    """Each shape whose finding changes from one campaign (or repeat run)
    that measured it to the next, with both findings and intervals.
    Screening verdicts are no findings and are not compared."""
    last: Dict[tuple, tuple] = {}
    found = []
    for entry in entries:
        if entry["kind"] == "screen":
            continue
        for result in entry["results"]:
            key = (result["op"], result["dtype"], result["shape"])
            if key in last and last[key][1]["finding"] != result["finding"]:
                earlier, was = last[key]
                found.append(
                    {
                        "op": key[0],
                        "dtype": key[1],
                        "shape": key[2],
                        "from": {"root": earlier["root"], **_judged(was)},
                        "to": {"root": entry["root"], **_judged(result)},
                    }
                )
            last[key] = (entry, result)
    return found


def _judged(result: dict) -> dict:
    return {k: result[k] for k in ("finding", "effect", "ci_low", "ci_high", "rounds")}
