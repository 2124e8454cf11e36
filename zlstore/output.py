"""Plain-text tables and machine formats for command output: a table for
people, JSON and CSV for scripts. No dependency beyond the standard library."""

import contextlib
import contextvars
import csv
import io
import json
import math
import shlex
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Sequence

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


def cell_text(value: Any, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.{digits}g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]], columns: Optional[Sequence[str]] = None,
          headers: Optional[Sequence[str]] = None) -> str:
    """A fixed-width table; numbers right-aligned."""
    columns = list(columns or (rows[0].keys() if rows else []))
    headers = list(headers or columns)
    text = [[cell_text(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in text]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(row.get(c), (int, float)) or row.get(c) is None for row in rows) and rows
        for c in columns
    ]

    def fmt(values):
        return "  ".join(
            (v.rjust(w) if num else v.ljust(w)) for v, w, num in zip(values, widths, numeric)
        ).rstrip()

    lines = [fmt(headers), "  ".join("-" * w for w in widths)]
    lines.extend(fmt(r) for r in text)
    return "\n".join(lines)


def to_json(rows: Any) -> str:
    return json.dumps(rows, indent=2, default=str)


def to_delimited(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], delimiter: str = ",") -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return buffer.getvalue()
