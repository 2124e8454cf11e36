"""The running commands: `zlstore plan`, the `run` group (screen, campaign,
card) and the `flaggems` group, click wiring over the running modules
(runner.py, card.py, slurm.py, flaggems.py), registered on the main group
by cli.py."""

import json
import os
import sys
from typing import Any

import click

from ..show import judge, report
from ..read import layout
from .. import output
from . import plan as planmod
from ..clicommon import Fault, Refusal, db_option, emit, output_options
from ..names import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from .plan import MAX_CARDS

# The runners, Slurm and FlagGems are imported in the body of the command
# that needs them, each marked "lazy": `zlstore --help` and every other
# command start without them (tests/test_cli_help.py runs --help of each).

# The options the running commands share, each declared once: its flag, its
# type and the variable it is read from. A command names the ones it takes
# (running_options) and adds what its meaning there is: its help, its default,
# whether it is required. The help says what the option does in that command
# (a screen's --cell-timeout is per side, a campaign's per op), so it stays
# the command's.
_CARD = click.IntRange(min=0)
_SECONDS = click.FloatRange(min=0, min_open=True)
RUNNING_OPTIONS: dict[str, dict[str, Any]] = {
    "ops": {"param_decls": ("--ops",)},
    "cards": {"param_decls": ("--cards",), "type": click.IntRange(min=1, max=MAX_CARDS)},
    "rounds": {"param_decls": ("--rounds",), "type": click.IntRange(min=1)},
    "command": {"param_decls": ("--command", "command")},
    "switch": {"param_decls": ("--switch",)},
    "values": {"param_decls": ("--values",)},
    "cell_timeout": {
        "param_decls": ("--cell-timeout",),
        "envvar": "CELL_TIMEOUT",
        "show_envvar": True,
        "type": _SECONDS,
    },
    "root": {"param_decls": ("--root", "root_dir"), "type": click.Path(file_okay=False), "default": None},
    "card": {"param_decls": ("--card",), "type": _CARD},
    "backend": {
        "param_decls": ("--backend",),
        "default": None,
        "help": "Names the visible-devices variable (default: $ZL_BACKEND, else cuda).",
    },
    "poll": {
        "param_decls": ("--poll",),
        "type": click.FloatRange(min=0.05),
        "default": 0.5,
        "show_default": True,
        "help": "Seconds between looks for finished cells.",
    },
}


def running_options(**chosen):
    """A decorator adding the named RUNNING_OPTIONS, in the order given, each
    with what the command says of it (a dict of click.option's arguments, or
    True for the option as declared): running_options(switch={"required":
    True, "help": ...}, backend=True)."""

    def decorate(fn):
        for name, said in reversed(chosen.items()):
            settings = {**RUNNING_OPTIONS[name], **({} if said is True else said)}
            fn = click.option(*settings.pop("param_decls"), **settings)(fn)
        return fn

    return decorate


def plan_options(fn):
    """The options that choose and weigh a campaign's ops (plan, run campaign)."""
    fn = click.option(
        "--include-hinted",
        is_flag=True,
        help="Plan also the IR_CHANGED pairs that differ only in what the strictest rule leaves out "
        "(source locations: zlstore screen's hint), left out by default.",
    )(fn)
    fn = click.option(
        "--extra-ops", default=None, help="Ops added after the plan, each to the lightest card by weight."
    )(fn)
    return running_options(
        ops={
            "default": None,
            "help": "Ops to plan, op[:dtype] comma-separated "
            "(default: the root's IR_CHANGED pairs under the current rule).",
        },
        cards={"default": 8, "show_default": True},
        rounds={
            "default": 6,
            "show_default": True,
            "help": "Repeat rounds: an op weighs (elapsed_before + elapsed_after) x rounds.",
        },
    )(fn)


