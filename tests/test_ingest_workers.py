"""A whole-tree ingest prepares cells in forked worker processes, each
writing its results into a pipe of its own, while the main process writes
them in order. These tests run the real processes."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zlstore import Store
from zlstore.read import layout, parallel, parse

from .test_ingest import IR, record, write_cell, write_root_env

# Columns that say when, not what: they differ between any two ingests (a
# stat signature of files younger than two seconds holds the time it was taken).
WHEN = {"ingested_at", "started_at", "finished_at", "stat_sig"}
# walked_dirs: the walk's listings, kept only for directories older than
# two seconds (unchanged.RACY_NS): an ingest right after the tree was made
# keeps none, one a moment later all of them.
SKIPPED_TABLES = {"ingest_runs", "ingest_problems", "settings", "walked_dirs"}


def contents(db_path) -> dict:
    """Every table's rows, but for the columns that record times."""
    conn = sqlite3.connect(db_path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        found = {}
        for table in tables:
            if table in SKIPPED_TABLES:
                continue
            columns = [c[1] for c in conn.execute(f"PRAGMA table_info({table})") if c[1] not in WHEN]
            found[table] = sorted(conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall(), key=repr)
        return found
    finally:
        conn.close()


def ingest_with(workers, source, db_path, monkeypatch):
    monkeypatch.setattr(parallel, "worker_count", lambda cells: workers)
    with Store(db_path) as store:
        summary = store.ingest(source)
    return summary


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_store_what_one_process_stores(example_source, tmp_path, monkeypatch, workers):
    source, _ = example_source
    alone = ingest_with(0, source, tmp_path / "alone.db", monkeypatch)
    shared = ingest_with(workers, source, tmp_path / "shared.db", monkeypatch)
    assert alone == shared
    assert alone["cells_added"] > parallel.PARALLEL_MIN_CELLS
    one, two = contents(tmp_path / "alone.db"), contents(tmp_path / "shared.db")
    assert one.keys() == two.keys()
    for table in one:
        assert one[table] == two[table], table
    assert len(one["measurements"]) > 0 and len(one["ab_slot_rows"]) > 0


@pytest.fixture
def deadline():
    """Fail rather than hang: a lost worker must never leave the ingest waiting."""

    def expired(signum, frame):
        raise TimeoutError("the ingest hung")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_worker_that_dies_stops_the_ingest_with_an_error(example_source, tmp_path, monkeypatch, deadline):
    source, _ = example_source
    prepare = parallel.Preparer.prepare

    def dying(self, cell):
        if cell.name == "after" and cell.parent.name == "r2":
            os._exit(7)  # in the worker: as a segfault or an OOM kill would end it
        return prepare(self, cell)

    monkeypatch.setattr(parallel.Preparer, "prepare", dying)
    monkeypatch.setattr(parallel, "worker_count", lambda cells: 2)
    with Store(tmp_path / "died.db") as store:
        with pytest.raises(RuntimeError, match="ended before it was done"):
            store.ingest(source)
        # What was committed before the error is whole; nothing was half-written.
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        partial = store.conn.execute(
            "SELECT count(*) FROM cells WHERE n_rows != (SELECT count(*) FROM measurements m WHERE m.cell_id = cells.id)"
        ).fetchone()[0]
        assert partial == 0


def test_an_error_in_a_worker_outside_a_cell_is_raised_here(example_source, tmp_path, monkeypatch, deadline):
    source, _ = example_source

    def broken(self, cell):
        raise ValueError("no such thing")

    monkeypatch.setattr(parallel.Preparer, "prepare", broken)
    monkeypatch.setattr(parallel, "worker_count", lambda cells: 2)
    with Store(tmp_path / "broken.db") as store:
        with pytest.raises(RuntimeError, match="ValueError: no such thing"):
            store.ingest(source)


def children(pid) -> set:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return found


def alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


BIG_CELLS = 160


def make_big_tree(root):
    """Cells whose IR (300 KB each, every one different) fills a worker's
    pipe in a few cells: the workers are still at work, waiting on the
    writes, when the test stops the ingest."""
    write_root_env(root)
    rows = tuple((n, 0.01 + n / 1e6) for n in range(1, 20))
    for n in range(BIG_CELLS // 2):
        for side in ("before", "after"):
            noise = os.urandom(150_000).hex()
            text = IR + "".join(f"// {noise[i : i + 64]}\n" for i in range(0, len(noise), 64))
            write_cell(
                root / f"op{n:04d}_float16_{side}",
                record(f"op{n:04d}", latencies=rows),
                env={"RC": 0},
                kernels={f"h{n}{side}/k{n}.ttgir": text},
            )
    return root


def start_ingest(tmp_path):
    root = make_big_tree(tmp_path / "ab_rlc_big")
    db_path = tmp_path / "big.db"
    Store(db_path).close()
    process = subprocess.Popen(
        [sys.executable, "-m", "zlstore", "ingest", str(root), "--db", str(db_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    workers: set[int] = set()
    deadline = time.time() + 60
    while not workers and time.time() < deadline and process.poll() is None:
        workers |= children(process.pid)
        time.sleep(0.01)
    assert workers, "the ingest started no worker"
    wal = Path(f"{db_path}-wal")
    while (not wal.exists() or wal.stat().st_size < 4 << 20) and time.time() < deadline and process.poll() is None:
        time.sleep(0.01)  # until some cells are written (their IR spills into the WAL)
    assert any(alive(p) for p in workers), "the workers were done already: the test needs a bigger tree"
    return process, db_path, workers


def gone(pids, seconds=20) -> bool:
    deadline = time.time() + seconds
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers and /proc: Linux")
def test_ctrl_c_keeps_whole_cells_and_leaves_no_worker(tmp_path):
    process, db_path, workers = start_ingest(tmp_path)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
    out, err = process.communicate(timeout=60)
    assert process.returncode != 0
    assert b"Traceback" not in err  # neither the writer nor a worker dumps one
    assert gone(workers)
    with Store(db_path) as store:
        stored = store.conn.execute("SELECT count(*) FROM cells").fetchone()[0]
        assert 0 < stored < BIG_CELLS
        partial = store.conn.execute(
            "SELECT count(*) FROM cells WHERE n_rows != (SELECT count(*) FROM measurements m WHERE m.cell_id = cells.id)"
        ).fetchone()[0]
        assert partial == 0
        assert store.ingest(db_path.parent / "ab_rlc_big")["cells_added"] == BIG_CELLS - stored


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers and /proc: Linux")
def test_workers_end_when_the_writing_process_is_killed(tmp_path):
    process, _, workers = start_ingest(tmp_path)
    os.kill(process.pid, signal.SIGKILL)
    assert gone(workers), "a worker outlived the ingest it worked for"
    _, err = process.communicate(timeout=60)  # the workers' stderr too: it closes when they end
    assert b"Traceback" not in err


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_with_and_without_the_sparse_fields_are_stored_whole_in_file_order(tmp_path, monkeypatch, workers):
    """A row that sets none of parse.SPARSE_COLUMNS is INSERTed without them:
    rows that set some, in between, keep every field and the file's order."""
    root = tmp_path / "runs" / "screen_20260101_000000"
    write_root_env(root)
    sparse = {
        "gbps_base": 1.5,
        "gbps": 2.5,
        "tflops": 3.5,
        "utilization": 0.25,
        "accuracy": True,
        "compared_speedup": 1.25,
        "legacy_shape": [[8, 8]],
        "error_msg": "it failed",
        "surplus": 7,
    }
    result = [
        {"shape_detail": [[n]], "latency_base": 0.03, "latency": 0.02 + n / 1e4, **(sparse if n % 3 else {})}
        for n in range(1, 10)
    ]
    log = (
        "[INFO] "
        + json.dumps({"op_name": "abs", "dtype": "torch.float16", "mode": "kernel", "level": "core", "result": result})
        + "\n"
    )
    for i in range(parallel.PARALLEL_MIN_CELLS + 2):  # enough cells for workers
        write_cell(root / f"op{i:03d}_before", log, env={"RC": 0})
    ingest_with(workers, root.parent, tmp_path / "store.db", monkeypatch)
    parsed = parse.CellParser(parse.SCREENING_RULES).parse(
        parse.scan_cell(root / "op000_before"),
        layout.locate_root(root / "op000_before", {}),
        layout.load_root(layout.locate_root(root / "op000_before", {})),
    )
    conn = sqlite3.connect(tmp_path / "store.db")
    stored = conn.execute(
        f"SELECT {', '.join(parse.MEASUREMENT_COLUMNS[1:])} FROM measurements "
        "WHERE cell_id = (SELECT id FROM cells WHERE path LIKE '%/op000_before') "
        "ORDER BY id"
    ).fetchall()
    conn.close()
    assert [tuple(row) for row in stored] == parsed.stored_rows()
    assert [dense for dense, _ in parsed.insert_runs()] == [False, True] * 3  # n = 1-2, 3, 4-5, 6, 7-8, 9
    gbps = parse.MEASUREMENT_COLUMNS.index("gbps") - 1
    assert [row[gbps] for row in stored] == [None if n % 3 == 0 else 2.5 for n in range(1, 10)]
    assert all(row[parse.MEASUREMENT_COLUMNS.index("extra") - 1] for row in stored if row[gbps] is not None)


def test_a_bulk_ingest_collects_garbage_less_often_in_its_workers_too():
    """ingest.fewer_collections raises the young generation's threshold for
    the bulk write and the workers forked in it, and gives it back."""
    import gc

    from zlstore import forked
    from zlstore.store import ingest

    before = gc.get_threshold()
    with ingest.fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], ingest.YOUNG_COLLECTION_OBJECTS)
        with forked.Workers(1, lambda me: [gc.get_threshold()]) as workers:
            assert workers.next_from(0) == gc.get_threshold()
    assert gc.get_threshold() == before
    with ingest.fewer_collections(bulk=False):
        assert gc.get_threshold() == before


def test_a_batch_pairs_its_rounds_every_few_cells_and_stores_the_same(example_source, tmp_path, monkeypatch):
    """A batch pairs the rounds of its last PAIR_CELLS cells before it
    commits (ingest._Batch.written), so that the run's last commit, paid
    after the workers are done, has only the cells after them to pair. What
    is stored is what one pairing per commit stores."""
    from zlstore.store import ingest

    source, _ = example_source
    left = []  # stale rounds at each commit: what the commit's own pairing has to do
    commit = ingest._Batch.commit

    def counting_commit(batch, last=False):
        left.append(batch.conn.execute("SELECT count(*) FROM ab_stale_rounds").fetchone()[0])
        commit(batch, last)

    monkeypatch.setattr(ingest._Batch, "commit", counting_commit)
    monkeypatch.setattr(ingest, "PAIR_CELLS", 10**9)
    ingest_with(2, source, tmp_path / "per_commit.db", monkeypatch)
    per_commit, left[:] = list(left), []
    monkeypatch.setattr(ingest, "PAIR_CELLS", 3)
    ingest_with(2, source, tmp_path / "every_3.db", monkeypatch)
    assert max(per_commit) > 2 and max(left) <= 2  # a cell marks its one round
    one, two = contents(tmp_path / "per_commit.db"), contents(tmp_path / "every_3.db")
    for table in one:
        assert one[table] == two[table], table
    assert len(one["ab_slot_rows"]) > 0 and len(one["ab_range_rows"]) > 0


def test_a_bulk_ingest_writes_and_derives_with_a_larger_page_cache_and_gives_the_default_back(
    example_source, tmp_path, monkeypatch
):
    """The cells of a whole-tree ingest are written with BULK_CACHE_KIB of
    page cache (db.bulk_cache), and so is the run's final derivation, which
    rewrites every range; the connection has the default again afterwards.
    The cache is bounded whatever the campaign (bench/run.py's peak memory
    figure holds its size to it)."""
    from zlstore import db
    from zlstore.store import derive, ingest

    source, _ = example_source
    seen: dict[str, set[int]] = {"cells": set(), "final": set()}
    cell, derived = ingest.Ingester.cell, derive.derive

    def watched_cell(self, *args, **kwargs):
        seen["cells"].add(self.conn.execute("PRAGMA cache_size").fetchone()[0])
        return cell(self, *args, **kwargs)

    def watched_derive(conn, final=True, **kwargs):
        if final:
            seen["final"].add(conn.execute("PRAGMA cache_size").fetchone()[0])
        return derived(conn, final=final, **kwargs)

    monkeypatch.setattr(ingest.Ingester, "cell", watched_cell)
    with Store(tmp_path / "store.db") as store:  # its creation derives an empty store, with the default
        monkeypatch.setattr(derive, "derive", watched_derive)
        default = store.conn.execute("PRAGMA cache_size").fetchone()[0]
        store.ingest(source)
        after = store.conn.execute("PRAGMA cache_size").fetchone()[0]
    assert seen["cells"] == {-db.BULK_CACHE_KIB} and -db.BULK_CACHE_KIB != default
    assert seen["final"] == {-db.BULK_CACHE_KIB} and after == default


def test_a_bulk_ingest_checks_its_wal_in_once_after_the_final_derivation(example_source, tmp_path, monkeypatch):
    """The summary's commit and the final derivation's run with the bulk
    write's checkpoint interval (db.BULK_CHECKPOINT_PAGES): the WAL holding
    the last batch is checked in once, after both, not by each commit. The
    connection has its own interval again afterwards."""
    from zlstore import db
    from zlstore.store import ingest

    seen = {}
    finish, derive_final = ingest.Ingester._finish, ingest.Ingester._derive_final

    def watched(name, step):
        def run(self, *args, **kwargs):
            seen[name] = self.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
            return step(self, *args, **kwargs)

        return run

    monkeypatch.setattr(ingest.Ingester, "_finish", watched("summary", finish))
    monkeypatch.setattr(ingest.Ingester, "_derive_final", watched("final", derive_final))
    source, _ = example_source
    with Store(tmp_path / "store.db") as store:
        before = store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        store.ingest(source)
        after = store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    assert seen == {"summary": db.BULK_CHECKPOINT_PAGES, "final": db.BULK_CHECKPOINT_PAGES}
    assert after == before != db.BULK_CHECKPOINT_PAGES


def test_workers_count_the_cores_this_process_may_use():
    """A Slurm task given one CPU of a large node (or `taskset -c 0`) forks no
    workers: its one core would be shared three ways."""
    probe = (
        "import os, sys; from zlstore.read import parallel\n"
        "os.environ.pop('ZLSTORE_INGEST_WORKERS', None)\n"
        "os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        "print(parallel.worker_count(10_000))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"


def test_workers_keep_what_each_cell_ran_on(tmp_path, monkeypatch):
    """The real trees (whose cells record their GPU, driver and runtime in
    cell.env) ingested by workers and by one process store the same
    environments: a worker's cell used to reach the writer without them,
    so every campaign of 64 cells or more read as run on an unknown machine
    (and its noise floors as another machine's)."""
    from . import several_roots

    several_roots.unpack(tmp_path / "trees")
    alone = ingest_with(0, tmp_path / "trees", tmp_path / "alone.db", monkeypatch)
    shared = ingest_with(2, tmp_path / "trees", tmp_path / "shared.db", monkeypatch)
    assert alone == shared and alone["cells_added"] > parallel.PARALLEL_MIN_CELLS
    one, two = contents(tmp_path / "alone.db"), contents(tmp_path / "shared.db")
    assert one["environments"] and one["environments"] == two["environments"]
    assert one["cells"] == two["cells"]
    with sqlite3.connect(tmp_path / "shared.db") as conn:
        assert conn.execute("SELECT count(*) FROM cells WHERE environment_id IS NOT NULL").fetchone()[0] > 0
