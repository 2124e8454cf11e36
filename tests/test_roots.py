"""Roots known by what they are: a tree moved, copied or seen under another
path is one root; two roots of one name are two; `zlstore forget` removes a
root and everything derived from it, in one transaction."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from zlstore import Store, db
from zlstore.store import derive, roots
from zlstore.read import layout, unchanged

from .judging import invoke, json_out, judged
from .test_ingest import record, write_cell, write_root_env
from .test_reingest import no_scans

CAMPAIGN = "campaign_20261013_090000"
SCREEN = "ab_rlc_20261012_101500"  # the screening root whose NO_IR_DIFF pairs give noise floors


@pytest.fixture(autouse=True)
def settled(monkeypatch):
    """Files written a moment ago count as settled (see unchanged.RACY_NS)."""
    monkeypatch.setattr(unchanged, "RACY_NS", 0)


def ingest(db_path, *paths):
    result = invoke(db_path, "ingest", *paths, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def every_row(db_path) -> dict:
    """Every table's rows, as a store holds them: equal only for the same bytes of data."""
    with Store(db_path) as store:
        tables = [
            r[0]
            for r in store.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {t: sorted(store.conn.execute(f"SELECT * FROM [{t}]").fetchall(), key=repr) for t in tables}


def root_paths(db_path) -> list:
    with Store(db_path) as store:
        return sorted(path for (path,) in store.conn.execute("SELECT path FROM roots"))


@pytest.fixture
def ingested(example_tree, tmp_path):
    """The example tree under runsA, ingested; its views as they were."""
    tree, _ = example_tree
    runs = tree.rename(tmp_path / "runsA")
    db_path = tmp_path / "t.db"
    ingest(db_path, runs)
    return runs, db_path, judged(db_path)


def test_a_moved_tree_is_one_root(ingested, tmp_path):
    runs, db_path, before = ingested
    moved = runs.rename(tmp_path / "runsB")
    summary = ingest(db_path, moved)
    assert (summary["cells_added"], summary["cells_replaced"], summary["cells_unchanged"]) == (0, 0, 72)
    assert summary["problems"] == []  # the cut-off run.log was named when it was stored
    assert judged(db_path) == before  # 18 pairs, not 36
    assert len(before["screen"]) == 18
    assert root_paths(db_path) == sorted(str(p) for p in moved.iterdir())
    with Store(db_path) as store:
        assert (
            store.conn.execute("SELECT count(*) FROM cells WHERE path NOT LIKE ?", (f"{moved}/%",)).fetchone()[0] == 0
        )
        logged = json.loads(
            store.conn.execute("SELECT summary FROM ingest_runs ORDER BY id DESC LIMIT 1").fetchone()[0]
        )
    assert sorted((m["root"], m["from"], m["to"]) for m in logged["moved"]) == sorted(
        (p.name, str(runs / p.name), str(p)) for p in moved.iterdir()
    )


def test_a_moved_tree_is_read_once_then_told_unchanged_by_stat(ingested, tmp_path, monkeypatch):
    runs, db_path, _ = ingested
    moved = runs.rename(tmp_path / "runsB")
    ingest(db_path, moved)
    with Store(db_path) as store:
        no_scans(monkeypatch)
        again = store.ingest(moved)
    assert again["cells_unchanged"] == 72 and not again["moved"]


def test_a_copied_tree_is_one_root_wherever_it_was_ingested_last(ingested, tmp_path):
    runs, db_path, before = ingested
    copy = tmp_path / "elsewhere" / "runsC"
    shutil.copytree(runs, copy)  # new times: every cell is read once, and found unchanged by content
    summary = ingest(db_path, copy)
    assert (summary["cells_added"], summary["cells_replaced"], summary["cells_unchanged"]) == (0, 0, 72)
    assert judged(db_path) == before  # each noise row counted once
    assert set(root_paths(db_path)) == {str(p) for p in copy.iterdir()}
    ingest(db_path, runs)  # the first copy again: the roots move back
    assert judged(db_path) == before
    assert set(root_paths(db_path)) == {str(p) for p in runs.iterdir()}
    with Store(db_path) as store:
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 72


def test_both_copies_in_one_ingest_count_each_root_once(ingested, tmp_path):
    runs, db_path, before = ingested
    copy = tmp_path / "runsC"
    shutil.copytree(runs, copy)
    summary = ingest(db_path, runs, copy)
    assert summary["roots"] == 4 and summary["cells_added"] == 0
    assert judged(db_path) == before


def two_roots_named_alike(tmp_path):
    """Two different screening roots with one name (two hosts started one in the same second)."""
    made = []
    for host, latency in (("node1", 0.02), ("node2", 0.04)):
        root = tmp_path / host / "ab_rlc_20261012_101500"
        write_root_env(root, HOST=host)
        for side in ("before", "after"):
            # two processes never write the same run.log (identical cells are copies: names.DUPLICATE)
            write_cell(
                root / f"topk_float16_{side}",
                record(latencies=((64, latency if side == "before" else latency / 2),)),
                env={"RC": 0},
            )
        made.append(root)
    return made


def test_two_roots_of_one_name_are_two_roots_and_a_problem_names_them(tmp_path):
    first, second = two_roots_named_alike(tmp_path)
    db_path = tmp_path / "t.db"
    ingest(db_path, first)
    result = invoke(db_path, "ingest", second)
    assert result.exit_code == 1
    assert f"another root named {first.name} is stored, from {first}" in result.stderr
    assert "root.env differ in HOST" in result.stderr
    assert set(root_paths(db_path)) == {str(first), str(second)}
    with Store(db_path) as store:
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 4
        with pytest.raises(LookupError, match="ambiguous"):
            store.root(first.name)
        assert store.root(second)["path"] == str(second)
    # shown as two roots, each named by its path, never one root of twice its pairs
    text = invoke(db_path, "screen").stdout
    assert f"{first.name} ({first})  (rule" in text and f"{first.name} ({second})  (rule" in text
    rows = json_out(invoke(db_path, "screen", "--json"))
    assert len({r["root_id"] for r in rows}) == 2 and {r["root_path"] for r in rows} == {str(first), str(second)}
    assert len(json_out(invoke(db_path, "screen", "--json"))) == 2
    again = invoke(db_path, "ingest", first, second)  # told once, when the second was stored
    assert again.exit_code == 0, again.stderr


def test_a_root_whose_path_another_root_of_its_name_took_is_kept_aside(tmp_path):
    first, second = two_roots_named_alike(tmp_path)
    db_path = tmp_path / "t.db"
    ingest(db_path, first)
    ingest(db_path, second)
    shutil.rmtree(first)
    shutil.move(second, first)  # the second root now where the first was
    result = invoke(db_path, "ingest", first)
    assert "the root stored at this path was another root named" in result.stderr
    paths = root_paths(db_path)
    assert paths[0] == str(first) and paths[1].startswith(f"{first}{roots.AWAY}")
    with Store(db_path) as store:
        hosts = dict(store.conn.execute("SELECT path, host FROM roots"))
        assert hosts[str(first)] == "node2" and hosts[paths[1]] == "node1"
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 4
        assert (
            store.conn.execute(
                "SELECT count(*) FROM cells JOIN roots ON roots.id = cells.root_id "
                "WHERE substr(cells.path, 1, length(roots.path) + 1) <> roots.path || '/'"
            ).fetchone()[0]
            == 0
        )


def test_an_env_file_edited_in_place_is_the_same_root(ingested):
    runs, db_path, _ = ingested
    with Store(db_path) as store:
        before = store.root(SCREEN)["id"]
    env = runs / SCREEN / "root.env"
    env.write_text(env.read_text().replace("HOST=s5000-node3", "HOST=s5000-node4"))
    summary = ingest(db_path, runs)
    assert summary["cells_added"] == 0 and summary["cells_replaced"] > 0
    with Store(db_path) as store:
        found = store.root(SCREEN)
        assert (found["id"], found["host"]) == (before, "s5000-node4")
        assert found["identity"] == layout.load_root(layout.RootRef(runs / SCREEN, "screen", ())).identity


def test_identity_is_the_name_and_env_file_not_the_other_root_files(example_tree):
    tree, _ = example_tree
    root = tree / SCREEN
    identity = layout.load_root(layout.RootRef(root, "screen", ())).identity
    (root / "screen.tsv.orig").write_bytes((root / "screen.tsv").read_bytes())
    (root / "screen.tsv").write_text("op\tverdict\n")  # what `rescore --write` does
    assert layout.load_root(layout.RootRef(root, "screen", ())).identity == identity
    (root / "root.env").write_text((root / "root.env").read_text() + "EXTRA=1\n")
    assert layout.load_root(layout.RootRef(root, "screen", ())).identity != identity


# -- forget -------------------------------------------------------------------


COUNTED = (
    "cells",
    "measurements",
    "kernels",
    "fingerprints",
    "recorded_verdicts",
    "partitions",
    "ab_slot_rows",
    "ab_range_rows",
    "ab_round_ranges",
    "noise_floor_rows",
    "ab_stale_rounds",
    "ab_stale_floors",
)


def contents(db_path) -> dict:
    """What a store holds, without its ids and paths: row counts, the texts
    by hash, their digests, and the judged views."""
    with Store(db_path) as store:
        conn = store.conn
        held = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED}
        held["blobs"] = sorted(conn.execute("SELECT hash, kind FROM blobs"))
        held["ir_digests"] = sorted(conn.execute("SELECT * FROM ir_digests"))
    held["views"] = judged(db_path)
    return held


