"""The zlstore command line: click wiring over the library, nothing more."""

import contextlib
import errno
import math
import os
import sqlite3
import sys
import time
import traceback
from pathlib import Path

import click

from . import db as dbmod
from .read import files, layout, ttgir
from . import interrupts, output
from .show import irchanges, irdiff, judge, report
from .show import history as historymod
from .store import roots as rootsmod
from .run.commands import flaggems, plan, run
from .clicommon import Fault, Refusal, database_faults, db_option, emit, output_options

# Commands that need datasette, merge, the runners, Slurm, FlagGems or a
# report's document import them in their own body, each marked "lazy":
# `zlstore --help` and every other command start without them (an ingest
# among them; tests/test_cli_help.py runs --help of each).

# Exit statuses: one meaning each, in every command (docs/cli.md: "Exit statuses").
from .names import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNFINISHED,
    EXIT_USAGE,
    SETTINGS,
)
from .stats import MIN_ROUNDS

# What judging uses unless told otherwise, as a command's help names it:
# from the one definition of each (names.SETTINGS, stats.MIN_ROUNDS,
# ttgir.STRICTEST_RULE), never typed into the help.
JUDGING_DEFAULTS = {
    "q_max": SETTINGS["q_max"],
    "min_effect": SETTINGS["min_effect"],
    "min_rounds": str(MIN_ROUNDS),
    "strictest_rule": ttgir.STRICTEST_RULE,
}


def judging_defaults(fn):
    """Fill a command's docstring, its --help, with JUDGING_DEFAULTS where it
    says {q_max}, {min_effect}, {min_rounds} or {strictest_rule}; once, at
    import (below @cli.command, which reads the docstring). Only those
    names: a docstring's other braces ({"summary": ...}) stay as written."""
    for name, value in JUDGING_DEFAULTS.items():
        fn.__doc__ = fn.__doc__.replace("{" + name + "}", value)
    return fn


class ZlstoreGroup(click.Group):
    """The top-level handler: whatever a command raises ends in one line on
    stderr and an exit status of its own (EXIT_*), never a bare traceback
    with Python's status 1."""

    def invoke(self, ctx):
        # the command line, for what Ctrl-C says to run again (click 8.2 renamed protected_args)
        protected = getattr(ctx, "_protected_args", None)
        words = [*(ctx.protected_args if protected is None else protected), *ctx.args]
        with dbmod.interruptible():
            try:
                try:
                    return super().invoke(ctx)
                finally:
                    sys.stdout.flush()  # a write error on stdout (a full disk) shows here, not at exit
            except KeyboardInterrupt:
                _interrupted(words)
            except BrokenPipeError:
                _quiet_stdout()
                sys.exit(EXIT_BROKEN_PIPE)
            except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
                raise
            except (dbmod.StoreError, files.CannotWrite) as error:
                raise Fault(str(error)) from None
            except OSError as error:
                if not _stdout_broken(error):
                    _internal(error)
                _quiet_stdout()
                click.echo(f"zlstore: cannot write to standard output: {error.strerror or error}", err=True)
                sys.exit(EXIT_USAGE)
            except Exception as error:
                if dbmod.interrupted(error):  # Ctrl-C inside SQLite, or inside one of zlstore's SQL functions
                    _interrupted(words)
                if isinstance(error, sqlite3.DatabaseError) and dbmod.is_environment_error(error):
                    raise Fault(f"SQLite: {error}") from None
                _internal(error)


def _interrupted(words):
    click.echo(output.for_terminal(interrupts.interrupted_text(words)), err=True)
    sys.exit(EXIT_INTERRUPTED)


def _internal(error: BaseException):
    traceback.print_exc()
    click.echo(
        f"zlstore: internal error: {type(error).__name__}: {error} (a bug in zlstore: "
        f"the traceback above says where; exit status {EXIT_INTERNAL})",
        err=True,
    )
    sys.exit(EXIT_INTERNAL)


# A write that failed for want of space or a failing device; a file
# zlstore writes itself fails as files.CannotWrite, naming it.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _stdout_broken(error: OSError) -> bool:
    """Whether an OSError is standard output's: a write error that names no
    file, or stdout still cannot be flushed."""
    if error.errno in _WRITE_ERRNOS and error.filename is None:
        return True
    try:
        sys.stdout.flush()
    except OSError:
        return True
    except ValueError:  # closed
        return True
    return False


def _quiet_stdout():
    """After a broken pipe: point stdout at /dev/null, so that Python's flush at exit says nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


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


@click.group(cls=ZlstoreGroup)
@click.version_option(package_name="zlstore")
def cli():
    """zlstore: an embedded SQLite results store for A/B compiler-switch
    benchmarks (FlagGems operators, Triton IR fingerprints, calibers).

    Exit status, in every command: 0 done; 1 some input had problems
    (everything readable was stored), or `ab --fail-on` found a range
    with a finding it names (the CI gate); 2 usage or environment error (bad
    path, bad --db, unknown or wrong-kind root, newer schema, a full disk,
    stdout that cannot be written: one line says which); 3 record of an
    unfinished cell; 70 internal error (a bug); 130 interrupted; 141 stdout
    closed before the output was written (silent).

    Output, in every command that prints rows: its own text for people,
    or --json, --nl, --csv, --tsv, -t/--table with --fmt, as sqlite-utils
    prints them. --rule, where a command has it, only views under a rule;
    `zlstore rule` switches the current one.

    Example:

        \b
        zlstore ingest runs/ && zlstore screen
    """


# The running commands (plan, the run and flaggems groups) are run/commands.py's.
for command in (plan, run, flaggems):
    cli.add_command(command)


@cli.command()
@db_option(create=True)
@output_options
def init(store, out):
    """Create or upgrade a database; print its path and schema version
    (--json: as an object).

    A file that is not a zlstore store (another program's SQLite database,
    a damaged or truncated one, one from a newer zlstore) is refused and
    left as it is. Exit status: 0 done; 2 that refusal, or a path that
    cannot be created.

    Example:

        \b
        zlstore init --db campaign.db
    """
    summary = {"path": str(store.path), "schema_version": store.schema_version}
    emit(out, [summary], document=summary, human=lambda: f"{store.path}\tschema version {store.schema_version}")


class DatasetteSetting(click.types.CompositeParamType):
    """--setting NAME VALUE, checked and typed as datasette's own --setting is."""

    name = "setting"
    arity = 2

    def convert(self, value, param, ctx):
        from datasette.cli import Setting  # lazy: the note at the top

        try:
            return Setting().convert(value, param, ctx)
        except click.BadParameter as error:
            self.fail(error.message.replace("--help-settings", "datasette serve --help-settings"), param, ctx)


