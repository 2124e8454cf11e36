"""Connections, the schema and migrations.

Several processes write one database at once (a writer per card, an ingest,
datasette reading), so every connection is set up the same way here: WAL,
a long busy timeout, foreign keys on, and write transactions that take the
write lock at their start (BEGIN IMMEDIATE) with a bounded retry."""

import contextlib
import datetime
import hashlib
import json
import os
import random
import re
import shlex
import signal
import socket
import sqlite3
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional


from . import caliber, floors, names, provenance, stats, ttgir

SCHEMA_VERSION = 14
BUSY_TIMEOUT_MS = 60_000
WRITE_ATTEMPTS = 10


class StoreError(Exception):
    """A database file zlstore cannot use as asked. The message names the
    file and the fault; the file is left as it was."""


class SchemaError(StoreError):
    """The database cannot be used by this release."""


class BusyStats:
    """How often SQLite still answered busy after its own timeout (benchmarks print it)."""

    retries = 0


def now() -> str:
    """The time a store records (ingested_at, started_at, ...): ISO 8601 in
    UTC, to the microsecond: a merge keeps the newer of two contents, and
    two hosts ingest in the same second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def schema_source() -> str:
    """The text of schema.sql: shipped inside the wheel, or the checkout's top-level file."""
    packaged = resources.files("zlstore").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parent.parent / "schema.sql").read_text(encoding="utf-8")


_MACRO = re.compile(
    r"\[\[(caliber|environment|round|range|verdicts|verdict|reasons|reason|findings|finding|case|rules|timeout_rcs|strictest_rule"
    r"|min_rounds|setting|clears_floor)(?: ([^:\]]*?))?(?:: (.*?))?\]\]")


def _sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _fill(template: str, item, position: int) -> str:
    """TEMPLATE with {position} and each of item's fields as SQL literals."""
    text = template.replace("{position}", str(position))
    for name, value in item._asdict().items():
        text = text.replace("{" + name + "}", _sql_literal(value))
    return text


class RuleRow(NamedTuple):
    """A fingerprint rule as the schema's rules macro sees it."""

    name: str
    description: str
    ignores: str
    hint: Optional[str]  # what a verdict under this rule says when the strictest rule sees no change


def _rule_rows() -> List[RuleRow]:
    rows = []
    for rule in ttgir.RULES.values():
        beyond = ttgir.ignored_beyond(rule, ttgir.STRICTEST_RULE)
        words = ", ".join(beyond[:-1]) + " and " + beyond[-1] if len(beyond) > 1 else "".join(beyond)
        hint = (f"differs only in {words}: {names.BY_NAME['NO_IR_DIFF'].name} under {ttgir.STRICTEST_RULE}"
                if beyond else None)
        rows.append(RuleRow(rule.name, rule.description, ", ".join(rule.ignores) or None, hint))
    return rows


def _case(kinds, first: Optional[str], indent: str) -> str:
    """The CASE that decides one of kinds (names.VERDICTS, REASONS or
    FINDINGS): each one's condition in their order, the first that applies
    wins; the one without a condition takes the rest (ELSE). first: a
    condition under which the CASE is NULL, tried before them."""
    lines = [f"WHEN {first} THEN NULL"] if first else []
    lines += [f"WHEN {kind.condition} THEN {_sql_literal(kind.name)}" for kind in kinds if kind.condition]
    lines += [f"ELSE {_sql_literal(kind.name)}" for kind in kinds if kind.condition is None]
    return "CASE\n" + "".join(f"{indent}    {line}\n" for line in lines) + f"{indent}END"


# What each "[[kind: TEMPLATE]]" macro repeats TEMPLATE over, the names a
# "[[kind NAME]]" macro may quote, and the kinds "[[case KINDS]]" decides.
_ITEMS = {"verdicts": lambda: names.VERDICTS, "reasons": lambda: names.REASONS,
          "findings": lambda: names.FINDINGS, "rules": _rule_rows}
_NAMES = {"verdict": lambda: names.VERDICT_NAMES, "reason": lambda: names.REASON_NAMES,
          "finding": lambda: names.FINDING_NAMES, "setting": lambda: tuple(names.SETTINGS)}
_CASES = {"verdicts": (names.VERDICTS, None), "reasons": (names.REASONS, names.PAIRED),
          "findings": (names.FINDINGS, None)}
# The columns a "[[kind SEP: TEMPLATE]]" macro repeats TEMPLATE over: each as
# {placeholder: text}.
_COLUMNS = {"caliber": lambda: [{"{f}": name} for name in caliber.NAMES],
            "environment": lambda: [{"{f}": name} for name in provenance.NAMES],
            "round": lambda: [{"{k}": c.name, "{c}": c.cells, "{is}": c.same, "{type}": c.type}
                              for c in names.ROUND_KEY],
            "range": lambda: [{"{c}": name} for name in names.RANGE_COLUMNS]}


def _filled(template: str, columns: dict) -> str:
    for placeholder, text in columns.items():
        template = template.replace(placeholder, text)
    return template


