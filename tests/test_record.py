"""`zlstore record`: finished cells only, and eight writers (one per card),
an ingest and a reader on one database at once with nothing lost or locked."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from zlstore import Store
from zlstore.store.fingerprints import cell_rules
from zlstore.cli import cli

from . import generator
from .fake_bench import make_campaign_tree, spec, write_cell

# Eight writers start at once and contend from their first cell: 120 cells
# each keep them at it for the whole run (300 took twice as long);
# bench/concurrency.py measures the load.
WRITERS, CELLS_PER_WRITER = 8, 120
ROUNDS, OPS_PER_CARD = 6, CELLS_PER_WRITER // 12


def test_record_an_unfinished_cell_stores_nothing_and_says_so(tmp_path):
    root = tmp_path / "runs" / "campaign_x"
    root.mkdir(parents=True)
    (root / "campaign.env").write_text("KIND=campaign\nROUNDS=1\nCARDS=1\n")
    cell = root / "card0" / "ab_1" / "topk" / "r1" / "before"
    write_cell(cell, spec("topk", "float16", "before", 1, 0, 1.0))
    env_text = (cell / "cell.env").read_text()
    (cell / "cell.env").unlink()  # still running: no cell.env yet
    db = tmp_path / "r.db"
    runner = CliRunner()

    result = runner.invoke(cli, ["record", str(cell), "--db", str(db)])
    assert result.exit_code == 3, result.output
    assert "unfinished" in result.output and str(cell) in result.output
    with Store(db) as store:
        assert store.conn.execute("SELECT count(*) FROM cells").fetchone()[0] == 0
        assert store.conn.execute("SELECT count(*) FROM roots").fetchone()[0] == 0

    (cell / "cell.env").write_text(env_text.replace("RC=0\n", ""))  # cell.env without RC: still unfinished
    assert runner.invoke(cli, ["record", str(cell), "--db", str(db)]).exit_code == 3

    (cell / "cell.env").write_text(env_text)  # the harness writes cell.env last, with RC
    result = runner.invoke(cli, ["record", str(cell), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["cells_added"] == 1
    result = runner.invoke(cli, ["record", str(cell), "--db", str(db), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["cells_unchanged"] == 1
    with Store(db) as store:
        row = store.conn.execute("SELECT op, dtype, side, round, card, rc FROM cells").fetchone()
        assert tuple(row) == ("topk", "float16", "before", 1, 0, 0)


WRITER = r"""
import json, sys
from zlstore import Store, db
paths = json.loads(open(sys.argv[2]).read())
failed = 0
with Store(sys.argv[1]) as store:
    for path in paths:                       # one record per cell, as a harness does
        summary = store.record([path])
        if summary["cells_added"] + summary["cells_unchanged"] + summary["cells_replaced"] != 1:
            failed += 1
print(json.dumps({"retries": db.BusyStats.retries, "failed": failed}))
"""

READER = r"""
import json, os, sqlite3, sys, time
path, stop = sys.argv[1], sys.argv[2]
queries, errors, conn = 0, [], None
while not os.path.exists(stop):
    try:
        if conn is None:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        conn.execute("SELECT count(*) FROM cells").fetchone()
        conn.execute("SELECT * FROM cell_summary ORDER BY cell_id DESC LIMIT 20").fetchall()
        queries += 1
    except sqlite3.Error as error:
        errors.append(str(error))
    time.sleep(0.02)
print(json.dumps({"queries": queries, "errors": errors}))
"""


def test_eight_writers_an_ingest_and_a_reader(tmp_path):
    root = tmp_path / "runs" / "campaign_big"
    per_card = make_campaign_tree(root, WRITERS, OPS_PER_CARD, ROUNDS, generator.CAMPAIGN_CALIBER)
    assert all(len(cells) == CELLS_PER_WRITER for cells in per_card)
    db = tmp_path / "live.db"
    Store(db).close()  # the reader opens read-only, as datasette does: the file must exist
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(db), str(stop)], stdout=subprocess.PIPE, text=True, env=env
    )
    writers = []
    for card, cells in enumerate(per_card):
        listing = tmp_path / f"cells{card}.json"
        listing.write_text(json.dumps([str(c) for c in cells]))
        writers.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(db), str(listing)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    ingest = subprocess.Popen(
        [sys.executable, "-m", "zlstore", "ingest", str(root), "--db", str(db), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        outputs = [w.communicate(timeout=300) for w in writers]
        ingest_out, ingest_err = ingest.communicate(timeout=300)
    finally:
        stop.write_text("")
        reader_out, _ = reader.communicate(timeout=60)

    for w, (out, err) in zip(writers, outputs):
        assert w.returncode == 0, err
        assert "locked" not in err
        assert json.loads(out)["failed"] == 0
    assert ingest.returncode == 0, ingest_err
    assert json.loads(ingest_out)["cells_failed"] == 0
    reading = json.loads(reader_out)
    assert reading["errors"] == [] and reading["queries"] > 0

    total = WRITERS * CELLS_PER_WRITER
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("SELECT count(*), count(DISTINCT path) FROM cells").fetchone() == (total, total)
        expected = {str(c) for cells in per_card for c in cells}
        assert {p for (p,) in conn.execute("SELECT path FROM cells")} == expected
        # every cell whole: its rows, its kernels, a fingerprint per rule
        partial = conn.execute(
            """SELECT count(*) FROM cells
               WHERE n_rows != (SELECT count(*) FROM measurements m WHERE m.cell_id = cells.id)
                  OR n_rows != 3 OR n_kernels != 1
                  OR (SELECT count(*) FROM kernels k WHERE k.cell_id = cells.id) != 1
                  OR (SELECT count(*) FROM fingerprints f WHERE f.cell_id = cells.id) != ?""",
            (len(cell_rules(conn, "campaign")),),
        ).fetchone()[0]
        assert partial == 0
        assert conn.execute("SELECT count(*) FROM roots").fetchone()[0] == 1
    finally:
        conn.close()