@click.command()
@click.argument("screen_root")
@plan_options
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the plan as partition.tsv (card op dtype weight_min).",
)
@db_option(read_only=True)
@output_options
def plan(store, screen_root, ops, cards, rounds, extra_ops, include_hinted, out_path, out):
    """Partition a screening root's ops across cards, longest first.

    Each op weighs its screening pair's time (elapsed_before + elapsed_after,
    from the cells, else from screen.tsv) times --rounds, and goes to the
    currently lightest card. Prints each card's ops and weight, the critical
    path, the heaviest single op (the floor no plan can beat), the ideal
    share (total / cards) and a plain hash partition's critical path. An op
    with no screening time is an error that names it. The default ops are
    the IR_CHANGED pairs, without those that differ only in what the
    strictest rule leaves out (FlagGems' loc() cache paths: a campaign on
    them measures nothing the switch changed): those are named on stderr
    and left out (--json: "hints", and "left_out" unless --include-hinted
    plans them), and so are the pairs whose IR could not be judged,
    DUPLICATE_CELL or IR_UNREAD (a warning; --json: "not_planned"). Every
    weight is in one unit: minutes from a 2-minute critical path, else
    seconds; --json and the other formats give seconds (weight_s), the
    other formats one row per planned op.

    Exit status: 0 planned; 2 the plan cannot be made (the message says
    why: an unknown root, an op without a screening time) or a bad --db.

    Example:

        \b
        zlstore plan ab_rlc_20261012_101500 --cards 8 --rounds 6 --out partition.tsv
    """
    # lazy: the note at the top
    from .runner import ISOLATE_TUNER_CACHE, hinted_ops, plan_from_store, screen_caliber_note, unjudged_ops

    try:
        the_plan, root = plan_from_store(store, screen_root, cards, rounds, ops, extra_ops, include_hinted)
    except (LookupError, ValueError) as error:
        raise Fault(str(error).strip("'\""))
    hinted = [] if ops else hinted_ops(store, root)
    left_out = [] if include_hinted else hinted
    unjudged = [] if ops else unjudged_ops(store, root)
    if out_path:
        planmod.write_partition_tsv(the_plan, out_path)
    emit(
        out,
        the_plan.rows,
        human=lambda: planmod.describe(the_plan),
        document=lambda: {
            **the_plan.as_dict(),
            "hints": [{"op": op, "dtype": dtype, "hint": hint} for op, dtype, hint in hinted],
            "left_out": [{"op": op, "dtype": dtype, "hint": hint} for op, dtype, hint in left_out],
            "not_planned": [{"op": op, "dtype": dtype, "verdict": verdict} for op, dtype, verdict in unjudged],
        },
    )
    if left_out and out.kind != "json":
        click.echo(report.left_out_hinted(left_out), err=True)
    note = screen_caliber_note(store, root, {ISOLATE_TUNER_CACHE: "1"})  # all a plan knows of a campaign's
    if note:
        click.echo(note, err=True)
    for op, dtype, hint in hinted if out.kind != "json" and include_hinted else ():
        click.echo(
            f"hint: {op}{':' + dtype if dtype else ''} {hint}; a campaign on it measures nothing "
            "the switch changed (planned: --include-hinted)",
            err=True,
        )
    for op, dtype, verdict in unjudged if out.kind != "json" else ():
        click.echo(
            f"warning: {op}{':' + dtype if dtype else ''} is {verdict}, so its IR was not judged and it is "
            f"not planned ({judge.BY_NAME[verdict].licenses}); or name it with --ops",
            err=True,
        )


@click.group()
def run():
    """Run a screening pass or a campaign, recording each cell as it ends.

    Example:

        \b
        zlstore run screen --ops topk,fft:complex64 --switch FLAGTREE_MUSA_RLC_ENHANCE --command 'bash cell.sh'
    """


