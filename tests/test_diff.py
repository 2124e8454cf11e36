"""zlstore diff: which kernels changed between two cells, and how.

Stand-in screening roots whose truth is known by construction (a kernel
with one convert_layout more, a kernel only after, kernels that differ
only in loc() paths, several kernels of one name, no kernels, IR not read
in full), one side of two roots, and the real H200 trees of
/work/shared/real (FlagGems, 2026-08-21): through the library, the
command line (CliRunner) and datasette's in-process client."""

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from datasette.app import Datasette

from zlstore import Store
from zlstore.show import irdiff
from zlstore.cli import cli

from . import generator
from .generator import CellSpec, RowSpec, cell_dir_name, ttgir_text, write_cell

ROOT = "ab_rlc_20261012_101500"
ROOT_B = "ab_rlc_20261013_101500"
DTYPE = "float16"
LOC_A, LOC_B = "/root/.flaggems/run_a/code_cache", "/root/.flaggems/run_b/code_cache"


def kernel(cell: Path, cache: str, name: str, text: str, warps: int = 4, stages: int = 3, shared: int = 0):
    """One compiled kernel: triton_cache/<cache>/<name>.ttgir and its .json."""
    directory = cell / "triton_cache" / cache
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.ttgir").write_text(text)
    (directory / f"{name}.json").write_text(
        json.dumps({"name": name, "num_warps": warps, "num_stages": stages, "shared": shared})
    )


