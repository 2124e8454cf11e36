"""What a CREATE TABLE or CREATE INDEX statement asks SQLite to evaluate,
read from its text alone: its CHECK constraints, DEFAULT values, generated
columns, COLLATE sequences, an index's expressions and WHERE clause.

Merge compares a source's with this release's (mergesource.source_expressions)
before anything of the source's could be evaluated: SQLite runs a CHECK
in quick_check and on every write, a generated column on every read, a
collation in every comparison. Reading them from the text needs no
SQLite: a small tokenizer of SQL (strings, quoted names, comments,
parentheses) is enough to find each one whole."""

import re
from typing import Iterator, List, Optional, Tuple

_TOKEN = re.compile(
    r"""\s+|--[^\n]*|/\*.*?(?:\*/|\Z)
      |'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`(?:[^`]|``)*`?|\[[^\]]*\]?
      |[A-Za-z_][A-Za-z0-9_$]*|\d[\w.]*|.""",
    re.S | re.X,
)


def tokens(sql: str) -> List[Tuple[str, int, int]]:
    """The tokens of sql, without whitespace and comments: (the token, its
    words upper-cased as SQL's keywords and names are case-blind; strings
    and quoted names kept), and where it starts and ends in sql."""
    found = []
    for match in _TOKEN.finditer(sql):
        token = match.group()
        if token.isspace() or token.startswith("--") or token.startswith("/*"):
            continue
        found.append((token.upper() if token[0].isalpha() or token[0] == "_" else token, match.start(), match.end()))
    return found


def _group(toks: List[str], at: int) -> int:
    """The index after the parenthesized group starting at toks[at] ('(')."""
    depth, end = 0, at
    while end < len(toks):
        depth += {"(": 1, ")": -1}.get(toks[end], 0)
        end += 1
        if depth == 0:
            break
    return end


_TABLE_CONSTRAINTS = ("CONSTRAINT", "CHECK", "PRIMARY", "UNIQUE", "FOREIGN")


def _unquoted(name: str) -> str:
    if name[:1] in ('"', "`", "[") and len(name) > 1:
        return name[1:-1].replace(name[0] * 2, name[0]) if name[0] != "[" else name[1:-1]
    return name


def expressions(sql: str) -> Iterator[Tuple[Optional[str], str, str]]:
    """Each clause of a CREATE TABLE or CREATE INDEX that SQLite evaluates:
    (the column it is part of, None for a table constraint or an index; the
    clause spelled one way whatever the spacing, case and comments, for
    comparing; its text as written, for a message). The clauses:
    "CHECK (kind IN ('screen'))", "DEFAULT 0", "COLLATE NOCASE", "AS (x + 1)"
    (a generated column), "WHERE closed_by IS NULL" (a partial index), and
    an index's columns where one of them is an expression ("ON (lower(x))")."""
    sql = sql or ""
    found = tokens(sql)
    toks = [t for t, _, _ in found]

    def clause(start: int, end: int, head=()):
        written = " ".join(list(head) + [sql[found[start][1] : found[end - 1][2]]])
        return (None if index else column), " ".join(list(head) + toks[start:end]), written

    index = len(toks) > 1 and toks[0] == "CREATE" and "INDEX" in toks[1:3]
    i, depth, starts, column = 0, 0, False, None
    while i < len(toks):
        word = toks[i]
        if word in ("(", ","):  # a table's column list: each definition starts after one
            depth += word == "("
            starts = depth == 1
            i += 1
            continue
        if word == ")":
            depth -= 1
            i += 1
            continue
        if starts:
            written = sql[found[i][1] : found[i][2]]
            column, starts = (None if word in _TABLE_CONSTRAINTS else _unquoted(written)), False
        if index and word == "ON" and i + 2 < len(toks) and toks[i + 2] == "(":
            end = _group(toks, i + 2)
            group = toks[i + 3 : end - 1]
            if "(" in group or any(t[0] in "'0123456789" for t in group):
                yield clause(i + 2, end, ("ON",))
            i += 1  # a COLLATE inside is a clause of its own
            continue
        if index and word == "WHERE":
            yield clause(i, len(toks))
            return
        if word in ("CHECK", "AS") and i + 1 < len(toks) and toks[i + 1] == "(":
            end = _group(toks, i + 1)
            yield clause(i, end)
            i = end
            continue
        if word == "DEFAULT" and i + 1 < len(toks):
            end = _group(toks, i + 1) if toks[i + 1] == "(" else i + 2 + (toks[i + 1] in ("+", "-"))
            yield clause(i, min(end, len(toks)))
            i = end
            continue
        if word == "COLLATE" and i + 1 < len(toks):
            yield clause(i, i + 2)
            i += 2
            continue
        i += 1