METADATA_MAX_BYTES = 16 << 20  # a metadata file is a few KB


def _metadata_file(ctx, param, value):
    """--metadata FILE: datasette's JSON or YAML metadata, read as datasette reads it."""
    if value is None:
        return None
    from datasette.utils import BadMetadataError, parse_metadata  # lazy: the note at the top

    try:
        # a regular file only: /dev/zero or a FIFO would never end
        return parse_metadata(layout.read_bytes(Path(value).resolve(), cap=METADATA_MAX_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, BadMetadataError) as error:
        raise click.BadParameter(f"{value}: {error}", param_hint="--metadata") from None


# -h is --host, as in datasette serve; --help alone is help.
@cli.command(context_settings={"help_option_names": ["--help"]})
@click.option(
    "-h",
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but loopback exposes the SQL page to the network.",
)
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=8001, show_default=True)
@click.option(
    "--setting",
    "settings",
    type=DatasetteSetting(),
    multiple=True,
    metavar="NAME VALUE",
    help="A datasette setting (datasette serve --help-settings lists them), over zlstore's "
    "own (sql_time_limit_ms 5000, facet_time_limit_ms 500, max_returned_rows 5000); repeatable.",
)
@click.option("--cors", is_flag=True, help="Send CORS headers (Access-Control-Allow-Origin: *), as datasette's --cors.")
@click.option(
    "-m",
    "--metadata",
    "extra_metadata",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    callback=_metadata_file,
    metavar="FILE",
    help="Datasette metadata (JSON or YAML) merged over zlstore's, as datasette's --metadata is.",
)
@click.option("--open", "open_browser", is_flag=True, help="Open a browser on the index page.")
@click.option(
    "--get",
    "get_path",
    default=None,
    metavar="PATH",
    callback=lambda ctx, param, value: _server_path(value),
    help="Answer one request (e.g. /zlstore/verdicts.json) without a server, print it and exit.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests for this host name (a DNS alias of this machine); repeatable.",
)
@click.option(
    "--users",
    "users_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    metavar="FILE",
    help="Only these people read the store, once logged in at /-/login: one NAME:HASH line each "
    "(`datasette hash-password` makes a HASH). Required to serve beyond 127.0.0.1.",
)
@db_option(check=True)
def serve(store, host, port, settings, cors, extra_metadata, open_browser, get_path, allow_hosts, users_file):
    """Browse the store in datasette: views, canned questions, charts.

    The store is served as /zlstore whatever its file is called. Live:
    cells recorded while it runs show on the next page load. It answers
    only requests for its own host names: localhost, an IP address, the
    --host it binds, this machine's name (when bound beyond loopback) and
    each --allow-host; any other Host header gets 400, so a web page whose
    name is made to resolve to this machine (DNS rebinding) cannot read
    the store. Bound beyond 127.0.0.1 it needs --users: only those people
    read anything, once logged in (docs/stores.md: a team's server). The
    database is checked (quick_check) before it is served, and never
    created; a page never writes it. For datasette's other options, run plain datasette:
    `datasette campaign.db` has zlstore's plugin (served as /campaign,
    without the Host check).

    Exit status: with --get, 0 for an answer of 200, else 2; 2 a bad
    --db, or an address it cannot listen on; 130 stopped by Ctrl-C.

    Example:

        \b
        zlstore serve --db campaign.db --open
        zlstore serve --db campaign.db -p 8002 --setting max_returned_rows 20000
        zlstore serve --get '/zlstore/verdicts.json?_shape=array'
        zlstore serve --db team.db --host 0.0.0.0 --users team-users.txt
    """
    from .serve import serve as serving  # lazy: the note at the top

    try:
        users = serving.read_users(users_file) if users_file else None
    except serving.UsersError as error:
        raise click.BadParameter(str(error), param_hint="--users") from None
    if get_path is None and users is None and not serving.is_loopback(host):
        raise Fault(serving.NEEDS_USERS.format(host=host))
    options = dict(settings=dict(settings), extra_metadata=extra_metadata, cors=cors, users=users)
    if get_path is not None:
        status, text = serving.get(serving.datasette_app(store.path, **options), get_path)
        click.echo(text)
        if status != 200:
            click.echo(f"error: {get_path} answered {status}", err=True)
        sys.exit(EXIT_OK if status == 200 else EXIT_USAGE)
    store.close()  # datasette opens its own connections
    try:
        serving.serve(store.path, host=host, port=port, open_browser=open_browser, allow_hosts=allow_hosts, **options)
    except serving.ServeError as error:
        raise Fault(str(error))
    raise KeyboardInterrupt  # uvicorn returns only once Ctrl-C stopped it


@cli.command("metadata")
@click.option(
    "--name",
    default=None,
    help="The database name datasette serves the store under (default: the --db file's "
    "stem, as plain datasette names it).",
)
@db_option(read_only=True)
def metadata_command(store, name):
    """Print zlstore's datasette metadata as JSON, for datasette -m.

    zlstore's plugin gives plain datasette the same metadata already,
    wherever zlstore is installed; this is for a datasette without it
    (another environment, datasette publish) or to edit. The canned
    queries and charts read the database NAME.

    Example:

        \b
        zlstore metadata --db campaign.db > metadata.json
        datasette campaign.db -m metadata.json
    """
    from .serve import datasette_site  # lazy: datasette and yaml, for this command only, not for --help

    click.echo(output.to_json(datasette_site.metadata(name or Path(store.path).stem)))


def _server_path(value):
    """--get's PATH: a path on the server, from its root."""
    if value is not None and not value.startswith("/"):
        raise click.BadParameter(
            f"{value!r} is not a path on the server: a path starts with / (/{value}, /zlstore/verdicts.json)",
            param_hint="--get",
        )
    return value


def shown_problem(problem) -> str:
    """A problem as printed: its file relative to the current directory when
    it lies below it, as the user named the tree (runs/...), else absolute.
    --json and the ingest log keep the absolute path."""
    if not isinstance(problem, layout.Problem):
        return str(problem)
    try:
        relative = os.path.relpath(problem.file)
    except ValueError:
        return str(problem)
    if relative.startswith(os.pardir):
        return str(problem)
    return str(layout.Problem(relative, problem.line, problem.message))


