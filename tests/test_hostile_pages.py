"""One request cannot starve the server; another site's page cannot query
the store; a full stdout, a name with control characters and a median of
huge values end as they should (issue 33, items 3, 8, 9, 11)."""

import asyncio
import json
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from urllib.parse import urlencode

import pytest

from zlstore.serve import datasette_plugin, serve
from zlstore import stats

from .judging import invoke, json_out
from .test_roots import CAMPAIGN, SCREEN, ingest, settled  # noqa: F401

ZLSTORE = [sys.executable, "-m", "zlstore"]


@pytest.fixture(scope="module")
def ds(example_store_path):
    return serve.datasette_app(example_store_path)


def query(ds, sql, headers=None):
    return asyncio.run(
        ds.client.get("/zlstore.json?" + urlencode({"sql": sql, "_shape": "array"}), headers=headers or {})
    )


@pytest.mark.parametrize(
    "sql",
    [
        "select length(randomblob(300000000)) as n",
        "select length(zeroblob(1000000000)) as n",
        "select length(replace(hex(zeroblob(20000000)), '0', '00')) as n",
        "select length(group_concat(hex(randomblob(1000000)))) as n from (select 1 from cells limit 100)",
    ],
)
def test_one_query_cannot_take_more_than_a_value_s_bound(ds, sql):
    response = query(ds, sql)
    assert response.status_code == 400
    assert "string or blob too big" in response.text


def test_printf_width_is_bounded_too(ds):
    response = query(ds, "select length(printf('%.*c', 1000000000, 'x')) as n")
    assert response.status_code != 200 or response.json() == [{"n": None}]


def test_a_value_of_the_usual_size_is_answered(ds):
    assert query(ds, "select length(randomblob(1000000)) as n").json() == [{"n": 1000000}]


def test_fts3_tokenizer_cannot_be_called(ds):
    for sql in (
        "select fts3_tokenizer('simple') as p",
        "select hex(fts3_tokenizer('porter')) as p",
        "select FTS3_TOKENIZER('simple', x'00') as p",
    ):
        response = query(ds, sql)
        assert response.status_code == 400 and "not authorized" in response.text, sql


def test_a_plain_connection_is_bound_the_same_way():
    conn = sqlite3.connect(":memory:")
    datasette_plugin.bound(conn)
    with pytest.raises(sqlite3.DataError):
        conn.execute("select randomblob(100000000)").fetchone()
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        conn.execute("select fts3_tokenizer('simple')").fetchone()


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "127.0.0.1:8001", "sec-fetch-site": "cross-site"},
        {"host": "127.0.0.1:8001", "sec-fetch-site": "same-site"},  # another port of localhost: another site's page
        {"host": "127.0.0.1:8001", "origin": "https://evil.example"},
        {"host": "127.0.0.1:8001", "origin": "http://127.0.0.1:3000"},
        {"host": "127.0.0.1:8001", "origin": "null"},
    ],
)
def test_a_cross_site_request_is_refused(ds, headers):
    for path in ("/zlstore.json?sql=select+path+from+cells", "/zlstore/roots.json", "/"):
        response = asyncio.run(ds.client.get(path, headers=headers))
        assert response.status_code == 403, (path, headers)
        assert "cross-site" in response.text and CAMPAIGN not in response.text


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "127.0.0.1:8001", "sec-fetch-site": "same-origin", "origin": "http://127.0.0.1:8001"},
        {"host": "localhost:8001", "sec-fetch-site": "none"},  # typed in the address bar
        {"host": "127.0.0.1:8001"},  # curl, a script
    ],
)
def test_the_store_s_own_pages_and_scripts_are_answered(ds, headers):
    response = asyncio.run(ds.client.get("/zlstore/roots.json?_shape=array", headers=headers))
    assert response.status_code == 200 and CAMPAIGN in response.text


