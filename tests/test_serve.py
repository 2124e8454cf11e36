"""zlstore serve through datasette's in-process client: every public view and
canned question answers with the rows the generated trees say it should, the
metadata hides what it should, and a row written by another process shows on
the next request."""

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict
from importlib import resources
from pathlib import Path
from urllib.parse import urlencode

import pytest
from click.testing import CliRunner

from zlstore import Store, caliber, names
from zlstore.serve import datasette_site, serve
from zlstore.show import judge
from zlstore.db import StoreError
from zlstore.cli import cli

from . import floor_tree

PUBLIC_VIEWS = ("verdicts", "verdicts_by_rule", "ab_pairs", "ab_rejected", "ab_ranges", "noise_floors", "cell_summary")
# Public views the bundled examples leave empty (their cells record no
# environment): described all the same.
PROVENANCE_VIEWS = ("root_environments", "environment_differences", "op_history")
# The columns issue 3 promises for each view (a view may have more).
VIEW_COLUMNS = {
    "verdicts": (
        "root",
        "op",
        "dtype",
        "rule",
        "verdict",
        "recorded_verdict",
        "orig_verdict",
        "cl_before",
        "cl_after",
        "fp_before",
        "fp_after",
        "elapsed_before",
        "elapsed_after",
        "rc_before",
        "rc_after",
        *caliber.NAMES,
        "n_rows",
        "min",
        "median",
        "max",
        "range_label",
    ),
    "ab_pairs": (
        "root",
        "card",
        "op",
        "dtype",
        "shape",
        "round",
        "latency_before",
        "latency_after",
        "ratio",
        "fallback",
    ),
    "ab_rejected": ("root", "card", "op", "dtype", "shape", "round", "reason"),
    "ab_ranges": ("root", "op", "dtype", "shape", "rounds", "min", "median", "max", "fallback"),
    "noise_floors": ("op", "dtype", *caliber.NAMES, "n", "floor"),
    "cell_summary": ("cell_id", "root", "card", "op", "dtype", "side", "round", "elapsed_s"),
}
VIEW_COLUMNS["verdicts_by_rule"] = VIEW_COLUMNS["verdicts"]
CANNED = ("noise_floor", "campaign_findings", "rule_moves", "rejected_by_reason", "campaign_progress", "screening_cost")
CAMPAIGN = "campaign_20261013_090000"
RULES = ("v1", "v2", "v3", "v4")


# -- helpers -------------------------------------------------------------------


def fetch(ds, path, **params):
    """GET path (with params) through datasette's in-process client."""
    if params:
        path += ("&" if "?" in path else "?") + urlencode(params)
    return asyncio.run(ds.client.get(path))


def rows(ds, path, **params):
    """The rows of a table, view or query as a list of objects, all of them."""
    response = fetch(ds, f"{path}.json", _shape="array", _size="max", **params)
    assert response.status_code == 200, response.text
    return response.json()


def views_in(db_path):
    with sqlite3.connect(db_path) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}


def require_views(db_path, *names):
    """Fail when a public view is missing from the store: the tests that
    read them must not pass by being skipped."""
    missing = [name for name in names if name not in views_in(db_path)]
    if missing:
        pytest.fail(f"view(s) {', '.join(missing)} missing from {db_path} (schema.sql)")


def test_a_missing_view_fails_the_tests_that_read_it(example_store_path):
    with pytest.raises(pytest.fail.Exception, match="no_such_view"):
        require_views(example_store_path, "verdicts", "no_such_view")


def key(op_dtype):
    op, _, dtype = op_dtype.partition("|")
    return op, dtype


