"""A store of several switches and GPUs (issue 41; tests/several_roots.py):
real FlagGems runs on an H200 and an H100, the real H200 tf32 screen and
campaign, the real H100 tf32 screen of the autotuned baddbmm and bmm and
the real H100 A/A screen on a dead axis (2026-12-07), and a SYNTHETIC A/A
screen and campaign on a dead axis (no real dead-axis campaign exists). A
campaign must read the same whether it is alone in its store or beside the
others (ARTIFACTS.md, Noise floors), its floors come from its own machine
and its own screening root only, and its history compares like with like
(ARTIFACTS.md, Across roots)."""

import json
import sqlite3
import subprocess
import sys

import pytest

from . import dead_axis_tree, several_roots

# what differs between two stores by construction, not by judgement
IDS = {"root_id", "caliber_id", "root_path", "range_rowid", "before_cell_id", "after_cell_id"}


def zl(db, *args, ok=(0,)):
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", *args, "--db", str(db)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode in ok, done.stderr
    return done.stdout


def rows(db, *args):
    return json.loads(zl(db, *args, "--json"))["rows"]


def comparable(found):
    """The rows without what names the store rather than the campaign: ids,
    and the --db of the command an IR change summary suggests."""
    return [
        {
            k: ({**v, "command": None} if k == "ir_changes" and isinstance(v, dict) else v)
            for k, v in row.items()
            if k not in IDS
        }
        for row in found
    ]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    return several_roots.unpack(tmp_path_factory.mktemp("trees"))


@pytest.fixture(scope="module")
def stores(trees, tmp_path_factory):
    """The shared store of every tree, and one store per tree alone."""
    base = tmp_path_factory.mktemp("stores")
    made = {"all": base / "all.db"}
    for name in several_roots.ORDER:
        zl(made["all"], "ingest", str(trees[name]), ok=(0, 1))
    for name in ("h100", "h200", "dead_axis"):
        made[name] = base / f"{name}.db"
        zl(made[name], "ingest", str(trees[name]), ok=(0, 1))
    return made


CAMPAIGNS = {"h100": "campaign_b", "h200": "campaign_a", "dead_axis": dead_axis_tree.CAMPAIGN}
SCREENS = {"h100": "screen_b", "h200": "screen_a", "dead_axis": dead_axis_tree.SCREEN}


@pytest.mark.parametrize("tree", sorted(CAMPAIGNS))
def test_a_campaign_reads_the_same_beside_other_machines(stores, tree):
    alone = comparable(rows(stores[tree], "ab", CAMPAIGNS[tree]))
    beside = comparable(rows(stores["all"], "ab", CAMPAIGNS[tree]))
    assert alone, "the campaign has ranges"
    assert beside == alone
    # finding, effect, interval, q and floor are among what was compared
    assert {"finding", "effect", "ci_low", "ci_high", "q_value", "noise_floor", "floor_rows", "floor_roots"} <= set(
        alone[0]
    )


@pytest.mark.parametrize("tree", sorted(SCREENS))
def test_a_screen_reads_the_same_beside_other_machines(stores, tree):
    alone = comparable(rows(stores[tree], "screen", SCREENS[tree]))
    assert alone
    assert comparable(rows(stores["all"], "screen", SCREENS[tree])) == alone


def test_the_views_behind_ab_read_the_same(stores):
    def view(db):
        import sqlite3

        conn = sqlite3.connect(db)
        conn.row_factory = sqlite3.Row
        try:
            found = conn.execute(
                "SELECT op, dtype, shape, rounds, effect, ci_low, ci_high, p_value, q_value, finding, noise_floor, "
                "clears_floor, floor_note, floor_rows, floor_roots FROM ab_ranges WHERE root = 'campaign_b' "
                "ORDER BY op, dtype, shape"
            )
            return [dict(r) for r in found]
        finally:
            conn.close()

    assert view(stores["all"]) == view(stores["h100"])


def test_the_h100_campaign_takes_no_floor_from_the_h200_dead_axis(stores):
    """The issue's case: the H200 A/A screen measured bmm NO_IR_DIFF (a
    floor of 0.27 on its small shape); the H100 campaign's bmm has no
    floor of its own machine, and says so."""
    dead_bmm = [r for r in rows(stores["all"], "noise", "--op", "bmm") if r["roots"] == dead_axis_tree.SCREEN]
    assert dead_bmm and max(r["floor"] for r in dead_bmm) == pytest.approx(0.27)
    for row in rows(stores["all"], "ab", "campaign_b", "--op", "bmm"):
        assert row["noise_floor"] is None
        assert "its machine" in row["floor_note"]


def test_floors_are_per_shape_and_name_their_rows_and_roots(stores):
    """The dead-axis campaign's softmax: its tiny shape's floor (0.4) stays
    beside that shape; the large one has its own."""
    found = {r["shape"]: r for r in rows(stores["all"], "ab", dead_axis_tree.CAMPAIGN, "--op", "softmax")}
    assert found["[[64,64],1]"]["noise_floor"] == pytest.approx(0.4)
    assert found["[[4096,4096],1]"]["noise_floor"] == pytest.approx(0.003)
    for row in found.values():
        assert row["floor_rows"] == 1 and row["floor_roots"] == dead_axis_tree.SCREEN


