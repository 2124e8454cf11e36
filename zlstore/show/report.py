"""The text reports the commands print for people: plain functions from the
rows and results the library returns to strings. No click and no I/O here,
so the wording can be tested without a terminal and the CLI stays wiring."""

import itertools
import math
import textwrap
from typing import Dict, List, Mapping, Optional, Sequence

from .. import caliber, output, provenance
from . import judge
from ..read import layout
from .history import switch_text as history_switch_text
from ..names import FINDING_NAMES


def _grouped(rows: Sequence[dict]):
    """Consecutive rows of one root (the queries order by root first), each
    group named as people name a root: by its name, and where two stored
    roots share one (two hosts' screens of the same second), by its path too."""
    paths: Dict[str, set] = {}
    for row in rows:
        paths.setdefault(row["root"], set()).add(row.get("root_id"))
    for _, grouped in itertools.groupby(rows, key=lambda r: r.get("root_id", r["root"])):
        group = list(grouped)
        first = group[0]
        name = first["root"]
        if len(paths[name]) > 1:
            name = f"{name} ({first.get('root_path') or 'root ' + str(first.get('root_id'))})"
        yield name, group


def range_text(row: Mapping, count: str = "n_rows", unit: str = "rows") -> str:
    """min .. median .. max over n, or why there is none."""
    if not row.get(count):
        return f"none: no row paired ({output.command('ab', row['root'], '--rejected')} says why)"
    numbers = " .. ".join(output.cell_text(row[k]) for k in ("min", "median", "max"))
    return f"{numbers}  (min .. median .. max of before/after over {row[count]} {unit})"


def caliber_text(row: Mapping) -> str:
    """The caliber fields as name=value, or 'unknown' when the row has no caliber."""
    return " ".join(f"{name}={row.get(name)}" for name in caliber.NAMES) if row.get("caliber_id") else "unknown"


def range_line(row: Mapping) -> Optional[str]:
    """The line under a screening pair that says what its speedup range is,
    or None when its verdict licenses no range (so none is ever printed).
    One round per shape is never a result, whatever the verdict."""
    if row["range_label"] is None:
        return None
    fallback = "; includes rows timed by the direct fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH)" if row["fallback"] else ""
    return f"    speedup range ({row['range_label']}; not a result): {range_text(row)}{fallback}"


def hint_line(row: Mapping) -> Optional[str]:
    """The line under an IR_CHANGED pair that the strictest rule sees as
    unchanged: a campaign on it would measure nothing the switch changed."""
    if not row.get("hint"):
        return None
    return f"    hint: {row['hint']}"


# The screen table: before / after of a count in one cell, so that a pair
# fits a terminal; the note goes on a line of its own below it.
SCREEN_COLUMNS = ["op", "dtype", "verdict", "recorded_verdict", "cl", "rc", "elapsed"]
SCREEN_HEADERS = ["op", "dtype", "verdict", "recorded", "cl b/a", "rc b/a", "elapsed s b/a"]
SCREEN_KEEP = ("op", "dtype", "verdict")
# The screen table's abbreviations, said once under it.
SCREEN_LEGEND = (
    "b/a: before / after the switch; cl: convert_layout ops in the side's TTGIR; rc: the side's exit status; "
    "elapsed s: the side's run time in seconds; recorded: the verdict in the root's screen.tsv"
)


def axis_words(axis: Mapping) -> str:
    """Whether the root's switch changed any IR (screen_roots' axis), in words."""
    strictest = axis["strictest_rule"]
    return {
        "live": f"the switch changed IR, even under {strictest}",
        "dead": f"the switch changed no IR, even under {strictest}",
    }.get(
        axis["axis"], f"whether the switch changes IR under {strictest} is unknown (a pair is truncated or unmeasured)"
    )


# The width notes are wrapped to where the caller gives none (no terminal).
WIDTH = 100


def both_sides(row: Mapping, name: str) -> str:
    """A value of both sides in one cell: "before / after"."""
    return f"{output.cell_text(row.get(name + '_before'))} / {output.cell_text(row.get(name + '_after'))}"


def note_lines(label: str, text: Optional[str], width: Optional[int] = None) -> List[str]:
    """A long note on lines of its own below its row, wrapped to width."""
    if not text:
        return []
    return textwrap.wrap(
        f"{label}: {text}",
        width=max(40, (width or WIDTH) - 1),
        initial_indent="    ",
        subsequent_indent="      ",
        break_on_hyphens=False,
    )


