"""The SQL macros, expanded from the one definition of each name, rule and threshold.

schema.sql's text (schema_source), render_schema, which expands its
"[[...]]" macros, and statement, the registry of every other SQL text
built from them (STATEMENTS).

Every SQL text that names a verdict, reason, finding, the round key, the
caliber or a threshold goes through render_schema: schema.sql (schema_parts)
and, registered by name through statement, derive.py's steps (pairing.py,
ranges.py, floors.py), the few of other modules and the canned queries.
docs/schema.rendered.sql and docs/queries.rendered.sql are all of them
rendered (docs/rendered_sql.py writes them), for a reader who wants the SQL
that runs; docs/development.md says why the macros stay.
This is the one part of the store's plumbing that imports zlstore's
definitions (names, caliber, provenance, floors, stats, ttgir)."""

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

from .. import caliber, names, provenance, stats
from . import floors
from ..read import ttgir
from ..errors import SchemaError


def schema_source() -> str:
    """The text of schema.sql: shipped inside the wheel, or the checkout's top-level file."""
    packaged = resources.files("zlstore").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / "schema.sql").read_text(encoding="utf-8")


_MACRO = re.compile(
    r"\[\[(current_side|side_cells|caliber|environment|round|range|verdicts|verdict|reasons|reason|findings|finding|case|rules|timeout_rcs|strictest_rule"
    r"|min_rounds|until_decided|setting|clears_floor|machine|fact)(?: ([^:\]]*?))?(?:: (.*?))?\]\]"
)


def _sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _fill(template: str, item, position: int) -> str:
    """TEMPLATE with {position} and each of item's fields as SQL literals."""
    text = template.replace("{position}", str(position))
    for name, value in item._asdict().items():
        text = text.replace("{" + name + "}", _sql_literal(value))
    return text


class RuleRow(NamedTuple):
    """A fingerprint rule as the schema's rules macro sees it."""

    name: str
    description: str
    ignores: Optional[str]  # None where the rule ignores nothing (SQL NULL)
    hint: Optional[str]  # what a verdict under this rule says when the strictest rule sees no change


def _rule_rows() -> List[RuleRow]:
    rows = []
    for rule in ttgir.RULES.values():
        beyond = ttgir.ignored_beyond(rule, ttgir.STRICTEST_RULE)
        words = ", ".join(beyond[:-1]) + " and " + beyond[-1] if len(beyond) > 1 else "".join(beyond)
        hint = (
            f"differs only in {words}: {names.BY_NAME['NO_IR_DIFF'].name} under {ttgir.STRICTEST_RULE}"
            if beyond
            else None
        )
        rows.append(RuleRow(rule.name, rule.description, ", ".join(rule.ignores) or None, hint))
    return rows


# A column a condition reads: a lower-case name (SQL's words are upper case).
_COLUMN = re.compile(r"\b[a-z_][a-z_0-9]*\b")


def _case(kinds, first: Optional[str], inputs: names.Inputs, indent: str) -> str:
    """The CASE that decides one of kinds (names.VERDICTS, REASONS or
    FINDINGS): each one's condition in their order, the first that applies
    wins; the one without a condition takes the rest (ELSE). first: a
    condition under which the CASE is NULL, tried before them. Each reads
    only the columns of its row of inputs (a CTE of that name the SQL
    builds): any other name, a join alias among them, is an error."""
    conditions = [first] + [kind.condition for kind in kinds]
    unknown = sorted({c for text in conditions if text for c in _COLUMN.findall(text)} - set(inputs.columns()))
    if unknown:
        raise SchemaError(f"a condition reads {', '.join(unknown)}, not a column of {inputs.cte} (names.py)")
    lines = [f"WHEN {first} THEN NULL"] if first else []
    lines += [f"WHEN {kind.condition} THEN {_sql_literal(kind.name)}" for kind in kinds if kind.condition]
    lines += [f"ELSE {_sql_literal(kind.name)}" for kind in kinds if kind.condition is None]
    return "CASE\n" + "".join(f"{indent}    {line}\n" for line in lines) + f"{indent}END"


