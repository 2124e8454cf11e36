"""The zlstore command line: click wiring over the library, nothing more."""

import contextlib
import functools
import sys

import click

from . import judge, layout, output, report, ttgir
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

        \b
        zlstore ingest runs/ && zlstore screen
    """


@cli.command()
@db_option
def init(store):
    """Create or upgrade a database; print its path and schema version.

    Example:

        \b
        zlstore init --db campaign.db
    """
    click.echo(f"{store.path}\tschema version {store.schema_version}")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback exposes the SQL page to the network.")
@click.option("--port", type=click.IntRange(0, 65535), default=8001, show_default=True)
@click.option("--open", "open_browser", is_flag=True, help="Open a browser on the index page.")
@click.option("--get", "get_path", default=None, metavar="PATH",
              help="Answer one request (e.g. /zlstore/verdicts.json) without a server, print it and exit.")
@db_option
def serve(store, host, port, open_browser, get_path):
    """Browse the store in datasette: views, canned questions, charts.

    Live: cells recorded while it runs show on the next page load.
    With --get, exit status 0 when the answer is 200, else 1.

    Example:

        \b
        zlstore serve --db campaign.db --open
        zlstore serve --get '/zlstore/verdicts.json?_shape=array'
    """
    from . import serve as serving

    if get_path is not None:
        status, text = serving.get(serving.datasette_app(store.path), get_path)
        click.echo(text)
        sys.exit(EXIT_OK if status == 200 else EXIT_PROBLEMS)
    serving.serve(store.path, host=host, port=port, open_browser=open_browser)


def report_summary(summary, as_json):
    for problem in summary.problems:
        click.echo(f"problem: {problem}", err=True)
    earlier = summary.problem_count() - len(summary.problems)
    if earlier > 0:
        click.echo(f"problem: {earlier} found by an earlier ingest still open (the files are unchanged): "
                   "zlstore problems", err=True)
    if summary.stopped:
        click.echo(f"error: ingest {summary.state}; the counts are what was stored. "
                   "Run it again with space to store the rest.", err=True)
    if as_json:
        click.echo(output.to_json(summary.as_dict()))
    else:
        click.echo(summary.line())


def summary_exit(summary):
    """0 clean; 1 some input has problems (open ones included); 2 stopped (a full disk)."""
    if summary.stopped:
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_PROBLEMS if summary.problem_count() else EXIT_OK)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--rehash", is_flag=True,
              help="Read and hash every cell, trusting no stat signature (after editing files in place).")
@db_option
@json_option
def ingest(store, paths, rehash, as_json):
    """Store every root and cell under PATHS (runs/ trees, roots or cells).

    A cell is stored whole or not at all. Ingesting the same tree again adds
    nothing and reads nothing: a stored cell whose directories and run.log,
    cell.env and index.tsv keep their sizes and times is unchanged (files in
    triton_cache are written once by Triton, by rename: a directory's time
    tells). A cell that changed is read, and replaced if its content did.
    --rehash reads every cell. Each problem with the input is printed to
    stderr with its file and line, stored in the ingest_problems table, and
    the rest goes on.

    Exit status: 0 everything was read cleanly; 1 some input had problems
    (everything readable was stored); 2 usage error.

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
    report_summary(summary, as_json)
    summary_exit(summary)


@cli.command()
@click.argument("root", required=False)
@db_option
@json_option
def problems(store, root, as_json):
    """The problems with the input that are still open: each bad file (and
    line) an ingest or record named, of ROOT (a directory name or path;
    default: every root). A problem stays open while its file is as it was
    read; once the file is fixed, the next ingest of it closes it.

    Exit status: 0 none open; 1 some open; 2 usage error.

    Example:

        \b
        zlstore problems ab_rlc_20261012_101500

        zlstore problems --json
    """
    with judge_errors():
        rows = store.problems(root)
    if as_json:
        click.echo(output.to_json(rows))
    elif rows:
        click.echo(output.table(rows, ["file", "line", "message", "found_at"]))
    else:
        click.echo("(no open problems)", err=True)
    sys.exit(EXIT_PROBLEMS if rows else EXIT_OK)


# -- live writing: record, plan, run (issue 4) ----------------------------------

