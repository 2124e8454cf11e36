"""zlstore serve in a real headless browser: Debian's chromium driven through
Debian's chromedriver by Selenium, against `zlstore serve` running as a real
process on a free port. Nothing is downloaded: the browser reaches only this
server, and the test checks that every resource it loaded came from it.

Screenshots are saved under test-artifacts/ (or $ZLSTORE_TEST_ARTIFACTS);
the pictures in the docs are docs/pictures.py's (tests/test_pictures.py).
Skipped when chromium is absent, unless CI is set: then they fail instead."""

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from zlstore import Store

from . import floor_tree

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("ZLSTORE_TEST_ARTIFACTS") or REPO / "test-artifacts")
WAIT_S = 30


def missing_browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        return (
            "no headless browser: " + ", ".join(missing) + " missing "
            "(apt-get install chromium chromium-driver; pip install -e '.[test]')"
        )
    return None


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(command, log_path):
    """A server process on a free port until the block ends; yields its base URL."""
    port = free_port()
    log = open(log_path, "w")
    process = subprocess.Popen(
        [*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                urllib.request.urlopen(base + "/-/versions.json", timeout=2).read()
                break
            except urllib.error.HTTPError:  # it answers (403: a server with accounts)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(map(str, command))} did not start: " + log_path.read_text())
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def server(example_source, tmp_path_factory):
    """`zlstore serve` on the example tree plus the floor tree, as a real process."""
    dest = tmp_path_factory.mktemp("browser")
    floor_tree.make_floor_tree(dest / "runs")
    db = dest / "zlstore.db"
    with Store(db) as store:
        store.ingest(example_source[0])
        store.ingest(dest / "runs")
    with running([sys.executable, "-m", "zlstore", "serve", "--db", str(db)], dest / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def plain_server(example_source, tmp_path_factory):
    """Plain `datasette examples.db other.db`: zlstore's plugin comes from its
    entry point; other.db is not a store."""
    dest = tmp_path_factory.mktemp("plain")
    with Store(dest / "examples.db") as store:
        store.ingest(example_source[0])
    with sqlite3.connect(dest / "other.db") as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('not a store')")
    datasette = Path(sys.executable).parent / "datasette"
    command = [str(datasette)] if datasette.exists() else [sys.executable, "-m", "datasette"]
    with running([*command, str(dest / "examples.db"), str(dest / "other.db")], dest / "datasette.log") as base:
        yield base


@contextlib.contextmanager
def chromium(logs: bool = False):
    """Debian's headless chromium through its chromedriver, offline (the
    browser tests and tests/test_document.py): failed under CI where it is
    missing, skipped elsewhere. logs: keep the page's console log."""
    reason = missing_browser()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason + "; CI is set, so the browser tests must run")
        pytest.skip(reason)
    saved = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="zlstore-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)
        if saved is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = saved


@pytest.fixture(scope="module")
def driver(server):
    with chromium(logs=True) as browser:
        yield browser


def wait_for(browser, condition, what):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.2).until(
        lambda b: condition(b), message=f"waiting for {what}"
    )


def screenshot(browser, name, height=None):
    """Save the page as test-artifacts/NAME.png."""
    page_height = browser.execute_script("return document.documentElement.scrollHeight")
    chrome = browser.execute_script("return window.outerHeight - window.innerHeight")
    browser.set_window_size(1400, (height or min(max(page_height, 600), 3000)) + chrome)
    time.sleep(0.3)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    assert browser.save_screenshot(str(path))
    browser.set_window_size(1400, 1000)
    return path


def assert_loaded_only_from(browser, base):
    resources = browser.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })"
    )
    foreign = [url for url in resources if not url.startswith(base)]
    assert not foreign, f"the page loaded resources from elsewhere: {foreign}"
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def example_verdicts(manifest) -> Counter:
    """The example tree's screening verdicts under v3, counted."""
    return Counter(pair["verdict"]["v3"] for pairs in manifest["screen"].values() for pair in pairs.values())