def render_schema(text: str) -> str:
    """Expand the macros that keep caliber fields, the round key, verdict,
    reason and finding names and conditions, rules and thresholds defined
    once (the list is at the top of schema.sql). Every SQL text that names
    them goes through here: schema.sql, pairing.py, the canned queries."""

    def expand(match):
        kind, arg, template = match.group(1), match.group(2), match.group(3)
        if kind == "timeout_rcs":
            return ", ".join(str(rc) for rc in names.TIMEOUT_RCS)
        if kind == "strictest_rule":
            return _sql_literal(ttgir.STRICTEST_RULE)
        if kind == "min_rounds":
            return str(stats.MIN_ROUNDS)
        if kind == "clears_floor":
            return floors.CLEARS
        if kind in _COLUMNS:
            sep = " " + arg.strip() + " " if arg else ", "
            return sep.join(_filled(template, columns) for columns in _COLUMNS[kind]())
        if kind == "case":
            if arg not in _CASES:
                raise SchemaError(f"[[case {arg}]]: a case decides one of {', '.join(_CASES)}")
            line = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
            return _case(*_CASES[arg], indent=line[:len(line) - len(line.lstrip())])
        if kind in _ITEMS:
            sep = " " + arg.strip() + " " if arg else ", "
            return sep.join(_fill(template, item, n) for n, item in enumerate(_ITEMS[kind](), 1))
        known = _NAMES[kind]()
        if arg not in known:
            raise SchemaError(f"SQL names unknown {kind} {arg!r}; known: {', '.join(known)}")
        return _sql_literal(names.SETTINGS[arg]) if kind == "setting" else _sql_literal(arg)

    return _MACRO.sub(expand, text)


def split_statements(sql: str) -> List[str]:
    """Split a script into statements without executescript(), which would
    commit the surrounding BEGIN IMMEDIATE transaction."""
    statements, buffer = [], ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(
        l.strip().startswith("--") or not l.strip() for l in buffer.splitlines()
    ):
        raise SchemaError("schema.sql ends in an incomplete statement: " + buffer.strip()[:80])
    return statements


def schema_parts() -> Dict[str, str]:
    """The rendered schema split at its section markers: tables, triggers
    and views."""
    text = render_schema(schema_source())
    _, _, rest = text.partition("\n-- @tables\n")
    tables, _, rest = rest.partition("\n-- @triggers\n")
    triggers, _, views = rest.partition("\n-- @views\n")
    return {"tables": tables, "triggers": triggers, "views": views,
            "hash": hashlib.sha256(text.encode()).hexdigest()}