def screen_shown(rows: Sequence[dict]) -> "output.Shown":
    """The screen table's columns as -t prints them (the note a column there)."""
    shown = [
        {**row, "cl": both_sides(row, "cl"), "rc": both_sides(row, "rc"), "elapsed": both_sides(row, "elapsed")}
        for row in rows
    ]
    return output.Shown(shown, ["root"] + SCREEN_COLUMNS + ["note"], ["root"] + SCREEN_HEADERS + ["note"])


def environment_heading(environments: Sequence[Mapping]) -> str:
    """The line under a root's heading that says what its cells ran on
    (judge.root_environments' rows for the root): one environment, or each
    with its count of cells, and how many cells recorded none."""
    described: Dict[str, int] = {}
    unknown = 0
    for env in environments:
        if env.get("environment_id") is None:
            unknown += env["cells"]
            continue
        text = provenance.describe(env, provenance.DESCRIBED)
        described[text] = described.get(text, 0) + env["cells"]
    if not described:
        return "  ran on: unknown (its cells record no environment)"
    none = f"; {unknown} cell{'s' if unknown != 1 else ''} recorded none" if unknown else ""
    if len(described) == 1:
        return f"  ran on: {next(iter(described))}{none}"
    return (
        f"  ran on {len(described)} environments: "
        + " | ".join(f"{text} ({n} cells)" for text, n in described.items())
        + none
    )


def environment_note(differences: Optional[Mapping[str, Mapping]]) -> Optional[str]:
    """What a pair's or range's cells differ in besides the switch, by field
    name: `triton 3.5.0 before, 3.6.0 after` where the sides differ."""
    if not differences:
        return None
    parts = []
    for field, d in differences.items():
        label = provenance.BY_NAME[field].label if field in provenance.BY_NAME else field
        by_side = d.get("by_side") or {}
        if set(by_side) == {"before", "after"} and not any(" | " in str(v) for v in by_side.values()):
            parts.append(f"{label} {by_side.get('before')} before, {by_side.get('after')} after")
        else:
            parts.append(f"{label} {' | '.join(str(v) for v in d['values'])}")
    return "cells differ in " + "; ".join(parts)


def environment_warnings(differences: Mapping[tuple, Mapping], names: Mapping[int, str]) -> List[str]:
    """One stderr line per (root, op, dtype) whose cells differ in anything
    but the switch: its results may be that difference's, not the switch's."""
    lines = []
    for (root_id, op, dtype), fields in differences.items():
        label = f"{op}{':' + dtype if dtype else ''}"
        lines.append(
            f"warning: {names.get(root_id, root_id)} {label}: {environment_note(fields)}; "
            "a difference may be theirs, not the switch's"
        )
    return lines


def orig_differs(row: Mapping) -> Optional[str]:
    """The verdict screen.tsv.orig holds for a pair where it differs from
    screen.tsv's (a rescore rewrote the file): the harness's original."""
    orig = row.get("orig_verdict")
    return orig if orig is not None and orig != row.get("recorded_verdict") else None


def screen(
    rows: Sequence[dict],
    rule_name: str,
    axes: Optional[Mapping[str, Mapping]] = None,
    environments: Optional[Mapping[int, Sequence[Mapping]]] = None,
    differences: Optional[Mapping[tuple, Mapping]] = None,
    width: Optional[int] = None,
) -> str:
    """The screening verdicts per root (with whether its axis is live, from
    axes: root name -> screen_roots row, and what its cells ran on), each
    pair followed by its note, its labelled range line, its hint and what
    its sides' environments differ in where it has them (each on lines of
    its own, wrapped to width), then the count of each verdict
    (judge.screen_summary)."""
    lines: List[str] = []
    for name, group in _grouped(rows):
        group = list(group)
        calibers = {caliber_text(r) for r in group}
        axis = (axes or {}).get(name)
        axis_text = f"; {axis_words(axis)}" if axis else ""
        lines.extend(wrapped(f"{name}  (rule {rule_name}{axis_text}; caliber: {' | '.join(sorted(calibers))})", width))
        if environments is not None:
            lines.extend(wrapped(environment_heading(environments.get(group[0].get("root_id"), [])), width, "    "))
        columns, headers = SCREEN_COLUMNS, SCREEN_HEADERS
        shown = [dict(row, orig_differs=orig_differs(row)) for row in screen_shown(group).rows]
        if any(row["orig_differs"] for row in shown):  # screen.tsv was rewritten: the original beside it
            at = columns.index("recorded_verdict") + 1
            columns = columns[:at] + ["orig_differs"] + columns[at:]
            headers = headers[:at] + ["orig"] + headers[at:]
        table = output.table(shown, columns, headers, keep=SCREEN_KEEP, width=width).split("\n")
        lines.extend(table[:2])
        for row, line in zip(group, table[2:]):
            lines.append(line)
            lines.extend(note_lines("note", row.get("note"), width))
            differs = environment_note((differences or {}).get((row.get("root_id"), row["op"], row["dtype"])))
            for extra in (range_line(row), hint_line(row), differs and f"    environment: {differs}"):
                if extra:
                    lines.extend(wrapped(extra, width, "      "))
        lines.append("")
    if rows:
        lines.extend(wrapped(SCREEN_LEGEND, width))
    for line in screen_summary_lines(judge.screen_summary(rows, rule_name)):
        lines.extend(wrapped(line, width))
    return "\n".join(lines)


