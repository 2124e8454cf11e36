"""`zlstore report` and `ab` carry what a reader asks (issue 41): the switch
with its values, each side's latency beside the effect, a forest plot whose
ticks read at any range of effects, and a campaign of many ranges that
stays readable (findings first, each op summarised, every range folded
away, at most forest.MAX_ROWS drawn). What it embeds is escaped (issue
46): Markdown renders a hostile label as text, matplotlib never reads one
as math. `-o` refuses a destination before writing anything, and writes
into a special file (issue 45)."""

import html
import json
import math
import os
import re
import sqlite3
import statistics
import tarfile
import threading
from pathlib import Path

import markdown
import pytest
from click.testing import CliRunner

from zlstore import Store, db
from zlstore.show import document, forest
from zlstore.cli import cli

from . import effects

REAL = Path(__file__).resolve().parent / "data" / "real"
CAMPAIGN = "campaign_20261013_090000"


def invoke(*args, **kwargs):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kwargs)


# -- the switch and each side's latency -----------------------------------------


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    """The real H200 campaign (TRITON_F32_DEFAULT, ieee before, tf32 after)."""
    top = tmp_path_factory.mktemp("real")
    with tarfile.open(REAL / "h200_tf32_campaign.txz") as archive:
        archive.extractall(top, filter="data")
    path = top / "real.db"
    with Store(path) as store:
        store.ingest(top / "runs2")
    return path


def test_ab_and_the_report_name_the_switch_with_its_values(real_store, tmp_path):
    human = invoke("ab", "--db", real_store, env={"COLUMNS": "200"}).stdout
    assert "switch TRITON_F32_DEFAULT: ieee -> tf32" in human
    summary = json.loads(invoke("ab", "--json", "--db", real_store).stdout)["summary"]
    assert summary["switches"] == [
        {
            "root": "campaign_20261130_030313",
            "switch": "TRITON_F32_DEFAULT",
            "before_value": "ieee",
            "after_value": "tf32",
        }
    ]
    out = tmp_path / "r.md"
    invoke("report", "campaign_20261130_030313", "-o", out, "--db", real_store)
    text = out.read_text()
    assert "switch: TRITON\\_F32\\_DEFAULT: ieee -> tf32" not in text  # an underscore inside a word is no markup
    assert text.count("switch: TRITON_F32_DEFAULT: ieee -> tf32") == 2  # the summary and the settings


def test_each_side_s_latency_is_the_median_over_rounds_of_its_rows(real_store):
    """Computed here from the stored rows, one round at a time, and held to
    what ab --json, the view behind it and the human table say."""
    conn = sqlite3.connect(real_store)
    by_key: dict = {}
    for op, dtype, shape, rnd, side, latency in conn.execute("""
            SELECT c.op, c.dtype, m.shape, c.round, c.side, m.latency FROM measurements m
            JOIN cells c ON c.id = m.cell_id WHERE m.counted"""):
        by_key.setdefault((op, dtype, shape), {}).setdefault(side, {}).setdefault(rnd, []).append(latency)
    rows = json.loads(invoke("ab", "--json", "--db", real_store).stdout)["rows"]
    assert rows
    for row in rows:
        sides = by_key[(row["op"], row["dtype"], row["shape"])]
        for side in ("before", "after"):
            rounds = [statistics.mean(values) for values in sides[side].values()]
            assert row[f"latency_{side}"] == pytest.approx(statistics.median(rounds), rel=1e-9), (row, side)
    viewed = conn.execute("SELECT latency_before, latency_after FROM ab_ranges ORDER BY op, dtype, shape").fetchall()
    expected = sorted((r["latency_before"], r["latency_after"]) for r in rows)
    assert [pytest.approx(pair, rel=1e-12) for pair in sorted(viewed)] == expected  # JSON keeps 15 digits
    table = invoke("ab", "-t", "--db", real_store).stdout
    assert "ms before -> after" in table
    first = rows[0]
    assert f"{_text(first['latency_before'])} -> {_text(first['latency_after'])}" in table


def _text(value):
    from zlstore import output

    return output.cell_text(value)


def test_a_store_of_the_release_before_gains_the_latencies(example_store_path, tmp_path):
    path = tmp_path / "old.db"
    with Store(example_store_path) as source:
        source.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path.write_bytes(Path(example_store_path).read_bytes())
    conn = sqlite3.connect(path)
    for kind, name in conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger')").fetchall():
        conn.execute(f"DROP {kind} {name}")  # schema.sql makes them again; the columns are the migration's
    for column in ("latency_before", "latency_after"):
        conn.execute(f"ALTER TABLE ab_range_rows DROP COLUMN {column}")
    conn.execute("PRAGMA user_version = 14")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
        filled = store.conn.execute(
            "SELECT count(*) FROM ab_range_rows WHERE rounds > 0 AND latency_before > 0 AND latency_after > 0"
        ).fetchone()[0]
        assert filled == store.conn.execute("SELECT count(*) FROM ab_range_rows WHERE rounds > 0").fetchone()[0] > 0


# -- the forest plot's ticks ---------------------------------------------------------