# What each "[[kind: TEMPLATE]]" macro repeats TEMPLATE over, the names a
# "[[kind NAME]]" macro may quote, and the kinds "[[case KINDS]]" decides.
_ITEMS = {
    "verdicts": lambda: names.VERDICTS,
    "reasons": lambda: names.REASONS,
    "findings": lambda: names.FINDINGS,
    "rules": _rule_rows,
}
_NAMES = {
    "verdict": lambda: names.VERDICT_NAMES,
    "reason": lambda: names.REASON_NAMES,
    "finding": lambda: names.FINDING_NAMES,
    "setting": lambda: tuple(names.SETTINGS),
}
_CASES = {
    "verdicts": (names.VERDICTS, None, names.VERDICT_INPUTS),
    "reasons": (names.REASONS, names.PAIRED, names.REASON_INPUTS),
    "findings": (names.FINDINGS, None, names.FINDING_INPUTS),
}
# The columns a "[[kind SEP: TEMPLATE]]" macro repeats TEMPLATE over: each as
# {placeholder: text}.
_COLUMNS = {
    "caliber": lambda: [{"{f}": name} for name in caliber.NAMES],
    "environment": lambda: [{"{f}": name} for name in provenance.NAMES],
    "round": lambda: [{"{k}": c.name, "{c}": c.cells, "{is}": c.same, "{type}": c.type} for c in names.ROUND_KEY],
    "range": lambda: [{"{c}": name} for name in names.RANGE_COLUMNS],
}


# "The current cell of a side", defined once: of the stored cells of a side
# (SIDE: 'before', 'after' or an expression giving one) that no later run
# of their op superseded (a resumed campaign's earlier, interrupted run),
# the latest (max id) stands for the side, and claims counts them (more
# than one: names.DUPLICATE). "[[side_cells SIDE KEY: ALIAS]]" is the FROM
# and WHERE of those cells (cells c), the side whose key is ALIAS's: KEY
# "round", the round key (names.ROUND_KEY, ALIAS holding its columns by
# their names; "?": bound as parameters), or "op", a screening pair's
# root, op and dtype.
# "[[current_side SIDE KEY: ALIAS]]" is the SELECT of the one row
# (cell_id, claims) they give.
_SIDE_CELLS = "cells c\nWHERE {key} AND c.side = {side} AND c.superseded_at IS NULL"
_CURRENT_SIDE = "SELECT max(c.id) AS cell_id, count(*) AS claims FROM " + _SIDE_CELLS
_SIDE_KEYS = {
    "round": lambda alias: " AND ".join(f"c.{c.cells} {c.same} {_of(alias, c.name)}" for c in names.ROUND_KEY),
    "op": lambda alias: (
        f"c.root_id = {_of(alias, 'root_id')} AND c.op IS {_of(alias, 'op')} AND c.dtype IS {_of(alias, 'dtype')}"
    ),
}


def _of(alias: str, column: str) -> str:
    """ALIAS's column, or a parameter where ALIAS is "?" (the key's values
    bound in their order, then the side's)."""
    return "?" if alias == "?" else f"{alias}.{column}"


def _side(kind: str, arg: Optional[str], alias: Optional[str]) -> str:
    side, _, key = (arg or "").strip().rpartition(" ")
    if key not in _SIDE_KEYS or not side or not alias:
        raise SchemaError(
            f"[[{kind} {arg}: {alias}]]: write [[{kind} SIDE KEY: ALIAS]], KEY one of {', '.join(_SIDE_KEYS)}"
        )
    text = _CURRENT_SIDE if kind == "current_side" else _SIDE_CELLS
    return text.format(key=_SIDE_KEYS[key](alias.strip()), side=side.strip())


