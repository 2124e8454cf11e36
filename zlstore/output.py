"""What commands print: text for people, and the formats scripts read, as
sqlite-utils prints them (--json, --nl, --csv, --tsv, -t/--table with
--fmt). The options are cli.output_options; the rendering is here, once.
Tables are tabulate's."""

import contextlib
import contextvars
import csv
import io
import json
import math
import os
import re
import shlex
import shutil
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Union


# The database a printed command ("next: zlstore ab ROOT") names, set by the
# command line for the command it runs (hints_for). None: the default
# database, which needs no --db.
_HINT_DB: contextvars.ContextVar = contextvars.ContextVar("zlstore_hint_db", default=None)


@contextlib.contextmanager
def hints_for(db: Optional[str]) -> Iterator[None]:
    """Commands printed meanwhile name db with --db (None: the default one)."""
    token = _HINT_DB.set(db)
    try:
        yield
    finally:
        _HINT_DB.reset(token)


def command(*words: Any) -> str:
    """A zlstore command line printed for a person to run next: each word
    shell-quoted, and --db FILE where this command runs against a database
    other than the default, so that it works pasted as printed."""
    db = _HINT_DB.get()
    words = ("zlstore",) + tuple(str(w) for w in words) + (("--db", db) if db else ())
    return " ".join(shlex.quote(w) for w in words)


# -- the width of text for people ---------------------------------------------

# The width human text is fitted to while a command renders it (render sets
# it from terminal_width); None: no limit (a pipe or a file, no $COLUMNS).
_WIDTH: contextvars.ContextVar = contextvars.ContextVar("zlstore_width", default=None)
# The headers of the columns each table left out to fit _WIDTH, in order.
_LEFT_OUT: contextvars.ContextVar = contextvars.ContextVar("zlstore_left_out", default=None)


def terminal_width() -> Optional[int]:
    """The width text for people is fitted to: $COLUMNS where it is set
    (also through a pipe: COLUMNS=100 zlstore ab | less), else the
    terminal's; None where stdout is no terminal (a pipe, a file: lines stay
    whole, as a script reads them)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((100, 24)).columns
    return None


def fitted_lines(text: str, width: Optional[int]) -> str:
    """Every line of text within width: a longer one (a heading, a summary,
    a range line) wrapped at spaces, continued two columns further in."""
    if width is None:
        return text
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines.extend(
            textwrap.wrap(
                line.lstrip(),
                width=max(20, width),
                initial_indent=indent,
                subsequent_indent=indent + "  ",
                break_on_hyphens=False,
                break_long_words=True,
            )
        )
    return "\n".join(lines)


def left_out_line(headers: Sequence[str], width: int) -> str:
    """What a table fitted to width left out, and what shows it."""
    return (
        f"(left out to fit {width} columns: {', '.join(headers)}; "
        "-t prints every column, -c NAME the ones named, or widen the terminal)"
    )


@contextlib.contextmanager
def fitted_to(width: Optional[int]) -> Iterator[List[str]]:
    """Tables rendered meanwhile fit width (table drops columns); yields the
    headers they left out."""
    left_out: List[str] = []
    tokens = (_WIDTH.set(width), _LEFT_OUT.set(left_out))
    try:
        yield left_out
    finally:
        _LEFT_OUT.reset(tokens[1])
        _WIDTH.reset(tokens[0])


# -- text for a terminal ------------------------------------------------------

# Control characters (C0 but newline and tab, DEL, C1): in a directory name
# or a merged store's names they would reach a terminal as control
# sequences (ESC [ ... moves the cursor, recolours, retitles the window).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def for_terminal(text: str) -> str:
    """Text for people, every control character but newline and tab shown
    as an escape (ESC as \\x1b). What scripts read (--json, --nl, --csv,
    --tsv) keeps the exact values."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# -- numbers for people ------------------------------------------------------

SIGNIFICANT = 4


