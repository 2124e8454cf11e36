"""zlstore's datasette plugin in plain datasette: `datasette examples.db`,
with the plugin loaded from zlstore's entry point (never registered by
hand here), serves the views, median(), the canned queries, the
descriptions and the dashboard under the file's own name, and gives a
non-zlstore database beside it none of them. Also `zlstore metadata` for a
datasette without the plugin, and the datasette options of `zlstore serve`."""

import asyncio
import json
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner
from datasette.app import Datasette
from datasette.plugins import pm

from zlstore import Store
from zlstore.serve import datasette_plugin, datasette_site, serve
from zlstore.cli import cli

from .test_serve import CANNED, PUBLIC_VIEWS, fetch, rows

CAMPAIGN = "campaign_20261013_090000"


def copy_store(source, dest):
    """A copy of a store that other tests may be reading (its WAL folded in first)."""
    with Store(source) as store:
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(source, dest)
    return dest


@pytest.fixture(scope="module")
def files(example_store_path, tmp_path_factory):
    """examples.db (a zlstore store) and other.db (not one), side by side."""
    dest = tmp_path_factory.mktemp("plain")
    examples = copy_store(example_store_path, dest / "examples.db")
    other = dest / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE verdicts (op TEXT, verdict TEXT)")  # a name zlstore also uses
        conn.execute("INSERT INTO verdicts VALUES ('mine', 'fine')")
    return examples, other


@pytest.fixture(scope="module")
def plain(files):
    """What `datasette examples.db other.db` builds."""
    return Datasette([str(path) for path in files])


@pytest.fixture(scope="module")
def alone(files):
    """What `datasette examples.db` builds."""
    return Datasette([str(files[0])])


@pytest.fixture(scope="module")
def zl_app(files):
    return serve.datasette_app(files[0])


def test_the_plugin_comes_from_zlstores_entry_point(plain):
    assert pm.get_plugin("zlstore") is datasette_plugin
    distributions = {plugin: info.project_name for plugin, info in pm.list_plugin_distinfo()}
    assert distributions.get(datasette_plugin) == "zlstore", "registered by hand, not by the entry point"
    listed = {p["name"]: p for p in fetch(plain, "/-/plugins.json").json()}
    assert {"get_metadata", "prepare_connection", "extra_body_script"} <= set(listed["zlstore"]["hooks"])


def test_the_store_is_served_under_its_file_name(plain):
    assert [d["name"] for d in fetch(plain, "/-/databases.json").json()] == ["examples", "other"]
    assert datasette_plugin.stores(plain) == ("examples",)


@pytest.mark.parametrize("view", PUBLIC_VIEWS)
def test_views_answer_as_under_zlstore_serve(plain, zl_app, view):
    got = rows(plain, f"/examples/{view}")
    assert got and got == rows(zl_app, f"/zlstore/{view}")


def test_median_and_the_t_test_on_the_store_only(plain):
    sql = "select median(column1) as m, round(t_critical(2), 3) as t from (values (1.0), (10.0), (2.0), (4.0))"
    assert rows(plain, "/examples", sql=sql) == [{"m": 3.0, "t": 4.303}]
    response = fetch(plain, "/other.json", sql="select median(1)")
    assert response.status_code == 400 and "no such function: median" in response.text


@pytest.mark.parametrize("name", CANNED)
def test_canned_queries_answer_as_under_zlstore_serve(plain, zl_app, name):
    queries = {q["name"]: q for q in fetch(plain, "/examples.json").json()["queries"]}
    assert queries[name]["title"] and queries[name]["description"]
    params = {"root": CAMPAIGN} if name in ("campaign_findings", "rejected_by_reason") else {}
    if name == "noise_floor":
        params = {"op": "rand"}
    got = rows(plain, f"/examples/{name}", **params)
    assert got == rows(zl_app, f"/zlstore/{name}", **params)
    if name != "rule_moves":  # the example store holds moves under some rules only
        assert got, name


def test_descriptions_units_and_hidden_tables(plain):
    page = fetch(plain, "/examples/verdicts")
    assert page.status_code == 200
    assert "Screening verdicts (current rule)" in page.text
    assert datasette_plugin.FOLD_COLUMN_DESCRIPTIONS.strip() in page.text
    assert page.text.count("zlstore-column-descriptions") == 1
    html = fetch(plain, "/examples/ab_pairs", root=CAMPAIGN, op="topk").text
    assert re.search(r"\d&nbsp;[mµ]s", html), "latencies carry their unit"
    tables = {t["name"]: t for t in fetch(plain, "/examples.json").json()["tables"]}
    assert {name for name, t in tables.items() if t["hidden"]} == set(datasette_site.HIDDEN_TABLES)
    database_page = fetch(plain, "/examples").text
    assert 'href="/examples/ab_ranges"' in database_page and "/zlstore/" not in database_page