def connect(path, wal: bool = True, immutable: bool = False) -> sqlite3.Connection:
    """Open (or create) a store's database with the settings every writer
    relies on. wal=False leaves the journal mode as the file has it (a file
    that may not be changed); immutable: read a file in a directory this user
    cannot write, which no writer can be using (open_checked decides)."""
    target, uri = (f"file:{Path(path).resolve()}?immutable=1", True) if immutable else (str(path), False)
    conn = sqlite3.connect(
        target, uri=uri, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    let_signals_in(conn)
    scratch_in_memory(conn, False)
    stats.register(conn)
    if wal:
        retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


# -- Ctrl-C ----------------------------------------------------------------------

# Python runs a signal handler only between its own bytecodes: during one
# long SQLite statement with no Python function in it, Ctrl-C would wait for
# the statement to end. A progress handler calls into Python every this many
# of SQLite's steps (a few milliseconds of work at most), where a pending
# KeyboardInterrupt is raised and aborts the statement.
PROGRESS_STEPS = 20_000


def _let_python_run() -> int:
    return 0  # go on: the call itself is what lets a pending handler run


def let_signals_in(conn: sqlite3.Connection):
    """Ctrl-C reaches Python within milliseconds on this connection, whatever
    statement it runs."""
    conn.set_progress_handler(_let_python_run, PROGRESS_STEPS)


class _Interrupt:
    seen = False


def _on_interrupt(signum, frame):
    _Interrupt.seen = True
    raise KeyboardInterrupt


def interrupted(error: Optional[BaseException] = None) -> bool:
    """Whether Ctrl-C came (while interruptible() was on), or error is
    SQLite's report of a statement Ctrl-C stopped. A KeyboardInterrupt that
    lands inside one of zlstore's SQL functions (median) reaches Python as
    "user-defined function raised exception": the flag tells them apart."""
    return _Interrupt.seen or (error is not None and error_name(error) == "SQLITE_INTERRUPT")


def raise_if_interrupted(error: BaseException):
    """A statement Ctrl-C stopped is an interrupt, never a problem of the
    input: callers that turn SQL errors into problems call this first."""
    if interrupted(error):
        raise KeyboardInterrupt from None


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as Python's own handler does, and is
    remembered (interrupted()), so that an error it caused inside SQLite is
    known for what it was. Only in the main thread (where signals arrive)."""
    _Interrupt.seen = False
    try:
        previous = signal.signal(signal.SIGINT, _on_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# -- the run log: whose runs are unfinished ----------------------------------------


def _process_start(pid) -> Optional[str]:
    """When the process started (in clock ticks since boot: /proc), so that a
    pid used again by another process is not taken for the one recorded."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _running_owner() -> dict:
    return {"state": "running", "host": socket.gethostname(), "pid": os.getpid(), "pid_started": _process_start("self")}


def _gone(owner: dict) -> bool:
    """Whether the process an unfinished run's row names is known to have
    ended: on this host, and no process of that pid, or one started at
    another time. A run of another host is never judged from here."""
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        pass
    started = _process_start(owner["pid"])
    return started is not None and owner.get("pid_started") not in (None, started)


def close_abandoned_runs(conn: sqlite3.Connection, by: Optional[int] = None) -> int:
    """Close the unfinished rows of runs (ingest, record, merge, forget)
    whose process ended without finishing them (a kill -9, a lost node):
    finished_at is set and the summary says interrupted. Inside the
    caller's write transaction. Returns how many."""
    closed = 0
    for run_id, summary in conn.execute("SELECT id, summary FROM ingest_runs WHERE finished_at IS NULL").fetchall():
        try:
            owner = json.loads(summary) if summary else {}
        except ValueError:
            continue
        if isinstance(owner, dict) and owner.get("state") == "running" and _gone(owner):
            owner.update(state="interrupted", closed_by=by,
                         why="its process ended before the run finished (killed?); what it committed is kept")
            conn.execute("UPDATE ingest_runs SET finished_at = ?, summary = ? WHERE id = ?",
                         (now(), json.dumps(owner), run_id))
            closed += 1
    return closed


def start_run(conn: sqlite3.Connection, command: str, paths: list) -> int:
    """The run log's row for a writing run, inside the caller's write
    transaction: it names this process until the run finishes
    (finish_run), and the runs an earlier killed process left unfinished
    are closed first."""
    close_abandoned_runs(conn)
    return conn.execute("INSERT INTO ingest_runs (started_at, command, paths, summary) VALUES (?, ?, ?, ?)",
                        (now(), command, json.dumps(paths), json.dumps(_running_owner()))).lastrowid


def finish_run(conn: sqlite3.Connection, run_id: int, summary: dict, state: Optional[str] = None):
    """A run's row gets its summary (state: 'interrupted' where Ctrl-C
    stopped it; what it committed is kept), in the caller's transaction."""
    if state is not None:
        summary = {**summary, "state": state}
    conn.execute("UPDATE ingest_runs SET finished_at = ?, summary = ? WHERE id = ?",
                 (now(), json.dumps(summary), run_id))


def insert_sql(table: str, columns, verb: str = "INSERT") -> str:
    """An INSERT of these columns, a ? for each."""
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def scratch_in_memory(conn: sqlite3.Connection, memory: bool):
    """Where SQLite keeps its scratch: temporary tables, sorts and the
    journals of savepoints and statements. By default a file (FILE): a
    refresh's scratch stays in the page cache and spills beyond it, so its
    memory does not grow with the campaign (with MEMORY it grew 1.8 times at
    4 times the cells). A whole-tree ingest's batch asks for MEMORY
    (ingest._Batch): its scratch is bounded by the batch, and each cell's
    savepoint journal, written to a file, was a third of the writing
    process's system time. SQLite drops the temporary tables on a change
    (pairing.py creates its own again) and refuses one inside a transaction:
    the setting is then left as it is."""
    if not conn.in_transaction:
        conn.execute(f"PRAGMA temp_store = {'MEMORY' if memory else 'FILE'}")


# -- checking a file before it is opened or changed ----------------------------

SQLITE_MAGIC = b"SQLite format 3\x00"

# Every open of a file up to this size runs PRAGMA quick_check first, so a
# damaged store is refused before a command prints anything read from it.
# quick_check reads every page: on the benchmark corpus's 82 MB store it
# took 0.15 s with the file in the page cache and 0.6 s from disk, about 2
# and 7 ms per MB; up to 16 MB that is at most about 0.03 / 0.1 s per
# command. A larger store is checked by `zlstore check` and when `zlstore
# serve` starts (docs/stores.md: "When the database is at fault").
QUICK_CHECK_MAX_BYTES = 16 << 20

# The tables that make an SQLite file a zlstore store (every release has had them).
STORE_TABLES = ("cells", "roots")


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def write_refusal(path) -> Optional[str]:
    """Why this user cannot change the database at path, or None: the file
    is read-only, or the directory SQLite creates its -wal and -shm (or
    -journal) in is not writable and they are not both there, writable."""
    path = Path(path)
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is read-only for this user"
    directory = path.parent
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    if all(os.access(_sidecar(path, s), os.W_OK) for s in ("-wal", "-shm")):
        return None
    return (f"its directory {directory} is not writable by this user "
            f"(SQLite writes {path.name}-wal and {path.name}-shm there)")


def writable(path) -> bool:
    return write_refusal(path) is None


def _header_fault(path: Path, header: bytes, size: int) -> Optional[str]:
    """What the first 100 bytes of a file say is wrong with it as a database, or None."""
    if not header.startswith(SQLITE_MAGIC[: len(header)]):
        shown = header[:16].decode("ascii", "replace").replace("\ufffd", "?")
        return f"not an SQLite database (it starts with {shown!r})"
    if len(header) < 100:
        return f"not a whole SQLite database: {size} bytes, less than its 100-byte header"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, changes, valid_for = (int.from_bytes(header[i:i + 4], "big") for i in (28, 24, 92))
    # The size the header records is only valid where SQLite wrote it last
    # (valid_for == changes); a -wal or -journal with content may hold pages
    # a checkpoint or a rollback is still moving: SQLite's business then.
    busy = _has_content(_sidecar(path, "-wal")) or _has_content(_sidecar(path, "-journal"))
    if pages and changes == valid_for and not busy and size < pages * page_size:
        return (f"truncated: its header records {pages} pages of {page_size} bytes "
                f"({pages * page_size} bytes), the file has {size}")
    return None


def check_path(path, create: bool) -> bool:
    """Refuse (StoreError), before SQLite opens it, a path that holds no
    database zlstore may open: missing (unless create), not a regular file,
    unreadable, not SQLite, or truncated. Returns whether it must be read as
    immutable: a WAL database, without its -wal and -shm, in a directory
    this user cannot write (SQLite could not read it otherwise)."""
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise StoreError(f"{path}: a symbolic link to nothing ({os.readlink(path)})")
        if not create:
            raise StoreError(f"no such database: {path} (zlstore init --db {shlex.quote(str(path))} creates one; "
                             f"zlstore ingest RUNS --db {shlex.quote(str(path))} fills one)")
        directory = path.parent
        if not directory.is_dir():
            raise StoreError(f"cannot create {path}: no such directory {directory}")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise StoreError(f"cannot create {path}: the directory {directory} is not writable by this user")
        return False
    if not path.is_file():
        raise StoreError(f"{path} is not a database file (it is a {'directory' if path.is_dir() else 'special file'})")
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError as error:
        raise StoreError(f"cannot read {path}: {error.strerror}") from None
    if size == 0:
        if create:
            return False
        raise StoreError(f"{path} is an empty file, not a zlstore database")
    fault = _header_fault(path, header, size)
    if fault:
        raise StoreError(f"{path}: {fault}")
    in_wal_mode = header[18:20] == b"\x02\x02"
    return in_wal_mode and not writable(path) and not _sidecar(path, "-shm").exists()


def check_contents(conn: sqlite3.Connection, path, create: bool, quick: Optional[bool] = None):
    """Refuse (StoreError) a database this release must not read or change:
    damaged (SQLite cannot read its schema, or quick_check fails; by default
    checked for files up to QUICK_CHECK_MAX_BYTES), from a newer release,
    or a foreign one: an SQLite file with tables, none of them zlstore's.
    Reads only: run before anything is written."""
    path = Path(path)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
        version = _user_version(conn)
    except sqlite3.DatabaseError as error:
        raise StoreError(fault_message(path, error)) from None
    if quick is None:
        quick = path.stat().st_size <= QUICK_CHECK_MAX_BYTES
    problems = integrity_problems(conn, limit=3) if quick else []
    if problems:
        raise StoreError(f"{path} is damaged (SQLite's quick_check: {'; '.join(problems)}); "
                         f"restore it from a copy, or ingest the runs/ tree into a new database")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"{path}: database schema version {version} is newer than this zlstore "
                          f"(version {SCHEMA_VERSION}): upgrade zlstore")
    if tables and not set(STORE_TABLES) <= set(tables):
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"{path} is an SQLite database but not a zlstore store (its tables: {shown}); "
                         f"zlstore leaves it as it is: give another --db")
    if not tables and not create:
        raise StoreError(f"{path} holds no zlstore store (an SQLite database without tables)")