@run.command("screen")
@running_options(
    ops={"required": True, "help": "op[:dtype] comma-separated; no dtype: the op's own set."},
    command={
        "required": True,
        "help": "Cell command template; {op} {dtype} {side} {out_dir} {card} {switch} {switch_value}.",
    },
    switch={"required": True, "help": "The switch under test, e.g. FLAGTREE_MUSA_RLC_ENHANCE."},
    values={
        "default": "0,1",
        "show_default": True,
        "help": "The switch's value before,after, e.g. ieee,tf32 for TRITON_F32_DEFAULT.",
    },
    cell_timeout={
        "default": 2400,
        "show_default": True,
        "help": "Seconds per side; a side that hits it is killed with its children, RC 124.",
    },
    root={"help": "The screening root to create (default: runs/screen_<timestamp>)."},
    card={"default": 0, "show_default": True},
    backend=True,
)
@db_option(create=True, writes=True)
@output_options
def run_screen(store, ops, command, switch, values, cell_timeout, root_dir, card, backend, out):
    """Screen ops: one pair each, before (the switch at the first of
    --values) then after (at the second).

    Each side runs --command with OUT_DIR (root/<op>[_<dtype>]_<side>), OP,
    DTYPE, SIDE, SWITCH, SWITCH_VALUE and the switch variable itself set;
    its stdout and stderr are appended to OUT_DIR/run.log. zlstore then writes
    the cell's cell.env (RC, ELAPSED_S, STARTED_AT, SWITCH_VALUE, the caliber
    variables of its environment) last and records it; at the end it writes
    the root's screen.tsv from the verdicts view. root.env keeps the switch
    and its two values (SWITCH_VALUES=before,after). It ends with the
    verdicts; --json gives them in a summary with the root, the switch and
    every failed side.

    Exit status: 0 every side ran cleanly; 1 some side failed or hit the
    timeout (recorded: its verdict says so); 2 it could not start: a
    caliber variable is not set (named; all seven must be), or every side
    failed (the command itself is at fault, e.g. RC 127: no such command);
    130 interrupted (the running side is killed with its children).

    Example:

        \b
        zlstore run screen --ops topk:float16,fft:complex64,rand \\
            --switch FLAGTREE_MUSA_RLC_ENHANCE --command 'bash run_cell.sh {op} {dtype}'
        zlstore run screen --ops abs:float16,mm:float32 --switch TRITON_F32_DEFAULT \\
            --values ieee,tf32 --command 'zlstore flaggems cell --flaggems ~/FlagGems'
    """
    from . import runner  # lazy: the note at the top

    try:
        config = runner.screen_config(
            ops=ops,
            command=command,
            switch=switch,
            cell_timeout=cell_timeout,
            root_dir=root_dir,
            card=card,
            backend=backend,
            values=values,
        )
        result = runner.run_screen(store, config, report=lambda line: click.echo(output.for_terminal(line), err=True))
    except runner.CaliberMissing as error:
        raise Refusal(str(error))
    except (runner.RunError, ValueError) as error:
        raise Fault(str(error))
    except KeyboardInterrupt:
        click.echo("interrupted: the running side was killed; finished cells are recorded", err=True)
        sys.exit(EXIT_INTERRUPTED)
    rows = judge.export_rows(store, result["root"])
    emit(
        out,
        rows,
        columns=layout.SCREEN_COLUMNS,
        human=lambda: report.run_screen(result, rows),
        document={**result, "verdicts": rows},
    )
    failed = len(result["failed"])
    sys.exit(EXIT_OK if not failed else EXIT_USAGE if failed == result["sides"] else EXIT_PROBLEMS)


def slurm_options(fn):
    """What each Slurm task asks for, passed through to sbatch (run campaign --slurm)."""
    for option in reversed(
        (
            click.option(
                "--slurm",
                is_flag=True,
                help="Run the cards as one Slurm job array, one task a card; this process records the cells.",
            ),
            click.option("--partition", default=None, help="Slurm partition for the tasks."),
            click.option(
                "--gres",
                default=None,
                help="Per task, e.g. gpu:1; 'none' for none (default: gpu:1 where the partition has GPUs "
                "as a GRES, else none).",
            ),
            click.option("--time", "time_limit", default=None, help="Slurm time limit per task, e.g. 12:00:00."),
            click.option("--account", default=None, help="Slurm account to charge."),
            click.option(
                "--sbatch-arg",
                "sbatch_args",
                multiple=True,
                metavar="ARG",
                help="Any other sbatch option, passed as written (repeatable), e.g. --sbatch-arg=--qos=high.",
            ),
        )
    ):
        fn = option(fn)
    return fn