def report_summary(summary, out, command: str = "ingest"):
    """An ingest's or a merge's problems (and moved roots) on stderr, then its
    summary: --json the whole of it, the other formats its counts as a row."""
    for problem in summary.problems:
        click.echo(output.for_terminal(f"problem: {shown_problem(problem)}"), err=True)
    for move in getattr(summary, "moved", ()):
        click.echo(output.for_terminal(f"moved: {move['root']} from {move['from']} to {move['to']}"), err=True)
    earlier = summary.problem_count() - len(summary.problems)
    if earlier > 0:
        found = (
            "found where the merged stores were ingested, open here"
            if command == "merge"
            else "found by an earlier ingest still open (the files are unchanged)"
        )
        click.echo(f"problem: {earlier} {found}: {output.command('problems')}", err=True)
    if summary.stopped:
        click.echo(
            f"error: {command} {summary.state}; the counts are what was stored. "
            "Run it again with space to store the rest.",
            err=True,
        )
    emit(out, [summary.counts], document=summary.as_dict, human=summary.line)


def summary_exit(summary):
    """0 clean; 1 some input has problems (open ones included); 2 stopped (a full disk)."""
    if summary.stopped:
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_PROBLEMS if summary.problem_count() else EXIT_OK)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--rehash",
    is_flag=True,
    help="Read and hash every cell, trusting no stat signature (after editing files in place).",
)
@db_option(create=True, writes=True)
@output_options
def ingest(store, paths, rehash, out):
    """Store every root and cell under PATHS (runs/ trees, roots or cells).

    A cell is stored whole or not at all, and read and counted once where
    PATHS overlap (a PATH inside another one, or given twice, is left out).
    Ingesting the same tree again adds nothing and reads nothing: a stored cell whose directories and run.log,
    cell.env and index.tsv keep their sizes and times is unchanged (files in
    triton_cache are written once by Triton, by rename: a directory's time
    tells). A cell that changed is read, and replaced if its content did.
    --rehash reads every cell. Each problem with the input is printed to
    stderr with its file and line, stored in the ingest_problems table, and
    the rest goes on.

    Exit status: 0 everything was read cleanly; 1 some input had problems
    (everything readable was stored); 2 usage or environment error (a PATH
    that does not exist: nothing is read or created; a bad --db); 130
    interrupted (every cell stored so far is kept, whole).

    Example:

        \b
        zlstore ingest runs/ --db zlstore.db
        zlstore ingest runs/ --rehash
    """
    update, finish = progress_reporter("ingesting")
    try:
        summary = store.ingest_summary(paths, progress=update, rehash=rehash)
    finally:
        finish()
    report_summary(summary, out)
    summary_exit(summary)


@cli.command()
@click.argument("root", required=False)
@db_option(read_only=True)
@output_options
def problems(store, root, out):
    """The problems with the input that are still open: each bad file (and
    line) an ingest or record named, of ROOT (a directory name or path;
    default: every root). A problem stays open while its file is as it was
    read; once the file is fixed, the next ingest of it closes it. Also
    each side of a round that more than one stored cell claims, or whose
    cell's files another cell holds (a copied cell or round directory): no
    row of it pairs until zlstore forget removes the copy (view
    duplicate_cells).

    Exit status: 0 none open; 1 some open; 2 usage error.

    Example:

        \b
        zlstore problems ab_rlc_20261012_101500
        zlstore problems --json
    """
    with judge_errors():
        rows = store.problems(root)
    if rows or out.kind != "human":
        emit(out, rows, human=lambda: output.table(rows, ["file", "line", "message", "found_at"]))
    else:
        click.echo("(no open problems)", err=True)
    sys.exit(EXIT_PROBLEMS if rows else EXIT_OK)


@cli.command()
@click.option(
    "--full",
    is_flag=True,
    help="SQLite's integrity_check and foreign_key_check too: every index against its table (slower).",
)
@db_option(check=False)
@output_options
def check(store, full, out):
    """Check the database file with SQLite's own checks: every page and
    record (quick_check), with --full every index and foreign key too.
    Every open of a store up to 16 MB quick-checks it anyway, and serve
    does on start; a larger store is checked here (about 7 ms per MB read
    from disk, 2 ms per MB from the page cache).

    Exit status: 0 sound; 2 damaged (each problem is printed), or a bad
    --db (missing: never created; not a zlstore store; newer).

    Example:

        \b
        zlstore check --db campaign.db --full
    """
    started = time.perf_counter()
    problems = dbmod.integrity_problems(store.conn, full=full)
    for problem in problems:
        click.echo(output.for_terminal(f"problem: {problem}"), err=True)
    checked = {
        "path": str(store.path),
        "checks": "integrity_check, foreign_key_check" if full else "quick_check",
        "bytes": store.path.stat().st_size,
        "seconds": round(time.perf_counter() - started, 3),
        "problems": problems,
    }
    if not problems or out.kind != "human":  # a script reads the problems on stdout too
        emit(
            out,
            [checked],
            document=checked,
            human=lambda: (
                f"{store.path}: ok ({checked['checks']}, {checked['bytes'] / 1e6:.1f} MB, {checked['seconds']:.2f} s)"
            ),
        )
    if problems:
        raise Fault(
            f"{store.path} is damaged ({len(problems)} problems above); restore it from a copy, "
            f"or ingest the runs/ tree into a new database"
        )


@cli.command("derive")
@db_option(writes=True)
@output_options
def derive_command(store, out):
    """Bring the store up to date for its readers: this release's schema,
    and every derived table (pairs, ranges, findings, noise floors) the
    writers keep. The commands that only read (screen, ab, noise, history,
    diff, report, export, the served pages) never write: every writer
    (ingest, record, merge, rule, forget) derives before it commits, and
    this is the explicit step for what is left: a store edited by hand, a
    run stopped midway, a store from an older zlstore.

    Example:

        \b
        zlstore derive --db team.db
    """
    derived = store.derived_on_open or store.derive()
    done = {"path": str(store.path), "derived": derived, "schema_version": store.schema_version}
    emit(
        out,
        [done],
        document=done,
        human=lambda: f"{store.path}: " + ("derived" if derived else "up to date, nothing to derive"),
    )


@cli.command()
@click.argument("root")
@db_option(writes=True)
@output_options
def forget(store, root, out):
    """Remove ROOT (a directory name or path) from the store, with
    everything derived from it: its cells, their rows, kernels and
    fingerprints, its recorded verdicts and plan, its A/B pairs and ranges,
    the directory listings kept under its path, and the IR texts no other
    cell uses; the noise floors its pairs fed are recomputed. Given the path
    of a stored cell's directory, or of a directory of cells inside a root,
    remove those cells alone: a copy (DUPLICATE_CELL; zlstore problems names
    it), whose rounds are then paired again. One
    transaction: all of it or nothing. The files on disk are not touched
    (ingesting the tree again stores it again, and names their problems
    again: the open ones of what is forgotten are closed); the ingest log
    keeps a line saying what was forgotten.

    Exit status: 0 forgotten; 2 nothing stored there, or a name two roots
    share (give its path).

    Example:

        \b
        zlstore forget /data/old/runs/ab_rlc_20261012_101500 --db zlstore.db
        zlstore forget runs/ab_rlc_20261012_101500/topk_float16_after.bak
        zlstore forget runs/campaign_20261013_090000/card0/ab_20261013_090000.bak
    """
    with judge_errors():
        removed = store.forget(root)
    emit(out, [removed], document=removed, human=lambda: report.forgotten(removed))