EXIT_UNFINISHED, EXIT_INTERRUPTED = 3, 130


@cli.command()
@click.argument("cell_dirs", nargs=-1, required=True, type=click.Path())
@db_option
@json_option
def record(store, cell_dirs, as_json):
    """Store finished cells now: the line a harness adds after each cell.

    A cell is finished when its cell.env exists with RC (the harness writes
    it last); an unfinished cell is named on stderr and nothing of it is
    stored. Each cell is one short write transaction, so eight of these (one
    per card), an ingest and a datasette reader can share one database.

    Exit status: 0 every cell stored (or already stored); 1 some input had
    problems (everything readable was stored); 2 usage error; 3 some cell is
    unfinished (nothing of it was stored).

    Example:

        \b
        zlstore record "$OUT_DIR" --db /data/zlstore.db
    """
    summary = store.ingest_summary(cell_dirs, command="record", require_finished=True)
    for path in summary.unfinished:
        click.echo(f"unfinished: {path}: no cell.env with RC yet; nothing stored", err=True)
    report_summary(summary, as_json)
    if summary.unfinished and not summary.stopped:
        sys.exit(EXIT_UNFINISHED)
    summary_exit(summary)


def plan_options(fn):
    """The options that choose and weigh a campaign's ops (plan, run campaign)."""
    for option in reversed((
        click.option("--ops", default=None, help="Ops to plan, op[:dtype] comma-separated "
                     "(default: the root's IR_CHANGED pairs under the current rule)."),
        click.option("--cards", type=click.IntRange(min=1), default=8, show_default=True),
        click.option("--rounds", type=click.IntRange(min=1), default=6, show_default=True,
                     help="Repeat rounds: an op weighs (elapsed_before + elapsed_after) x rounds."),
        click.option("--extra-ops", default=None,
                     help="Ops added after the plan, each to the lightest card by weight."),
    )):
        fn = option(fn)
    return fn


@cli.command()
@click.argument("screen_root")
@plan_options
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write the plan as partition.tsv (card op dtype weight_min).")
@db_option
@json_option
def plan(store, screen_root, ops, cards, rounds, extra_ops, out_path, as_json):
    """Partition a screening root's ops across cards, longest first.

    Each op weighs its screening pair's time (elapsed_before + elapsed_after,
    from the cells, else from screen.tsv) times --rounds, and goes to the
    currently lightest card. Prints each card's ops and weight, the critical
    path, the heaviest single op (the floor no plan can beat), the ideal
    share (total / cards) and a plain hash partition's critical path. An op
    with no screening time is an error that names it.

    Exit status: 0 planned; 1 the plan cannot be made (the message says why).

    Example:

        \b
        zlstore plan ab_rlc_20261012_101500 --cards 8 --rounds 6 --out partition.tsv
    """
    from . import plan as planmod
    from .runner import plan_from_store

    try:
        the_plan, _ = plan_from_store(store, screen_root, cards, rounds, ops, extra_ops)
    except (LookupError, ValueError) as error:
        raise click.ClickException(str(error).strip("'\""))
    if out_path:
        planmod.write_partition_tsv(the_plan, out_path)
    click.echo(output.to_json(the_plan.as_dict()) if as_json else planmod.describe(the_plan))


@cli.group()
def run():
    """Run a screening pass or a campaign, recording each cell as it ends.

    Example:

        \b
        zlstore run screen --ops topk,fft:complex64 --switch FLAGTREE_MUSA_RLC_ENHANCE --command 'bash cell.sh'
    """


@run.command("screen")
@click.option("--ops", required=True, help="op[:dtype] comma-separated; no dtype: the op's own set.")
@click.option("--command", "command", required=True,
              help="Cell command template; {op} {dtype} {side} {out_dir} {card} {switch} {switch_value}.")
@click.option("--switch", required=True, help="The switch under test, e.g. FLAGTREE_MUSA_RLC_ENHANCE.")
@click.option("--cell-timeout", type=click.FloatRange(min=0, min_open=True), default=2400, show_default=True,
              help="Seconds per side; a side that hits it is killed with its children, RC 124.")
@click.option("--root", "root_dir", type=click.Path(file_okay=False), default=None,
              help="The screening root to create (default: runs/screen_<timestamp>).")
