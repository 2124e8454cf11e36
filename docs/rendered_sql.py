"""Write docs/schema.rendered.sql and docs/queries.rendered.sql: the SQL
zlstore runs, every macro expanded.

schema.sql, the writers' derivation steps (zlstore/store/derive.py runs those of
pairing.py, ranges.py and floors.py) and every other statement built from
the macros ("[[case verdicts]]", "[[round: {k}]]", ...) are expanded by
render_schema from the one definition of each name, rule and threshold;
each but schema.sql is registered by name (macros.statement, in
macros.STATEMENTS) when its module is imported. A reader who wants the text
that SQLite runs opens the rendered copies this script writes: the schema
and the derivation in one, the rest (the modules' own statements, the
canned queries and dashboard queries of metadata.yaml) in the other. Run
from the top of the repository, in the venv:

    .venv/bin/python docs/rendered_sql.py

tests/test_schema.py fails while a checked-in copy differs from what this
writes (a macro's definition, schema.sql or a registered statement changed):
run it again and commit the files."""

import importlib
import sys
from pathlib import Path
from typing import Dict

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "docs" / "schema.rendered.sql"
QUERIES = REPO / "docs" / "queries.rendered.sql"

_GENERATED = """\
-- GENERATED FILE: do not edit. Written by docs/rendered_sql.py
-- (.venv/bin/python docs/rendered_sql.py); tests/test_schema.py fails while it is stale.
--
"""
SCHEMA_HEADER = (
    _GENERATED
    + """\
-- The SQL zlstore runs, with every macro of render_schema expanded: first
-- schema.sql (the tables, triggers and views a store holds; SQLite keeps the
-- same text: SELECT sql FROM sqlite_master), then the statements the writers
-- run to bring the derived tables up to date (zlstore/store/derive.py: the steps of
-- pairing.py, ranges.py and floors.py), in the order derive() runs them. Edit schema.sql or
-- the Python that defines a name (zlstore/names.py, caliber.py, ...), never this.
-- The other statements built from the macros are in queries.rendered.sql.
"""
)
QUERIES_HEADER = (
    _GENERATED
    + """\
-- Every other SQL text zlstore builds from the macros of render_schema
-- (schema.sql and the derivation are in schema.rendered.sql), expanded, by
-- the name it is registered under (zlstore/store/macros.py: statement): MODULE.WHAT
-- for a module's own, metadata.KEY... for the canned queries and dashboard
-- queries of zlstore/metadata.yaml that datasette runs. Edit the module or
-- metadata.yaml, never this.
"""
)


def registered() -> Dict[str, str]:
    """Every statement the package registers: each module that imports
    macros (where statement is) imported, so that its top-level
    registrations run."""
    sys.path.insert(0, str(REPO))
    from zlstore.store import macros

    package = REPO / "zlstore"
    for path in sorted(package.rglob("*.py")):
        if path.stem != "__main__" and "macros" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(package).with_suffix("").parts
            importlib.import_module(".".join(("zlstore", *parts[: -1 if parts[-1] == "__init__" else None])))
    return dict(macros.STATEMENTS)


def rendered() -> Dict[Path, str]:
    """Each file's text, by its path."""
    statements = registered()
    from zlstore.store import derive, macros

    schema = [SCHEMA_HEADER, "\n-- ===== schema.sql, rendered =====\n", macros.render_schema(macros.schema_source())]
    schema[-1] = schema[-1].rstrip("\n") + "\n"
    for stage, title, _ in derive.STAGES:
        schema.append(f"\n-- ===== derive: {title} =====\n")
        prefix = f"derive.{stage}."
        schema += [statements.pop(name).strip() + ";\n\n" for name in list(statements) if name.startswith(prefix)]
    queries = [QUERIES_HEADER]
    for name in sorted(statements):
        queries.append(f"\n-- ===== {name} =====\n{statements[name].strip()};\n")
    return {SCHEMA: "".join(schema).rstrip("\n") + "\n", QUERIES: "".join(queries)}


if __name__ == "__main__":
    for target, text in rendered().items():
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target.relative_to(REPO)}")
