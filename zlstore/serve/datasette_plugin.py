"""zlstore's datasette plugin: a zlstore store served by any datasette gets
zlstore's SQL functions, descriptions, canned queries and charts.

Registered through the `datasette` entry point (pyproject.toml), so plain
`datasette zlstore.db` in zlstore's environment has it, under whatever name
datasette gives the file (the stem: /zlstore for zlstore.db, /examples for
examples.db). It acts only on databases that are zlstore stores (is_store):
another database served beside one gets none of it. `zlstore serve` uses the
same hooks and adds the Host check (asgi_wrapper), which plain datasette
does without: whoever runs plain datasette chose datasette's own behaviour."""

import html
import json
import sqlite3
import sys
from pathlib import Path
from urllib.parse import urlencode

from datasette import hookimpl
from markupsafe import Markup

from . import datasette_site, serverlimits
from ..show import irdiff
from .. import pagenames, stats
from ..read import parse
from ..db import STORE_TABLES

# A zlstore store: zlstore's tables (db.STORE_TABLES) and the views the
# metadata describes first.
STORE_VIEWS = ("verdicts", "ab_ranges")

# Datasette 0.65 lists every column description above a table, which pushes
# the rows and facets of a wide view (verdicts has 40 columns) off the first
# screen. Fold the list into a <details> and repeat each description as the
# hover title of its column heading.
FOLD_COLUMN_DESCRIPTIONS = """
(function () {
  var dl = document.querySelector("dl.column-descriptions");
  if (!dl) { return; }
  var notes = {};
  dl.querySelectorAll("dt").forEach(function (dt) {
    var dd = dt.nextElementSibling;
    if (dd) { notes[dt.textContent.trim()] = dd.textContent.trim(); }
  });
  document.querySelectorAll("table.rows-and-columns th[data-column]").forEach(function (th) {
    var note = notes[th.dataset.column];
    if (note) { th.title = note; }
  });
  var details = document.createElement("details");
  details.className = "zlstore-column-descriptions";
  var summary = document.createElement("summary");
  summary.textContent = "What the " + Object.keys(notes).length + " columns mean (units, sources)";
  details.appendChild(summary);
  dl.parentNode.insertBefore(details, dl);
  details.appendChild(dl);
})();
"""


def is_store(conn: sqlite3.Connection) -> bool:
    """Whether the database on conn is a zlstore store (an unreadable one is not)."""
    try:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError:
        return False
    return set(STORE_TABLES + STORE_VIEWS) <= names


def _file_is_store(database) -> bool:
    if database.is_memory or not database.path:
        return False
    mode = "mode=ro" if database.is_mutable else "immutable=1"
    try:
        conn = sqlite3.connect(f"{Path(database.path).resolve().as_uri()}?{mode}", uri=True)
    except sqlite3.Error:
        return False
    try:
        return is_store(conn)
    finally:
        conn.close()


def stores(datasette) -> tuple:
    """The names of the databases datasette serves that are zlstore stores,
    in its order; each file is looked at once."""
    seen = datasette.__dict__.setdefault("_zlstore_stores", {})
    names = []
    for name, database in list(getattr(datasette, "databases", {}).items()):
        key = (name, database.path)
        if key not in seen:
            seen[key] = _file_is_store(database)
        if seen[key]:
            names.append(name)
    return tuple(names)


@hookimpl
def get_metadata(datasette):
    """zlstore's metadata for every store served (datasette_site.metadata), nothing
    for other databases; the title and front page only where one store is
    all there is. Datasette's own --metadata is merged over it."""
    names = stores(datasette)
    if not names:
        return None
    alone = not [name for name in datasette.databases if name not in names and name != "_internal"]
    built = datasette.__dict__.setdefault("_zlstore_metadata", {})
    if (names, alone) not in built:
        built[(names, alone)] = datasette_site.metadata(*names, instance=alone and len(names) == 1)
    return built[(names, alone)]


