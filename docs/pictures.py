"""Make the pictures under docs/ from the live dashboard, and say what each
was made from.

Run from the top of the repository, in the test venv (selenium) on a
machine with Debian's chromium and chromedriver:

    .venv/bin/python docs/pictures.py

It copies examples/runs to a temporary directory, ingests it, starts
`zlstore serve` on the store as a real process, photographs each page of
PICTURES in headless chromium (as tests/test_browser.py drives it) and
writes docs/<name>.png. docs/pictures.json records, per picture, the page,
the hash of what it was made from (made_from: the rows the page shows, and
its spec: the chart's vega-lite and the page's metadata) and the hash of
the PNG written. tests/test_pictures.py computes made_from again without a
browser and fails when it differs (the picture is stale: run this again)
or when a PNG is not the one recorded. Pixels are never compared: fonts
and antialiasing differ between machines, the data does not."""

import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional
from urllib.parse import parse_qsl, urlsplit

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RECORD = DOCS / "pictures.json"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from zlstore import Store  # noqa: E402
from zlstore.serve import datasette_site  # noqa: E402
from zlstore.show import irdiff  # noqa: E402

DASHBOARD = "campaign"
CAMPAIGN = "campaign_20261013_090000"  # the examples' campaign
SCREEN = "ab_rlc_20261012_101500"  # the examples' first screening root


class Picture(NamedTuple):
    name: str  # docs/<name>.png
    path: str  # the page, below the server's address
    height: int  # of the window the page is photographed in
    charts: tuple = ()  # (chart, marks drawn before the picture may be taken)
    table: Optional[str] = None  # the table or view the page shows
    query: Optional[str] = None  # the canned query the page runs (its parameters in path)


PICTURES = (
    Picture("index", "/", 480),
    Picture("verdicts", "/zlstore/verdicts", 1100, table="verdicts"),
    Picture("chart", f"/-/dashboards/{DASHBOARD}", 1180, charts=(("ranges", 18), ("verdicts", 2), ("progress", 4))),
    Picture("chart-ranges", f"/-/dashboards/{DASHBOARD}/ranges?root={CAMPAIGN}", 700, charts=(("ranges", 18),)),
    Picture("diff", f"/zlstore/kernel_diff?root={SCREEN}&op=abs&dtype=float16&rule=", 900, query="kernel_diff"),
)


# -- what a picture is made from ------------------------------------------------------


@contextlib.contextmanager
def example_store(workdir: Path):
    """The bundled examples (examples/runs), copied into workdir and ingested:
    the store every picture is made from. Yields its path."""
    shutil.copytree(REPO / "examples" / "runs", workdir / "runs")
    path = workdir / "examples.db"
    with Store(path) as store:
        store.ingest(workdir / "runs")
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    yield path