def open_checked(path, create: bool = True, quick: Optional[bool] = None) -> sqlite3.Connection:
    """connect(), once check_path and check_contents found the file to be a
    zlstore store this release may use (or, with create, a new one): the
    file is switched to WAL only then, and only where this user may write.
    A file refused is left byte for byte as it was."""
    path = Path(path)
    immutable = check_path(path, create)
    conn = connect(path, wal=False, immutable=immutable)
    try:
        check_contents(conn, path, create, quick)
        if not immutable and writable(path):
            retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
            conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def integrity_problems(conn: sqlite3.Connection, full: bool = False, limit: int = 20) -> List[str]:
    """SQLite's own check of every page: [] when the file is sound. quick_check
    (default) skips what integrity_check adds: that each index matches its
    table's rows and UNIQUE / NOT NULL hold."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = [r[0] for r in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
        problems = [] if rows == ["ok"] else rows
        problems += [f"foreign key: {r[0]} row {r[1]} names a missing {r[2]} row"
                     for r in conn.execute("PRAGMA foreign_key_check")] if full else []
    except sqlite3.DatabaseError as error:  # a page too damaged for the check to go on
        problems = [f"{pragma} stopped: {error}"]
    return problems


def error_name(error: BaseException) -> str:
    """SQLite's name for an error (SQLITE_READONLY_DIRECTORY), else ''."""
    return getattr(error, "sqlite_errorname", None) or ""


def is_readonly_error(error: BaseException) -> bool:
    """A write refused because the file or its directory is read-only."""
    return error_name(error).startswith("SQLITE_READONLY") or "readonly" in str(error)


