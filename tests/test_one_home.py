"""Each rule is written in one place and derived everywhere else: these
tests read the package's source (through Python's ast: its string
constants, names, calls and imports, so that a formatter's layout changes
nothing) and schema.sql, and fail where a second copy of a rule appears (docs/development.md: "Layout of this repository", which file holds each rule). Each
guard is shown to catch the copy it is about, as the code was written
before (release e4e9785), so that none of them can pass by matching
nothing."""

import ast
import functools
import re
from pathlib import Path

import pytest

from zlstore import db, names, stats
from zlstore.store import floors, macros

PACKAGE = Path(db.__file__).resolve().parent
SCHEMA = PACKAGE.parent / "schema.sql"


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "pytest_plugins" not in p.parts)


def sql_code(text: str) -> str:
    """schema.sql without its comments."""
    return re.sub(r"--[^\n]*", "", text)


def schema_statements():
    """schema.sql's statements (comments removed), but for table and index
    definitions: a table declares its columns, and only a migration changes it."""
    return [
        s
        for s in db.split_statements(sql_code(SCHEMA.read_text()))
        if not re.match(r"CREATE (TABLE|(UNIQUE )?INDEX)", s)
    ]


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all of these tests (walking
    every module's tree again for each question was most of their time)."""
    return ast.parse(path.read_text())


def strings(path: Path, skip=()):
    """Every string constant of a module (f-strings' literal parts too), but
    the values of the module-level names in skip."""
    return list(_strings(path, frozenset(skip)))


@functools.lru_cache(maxsize=None)
def _strings(path: Path, skip: frozenset) -> tuple:
    tree = parsed(path)
    skipped: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in skip for t in node.targets):
            skipped.update(id(n) for n in ast.walk(node.value))
    return tuple(
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skipped
    )


def texts(exempt=(), skip=()):
    """(where, text): schema.sql's statements and the package's string
    constants, but for the modules in exempt."""
    found = [("schema.sql", statement) for statement in schema_statements()]
    for path in modules():
        if path.name not in exempt:
            found += [(path.name, text) for text in strings(path, skip)]
    return found


def copies(pattern, exempt=(), skip=()):
    return sorted({where for where, text in texts(exempt, skip) if re.search(pattern, text)})


# -- verdicts, reasons and findings: names.py -----------------------------

# A hand-written CASE that decides between names, in SQL: a THEN (or ELSE)
# giving a name, quoted or through the name macro.
ALL_NAMES = names.VERDICT_NAMES + names.REASON_NAMES + names.FINDING_NAMES + tuple(names.VERDICT_ALIASES)
DECIDES = r"\b(THEN|ELSE)\s+(\[\[(verdict|reason|finding) |'(" + "|".join(map(re.escape, ALL_NAMES)) + ")')"
# A name as an SQL literal: only the macros quote names (and check them).
QUOTED = "'(" + "|".join(map(re.escape, ALL_NAMES)) + ")'"

BEFORE_VERDICTS = """
        CASE
            WHEN b.rc IN ([[timeout_rcs]]) OR a.rc IN ([[timeout_rcs]]) THEN [[verdict TRUNCATED]]
            WHEN fb.fingerprint = fa.fingerprint THEN [[verdict NO_IR_DIFF]]
        END AS verdict"""
BEFORE_REASONS = """
                WHEN r.before_caliber_id <> r.after_caliber_id THEN {reason_caliber_mismatch}
                ELSE {reason_not_counted}"""
BEFORE_RUNNER = "SELECT op FROM verdicts WHERE root_path = ? AND verdict = 'IR_CHANGED' ORDER BY op"


def test_verdicts_reasons_and_findings_are_decided_only_by_their_case_macro():
    assert re.search(DECIDES, BEFORE_VERDICTS) and re.search(QUOTED, BEFORE_RUNNER)
    assert copies(DECIDES) == []
    assert copies(QUOTED, exempt={"names.py"}) == []
    used = {
        kind: [where for where, text in texts(exempt={"names.py"}) if f"[[case {kind}]]" in text]
        for kind in ("verdicts", "reasons", "findings")
    }
    assert used == {"verdicts": ["schema.sql"], "reasons": ["pairing.py"], "findings": ["schema.sql"]}


