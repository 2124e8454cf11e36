"""A range's finding is stored with it (ab_range_rows, under the basis
judging_basis names), so that reading a campaign's thousands of findings
judges none of them. What the views show must never depend on whether a
judgement was stored: these tests compare the stored rows with the same
rows judged on the fly, and edit the settings, a q-value and the store's
state behind zlstore's back with a plain sqlite3 connection."""

import json
import shutil
import sqlite3

import pytest

from zlstore import Store, db
from zlstore.store import derive, pairing
from zlstore.show import judge

from .effects import Shape, write_repeat_root
from .nobody import as_nobody

# one clear 1.5x, one shape with no effect and a lot of noise, one quiet
# shape with no effect: faster, inconclusive and no change under the defaults
SHAPES = [Shape(1.5, 0.02), Shape(1.0, 0.3), Shape(1.0, 0.001)] * 2


@pytest.fixture
def db_path(tmp_path):
    # a known machine: a floor of that machine applies to its ranges (ARTIFACTS.md, Noise floors)
    machine = {"ENV_GPU": "NVIDIA H200", "ENV_DRIVER": "570.86.15", "ENV_RUNTIME": "cuda 12.8"}
    write_repeat_root(tmp_path / "runs", "ab_stored", SHAPES, rounds=4, seed=3, environment=lambda side, rnd: machine)
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.ingest(tmp_path / "runs")
    return path


def plain(path) -> sqlite3.Connection:
    """A connection with nothing of zlstore's: a datasette or sqlite3 user."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def judgements(conn) -> list:
    return [
        dict(r)
        for r in conn.execute("SELECT * FROM ab_range_judgements ORDER BY root_id, op, dtype, shape, caliber_id")
    ]


def without_rowids(rows) -> list:
    return [{k: v for k, v in r.items() if k != "range_rowid"} for r in rows]


def findings(conn) -> list:
    return [r["finding"] for r in conn.execute("SELECT finding FROM ab_ranges ORDER BY shape")]


def unjudged(conn) -> int:
    return conn.execute("SELECT count(*) FROM ab_range_unjudged").fetchone()[0]


def every_range_again(path, final=True):
    """Every round of the store paired and every range computed again, in one
    write; final=False: as an ingest's batch leaves them, for its last commit."""
    with Store(path) as store:
        with db.write_transaction(store.conn):
            pairing.mark_every_round(store.conn)
            store.conn.execute("DELETE FROM ab_range_rows")
            derive.derive(store.conn, final=final)


def test_a_write_stores_every_judgement_and_they_are_the_views_own(db_path):
    conn = plain(db_path)
    assert unjudged(conn) == 0
    stored = judgements(conn)
    assert {r["finding"] for r in stored} == {"faster", "inconclusive", "no change"}
    # forget the basis the judgements were made on: every range is judged
    # again by the view, and must come out the same, column by column
    conn.execute("DELETE FROM ab_judgement_basis")
    assert unjudged(conn) == len(stored)
    assert judgements(conn) == stored


def test_a_setting_edited_by_hand_is_seen_at_once_and_stored_by_the_next_writer(db_path, tmp_path):
    conn = plain(db_path)
    before = findings(conn)
    assert "faster" in before
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('min_effect', '0.6')")
    # 1.5x is inside +-60%: every read sees it at once, nothing written
    expected = [f if f != "faster" else "no change" for f in before]
    assert findings(conn) == expected
    assert unjudged(conn) == len(before)
    with Store(db_path, read_only=True) as store:  # a reader judges nothing: it judges on the fly
        assert derive.unjudged(store.conn) and not derive.stale(store.conn)
        assert [r["finding"] for r in sorted(judge.ab_ranges(store), key=lambda r: r["shape"])] == expected
    assert unjudged(conn) == len(before)
    with Store(db_path):  # the next writer's open stores every range's judgement (Store.refresh_pairs)
        pass
    assert unjudged(conn) == 0
    stored = [
        r[0]
        for r in conn.execute(
            "SELECT finding FROM ab_range_rows JOIN roots ON roots.id = root_id WHERE roots.name = 'ab_stored' "
            "ORDER BY shape"
        )
    ]
    assert stored == expected


