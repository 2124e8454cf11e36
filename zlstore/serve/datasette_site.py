"""A store as datasette shows it: the metadata, canned queries and charts
that make it browsable, and the requests it answers (HostCheck).

Both zlstore serve (serve.py) and zlstore's plugin for plain datasette
(datasette_plugin.py) use these; neither imports the other's module for
them, so the two import no circle (serve registers the plugin).

The curated text (descriptions, units, facets, canned queries, dashboards)
is data, in metadata.yaml beside this module. What is defined elsewhere is
filled in here, never restated there:

* ``[[caliber: ...]]``, ``[[verdict NAME]]`` and ``[[reason NAME]]`` in any SQL
  are the schema's own macros (zlstore/store/macros.py), expanded the same way;
* a ``"@caliber"`` entry in a facet list stands for the seven caliber fields,
  and in a ``columns`` mapping for a description of each of them
  (zlstore/caliber.py); ``"@environment"`` in a ``columns`` mapping for the
  provenance fields (zlstore/provenance.py);
* a column description ``"@verdict"``, ``"@reason"``, ``"@range_label"`` or
  ``"@finding"`` is written from the verdicts, rejection reasons and findings
  in zlstore/show/judge.py.
"""

import copy
import functools
import ipaddress
import re
import socket
from importlib import resources
from typing import Any, Callable, Dict, List, Optional

import yaml
from datasette.utils import tilde_encode

from .. import caliber, pagenames, provenance
from ..show import judge
from ..store.macros import statement

# The store is always served under this name (pagenames.py), whatever its
# file is called, so that links to a view or a canned query can be shared.
DB_NAME = pagenames.DB_NAME

# Tables a person browsing a campaign does not need: IR texts, digests,
# ingest bookkeeping, and the pairing the views read (ab_slots, ab_ranges,
# noise_floors show it). Hidden from the index, still queryable by name.
HIDDEN_TABLES = (
    "blobs",
    "ir_digests",
    "ingest_runs",
    "walked_dirs",
    "settings",
    "ab_stale_rounds",
    "ab_stale_floors",
    "ab_stale_ranges",
    "ab_slot_rows",
    "ab_range_rows",
    "ab_round_ranges",
    "ab_duplicate_rounds",
    "noise_floor_rows",
    "ab_judgement_basis",
    "ab_range_json",
    "screen_pair_rows",
    "screen_stale_pairs",
    "ir_change_rows",
    "noise_floor_texts",
)


def caliber_description(field: caliber.CaliberField) -> str:
    return (
        f"caliber field {field.name}, from ${field.env}: one of the seven settings "
        f"that must be equal and known before two latencies are compared"
    )


def verdict_description() -> str:
    return (
        "The screening verdict, the first that applies: "
        + "; ".join(f"{v.name} when {v.when} (licenses: {v.licenses})" for v in judge.VERDICTS)
        + "."
    )


def reason_description() -> str:
    return "Why the row did not pair: " + "; ".join(f"{r.name}: {r.meaning}" for r in judge.REASONS) + "."


def range_label_description() -> str:
    labelled = [f"'{v.range_label}' for {v.name}" for v in judge.VERDICTS if v.range_label]
    unlabelled = [v.name for v in judge.VERDICTS if not v.range_label]
    return (
        "What the speedup range is: "
        + ", ".join(labelled)
        + "; empty (and no range) for "
        + ", ".join(unlabelled)
        + "."
    )


def finding_description() -> str:
    return (
        "What the rounds say about the switch, in the order shown: "
        + "; ".join(f"{f.name} when {f.when} (licenses: {f.licenses})" for f in judge.FINDINGS)
        + "."
    )


GENERATED_COLUMNS = {
    "@finding": finding_description,
    "@verdict": verdict_description,
    "@reason": reason_description,
    "@range_label": range_label_description,
}


def _expand_table(table: dict) -> dict:
    if "facets" in table:
        facets: List[str] = []
        for facet in table["facets"]:
            facets.extend(caliber.NAMES if facet == "@caliber" else [facet])
        table["facets"] = facets
    if "columns" in table:
        columns = {}
        for name, text in table["columns"].items():
            if name == "@caliber":
                columns.update({f.name: caliber_description(f) for f in caliber.CALIBER_FIELDS})
            elif name == "@environment":
                columns.update(
                    {
                        f.name: f"what the cells ran on: {f.label} (cell.env {f.env}; empty: unknown)"
                        for f in provenance.FIELDS
                    }
                )
            elif text in GENERATED_COLUMNS:
                columns[name] = GENERATED_COLUMNS[text]()
            else:
                columns[name] = text
        table["columns"] = columns
    return table