def test_cors_lets_other_sites_read(example_store_path):
    open_ds = serve.datasette_app(example_store_path, cors=True)
    response = asyncio.run(
        open_ds.client.get(
            "/zlstore/roots.json?_shape=array",
            headers={"host": "127.0.0.1:8001", "sec-fetch-site": "cross-site", "origin": "https://dashboard.example"},
        )
    )
    assert response.status_code == 200


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null"])
def test_serve_reads_metadata_from_a_regular_file_only(example_store_path, special):
    done = subprocess.run(
        ZLSTORE + ["serve", "--db", str(example_store_path), "-m", special, "--get", "/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "not a regular file" in done.stderr


# -- standard output that cannot be written ------------------------------------------


@pytest.mark.parametrize("args", [["export", "ab_rlc_20261012_101500"], ["screen"], ["ab", "--json"], ["ab", "--csv"]])
def test_a_full_stdout_ends_in_one_line(example_store_path, args):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            ZLSTORE + args + ["--db", str(example_store_path)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["zlstore: cannot write to standard output: No space left on device"]


def test_a_closed_pipe_ends_quietly_with_its_status(example_store_path):
    done = subprocess.run(
        " ".join(ZLSTORE) + f" ab --nl --db {example_store_path} | head -c 10 > /dev/null; echo ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() in ("0", "141")  # 0: all of it fit the pipe before head left
    assert "Traceback" not in done.stderr and "Error" not in done.stderr


# -- names with control characters ------------------------------------------------------


def test_control_characters_in_a_name_never_reach_the_terminal(example_tree, tmp_path):
    tree, _ = example_tree
    hostile = SCREEN.replace("_rlc_", "_rlc\x1b]0;owned\x07\x1b[2J_")
    (tree / SCREEN).rename(tree / hostile)
    target = tmp_path / "t.db"
    ingested = invoke(target, "ingest", tree / hostile)
    assert "\x1b" not in ingested.output and "\x07" not in ingested.output
    shown = invoke(target, "screen")
    assert shown.exit_code == 0
    assert "\x1b" not in shown.output and "\\x1b]0;owned\\x07\\x1b[2J" in shown.output
    # what scripts read keeps the exact name
    assert {row["root"] for row in json_out(invoke(target, "screen", "--json"))} == {hostile}
    assert hostile in invoke(target, "screen", "--csv").stdout
    merged = invoke(tmp_path / "m.db", "merge", target)
    assert "\x1b" not in merged.output
    assert "\x1b" not in invoke(tmp_path / "m.db", "screen").output


def test_median_of_huge_values_does_not_overflow():
    conn = sqlite3.connect(":memory:")
    stats.register(conn)
    assert conn.execute("SELECT median(x) FROM (SELECT 1e308 AS x UNION ALL SELECT 1e308)").fetchone() == (1e308,)
    assert conn.execute("SELECT median(x) FROM (SELECT -1e308 AS x UNION ALL SELECT 1e308)").fetchone() == (0.0,)
    assert conn.execute("SELECT median(column1) FROM (VALUES (1), (2), (4), (7))").fetchone() == (3.0,)


# -- zlstore's Python functions under the server's limits (issue 46, items 1, 2) -------


HUGE_MEDIAN = (
    "select median(printf('%.*c', 1000000, 'a') || n) as m from "
    "(with recursive c(n) as (select 1 union all select n + 1 from c limit 100000) select n from c)"
)


def test_median_holds_no_more_than_its_bound(example_store_path):
    """100,000 values of 1 MB: the old median kept them all (2-3.6 GB); now
    the query fails once its values pass serverlimits.MEDIAN_MAX_BYTES,
    in a process that could not have held them."""
    limit = 1536 << 20
    done = subprocess.run(
        ZLSTORE
        + ["serve", "--db", str(example_store_path), "--get", "/zlstore.json?" + urlencode({"sql": HUGE_MEDIAN})],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    assert done.returncode == 2 and "answered 400" in done.stderr, done.stderr[-2000:]
    assert "median(): over 256 MB of values" in done.stderr and "MemoryError" not in done.stderr


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # datasette prints callbacks' errors
def test_median_of_the_usual_size_is_answered(ds):
    response = query(ds, "select median(column1) as m from (values (1), (2), (4), (7))")
    assert response.json() == [{"m": 3.0}]
    conn = sqlite3.connect(":memory:")
    datasette_plugin.bound(conn)
    with pytest.raises(sqlite3.OperationalError):
        conn.execute(HUGE_MEDIAN).fetchone()


def _get(port: int, path: str, timeout: float = 120):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read().decode("utf-8", "replace")


def test_kernel_diff_of_a_million_line_ir_stops_at_the_time_limit(example_store_path, tmp_path):
    """One .ttgir of 1,000,000 lines a side (28 MB): the old page kept a
    server thread busy for minutes, stalled every page and Ctrl-C. Now each
    GET answers at the time limit with a note that says so, other pages
    answer meanwhile, and Ctrl-C stops the server with diffs in flight."""
    import threading

    from . import hostile_ir
    from .test_run import interrupt, wait_until
    from .test_serve import free_port

    store = tmp_path / "huge.db"
    with sqlite3.connect(example_store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(example_store_path, store)
    root, op, dtype = hostile_ir.huge_pair(store)
    port = free_port()
    process = subprocess.Popen(
        ZLSTORE + ["serve", "--db", str(store), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    page = f"/zlstore/{datasette_plugin.KERNEL_DIFF}.json?" + urlencode(
        {"root": root, "op": op, "dtype": dtype, "rule": "", "_shape": "array"}
    )
    answers: list = []

    def ask():
        try:
            answers.append(_get(port, page))
        except OSError as error:  # the server stopped under it
            answers.append((None, str(error)))

    try:

        def up():
            try:
                return _get(port, "/-/versions.json")[0] == 200
            except OSError:
                return False

        wait_until(process, up)
        diffs = [threading.Thread(target=ask) for _ in range(2)]
        for thread in diffs:
            thread.start()
        time.sleep(1.0)
        # a third query thread is free: other pages answer while the diffs run
        assert _get(port, "/-/versions.json")[0] == 200
        status, body = _get(port, "/zlstore/roots.json?_shape=array")
        assert status == 200 and root in body
        for thread in diffs:
            thread.join(timeout=120)
        assert [status for status, _ in answers] == [200, 200], answers
        for _, body in answers:
            (row,) = json.loads(body)
            assert row["note"] == "kernel_diff not shown: over the time limit of 5 s", row
        # Ctrl-C with a diff in flight: the server stops, the diff with it
        late = threading.Thread(target=ask)
        late.start()
        time.sleep(1.0)
        _, err = interrupt(process)
        late.join(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted") and "Traceback" not in err
    assert not late.is_alive()