@run.command("campaign")
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A partition.tsv to run (else the plan is computed as `zlstore plan` does).",
)
@click.option("--screen-root", default=None, help="The screening root to plan from (with --ops etc.).")
@plan_options
@running_options(
    command={
        "default": None,
        "help": "Op command template; {op} {dtype} {card} {rounds}, and {round} with --until-decided. "
        "Required unless --resume.",
    }
)
@click.option(
    "--until-decided",
    is_flag=True,
    help="Run each op a round at a time and stop it once every range of it is decided (faster, slower or "
    "no change under the anytime-valid rule), after at most --rounds; the ops that go on are re-planned "
    "over the cards by their measured times after each round. The command runs the round it is given "
    "({round}, $ROUND): docs/campaigns.md.",
)
@click.option(
    "--min-rounds",
    type=click.IntRange(min=1),
    default=None,
    help="With --until-decided: the rounds every op runs before it may stop (default 3).",
)
@running_options(
    root={"help": "The campaign root (default: runs/campaign_<timestamp>); with --resume, the one to continue."}
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue --root: skip ops whose 2 x rounds cells are all recorded; run the others again "
    "from the start, their earlier cells kept but superseded.",
)
@running_options(
    cell_timeout={
        "default": None,
        "help": "CELL_TIMEOUT for the op command (default 2400, or campaign.env's on --resume); an op is "
        "killed after (2 x rounds + 1) x this.",
    },
    switch={"default": None, "help": "For campaign.env (default: the screening root's)."},
    backend=True,
)
@click.option(
    "--devices", default=None, help="Device ids for cards 0..N-1, comma-separated (default: the card number)."
)
@slurm_options
@running_options(poll=True)
@click.option(
    "--status-every",
    type=click.FloatRange(min=0.1),
    default=30,
    show_default=True,
    help="Seconds between status tables when stderr is not a terminal.",
)
@db_option(create=True, writes=True)
@output_options
def run_campaign(
    store,
    plan_path,
    screen_root,
    ops,
    cards,
    rounds,
    extra_ops,
    include_hinted,
    command,
    until_decided,
    min_rounds,
    root_dir,
    resume,
    cell_timeout,
    switch,
    backend,
    devices,
    slurm,
    partition,
    gres,
    time_limit,
    account,
    sbatch_args,
    poll,
    status_every,
    out,
):
    """Run a plan: one `zlstore run card` per card, ops in turn within a card.

    Each op runs --command with AB_ROOT = <root>/card<N>, ROUNDS,
    CELL_TIMEOUT, ZL_ISOLATE_TUNER_CACHE=1 (forced), the caliber variables
    (all seven must be set: a missing one is named before anything runs),
    the card made visible through the backend's variable
    (CUDA_VISIBLE_DEVICES, MUSA_VISIBLE_DEVICES, ...) and ZLSTORE_DB; every
    cell is recorded as soon as its cell.env has RC. An op still running
    after (2 x rounds + 1) x CELL_TIMEOUT is killed with its children, its
    unfinished cells recorded with RC 124 (TRUNCATED), and the card goes
    on. The root gets campaign.env and partition.tsv; output goes to
    <root>/logs/. A live display shows each card's state, current op, ops
    done and left, elapsed time and an estimate from the weights. A failed
    op is logged (the ingest_problems table) and the card goes on. Ctrl-C
    stops every card and its commands and keeps every recorded cell.

    --slurm submits one job array instead, one task a card (each asking for
    --partition, --gres, --time, --account and any --sbatch-arg), on the
    shared runs tree; the display shows each task as Slurm reports it
    (pending, running, done, failed, cancelled, timeout) with its job id,
    this process records the cells (no database is written from another
    host), Ctrl-C cancels the array (scancel), and a task Slurm kills is
    named with its reason. --resume runs only the cards with ops left.

    --until-decided makes --rounds the most an op runs: each op runs a
    round at a time (the command gets {round} and ROUND, and runs that
    round only), and after each round an op stops once every range of it
    is decided, after at least --min-rounds; the rest are re-planned over
    the cards, longest first by their measured times. After each round it
    says how many ops are decided and go on, and the cell-hours the
    decided ops saved. On Slurm each task decides its own ops. --resume
    keeps what is decided.

    It ends with the totals and what to run next; --json gives them with
    each card's (the other formats: a row per card; until decided, --json
    adds each stopped op's round and reason).

    Exit status: 0 every op ran cleanly; 1 some op failed or a task was
    killed (the other cards went on); 2 it could not start (the message
    says why: a caliber variable missing, a bad plan or option); 130
    interrupted (continue with the --resume line it prints).

    Example:

        \b
        zlstore plan ab_rlc_20261012_101500 --cards 8 --rounds 6 --out partition.tsv
        zlstore run campaign --plan partition.tsv --rounds 6 --command 'bash ab_repeat.sh {op} {dtype}'
        zlstore run campaign --slurm --partition gpu --time 12:00:00 --plan partition.tsv --command 'bash ab_repeat.sh {op} {dtype}'
        zlstore run campaign --screen-root screen_h200 --cards 2 --rounds 12 --until-decided --command 'zlstore flaggems repeat {op} {dtype}'
    """
    from . import runner  # lazy: the note at the top
    from .slurm import SlurmError, SlurmOptions  # lazy: the note at the top

    options = None
    if slurm and devices:
        raise click.UsageError(
            "--devices goes without --slurm: on Slurm each task gets its device from the scheduler (--gres)"
        )
    if slurm:
        options = SlurmOptions(
            partition=partition, gres=gres or "auto", time=time_limit, account=account, sbatch_args=list(sbatch_args)
        )
    elif partition or gres or time_limit or account or sbatch_args:
        raise click.UsageError("--partition, --gres, --time, --account and --sbatch-arg go with --slurm")
    try:
        config = runner.campaign_config(
            store,
            plan_path=plan_path,
            screen_root=screen_root,
            ops=ops,
            cards=cards,
            rounds=rounds,
            extra_ops=extra_ops,
            command=command,
            root_dir=root_dir,
            resume=resume,
            switch=switch,
            backend=backend,
            devices=devices,
            poll_s=poll,
            status_every_s=status_every,
            cell_timeout=cell_timeout,
            slurm=options,
            include_hinted=include_hinted,
            until_decided=until_decided,
            min_rounds=min_rounds,
        )
        if screen_root and not (plan_path or resume or ops or include_hinted):  # planned here: as plan says it
            left_out = runner.hinted_ops(store, store.root(screen_root))
            if left_out:
                click.echo(report.left_out_hinted(left_out), err=True)
        result = runner.run_campaign(store, config, stream=sys.stderr)
    except runner.CaliberMissing as error:
        raise Refusal(str(error))
    except (runner.RunError, SlurmError, LookupError, ValueError) as error:
        raise Fault(str(error).strip("'\""))
    summary = {**result.as_dict(), **report.campaign_next(result)}
    emit(out, summary["cards"], human=lambda: report.campaign(result), document=summary)
    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_PROBLEMS if result.failed else EXIT_OK)


