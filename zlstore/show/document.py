"""A root's report as a document that travels (a pull request, a chat
thread, a CI artifact): Markdown with its picture in a file beside it, or
one self-contained HTML file with the picture inline. `zlstore report`.

A campaign (or repeat run): the summary line, the findings table, the
forest plot (forest.py: the dashboard's chart), the settings, the
provenance, the problems. A screening root: the verdict counts, the
IR_CHANGED pairs with their hints, the labelled speedup ranges.

The content is built once (a list of Sections) from the same functions the
terminal text uses (report.py, judge.py), then written as Markdown or HTML;
no click here."""

import html
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from ..read import files, layout
from . import irchanges, judge, report
from .. import output
from ..store import roots
from ..names import EFFECT_FINDINGS

FORMATS = ("md", "html")


@dataclass
class Table:
    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str]
    headers: Optional[Sequence[str]] = None


@dataclass
class Section:
    title: str
    lines: List[str] = field(default_factory=list)  # paragraphs, one a line
    table: Optional[Table] = None
    picture: bool = False  # the document's picture goes here
    empty: str = ""  # what it says when it has nothing
    notes: List[str] = field(default_factory=list)  # a list under the table: what a row's cells cannot hold
    links: List[Tuple[str, str]] = field(default_factory=list)  # (text, address), listed under the table
    folded: Optional[str] = None  # the table and notes folded away (<details>) under this summary


@dataclass
class Document:
    title: str
    sections: List[Section]
    picture_svg: Optional[str] = None  # the forest plot, where there is one


# -- provenance ----------------------------------------------------------------
# What the root's cells ran on is the environments' line (judge.root_environments,
# as the screen and ab headings print it); beside it, the facts the roots row
# records (path, host, start, env file). Nothing is invented.


def provenance_rows(store, found: Mapping) -> List[dict]:
    """Facts about where a root's numbers came from, as its roots row records them."""
    facts = (
        ("root directory", roots.path_text(found.get("path"))),
        ("host", found.get("host")),
        ("started at", found.get("started_at")),
        ("env file", found.get("env_file")),
        ("ingested at", found.get("ingested_at")),
    )
    return [{"what": what, "value": value} for what, value in facts if value]


# -- content ------------------------------------------------------------------


def build(store, root) -> Document:
    """The report of one root: a campaign's (or repeat run's) or a screening root's."""
    found = judge._root(store, root)
    return screen_document(store, found) if found["kind"] == "screen" else campaign_document(store, found)


def _settings_lines(store, found: Mapping) -> List[str]:
    settings = judge.judging_settings(store)
    calibers = judge.root_calibers(store, found)
    lines = [f"switch: {report.switch_text(judge.root_switches(store, found).get(found['id']))}"]
    if found["kind"] != "screen":
        lines.append(
            f"rounds: {found.get('rounds') or '?'}, cards: {found.get('cards') or '?'}, "
            f"screening root: {found.get('screen_root') or '(none)'}"
        )
    lines.append(
        "caliber: " + (" | ".join(report.caliber_text(c | {"caliber_id": c["id"]}) for c in calibers) or "unknown")
    )
    lines.append(
        f"fingerprint rule: {settings['current_rule']} (strictest: {settings['strictest_rule']}); "
        + report.thresholds_text(settings)
    )
    if settings.get("settings_note"):
        lines.append(f"note: {settings['settings_note']}")
    return lines


def _problem_section(store, found: Mapping) -> Section:
    problems = store.problems(found["name"])
    return Section(
        "Problems",
        table=Table(problems, ["file", "line", "message"]) if problems else None,
        empty="No open problems: every file of this root was read.",
    )


# A campaign of more ranges than this shows its findings of faster or
# slower (at most this many: the largest effects), a summary per op, and
# every range in a table folded away; the picture draws as many
# (forest.MAX_ROWS). Below it, the report shows every range as it is.
SHOWN_RANGES = 60