def _sql_texts(node, path=()):
    """(path, text) of every "sql" / "query" string below node, path its keys
    and list positions."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        if key in ("sql", "query") and isinstance(value, str):
            yield (*path, key), value
        else:
            yield from _sql_texts(value, (*path, key))


@functools.lru_cache(maxsize=None)
def _source() -> dict:
    text = resources.files("zlstore").joinpath("metadata.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


# Every SQL text of the metadata with the schema's macros expanded,
# registered as "metadata.KEY.KEY...", by where it is.
_SQL = {path: statement(".".join(map(str, ("metadata", *path))), text) for path, text in _sql_texts(_source())}


def _expand_sql(node, path=()):
    """node with each "sql" / "query" string below it expanded (_SQL)."""
    if isinstance(node, dict):
        return {
            key: _SQL.get((*path, key), value) if key in ("sql", "query") else _expand_sql(value, (*path, key))
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_expand_sql(item, (*path, n)) for n, item in enumerate(node)]
    return node


def _suffix(db_name: str, db_names) -> str:
    """What tells a store's dashboards apart where one datasette serves
    several stores: /-/dashboards/campaign for the one store, else
    /-/dashboards/campaign-NAME for each."""
    return "" if len(db_names) == 1 else f"-{db_name}"


def _fill_links(text: str, db_name: str, suffix: str) -> str:
    return text.replace("{db}", tilde_encode(db_name)).replace("{-db}", suffix)


def metadata(*db_names: str, instance: bool = True) -> dict:
    """Datasette metadata for the stores served under db_names (default: one,
    as zlstore serve names it): the curated YAML with the caliber fields,
    verdicts and reasons filled in from their one definition, each store's
    canned queries and dashboards reading that store. instance: the title and
    front-page text too (only where one store is all datasette serves)."""
    db_names = db_names or (DB_NAME,)
    source = _expand_sql(copy.deepcopy(_source()))
    data: Dict[str, Any] = {}
    if instance and len(db_names) == 1:
        for key, value in source.items():
            if key not in ("database", "plugins"):
                data[key] = _fill_links(value, db_names[0], "")
    data["databases"] = {}
    dashboards = {}
    for name in db_names:
        suffix = _suffix(name, db_names)
        data["databases"][name] = _database(copy.deepcopy(source["database"]), name, suffix)
        for slug, dashboard in source["plugins"]["datasette-dashboards"].items():
            dashboards[slug + suffix] = _dashboard(copy.deepcopy(dashboard), name)
    data["plugins"] = {"datasette-dashboards": dashboards}
    return data


def _database(database: dict, db_name: str, suffix: str) -> dict:
    if "description_html" in database:
        database["description_html"] = _fill_links(database["description_html"], db_name, suffix)
    for table in database.get("tables", {}).values():
        _expand_table(table)
    for name in HIDDEN_TABLES:
        database.setdefault("tables", {}).setdefault(name, {})["hidden"] = True
    return database


def _dashboard(dashboard: dict, db_name: str) -> dict:
    """The campaign dashboard with every query pointed at the store db_name."""
    for part in (*dashboard.get("filters", {}).values(), *dashboard.get("charts", {}).values()):
        if "query" in part:
            part["db"] = db_name
    return dashboard


# -- DNS rebinding: answer only this machine's own names ------------------------
#
# A web page on evil.example can make its own name resolve to 127.0.0.1 and
# then read http://evil.example:8001/ as same-origin: the browser sends
# "Host: evil.example:8001" to this server. Such a page always comes with a
# name, so a request is answered only for a Host that is an IP address (the
# browser was pointed at this machine's address itself, which no other
# site's origin shares), localhost, or a name this server is known by. The
# port is not compared: an ssh tunnel (ssh -L 9000:localhost:8001) brings
# the browser in on another one.

LOCAL_NAMES = ("localhost",)


def host_names(host: Optional[str] = None, allow_hosts=()) -> frozenset:
    """The host names a server bound to host answers, besides IP addresses:
    localhost, the bound name, this machine's name and fully qualified name
    when bound beyond loopback (0.0.0.0 reaches it by those), and allow_hosts."""
    names = set(LOCAL_NAMES)
    names.update(_bare_host(h) for h in allow_hosts)
    if host and not _is_ip(host):
        names.add(_bare_host(host))
    if host and not is_loopback(host):
        names.update(_bare_host(n) for n in (socket.gethostname(), socket.getfqdn()) if n)
    return frozenset(n for n in names if n)


# A Host header's value: a name or IPv4 address, or an IPv6 address in
# brackets; then an optional port.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]]*))(?::\d*)?")


def _bare_host(host: str) -> str:
    """The name or address in a Host header's value, without port, brackets,
    case or final dot; a value of any other shape as it is (it names nothing)."""
    host = host.strip().lower()
    match = _HOST.fullmatch(host)
    if match is None:
        return host
    return match.group("v6") or match.group("name").rstrip(".")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(_bare_host(host))
        return True
    except ValueError:
        return False


def host_allowed(header: Optional[str], names: frozenset) -> bool:
    """Whether a request with this Host header may be answered (none: an
    HTTP/1.0 client, not a browser, may)."""
    if header is None:
        return True
    return _is_ip(header) or _bare_host(header) in names


class HostCheck:
    """ASGI middleware: a request (or websocket) whose Host names none of
    names() is answered 400 with a body that says why, and goes no further.
    names() is asked per request (datasette builds its app before zlstore
    sets them); None: an app that is not zlstore's, passed through."""

    def __init__(self, app, names: Callable[[], Optional[frozenset]], cors: Callable[[], bool] = lambda: False):
        self.app, self.names, self.cors = app, names, cors

    async def __call__(self, scope, receive, send):
        names = self.names()
        if names is not None and scope["type"] in ("http", "websocket"):
            headers = {k: v.decode("latin-1") for k, v in scope.get("headers", [])}
            header = headers.get(b"host")
            if not host_allowed(header, names):
                await self._refuse(scope, send, header, names)
                return
            why = None if self.cors() else cross_site(headers.get(b"sec-fetch-site"), headers.get(b"origin"), header)
            if why is not None:
                await _send_refusal(
                    scope,
                    send,
                    403,
                    f"zlstore serve: refused a cross-site request ({why}): "
                    f"another site's page may not query the store. Open the store's own pages, "
                    f"or serve with --cors to let other sites read it.\n",
                )
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope, send, header, names):
        await _send_refusal(
            scope,
            send,
            400,
            (
                f"zlstore serve: refused a request for host {header!r}. This server answers "
                f"localhost, IP addresses and {', '.join(sorted(names - set(LOCAL_NAMES))) or 'no other name'}; "
                f"a page under another name may be a DNS-rebinding attack on the store. If {_bare_host(header)!r} "
                f"is this machine, serve with --allow-host {_bare_host(header)}.\n"
            ),
        )