def cell_text(value: Any, digits: int = SIGNIFICANT) -> str:
    """A value as a table shows it. A number keeps its meaning: its whole
    integer part and at least one decimal (an elapsed 1710.2 s is 1710.2,
    not 1710 or 1.71e+03), else `digits` significant digits (a ratio of
    1.10345 is 1.103, a q of 0.03914 stays 0.03914, one of 0.0000123 is
    1.23e-05, never 0); trailing zeros are dropped (121.0 is 121)."""
    if value is None:
        return ""
    if isinstance(value, (Mapping, list, tuple)):
        return _dumps(value)
    if isinstance(value, bool) or not isinstance(value, float):
        return " ".join(str(value).split("\n"))
    if not math.isfinite(value):
        return str(value)
    if abs(value) < 1:
        return f"{value:.{digits}g}"
    decimals = max(1, digits - len(str(int(abs(value)))))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- formats -----------------------------------------------------------------

KINDS = ("human", "json", "nl", "csv", "tsv", "table")


def table_formats() -> tuple:
    """tabulate's layouts (--fmt). tabulate is imported where a table is
    made: with what it imports (importlib.metadata, email, html) it was
    20-25 ms of every command's start, an ingest's included."""
    import tabulate  # noqa: PLC0415 (lazy: the docstring says why)

    return tuple(tabulate.tabulate_formats)


@dataclass(frozen=True)
class Format:
    """How a command prints: human (its own text, the default), json, nl,
    csv, tsv, or table (tabulate's, in tablefmt). columns: only these
    columns of the rows (-c/--column, as sqlite-utils); headers: False
    leaves out the header line of csv, tsv and tables (--no-headers);
    arrays: JSON rows as arrays of values, not objects (--arrays)."""

    kind: str = "human"
    tablefmt: str = "simple"
    columns: tuple = ()
    headers: bool = True
    arrays: bool = False


HUMAN = Format()


class JSONText(str):
    """JSON already written, in json_text's layout (by SQLite: a campaign's
    ranges), printed as it is."""


Rows = Sequence[Mapping[str, Any]]
Lazy = Union[Any, Callable[[], Any]]


def _value(lazy: Lazy) -> Any:
    return lazy() if callable(lazy) else lazy


class UnknownColumn(LookupError):
    """-c names a column the rows do not have."""


@dataclass(frozen=True)
class Summarized:
    """What --json of a command with a summary prints, in one shape for
    every such command (screen, ab, rescore, noise): {"summary": {...},
    "rows": [...]}; the summary is what the human text's closing lines
    say, the rows every column. rows may be JSONText (ab's, by SQLite)."""

    summary: Mapping[str, Any]
    rows: Any


@dataclass(frozen=True)
class Shown:
    """What -t/--fmt print where a command's human text is a table: the
    rows with the human table's derived cells, its columns and headers."""

    rows: Any
    columns: Sequence[str]
    headers: Optional[Sequence[str]] = None


def render(
    fmt: Format,
    rows: Lazy,
    columns: Optional[Sequence[str]] = None,
    human: Optional[Callable[[], str]] = None,
    document: Lazy = None,
    shown: Optional[Callable[[], Shown]] = None,
    escape: bool = True,
) -> str:
    """render_exact's text, where it is for people (the default text and -t
    tables) escaped for a terminal (for_terminal) unless not escape."""
    if fmt.kind != "human":
        text = render_exact(fmt, rows, columns, human, document, shown)
        return for_terminal(text) if escape and fmt.kind == "table" else text
    width = terminal_width()
    with fitted_to(width) as left_out:  # the text for people fits the terminal: tables drop columns
        text = render_exact(fmt, rows, columns, human, document, shown)
    if left_out:
        text += "\n" + left_out_line(list(dict.fromkeys(left_out)), width or 0)
    return fitted_lines(for_terminal(text) if escape else text, width)