def expected_floors(manifest):
    """(row op, row dtype, shape, bench_level, screening root) -> (floor, n)
    from the NO_IR_DIFF pairs' paired rows (current rule v3). The example
    cells record no machine: each floor is one screening root's."""
    ratios = defaultdict(list)
    for root, pairs in manifest["screen"].items():
        level = manifest["root_info"][root]["caliber"]["bench_level"]
        for pair in pairs.values():
            if pair["verdict"]["v3"] == "NO_IR_DIFF":
                for row in pair["paired_rows"]:
                    ratios[(row["op"], row["dtype"], row["shape"], level, root)].append(row["ratio"])
    return {k: (max(abs(r - 1) for r in v), len(v)) for k, v in ratios.items()}


@pytest.fixture(scope="module")
def ds(example_store_path):
    return serve.datasette_app(example_store_path)


@pytest.fixture(scope="module")
def manifest(example_source):
    return example_source[1]


@pytest.fixture(scope="module")
def floor_store_path(tmp_path_factory):
    dest = tmp_path_factory.mktemp("floor")
    floor_tree.make_floor_tree(dest / "runs")
    path = dest / "floor.db"
    with Store(path) as store:
        store.ingest(dest / "runs")
    return path


@pytest.fixture(scope="module")
def floor_ds(floor_store_path):
    require_views(floor_store_path, "ab_ranges", "noise_floors", "verdicts")
    return serve.datasette_app(floor_store_path)


# -- the app -------------------------------------------------------------------


def test_store_is_served_as_zlstore_mutable(ds, example_store_path):
    databases = fetch(ds, "/-/databases.json").json()
    assert [d["name"] for d in databases] == ["zlstore"]
    assert databases[0]["is_mutable"] is True
    assert Path(databases[0]["path"]) == Path(example_store_path).resolve()


def test_app_never_creates_a_database(tmp_path):
    with pytest.raises(StoreError, match="no such database"):
        serve.datasette_app(tmp_path / "new.db")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("view", PUBLIC_VIEWS)
def test_every_public_view_answers(ds, example_store_path, view):
    require_views(example_store_path, view)
    result = rows(ds, f"/zlstore/{view}")
    assert result, f"{view} is empty on the example store"
    missing = [c for c in VIEW_COLUMNS[view] if c not in result[0]]
    assert not missing, f"{view} lacks {missing}"
    assert fetch(ds, f"/zlstore/{view}").status_code == 200  # the HTML page too


def test_verdicts_rows(ds, example_store_path, manifest):
    require_views(example_store_path, "verdicts", "verdicts_by_rule")
    got = {(r["root"], r["op"], r["dtype"]): r for r in rows(ds, "/zlstore/verdicts")}
    expected = {(root, *key(name)): pair for root, pairs in manifest["screen"].items() for name, pair in pairs.items()}
    assert set(got) == set(expected)
    for k, pair in expected.items():
        assert got[k]["verdict"] == pair["verdict"]["v3"], k
        assert got[k]["rule"] == "v3"
        has_range = judge.BY_NAME[pair["verdict"]["v3"]].range_label is not None
        assert (got[k]["min"] is not None) == (has_range and bool(pair["ratios"])), k
    by_rule = rows(ds, "/zlstore/verdicts_by_rule")
    assert Counter(r["rule"] for r in by_rule) == {rule: len(expected) for rule in RULES}
    for r in by_rule:
        assert r["verdict"] == expected[(r["root"], r["op"], r["dtype"])]["verdict"][r["rule"]]


def test_ab_views_rows(ds, example_store_path, manifest):
    require_views(example_store_path, "ab_pairs", "ab_rejected", "ab_ranges")
    campaign = manifest["campaign"]
    ranges = {
        f"{r['op']}|{r['dtype']}|{r['shape']}": r for r in rows(ds, "/zlstore/ab_ranges", root=CAMPAIGN) if r["rounds"]
    }
    assert set(ranges) == set(campaign["ranges"])
    for name, expected in campaign["ranges"].items():
        assert ranges[name]["rounds"] == expected["n"]
        assert ranges[name]["median"] == pytest.approx(expected["median"], abs=1e-9)
        assert bool(ranges[name]["fallback"]) == expected["fallback"]
    pairs = rows(ds, "/zlstore/ab_pairs", root=CAMPAIGN)
    assert len(pairs) == sum(e["n"] for e in campaign["ranges"].values())
    rejected = Counter(
        (r["op"], r["dtype"], r["shape"], r["round"], r["reason"])
        for r in rows(ds, "/zlstore/ab_rejected", root=CAMPAIGN)
    )
    assert rejected == Counter((r["op"], r["dtype"], r["shape"], r["round"], r["reason"]) for r in campaign["rejected"])


