"""Re-ingest: a stored cell is told unchanged from stat()s alone, without
listing its directories nor those above it, and every change the full scan
would see is still seen: files rewritten in place, added, removed,
directories added."""

import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time

import pytest
from click.testing import CliRunner

from zlstore import forked
from zlstore.store import ingest
from zlstore.read import layout, parallel, parse, unchanged
from zlstore.cli import cli

from .test_ingest import IR, record, write_cell, write_root_env

IR2 = IR.replace("f16", "f32")  # another text of the same size
assert len(IR2) == len(IR) and IR2 != IR


@pytest.fixture(autouse=True)
def settled(monkeypatch):
    """Files written a moment ago count as settled here (see unchanged.RACY_NS);
    the tests that change a file wait for the clock to move first."""
    monkeypatch.setattr(unchanged, "RACY_NS", 0)


def later():
    """Let the file system's clock tick, so that a change gets new times."""
    time.sleep(0.05)


def make_tree(root, n=3):
    """A screening root whose cells hold every kind of triton_cache entry:
    a kernel with its .json, one without, one nested two directories deep, a
    launcher directory with no .ttgir, an interrupted compile; and a cell
    with no triton_cache nor index.tsv."""
    write_root_env(root)
    for i in range(n):
        write_cell(
            root / f"op{i}_float16_before",
            record(op=f"op{i}"),
            env={"RC": 0},
            kernels={
                "aaa/k.ttgir": IR,
                "aaa/k.json": '{"num_warps": 4, "num_stages": 2}',
                "bbb/j.ttgir": IR,
                "ccc/ddd/n.ttgir": IR,
                "launcher/cuda_utils.so": "elf",
                "tmp.pid_1_2/k.ttgir": "half-written",
            },
            index="k\taaa\t/x/aaa/k.ttgir\n",
        )
        write_cell(root / f"op{i}_float16_after", record(op=f"op{i}"), env={"RC": 0})
    return root


def no_scans(monkeypatch):
    """From here on a cell that is listed and read fails the test."""

    def scan_cell(cell):
        raise AssertionError(f"{cell} was scanned")

    monkeypatch.setattr(parse, "scan_cell", scan_cell)


def kernels(store, cell):
    return store.conn.execute(
        "SELECT k.cache_dir, k.name, k.num_warps FROM kernels k JOIN cells c ON c.id = k.cell_id "
        "WHERE c.path = ? ORDER BY k.cache_dir, k.name",
        (str(cell),),
    ).fetchall()


def no_listings(monkeypatch, top) -> list:
    """From here on every directory at or under top that is listed goes into
    the list returned (those above it are looked at for root files)."""
    listed = []

    def scandir(path, real=os.scandir):
        if path == str(top) or path.startswith(str(top) + "/"):
            listed.append(path)
        return real(path)

    monkeypatch.setattr(layout.os, "scandir", scandir)
    return listed


def walk_listings(monkeypatch) -> list:
    """From here on every directory the walk lists goes into the list returned."""
    listed = []
    real = unchanged.Listings.add

    def add(self, directory, *a):
        listed.append(directory)
        return real(self, directory, *a)

    monkeypatch.setattr(unchanged.Listings, "add", add)
    return listed


def walked(store) -> set:
    return {r[0] for r in store.conn.execute("SELECT path FROM walked_dirs")}


def test_unchanged_cells_are_not_listed_nor_read(store, tmp_path, monkeypatch):
    root = make_tree(tmp_path / "ab_rlc_1")
    first = store.ingest(root)
    assert first["cells_added"] == 6 and first["kernels_added"] == 9
    no_scans(monkeypatch)
    listed = no_listings(monkeypatch, root)
    again = store.ingest(root)
    assert listed == []  # not even the root, whose listing was kept
    assert (again["cells_unchanged"], again["cells_added"], again["cells_replaced"], again["cells_failed"]) == (
        6,
        0,
        0,
        0,
    )
    assert again["roots"] == first["roots"] == 1
    # The signature names every directory below triton_cache it covers, the
    # launcher directory too, which no kernel names.
    sig = store.conn.execute("SELECT stat_sig FROM cells WHERE path LIKE '%op0_float16_before'").fetchone()[0]
    assert sig.startswith(unchanged.PREFIX) and '["aaa", "bbb", "ccc", "ccc/ddd", "launcher"]' in sig