def screening_root(runs: Path, name: str, pairs: dict):
    """A screening root: op -> {"before": [kernel args], "after": [...]} (a
    kernel arg: (cache dir, name, text[, warps, stages, shared]))."""
    root = runs / name
    root.mkdir(parents=True)
    env = {
        "KIND": "screen",
        "SWITCH": generator.SWITCH,
        "HOST": generator.HOST,
        "STARTED_AT": "2026-10-12T10:15:00",
        **generator.SCREEN_CALIBER,
    }
    (root / "root.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    for op, sides in pairs.items():
        for side, kernels in sides.items():
            cell = root / cell_dir_name(op, DTYPE, side)
            write_cell(
                cell,
                CellSpec(
                    op=op,
                    dtype=DTYPE,
                    side=side,
                    round=0,
                    card=0,
                    index_tsv=False,
                    rows=[RowSpec(shape=[[64, 1024], 32], latency=0.02)],
                ),
            )
            for args in kernels:
                kernel(cell, *args)
    return root


TEXT = {
    "k": ttgir_text("k_kernel", convert_layouts=2),
    "k+1": ttgir_text("k_kernel", convert_layouts=3),
    "other": ttgir_text("other_kernel"),
    "new": ttgir_text("new_kernel", convert_layouts=1),
    "m0": ttgir_text("multi_kernel", variant=0),
    "m1": ttgir_text("multi_kernel", variant=1),
    "m1+1": ttgir_text("multi_kernel", variant=1, convert_layouts=3),
    "m0+1": ttgir_text("multi_kernel", variant=0, convert_layouts=3),
    "locA": ttgir_text("loc_kernel", loc_root=LOC_A),
    "locB": ttgir_text("loc_kernel", loc_root=LOC_B),
    "m0A": ttgir_text("multi_kernel", variant=0, loc_root=LOC_A),
    "m1A": ttgir_text("multi_kernel", variant=1, loc_root=LOC_A),
    "m0B": ttgir_text("multi_kernel", variant=0, loc_root=LOC_B),
    "m1B": ttgir_text("multi_kernel", variant=1, loc_root=LOC_B),
}

PAIRS: dict[str, dict[str, list[tuple]]] = {
    # one convert_layout more in k_kernel; other_kernel unchanged
    "cl": {
        "before": [("AAA", "k_kernel", TEXT["k"]), ("BBB", "other_kernel", TEXT["other"])],
        "after": [("CCC", "k_kernel", TEXT["k+1"]), ("DDD", "other_kernel", TEXT["other"])],
    },
    # new_kernel compiled after only
    "added": {
        "before": [("AAA", "k_kernel", TEXT["k"])],
        "after": [("BBB", "k_kernel", TEXT["k"]), ("CCC", "new_kernel", TEXT["new"])],
    },
    # the same IR compiled from generated sources under two cache paths
    "locs": {"before": [("AAA", "loc_kernel", TEXT["locA"])], "after": [("BBB", "loc_kernel", TEXT["locB"])]},
    # two kernels of one name: variant 0 unchanged, variant 1 one convert_layout more (stored
    # in the other order after: only text pairs them right)
    "several": {
        "before": [("A0", "multi_kernel", TEXT["m0"]), ("A1", "multi_kernel", TEXT["m1"])],
        "after": [("B0", "multi_kernel", TEXT["m1+1"]), ("B1", "multi_kernel", TEXT["m0"])],
    },
    # two of one name differing only in loc paths, stored in the other order after
    "severallocs": {
        "before": [("A0", "multi_kernel", TEXT["m0A"]), ("A1", "multi_kernel", TEXT["m1A"])],
        "after": [("B0", "multi_kernel", TEXT["m1B"]), ("B1", "multi_kernel", TEXT["m0B"])],
    },
    # two of one name under different launch configurations, both changed, stored in the other
    # order after: only their configurations pair them right
    "configs": {
        "before": [("A0", "multi_kernel", TEXT["m0"], 4), ("A1", "multi_kernel", TEXT["m1"], 8)],
        "after": [("B0", "multi_kernel", TEXT["m1+1"], 8), ("B1", "multi_kernel", TEXT["m0+1"], 4)],
    },
    "none": {"before": [], "after": []},
    "unread": {"before": [("AAA", "k_kernel", TEXT["k"])], "after": [("BBB", "k_kernel", TEXT["k"])]},
}


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in roots ingested: (database path, runs directory)."""
    runs = tmp_path_factory.mktemp("diff") / "runs"
    screening_root(runs, ROOT, PAIRS)
    # IR not read in full: a cache directory that is a link is not followed
    unread = runs / ROOT / cell_dir_name("unread", DTYPE, "after") / "triton_cache"
    os.symlink(unread / "BBB", unread / "LINKED")
    # a second build: its before side is the first root's after side
    screening_root(runs, ROOT_B, {"cl": {"before": PAIRS["cl"]["after"], "after": PAIRS["cl"]["after"]}})
    path = runs.parent / "diff.db"
    with Store(path) as store:
        store.ingest(runs)
    return path, runs


@pytest.fixture
def store(standin):
    with Store(standin[0]) as opened:
        yield opened


def by_status(document):
    return {status: n for status, n in document["counts"].items() if n}


def changed_lines(diff_text):
    """The removed and added lines of a unified diff, without its headers."""
    lines = diff_text.splitlines()
    return (
        [l[1:] for l in lines if l.startswith("-") and not l.startswith("---")],
        [l[1:] for l in lines if l.startswith("+") and not l.startswith("+++")],
    )


# -- the library ------------------------------------------------------------------------


def test_one_convert_layout_more(store, standin):
    document = irdiff.diff(store, ROOT, "cl:float16")
    assert document["form"] == "pair" and document["verdict"] == "IR_CHANGED" and document["ir_differs"]
    assert by_status(document) == {"changed": 1, "same": 1}
    k, other = document["kernels"]
    assert (k["kernel"], k["status"], other["kernel"], other["status"]) == (
        "k_kernel",
        "changed",
        "other_kernel",
        "same",
    )
    assert (k["convert_layouts_before"], k["convert_layouts_after"]) == (2, 3)
    assert (k["num_warps_before"], k["num_stages_before"], k["shared_before"]) == (4, 3, 0)
    removed, added = changed_lines(k["diff"])
    converts = lambda lines: sum("= ttg.convert_layout " in l for l in lines)  # noqa: E731
    assert converts(added) - converts(removed) == 1
    runs = standin[1]
    assert k["path_before"] == str(runs / ROOT / "cl_float16_before/triton_cache/AAA/k_kernel.ttgir")
    assert Path(k["path_after"]).read_text() == TEXT["k+1"]
    assert k["diff"].startswith(f"--- {k['path_before']} (before, normalized by v3)\n+++ {k['path_after']} ")
    assert other["diff"] == ""  # nothing to show for a kernel that is the same


def test_a_kernel_only_after(store):
    document = irdiff.diff(store, ROOT, "added")
    assert by_status(document) == {"only after": 1, "same": 1}
    new = next(r for r in document["kernels"] if r["kernel"] == "new_kernel")
    assert new["status"] == "only after" and new["paired_by"] is None and new["path_before"] is None
    assert (new["convert_layouts_before"], new["convert_layouts_after"]) == (None, 1)
    removed, added = changed_lines(new["diff"])
    assert removed == [] and "".join(l + "\n" for l in added) == TEXT["new"]
    assert "/dev/null (before: no such kernel)" in new["diff"]


def test_only_loc_paths_differ_v3_against_v4(store):
    v3 = irdiff.diff(store, ROOT, "locs", rule="v3")
    assert v3["verdict"] == "IR_CHANGED" and v3["hint"]
    (row,) = v3["kernels"]
    assert row["status"] == "changed"
    assert row["note"] == "differs only in what v4 leaves out: source locations"
    assert any("source locations" in note for note in v3["notes"])
    removed, added = changed_lines(row["diff"])
    assert removed and all(LOC_A in l for l in removed) and all(LOC_B in l for l in added)
    v4 = irdiff.diff(store, ROOT, "locs", rule="v4")
    assert v4["verdict"] == "NO_IR_DIFF" and not v4["ir_differs"]
    assert [r["status"] for r in v4["kernels"]] == ["same"] and v4["kernels"][0]["diff"] == ""
    assert v4["notes"] == []
    raw = irdiff.diff(store, ROOT, "locs", rule="v4", raw=True)  # as compiled, the paths show again
    assert "as compiled" in raw["kernels"][0]["diff"] and LOC_B in raw["kernels"][0]["diff"]


def test_several_kernels_of_one_name_pair_by_text_first(store):
    document = irdiff.diff(store, ROOT, "several")
    rows = document["kernels"]
    assert [(r["status"], r["paired_by"]) for r in rows] == [("same", irdiff.BY_RULE), ("changed", irdiff.BY_SHARED)]
    assert (rows[0]["cache_dir_before"], rows[0]["cache_dir_after"]) == ("A0", "B1")
    assert (rows[1]["cache_dir_before"], rows[1]["cache_dir_after"]) == ("A1", "B0")
    assert (rows[1]["convert_layouts_before"], rows[1]["convert_layouts_after"]) == (2, 3)


def test_several_of_one_name_differing_in_locations_pair_by_the_strictest_rule(store):
    rows = irdiff.diff(store, ROOT, "severallocs")["kernels"]
    assert [(r["cache_dir_before"], r["cache_dir_after"], r["paired_by"]) for r in rows] == [
        ("A0", "B1", irdiff.BY_STRICTEST),
        ("A1", "B0", irdiff.BY_STRICTEST),
    ]
    assert all(r["note"] and "source locations" in r["note"] for r in rows)


def test_several_of_one_name_pair_by_launch_configuration(store):
    rows = irdiff.diff(store, ROOT, "configs", rule="v4")["kernels"]
    assert [
        (r["cache_dir_before"], r["cache_dir_after"], r["num_warps_before"], r["num_warps_after"]) for r in rows
    ] == [("A0", "B1", 4, 4), ("A1", "B0", 8, 8)]
    assert [(r["status"], r["paired_by"]) for r in rows] == [("changed", irdiff.BY_SHARED)] * 2


def test_same_side_of_two_roots(store):
    before = irdiff.diff(store, f"{ROOT}:cl", f"{ROOT_B}:cl:float16")
    assert before["form"] == "roots" and before["before"]["root"] == ROOT and before["after"]["root"] == ROOT_B
    assert before["before"]["side"] == before["after"]["side"] == "before"
    assert by_status(before) == {"changed": 1, "same": 1}
    after = irdiff.diff(store, f"{ROOT}:cl", f"{ROOT_B}:cl", side="after")
    assert by_status(after) == {"same": 2} and not after["ir_differs"]


def test_kernel_option_keeps_one_name(store):
    document = irdiff.diff(store, ROOT, "cl", kernel="other_kernel")
    assert [r["kernel"] for r in document["kernels"]] == ["other_kernel"]
    with pytest.raises(irdiff.DiffError, match="no kernel 'nope'.*k_kernel, other_kernel"):
        irdiff.diff(store, ROOT, "cl", kernel="nope")


def test_arguments_are_read_as_written():
    assert irdiff.names_an_op("topk") and irdiff.names_an_op("topk:float16") and irdiff.names_an_op("topk:")
    assert not irdiff.names_an_op("ab_x:topk") and not irdiff.names_an_op("ab_x:topk:float16")
    assert irdiff.parse_root_op("/runs/a:b/ab_x:topk:float16") == ("/runs/a:b/ab_x", "topk", "float16")
    assert irdiff.parse_root_op("ab_x:slice_scatter") == ("ab_x", "slice_scatter", None)
    assert irdiff.parse_op("topk:") == ("topk", "")


# -- the command line ---------------------------------------------------------------------


def run(standin, *args, color=False):
    return CliRunner().invoke(cli, ["diff", *args, "--db", str(standin[0])], color=color)


def test_cli_prints_the_summary_the_table_then_with_full_the_diff(standin):
    result = run(standin, ROOT, "cl:float16")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(f"cl:float16 in {ROOT}, screening pair, under v3 (the current rule): IR_CHANGED\n")
    assert "\nwhat changed, of 2 kernel pairs:\n" in out and "\n  ttg.convert_layout +1 in 1 of 2\n" in out
    assert out.index("what changed") < out.index("\nkernel ")
    assert re.search(r"^k_kernel\s+changed\s+256\s+2 -> 3\s+4\s+3\s+0\s+same config", out, re.M)
    assert re.search(r"^other_kernel\s+same\s+512\s+2\s+", out, re.M)
    assert "\n1 changed, 1 same (v3: " in out and "\n--- " not in out and "--full shows each pair's diff" in out
    assert "\x1b[" not in out  # piped: plain
    full = run(standin, ROOT, "cl:float16", "--full").stdout
    assert "\n--- " in full and "\n+++ " in full and "\n@@ " in full and full.startswith(out.split("\n--full")[0])


def test_cli_colors_the_diff_on_a_terminal(standin):
    out = run(standin, ROOT, "cl", "--full", color=True).stdout
    assert re.search(r"\x1b\[32m\+.*ttg\.convert_layout", out)  # an added line, green
    assert "\x1b[33mk_kernel" in out  # a changed kernel, yellow


def test_cli_json_and_the_table_formats(standin):
    document = json.loads(run(standin, ROOT, "locs", "--rule", "v4", "--json").stdout)
    assert document["rule"] == "v4" and document["verdict"] == "NO_IR_DIFF"
    assert document["kernels"][0]["status"] == "same"
    csv = run(standin, ROOT, "added", "--csv").stdout.splitlines()
    assert csv[0] == ",".join(irdiff.ROW_COLUMNS) and len(csv) == 3
    no_diff = run(standin, ROOT, "cl", "--no-diff", "--full").stdout
    assert "\n--- " not in no_diff and "k_kernel" in no_diff
    assert json.loads(run(standin, ROOT, "cl", "--no-diff", "--json").stdout)["kernels"][0]["diff"] == ""


def test_cli_no_triton_and_ir_unread_exit_1(standin):
    none = run(standin, ROOT, "none")
    assert none.exit_code == 1
    assert "neither side compiled a .ttgir (NO_TRITON): no IR to compare" in none.stdout
    unread = run(standin, ROOT, "unread", "--json")
    assert unread.exit_code == 1 and json.loads(unread.stdout)["problem"] == "IR_UNREAD"
    assert "after: its IR was not read in full (IR_UNREAD)" in unread.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        ((ROOT, "nope"), f"no op 'nope' in {ROOT}; its ops: added:float16, cl:float16, configs:float16"),
        ((ROOT, "cl:float32"), "no cl:float32 in ab_rlc_20261012_101500; cl was run as cl:float16"),
        (("ab_nowhere", "cl"), "no root 'ab_nowhere'"),
        ((ROOT, "cl", "--round", "2"), "is a screening root: its one pair is round 0; drop --round"),
        ((ROOT, "cl", "--side", "after"), "--side is for two roots"),
        ((ROOT, "cl", "--kernel", "nope"), "no kernel 'nope'"),
        ((ROOT, "cl", "--rule", "v9"), "'v9' is not one of"),
    ],
)
def test_cli_usage_errors_exit_2(standin, args, message):
    result = run(standin, *args)
    assert result.exit_code == 2 and message in result.stderr, result.output


def test_cli_in_a_real_process_on_a_pipe(standin):
    """Run as a user runs it: exit status and plain text through a pipe."""
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", "diff", ROOT, "added", "--db", str(standin[0])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^new_kernel\s+only after\s+2048\s+1\s", done.stdout, re.M) and "\x1b[" not in done.stdout


# -- datasette ------------------------------------------------------------------------------


def fetch(ds, path):
    return asyncio.run(ds.client.get(path))


def test_datasette_page_of_a_pair(standin):
    ds = Datasette([str(standin[0])])
    query = f"root={ROOT}&op=cl&dtype={DTYPE}&rule="
    rows = fetch(ds, f"/diff/kernel_diff.json?_shape=array&{query}").json()
    with Store(standin[0]) as store:
        expected = irdiff.diff(store, ROOT, "cl")["kernels"]
    assert [(r["kernel"], r["status"], r["paired_by"], r["ir_diff"]) for r in rows] == [
        (e["kernel"], e["status"], e["paired_by"], e["diff"]) for e in expected
    ]
    assert [(r["convert_layout"], r["num_warps"], r["shared"]) for r in rows] == [("2 -> 3", "4", "0"), ("2", "4", "0")]
    page = fetch(ds, f"/diff/kernel_diff?{query}").text
    assert '<pre class="zlstore-diff">' in page
    assert re.search(r'<span class="add">\+ *%\d+ = ttg\.convert_layout', page)
    assert re.search(r'<span class="head">--- .*k_kernel\.ttgir \(before, normalized by v3\)</span>', page)
    # titled by its title, not its SQL; a long line wraps in its column, never past the page's edge
    assert re.search(r"<title>Which kernels changed in one screening pair: diff</title>", page), page[:500]
    assert "white-space:pre-wrap" in page and "white-space:pre;" not in page
    v4 = fetch(ds, f"/diff/kernel_diff.json?_shape=array&root={ROOT}&op=locs&dtype={DTYPE}&rule=v4").json()
    assert [r["status"] for r in v4] == ["same"]


def test_datasette_verdicts_link_to_the_pair(standin):
    ds = Datasette([str(standin[0])])
    page = fetch(ds, "/diff/verdicts?op=cl").text
    link = re.search(r'IR_CHANGED <a href="([^"]+)"[^>]*>kernels</a>', page)
    assert link, page[-2000:]
    target = link.group(1).replace("&amp;", "&")
    assert target == f"/diff/kernel_diff?root={ROOT}&op=cl&dtype={DTYPE}&rule=v3"
    assert "zlstore-diff" in fetch(ds, target).text


# -- the real trees (H200, FlagGems 2026-08-21) ---------------------------------------------

REAL = Path("/work/shared/real")
REAL_SCREEN, REAL_CAMPAIGN = "ab_rlc_20261130_025432", "campaign_20261130_030313"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    trees = sorted(REAL.glob("*.txz"))
    if not trees:
        pytest.skip(f"the real trees are not here ({REAL})")
    dest = tmp_path_factory.mktemp("real")
    for tree in trees:
        subprocess.run(["tar", "xJf", str(tree), "-C", str(dest)], check=True)
    path = dest / "real.db"
    with Store(path) as store:
        store.ingest([dest / "runs", dest / "runs2"])
    return path


def test_real_abs_differs_only_in_loc_paths(real):
    with Store(real) as store:
        v3 = irdiff.diff(store, REAL_SCREEN, "abs")
        v4 = irdiff.diff(store, REAL_SCREEN, "abs:float16", rule="v4")
    assert v3["verdict"] == "IR_CHANGED" and v4["verdict"] == "NO_IR_DIFF"
    assert by_status(v3) == {"changed": 2, "same": 1} and by_status(v4) == {"same": 3}
    for row in (r for r in v3["kernels"] if r["status"] == "changed"):
        assert row["kernel"] == "abs_func_kernel_rank_1" and row["paired_by"] == irdiff.BY_STRICTEST
        removed, added = changed_lines(row["diff"])
        assert removed and all("loc(" in l and "abs_float16_before" in l for l in removed)
        assert all("loc(" in l and "abs_float16_after" in l for l in added)


def test_real_shared_memory_comes_from_the_kernels_json(real):
    with Store(real) as store:
        rows = irdiff.diff(store, REAL_CAMPAIGN, "topk:float16", round_=2, with_diff=False)["kernels"]
    assert len(rows) == 17 and {r["status"] for r in rows} == {"same"}
    for row in rows:
        for side in ("before", "after"):
            meta = json.loads(Path(row[f"path_{side}"]).with_suffix(".json").read_text())
            assert (row[f"shared_{side}"], row[f"num_warps_{side}"]) == (meta["shared"], meta["num_warps"])
    assert {r["shared_before"] for r in rows} > {0, 32}  # real values, not a default


def test_real_campaign_needs_a_round(real):
    result = CliRunner().invoke(cli, ["diff", REAL_CAMPAIGN, "topk", "--db", str(real)])
    assert result.exit_code == 2
    assert "is a campaign root: give --round N (its rounds of topk:float16: 1, 2, 3)" in result.stderr
    two = CliRunner().invoke(
        cli,
        [
            "diff",
            f"{REAL_SCREEN}:topk",
            f"{REAL_CAMPAIGN}:topk",
            "--round",
            "1",
            "--rule",
            "v4",
            "--no-diff",
            "--db",
            str(real),
        ],
    )
    assert two.exit_code == 0 and "\n17 same (v4: " in two.stdout


def test_a_store_from_before_shared_memory_diffs_without_it(tmp_path):
    """A store made by schema version 1 gains kernels.shared (migration 12),
    NULL for the kernels it holds: diff shows them, shared unknown."""
    import shutil

    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store-v1.db", path)
    with Store(path) as store:
        document = irdiff.diff(store, "ab_rlc_20261014_083000", "topk")
    assert len(document["kernels"]) == 2
    assert all(r["shared_before"] is None and r["shared_after"] is None for r in document["kernels"])
    assert all(r["num_warps_before"] is not None for r in document["kernels"])
    result = CliRunner().invoke(cli, ["diff", "ab_rlc_20261014_083000", "topk", "--no-diff", "--db", str(path)])
    assert result.exit_code == 0, result.output


def test_an_ir_text_colors_nothing_on_a_terminal(tmp_path):
    """A .ttgir holding a terminal control sequence (a hostile or damaged
    tree) reaches the terminal escaped, colored only where diff colors it;
    --json keeps the exact text."""
    evil = TEXT["k+1"].replace("module", "\x1b[2J\x1b]0;owned\x07module", 1)
    screening_root(
        tmp_path / "runs",
        ROOT,
        {"esc": {"before": [("AAA", "k_kernel", TEXT["k"])], "after": [("BBB", "k_kernel", evil)]}},
    )
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
    shown = CliRunner().invoke(cli, ["diff", ROOT, "esc", "--full", "--db", str(db)], color=True).stdout
    assert "\x1b[2J" not in shown and "\x07" not in shown and "\\x1b[2J\\x1b]0;owned\\x07" in shown
    assert "\x1b[32m+" in shown  # diff's own colors stay
    document = json.loads(CliRunner().invoke(cli, ["diff", ROOT, "esc", "--json", "--db", str(db)]).stdout)
    assert "\x1b[2J\x1b]0;owned\x07" in document["kernels"][0]["diff"]