@click.option("--card", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--backend", default=None, help="Names the visible-devices variable (default: $ZL_BACKEND, else cuda).")
@db_option
def run_screen(store, ops, command, switch, cell_timeout, root_dir, card, backend):
    """Screen ops: one pair each, before (switch 0) then after (switch 1).

    Each side runs --command with OUT_DIR (root/<op>[_<dtype>]_<side>), OP,
    DTYPE, SIDE, SWITCH, SWITCH_VALUE and the switch variable itself set;
    its stdout and stderr are appended to OUT_DIR/run.log. zlstore then writes
    the cell's cell.env (RC, ELAPSED_S, STARTED_AT, the caliber variables of
    its environment) last and records it; at the end it writes the root's
    screen.tsv from the verdicts view.

    Exit status: 0 screened; 1 it could not start; 130 interrupted (the
    running side is killed with its children).

    Example:

        \b
        zlstore run screen --ops topk:float16,fft:complex64,rand \\
            --switch FLAGTREE_MUSA_RLC_ENHANCE --command 'bash run_cell.sh {op} {dtype}'
    """
    from . import runner

    try:
        config = runner.screen_config(ops=ops, command=command, switch=switch, cell_timeout=cell_timeout,
                                      root_dir=root_dir, card=card, backend=backend)
        result = runner.run_screen(store, config, report=lambda line: click.echo(line, err=True))
    except (runner.RunError, ValueError) as error:
        raise click.ClickException(str(error))
    except KeyboardInterrupt:
        click.echo("interrupted: the running side was killed; finished cells are recorded", err=True)
        sys.exit(EXIT_INTERRUPTED)
    click.echo(report.run_screen(result, runner.screen_tsv_rows(result)))


@run.command("campaign")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A partition.tsv to run (else the plan is computed as `zlstore plan` does).")
@click.option("--screen-root", default=None, help="The screening root to plan from (with --ops etc.).")
@plan_options
@click.option("--command", "command", default=None,
              help="Op command template; {op} {dtype} {card} {rounds}. Required unless --resume.")
@click.option("--root", "root_dir", type=click.Path(file_okay=False), default=None,
              help="The campaign root (default: runs/campaign_<timestamp>); with --resume, the one to continue.")
@click.option("--resume", is_flag=True, help="Continue --root: skip ops whose 2 x rounds cells are all recorded.")
@click.option("--switch", default=None, help="For campaign.env (default: the screening root's).")
@click.option("--backend", default=None, help="Names the visible-devices variable (default: $ZL_BACKEND, else cuda).")
@click.option("--devices", default=None, help="Device ids for cards 0..N-1, comma-separated (default: the card number).")
@click.option("--poll", type=click.FloatRange(min=0.05), default=0.5, show_default=True,
              help="Seconds between looks for finished cells.")
@click.option("--status-every", type=click.FloatRange(min=0.1), default=30, show_default=True,
              help="Seconds between status tables when stderr is not a terminal.")
@db_option
def run_campaign(store, plan_path, screen_root, ops, cards, rounds, extra_ops, command, root_dir, resume,
                 switch, backend, devices, poll, status_every):
    """Run a plan: one worker process per card, ops in turn within a card.

    Each op runs --command with AB_ROOT = <root>/card<N>, ROUNDS,
    ZL_ISOLATE_TUNER_CACHE=1 (forced), the card made visible through the
    backend's variable (CUDA_VISIBLE_DEVICES, MUSA_VISIBLE_DEVICES, ...) and
    ZLSTORE_DB; every cell is recorded as soon as its cell.env has RC. The
    root gets campaign.env and partition.tsv; op output goes to <root>/logs/.
    A live display shows each card's current op, ops done and left, elapsed
    time and an estimate from the weights. An op that fails is logged (the
    ingest_problems table) and the card goes on. Ctrl-C stops every worker
    and its commands and keeps every recorded cell; --resume continues.

    Exit status: 0 every op ran cleanly; 1 some op failed or it could not
    start; 130 interrupted (continue with --resume --root ROOT).

    Example:

        \b
        zlstore plan ab_rlc_20261012_101500 --cards 8 --rounds 6 --out partition.tsv
        zlstore run campaign --plan partition.tsv --rounds 6 --command 'bash ab_repeat.sh {op} {dtype}'
    """
    from . import runner

    try:
        config = runner.campaign_config(
            store, plan_path=plan_path, screen_root=screen_root, ops=ops, cards=cards, rounds=rounds,
            extra_ops=extra_ops, command=command, root_dir=root_dir, resume=resume, switch=switch,
            backend=backend, devices=devices, poll_s=poll, status_every_s=status_every)
        result = runner.run_campaign(store.path, config, stream=sys.stderr)
    except (runner.RunError, LookupError, ValueError) as error:
        raise click.ClickException(str(error).strip("'\""))
    click.echo(report.campaign(result))
    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_PROBLEMS if result.failed else EXIT_OK)