def screen_summary_lines(summary: Mapping) -> List[str]:
    """The closing lines of zlstore screen, from judge.screen_summary."""
    lines = []
    hinted = summary["hinted"]
    if hinted:
        lines.append(
            f"{hinted} IR_CHANGED pair{'s differ' if hinted != 1 else ' differs'} only in what the "
            "strictest rule leaves out (see each hint): a campaign measures nothing the switch changed there"
        )
    lines.append(
        f"{summary['pairs']} pairs under rule {summary['rule']}: "
        + ", ".join(f"{n} {name}" for name, n in summary["verdicts"].items())
    )
    return lines


def left_out_hinted(hinted: Sequence[tuple]) -> str:
    """What a plan left out by default: the IR_CHANGED pairs (op, dtype,
    hint) that differ only in what the strictest rule leaves out."""
    ops = ", ".join(f"{op}{':' + dtype if dtype else ''}" for op, dtype, _ in hinted)
    hints = sorted({hint for _, _, hint in hinted})
    return (
        f"left out: {ops}: IR_CHANGED, but {'; '.join(hints)}; a campaign on "
        f"{'them' if len(hinted) > 1 else 'it'} measures nothing the switch changed (--include-hinted plans "
        f"{'them' if len(hinted) > 1 else 'it'})"
    )


def dead_axis_warning(axis: Mapping) -> str:
    """What `zlstore screen` says of a root whose switch changed no IR."""
    return (
        f"warning: {axis['root']}: the switch {axis['switch'] or '(unnamed)'} changed no IR in any of its "
        f"{axis['pairs']} pairs, even under {axis['strictest_rule']}: confirm the switch is live "
        "(spelled right, reaching the compiler) before reading or reusing this screen"
    )


def forgotten(removed: Mapping) -> str:
    """What `zlstore forget` removed: a root, or one cell of one."""
    rows = f"{removed['measurements']} rows, {removed['kernels']} kernels, {removed['fingerprints']} fingerprints"
    texts = f"{removed['ir_texts']} IR texts no other cell used"
    if "cell" in removed:
        what = (
            f"cell {removed['cell']}" if removed["cells"] == 1 else f"{removed['cells']} cells under {removed['cell']}"
        )
        return f"forgot {what} of {removed['root']} ({removed['path']}): {rows}, {texts}"
    return (
        f"forgot {removed['root']} ({removed['path']}): {removed['cells']} cells, {rows}, "
        f"{removed['recorded_verdicts']} recorded verdicts, {removed['partitions']} plan rows, {texts}, "
        f"{removed['walked_dirs']} directory listings"
    )


def rescore(result: Mapping) -> str:
    """The pairs whose verdict moved, the count of each move, and the totals."""
    lines: List[str] = []
    if result["moved"]:
        lines.append(output.table(result["moved"], ["root", "op", "dtype", "from", "to"]))
        lines.append("")
        lines.extend(f"{count['from']} -> {count['to']}: {count['n']}" for count in result["counts"])
    lines.append(
        f"rule {result['rule']}: {result['pairs']} pairs, {len(result['moved'])} moved, "
        f"{result['unchanged']} unchanged, {result['without_original']} without a harness verdict"
    )
    return "\n".join(lines)