FINDINGS_LINE = (
    "latency: each side's median over the rounds, in ms (before -> after); effect: geometric mean of "
    "before / after over the rounds (above 1: faster with the switch); q: t-test on the rounds' log "
    "ratios, Benjamini-Hochberg over the root's tested ranges."
)


def _findings_line(rows: Sequence[dict]) -> str:
    """What the Findings table's columns mean, by how the root was tested:
    an until-decided campaign's anytime-valid test (report.ab_method)."""
    if rows and rows[0].get("stopping") == layout.STOPPING_UNTIL_DECIDED:
        tested = sum(1 for r in rows if r["p_value"] is not None)
        return (
            "latency: each side's median over the rounds, in ms (before -> after); "
            + report.ab_method(rows[0], tested)
            + "."
        )
    return FINDINGS_LINE


def _row_note(row: Mapping) -> Optional[str]:
    """What a range's row cannot hold, as a line of the list under its table."""
    floor = f"noise floor: {row['floor_note']}" if row["noise_floor"] is None and row["floor_note"] else None
    if not (row["note"] or floor):
        return None
    return f"{row['op']} {row['dtype'] or '(default dtype)'} {row['shape']}: " + "; ".join(
        filter(None, (row["note"], floor))
    )


def _range_table(rows: Sequence[Mapping]) -> Table:
    return Table(rows, report.AB_COLUMNS[:-1], report.AB_HEADERS[:-1])


def _notes(rows: Sequence[Mapping]) -> List[str]:
    return [note for note in map(_row_note, rows) if note]


def _findings_sections(rows: Sequence[dict]) -> List[Section]:
    """The findings table: every range where there are few; where there
    are many, the findings of faster or slower (the largest effects, at
    most SHOWN_RANGES), each op's counts, and every range folded away."""
    shown = report.ab_shown(rows).rows
    short = [
        {**row, "floor": "+-" + output.cell_text(row["noise_floor"]) if row["noise_floor"] is not None else "none"}
        for row in shown
    ]
    if len(short) <= SHOWN_RANGES:
        return [
            Section(
                "Findings",
                lines=[_findings_line(short)],
                table=_range_table(short) if short else None,
                empty="No A/B ranges: nothing paired yet.",
                notes=_notes(short),
            )
        ]
    effects = [row for row in short if row["finding"] in EFFECT_FINDINGS]
    largest = set(map(id, sorted(effects, key=lambda r: -abs(report.log_effect(r)))[:SHOWN_RANGES]))
    picked = [row for row in effects if id(row) in largest]
    said = f"{len(effects)} of the {len(short)} ranges are {' or '.join(EFFECT_FINDINGS)}"
    if len(picked) < len(effects):
        said += f"; the {len(picked)} with the largest effects are below, every range in the last table"
    return [
        Section(
            "Findings",
            lines=[said + ".", _findings_line(short)],
            table=_range_table(picked) if picked else None,
            empty=f"No range is {' or '.join(EFFECT_FINDINGS)}.",
            notes=_notes(picked),
        ),
        Section(
            "By op",
            lines=["Each op's ranges by finding, and the span of their effects (the ranges with a test)."],
            table=Table(report.op_summary(rows), report.OP_SUMMARY_COLUMNS, report.OP_SUMMARY_HEADERS),
        ),
        Section(
            "Every range",
            lines=["Findings first; each range's notes in the list below the table."],
            table=_range_table(short),
            notes=_notes(short),
            folded=f"all {len(short)} ranges",
        ),
    ]