@pytest.mark.parametrize("name", [SCREEN, CAMPAIGN])
def test_forget_leaves_the_store_as_if_the_root_was_never_ingested(ingested, tmp_path, name):
    runs, db_path, _ = ingested
    with Store(db_path) as store:
        assert (
            store.conn.execute(
                f"SELECT count(*) FROM walked_dirs WHERE {unchanged.AT_OR_UNDER}",
                unchanged.at_or_under(str(runs / CAMPAIGN)),
            ).fetchone()[0]
            > 0
        )
    result = invoke(db_path, "forget", name, "--json")
    removed = json_out(result)
    assert removed["root"] == name and removed["cells"] > 0 and removed["measurements"] > 0
    without = tmp_path / "without"
    shutil.copytree(runs, without / "runs")
    shutil.rmtree(without / "runs" / name)
    scratch = tmp_path / "scratch.db"
    ingest(scratch, without / "runs")
    assert contents(db_path) == contents(scratch)
    with Store(db_path) as store:
        assert (
            store.conn.execute(
                f"SELECT count(*) FROM walked_dirs WHERE {unchanged.AT_OR_UNDER}",
                unchanged.at_or_under(str(runs / name)),
            ).fetchone()[0]
            == 0
        )
        assert store.conn.execute("SELECT count(*) FROM walked_dirs").fetchone()[0] > 0
        logged = store.conn.execute("SELECT command, paths FROM ingest_runs ORDER BY id DESC LIMIT 1").fetchone()
    assert logged == ("forget", json.dumps([str(runs / name)]))
    assert ingest(db_path, runs)["cells_added"] == removed["cells"]  # the tree is still there


