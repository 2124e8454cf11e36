"""What zlstore flaggems really wrote on a GPU (tests/data/real/flaggems_20261205,
docs/flaggems-real.md): FlagGems' own benchmark (source of 2026-08-21, bmm's
autotune list trimmed to 2 configs) under torch 2.11 and Triton 3.6,
screened by `zlstore run screen --command 'zlstore flaggems cell ...'` (bmm
float32, softmax float32, abs float16; TRITON_F32_DEFAULT ieee / tf32) and
then campaigned, 3 rounds on 2 cards sharing the GPU, by `zlstore run
campaign --command 'zlstore flaggems repeat ...'`, twice on 2026-12-05: run
a on an H200 (before cells recorded provenance), run b on an H100 (with it),
both into one store (store_a_b.db.xz, the device's own). The trees are
ingested afresh here and must say what the device's store said."""

import json
import sqlite3
import subprocess
import sys

import pytest

from zlstore.show import irdiff

REAL = __import__("pathlib").Path(__file__).resolve().parent / "data" / "real" / "flaggems_20261205"
TREES = {"a": "a_h200_runs.txz", "b": "b_h100_runs.txz"}
# What run b's cells ran on (run a's record none: unknown).
H100 = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "gpu_count": "1",
    "devices": "0",
    "driver": "580.159.04",
    "runtime": "cuda 13.0",
    "torch": "2.11.0+cu130",
    "triton": "3.6.0",
    "triton_commit": None,
    "flag_gems": None,  # FlagGems ran from its source: its own version says "unknown"
    "flaggems_commit": "ed2508bcb5a0",
    "python": "3.12.3",
}
CALIBER = {
    "backend": "cuda",
    "bench_level": "core",
    "cudagraph": "0",
    "isolate_tuner_cache": "1",
    "direct_repeat": "1",
    "shape_mode": "default",
    "flagtune": "0",
}
# The large bmm shapes are faster with tf32 (tl.dot on tensor cores);
# everything else is no change or inconclusive. In run a one round of
# 16x2048x2048 was disturbed by the other card on the GPU: inconclusive.
BMM_LARGE = [
    "[[2,4096,4096],[2,4096,4096]]",
    "[[16,1024,1024],[16,1024,1024]]",
    "[[16,2048,2048],[16,2048,2048]]",
    "[[16,4096,4096],[16,4096,4096]]",
]
BMM_FASTER = {"a": set(BMM_LARGE) - {"[[16,2048,2048],[16,2048,2048]]"}, "b": set(BMM_LARGE)}


def rows(db, *args):
    """A command's --json rows (`{"summary": ..., "rows": [...]}`)."""
    return json.loads(zl(db, *args, "--json"))["rows"]


def zl(db, *args):
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", *args, "--db", str(db)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def query(db, sql):
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


@pytest.fixture(scope="module", params=sorted(TREES))
def real(request, tmp_path_factory):
    """One device run's tree (runs/screen_<run>, runs/campaign_<run>), ingested into a new store."""
    run = request.param
    top = tmp_path_factory.mktemp(f"flaggems_real_{run}")
    subprocess.run(["tar", "xJf", str(REAL / TREES[run]), "-C", str(top)], check=True)
    db = top / "z.db"
    summary = json.loads(zl(db, "ingest", str(top / "runs"), "--json"))
    return {"run": run, "db": db, "top": top, "summary": summary}


def test_every_cell_and_row_is_stored_under_one_caliber(real):
    summary = real["summary"]
    assert summary["cells_added"] == 18 and summary["rows_added"] == 90 and summary["problems"] == []
    cells = query(real["db"], "SELECT cells.*, roots.kind FROM cells JOIN roots ON roots.id = cells.root_id")
    assert len(cells) == 18 and {c["rc"] for c in cells} == {0}
    assert sum(c["kind"] == "screen" for c in cells) == 6
    # 5 shapes per op and cell: FlagGems' core level
    assert query(real["db"], "SELECT count(*) AS n FROM measurements") == [{"n": 90}]
    (caliber,) = query(real["db"], "SELECT * FROM calibers")
    assert {k: caliber[k] for k in CALIBER} == CALIBER
    assert {c["caliber_id"] for c in cells} == {caliber["id"]}


