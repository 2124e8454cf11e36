"""zlstore's datasette plugin: small touches on datasette's own pages.

Registered by zlstore.serve.datasette_app for the app it builds (not through
an entry point, so a plain `datasette` in the same environment is untouched)."""

from datasette import hookimpl

from . import stats

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


@hookimpl
def extra_body_script(view_name, datasette):
    if view_name == "table" and getattr(datasette, "_zlstore", False):
        return FOLD_COLUMN_DESCRIPTIONS
    return None


@hookimpl
def asgi_wrapper(datasette):
    """Answer only requests for this machine's own names (serve.HostCheck):
    a DNS-rebinding page cannot read the store."""
    from .serve import HostCheck

    return lambda app: HostCheck(app, lambda: getattr(datasette, "_zlstore_host_names", None))


@hookimpl
def prepare_connection(conn):
    """median(), the aggregate every zlstore range uses, for ad-hoc SQL too."""
    stats.register(conn)