def ab_note(row: Mapping) -> str:
    """What a range's finding does not say: what would settle it, unpaired
    rows, fallback timing, a noise floor that is missing or not cleared."""
    notes = []
    if row.get("stop_reason"):  # an until-decided campaign's op stopped (zlstore/store/sequential.py)
        notes.append(f"stopped after round {row['stop_round']}: {row['stop_reason']}")
    if row["to_settle"]:
        notes.append(row["to_settle"])
    if row["rejected"]:
        notes.append(
            f"{row['rejected']} row{'s' if row['rejected'] != 1 else ''} did not pair "
            f"({row['rejected_reasons']}; see --rejected)"
        )
    if row["fallback"]:
        notes.append(f"{row['fallback_rows']} paired row(s) timed by the direct fallback, a different regime")
    if row["finding"] in ("faster", "slower") and row["clears_floor"] == 0:
        notes.append("its range lies within its shape's noise floor")
    return "; ".join(notes)


def interval_text(row: Mapping) -> str:
    """The effect's interval, or nothing where there is no test."""
    if row["ci_low"] is None:
        return ""
    return f"{output.cell_text(row['ci_low'])} .. {output.cell_text(row['ci_high'])}"


def floor_text(row: Mapping) -> str:
    """The op's noise floor beside a range, or why there is none."""
    if row["noise_floor"] is None:
        return row["floor_note"] or ""
    return "+-" + output.cell_text(row["noise_floor"])


def thresholds_text(settings: Mapping) -> str:
    """The thresholds a finding is held to, as every findings table says them."""
    return (
        f"faster / slower: q <= {settings['q_max']:g} and the 95% interval beyond "
        f"+-{100 * settings['min_effect']:g}%; no change: the interval within it; "
        f"at least {settings['min_rounds']} rounds"
    )


AB_COLUMNS = ["op", "dtype", "shape", "rounds", "latency", "effect", "interval", "q_value", "finding", "floor", "note"]
AB_HEADERS = [
    "op",
    "dtype",
    "shape",
    "rounds",
    "ms before -> after",
    "effect",
    "95% interval",
    "q",
    "finding",
    "noise floor",
    "note",
]
# What a findings table keeps however narrow the terminal: the range's key, its effect, its
# interval (what makes the effect a finding or not: it outlasts the latencies) and its finding.
AB_KEEP = ("op", "dtype", "shape", "effect", "interval", "finding")


def latency_text(row: Mapping) -> str:
    """Each side's latency beside the effect: the medians over the rounds,
    before -> after, in the benchmark's unit (ms); nothing where no round paired."""
    if row.get("latency_before") is None or row.get("latency_after") is None:
        return ""
    return f"{output.cell_text(row['latency_before'])} -> {output.cell_text(row['latency_after'])}"


def switch_text(row: Optional[Mapping]) -> str:
    """A root's switch with its values, as a pull request names it:
    "TRITON_F32_DEFAULT: ieee -> tf32" (a root_switches row)."""
    if not row:
        return "(unknown switch)"
    name = row.get("switch") or "(unnamed switch)"
    before, after = row.get("before_value"), row.get("after_value")
    if before is None and after is None:
        return f"{name}: values not recorded"
    return f"{name}: {before if before is not None else '?'} -> {after if after is not None else '?'}"


def caliber_notes(rows: Sequence[Mapping]) -> Dict[int, str]:
    """For a shape measured under several calibers in one root (a range
    each, never pooled), what tells each of its rows apart: the caliber
    fields that differ, by the row's position in rows."""
    keyed: Dict[tuple, List[int]] = {}
    for i, row in enumerate(rows):
        keyed.setdefault((row.get("root_id"), row["op"], row["dtype"], row["shape"]), []).append(i)
    notes = {}
    for positions in keyed.values():
        if len(positions) < 2:
            continue
        differing = [name for name in caliber.NAMES if len({rows[i].get(name) for i in positions}) > 1]
        for i in positions:
            fields = ", ".join(f"{name}={rows[i].get(name)}" for name in differing) or "caliber unknown"
            notes[i] = f"one of {len(positions)} calibers of this shape: {fields}"
    return notes