def verdict_facet(browser, url) -> dict:
    """The verdict facet's counts on the table page at url."""
    from selenium.webdriver.common.by import By

    browser.get(url)
    facet = wait_for(
        browser, lambda b: b.find_elements(By.CSS_SELECTOR, '.facet-info[data-column="verdict"]'), "the verdict facet"
    )[0]
    shown = {}
    for item in facet.find_elements(By.CSS_SELECTOR, "li"):
        label = item.find_element(By.TAG_NAME, "a").text
        shown[label] = int(item.text[len(label) :].strip().replace(",", ""))
    return shown


def test_index_page(driver, server):
    from selenium.webdriver.common.by import By

    driver.get(server + "/")
    wait_for(driver, lambda b: b.find_elements(By.CSS_SELECTOR, "h1"), "the index page")
    assert driver.find_element(By.CSS_SELECTOR, "h1").text == "zlstore"
    links = {a.get_attribute("href").rsplit("/", 1)[-1] for a in driver.find_elements(By.CSS_SELECTOR, "a")}
    assert {"verdicts", "ab_ranges", "noise_floors", "campaign"} <= links
    assert not {"blobs", "ir_digests", "settings", "ingest_runs"} & links
    assert "hidden table" in driver.find_element(By.TAG_NAME, "body").text
    assert_loaded_only_from(driver, server)
    screenshot(driver, "index", height=480)


def test_verdicts_page_shows_facet_counts(driver, server, example_source):
    from selenium.webdriver.common.by import By

    expected = example_verdicts(example_source[1])
    expected.update({"NO_IR_DIFF": 3, "IR_CHANGED": 2})  # the floor tree's screening root
    assert verdict_facet(driver, server + "/zlstore/verdicts") == dict(expected)
    assert driver.find_elements(By.CSS_SELECTOR, '.facet-info[data-column="root"]')
    # the zlstore plugin folds the column descriptions and puts them on the headings
    details = driver.find_element(By.CSS_SELECTOR, "details.zlstore-column-descriptions")
    assert not details.get_attribute("open")
    heading = driver.find_element(By.CSS_SELECTOR, 'table.rows-and-columns th[data-column="verdict"]')
    assert "TRUNCATED" in heading.get_attribute("title")
    assert_loaded_only_from(driver, server)
    screenshot(driver, "verdicts", height=1100)


def test_canned_query_runs_with_a_parameter(driver, server):
    from selenium.webdriver.common.by import By

    driver.get(server + "/zlstore/noise_floor")
    field = wait_for(driver, lambda b: b.find_elements(By.CSS_SELECTOR, 'input[name="op"]'), "the op field")[0]
    assert driver.find_element(By.CSS_SELECTOR, "h1").text == "Noise floor of one operator"
    field.clear()
    field.send_keys("rand")
    driver.find_element(By.CSS_SELECTOR, 'input[type="submit"][value="Run SQL"]').click()
    wait_for(driver, lambda b: "op=rand" in b.current_url, "the query to run")
    table_rows = wait_for(
        driver, lambda b: b.find_elements(By.CSS_SELECTOR, "table.rows-and-columns tbody tr"), "the answer"
    )
    text = [row.text for row in table_rows]
    # a floor per shape and screening root: as many rows as the view holds for rand
    assert len(text) == floors_of(server, "zlstore", "rand") > 2
    assert any("comprehensive" in t for t in text) and any("core" in t for t in text)
    assert all("rand" in t and "float32" in t for t in text)
    assert_loaded_only_from(driver, server)
    screenshot(driver, "canned-noise-floor")


def floors_of(base: str, database: str, op: str) -> int:
    """How many noise floors the view noise_floors holds for op, as the
    server's own JSON API answers."""
    query = urllib.parse.urlencode({"sql": "SELECT count(*) AS n FROM noise_floors WHERE op = :op", "op": op})
    with urllib.request.urlopen(f"{base}/{database}.json?{query}&_shape=array", timeout=30) as answer:
        return json.loads(answer.read())[0]["n"]


