"""A store a team shares: `zlstore roots` (what it holds) and its datasette
twin, and `zlstore serve` beyond this machine only with accounts."""

import csv
import io
import json

import pytest
from click.testing import CliRunner

from zlstore import Store
from zlstore.serve import serve
from zlstore.cli import cli

SCREEN_ROOT = "ab_rlc_20261012_101500"
CAMPAIGN = "campaign_20261013_090000"


def invoke(*argv):
    return CliRunner().invoke(cli, [str(a) for a in argv])


def test_roots_lists_every_root_with_its_cells_and_open_problems(example_store_path, example_source):
    _, manifest = example_source
    result = invoke("roots", "--json", "--db", example_store_path)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {row["root"] for row in rows} == set(manifest["roots"])
    with Store(example_store_path, read_only=True) as store:
        cells = dict(
            store.conn.execute(
                "SELECT roots.name, count(*) FROM cells JOIN roots ON roots.id = cells.root_id "
                "WHERE superseded_at IS NULL GROUP BY roots.name"
            ).fetchall()
        )
        problems = [p["root"] for p in store.problems() if p["line"] is not None or p["cell"] is not None]
    assert {row["root"]: row["cells"] for row in rows} == cells
    assert {row["root"]: row["open_problems"] for row in rows} == {
        root: problems.count(root) for root in manifest["roots"]
    }
    assert [row["started_at"] for row in rows] == sorted((row["started_at"] for row in rows), reverse=True)
    kinds = {row["root"]: row["kind"] for row in rows}
    assert kinds[CAMPAIGN] == "campaign" and kinds[SCREEN_ROOT] == "screen"
    assert all(row["switch_before"] == "0" and row["switch_after"] == "1" for row in rows if row["kind"] == "screen")


def test_roots_prints_a_table_and_the_other_formats(example_store_path):
    table = invoke("roots", "--db", example_store_path)
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0].split()[:4] == ["root", "kind", "switch", "values"]
    assert "0 -> 1" in table.stdout and "open problem" in table.stdout.splitlines()[-1]
    rows = list(csv.DictReader(io.StringIO(invoke("roots", "--csv", "--db", example_store_path).stdout)))
    assert CAMPAIGN in {row["root"] for row in rows}
    tsv = invoke("roots", "--tsv", "-c", "root", "-c", "cells", "--db", example_store_path).stdout
    assert tsv.splitlines()[0] == "root\tcells"


def test_roots_of_an_empty_store_says_how_to_fill_it(tmp_path):
    Store(tmp_path / "empty.db").close()
    result = invoke("roots", "--db", tmp_path / "empty.db")
    assert result.exit_code == 0 and "zlstore ingest" in result.stdout


def test_the_front_page_shows_what_the_store_holds_first(example_store_path):
    status, text = serve.get(serve.datasette_app(example_store_path), "/")
    assert status == 200
    first = text.index('href="/zlstore/')
    assert text[first:].startswith('href="/zlstore/store_roots"')
    status, body = serve.get(serve.datasette_app(example_store_path), "/zlstore/store_roots.json?_shape=array")
    assert status == 200 and {row["root"] for row in json.loads(body)} >= {CAMPAIGN, SCREEN_ROOT}


def test_serve_beyond_localhost_refuses_to_start_without_accounts(example_store_path):
    for host in ("0.0.0.0", "::", "192.0.2.7"):
        result = invoke("serve", "--db", example_store_path, "--host", host)
        assert result.exit_code == 2
        assert "--users FILE" in result.stderr and host in result.stderr


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "names nobody"),
        ("# only a comment\n", "names nobody"),
        ("alice\n", ":1: not NAME:HASH"),
        ("alice:secret\n", ":1: not NAME:HASH"),
        ("ok:pbkdf2_sha256$1$a$b\nbad_name:pbkdf2_sha256$1$a$b\n", ":2: not NAME:HASH"),
    ],
)
def test_a_bad_users_file_is_refused_naming_its_line(example_store_path, tmp_path, text, why):
    users = tmp_path / "users.txt"
    users.write_text(text)
    result = invoke("serve", "--db", example_store_path, "--host", "0.0.0.0", "--users", users)
    assert result.exit_code == 2
    assert str(users) in result.stderr and why in result.stderr


def _client(example_store_path, tmp_path):
    from datasette.utils.testing import TestClient
    from datasette_auth_passwords.utils import hash_password

    users = tmp_path / "users.txt"
    users.write_text(f"alice:{hash_password('pw one')}\nbob:{hash_password('pw two')}\n")
    ds = serve.datasette_app(example_store_path, host="0.0.0.0", users=serve.read_users(users))
    return ds, TestClient(ds)


def test_with_accounts_only_a_logged_in_user_reads_anything(example_store_path, tmp_path):
    ds, client = _client(example_store_path, tmp_path)
    pages = ("/", "/zlstore", "/zlstore/store_roots", "/zlstore/campaign_findings", "/zlstore.json?sql=select+1")
    for path in pages:
        assert client.get(path).status == 403, path
    assert client.get("/-/login").status == 200
    stranger = {"ds_actor": ds.sign({"a": {"id": "mallory"}}, "actor")}
    assert client.get("/zlstore/store_roots", cookies=stranger).status == 403
    alice = {"ds_actor": ds.sign({"a": {"id": "alice"}}, "actor")}
    for path in pages:
        assert client.get(path, cookies=alice).status == 200, path


def test_logging_in_takes_the_right_password(example_store_path, tmp_path):
    ds, client = _client(example_store_path, tmp_path)
    form = client.get("/-/login")
    token = form.text.split('name="csrftoken" value="')[1].split('"')[0]
    cookies = {"ds_csrftoken": form.cookies["ds_csrftoken"]}
    wrong = client.post(
        "/-/login", {"username": "bob", "password": "pw one", "csrftoken": token}, cookies=cookies, csrftoken_from=None
    )
    assert "Invalid username or password" in wrong.text
    right = client.post(
        "/-/login", {"username": "bob", "password": "pw two", "csrftoken": token}, cookies=cookies, csrftoken_from=None
    )
    assert right.status == 302
    assert ds.unsign(right.cookies["ds_actor"], "actor") == {"a": {"id": "bob"}}