def test_a_database_beside_the_store_gets_nothing_of_zlstore(plain):
    assert plain.metadata(database="other", fallback=False) == {}
    assert plain.metadata("title") is None  # the front page is not zlstore's: two databases
    assert fetch(plain, "/other.json").json()["queries"] == []
    page = fetch(plain, "/other/verdicts")
    assert page.status_code == 200 and "mine" in page.text
    assert "zlstore-column-descriptions" not in page.text and "Screening verdicts" not in page.text
    assert rows(plain, "/other/verdicts") == [{"rowid": 1, "op": "mine", "verdict": "fine"}]
    assert fetch(plain, "/-/dashboards/campaign").status_code == 200  # the store's, as the only one


def test_the_front_page_is_zlstores_when_the_store_is_alone(alone):
    assert alone.metadata("title") == "zlstore"
    index = fetch(alone, "/").text
    assert 'href="/examples/verdicts"' in index and 'href="/-/dashboards/campaign"' in index
    assert "/zlstore/" not in index


def test_the_dashboard_reads_the_store(plain, zl_app):
    response = fetch(plain, "/-/dashboards/campaign")
    assert response.status_code == 200
    dashboard = plain.plugin_config("datasette-dashboards")["campaign"]
    charts = dashboard["charts"]
    assert {chart["db"] for chart in charts.values()} == {"examples"}
    assert dashboard["filters"]["root"]["db"] == "examples"
    assert CAMPAIGN in response.text  # the filter's options, read from the store
    # what dashboards.js asks for: /<db>.json?sql=<query>&<filters>
    ranges = rows(plain, "/examples", sql=charts["ranges"]["query"], root=CAMPAIGN)
    assert ranges == rows(zl_app, "/zlstore", sql=charts["ranges"]["query"], root=CAMPAIGN)
    assert {r["finding"] for r in ranges} >= {"faster", "too few rounds"}
    assert fetch(plain, "/-/dashboards/campaign/ranges", root=CAMPAIGN).status_code == 200


def test_plain_datasette_answers_any_host(plain):
    """The Host check is zlstore serve's; plain datasette keeps datasette's behaviour."""
    response = asyncio.run(plain.client.get("/examples/roots.json?_shape=array", headers={"host": "evil.example:8001"}))
    assert response.status_code == 200


def test_two_stores_get_a_dashboard_each(files, tmp_path):
    second = copy_store(files[0], tmp_path / "second.db")
    ds = Datasette([str(files[0]), str(second)])
    config = ds.plugin_config("datasette-dashboards")
    assert set(config) == {f"{board}-{name}" for board in ("campaign", "history") for name in ("examples", "second")}
    for name in ("examples", "second"):
        assert {c["db"] for c in config[f"campaign-{name}"]["charts"].values()} == {name}
        assert fetch(ds, f"/-/dashboards/campaign-{name}").status_code == 200
        assert {q["name"] for q in fetch(ds, f"/{name}.json").json()["queries"]} >= set(CANNED)


# -- zlstore serve: the same hooks, once ---------------------------------------------


def test_zlstore_serve_registers_nothing_twice(zl_app):
    assert [p for p in pm.get_plugins() if p is datasette_plugin] == [datasette_plugin]
    page = fetch(zl_app, "/zlstore/verdicts").text
    assert page.count("zlstore-column-descriptions") == 1
    names = [q["name"] for q in fetch(zl_app, "/zlstore.json").json()["queries"]]
    assert sorted(names) == sorted(set(names)) and set(CANNED) <= set(names)
    assert zl_app.metadata("title") == "zlstore"


# -- zlstore metadata: for a datasette without the plugin ------------------------------


def test_metadata_command_names_the_database(files):
    result = CliRunner().invoke(cli, ["metadata", "--db", str(files[0])])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data["databases"]) == ["examples"]
    assert set(CANNED) <= set(data["databases"]["examples"]["queries"])
    assert {c["db"] for c in data["plugins"]["datasette-dashboards"]["campaign"]["charts"].values()} == {"examples"}
    assert "[[" not in result.stdout and '"@' not in result.stdout
    assert "{db}" not in result.stdout and "{-db}" not in result.stdout and "/zlstore/" not in result.stdout
    named = json.loads(CliRunner().invoke(cli, ["metadata", "--db", str(files[0]), "--name", "runs"]).stdout)
    assert list(named["databases"]) == ["runs"] and 'href=\\"/runs/verdicts' in json.dumps(named)
    refused = CliRunner().invoke(cli, ["metadata", "--db", str(files[1])])
    assert refused.exit_code == 2 and "not a zlstore store" in refused.stderr


WITHOUT_ZLSTORE = """
import asyncio, json, sys
sys._called_from_test = True  # datasette then loads no plugin from an entry point
from datasette.app import Datasette
from datasette.plugins import pm
import datasette_dashboards
pm.register(datasette_dashboards, "dashboards")
assert pm.get_plugin("zlstore") is None
ds = Datasette([sys.argv[1]], metadata=json.load(open(sys.argv[2])))

async def main():
    out = {}
    for path in sys.argv[3:]:
        response = await ds.client.get(path)
        out[path] = [response.status_code, response.text]
    print(json.dumps(out))

asyncio.run(main())
"""