@pytest.mark.parametrize(
    "change, kernels_after",
    [
        ("kernel directory added", [("aaa", "k", 4), ("bbb", "j", None), ("ccc/ddd", "n", None), ("eee", "e", None)]),
        (".json appearing", [("aaa", "k", 4), ("bbb", "j", 8), ("ccc/ddd", "n", None)]),
        (".json removed", [("aaa", "k", None), ("bbb", "j", None), ("ccc/ddd", "n", None)]),
        (".ttgir removed", [("aaa", "k", 4), ("ccc/ddd", "n", None)]),
        (
            ".ttgir added beside another",
            [("aaa", "k", 4), ("aaa", "k2", None), ("bbb", "j", None), ("ccc/ddd", "n", None)],
        ),
        (
            ".ttgir added deeper",
            [("aaa", "k", 4), ("bbb", "j", None), ("ccc/ddd", "n", None), ("ccc/ddd/x", "x", None)],
        ),
        (
            ".ttgir in the launcher directory",
            [("aaa", "k", 4), ("bbb", "j", None), ("ccc/ddd", "n", None), ("launcher", "l", None)],
        ),
        ("index.tsv removed", None),
        ("run.log rewritten", None),
    ],
)
def test_a_changed_cell_is_seen(store, tmp_path, change, kernels_after):
    root = make_tree(tmp_path / "ab_rlc_2")
    store.ingest(root)
    assert store.ingest(root)["cells_unchanged"] == 6  # signatures settled, as before every change below
    cell = root / "op1_float16_before"
    cache = cell / "triton_cache"
    before = kernels(store, cell)
    later()
    if change == "kernel directory added":
        (cache / "eee").mkdir()
        (cache / "eee" / "e.ttgir").write_text(IR)
    elif change == ".json appearing":
        (cache / "bbb" / "j.json").write_text('{"num_warps": 8}')
    elif change == ".json removed":
        (cache / "aaa" / "k.json").unlink()
    elif change == ".ttgir removed":
        (cache / "bbb" / "j.ttgir").unlink()
    elif change == ".ttgir added beside another":
        (cache / "aaa" / "k2.ttgir").write_text(IR2)
    elif change == ".ttgir added deeper":
        (cache / "ccc" / "ddd" / "x").mkdir()
        (cache / "ccc" / "ddd" / "x" / "x.ttgir").write_text(IR)
    elif change == ".ttgir in the launcher directory":
        (cache / "launcher" / "l.ttgir").write_text(IR)
    elif change == "index.tsv removed":
        (cell / "index.tsv").unlink()
    elif change == "run.log rewritten":
        text = (cell / "run.log").read_text()
        (cell / "run.log").write_text(text.replace('"latency": 0.02', '"latency": 0.03'))
        assert (cell / "run.log").read_text() != text
    summary = store.ingest(root)
    assert (summary["cells_replaced"], summary["cells_unchanged"], summary["cells_added"]) == (1, 5, 0), change
    assert kernels(store, cell) == (kernels_after or before)
    if change == "index.tsv removed":
        assert store.conn.execute("SELECT index_hash FROM cells WHERE path = ?", (str(cell),)).fetchone()[0] is None
    assert store.ingest(root)["cells_unchanged"] == 6  # and settled again