@run.command("card")
@click.argument("root", type=click.Path(file_okay=False, exists=True))
@running_options(
    card={
        "default": None,
        "envvar": "SLURM_ARRAY_TASK_ID",
        "help": "The card to run (default: $SLURM_ARRAY_TASK_ID).",
    },
    ops={"default": None, "help": "Only these of the card's ops, op[:dtype] comma-separated (default: all)."},
)
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Record each finished cell into this database (default: record nothing; the submitter does).",
)
@click.option(
    "--device",
    default=None,
    help="The id for the visible-devices variable (default: the card number); 'inherit' keeps what the scheduler set.",
)
@click.option(
    "--run-id", default=None, help="Written into the status file, so a watcher tells this run from an earlier one."
)
@click.option(
    "--step",
    type=click.IntRange(min=1),
    default=None,
    help="An --until-decided campaign's step N: the ops and rounds of plans/step<N>.tsv, one round each.",
)
@running_options(poll=True)
def run_card(root, card, ops, db_path, device, run_id, poll, step):
    """Run one card of a campaign root: its ops from partition.tsv, in turn.

    What `run campaign` starts once per card, locally or as a Slurm array
    task. The settings come from the root's campaign.env (rounds, command,
    CELL_TIMEOUT, switch, and the caliber every card measures under). Each
    event (op started, cells finished, op done, finished, interrupted) is
    appended to <root>/status/card<N>.json, replaced whole each time, and
    printed as a JSON line. With --db each finished cell is recorded there;
    without, nothing is written but the tree (on Slurm the submitting
    process records). In an --until-decided campaign without --step (a
    Slurm task) the card runs its ops a round at a time and decides them
    itself, from --db or a store of its own in a temporary directory.

    Exit status: 0 every op ran cleanly; 1 some op failed; 2 usage (no such
    card, an op not in its plan); 130 interrupted (SIGINT, SIGTERM: scancel
    or a time limit kills the op's process group first).

    Example:

        \b
        zlstore run card runs/campaign_20261013_090000 --card 3 --db zlstore.db
    """
    from . import card as cardmod  # lazy: the note at the top

    if card is None:
        raise click.UsageError("--card is required outside a Slurm array task")
    try:
        status = cardmod.run_card(
            root, card, ops=ops, db=db_path, run_id=run_id, device=device, poll_s=poll, out=sys.stdout, step=step
        )
    except (cardmod.CardError, ValueError) as error:
        raise click.UsageError(str(error))
    sys.exit(status)