def test_an_unknown_machine_takes_only_its_own_screening_root(stores):
    """campaign_a's cells recorded no environment: its floors are screen_a's
    alone, never the tf32 screen's (also an H200, also unknown) of the
    same op and shapes."""
    for row in rows(stores["all"], "ab", "campaign_a"):
        assert row["floor_roots"] in (None, "screen_a")
    noise = rows(stores["all"], "noise", "--op", "softmax")
    unknown = {r["roots"] for r in noise if r["gpu"] is None}
    assert {"screen_a", "ab_rlc_20261130_025432"} <= unknown  # each its own row, never pooled
    assert all("," not in r["roots"] for r in noise if r["gpu"] is None)


def test_noise_lists_machine_and_roots(stores):
    out = zl(stores["all"], "noise", "--op", "softmax")
    assert "NVIDIA H100 80GB HBM3, driver 580.159.04, runtime cuda 13.0" in out
    assert "unknown" in out
    found = rows(stores["all"], "noise", "--op", "softmax")
    h100 = [r for r in found if r["gpu"] == "NVIDIA H100 80GB HBM3"]
    assert h100 and all("screen_b" in r["roots"].split(",") for r in h100)
    assert all(r["n_roots"] == len(r["roots"].split(",")) for r in found)
    # one floor per shape: no (shape, caliber, machine, roots) twice
    keys = [(r["shape"], r["caliber_id"], r["machine"], r["roots"]) for r in found]
    assert len(keys) == len(set(keys))


# -- history: like with like ------------------------------------------------------


def history(db, *args):
    return json.loads(zl(db, "history", *args, "--json"))


def test_history_names_a_switch_change_like_a_provenance_change(stores):
    entries = history(stores["all"], "bmm")["entries"]
    by_root = {e["root"]: e for e in entries}
    dead = by_root[dead_axis_tree.SCREEN]
    assert dead["switch"] == {"name": "ZL_DEAD_AXIS", "before": "off", "after": "on"}
    assert dead["axis"] == "dead" and by_root[dead_axis_tree.CAMPAIGN]["axis"] == "dead"
    assert by_root["campaign_b"]["switch"] == {"name": "TRITON_F32_DEFAULT", "before": "ieee", "after": "tf32"}
    # the dead-axis screen comes after campaign_a: its first change is the switch
    assert entries[entries.index(dead) - 1]["root"] == "campaign_a"
    assert dead["changes"][0] == "switch: TRITON_F32_DEFAULT ieee->tf32 -> ZL_DEAD_AXIS off->on"
    after = entries[entries.index(by_root[dead_axis_tree.CAMPAIGN]) + 1]
    assert after["changes"][0] == "switch: ZL_DEAD_AXIS off->on -> TRITON_F32_DEFAULT ieee->tf32"
    out = zl(stores["all"], "history", "bmm")
    assert "switch: TRITON_F32_DEFAULT ieee->tf32 -> ZL_DEAD_AXIS off->on" in out
    assert "dead axis" in out


def test_a_flip_never_crosses_a_switch_or_a_dead_axis(stores):
    for op in ("bmm", "softmax", "abs"):
        result = history(stores["all"], op)
        switches = {e["root"]: e["switch"] for e in result["entries"]}
        axes = {e["root"]: e["axis"] for e in result["entries"]}
        for flip in result["flips"]:
            assert switches[flip["from"]["root"]] == switches[flip["to"]["root"]]
            assert "dead" not in (axes[flip["from"]["root"]], axes[flip["to"]["root"]])
        assert not any(dead_axis_tree.CAMPAIGN in (f["from"]["root"], f["to"]["root"]) for f in result["flips"])
    # the dead-axis campaign between the two tf32 campaigns changes none of
    # their flips: the same as in a store without it
    without = [f for f in history(stores["all"], "bmm", "--switch", "TRITON_F32_DEFAULT")["flips"]]
    assert without == history(stores["all"], "bmm")["flips"]


def test_history_of_one_switch(stores):
    result = history(stores["all"], "bmm", "--switch", "TRITON_F32_DEFAULT")
    assert result["entries"] and {e["switch"]["name"] for e in result["entries"]} == {"TRITON_F32_DEFAULT"}
    dead = history(stores["all"], "bmm", "--switch", "ZL_DEAD_AXIS")["entries"]
    assert [e["root"] for e in dead] == [dead_axis_tree.SCREEN, dead_axis_tree.CAMPAIGN]
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", "history", "bmm", "--switch", "NO_SUCH", "--db", str(stores["all"])],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "TRITON_F32_DEFAULT, ZL_DEAD_AXIS" in done.stderr