def _mergeable(ctx, param, sources):
    """Copy and check every source (merge.prepared_sources) before the target
    is opened or anything merged: one refused, and no target is created."""
    from .store import merge as merging  # lazy: the note at the top

    try:
        ctx.meta["merge_copies"] = ctx.with_resource(merging.prepared_sources([Path(s) for s in sources], None))
    except merging.SourceError as error:
        raise click.BadParameter(output.for_terminal(str(error)), ctx=ctx, param=param)
    return sources


@cli.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=False), callback=_mergeable)
@db_option(create=True, writes=True)
@output_options
def merge(store, sources, out):
    """Merge stores made elsewhere (another host, a Slurm task, a
    colleague's laptop: SOURCES, database files) into the --db store.

    Roots are matched by what they are (name and root.env / campaign.env),
    cells by their path inside their root, IR texts by content: merging a
    store twice adds nothing. Each root is merged in one transaction, whole
    or not at all. A cell both stores hold with different content keeps the
    newer (ingested later), and a line on stderr and the ingest log say
    which. The A/B pairs, ranges and noise floors are recomputed in the
    target, so every view and command sees the merged roots as if they had
    been ingested there. Sources are only read, as data: each through a
    private copy, its views and triggers dropped unread and every table
    checked against this release's columns and types before a row is read
    (one made by an older zlstore is migrated in that copy). A root only a
    source knows is kept at no path of this host until an ingest here finds
    its tree (docs/security.md says what merge trusts).

    A problem a source's ingest found comes along, open while the target
    holds what it names as the source read it, and is counted (`zlstore
    problems` lists it).

    Exit status: 0 merged; 1 merged, with conflicts or problems (on stderr;
    the newer content kept; open problems carried from the sources
    included); 2 a source refused (missing, not a zlstore store, a table or
    column that does not match, a newer schema, the target itself): nothing
    merged; or the target's disk failed (full): stopped at the first
    failure, the roots merged so far kept; 130 interrupted (Ctrl-C): the
    roots merged so far kept, whole.

    Example:

        \b
        zlstore merge host1.db host2.db --db all.db
        zlstore merge /scratch/zl/task-*.db --db campaign.db --json
    """
    from .store import merge as merging  # lazy: the note at the top

    update, finish = progress_reporter("merging")
    try:
        with database_faults(store.path):  # a full disk: one line, exit 2
            summary = merging.Merger(store).run(
                sources, progress=update, copies=click.get_current_context().meta.get("merge_copies")
            )
    except merging.SourceError as error:
        raise Refusal(str(error))
    finally:
        finish()
    report_summary(summary, out, "merge")
    summary_exit(summary)


# -- live writing: record, plan, run (issue 4) ----------------------------------


@cli.command()
@click.argument("cell_dirs", nargs=-1, required=True, type=click.Path(exists=True))
@db_option(create=True, writes=True)
@output_options
def record(store, cell_dirs, out):
    """Store finished cells now: the line a harness adds after each cell.

    A cell is finished when its cell.env exists with RC (the harness writes
    it last); an unfinished cell is named on stderr and nothing of it is
    stored. Each cell is one short write transaction, so eight of these (one
    per card), an ingest and a datasette reader can share one database.

    Exit status: 0 every cell stored (or already stored); 1 some input had
    problems (everything readable was stored); 2 nothing recorded: a path
    that does not exist, is no cell, or could not be stored, or a bad --db;
    3 some cell is unfinished (nothing of it was stored).

    Example:

        \b
        zlstore record "$OUT_DIR" --db /data/zlstore.db
    """
    summary = store.ingest_summary(cell_dirs, command="record", require_finished=True)
    for path in summary.unfinished:
        click.echo(output.for_terminal(f"unfinished: {path}: no cell.env with RC yet; nothing stored"), err=True)
    report_summary(summary, out, "record")
    if summary.unfinished and not summary.stopped:
        sys.exit(EXIT_UNFINISHED)
    counts = summary.counts
    if not summary.stopped and not counts["cells_added"] + counts["cells_replaced"] + counts["cells_unchanged"]:
        click.echo("nothing recorded", err=True)
        sys.exit(EXIT_USAGE)
    summary_exit(summary)


# -- judging: thin wrappers over judge.py; the judgement itself is in the views --

RULE_CHOICE = click.Choice(sorted(ttgir.RULES))


def rule_option(fn):
    """--rule: one meaning in every command, a view; `zlstore rule` switches."""
    return click.option(
        "--rule",
        type=RULE_CHOICE,
        default=None,
        help="Judge under this fingerprint rule (default: the current one) without making it "
        "the current one: `zlstore rule RULE` does that.",
    )(fn)


@contextlib.contextmanager
def judge_errors():
    """A root that is not there is a usage error; a refused judgement exits 2 too."""
    try:
        yield
    except judge.JudgeError as error:
        raise Refusal(str(error)) from error
    except LookupError as error:
        if type(error) is not LookupError:  # a KeyError or IndexError is a bug, not a usage error
            raise
        raise click.UsageError(str(error))


def names_option(flag, metavar, help_text):
    """An option that takes names comma-separated or repeated (--op a,b --op c)."""
    return click.option(
        flag,
        metavar=metavar,
        multiple=True,
        help=help_text,
        callback=lambda ctx, param, value: [n.strip() for v in value for n in v.split(",") if n.strip()],
    )