# -- FlagGems' own benchmark as the cell command (flaggems.py) ----------------------


@click.group()
def flaggems():
    """Cell commands that run FlagGems' own benchmark, for --command.

    `cell` is one side of `zlstore run screen`; `repeat` is one op of
    `zlstore run campaign`. Each cell runs `pytest benchmark/test_<op>.py -m
    <op> --level $BENCH_LEVEL --record log` in its own directory, with its
    own TRITON_CACHE_DIR and FLAGGEMS_CACHE_DIR and the switch at its side's
    value; run.log gets the output and the records of FlagGems' result*.log,
    index.tsv every .ttgir compiled.

    Example:

        \b
        export BENCH_LEVEL=core
        zlstore run screen --ops abs:float16,mm:float32 --switch TRITON_F32_DEFAULT --values ieee,tf32 \\
            --command 'zlstore flaggems cell --flaggems ~/FlagGems -- --warmup 25 --iter 100'
    """


def flaggems_options(fn):
    """Where FlagGems is, how to run it, and the pytest options passed through."""
    for option in reversed(
        (
            click.option(
                "--flaggems",
                "checkout",
                envvar="FLAGGEMS_DIR",
                show_envvar=True,
                required=True,
                type=click.Path(file_okay=False, exists=True),
                help="The FlagGems checkout.",
            ),
            click.option(
                "--python",
                envvar="FLAGGEMS_PYTHON",
                show_envvar=True,
                default="python3",
                show_default=True,
                help="The Python that has flag_gems, torch and pytest.",
            ),
            click.option(
                "--tests",
                default=None,
                metavar="PATH",
                help="Test file or directory in the checkout, {op} replaced "
                "(default: benchmark/test_{op}.py where it exists, else benchmark).",
            ),
            click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED),
        )
    ):
        fn = option(fn)
    return fn


def flaggems_benchmark(checkout, python, tests, pytest_args):
    from . import flaggems as fg  # lazy: the note at the top

    try:
        return fg.Benchmark(checkout, python=python, pytest_args=tuple(pytest_args), tests=tests)
    except fg.FlagGemsError as error:
        raise click.UsageError(str(error))


