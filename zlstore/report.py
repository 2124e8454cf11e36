"""The text reports the commands print for people: plain functions from the
rows and results the library returns to strings. No click and no I/O here,
so the wording can be tested without a terminal and the CLI stays wiring."""

import itertools
from typing import Iterable, List, Mapping, Optional, Sequence

from . import caliber, judge, output


def _grouped(rows: Iterable[dict], key: str = "root"):
    """Consecutive rows of one root (the queries order by root first)."""
    return itertools.groupby(rows, key=lambda r: r[key])


def range_text(row: Mapping, count: str = "n_rows", unit: str = "rows") -> str:
    """min .. median .. max over n, or why there is none."""
    if not row.get(count):
        return f"none: no row paired (zlstore ab {row['root']} --rejected says why)"
    numbers = " .. ".join(output.cell_text(row[k]) for k in ("min", "median", "max"))
    return f"{numbers}  (min .. median .. max of before/after over {row[count]} {unit})"


def caliber_text(row: Mapping) -> str:
    """The caliber fields as name=value, or 'unknown' when the row has no caliber."""
    return " ".join(f"{name}={row.get(name)}" for name in caliber.NAMES) if row.get("caliber_id") else "unknown"


def range_line(row: Mapping) -> Optional[str]:
    """The line under a screening pair that says what its speedup range is,
    or None when its verdict licenses no range (so none is ever printed)."""
    if row["range_label"] is None:
        return None
    label = row["range_label"] if row["range_label"] == "result" else f"{row['range_label']}, not a result"
    fallback = ("; includes rows timed by the direct fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH)"
                if row["fallback"] else "")
    return f"    speedup range ({label}): {range_text(row)}{fallback}"


SCREEN_COLUMNS = ["op", "dtype", "verdict", "recorded_verdict", "cl_before", "cl_after", "rc_before", "rc_after",
                  "elapsed_before", "elapsed_after", "note"]
SCREEN_HEADERS = ["op", "dtype", "verdict", "recorded", "cl_before", "cl_after", "rc_before", "rc_after",
                  "elapsed_before", "elapsed_after", "note"]


def screen(rows: Sequence[dict], rule_name: str) -> str:
    """The screening verdicts per root, each pair followed by its labelled
    range line where it has one, then the count of each verdict."""
    lines: List[str] = []
    for name, group in _grouped(rows):
        group = list(group)
        calibers = {caliber_text(r) for r in group}
        lines.append(f"{name}  (rule {rule_name}; caliber: {' | '.join(sorted(calibers))})")
        table = output.table(group, SCREEN_COLUMNS, SCREEN_HEADERS).split("\n")
        lines.extend(table[:2])
        for row, line in zip(group, table[2:]):
            lines.append(line)
            extra = range_line(row)
            if extra is not None:
                lines.append(extra)
        lines.append("")
    counts = judge.verdict_counts(rows)
    lines.append(f"{len(rows)} pairs under rule {rule_name}: "
                 + ", ".join(f"{n} {name}" for name, n in counts.items()))
    return "\n".join(lines)


def rescore(result: Mapping) -> str:
    """The pairs whose verdict moved, the count of each move, and the totals."""
    lines: List[str] = []
    if result["moved"]:
        lines.append(output.table(result["moved"], ["root", "op", "dtype", "from", "to"]))
        lines.append("")
        lines.extend(f"{count['from']} -> {count['to']}: {count['n']}" for count in result["counts"])
    lines.append(f"rule {result['rule']}: {result['pairs']} pairs, {len(result['moved'])} moved, "
                 f"{result['unchanged']} unchanged, {result['without_original']} without a harness verdict")
    return "\n".join(lines)


def ab_note(row: Mapping) -> str:
    """What a range's numbers do not say: unpaired rows, fallback timing, the noise floor."""
    notes = []
    if row["rounds"] == 0:
        notes.append("no row paired")
    if row["rejected"]:
        notes.append(f"{row['rejected']} row{'s' if row['rejected'] != 1 else ''} did not pair "
                     f"({row['rejected_reasons']}; see --rejected)")
    if row["fallback"]:
        notes.append(f"{row['fallback_rows']} paired row(s) timed by the direct fallback, a different regime")
    if row["clears_floor"] is not None:
        floor = output.cell_text(row["noise_floor"])
        notes.append(f"clears the noise floor +-{floor}" if row["clears_floor"]
                     else f"within the noise floor +-{floor}: not a result")
    return "; ".join(notes)