def test_noise_floors_and_cells_rows(ds, example_store_path, manifest):
    require_views(example_store_path, "noise_floors")
    floors = {
        (r["op"], r["dtype"], r["shape"], r["bench_level"], r["roots"]): r for r in rows(ds, "/zlstore/noise_floors")
    }
    expected = expected_floors(manifest)
    assert set(floors) == set(expected)
    for k, (floor, n) in expected.items():
        assert floors[k]["floor"] == pytest.approx(floor, abs=1e-9)
        assert floors[k]["n"] == n
    cells = rows(ds, "/zlstore/cell_summary")
    assert len(cells) == manifest["cells"]


# -- the metadata ----------------------------------------------------------------


def test_internal_tables_hidden_but_queryable(ds):
    tables = {t["name"]: t for t in fetch(ds, "/zlstore.json").json()["tables"]}
    hidden = {name for name, t in tables.items() if t["hidden"]}
    assert hidden == set(datasette_site.HIDDEN_TABLES)
    index = fetch(ds, "/").text
    database_page = fetch(ds, "/zlstore").text
    for name in datasette_site.HIDDEN_TABLES:
        assert f'/zlstore/{name}"' not in index
        assert f'/zlstore/{name}"' not in database_page
        assert fetch(ds, f"/zlstore/{name}.json").status_code == 200
    assert "hidden table" in index
    assert rows(ds, "/zlstore", sql="SELECT count(*) AS n FROM blobs")[0]["n"] > 0
    for name in ("cells", "measurements", "roots", "partitions"):
        assert not tables[name]["hidden"]


@pytest.mark.parametrize("view", PUBLIC_VIEWS + PROVENANCE_VIEWS)
def test_every_public_view_is_described(example_store_path, view):
    require_views(example_store_path, view)
    with sqlite3.connect(example_store_path) as conn:
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info([{view}])")]
    table = datasette_site.metadata()["databases"]["zlstore"]["tables"][view]
    assert table.get("description")
    undescribed = [c for c in columns if not table.get("columns", {}).get(c)]
    assert not undescribed, f"{view}: no description for {undescribed}"
    assert table.get("facets") and (table.get("sort") or table.get("sort_desc"))
    units = table.get("units", {})
    for column in columns:
        if column.startswith("latency"):
            assert units.get(column) == "ms", column
        if column.startswith("elapsed"):
            assert units.get(column) == "s", column


def test_units_and_facets_render(ds, example_store_path):
    require_views(example_store_path, "verdicts", "ab_pairs")
    page = fetch(ds, "/zlstore/verdicts.json").json()
    assert set(page["facet_results"]) >= {"verdict", "root"}
    html = fetch(ds, "/zlstore/ab_pairs", root=CAMPAIGN, op="topk").text
    assert re.search(r"\d&nbsp;[mµ]s", html), "latencies carry their unit"
    assert "faster" in html  # the column description of ratio