def ab_shown(rows: Sequence[dict], differences: Optional[Mapping[tuple, Mapping]] = None) -> "output.Shown":
    """The ranges with the cells the findings table shows (interval, floor,
    note, with what its cells differ in besides the switch; an effect only
    where there is a test), as -t prints them: the root a column, the note a column."""
    by_caliber = caliber_notes(rows)
    differs = {
        i: environment_note((differences or {}).get((row.get("root_id"), row["op"], row["dtype"])))
        for i, row in enumerate(rows)
    }
    noted = [
        {
            **row,
            "note": "; ".join(filter(None, (by_caliber.get(i), ab_note(row), differs[i]))),
            "interval": interval_text(row),
            "floor": floor_text(row),
            "latency": latency_text(row),
            "effect": row["effect"] if row["p_value"] is not None else None,
        }
        for i, row in enumerate(rows)
    ]
    return output.Shown(noted, ["root"] + AB_COLUMNS, ["root"] + AB_HEADERS)


def log_effect(row: Mapping) -> float:
    """How far a range's effect lies from 1, on the log scale (0 without a test)."""
    effect = row.get("effect") if row.get("p_value") is not None else None
    return math.log(effect) if effect is not None and 0 < effect < math.inf else 0.0


OP_SUMMARY_COLUMNS = ["op", "dtype", "ranges", *FINDING_NAMES, "effects"]
OP_SUMMARY_HEADERS = ["op", "dtype", "ranges", *FINDING_NAMES, "effect min .. max"]


def op_summary(rows: Sequence[Mapping]) -> List[dict]:
    """Per op and dtype of ab_ranges rows: how many ranges, how many of
    each finding, and the span of the effects of those with a test."""
    ops: Dict[tuple, dict] = {}
    for row in rows:
        key = (row["op"], row["dtype"])
        op = ops.setdefault(key, {"op": row["op"], "dtype": row["dtype"], "ranges": 0, "tested": []})
        op["ranges"] += 1
        op[row["finding"]] = op.get(row["finding"], 0) + 1
        if row.get("p_value") is not None and row.get("effect") is not None:
            op["tested"].append(row["effect"])
    summary = []
    for key in sorted(ops, key=lambda k: (str(k[0]), str(k[1]))):
        op = ops[key]
        tested = op.pop("tested")
        span = f"{output.cell_text(min(tested))} .. {output.cell_text(max(tested))}" if tested else ""
        summary.append({**{name: 0 for name in FINDING_NAMES}, **op, "effects": span})
    return summary


def ab(
    rows: Sequence[dict],
    settings: Mapping,
    environments: Optional[Mapping[int, Sequence[Mapping]]] = None,
    differences: Optional[Mapping[tuple, Mapping]] = None,
    summary: Optional[Mapping] = None,
    width: Optional[int] = None,
    switches: Optional[Mapping[int, Mapping]] = None,
) -> str:
    """The A/B ranges per root (headed by its switch and values, from
    switches: root id -> root_switches row), findings first, each with each side's latency and its effect,
    interval, q-value, finding and the op's noise floor beside it, and a
    note below it where it has one (what would settle it, what its cells
    differ in besides the switch; wrapped to width, so that the table fits
    a terminal); then the count of each finding and the thresholds they
    were held to (judge.ab_summary). An effect is shown only where there
    is a test: too few rounds show none."""
    noted = ab_shown(rows, differences).rows
    lines: List[str] = []
    for name, group in _grouped(noted):
        group = list(group)
        tested = sum(1 for r in group if r["p_value"] is not None)
        lines.extend(
            wrapped(
                f"{name}  (latency: each side's median over the rounds, in ms; {ab_method(group[0], tested)})",
                width,
            )
        )
        if switches is not None:
            lines.extend(wrapped(f"  switch {switch_text(switches.get(group[0].get('root_id')))}", width, "    "))
        if environments is not None:
            lines.extend(wrapped(environment_heading(environments.get(group[0].get("root_id"), [])), width, "    "))
        floors = [
            {**row, "floor": "+-" + output.cell_text(row["noise_floor"]) if row["noise_floor"] is not None else "none"}
            for row in group
        ]
        # too wide for the terminal, the table leaves out its rightmost columns (output.table)
        table = output.table(floors, AB_COLUMNS[:-1], AB_HEADERS[:-1], keep=AB_KEEP, width=width).split("\n")
        lines.extend(table[:2])
        floor_notes: Dict[str, List[str]] = {}  # why an op has no floor: the same for its every row, said once
        for row, line in zip(group, table[2:]):
            lines.append(line)
            if row["noise_floor"] is None and row["floor_note"]:
                floor_notes.setdefault(row["floor_note"], []).append(
                    row["op"] + (f":{row['dtype']}" if row["dtype"] else "")
                )
            lines.extend(note_lines("note", row["note"], width))
        for why, ops in floor_notes.items():
            lines.extend(note_lines(f"noise floor of {', '.join(dict.fromkeys(ops))}", why, width))
        lines.append("")
    for line in ab_summary_lines(summary if summary is not None else judge.ab_summary_of(rows, settings)):
        lines.extend(wrapped(line, width))
    return "\n".join(lines)