def test_the_case_macros_decide_in_the_order_names_py_gives():
    for kind, defined in (("verdicts", names.VERDICTS), ("reasons", names.REASONS), ("findings", names.FINDINGS)):
        rendered = macros.render_schema(f"[[case {kind}]]")
        decided = re.findall(r"(?:THEN|ELSE) '([^']+)'", rendered)
        assert decided == [k.name for k in defined if k.condition] + [k.name for k in defined if not k.condition]
        for k in defined:
            assert k.condition is None or f"WHEN {k.condition} THEN '{k.name}'" in rendered
    assert macros.render_schema("[[case reasons]]").startswith(f"CASE\n    WHEN {names.PAIRED} THEN NULL")


def module_names(path: Path, kind) -> set:
    return {s for s in strings(path) if s in kind}


@pytest.mark.parametrize(
    "kind", [names.VERDICT_NAMES, names.REASON_NAMES, names.FINDING_NAMES], ids=["verdicts", "reasons", "findings"]
)
def test_no_module_but_names_py_lists_several_names_of_a_kind(kind):
    """A precedence (an if-chain, a table) names several of its kinds; a
    module may name one, checked where it is used (BY_NAME, a macro)."""
    listing = {p.name: module_names(p, kind) for p in modules() if p.name != "names.py"}
    assert {m: n for m, n in listing.items() if len(n) >= 3} == {}
    oracle = Path(__file__).parent / "generator.py"  # the suite's own, independent, by design
    assert len(module_names(oracle, names.VERDICT_NAMES)) >= 3


# -- the round key: names.ROUND_KEY ----------------------------------------

# The key spelled out: its columns listed in a row (the round tables' names,
# or the cells' op, dtype and round), or two rounds' columns compared. (A
# view that shows the round lists the columns, one a line: its interface.)
ROUND_KEY = (
    r"repeat_dir,[ \t]*(\w+\.)?cell_op|repeat_dir,[ \t]*(\w+\.)?op,[ \t]*(\w+\.)?dtype,[ \t]*(\w+\.)?round"
    r"|\.(repeat_dir|cell_op|cell_dtype)\s+(IS|=)\s|\b(IS|=)\s+\w+\.(repeat_dir|cell_op|cell_dtype)\b"
)
BEFORE_ROUND_KEYS = (
    """INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
       VALUES (NEW.root_id, NEW.card, NEW.repeat_dir, NEW.op, NEW.dtype, NEW.round)""",
    """{a}.root_id = {b}.root_id AND {a}.{op} IS {b}.cell_op AND {a}.{dtype} IS {b}.cell_dtype
       AND {a}.round IS {b}.round AND {a}.card IS {b}.card AND {a}.repeat_dir IS {b}.repeat_dir""",
    "ON s.root_id = b.root_id AND s.cell_op IS b.op AND s.cell_dtype IS b.dtype AND s.round IS b.round",
)


def test_the_round_key_is_spelled_only_by_its_macro():
    assert all(re.search(ROUND_KEY, before) for before in BEFORE_ROUND_KEYS)
    # db.py's release-2 tables are a frozen migration: history, never changed with the key
    assert copies(ROUND_KEY, exempt={"names.py"}, skip={"_RELEASE_2_TABLES"}) == []
    rendered = macros.render_schema("[[round: {k}]] / [[round AND: x.{c} {is} y.{k}]]")
    assert rendered.split(" / ")[0] == ", ".join(c.name for c in names.ROUND_KEY)
    assert all(f"x.{c.cells} {c.same} y.{c.name}" in rendered for c in names.ROUND_KEY)


