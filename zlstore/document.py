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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence

from . import files, judge, output, report, roots

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
    lines = [f"switch: {found.get('switch') or '(unnamed)'}"]
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


def campaign_document(store, found: Mapping) -> Document:
    """A campaign's or repeat run's report (see the module's docstring)."""
    from . import forest  # noqa: PLC0415 (matplotlib only where a picture is drawn)

    rows = judge.ab_ranges(store, found)
    summary = judge.ab_summary(store, found)
    shown = report.ab_shown(rows).rows
    short = [
        {**row, "floor": "+-" + output.cell_text(row["noise_floor"]) if row["noise_floor"] is not None else "none"}
        for row in shown
    ]
    notes = [
        f"{row['op']} {row['dtype'] or '(default dtype)'} {row['shape']}: "
        + "; ".join(
            filter(
                None,
                (
                    row["note"],
                    f"noise floor: {row['floor_note']}" if row["noise_floor"] is None and row["floor_note"] else None,
                ),
            )
        )
        for row in shown
        if row["note"] or (row["noise_floor"] is None and row["floor_note"])
    ]
    plotted = forest.forest_rows(store, found["name"])
    sections = [
        Section("Summary", lines=report.ab_summary_lines(summary)),
        Section(
            "Findings",
            lines=[
                "effect: geometric mean of before / after over the rounds (above 1: faster "
                "with the switch); q: t-test on the rounds' log ratios, Benjamini-Hochberg "
                "over the root's tested ranges."
            ],
            table=Table(short, report.AB_COLUMNS[:-1], report.AB_HEADERS[:-1]) if rows else None,
            empty="No A/B ranges: nothing paired yet.",
            notes=notes,
        ),
        Section(
            "Each shape's effect",
            lines=[
                "The effect with its 95% interval, coloured by finding; grey band: "
                "no change (within min_effect); dashed: 1."
            ],
            picture=bool(plotted),
            empty="Nothing to plot: no range has a paired round.",
        ),
        Section("Settings", lines=_settings_lines(store, found)),
        Section("Provenance", lines=[_ran_on(store, found)], table=Table(*_provenance_table(store, found))),
        _problem_section(store, found),
    ]
    svg = forest.forest_svg(plotted, found["name"]) if plotted else None
    return Document(f"A/B report: {found['name']}", sections, svg)


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


def markdown(document: Document, picture_name: Optional[str] = None) -> str:
    """The document as Markdown (GitHub's tables); the picture is linked as
    picture_name, a file the caller writes beside it."""
    parts = [f"# {document.title}", ""]
    for section in document.sections:
        parts += [f"## {section.title}", ""]
        parts += [line + "  " for line in section.lines] + ([""] if section.lines else [])
        if section.table is not None:
            parts += [_table(section.table, "github"), ""]
        if section.notes:
            parts += [f"- {note}" for note in section.notes] + [""]
        if section.picture and document.picture_svg and picture_name:
            parts += [f"![{section.title}]({picture_name})", ""]
        if section.table is None and not (section.picture and document.picture_svg) and section.empty:
            parts += [section.empty, ""]
    return "\n".join(parts).rstrip("\n") + "\n"


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
        if section.table is not None:
            body.append(_table(section.table, "html"))
        if section.notes:
            body.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in section.notes) + "</ul>")
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


def write(store, root, fmt: str = "md", path=None, picture_dir=None) -> dict:
    """Write a root's report: to path (None: return the text for stdout).
    Markdown's picture goes beside path as <stem>.svg (without a path: into
    picture_dir, default the current directory, as <root>.svg); HTML has it
    inline. Returns {"text": what to print or None, "written": [paths]}."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}: one of {', '.join(FORMATS)}")
    document = build(store, root)
    written = []
    if fmt == "html":
        text = html_document(document)
    else:
        picture = None
        if document.picture_svg:
            picture = (
                Path(path).with_suffix(".svg")
                if path is not None
                else Path(picture_dir or ".") / f"{judge._root(store, root)['name']}.svg"
            )
            written.append(files.replace_atomic(picture, document.picture_svg.encode("utf-8")))
        text = markdown(document, picture.name if picture is not None else None)
    if path is None:
        return {"text": text, "written": written}
    written.insert(0, files.replace_atomic(Path(path), text.encode("utf-8")))
    return {"text": None, "written": written}