def ab_method(row: Mapping, tested: int) -> str:
    """How a root's ranges were tested: today's t-test, or an until-decided
    campaign's anytime-valid one (layout.STOPPING_UNTIL_DECIDED)."""
    effect = "effect: geometric mean of before / after over the rounds, above 1 faster"
    if row.get("stopping") == layout.STOPPING_UNTIL_DECIDED:
        return (
            f"{effect}; until decided: anytime-valid interval and q (the t-test's e-process, "
            f"e-BH over the root's {tested} tested ranges), valid after any round"
        )
    return f"{effect}; q: t-test on the rounds' log ratios, Benjamini-Hochberg over the root's {tested} tested ranges"


def wrapped(line: str, width: Optional[int], indent: str = "  ") -> List[str]:
    """A heading or closing line wrapped to width where one is given (a
    terminal's), continued indented; as it is otherwise."""
    if width is None or len(line) < width:
        return [line]
    first = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(
        line.lstrip(), width=max(40, width - 1), initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
    )


def ab_summary_lines(summary: Mapping) -> List[str]:
    """The closing lines of zlstore ab, from judge.ab_summary."""
    lines = [
        f"{summary['ranges']} ranges: "
        + ", ".join(f"{n} {name}" for name, n in summary["findings"].items())
        + f" (rule {summary['rule']}; {thresholds_text(summary)})"
    ]
    if summary.get("settings_note"):
        lines.append(f"note: {summary['settings_note']}")
    unpaired, fallback = summary["with_unpaired_rows"], summary["with_fallback_rows"]
    if unpaired or fallback:
        lines.append(f"{unpaired} with rows that did not pair, {fallback} with direct-fallback rows")
    return lines


def failing(rows: Sequence[Mapping], fail_on: Sequence[str]) -> List[str]:
    """What `ab --fail-on` says on stderr when it exits 1: each offending
    range by name, then the count."""
    lines = [
        f"fail: {row['root']}: {row['op']} {row['dtype'] or '(default dtype)'} {row['shape']}: "
        f"{row['finding']} (effect {output.cell_text(row['effect'])}, 95% interval {interval_text(row)}, "
        f"q {output.cell_text(row['q_value'])})"
        for row in rows
    ]
    lines.append(
        f"{len(rows)} range{'s' if len(rows) != 1 else ''} with a finding in --fail-on "
        f"{','.join(fail_on)}: exit status 1"
    )
    return lines


def no_ab_ranges(found: Optional[Mapping]) -> str:
    """Why there are no A/B ranges (a screening root never comes here: ab refuses it, judge.root_for)."""
    if found is not None:
        return f"(no A/B ranges: {found['name']} has no paired or rejected row)"
    return "(no A/B ranges: no repeat run or campaign rows stored)"


REJECTED_COLUMNS = ["root", "card", "round", "op", "dtype", "shape", "sides", "reason", "fields", "detail"]


def rejected(rows: Sequence[dict]) -> str:
    """Every row that did not pair, with its reason; detail is the differing
    caliber fields, why a row was not counted, or why a side has no such
    row as pytest saw it (cell_test_notes)."""
    return output.table(
        [{**row, "detail": row["differences"] or row["not_counted"] or row.get("why_missing") or ""} for row in rows],
        REJECTED_COLUMNS,
        keep=("op", "dtype", "shape", "reason"),
    )


NOISE_HEADING = (
    f"noise floors, not results, per shape and machine (caliber = {'/'.join(caliber.NAMES)}; "
    "a floor of an unknown machine serves only the campaigns whose SCREEN_ROOT it is)"
)