# -- judging: thin wrappers over judge.py; the judgement itself is in the views --

RULE_CHOICE = click.Choice(sorted(ttgir.RULES))


class Refusal(click.ClickException):
    """A request refused on principle, e.g. comparing across calibers: exit status 2."""

    exit_code = EXIT_USAGE


@contextlib.contextmanager
def judge_errors():
    """A root that is not there is a usage error; a refused judgement exits 2 too."""
    try:
        yield
    except judge.JudgeError as error:
        raise Refusal(str(error))
    except LookupError as error:
        if type(error) is not LookupError:  # a KeyError or IndexError is a bug, not a usage error
            raise
        raise click.UsageError(str(error))


@cli.command()
@click.argument("root", required=False)
@click.option("--rule", type=RULE_CHOICE, default=None,
              help="Judge under this fingerprint rule without making it the current one.")
@db_option
@json_option
def screen(store, root, rule, as_json):
    """The screening verdicts: one line per (op, dtype) pair of ROOT (a
    directory name or path; default: every screening root) under the current
    fingerprint rule.

    A speedup range (before / after latency, min .. median .. max) follows
    only the pairs that have one, with what it is spelled out: a result for
    IR_CHANGED, the noise floor (not a result) for NO_IR_DIFF; never one for
    TRUNCATED, NO_ROWS or NO_TRITON. `recorded` is the harness's own
    screen.tsv verdict. The table ends with the count of each verdict.

    Example:

        \b
        zlstore screen ab_rlc_20261012_101500

        zlstore screen --rule v2 --json
    """
    with judge_errors():
        rule_name = judge.resolve_rule(store, rule)
        rows = judge.verdicts(store, root, rule_name)
    if as_json:
        click.echo(output.to_json(rows))
        return
    if not rows:
        click.echo("(no screening pairs: ingest a screening root first)", err=True)
        return
    click.echo(report.screen(rows, rule_name))


@cli.command()
@click.argument("root", required=False)
@click.option("--rule", type=RULE_CHOICE, default=None,
              help="Rescore under this rule, and make it the current rule.")
@click.option("--write", is_flag=True,
              help="Rewrite screen.tsv in each root from the verdicts, keeping the replaced file as "
                   "screen.tsv.orig (an existing .orig is never overwritten); the root is then ingested again.")
@db_option
@json_option
def rescore(store, root, rule, write, as_json):
    """Re-judge screening roots under a fingerprint rule (default: the
    current one) against the harness's original judgement: screen.tsv.orig
    where the root has one, else screen.tsv. Prints the pairs whose verdict
    moved and the count of each move; NO_KERNEL and NO_TRITON are one
    verdict and never a move. --json gives the moved pairs.

    Example:

        \b
        zlstore rescore ab_rlc_20261012_101500 --rule v3 --write
    """
    with judge_errors():
        found = store.root(root) if root is not None else None  # an unknown root leaves the rule alone
        if rule is not None:
            store.set_rule(rule)
        result = judge.rescore(store, found)
        written = judge.rescore_write(store, found) if write else []
    for path in written:
        click.echo(f"wrote {path} (the original is {path.name}.orig)", err=True)
    if as_json:
        click.echo(output.to_json(result["moved"]))
        return
    click.echo(report.rescore(result))