def test_caliber_and_verdicts_come_from_their_one_definition():
    tables = datasette_site.metadata()["databases"]["zlstore"]["tables"]
    assert [f for f in tables["noise_floors"]["facets"] if f in caliber.NAMES] == list(caliber.NAMES)
    for name in caliber.NAMES:
        assert (
            caliber.CaliberField(name, caliber.ENV_VARS[caliber.NAMES.index(name)]).env
            in tables["noise_floors"]["columns"][name]
        )
    verdict_text = tables["verdicts"]["columns"]["verdict"]
    for verdict in judge.VERDICTS:
        assert verdict.name in verdict_text and verdict.licenses in verdict_text
    for reason in judge.REASONS:
        assert reason.name in tables["ab_rejected"]["columns"]["reason"]
    source = resources.files("zlstore").joinpath("metadata.yaml").read_text()
    for name in caliber.NAMES:
        assert not re.search(rf"\b{name}\b", source), f"metadata.yaml restates caliber field {name}"
    rendered = json.dumps(datasette_site.metadata())
    assert not re.search(r"\[\[(caliber|verdicts?|reasons?)\b", rendered), "an unexpanded macro"
    assert '"@' not in rendered


def test_label_columns(ds, example_store_path):
    page = fetch(ds, "/zlstore/cells.json", _labels="on", _size=1, _shape="array").json()
    assert page[0]["root_id"]["label"] in {r["name"] for r in rows(ds, "/zlstore/roots")}


# -- canned queries ------------------------------------------------------------


def test_canned_queries_are_titled_and_described(ds):
    queries = {q["name"]: q for q in fetch(ds, "/zlstore.json").json()["queries"]}
    assert set(CANNED) <= set(queries)
    for name in CANNED:
        assert queries[name]["title"] and len(queries[name]["description"]) > 80, name
        assert fetch(ds, f"/zlstore/{name}").status_code == 200


def test_noise_floor_of_one_op(ds, example_store_path, manifest):
    require_views(example_store_path, "noise_floors")
    got = rows(ds, "/zlstore/noise_floor", op="rand")
    expected = expected_floors(manifest)
    assert {r["bench_level"] for r in got} == {"comprehensive", "core"}
    for r in got:
        floor, n = expected[("rand", r["dtype"], r["shape"], r["bench_level"], r["roots"])]
        assert r["floor"] == pytest.approx(floor, abs=1e-6) and r["n"] == n and r["n_roots"] == 1
        assert r["band_low"] == pytest.approx(1 - floor, abs=1e-6)
        assert r["band_high"] == pytest.approx(1 + floor, abs=1e-6)
        assert r["gpu"] is None  # no machine recorded: one root's floor, never pooled
    core = {r["roots"] for r in got if r["bench_level"] == "core"}
    assert core == {"ab_rlc_20261012_101500", "ab_rlc_20261014_083000"}
    assert rows(ds, "/zlstore/noise_floor", op="topk") == []  # IR_CHANGED everywhere: no floor


@pytest.mark.parametrize("rule_a, rule_b", [("v1", "v2"), ("v2", "v3"), ("v3", "v4")])
def test_rule_moves(ds, example_store_path, manifest, rule_a, rule_b):
    require_views(example_store_path, "verdicts_by_rule")
    got = {
        (r["root"], r["op"], r["dtype"]): (r["verdict_a"], r["verdict_b"])
        for r in rows(ds, "/zlstore/rule_moves", rule_a=rule_a, rule_b=rule_b)
    }
    expected = {
        (root, *key(name)): (p["verdict"][rule_a], p["verdict"][rule_b])
        for root, pairs in manifest["screen"].items()
        for name, p in pairs.items()
        if p["verdict"][rule_a] != p["verdict"][rule_b]
    }
    assert got == expected and got


def test_rule_moves_default_to_the_current_rule(ds, example_store_path, manifest):
    """Both rules empty: every other rule against the current one (v3)."""
    require_views(example_store_path, "verdicts_by_rule")
    got = {
        (r["root"], r["op"], r["dtype"], r["rule_a"]): (r["verdict_a"], r["verdict_b"])
        for r in rows(ds, "/zlstore/rule_moves")
    }
    expected = {
        (root, *key(name), rule): (p["verdict"][rule], p["verdict"]["v3"])
        for root, pairs in manifest["screen"].items()
        for name, p in pairs.items()
        for rule in RULES
        if p["verdict"][rule] != p["verdict"]["v3"]
    }
    assert got == expected and got


