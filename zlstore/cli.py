"""The zlstore command line: click wiring over the library, nothing more."""

import functools
import json
import sys

import click

from . import output
from .db import SchemaError
from .store import Store, default_db_path

# Exit statuses, documented in --help where they apply.
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def db_option(fn):
    @click.option(
        "--db", "db_path", type=click.Path(dir_okay=False), default=None,
        help="Database file (default: $ZLSTORE_DB, else ./zlstore.db).",
    )
    @functools.wraps(fn)
    def wrapper(*args, db_path=None, **kwargs):
        try:
            store = Store(db_path or default_db_path())
        except SchemaError as error:
            raise click.ClickException(str(error))
        with store:
            return fn(*args, store=store, **kwargs)

    return wrapper


def json_option(fn):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def echo_rows(rows, as_json, columns=None, empty="(nothing)"):
    """Rows as a table for people, a JSON list of objects for scripts."""
    if as_json:
        click.echo(output.to_json(rows))
    elif rows:
        click.echo(output.table(rows, columns))
    else:
        click.echo(empty, err=True)


def progress_reporter(label):
    """A progress bar on a terminal, silence otherwise; returns (callback, finish)."""
    if not sys.stderr.isatty():
        return None, lambda: None
    state = {}

    def update(done, total):
        if "bar" not in state:
            state["bar"] = click.progressbar(length=total, label=label, file=sys.stderr)
            state["bar"].__enter__()
        state["bar"].update(done - state.get("done", 0))
        state["done"] = done

    def finish():
        if "bar" in state:
            state["bar"].__exit__(None, None, None)

    return update, finish


@click.group()
@click.version_option(package_name="zlstore")
def cli():
    """zlstore: an embedded SQLite results store for A/B compiler-switch
    benchmarks (FlagGems operators, Triton IR fingerprints, calibers).

    Example:

        zlstore ingest runs/ && zlstore screen
    """


@cli.command()
@db_option
def init(store):
    """Create or upgrade a database; print its path and schema version.

    Example:

        zlstore init --db campaign.db
    """
    click.echo(f"{store.path}\tschema version {store.schema_version}")


def report_summary(summary, as_json):
    for problem in summary.problems:
        click.echo(f"problem: {problem}", err=True)
    if as_json:
        click.echo(output.to_json(summary.as_dict()))
    else:
        click.echo(summary.line())


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@json_option
def ingest(store, paths, as_json):
    """Store every root and cell under PATHS (runs/ trees, roots or cells).

    One transaction per cell: a cell is stored whole or not at all. Ingesting
    the same tree again adds nothing; a cell whose files changed is replaced.
    Each problem with the input is printed to stderr with its file and line,
    stored in the ingest_problems table, and the rest goes on.

    Exit status: 0 everything was read cleanly; 1 some input had problems
    (everything readable was stored); 2 usage error.

    Example:

        zlstore ingest runs/ --db zlstore.db
    """
    update, finish = progress_reporter("ingesting")
    try:
        summary = store.ingest_summary(paths, progress=update)
    finally:
        finish()
    report_summary(summary, as_json)
    sys.exit(EXIT_PROBLEMS if summary.problems else EXIT_OK)