def campaign_document(store, found: Mapping) -> Document:
    """A campaign's or repeat run's report (see the module's docstring)."""
    from . import forest  # noqa: PLC0415 (matplotlib only where a picture is drawn)

    rows = judge.ab_ranges(store, found)
    summary = judge.ab_summary(store, found)
    switch = report.switch_text(judge.root_switches(store, found).get(found["id"]))
    plotted = forest.forest_rows(store, found["name"])
    drawn = forest.pick(plotted)
    findings, *rest = _findings_sections(rows)
    sections = [
        Section("Summary", lines=[f"switch: {switch}"] + report.ab_summary_lines(summary)),
        findings,
        ir_changes_section(store, found, rows),
        Section(
            "Each shape's effect",
            lines=[
                "The effect with its 95% interval, coloured by finding; grey band: "
                "no change (within min_effect); dashed: 1."
            ]
            + [line for line in (forest.drawn_note(len(drawn), len(plotted)),) if line],
            picture=bool(plotted),
            empty="Nothing to plot: no range has a paired round.",
        ),
        *rest,
        Section("Settings", lines=_settings_lines(store, found)),
        Section("Provenance", lines=[_ran_on(store, found)], table=Table(*_provenance_table(store, found))),
        _problem_section(store, found),
    ]
    svg = forest.forest_svg(drawn, found["name"], total=len(plotted)) if plotted else None
    return Document(f"A/B report: {found['name']}", sections, svg)


def ir_changes_section(store, found: Mapping, rows: Sequence[Mapping]) -> Section:
    """Per op with a faster or slower range: what changed in its IR
    (irchanges.for_findings), the command that shows it, and a link to
    its kernel_diff page."""
    changes = irchanges.for_findings(store, found, rows)
    return Section(
        "IR changes behind the findings",
        lines=["What changed in each op's IR, before against after, as zlstore diff sums it up."] if changes else [],
        table=Table(changes, ["op", "dtype", "findings", "ir_change", "command"]) if changes else None,
        empty="No range is faster or slower: no IR change to show.",
        links=[
            (f"{c['op']}:{c['dtype']}: its kernels under zlstore serve (kernel_diff)", c["kernel_diff"])
            for c in changes
            if c.get("kernel_diff")
        ],
    )


def _ran_on(store, found: Mapping) -> str:
    """What the root's cells ran on, as the screen and ab headings say it."""
    return report.environment_heading(judge.root_environments(store, found).get(found["id"], [])).strip()


def _provenance_table(store, found: Mapping):
    rows = provenance_rows(store, found)
    columns = [c for c in (rows[0] if rows else {"what": 0, "value": 0}) if c not in ("root_id", "id")]
    return rows, columns


def screen_document(store, found: Mapping) -> Document:
    """A screening root's report (see the module's docstring)."""
    rule = judge.resolve_rule(store)
    pairs = judge.verdicts(store, found)
    summary = judge.screen_summary(pairs, rule)
    counts = [
        {"verdict": name, "pairs": n, "licenses": judge.BY_NAME[name].licenses}
        for name, n in summary["verdicts"].items()
        if name in judge.BY_NAME
    ]
    changed = [
        {**pair, "range": report.range_text(pair) if pair["range_label"] else "", "hint": pair.get("hint") or ""}
        for pair in pairs
        if pair["verdict"] == "IR_CHANGED"
    ]
    ranged = [{**pair, "range": report.range_text(pair)} for pair in pairs if pair["range_label"]]
    sections = [
        Section(
            "Verdicts",
            lines=report.screen_summary_lines(summary),
            table=Table(counts, ["verdict", "pairs", "licenses"]),
        ),
        Section(
            "IR_CHANGED pairs",
            lines=[
                "Candidates for a campaign; a hint says the strictest rule sees no "
                "change (a campaign would measure nothing the switch changed)."
            ],
            table=Table(changed, ["op", "dtype", "range", "hint"]) if changed else None,
            empty="No pair's IR changed.",
        ),
        Section(
            "Speedup ranges, labelled",
            lines=[
                "One round per shape: never a result. IR_CHANGED: indicative; "
                "NO_IR_DIFF: the machine's noise floor for that op."
            ],
            table=Table(
                ranged,
                ["op", "dtype", "verdict", "range_label", "range"],
                ["op", "dtype", "verdict", "what it is", "min .. median .. max"],
            )
            if ranged
            else None,
            empty="No pair has a speedup range.",
        ),
        Section("Settings", lines=_settings_lines(store, found)),
        Section("Provenance", lines=[_ran_on(store, found)], table=Table(*_provenance_table(store, found))),
        _problem_section(store, found),
    ]
    return Document(f"Screening report: {found['name']}", sections)