def test_the_triggers_mark_rounds_by_the_round_key():
    triggers = macros.schema_parts()["triggers"]
    marked = re.findall(r"INSERT INTO ab_stale_rounds \(([^)]*)\)", triggers)
    # a cell's own round (insert, delete, edit) and its copies' (names.DUPLICATE), and the rounds of a
    # root whose kind changes and of a cell whose rows are edited
    assert len(marked) == 9 and set(marked) == {", ".join(c.name for c in names.ROUND_KEY)}


# -- the noise floor: floors.py ----------------------------------------------

FLOOR = r"abs\(\s*[\w.]*latency_before\s*/\s*[\w.]*latency_after\s*-\s*1\s*\)|\b1\s*[-+]\s*[\w.]*floor\b"
MARKS_FLOORS = r"INTO ab_stale_floors\b"
BEFORE_FLOORS = (
    "max(abs(s.latency_before / s.latency_after - 1))",
    "THEN (r.min > 1 + floors.floor OR r.max < 1 - floors.floor) END AS clears_floor",
)


def test_the_noise_floor_is_computed_judged_and_marked_stale_in_floors_py():
    assert all(re.search(FLOOR, before) for before in BEFORE_FLOORS)
    assert copies(FLOOR, exempt={"floors.py"}) == []
    assert re.search(FLOOR, floors.CLEARS) and any(re.search(FLOOR, step) for step in floors.STEPS)
    # besides floors.py, only the trigger for fingerprints deleted by hand
    marks = [where for where, text in texts(exempt={"floors.py"}) if re.search(MARKS_FLOORS, text)]
    assert marks == ["schema.sql"]


# -- one fingerprint assembly, one template language, one JSON encoder,
# -- one fork mechanism, one test of a finished cell: each in one module ---


@functools.lru_cache(maxsize=None)
def refers(path: Path) -> frozenset:
    """The names a module's code refers to (f, x.f) and its strings."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return frozenset(found)


@pytest.mark.parametrize(
    "called, home",
    [
        ("combine", "ttgir.py"),  # a fingerprint is assembled by ttgir.fingerprint alone
        ("c_make_encoder", "canonical.py"),  # canonical JSON
        ("JSONEncoder", "canonical.py"),
        ("fork", "forked.py"),  # worker processes: forked.Workers (os.fork, or "fork")
        ("get_context", "forked.py"),
        ("pipe", "forked.py"),  # work handed out through a pipe: forked.shared_out
    ],
)
def test_one_module_does_it(called, home):
    assert [p.name for p in modules() if called in refers(p)] == [home]


@functools.lru_cache(maxsize=None)
def finished_cell_tests(source: str) -> int:
    """How often source tests whether a cell finished: its cell.env's RC read
    with a fallback (`env.get("RC") or ...`), however it is laid out."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            found += sum(
                isinstance(v, ast.Call)
                and isinstance(v.func, ast.Attribute)
                and v.func.attr == "get"
                and [ast.literal_eval(a) for a in v.args[:1] if isinstance(a, ast.Constant)] == ["RC"]
                for v in node.values
            )
    return found


# A second test of a finished cell, as a formatter might lay it out.
BEFORE_FINISHED = """def finished(env):
    return (
        env.get('RC')
        or ''
    ).strip() != ''
"""


def test_one_test_of_a_finished_cell_and_no_second_template_language():
    assert finished_cell_tests(BEFORE_FINISHED) == 1
    assert {p.name: finished_cell_tests(p.read_text()) for p in modules() if finished_cell_tests(p.read_text())} == {
        "layout.py": 1
    }
    assert copies(r"\{(reason|verdict)_[a-z_]+\}") == []
    assert re.search(r"\{(reason|verdict)_[a-z_]+\}", BEFORE_REASONS)


def test_exit_statuses_are_defined_in_names_py():
    statuses = {names.EXIT_INTERRUPTED, names.EXIT_BROKEN_PIPE, names.EXIT_INTERNAL, *names.TIMEOUT_RCS}
    defined = []
    for path in modules():
        for node in parsed(path).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in statuses:
                defined.append(path.name)
    assert set(defined) == {"names.py"}


