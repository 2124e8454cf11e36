"""The schema: one definition of the caliber, versioned, migratable, safe to
create from several processes at once, shipped inside the wheel."""

import re
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore import Store, caliber, db
from zlstore.show import judge
from zlstore.store import macros, migrations
from zlstore.cli import cli

DATA = Path(__file__).parent / "data"


def columns(store, table):
    return [r[1] for r in store.conn.execute(f"PRAGMA table_info([{table}])")]


def test_new_database_settings(store):
    conn = store.conn
    assert conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
    assert store.current_rule == "v3"


def test_caliber_columns_derive_from_the_one_definition(store):
    assert columns(store, "calibers")[1:] == list(caliber.NAMES)
    assert [c for c in columns(store, "cell_summary") if c in caliber.NAMES] == list(caliber.NAMES)
    assert [c for c in columns(store, "recorded_verdicts") if c in caliber.NAMES] == list(caliber.NAMES)


def test_schema_refuses_names_that_judge_does_not_define():
    assert (
        macros.render_schema("SELECT [[verdict NO_IR_DIFF]], [[reason CALIBER_UNKNOWN]]")
        == "SELECT 'NO_IR_DIFF', 'CALIBER_UNKNOWN'"
    )
    with pytest.raises(db.SchemaError, match="NO_KERNEL"):
        macros.render_schema("SELECT [[verdict NO_KERNEL]]")
    assert set(judge.VERDICT_NAMES) == {
        "DUPLICATE_CELL",
        "TRUNCATED",
        "NO_ROWS",
        "IR_UNREAD",
        "NO_TRITON",
        "IR_CHANGED",
        "NO_IR_DIFF",
    }


def test_caliber_macro_with_separator():
    rendered = macros.render_schema("[[caliber ||: a.{f}]]")
    assert rendered == " || ".join(f"a.{name}" for name in caliber.NAMES)


def test_newer_database_is_refused(tmp_path):
    path = tmp_path / "future.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(db.SchemaError, match="newer"):
        Store(path)
    result = CliRunner().invoke(cli, ["init", "--db", str(path)])
    assert result.exit_code == 2 and "upgrade zlstore" in result.output and str(path) in result.output


def test_migrations_run_in_order_from_an_older_version(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    Store(path).close()
    ran = []
    current = db.SCHEMA_VERSION

    def add_note(conn):
        ran.append(current + 1)
        conn.execute("ALTER TABLE roots ADD COLUMN note TEXT")

    def fill_note(conn):
        ran.append(current + 2)
        conn.execute("UPDATE roots SET note = 'migrated'")

    monkeypatch.setattr(db, "SCHEMA_VERSION", current + 2)
    monkeypatch.setitem(migrations.MIGRATIONS, current + 2, fill_note)
    monkeypatch.setitem(migrations.MIGRATIONS, current + 1, add_note)
    with Store(path) as store:
        assert ran == [current + 1, current + 2]
        assert "note" in columns(store, "roots")
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == current + 2
    with Store(path):
        assert ran == [current + 1, current + 2]  # applied once


def test_views_are_recreated_when_the_schema_changes(tmp_path, monkeypatch):
    path = tmp_path / "v.db"
    Store(path).close()
    original = macros.schema_source()
    monkeypatch.setattr(macros, "schema_source", lambda: original + "\nCREATE VIEW extra_view AS SELECT 1 AS one;\n")
    with Store(path) as store:
        assert store.conn.execute("SELECT one FROM extra_view").fetchone() == (1,)


def test_triggers_are_recreated_when_the_schema_changes(tmp_path, monkeypatch):
    """Triggers are derived, like views: once schema.sql changes, a store
    has this release's triggers (the round key they spell comes from
    names.py), not the ones an older release made, and pairs as before."""
    path = tmp_path / "t.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER cells_insert_marks_round")
    conn.execute("CREATE TRIGGER an_older_releases AFTER INSERT ON cells BEGIN SELECT 1; END")
    conn.commit()
    conn.close()
    original = macros.schema_source()
    monkeypatch.setattr(macros, "schema_source", lambda: original + "\n-- a later release\n")
    with Store(path) as store:
        triggers = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert "cells_insert_marks_round" in triggers and "an_older_releases" not in triggers
        assert triggers == set(re.findall(r"CREATE TRIGGER (\w+)", macros.schema_parts()["triggers"]))


def test_concurrent_creation_of_a_new_database(tmp_path):
    path = tmp_path / "race.db"
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "zlstore", "init", "--db", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = []
    for p in processes:
        assert p.stderr is not None  # stderr=PIPE
        results.append((p.wait(timeout=60), p.stderr.read()))
    assert all(code == 0 for code, _ in results), results
    with Store(path) as store:
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert "cell_summary" in store.db.view_names()