def render_exact(
    fmt: Format,
    rows: Lazy,
    columns: Optional[Sequence[str]] = None,
    human: Optional[Callable[[], str]] = None,
    document: Lazy = None,
    shown: Optional[Callable[[], Shown]] = None,
) -> str:
    """The text a command prints in fmt. rows: what --nl, --csv, --tsv and
    -t print (each may be a function, called only when needed); columns:
    theirs (default: the first row's keys); human: the default text
    (default: the rows as a table); document: what --json prints where it
    says more than the rows (totals, a plan, a refusal; a Summarized);
    shown: what -t prints where it is the human table's columns, not every
    column (-c picks from every column)."""
    if fmt.kind in ("json", "nl"):
        document, summary = _value(document), None
        if isinstance(document, Summarized):
            summary, rows = document.summary, document.rows
        elif isinstance(document, JSONText):
            rows = document
        elif document is not None and fmt.kind == "json":
            return json_text(document)
        rows = _value(rows)
        if isinstance(rows, JSONText) and (fmt.columns or fmt.arrays):
            rows = json.loads(rows)
        if not isinstance(rows, JSONText):
            rows = _picked(rows, columns, fmt)
        if fmt.kind == "nl":
            return json_lines(rows) if isinstance(rows, JSONText) else "\n".join(_dumps(row) for row in rows)
        return summarized_json(summary, rows) if summary is not None else json_text(rows)
    if fmt.kind == "human" and human is not None:
        return human()
    headers = None
    if fmt.kind == "table" and shown is not None and not fmt.columns:
        picked = shown()
        rows, columns, headers = _value(picked.rows), list(picked.columns), picked.headers
    else:
        rows = _value(rows)
        columns = list(fmt.columns or columns or (rows[0].keys() if rows else []))
        _check_columns(rows, columns, fmt)
    if fmt.kind in ("csv", "tsv"):
        text = to_delimited(rows, columns, "\t" if fmt.kind == "tsv" else ",", header=fmt.headers)
        return text.rstrip("\n")
    return table(
        rows,
        columns,
        headers=headers,
        tablefmt=fmt.tablefmt if fmt.kind == "table" else "simple",
        show_headers=fmt.headers,
    )


def _check_columns(rows: Rows, columns: Sequence[str], fmt: Format):
    if fmt.columns and rows:
        unknown = [c for c in fmt.columns if c not in rows[0]]
        if unknown:
            raise UnknownColumn(f"no such column: {', '.join(unknown)} (the rows have: {', '.join(rows[0])})")


def _picked(rows: Rows, columns: Optional[Sequence[str]], fmt: Format) -> list:
    """The rows with only -c's columns (all where none is named), as arrays with --arrays."""
    rows = list(rows)
    _check_columns(rows, fmt.columns, fmt)
    names = list(fmt.columns or columns or (rows[0].keys() if rows else []))
    if fmt.columns or (columns and fmt.arrays):
        rows = [{c: row.get(c) for c in names} for row in rows]
    if fmt.arrays:
        return [list(row.values()) for row in rows]
    return rows


def summarized_json(summary: Mapping[str, Any], rows: Any) -> str:
    """Summarized as --json prints it: the summary on its first line, then
    the rows one a line as json_text lays them out."""
    body = str(rows) if isinstance(rows, JSONText) else ("[" + ",\n ".join(_dumps(row) for row in rows) + "]")
    return '{"summary": ' + _dumps(summary) + ',\n "rows": ' + body + "}"


def _plain(value: Any) -> Any:
    """A value JSON can say: NaN and infinities are null (JSON has no word for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dumps(value: Any, indent: Optional[int] = None) -> str:
    return json.dumps(_plain(value), indent=indent, default=str, ensure_ascii=False)


def json_text(value: Any) -> str:
    """JSON as sqlite-utils query prints it: an array of rows one a line,
    '[{"a": 1},' then ' {"a": 2}]' ('[]' for none); any other value (a
    summary, a plan) indented by two."""
    if isinstance(value, JSONText):
        return str(value)
    if isinstance(value, Summarized):
        return summarized_json(value.summary, value.rows)
    if isinstance(value, (list, tuple)) and value and all(isinstance(row, (Mapping, list)) for row in value):
        return "[" + ",\n ".join(_dumps(row) for row in value) + "]"
    if isinstance(value, (list, tuple)) and not value:
        return "[]"
    return _dumps(value, indent=2)


def json_lines(text: str) -> str:
    """An array in json_text's layout as newline-delimited JSON: each row is
    one line there already (a newline inside a JSON string is escaped)."""
    return text[1:-1].replace(",\n ", "\n")


def to_delimited(rows: Rows, columns: Sequence[str], delimiter: str = ",", header: bool = True) -> str:
    """A header (unless header is False) and the rows, CSV (or TSV with a
    tab); empty for NULL, JSON for a nested value, full precision for a number."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    if header:
        writer.writerow(columns)
    for row in rows:
        writer.writerow([_delimited_value(row.get(c)) for c in columns])
    return buffer.getvalue()