NOISE_COLUMNS = ["op", "dtype", "shape", "floor", "n", "roots", "machine", "caliber"]


def machine_text(row: Mapping) -> str:
    """The machine a floor was measured on (GPU model, driver, runtime), or unknown."""
    if row.get("gpu") is None:
        return "unknown"
    return provenance.describe(row, provenance.MACHINE)


def noise_shown(rows: Sequence[dict]) -> "output.Shown":
    """The floors with their machine and their caliber as one slash-separated column, as the table shows them."""
    shown = [
        {**row, "machine": machine_text(row), "caliber": "/".join(str(row[name]) for name in caliber.NAMES)}
        for row in rows
    ]
    return output.Shown(shown, NOISE_COLUMNS)


def noise(rows: Sequence[dict]) -> str:
    """The heading (a floor is not a result) and, when there are rows, the
    floors with their machine and caliber."""
    if not rows:
        return NOISE_HEADING
    return NOISE_HEADING + "\n" + output.table(noise_shown(rows).rows, NOISE_COLUMNS)


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
    rows = [{**row, "range_a": compare_range(row, "a"), "range_b": compare_range(row, "b")} for row in result["rows"]]
    heading = (
        f"A = {result['a']}, B = {result['b']}  (rule {result['rule']}; caliber: "
        + " ".join(f"{k}={v}" for k, v in result["caliber"].items())
        + ")"
    )
    return (
        heading
        + "\n"
        + output.table(
            rows,
            ["op", "dtype", "verdict_a", "verdict_b", "range_a", "range_b"],
            ["op", "dtype", "verdict A", "verdict B", "range A (min..median..max)", "range B"],
        )
    )


RUN_SCREEN_COLUMNS = ["op", "dtype", "verdict", "elapsed_before", "elapsed_after", "rc_before", "rc_after"]


# What a shell's exit status says about a command that never ran.
SHELL_RCS = {126: "the command is not executable", 127: "the shell found no such command"}


def run_screen(result: Mapping, rows: Sequence[dict]) -> str:
    """A screening pass's verdict table (its screen.tsv rows), where it went,
    and each side that failed (exit status, timeout) with its run.log; when
    every side failed, that says the command is at fault, not the ops."""
    lines = [output.table(list(rows), RUN_SCREEN_COLUMNS)] if rows else []
    lines.append(f"{result['root']}: {result['sides']} cells recorded; verdicts in {result['screen_tsv']}")
    failed = result.get("failed", [])
    for side in failed:
        how = "killed at the cell timeout" if side["timed_out"] else f"RC {side['rc']}"
        meaning = SHELL_RCS.get(side["rc"])
        lines.append(
            f"failed: {side['label']} {side['side']}: {how}"
            + (f" ({meaning})" if meaning and not side["timed_out"] else "")
            + f"; see {side['log']}"
        )
    if failed and len(failed) == result["sides"]:
        rcs = sorted({side["rc"] for side in failed})
        advice = (
            "raise --cell-timeout"
            if all(side["timed_out"] for side in failed)
            else "check --command by running it by hand"
        )
        lines.append(f"every side failed (RC {', '.join(map(str, rcs))}): nothing was measured; {advice}")
    return "\n".join(lines)


def campaign_next(result) -> dict:
    """What to run after a campaign, as printed: the line that continues it
    where it has ops left (interrupted, or a task killed), and zlstore ab
    unless it was interrupted; with --db where it is not the default."""
    resume = getattr(result, "resume_command", None)
    if result.interrupted and not resume:
        resume = output.command("run", "campaign", "--resume", "--root", result.root)
    return {"resume": resume, "next": None if result.interrupted else output.command("ab", result.root)}


def campaign(result) -> str:
    """A campaign's closing lines: totals, each failure, and what to run next
    (campaign_next), so that either works pasted as printed."""
    lines = [
        f"{result.root}: {result.done} {'op rounds' if result.stops is not None else 'ops'} run, "
        f"{result.skipped} skipped as {'stopped' if result.stops is not None else 'complete'}, "
        f"{len(result.failed)} failed; {result.cells} cells recorded"
    ]
    if result.stops is not None:  # until decided (runner.CampaignResult.stops)
        reasons: dict = {}
        for stop in result.stops:
            reasons[stop["reason"]] = reasons.get(stop["reason"], 0) + 1
        said = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "none yet"
        lines.append(
            f"stopped ops: {said}; the decided ops saved {result.saved_cell_hours:.3g} cell-hours "
            "(their rounds left to the most, at their measured times)"
        )
    lines.extend(f"failed: {failure}" for failure in result.failed)
    then = campaign_next(result)
    if result.interrupted:
        lines.append(f"interrupted: continue with {then['resume']}")
    else:
        if then["resume"]:
            lines.append(f"ops left: continue with {then['resume']}")
        lines.append(f"next: {then['next']}")
    return "\n".join(lines)


