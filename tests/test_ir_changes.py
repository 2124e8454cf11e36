"""A finding's IR change (issue 41, "The report and ab carry what a reader
asks"): `ab --json` gives each faster or slower range its op's change
summary, the command and the kernel_diff page that show it, and the
report lists them with links; on the real H100 run of
tests/data/real/flaggems_20261205 (bmm float32 faster under tf32)."""

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from datasette.app import Datasette

from zlstore import Store
from zlstore.show import irchanges, judge

REAL = Path(__file__).resolve().parent / "data" / "real" / "flaggems_20261205" / "b_h100_runs.txz"


def zl(db, *args) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "zlstore", *args, "--db", str(db)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    if not REAL.is_file():
        pytest.skip(f"the real trees are not here ({REAL})")
    dest = tmp_path_factory.mktemp("b")
    subprocess.run(["tar", "xJf", str(REAL), "-C", str(dest)], check=True)
    both, alone = dest / "both.db", dest / "alone.db"
    with Store(both) as store:
        store.ingest(dest / "runs")
    with Store(alone) as store:  # the campaign without its screening root
        store.ingest(dest / "runs" / "campaign_b")
    return {"both": both, "alone": alone, "runs": dest / "runs"}


def test_ab_json_gives_each_finding_its_ops_ir_change(trees):
    document = json.loads(zl(trees["both"], "ab", "campaign_b", "--json"))
    with Store(trees["both"]) as store:
        plain = json.loads(judge.ab_ranges_json(store, store.root("campaign_b")))
    assert [{k: v for k, v in r.items() if k != "ir_changes"} for r in document["rows"]] == plain
    findings = [r for r in document["rows"] if r["finding"] in ("faster", "slower")]
    assert findings and all(r["op"] == "bmm" for r in findings)
    assert all(r["ir_changes"] is None for r in document["rows"] if r not in findings)
    for row in findings:
        changes = row["ir_changes"]
        assert changes["root"] == "screen_b"  # the campaign's screening root: the pair kernel_diff shows
        assert changes["text"].startswith("tt.dot -> ttng.warp_group_dot in 2 of 5;")
        assert changes["command"].startswith("zlstore diff screen_b bmm:float32")
        assert urlsplit(changes["kernel_diff"]).query == "root=screen_b&op=bmm&dtype=float32&rule=v3"


def test_the_link_opens_the_pair_in_datasette(trees):
    with Store(trees["both"]) as store:
        changes = irchanges.op_changes(store, "campaign_b", "bmm", "float32")
    path = urlsplit(changes["kernel_diff"])
    assert path.path == "/zlstore/kernel_diff"  # as zlstore serve names the store
    ds = Datasette([str(trees["both"])])
    rows = asyncio.run(ds.client.get(f"/both/kernel_diff.json?_shape=array&{path.query}")).json()
    bmm = [r for r in rows if r["kernel"] == "bmm_kernel"]
    assert [r["status"] for r in bmm] == ["changed", "changed"] and all("->" not in r["tiles"] for r in bmm)


def test_datasette_says_what_changed_as_the_command_does(trees):
    """The ir_changes query: the same summary as zlstore diff, per change."""
    ds = Datasette([str(trees["both"])])
    query = "root=screen_b&op=bmm&dtype=float32&rule="
    rows = asyncio.run(ds.client.get(f"/both/ir_changes.json?_shape=array&{query}")).json()
    shown = zl(trees["both"], "diff", "screen_b", "bmm:float32")
    summary = shown.split("what changed, of 5 kernel pairs:\n")[1].split("\n\n")[0].splitlines()
    said = [f"  {r['change']} in {r['kernels']} of {r['of_pairs']}" for r in rows]
    assert (
        summary == said
        if len(rows) <= 12
        else summary == said[:12] + [f"  ... and {len(rows) - 12} more (--json has every one)"]
    )
    assert rows[0]["change"] == "tt.dot -> ttng.warp_group_dot" and rows[0]["rule"] == "v3"