def flaggems_probe_only(bench):
    """What run screen and run campaign ask before their first cell
    (ZLSTORE_FLAGGEMS_PROBE_ONLY set): probe, print what was found, run nothing."""
    from . import flaggems as fg  # lazy: the note at the top

    if not os.environ.get(fg.PROBE_ONLY_VAR):
        return
    try:
        click.echo(fg.probed_value(bench, fg.probe(bench)))
    except fg.CannotStart as error:
        raise Fault(str(error))
    sys.exit(EXIT_OK)


@flaggems.command("probe", context_settings={"ignore_unknown_options": True})
@flaggems_options
def flaggems_probe(checkout, python, tests, pytest_args):
    """Can the benchmark start? What it would run on.

    Runs --python once to import the benchmark's conftest and flag_gems as
    pytest would (the checkout and pytest.ini's pythonpath on sys.path) and
    prints, as JSON, what it found: gpu, gpu_count, runtime, torch, triton,
    flag_gems, flaggems_commit, triton_commit, python, driver (null where
    unknown). `cell` and `repeat` do this before their first cell, and run
    screen / run campaign before theirs.

    Exit status: 0 it can start; 2 it cannot (the module missing named).

    Example:

        \b
        zlstore flaggems probe --flaggems ~/FlagGems --python ~/venv/bin/python
    """
    from . import flaggems as fg  # lazy: the note at the top

    bench = flaggems_benchmark(checkout, python, tests, pytest_args)
    try:
        found = fg.probe(bench)
    except fg.CannotStart as error:
        raise Fault(str(error))
    click.echo(json.dumps(found, indent=2))


@flaggems.command("cell", context_settings={"ignore_unknown_options": True})
@flaggems_options
def flaggems_cell(checkout, python, tests, pytest_args):
    """One side of a screening pair: what `zlstore run screen` runs.

    Reads what run screen sets (OUT_DIR, OP, DTYPE, SWITCH, SWITCH_VALUE,
    CELL_TIMEOUT) and BENCH_LEVEL (FlagGems' --level and a caliber field:
    required). PYTEST_ARGS (after --) go to pytest; -m, --level, --record
    and --dtypes are this command's. The benchmark is killed with its
    process group a little before CELL_TIMEOUT, so that its records and
    index.tsv are written; run screen writes cell.env.

    First it checks that --python can import the benchmark's conftest and
    flag_gems (`zlstore flaggems probe`): where not, exit status 2, naming
    the module missing. Exit status: the benchmark's (pytest's); 124 killed
    at CELL_TIMEOUT; 2 usage error or FlagGems cannot start (nothing run);
    130 interrupted.

    Example:

        \b
        zlstore run screen --ops softmax:float32 --switch TRITON_F32_DEFAULT --values ieee,tf32 \\
            --command 'zlstore flaggems cell --flaggems ~/FlagGems -- --warmup 25 --iter 100'
    """
    from . import flaggems as fg  # lazy: the note at the top

    bench = flaggems_benchmark(checkout, python, tests, pytest_args)
    flaggems_probe_only(bench)
    try:
        side = fg.screen_side(os.environ)
        run = fg.run_screen_side(bench, side)
    except fg.CannotStart as error:
        raise Fault(str(error))
    except fg.FlagGemsError as error:
        raise click.UsageError(str(error))
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(run.rc)


