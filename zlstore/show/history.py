"""One operator across every root that measured it, in time order
(`zlstore history`): a switch is tested again after every compiler change,
and the question is since when an op is faster, and what changed then.

Each entry is a root: a campaign's or repeat run's range per shape (effect,
interval, finding), or a screening pair's verdict with its labelled range;
with the switch it tested and the switch's values before and after,
whether its axis is dead (an A/A run), what it ran on (provenance.py) and
what changed in any of these, and in its caliber, from the entry before.
Two entries are comparable only with the same switch, values and caliber,
on the same GPU model where both know it (../shared/ARTIFACTS.md, Across
roots): a shape whose finding changes between consecutive comparable
campaigns is a flip, shown with both intervals; a dead axis is never part
of a switch's history. The rows are the view op_history; this module
orders them into entries."""

import json
from typing import Dict, List, Optional

from .. import caliber as _caliber
from . import judge
from .. import provenance
from ..canonical import json_encoder

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


def switch_text(entry: dict) -> str:
    """`TRITON_F32_DEFAULT ieee->tf32`: the switch an entry tested, with its values."""
    switch = entry["switch"]
    values = f" {switch['before'] or '?'}->{switch['after'] or '?'}" if switch["before"] or switch["after"] else ""
    return (switch["name"] or "(unnamed)") + values


def _switch_changes(before: dict, after: dict) -> List[str]:
    """The switch, its values and its axis from one entry to the next, named
    first: results of another switch are not the same series."""
    out = []
    if before["switch"] != after["switch"]:
        out.append(f"switch: {switch_text(before)} -> {switch_text(after)}")
    if (before["axis"] == "dead") != (after["axis"] == "dead"):
        out.append(f"axis: {before['axis']} -> {after['axis']}")
    return out


def changes(before: dict, after: dict) -> List[str]:
    """Everything that differs from one entry to another: the switch, its
    values and its axis first, then what they ran on, then the caliber."""
    found = _switch_changes(before, after)
    if before["environment"] is not None and after["environment"] is not None:
        found += provenance.changes(before["environment"], after["environment"])
    elif (before["environment"] is None) != (after["environment"] is None):
        found.append(
            "environment " + ("unknown -> recorded" if before["environment"] is None else "recorded -> unknown")
        )
    return found + _caliber_changes(before["caliber"], after["caliber"])


def history(
    store, op: str, dtype: Optional[str] = None, shape: Optional[str] = None, switch: Optional[str] = None
) -> dict:
    """Every root that measured op (with dtype; a campaign's ranges only of
    shape; only roots that tested switch), oldest first: {"op", "dtype",
    "shape", "switch", "rule", "entries", "flips"}. Each entry: root, kind,
    started_at, switch ({"name", "before", "after"}: the values it had),
    axis (dead: an A/A run, never part of a switch's history; live;
    unknown), environment (what most of its cells ran on, None: unknown),
    changes (from the entry before: switch and axis, provenance, then
    caliber), and its ranges (campaign, repeat) or verdicts (screen).
    HistoryError when no root measured it."""
    where, params = ["op = ?"], [op]
    if switch is not None:
        where.append("switch IS ?")
        params.append(switch)
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
        if switch is not None:
            switches = [
                r[0] or "(unnamed)"
                for r in store.conn.execute(
                    "SELECT DISTINCT switch FROM op_history WHERE op = ? ORDER BY switch", (op,)
                )
            ]
            raise HistoryError(
                f"no stored root of the switch {switch} measured {what}; switches that measured {op}: "
                f"{', '.join(switches) or 'none'}"
            )
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
                    "switch": {"name": row["switch"], "before": row["before_value"], "after": row["after_value"]},
                    "axis": row["axis"],
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
                    "caliber_id",
                )
            }
        )
    for before, after in zip(entries, entries[1:]):
        after["changes"] = changes(before, after)
    return {
        "op": op,
        "dtype": dtype,
        "shape": canonical_shape(shape) if shape is not None else None,
        "switch": switch,
        "rule": store.current_rule,
        "entries": entries,
        "flips": flips(entries),
    }


def _series(entry: dict) -> tuple:
    """What two entries must share for a change of finding between them to
    be a flip: the switch and its values."""
    switch = entry["switch"]
    return (switch["name"], switch["before"], switch["after"])


def _gpu(entry: dict) -> Optional[str]:
    return (entry["environment"] or {}).get("gpu")


def flips(entries: List[dict]) -> List[dict]:
    """Each shape whose finding changes from one campaign (or repeat run)
    that measured it to the next comparable one: the same switch, values
    and caliber, and the same GPU model where both know it; with both
    findings and intervals. A dead axis (an A/A run) is never compared, nor
    are screening verdicts (no findings)."""
    last: Dict[tuple, tuple] = {}
    found = []
    for entry in entries:
        if entry["kind"] == "screen" or entry["axis"] == "dead":
            continue
        for result in entry["results"]:
            key = (_series(entry), result["op"], result["dtype"], result["shape"], result["caliber_id"])
            if key in last and last[key][1]["finding"] != result["finding"]:
                earlier, was = last[key]
                gpus = {_gpu(earlier), _gpu(entry)} - {None}
                if len(gpus) < 2:
                    found.append(
                        {
                            "op": result["op"],
                            "dtype": result["dtype"],
                            "shape": result["shape"],
                            "switch": switch_text(entry),
                            "from": {"root": earlier["root"], **_judged(was)},
                            "to": {"root": entry["root"], **_judged(result)},
                            "changes": changes(earlier, entry),
                        }
                    )
            last[key] = (entry, result)
    return found


def _judged(result: dict) -> dict:
    return {k: result[k] for k in ("finding", "effect", "ci_low", "ci_high", "rounds")}