def test_metadata_json_in_a_datasette_without_the_plugin(files, tmp_path):
    """`zlstore metadata > metadata.json; datasette examples.db -m metadata.json`
    where zlstore is not installed: descriptions, canned queries and charts."""
    metadata = tmp_path / "metadata.json"
    metadata.write_text(CliRunner().invoke(cli, ["metadata", "--db", str(files[0])]).stdout)
    paths = [
        "/examples.json",
        "/examples/verdicts",
        "/examples/campaign_findings.json?_shape=array&root=" + CAMPAIGN,
        "/-/dashboards/campaign",
        "/examples.json?sql=select+median(1)",
    ]
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_ZLSTORE, str(files[0]), str(metadata), *paths],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert set(CANNED) <= {q["name"] for q in json.loads(got[paths[0]][1])["queries"]}
    assert "Screening verdicts (current rule)" in got[paths[1]][1]
    assert "zlstore-column-descriptions" not in got[paths[1]][1]  # the plugin's touch: not there
    status, text = got[paths[2]]
    assert status == 200 and {r["finding"] for r in json.loads(text)} >= {"faster"}
    assert got[paths[3]][0] == 200
    assert "no such function: median" in got[paths[4]][1]  # the functions need the plugin


# -- zlstore serve's datasette options ----------------------------------------------------


def serve_get(db, path, *options):
    result = CliRunner().invoke(cli, ["serve", "--db", str(db), *options, "--get", path])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_serve_port_and_host_as_datasette_spells_them(files, monkeypatch, tmp_path):
    import uvicorn

    calls = []

    def run(server, sockets=None):  # as if Ctrl-C stopped it at once
        calls.append({"host": server.config.host, "port": server.config.port})
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    users = tmp_path / "users.txt"
    users.write_text("alice:pbkdf2_sha256$260000$salt$hash\n")
    result = CliRunner().invoke(
        cli, ["serve", "--db", str(files[0]), "-p", "9002", "-h", "0.0.0.0", "--users", str(users)]
    )
    assert result.exit_code == 130, result.output
    assert (calls[-1]["host"], calls[-1]["port"]) == ("0.0.0.0", 9002)
    assert "0.0.0.0" in result.stderr
    help_text = CliRunner().invoke(cli, ["serve", "--help"]).output
    assert "-h, --host" in help_text and "-p, --port" in help_text


def test_serve_settings_are_datasettes(files):
    settings = json.loads(
        serve_get(
            files[0], "/-/settings.json", "--setting", "max_returned_rows", "7", "--setting", "allow_download", "off"
        )
    )
    assert settings["max_returned_rows"] == 7 and settings["allow_download"] is False
    assert settings["sql_time_limit_ms"] == serve.SETTINGS["sql_time_limit_ms"]  # zlstore's, kept
    bad = CliRunner().invoke(
        cli, ["serve", "--db", str(files[0]), "--setting", "max_returned_rows", "many", "--get", "/"]
    )
    assert bad.exit_code == 2 and "should be an integer" in bad.stderr
    unknown = CliRunner().invoke(cli, ["serve", "--db", str(files[0]), "--setting", "no_such", "1", "--get", "/"])
    assert unknown.exit_code == 2 and "datasette serve --help-settings" in unknown.stderr


def test_serve_cors(files):
    app = serve.datasette_app(files[0], cors=True)
    assert fetch(app, "/zlstore/roots.json").headers.get("access-control-allow-origin") == "*"
    plain_headers = fetch(serve.datasette_app(files[0]), "/zlstore/roots.json").headers
    assert "access-control-allow-origin" not in plain_headers


def test_serve_metadata_is_merged_over_zlstores(files, tmp_path):
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        yaml.safe_dump(
            {"title": "Lab 3 campaigns", "databases": {"zlstore": {"tables": {"verdicts": {"title": "Our verdicts"}}}}}
        )
    )
    metadata = json.loads(serve_get(files[0], "/-/metadata.json", "--metadata", str(extra)))
    assert metadata["title"] == "Lab 3 campaigns"
    verdicts = metadata["databases"]["zlstore"]["tables"]["verdicts"]
    assert verdicts["title"] == "Our verdicts"
    assert "TRUNCATED" in verdicts["columns"]["verdict"]  # zlstore's description, still there
    page = serve_get(files[0], "/zlstore/verdicts", "-m", str(extra))
    assert "Our verdicts" in page
    broken = tmp_path / "broken.json"
    broken.write_text("{: nope")
    result = CliRunner().invoke(cli, ["serve", "--db", str(files[0]), "--metadata", str(broken), "--get", "/"])
    assert result.exit_code == 2 and "broken.json" in result.stderr
