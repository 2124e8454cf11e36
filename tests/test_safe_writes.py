"""Every file zlstore writes into a runs/ tree (screen.tsv and its .orig,
cell.env, root.env, campaign.env, partition.tsv) is written whole, to a
temporary file created exclusively beside it, then renamed over it: a
symbolic link planted at the temporary name or at the file's own name
redirects nothing, and a file outside the tree stays as it was."""

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.read import files
from zlstore.run import harness, plan
from zlstore.cli import cli

SCREEN_ROOT = "ab_rlc_20261012_101500"


@pytest.fixture
def tree(example_tree, tmp_path):
    """A private copy of the example tree, its screening root as the harness
    left it before any rescore (no screen.tsv.orig), ingested: (that root,
    the database)."""
    runs, _ = example_tree
    (runs / SCREEN_ROOT / "screen.tsv.orig").unlink()
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(runs)
    return runs / SCREEN_ROOT, db


def rescore_write(db):
    result = CliRunner().invoke(cli, ["rescore", SCREEN_ROOT, "--write", "--db", str(db)])
    assert result.exit_code == 0, result.output


def outside_file(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_text("precious: not zlstore's to write\n")
    return path


def plant(link: Path, target: Path):
    link.symlink_to(target)
    assert link.is_symlink()


def test_rescore_write_through_planted_links_writes_only_inside_the_tree(tree, tmp_path):
    root, db = tree
    outside = outside_file(tmp_path)
    original = (root / "screen.tsv").read_bytes()
    # the temporary name the writer used before (its pid is this process's: CliRunner),
    # and one at the name of the kept original
    plant(root / f".screen.tsv.{os.getpid()}.tmp", outside)
    plant(root / "screen.tsv.orig", outside)

    rescore_write(db)
    assert outside.read_text() == "precious: not zlstore's to write\n"
    written = root / "screen.tsv"
    assert not written.is_symlink() and written.is_file()
    assert written.read_bytes() != original and written.read_text().startswith("op\tdtype\tverdict")
    assert (root / "screen.tsv.orig").is_symlink()  # there before: never replaced, never written through
    assert not [p for p in root.iterdir() if p.name.startswith(".screen.tsv.") and not p.is_symlink()]


def test_a_screen_tsv_that_is_a_link_is_replaced_not_written_through(tree, tmp_path):
    root, db = tree
    outside = outside_file(tmp_path)
    (root / "screen.tsv").unlink()
    plant(root / "screen.tsv", outside)
    rescore_write(db)
    assert outside.read_text() == "precious: not zlstore's to write\n"
    assert not (root / "screen.tsv").is_symlink()
    # the original kept is the link as it was, not a copy of what it pointed at
    assert (root / "screen.tsv.orig").is_symlink() and os.readlink(root / "screen.tsv.orig") == str(outside)


def test_the_original_is_kept_once(tree):
    root, db = tree
    original = (root / "screen.tsv").read_bytes()
    for _ in range(2):
        rescore_write(db)
    assert (root / "screen.tsv.orig").read_bytes() == original


def test_write_atomic_through_planted_links(tmp_path):
    cell = tmp_path / "runs" / "ab_rlc_x" / "topk_before"
    cell.mkdir(parents=True)
    outside = outside_file(tmp_path)
    plant(cell / "cell.env.tmp", outside)  # the temporary name it used before
    plant(cell / "cell.env", outside)
    harness.write_atomic(cell / "cell.env", "OP=topk\nRC=0\n")
    assert outside.read_text() == "precious: not zlstore's to write\n"
    assert not (cell / "cell.env").is_symlink() and (cell / "cell.env").read_text() == "OP=topk\nRC=0\n"
    assert sorted(p.name for p in cell.iterdir()) == ["cell.env", "cell.env.tmp"]  # no temporary left


def test_partition_tsv_through_a_planted_link(tmp_path):
    outside = outside_file(tmp_path)
    target = tmp_path / "campaign_x" / "partition.tsv"
    target.parent.mkdir()
    plant(target, outside)
    the_plan = plan.make_plan([plan.Op("topk", "float16", 60.0)], 1)
    plan.write_partition_tsv(the_plan, target)
    assert outside.read_text() == "precious: not zlstore's to write\n"
    assert not target.is_symlink() and plan.read_partition_tsv(target).ops[0].op == "topk"


def test_a_file_written_has_the_mode_open_would_give(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    path = files.replace_atomic(tmp_path / "screen.tsv", b"op\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600: others read screen.tsv


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "screen.tsv"
    path.write_bytes(b"old\n")

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    try:
        files.replace_atomic(path, b"new\n")
    except OSError:
        pass
    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["screen.tsv"]


def test_plan_out_never_replaces_a_fifo_or_a_device(tree, tmp_path):
    """Renaming over /dev/full (as root) destroyed the device and exited 0."""
    _, db = tree
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    result = CliRunner().invoke(cli, ["plan", SCREEN_ROOT, "--cards", "2", "--out", str(fifo), "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert f"cannot write {fifo}: it is a FIFO, not a regular file" in result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".p.fifo")) == []  # no temporary left


def test_plan_out_into_a_missing_directory_is_named_not_a_traceback(tree, tmp_path):
    _, db = tree
    target = tmp_path / "missing" / "p.tsv"
    result = CliRunner().invoke(cli, ["plan", SCREEN_ROOT, "--cards", "2", "--out", str(target), "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert f"cannot write {target}: No such file or directory" in result.output


def test_rescore_write_over_a_directory_named_screen_tsv_is_refused(tree):
    root, db = tree
    (root / "screen.tsv").unlink()
    (root / "screen.tsv").mkdir()
    result = CliRunner().invoke(cli, ["rescore", SCREEN_ROOT, "--write", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert f"{root / 'screen.tsv'}" in result.output and "Is a directory" in result.output
    assert (root / "screen.tsv").is_dir() and not os.path.lexists(root / "screen.tsv.orig")
    (root / "screen.tsv").rmdir()
    (root / "screen.tsv.orig").mkdir()  # the original kept already: the directory is what it writes over
    (root / "screen.tsv").mkdir()
    result = CliRunner().invoke(cli, ["rescore", SCREEN_ROOT, "--write", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "it is a directory, not a regular file; left as it is" in result.output
    assert (root / "screen.tsv").is_dir()