# The import graph (no circle, names.py a leaf, the stages) is tests/test_imports.py's.


# -- the current cell of a side: macros.py's [[current_side]] -----------------

# The latest (max id) of a side's cells that no later run superseded, or
# how many there are, spelled out by hand.
CURRENT_SIDE = (
    r"(max\(\s*(\w+\.)?id\s*\)|max\(CASE WHEN side|count\(\*\)(\s+AS \w+)?\s+FROM cells)"
    r"[^;]*superseded_at IS NULL"
)
BEFORE_CURRENT_SIDE = (
    """(SELECT max(c.id) FROM cells c WHERE c.root_id = k.root_id AND c.op IS k.op
            AND c.dtype IS k.dtype AND c.side = 'before' AND c.superseded_at IS NULL) AS before_cell_id""",
    """(before_cell_id, before_claims) = (SELECT max(c.id), count(*) FROM cells c
                          WHERE [[round AND: c.{c} {is} ab_rounds_now.{k}]] AND c.side = 'before'
                            AND c.superseded_at IS NULL)""",
    """SELECT root_id, op, dtype, max(CASE WHEN side = 'before' THEN id END) AS before_cell_id
      FROM cells WHERE side IN ('before', 'after') AND superseded_at IS NULL""",
)


def test_the_current_cell_of_a_side_is_defined_only_by_its_macro():
    assert all(re.search(CURRENT_SIDE, before) for before in BEFORE_CURRENT_SIDE)
    assert copies(CURRENT_SIDE, exempt={"macros.py"}) == []
    used = sorted({where for where, text in texts(exempt={"macros.py"}) if "[[current_side " in text})
    assert used == ["adaptive.py", "irdiff.py", "pairing.py", "schema.sql", "screenpairs.py"]
    rendered = macros.render_schema("[[current_side 'after' op: k]]")
    assert re.search(CURRENT_SIDE, rendered) and "c.side = 'after'" in rendered


# A side's cells picked by hand: the rows (or ids) of the current cells of
# one side, or the sides of the current cells counted per op.
HAND_PICKED = (
    r"(?s)^(?=.*superseded_at IS NULL)"
    r"(?=.*(SELECT\s+(\w+\.)?(\*|id\b)[^;]*\bside\s*=|(?i:count)\(\s*DISTINCT[^)]*\bside\b))"
)
# irdiff._cell and runner.complete_ops as they were written before (at 2519149).
BEFORE_HAND_PICKED = (
    """SELECT c.*, (SELECT count(*) FROM kernels k WHERE k.cell_id = c.id) AS stored_kernels FROM cells c
        WHERE c.root_id = ? AND c.op = ? AND c.dtype IS ? AND c.side = ? AND c.round IS ?
        AND c.superseded_at IS NULL""",
    """SELECT cells.op, COALESCE(cells.dtype, ''), COUNT(DISTINCT cells.round || ':' || cells.side)
           FROM cells JOIN roots ON roots.id = cells.root_id
           WHERE roots.path = ? AND cells.round BETWEEN 1 AND ? AND cells.side IN ('before', 'after')
             AND cells.rc IS NOT NULL AND cells.superseded_at IS NULL
           GROUP BY cells.op, COALESCE(cells.dtype, '')""",
)


def sql_texts(source: str) -> list:
    """Every string constant of a module, and each f-string whole, with the
    module-level string constants it names filled in (adaptive.py built
    its queries from one: f"SELECT ... {_CURRENT} AND ...")."""
    tree = ast.parse(source)
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [
                str(part.value) if isinstance(part, ast.Constant) else constants.get(getattr(part.value, "id", ""), "")
                for part in node.values
                if isinstance(part, (ast.Constant, ast.FormattedValue))
            ]
            found.append("".join(parts))
    return found