def _delimited_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (Mapping, list, tuple)):
        return _dumps(value)
    return value


def table(
    rows: Rows,
    columns: Optional[Sequence[str]] = None,
    headers: Optional[Sequence[str]] = None,
    tablefmt: str = "simple",
    align: Optional[Sequence[str]] = None,
    show_headers: bool = True,
    keep: Sequence[str] = (),
    width: Optional[int] = None,
) -> str:
    """The rows as tabulate's table: numbers written by cell_text and
    right-aligned (or as align says, per column); tabulate's "simple"
    layout (two spaces between columns, a rule under the header) without
    trailing blanks; no header where show_headers is False. Given a width,
    or while text is fitted to one (fitted_to: a command's text for a
    terminal), a table wider than it leaves out columns, the rightmost first, never those in
    keep (default: the first), then shortens the longest cells (ending in ~), and
    the columns left out are named under the command's text."""
    columns = list(columns or (rows[0].keys() if rows else []))
    headers = list(headers or columns)
    align = list(
        align
        or [
            "right" if rows and all(is_number(row.get(c)) or row.get(c) is None for row in rows) else "left"
            for c in columns
        ]
    )
    body = [[cell_text(row.get(c)) for c in columns] for row in rows]
    width = width if width is not None else _WIDTH.get()
    if width is not None and tablefmt == "simple" and columns:
        kept = _fit(
            body,
            headers if show_headers else [""] * len(headers),
            width,
            {columns.index(c) for c in keep if c in columns} or {0},
        )
        left_out = _LEFT_OUT.get()
        if left_out is not None:
            left_out.extend(h for i, h in enumerate(headers) if i not in kept)
        body = [[row[i] for i in kept] for row in body]
        headers, align = [headers[i] for i in kept], [align[i] for i in kept]
    import tabulate  # noqa: PLC0415 (table_formats says why here)

    padding, tabulate.MIN_PADDING = tabulate.MIN_PADDING, 0  # no wider than its widest cell (a module
    try:  # setting: tabulate takes no argument for it)
        text = tabulate.tabulate(
            body,
            headers=headers if show_headers else (),
            tablefmt=tablefmt,
            disable_numparse=True,
            colalign=align or None,
        )
    finally:
        tabulate.MIN_PADDING = padding
    if tablefmt in ("simple", "plain"):
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def _table_width(body: Sequence[Sequence[str]], headers: Sequence[str], kept: Sequence[int]) -> int:
    """The width of the simple table of these columns: the widest cell of each, two spaces between."""
    return sum(max([len(headers[i])] + [len(row[i]) for row in body]) for i in kept) + 2 * (len(kept) - 1)


def _fit(body: List[List[str]], headers: Sequence[str], width: int, keep: set) -> List[int]:
    """The columns (by position) of a table that fits width: the rightmost
    not in keep left out first; then, if it is still too wide, the longest
    cells shortened in place (to no less than 8 characters, ending in ~)."""
    kept = list(range(len(headers)))
    for i in reversed(range(len(headers))):
        if _table_width(body, headers, kept) <= width:
            break
        if i not in keep:
            kept.remove(i)
    while _table_width(body, headers, kept) > width:
        longest = {i: max((len(row[i]) for row in body), default=0) for i in kept}
        shorter = [i for i in kept if longest[i] > max(8, len(headers[i]))]
        if not shorter:
            break  # nothing left to shorten: fitted_lines wraps what remains
        widest = max(shorter, key=longest.__getitem__)
        cut = max(8, len(headers[widest]), longest[widest] - (_table_width(body, headers, kept) - width))
        for row in body:
            if len(row[widest]) > cut:
                row[widest] = row[widest][: cut - 1] + "~"
    return kept


def to_json(value: Any) -> str:
    """What --json prints of value (json_text)."""
    return json_text(value)
