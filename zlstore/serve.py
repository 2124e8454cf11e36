"""zlstore in datasette: the metadata, canned queries and charts that make a
store browsable, and the app that serves them.

The curated text (descriptions, units, facets, canned queries, dashboards)
is data, in metadata.yaml beside this module. What is defined elsewhere is
filled in here, never restated there:

* ``[[caliber: ...]]``, ``[[verdict NAME]]`` and ``[[reason NAME]]`` in any SQL
  are the schema's own macros (zlstore/db.py), expanded the same way;
* a ``"@caliber"`` entry in a facet list stands for the seven caliber fields,
  and in a ``columns`` mapping for a description of each of them
  (zlstore/caliber.py);
* a column description ``"@verdict"``, ``"@reason"`` or ``"@range_label"`` is
  written from the verdicts and rejection reasons in zlstore/judge.py.
"""

import copy
import functools
import ipaddress
import sys
from importlib import resources
from pathlib import Path
from typing import Optional

import yaml
from datasette.app import Datasette
from datasette.database import Database
from datasette.plugins import pm

from . import caliber, datasette_plugin, judge
from . import db as dbmod
from .db import render_schema
from .store import Store

# The store is always served under this name, whatever its file is called, so
# that links to a view or a canned query (/zlstore/verdicts) can be shared.
DB_NAME = "zlstore"

# Settings that differ from datasette's defaults: a campaign's views join
# every measurement, so a query may take longer than one second.
SETTINGS = {
    "sql_time_limit_ms": 5000,
    "facet_time_limit_ms": 500,
    "max_returned_rows": 5000,
}

# Tables a person browsing a campaign does not need: IR texts, digests,
# ingest bookkeeping, and the pairing the views read (ab_slots, ab_ranges,
# noise_floors show it). Hidden from the index, still queryable by name.
HIDDEN_TABLES = ("blobs", "ir_digests", "ingest_runs", "walked_dirs", "settings", "ab_stale_rounds",
                 "ab_stale_floors", "ab_slot_rows", "ab_range_rows", "ab_round_ranges", "noise_floor_rows")

NETWORK_WARNING = (
    "warning: serving on {host}: anyone who can reach this machine on port {port} "
    "can run arbitrary read-only SQL against {db} through datasette's query page"
)


def caliber_description(field: caliber.CaliberField) -> str:
    return (
        f"caliber field {field.name}, from ${field.env}: one of the seven settings "
        f"that must be equal and known before two latencies are compared"
    )


def verdict_description() -> str:
    return "The screening verdict, the first that applies: " + "; ".join(
        f"{v.name} when {v.when} (licenses: {v.licenses})" for v in judge.VERDICTS
    ) + "."


def reason_description() -> str:
    return "Why the row did not pair: " + "; ".join(
        f"{r.name}: {r.meaning}" for r in judge.REASONS
    ) + "."


def range_label_description() -> str:
    labelled = [f"'{v.range_label}' for {v.name}" for v in judge.VERDICTS if v.range_label]
    unlabelled = [v.name for v in judge.VERDICTS if not v.range_label]
    return (
        "What the speedup range is: " + ", ".join(labelled)
        + "; empty (and no range) for " + ", ".join(unlabelled) + "."
    )


GENERATED_COLUMNS = {
    "@verdict": verdict_description,
    "@reason": reason_description,
    "@range_label": range_label_description,
}


def _expand_table(table: dict) -> dict:
    if "facets" in table:
        facets = []
        for facet in table["facets"]:
            facets.extend(caliber.NAMES if facet == "@caliber" else [facet])
        table["facets"] = facets
    if "columns" in table:
        columns = {}
        for name, text in table["columns"].items():
            if name == "@caliber":
                columns.update({f.name: caliber_description(f) for f in caliber.CALIBER_FIELDS})
            elif text in GENERATED_COLUMNS:
                columns[name] = GENERATED_COLUMNS[text]()
            else:
                columns[name] = text
        table["columns"] = columns
    return table


def _expand_sql(node):
    """Expand the schema's macros in every "sql" / "query" string below node."""
    if isinstance(node, dict):
        return {
            key: render_schema(value) if key in ("sql", "query") and isinstance(value, str)
            else _expand_sql(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_expand_sql(item) for item in node]
    return node


@functools.lru_cache(maxsize=None)
def _source() -> dict:
    text = resources.files("zlstore").joinpath("metadata.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def metadata(db_name: str = DB_NAME) -> dict:
    """Datasette metadata for a store served as db_name: the curated YAML with
    the caliber fields, verdicts and reasons filled in from their one definition."""
    data = _expand_sql(copy.deepcopy(_source()))
    database = data.pop("database")
    for table in database.get("tables", {}).values():
        _expand_table(table)
    for name in HIDDEN_TABLES:
        database.setdefault("tables", {}).setdefault(name, {})["hidden"] = True
    data["databases"] = {db_name: database}
    dashboards = data.get("plugins", {}).get("datasette-dashboards", {})
    for dashboard in dashboards.values():
        for flt in dashboard.get("filters", {}).values():
            if "query" in flt:
                flt["db"] = db_name
        for chart in dashboard.get("charts", {}).values():
            if "query" in chart:
                chart["db"] = db_name
    return data


def datasette_app(db_path, settings: Optional[dict] = None) -> Datasette:
    """A Datasette serving the store at db_path as /zlstore, mutable: rows
    written while it runs show on the next request. The file must be a
    zlstore store already (its schema is upgraded where it can be written):
    a missing, foreign or damaged one raises db.StoreError, untouched. A
    store in a directory this user cannot write is served immutable."""
    path = Path(db_path)
    Store(path, create=False).close()
    immutable = dbmod.check_path(path, create=False)
    if not pm.is_registered(datasette_plugin):
        pm.register(datasette_plugin, name="zlstore")
    ds = Datasette(metadata=metadata(), settings={**SETTINGS, **(settings or {})})
    ds.add_database(Database(ds, path=str(path.resolve()), is_mutable=not immutable), name=DB_NAME)
    ds.remove_database("_memory")
    ds._zlstore = True  # the plugin's hooks act on this app only
    return ds


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def get(ds: Datasette, path: str):
    """Answer one request without a server (datasette's --get): (status, text)."""
    from datasette.utils.testing import TestClient

    response = TestClient(ds).get(path)
    return response.status, response.text


class ServeError(Exception):
    """The server could not start (the address is taken, say)."""


def serve(db_path, host: str = "127.0.0.1", port: int = 8001, open_browser: bool = False):
    """Serve the store until interrupted (Ctrl-C: returns; SIGTERM ends the
    process as the signal does). ServeError when it cannot listen."""
    import uvicorn

    ds = datasette_app(db_path)
    if not is_loopback(host):
        print(NETWORK_WARNING.format(host=host, port=port, db=db_path), file=sys.stderr)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    url = f"http://{shown}:{port}/"
    print(f"serving {db_path} at {url}", file=sys.stderr)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    try:
        uvicorn.run(ds.app(), host=host, port=port, log_level="warning", lifespan="on", workers=1)
    except SystemExit as stopped:  # uvicorn's way to say it could not start, after logging why
        raise ServeError(f"could not serve on {host}:{port} (uvicorn's message above says why; "
                         f"exit status {stopped.code})") from None
