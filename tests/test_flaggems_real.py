"""What zlstore flaggems really wrote on a GPU (tests/data/real/flaggems_h200_20261205,
docs/flaggems-real.md): FlagGems' own benchmark (source of 2026-08-21, bmm's
autotune list trimmed to 2 configs) under torch 2.11 and Triton 3.6 on one
H200, screened by `zlstore run screen --command 'zlstore flaggems cell ...'`
(bmm float32, softmax float32, abs float16; TRITON_F32_DEFAULT ieee / tf32)
and then campaigned, 3 rounds on 2 cards sharing the GPU, by `zlstore run
campaign --command 'zlstore flaggems repeat ...'`, both into one store. The
trees are ingested afresh here and must say what the device's own store said."""

import json
import sqlite3
import subprocess
import sys

import pytest

REAL = __import__("pathlib").Path(__file__).resolve().parent / "data" / "real" / "flaggems_h200_20261205"
CALIBER = {"backend": "cuda", "bench_level": "core", "cudagraph": "0", "isolate_tuner_cache": "1",
           "direct_repeat": "1", "shape_mode": "default", "flagtune": "0"}
# The three large bmm shapes are faster with tf32 (tl.dot on tensor cores);
# everything else is no change or inconclusive.
BMM_FASTER = {"[[2,4096,4096],[2,4096,4096]]", "[[16,1024,1024],[16,1024,1024]]",
              "[[16,4096,4096],[16,4096,4096]]"}


def zl(db, *args):
    done = subprocess.run([sys.executable, "-m", "zlstore", *args, "--db", str(db)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def query(db, sql):
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


@pytest.fixture(scope="module", params=["a"])
def real(request, tmp_path_factory):
    """One device run's tree (runs/screen_<run>, runs/campaign_<run>), ingested into a new store."""
    run = request.param
    top = tmp_path_factory.mktemp(f"flaggems_real_{run}")
    subprocess.run(["tar", "xJf", str(REAL / f"{run}_runs.txz"), "-C", str(top)], check=True)
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
    v3 = {r["op"]: r for r in json.loads(zl(real["db"], "screen", screen, "--json"))}
    assert {op: r["verdict"] for op, r in v3.items()} == {
        "bmm": "IR_CHANGED", "softmax": "NO_IR_DIFF",
        "abs": "IR_CHANGED"}          # only loc() paths differ: each cell has its own FlagGems cache
    assert v3["abs"]["hint"] == "differs only in source locations: NO_IR_DIFF under v4"
    assert v3["bmm"]["hint"] is None and v3["bmm"]["cl_before"] == v3["bmm"]["cl_after"] == 2
    assert v3["bmm"]["range_label"] == "indicative (one round)" and 1.7 < v3["bmm"]["median"] < 2.0
    assert v3["softmax"]["range_label"] == "noise floor"
    v4 = {r["op"]: r["verdict"] for r in json.loads(zl(real["db"], "screen", screen, "--rule", "v4", "--json"))}
    assert v4 == {"bmm": "IR_CHANGED", "softmax": "NO_IR_DIFF", "abs": "NO_IR_DIFF"}


def test_the_campaign_ran_two_cards_three_rounds_and_finds_bmm_faster(real):
    campaign = f"campaign_{real['run']}"
    cells = query(real["db"], f"""SELECT cells.op, cells.card, cells.round FROM cells JOIN roots
                                  ON roots.id = cells.root_id WHERE roots.name = '{campaign}'""")
    assert len(cells) == 12
    assert {(c["op"], c["card"]) for c in cells} == {("abs", 0), ("bmm", 1)}
    assert {c["round"] for c in cells} == {1, 2, 3}
    ranges = json.loads(zl(real["db"], "ab", campaign, "--json"))
    assert len(ranges) == 10 and {r["rounds"] for r in ranges} == {3}
    faster = {r["shape"] for r in ranges if r["finding"] == "faster"}
    assert faster == BMM_FASTER
    for r in ranges:
        if r["shape"] in BMM_FASTER:
            assert r["op"] == "bmm" and 1.7 < r["ci_low"] <= r["effect"] <= r["ci_high"] < 2.0
        else:
            assert r["finding"] in ("no change", "inconclusive"), r
    assert not [r for r in ranges if r["finding"] == "slower"]
    assert "10 ranges: 3 faster, 0 slower, 1 no change, 6 inconclusive" in zl(real["db"], "ab", campaign)