@cli.command()
@click.argument("root", required=False)
@rule_option
@names_option("--verdict", "V[,V]", "Only pairs with these verdicts: " + ", ".join(judge.VERDICT_NAMES) + ".")
@db_option(read_only=True)
@output_options
@judging_defaults
def screen(store, root, rule, verdict, out):
    """The screening verdicts: one line per (op, dtype) pair of ROOT (a
    directory name or path; default: every screening root) under the current
    fingerprint rule.

    A speedup range (before / after latency, min .. median .. max) follows
    only the pairs that have one, with what it is spelled out: indicative
    (one round per shape is never a result) for IR_CHANGED, the noise floor
    for NO_IR_DIFF; never one for DUPLICATE_CELL (more than one stored
    cell claims a side: a copied cell directory), TRUNCATED, NO_ROWS,
    IR_UNREAD or NO_TRITON. A pair with a cell on one side only is
    NO_ROWS with the note MISSING_SIDE (the run stopped before the other
    side, or its directory is gone): not its dtype; zlstore problems names
    it. An
    IR_CHANGED pair that the strictest rule ({strictest_rule}) sees as unchanged gets a
    hint: it differs only in what that rule leaves out (source locations),
    and a campaign on it would measure nothing the switch changed. Each
    root's heading says whether its axis is live (screen_roots); a root
    whose switch changed no IR at all gets a warning on stderr. `recorded`
    is the verdict in the root's screen.tsv: the harness's own, or, after
    `zlstore rescore --write` (or the harness's RESCORE), the rewrite; where
    the replaced file, screen.tsv.orig, holds another verdict for a pair,
    `orig` shows it beside (--json: recorded_verdict, orig_verdict). cl, rc
    and elapsed give the before / after sides; a note goes on a line of its
    own below its pair. The table ends with the count of each verdict;
    --json gives that summary with every column of the rows ({"summary",
    "rows"}), -t the table's columns.

    Each root's heading says what its cells ran on (GPU, driver, torch,
    triton, FlagGems commit, host: cell.env's ENV_* keys). Where a pair's
    two sides ran on different things (two Triton builds, say), a line
    under it and a warning on stderr name the fields; --json has them as
    environment_differs.

    Exit status: 0 done; 1 a root shown is half-ingested (an ingest of it
    was killed: a warning names the command that completes it); 2 an
    unknown root, a repeat run or campaign (zlstore ab reads those), an
    unknown --verdict, or a bad --db (missing: never created; not a zlstore
    store; damaged; newer).

    Example:

        \b
        zlstore screen ab_rlc_20261012_101500
        zlstore screen --verdict IR_CHANGED --rule v2 --json
    """
    with judge_errors():
        rule_name = judge.resolve_rule(store, rule)
        rows = judge.verdicts(store, root, rule_name, verdict)
        axes = {axis["root"]: axis for axis in judge.screen_roots(store, root)}
        environments = judge.root_environments(store, root)
        differences = judge.environment_differences(store, root)
    for axis in axes.values():
        if axis["axis"] == "dead":
            click.echo(output.for_terminal(report.dead_axis_warning(axis)), err=True)
    paired = {(r["root_id"], r["op"], r["dtype"]) for r in rows}
    for line in report.environment_warnings(
        {k: v for k, v in differences.items() if k in paired}, {r["root_id"]: r["root"] for r in rows}
    ):
        click.echo(output.for_terminal(line), err=True)
    from .store.roots import half_ingested  # noqa: PLC0415 - the store has imported it already

    half = half_ingested(store.conn, sorted({r["root_id"] for r in rows})) if rows else []
    for message in dict.fromkeys(problem.message for _, problem in half):  # a killed ingest: not a finished root
        click.echo(output.for_terminal(f"warning: {message}"), err=True)
    if not rows and out.kind == "human":
        click.echo("(no screening pairs: ingest a screening root first)", err=True)
        return
    if out.kind != "human":
        rows = judge.with_environment_differs(rows)
    emit(
        out,
        rows,
        human=lambda: report.screen(rows, rule_name, axes, environments, differences, output.terminal_width()),
        document=lambda: output.Summarized(judge.screen_summary(rows, rule_name), rows),
        shown=lambda: report.screen_shown(rows),
    )
    if half:
        sys.exit(EXIT_PROBLEMS)


@cli.command()
@click.argument("root", required=False)
@rule_option
@click.option(
    "--write",
    is_flag=True,
    help="Rewrite screen.tsv in each root from the verdicts under the rule, keeping the replaced file "
    "as screen.tsv.orig (an existing .orig is never overwritten); the root is then ingested again.",
)
@db_option
@output_options
def rescore(store, root, rule, write, out):
    """Re-judge screening roots under a fingerprint rule (default: the
    current one, which rescore never changes: `zlstore rule RULE` does)
    against the harness's original judgement: screen.tsv.orig where the
    root has one, else screen.tsv. Prints the pairs whose verdict moved,
    the count of each move and the totals; NO_KERNEL and NO_TRITON are one
    verdict and never a move. --json gives the totals as its summary (rule,
    pairs, moved, unchanged, without_original, counts) and the moved pairs
    as its rows ({"summary", "rows"}); the other formats the moved pairs.

    Exit status: 0 done; 2 an unknown root, a repeat run or campaign (zlstore
    ab reads those), a root directory that is gone (--write), or a bad --db
    (--write needs one this user can write).

    Example:

        \b
        zlstore rescore ab_rlc_20261012_101500 --rule v4
        zlstore rescore ab_rlc_20261012_101500 --write
    """
    if write:
        store.require_writable()
    with judge_errors():
        found = store.root(root) if root is not None else None
        result = judge.rescore(store, found, rule)
        written = judge.rescore_write(store, found, rule) if write else []
    for path in written:
        click.echo(output.for_terminal(f"wrote {path} (the original is {path.name}.orig)"), err=True)
    emit(
        out,
        result["moved"],
        columns=["root", "op", "dtype", "from", "to"],
        human=lambda: report.rescore(result),
        document=output.Summarized(judge.rescore_summary(result), result["moved"]),
    )


