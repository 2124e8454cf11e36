"""Ingest: every artifact exactly once, whole cells only, problems named by
file and line, provenance recorded."""

import json
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from zlstore import Store, db
from zlstore.store import ingest
from zlstore.show import judge
from zlstore.read import layout, ttgir
from zlstore.store.fingerprints import cell_rules
from zlstore.cli import cli

from .conftest import SAMPLES

CALIBER_ENV = {
    "ZL_BACKEND": "musa",
    "BENCH_LEVEL": "core",
    "ZL_ENABLE_CUDAGRAPH": "1",
    "ZL_ISOLATE_TUNER_CACHE": "0",
    "ZL_DIRECT_REPEAT": "100",
    "SHAPE_MODE": "file",
    "USE_FLAGTUNE": "0",
}
IR = 'module {\n  %1 = ttg.convert_layout %0 : tensor<1xf16> -> tensor<1xf16> loc(#loc1)\n}\n#loc1 = loc("/a/k.py":1:0)\n'


def record(op="topk", dtype="float16", latencies=((64, 0.02),)):
    result = [{"shape_detail": [[n]], "latency_base": 0.03, "latency": lat, "error_msg": None} for n, lat in latencies]
    return "[INFO] " + json.dumps(
        {"op_name": op, "dtype": "torch." + dtype, "mode": "kernel", "level": "core", "result": result}
    )