def rows_spanning(low, high, n=6):
    """Rows of a picture whose intervals run from low to high."""
    step = (math.log(high) - math.log(low)) / (n - 1)
    rows = []
    for i in range(n):
        effect = math.exp(math.log(low) + i * step)
        rows.append(
            {
                "label": f"op {i}",
                "finding": "inconclusive",
                "effect": effect,
                "ci_low": max(low, effect / 1.01),
                "ci_high": min(high, effect * 1.01),
                "band_low": 1 / 1.02,
                "band_high": 1.02,
                "rounds": 3,
                "q_value": 0.5,
            }
        )
    return rows


@pytest.mark.parametrize(
    "low, high", [(0.04, 29), (0.05, 30), (0.98, 1.2), (0.999, 1.001), (0.5, 2.0), (1e-3, 1e4), (0.2, 5), (3, 9)]
)
def test_the_ticks_read_at_any_range_of_effects(low, high):
    """Measured on the drawn figure: a tick at 1, round numbers, at least
    three of them, none of their labels overlapping, and on a wide range the
    ends covered (0.05 and 20 of issue 41's 0.04 .. 29)."""
    with forest.drawing(rows_spanning(low, high)) as figure:
        figure.canvas.draw()
        axes = figure.axes[0]
        left, right = axes.get_xlim()
        labels = [t for t in axes.get_xticklabels() if t.get_text() and left <= t.get_position()[0] <= right]
        texts = [t.get_text() for t in labels]
        boxes = sorted((t.get_window_extent() for t in labels), key=lambda box: box.x0)
    assert "1" in texts and len(texts) >= 3, texts
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), texts
    for text in texts:
        assert re.fullmatch(r"\d+(\.\d+)?", text) and len(text.replace(".", "").strip("0")) <= 4, texts
    if high / low > 100:
        assert float(texts[0]) <= 10 * low and float(texts[-1]) >= high / 10, texts


def test_ticks_name_1_even_where_every_effect_is_far_from_it():
    with forest.drawing(rows_spanning(3, 9)) as figure:
        figure.canvas.draw()
        texts = [t.get_text() for t in figure.axes[0].get_xticklabels() if t.get_text()]
    assert "1" in texts


# -- a campaign of many ranges ---------------------------------------------------------

FASTER = 10
SHAPES = [effects.Shape(1.5, 0.005)] * FASTER + [effects.Shape(1.0, 0.002 + 0.001 * (i % 40)) for i in range(140)]


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    top = tmp_path_factory.mktemp("big")
    effects.write_repeat_root(top / "runs", "ab_many", SHAPES, rounds=3, seed=7, op="softmax")
    path = top / "big.db"
    with Store(path) as store:
        store.ingest(top / "runs")
    return path


def test_a_big_campaign_draws_its_findings_then_its_widest_intervals(big_store, tmp_path):
    out = tmp_path / "big.md"
    invoke("report", "ab_many", "-o", out, "--db", big_store)
    ranges = json.loads(invoke("ab", "ab_many", "--json", "--db", big_store).stdout)["rows"]
    assert len(ranges) == len(SHAPES) > forest.MAX_ROWS
    svg = out.with_suffix(".svg").read_text()
    drawn = forest.read_back(svg)
    assert len(drawn) == forest.MAX_ROWS
    label = {r["shape"]: f"{r['op']} {r['dtype']} {r['shape']}" for r in ranges}
    faster = {label[r["shape"]] for r in ranges if r["finding"] == "faster"}
    assert len(faster) == FASTER and faster <= {row["label"] for row in drawn}
    rest = sorted((r for r in ranges if r["finding"] != "faster"), key=lambda r: -math.log(r["ci_high"] / r["ci_low"]))
    assert {row["label"] for row in drawn} - faster == {label[r["shape"]] for r in rest[: forest.MAX_ROWS - FASTER]}
    assert f"60 of {len(ranges)} ranges drawn" in " ".join(re.findall(r">([^<]*)</text>", svg))


def test_a_big_campaign_s_report_shows_findings_first_and_folds_the_rest(big_store, tmp_path):
    out = tmp_path / "big.md"
    invoke("report", "ab_many", "-o", out, "--db", big_store)
    text = out.read_text()
    sections = dict(re.findall(r"^## (.*?)\n(.*?)(?=^## |\Z)", text, re.S | re.M))
    findings = [line for line in sections["Findings"].splitlines() if line.startswith("| softmax")]
    assert len(findings) == FASTER and all("| faster " in line for line in findings)
    assert f"{FASTER} of the {len(SHAPES)} ranges are faster or slower" in sections["Findings"]
    by_op = [line for line in sections["By op"].splitlines() if line.startswith("| softmax")]
    assert len(by_op) == 1 and re.search(rf"\|\s+{len(SHAPES)} \|\s+{FASTER} \|", by_op[0])
    every = sections["Every range"]
    assert f"<details><summary>all {len(SHAPES)} ranges</summary>" in every and "</details>" in every
    assert len([line for line in every.splitlines() if line.startswith("| softmax")]) == len(SHAPES)
    rendered = markdown.markdown(text, extensions=["tables"])
    assert "<details>" in rendered
    page = tmp_path / "big.html"
    invoke("report", "ab_many", "--html", "-o", page, "--db", big_store)
    folded = page.read_text().split("<details>")[1].split("</details>")[0]
    assert folded.count("<tr>") == len(SHAPES) + 1  # and its header


