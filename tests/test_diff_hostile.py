"""zlstore diff on hostile IR (issue 46, item 7): a text of a million
lines, thousands of kernels of one name, bytes that are not UTF-8, a
carriage return inside a line, a C1 control byte. Each must give a
bounded, valid, correct answer: a diff that rebuilds the after text where
it is whole, a line that says where it was cut, JSON that any parser
takes, and nothing a terminal would obey."""

import json
import random
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.show import irdiff, irfacts
from zlstore.read import ttgir
from zlstore.cli import cli

from .test_diff import ROOT, TEXT, screening_root

V3 = ttgir.get_rule("v3")


def kernel(raw: bytes, kid: int = 1, name: str = "k", facts=None) -> irdiff.Kernel:
    return irdiff.Kernel(kid, name, f"C{kid}", f"/runs/C{kid}/{name}.ttgir", "h", 0, 4, 3, 0, raw, facts=facts)


def patched(before: str, diff: str) -> str:
    """before with a unified diff's hunks applied: what the diff says after is."""
    lines = before.split("\n")
    out, at = [], 0
    for hunk in re.split(r"^(?=@@ )", diff, flags=re.M)[1:]:
        head, *body = hunk.split("\n")
        match = re.match(r"@@ -(\d+)", head)
        assert match, head
        start = int(match.group(1))
        removed = head.split()[1]
        start = start - 1 if "," not in removed or removed.split(",")[1] != "0" else start
        out.extend(lines[at:start])
        at = start
        for line in body:
            if line.startswith(" "):
                out.append(line[1:])
                at += 1
            elif line.startswith("-"):
                at += 1
            elif line.startswith("+"):
                out.append(line[1:])
    out.extend(lines[at:])
    return "\n".join(out)


def ir_lines(n: int, seed: int = 0) -> list:
    return [f"    %{i} = arith.addi %{i - 1}, %c{seed}_i32 : i32" for i in range(n)]


@pytest.mark.parametrize("anchored", [False, True])
def test_a_diff_rebuilds_the_after_text(monkeypatch, anchored):
    """Edits, moves, insertions and deletions: the hunks rebuild after from
    before, whether difflib aligns the texts or the lines each holds once."""
    if anchored:
        monkeypatch.setattr(irdiff, "MAX_ALIGNED_LINES", 10)
    rng = random.Random(7)
    for _ in range(20):
        a = ir_lines(300) + ["}"] * 20 + ir_lines(50, 1)
        b = list(a)
        for _ in range(rng.randint(1, 12)):
            where, edit = rng.randrange(len(b)), rng.randrange(3)
            if edit == 0:
                b.insert(where, "  tt.return")
            elif edit == 1:
                b.pop(where)
            else:
                b.insert(0, b.pop())  # a line moves
            b[rng.randrange(len(b))] = "    %x = arith.muli %a, %b : i32"
        before, after = "\n".join(a) + "\n", "\n".join(b) + "\n"
        diff = irdiff.unified_diff(V3, kernel(before.encode()), kernel(after.encode(), 2))
        assert irdiff.CUT not in diff
        assert patched(before, diff.split("\n", 2)[2]) == after


def test_a_million_lines_are_diffed_and_every_change_shown():
    """A 1,000,000-line IR a side with 100 lines changed far apart: the
    diff holds each change at its line (difflib alone took more than 300 s)."""
    lines = ir_lines(1_000_000)
    changed = sorted(random.Random(1).sample(range(1_000_000), 100))
    after = list(lines)
    for i in changed:
        after[i] = "    %x = arith.muli %a, %b : i32"
    diff = irdiff.unified_diff(
        V3, kernel(("\n".join(lines) + "\n").encode()), kernel(("\n".join(after) + "\n").encode(), 2)
    )
    removed = [int(m) for m in re.findall(r"^-    %(\d+) = arith\.addi", diff, re.M)]
    assert removed == changed and diff.count("\n+    %x = arith.muli") == 100
    assert irdiff.CUT not in diff


def test_a_long_diff_is_cut_and_says_so():
    a = "".join(line + "\n" for line in ir_lines(40_000))
    b = "".join(line + "\n" for line in ir_lines(40_000, 9))  # every line differs
    diff = irdiff.unified_diff(V3, kernel(a.encode()), kernel(b.encode(), 2))
    lines = diff.rstrip("\n").split("\n")
    assert len(lines) <= irdiff.MAX_DIFF_LINES + 4
    assert lines[-1].startswith(irdiff.CUT) and f"cut after {irdiff.MAX_DIFF_LINES} lines" in lines[-1]
    long_line = "x" * (irdiff.MAX_LINE_CHARS * 3)
    diff = irdiff.unified_diff(V3, kernel(b"a\n"), kernel(long_line.encode() + b"\n", 2))
    assert max(len(line) for line in diff.split("\n")) < irdiff.MAX_LINE_CHARS + 100 and "characters cut" in diff


