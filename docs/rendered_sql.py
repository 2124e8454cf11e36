"""Write docs/schema.rendered.sql: the SQL zlstore runs, every macro expanded.

schema.sql and the writers' derivation steps (zlstore/derive.py runs those
of pairing.py, ranges.py and floors.py) are written with macros ("[[case verdicts]]",
"[[round: {k}]]", ...) that render_schema expands from the one definition of
each name, rule and threshold. A reader who wants the view text that SQLite
holds opens the rendered copy this script writes. Run from the top of the
repository, in the venv:

    .venv/bin/python docs/rendered_sql.py

tests/test_schema.py fails while the checked-in copy differs from what this
writes (a macro's definition or schema.sql changed): run it again and commit
the file."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "schema.rendered.sql"

HEADER = """\
-- GENERATED FILE: do not edit. Written by docs/rendered_sql.py
-- (.venv/bin/python docs/rendered_sql.py); tests/test_schema.py fails while it is stale.
--
-- The SQL zlstore runs, with every macro of render_schema expanded: first
-- schema.sql (the tables, triggers and views a store holds; SQLite keeps the
-- same text: SELECT sql FROM sqlite_master), then the statements the writers
-- run to bring the derived tables up to date (zlstore/derive.py: the steps of
-- pairing.py, ranges.py and floors.py), in the order derive() runs them. Edit schema.sql or
-- the Python that defines a name (zlstore/names.py, caliber.py, ...), never this.
"""


def rendered() -> str:
    """The file's text."""
    sys.path.insert(0, str(REPO))
    from zlstore import derive, macros

    parts = [
        HEADER,
        "\n-- ===== schema.sql, rendered =====\n",
        macros.render_schema(macros.schema_source()).rstrip("\n"),
        "\n",
    ]
    statements = derive.statements()
    for stage, title, _ in derive.STAGES:
        parts.append(f"\n-- ===== derive: {title} =====\n")
        parts += [step.strip() + ";\n\n" for step in statements[stage]]
    return "".join(parts).rstrip("\n") + "\n"


if __name__ == "__main__":
    TARGET.write_text(rendered(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}")