# -- labels that are data ---------------------------------------------------------------

HOSTILE = "m$\\frac{a}{$x|<img src=x onerror=alert(1)>[l](javascript:alert(1))*b*`c`"
BRACES = "{" * 100 + "x" + "}" * 100


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    top = tmp_path_factory.mktemp("hostile")
    shapes = [effects.Shape(1.5, 0.01)] * 3
    effects.write_repeat_root(top / "runs", "ab_hostile", shapes, rounds=3, seed=1, op=HOSTILE)
    effects.write_repeat_root(top / "runs", "ab_braces", shapes, rounds=3, seed=1, op=BRACES)
    path = top / "h.db"
    with Store(path) as store:
        store.ingest(top / "runs")
    return path


def test_markdown_shows_a_hostile_label_as_text(hostile_store, tmp_path):
    """Rendered as mkdocs renders it (python-markdown, tables): no element
    the label brings, the table keeps its columns, and the cell reads as
    the label."""
    out = tmp_path / "h.md"
    invoke("report", "ab_hostile", "-o", out, "--db", hostile_store)
    rendered = markdown.markdown(out.read_text(), extensions=["tables", "attr_list"])
    assert not re.search(r"<(script|iframe|img[^>]*onerror|a\b|em\b|code\b)", rendered), rendered
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, re.S)
    body = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows if "<td" in row]
    assert body and all(len(cells) == len(document.report.AB_COLUMNS) - 1 for cells in body[:3])
    assert html.unescape(body[0][0]) == HOSTILE
    assert "$" not in out.read_text().replace("&#36;", "")  # GitHub reads $...$ as math


def test_no_label_reaches_matplotlib_s_mathtext(hostile_store, tmp_path):
    for root, op in (("ab_hostile", HOSTILE), ("ab_braces", BRACES)):
        out = tmp_path / f"{root}.md"
        result = invoke("report", root, "-o", out, "--db", hostile_store)
        assert result.exit_code == 0, result.output
        svg = out.with_suffix(".svg").read_text()
        assert {row["label"].split(" float16 ")[0] for row in forest.read_back(svg)} == {op}
        shown = html.unescape(" ".join(re.findall(r">([^<]*)</text>", svg)))
        assert op[: forest.LABEL_CHARS - 20] in shown  # the label as written, not typeset


# -- where the report goes -------------------------------------------------------------


def in_dir(path, *args):
    cwd = os.getcwd()
    os.chdir(path)
    try:
        return CliRunner().invoke(cli, [str(a) for a in args])
    finally:
        os.chdir(cwd)


def test_a_refused_destination_leaves_nothing_behind(example_store_path, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    (here / "dir.md").mkdir()
    fifo_svg = here / "pic.svg"
    os.mkfifo(fifo_svg)
    for target in ("dir.md", "pic.md", "missing/r.md"):
        result = in_dir(here, "report", CAMPAIGN, "-o", target, "--db", example_store_path)
        assert result.exit_code == 2 and re.search("cannot write|is a directory", result.stderr), (
            target,
            result.output,
        )
    assert sorted(p.name for p in here.iterdir()) == ["dir.md", "pic.svg"]
    assert not any((here / "dir.md").iterdir())


@pytest.mark.parametrize("special", ["/dev/null", "/dev/full"])
def test_a_device_is_written_into(example_store_path, tmp_path, special):
    result = in_dir(tmp_path, "report", CAMPAIGN, "-o", special, "--db", example_store_path)
    assert not os.path.exists(special + ".svg") and not os.path.exists(Path(special).with_suffix(".svg"))
    if special == "/dev/null":
        assert result.exit_code == 0, result.output
        assert f"wrote {CAMPAIGN}.svg (the picture the report links" in result.stderr
        assert (tmp_path / f"{CAMPAIGN}.svg").exists()
    else:  # the device refuses the bytes: an error, and no picture for a report that was not written
        assert result.exit_code == 2 and "No space left on device" in result.stderr, result.output
        assert list(tmp_path.iterdir()) == []


def test_a_fifo_is_written_into(example_store_path, tmp_path):
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = in_dir(tmp_path, "report", CAMPAIGN, "--html", "-o", fifo, "--db", example_store_path)
    reader.join(30)
    assert result.exit_code == 0, result.output
    assert received and received[0].startswith(b"<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.md"]


def test_what_cannot_be_markup_reads_plainly():
    """The escaping is for what a renderer would read: a shape, an op name
    and an arrow stay as written in the file a reviewer reads raw."""
    for text in ("[[4096,4096],128]", "layer_norm", "0.3375 -> 0.3", "[[64,64],[1,1]]"):
        assert document.md_text(text) == text
    assert document.md_text("[a]: https://x") != "[a]: https://x"  # a link reference at a line's start