@pytest.mark.parametrize("change", ["ttgir rewritten", ".json rewritten"])
def test_a_cache_file_edited_in_place_is_seen_by_rehash(store, tmp_path, change):
    """Triton never rewrites a cache file; the quick check does not stat
    them one by one. An edit in place by hand needs --rehash, which reads
    every cell and replaces the one whose content changed."""
    root = make_tree(tmp_path / "ab_rlc_2")
    store.ingest(root)
    assert store.ingest(root)["cells_unchanged"] == 6
    cell = root / "op1_float16_before"
    cache = cell / "triton_cache"
    later()
    if change == "ttgir rewritten":
        with open(cache / "aaa" / "k.ttgir", "r+") as f:  # in place: same inode, same size
            f.write(IR2)
    else:
        with open(cache / "aaa" / "k.json", "r+") as f:
            f.write('{"num_warps": 8')
    assert store.ingest(root)["cells_unchanged"] == 6  # what the quick check trusts
    summary = store.ingest(root, rehash=True)
    assert (summary["cells_replaced"], summary["cells_unchanged"]) == (1, 5)
    if change == "ttgir rewritten":
        stored = store.conn.execute(
            "SELECT k.ir_hash FROM kernels k JOIN cells c ON c.id = k.cell_id WHERE c.path = ? AND k.cache_dir = 'aaa'",
            (str(cell),),
        ).fetchone()[0]
        assert stored == hashlib.sha256(IR2.encode()).hexdigest()
    else:
        assert ("aaa", "k", 8) in kernels(store, cell)
    assert store.ingest(root)["cells_unchanged"] == 6


def test_touched_cell_is_read_once_then_told_by_stat_again(store, tmp_path, monkeypatch):
    root = make_tree(tmp_path / "ab_rlc_3")
    store.ingest(root)
    later()
    os.utime(root / "op0_float16_before" / "triton_cache" / "ccc" / "ddd" / "n.ttgir")  # touched, same bytes
    os.utime(root / "op0_float16_before" / "triton_cache" / "ccc")  # a directory on the way, too
    touched = store.ingest(root)
    assert (touched["cells_unchanged"], touched["cells_replaced"]) == (6, 0)
    no_scans(monkeypatch)
    assert store.ingest(root)["cells_unchanged"] == 6


@pytest.mark.parametrize(
    "earlier",
    [
        "'a' || substr(stat_sig, length(stat_sig) - 63 - 39)",  # release 1: a sha1 of names, sizes and mtimes
        "'q2:' || substr(stat_sig, 4)",  # release 2: its kernel directories were read from the kernels table
    ],
)
def test_a_signature_from_before_is_checked_by_content_once(store, tmp_path, monkeypatch, earlier):
    root = make_tree(tmp_path / "ab_rlc_4")
    store.ingest(root)
    store.conn.execute(f"UPDATE cells SET stat_sig = {earlier}")
    store.conn.commit()
    upgraded = store.ingest(root)
    assert (upgraded["cells_unchanged"], upgraded["cells_replaced"]) == (6, 0)
    no_scans(monkeypatch)
    assert store.ingest(root)["cells_unchanged"] == 6


def test_a_fresh_cell_is_read_again_until_its_times_settle(store, tmp_path, monkeypatch):
    monkeypatch.setattr(unchanged, "RACY_NS", 3600 * 10**9)  # everything written in the last hour is fresh
    root = make_tree(tmp_path / "ab_rlc_5", n=1)
    store.ingest(root)
    sigs = [r[0] for r in store.conn.execute("SELECT stat_sig FROM cells")]
    assert all(s.startswith(unchanged.RACY) for s in sigs)
    scanned = []
    scan = parse.scan_cell

    def scan_cell(cell):
        scanned.append(cell)
        return scan(cell)

    monkeypatch.setattr(parse, "scan_cell", scan_cell)
    again = store.ingest(root)
    assert (again["cells_unchanged"], again["cells_replaced"], len(scanned)) == (2, 0, 2)