def test_rejected_by_reason(ds, example_store_path, manifest):
    require_views(example_store_path, "ab_rejected")
    got = {(r["reason"], r["op"], r["dtype"]): r for r in rows(ds, "/zlstore/rejected_by_reason", root=CAMPAIGN)}
    expected = Counter((r["reason"], r["op"], r["dtype"]) for r in manifest["campaign"]["rejected"])
    assert {k: r["rows"] for k, r in got.items()} == dict(expected)
    # The example tree holds no copied cell (test_duplicate_cells.py copies one).
    assert {reason for reason, _, _ in got} == set(judge.REASON_NAMES) - {names.DUPLICATE}
    mismatch = got[("CALIBER_MISMATCH", "softmax", "float32")]
    assert "direct_repeat" in mismatch["fields"] and "200" in mismatch["differences"]
    everything = rows(ds, "/zlstore/rejected_by_reason")
    assert {r["root"] for r in everything} > {CAMPAIGN}


def test_campaign_progress_of_a_finished_campaign(ds, example_store_path, manifest):
    campaign = manifest["campaign"]
    got = {r["card"]: r for r in rows(ds, "/zlstore/campaign_progress")}  # the latest campaign
    ops = Counter(p["card"] for p in campaign["partition"])
    assert set(got) == set(ops)
    elapsed: defaultdict[int, float] = defaultdict(float)
    for rel, cell in manifest["cell_index"].items():
        if rel.startswith(CAMPAIGN + "/"):
            elapsed[cell["card"]] += cell["elapsed_s"]
    for card, n_ops in ops.items():
        r = got[card]
        assert r["root"] == CAMPAIGN
        assert r["cells_planned"] == r["cells_recorded"] == 2 * campaign["rounds"] * n_ops
        assert r["ops_done"] == n_ops and r["ops_left"] == 0 and r["heaviest_op_left"] is None
        assert r["elapsed_s"] == pytest.approx(elapsed[card])


def test_screening_cost(ds, example_store_path, manifest):
    require_views(example_store_path, "verdicts")
    got = {(r["op"], r["dtype"]): r for r in rows(ds, "/zlstore/screening_cost", root=CAMPAIGN)}
    screen = manifest["screen"][manifest["campaign"]["screen_root"]]
    repeat: defaultdict[tuple[str, str], float] = defaultdict(float)
    for rel, cell in manifest["cell_index"].items():
        if rel.startswith(CAMPAIGN + "/"):
            repeat[(cell["op"], cell["dtype"])] += cell["elapsed_s"]
    assert set(got) == {(p["op"], p["dtype"]) for p in manifest["campaign"]["partition"]}
    for k, r in got.items():
        screen_s = sum(screen[f"{k[0]}|{k[1]}"]["elapsed"])
        assert r["screen_root"] == manifest["campaign"]["screen_root"]
        assert r["screen_s"] == pytest.approx(screen_s)
        assert r["repeat_s"] == pytest.approx(repeat[k])
        assert r["rounds"] == manifest["campaign"]["rounds"]
        assert r["per_round"] == pytest.approx(repeat[k] / screen_s / r["rounds"], abs=1e-3)


def test_findings_against_floors_of_the_campaigns_caliber(ds, example_store_path, manifest):
    """The example campaign is measured under its screens' caliber, and its
    cells record no machine: a range of a shape its own screening root
    measured a floor for is judged against that floor (not another root's,
    nor the comprehensive root's), the others say there is none."""
    require_views(example_store_path, "ab_ranges", "noise_floors")
    got = rows(ds, "/zlstore/campaign_findings", root=CAMPAIGN)
    own = manifest["campaign"]["screen_root"]
    expected = expected_floors(manifest)
    rand = [r for r in got if r["op"] == "rand" and r["rounds"]]
    assert rand
    for r in rand:
        floor = expected.get(("rand", r["dtype"], r["shape"], "core", own))
        assert r["noise_floor"] == (pytest.approx(floor[0], abs=1e-6) if floor else None)
    assert any(r["noise_floor"] is not None for r in rand)
    topk = [r for r in got if r["op"] == "topk"]
    assert topk and all(r["noise_floor"] is None for r in topk)


