"""`zlstore report`: a root's report as Markdown (its picture beside it) or
one self-contained HTML file; the picture's data read back from the SVG
(its <metadata> and its marks' ids and colours), never from pixels; the
HTML rendered in the headless browser the other browser tests use."""

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.show import document, forest, judge
from zlstore.cli import cli

from .test_browser import chromium

CAMPAIGN = "campaign_20261013_090000"
SCREEN_ROOT = "ab_rlc_20261012_101500"
SVG = "{http://www.w3.org/2000/svg}"


def report(db, *args):
    result = CliRunner().invoke(cli, ["report", *map(str, args), "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def marks(svg_text):
    """id -> stroke colour of every interval-N / effect-N mark in a forest SVG."""
    root = ET.fromstring(svg_text[svg_text.index("<svg") :])
    found = {}
    for group in root.iter(f"{SVG}g"):
        gid = group.get("id", "")
        if re.fullmatch(r"(interval|effect)-\d+", gid):
            style = " ".join(el.get("style", "") for el in group.iter())
            colour = re.search(r"(?:stroke|fill): (#[0-9a-f]{6})", style)
            assert colour, gid
            found[gid] = colour.group(1)
    return found


@pytest.fixture(scope="module")
def ranges(example_store_path):
    with Store(example_store_path) as store:
        return judge.ab_ranges(store, CAMPAIGN)


def test_markdown_links_its_picture_written_beside_it(example_store_path, ranges, tmp_path):
    out = tmp_path / "pr" / "campaign.md"
    out.parent.mkdir()
    result = report(example_store_path, CAMPAIGN, "-o", out)
    assert f"wrote {out}" in result.stderr and f"wrote {out.with_suffix('.svg')}" in result.stderr
    text = out.read_text()
    assert "![Each shape's effect](campaign.svg)" in text
    assert "18 ranges: 4 faster, 0 slower, 0 no change, 8 inconclusive, 6 too few rounds" in text
    for heading in ("## Summary", "## Findings", "## Settings", "## Provenance", "## Problems"):
        assert heading in text
    # the findings table at a readable width: notes in a list below it, no fingerprint
    findings = text.split("## Findings")[1].split("## ")[0]
    table = [line for line in findings.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(ranges) and max(map(len, table)) <= 170  # ab -t --fmt github was 337 (with latency)
    assert not re.search(r"[0-9a-f]{64}", text)
    assert "- constant_pad_nd float16 [[1024,1024],[3,3]]: more rounds: at least 8 in all" in text


def test_the_picture_says_what_the_dashboard_chart_plots(example_store_path, ranges, tmp_path):
    """Read back from the SVG: one row per range, in the dashboard query's
    order, each interval and dot coloured by its finding as the dashboard's
    scale says."""
    out = tmp_path / "c.md"
    report(example_store_path, CAMPAIGN, "-o", out)
    svg = out.with_suffix(".svg").read_text()
    plotted = forest.read_back(svg)
    by_key = {(r["op"] + (" " + r["dtype"] if r["dtype"] else "") + " " + r["shape"]): r for r in ranges}
    assert len(plotted) == len(ranges) == 18
    for row in plotted:
        source = by_key[row["label"]]
        assert row["finding"] == source["finding"] and row["effect"] == pytest.approx(source["effect"])
    colors = forest.finding_colors()
    assert colors["faster"] == "#1a9850" and colors["slower"] == "#d73027"  # the dashboard's scale
    drawn = marks(svg)
    with_interval = [i for i, row in enumerate(plotted) if row["ci_low"] is not None]
    assert {f"interval-{i}" for i in with_interval} == {k for k in drawn if k.startswith("interval-")}
    assert len(with_interval) == 12
    for i, row in enumerate(plotted):
        assert drawn[f"effect-{i}"] == colors[row["finding"]], row
        if row["ci_low"] is not None:
            assert drawn[f"interval-{i}"] == colors[row["finding"]], row
    # the shape labels are text, in the rows' order top to bottom
    assert all(f">{row['label']}<" in svg for row in plotted)


def test_the_same_rows_give_the_same_picture(example_store_path):
    with Store(example_store_path) as store:
        rows = forest.forest_rows(store, CAMPAIGN)
    assert forest.forest_svg(rows, CAMPAIGN) == forest.forest_svg(rows, CAMPAIGN)


def test_html_is_one_file_with_the_picture_inline(example_store_path, tmp_path):
    out = tmp_path / "c.html"
    result = report(example_store_path, CAMPAIGN, "--html", "-o", out)
    assert result.stderr.strip() == f"wrote {out}" and list(tmp_path.iterdir()) == [out]
    text = out.read_text()
    # nothing fetched: a link a reader follows (a finding's kernel_diff page) is no fetch
    assert not re.search(r"""<(?!a\s)[^>]*\b(src|href)\s*=\s*["']?(https?:|//)""", text) and "<link" not in text
    assert all("/kernel_diff?" in href for href in re.findall(r'<a href="([^"]+)"', text))
    assert "<script" not in text
    assert len(forest.read_back(text)) == 18


def test_a_screening_root_reports_verdicts_hints_and_labelled_ranges(example_store_path):
    text = report(example_store_path, SCREEN_ROOT).stdout
    assert "11 pairs under rule v3: 0 DUPLICATE_CELL, 1 TRUNCATED, 2 NO_ROWS" in text
    assert "| abs  | float16 | 0.9905 .. 1 .. 1.014" in text and "differs only in source locations" in text
    assert "| argmax     | float16 | NO_IR_DIFF | noise floor" in text
    assert "![" not in text  # no picture: nothing was written beside it
    assert "## Problems" in text and "record cut off mid-JSON" in text


def test_an_unknown_root_or_format_is_a_usage_error(example_store_path):
    result = CliRunner().invoke(cli, ["report", "nosuch", "--db", str(example_store_path)])
    assert result.exit_code == 2 and "no root 'nosuch'" in result.stderr
    with Store(example_store_path) as store, pytest.raises(ValueError):
        document.write(store, CAMPAIGN, "pdf")


def test_the_report_says_what_the_cells_ran_on(example_store):
    found = example_store.root(CAMPAIGN)
    assert {r["what"] for r in document.provenance_rows(example_store, found)} >= {"host", "root directory"}
    assert "ran on: unknown (its cells record no environment)" in document.markdown(
        document.build(example_store, CAMPAIGN)
    )


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def test_the_html_report_renders_offline_in_a_browser(browser, example_store_path, tmp_path):
    """Opened from the file: the picture is drawn (its marks have a size),
    its data reads back from the page, the findings table has a row per
    range, and the page loaded nothing besides itself."""
    out = tmp_path / "report.html"
    report(example_store_path, CAMPAIGN, "--html", "-o", out)
    browser.get(out.as_uri())
    assert browser.title == f"A/B report: {CAMPAIGN}"
    intervals = browser.execute_script("""
        return Array.from(document.querySelectorAll('#forest g[id^="interval-"] path'))
                    .map(p => { const box = p.getBBox(); return [p.parentNode.id, box.width,
                                getComputedStyle(p).stroke]; });""")
    assert len(intervals) == 12 and all(width > 0 for _, width, _ in intervals)
    assert ("interval-0", intervals[0][1], "rgb(26, 152, 80)") == tuple(intervals[0])  # #1a9850: faster
    described = browser.execute_script(
        "return document.querySelector('#forest svg').getElementsByTagName('dc:description')[0].textContent"
    )
    assert len(json.loads(described[len(forest.DATA_PREFIX) :])) == 18
    rows = browser.execute_script(
        "return document.querySelectorAll('table.rows')[0].querySelectorAll('tbody tr').length"
    )
    assert rows == 18
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded == []
    Path(os.environ.get("ZLSTORE_TEST_ARTIFACTS") or Path(__file__).resolve().parent.parent / "test-artifacts").mkdir(
        parents=True, exist_ok=True
    )


def test_markdown_to_stdout_writes_its_picture_in_the_current_directory(example_store_path, tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["report", CAMPAIGN, "--db", str(example_store_path)])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0 and f"![Each shape's effect]({CAMPAIGN}.svg)" in result.stdout
    assert result.stderr.strip() == f"wrote {CAMPAIGN}.svg (the picture the report links; --html holds it inline)"
    assert len(forest.read_back((tmp_path / f"{CAMPAIGN}.svg").read_text())) == 18