# -- cross-site requests: another site's page may not query the store ------------
#
# A page on any site can make the browser send a GET to http://127.0.0.1:8001
# (an <img>, a fetch in no-cors mode): the Host check passes, and one such
# request can run a query as costly as the time and value bounds allow
# (datasette_plugin.bound). Browsers say where a request comes from: the
# Sec-Fetch-Site header ("same-origin", "none" for an address typed or a
# bookmark; "same-site" and "cross-site" for another page, another port of
# localhost included), and Origin on cross-origin requests. Clients that
# are not browsers (curl, scripts) send neither and are answered.


def cross_site(fetch_site: Optional[str], origin: Optional[str], host: Optional[str]) -> Optional[str]:
    """Why a request comes from another site's page, or None: Sec-Fetch-Site
    other than same-origin or none, or an Origin whose host and port are
    not the Host the request was sent to."""
    if fetch_site is not None and fetch_site.strip().lower() not in ("same-origin", "none"):
        return f"Sec-Fetch-Site: {fetch_site.strip()}"
    if origin is not None and origin.strip() != "null":
        netloc = origin.strip().lower().partition("://")[2]
        if host is None or netloc != host.strip().lower():
            return f"Origin: {origin.strip()}"
    elif origin is not None:
        return "Origin: null"
    return None


async def _send_refusal(scope, send, status: int, text: str):
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def is_loopback(host: str) -> bool:
    if _bare_host(host) == "localhost":
        return True
    try:
        return ipaddress.ip_address(_bare_host(host)).is_loopback
    except ValueError:
        return False