@flaggems.command("repeat", context_settings={"ignore_unknown_options": True})
@click.argument("op")
@click.argument("dtype")
@click.option(
    "--ab-root",
    envvar="AB_ROOT",
    show_envvar=True,
    required=True,
    type=click.Path(file_okay=False),
    help="Where the repeat directory (ab_<timestamp>) goes; run campaign sets it per card.",
)
@running_options(
    rounds={"envvar": "ROUNDS", "show_envvar": True, "default": 6, "show_default": True},
    switch={"envvar": "SWITCH", "show_envvar": True, "required": True, "help": "The switch under test."},
    values={
        "envvar": "SWITCH_VALUES",
        "show_envvar": True,
        "default": None,
        "help": "The switch's value before,after, e.g. ieee,tf32 "
        "(default: the values the campaign's screening root ran, else 0,1).",
    },
    cell_timeout={
        "default": 2400,
        "show_default": True,
        "help": "Seconds per cell; a cell that hits it is killed with its process group, RC 124.",
    },
)
@click.option(
    "--round",
    "only_round",
    envvar="ROUND",
    show_envvar=True,
    type=click.IntRange(min=1),
    default=None,
    help="Run this round only, into r<N> (what an --until-decided campaign asks, through ROUND).",
)
@running_options(card={"envvar": "CARD", "show_envvar": True, "default": 0, "show_default": True})
@flaggems_options
@output_options
def flaggems_repeat(
    op,
    dtype,
    ab_root,
    rounds,
    switch,
    values,
    cell_timeout,
    only_round,
    card,
    checkout,
    python,
    tests,
    pytest_args,
    out,
):
    """Every round of one op: what `zlstore run campaign` runs per op.

    Writes <AB_ROOT>/ab_<timestamp>/OP/r<N>/<side>/ for N in 1..ROUNDS
    (with --round N, or ROUND=N as an --until-decided campaign sets it,
    round N alone), before then after, each cell with its run.log, index.tsv and cell.env
    (the caliber variables of the environment, RC last). DTYPE '' is the
    op's own set of dtypes. BENCH_LEVEL is required (FlagGems' --level). A
    failed or killed cell does not stop the rounds. Progress goes to
    stderr; --json (and the other formats) print the cells.

    First it checks that --python can import the benchmark's conftest and
    flag_gems (`zlstore flaggems probe`). Exit status: 0 every cell RC 0;
    1 some cell failed or was killed; 2 usage error or FlagGems cannot
    start, the module missing named (nothing run); 130 interrupted (the
    running cell has no cell.env: a resumed campaign runs the op again).

    Example:

        \b
        zlstore run campaign --screen-root screen_h200 --cards 2 --rounds 3 \\
            --command 'zlstore flaggems repeat {op} {dtype} --values ieee,tf32 --flaggems ~/FlagGems'
    """
    from . import flaggems as fg  # lazy: the note at the top

    bench = flaggems_benchmark(checkout, python, tests, pytest_args)
    flaggems_probe_only(bench)
    if dtype.startswith("-"):
        raise click.UsageError(f"DTYPE {dtype!r}: name the dtype before the pytest options ('' for the op's own set)")
    try:
        before_after = fg.repeat_values(values, os.environ)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--values")

    def report(run):
        how = f"killed at {cell_timeout:g} s, RC {run.rc}" if run.timed_out else f"RC {run.rc}"
        click.echo(
            f"{op}{':' + dtype if dtype else ''} r{run.round} {run.side} ({switch}={run.switch_value}): "
            f"{how}, {run.elapsed_s:.1f} s, {run.records} records, {run.kernels} kernels",
            err=True,
        )

    try:
        runs = fg.repeat(
            bench,
            ab_root,
            op,
            dtype,
            rounds=rounds,
            switch=switch,
            values=before_after,
            cell_timeout=cell_timeout,
            card=card,
            warn=lambda text: click.echo(output.for_terminal(text), err=True),
            report=report,
            only_round=only_round,
        )
    except fg.CannotStart as error:
        raise Fault(str(error))
    except fg.FlagGemsError as error:
        raise click.UsageError(str(error))
    except KeyboardInterrupt:
        click.echo("interrupted: the running cell was killed and has no cell.env", err=True)
        sys.exit(EXIT_INTERRUPTED)
    emit(out, [run.as_dict() for run in runs], human=lambda: "")  # people read the progress on stderr
    sys.exit(EXIT_OK if all(run.rc == 0 for run in runs) else EXIT_PROBLEMS)
