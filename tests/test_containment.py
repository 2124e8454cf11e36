"""Containment: one bad file costs at most its own cell, is named with its
file (and line), and nothing outside a root is read. Every case on real
files: real FIFOs, symlinks, directories where files belong, non-UTF-8
names, and the unreadable cases run as another user (see nobody.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.read import layout, unchanged
from zlstore.cli import cli

from .nobody import as_nobody
from .test_ingest import IR, record, write_cell, write_root_env

SCREEN_HEADER = "op\tdtype\tverdict\tcl_before\tcl_after\trc_before\trc_after\telapsed_before\telapsed_after\n"
TIMEOUT = 60  # a regression that blocks on a file fails the test instead of hanging the suite


def screen_root(base: Path, name: str = "ab_rlc_1") -> Path:
    """A screening root: topk (IR changed), argmax (same IR), each side with
    a cell.env, a run.log with one counted row and a kernel with its .json."""
    root = base / name
    write_root_env(root)
    (root / "screen.tsv").write_text(
        SCREEN_HEADER + "topk\tfloat16\tIR_CHANGED\t1\t1\t0\t0\t10\t11\nargmax\tfloat16\tNO_IR_DIFF\t1\t1\t0\t0\t5\t5\n"
    )
    for op, same in (("topk", False), ("argmax", True)):
        for side in ("before", "after"):
            text = IR if same or side == "before" else IR.replace("%1", "%2")
            write_cell(
                root / f"{op}_float16_{side}",
                record(op=op),
                env={"RC": 0, "ELAPSED_S": 10},
                kernels={f"h{side}/{op}_kernel.ttgir": text, f"h{side}/{op}_kernel.json": '{"num_warps": 4}'},
                index=f"{op}_kernel\th{side}\tx\n",
            )
    return root


def ingest(paths, db, *options):
    """`zlstore ingest` in a process of its own, bounded in time: (exit
    status, the JSON summary, stderr)."""
    paths = [str(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", "ingest", *paths, "--db", str(db), "--json", *options],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def stored(db, sql, params=()):
    with Store(db) as store:
        return store.conn.execute(sql, params).fetchall()


def problem_files(summary):
    return {(p["file"], p["line"]) for p in summary["problems"]}


def messages(summary, file):
    return [p["message"] for p in summary["problems"] if p["file"] == str(file)]


# -- root-level files ---------------------------------------------------------------------------


def _break(path: Path, how: str, elsewhere: Path):
    if path.exists() or path.is_symlink():
        path.unlink()
    if how == "directory":
        path.mkdir()
    elif how == "link to a directory":
        path.symlink_to(elsewhere)
    elif how == "link loop":
        path.symlink_to(path.name + ".loop")
        path.with_name(path.name + ".loop").symlink_to(path.name)
    elif how == "fifo":
        os.mkfifo(path)


@pytest.mark.parametrize("name", ["screen.tsv", "screen.tsv.orig", "root.env"])
@pytest.mark.parametrize("how", ["directory", "link to a directory", "link loop", "fifo"])
def test_a_bad_root_file_costs_no_cell(tmp_path, name, how):
    root = screen_root(tmp_path / "runs")
    _break(root / name, how, tmp_path)
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1
    assert (str(root / name), None) in problem_files(summary)
    assert summary["cells_added"] == 4 and summary["cells_failed"] == 0
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM cells") == [(4,)]


@pytest.mark.parametrize("name", ["partition.tsv", "campaign.env"])
@pytest.mark.parametrize("how", ["directory", "link loop", "fifo"])
def test_a_bad_campaign_file_costs_no_cell(example_tree, tmp_path, name, how):
    tree, manifest = example_tree
    campaign = tree / "campaign_20261013_090000"
    _break(campaign / name, how, tmp_path)
    status, summary, _ = ingest(tree, tmp_path / "z.db")
    assert status == 1
    assert (str(campaign / name), None) in problem_files(summary)
    assert summary["cells_failed"] == 0
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM cells") == [(manifest["cells"],)]


def test_a_tsv_whose_header_names_a_column_twice_is_not_used(example_tree, tmp_path):
    """screen.tsv `op dtype verdict op`: which op a verdict belongs to is
    unknown, so no row of it is used (the last `op` was, giving softmax's
    verdict to "bogus"); partition.tsv the same. The cells are stored."""
    tree, manifest = example_tree
    screen = tree / "ab_rlc_20261015_120000" / "screen.tsv"
    screen.write_text("op\tdtype\tverdict\top\nsoftmax\tfloat32\tIR_CHANGED\tbogus\n")
    partition = tree / "campaign_20261013_090000" / "partition.tsv"
    lines = partition.read_text().splitlines()
    partition.write_text("\n".join([lines[0] + "\tcard", *(line + "\t7" for line in lines[1:])]) + "\n")
    status, summary, _ = ingest(tree, tmp_path / "z.db")
    assert status == 1
    assert messages(summary, screen) == [
        "the header names a column twice: 'op' (columns 1 and 4); "
        "no row is used (which of them a value belongs to is unknown)"
    ]
    assert (str(screen), 1) in problem_files(summary) and (str(partition), 1) in problem_files(summary)
    assert "'card' (columns 1 and 5)" in messages(summary, partition)[0]
    assert stored(
        tmp_path / "z.db",
        "SELECT count(*) FROM recorded_verdicts v JOIN roots r ON r.id = v.root_id "
        "WHERE r.name = 'ab_rlc_20261015_120000'",
    ) == [(0,)]
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM partitions") == [(0,)]
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM cells") == [(manifest["cells"],)]
    screened = CliRunner().invoke(cli, ["screen", "ab_rlc_20261015_120000", "--db", str(tmp_path / "z.db")])
    assert "bogus" not in screened.output and "softmax" in screened.output


def test_integers_beyond_64_bits_are_named_and_unknown(example_tree, tmp_path):
    tree, manifest = example_tree
    big = str(1 << 63)
    campaign = tree / "campaign_20261013_090000"
    env = (campaign / "campaign.env").read_text()
    (campaign / "campaign.env").write_text(env.replace("ROUNDS=", f"ROUNDS={big}\n#") + f"CARDS=-{big}9\n")
    partition = (campaign / "partition.tsv").read_text().splitlines()
    header = partition[0].split("\t")
    fields = partition[1].split("\t")
    fields[header.index("card")] = big
    (campaign / "partition.tsv").write_text("\n".join([partition[0], "\t".join(fields), *partition[2:]]) + "\n")
    screen = tree / "ab_rlc_20261012_101500" / "screen.tsv"
    lines = screen.read_text().splitlines()
    header = lines[0].split("\t")
    fields = lines[3].split("\t")
    fields[header.index("rc_before")] = big + "0"
    fields[header.index("elapsed_after")] = "abc"
    (screen).write_text("\n".join([*lines[:3], "\t".join(fields), *lines[4:]]) + "\n")

    status, summary, _ = ingest(tree, tmp_path / "z.db")
    assert status == 1
    named = problem_files(summary)
    assert {(str(campaign / "campaign.env"), None), (str(campaign / "partition.tsv"), 2), (str(screen), 4)} <= named
    assert any("ROUNDS" in m and "64-bit" in m for m in messages(summary, campaign / "campaign.env"))
    assert any("CARDS" in m for m in messages(summary, campaign / "campaign.env"))
    assert any("elapsed_after: 'abc' is not a number" in m for m in messages(summary, screen))
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM cells") == [(manifest["cells"],)]
    assert stored(tmp_path / "z.db", "SELECT rounds, cards FROM roots WHERE kind = 'campaign'") == [(None, None)]
    assert stored(
        tmp_path / "z.db",
        "SELECT count(*) FROM recorded_verdicts WHERE rc_before IS NULL AND line = 4 AND file = 'screen.tsv'",
    ) == [(1,)]


# -- names, permissions, lengths ------------------------------------------------------------------


def test_names_that_are_not_utf8_cost_their_cells_only(tmp_path):
    runs = tmp_path / "runs"
    screen_root(runs)
    bad_root = screen_root(runs, "ab_rlc_2")
    os.rename(bad_root, os.fsdecode(bytes(runs) + b"/ab_rlc_\xff"))
    good = screen_root(runs, "ab_rlc_3")
    os.rename(good / "topk_float16_before", os.fsdecode(bytes(good) + b"/topk_\xfe_before"))
    status, summary, stderr = ingest(runs, tmp_path / "z.db")
    assert status == 1
    assert summary["cells_added"] == 4 + 3 and summary["cells_failed"] == 5
    assert "ab_rlc_\\xff/topk_float16_before: not stored: its path holds bytes that are not UTF-8" in stderr
    assert "topk_\\xfe_before: not stored" in stderr
    again, summary, _ = ingest(runs, tmp_path / "z.db")  # the listings kept hold UTF-8 only
    assert again == 1 and summary["cells_unchanged"] == 7 and summary["cells_failed"] == 5


def test_newlines_in_names_are_stored_and_named(tmp_path):
    root = screen_root(tmp_path / "runs")
    os.rename(root / "argmax_float16_after", root / "argmax\nx_float16_after")
    (root / "topk_float16_before" / "triton_cache" / "hbefore" / "topk_kernel.ttgir").rename(
        root / "topk_float16_before" / "triton_cache" / "hbefore" / "topk\nkernel.ttgir"
    )
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    assert any("control character" in m for m in messages(summary, root / "argmax\nx_float16_after"))
    kernel = root / "topk_float16_before" / "triton_cache" / "hbefore" / "topk\nkernel.ttgir"
    assert (str(kernel), None) in problem_files(summary)


def test_a_path_longer_than_path_max_is_named(tmp_path):
    runs = tmp_path / "runs"
    screen_root(runs)
    deep = runs / "deep"
    os.makedirs(deep)
    # PATH_MAX counts the terminating NUL: a path of PATH_MAX characters is
    # already one too long. Deep enough to pass it by a whole level wherever
    # pytest's temporary directory is (its name's length varies: pytest-9, pytest-10).
    path_max = os.pathconf(deep, "PC_PATH_MAX")
    levels = (path_max - len(str(deep))) // 251 + 2
    fd = os.open(deep, os.O_RDONLY)
    try:  # below PATH_MAX one level at a time, through a descriptor
        for _ in range(levels):
            os.mkdir("d" * 250, dir_fd=fd)
            inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    status, summary, _ = ingest(runs, tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    assert any("cannot list this directory" in p["message"] and len(p["file"]) >= path_max for p in summary["problems"])


def test_unreadable_cell_directory_costs_its_cell(nobody_dir):
    base = nobody_dir
    root = screen_root(base / "runs")
    os.chmod(root / "topk_float16_before", 0)
    done = as_nobody(["ingest", str(base / "runs"), "--db", str(base / "db" / "z.db"), "--json"])
    assert "Traceback" not in done.stderr, done.stderr
    summary = json.loads(done.stdout)
    assert done.returncode == 1
    assert summary["cells_added"] == 3
    assert any(
        "cannot list this directory" in m and "Permission denied" in m
        for m in messages(summary, root / "topk_float16_before")
    )


# -- what was stored and never reported -------------------------------------------------------------


def test_bad_values_in_cell_files_are_named(tmp_path):
    root = screen_root(tmp_path / "runs")
    before, after = root / "topk_float16_before", root / "topk_float16_after"
    (before / "cell.env").write_bytes(b"RC=abc\nSWITCH=caf\xe9\nELAPSED_S=1e5x\n")
    (before / "triton_cache" / "hbefore" / "topk_kernel.json").write_text('{"num_warps": 4, ')
    (after / "triton_cache" / "hafter" / "topk_kernel.json").write_text("[" * 100000)
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    env = messages(summary, before / "cell.env")
    assert any("RC: 'abc' is not a 64-bit integer; not used (the next source" in m for m in env)
    assert any("ELAPSED_S" in m for m in env)
    assert (str(before / "cell.env"), 2) in problem_files(summary)  # the line that is not UTF-8
    for cell, side in ((before, "before"), (after, "after")):
        meta = cell / "triton_cache" / f"h{side}" / "topk_kernel.json"
        assert any("not JSON" in m for m in messages(summary, meta))
    # RC unknown in cell.env: the next source, the root's screen.tsv row, gives it
    assert stored(tmp_path / "z.db", "SELECT rc, rc_source FROM cells WHERE path = ?", (str(before),)) == [
        (0, "screen.tsv")
    ]


def test_dangling_links_are_named(tmp_path):
    root = screen_root(tmp_path / "runs")
    cell = root / "topk_float16_before"
    for name in ("cell.env", "index.tsv"):
        (cell / name).unlink()
        (cell / name).symlink_to(cell / "nowhere")
    kernel = cell / "triton_cache" / "hbefore" / "topk_kernel.ttgir"
    kernel.unlink()
    kernel.symlink_to("gone.ttgir")
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    for path in (cell / "cell.env", cell / "index.tsv", kernel):
        assert any("dangling symbolic link" in m for m in messages(summary, path)), path


def test_one_bad_record_costs_its_rows_only(tmp_path):
    root = screen_root(tmp_path / "runs")
    cell = root / "topk_float16_before"
    bad_text = record(op="topk").replace('"error_msg": null', '"error_msg": "\\ud800"')
    big = json.loads(record(op="topk", latencies=((64, 0.02), (128, 0.03)))[7:])
    big["result"][1]["latency_base"] = 1 << 64
    log = "\n".join([record(op="topk", latencies=((32, 0.01),)), bad_text, "[INFO] " + json.dumps(big)]) + "\n"
    (cell / "run.log").write_text(log)
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4 and summary["cells_failed"] == 0
    named = problem_files(summary)
    assert (str(cell / "run.log"), 2) in named and (str(cell / "run.log"), 3) in named
    assert any("beyond 64 bits" in m for m in messages(summary, cell / "run.log"))
    assert any("surrogate" in m for m in messages(summary, cell / "run.log"))
    rows = stored(
        tmp_path / "z.db",
        "SELECT m.line, m.shape FROM measurements m JOIN cells c ON c.id = m.cell_id "
        "WHERE c.path = ? ORDER BY m.line, m.idx",
        (str(cell),),
    )
    assert rows == [(1, "[[32]]"), (3, "[[64]]")]  # the rest of the cell, and of the record


def test_a_record_that_cannot_be_read_is_named_for_what_it_is(tmp_path):
    """A NUL byte in a record mid-file, or a whole last line nested 5,000
    deep, is not a record cut off by a timeout kill: each is named for what
    it is, and the cell keeps its other rows."""
    root = screen_root(tmp_path / "runs")
    nul, deep = root / "topk_float16_before", root / "argmax_float16_before"
    good, bad = record(op="topk", latencies=((32, 0.01),)), record(op="topk").replace("kernel", "ker\0nel")
    (nul / "run.log").write_text("\n".join([good, bad, "noise"]) + "\n")
    (deep / "run.log").write_text("\n".join([good, "[INFO] " + '{"a":' * 5000 + "1" + "}" * 5000]) + "\n")
    status, summary, stderr = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    assert [(p["line"], p["message"]) for p in summary["problems"] if p["file"] == str(nul / "run.log")] == [
        (2, f"record holds a NUL byte at column {bad.index(chr(0)) + 1}")
    ]
    assert [(p["line"], p["message"]) for p in summary["problems"] if p["file"] == str(deep / "run.log")] == [
        (2, "record nested too deeply to read (5000 levels)")
    ]
    assert "cut off" not in stderr
    for cell in (nul, deep):
        assert stored(
            tmp_path / "z.db",
            "SELECT m.shape FROM measurements m JOIN cells c ON c.id = m.cell_id WHERE c.path = ?",
            (str(cell),),
        ) == [("[[32]]",)]


def test_bytes_that_are_not_utf8_are_named_in_any_info_line():
    """A record whose "result" key lost its spelling to a bad byte reads as
    no record: its bytes are still named, so the record is not lost unseen."""
    from zlstore.read import runlog

    log = runlog.parse_runlog(b'noise\n[INFO] {"op_name": "x", "re\xffsult": [{"latency": 0.1}]}\n')
    assert (log.records, [(p.line, p.message) for p in log.problems]) == (0, [(2, "invalid UTF-8 bytes replaced")])


# -- nothing outside the tree -------------------------------------------------------------------------


def test_links_out_of_the_root_are_not_followed(tmp_path):
    root = screen_root(tmp_path / "runs")
    cell = root / "topk_float16_before"
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:secret\n")
    (cell / "index.tsv").unlink()
    (cell / "index.tsv").symlink_to(secret)
    (cell / "run.log").unlink()
    (cell / "run.log").symlink_to("/dev/zero")
    inside = root / "argmax_float16_before"
    (inside / "run.log").rename(root / "argmax.log")
    (inside / "run.log").symlink_to("../argmax.log")  # inside the root: followed
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    assert any("outside" in m for m in messages(summary, cell / "index.tsv"))
    assert any("/dev/zero" in m for m in messages(summary, cell / "run.log"))
    assert not messages(summary, inside / "run.log")
    assert stored(tmp_path / "z.db", "SELECT n_counted FROM cells WHERE path = ?", (str(inside),)) == [(1,)]
    with Store(tmp_path / "z.db") as store:
        import zlib

        texts = [zlib.decompress(d) for (d,) in store.conn.execute("SELECT data FROM blobs")]
    assert not any(b"secret" in t for t in texts)


def test_a_triton_cache_that_links_elsewhere_is_not_entered(tmp_path):
    root = screen_root(tmp_path / "runs")
    before, after = root / "argmax_float16_before", root / "argmax_float16_after"
    other = screen_root(tmp_path / "other")  # a directory with kernels of its own
    import shutil

    shutil.rmtree(before / "triton_cache")
    (before / "triton_cache").symlink_to(other / "topk_float16_after" / "triton_cache")
    shutil.rmtree(after / "triton_cache")
    (after / "triton_cache").symlink_to("/")  # the whole filesystem: never walked
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    assert any("symbolic link" in m for m in messages(summary, before / "triton_cache"))
    assert stored(
        tmp_path / "z.db", "SELECT n_kernels, ir_incomplete FROM cells WHERE path IN (?, ?)", (str(before), str(after))
    ) == [(0, 1), (0, 1)]
    assert stored(tmp_path / "z.db", "SELECT verdict FROM verdicts WHERE op = 'argmax'") == [("IR_UNREAD",)]


def test_a_root_or_cell_directory_that_is_a_link_is_named_not_skipped_in_silence(tmp_path, monkeypatch):
    """Directories are never entered through a link; a root or a cell that
    is one was left out with exit 0 and "0 problems", each ingest again."""
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    screen_root(runs)
    moved_root = screen_root(elsewhere, "ab_rlc_2")
    (runs / "ab_rlc_2").symlink_to(moved_root)
    cell = runs / "ab_rlc_1" / "topk_float16_after"
    cell.rename(elsewhere / "topk_float16_after")
    cell.symlink_to(elsewhere / "topk_float16_after")
    monkeypatch.setattr(unchanged, "RACY_NS", 0)  # the walk keeps every listing it can
    for _ in range(2):  # the second walk, with the listings the first kept, names them again
        result = CliRunner().invoke(cli, ["ingest", str(runs), "--db", str(tmp_path / "z.db"), "--json"])
        status, summary = result.exit_code, json.loads(result.stdout)
        assert status == 1, summary
        assert any("symbolic link to a directory" in m and "not entered" in m for m in messages(summary, cell))
        assert any(str(moved_root) in m for m in messages(summary, runs / "ab_rlc_2"))
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM cells") == [(3,)]
    assert stored(tmp_path / "z.db", "SELECT count(*) FROM cells WHERE path LIKE ?", (f"{elsewhere}%",)) == [(0,)]


@pytest.mark.parametrize("name", ["run.log", "cell.env", "index.tsv", "triton_cache/hbefore/topk_kernel.ttgir"])
def test_a_fifo_never_blocks(tmp_path, name):
    root = screen_root(tmp_path / "runs")
    path = root / "topk_float16_before" / name
    path.unlink()
    os.mkfifo(path)
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")  # within TIMEOUT
    assert status == 1 and summary["cells_added"] == 4
    assert any("a FIFO, not a regular file" in m for m in messages(summary, path))


def test_a_file_over_the_cap_is_not_read(tmp_path):
    root = screen_root(tmp_path / "runs")
    log = root / "topk_float16_before" / "run.log"
    with open(log, "r+b") as f:
        f.truncate(layout.MAX_FILE_BYTES + 1)  # sparse: nothing is written
    status, summary, _ = ingest(tmp_path / "runs", tmp_path / "z.db")
    assert status == 1 and summary["cells_added"] == 4
    assert any("over the" in m for m in messages(summary, log))


def test_record_of_a_cell_with_a_fifo_cell_env(tmp_path):
    root = screen_root(tmp_path / "runs")
    cell = root / "topk_float16_before"
    (cell / "cell.env").unlink()
    os.mkfifo(cell / "cell.env")
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", "record", str(cell), "--db", str(tmp_path / "z.db")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    # record that stored nothing exits 2 (issue 13: never 1), naming the FIFO
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{cell / 'cell.env'}: not stored: a FIFO" in done.stderr and "nothing recorded" in done.stderr


# -- honest IR ----------------------------------------------------------------------------------------


def test_ir_not_read_in_full_is_no_verdict_until_it_is(nobody_dir):
    base = nobody_dir
    root = screen_root(base / "runs")
    db = base / "db" / "z.db"
    hidden = root / "argmax_float16_after" / "triton_cache" / "hafter" / "argmax_kernel.ttgir"
    os.chmod(hidden, 0)
    locked = root / "argmax_float16_before" / "triton_cache"
    os.chmod(locked, 0)
    (root / "topk_float16_before" / "triton_cache").rename(root / "topk.cache")
    (root / "topk_float16_before" / "triton_cache").write_text("a file where the cache belongs")
    done = as_nobody(["ingest", str(base / "runs"), "--db", str(db), "--json"])
    summary = json.loads(done.stdout)
    assert done.returncode == 1
    assert any("Permission denied" in m for m in messages(summary, hidden))
    assert any("cannot list this directory" in m for m in messages(summary, locked))
    assert any("not a directory" in m for m in messages(summary, root / "topk_float16_before" / "triton_cache"))
    verdicts = dict(stored(db, "SELECT op, verdict FROM verdicts"))
    assert verdicts == {"argmax": "IR_UNREAD", "topk": "IR_UNREAD"}  # not IR_CHANGED, not NO_TRITON
    licenses = stored(db, "SELECT licenses, n_rows FROM verdicts WHERE op = 'argmax'")
    assert licenses == [("nothing: a side's IR could not be read in full; fix the files and ingest again", None)]

    os.chmod(hidden, 0o644)  # fixed: its directory's times did not change, the next ingest reads it anyway
    os.chmod(locked, 0o755)
    (root / "topk_float16_before" / "triton_cache").unlink()
    (root / "topk.cache").rename(root / "topk_float16_before" / "triton_cache")
    done = as_nobody(["ingest", str(base / "runs"), "--db", str(db), "--json"])
    assert done.returncode == 0, done.stderr
    assert dict(stored(db, "SELECT op, verdict FROM verdicts")) == {"argmax": "NO_IR_DIFF", "topk": "IR_CHANGED"}


# -- problems stay open ---------------------------------------------------------------------------------


def test_problems_stay_open_until_their_file_changes(example_tree, tmp_path):
    tree, _ = example_tree
    db = tmp_path / "z.db"
    first, summary, _ = ingest(tree, db)
    truncated = tree / "ab_rlc_20261012_101500" / "sort_bfloat16_after" / "run.log"
    assert first == 1 and (str(truncated), 26) in problem_files(summary)
    again, summary, stderr = ingest(tree, db)
    assert again == 1 and summary["cells_added"] == 0 and summary["open_problems"] == 1
    assert "1 found by an earlier ingest still open" in stderr
    result = CliRunner().invoke(cli, ["problems", "ab_rlc_20261012_101500", "--db", str(db), "--json"])
    assert result.exit_code == 1
    assert [(p["file"], p["line"], p["root"]) for p in json.loads(result.stdout)] == [
        (str(truncated), 26, "ab_rlc_20261012_101500")
    ]
    table = CliRunner().invoke(cli, ["problems", "--db", str(db)])
    assert "record cut off mid-JSON" in table.output.splitlines()[2]
    assert CliRunner().invoke(cli, ["problems", "campaign_20261013_090000", "--db", str(db)]).exit_code == 0

    lines = truncated.read_text().splitlines()
    truncated.write_text("\n".join(lines[:25]) + "\n")  # the cut-off record gone: the file is fixed
    fixed, summary, _ = ingest(tree, db)
    assert fixed == 0 and summary["open_problems"] == 0 and summary["cells_replaced"] == 1
    assert CliRunner().invoke(cli, ["problems", "--db", str(db)]).exit_code == 0


def test_a_cell_that_could_not_be_stored_is_open_until_it_is(tmp_path):
    runs = tmp_path / "runs"
    root = screen_root(runs)
    bad = os.fsdecode(bytes(root) + b"/argmax_\xff_before")
    os.rename(root / "argmax_float16_before", bad)
    assert ingest(runs, tmp_path / "z.db")[0] == 1
    again, summary, _ = ingest(runs, tmp_path / "z.db")
    # found again (the first run's is closed), and argmax's after cell is a missing side meanwhile
    assert again == 1 and summary["open_problems"] == 2
    os.rename(bad, root / "argmax_float16_before")
    fixed, summary, _ = ingest(runs, tmp_path / "z.db")
    assert (fixed, summary["open_problems"], summary["cells_added"]) == (0, 0, 1)


# -- dtype from screen.tsv --------------------------------------------------------------------------------


def test_a_cell_without_dtype_takes_it_from_its_one_screen_row(tmp_path):
    root = screen_root(tmp_path / "runs")
    for side in ("before", "after"):
        cell = root / f"argmax_float16_{side}"
        (cell / "cell.env").unlink()
        cell.rename(root / f"argmax_{side}")
    ingest(tmp_path / "runs", tmp_path / "z.db")
    assert stored(tmp_path / "z.db", "SELECT DISTINCT dtype, dtype_source FROM cells WHERE op = 'argmax'") == [
        ("float16", "screen.tsv")
    ]
    assert stored(tmp_path / "z.db", "SELECT dtype, verdict FROM verdicts WHERE op = 'argmax'") == [
        ("float16", "NO_IR_DIFF")
    ]  # one pair, not split in two


# -- a full disk --------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB file system (tmpfs) for the database; skipped where this user
    may not mount one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A campaign and its screening root: 128 cells, 11 MB of IR."""
    from . import generator

    dest = tmp_path_factory.mktemp("corpus") / "runs"
    generator.make_campaign_corpus(dest, cards=2, ops=8, rounds=3, rows=10, kernels=2, kb=(20, 60))
    return dest