# -- writing ------------------------------------------------------------------


# What Markdown (GitHub's, python-markdown's as mkdocs runs it) would read
# as markup in text the report embeds (op, dtype, shape, paths, notes:
# anything a runs tree or a merged store holds) is escaped, so that it
# shows as written: `<` and `&` as entities (no raw HTML passes, nor an
# autolink), and `$` and `~` (math, strikethrough: a backslash before them
# is not an escape to every renderer), emphasis, code and table characters
# with a backslash, a `]` that would open a link's target, a `[` or `>`
# that would start a reference or a quote, and a line break as a space (a
# table row stays one row).
# What cannot be markup is left as it is, so that the file reads plainly:
# `[[4096,4096],128]`, `layer_norm`, `0.3 -> 0.2`.
_MARKUP = re.compile(r"([\\`*|!{}#])")
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_LINK = re.compile(r"\](?=[(\[])")


_PLAIN = re.compile(r"[^&<\\`*|!{}~$#_\]>\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]*")


def md_text(value: Any) -> str:
    """Text as Markdown shows it literally, on one line."""
    text = str(value) if value is not None else ""
    if _PLAIN.fullmatch(text):  # most cells: numbers, names
        return text
    text = " ".join(text.splitlines())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace("$", "&#36;").replace("~", "&#126;")
    text = _MARKUP.sub(r"\\\1", text)
    text = _EDGE_UNDERSCORE.sub(r"\\_", text)
    text = _LINK.sub(r"]\\", text)
    quote, reference = text.startswith(">"), text.startswith("[") and "]:" in text  # at a line's start
    return "\\" + text if quote or reference else text


def _md_table(table: Table) -> str:
    """A GitHub table of escaped cells (md_text), numbers right-aligned as
    output.table aligns them; written here, not by tabulate, which took
    most of a report of thousands of ranges."""
    columns = list(table.columns)
    right = [
        bool(table.rows) and all(output.is_number(r.get(c)) or r.get(c) is None for r in table.rows) for c in columns
    ]
    headers = [md_text(h) for h in (table.headers or columns)]
    body = [[md_text(output.cell_text(row.get(c))) for c in columns] for row in table.rows]
    widths = [max([len(headers[i])] + [len(cells[i]) for cells in body]) for i in range(len(columns))]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)) + " |"

    return "\n".join(
        [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(cells) for cells in body]
    )


def markdown(document: Document, picture_name: Optional[str] = None) -> str:
    """The document as Markdown (GitHub's tables), everything it embeds
    escaped (md_text); the picture is linked as picture_name, a file the
    caller writes beside it; a folded table goes inside <details>, which
    GitHub renders folded."""
    parts = [f"# {md_text(document.title)}", ""]
    for section in document.sections:
        parts += [f"## {md_text(section.title)}", ""]
        parts += [md_text(line) + "  " for line in section.lines] + ([""] if section.lines else [])
        body = []
        if section.table is not None:
            body += [_md_table(section.table), ""]
        if section.notes:
            body += [f"- {md_text(note)}" for note in section.notes] + [""]
        if section.links:
            body += [f"- [{_md_link_text(text)}]({href})" for text, href in section.links] + [""]
        if section.folded and body:
            body = [f"<details><summary>{html.escape(section.folded)}</summary>", ""] + body + ["</details>", ""]
        parts += body
        if section.picture and document.picture_svg and picture_name:
            parts += [f"![{md_text(section.title)}]({urllib.parse.quote(picture_name)})", ""]
        if section.table is None and not (section.picture and document.picture_svg) and section.empty:
            parts += [md_text(section.empty), ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def _md_link_text(text: str) -> str:
    """A link's text in Markdown: escaped as any text (md_text), and every
    bracket too, which would end the text early."""
    return md_text(text).replace("[", "\\[").replace("]", "\\]")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f6f6f6; }