def test_without_its_screening_root_a_campaign_reads_its_first_round(trees):
    with Store(trees["alone"]) as store:
        changes = irchanges.op_changes(store, "campaign_b", "bmm", "float32")
        missing = irchanges.op_changes(store, "campaign_b", "topk", "float32")
    assert changes["root"] == "campaign_b" and changes["round"] == 1 and changes["kernel_diff"] is None
    assert changes["text"].startswith("tt.dot -> ttng.warp_group_dot in 2 of ")
    words = changes["command"].split()
    assert words[:5] == ["zlstore", "diff", "campaign_b", "bmm:float32", "--round"]
    shown = zl(trees["alone"], *words[1:])  # the command runs as printed
    assert "\n  tt.dot -> ttng.warp_group_dot in 2 of " in shown
    assert missing["text"] is None and "no round of topk:float32 in campaign_b" in missing["problem"]


def test_the_report_links_each_finding_to_its_kernels(trees, tmp_path):
    out = tmp_path / "report.html"
    zl(trees["both"], "report", "campaign_b", "--html", "-o", str(out))
    page = out.read_text()
    section = page[page.index("<h2>IR changes behind the findings</h2>") :].split("</section>")[0]
    assert "<td>bmm</td><td>float32</td><td>4 faster</td><td>tt.dot -&gt; ttng.warp_group_dot in 2 of 5;" in section
    assert re.search(r'<a href="http://[^"]+/zlstore/kernel_diff\?root=screen_b&amp;op=bmm&amp;dtype=float32', section)
    md = tmp_path / "report.md"
    zl(trees["both"], "report", "campaign_b", "-o", str(md))
    assert "- [bmm:float32: its kernels under zlstore serve (kernel_diff)](http://" in md.read_text()


def test_the_writers_keep_each_findings_change_current(trees, tmp_path):
    """ab --json reads the IR changes the writers stored (ir_change_rows):
    a campaign ingested before its screening root has its first round's;
    once the screening root is ingested, its screening pair's, as
    op_changes reads them now."""
    db = tmp_path / "later.db"
    with Store(db) as store:
        store.ingest(trees["runs"] / "campaign_b")
    before = json.loads(zl(db, "ab", "campaign_b", "--json"))
    assert {r["ir_changes"]["root"] for r in before["rows"] if r["ir_changes"]} == {"campaign_b"}
    with Store(db) as store:
        assert store.conn.execute("SELECT count(*) FROM ir_change_rows").fetchone()[0] > 0
        store.ingest(trees["runs"] / "screen_b")
    after = json.loads(zl(db, "ab", "campaign_b", "--json"))
    findings = [r for r in after["rows"] if r["ir_changes"]]
    assert findings and {r["ir_changes"]["root"] for r in findings} == {"screen_b"}
    with Store(db, read_only=True) as store:
        for row in findings:
            now = irchanges.brief(irchanges.op_changes(store, "campaign_b", row["op"], row["dtype"]))
            assert {**row["ir_changes"], "command": None} == {**now, "command": None}
            assert row["ir_changes"]["command"] == now["command"] + f" --db {db}"


def test_a_summary_reads_only_the_changed_kernels(trees, monkeypatch):
    """Parsing IR is most of what a writer's derivation costs: the summary
    (diff_sides without pair rows, as op_changes asks) says what the full
    document says, and reads each changed text once, no kernel a pair the
    rule calls the same."""
    from zlstore.show import irdiff, irfacts

    read = []
    real = irfacts.read

    def counted(text):
        read.append(text)
        return real(text)

    monkeypatch.setattr(irfacts, "read", counted)
    with Store(trees["both"], read_only=True) as store:
        before, after = irdiff.pair_cells(store, store.root("screen_b")["path"], "bmm", "float32")
        full = irdiff.diff_sides(store.conn, before, after, "v3", with_diff=False)
        full_reads = len(read)
        read.clear()
        brief = irdiff.diff_sides(store.conn, before, after, "v3", with_diff=False, rows=False)
    assert {**full, "kernels": []} == brief and brief["summary"]["changes"]
    statuses = [r["status"] for r in full["kernels"]]
    assert "same" in statuses and "changed" in statuses
    assert len(read) == len(set(read)) == 2 * statuses.count("changed") < full_reads