@pytest.mark.parametrize("how", ["children read the store", "another thread runs", "a child dies"])
def test_shares_in_forked_processes_find_what_one_walk_finds(store, tmp_path, monkeypatch, how):
    monkeypatch.setattr(unchanged, "SPLIT_MIN_CELLS", 1)
    monkeypatch.setattr(parallel, "worker_count", lambda cells: 3 if cells >= 16 else 0)  # the walk only
    if how == "another thread runs":  # it may hold a lock of SQLite's at the fork: no child opens the store
        done = threading.Event()
        threading.Thread(target=done.wait, daemon=True).start()
        monkeypatch.setattr(sqlite3, "connect", None)  # a child opening the store fails the test
    elif how == "a child dies":  # its share is then walked here
        parent, walk = os.getpid(), unchanged._walk
        monkeypatch.setattr(unchanged, "_walk", lambda *a: walk(*a) if os.getpid() == parent else os._exit(1))
    runs = tmp_path / "runs"
    make_tree(runs / "ab_rlc_6", n=4)
    make_tree(runs / "ab_rlc_7", n=4)
    first = store.ingest(runs)
    assert first["cells_added"] == 16
    later()
    changed = [runs / "ab_rlc_6" / "op0_float16_after", runs / "ab_rlc_7" / "op3_float16_before"]
    for cell in changed:
        (cell / "cell.env").write_text("RC=1\n")
    (runs / "ab_rlc_7" / "op9_float16_after").mkdir()  # new, late in the walk
    shutil.copy(runs / "ab_rlc_7" / "op0_float16_after" / "run.log", runs / "ab_rlc_7" / "op9_float16_after")
    order = []
    real = ingest.Ingester.cell

    def ingester_cell(self, cell, *a):
        order.append(cell)
        return real(self, cell, *a)

    monkeypatch.setattr(ingest.Ingester, "cell", ingester_cell)
    summary = store.ingest(runs)
    assert (summary["cells_replaced"], summary["cells_added"], summary["cells_unchanged"], summary["roots"]) == (
        2,
        1,
        14,
        2,
    )
    assert order == [changed[0], changed[1], runs / "ab_rlc_7" / "op9_float16_after"]  # the walk's order
    assert store.conn.execute("SELECT rc FROM cells WHERE path = ?", (str(changed[1]),)).fetchone()[0] == 1
    if how == "another thread runs":
        done.set()


def test_a_slow_process_takes_fewer_shares():
    parent = os.getpid()

    def job(i):
        time.sleep(0.001 if os.getpid() == parent else 0.03)  # the worker on a busy core
        return i, os.getpid()

    results = forked.shared_out(40, 1, job)
    assert [i for i, _ in results] == list(range(40))  # each once, in order
    here = sum(pid == parent for _, pid in results)
    assert 20 < here < 40  # fixed halves would give 20; the worker still took some


@pytest.mark.parametrize("how", ["dies", "raises"])
def test_a_share_a_worker_took_and_lost_is_done_here(how):
    parent = os.getpid()

    def job(i):
        time.sleep(0.005)
        if os.getpid() != parent and i % 4 == 3:
            if how == "dies":
                os._exit(1)
            raise OSError("a share that fails in the worker")
        return i, os.getpid()

    results = forked.shared_out(24, 2, job)
    assert [i for i, _ in results] == list(range(24))
    assert any(pid != parent for _, pid in results)  # the workers did take shares


def campaign_tree(top):
    """Cells two levels below their op directories, as a repeat run has them."""
    write_root_env(top, KIND="repeat")
    for op in ("op0", "op1"):
        for n in (1, 2):
            for side in ("before", "after"):
                write_cell(top / op / f"r{n}" / side, record(op=op), env={"RC": 0})
    return top