def test_campaign_findings_under_one_caliber(floor_ds):
    got = rows(floor_ds, "/zlstore/campaign_findings")
    assert {(r["op"], r["dtype"]): r["finding"] for r in got} == floor_tree.FINDING
    assert {(r["op"], r["dtype"]): r["floor_band"] for r in got} == floor_tree.FLOOR_BAND
    for r in got:
        floor = floor_tree.FLOORS.get((r["op"], r["dtype"]))
        if floor is None:
            assert r["noise_floor"] is None
        else:
            assert r["noise_floor"] == pytest.approx(floor, abs=1e-6)
        assert (r["q_max"], r["min_effect"]) == (0.05, 0.02)
    findings = [r["finding"] for r in got]
    assert findings == sorted(findings, key=judge.FINDING_NAMES.index)


def test_campaign_progress_with_ops_left(floor_ds):
    got = {r["card"]: r for r in rows(floor_ds, "/zlstore/campaign_progress")}
    assert got[0]["cells_recorded"] == got[0]["cells_planned"] == 12 and got[0]["ops_left"] == 0
    card1 = got[1]
    assert (card1["cells_recorded"], card1["cells_planned"]) == (10, 18)
    assert (card1["ops_done"], card1["ops_left"]) == (1, 2)
    assert card1["heaviest_op_left"] == "cos float16"
    assert card1["heaviest_left_min"] == pytest.approx(floor_tree.weight_min("cos", "float16"))


def test_screening_cost_ratio(floor_ds):
    got = {(r["op"], r["dtype"]): r for r in rows(floor_ds, "/zlstore/screening_cost")}
    assert got[("gelu", "float16")]["per_round"] == pytest.approx(1.04, abs=1e-3)
    assert got[("gelu", "float16")]["repeat_per_screen"] == pytest.approx(3.12, abs=1e-3)
    assert got[("exp", "float32")]["rounds"] == 2
    assert ("cos", "float16") not in got  # not started: nothing to compare yet


# -- charts --------------------------------------------------------------------


def dashboard():
    return datasette_site.metadata()["plugins"]["datasette-dashboards"]["campaign"]


def test_dashboard_page_uses_only_local_assets(floor_ds):
    response = fetch(floor_ds, "/-/dashboards/campaign")
    assert response.status_code == 200
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', response.text)
    assert any("vega-lite" in s for s in scripts)
    assert not [s for s in scripts if s.startswith(("http:", "https:", "//"))]
    links = re.findall(r'<link[^>]+href="([^"]+)"', response.text)
    assert not [s for s in links if s.startswith(("http:", "https:", "//"))]
    for src in scripts:
        assert fetch(floor_ds, src.split("?")[0]).status_code == 200, src