# adaptive.complete_rounds as it was written before (at 2519149): its
# conditions in a constant, its query an f-string.
BEFORE_ADAPTIVE = '''
_CURRENT = """FROM cells JOIN roots ON roots.id = cells.root_id
    WHERE roots.path = ? AND cells.superseded_at IS NULL AND cells.round >= 1
      AND cells.side IN ('before', 'after')"""


def complete_rounds(conn, root):
    return conn.execute(
        f"""SELECT cells.op, COALESCE(cells.dtype, ''), cells.round {_CURRENT} AND cells.rc IS NOT NULL
            GROUP BY cells.op, COALESCE(cells.dtype, ''), cells.round HAVING COUNT(DISTINCT cells.side) = 2""",
        (str(root),),
    )
'''


def test_no_module_picks_the_cell_of_a_side_by_hand():
    """irdiff (the cell a diff reads), the runner (which ops of a resumed
    campaign are complete) and adaptive (which rounds of an op are) choose
    a side's cell through [[current_side]] too, as the views and the
    pairing do."""
    assert all(re.search(HAND_PICKED, before) for before in BEFORE_HAND_PICKED)
    assert any(re.search(HAND_PICKED, text) for text in sql_texts(BEFORE_ADAPTIVE))
    found = [("schema.sql", statement) for statement in schema_statements()]
    found += [(p.name, text) for p in modules() if p.name != "macros.py" for text in sql_texts(p.read_text())]
    assert sorted({where for where, text in found if re.search(HAND_PICKED, text)}) == []
    used = sorted({where for where, text in found if "[[current_side " in text})
    assert {"irdiff.py", "adaptive.py"} <= set(used)


# -- every SQL text built from the macros: registered by name ---------------

# How runner.py and roots.py rendered theirs before (at 2519149): inside a
# function, with each call, where no import registers it and the rendered
# copies in docs/ never showed it.
BEFORE_RENDERED = """
from .macros import render_schema


def _pairs(store, root, where):
    return store.conn.execute(render_schema(f"SELECT op FROM verdicts WHERE root_id = ? AND {where}"), (root,))


def claimed_twice(conn):
    claimants = macros.render_schema("SELECT c.id FROM [[side_cells ? round: ?]] ORDER BY c.id")
    return macros.statement("roots.claimants", "SELECT 1")
"""


def _called(node: ast.Call, name: str) -> bool:
    func = node.func
    return (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name)


def unregistered(source: str) -> list:
    """Where source renders SQL that importing it does not register: a call
    of render_schema (only macros.py renders), or of macros.statement inside
    a function (it registers only when the function runs), as lines."""
    tree = ast.parse(source)
    in_functions = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for n in ast.walk(f)
    }
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return sorted(
        n.lineno for n in calls if _called(n, "render_schema") or (_called(n, "statement") and id(n) in in_functions)
    )


def test_every_sql_text_built_from_the_macros_is_registered_when_its_module_is_imported():
    assert unregistered(BEFORE_RENDERED) == [6, 10, 11]
    found = {
        str(path.relative_to(PACKAGE)): unregistered(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "macros.py"
    }
    assert {where: lines for where, lines in found.items() if lines} == {}
    # the modules that render SQL do it through the registry
    registering = sorted(p for p, text in ((p.name, p.read_text()) for p in modules()) if "statement(" in text)
    assert {"pairing.py", "roots.py", "runner.py", "derive.py", "datasette_site.py", "irdiff.py"} <= set(registering)


def test_a_name_is_registered_for_one_sql_text():
    assert macros.statement("test_one_home.same", "SELECT [[min_rounds]]") == f"SELECT {stats.MIN_ROUNDS}"
    macros.statement("test_one_home.same", "SELECT [[min_rounds]]")  # the same text again: the same statement
    with pytest.raises(db.SchemaError, match="test_one_home.same"):
        macros.statement("test_one_home.same", "SELECT 2")
    del macros.STATEMENTS["test_one_home.same"]