def test_a_full_disk_counts_only_what_was_committed(corpus, small_disk, tmp_path, monkeypatch):
    from zlstore.store import ingest as ingesting

    monkeypatch.setattr(ingesting, "BATCH_SECONDS", 0.0)  # a commit per cell: some fit, the rest do not
    db = small_disk / "z.db"
    result = CliRunner().invoke(cli, ["ingest", str(corpus), "--db", str(db), "--json"])
    assert result.exit_code == 2, result.exception  # not a traceback (1)
    summary = json.loads(result.stdout)
    assert summary["state"] == "stopped: database or disk is full"
    assert result.stderr.count("disk is full") == 1 and "FOREIGN KEY" not in result.stderr
    with Store(db) as store:
        cells = store.conn.execute("SELECT count(*) FROM cells").fetchone()[0]
        (kept,) = store.conn.execute("SELECT summary FROM ingest_runs").fetchone()
    assert 0 < summary["cells_added"] == cells < 128
    assert json.loads(kept)["cells_added"] == cells

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    result = CliRunner().invoke(cli, ["ingest", str(corpus), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["cells_unchanged"], summary["cells_added"]) == (cells, 128 - cells)
    reference = tmp_path / "reference.db"
    CliRunner().invoke(cli, ["ingest", str(corpus), "--db", str(reference)])
    query = "SELECT path, content_sig, n_rows, n_kernels FROM cells ORDER BY path"
    assert stored(db, query) == stored(reference, query)  # the tree complete, as with space from the start


def test_record_on_a_full_disk_stops_cleanly(corpus, small_disk):
    cells = sorted(str(p.parent) for p in corpus.glob("campaign_*/card0/*/*/r*/*/cell.env"))
    db = small_disk / "z.db"
    result = CliRunner().invoke(cli, ["record", *cells, "--db", str(db), "--json"])
    assert result.exit_code == 2, result.exception
    summary = json.loads(result.stdout)
    assert summary["state"] == "stopped: database or disk is full"
    assert 0 < summary["cells_added"] == stored(db, "SELECT count(*) FROM cells")[0][0] < len(cells)


# The last schema version whose problems closed with the next run (migration
# 7 keeps them open while what they name is stored as read).
BEFORE_OPEN_PROBLEMS = 6


def test_a_database_before_open_problems_keeps_its_problems_open(example_source, tmp_path):
    """Migration 7 ties a problem stored before it to the cell its run
    stored: the cut-off log stays open after the upgrade and the re-ingest."""
    tree, _ = example_source
    db = tmp_path / "v6.db"
    with Store(db) as store:
        store.ingest(tree)
        conn = store.conn
        for kind in ("view", "trigger"):
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,)).fetchall():
                conn.execute(f"DROP {kind} [{name}]")
        for index in ("ingest_problems_open", "ingest_problems_cell", "ingest_problems_root", "ab_range_rows_unjudged"):
            conn.execute(f"DROP INDEX {index}")
        judged = ("finding", "finding_position", "to_settle", "noise_floor", "clears_floor", "floor_note", "judged")
        for table, column in (
            ("ingest_problems", "cell_id"),
            ("ingest_problems", "root_id"),
            ("ingest_problems", "closed_by"),
            ("cells", "ir_incomplete"),
            ("cells", "test_outcome"),
            ("cells", "test_reason"),  # release 11's
            *(("ab_range_rows", column) for column in judged),
        ):  # release 9's
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute("DELETE FROM settings WHERE key = 'schema_hash'")
        conn.execute(f"PRAGMA user_version = {BEFORE_OPEN_PROBLEMS}")
    with Store(db) as store:
        assert store.conn.execute("SELECT count(*) FROM ingest_problems WHERE cell_id IS NOT NULL").fetchone() == (1,)
    status, summary, _ = ingest(tree, db)
    assert status == 1 and summary["cells_added"] == 0 and summary["open_problems"] == 1