def test_the_history_chart_never_joins_two_switches(stores):
    import sqlite3

    metadata = json.loads(zl(stores["all"], "metadata"))
    boards = metadata["plugins"]["datasette-dashboards"]
    query = next(b for name, b in boards.items() if name.startswith("history"))["charts"]["effect_over_time"]["query"]
    conn = sqlite3.connect(stores["all"])
    try:
        for switch in ("", "TRITON_F32_DEFAULT"):
            points = conn.execute(f"SELECT label, switch FROM ({query})", {"op": "bmm", "switch": switch}).fetchall()
            assert points
            series: dict[str, set[str]] = {}
            for label, name in points:
                series.setdefault(label, set()).add(name)
            assert all(len(names) == 1 for names in series.values())
            assert (switch == "") == any("ZL_DEAD_AXIS" in label and "(dead axis)" in label for label in series)
    finally:
        conn.close()


@pytest.mark.parametrize("tree", ["h100", "h200"])
def test_a_campaigns_report_reads_the_same_beside_other_machines(stores, tree, tmp_path):
    def report(db):
        out = tmp_path / db.stem
        out.mkdir()
        # one file name for both stores: the report suggests commands that name it
        with sqlite3.connect(db) as source, sqlite3.connect(out / "z.db") as copy:
            source.backup(copy)
        done = subprocess.run(
            [sys.executable, "-m", "zlstore", "report", CAMPAIGNS[tree], "--db", "z.db"],
            capture_output=True,
            text=True,
            cwd=out,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        # when each store read the tree is the one line that may differ
        return [line for line in done.stdout.splitlines() if "ingested at" not in line]

    assert report(stores[tree]) == report(stores["all"])


# -- the real H100 runs of 2026-12-07: an A/A screen and an autotuned tf32 screen ---------------

DEAD = several_roots.DEAD_SCREEN
TF32_H100 = several_roots.TF32_SCREEN_H100
H100_ROOTS = {"screen_b", "campaign_b", DEAD, TF32_H100}


def switches(db):
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return {r["root"]: dict(r) for r in conn.execute("SELECT * FROM root_switches")}
    finally:
        conn.close()


def test_the_real_dead_axis_screen_is_never_called_live(stores):
    """The real A/A screen kept softmax's IR, and its abs was cut by a time
    limit after its before side: with a pair unmeasured, its axis can be
    neither live nor proven dead."""
    row = switches(stores["all"])[DEAD]
    assert (row["switch"], row["before_value"], row["after_value"]) == ("ZL_DEAD_AXIS", "off", "on")
    verdicts = {r["op"]: r["verdict"] for r in rows(stores["all"], "screen", DEAD)}
    assert verdicts["softmax"] == "NO_IR_DIFF" and verdicts["abs"] != "NO_IR_DIFF"
    assert "IR_CHANGED" not in verdicts.values()
    expected = "dead" if set(verdicts.values()) == {"NO_IR_DIFF"} else "unknown"
    assert row["axis"] == expected
    # the synthetic one, every pair measured and kept, is dead
    assert switches(stores["all"])[dead_axis_tree.SCREEN]["axis"] == "dead"


def test_the_real_dead_axis_screen_is_no_part_of_tf32_history(stores):
    one = history(stores["all"], "softmax", "--switch", "TRITON_F32_DEFAULT")
    roots = [e["root"] for e in one["entries"]]
    assert TF32_H100 in roots and DEAD not in roots
    every = history(stores["all"], "softmax")
    entries = {e["root"]: e for e in every["entries"]}
    assert entries[DEAD]["switch"] == {"name": "ZL_DEAD_AXIS", "before": "off", "after": "on"}
    assert entries[DEAD]["changes"][0] == "switch: TRITON_F32_DEFAULT ieee->tf32 -> ZL_DEAD_AXIS off->on"
    for flip in every["flips"]:
        assert DEAD not in (flip["from"]["root"], flip["to"]["root"])
    assert every["flips"] == one["flips"]


def test_the_h100_tf32_screens_floors_stay_on_the_h100(stores):
    """The H100 tf32 screen kept softmax's IR (NO_IR_DIFF): its rows are
    floors of the H100 alone, never of an H200 campaign's ranges; the H100
    campaign reads the same alone (test_a_campaign_reads_the_same_beside_other_machines)."""
    screened = {r["op"]: r["verdict"] for r in rows(stores["all"], "screen", TF32_H100)}
    assert screened["softmax"] == "NO_IR_DIFF"
    new = {DEAD, TF32_H100}
    found = [r for r in rows(stores["all"], "noise") if new & set(r["roots"].split(","))]
    assert found and {r["op"] for r in found} >= {"softmax"}
    for row in found:
        assert row["gpu"] == "NVIDIA H100 80GB HBM3"
        assert set(row["roots"].split(",")) <= H100_ROOTS
    elsewhere = [
        name for name, row in switches(stores["all"]).items() if name not in H100_ROOTS and row["kind"] == "campaign"
    ]
    assert {"campaign_a", dead_axis_tree.CAMPAIGN} <= set(elsewhere)
    for campaign in elsewhere:
        for row in rows(stores["all"], "ab", campaign):
            assert not new & set((row["floor_roots"] or "").split(","))