def finite(ctx, param, value):
    """Refuse nan and inf, which a FloatRange lets through (SQLite would read them as 0)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number", ctx=ctx, param=param)
    return value


@cli.command("rule")
@click.argument("rule_name", metavar="[RULE]", required=False, type=RULE_CHOICE)
@click.option(
    "--q-max",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    callback=finite,
    help=f"The false-discovery rate a faster / slower finding is held to (default {SETTINGS['q_max']}).",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(0, min_open=True),
    default=None,
    callback=finite,
    help=f"The smallest change worth a finding, as a fraction: 0.02 is 2% (default {SETTINGS['min_effect']}).",
)
@db_option
@output_options
def rule(store, rule_name, q_max, min_effect, out):
    """Show or set what judging keeps: the current fingerprint rule (every
    view judges under it; the one way to switch it: --rule elsewhere only
    views under another) and a finding's thresholds. Without arguments,
    prints them. A rule the store has not computed yet is computed from the
    stored IR first.

    Exit status: 0 done; 2 a bad --db (setting needs one this user can
    write).

    Example:

        \b
        zlstore rule
        zlstore rule v4 --min-effect 0.05
    """
    if rule_name is not None or q_max is not None or min_effect is not None:
        store.require_writable()
    with judge_errors():
        if rule_name is not None:
            store.set_rule(rule_name)
        for key, value in (("q_max", q_max), ("min_effect", min_effect)):
            if value is not None:
                store.set_setting(key, repr(value))
        settings = judge.judging_settings(store)
    emit(out, [settings], document=settings)


@cli.command()
@click.argument("root", required=False)
@click.option("--rejected", is_flag=True, help="List the rows that did not pair, and why.")
@names_option("--op", "OP[,OP]", "Only ranges of these row ops.")
@names_option("--finding", "F[,F]", "Only ranges with these findings: " + ", ".join(judge.FINDING_NAMES) + ".")
@click.option(
    "--sort",
    type=click.Choice(list(judge.AB_SORTS)),
    default=None,
    help="Order within a root: finding (the default: findings first), effect (largest speedup first), "
    "q (smallest first), op (by op, dtype, shape).",
)
@names_option(
    "--fail-on",
    "F[,F]",
    "Exit 1, naming each on stderr, when a range (of those shown) has one of "
    "these findings: the gate a CI step runs (e.g. --fail-on slower).",
)
@db_option(read_only=True)
@output_options
@judging_defaults
def ab(store, root, rejected, op, finding, sort, fail_on, out):
    """A/B findings of repeat runs and campaigns: per (root, row op, dtype,
    shape), what the paired rounds say of the ratio latency before / latency
    after (above 1: faster with the switch).

    effect is the geometric mean of the rounds' ratios, with its 95%
    interval; q is the p-value of a t-test on the rounds' log ratios (the
    rounds are paired: before and after ran back to back), adjusted by
    Benjamini-Hochberg over every tested range of the root. The finding:
    faster / slower when q <= q_max and the whole interval lies beyond the
    minimum effect; no change when the whole interval lies within it;
    inconclusive otherwise (the note says what would settle it); too few
    rounds under {min_rounds}. `zlstore rule` shows and sets q_max ({q_max}) and
    min_effect ({min_effect}). Findings come first; the op's noise floor (zlstore
    noise) is printed beside each range, and no longer decides it.

    A campaign run until decided (campaign.env STOPPING=until-decided) is
    tested by the anytime-valid t-test instead: its interval and q hold
    after any round (docs/judging.md); each range's note says the round its
    op stopped after and why (decided, max rounds, failed), --json has them
    as stop_round and stop_reason.

    A row pairs only when it is counted on both sides of its round and both
    cells have the same known caliber. Each line says how many rows of that
    key did not pair and whether a paired row was timed by the direct
    fallback (a different timing regime). A screening root's ranges are in
    zlstore screen.

    Each root's heading says what its cells ran on; where the cells behind
    a range differ in anything but the switch (two GPU models or Triton
    builds in one campaign), its note and a warning on stderr name the
    fields, and --json has them as environment_differs.

    --rejected lists every row that did not pair with its reason, the first
    that applies of: DUPLICATE_CELL (more than one stored cell claims a side
    of the round, or another cell holds the same files: a copied cell or
    round directory; zlstore problems says which to forget), CALIBER_UNKNOWN (a cell's
    caliber is not known; the missing fields are named), CALIBER_MISMATCH (the cells' calibers differ;
    the differing fields are named), MISSING_SIDE (the row or its cell exists
    on one side only), NOT_COUNTED (error_msg or an unusable latency).

    --op, --finding and --sort pick and order the ranges (the summary
    counts the ranges picked). The text fits the terminal ($COLUMNS, also
    through a pipe): a range's note (what would settle it, unpaired rows)
    goes on lines of its own below it, an op's missing noise floor once
    under the table, and a table too wide leaves out its rightmost columns
    and names them last; -t/--fmt print the table's columns (the note a
    column), --json and --csv every column. --json is
    {"summary": the closing lines' counts and thresholds, "rows": [...]};
    in --json, --nl and --csv a faster or slower range's "ir_changes" is
    what changed in its op's IR (as zlstore diff sums it up), the command
    that shows it and its kernel_diff page under zlstore serve (null for
    any other range).

    Exit status: 0 done; 1 --fail-on: a range has one of its findings
    (each is named on stderr, after the output); 2 an unknown root, a
    screening root (without --rejected: zlstore screen reads it), an
    unknown finding, or a bad --db (missing: never
    created; not a zlstore store; damaged; newer).

    Example:

        \b
        zlstore ab campaign_20261013_090000
        zlstore ab campaign_20261013_090000 --op topk,pad --sort effect
        zlstore ab campaign_20261013_090000 --fail-on slower --fmt github
        zlstore ab campaign_20261013_090000 --rejected
    """
    with judge_errors():  # a screening root's unpaired rows are ab's too (--rejected); its ranges are screen's
        found = None if root is None else store.root(root) if rejected else judge.root_for(store, root, "ab")
        judge.check_findings(finding)
        judge.check_findings(fail_on)
        differences = judge.range_environment_differences(store, found)
        if not rejected:
            for line in report.environment_warnings(differences, judge.root_names(store)):
                click.echo(output.for_terminal(line), err=True)
        if rejected:
            rows = judge.ab_rejected(store, found)
            if not rows and out.kind == "human":
                click.echo("(every row paired)", err=True)
            else:
                emit(out, rows, human=lambda: report.rejected(rows))
        elif out.kind in ("json", "nl"):  # built by SQLite: a campaign has thousands of ranges
            summary = judge.ab_summary(store, found, op, finding)
            text = output.JSONText(
                irchanges.with_ir_changes(store, judge.ab_ranges_json(store, found, op, finding, sort))
            )
            emit(out, [], document=output.Summarized(summary, text))
        else:
            summary = judge.ab_summary(store, found, op, finding)
            rows = judge.ab_ranges(store, found, op, finding, sort or "finding")
            if not rows and out.kind == "human":
                click.echo(
                    output.for_terminal(report.no_ab_ranges(found) if not (op or finding) else "(no range matches)"),
                    err=True,
                )
            else:
                if out.kind != "human":
                    rows = irchanges.with_ir_changes_rows(store, judge.with_environment_differs(rows))
                emit(
                    out,
                    rows,
                    human=lambda: report.ab(
                        rows,
                        judge.judging_settings(store),
                        judge.root_environments(store, found),
                        differences,
                        summary=summary,
                        width=output.terminal_width(),
                        switches=judge.root_switches(store, found),
                    ),
                    shown=lambda: report.ab_shown(rows, differences),
                )
        failing = judge.failing_ranges(store, found, fail_on, op)
    if failing:
        for line in report.failing(failing, fail_on):
            click.echo(output.for_terminal(line), err=True)
        sys.exit(EXIT_PROBLEMS)


@cli.command("roots")
@db_option(read_only=True)
@output_options
def roots_command(store, out):
    """What the store holds: every root, newest first, with its kind, its
    switch and the values each side ran it with, when it ran, what its
    cells ran on, its current cells and its open problems (`zlstore
    problems ROOT` lists them). The same rows as the view store_roots, the
    first table a served store's front page shows.

    Exit status: 0 done; 2 a bad --db (missing: never created; not a
    zlstore store; damaged; newer).

    Example:

        \b
        zlstore roots --db team.db --csv
    """
    rows = rootsmod.held(store.conn)
    emit(
        out,
        rows,
        human=lambda: rootsmod.held_table(rows),
        shown=lambda: output.Shown(rootsmod.held_shown(rows), rootsmod.HELD_COLUMNS),
    )


@cli.command()
@click.option("--op", default=None, help="Only this row op.")
@db_option(read_only=True)
@output_options
def noise(store, op, out):
    """Noise floors: per (row op, dtype, shape, caliber, machine), floor =
    max |before/after - 1| over the paired rows of the NO_IR_DIFF screening
    pairs under the current rule (the same code measured twice), with the
    rows (n) and the screening roots it rests on. A machine is the GPU
    model, driver and runtime the cells recorded; a floor of an unknown
    machine is one screening root's, and serves only the campaigns that name
    it their SCREEN_ROOT. A noise floor, not a result: a campaign's range
    means something only where it clears the floor of its shape on its
    machine (zlstore ab shows it; another machine's floors never). --json:
    {"summary", "rows"}.

    Exit status: 0 done; 2 a bad --db (missing: never created; not a
    zlstore store; damaged; newer).

    Example:

        \b
        zlstore noise --op softmax
    """
    rows = judge.noise_floors(store, op)
    emit(
        out,
        rows,
        human=lambda: report.noise(rows),
        document=lambda: output.Summarized(judge.noise_summary(rows), rows),
        shown=lambda: report.noise_shown(rows),
    )
    if not rows and out.kind == "human":
        click.echo("(no noise floor: no NO_IR_DIFF pair with paired rows)", err=True)


@cli.command()
@click.argument("root_a")
@click.argument("root_b")
@rule_option
@db_option(read_only=True)
@output_options
def compare(store, root_a, root_b, rule, out):
    """Two screening roots side by side: verdict and speedup range per (op,
    dtype). Only when both were measured under one and the same known
    caliber; otherwise refuses (exit status 2) and names every caliber field
    that differs, with its value in each root: on stderr, and on stdout in
    the format asked for (--json: the refusal with its "differences", each
    a field with its value in a and in b; the other formats: those rows).

    Exit status: 0 done; 2 an unknown or wrong-kind root, or a bad --db
    (missing: never created; not a zlstore store; damaged; newer).

    Example:

        \b
        zlstore compare ab_rlc_20261012_101500 ab_rlc_20261014_083000
    """
    try:
        with judge_errors():
            result = judge.compare(store, root_a, root_b, rule)
    except Refusal as refusal:
        mismatch = refusal.__cause__
        if isinstance(mismatch, judge.CaliberMismatch) and out.kind != "human":
            differences = [{"field": field, "a": a, "b": b} for field, a, b in mismatch.differences]
            emit(
                out,
                differences,
                document={
                    "error": "refusing to compare: " + refusal.message,
                    "a": mismatch.a,
                    "b": mismatch.b,
                    "differences": differences,
                },
            )
        raise Refusal("refusing to compare: " + refusal.message)
    emit(out, result["rows"], human=lambda: report.compare(result))


@cli.command("report")
@click.argument("root")
@click.option(
    "--md", "fmt", flag_value="md", default=True, help="Markdown, the picture in an SVG file beside it (the default)."
)
@click.option(
    "--html", "fmt", flag_value="html", help="One self-contained HTML file: the picture inline, opens offline."
)
@click.option(
    "-o",
    "--output",
    "out_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write to FILE (default: stdout; --md then writes the picture as ./ROOT.svg, said on stderr). "
    "A FIFO or device (/dev/null) is written into.",
)
@db_option(read_only=True)
def report_command(store, root, fmt, out_path):
    """A root's report, to paste into a pull request or keep as a CI
    artifact. A campaign or repeat run: the summary line, the findings
    table, a forest plot of each shape's effect with its 95% interval
    coloured by finding (the dashboard's chart), the settings, the
    provenance and the open problems. A screening root: the verdict
    counts, the IR_CHANGED pairs with their hints, the labelled speedup
    ranges, the settings, provenance and problems.

    --md (the default) links the picture, written beside the report as
    FILE's name with .svg; --html holds it inline, one file that opens
    offline. The picture is matplotlib's SVG; it carries the rows it plots
    in its <metadata>.

    Exit status: 0 done; 2 an unknown root, a file that cannot be
    written, or a bad --db.

    Example:

        \b
        zlstore report campaign_20261013_090000 --html -o campaign.html
        zlstore report campaign_20261013_090000 -o campaign.md
    """
    from .show import document  # lazy: the note at the top (5 ms; matplotlib comes later, with a picture)

    with judge_errors():
        result = document.write(store, root, fmt, out_path)
    if result["text"] is not None:  # markdown for a file or a pipe, exact; on a terminal, escaped
        click.echo(output.for_terminal(result["text"]) if sys.stdout.isatty() else result["text"], nl=False)
    for line in result["said"]:
        click.echo(output.for_terminal(line), err=True)


@cli.command()
@click.argument("op_spec", metavar="OP[:DTYPE]")
@click.option("--shape", default=None, help="Only this shape of a campaign's ranges, as JSON (e.g. '[[4096, 4096]]').")
@click.option(
    "--switch", "switch", default=None, help="Only the roots that tested this switch (e.g. TRITON_F32_DEFAULT)."
)
@db_option(read_only=True)
@output_options
def history(store, op_spec, shape, switch, out):
    """One operator across every stored campaign, repeat run and screening
    root that measured it, oldest first (each root's STARTED_AT): per root,
    the switch it tested with its values (TRITON_F32_DEFAULT ieee->tf32),
    what it ran on, or what changed from the root before (the switch or its
    values, triton 3.5.0 -> 3.6.0, FlagGems a1b2c3 -> d4e5f6, a caliber
    field), and its results: a campaign's finding, effect and 95% interval
    per shape; a screening pair's verdict with its labelled range (never a
    result). A shape whose finding changes between consecutive campaigns of
    the same switch, values and caliber (and GPU model, where known) is
    flagged with both intervals; a dead axis (an A/A run: ZL_DEAD_AXIS
    off->on, a screen whose switch changed no IR) is never compared.
    --switch: one switch's roots only. --json: the entries and flips; the
    other formats: one row per result with its root and switch.

    Exit status: 0 done; 2 no stored root measured OP (or not with DTYPE or
    --shape), or a bad --db.

    Example:

        \b
        zlstore history softmax:float32
        zlstore history mm:float16 --shape '[[4096, 4096]]' --json
        zlstore history bmm --switch TRITON_F32_DEFAULT
    """

    op, _, dtype = op_spec.partition(":")
    try:
        result = historymod.history(store, op, dtype if _ else None, shape, switch)
    except historymod.HistoryError as error:
        raise click.UsageError(str(error))
    flat = [
        {
            "root": e["root"],
            "kind": e["kind"],
            "started_at": e["started_at"],
            "switch": historymod.switch_text(e),
            "axis": e["axis"],
            "changes": "; ".join(e["changes"]),
            **r,
        }
        for e in result["entries"]
        for r in e["results"]
    ]
    for entry in result["entries"]:
        entry.pop("root_id", None)
    emit(out, flat, human=lambda: report.history(result), document=result)


@cli.command()
@click.argument("first", metavar="ROOT[:OP]")
@click.argument("second", metavar="[ROOT_B:]OP[:DTYPE]")
@click.option(
    "--round",
    "round_",
    type=click.IntRange(min=0),
    default=None,
    help="The round of a repeat run or campaign (a screening root has one pair: round 0).",
)
@click.option("--card", type=click.IntRange(min=0), default=None, help="The card, where the op's round ran on several.")
@click.option(
    "--side",
    type=click.Choice(irdiff.SIDES),
    default=None,
    help="Two roots: which side of each to compare (default: before).",
)
@click.option(
    "--rule",
    type=RULE_CHOICE,
    default=None,
    help="Pair and compare under this fingerprint rule (default: the current one).",
)
@click.option("--raw", is_flag=True, help="Diff the stored text as compiled, not the text the rule hashes.")
@click.option("--kernel", default=None, help="Only the kernels of this name.")
@click.option("--no-diff", "no_diff", is_flag=True, help="No text diff (--json, --full).")
@click.option("--full", is_flag=True, help="Every kernel pair's row, then each one's unified diff.")
@db_option(read_only=True)
@output_options
@judging_defaults
def diff(store, first, second, round_, card, side, rule, raw, kernel, no_diff, full, out):
    """Which kernels changed between two cells, and how: first what
    changed, per operation and attribute, in how many kernel pairs
    ("tt.dot -> ttng.warp_group_dot in 40 of 51"), from the normalized
    IR; then the kernels of both sides paired by name, each same, changed,
    only before or only after under the fingerprint rule, with tile shapes,
    convert_layout, num_warps, num_stages and shared memory per side (past
    a dozen pairs, equal rows grouped); with --full every pair and the
    unified diff of the text the rule hashes (--raw: as compiled), headed
    by each file's path.

    ROOT OP[:DTYPE]: the screening pair of OP in ROOT; with --round N (and
    --card C where it ran on several), that round of a repeat run or
    campaign. ROOT_A:OP[:DTYPE] ROOT_B:OP[:DTYPE]: the same side (--side,
    default before) of two roots, e.g. two compiler builds; A is shown as
    before, B as after.

    Several kernels of one name pair by the same text under the rule,
    then the same text under the strictest rule ({strictest_rule}: they differ only in
    what it leaves out, e.g. source locations), then the same autotune
    config (tile shapes, num_warps, num_stages) and signature, preferring
    the same shared memory, then the same config, then the same tile
    shapes, then the order they were stored in; `paired by` says which.
    A kernel changed under the rule but not under {strictest_rule} says so. A diff
    is cut past 5,000 lines (and a text past 64 MB not diffed), with a
    line that says so. The text is colored on a terminal, plain when
    piped; --json gives all of it (the summary, every pair and its diff),
    --csv, --tsv and -t the kernel table.

    Exit status: 0 done; 1 the IR cannot answer: neither side compiled a
    .ttgir (NO_TRITON), a side's IR was not read in full (IR_UNREAD), or a
    side has no cell; 2 an unknown op, root or kernel, a root of the wrong
    kind for the form, or a bad --db.

    Example:

        \b
        zlstore diff ab_rlc_20261130_025432 abs:float16
        zlstore diff ab_rlc_20261130_025432 abs --rule v4 --full
        zlstore diff campaign_20261130_030313 topk:float16 --round 2
        zlstore diff ab_old:topk ab_new:topk --side after
    """
    with judge_errors():
        try:
            document = irdiff.diff(
                store,
                first,
                second,
                rule=rule,
                round_=round_,
                card=card,
                side=side,
                raw=raw,
                kernel=kernel,
                with_diff=not no_diff and (full or out.kind != "human"),
            )
        except irdiff.DiffError as error:
            raise click.UsageError(str(error)) from None
    if out.kind == "human":  # its own escaping and colors: click drops the colors on a pipe
        click.echo(irdiff.text(document, click.style, output.for_terminal, full=full))
    else:
        emit(out, document["kernels"], columns=irdiff.ROW_COLUMNS, document=document)
    for note in document["notes"] if out.kind != "human" else ():
        click.echo(f"note: {note}", err=True)
    if document["problem"] is not None:
        sys.exit(EXIT_PROBLEMS)


@cli.command()
@click.argument("root")
@rule_option
@db_option(read_only=True)
@output_options(tsv_help="The harness's screen.tsv text, as the default prints it.")
def export(store, root, rule, out):
    """A screening root's verdict table in the harness's screen.tsv column
    order, for people and scripts that still read that file: by default
    (and with --tsv) as the harness writes screen.tsv (a header, tab-
    separated, empty for NULL, tabs and newlines in a value made spaces,
    numbers in full, - for the fingerprint of a side that compiled no
    .ttgir), rows in the order of the root's screen.tsv; --csv,
    --json, --nl and -t give the same rows and columns.

    Exit status: 0 done; 2 an unknown or wrong-kind root, or a bad --db
    (missing: never created; not a zlstore store; damaged; newer).

    Example:

        \b
        zlstore export ab_rlc_20261012_101500 > screen.tsv
        zlstore export ab_rlc_20261012_101500 --csv > screen.csv
    """
    with judge_errors():
        rows = judge.export_rows(store, root, rule)
    if out.kind == "tsv":
        out = output.HUMAN
    # the default is the harness's file, byte for byte, where it goes to a file (escaped on a terminal)
    emit(
        out,
        rows,
        columns=layout.SCREEN_COLUMNS,
        human=lambda: judge.screen_tsv_text(rows).rstrip("\n"),
        escape=sys.stdout.isatty(),
    )