def test_the_screen_verdicts(real):
    screen = f"screen_{real['run']}"
    v3 = {r["op"]: r for r in rows(real["db"], "screen", screen)}
    assert {op: r["verdict"] for op, r in v3.items()} == {
        "bmm": "IR_CHANGED",
        "softmax": "NO_IR_DIFF",
        "abs": "IR_CHANGED",
    }  # only loc() paths differ: each cell has its own FlagGems cache
    assert v3["abs"]["hint"] == "differs only in source locations: NO_IR_DIFF under v4"
    assert v3["bmm"]["hint"] is None and v3["bmm"]["cl_before"] == v3["bmm"]["cl_after"] == 2
    assert v3["bmm"]["range_label"] == "indicative (one round)" and 1.7 < v3["bmm"]["median"] < 2.0
    assert v3["softmax"]["range_label"] == "noise floor"
    v4 = {r["op"]: r["verdict"] for r in rows(real["db"], "screen", screen, "--rule", "v4")}
    assert v4 == {"bmm": "IR_CHANGED", "softmax": "NO_IR_DIFF", "abs": "NO_IR_DIFF"}


def test_the_campaign_ran_two_cards_three_rounds_and_finds_bmm_faster(real):
    campaign = f"campaign_{real['run']}"
    cells = query(
        real["db"],
        f"""SELECT cells.op, cells.card, cells.round FROM cells JOIN roots
                                  ON roots.id = cells.root_id WHERE roots.name = '{campaign}'""",
    )
    assert len(cells) == 12
    # one op a card (the plan weighs them by the screen's elapsed times)
    assert sorted(c["op"] for c in cells if c["card"] == 0) in (["abs"] * 6, ["bmm"] * 6)
    assert {c["card"] for c in cells} == {0, 1} and {c["op"] for c in cells} == {"abs", "bmm"}
    assert {c["round"] for c in cells} == {1, 2, 3}
    ranges = rows(real["db"], "ab", campaign)
    assert len(ranges) == 10 and {r["rounds"] for r in ranges} == {3}
    faster = {r["shape"] for r in ranges if r["finding"] == "faster"}
    assert faster == BMM_FASTER[real["run"]]
    for r in ranges:
        if r["shape"] in faster:
            assert r["op"] == "bmm" and 1.7 < r["ci_low"] <= r["effect"] <= r["ci_high"] < 2.0
        else:
            assert r["finding"] in ("no change", "inconclusive"), r
    assert not [r for r in ranges if r["finding"] == "slower"]
    assert sum(r["finding"] == "no change" for r in ranges) == 1  # abs's one well-measured large shape
    counts = {
        "a": "3 faster, 0 slower, 1 no change, 6 inconclusive",
        "b": "4 faster, 0 slower, 1 no change, 5 inconclusive",
    }
    assert f"10 ranges: {counts[real['run']]}" in zl(real["db"], "ab", campaign)


def test_what_the_cells_ran_on(real):
    """Run b's cells record the H100, its driver, torch, Triton, the FlagGems
    commit and Python, as the benchmark's own Python saw them (the probe);
    run a's, made before provenance, record none."""
    cells = query(real["db"], "SELECT * FROM cell_summary")
    assert len(cells) == 18
    if real["run"] == "a":
        assert {c["environment_id"] for c in cells} == {None}
        return
    (environment,) = query(real["db"], "SELECT * FROM environments")
    assert {k: environment[k] for k in H100} == H100
    assert {c["environment_id"] for c in cells} == {environment["id"]}
    heading = zl(real["db"], "screen", "screen_b").splitlines()[1]
    assert heading.startswith(
        "  ran on: NVIDIA H100 80GB HBM3 x1, driver 580.159.04, runtime cuda 13.0, "
        "torch 2.11.0+cu130, triton 3.6.0, FlagGems commit ed2508bcb5a0, Python 3.12.3"
    )