def test_wheel_ships_schema_sql(tmp_path):
    pytest.importorskip("hatchling")
    from pathlib import Path

    project = Path(__file__).resolve().parent.parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(project),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("zlstore-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("zlstore/schema.sql").decode()
    assert shipped == (project / "schema.sql").read_text()


def test_a_database_made_by_release_1_opens(tmp_path):
    """tests/data/store-v1.db was made by schema version 1 and is never
    regenerated: every later release must open it and answer every view."""
    import shutil
    from pathlib import Path

    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store-v1.db", path)
    with Store(path) as store:
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 8
        for view in store.db.view_names():
            store.conn.execute(f"SELECT * FROM [{view}] LIMIT 1").fetchall()
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION


def test_the_rendered_sql_in_docs_is_the_sql_that_runs(tmp_path):
    """docs/schema.rendered.sql and docs/queries.rendered.sql are what a
    reader opens to see the real SQL text: stale (schema.sql, a macro's
    definition or a registered statement changed since they were written)
    fails here, with the command that writes them again."""
    import importlib.util
    from pathlib import Path

    script = Path(db.__file__).resolve().parent.parent / "docs" / "rendered_sql.py"
    spec = importlib.util.spec_from_file_location("rendered_sql", script)
    assert spec is not None and spec.loader is not None
    rendered_sql = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rendered_sql)
    files = rendered_sql.rendered()
    everything = "".join(files.values())
    assert "[[" not in everything.replace("[[[", "")
    # each view and trigger as a store holds it is in the files, word for word
    store = Store(tmp_path / "z.db")
    held = store.conn.execute("SELECT sql FROM sqlite_master WHERE type IN ('view', 'trigger')").fetchall()
    store.close()
    assert len(held) > 20 and all(sql in files[rendered_sql.SCHEMA] for (sql,) in held)
    # and each statement the modules register, the canned queries among them
    registered = rendered_sql.registered()
    assert {"pairing.every_round", "roots.claimants", "derive.rounds.1"} <= set(registered)
    assert any(name.startswith("metadata.database.queries.") for name in registered)
    assert all(text.strip() in everything for text in registered.values())
    for target, expected in files.items():
        assert target.read_text(encoding="utf-8") == expected, (
            f"docs/{target.name} is stale: run .venv/bin/python docs/rendered_sql.py and commit it"
        )


def test_an_sqlite_older_than_the_sql_needs_is_refused_naming_both_versions(tmp_path):
    with pytest.raises(db.StoreError, match=r"needs SQLite 3\.35\.0 or newer.*links SQLite 3\.34\.1"):
        db.require_sqlite(tmp_path / "z.db", (3, 34, 1))
    db.require_sqlite(tmp_path / "z.db", db.SQLITE_MINIMUM)  # the minimum itself is enough


def test_a_store_is_neither_opened_nor_created_under_a_too_old_sqlite(tmp_path, monkeypatch):
    """The check comes before the file is touched: no empty store is left behind."""
    monkeypatch.setattr(db, "SQLITE_MINIMUM", (99, 0, 0))
    (tmp_path / "runs").mkdir()
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "runs"), "--db", str(tmp_path / "z.db")])
    assert result.exit_code == 2, result.output
    assert "needs SQLite 99.0.0 or newer" in result.output
    assert not (tmp_path / "z.db").exists()


def schema_shape(path) -> dict:
    """Every table's columns in order (name, type, not null, primary key),
    every index's columns and SQL, every view's and trigger's SQL."""
    conn = sqlite3.connect(path)
    shape: dict[tuple[str, str], object] = {}
    objects = conn.execute(
        "SELECT name, type, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()
    for name, kind, sql in objects:
        if kind == "table":
            shape[kind, name] = [(r[1], r[2], r[3], r[5]) for r in conn.execute(f'PRAGMA table_xinfo("{name}")')]
        elif kind == "index":
            shape[kind, name] = ([r[2] for r in conn.execute(f'PRAGMA index_xinfo("{name}")')], sql)
        else:
            shape[kind, name] = sql
    conn.close()
    return shape


@pytest.mark.parametrize("release", ["store-v1.db", "store-v3.db"])
def test_a_store_upgraded_from_an_old_release_has_the_schema_of_a_new_one(tmp_path, release):
    """ALTER TABLE ADD COLUMN appends where schema.sql lists a column in its
    place: the upgrade rebuilds such a table in schema.sql's order, and keeps
    every row (with foreign keys on, dropping cells would have cascaded to
    its measurements)."""
    Store(tmp_path / "new.db").close()
    old = tmp_path / release
    shutil.copy(DATA / release, old)
    before = sqlite3.connect(old)
    counts = {
        t: before.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("cells", "measurements", "kernels")
    }
    before.close()
    assert counts["measurements"] > 0
    Store(old).close()
    new, upgraded = schema_shape(tmp_path / "new.db"), schema_shape(old)
    assert sorted(upgraded) == sorted(new)
    assert [key for key in new if upgraded[key] != new[key]] == []
    after = sqlite3.connect(old)
    assert {t: after.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in counts} == counts
    assert after.execute("PRAGMA foreign_key_check").fetchall() == []
    after.close()