def test_forget_an_unknown_or_ambiguous_root_is_a_usage_error(tmp_path):
    first, second = two_roots_named_alike(tmp_path)
    db_path = tmp_path / "t.db"
    ingest(db_path, first, second)
    assert invoke(db_path, "forget", "nosuch").exit_code == 2
    ambiguous = invoke(db_path, "forget", first.name)
    assert ambiguous.exit_code == 2 and "ambiguous" in ambiguous.output
    assert invoke(db_path, "forget", first).exit_code == 0
    assert root_paths(db_path) == [str(second)]


def test_forget_that_fails_midway_changes_nothing(ingested, monkeypatch):
    _, db_path, _ = ingested
    before = every_row(db_path)

    def failing(conn):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(derive, "derive", failing)  # after every delete, before the commit
    with Store(db_path) as store, pytest.raises(RuntimeError):
        store.forget(CAMPAIGN)
    monkeypatch.undo()
    assert every_row(db_path) == before


STALLED_FORGET = """
import sys, time
from zlstore import Store
from zlstore.store import derive
done = derive.derive
def stalled(conn):
    done(conn)
    print("deleted, not committed", flush=True)
    time.sleep(120)
derive.derive = stalled
Store(sys.argv[1]).forget(sys.argv[2])
"""


def test_forget_killed_midway_leaves_the_store_as_before(ingested):
    _, db_path, _ = ingested
    before = every_row(db_path)
    process = subprocess.Popen(
        [sys.executable, "-c", STALLED_FORGET, str(db_path), CAMPAIGN], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None  # stdout=PIPE
    try:
        assert process.stdout.readline().strip() == "deleted, not committed"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    with Store(db_path) as store:
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert every_row(db_path) == before


# -- stores made before release 4 ---------------------------------------------


def test_a_release_1_root_ingested_from_another_path_is_moved_not_stored_twice(example_source, tmp_path):
    """tests/data/store-v1.db holds ab_rlc_20261014_083000 as ingested from
    /work/main/examples/runs; the same root from the generated tree is it.
    The tree screened under ZL_ISOLATE_TUNER_CACHE=0 then (a root's
    identity includes its root.env): the copy here says so again."""
    source, _ = example_source
    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store-v1.db", path)
    with Store(path) as store:
        ((name, env_file, env, identity),) = store.conn.execute("SELECT name, env_file, env, identity FROM roots")
        assert identity == layout.root_identity(name, env_file, json.loads(env))
        root = tmp_path / "runs" / name
        shutil.copytree(source / name, root)
        for env_path in [root / "root.env", *root.glob("*/cell.env")]:
            env_path.write_text(env_path.read_text().replace("ZL_ISOLATE_TUNER_CACHE=1", "ZL_ISOLATE_TUNER_CACHE=0"))
        summary = store.ingest(root)
        assert summary["moved"] and summary["moved"][0]["to"] == str(root)
        assert store.conn.execute("SELECT count(*) FROM roots").fetchone()[0] == 1
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 8


def test_a_release_3_store_upgrades_and_an_older_duplicate_is_named(tmp_path):
    """tests/data/store-v3.db holds the floor tree as release 3 stored it,
    by path (made by the code at e4e9785, its tree gone since): the upgrade
    gives every root its identity and a cell its path inside its root; the
    tree ingested at a new place is those roots, moved."""
    from . import floor_tree

    db_path = tmp_path / "t.db"
    shutil.copy(Path(__file__).parent / "data" / "store-v3.db", db_path)
    tree = floor_tree.make_floor_tree(tmp_path / "runs")
    with Store(db_path) as store:
        assert store.schema_version == db.SCHEMA_VERSION
        assert store.conn.execute("SELECT count(*) FROM roots WHERE identity IS NULL").fetchone()[0] == 0
        with pytest.raises(sqlite3.IntegrityError):  # a cell is its path inside its root
            store.conn.execute(
                "INSERT INTO cells (root_id, path, relpath) SELECT root_id, path || '-2', relpath FROM cells LIMIT 1"
            )
        # What release 3 did to a moved tree: the same root stored a second time.
        store.conn.execute(
            """INSERT INTO roots (path, name, kind, identity, files_sig)
                              SELECT '/gone/' || name, name, kind, identity, files_sig FROM roots
                              WHERE name = ?""",
            (floor_tree.SCREEN,),
        )
    result = invoke(db_path, "ingest", tree)
    assert result.exit_code == 1
    assert result.stderr.count("moved: ") == 2  # both roots, from where release 3 stored them
    assert f"is also stored from /gone/{floor_tree.SCREEN}" in result.stderr
    assert f"zlstore forget '/gone/{floor_tree.SCREEN}'" in result.stderr
    assert invoke(db_path, "forget", f"/gone/{floor_tree.SCREEN}").exit_code == 0
    assert invoke(db_path, "ingest", tree).exit_code == 0


def test_a_merged_root_says_what_merged_means_and_how_it_gets_a_path_here(example_store_path, tmp_path):
    """A root known only from a merged store is stored at merged:<identity>;
    wherever it is shown for people (the report's root directory), that says
    what it is and the command that gives it its path on this host."""
    target = tmp_path / "t.db"
    merged = invoke(target, "merge", example_store_path)
    assert merged.exit_code in (0, 1), merged.output
    assert invoke(target, "report", "campaign_20261013_090000", "-o", tmp_path / "r.md").exit_code == 0
    line = next(line for line in (tmp_path / "r.md").read_text().splitlines() if "root directory" in line)
    assert "merged:" in line and "known here only from a merged store" in line
    assert f"zlstore ingest DIR --db {target} of its tree on this host moves the root to DIR" in line
    assert roots.path_text("/data/runs/ab_1") == "/data/runs/ab_1"  # a path of this host is as it is