def ab(rows: Sequence[dict]) -> str:
    """The A/B ranges per root with their notes, then one line of totals."""
    noted = [{**row, "note": ab_note(row)} for row in rows]
    lines: List[str] = []
    for name, group in _grouped(noted):
        lines.append(f"{name}  (ratio = latency before / after)")
        lines.append(output.table(list(group), ["op", "dtype", "shape", "rounds", "min", "median", "max", "note"]))
        lines.append("")
    lines.append(f"{len(rows)} ranges, {sum(1 for r in rows if r['rejected'])} with rows that did not pair, "
                 f"{sum(1 for r in rows if r['fallback'])} with direct-fallback rows; "
                 f"{sum(1 for r in rows if r['clears_floor'] == 1)} clear their op's noise floor, "
                 f"{sum(1 for r in rows if r['clears_floor'] == 0)} do not, "
                 f"{sum(1 for r in rows if r['clears_floor'] is None)} have no noise floor under their caliber "
                 "(zlstore noise)")
    return "\n".join(lines)


def no_ab_ranges(found: Optional[Mapping]) -> str:
    """Why there are no A/B ranges: a screening root keeps its ranges in zlstore screen."""
    if found is not None and found["kind"] == "screen":
        return (f"{found['name']} is a screening root: its ranges are in zlstore screen {found['name']}, "
                f"labelled by verdict; zlstore ab {found['name']} --rejected lists its unpaired rows")
    return "(no A/B ranges: no repeat run or campaign rows stored)"


REJECTED_COLUMNS = ["root", "card", "round", "op", "dtype", "shape", "sides", "reason", "fields", "detail"]


def rejected(rows: Sequence[dict]) -> str:
    """Every row that did not pair, with its reason; detail is the differing
    caliber fields or why a row was not counted."""
    return output.table([{**row, "detail": row["differences"] or row["not_counted"] or ""} for row in rows],
                        REJECTED_COLUMNS)


NOISE_HEADING = f"noise floors, not results (caliber = {'/'.join(caliber.NAMES)})"


def noise(rows: Sequence[dict]) -> str:
    """The heading (a floor is not a result) and, when there are rows, the
    floors with their caliber as one slash-separated column."""
    if not rows:
        return NOISE_HEADING
    with_caliber = [{**row, "caliber": "/".join(str(row[name]) for name in caliber.NAMES)} for row in rows]
    return NOISE_HEADING + "\n" + output.table(with_caliber, ["op", "dtype", "n", "floor", "label", "roots", "caliber"])


def compare_range(row: Mapping, side: str) -> str:
    """One side's range in the compare table: empty where the verdict has none."""
    if row[f"range_label_{side}"] is None:
        return ""
    if not row[f"n_rows_{side}"]:
        return f"({row[f'range_label_{side}']}: no row paired)"
    numbers = "..".join(output.cell_text(row[f"{k}_{side}"]) for k in ("min", "median", "max"))
    return f"{numbers} ({row[f'range_label_{side}']})"


def compare(result: Mapping) -> str:
    """Two screening roots side by side under their one shared caliber."""
    rows = [{**row, "range_a": compare_range(row, "a"), "range_b": compare_range(row, "b")}
            for row in result["rows"]]
    heading = (f"A = {result['a']}, B = {result['b']}  (rule {result['rule']}; caliber: "
               + " ".join(f"{k}={v}" for k, v in result["caliber"].items()) + ")")
    return heading + "\n" + output.table(
        rows, ["op", "dtype", "verdict_a", "verdict_b", "range_a", "range_b"],
        ["op", "dtype", "verdict A", "verdict B", "range A (min..median..max)", "range B"])


RUN_SCREEN_COLUMNS = ["op", "dtype", "verdict", "elapsed_before", "elapsed_after", "rc_before", "rc_after"]


def run_screen(result: Mapping, rows: Sequence[dict]) -> str:
    """A screening pass's verdict table (its screen.tsv rows) and where it went."""
    closing = f"{result['root']}: {result['sides']} cells recorded; verdicts in {result['screen_tsv']}"
    if not rows:
        return closing
    return output.table(list(rows), RUN_SCREEN_COLUMNS) + "\n" + closing


def campaign(result) -> str:
    """A campaign's closing lines: totals, each failure, and what to run next
    (resume when interrupted, else zlstore ab)."""
    lines = [f"{result.root}: {result.done} ops run, {result.skipped} skipped as complete, "
             f"{len(result.failed)} failed; {result.cells} cells recorded"]
    lines.extend(f"failed: {failure}" for failure in result.failed)
    resume = getattr(result, "resume_command", None) or f"zlstore run campaign --resume --root {result.root}"
    if result.interrupted:
        lines.append(f"interrupted: continue with {resume}")
    else:
        if getattr(result, "resume_command", None):
            lines.append(f"ops left: continue with {resume}")
        lines.append(f"next: zlstore ab {result.root}{getattr(result, 'db_arg', '')}")
    return "\n".join(lines)