@pytest.mark.parametrize("change", ["cell added beside others", "round added", "op added", "times put back"])
def test_a_directory_with_a_new_entry_is_listed_again(store, tmp_path, monkeypatch, change):
    top = campaign_tree(tmp_path / "repeat_1")
    store.ingest(top)
    assert walked(store) == {
        str(top),
        str(top / "op0"),
        str(top / "op1"),
        *(str(top / op / r) for op in ("op0", "op1") for r in ("r1", "r2")),
    }
    later()
    new = {
        "cell added beside others": top / "op1" / "r2" / "extra",
        "round added": top / "op0" / "r3" / "before",
        "op added": top / "op2" / "r1" / "after",
        "times put back": top / "op1" / "r1" / "extra",
    }[change]
    before = os.stat(new.parent) if new.parent.exists() else None
    write_cell(new, record(op=new.parts[-3]), env={"RC": 0})
    if change == "times put back":  # mtime as it was: the ctime still tells the change
        assert before is not None
        os.utime(new.parent, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(new.parent).st_mtime_ns == before.st_mtime_ns
    listed = walk_listings(monkeypatch)
    summary = store.ingest(top)
    assert (summary["cells_added"], summary["cells_unchanged"]) == (1, 8)
    changed = {
        "cell added beside others": [new.parent],
        "round added": [top / "op0", new.parent],
        "op added": [top, top / "op2", new.parent],
        "times put back": [new.parent],
    }[change]
    assert listed == [str(directory) for directory in changed]  # the directories that changed, and new ones
    assert store.ingest(top)["cells_unchanged"] == 9


def test_a_directory_removed_is_forgotten_and_its_cells_are_not_counted(store, tmp_path):
    top = campaign_tree(tmp_path / "repeat_2")
    store.ingest(top)
    later()
    shutil.rmtree(top / "op1")
    summary = store.ingest(top)
    assert (summary["cells_unchanged"], summary["cells_added"]) == (4, 0)
    assert not any(path.startswith(str(top / "op1")) for path in walked(store))
    assert str(top / "op0" / "r1") in walked(store)


def test_a_directory_that_became_a_cell_is_found(store, tmp_path, monkeypatch):
    top = campaign_tree(tmp_path / "repeat_3")
    store.ingest(top)
    later()
    (top / "op0" / "r2" / "run.log").write_text(record(op="op0"))  # r2 is now a cell: its sides are not walked
    summary = store.ingest(top)
    assert summary["cells_added"] == 1 and summary["cells_unchanged"] == 6


def test_young_directories_are_listed_again(store, tmp_path, monkeypatch):
    monkeypatch.setattr(unchanged, "RACY_NS", 3600 * 10**9)
    top = campaign_tree(tmp_path / "repeat_4")
    store.ingest(top)
    assert walked(store) == set()
    listed = walk_listings(monkeypatch)
    assert store.ingest(top)["cells_added"] == 0
    assert len(listed) == 7


def test_the_listings_of_forked_shares_are_kept(store, tmp_path, monkeypatch):
    monkeypatch.setattr(unchanged, "SPLIT_MIN_CELLS", 1)
    monkeypatch.setattr(parallel, "worker_count", lambda cells: 3 if cells >= 16 else 0)
    runs = tmp_path / "runs"
    for name in ("repeat_5", "repeat_6", "repeat_7"):
        campaign_tree(runs / name)
    store.ingest(runs)
    kept = walked(store)
    assert len(kept) == 1 + 3 * 7
    store.conn.execute("DELETE FROM walked_dirs")
    store.conn.commit()
    assert store.ingest(runs)["cells_unchanged"] == 24  # in three processes
    assert walked(store) == kept
    listed = no_listings(monkeypatch, runs)
    assert store.ingest(runs)["cells_unchanged"] == 24
    assert listed == []


def test_cli_reingest_counts_stay_the_same(tmp_path):
    root = make_tree(tmp_path / "ab_rlc_8")
    db = str(tmp_path / "cli.db")
    runner = CliRunner()
    first = json.loads(runner.invoke(cli, ["ingest", str(root), "--db", db, "--json"]).stdout)
    again = json.loads(runner.invoke(cli, ["ingest", str(root), "--db", db, "--json"]).stdout)
    assert first["cells_added"] == 6 and first["roots"] == 1
    assert {k: again[k] for k in ("roots", "cells_unchanged", "cells_added", "rows_added", "problems")} == {
        "roots": 1,
        "cells_unchanged": 6,
        "cells_added": 0,
        "rows_added": 0,
        "problems": [],
    }
