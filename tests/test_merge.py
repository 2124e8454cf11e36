"""Merging stores made elsewhere: by content, a root whole or not at all,
the newer content kept, sources only read."""

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from zlstore import Store, db
from zlstore.store import derive, merge, roots

from .judging import invoke, json_out, judged
from .test_roots import CAMPAIGN, SCREEN, every_row, ingest, two_roots_named_alike, settled  # noqa: F401

V1 = Path(__file__).parent / "data" / "store-v1.db"


def run_merge(target, *sources, code=0):
    result = invoke(target, "merge", *sources, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


@pytest.fixture
def two_hosts(example_tree, tmp_path):
    """The example tree as two hosts hold it (different absolute paths):
    host A ran card 0 of the campaign and one screening, host B the rest;
    a.db and b.db are their stores, single.db one host's ingest of it all."""
    tree, _ = example_tree
    host_a, host_b = tmp_path / "hostA" / "runs", tmp_path / "hostB" / "data" / "runs"
    shutil.copytree(tree, host_a)
    shutil.copytree(tree, host_b)
    ingest(tmp_path / "a.db", host_a / CAMPAIGN / "card0", host_a / SCREEN)
    ingest(
        tmp_path / "b.db",
        host_b / CAMPAIGN / "card1",
        host_b / CAMPAIGN / "card2",
        *(p for p in host_b.iterdir() if p.name.startswith("ab_rlc_") and p.name != SCREEN),
    )
    ingest(tmp_path / "single.db", tree)
    return tmp_path / "a.db", tmp_path / "b.db", tmp_path / "single.db"


def test_two_hosts_stores_merge_into_what_one_host_would_have_stored(two_hosts, tmp_path):
    a, b, single = two_hosts
    summary = run_merge(tmp_path / "m.db", a, b, code=1)  # host A's screening has a run.log cut off
    assert (summary["roots"], summary["roots_added"], summary["cells_added"]) == (4, 4, 72)
    assert summary["conflicts"] == [] and summary["problems"] == [] and summary["open_problems"] == 1
    with sqlite3.connect(tmp_path / "m.db") as raw:  # not a Store, which would re-pair what was left stale
        assert derive.stale(raw) is False
    merged = judged(tmp_path / "m.db")
    assert merged == judged(single)
    rules = "SELECT rule, count(*) FROM fingerprints GROUP BY rule"
    with sqlite3.connect(tmp_path / "m.db") as one, sqlite3.connect(single) as other:
        assert one.execute(rules).fetchall() == other.execute(rules).fetchall()  # v4: the screening cells only
    assert len(merged["screen"]) == 18 and merged["ab"] and merged["noise"]
    run_merge(tmp_path / "reversed.db", b, a, code=1)
    assert judged(tmp_path / "reversed.db") == merged
    with Store(tmp_path / "m.db") as store:
        # the campaign is one root, B's half joined to A's, at no path of this
        # host: where a source says a tree is, is not trusted (roots.MERGED)
        ((campaign_path,),) = store.conn.execute("SELECT path FROM roots WHERE name = ?", (CAMPAIGN,))
        assert campaign_path.startswith(roots.MERGED)
        assert (
            store.conn.execute("SELECT count(*) FROM cells WHERE path LIKE ? || '/%'", (campaign_path,)).fetchone()[0]
            == 36
        )
        assert (
            store.conn.execute(
                "SELECT count(*) FROM cells JOIN roots ON roots.id = cells.root_id "
                "WHERE cells.path <> roots.path || '/' || cells.relpath"
            ).fetchone()[0]
            == 0
        )
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        logged = [r[0] for r in store.conn.execute("SELECT command FROM ingest_runs ORDER BY id")]
    assert logged == ["merge", "ingest", "ingest"]  # this merge, then each source's own ingest


def test_merging_twice_adds_nothing(two_hosts, tmp_path):
    a, b, _ = two_hosts
    target = tmp_path / "m.db"
    run_merge(target, a, b, code=1)
    before = every_row(target)
    summary = run_merge(target, a, b, a, code=1)  # the problem carried the first time is still open
    assert (summary["cells_added"], summary["cells_replaced"], summary["cells_unchanged"]) == (0, 0, 100)
    assert (summary["roots_added"], summary["log_runs_added"], summary["ir_texts_added"]) == (0, 0, 0)
    after = every_row(target)
    assert len(after.pop("ingest_runs")) == len(before.pop("ingest_runs")) + 1  # this merge's own line
    assert after == before


def test_a_root_is_merged_whole_or_not_at_all(two_hosts, tmp_path, monkeypatch):
    a, b, single = two_hosts
    target = tmp_path / "m.db"
    derived, calls = derive.derive, []

    def failing_second_root(conn, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # a fault of that root's rows (a disk's fault stops the merge: test_merge_safety.py)
            raise sqlite3.IntegrityError("CHECK constraint failed: kind IN ('screen', 'repeat', 'campaign')")
        return derived(conn, **kwargs)

    names = [n for (n,) in sqlite3.connect(a).execute("SELECT name FROM roots ORDER BY id")]
    with Store(target) as store:
        monkeypatch.setattr(derive, "derive", failing_second_root)
        summary = merge.merge(store, [a])
        monkeypatch.undo()
    assert len(names) == 2 and summary["roots"] == 1
    assert f"root {names[1]} " in summary["problems"][0]["message"]
    with Store(target) as store:
        stored = dict(
            store.conn.execute(
                "SELECT roots.name, count(cells.id) FROM roots LEFT JOIN cells ON cells.root_id = roots.id GROUP BY roots.id"
            )
        )
    with Store(a) as source:
        whole = dict(
            source.conn.execute(
                "SELECT roots.name, count(*) FROM roots JOIN cells ON cells.root_id = roots.id GROUP BY roots.id"
            )
        )
    assert stored == {names[0]: whole[names[0]]}
    assert summary["cells_added"] == whole[names[0]]
    run_merge(target, a, b, code=1)  # the failed root merges next time, the rest is there already
    assert judged(target) == judged(single)


def test_the_newer_content_of_a_cell_wins_and_is_named(example_tree, tmp_path):
    tree, _ = example_tree
    host_a, host_b = tmp_path / "hostA", tmp_path / "hostB"
    shutil.copytree(tree, host_a)
    shutil.copytree(tree, host_b)
    cell = Path(CAMPAIGN) / "card0"
    cell = next((host_b / cell).glob("ab_*/*/r1/after"))
    run_log = cell / "run.log"
    run_log.write_text(run_log.read_text().replace('"latency": 0.', '"latency": 1.'))
    ingest(tmp_path / "a.db", host_a)
    ingest(tmp_path / "b.db", host_b)
    with sqlite3.connect(tmp_path / "a.db") as old:  # host A's store was made first
        old.execute("UPDATE cells SET ingested_at = '2026-10-01T00:00:00+00:00'")
    relpath = str(cell.relative_to(host_b / CAMPAIGN))
    forward = run_merge(tmp_path / "ab.db", tmp_path / "a.db", tmp_path / "b.db", code=1)
    backward = run_merge(tmp_path / "ba.db", tmp_path / "b.db", tmp_path / "a.db", code=1)
    assert [(c["cell"], c["kept"], c["source"]) for c in forward["conflicts"]] == [
        (relpath, "source", str(tmp_path / "b.db"))
    ]
    assert [(c["cell"], c["kept"], c["source"]) for c in backward["conflicts"]] == [
        (relpath, "target", str(tmp_path / "a.db"))
    ]
    assert forward["cells_replaced"] == 1 and backward["cells_replaced"] == 0
    assert judged(tmp_path / "ab.db") == judged(tmp_path / "ba.db") == judged(tmp_path / "b.db")
    assert judged(tmp_path / "ab.db") != judged(tmp_path / "a.db")
    with Store(tmp_path / "ab.db") as store:
        ((message,),) = store.conn.execute(
            "SELECT message FROM ingest_problems JOIN ingest_runs ON ingest_runs.id = run_id "
            "WHERE command = 'merge' AND file LIKE ?",
            (f"%{relpath}",),
        )
    assert message.startswith(
        f"its content differs between the target and {tmp_path / 'b.db'}: kept the newer, the source's"
    )


def test_a_problem_a_source_found_comes_along_open_and_is_counted_until_it_is_fixed(example_tree, tmp_path):
    """A source whose ingest found a problem still open (the example's run.log
    cut off by a timeout kill) merges with that problem open in the target,
    named with its root and cell, counted in the summary, exit 1: the same
    as an ingest of the tree there would say. Once the file is fixed and the
    source ingests it again, a merge closes it, as the source did."""
    tree, _ = example_tree
    cut = tree / SCREEN / "sort_bfloat16_after" / "run.log"
    ingest(tmp_path / "a.db", tree)
    result = invoke(tmp_path / "m.db", "merge", tmp_path / "a.db")
    assert result.exit_code == 1, result.output
    assert "problem: 1 found where the merged stores were ingested, open here" in result.stderr
    assert result.stdout.rstrip().endswith("0 conflicts, 1 problem")
    listed = invoke(tmp_path / "m.db", "problems", SCREEN, "--json")
    assert listed.exit_code == 1
    assert [(p["file"], p["line"], p["root"], p["cell"]) for p in json.loads(listed.stdout)] == [
        (str(cut), 26, SCREEN, "sort_bfloat16_after")
    ]
    with Store(tmp_path / "again.db") as store:
        summary = merge.merge(store, [tmp_path / "a.db"])
    assert (summary["problems"], summary["open_problems"]) == ([], 1)

    cut.write_text("\n".join(cut.read_text().splitlines()[:25]) + "\n")
    ingest(tmp_path / "a.db", tree)  # closes it there
    fresh = run_merge(tmp_path / "fresh.db", tmp_path / "a.db")  # exit 0: closed in the source, closed here
    assert fresh["open_problems"] == 0 and invoke(tmp_path / "fresh.db", "problems").exit_code == 0
    again = run_merge(tmp_path / "m.db", tmp_path / "a.db", code=1)  # the fixed cell replaces the cut one
    assert again["cells_replaced"] == 1 and len(again["conflicts"]) == 1
    still = json.loads(invoke(tmp_path / "m.db", "problems", "--json").stdout)
    assert [p["message"] for p in still if "cut off" in p["message"]] == []
    assert again["open_problems"] == len(again["problems"]) == 1  # the conflict, named by this merge


def test_two_roots_of_one_name_and_one_path_on_two_hosts_stay_two(tmp_path):
    first, second = two_roots_named_alike(tmp_path)
    ingest(tmp_path / "a.db", first)
    shutil.rmtree(first)
    shutil.move(second, first)  # host 2 has its own root of that name, at the same path
    ingest(tmp_path / "b.db", first)
    result = invoke(tmp_path / "m.db", "merge", tmp_path / "a.db", tmp_path / "b.db")
    assert result.exit_code == 1
    assert f"another root named {first.name} is stored, from {roots.MERGED}" in result.stderr
    with Store(tmp_path / "m.db") as store:
        hosts = dict(store.conn.execute("SELECT host, path FROM roots"))
        # neither at the path its source named: two merged roots, each at its own identity
        assert hosts["node1"].startswith(roots.MERGED) and hosts["node2"].startswith(roots.MERGED)
        assert hosts["node1"] != hosts["node2"]
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 4
    assert len(json_out(invoke(tmp_path / "m.db", "screen", "--json"))) == 2


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_newer_schema_source_is_refused_before_anything_is_touched(two_hosts, tmp_path):
    a, _, _ = two_hosts
    newer = tmp_path / "newer.db"
    shutil.copy(a, newer)
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    target = tmp_path / "m.db"
    result = invoke(target, "merge", a, newer)
    assert result.exit_code == 2
    assert f"schema version {db.SCHEMA_VERSION + 1} is newer than this zlstore's" in result.output
    assert not target.exists()
    with Store(target) as store, pytest.raises(merge.SourceError):
        merge.merge(store, [a, newer])
    with Store(target) as store:
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 0
    for bad in (tmp_path / "nosuch.db", Path(__file__)):
        assert invoke(target, "merge", bad).exit_code == 2
    assert invoke(target, "merge", target).exit_code == 2


def test_an_older_source_merges_through_a_migrated_copy_and_is_not_changed(tmp_path):
    old = tmp_path / "old" / "store-v1.db"
    old.parent.mkdir()
    shutil.copy(V1, old)
    digest = sha256(old)
    summary = run_merge(tmp_path / "m.db", old)
    assert summary["cells_added"] == 8 and summary["roots_added"] == 1
    assert sha256(old) == digest and [p.name for p in old.parent.iterdir()] == ["store-v1.db"]
    upgraded = tmp_path / "upgraded.db"
    shutil.copy(V1, upgraded)
    assert judged(tmp_path / "m.db") == judged(upgraded)


def test_a_source_is_read_through_its_wal_and_left_as_it_was(example_tree, tmp_path):
    tree, _ = example_tree
    source = tmp_path / "live.db"
    with Store(source) as writer:  # a store still open elsewhere: its last commits only in the WAL
        writer.conn.execute("PRAGMA wal_autocheckpoint = 0")
        writer.ingest(tree)
        wal = Path(f"{source}-wal")
        files = {p: sha256(p) for p in (source, wal)}
        assert wal.stat().st_size > 0
        summary = run_merge(tmp_path / "m.db", source, code=1)
        assert summary["cells_added"] == 72
        assert {p: sha256(p) for p in files} == files
    assert judged(tmp_path / "m.db") == judged(source)


def test_merge_reports_progress_in_cells(two_hosts, tmp_path):
    a, b, _ = two_hosts
    seen = []
    with Store(tmp_path / "m.db") as store:
        merge.merge(store, [a, b], progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (72, 72)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_merge_keeps_the_rules_the_sources_computed(two_hosts, tmp_path):
    """A source that computed v4 (rescore --rule v4) brings it; every cell of
    the target then has v4, as after `zlstore rescore --rule v4` there."""
    a, b, _ = two_hosts
    with Store(a) as store:
        store.compute_fingerprints("v4")
    target = tmp_path / "m.db"
    run_merge(target, b, a, code=1)
    with Store(target) as store:
        lacking = store.conn.execute(
            "SELECT count(*) FROM cells WHERE id NOT IN (SELECT cell_id FROM fingerprints WHERE rule = 'v4')"
        )
        assert lacking.fetchone()[0] == 0
        assert not derive.stale(store.conn)


def test_two_contents_stored_in_the_same_instant_merge_alike_in_either_order(two_hosts, tmp_path):
    """A cell both stores hold differently, stamped with the same ingested_at
    (two hosts ingesting at once): the one kept does not depend on which
    store is merged first, and the conflict says how it was chosen."""
    a, b, _ = two_hosts
    other = tmp_path / "other.db"
    shutil.copy(a, other)
    with sqlite3.connect(other) as conn:
        (cell_id, stamp) = conn.execute("SELECT id, ingested_at FROM cells ORDER BY id LIMIT 1").fetchone()
        conn.execute("UPDATE measurements SET latency = latency * 3 WHERE cell_id = ?", (cell_id,))
        conn.execute("UPDATE cells SET content_sig = 'ff' || content_sig WHERE id = ?", (cell_id,))
    with sqlite3.connect(a) as conn:
        conn.execute("UPDATE cells SET ingested_at = ? WHERE id = ?", (stamp, cell_id))
    one, two = tmp_path / "ab.db", tmp_path / "ba.db"
    first = run_merge(one, a, other, code=1)
    run_merge(two, other, a, code=1)
    assert judged(one) == judged(two)
    (conflict,) = first["conflicts"]
    assert conflict["source_ingested_at"] == conflict["target_ingested_at"] == stamp
    problem = next(p["message"] for p in first["problems"] if "differs between" in p["message"])
    assert "the one whose content hash sorts last was kept" in problem


def test_a_damaged_source_is_refused_before_anything_is_merged(two_hosts, tmp_path):
    a, _, _ = two_hosts
    damaged = tmp_path / "damaged.db"
    shutil.copy(a, damaged)
    with sqlite3.connect(damaged) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root_page,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'measurements'").fetchone()
    with open(damaged, "r+b") as f:  # the measurements table's root page, garbage
        f.seek((root_page - 1) * page_size)
        f.write(bytes(range(256)) * (page_size // 256))
    target = tmp_path / "t.db"
    result = invoke(target, "merge", damaged)
    assert result.exit_code == 2 and "is damaged" in result.stderr, result.output
    assert not target.exists()
