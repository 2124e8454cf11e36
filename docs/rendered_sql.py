"""Write docs/schema.rendered.sql: the SQL zlstore runs, every macro expanded.

schema.sql and the writers' derivation steps (zlstore/pairing.py,
zlstore/floors.py) are written with macros ("[[case verdicts]]",
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
-- run to bring the derived tables up to date (zlstore/pairing.py and
-- zlstore/floors.py), in the order refresh() runs them. Edit schema.sql or
-- the Python that defines a name (zlstore/names.py, caliber.py, ...), never this.
"""


def rendered() -> str:
    """The file's text."""
    sys.path.insert(0, str(REPO))
    from zlstore import macros, pairing

    parts = [HEADER, "\n-- ===== schema.sql, rendered =====\n", macros.render_schema(macros.schema_source()).rstrip("\n"), "\n"]
    setup, rounds, floors, ranges, pending, judging = pairing._prepared()
    for title, steps in (("setup", setup), ("the stale rounds paired again", rounds),
                         ("the stale ranges computed again", ranges),
                         ("a batch's pending ranges (final=False only)", pending),
                         ("the stale noise floors (final=True only)", floors),
                         ("q-values and judgements (final=True only)", judging)):
        title = "refresh: " + title
        parts.append(f"\n-- ===== {title} =====\n")
        parts += [step.strip() + ";\n\n" for step in steps]
    return "".join(parts).rstrip("\n") + "\n"


if __name__ == "__main__":
    TARGET.write_text(rendered(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}")