def test_chart_queries(floor_ds, floor_store_path):
    charts = dashboard()["charts"]
    assert {"ranges", "verdicts"} <= set(charts)
    ranges = rows(floor_ds, "/zlstore", sql=charts["ranges"]["query"], root=floor_tree.CAMPAIGN)
    shape = json.dumps(floor_tree.SHAPE, separators=(",", ":"))
    assert {r["label"]: r["finding"] for r in ranges} == {
        f"{op} {dtype} {shape}": finding for (op, dtype), finding in floor_tree.FINDING.items()
    }
    # the chart's numbers are the view's, the ones zlstore ab prints
    with Store(floor_store_path) as store:
        view = {(r["op"], r["shape"]): r for r in judge.ab_ranges(store, floor_tree.CAMPAIGN)}
    for r in ranges:
        same = view[(r["op"], r["shape"])]
        assert (r["effect"], r["ci_low"], r["ci_high"], r["q_value"]) == (
            same["effect"],
            same["ci_low"],
            same["ci_high"],
            same["q_value"],
        )
    gelu = next(r for r in ranges if r["op"] == "gelu")
    assert gelu["effect"] == pytest.approx((1.08 * 1.10 * 1.12) ** (1 / 3), abs=1e-9)
    assert gelu["band_high"] == pytest.approx(1.02, abs=1e-6)
    assert rows(floor_ds, "/zlstore", sql=charts["ranges"]["query"]) == ranges  # latest by default
    verdicts = rows(floor_ds, "/zlstore", sql=charts["verdicts"]["query"])
    assert {r["verdict"]: r["pairs"] for r in verdicts} == {"NO_IR_DIFF": 3, "IR_CHANGED": 2}
    progress = rows(floor_ds, "/zlstore", sql=charts["progress"]["query"])
    assert {(r["card"], r["what"]): r["cells"] for r in progress} == {
        ("card 0", "planned"): 12,
        ("card 0", "recorded"): 12,
        ("card 1", "planned"): 18,
        ("card 1", "recorded"): 10,
    }


# -- live ------------------------------------------------------------------------


def test_rows_written_by_another_process_show_on_the_next_request(tmp_path, floor_store_path):
    runs = tmp_path / "runs"
    floor_tree.make_floor_tree(runs)
    db = tmp_path / "live.db"
    with Store(db) as store:
        store.ingest(runs)
    app = serve.datasette_app(db)
    require_views(db, "ab_ranges")
    progress = {r["card"]: r for r in rows(app, "/zlstore/campaign_progress")}
    assert progress[1]["cells_recorded"] == 10
    before = rows(app, "/zlstore/ab_ranges", op="exp")
    assert [r["rounds"] for r in before] == [2]

    cells = floor_tree.write_campaign_round(runs, "exp", "float32", 3, floor_tree.EXP_ROUND3)
    writer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from zlstore import Store; s = Store(sys.argv[1]); "
            "print(s.record(sys.argv[2:])['cells_added']); s.close()",
            str(db),
            *map(str, cells),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert writer.returncode == 0, writer.stderr
    assert writer.stdout.strip() == "2"

    progress = {r["card"]: r for r in rows(app, "/zlstore/campaign_progress")}
    assert progress[1]["cells_recorded"] == 12
    assert [r["rounds"] for r in rows(app, "/zlstore/ab_ranges", op="exp")] == [3]


# -- the command -------------------------------------------------------------------


def test_serve_get_answers_one_request(example_store_path):
    result = CliRunner().invoke(
        cli, ["serve", "--db", str(example_store_path), "--get", "/zlstore/roots.json?_shape=array"]
    )
    assert result.exit_code == 0, result.output
    assert {r["name"] for r in json.loads(result.stdout)} >= {CAMPAIGN}
    missing = CliRunner().invoke(cli, ["serve", "--db", str(example_store_path), "--get", "/nope"])
    assert missing.exit_code == 2 and "/nope answered 404" in missing.stderr


def test_serve_binds_localhost_and_warns_on_the_network(example_store_path, monkeypatch, tmp_path):
    import uvicorn

    calls = []

    def run(server, sockets=None):  # as if Ctrl-C stopped it at once
        calls.append({"host": server.config.host, "port": server.config.port})
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    result = CliRunner().invoke(cli, ["serve", "--db", str(example_store_path)])
    assert result.exit_code == 130, result.output  # the server returns once Ctrl-C stopped it
    assert calls[-1]["host"] == "127.0.0.1" and calls[-1]["port"] == 8001
    assert "arbitrary" not in result.stderr
    users = tmp_path / "users.txt"
    users.write_text("alice:pbkdf2_sha256$260000$salt$hash\n")
    network = ["serve", "--db", str(example_store_path), "--host", "0.0.0.0", "--port", "9001"]
    result = CliRunner().invoke(cli, network + ["--users", str(users)])
    assert result.exit_code == 130, result.output
    assert calls[-1]["host"] == "0.0.0.0" and calls[-1]["port"] == 9001
    assert "/-/login" in result.stderr and "arbitrary" in result.stderr and "SQL" in result.stderr


