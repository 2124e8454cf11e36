"""What every command of the command line shares: the faults that end one
with exit status 2, --db and the store it opens, and the output formats
(--json, --nl, --csv, --tsv, -t/--table)."""

import contextlib
import functools
import shlex
import sqlite3
from pathlib import Path

import click

from . import db as dbmod
from . import output
from .names import EXIT_USAGE
from .store.store import Store, default_db_path


class Fault(click.ClickException):
    """A usage or environment error the message explains: exit status 2."""

    exit_code = EXIT_USAGE
    about_database = False  # a fault of the database file itself (database_faults)

    def format_message(self) -> str:
        return output.for_terminal(self.message)  # it may name a directory or a source's table


class Refusal(Fault):
    """A request refused on principle, e.g. comparing across calibers: exit status 2."""


@contextlib.contextmanager
def database_faults(path):
    """An SQLite error that comes from the file or the machine (read-only,
    damaged, full, locked) becomes one line naming the database: exit 2."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if not dbmod.is_environment_error(error):
            raise
        fault = Fault(dbmod.fault_message(path, error))
        fault.about_database = True
        raise fault from None


def _is_default(path: Path) -> bool:
    default = Path(default_db_path())
    try:
        return path.resolve() == default.resolve()
    except OSError:
        return False


def _is_new(path: Path) -> bool:
    """Whether opening path with create=True makes a new store: nothing is
    there, or an empty file (db.open_checked takes that as new)."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _naming_the_environment(db_path):
    """An error about the database whose path came from $ZLSTORE_DB says
    so: the person who typed the command never named it."""
    ctx = click.get_current_context(silent=True)
    from_env = (
        db_path is not None
        and ctx is not None
        and ctx.get_parameter_source("db_path") == click.core.ParameterSource.ENVIRONMENT
    )
    if not from_env:
        yield
        return
    note = f" (the database is $ZLSTORE_DB={db_path})"
    try:
        yield
    except dbmod.StoreError as error:
        raise Fault(f"{error}{note}") from None
    except Fault as fault:
        if not fault.about_database:
            raise
        raise Fault(f"{fault.message}{note}") from None


def db_option(fn=None, *, create: bool = False, writes: bool = False, check=None, read_only: bool = False):
    """--db, opening the store for the command. create: a missing file becomes
    a new store (the commands that write); otherwise a missing, foreign or
    damaged file is refused (exit 2) and left as it is. writes: refuse before
    any work, in one line, a store this user cannot write. check: quick_check
    first (default: for small files; db.QUICK_CHECK_MAX_BYTES). read_only: the
    command only reads, and the store is opened so that nothing is written
    (Store's read_only)."""
    if fn is None:
        return functools.partial(db_option, create=create, writes=writes, check=check, read_only=read_only)

    @click.option(
        "--db",
        "db_path",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="ZLSTORE_DB",
        show_envvar=True,
        help="Database file (default: ./zlstore.db)"
        + ("." if create else "; it must exist: this command never creates one."),
    )
    @functools.wraps(fn)
    def wrapper(*args, db_path=None, **kwargs):
        path = Path(db_path or default_db_path())
        with _naming_the_environment(db_path):
            return _with_store(fn, path, args, kwargs)

    def _with_store(fn, path, args, kwargs):
        hint_db = None if _is_default(path) else str(path)
        new = create and _is_new(path)
        with (
            database_faults(path),
            Store(path, create=create, check=check, read_only=read_only) as store,
            output.hints_for(hint_db),
        ):
            if new:  # a mistyped --db would otherwise be a silent new store
                click.echo(f"created {path}", err=True)
            if store.views_outdated:
                click.echo(
                    f"warning: {store.path} has views from another zlstore build and cannot be "
                    f"written: answers come from the views it has",
                    err=True,
                )
            if store.read_from_copy is not None and not writes:
                click.echo(_read_through_copy(store.path), err=True)
            if read_only and store.derived_stale:
                click.echo(
                    f"note: {store.path} holds changes not derived yet (an edit by hand, or a run "
                    f"stopped midway): answers come from what was derived before; "
                    f"zlstore derive --db {shlex.quote(str(store.path))} brings it up to date",
                    err=True,
                )
            if writes:
                store.require_writable()
            return fn(*args, store=store, **kwargs)

    return wrapper


