"""The A/B pairing tables (zlstore/store/pairing.py). Every writer keeps them, cell
by cell or batch by batch; whatever the order of the writes, they must equal
a recomputation from scratch, and the views must answer from them."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from zlstore import Store
from zlstore.store import derive
from zlstore.show import judge
from zlstore.db import write_transaction

from .judging import by_key, invoke, json_out

TABLES = ("ab_slot_rows", "ab_range_rows", "ab_round_ranges", "noise_floor_rows")


def comparable(value, column: str):
    """A value rounded to 12 digits: a sum over the rounds in another order
    differs in its last bits. The JSON fragments kept with a range hold
    such sums too."""
    if isinstance(value, float):
        return round(value, 12)
    if column.startswith("json_") and value is not None:
        members = json.loads("{" + value + "}")
        return tuple((k, round(v, 12) if isinstance(v, float) else v) for k, v in members.items())
    return value


def snapshot(conn) -> dict:
    """Every pairing table's rows, in a comparable form (no rowids)."""
    out = {}
    for table in TABLES:
        cursor = conn.execute(f"SELECT * FROM {table}")
        columns = [d[0] for d in cursor.description]
        out[table] = sorted(
            (tuple(comparable(v, c) for v, c in zip(row, columns)) for row in cursor.fetchall()), key=repr
        )
    return out


def from_scratch(db_path, tmp_path) -> dict:
    """The same database's pairing tables recomputed from nothing, on a copy."""
    copy = tmp_path / "scratch.db"
    source = sqlite3.connect(db_path)
    target = sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.close()
    with Store(copy) as store, write_transaction(store.conn):
        conn = store.conn
        for table in TABLES:
            conn.execute(f"DELETE FROM {table}")
        assert derive.derive(conn, every=True)
    with Store(copy) as store:
        return snapshot(store.conn)


def set_latency(run_log, shape, latency):
    """Rewrite the latency of the rows of one shape in a run.log, in place."""
    lines = run_log.read_text().splitlines(keepends=True)
    changed = 0
    for i, line in enumerate(lines):
        if not line.startswith("[INFO] {"):
            continue
        record = json.loads(line[len("[INFO] ") :])
        for row in record.get("result", []):
            if json.dumps(row.get("shape_detail"), separators=(",", ":")) == shape:
                row["latency"] = latency
                changed += 1
        lines[i] = "[INFO] " + json.dumps(record) + "\n"
    run_log.write_text("".join(lines))
    return changed


def test_written_piecemeal_equals_recomputed_from_scratch(example_tree, tmp_path):
    """Roots ingested one by one, a round recorded cell by cell, a cell
    replaced, a row deleted by hand: the kept tables equal a recomputation."""
    source, manifest = example_tree
    db_path = tmp_path / "piecemeal.db"
    roots = sorted(p for p in source.iterdir() if p.is_dir())
    campaign = next(p for p in roots if p.name.startswith("campaign_"))
    sides = sorted(p for p in campaign.rglob("before") if (p / "run.log").exists())
    with Store(db_path) as store:
        store.record([sides[0], sides[0].parent / "after"])  # a round, live
        for root in roots:
            store.ingest(root)  # then everything
        assert snapshot(store.conn) == from_scratch(db_path, tmp_path)

        # A campaign cell rewritten: its round is re-paired and its key's range moves.
        key = next(r for r in judge.ab_ranges(store, campaign.name) if r["rounds"] >= 3)
        slot = store.conn.execute(
            "SELECT after_cell_id, latency_before FROM ab_slot_rows "
            "WHERE root_id = ? AND op = ? AND dtype = ? AND shape = ? AND reason IS NULL LIMIT 1",
            (key["root_id"], key["op"], key["dtype"], key["shape"]),
        ).fetchone()
        after_dir = store.conn.execute("SELECT path FROM cells WHERE id = ?", (slot[0],)).fetchone()[0]
        assert set_latency(Path(after_dir) / "run.log", key["shape"], slot[1] / 100) == 1
        summary = store.ingest(campaign)
        assert summary["cells_replaced"] == 1
        moved = by_key(judge.ab_ranges(store, campaign.name), "op", "dtype", "shape", "caliber_id")
        assert moved[(key["op"], key["dtype"], key["shape"], key["caliber_id"])]["max"] == pytest.approx(100)

        # A row deleted by hand: a read derives nothing; the explicit step (zlstore derive) re-pairs it.
        store.conn.execute("DELETE FROM measurements WHERE id = (SELECT max(id) FROM measurements)")
        judge.ab_ranges(store)
        assert derive.stale(store.conn)
        store.derive()
        assert not derive.stale(store.conn)
        assert snapshot(store.conn) == from_scratch(db_path, tmp_path)
        assert all(snapshot(store.conn)[t] for t in ("ab_slot_rows", "ab_range_rows", "ab_round_ranges"))