@hookimpl
def extra_body_script(view_name, database, datasette):
    if view_name == "table" and database in stores(datasette):
        return FOLD_COLUMN_DESCRIPTIONS
    return None


@hookimpl
def asgi_wrapper(datasette):
    """Under zlstore serve, answer only requests for this machine's own names
    (datasette_site.HostCheck): a DNS-rebinding page cannot read the store; and no
    request another site's page sent (datasette_site.cross_site), unless --cors. Plain
    datasette (no host names set) passes every request through."""
    return lambda app: datasette_site.HostCheck(
        app, lambda: getattr(datasette, "_zlstore_host_names", None), lambda: bool(getattr(datasette, "cors", False))
    )


# The largest string or blob one value of a query on a store may be
# (SQLITE_LIMIT_LENGTH): randomblob(N), zeroblob(N), printf('%*d', N, 1),
# replace() and group_concat() past it fail at once with "string or blob
# too big" instead of allocating N bytes (one such GET took the server from
# 65 MB to 2.3 GB and stalled every request). zlstore's own largest values
# are IR texts: 32 MB is far above any Triton kernel's.
MAX_VALUE_BYTES = 32 << 20

# The time limit of zlstore's Python functions where datasette gives none
# (a connection bound outside datasette): datasette's default sql_time_limit_ms.
DEFAULT_TIME_LIMIT_S = 1.0

# Functions no query on a store may call: fts3_tokenizer hands out a
# pointer into the SQLite library, and its two-argument form replaces a
# tokenizer on the connection, for every later query.
DENIED_FUNCTIONS = frozenset({"fts3_tokenizer"})


def _authorize(action, arg1, arg2, database, trigger) -> int:
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def bound(conn: sqlite3.Connection, seconds: float = DEFAULT_TIME_LIMIT_S):
    """What one query on conn may take: no value over MAX_VALUE_BYTES, and
    none of DENIED_FUNCTIONS (refused when the query is prepared: "not
    authorized"). Time is datasette's sql_time_limit_ms (serve.SETTINGS),
    and `seconds` for zlstore's Python functions, which SQLite's limits do
    not see: median() and zlstore_kernel_diff are registered bounded
    (serverlimits)."""
    # Connection.setlimit came in Python 3.11: under 3.10 a value may be as
    # long as SQLite's own limit (1 GB); docs/security.md says so.
    if sys.version_info >= (3, 11):
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.set_authorizer(_authorize)
    conn.create_aggregate("median", 1, serverlimits.BoundedMedian)
    conn.create_function("zlstore_kernel_diff", 3, lambda b, a, rule: _kernel_diff(conn, seconds, b, a, rule))
    serverlimits.watch_connection(conn)


def _kernel_diff(conn: sqlite3.Connection, seconds: float, before, after, rule) -> str:
    """irdiff.kernel_diff_json, bounded: the IR it reads capped, the call
    stopped at the time limit; what stopped it is the answer, one row
    whose note says so."""

    def stopped(why: str) -> str:
        return json.dumps([{"kernel": None, "status": None, "note": f"kernel_diff not shown: {why}", "diff": ""}])

    refused = serverlimits.kernel_diff_input(conn, before, after)
    if refused:
        return stopped(refused)
    try:
        return serverlimits.timed_call(seconds, irdiff.kernel_diff_json, conn, before, after, rule, on_overtime=stopped)
    except parse.BlobError as error:  # a hostile or damaged store's blob
        return stopped(str(error))


def _time_limit(datasette) -> float:
    try:
        return float(datasette.setting("sql_time_limit_ms")) / 1000
    except (AttributeError, TypeError, ValueError):
        return DEFAULT_TIME_LIMIT_S


@hookimpl
def prepare_connection(conn, datasette):
    """median() and the t-test functions (stats.register) and
    zlstore_kernel_diff (irdiff.register) on a store's connections, for
    ad-hoc SQL too, and the bounds on what one query may take (bound);
    other databases' connections untouched."""
    if is_store(conn):
        stats.register(conn)
        irdiff.register(conn)
        bound(conn, _time_limit(datasette))


