"""Store.compute_fingerprints: fingerprints from the IR stored in the
database equal the ones computed from the files on disk the way the harness
(and ingest) computes them, under every rule, in worker processes or not,
and whatever part of a rule the store already holds."""

from pathlib import Path

import pytest

from zlstore import Store
from zlstore.store import fingerprints as fingerprinting
from zlstore.read import ttgir

from .test_ttgir import fingerprint


def tree_fingerprints(store, rule) -> dict:
    """Every cell's fingerprint under rule from its files on disk, by the str
    path: each .ttgir decoded with surrogateescape, normalized, hashed."""
    r = ttgir.get_rule(rule)
    out = {}
    for cell_id, path in store.conn.execute("SELECT id, path FROM cells"):
        kernels = [
            (f.name[: -len(".ttgir")], f.read_bytes().decode("utf-8", "surrogateescape"))
            for f in Path(path, "triton_cache").rglob("*.ttgir")
        ]
        index = Path(path, "index.tsv")
        out[cell_id] = fingerprint(r, kernels, index.read_bytes() if index.exists() else None)
    return out


def stored(store, rule) -> dict:
    return dict(store.conn.execute("SELECT cell_id, fingerprint FROM fingerprints WHERE rule = ?", (rule,)))


def forget(store, rule, digests_where="1"):
    store.conn.execute("DELETE FROM fingerprints WHERE rule = ?", (rule,))
    store.conn.execute(f"DELETE FROM ir_digests WHERE rule = ? AND ({digests_where})", (rule,))


@pytest.fixture(params=[0, 2], ids=["in-process", "workers"])
def workers(request, monkeypatch):
    """The rescore in this process, or in two forked workers however few texts."""
    monkeypatch.setattr(fingerprinting, "worker_count", lambda n: request.param)
    return request.param


@pytest.mark.parametrize("rule", list(ttgir.RULES))
def test_rescore_from_stored_ir_equals_the_files_on_disk(example_store, workers, rule):
    expected = tree_fingerprints(example_store, rule)
    assert len(expected) > 50
    forget(example_store, rule)
    computed = example_store.compute_fingerprints(rule)
    assert computed == len(expected)
    assert stored(example_store, rule) == expected
    assert example_store.compute_fingerprints(rule) == 0  # nothing left to do


def test_rescore_equals_what_ingest_stored(example_source, tmp_path, workers):
    """Ingest fingerprints the cells from the files (str path); a rescore of
    the same rule from the stored bytes gives the same, cell by cell."""
    source, _ = example_source
    with Store(tmp_path / "fresh.db") as store:
        store.ingest(source)
        held = {r for (r,) in store.conn.execute("SELECT DISTINCT rule FROM fingerprints")}
        assert "v3" in held
        for rule in held:
            by_ingest = stored(store, rule)
            digests = dict(store.conn.execute("SELECT ir_hash, digest FROM ir_digests WHERE rule = ?", (rule,)))
            forget(store, rule)
            store.compute_fingerprints(rule)
            # v4 is an ingest's for screening cells only: the rescore adds the rest
            assert {c: f for c, f in stored(store, rule).items() if c in by_ingest} == by_ingest, rule
            again = dict(store.conn.execute("SELECT ir_hash, digest FROM ir_digests WHERE rule = ?", (rule,)))
            assert again == digests, rule


def test_blobs_are_zlib_streams_both_ways(example_store, workers):
    """A blob's data is a zlib stream: stdlib zlib reads what ingest wrote
    (through ISA-L), and a rescore reads what zlib wrote (a store from a
    release before ISA-L) to the same fingerprints as the files on disk."""
    import zlib

    rows = example_store.conn.execute("SELECT hash, size, data FROM blobs").fetchall()
    assert len(rows) > 20
    for ir_hash, size, data in rows:
        raw = zlib.decompress(data)
        assert len(raw) == size and ttgir.digest(raw) == ir_hash
    with example_store.conn:
        example_store.conn.executemany(
            "UPDATE blobs SET data = ? WHERE hash = ?",
            [(zlib.compress(zlib.decompress(data), 6), h) for h, _, data in rows],
        )
    for rule in ("v3", "v4"):
        expected = tree_fingerprints(example_store, rule)
        forget(example_store, rule)
        example_store.compute_fingerprints(rule)
        assert stored(example_store, rule) == expected, rule