def write_cell(path, run_log="", env=None, kernels=None, index=None):
    """A cell the way the harness leaves it: run.log, triton_cache, index.tsv, then cell.env."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "run.log").write_text(run_log)
    for rel, text in (kernels or {}).items():
        (path / "triton_cache" / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / "triton_cache" / rel).write_text(text)
    if index is not None:
        (path / "index.tsv").write_text(index)
    if env is not None:
        (path / "cell.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return path


def write_root_env(root, **extra):
    root.mkdir(parents=True, exist_ok=True)
    env = {"KIND": "screen", "SWITCH": "FLAGTREE_MUSA_RLC_ENHANCE", **CALIBER_ENV, **extra}
    (root / "root.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))


def count(store, sql, params=()):
    return store.conn.execute(sql, params).fetchone()[0]


def independent_counts(path):
    """Records and rows counted the plain way, to check the parser against."""
    records = rows = 0
    for line in path.read_text().splitlines():
        if line.startswith("[INFO] {"):
            records += 1
            rows += len(json.loads(line[len("[INFO] ") :])["result"])
    return records, rows


def test_samples_ingest_with_every_record(store, tmp_path):
    root = tmp_path / "runs" / "ab_rlc_samples"
    write_root_env(root)
    expected_records = expected_rows = 0
    for n, sample in enumerate(sorted(SAMPLES.glob("*.log"))):
        cell = root / f"op{n}_before"
        cell.mkdir(parents=True)
        shutil.copy(sample, cell / "run.log")
        records, rows = independent_counts(sample)
        expected_records += records
        expected_rows += rows
    assert expected_rows > 100  # the samples really hold records
    summary = store.ingest(tmp_path / "runs")
    # before cells only: each pair's missing side is named, nothing else
    assert sorted(p["file"] for p in summary["problems"] if p["message"].startswith("MISSING_SIDE")) == sorted(
        str(cell) for cell in root.glob("op*_before")
    )
    assert len(summary["problems"]) == len(list(root.glob("op*_before")))
    assert summary["rows_added"] == expected_rows
    assert count(store, "SELECT count(*) FROM measurements") == expected_rows
    assert count(store, "SELECT sum(n_records) FROM cells") == expected_records
    # shape_detail objects are keyed canonically: sorted keys, no spaces.
    shapes = [r[0] for r in store.conn.execute("SELECT shape FROM measurements WHERE op_name = 'logspace'")]
    assert shapes and all(s.startswith('{"base":') and ": " not in s for s in shapes)


def test_reingest_adds_nothing_and_changed_cell_is_replaced(store, tmp_path):
    root = tmp_path / "ab_rlc_1"
    write_root_env(root)
    for side in ("before", "after"):
        write_cell(
            root / f"topk_float16_{side}",
            record(latencies=((64, 0.02), (128, 0.04))),
            env={"RC": 0},
            kernels={f"h{side}/topk.ttgir": IR},
        )
    first = store.ingest(root)
    assert (first["cells_added"], first["rows_added"]) == (2, 4)
    again = store.ingest(root)
    assert (again["cells_added"], again["cells_replaced"], again["cells_unchanged"], again["rows_added"]) == (
        0,
        0,
        2,
        0,
    )
    # Touched but identical: the content hash says unchanged.
    (root / "topk_float16_after" / "run.log").write_text(record(latencies=((64, 0.02), (128, 0.04))))
    touched = store.ingest(root)
    assert touched["cells_unchanged"] == 2 and touched["cells_replaced"] == 0
    # Really changed: replaced whole, never duplicated.
    (root / "topk_float16_after" / "run.log").write_text(record(latencies=((64, 0.01),)))
    changed = store.ingest(root)
    assert (changed["cells_replaced"], changed["cells_unchanged"], changed["rows_added"]) == (1, 1, 1)
    assert count(store, "SELECT count(*) FROM cells") == 2
    assert count(store, "SELECT count(*) FROM measurements") == 3
    assert (
        count(store, "SELECT count(*) FROM measurements m JOIN cells c ON c.id = m.cell_id WHERE c.side = 'after'") == 1
    )
    assert count(store, "SELECT count(*) FROM fingerprints") == 2 * len(cell_rules(store.conn, "screen"))
    assert count(store, "SELECT count(*) FROM kernels") == 2


def test_values_come_from_cell_env_then_path_then_root_then_screen_tsv(store, tmp_path):
    root = tmp_path / "ab_rlc_2"
    write_root_env(root, SHAPE_MODE="")  # the root leaves one caliber field to screen.tsv
    header = "op\tdtype\tverdict\telapsed_before\telapsed_after\trc_before\trc_after\tshape_mode\n"
    (root / "screen.tsv").write_text(header + "argmax\tfloat16\tNO_IR_DIFF\t12.5\t13.0\t0\t0\tdefault\r\n")
    write_cell(root / "argmax_float16_before", record("argmax"))  # an older cell: no cell.env
    write_cell(
        root / "argmax_float16_after",
        record("argmax"),
        env={"RC": "0\r", "ELAPSED_S": "9.5", "SHAPE_MODE": "file", "OP": "argmax"},
    )
    store.ingest(root)
    cells = {r["side"]: r for r in store.db.query("SELECT * FROM cell_summary")}
    before, after = cells["before"], cells["after"]
    assert (before["op"], before["dtype"], before["round"], before["card"]) == ("argmax", "float16", 0, None)
    assert before["card_source"] is None  # nothing on disk says which card: unknown, not guessed
    assert before["op_source"] == "path" and before["side_source"] == "path"
    assert (before["rc"], before["elapsed_s"]) == (0, 12.5)
    assert before["shape_mode"] == "default" and before["caliber_source"] == "root.env+screen.tsv"
    provenance = json.loads(store.conn.execute("SELECT provenance FROM cells WHERE side = 'before'").fetchone()[0])
    assert provenance["elapsed"] == "screen.tsv" and provenance["backend"] == "root.env"
    # cell.env wins over everything, and a CRLF never reaches a value.
    assert (after["rc"], after["elapsed_s"], after["shape_mode"]) == (0, 9.5, "file")
    assert after["op_source"] == "cell.env" and after["caliber_source"] == "cell.env+root.env"
    recorded = store.conn.execute("SELECT verdict, shape_mode, rc_after FROM recorded_verdicts").fetchone()
    assert recorded == ("NO_IR_DIFF", "default", 0)


def test_unknown_caliber_is_stored_and_named(store, tmp_path):
    root = tmp_path / "ab_rlc_3"
    root.mkdir()
    env = dict(CALIBER_ENV, RC=0)
    del env["USE_FLAGTUNE"]
    write_cell(root / "topk_before", record(), env=env)
    store.ingest(root)
    row = store.conn.execute("SELECT caliber_id, caliber_missing, n_rows FROM cells").fetchone()
    assert row == (None, "flagtune", 1)


def test_repeat_and_campaign_paths(store, tmp_path):
    campaign = tmp_path / "campaign_1"
    campaign.mkdir()
    (campaign / "campaign.env").write_text("KIND=campaign\nROUNDS=2\nCARDS=2\n")
    (campaign / "partition.tsv").write_text("card\top\tdtype\tweight_min\n1\tslice_scatter\tbfloat16\t3.5\n")
    cell = write_cell(
        campaign / "card1" / "ab_20261013_090001" / "slice_scatter" / "r2" / "after",
        record("slice_scatter", "bfloat16"),
        env={"RC": 0, **CALIBER_ENV},
    )
    store.ingest(tmp_path)
    row = store.db.execute(
        "SELECT r.name, r.kind, c.card, c.op, c.dtype, c.side, c.round, c.repeat_dir, c.dtype_source "
        "FROM cells c JOIN roots r ON r.id = c.root_id"
    ).fetchone()
    assert row == (
        "campaign_1",
        "campaign",
        1,
        "slice_scatter",
        "bfloat16",
        "after",
        2,
        "ab_20261013_090001",
        "partition.tsv",
    )
    assert store.record(cell)["cells_unchanged"] == 1


def test_screen_dir_names_with_underscores(store, tmp_path):
    root = tmp_path / "ab_rlc_4"
    write_root_env(root)
    for name in ("slice_scatter_before", "slice_scatter_float16_after", "fft_complex64_before"):
        write_cell(root / name, record())
    store.ingest(root)
    got = {tuple(r) for r in store.conn.execute("SELECT op, dtype, side FROM cells")}
    assert got == {
        ("slice_scatter", "", "before"),
        ("slice_scatter", "float16", "after"),
        ("fft", "complex64", "before"),
    }


def test_triton_cache_only_ttgir_counts(store, tmp_path):
    root = tmp_path / "ab_rlc_5"
    write_root_env(root)
    write_cell(
        root / "topk_before",
        record(),
        env={"RC": 0},
        kernels={
            "aaa/topk_kernel.ttgir": IR,
            "aaa/topk_kernel.json": '{"num_warps": 8, "num_stages": 3}',
            "aaa/__grp__topk_kernel.json": '{"child_paths": {}}',
            "tmp.pid_123_456/topk_kernel.ttgir": "half-written",
            "launcher/cuda_utils.so": "",
            "launcher/__grp__launcher.json": "{}",
        },
        index="topk_kernel\taaa\t/x/aaa/topk_kernel.ttgir\n",
    )
    # The same IR under another cache directory name: the fingerprint ignores it.
    write_cell(
        root / "topk_after",
        record(),
        env={"RC": 0},
        kernels={"zzz/topk_kernel.ttgir": IR},
        index="topk_kernel\tzzz\t/x/zzz/topk_kernel.ttgir\n",
    )
    store.ingest(root)
    store.compute_fingerprints("v4")  # not computed at ingest: the store holds v1-v3
    kernels = store.conn.execute(
        "SELECT name, cache_dir, convert_layouts, num_warps, num_stages FROM kernels ORDER BY cache_dir"
    ).fetchall()
    assert kernels == [("topk_kernel", "aaa", 1, 8, 3), ("topk_kernel", "zzz", 1, None, None)]
    fingerprints = dict(
        store.conn.execute("SELECT rule, count(DISTINCT fingerprint) FROM fingerprints GROUP BY rule").fetchall()
    )
    assert fingerprints == {"v1": 2, "v2": 1, "v3": 1, "v4": 1}  # only v1 hashes index.tsv
    assert count(store, "SELECT count(*) FROM blobs WHERE kind = 'ttgir'") == 1  # stored once


def test_bad_input_is_named_and_the_rest_goes_on(tmp_path):
    root = tmp_path / "ab_rlc_6"
    write_root_env(root)
    good = record(latencies=((64, 0.02),))
    write_cell(root / "topk_before", good + "\n" + good[:40] + "\n", env={"RC": 124})
    write_cell(root / "topk_after", good, env={"RC": 0})
    broken = write_cell(root / "sort_before", good, env={"RC": 0})
    (broken / "run.log").unlink()
    (broken / "run.log").mkdir()  # a directory where the log belongs: named, and read as no log
    (root / "cell.env.bak").write_text("x")
    db = tmp_path / "z.db"
    result = CliRunner().invoke(cli, ["ingest", str(root), "--db", str(db), "--json"])
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    problems = {(p["file"], p["line"]) for p in summary["problems"]}
    assert (str(root / "topk_before" / "run.log"), 2) in problems
    assert (str(broken / "run.log"), None) in problems
    assert "a directory, not a regular file" in result.stderr
    assert str(root / "topk_before" / "run.log") + ":2:" in result.stderr
    assert (summary["cells_added"], summary["cells_failed"]) == (3, 0)
    with Store(db) as store:
        assert count(store, "SELECT n_rows FROM cells WHERE op = 'sort'") == 0  # stored, with no log read
        # sort has no after cell: a missing side, derived from the cells, not a stored problem
        missing = [p for p in summary["problems"] if p["message"].startswith("MISSING_SIDE")]
        assert [p["file"] for p in missing] == [str(broken)]
        assert count(store, "SELECT count(*) FROM ingest_problems") == len(summary["problems"]) - len(missing)
        assert count(store, "SELECT count(*) FROM measurements") == 2


def test_ingest_fingerprints_screening_cells_under_every_rule(example_source, tmp_path):
    """A screening cell is fingerprinted under every rule when it is stored
    (the verdicts compare rules; the strictest says whether the axis is
    live); a campaign's cells only under the current rule and the raw-text
    rules: v4 is computed from the stored IR when first asked for."""
    source, manifest = example_source
    screen = sorted(p for p in source.iterdir() if p.name.startswith("ab_rlc_"))[0]
    campaign = next(p for p in source.iterdir() if p.name.startswith("campaign_"))
    with Store(tmp_path / "r.db") as store:
        store.ingest([screen, campaign])

        def held(kind):
            return {
                r
                for (r,) in store.conn.execute(
                    "SELECT DISTINCT f.rule FROM fingerprints f JOIN cells ON cells.id = f.cell_id "
                    "JOIN roots ON roots.id = cells.root_id WHERE roots.kind = ?",
                    (kind,),
                )
            }

        assert held("screen") == set(ttgir.RULES)
        assert held("campaign") == {"v1", "v2", "v3"}
        lacking = store.conn.execute(
            "SELECT count(*) FROM cells JOIN roots ON roots.id = cells.root_id WHERE roots.kind = 'screen' "
            "AND (SELECT count(*) FROM fingerprints f WHERE f.cell_id = cells.id) <> ?",
            (len(ttgir.RULES),),
        ).fetchone()[0]
        assert lacking == 0
        assert all(v["verdict"] is not None for v in judge.verdicts(store, rule="v4"))
        store.compute_fingerprints("v4")
        assert held("campaign") == set(ttgir.RULES)


def test_fingerprints_for_a_new_rule_come_from_the_store_alone(example_store_path, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(example_store_path, path)
    for suffix in ("-wal", "-shm"):
        if (example_store_path.parent / (example_store_path.name + suffix)).exists():
            shutil.copy(example_store_path.parent / (example_store_path.name + suffix), str(path) + suffix)
    with Store(path) as store:
        before = dict(store.conn.execute("SELECT cell_id, fingerprint FROM fingerprints WHERE rule = 'v4'"))
        assert before
        store.conn.execute("DELETE FROM fingerprints WHERE rule = 'v4'")
        store.conn.execute("DELETE FROM ir_digests WHERE rule = 'v4'")
        computed = store.compute_fingerprints("v4")
        after = dict(store.conn.execute("SELECT cell_id, fingerprint FROM fingerprints WHERE rule = 'v4'"))
    assert computed == len(before) and after == before


def test_cli_ingest_json_summary_keys(example_source, tmp_path):
    source, manifest = example_source
    result = CliRunner().invoke(cli, ["ingest", str(source), "--db", str(tmp_path / "x.db"), "--json"])
    summary = json.loads(result.stdout)
    for key in ("cells_added", "cells_replaced", "cells_unchanged", "rows_added", "problems"):
        assert key in summary
    assert summary["cells_added"] == manifest["cells"]
    assert summary["rows_added"] == manifest["rows"]
    assert all(set(p) == {"file", "line", "message"} for p in summary["problems"])


@pytest.mark.parametrize("inner", ["ab_rlc_20261012_101500", "campaign_20261013_090000/card0", "."])
@pytest.mark.parametrize("inner_first", [False, True], ids=["runs then inner", "inner then runs"])
def test_paths_inside_another_are_read_and_counted_once(example_tree, tmp_path, inner, inner_first):
    """`ingest runs runs/X` (or runs twice): X's cells are found, read and
    counted once, as `ingest runs` counts them, and their problems once."""
    runs, manifest = example_tree
    paths = [str(runs), str(runs / inner)]
    result = CliRunner().invoke(
        cli, ["ingest", *(paths[::-1] if inner_first else paths), "--db", str(tmp_path / "x.db"), "--json"]
    )
    summary = json.loads(result.stdout)
    assert result.exit_code == 1  # the example's cut-off run.log
    assert (summary["cells_added"], summary["cells_unchanged"], summary["rows_added"]) == (
        manifest["cells"],
        0,
        manifest["rows"],
    )
    assert len(summary["problems"]) == summary["open_problems"] == 1
    assert result.stderr.count("problem:") == 1
    with Store(tmp_path / "x.db") as store:
        assert count(store, "SELECT count(*) FROM cells") == manifest["cells"]
        assert json.loads(store.conn.execute("SELECT paths FROM ingest_runs").fetchone()[0]) == [str(runs.resolve())]


def test_missing_path_is_a_usage_error_and_creates_nothing(tmp_path, example_tree):
    runs, _ = example_tree
    db = tmp_path / "x.db"
    result = CliRunner().invoke(cli, ["ingest", str(runs), str(tmp_path / "nope"), "--db", str(db)])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr and "nope" in result.stderr
    assert not db.exists()  # nothing read, nothing created: not even the good path's cells


def test_default_database_from_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["init"])
    assert result.exit_code == 0 and (tmp_path / "zlstore.db").exists()
    monkeypatch.setenv("ZLSTORE_DB", str(tmp_path / "env.db"))
    result = CliRunner().invoke(cli, ["init"])
    assert result.stdout.startswith(str(tmp_path / "env.db")) and f"schema version {db.SCHEMA_VERSION}" in result.stdout
    assert result.stderr == f"created {tmp_path / 'env.db'}\n"


def test_record_refuses_unfinished_cell(store, tmp_path):
    root = tmp_path / "ab_rlc_7"
    write_root_env(root)
    running = write_cell(root / "topk_before", record(), env={"OP": "topk"})  # no RC yet
    summary = store.record(running)
    assert summary["cells_unfinished"] == 1 and summary["cells_added"] == 0
    assert count(store, "SELECT count(*) FROM cells") == 0


@pytest.mark.parametrize(
    "header, lines",
    [
        (
            "op\tdtype\tverdict",
            ["topk\tfloat16\tIR_CHANGED", "sort\t\tNO_IR_DIFF", "short\tint8", "long\ta\tb\tc", "  x \t y \t z "],
        ),
        ("op\tdtype\t\t", ["a\tb\tc\td", "e\tf"]),  # columns without a name (trailing tabs), which none reads
    ],
)
def test_tsv_rows_read_as_dict_zip_gives_them(tmp_path, header, lines):
    """A TSV row is dict(zip(header, values)) in every respect the store uses
    (get, [], items, equality), whatever a line's count of fields."""
    path = tmp_path / "screen.tsv"
    path.write_text("\n".join([header, *lines, ""]))
    problems: list[layout.Problem] = []
    rows = layout.read_tsv(path, problems)
    assert rows is not None
    names = [h.strip() for h in header.split("\t")]
    expected = [dict(zip(names, [v.strip() for v in line.split("\t")])) for line in lines]
    assert [line for line, _ in rows] == list(range(2, 2 + len(lines)))
    for row, want in zip((row for _, row in rows), expected):
        assert dict(row) == want and list(row.items()) == list(want.items()) and len(row) == len(want)
        assert all(row.get(name) == want.get(name) for name in [*names, "absent"])
        assert row == want
    assert len(problems) == sum(len(line.split("\t")) != len(names) for line in lines)