def chart_marks(browser, selector):
    """(width, height, data marks drawn) of the chart under selector: vega
    draws into an svg (marks: its role-mark elements) or a canvas (marks:
    painted pixels / 100)."""
    return browser.execute_script(
        """
        var el = document.querySelector(arguments[0] + ' svg.marks') ||
                 document.querySelector(arguments[0] + ' canvas');
        if (!el) { return [0, 0, 0]; }
        var box = el.getBoundingClientRect();
        var marks = 0;
        if (el.tagName.toLowerCase() === 'canvas') {
            var data = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;
            for (var i = 3; i < data.length; i += 4) { if (data[i] > 0) { marks++; } }
            marks = Math.floor(marks / 100);
        } else {
            marks = el.querySelectorAll('.role-mark > path, .role-mark > line, .role-mark > rect').length;
        }
        return [box.width, box.height, marks];
    """,
        selector,
    )


def rendered_chart(browser, chart, at_least):
    """Wait until chart has drawn at least `at_least` marks; its size."""
    return wait_for(
        browser,
        lambda b: chart_marks(b, f"#chart-{chart}")[2] >= at_least and chart_marks(b, f"#chart-{chart}"),
        f"the {chart} chart to render",
    )


def test_chart_renders(driver, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(server + "/-/dashboards/campaign")  # the latest campaign: the floor tree's
    # ranges: 4 ops, each a range rule and a median tick, 3 of them a floor band
    for chart, marks in (("ranges", 11), ("verdicts", 2), ("progress", 4)):
        width, height, _ = rendered_chart(driver, chart, marks)
        assert width > 100 and height > 100, (chart, width, height)
    assert_loaded_only_from(driver, server)
    screenshot(driver, "dashboard", height=1180)

    Select(driver.find_element(By.ID, "root")).select_by_visible_text("campaign_20261013_090000")
    driver.find_element(By.CSS_SELECTOR, '.dashboard-filters input[type="submit"]').click()
    wait_for(driver, lambda b: "root=campaign_20261013_090000" in b.current_url, "the filter to apply")
    width, height, _ = rendered_chart(driver, "ranges", 18)  # 9 ops, no floor band
    assert width > 100 and height > 100
    screenshot(driver, "dashboard-example-campaign")

    driver.get(server + "/-/dashboards/campaign/ranges?root=" + floor_tree.CAMPAIGN)
    width, height, _ = rendered_chart(driver, "campaign", 11)  # one chart: its div is named by the dashboard
    assert width > 100 and height > 100
    screenshot(driver, "chart-ranges", height=560)


# -- plain datasette, zlstore's plugin from its entry point ------------------------------


def test_plain_datasette_verdicts_page(driver, plain_server, example_source):
    from selenium.webdriver.common.by import By

    expected = example_verdicts(example_source[1])
    assert verdict_facet(driver, plain_server + "/examples/verdicts") == dict(expected)
    assert driver.find_element(By.CSS_SELECTOR, "h1").text.startswith("Screening verdicts (current rule)")
    driver.find_element(By.CSS_SELECTOR, "details.zlstore-column-descriptions")
    heading = driver.find_element(By.CSS_SELECTOR, 'table.rows-and-columns th[data-column="verdict"]')
    assert "TRUNCATED" in heading.get_attribute("title")
    assert_loaded_only_from(driver, plain_server)
    screenshot(driver, "plain-datasette-verdicts")


def test_plain_datasette_median_and_canned_query(driver, plain_server):
    from selenium.webdriver.common.by import By

    driver.get(plain_server + "/examples?sql=select+median(column1)+as+m+from+(values+(1),(10),(2),(4))")
    cell = wait_for(
        driver, lambda b: b.find_elements(By.CSS_SELECTOR, "table.rows-and-columns td.col-m"), "the median"
    )[0]
    assert cell.text == "3.0"
    driver.get(plain_server + "/examples/noise_floor?op=rand")
    table_rows = wait_for(
        driver,
        lambda b: b.find_elements(By.CSS_SELECTOR, "table.rows-and-columns tbody tr"),
        "the canned query's answer",
    )
    assert driver.find_element(By.CSS_SELECTOR, "h1").text == "Noise floor of one operator"
    assert len(table_rows) == floors_of(plain_server, "examples", "rand") > 1
    assert_loaded_only_from(driver, plain_server)


def test_plain_datasette_chart_renders(driver, plain_server):
    driver.get(plain_server + "/-/dashboards/campaign?root=campaign_20261013_090000")
    for chart, marks in (("ranges", 18), ("verdicts", 2), ("progress", 4)):
        width, height, _ = rendered_chart(driver, chart, marks)
        assert width > 100 and height > 100, (chart, width, height)
    assert_loaded_only_from(driver, plain_server)
    screenshot(driver, "plain-datasette-dashboard")


def test_plain_datasette_leaves_other_databases_alone(driver, plain_server):
    from selenium.webdriver.common.by import By

    driver.get(plain_server + "/other/notes")
    wait_for(driver, lambda b: b.find_elements(By.CSS_SELECTOR, "table.rows-and-columns tbody tr"), "the notes")
    assert "not a store" in driver.find_element(By.TAG_NAME, "body").text
    assert not driver.find_elements(By.CSS_SELECTOR, "details.zlstore-column-descriptions")
    driver.get(plain_server + "/")
    wait_for(driver, lambda b: b.find_elements(By.CSS_SELECTOR, "h1"), "the index page")
    assert driver.find_element(By.CSS_SELECTOR, "h1").text != "zlstore"  # two databases: datasette's own front page


@pytest.fixture(scope="module")
def team_server(example_source, tmp_path_factory):
    """`zlstore serve` bound beyond loopback (0.0.0.0) with one account, as a
    team's server runs (docs/stores.md)."""
    from datasette_auth_passwords.utils import hash_password

    dest = tmp_path_factory.mktemp("team")
    db = dest / "team.db"
    with Store(db) as store:
        store.ingest(example_source[0])
    users = dest / "users.txt"
    users.write_text(f"# who may read the team's store\nalice:{hash_password(TEAM_PASSWORD)}\n")
    command = [sys.executable, "-m", "zlstore", "serve", "--db", str(db), "--host", "0.0.0.0", "--users", str(users)]
    with running(command, dest / "serve.log") as base:
        yield base


TEAM_PASSWORD = "correct horse battery"


def test_a_team_server_refuses_a_request_without_credentials(team_server):
    for path in ("/", "/zlstore", "/zlstore/ab_ranges", "/zlstore/store_roots.json", "/zlstore.json?sql=select+1"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(team_server + path, timeout=10)
        assert refused.value.code == 403, path


def test_a_team_server_shows_its_pages_once_logged_in(team_server, example_source):
    from selenium.webdriver.common.by import By

    with chromium() as browser:
        browser.get(team_server + "/zlstore/store_roots")
        assert "403" in browser.title or "Forbidden" in browser.page_source
        browser.get(team_server + "/-/login")
        browser.find_element(By.NAME, "username").send_keys("alice")
        browser.find_element(By.NAME, "password").send_keys("not the password")
        browser.find_element(By.CSS_SELECTOR, "form input[type=submit], form button").click()
        wait_for(browser, lambda b: "Invalid username or password" in b.page_source, "the refusal")
        browser.find_element(By.NAME, "username").send_keys("alice")
        browser.find_element(By.NAME, "password").send_keys(TEAM_PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "form input[type=submit], form button").click()
        wait_for(browser, lambda b: "store_roots" in b.page_source, "the front page")
        links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "ul a")]
        store_links = [link for link in links if "/zlstore/" in link]  # not datasette's menu
        assert store_links[0].endswith("/zlstore/store_roots"), links  # what the store holds comes first
        browser.get(team_server + "/zlstore/store_roots")
        wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "table.rows-and-columns tbody tr"), "the roots")
        shown = {td.text for td in browser.find_elements(By.CSS_SELECTOR, "td.col-root")}
        assert shown == set(example_source[1]["roots"]), shown
        screenshot(browser, "team-server-roots")