HISTORY_COLUMNS = ["dtype", "shape", "rounds", "effect", "interval", "q_value", "finding"]
HISTORY_HEADERS = ["dtype", "shape", "rounds", "effect", "95% interval", "q", "finding"]
HISTORY_SCREEN_COLUMNS = ["dtype", "verdict", "range"]


def history(result: Mapping) -> str:
    """One op across roots, oldest first: per root when it ran, what it ran
    on or what changed since the entry before, and its ranges (campaign) or
    verdicts (screen, with the range labelled: never a result); then each
    flip of a shape's finding between consecutive campaigns."""
    label = result["op"] + (f":{result['dtype']}" if result["dtype"] else "")
    entries = result["entries"]
    lines = [
        f"history of {label}"
        + (f" shape {result['shape']}" if result["shape"] else "")
        + (f" of the switch {result['switch']}" if result.get("switch") else "")
        + f": {len(entries)} root{'s' if len(entries) != 1 else ''}, oldest first (rule {result['rule']})",
        "",
    ]
    for i, entry in enumerate(entries):
        lines.append(
            f"{entry['started_at'] or '(time unknown)'}  {entry['root']}  ({entry['kind']}; "
            f"{history_switch_text(entry)})"
        )
        if entry["axis"] == "dead":
            lines.append("  dead axis: an A/A run, no part of a switch's history (never compared for flips)")
        if i == 0 or not entry["changes"] or (entries[i - 1]["environment"] is None and entry["environment"]):
            env = entry["environment"]
            lines.append(
                "  ran on: "
                + (provenance.describe(env) if env else "unknown (its cells record none)")
                + ("; nothing changed since the entry before" if i and not entry["changes"] else "")
            )
        if entry["changes"]:
            lines.append("  changed: " + "; ".join(entry["changes"]))
        flipped = {(f["dtype"], f["shape"]) for f in result["flips"] if f["to"]["root"] == entry["root"]}
        if entry["kind"] == "screen":
            rows = [
                {
                    **r,
                    "range": f"{r['range_label']}: {output.cell_text(r['min'])} .. "
                    f"{output.cell_text(r['median'])} .. {output.cell_text(r['max'])}"
                    if r["range_label"] and r["median"] is not None
                    else "",
                }
                for r in entry["results"]
            ]
            table = output.table(rows, HISTORY_SCREEN_COLUMNS)
        else:
            rows = [
                {
                    **r,
                    "interval": interval_text(r),
                    "finding": r["finding"] + ("  << flipped" if (r["dtype"], r["shape"]) in flipped else ""),
                }
                for r in entry["results"]
            ]
            table = output.table(rows, HISTORY_COLUMNS, HISTORY_HEADERS)
        lines.extend("  " + line for line in table.split("\n"))
        lines.append("")
    if result["flips"]:
        lines.append(
            f"{len(result['flips'])} finding{'s' if len(result['flips']) != 1 else ''} changed "
            "between consecutive campaigns of one switch, values and caliber:"
        )
        for f in result["flips"]:
            lines.append(
                f"  {f['switch']}: {f['op']}{':' + f['dtype'] if f['dtype'] else ''} {f['shape']}: "
                f"{f['from']['finding']} -> {f['to']['finding']}  "
                f"({_flip_side(f['from'])} in {f['from']['root']}; {_flip_side(f['to'])} in {f['to']['root']})"
            )
            if f["changes"]:
                lines.append("    between them: " + "; ".join(f["changes"]))
    else:
        lines.append("no shape's finding changed between consecutive campaigns of one switch, values and caliber")
    return "\n".join(lines)


def _flip_side(side: Mapping) -> str:
    interval = interval_text(side)
    effect = output.cell_text(side["effect"]) if side["effect"] is not None else "no effect"
    return f"{effect}, {interval}" if interval else f"{effect}, no interval ({side['rounds']} rounds)"