@pytest.mark.parametrize("rule", ["v1", "v3", "v4"])
def test_rescore_uses_the_digests_the_store_holds(example_store, workers, rule):
    """Cells without a fingerprint whose texts are digested already (some or
    all of them): the stored digests and the new ones combine alike."""
    expected = stored(example_store, rule)
    forget(example_store, rule, digests_where="0")
    assert example_store.compute_fingerprints(rule) == len(expected)
    assert stored(example_store, rule) == expected
    forget(example_store, rule, digests_where="substr(ir_hash, 1, 1) < '8'")
    example_store.conn.execute("DELETE FROM fingerprints WHERE rule = ? AND cell_id % 3 = 0", (rule,))
    example_store.compute_fingerprints(rule)
    assert stored(example_store, rule) == expected


def test_a_text_no_worker_digested_is_digested_here(example_store, monkeypatch):
    """A kernel's text with no digest, new or stored (a kernel stored, or a
    digest deleted, after the rescore listed what it lacked), is read and
    digested in this process, and its digest stored too."""
    expected = stored(example_store, "v3")
    digests = dict(example_store.conn.execute("SELECT ir_hash, digest FROM ir_digests WHERE rule = 'v3'"))
    forget(example_store, "v3")
    listed = fingerprinting.digesting

    def lose_some(conn, path, rule, hashes, batch):  # as if these had been digested before
        return listed(conn, path, rule, [h for h in hashes if h[0] > "7"], batch)

    monkeypatch.setattr(fingerprinting, "digesting", lose_some)
    example_store.compute_fingerprints("v3")
    assert stored(example_store, "v3") == expected
    assert dict(example_store.conn.execute("SELECT ir_hash, digest FROM ir_digests WHERE rule = 'v3'")) == digests


def test_a_text_the_store_lacks_is_an_error_not_a_wrong_fingerprint(example_store):
    rule = ttgir.get_rule("v3")
    with pytest.raises(LookupError, match="not stored"):
        fingerprinting.late_digests(example_store.conn, rule, {"0" * 64}, 500)


def key(kernels):
    """A kernels key as the store's query spells it."""
    return ",".join(f"{name.encode().hex().upper()}/{h.encode().hex().upper()}" for name, h in kernels) or None


def test_kernels_keys_read_back_whatever_the_names(store):
    names = ["abs_kernel", "a,b/c", "caf\u00e9", "", "nul\x00in", "\U0001d518ni"]
    store.conn.execute("INSERT INTO roots (name, path, kind) VALUES ('r', '/r', 'screen')")
    cell = store.conn.execute("INSERT INTO cells (root_id, path, relpath) VALUES (1, '/r/c', 'c')").lastrowid
    for n, name in enumerate(names):
        store.conn.execute(
            "INSERT OR IGNORE INTO blobs (hash, kind, size, data) VALUES (?, 'ttgir', 0, x'')", (f"h{n}",)
        )
        store.conn.execute(
            "INSERT INTO kernels (cell_id, name, ir_hash, convert_layouts) VALUES (?, ?, ?, 0)", (cell, name, f"h{n}")
        )
    (row,) = fingerprinting.cells_lacking(store.conn, ttgir.get_rule("v3"))
    assert row[0] == cell and row[1] is None
    assert fingerprinting._kernels(row[2]) == [(name, f"h{n}") for n, name in enumerate(names)]
    assert fingerprinting._kernels(None) == []


def test_cells_with_the_same_kernels_share_a_combine_but_not_an_index():
    """The combiner combines each kernels key once (cells 1 and 2 list the
    same kernels in another order: two keys, one fingerprint) and, under v1,
    keys on the index.tsv hash too; it combines a key once all of its texts'
    digests are in, whatever order they arrive in."""
    digests = [("h2", "d2"), ("h1", "d1")]
    cells = [
        (1, "i1", [("a", "h1"), ("b", "h2")]),
        (2, "i2", [("b", "h2"), ("a", "h1")]),
        (3, None, [("a", "h1")]),
        (4, "i1", []),
    ]
    for rule in ttgir.RULES.values():
        combiner = fingerprinting.Combiner(rule, [(cell_id, index, key(kernels)) for cell_id, index, kernels in cells])
        assert combiner.waited() == {"h1", "h2"}
        for pair in digests:
            combiner.add([pair])
        assert not combiner.waited()
        want = [
            (cell_id, rule.name, ttgir.combine(rule, [(n, dict(digests)[h]) for n, h in kernels], index))
            for cell_id, index, kernels in cells
        ]
        assert combiner.rows() == want
        fingerprints = {cell_id: fp for cell_id, _, fp in combiner.rows()}
        assert (fingerprints[1] == fingerprints[2]) == (not rule.hashes_index)
        assert len(combiner.done) == 4


