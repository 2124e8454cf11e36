"""A range's finding is stored with it (ab_range_rows, under the basis
judging_basis names), so that reading a campaign's thousands of findings
judges none of them. What the views show must never depend on whether a
judgement was stored: these tests compare the stored rows with the same
rows judged on the fly, and edit the settings, a q-value and the store's
state behind zlstore's back with a plain sqlite3 connection."""

import sqlite3

import pytest

from zlstore import Store, db, pairing

from .effects import Shape, write_repeat_root

# one clear 1.5x, one shape with no effect and a lot of noise, one quiet
# shape with no effect: faster, inconclusive and no change under the defaults
SHAPES = [Shape(1.5, 0.02), Shape(1.0, 0.3), Shape(1.0, 0.001)] * 2


@pytest.fixture
def db_path(tmp_path):
    write_repeat_root(tmp_path / "runs", "ab_stored", SHAPES, rounds=4, seed=3)
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
    return [dict(r) for r in conn.execute(
        "SELECT * FROM ab_range_judgements ORDER BY root_id, op, dtype, shape, caliber_id")]


def without_rowids(rows) -> list:
    return [{k: v for k, v in r.items() if k != "range_rowid"} for r in rows]


def findings(conn) -> list:
    return [r["finding"] for r in conn.execute("SELECT finding FROM ab_ranges ORDER BY shape")]


def unjudged(conn) -> int:
    return conn.execute("SELECT count(*) FROM ab_range_unjudged").fetchone()[0]


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


def test_a_setting_edited_by_hand_is_seen_at_once_and_stored_by_the_next_write(db_path):
    conn = plain(db_path)
    before = findings(conn)
    assert "faster" in before
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('min_effect', '0.6')")
    # 1.5x is inside +-60%: every read sees it at once, nothing written
    assert "faster" not in findings(conn)
    assert unjudged(conn) == len(before)
    with Store(db_path) as store:  # any writer brings the stored ones up to date
        assert not pairing.stale(store.conn)
    assert unjudged(conn) == 0
    assert findings(conn) == [f if f != "faster" else "no change" for f in before]
    stored = [r[0] for r in conn.execute("SELECT finding FROM ab_range_rows ORDER BY shape")]
    assert stored == findings(conn)


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
    assert tuple(conn.execute("SELECT finding, q_value FROM ab_ranges WHERE shape = ?", (shape,)).fetchone()) == \
        ("inconclusive", 0.9)
    row = conn.execute("SELECT json FROM ab_range_judgements WHERE shape = ?", (shape,)).fetchone()[0]
    assert '"q_value": 0.9' in row and '"finding": "inconclusive"' in row


def test_ranges_written_between_an_ingests_batches_are_judged_by_the_next_writer(db_path):
    """An ingest adjusts q-values and judges once, at its last commit; one
    killed between two batches leaves ranges unjudged: the next zlstore
    that opens the store for writing finishes the work, and a reader in
    between sees them judged on the fly."""
    conn = plain(db_path)
    done = judgements(conn)
    with Store(db_path) as store:
        with db.write_transaction(store.conn):  # every range computed again, as a batch computes its own
            pairing.mark_every_round(store.conn)
            pairing.refresh(store.conn, final=False)
    assert conn.execute("SELECT count(*) FROM ab_stale_q_values").fetchone()[0] == 1
    between = judgements(conn)
    assert {r["q_value"] for r in between} == {None}
    assert "faster" not in {r["finding"] for r in between}  # no q-value: nothing is called
    with Store(db_path):
        pass
    assert conn.execute("SELECT count(*) FROM ab_stale_q_values").fetchone()[0] == 0
    assert unjudged(conn) == 0
    assert without_rowids(judgements(conn)) == without_rowids(done)