def _plain(value):
    """A value as it is hashed: floats to 9 significant digits (the last bits
    of a float differ between libms; a picture shows four digits at most)."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _rows(conn, sql: str, params: dict = None):
    """The rows a query gives, without what differs between two ingests of
    one tree (where it was copied to, when it was read): path columns left
    out, and the copy's directory in any other text (a diff's file names)
    written as <runs>."""
    cursor = conn.execute(sql, params or {})
    names = [d[0] for d in cursor.description]
    copy = conn.execute("PRAGMA database_list").fetchone()[2].rsplit("/", 1)[0] + "/runs/"
    return [
        {
            name: value.replace(copy, "<runs>/") if isinstance(value, str) else value
            for name, value in zip(names, row)
            if not (name == "path" or name.endswith("_path") or name.endswith("_at"))
        }
        for row in cursor.fetchall()
    ]


def made_from(db_path: Path) -> dict:
    """For each picture, what it is made from, as JSON-able data: the page's
    spec (metadata, chart definitions) and the rows it shows."""
    meta = datasette_site.metadata()
    database = meta["databases"][datasette_site.DB_NAME]
    dashboard = meta["plugins"]["datasette-dashboards"][DASHBOARD]
    with Store(db_path, create=False) as store:
        conn = store.conn
        irdiff.register(conn)  # what the plugin gives datasette's connections
        objects = conn.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        hidden = {name for name, table in database.get("tables", {}).items() if table.get("hidden")}
        # The index page counts the rows of the tables it lists, not of the
        # hidden ones: those hold a walk's bookkeeping (walked_dirs keeps only
        # directories older than unchanged.RACY_NS, two seconds, so its count
        # depends on how fast a loaded machine copied and ingested the examples).
        listing = [
            {
                "name": name,
                "type": kind,
                "hidden": name in hidden,
                "rows": conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                if kind == "table" and name not in hidden
                else None,
            }
            for name, kind in objects
        ]
        sources = {}
        for picture in PICTURES:
            spec, data = {}, {}
            if picture.name == "index":
                spec = {key: value for key, value in meta.items() if key not in ("databases", "plugins")}
                spec["database"] = {key: value for key, value in database.items() if key != "tables"}
                data = {"tables": listing}
            if picture.query:
                spec = database["queries"][picture.query]
                params = dict(parse_qsl(urlsplit(picture.path).query, keep_blank_values=True))
                data = {"rows": _rows(conn, spec["sql"], params)}
            if picture.table:
                spec = database.get("tables", {}).get(picture.table, {})
                data = {"rows": _rows(conn, f'SELECT * FROM "{picture.table}"')}
            if picture.charts:
                root = picture.path.split("root=", 1)[1] if "root=" in picture.path else ""
                charts = [chart for chart, _ in picture.charts]
                spec = {
                    "dashboard": {key: value for key, value in dashboard.items() if key != "charts"}
                    if len(charts) > 1
                    else {},
                    "charts": {chart: dashboard["charts"][chart] for chart in charts},
                }
                data = {chart: _rows(conn, dashboard["charts"][chart]["query"], {"root": root}) for chart in charts}
                if len(charts) > 1:
                    data["filter"] = _rows(conn, dashboard["filters"]["root"]["query"])
            sources[picture.name] = _plain({"page": picture.path, "spec": spec, "data": data})
    return sources


def digest(source) -> str:
    text = json.dumps(source, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- taking the pictures -----------------------------------------------------------------


def photograph(db_path: Path, workdir: Path) -> None:
    """Serve db_path and photograph every picture into docs/."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from tests import test_browser as browser_test

    reason = browser_test.missing_browser()
    if reason:
        raise SystemExit(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = browser_test.CHROMIUM
    for flag in browser_test.CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={workdir / 'chromium'}")
    command = [sys.executable, "-m", "zlstore", "serve", "--db", str(db_path)]
    with browser_test.running(command, workdir / "serve.log") as base:
        driver = webdriver.Chrome(service=Service(executable_path=browser_test.CHROMEDRIVER), options=options)
        try:
            for picture in PICTURES:
                driver.set_window_size(1400, 1000)
                driver.get(base + picture.path)
                browser_test.wait_for(
                    driver,
                    lambda b: b.execute_script("return document.readyState") == "complete",
                    f"{picture.path} to load",
                )
                for chart, marks in picture.charts:
                    chart_id = chart if len(picture.charts) > 1 else DASHBOARD
                    browser_test.rendered_chart(driver, chart_id, marks)
                browser_test.assert_loaded_only_from(driver, base)
                chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
                driver.set_window_size(1400, picture.height + chrome)
                driver.execute_script("window.scrollTo(0, 0)")
                assert driver.save_screenshot(str(DOCS / f"{picture.name}.png")), picture
        finally:
            driver.quit()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="zlstore-pictures-") as tmp:
        workdir = Path(tmp)
        with example_store(workdir) as db_path:
            sources = made_from(db_path)
            photograph(db_path, workdir)
    record = {
        picture.name: {
            "page": picture.path,
            "made_from": digest(sources[picture.name]),
            "png": file_digest(DOCS / f"{picture.name}.png"),
        }
        for picture in PICTURES
    }
    RECORD.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for picture in PICTURES:
        print(f"docs/{picture.name}.png  {picture.path}")
    print(f"recorded in {RECORD.relative_to(REPO)}")


if __name__ == "__main__":
    main()