def test_a_rescore_that_puts_back_the_floors_judges_nothing(db_path):
    """Noise floors that move by themselves (fingerprints deleted, then
    computed again) are judged by the views meanwhile; the stored
    judgements are good again once the floors are back."""
    conn = plain(db_path)
    stored = judgements(conn)
    basis = conn.execute("SELECT basis FROM ab_judgement_basis").fetchone()[0]
    conn.execute("DELETE FROM noise_floor_rows")
    conn.execute(
        "INSERT INTO noise_floor_rows (rule, root_id, op, dtype, shape, caliber_id, machine, n, floor, fallback_rows) "
        "SELECT 'v3', r.root_id, r.op, r.dtype, r.shape, r.caliber_id, m.machine, 9, 0.5, 0 "
        "FROM ab_range_rows r JOIN root_machines m ON m.root_id = r.root_id WHERE r.caliber_id IS NOT NULL"
    )
    assert unjudged(conn) == len(stored)
    assert {r["noise_floor"] for r in judgements(conn)} == {0.5}  # a floor of its machine beside every shape
    conn.execute("DELETE FROM noise_floor_rows")
    assert conn.execute("SELECT basis FROM judging_basis").fetchone()[0] == basis
    assert unjudged(conn) == 0 and judgements(conn) == stored


def test_a_floor_or_rule_change_through_zlstore_rejudges(db_path):
    with Store(db_path) as store:
        store.set_setting("q_max", "1e-12")
        # nothing is left to judge on the fly: the write stored the new findings
        assert unjudged(store.conn) == 0
        assert "faster" not in [r[0] for r in store.conn.execute("SELECT finding FROM ab_range_rows")]


def test_a_q_value_edited_by_hand_is_judged_again(db_path):
    conn = plain(db_path)
    shape = conn.execute("SELECT shape FROM ab_ranges WHERE finding = 'faster' LIMIT 1").fetchone()[0]
    conn.execute("UPDATE ab_range_rows SET q_value = 0.9 WHERE shape = ?", (shape,))
    assert tuple(conn.execute("SELECT finding, q_value FROM ab_ranges WHERE shape = ?", (shape,)).fetchone()) == (
        "inconclusive",
        0.9,
    )
    row = conn.execute("SELECT json FROM ab_range_judgements WHERE shape = ?", (shape,)).fetchone()[0]
    assert '"q_value": 0.9' in row and '"finding": "inconclusive"' in row


def test_ranges_computed_between_an_ingests_batches_get_their_q_values_from_the_next_writer(db_path):
    """An ingest's batches compute the ranges of the rounds they pair; their
    roots' q-values and the judgements wait for its last commit. One killed
    between two batches leaves ranges with no q-value, unjudged: a reader
    meanwhile judges them on the fly, and without a q-value nothing is
    faster or slower; the next zlstore that opens the store for writing
    adjusts and judges them, to what a whole run gives."""
    conn = plain(db_path)
    done = judgements(conn)
    assert "faster" in {r["finding"] for r in done}
    every_range_again(db_path, final=False)  # as a batch pairs its own rounds
    assert conn.execute("SELECT count(*) FROM ab_stale_ranges").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM ab_range_rows WHERE q_value IS NOT NULL").fetchone()[0] == 0
    assert unjudged(conn) == len(done)
    meanwhile = judgements(conn)
    assert without_rowids(meanwhile) != without_rowids(done)
    assert not {r["finding"] for r in meanwhile} & {"faster", "slower"}
    with Store(db_path):
        pass
    assert unjudged(conn) == 0
    assert without_rowids(judgements(conn)) == without_rowids(done)