def _fact(arg: Optional[str]) -> str:
    """ "[[fact NAME SIDE]]" or "[[fact NAME]]": names.FACTS[NAME], of SIDE."""
    name, _, side = (arg or "").strip().partition(" ")
    if name not in names.FACTS:
        raise SchemaError(f"SQL names unknown fact {name!r}; known: {', '.join(names.FACTS)}")
    try:
        return names.fact(name, side or None)
    except ValueError as error:
        raise SchemaError(f"[[fact {arg}]]: {error}") from None


# The macros that stand for one value: "[[timeout_rcs]]" and the like.
_VALUES = {
    "timeout_rcs": lambda: ", ".join(str(rc) for rc in names.TIMEOUT_RCS),
    "strictest_rule": lambda: _sql_literal(ttgir.STRICTEST_RULE),
    "min_rounds": lambda: str(stats.MIN_ROUNDS),
    "until_decided": lambda: _sql_literal(names.STOPPINGS[1]),
    "clears_floor": lambda: floors.CLEARS,
    # an environments row e's machine (provenance.MACHINE), NULL where its GPU is unknown
    "machine": lambda: (
        f"CASE WHEN e.{provenance.MACHINE[0]} IS NOT NULL "
        f"THEN json_array({', '.join('e.' + name for name in provenance.MACHINE)}) END"
    ),
}


def _filled(template: str, columns: dict) -> str:
    for placeholder, text in columns.items():
        template = template.replace(placeholder, text)
    return template


def render_schema(text: str) -> str:
    """Expand the macros that keep caliber fields, the round key, verdict,
    reason and finding names and conditions, rules and thresholds defined
    once (the list is at the top of schema.sql). Every SQL text that names
    them goes through here: schema.sql, derive.py's steps, the canned queries."""

    def expand(match):
        kind, arg, template = match.group(1), match.group(2), match.group(3)
        if kind in _VALUES:
            return _VALUES[kind]()
        if kind == "fact":
            return _fact(arg)
        if kind in ("current_side", "side_cells"):
            return _side(kind, arg, template)
        if kind in _COLUMNS:
            sep = " " + arg.strip() + " " if arg else ", "
            return sep.join(_filled(template, columns) for columns in _COLUMNS[kind]())
        if kind == "case":
            if arg not in _CASES:
                raise SchemaError(f"[[case {arg}]]: a case decides one of {', '.join(_CASES)}")
            line = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
            return _case(*_CASES[arg], indent=line[: len(line) - len(line.lstrip())])
        if kind in _ITEMS:
            sep = " " + arg.strip() + " " if arg else ", "
            return sep.join(_fill(template, item, n) for n, item in enumerate(_ITEMS[kind](), 1))
        known = _NAMES[kind]()
        if arg not in known:
            raise SchemaError(f"SQL names unknown {kind} {arg!r}; known: {', '.join(known)}")
        return _sql_literal(names.SETTINGS[arg]) if kind == "setting" else _sql_literal(arg)

    return _MACRO.sub(expand, text)


# Every SQL text built from the macros, but schema.sql's (schema_parts),
# by name: docs/rendered_sql.py writes each out after schema.sql, and
# tests/test_one_home.py fails where a module renders SQL that is not here
# (a call of render_schema outside this module, or of statement inside a
# function, which an import would not register).
STATEMENTS: Dict[str, str] = {}


def statement(name: str, template: str) -> str:
    """TEMPLATE rendered (render_schema), registered as NAME ("module.what")
    in STATEMENTS. Call it at a module's top level, so that importing the
    module registers what it runs; a name is one text."""
    rendered = render_schema(template)
    if STATEMENTS.setdefault(name, rendered) != rendered:
        raise SchemaError(f"two SQL texts are registered as {name!r}")
    return rendered


def schema_parts() -> Dict[str, str]:
    """The rendered schema split at its section markers: tables, triggers
    and views."""
    text = render_schema(schema_source())
    _, _, rest = text.partition("\n-- @tables\n")
    tables, _, rest = rest.partition("\n-- @triggers\n")
    triggers, _, views = rest.partition("\n-- @views\n")
    return {"tables": tables, "triggers": triggers, "views": views, "hash": hashlib.sha256(text.encode()).hexdigest()}