def test_median_is_there_for_ad_hoc_sql(ds):
    """The aggregate behind every range's median, for a person's own SQL."""
    response = fetch(
        ds, "/zlstore.json?sql=select+median(column1)+as+m+from+(values+(1.0),(10.0),(2.0),(4.0))&_shape=array"
    )
    assert response.status_code == 200
    assert response.json() == [{"m": 3.0}]


# -- DNS rebinding: only this machine's own names are answered ---------------------


def fetch_as(ds, path, host):
    return asyncio.run(ds.client.get(path, headers={"host": host}))


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8001",
        "LOCALHOST:8001",
        "127.0.0.1:8001",
        "[::1]:8001",
        "10.1.2.3:8001",
        "localhost:9000",
    ],
)
def test_requests_for_this_machine_are_answered(ds, host):
    response = fetch_as(ds, "/zlstore/roots.json?_shape=array", host)
    assert response.status_code == 200
    assert {r["name"] for r in response.json()} >= {CAMPAIGN}


@pytest.mark.parametrize(
    "host",
    ["evil.example:8001", "evil.example", "localhost.evil.example:8001", "127.0.0.1.nip.io:8001", "[::1].evil.example"],
)
def test_a_dns_rebinding_host_is_refused(ds, host):
    for path in ("/zlstore/roots.json?_shape=array", "/zlstore.json?sql=select+path+from+cells", "/"):
        response = fetch_as(ds, path, host)
        assert response.status_code == 400
        assert "DNS-rebinding" in response.text and "--allow-host" in response.text
        assert CAMPAIGN not in response.text and "ab_rlc" not in response.text


def test_names_answered_by_where_it_is_bound():
    import socket

    own = socket.gethostname().lower()
    assert datasette_site.host_names("127.0.0.1") == {"localhost"}
    assert own in datasette_site.host_names("0.0.0.0") and own in datasette_site.host_names("::")
    assert "stats.lab" in datasette_site.host_names("stats.lab") and own in datasette_site.host_names("stats.lab")
    assert "alias.corp" in datasette_site.host_names("127.0.0.1", ["Alias.Corp."])
    assert datasette_site.host_allowed(None, frozenset())  # an HTTP/1.0 client, not a browser


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_server_refuses_a_foreign_host_and_ctrl_c_ends_it(example_store_path):
    import http.client
    import time

    from .test_run import interrupt

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "zlstore", "serve", "--db", str(example_store_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/zlstore/roots.json?_shape=array", headers={"Host": f"localhost:{port}"})
                own = conn.getresponse()
                break
            except ConnectionRefusedError:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.2)
        assert own.status == 200 and CAMPAIGN in own.read().decode()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/zlstore/roots.json?_shape=array", headers={"Host": f"evil.example:{port}"})
        foreign = conn.getresponse()
        body = foreign.read().decode()
        assert foreign.status == 400 and "DNS-rebinding" in body and CAMPAIGN not in body
        out, err = interrupt(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted: nothing was written")


def test_serve_get_without_a_leading_slash_is_a_usage_error(example_store_path):
    result = CliRunner().invoke(cli, ["serve", "--db", str(example_store_path), "--get", "zlstore/roots.json"])
    assert result.exit_code == 2
    assert "'zlstore/roots.json' is not a path on the server" in result.stderr
    assert "/zlstore/roots.json" in result.stderr


def test_an_address_already_in_use_is_an_environment_error(example_store_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "zlstore", "serve", "--db", str(example_store_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    assert f"could not serve on 127.0.0.1:{port}" in result.stderr