def is_storage_failure(error: BaseException) -> bool:
    """Whether SQLite said the disk is full or failing: no write will do better."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)
    return "disk is full" in str(error) or "disk I/O error" in str(error)


# SQLite's primary error names that say the file or the machine is at fault
# (not zlstore's SQL): each is told in one line, with exit status 2.
ENVIRONMENT_ERRORS = ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_CORRUPT", "SQLITE_NOTADB",
                      "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_PERM", "SQLITE_BUSY", "SQLITE_LOCKED",
                      "SQLITE_AUTH", "SQLITE_NOLFS", "SQLITE_PROTOCOL")


def is_environment_error(error: BaseException) -> bool:
    """Whether a sqlite3 error comes from the file or the machine (read-only,
    damaged, full, locked) rather than from zlstore's own SQL."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    name = error_name(error)
    if name:
        return any(name == e or name.startswith(e + "_") for e in ENVIRONMENT_ERRORS)
    message = str(error).lower()  # Python before 3.11 names no error code
    return any(words in message for words in (
        "readonly", "read-only", "malformed", "not a database", "unable to open", "disk is full",
        "disk i/o", "locked", "busy"))


def cannot_write(path, why: str) -> str:
    return f"cannot write {path}: {why}; commands that only read it still work"


def fault_message(path, error: BaseException) -> str:
    """One line that says why the database at path could not be read or
    written, for an environment error (is_environment_error)."""
    path = Path(path)
    name = error_name(error)
    if is_readonly_error(error):
        return cannot_write(path, write_refusal(path) or str(error))
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(error) or "not a database" in str(error):
        return (f"{path} is damaged or not a database (SQLite: {error}); "
                f"restore it from a copy, or ingest the runs/ tree into a new database")
    if name == "SQLITE_FULL" or "disk is full" in str(error):
        return f"cannot write {path}: the disk is full (SQLite: {error})"
    return f"{path}: {error}" + (f" ({name})" if name else "")

def _is_busy(error: sqlite3.OperationalError) -> bool:
    message = str(error).lower()
    return "locked" in message or "busy" in message


def retry_busy(operation: Callable, attempts: int = WRITE_ATTEMPTS):
    """Run operation, retrying with jittered backoff where SQLite answers busy
    even after its busy timeout (a checkpoint, a schema change elsewhere)."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return operation()
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or attempt == attempts - 1:
                raise
            BusyStats.retries += 1
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)


# Bulk writes (a whole-tree ingest, a rescore) check the WAL into the
# database every BULK_CHECKPOINT_PAGES, not every 1000: a checkpoint syncs
# twice (about 50 ms on a VM's disk), and a bulk write's commits rewrite the
# same pages. Same durability; the WAL grows larger meanwhile, and a later
# commit past that size, or the last connection to close, checks it in.
BULK_CHECKPOINT_PAGES = 16384


def checkpoint_between_commits(conn: sqlite3.Connection):
    """Check the WAL into the database between two commits of a bulk write
    (an ingest's batches), as far as readers allow (PASSIVE: it waits for
    none). Paid there, while an ingest's workers go on preparing cells, the
    checkpoint is not left to the run's last commit, which would check in a
    WAL past BULK_CHECKPOINT_PAGES alone (0.3 s at the end of a 6,720-cell
    ingest). One that fails (a full disk) loses nothing: the WAL keeps what
    was committed, and the next commit or close checks it in."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.OperationalError:
        pass


# A whole-tree ingest's batches each touch about 30 MB of pages: with
# SQLite's default 2 MB of page cache, the writing process spilled and read
# back pages all along (141,000 writes and 114,000 reads for 6,720 cells;
# 108,000 and 68,000 with this). Only while the cells are written: the last
# pass over a campaign (pairing.refresh) runs with the default again, so
# that its memory does not grow with the campaign.
BULK_CACHE_KIB = 16384


@contextlib.contextmanager
def bulk_cache(conn: sqlite3.Connection, bulk: bool = True) -> Iterator[None]:
    """A larger page cache (BULK_CACHE_KIB) while a bulk write runs."""
    before = conn.execute("PRAGMA cache_size").fetchone()[0]
    if bulk:
        conn.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size = {before}")


