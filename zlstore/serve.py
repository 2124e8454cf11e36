"""zlstore serve: the app that serves one store in datasette, and the server.

What the store looks like there (its metadata, canned queries and charts)
and which requests it answers (HostCheck) are in datasette_site.py, shared
with zlstore's plugin for plain datasette (zlstore/datasette_plugin.py).
What only zlstore serve adds is the store's name (/zlstore, whatever the
file is called), settings for long views, and the Host names it answers to.
"""

import contextlib
import sqlite3
import sys
import threading
import webbrowser
from pathlib import Path
from typing import Optional

from datasette.app import Datasette
from datasette.database import Database
from datasette.plugins import pm

from . import datasette_plugin, serverlimits
from . import db as dbmod
from .datasette_site import DB_NAME, LOCAL_NAMES, host_names, is_loopback
from .store import Store

# Settings that differ from datasette's defaults: a campaign's views join
# every measurement, so a query may take longer than one second.
SETTINGS = {
    "sql_time_limit_ms": 5000,
    "facet_time_limit_ms": 500,
    "max_returned_rows": 5000,
}

NETWORK_WARNING = (
    "warning: serving on {host}: anyone who can reach this machine on port {port} "
    "can run arbitrary read-only SQL against {db} through datasette's query page"
)


def datasette_app(
    db_path,
    settings: Optional[dict] = None,
    host: Optional[str] = None,
    allow_hosts=(),
    extra_metadata: Optional[dict] = None,
    cors: bool = False,
) -> Datasette:
    """A Datasette serving the store at db_path as /zlstore, mutable: rows
    written while it runs show on the next request. The file must be a
    zlstore store already (its schema is upgraded where it can be written):
    a missing, foreign or damaged one raises db.StoreError, untouched. A
    store in a directory this user cannot write is served immutable.
    zlstore's metadata comes from the plugin (zlstore/datasette_plugin.py),
    as in plain datasette; extra_metadata is merged over it, as datasette's
    --metadata is. Requests are answered only for the host names
    host_names(host, allow_hosts) gives (HostCheck)."""
    path = Path(db_path)
    Store(path, create=False).close()
    immutable = dbmod.check_path(path, create=False)
    if not pm.is_registered(datasette_plugin):
        # Installed, zlstore's entry point has registered it; not when run
        # from a source tree, or where datasette skips entry points (its own tests).
        pm.register(datasette_plugin, name="zlstore")
    ds = Datasette(metadata=extra_metadata, settings={**SETTINGS, **(settings or {})}, cors=cors)
    _bound_heap()
    ds.add_database(Database(ds, path=str(path.resolve()), is_mutable=not immutable), name=DB_NAME)
    ds.remove_database("_memory")
    ds._zlstore_host_names = host_names(host, allow_hosts)
    return ds


# All the memory SQLite may hold in the server's process, every query of
# every connection together (PRAGMA hard_heap_limit): past it a query fails
# with "out of memory" and the server goes on. With each value bounded
# (datasette_plugin.MAX_VALUE_BYTES) and datasette's three query threads,
# no query of the store comes near it; a sort or a window over a huge
# intermediate result may.
HEAP_LIMIT_BYTES = 1 << 30


def _bound_heap():
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}")


def get(ds: Datasette, path: str):
    """Answer one request without a server (datasette's --get): (status, text)."""
    from datasette.utils.testing import TestClient  # only for --get

    response = TestClient(ds).get(path)
    return response.status, response.text


class ServeError(Exception):
    """The server could not start (the address is taken, say)."""


def serve(
    db_path, host: str = "127.0.0.1", port: int = 8001, open_browser: bool = False, allow_hosts=(), **app_options
):
    """Serve the store until interrupted (Ctrl-C: returns; SIGTERM ends the
    process as the signal does). ServeError when it cannot listen.
    app_options: datasette_app's settings, extra_metadata and cors."""
    import uvicorn  # only where a server starts: --get and the tests do without

    ds = datasette_app(db_path, host=host, allow_hosts=allow_hosts, **app_options)
    if not is_loopback(host):
        print(NETWORK_WARNING.format(host=host, port=port, db=db_path), file=sys.stderr)
        names = ", ".join(sorted(ds._zlstore_host_names - set(LOCAL_NAMES)))
        print(
            f"answering requests for localhost, IP addresses and {names or 'no other name'} "
            f"(others get 400: add a name with --allow-host)",
            file=sys.stderr,
        )
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    url = f"http://{shown}:{port}/"
    print(f"serving {db_path} at {url}", file=sys.stderr)
    if open_browser:
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            # uvicorn waits for the requests in flight: stop their queries and
            # zlstore's Python functions in them, so Ctrl-C stops the server at once
            serverlimits.stop_all()
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(ds.app(), host=host, port=port, log_level="warning", lifespan="on", workers=1))
    try:
        server.run()
    except SystemExit as stopped:  # uvicorn's way to say it could not start, after logging why
        raise ServeError(
            f"could not serve on {host}:{port} (uvicorn's message above says why; exit status {stopped.code})"
        ) from None
    except KeyboardInterrupt:  # a second Ctrl-C: as uvicorn.run takes it
        pass
    if not server.started:
        raise ServeError(f"could not serve on {host}:{port} (uvicorn's message above says why)")