def test_a_cell_env_side_in_other_case_is_read_and_one_that_is_no_side_is_named(store, tmp_path):
    """SIDE=AFTER (or with spaces) is the after side; SIDE=sideways is named
    and the path's side is used: a pair is never split by its spelling."""
    root = tmp_path / "ab_rlc_x"
    write_root_env(root)
    write_cell(root / "topk_float16_before", record(), env={"SIDE": " Before ", "RC": 0}, kernels={"h1/topk.ttgir": IR})
    write_cell(root / "topk_float16_after", record(), env={"SIDE": "sideways", "RC": 0}, kernels={"h2/topk.ttgir": IR})
    summary = store.ingest(root)
    sides = dict(store.conn.execute("SELECT relpath, side FROM cells"))
    assert sides == {"topk_float16_before": "before", "topk_float16_after": "after"}
    (problem,) = summary["problems"]
    assert problem["file"].endswith("topk_float16_after/cell.env") and "'sideways' is neither" in problem["message"]
    (verdict,) = judge.verdicts(store)
    assert verdict["verdict"] == "NO_IR_DIFF"


def test_a_batch_keeps_its_scratch_in_memory_and_gives_it_back(tmp_path):
    """A whole-tree ingest's batch keeps SQLite's scratch (each cell's
    savepoint journal) in memory; everything else spills it to a file, so
    that a refresh's memory does not grow with the campaign (db.scratch_in_memory)."""

    def temp_store(conn):
        return conn.execute("PRAGMA temp_store").fetchone()[0]  # 1: FILE, 2: MEMORY

    with Store(tmp_path / "store.db") as store:
        conn = store.conn
        assert temp_store(conn) == 1
        batch = ingest._Batch(conn)
        for end in (batch.commit, batch.rollback):
            batch.open()
            assert conn.in_transaction and temp_store(conn) == 2
            end()
            assert not conn.in_transaction and temp_store(conn) == 1
        db.scratch_in_memory(conn, True)
        conn.execute("BEGIN")
        db.scratch_in_memory(conn, False)  # SQLite refuses the change inside a transaction: left as it is
        assert temp_store(conn) == 2
        conn.execute("ROLLBACK")