@contextlib.contextmanager
def bulk_checkpoints(conn: sqlite3.Connection, bulk: bool = True) -> Iterator[None]:
    checkpoint = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    if bulk and 0 < checkpoint < BULK_CHECKPOINT_PAGES:
        conn.execute(f"PRAGMA wal_autocheckpoint = {BULK_CHECKPOINT_PAGES}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA wal_autocheckpoint = {checkpoint}")


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that holds the write lock from its first statement:
    a deferred one would fail with 'database is locked' when it tries to
    upgrade while another writer holds the lock. Rolls back on any exception,
    KeyboardInterrupt included; a kill -9 is SQLite's journal's business.

    Inside an open transaction (an ingest's batch of cells) it is a savepoint
    instead: its writes are kept or undone as one, and commit with the batch."""
    if conn.in_transaction:
        yield from _savepoint(conn)
        return
    retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"))
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        retry_busy(lambda: conn.execute("COMMIT"))


# One name for every savepoint: they nest strictly, and SQLite's RELEASE and
# ROLLBACK TO take the most recent of a name. A name per savepoint would be
# a new statement each time, compiled for every cell of an ingest.
SAVEPOINT = "zl_cell"


def _savepoint(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute(f"SAVEPOINT {SAVEPOINT}")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # some errors (disk full) end the whole transaction
            conn.execute(f"ROLLBACK TO {SAVEPOINT}")
            conn.execute(f"RELEASE {SAVEPOINT}")
        raise
    else:
        conn.execute(f"RELEASE {SAVEPOINT}")


# Migrations bring a database made by an older release up to SCHEMA_VERSION.
# MIGRATIONS[n] takes a database at version n - 1 to version n. A new
# database gets the current schema.sql directly and SCHEMA_VERSION. Each is a
# fixed step that calls nothing that may change since (as llm's are): it
# changes tables only. What the writers derive from the stored cells (the
# A/B pairs, ranges and noise floors: pairing.py) is not its business: a
# migration registered with rederive=True has them all computed again, by
# this release's pairing, once the schema is current (ensure_schema's
# derive); the views and triggers come from schema.sql.
MIGRATIONS: Dict[int, Callable[[sqlite3.Connection], None]] = {}
REDERIVE: set = set()


def migration(version: int, rederive: bool = False):
    """Register the function that takes a database to `version`."""

    def register(fn):
        MIGRATIONS[version] = fn
        if rederive:
            REDERIVE.add(version)
        return fn

    return register


# The tables release 2 added, as release 2 defined them: a migration is a
# fixed step, so that later ones (ALTER TABLE ... ADD COLUMN) find what
# they expect. (ensure_schema adds any table a release lacks afterwards.)
_RELEASE_2_TABLES = """
CREATE TABLE IF NOT EXISTS ab_stale_rounds (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER);
CREATE TABLE IF NOT EXISTS ab_slot_rows (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    op TEXT, dtype TEXT, shape TEXT NOT NULL, occurrence INTEGER NOT NULL,
    before_cell_id INTEGER, after_cell_id INTEGER, before_caliber_id INTEGER, after_caliber_id INTEGER,
    before_measurement_id INTEGER, after_measurement_id INTEGER, before_counted INTEGER, after_counted INTEGER,
    before_not_counted TEXT, after_not_counted TEXT, latency_before REAL, latency_after REAL,
    before_fallback INTEGER, after_fallback INTEGER, reason TEXT);
CREATE INDEX IF NOT EXISTS ab_slot_rows_round ON ab_slot_rows(root_id, cell_op, cell_dtype, round, card);
CREATE INDEX IF NOT EXISTS ab_slot_rows_key ON ab_slot_rows(root_id, op, dtype, shape);
CREATE TABLE IF NOT EXISTS ab_range_rows (
    root_id INTEGER NOT NULL, op TEXT, dtype TEXT, shape TEXT NOT NULL, caliber_id INTEGER,
    rounds INTEGER NOT NULL, min REAL, median REAL, max REAL, fallback INTEGER NOT NULL,
    fallback_rows INTEGER NOT NULL, cards INTEGER NOT NULL, rejected INTEGER NOT NULL,
    rejected_reasons TEXT, json_head TEXT, json_tail TEXT);
CREATE INDEX IF NOT EXISTS ab_range_rows_key ON ab_range_rows(root_id, op, dtype, shape, caliber_id);
CREATE TABLE IF NOT EXISTS ab_round_ranges (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    before_cell_id INTEGER NOT NULL, after_cell_id INTEGER NOT NULL, n_rows INTEGER NOT NULL,
    min REAL, median REAL, max REAL, fallback INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS ab_round_ranges_cells ON ab_round_ranges(before_cell_id, after_cell_id);
CREATE INDEX IF NOT EXISTS ab_round_ranges_round ON ab_round_ranges(root_id, cell_op, cell_dtype, round, card);
CREATE TABLE IF NOT EXISTS noise_floor_rows (
    rule TEXT NOT NULL, op TEXT, dtype TEXT, caliber_id INTEGER NOT NULL, n INTEGER NOT NULL,
    floor REAL, roots TEXT, fallback_rows INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS noise_floor_rows_key ON noise_floor_rows(rule, op, dtype, caliber_id);
CREATE TABLE IF NOT EXISTS ab_stale_floors (rule TEXT PRIMARY KEY);
"""


@migration(2, rederive=True)
def _pairs_kept_in_tables(conn):
    """Release 2 keeps the A/B pairs and ranges in tables (pairing.py):
    create them (ensure_schema's derive fills them). Rows pair by their
    occurrence in the cell, now a column."""
    conn.execute("ALTER TABLE measurements ADD COLUMN occurrence INTEGER")
    conn.execute(
        """UPDATE measurements SET occurrence = o.n FROM (
               SELECT id, row_number() OVER (PARTITION BY cell_id, op_name, dtype, shape ORDER BY id) AS n
               FROM measurements) o
           WHERE o.id = measurements.id""")
    for statement in split_statements(_RELEASE_2_TABLES):
        conn.execute(statement)


@migration(3)
def _blob_markers(conn):
    """Release 3 records which fingerprint rule triggers each stored text
    holds (blobs.markers), so that a rescore digests a text its rule leaves
    alone without reading it. Texts stored before are read, as before."""
    conn.execute("ALTER TABLE blobs ADD COLUMN markers TEXT")


@migration(4, rederive=True)
def _findings(conn):
    """Release 4 tests each range over its rounds (zlstore/stats.py): the
    statistics are new columns of ab_range_rows, filled by re-pairing every
    round (ensure_schema's derive). Screening cells get a fingerprint under every rule (the verdicts'
    hint and screen_roots read the strictest): Store computes those the
    store lacks when it next opens it for writing (BACKFILL_SETTING)."""
    for column in ("log_mean REAL", "log_sd REAL", "effect REAL", "ci_low REAL", "ci_high REAL",
                   "p_value REAL", "q_value REAL"):
        conn.execute(f"ALTER TABLE ab_range_rows ADD COLUMN {column}")
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, '1')", (BACKFILL_SETTING,))


# Set by a migration: screening cells may lack fingerprints under some rule.
BACKFILL_SETTING = "backfill_screen_fingerprints"


@migration(5)
def _superseded_cells(conn):
    """Release 5 keeps the cells of an interrupted campaign op that a
    resumed campaign ran again from the start (cells.superseded_at): kept
    and shown, never paired. Marking one re-pairs its round: schema.sql's
    trigger cells_update_marks_rounds watches the new column."""
    conn.execute("ALTER TABLE cells ADD COLUMN superseded_at TEXT")


def _release_6_identity(name: str, env_file: Optional[str], env: Optional[dict]) -> str:
    """A root's identity as release 6 defined it (layout.root_identity then):
    its directory name and its env file's settings, hashed."""
    text = json.dumps([name, env_file, dict(env) if env_file and env is not None else None], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@migration(6)
def _roots_by_identity(conn):
    """Release 6 knows a root by what it is, its name and env file
    (layout.root_identity), not by where it was: a tree moved, copied or seen from
    another host is the same root, and a cell is its path inside its root.
    Each stored root's identity comes from what its row holds."""
    conn.execute("ALTER TABLE roots ADD COLUMN identity TEXT")
    conn.executemany("UPDATE roots SET identity = ? WHERE id = ?", [
        (_release_6_identity(name, env_file, _json_object(env)), root_id)
        for root_id, name, env_file, env in conn.execute("SELECT id, name, env_file, env FROM roots").fetchall()])
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS cells_relpath ON cells(root_id, relpath)")


@migration(8, rederive=True)
def _spaced_range_json(conn):
    """Release 8 writes each range's kept JSON as every --json writes its
    rows ('"key": value, ...', json.dumps' layout), and counts a shape
    recorded twice in one round as one round: every round is paired again
    (rederive), which rewrites ab_range_rows."""


@migration(9)
def _judgements_stored(conn):
    """Release 9 keeps each range's judgement with it (ab_range_rows,
    made under ab_judgement_basis): reading a campaign's findings no longer
    judges thousands of ranges. The new columns start empty; the ranges are
    judged once the schema is current (ensure_schema's derive)."""
    for column in ("finding TEXT", "finding_position INTEGER", "to_settle TEXT", "noise_floor REAL",
                   "clears_floor INTEGER", "floor_note TEXT", "judged INTEGER"):
        conn.execute(f"ALTER TABLE ab_range_rows ADD COLUMN {column}")


def _json_object(text):
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@migration(7)
def _problems_stay_open(conn):
    """Release 7 keeps a problem open while what it names is stored as it
    was read (ingest_problems.cell_id, root_id, closed_by: the view
    open_problems), and marks a cell whose IR could not be read in full
    (cells.ir_incomplete). A problem stored before is tied to the cell or
    root that the same run stored, where one did; the others are closed by
    the next run that covers their file."""
    conn.execute("ALTER TABLE cells ADD COLUMN ir_incomplete INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE ingest_problems ADD COLUMN cell_id INTEGER REFERENCES cells(id) ON DELETE SET NULL")
    conn.execute("ALTER TABLE ingest_problems ADD COLUMN root_id INTEGER REFERENCES roots(id) ON DELETE SET NULL")
    conn.execute("ALTER TABLE ingest_problems ADD COLUMN closed_by INTEGER")
    # The cell or root holding a file is the one with the greatest path not
    # after it, if that path is a prefix of it (an index lookup per problem).
    for table, column, where in (("cells", "cell_id", ""),
                                 ("roots", "root_id", "AND instr(substr(p.file, length(o.path) + 2), '/') = 0")):
        conn.execute(f"""
            UPDATE ingest_problems SET {column} = (
                SELECT o.id FROM (SELECT id, path, ingested_at FROM {table} WHERE path <= ingest_problems.file
                                  ORDER BY path DESC LIMIT 1) o
                JOIN ingest_problems p ON p.id = ingest_problems.id
                JOIN ingest_runs r ON r.id = p.run_id
                WHERE substr(p.file, 1, length(o.path) + 1) = o.path || '/' {where}
                  AND o.ingested_at BETWEEN r.started_at AND coalesce(r.finished_at, o.ingested_at))
            WHERE cell_id IS NULL""")


@migration(10, rederive=True)
def _duplicate_cells(conn):
    """Release 10 pairs no row of a round side that more than one cell
    claims, or whose cell another one's copies (names.DUPLICATE), and keeps
    such rounds in ab_duplicate_rounds: every round is paired again
    (ensure_schema's derive), which fills it. Cells are found by content."""
    conn.execute("""CREATE TABLE IF NOT EXISTS ab_duplicate_rounds (
        root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
        before_claims INTEGER NOT NULL, after_claims INTEGER NOT NULL,
        before_copies INTEGER NOT NULL, after_copies INTEGER NOT NULL)""")
    conn.execute("CREATE INDEX IF NOT EXISTS ab_duplicate_rounds_root ON ab_duplicate_rounds(root_id)")
    conn.execute("CREATE INDEX IF NOT EXISTS cells_content ON cells(root_id, content_sig)")


@migration(11)
def _environments(conn):
    """Release 11 records what each cell ran on: cells point at a row of
    environments (created from schema.sql's tables); older cells at none."""
    if "environment_id" not in {row[1] for row in conn.execute("PRAGMA table_info(cells)")}:  # rebuilt since
        conn.execute("ALTER TABLE cells ADD COLUMN environment_id INTEGER REFERENCES environments(id)")


@migration(12)
def _kernel_shared_memory(conn):
    """Release 12 keeps each kernel's shared memory (kernels.shared, from
    the "shared" of its .json), shown by zlstore diff. Kernels stored
    before have none (NULL: not known); a cell's files are not read again
    while they are unchanged, so forget a root and ingest it to fill them.
    A store whose version was set back over a table that has it (a test
    replaying an older release's migrations) keeps the column it has."""
    if "shared" not in {row[1] for row in conn.execute("PRAGMA table_info(kernels)")}:
        conn.execute("ALTER TABLE kernels ADD COLUMN shared INTEGER")


@migration(13, rederive=True)
def _screening_pairs_on_any_card(conn):
    """Release 13 pairs a screening pair's cells whatever card each ran on
    (a side without cell.env has no card): the round key takes the card
    from cells.pair_card, NULL in round 0. Every round is paired again."""
    if "pair_card" not in {row[1] for row in conn.execute("PRAGMA table_xinfo(cells)")}:
        conn.execute("ALTER TABLE cells ADD COLUMN pair_card INTEGER "
                     "GENERATED ALWAYS AS (CASE WHEN round = 0 THEN NULL ELSE card END) VIRTUAL")
    # what was derived under the old key: the rederive keeps it under the new one
    for table in ("ab_slot_rows", "ab_round_ranges", "ab_duplicate_rounds", "ab_stale_rounds"):
        conn.execute(f"DELETE FROM {table} WHERE round = 0")


@migration(14)
def _test_outcomes(conn):
    """Release 14 keeps what pytest did with each cell's tests (zlstore
    flaggems' plugin; zlstore/outcomes.py): cells.test_outcome (passed,
    skipped, deselected, failed, error) and cells.test_reason, which
    NO_ROWS and MISSING_SIDE show. Cells stored before have neither (NULL)."""
    present = {row[1] for row in conn.execute("PRAGMA table_xinfo(cells)")}
    for column in ("test_outcome", "test_reason"):
        if column not in present:  # a store relabelled by hand, as tests make older releases, may have them
            conn.execute(f"ALTER TABLE cells ADD COLUMN {column} TEXT")


def _user_version(conn) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _stored_schema_hash(conn):
    try:
        row = conn.execute("SELECT value FROM settings WHERE key = 'schema_hash'").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def ensure_schema(conn: sqlite3.Connection, defaults: Dict[str, str] = None,
                  derive: Optional[Callable[[sqlite3.Connection, bool], object]] = None) -> int:
    """Create or upgrade the schema; recreate the views and triggers when
    schema.sql changed. derive(conn, every) then brings what the writers
    derive up to date in the same transaction (Store passes pairing.derive);
    every: a migration asked for all of it to be computed again. Returns the
    schema version. Safe when several processes open a new database at
    once: all of it happens inside one BEGIN IMMEDIATE."""
    parts = schema_parts()
    if _user_version(conn) == SCHEMA_VERSION and _stored_schema_hash(conn) == parts["hash"]:
        return SCHEMA_VERSION
    with write_transaction(conn):
        version = _user_version(conn)
        if version > SCHEMA_VERSION:  # check_contents says so first, naming the file
            raise SchemaError(
                f"database schema version {version} is newer than this zlstore "
                f"(version {SCHEMA_VERSION}): upgrade zlstore"
            )
        existing = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        migrated = range(max(version, 1) + 1, SCHEMA_VERSION + 1) if version > 0 or "cells" in existing else ()
        for target in migrated:
            MIGRATIONS[target](conn)
        for statement in split_statements(parts["tables"]):
            conn.execute(statement)
        if migrated or _stored_schema_hash(conn) != parts["hash"]:
            for kind in ("view", "trigger"):
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,)).fetchall():
                    conn.execute(f"DROP {kind.upper()} IF EXISTS [{name}]")
            for statement in split_statements(parts["triggers"]) + split_statements(parts["views"]):
                conn.execute(statement)
        conn.execute(
            "INSERT INTO settings (key, value) VALUES ('schema_hash', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (parts["hash"],),
        )
        for key, value in (defaults or {}).items():
            conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)", (key, value))
        if derive is not None:
            derive(conn, any(target in REDERIVE for target in migrated))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return SCHEMA_VERSION