def test_a_text_past_the_byte_cap_is_not_diffed(monkeypatch):
    monkeypatch.setattr(irdiff, "MAX_DIFF_BYTES", 1000)
    diff = irdiff.unified_diff(V3, kernel(b"a\n" * 10), kernel(b"b\n" * 1000, 2))
    assert diff.splitlines()[-1].startswith(irdiff.CUT + "not diffed") and "\n-a" not in diff
    monkeypatch.setattr(irfacts, "MAX_CHARS", 1000)
    assert irdiff._facts(V3, b"b\n" * 1000) is None and irdiff._facts(V3, b"b\n" * 400) is not None


def test_pairing_computes_each_key_once_per_kernel():
    """Thousands of kernels of one name pair in linear time: each step's key
    is computed once per kernel, not once per comparison."""
    n = 3000
    before = [kernel(b"", i, facts=None) for i in range(n)]
    after = [kernel(b"", n + i, facts=None) for i in range(n)]
    calls = []

    def key(k):
        calls.append(k)
        return k.id % 1000

    pairs: list = []
    irdiff._take(list(before), list(after), key, irdiff.BY_ORDER, pairs)
    assert len(calls) == 2 * n and len(pairs) == n
    assert all(b.id % 1000 == a.id % 1000 for b, a, _ in pairs)
    assert len(irdiff.pair_kernels(before, after)) == n


def test_a_carriage_return_is_part_of_its_line():
    diff = irdiff.unified_diff(V3, kernel(b"x\ra = 1\ny\n"), kernel(b"x\ra = 2\ny\n", 2))
    assert "No newline" not in diff and "-x\ra = 1\n+x\ra = 2\n" in diff
    diff = irdiff.unified_diff(V3, kernel(b"a\nb\n"), kernel(b"a\nc", 2))  # a real one still says so
    assert diff.endswith("+c\n\\ No newline at end of file\n")


# -- through the command line, on stored IR ------------------------------------------------

HOSTILE = TEXT["k+1"].encode().replace(b"module", b"\x9b31m\xff\xfe \x1b[2J module", 1)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    screening_root(
        tmp / "runs",
        ROOT,
        {"bytes": {"before": [("AAA", "k_kernel", TEXT["k"])], "after": [("BBB", "k_kernel", TEXT["k"])]}},
    )
    (tmp / "runs" / ROOT / "bytes_float16_after" / "triton_cache" / "BBB" / "k_kernel.ttgir").write_bytes(HOSTILE)
    db = tmp / "s.db"
    with Store(db) as store:
        store.ingest(tmp / "runs")
    return db


def test_json_is_valid_for_any_bytes(hostile):
    """Bytes that are not UTF-8 in the IR: --json is UTF-8 that a strict
    parser takes, the bytes shown as \\x escapes."""
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", "diff", ROOT, "bytes", "--json", "--db", str(hostile)],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("utf-8")  # strict: raises on a raw byte
    document = json.loads(text)
    diff = document["kernels"][0]["diff"]
    assert "\\x9b31m\\xff\\xfe" in diff and not re.search("[\ud800-\udfff]", text)
    json.dumps(document, ensure_ascii=False).encode("utf-8")  # no lone surrogate anywhere


def test_no_c1_control_reaches_the_terminal(hostile):
    """A raw 0x9b (a CSI to a terminal) in the IR, and ESC: shown as
    escapes, on a terminal (colors) and through a pipe."""
    for color in (True, False):
        shown = CliRunner().invoke(cli, ["diff", ROOT, "bytes", "--full", "--db", str(hostile)], color=color)
        assert shown.exit_code == 0, shown.output
        raw = shown.stdout_bytes
        assert b"\x9b" not in raw and "\x9b" not in shown.stdout and b"\x1b[2J" not in raw
        assert "\\x9b31m\\xff\\xfe \\x1b[2J module" in shown.stdout


def test_facts_of_a_text_past_the_line_cap_are_not_read():
    assert irfacts.read("a\n" * (irfacts.MAX_LINES + 1)) is None


@pytest.mark.parametrize(
    "data, size",
    [
        (b"not zlib at all", 15),
        (__import__("zlib").compress(b"a" * 50_000_000), 100),  # a bomb: 50 MB from 50 kB, claiming 100 bytes
        (__import__("zlib").compress(b"abc"), 2**50),  # a size claim of 2^50
    ],
    ids=["not zlib", "bomb", "claim"],
)
def test_a_blob_taken_on_trust_is_refused_by_name(tmp_path, data, size):
    """A stored IR blob that does not unpack to its size (a damaged store,
    a merged one taken on trust): diff refuses it by name, exit 2, and
    never inflates it past its claim (parse.unpacked, the one reader of
    blobs)."""
    screening_root(
        tmp_path / "runs",
        ROOT,
        {"blob": {"before": [("AAA", "k_kernel", TEXT["k"])], "after": [("BBB", "k_kernel", TEXT["k+1"])]}},
    )
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
        ir_hash = store.conn.execute(
            "SELECT ir_hash FROM kernels k JOIN cells c ON c.id = k.cell_id WHERE c.side = 'after'"
        ).fetchone()[0]
        store.conn.execute("UPDATE blobs SET data = ?, size = ? WHERE hash = ?", (data, size, ir_hash))
        store.conn.commit()
    result = CliRunner().invoke(cli, ["diff", ROOT, "blob", "--json", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert f"blob {ir_hash}" in result.output and "Traceback" not in result.output