@cli.command()
@click.argument("root", required=False)
@click.option("--rejected", is_flag=True, help="List the rows that did not pair, and why.")
@db_option
@json_option
def ab(store, root, rejected, as_json):
    """A/B ranges of repeat runs and campaigns: per (root, row op, dtype,
    shape), the ratio latency before / latency after (above 1: faster with
    the switch) over the paired rounds, min .. median .. max.

    A row pairs only when it is counted on both sides of its round and both
    cells have the same known caliber. Each line says how many rows of that
    key did not pair, whether a paired row was timed by the direct fallback
    (a different timing regime), and whether the range clears the op's noise
    floor (zlstore noise). A screening root's ranges are in zlstore screen.

    --rejected lists every row that did not pair with its reason, the first
    that applies of: CALIBER_UNKNOWN (a cell's caliber is not known; the
    missing fields are named), CALIBER_MISMATCH (the cells' calibers differ;
    the differing fields are named), MISSING_SIDE (the row or its cell exists
    on one side only), NOT_COUNTED (error_msg or an unusable latency).

    Example:

        \b
        zlstore ab campaign_20261013_090000

        zlstore ab campaign_20261013_090000 --rejected
    """
    with judge_errors():
        found = store.root(root) if root is not None else None
        if as_json and not rejected:  # built by SQLite: a campaign has thousands of ranges
            click.echo(judge.ab_ranges_json(store, found))
            return
        rows = judge.ab_rejected(store, found) if rejected else judge.ab_ranges(store, found)
    if as_json:
        click.echo(output.to_json(rows))
        return
    if not rows:
        click.echo("(every row paired)" if rejected else report.no_ab_ranges(found), err=True)
        return
    click.echo(report.rejected(rows) if rejected else report.ab(rows))


@cli.command()
@click.option("--op", default=None, help="Only this row op.")
@db_option
@json_option
def noise(store, op, as_json):
    """Noise floors: per (row op, dtype, caliber), floor = max |before/after
    - 1| over the paired rows of every NO_IR_DIFF screening pair under the
    current rule (the same code measured twice), with the number of rows it
    rests on and the roots they came from. A noise floor, not a result: an
    A/B range means something only where it clears its op's floor.

    Example:

        \b
        zlstore noise --op softmax
    """
    rows = judge.noise_floors(store, op)
    if as_json:
        click.echo(output.to_json(rows))
        return
    click.echo(report.noise(rows))
    if not rows:
        click.echo("(no noise floor: no NO_IR_DIFF pair with paired rows)", err=True)


@cli.command()
@click.argument("root_a")
@click.argument("root_b")
@click.option("--rule", type=RULE_CHOICE, default=None, help="Judge under this rule (default: the current one).")
@db_option
@json_option
def compare(store, root_a, root_b, rule, as_json):
    """Two screening roots side by side: verdict and speedup range per (op,
    dtype). Only when both were measured under one and the same known
    caliber; otherwise refuses (exit status 2) and names every caliber field
    that differs, with its value in each root.

    Example:

        \b
        zlstore compare ab_rlc_20261012_101500 ab_rlc_20261014_083000
    """
    try:
        with judge_errors():
            result = judge.compare(store, root_a, root_b, rule)
    except Refusal as refusal:
        raise Refusal("refusing to compare: " + refusal.message)
    if as_json:
        click.echo(output.to_json(result["rows"]))
        return
    click.echo(report.compare(result))


@cli.command()
@click.argument("root")
@click.option("--format", "fmt", type=click.Choice(["tsv", "csv", "json"]), default="tsv", show_default=True)
@click.option("--rule", type=RULE_CHOICE, default=None, help="Judge under this rule (default: the current one).")
@db_option
def export(store, root, fmt, rule):
    """A screening root's verdict table in the harness's screen.tsv column
    order, for people and scripts that still read that file.

    Example:

        \b
        zlstore export ab_rlc_20261012_101500 --format csv > screen.csv
    """
    with judge_errors():
        rows = judge.export_rows(store, root, rule)
    if fmt == "json":
        click.echo(output.to_json(rows))
    elif fmt == "csv":
        click.echo(output.to_delimited(rows, layout.SCREEN_COLUMNS), nl=False)
    else:
        click.echo(judge.screen_tsv_text(rows), nl=False)
