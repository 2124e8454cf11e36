"""zlstore serve: the app that serves one store in datasette, and the server.

What the store looks like there (its metadata, canned queries and charts)
and which requests it answers (HostCheck) are in datasette_site.py, shared
with zlstore's plugin for plain datasette (zlstore/serve/datasette_plugin.py).
What only zlstore serve adds is the store's name (/zlstore, whatever the
file is called), settings for long views, the Host names it answers to,
and who may read it: served beyond this machine, only the accounts of
--users (read_users, auth_metadata: datasette-auth-passwords' login and
datasette's own allow block).
"""

import contextlib
import re
import sqlite3
import sys
import threading
import webbrowser
from pathlib import Path
from typing import Dict, Optional

from datasette.app import Datasette
from datasette.database import Database
from datasette.plugins import pm

from . import datasette_plugin, serverlimits
from .. import db as dbmod
from .datasette_site import DB_NAME, LOCAL_NAMES, host_names, is_loopback
from ..store.store import Store

# Settings that differ from datasette's defaults: a campaign's views join
# every measurement, so a query may take longer than one second.
SETTINGS = {
    "sql_time_limit_ms": 5000,
    "facet_time_limit_ms": 500,
    "max_returned_rows": 5000,
    # A suggested facet is a query per column on every page of a table or
    # view (two dozen on a wide view): in a team's store, most of a page's
    # time. The facets the metadata names are still computed.
    "suggest_facets": False,
}

NETWORK_WARNING = (
    "note: serving on {host}, port {port}: whoever logs in (/-/login) with an account of --users "
    "can run arbitrary read-only SQL against {db} through datasette's query page"
)


# -- who may read it: datasette-auth-passwords' accounts --------------------------

AUTH_PLUGIN = "datasette-auth-passwords"
_USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.@-]*")  # no "_": the plugin's config key is NAME_password_hash
_HASH = re.compile(r"pbkdf2_sha256\$\d+\$[^$\s]+\$[^$\s]+")

NEEDS_USERS = (
    "serving on {host} reaches beyond this machine, and anyone who reaches it could read the whole "
    "store: give --users FILE (one NAME:HASH line per person who may read it; "
    "`datasette hash-password` makes a HASH), or serve on 127.0.0.1"
)


class UsersError(ValueError):
    """A --users file that cannot be used (its path and line in the message)."""


def read_users(path) -> Dict[str, str]:
    """A --users file: NAME:HASH lines (the hash as `datasette hash-password`
    prints it), blank lines and # comments skipped. UsersError names the
    file and line of the first bad one, or says the file names nobody."""
    users: Dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsersError(f"{path}: cannot read it ({error})") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, hashed = line.partition(":")
        if not _USER_NAME.fullmatch(name) or not _HASH.fullmatch(hashed):
            raise UsersError(
                f"{path}:{number}: not NAME:HASH (a name of letters, digits, '.', '@', '-'; "
                f"a hash as `datasette hash-password` prints it, pbkdf2_sha256$...)"
            )
        users[name] = hashed
    if not users:
        raise UsersError(f"{path}: names nobody (one NAME:HASH line per person)")
    return users


def auth_metadata(users: Dict[str, str]) -> dict:
    """Datasette metadata under which only these users read anything: their
    accounts (datasette-auth-passwords, which logs them in at /-/login) and
    an instance-wide allow block naming them (a request without their
    signed cookie gets 403)."""
    return {
        "allow": {"id": sorted(users)},
        "plugins": {AUTH_PLUGIN: {f"{name}_password_hash": hashed for name, hashed in users.items()}},
    }


def _with_auth(extra_metadata: Optional[dict], users: Dict[str, str]) -> dict:
    merged = dict(extra_metadata or {})
    auth = auth_metadata(users)
    merged["allow"] = auth["allow"]
    merged["plugins"] = {**(merged.get("plugins") or {}), **auth["plugins"]}
    import datasette_auth_passwords  # noqa: PLC0415 (only a server with accounts needs it)

    if not pm.is_registered(datasette_auth_passwords):
        pm.register(datasette_auth_passwords, name=AUTH_PLUGIN)
    return merged


def datasette_app(
    db_path,
    settings: Optional[dict] = None,
    host: Optional[str] = None,
    allow_hosts=(),
    extra_metadata: Optional[dict] = None,
    cors: bool = False,
    users: Optional[Dict[str, str]] = None,
) -> Datasette:
    """A Datasette serving the store at db_path as /zlstore, mutable: rows
    written while it runs show on the next request. The file must be a
    zlstore store already (its schema is upgraded where it can be written):
    a missing, foreign or damaged one raises db.StoreError, untouched. A
    store in a directory this user cannot write is served immutable.
    zlstore's metadata comes from the plugin (zlstore/serve/datasette_plugin.py),
    as in plain datasette; extra_metadata is merged over it, as datasette's
    --metadata is. Requests are answered only for the host names
    host_names(host, allow_hosts) gives (HostCheck). users (read_users): only
    they read anything, once logged in at /-/login (auth_metadata)."""
    path = Path(db_path)
    if users:
        extra_metadata = _with_auth(extra_metadata, users)
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

    if not is_loopback(host) and not app_options.get("users"):
        raise ServeError(NEEDS_USERS.format(host=host))
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