# The canned query that shows one pair's kernels, the column it puts the
# diff in, and the views whose verdict cell links to it.
KERNEL_DIFF, DIFF_COLUMN, VERDICT_TABLES = pagenames.KERNEL_DIFF, "ir_diff", ("verdicts", "verdicts_by_rule")
_DIFF_LINE_CLASS = (("+++", "head"), ("---", "head"), ("@@", "hunk"), ("+", "add"), ("-", "del"))
# A diff line longer than the column wraps inside it (a hanging indent
# shows where a line goes on): unwrapped, its column ran past the page's
# right edge, with the table's scroll bar far below, under the whole diff.
DIFF_STYLE = (
    "<style>pre.zlstore-diff{white-space:pre-wrap;overflow-wrap:anywhere;font-size:0.8em;"
    "width:min(60em,50vw);margin:0}"
    "pre.zlstore-diff>span{display:block;padding-left:2ch;text-indent:-2ch}"
    "pre.zlstore-diff .add{background:#e6ffec}pre.zlstore-diff .del{background:#ffebe9}"
    "pre.zlstore-diff .hunk{color:#0550ae}pre.zlstore-diff .head{font-weight:bold}</style>"
)


def diff_html(text: str) -> str:
    """A unified diff as a <pre> a person reads: each line escaped, in a
    block of its own (a long one wraps), added and removed lines marked
    (classes add, del, hunk, head)."""
    lines = []
    for line in text.rstrip("\n").split("\n"):
        kind = next((c for prefix, c in _DIFF_LINE_CLASS if line.startswith(prefix)), None)
        escaped = html.escape(line) or " "  # an empty line keeps its height
        lines.append(f'<span class="{kind}">{escaped}</span>' if kind else f"<span>{escaped}</span>")
    return DIFF_STYLE + '<pre class="zlstore-diff">' + "".join(lines) + "</pre>"


# A canned query's page is titled by its title, not its SQL (datasette's
# query.html titles every query page "database: SQL", kernel_diff's a
# screenful); any other query page keeps datasette's title.
QUERY_TEMPLATE = (
    '{% extends "default:query.html" %}{% block title %}'
    "{% if canned_query and metadata and metadata.title %}{{ metadata.title }}: {{ database }}"
    "{% else %}{{ super() }}{% endif %}{% endblock %}"
)


@hookimpl
def prepare_jinja2_environment(env, datasette):
    """query.html with QUERY_TEMPLATE's title, unless a --template-dir has its own query.html."""
    from jinja2 import ChoiceLoader, DictLoader  # noqa: PLC0415 (datasette's own, loaded by now)

    template_dir = getattr(datasette, "template_dir", None)
    if template_dir and (Path(template_dir) / "query.html").exists():
        return
    env.loader = ChoiceLoader([DictLoader({"query.html": QUERY_TEMPLATE}), env.loader])


@hookimpl
def render_cell(row, value, column, table, database, datasette):
    """In a store: the kernel_diff query's diff as readable text, not a
    string in a cell; and a verdict in the verdicts views with a link to
    the pair's kernels (the kernel_diff query)."""
    if database not in stores(datasette):
        return None
    if table is None and column == DIFF_COLUMN and isinstance(value, str):
        return Markup(diff_html(value)) if value else ""
    if table in VERDICT_TABLES and column == "verdict" and value is not None:
        try:
            keys = {k: row[k] for k in ("root", "op", "dtype", "rule")}
        except (KeyError, IndexError):  # columns chosen with ?_col=: no link
            return None
        if any(v is None for v in keys.values()):
            return None
        href = datasette.urls.database(database) + f"/{KERNEL_DIFF}?" + urlencode(keys)
        return Markup(
            f'{html.escape(str(value))} <a href="{html.escape(href)}" title="which kernels changed, '
            f'and how">kernels</a>'
        )
    return None