def test_rescore_of_odd_bytes_equals_the_files_on_disk(tmp_path, workers):
    """Texts with annotations in every position, CRLF, bytes that are not
    UTF-8 and characters that are, some shared by several cells: stored,
    then rescored under every rule, as the str path gives them from disk."""
    import random

    from .test_ingest import record, write_cell, write_root_env
    from .test_ttgir_raw import random_text

    rng = random.Random(11)
    texts = [random_text(rng) for _ in range(40)]
    root = tmp_path / "runs" / "ab_rlc_odd"
    write_root_env(root)
    for n in range(16):
        cell = write_cell(
            root / f"op{n}_float16_{'before' if n % 2 else 'after'}",
            record(op=f"op{n}"),
            env={"RC": 0},
            index=f"k\t{n}\n",
        )
        for k in range(rng.randrange(4)):
            path = cell / "triton_cache" / f"H{n}x{k}" / f"kern{k}.ttgir"
            path.parent.mkdir(parents=True)
            path.write_bytes(rng.choice(texts))
    with Store(tmp_path / "odd.db") as store:
        store.ingest(tmp_path / "runs")
        assert store.conn.execute("SELECT count(*) FROM kernels").fetchone()[0] > 10
        for rule in ttgir.RULES:
            expected = tree_fingerprints(store, rule)
            forget(store, rule)
            assert store.compute_fingerprints(rule) == len(expected) == 16
            assert stored(store, rule) == expected, rule


def test_nothing_to_compute_takes_no_write_lock(example_store):
    """resolve_rule calls compute_fingerprints on every query with a rule:
    when the store lacks nothing it must not write (nor wait for the lock)."""
    statements: list[str] = []
    example_store.conn.set_trace_callback(statements.append)
    try:
        assert example_store.compute_fingerprints("v3") == 0
    finally:
        example_store.conn.set_trace_callback(None)
    assert not [s for s in statements if s.lstrip().upper().startswith(("BEGIN", "INSERT", "COMMIT"))]


@pytest.mark.parametrize(
    "command",
    [
        ["screen"],
        ["export", "ab_rlc_20261012_101500"],
        ["rescore"],
        ["compare", "ab_rlc_20261012_101500", "ab_rlc_20261014_083000"],
    ],
)
def test_a_command_that_reads_judges_under_any_rule_without_writing(example_source, tmp_path, command):
    """Only screening cells are judged, and an ingest gives them every rule:
    `--rule v4` computed v4 for every campaign cell too, writing the store
    (and failing on one this user cannot write)."""
    from click.testing import CliRunner

    from zlstore.cli import cli

    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(example_source[0])
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        lacking = store.conn.execute(
            "SELECT count(*) FROM cells WHERE NOT EXISTS (SELECT 1 FROM fingerprints f "
            "WHERE f.cell_id = cells.id AND f.rule = 'v4')"
        ).fetchone()[0]
    assert lacking > 0  # the campaigns' cells, under v4
    before = db.read_bytes()
    result = CliRunner().invoke(cli, [*command, "--rule", "v4", "--db", str(db)])
    assert result.exit_code in (0, 1), result.output
    assert db.read_bytes() == before
    assert not (tmp_path / "s.db-wal").exists() or (tmp_path / "s.db-wal").stat().st_size == 0


def test_a_text_its_rule_leaves_alone_is_not_read(example_store, monkeypatch):
    """Ingest keeps which triggers each text holds (blobs.markers); a rescore
    reads only the texts holding one of its rule's, and gives the fingerprints
    of a rescore that reads every text (markers unknown: stored before
    release 3)."""
    monkeypatch.setattr(fingerprinting, "worker_count", lambda n: 0)  # read here, where it can be seen
    read = []
    real = fingerprinting._read_blobs

    def read_blobs(conn, hashes):
        read.extend(hashes)
        return real(conn, hashes)

    monkeypatch.setattr(fingerprinting, "_read_blobs", read_blobs)
    import zlib

    holds = {
        h: raw
        for h, raw in (
            (h, zlib.decompress(d))
            for h, d in example_store.conn.execute("SELECT hash, data FROM blobs WHERE kind = 'ttgir'")
        )
    }
    for rule in ("v3", "v4"):
        rule_triggers = ttgir.get_rule(rule).triggers
        assert rule_triggers is not None
        triggers = [t.encode() for t in rule_triggers]
        expected = tree_fingerprints(example_store, rule)
        forget(example_store, rule)
        read.clear()
        example_store.compute_fingerprints(rule)
        assert stored(example_store, rule) == expected
        assert set(read) == {h for h, raw in holds.items() if any(t in raw for t in triggers)}, rule
        assert 0 < len(read) < len(holds) or rule == "v4"
    example_store.conn.execute("UPDATE blobs SET markers = NULL")
    forget(example_store, "v3")
    read.clear()
    example_store.compute_fingerprints("v3")
    assert stored(example_store, "v3") == tree_fingerprints(example_store, "v3")
    assert set(read) == set(holds)