def _read_through_copy(path: Path) -> str:
    if dbmod.writable(path):
        return (
            f"note: {path} is from an older zlstore: read through an upgraded copy of it (a read "
            f"writes nothing; zlstore derive --db {shlex.quote(str(path))} upgrades it in place)"
        )
    return (
        f"note: {path} is from an older zlstore and read-only for this user: "
        f"read through an upgraded copy of it (the file is left as it is)"
    )


class _TableFormat(click.ParamType):
    """--fmt: one of tabulate's layouts, checked when given (output.table_formats:
    tabulate is not imported at start-up)."""

    name = "format"

    def convert(self, value, param, ctx):
        formats = output.table_formats()
        if value not in formats:
            self.fail(f"{value!r} is not one of tabulate's layouts: {', '.join(formats)}", param, ctx)
        return value


def output_options(fn=None, *, tsv_help="TSV: a header, then the rows, tab-separated."):
    """--json, --nl, --csv, --tsv, -t/--table and --fmt, with -c/--column,
    --no-headers and --arrays, as sqlite-utils has them, for every command
    that prints rows: the command gets `out`, an output.Format (its own
    text for people when none is given)."""
    if fn is None:
        return functools.partial(output_options, tsv_help=tsv_help)
    flags = {
        "as_json": ("--json", "JSON: rows one a line, as sqlite-utils query prints them (a summary: one object)."),
        "nl": ("--nl", "Newline-delimited JSON: one row a line."),
        "as_csv": ("--csv", "CSV: a header, then the rows."),
        "as_tsv": ("--tsv", tsv_help),
        "as_table": ("--table", "The rows as a table (tabulate; --fmt for another layout)."),
    }

    @functools.wraps(fn)
    def wrapper(*args, as_json, nl, as_csv, as_tsv, as_table, fmt, columns, no_headers, arrays, **kwargs):
        given = {"as_json": as_json, "nl": nl, "as_csv": as_csv, "as_tsv": as_tsv, "as_table": as_table or bool(fmt)}
        chosen = [name for name, on in given.items() if on]
        if len(chosen) > 1:
            raise click.UsageError(" and ".join(flags[name][0] for name in chosen) + " go one at a time")
        if arrays and chosen and chosen[0] not in ("as_json", "nl"):
            raise click.UsageError("--arrays goes with --json or --nl")
        kinds = {"as_json": "json", "nl": "nl", "as_csv": "csv", "as_tsv": "tsv", "as_table": "table"}
        if chosen:
            kind = kinds[chosen[0]]
        else:  # -c or --no-headers alone: a table of those columns; --arrays alone: JSON
            kind = "json" if arrays else "table" if (columns or no_headers) else "human"
        out = output.Format(kind, fmt or "simple", tuple(columns), not no_headers, arrays)
        return fn(*args, out=out, **kwargs)

    wrapper = click.option(
        "--arrays", is_flag=True, help="--json / --nl: each row an array of its values, not an object."
    )(wrapper)
    wrapper = click.option("--no-headers", is_flag=True, help="--csv, --tsv and tables: leave out the header line.")(
        wrapper
    )
    wrapper = click.option(
        "-c",
        "--column",
        "columns",
        multiple=True,
        metavar="NAME",
        help="Only this column of the rows (repeatable; alone: a table of them).",
    )(wrapper)
    for name, (flag, help_text) in reversed(flags.items()):
        decls = ("-t", flag, name) if name == "as_table" else (flag, name)
        if name == "as_table":
            wrapper = click.option(
                "--fmt",
                type=_TableFormat(),
                default=None,
                metavar="FORMAT",
                help="The table's layout, one of tabulate's: simple (the default), github, "
                "grid, psql, latex, html, ... (implies -t).",
            )(wrapper)
        wrapper = click.option(*decls, is_flag=True, help=help_text)(wrapper)
    return wrapper


def emit(out, rows, columns=None, human=None, document=None, shown=None, escape=True):
    """Print what a command says in the format asked for (output.render:
    text for people escaped for a terminal, unless not escape)."""
    try:
        text = output.render(out, rows, columns=columns, human=human, document=document, shown=shown, escape=escape)
    except output.UnknownColumn as error:
        raise click.UsageError(str(error)) from None
    if text:
        # color=True: click would strip what looks like a colour code from
        # text to a pipe, and a name holding one must reach a script exact
        click.echo(text, color=True if out.kind not in ("human", "table") or not escape else None)