def test_a_batched_ingest_equals_recomputed_from_scratch(example_store_path, tmp_path):
    with Store(example_store_path) as store:
        kept = snapshot(store.conn)
    assert kept == from_scratch(example_store_path, tmp_path)
    assert kept["noise_floor_rows"], "the example screens have NO_IR_DIFF pairs: floors exist"


def test_floors_follow_the_rule(example_store):
    """noise_floors shows the current rule's floors; each rule's are kept."""
    conn = example_store.conn
    by_rule = dict(conn.execute("SELECT rule, count(*) FROM noise_floor_rows GROUP BY rule"))
    assert set(by_rule) == {"v1", "v2", "v3", "v4"}
    for rule in ("v3", "v4"):
        example_store.set_rule(rule)
        shown = judge.noise_floors(example_store)
        assert {r["rule"] for r in shown} == {rule} and len(shown) == by_rule[rule]
    # Forgetting a rule's fingerprints forgets its floors.
    conn.execute("DELETE FROM fingerprints WHERE rule = 'v4'")
    example_store.refresh_pairs()
    assert conn.execute("SELECT count(*) FROM noise_floor_rows WHERE rule = 'v4'").fetchone()[0] == 0


def test_ab_json_is_the_library_rows(example_store_path):
    """`zlstore ab --json` is built by SQLite; it holds the same rows."""
    printed = json_out(invoke(example_store_path, "ab", "--json"))
    assert all(list(r)[-1] == "ir_changes" for r in printed)  # the CLI's, after the library's columns
    printed = [{k: v for k, v in r.items() if k != "ir_changes"} for r in printed]
    with Store(example_store_path) as store:
        rows = judge.ab_ranges(store)
    assert len(printed) == len(rows) > 0
    key = lambda r: (r["root"], r["op"], r["dtype"], r["shape"], r["caliber_id"] or 0)
    assert [key(r) for r in printed] == sorted(map(key, rows))  # by key, not findings first
    for got, want in zip(printed, sorted(rows, key=key)):
        assert list(got) == list(want)
        for column, value in want.items():
            assert got[column] == (pytest.approx(value, rel=1e-13) if isinstance(value, float) else value), column


def test_release_1_database_is_paired_on_upgrade(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store-v1.db", path)
    with Store(path) as store:
        kept = snapshot(store.conn)
        assert not derive.stale(store.conn)
        assert kept["ab_slot_rows"] and kept["ab_round_ranges"]
        counted = store.conn.execute("SELECT count(*) FROM measurements WHERE occurrence IS NULL").fetchone()[0]
        assert counted == 0
        assert store.conn.execute("SELECT count(*) FROM verdicts WHERE n_rows > 0").fetchone()[0] > 0
    assert kept == from_scratch(path, tmp_path)


def test_rows_only_the_after_cell_has_are_paired_as_missing_their_before_row(example_tree, tmp_path):
    """A round's after cell with a shape its before cell lacks, and a second
    row of a shape both have: each is a slot row of its own, MISSING_SIDE
    with only its after side; the rows both sides have still pair. (The
    after-only rows are looked for only where the after cell has rows the
    before rows did not pair: pairing._slot_rows.)"""
    source, _ = example_tree
    campaign = next(p for p in source.iterdir() if p.name.startswith("campaign_"))
    after = next(p for p in sorted(campaign.rglob("after")) if (p / "run.log").exists())
    log = after / "run.log"
    lines = log.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("[INFO] {"))
    record = json.loads(lines[at][len("[INFO] ") :])
    first = record["result"][0]
    record["result"] += [dict(first, shape_detail=[[97, 89], 3]), dict(first)]
    lines[at] = "[INFO] " + json.dumps(record)
    log.write_text("\n".join(lines))
    with Store(tmp_path / "after_only.db") as store:
        store.ingest(campaign)
        cell_id = store.conn.execute("SELECT id FROM cells WHERE path = ?", (str(after),)).fetchone()[0]
        slots = store.conn.execute(
            "SELECT shape, occurrence, before_measurement_id, after_measurement_id, reason FROM ab_slot_rows "
            "WHERE after_cell_id = ?",
            (cell_id,),
        ).fetchall()
        after_rows = store.conn.execute("SELECT count(*) FROM measurements WHERE cell_id = ?", (cell_id,)).fetchone()[0]
        assert len({s[3] for s in slots if s[3] is not None}) == after_rows  # every after row has its slot
        only_after = [s for s in slots if s[2] is None]
        assert len(only_after) == 2 and all(s[4] == "MISSING_SIDE" for s in only_after)
        assert sorted(s[1] for s in only_after) == [1, 2]  # the new shape, and the second of a shared one
        assert any(s[4] is None for s in slots)  # the shared rows still pair
        assert snapshot(store.conn) == from_scratch(tmp_path / "after_only.db", tmp_path)