def test_the_devices_own_store_holds_both_runs_and_their_history(tmp_path):
    """store_a_b.db.xz: the store run screen and run campaign wrote on the
    device, run a's cells (H200, no provenance) migrated on the H100 before
    run b's were added. bmm's history shows the environment become known and
    16x2048x2048 turn from inconclusive (a disturbed round) to faster."""
    db = tmp_path / "z.db"
    db.write_bytes(__import__("lzma").decompress((REAL / "store_a_b.db.xz").read_bytes()))
    roots = query(db, "SELECT name, kind FROM roots ORDER BY id")
    assert [(r["name"], r["kind"]) for r in roots] == [
        ("screen_a", "screen"),
        ("campaign_a", "campaign"),
        ("screen_b", "screen"),
        ("campaign_b", "campaign"),
    ]
    history = json.loads(zl(db, "history", "bmm:float32", "--json"))
    assert [e["root"] for e in history["entries"]] == ["screen_a", "campaign_a", "screen_b", "campaign_b"]
    assert [e["environment"] is None for e in history["entries"]] == [True, True, False, False]
    assert history["entries"][3]["environment"]["gpu"] == "NVIDIA H100 80GB HBM3"
    (flip,) = history["flips"]
    assert flip["shape"] == "[[16,2048,2048],[16,2048,2048]]"


def test_diff_of_bmms_real_pair(real):
    """`zlstore diff` on bmm's screening pair: each autotuned config paired
    with itself (64x64 with 64x64), although tf32 raised both one's shared
    memory; ieee's tt.dot on FMA layouts becomes a wgmma (warp_group_dot)."""
    document = json.loads(zl(real["db"], "diff", f"screen_{real['run']}", "bmm:float32", "--json"))
    bmm = [r for r in document["kernels"] if r["kernel"] == "bmm_kernel"]
    assert [(r["status"], r["paired_by"]) for r in bmm] == [("changed", irdiff.BY_SIGNATURE)] * 2
    assert all(r["tiles_before"] == r["tiles_after"] for r in bmm)  # config to config
    assert sorted(r["tiles_before"] for r in bmm) == ["32x128 128x32 128x128", "32x64 64x32 64x64"]
    said = {c["text"]: c["kernels"] for c in document["summary"]["changes"]}
    assert said["tt.dot -> ttng.warp_group_dot"] == 2 and document["summary"]["pairs"] == 5
    assert said["ttng.warp_group_dot: inputPrecision = 0 : i32 added"] == 2
    assert sorted((r["shared_before"], r["shared_after"]) for r in bmm) == [(32768, 49152), (65536, 98304)]
    for row in bmm:
        removed = [l for l in row["diff"].splitlines() if l.startswith("-") and " tt.dot " in l]
        added = [l for l in row["diff"].splitlines() if l.startswith("+") and " ttng.warp_group_dot " in l]
        assert len(removed) == 1 and len(added) == 1
    assert {r["status"] for r in document["kernels"] if r["kernel"] == "fill_scalar_kernel"} == {"same"}


def test_report_of_the_real_campaign(real, tmp_path):
    campaign = f"campaign_{real['run']}"
    out = tmp_path / f"{campaign}.md"
    zl(real["db"], "report", campaign, "-o", str(out))
    text = out.read_text()
    counts = {
        "a": "3 faster, 0 slower, 1 no change, 6 inconclusive",
        "b": "4 faster, 0 slower, 1 no change, 5 inconclusive",
    }
    assert f"10 ranges: {counts[real['run']]}" in text
    assert "switch: TRITON_F32_DEFAULT" in text and (tmp_path / f"{campaign}.svg").is_file()
    ran_on = (
        "ran on: NVIDIA H100 80GB HBM3 x1, driver 580.159.04, runtime cuda 13.0, torch 2.11.0+cu130, "
        "triton 3.6.0, FlagGems commit ed2508bcb5a0, Python 3.12.3"
    )
    assert (ran_on in text) == (real["run"] == "b")