def test_a_batch_checks_the_wal_in_when_it_commits(tmp_path):
    """A batch's commit is checked into the database file at once
    (db.checkpoint_between_commits), while an ingest's workers go on: not
    left to the run's last commit, which everything waits for. The database
    file alone, without its WAL, holds what the batch committed. (A
    checkpoint that fails, on a full disk, loses nothing and raises nothing:
    test_containment.py's full disk, where every batch is one cell.)"""

    def rows_in_file_alone(name):
        shutil.copy(tmp_path / "store.db", tmp_path / name)  # the main file, not its -wal
        conn = sqlite3.connect(tmp_path / name)
        try:
            return conn.execute("SELECT count(*) FROM ingest_runs").fetchone()[0]
        finally:
            conn.close()

    with Store(tmp_path / "store.db") as store:
        conn = store.conn
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the schema in the file
        before = rows_in_file_alone("before.db")
        batch = ingest._Batch(conn)
        batch.open()
        conn.execute("INSERT INTO ingest_runs (started_at, command, paths) VALUES ('now', 'test', '[]')")
        batch.commit()
        assert rows_in_file_alone("after.db") == before + 1


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_forget_between_two_batches_costs_the_ingest_no_cell(example_source, tmp_path, monkeypatch, workers):
    """A forget that commits while an ingest runs removes rows the ingest
    remembers: a root's id, the calibers and IR texts no other stored cell
    uses. The ingest's next cells of that caliber failed on a foreign key,
    named as bad input. Now each batch, as it takes the write lock, sees
    that another process wrote (PRAGMA data_version) and looks them up again."""
    source, _ = example_source
    runs = tmp_path / "runs"
    shutil.copytree(source, runs)
    first = runs / "ab_rlc_20261012_101500"  # walked first; the next screening root shares its caliber
    first_cells = sum(1 for d in first.iterdir() if (d / "cell.env").exists() or (d / "run.log").exists())
    monkeypatch.setattr(ingest, "BATCH_SECONDS", 0.0)  # a commit after every cell: the forget gets in
    monkeypatch.setenv("ZLSTORE_INGEST_WORKERS", workers)  # a worker sends each IR text once
    db_path = tmp_path / "s.db"
    forgotten = []

    def forget_the_first_root(done, total):
        if done == first_cells:
            with Store(db_path) as other:
                forgotten.append(other.forget(str(first)))

    with Store(db_path) as store:
        summary = store.ingest_summary(runs, progress=forget_the_first_root)
        assert forgotten
        assert summary.counts["cells_failed"] == 0, [str(p) for p in summary.problems][:3]
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        got = store.conn.execute("SELECT count(*), sum(n_rows), sum(n_kernels) FROM cells").fetchone()
    shutil.rmtree(first)
    with Store(tmp_path / "without.db") as fresh:
        fresh.ingest(runs)
        expected = fresh.conn.execute("SELECT count(*), sum(n_rows), sum(n_kernels) FROM cells").fetchone()
    assert got == expected