def test_a_batch_that_leaves_a_key_with_no_range_has_its_root_adjusted_again(tmp_path):
    """A key whose rows are all gone changes its root's family as a new
    range does: a batch that removes its ranges, and commits before the
    run's last, takes the q-values of the root's other ranges away (a reader
    meanwhile judges them without one), so that the next writer adjusts
    them without it."""
    for op in ("softmax", "relu"):
        write_repeat_root(tmp_path / "runs", "ab_two_ops", SHAPES, rounds=4, seed=3, op=op)
    db_path = tmp_path / "s.db"
    with Store(db_path) as store:
        store.ingest(tmp_path / "runs")
    conn = plain(db_path)
    assert conn.execute("SELECT count(*) FROM ab_range_rows WHERE op = 'softmax' AND judged").fetchone()[0] == 6
    with Store(db_path) as store:
        with db.write_transaction(store.conn):
            store.conn.execute("DELETE FROM measurements WHERE op_name = 'relu'")
            derive.derive(store.conn, final=False)
    assert conn.execute("SELECT count(*) FROM ab_range_rows WHERE op = 'relu'").fetchone()[0] == 0
    assert unjudged(conn) == 6  # softmax's: their family lost six ranges
    assert conn.execute("SELECT count(*) FROM ab_range_rows WHERE q_value IS NOT NULL").fetchone()[0] == 0
    whole_path = tmp_path / "whole.db"
    with sqlite3.connect(whole_path) as whole_conn:
        sqlite3.connect(db_path).backup(whole_conn)
    every_range_again(whole_path)  # every range of the store as it now is, computed at once
    with Store(db_path):  # the next writer adjusts what the batch left
        pass
    assert unjudged(conn) == 0
    whole = judgements(plain(whole_path))
    assert len(whole) == 6
    assert without_rowids(judgements(conn)) == without_rowids(whole)


def test_ab_json_read_from_the_stored_judgements_is_the_views_text(db_path, tmp_path, nobody_dir):
    """`zlstore ab --json` reads an up-to-date store's JSON along the key
    index, and the view's where the store cannot be brought up to date (a
    read-only one whose settings were edited by hand): the same text, and
    the text of the view's rows."""
    write_repeat_root(tmp_path / "more", "ab_second", SHAPES[:2], rounds=3, seed=4)
    with Store(db_path) as store:
        store.ingest(tmp_path / "more")
        stored = judge.ab_ranges_json(store)
        assert not derive.unjudged(store.conn)
        by_view = store.conn.execute(
            "SELECT '[' || group_concat(json, ',' || char(10) || ' ') || ']' FROM "
            f"(SELECT json FROM ab_range_judgements ORDER BY {judge.AB_KEY_ORDER})"
        ).fetchone()[0]
        assert stored == by_view
        rows = json.loads(stored)
        assert all(r["environment_differs"] is None for r in rows)
        assert [r["root"] for r in rows] == sorted(r["root"] for r in rows)  # by key: root first
        assert {r["root"] for r in rows} == {"ab_stored", "ab_second"}
        one = judge.ab_ranges_json(store, "ab_second")
        assert [r["root"] for r in json.loads(one)] == ["ab_second"] * 2
    # a store this user cannot write, its q_max edited by hand: the command
    # cannot store the new judgements, and reads the view's
    shared = nobody_dir / "ro.db"
    shutil.copy(db_path, shared)
    plain(shared).execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('q_max', '1e-9')")
    read = as_nobody(["ab", "--json", "--db", str(shared)])
    assert read.returncode == 0, read.stderr
    rejudged = json.loads(read.stdout)["rows"]
    assert [r["shape"] for r in rejudged] == [r["shape"] for r in rows]
    assert {r["q_max"] for r in rejudged} == {1e-9}
    assert "faster" not in {r["finding"] for r in rejudged}
    assert plain(shared).execute("SELECT count(*) FROM ab_range_unjudged").fetchone()[0] == len(rows)


def test_a_moved_root_is_judged_again_with_its_new_path(db_path, tmp_path):
    """A range's stored JSON names its root's path: ingesting the tree from
    where it was moved to rewrites it."""
    moved = tmp_path / "moved"
    (tmp_path / "runs").rename(moved)
    with Store(db_path) as store:
        store.ingest(moved)
        rows = json.loads(judge.ab_ranges_json(store))
        assert not derive.unjudged(store.conn)
    assert {r["root_path"] for r in rows} == {str(moved / "ab_stored")}
    assert [r["root_path"] for r in judgements(plain(db_path))] == [str(moved / "ab_stored")] * len(rows)