figure { margin: 0; } figure svg { max-width: 100%; height: auto; }
p { margin: 0.2em 0; }
"""


def html_document(document: Document) -> str:
    """The document as one HTML file that opens offline: styles and the
    picture (SVG) inline, nothing fetched."""
    body = [f"<h1>{html.escape(document.title)}</h1>"]
    for section in document.sections:
        body.append(f"<section><h2>{html.escape(section.title)}</h2>")
        body += [f"<p>{html.escape(line)}</p>" for line in section.lines]
        if section.folded:
            body.append(f"<details><summary>{html.escape(section.folded)}</summary>")
        if section.table is not None:
            body.append(_table(section.table, "html"))
        if section.notes:
            body.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in section.notes) + "</ul>")
        if section.links:
            body.append(
                '<ul class="links">'
                + "".join(f'<li><a href="{html.escape(a)}">{html.escape(t)}</a></li>' for t, a in section.links)
                + "</ul>"
            )
        if section.folded:
            body.append("</details>")
        if section.picture and document.picture_svg:
            svg = document.picture_svg[document.picture_svg.index("<svg") :]  # no XML prolog inside HTML
            body.append(f'<figure id="forest">{svg}</figure>')
        if section.table is None and not (section.picture and document.picture_svg) and section.empty:
            body.append(f"<p>{html.escape(section.empty)}</p>")
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(document.title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _table(table: Table, tablefmt: str) -> str:
    text = output.table(table.rows, table.columns, table.headers, tablefmt=tablefmt)
    return text.replace("<table>", '<table class="rows">') if tablefmt == "html" else text


WRITERS: Mapping[str, Callable] = {"md": markdown, "html": html_document}


def picture_path(store, root, path, picture_dir=None) -> Path:
    """Where Markdown's picture goes: beside a report file as <stem>.svg;
    for stdout or a special file (a pipe, /dev/null), into picture_dir
    (default the current directory) as <root>.svg."""
    if path is not None and not files.is_stream(path):
        return Path(path).with_suffix(".svg")
    name = Path(judge._root(store, root)["name"]).name.lstrip(".") or "report"
    return Path(picture_dir or ".") / f"{name}.svg"


def write(store, root, fmt: str = "md", path=None, picture_dir=None) -> dict:
    """Write a root's report: to path (None: return the text for stdout; a
    special file, a FIFO or /dev/null, is written into as a stream).
    Markdown's picture goes where picture_path says; HTML has it inline.
    Every destination is checked before anything is written, so that a
    refused one leaves nothing behind; a report file is written after its
    picture (and the picture taken back if the report cannot be), a stream
    before it. Returns {"text": what to print or None, "written": [paths],
    "said": a line for stderr per file written}."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}: one of {', '.join(FORMATS)}")
    stream = path is not None and files.is_stream(path)
    if path is not None and not stream:
        files.check_replaceable(path)
    document = build(store, root)
    picture = None
    if fmt == "html":
        text = html_document(document)
    else:
        if document.picture_svg:
            picture = files.check_replaceable(picture_path(store, root, path, picture_dir))
        text = markdown(document, picture.name if picture is not None else None)
    said = []
    if picture is not None and (path is None or stream):
        said.append(f"wrote {picture} (the picture the report links; --html holds it inline)")
    elif picture is not None:
        said.append(f"wrote {picture}")
    data = text.encode("utf-8")
    if path is None:
        _write_picture(picture, document)
        return {"text": text, "written": [picture] if picture else [], "said": said}
    if stream:
        files.write_stream(path, data)
        _write_picture(picture, document)
    else:
        _write_picture(picture, document)
        try:
            files.replace_atomic(Path(path), data)
        except BaseException:
            if picture is not None:
                picture.unlink(missing_ok=True)
            raise
    return {"text": None, "written": [Path(path)] + ([picture] if picture else []), "said": [f"wrote {path}"] + said}


def _write_picture(picture: Optional[Path], document: Document):
    if picture is not None and document.picture_svg:
        files.replace_atomic(picture, document.picture_svg.encode("utf-8"))
