"""Running a screening pass and a campaign, writing into the store as each
cell ends.

A screen runs one pair per op, before then after, each side one process
capped by CELL_TIMEOUT; zlstore writes the cell's cell.env last and records
it. A campaign runs a plan: one `zlstore run card` per card (card.py), ops
one after another within a card, each op the user's command with the card's
own AB_ROOT; locally each card records its cells as their cell.env gets RC,
on Slurm (slurm.py) this process records them from the shared tree. Every
command runs in its own process group, so a timeout or a Ctrl-C kills it
with its children. A campaign that stops when decided (adaptive.py) runs
locally in steps, one round of each op that goes on, re-planned between
them by measured times; on Slurm each card decides its own ops."""

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, IO, List, Optional, Sequence, Tuple, Union

from . import adaptive, flaggems
from .. import caliber, provenance
from ..store import derive
from ..show import judge
from ..read import layout
from . import plan as planmod
from .harness import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_SWITCH_VALUES,
    caliber_items,
    env_text,
    fill,
    local_now,
    num,
    switch_values,
    timestamp,
    write_atomic,
    write_cell_env,
)
from ..names import EXIT_INTERRUPTED, TIMEOUT_RC
from ..db import now as utc_now
from ..db import write_transaction
from ..store.macros import statement
from .display import CardState, Display
from .plan import Op, Plan, PlanError
from .card import Recorder, StatusReader, Task, op_spec, read_command, still_running
from .procs import KILL_GRACE_S, signal_group, group_alive, interrupts, kill_group, shell_rc, start_group
from .slurm import SlurmLauncher, SlurmOptions, saved_options
from ..store.store import default_db_path

DEFAULT_ROUNDS = 6

# The environment variable that makes one card visible, per backend: the one place.
VISIBLE_DEVICES = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "musa": "MUSA_VISIBLE_DEVICES",
    "rocm": "HIP_VISIBLE_DEVICES",
    "hip": "HIP_VISIBLE_DEVICES",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
    "mlu": "MLU_VISIBLE_DEVICES",
    "xpu": "ZE_AFFINITY_MASK",
}


class RunError(Exception):
    """A run cannot start as asked."""


def _make_root(root: Path):
    """The root's directory, or RunError saying why it cannot be made."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"cannot create the root {root}: {error.strerror or error}") from None


def visible_devices_var(backend: str) -> str:
    try:
        return VISIBLE_DEVICES[backend.strip().lower()]
    except KeyError:
        raise RunError(f"unknown backend {backend!r}; known: {', '.join(sorted(VISIBLE_DEVICES))}") from None


def default_backend() -> str:
    return (os.environ.get("ZL_BACKEND") or "cuda").strip().lower()


# -- weights from the store (plan.py stays pure) -----------------------------


def screen_pairs(store, screen_root: str) -> Tuple[dict, Dict[Tuple[str, str], dict]]:
    """A screening root and its pairs: (op, dtype) -> elapsed_before/after, from
    the cells, falling back to the values screen.tsv recorded."""
    root = store.root(screen_root)
    if root["kind"] != "screen":
        raise PlanError(f"{root['name']} is a {root['kind']} root, not a screening root")
    pairs: Dict[Tuple[str, str], dict] = {}
    for op, dtype, before, after in store.conn.execute(
        """SELECT op, dtype, elapsed_before, elapsed_after FROM recorded_verdicts
           WHERE root_id = ? AND file = 'screen.tsv' ORDER BY line""",
        (root["id"],),
    ):
        pairs[(op, dtype or "")] = {"before": before, "after": after}
    for op, dtype, side, elapsed in store.conn.execute(
        """SELECT op, COALESCE(dtype, ''), side, elapsed_s FROM cells
           WHERE root_id = ? AND op IS NOT NULL AND side IS NOT NULL ORDER BY id""",
        (root["id"],),
    ):
        pair = pairs.setdefault((op, dtype), {"before": None, "after": None})
        if elapsed is not None:
            pair[side] = elapsed
    return root, pairs


# (op, dtype[, column]) of a screening root's pairs under the current rule
# (view verdicts) where a condition holds, in op order.
_PAIRS = "SELECT op, COALESCE(dtype, ''){column} FROM verdicts WHERE root_id = ? AND {where} ORDER BY op, dtype"
_IR_CHANGED = statement("runner.ir_changed_ops", _PAIRS.format(column="", where="verdict = [[verdict IR_CHANGED]]"))
_IR_CHANGED_UNHINTED = statement(
    "runner.ir_changed_unhinted_ops",
    _PAIRS.format(column="", where="verdict = [[verdict IR_CHANGED]] AND hint IS NULL"),
)
_HINTED = statement("runner.hinted_ops", _PAIRS.format(column=", hint", where="hint IS NOT NULL"))
_UNJUDGED = statement(
    "runner.unjudged_ops",
    _PAIRS.format(column=", verdict", where="verdict IN ([[verdict DUPLICATE_CELL]], [[verdict IR_UNREAD]])"),
)


def _pairs(store, root: dict, sql: str) -> List[tuple]:
    return [tuple(row) for row in store.conn.execute(sql, (root["id"],)).fetchall()]


def ir_changed_ops(store, root: dict, include_hinted: bool = False) -> List[Tuple[str, str]]:
    """The pairs the verdicts view judges IR_CHANGED under the current rule;
    without include_hinted, not those that differ only in what the strictest
    rule leaves out (hinted_ops): on real runs FlagGems' loc() cache paths
    make most generated kernels such, and a campaign on them measures
    nothing the switch changed."""
    return _pairs(store, root, _IR_CHANGED if include_hinted else _IR_CHANGED_UNHINTED)


def hinted_ops(store, root: dict) -> List[Tuple[str, str, str]]:
    """The IR_CHANGED pairs of a screening root that carry a hint under the
    current rule (verdicts.hint): (op, dtype, hint). A campaign on them would
    measure nothing the switch changed."""
    return _pairs(store, root, _HINTED)


def unjudged_ops(store, root: dict) -> List[Tuple[str, str, str]]:
    """The pairs of a screening root whose IR verdict could not be made
    (DUPLICATE_CELL, IR_UNREAD): (op, dtype, verdict). Their IR may have
    changed; a plan of the IR_CHANGED pairs leaves them out, and says so."""
    return _pairs(store, root, _UNJUDGED)


def resolve_ops(pairs: Dict[Tuple[str, str], dict], specs, root_name: str) -> List[Tuple[str, str]]:
    """`op` or `op:dtype` specs against the root's pairs; a bare op needs the
    root to have exactly one pair for it."""
    chosen = []
    for op, dtype in specs:
        if dtype is not None:
            if (op, dtype) not in pairs:
                raise PlanError(f"op {op}:{dtype} has no screening pair in {root_name}" + _known(pairs, op))
            chosen.append((op, dtype))
            continue
        matches = sorted(d for (o, d) in pairs if o == op)
        if len(matches) != 1:
            what = (
                "no screening pair"
                if not matches
                else f"{len(matches)} pairs ({', '.join(op + ':' + d for d in matches)}); name the dtype"
            )
            raise PlanError(f"op {op} has {what} in {root_name}" + (_known(pairs, op) if not matches else ""))
        chosen.append((op, matches[0]))
    return chosen


def _known(pairs, op) -> str:
    labels = sorted(f"{o}:{d}" if d else o for (o, d) in pairs)
    return "; the root has: " + (", ".join(labels) if labels else "no pairs")


def weighted_ops(pairs, chosen, rounds: int, root_name: str) -> List[Op]:
    """Each chosen pair with its weight: (elapsed_before + elapsed_after) x rounds.
    A pair missing either time is an error that names it, never a weight of zero."""
    ops = []
    for op, dtype in chosen:
        pair = pairs.get((op, dtype), {})
        missing = [s for s in ("before", "after") if not (pair.get(s) or 0) > 0]
        if missing:
            label = f"{op}:{dtype}" if dtype else op
            raise PlanError(
                f"op {label} has no screening time ({' and '.join('elapsed_' + s for s in missing)} "
                f"unknown in {root_name}); it cannot be weighed"
            )
        ops.append(Op(op, dtype, (pair["before"] + pair["after"]) * rounds))
    return ops


def plan_from_store(
    store,
    screen_root: str,
    cards: int,
    rounds: int,
    ops: Optional[str] = None,
    extra_ops: Optional[str] = None,
    include_hinted: bool = False,
) -> Tuple[Plan, dict]:
    """The longest-first plan for a screening root's ops (default: its
    IR_CHANGED pairs under the current rule, without those that differ only
    in what the strictest rule leaves out unless include_hinted). Returns
    (plan, root row)."""
    if rounds < 1:
        raise PlanError(f"--rounds must be at least 1, not {rounds}")
    root, pairs = screen_pairs(store, screen_root)
    if ops:
        chosen = resolve_ops(pairs, planmod.parse_op_spec(ops), root["name"])
    else:
        chosen = ir_changed_ops(store, root, include_hinted)
        if not chosen and ir_changed_ops(store, root, include_hinted=True):
            raise PlanError(
                f"every IR_CHANGED pair of {root['name']} differs only in what the strictest rule "
                f"leaves out (zlstore screen's hints): a campaign measures nothing the switch changed "
                f"there; --include-hinted plans them, or name ops with --ops"
            )
        if not chosen:
            raise PlanError(f"{root['name']} has no IR_CHANGED pair under the current rule; name ops with --ops")
    extra = resolve_ops(pairs, planmod.parse_op_spec(extra_ops), root["name"]) if extra_ops else []
    plan = planmod.make_plan(
        weighted_ops(pairs, chosen, rounds, root["name"]), cards, weighted_ops(pairs, extra, rounds, root["name"])
    )
    return plan, root


# == screen ===================================================================


@dataclass
class ScreenConfig:
    root: Union[str, Path]  # as given (the command line's is a str); read through Path()
    ops: List[Tuple[str, str]]
    command: str
    switch: str
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    card: int = 0
    backend: str = field(default_factory=default_backend)
    device: Optional[str] = None
    grace: float = KILL_GRACE_S
    values: Tuple[str, str] = DEFAULT_SWITCH_VALUES  # the switch's value before, after


@dataclass
class SideResult:
    op: str
    dtype: str
    side: str
    rc: int
    elapsed_s: float
    timed_out: bool
    path: Path


def run_screen(store, config: ScreenConfig, report: Callable[[str], None] = lambda line: None) -> dict:
    """The screening pass: for each op one pair, before then after, each side
    capped by the cell timeout; each cell recorded as it ends; the root's
    screen.tsv written from the verdicts view at the end."""
    root = Path(config.root).resolve()
    if root.exists() and any(root.iterdir()):
        raise RunError(f"{root} exists and is not empty: a screening root is written once; choose another --root")
    if not config.ops:
        raise RunError("no ops to screen")
    visible = visible_devices_var(config.backend)
    environment = provenance.capture(str(config.device if config.device is not None else config.card))
    probed = _screen_preflight(store, config, root, visible, environment)
    _make_root(root)
    started = local_now()
    write_atomic(
        root / layout.ROOT_ENV,
        env_text(
            [
                ("KIND", "screen"),
                ("SWITCH", config.switch),
                ("SWITCH_VALUES", ",".join(config.values)),
                ("HOST", socket.gethostname()),
                ("STARTED_AT", started),
                ("CELL_TIMEOUT", num(config.cell_timeout)),
            ]
            + caliber_items(dict(os.environ))
        ),
    )
    results: List[SideResult] = []
    for op, dtype in config.ops:
        for side, value in zip(layout.SIDES, config.values):
            with interrupts():
                result = _screen_side(store, config, root, op, dtype, side, value, visible, environment, probed)
            results.append(result)
            label = op_label(op, dtype)
            how = (
                f"killed at the {num(config.cell_timeout)} s timeout, RC {result.rc}"
                if result.timed_out
                else f"RC {result.rc}"
            )
            report(f"{label} {side}: {how}, {result.elapsed_s:.1f} s, recorded")
    screen_tsv = judge.write_screen_tsv(store, str(root))
    store.ingest_summary([root], command="run screen")  # recorded_verdicts: the file just written
    return {
        "root": str(root),
        "sides": len(results),
        "switch": config.switch,
        "switch_values": list(config.values),
        "flaggems": json.loads(probed)["env"] if probed else None,
        "screen_tsv": str(screen_tsv or root / layout.SCREEN_TSV),
        "timed_out": [f"{r.op}:{r.dtype}:{r.side}" for r in results if r.timed_out],
        "failed": [
            {
                "label": op_label(r.op, r.dtype),
                "side": r.side,
                "rc": r.rc,
                "timed_out": r.timed_out,
                "log": str(r.path / layout.RUN_LOG),
            }
            for r in results
            if r.rc != 0 or r.timed_out
        ],
    }


def screen_config(
    *,
    ops: str,
    command: str,
    switch: str,
    cell_timeout: float = DEFAULT_CELL_TIMEOUT,
    root_dir: Optional[str] = None,
    card: int = 0,
    backend: Optional[str] = None,
    values: str = ",".join(DEFAULT_SWITCH_VALUES),
) -> ScreenConfig:
    """A screening pass's config from the command's options: ops and switch
    values parsed (ValueError names a bad spec), root and backend defaulted,
    and an unknown backend or a caliber variable missing from the
    environment refused (RunError, CaliberMissing) before anything is
    written."""
    pairs = [(op, dtype or "") for op, dtype in planmod.parse_op_spec(ops)]
    config = ScreenConfig(
        root=root_dir or f"runs/screen_{timestamp()}",
        ops=pairs,
        command=command,
        switch=switch,
        cell_timeout=cell_timeout,
        card=card,
        backend=backend or default_backend(),
        values=switch_values(values),
    )
    visible_devices_var(config.backend)
    require_screen_caliber(dict(os.environ))
    return config


def _num(value: float) -> str:
    return format(value, "g")


def _side_env(
    store,
    config: ScreenConfig,
    out: Path,
    op: str,
    dtype: str,
    side: str,
    value: str,
    visible: str,
    environment: Dict[str, str],
) -> Tuple[Dict[str, str], str]:
    """A side's environment (what the runner saw exported as ENV_*) and its command, filled in."""
    env = dict(os.environ)
    env.update(provenance.exported(environment))
    env.update(
        {
            "OUT_DIR": str(out),
            "OP": op,
            "DTYPE": dtype,
            "SIDE": side,
            "ROUND": "0",
            "CARD": str(config.card),
            "SWITCH": config.switch,
            "SWITCH_VALUE": value,
            config.switch: value,
            "CELL_TIMEOUT": num(config.cell_timeout),
            visible: str(config.device if config.device is not None else config.card),
            "ZLSTORE_DB": str(Path(store.path).resolve()),
        }
    )
    command = fill(
        config.command,
        {
            "op": op,
            "dtype": dtype,
            "side": side,
            "out_dir": out,
            "card": config.card,
            "switch": config.switch,
            "switch_value": value,
        },
    )
    return env, command


def _screen_preflight(
    store, config: ScreenConfig, root: Path, visible: str, environment: Dict[str, str]
) -> Optional[str]:
    """Before the first side, where --command runs `zlstore flaggems`: can
    FlagGems start (flaggems.preflight)? RunError names what is missing,
    before anything is written; else the probe, handed to every side."""
    op, dtype = config.ops[0]
    side, value = layout.SIDES[0], config.values[0]
    env, command = _side_env(
        store, config, root / _cell_name(op, dtype, side), op, dtype, side, value, visible, environment
    )
    try:
        return flaggems.preflight(command, env, timeout=min(config.cell_timeout, flaggems.PROBE_TIMEOUT_S))
    except flaggems.CannotStart as error:
        raise RunError(str(error)) from None


def _screen_side(
    store,
    config: ScreenConfig,
    root: Path,
    op: str,
    dtype: str,
    side: str,
    value: str,
    visible: str,
    environment: Dict[str, str],
    probed: Optional[str] = None,
) -> SideResult:
    out = root / _cell_name(op, dtype, side)
    out.mkdir(parents=True)
    env, command = _side_env(store, config, out, op, dtype, side, value, visible, environment)
    if probed:
        env[flaggems.PROBED_VAR] = probed
    started_at, t0 = local_now(), time.monotonic()
    timed_out = False
    with open(out / layout.RUN_LOG, "ab") as log:
        proc = start_group(command, env, log)  # in the caller's directory: relative paths in --command work
        try:
            proc.wait(timeout=config.cell_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc, config.grace)
        except BaseException:
            kill_group(proc, config.grace)
            raise
        else:
            if group_alive(proc.pid):  # stragglers the command left behind would hold the card
                kill_group(proc, config.grace)
    elapsed = time.monotonic() - t0
    rc = TIMEOUT_RC if timed_out else shell_rc(proc.returncode)
    write_cell_env(
        out,
        op=op,
        dtype=dtype,
        side=side,
        round_=0,
        card=config.card,
        started_at=started_at,
        switch=config.switch,
        switch_value=value,
        cell_timeout=config.cell_timeout,
        env=env,
        elapsed_s=elapsed,
        rc=rc,
        environment={**environment, **provenance.command_file(out)},
    )
    store.record([out])
    return SideResult(op, dtype, side, rc, elapsed, timed_out, out)


def _cell_name(op: str, dtype: str, side: str) -> str:
    return f"{op}_{dtype}_{side}" if dtype else f"{op}_{side}"


# == campaign =================================================================
#
# A campaign runs each card's ops with `zlstore run card` (card.py): locally
# one process per card, each recording its own cells; on Slurm one array
# task per card, whose cells this process records from the shared tree. The
# cards report through status files in the campaign root; this process
# reads them, asks the scheduler (or the local processes) how each card's
# task stands, and shows both. (card.py and slurm.py import this module's
# helpers, so this module imports them in the functions that use them.)

ISOLATE_TUNER_CACHE = "ZL_ISOLATE_TUNER_CACHE"  # campaigns force it to 1


@dataclass
class CampaignConfig:
    root: Union[str, Path]  # as given (the command line's is a str); read through Path()
    plan: Plan
    command: str
    rounds: int = DEFAULT_ROUNDS
    switch: Optional[str] = None
    screen_root: Optional[str] = None
    backend: str = field(default_factory=default_backend)
    devices: Optional[List[str]] = None  # card N -> devices[N]; default the card number
    poll_s: float = 0.5
    grace: float = KILL_GRACE_S
    resume: bool = False
    status_every_s: float = 30.0
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    slurm: Optional[SlurmOptions] = None  # run the cards as one Slurm job array
    stopping: Optional[adaptive.Stopping] = None  # until decided, at most `rounds`; None: every round


class CaliberMissing(RunError):
    """The environment does not give the caliber a run needs: refused before
    anything runs (exit status 2)."""


def missing_caliber_error(missing, what: str) -> CaliberMissing:
    names = ", ".join(f"{f.env} ({f.name})" for f in missing)
    return CaliberMissing(
        f"{what}: the caliber variables {names} are not set: every cell would be stored with an unknown "
        f"caliber and never paired. Set them first, e.g. export {' '.join(f.env + '=...' for f in missing)}"
    )


def require_screen_caliber(env: Dict[str, str]):
    """A screening pass measures under its environment's caliber: all seven must be set."""
    missing = caliber.missing(env)
    if missing:
        raise missing_caliber_error(missing, "run screen")


def campaign_caliber(config: CampaignConfig, env: Dict[str, str]) -> Dict[str, str]:
    """The caliber variables the campaign's cells are measured under: the
    environment's (ZL_ISOLATE_TUNER_CACHE forced to 1), or, on resume, those
    campaign.env recorded, which every card, on every host, runs with. An
    environment that names a different value is refused rather than
    silently overruled; a field neither gives is named."""
    values = {k: v for k, v in caliber_items(env)}
    if config.resume:
        recorded = dict(caliber_items(layout.read_env(Path(config.root) / layout.CAMPAIGN_ENV, []) or {}))
        differ = [
            f"{k}={values[k]} here, {v} in campaign.env"
            for k, v in recorded.items()
            if k != ISOLATE_TUNER_CACHE and k in values and values[k] != v
        ]
        if differ:
            raise CaliberMissing(
                f"refusing to resume {config.root}: a resumed campaign measures under the caliber it started "
                f"with, and this environment differs: {'; '.join(differ)}"
            )
        values.update(recorded)
    values[ISOLATE_TUNER_CACHE] = "1"
    missing = caliber.missing(values)
    if missing:
        raise missing_caliber_error(missing, "run campaign")
    return values


def screen_caliber_note(store, screen_root, campaign: Dict[str, str]) -> Optional[str]:
    """One line, before a campaign runs (or is planned), where the screening
    root was measured under another caliber than the campaign's (campaign:
    env variable -> value, what is known of it): the root's noise floors
    will not apply to the campaign's ranges. None where they agree."""
    try:
        root = screen_root if isinstance(screen_root, dict) else store.root(screen_root)
    except LookupError:
        return None
    screened = judge.root_calibers(store, root)
    differ = []
    for f in caliber.CALIBER_FIELDS:
        values = sorted({str(c[f.name]) for c in screened})
        if f.env in campaign and values and values != [campaign[f.env]]:
            differ.append(f"{f.env}={'|'.join(values)} there, {campaign[f.env]} here")
    if not differ:
        return None
    return (
        f"note: {root['name']} was screened under another caliber than this campaign's ({'; '.join(differ)}"
        f"{', forced for campaigns' if any(d.startswith(ISOLATE_TUNER_CACHE) for d in differ) else ''}): "
        f"its noise floors will not apply to the campaign's ranges; screen with the campaign's caliber"
    )


def campaign_config(
    store,
    *,
    plan_path=None,
    screen_root: Optional[str] = None,
    ops: Optional[str] = None,
    cards: int = 8,
    rounds: int = DEFAULT_ROUNDS,
    extra_ops: Optional[str] = None,
    command: Optional[str] = None,
    root_dir=None,
    resume: bool = False,
    switch: Optional[str] = None,
    backend: Optional[str] = None,
    devices: Optional[str] = None,
    poll_s: float = 0.5,
    status_every_s: float = 30.0,
    cell_timeout: Optional[float] = None,
    slurm=None,
    include_hinted: bool = False,
    until_decided: bool = False,
    min_rounds: Optional[int] = None,
) -> CampaignConfig:
    """A campaign's config from the command's options. With resume, the
    root's campaign.env fills what was not given (rounds, command, switch,
    screening root, cell timeout; on Slurm the sbatch options it was first
    submitted with) and its partition.tsv is the plan; otherwise the plan is
    plan_path's, or computed from the screening root as `zlstore plan` does.
    The switch and screening root default to the screening root's own.
    until_decided: rounds is the most an op runs; it stops once decided,
    after at least min_rounds (a resume keeps what campaign.env says).
    RunError when the options do not make a campaign; LookupError or
    ValueError (PlanError) from the root or the plan."""
    screen_row = None
    stopping = _stopping(until_decided, min_rounds, rounds)
    if resume:
        if not root_dir:
            raise RunError("--resume needs --root: the campaign root to continue")
        env, plan = read_campaign(root_dir)
        rounds = int(env.get("ROUNDS") or rounds)
        if stopping is not None and adaptive.stopping(env) is None:
            raise RunError(f"--until-decided: {root_dir} is a campaign of fixed rounds; resume it without")
        stopping = adaptive.stopping(env)
        command = command or env.get("COMMAND")
        switch = switch or env.get("SWITCH") or None
        screen_root = screen_root or env.get("SCREEN_ROOT") or None
        cell_timeout = cell_timeout or float(env.get("CELL_TIMEOUT") or DEFAULT_CELL_TIMEOUT)
        if slurm is not None and not slurm.given():
            slurm = saved_options(root_dir) or slurm
    elif plan_path:
        plan = planmod.read_partition_tsv(plan_path)
    elif screen_root:
        plan, screen_row = plan_from_store(store, screen_root, cards, rounds, ops, extra_ops, include_hinted)
    else:
        raise RunError("give --plan partition.tsv, or --screen-root to plan from (or --resume --root)")
    if not command:
        raise RunError("--command is required: the op command template, e.g. 'bash ab_repeat.sh {op} {dtype}'")
    if screen_row is None and screen_root and not resume:
        try:
            screen_row = store.root(screen_root)
        except LookupError:
            pass
    return CampaignConfig(
        root=root_dir or f"runs/campaign_{timestamp()}",
        plan=plan,
        command=command,
        rounds=rounds,
        switch=switch or (screen_row or {}).get("switch"),
        screen_root=(screen_row or {}).get("path") or screen_root,
        backend=backend or default_backend(),
        devices=[d.strip() for d in devices.split(",")] if devices else None,
        poll_s=poll_s,
        resume=resume,
        status_every_s=status_every_s,
        cell_timeout=cell_timeout or DEFAULT_CELL_TIMEOUT,
        slurm=slurm,
        stopping=stopping,
    )


def _stopping(until_decided: bool, min_rounds: Optional[int], rounds: int) -> Optional[adaptive.Stopping]:
    """--until-decided and --min-rounds as a campaign's stopping settings (None: fixed rounds)."""
    if not until_decided:
        if min_rounds is not None:
            raise RunError("--min-rounds goes with --until-decided")
        return None
    stopping = adaptive.Stopping(rounds, min_rounds or layout.DEFAULT_MIN_ROUNDS)
    if stopping.min_rounds > rounds:
        raise RunError(f"--min-rounds {stopping.min_rounds} is more than --rounds {rounds}, the most an op runs")
    return stopping


def op_label(op: str, dtype: str) -> str:
    return f"{op}:{dtype}" if dtype else op


def prepare_campaign(config: CampaignConfig, caliber_values: Dict[str, str]) -> Path:
    """A new campaign root with campaign.env and partition.tsv (refusing an
    existing one), or, with resume, the existing root as it is."""
    root = Path(config.root).resolve()
    if config.resume:
        if not (root / layout.CAMPAIGN_ENV).is_file():
            raise RunError(f"--resume: {root} has no {layout.CAMPAIGN_ENV}; is it a campaign root?")
        return root
    if root.exists() and any(root.iterdir()):
        raise RunError(f"{root} exists and is not empty; continue it with --resume, or choose another --root")
    _make_root(root)
    items = [("KIND", "campaign"), ("ROUNDS", config.rounds), ("CARDS", len(config.plan.cards))]
    items += adaptive.env_items(config.stopping)
    items += [(k, v) for k, v in (("SWITCH", config.switch), ("SCREEN_ROOT", config.screen_root)) if v]
    items += [
        ("HOST", socket.gethostname()),
        ("STARTED_AT", local_now()),
        ("BACKEND_VISIBLE_DEVICES", visible_devices_var(config.backend)),
        ("CELL_TIMEOUT", num(config.cell_timeout)),
        ("COMMAND", config.command),
    ]
    items += caliber_items(caliber_values)
    planmod.write_partition_tsv(config.plan, root / layout.PARTITION_TSV)
    write_atomic(root / layout.CAMPAIGN_ENV, env_text(items))
    return root


def refuse_known_root(store, root):
    """A new campaign at a path whose cells the store already holds (the
    directory deleted and made again) would add its rounds to theirs."""
    known = store.conn.execute(
        "SELECT count(*) FROM cells JOIN roots ON roots.id = cells.root_id WHERE roots.path = ?",
        (str(Path(root).resolve()),),
    ).fetchone()[0]
    if known:
        raise RunError(
            f"{Path(root).resolve()}: the store already holds {known} cells of a campaign there; "
            "continue it with --resume, or choose another --root"
        )


def read_campaign(root: Path) -> Tuple[Dict[str, str], Plan]:
    """A campaign root's campaign.env and partition.tsv, for --resume."""
    root = Path(root)
    env = layout.read_env(root / layout.CAMPAIGN_ENV, []) or {}
    env.pop("COMMAND", None)
    command = read_command(root)
    if command:
        env["COMMAND"] = command
    if not (root / layout.PARTITION_TSV).is_file():
        raise RunError(f"{root} has no {layout.PARTITION_TSV}")
    return env, planmod.read_partition_tsv(root / layout.PARTITION_TSV)


def complete_ops(store, root: Path, rounds: int) -> set:
    """(op, dtype) pairs with all 2 x rounds current cells of the campaign recorded."""
    return {op for op, done in adaptive.complete_rounds(store.conn, root).items() if done >= rounds}


def supersede(store, root: Path, card: int, op: str, dtype: str) -> int:
    """Mark the current cells of an op on a card superseded: the op runs
    again from the start (ab_repeat.sh always runs every round, in a new
    directory), so its earlier, interrupted run must add neither rounds nor
    half-rounds to its ranges. The cells stay in the store, shown in
    cell_summary with superseded_at, never paired (pairing.py). Returns
    how many were marked."""
    conn = store.conn
    with write_transaction(conn):
        marked = conn.execute(
            """UPDATE cells SET superseded_at = ?
               WHERE root_id = (SELECT id FROM roots WHERE path = ?) AND card IS ? AND op = ?
                 AND (dtype IS ? OR dtype IS NULL) AND superseded_at IS NULL""",
            (utc_now(), str(Path(root).resolve()), card, op, dtype),
        ).rowcount
        derive.derive(conn)
    return marked


def settle_resume(store, root: Path, plan: Plan, rounds: int):
    """Before a resumed campaign runs anything: store every cell the earlier
    runs left in the tree (finished or not, as an ingest does: a card killed
    between a cell's cell.env and its record, a task on a host that died),
    then tell the complete ops from the rest, whose cells are superseded.
    Returns (complete (op, dtype) pairs, {(card, op, dtype): cells superseded},
    the ingest summary)."""
    summary = store.ingest_summary([root], command="run campaign --resume")
    done = complete_ops(store, root, rounds)
    superseded = {}
    for card in plan.cards:
        for op in card.ops:
            if (op.op, op.dtype) not in done:
                n = supersede(store, root, card.card, op.op, op.dtype)
                if n:
                    superseded[(card.card, op.op, op.dtype)] = n
    return done, superseded, summary


@dataclass
class CampaignResult:
    root: Path
    interrupted: bool
    cards: List[CardState]
    last_screen: List[str]
    resume_command: Optional[str] = None  # what continues it, as printed
    where: str = "this host"  # this host, or the Slurm job
    db_arg: str = ""  # " --db FILE" for the printed commands, when not the default
    stops: Optional[List[dict]] = None  # until decided: each stopped op's round and reason
    saved_cell_hours: Optional[float] = None  # until decided: the decided ops' rounds left to MAX, measured

    @property
    def failed(self) -> List[str]:
        return [f for c in self.cards for f in c.failed]

    @property
    def done(self) -> int:
        """Ops run to the end, over every card."""
        return sum(c.done for c in self.cards)

    @property
    def skipped(self) -> int:
        """Ops skipped because a resumed campaign had all their cells."""
        return sum(c.skipped for c in self.cards)

    @property
    def cells(self) -> int:
        """Cells recorded by this run, over every card."""
        return sum(c.cells for c in self.cards)

    @property
    def unfinished(self) -> bool:
        """Some card has ops left (interrupted, or its task killed)."""
        return any(c.remaining or c.current for c in self.cards)

    def as_dict(self) -> dict:
        return {
            "root": str(self.root),
            "interrupted": self.interrupted,
            "where": self.where,
            "cards": [
                {
                    "card": c.card,
                    "state": c.state,
                    "job": c.job,
                    "node": c.node,
                    "done": c.done,
                    "skipped": c.skipped,
                    "failed": c.failed,
                    "cells": c.cells,
                    "left": len(c.remaining) + (1 if c.current else 0),
                }
                for c in self.cards
            ],
            "failed": self.failed,
            "done": self.done,
            "skipped": self.skipped,
            "cells": self.cells,
            **({"stops": self.stops, "saved_cell_hours": self.saved_cell_hours} if self.stops is not None else {}),
        }


def db_arg(store_path) -> str:
    """--db FILE when the store is not the default one, so that a printed
    command works as printed; else nothing."""
    if Path(store_path).resolve() == Path(default_db_path()).resolve():
        return ""
    return f" --db {shlex.quote(str(store_path))}"


def resume_command(root: Path, store_path, slurm: bool) -> str:
    """The command that continues this campaign."""
    slurm_flag = " --slurm" if slurm else ""
    return f"zlstore run campaign{slurm_flag} --resume --root {shlex.quote(str(root))}{db_arg(store_path)}"


class LocalLauncher:
    """One `zlstore run card` process per card on this host, each recording
    its own cells into the store (one writer per card)."""

    records_here = False
    settle_s = 0.0  # a process that ended has written all it will
    note = ""

    def __init__(self, store_path, devices: Optional[List[str]], poll_s: float):
        self.store_path, self.devices, self.poll_s = str(Path(store_path).resolve()), devices, poll_s
        self.procs: Dict[int, subprocess.Popen] = {}

    def check(self, cards: int):
        if self.devices is not None and len(self.devices) < cards:
            raise RunError(f"--devices names {len(self.devices)} devices for {cards} cards")

    def start(self, root: Path, run_id: str, todo: Dict[int, List[Op]], step: Optional[int] = None):
        self.procs = {}
        for card, ops in sorted(todo.items()):
            argv = [
                sys.executable,
                "-m",
                "zlstore",
                "run",
                "card",
                str(root),
                "--card",
                str(card),
                "--ops",
                ",".join(op_spec(o) for o in ops),
                "--db",
                self.store_path,
                "--run-id",
                run_id,
                "--poll",
                num(self.poll_s),
            ]
            if self.devices:
                argv += ["--device", self.devices[card]]
            if step is not None:
                argv += ["--step", str(step)]
            with open(Path(root) / "logs" / f"card{card}.out", "ab") as out:
                self.procs[card] = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )

    def poll(self):
        tasks = {}
        for card, proc in self.procs.items():
            rc = proc.poll()
            if rc is None:
                tasks[card] = Task("running", job=f"pid {proc.pid}")
            else:
                rc = shell_rc(rc)
                state = {0: "done", 1: "failed", EXIT_INTERRUPTED: "interrupted"}.get(rc, "failed")
                tasks[card] = Task(state, job=f"pid {proc.pid}", ended=True, exit_code=rc, raw_state=f"exit {rc}")
        return tasks

    def cancel(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def kill(self, pgids: Dict[int, int]):
        """A card that did not end when asked, and its op's group."""
        for card, proc in self.procs.items():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
            if card in pgids:
                signal_group(pgids[card], signal.SIGKILL)

    def live(self, root: Path) -> List[str]:
        """Cards of this campaign whose process still runs here."""
        cards = sorted(int(p.stem[4:]) for p in (Path(root) / "status").glob("card*.json") if p.stem[4:].isdigit())
        return [found for found in (still_running(root, card) for card in cards) if found]

    def where(self) -> str:
        return "this host"


class _Cards:
    """What the cards said (their status files) and how their tasks stand
    (the launcher), applied to the display's card states. With recorders
    (Slurm), the cells the cards name are recorded here."""

    def __init__(
        self,
        root: Path,
        run_id: str,
        states: List[CardState],
        display: Display,
        cards: Sequence[int],
        recorders: Optional[dict] = None,
    ):
        self.states, self.display, self.recorders = states, display, recorders
        self.readers = {card: StatusReader(root, card, run_id) for card in cards}
        self.tasks: dict = {}
        self.op_rc: Dict[Tuple[str, str], int] = {}  # each op's exit status, as its card said

    def update(self, tasks: dict):
        """The cards' new events first (a card says it finished before its
        task ends), then the tasks' states."""
        for card, reader in self.readers.items():
            recorder = self.recorders.get(card) if self.recorders else None
            for event in reader.new_events():
                if recorder is not None:
                    recorder.apply(event)
                if event["event"] == "done":
                    self.op_rc[(event["op"], event["dtype"])] = event["rc"]
                _apply(event, card, self.states[card], self.display, counted=recorder is None)
            if recorder is not None:
                recorder.flush()
                self.states[card].cells = recorder.recorded
        now = time.monotonic()
        for card, task in tasks.items():
            state = self.states[card]
            if task.state != state.state:
                where = f"{task.job} on {task.node}" if task.node else task.job
                self.display.event(f"card {card}: {where} {task.state}")
            state.state, state.job, state.node = task.state, task.job, task.node
            if state.started is None and not task.state.startswith(("pending", "submitting")):
                state.started = now
        self.tasks = tasks

    def settled(self) -> bool:
        """Every task ended and every card's last word read (or waited for long enough)."""
        if not self.tasks or not all(t.ended for t in self.tasks.values()):
            return False
        return all(self.readers[c].final for c in self.tasks)

    def pgids(self) -> Dict[int, int]:
        return {card: s.pgid for card, s in enumerate(self.states) if s.pgid}


def _apply(event: dict, card: int, state: CardState, display: Display, counted: bool):
    kind = event["event"]
    now = time.monotonic()
    if kind == "start":
        op, dtype = event["op"], event["dtype"]
        match = next((o for o in state.remaining if (o.op, o.dtype) == (op, dtype)), Op(op, dtype, float("nan")))
        if match in state.remaining:
            state.remaining.remove(match)
        state.current, state.current_since, state.pgid = match, now, event.get("pgid")
        state.timeout_s = event.get("timeout_s")
        display.event(f"card {card}: {match.label} started")
    elif kind == "cells":
        if counted:
            state.cells += len(event["paths"])
    elif kind == "done":
        op, dtype, rc = event["op"], event["dtype"], event["rc"]
        state.current, state.pgid, state.timeout_s = None, None, None
        state.done += 1
        if rc != 0:
            why = "killed at its op timeout" if event.get("timed_out") else f"exit status {rc}"
            state.failed.append(f"card {card} {op_label(op, dtype)}: {why}")
        which = f" round {event['round']}" if event.get("round") is not None else ""
        display.event(f"card {card}: {op_label(op, dtype)}{which} done, exit status {rc}, {event['elapsed_s']:.1f} s")
        for problem in event.get("problems") or []:
            display.event("problem: " + problem)
    elif kind == "finished":
        state.finished = now
        display.event(f"card {card}: finished")
    elif kind == "stopped":  # a card deciding its own ops (Slurm)
        display.event(
            f"card {card}: {op_label(event['op'], event['dtype'])} stopped after round {event['round']}: {event['reason']}"
        )
    elif kind == "round":
        display.event(f"card {card}: {event['line']}")
    elif kind == "interrupted":
        _stopped(state, now)


def _stopped(state: CardState, now: float):
    """A card that ended before its ops did: the op it was running is left."""
    if state.current is not None:
        state.remaining.insert(0, state.current)
        state.stopped_during = state.current
    state.interrupted, state.current, state.pgid = True, None, None
    if state.finished is None:
        state.finished = now


def _watch(cards: _Cards, launcher, poll_s: float, display: Display, until: Optional[float] = None):
    """Until every task has ended and said its last word (a task that never
    will, killed hard, is waited for launcher.settle_s), or until `until`."""
    ended_at = None
    while True:
        cards.update(launcher.poll())
        if cards.settled():
            return
        if cards.tasks and all(t.ended for t in cards.tasks.values()):
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at >= launcher.settle_s:
                return
        if until is not None and time.monotonic() > until:
            return
        display.refresh()
        time.sleep(poll_s)


def _task_failures(cards: _Cards, launcher, cancelled: bool):
    """A card whose task ended without the card saying it finished: killed
    (a Slurm time limit, scancel, a node failure) or dead. Named with the
    scheduler's reason; its recorded cells stay."""
    now = time.monotonic()
    for card, task in cards.tasks.items():
        state, reader = cards.states[card], cards.readers[card]
        said = (reader.doc or {}).get("state")
        if said == "finished" or (cancelled and said in ("interrupted", None)):
            if said != "finished":
                _stopped(state, now)
            continue
        _stopped(state, now)
        during = f", during {state.stopped_during.label}" if state.stopped_during is not None else ""
        total = state.done + len(state.remaining)
        if isinstance(launcher, LocalLauncher):
            what = f"worker ended with exit code {task.exit_code}{during} (see logs/card{card}.out)"
        else:
            reason = f" ({task.reason})" if task.reason else ""
            on = f" on {task.node}" if task.node else ""
            what = (
                f"Slurm task {task.job}{on} ended {task.raw_state or task.state}{reason}{during}; "
                f"{state.done} of {total} ops done"
            )
        state.failed.append(f"card {card}: {what}; its recorded cells are kept")


def run_campaign(store, config: CampaignConfig, stream: IO = sys.stderr) -> CampaignResult:
    """Run a plan, one `zlstore run card` per card: local processes, or one
    Slurm job array (config.slurm). Returns when every card's task has
    ended, or after Ctrl-C / SIGTERM has stopped them all (scancel on Slurm)."""
    plan = config.plan
    visible_devices_var(config.backend)
    values = campaign_caliber(config, dict(os.environ))
    note = screen_caliber_note(store, config.screen_root, values) if config.screen_root else None
    if note:
        print(note, file=stream, flush=True)
    launcher: Union[SlurmLauncher, LocalLauncher]
    if config.slurm is not None:
        launcher = SlurmLauncher(config.slurm, config.poll_s)
    else:
        launcher = LocalLauncher(store.path, config.devices, config.poll_s)
    launcher.check(len(plan.cards))
    if not config.resume:
        refuse_known_root(store, config.root)
    if config.slurm is None:  # on Slurm the cards' hosts, not this one, run FlagGems
        _campaign_preflight(store, config, values)
    root = prepare_campaign(config, values)
    (root / "logs").mkdir(exist_ok=True)
    states = [CardState(c.card, list(c.ops), remaining=list(c.ops)) for c in plan.cards]
    display = Display(root.name, states, stream, config.status_every_s)
    todo = {c.card: list(c.ops) for c in plan.cards if c.ops}
    resumed = None
    if config.resume:
        live = launcher.live(root)
        if live:
            raise RunError(
                f"refusing to resume {root}: {'; '.join(live)} still runs; wait for it or stop it "
                "(scancel on Slurm), then --resume"
            )
        if config.stopping is not None:
            todo, resumed = _resume_until_decided(store, root, plan, config.stopping, states, display)
        else:
            todo = _resume(store, root, plan, config.rounds, states, display)
    progress = None
    if config.stopping is not None and config.slurm is None:
        interrupted, progress = _until_decided(store, config, root, launcher, states, display, resumed)
    else:  # fixed rounds; or until decided on Slurm, where each task decides its own ops (card.py)
        interrupted = _run_cards(store, config, root, launcher, todo, states, display)
        if config.stopping is not None:
            progress = _stops_of(store, root, config.stopping, plan)
    last = display.final()
    result = CampaignResult(root, interrupted, states, last, where=launcher.where(), db_arg=db_arg(store.path))
    if progress is not None:
        result.stops, result.saved_cell_hours = progress.as_rows(), round(progress.saved_hours(), 6)
    if interrupted or result.unfinished:
        result.resume_command = resume_command(root, store.path, config.slurm is not None)
    return result


def _run_cards(
    store,
    config: CampaignConfig,
    root: Path,
    launcher,
    todo: Dict[int, List[Op]],
    states: List[CardState],
    display: Display,
    step: Optional[int] = None,
    op_rc: Optional[dict] = None,
) -> bool:
    """One `zlstore run card` per card with ops in todo (of step N, given
    one), watched until every one ended; Ctrl-C stops them all. Returns
    whether it was interrupted; op_rc gets each op's exit status."""
    run_id = f"{timestamp()}-{os.getpid()}" + (f"-s{step}" if step is not None else "")
    recorders = {card: Recorder(store, root, card) for card in todo} if launcher.records_here else None
    cards = _Cards(root, run_id, states, display, list(todo), recorders)
    interrupted = False
    try:
        with interrupts():
            if todo:
                if launcher.note:
                    display.event(launcher.note)
                if step is not None:
                    launcher.start(root, run_id, todo, step)
                else:
                    launcher.start(root, run_id, todo)
                display.title = f"{root.name} ({launcher.where()})"
                _watch(cards, launcher, config.poll_s, display)
    except KeyboardInterrupt:
        interrupted = True
        with interrupts(ignore=True):
            display.event(f"interrupted: stopping every card ({launcher.where()})")
            launcher.cancel()
            _watch(
                cards,
                launcher,
                min(config.poll_s, 0.2),
                display,
                until=time.monotonic() + config.grace + 15 + launcher.settle_s,
            )
            launcher.kill(cards.pgids())
            cards.update(launcher.poll())
    _task_failures(cards, launcher, cancelled=interrupted)
    if op_rc is not None:
        op_rc.update(cards.op_rc)
    return interrupted


# -- until decided: a round at a time (adaptive.py) ----------------------------


def _step_plan(plan: Plan, going: List[Op], seconds: Dict[Tuple[str, str], float], rule, first: bool) -> Plan:
    """The ops that go on, over the plan's cards: the first step as the plan
    put them; later ones longest-first by each op's measured time per round
    (the screen's share of a round where none is measured yet)."""

    def weight(op: Op) -> float:
        measured = seconds.get(adaptive.key(op))
        if measured:
            return measured
        share = op.weight_s / rule.max_rounds
        return share if share == share and share > 0 else 1.0

    wanted = {adaptive.key(op) for op in going}
    if first:
        cards = [
            planmod.Card(c.card, [Op(o.op, o.dtype, weight(o)) for o in c.ops if adaptive.key(o) in wanted])
            for c in plan.cards
        ]
        return Plan(cards, 0.0)
    return planmod.make_plan([Op(o.op, o.dtype, weight(o)) for o in going], len(plan.cards))


def _until_decided(
    store, config: CampaignConfig, root: Path, launcher, states, display, resumed
) -> Tuple[bool, "adaptive.Progress"]:
    """Locally: a step per round, every card running one round of the ops
    that go on (plans/step<N>.tsv), then the stops (adaptive.after_round)
    and a line saying how many ops are decided, go on, and the cell-hours
    saved; re-planned over the cards by measured times for the next round.
    Returns (interrupted, the stops)."""
    rule, plan = config.stopping, config.plan
    assert rule is not None
    progress = adaptive.Progress(rule, {}, adaptive.round_seconds(store.conn, root))
    if resumed is None:
        going, current = list(plan.ops), {adaptive.key(op): 0 for op in plan.ops}
    else:
        going, current, progress.stops = resumed
    steps = [int(p.stem[4:]) for p in (root / adaptive.PLANS_DIR).glob("step*.tsv") if p.stem[4:].isdigit()]
    step = max(steps, default=0)
    interrupted = False
    try:
        with interrupts():  # between the steps too: a stop half-recorded is rolled back, and said again on resume
            while going:
                step += 1
                step_plan = _step_plan(plan, going, progress.seconds, rule, first=step == 1)
                rounds = {adaptive.key(op): current[adaptive.key(op)] + 1 for op in going}
                path = adaptive.step_path(root, step)
                path.parent.mkdir(exist_ok=True)
                planmod.write_step_tsv(step_plan, rounds, path)
                todo = {c.card: list(c.ops) for c in step_plan.cards if c.ops}
                for state in states:
                    ops = list(step_plan.cards[state.card].ops) if state.card < len(step_plan.cards) else []
                    state.ops, state.remaining, state.current = ops, list(ops), None
                    state.started = state.finished = None
                    state.state = "" if ops else "done"
                order = "; ".join(
                    f"card {c.card}: "
                    + ", ".join(f"{o.label} r{rounds[adaptive.key(o)]} ({o.weight_s:.3g} s)" for o in c.ops)
                    for c in step_plan.cards
                    if c.ops
                )
                display.event(
                    f"step {step}: {len(going)} ops, longest first by {'measured time' if step > 1 else 'the plan'}: {order}"
                )
                op_rc: Dict[Tuple[str, str], int] = {}
                interrupted = _run_cards(store, config, root, launcher, todo, states, display, step, op_rc)
                if interrupted:
                    break
                failed = [k for k in rounds if op_rc.get(k, 1) != 0]
                left = adaptive.after_round(store, root, rule, rounds, failed, progress)
                for k in rounds:
                    if k in progress.stops and k not in left:
                        display.event(
                            f"{op_label(*k)} stopped after round {progress.stops[k][0]}: {progress.stops[k][1]}"
                        )
                current.update(rounds)
                going = [op for op in plan.ops if adaptive.key(op) in set(left)]
                display.event(progress.line(max(rounds.values()), len(going)))
    except KeyboardInterrupt:
        interrupted = True
        display.event("interrupted between two rounds")
    return interrupted, progress


def _resume_until_decided(store, root: Path, plan: Plan, rule, states: List[CardState], display: Display):
    """What a resumed until-decided campaign runs: every cell the earlier
    runs left stored, the ops still undecided taken up after their complete
    rounds (the half-run round's cells superseded), the decided ones kept
    so. Returns (todo per card of partition.tsv, (ops going on, their
    complete rounds, the stops so far))."""
    summary = store.ingest_summary([root], command="run campaign --resume")
    display.event(f"resume: {summary.line()}")
    conn = store.conn
    done = adaptive.complete_rounds(conn, root)
    going = {adaptive.key(op) for op in adaptive.undecided(conn, root, plan.ops, rule.min_rounds)}
    at_max = [k for k in going if done.get(k, 0) >= rule.max_rounds]
    adaptive.record(conn, root, at_max, rule.max_rounds, "max rounds")
    going -= set(at_max)
    stops = adaptive.recorded_stops(conn, root)
    unsaid = [adaptive.key(op) for op in plan.ops if adaptive.key(op) not in going and adaptive.key(op) not in stops]
    for k in unsaid:  # decided by the round the run was stopped after, before it could say so
        adaptive.record(conn, root, [k], done.get(k, 0), "decided")
    stops = adaptive.recorded_stops(conn, root)
    todo: Dict[int, List[Op]] = {}
    for card in plan.cards:
        state = states[card.card]
        for op in card.ops:
            k = adaptive.key(op)
            if k not in going:
                state.remaining.remove(op)
                state.skipped += 1
                round_, reason = stops.get(k, (done.get(k, 0), "decided"))
                display.event(f"{op.label}: stopped before, after round {round_} ({reason}), not run again")
                continue
            todo.setdefault(card.card, []).append(op)
            n = adaptive.supersede_after(store, root, k, done.get(k, 0))
            display.event(
                f"{op.label}: goes on after its {done.get(k, 0)} complete rounds"
                + (f"; the {n} cells of its unfinished round are kept in the store, marked superseded" if n else "")
            )
    going_ops = [op for op in plan.ops if adaptive.key(op) in going]
    return todo, (going_ops, {adaptive.key(op): done.get(adaptive.key(op), 0) for op in plan.ops}, stops)


def _stops_of(store, root: Path, rule, plan: Plan) -> "adaptive.Progress":
    """The stops the cards deciding alone said (Slurm), as the store recorded them."""
    stops = adaptive.recorded_stops(store.conn, root)
    return adaptive.Progress(rule, stops, adaptive.round_seconds(store.conn, root))


def _campaign_preflight(store, config: CampaignConfig, caliber_values: Dict[str, str]):
    """Before the first op, where --command runs `zlstore flaggems`: can
    FlagGems start, in the environment the first op would get (card.py's
    op_env)? RunError names what is missing, before anything is written."""
    first = next(((card.card, op) for card in config.plan.cards for op in card.ops), None)
    if first is None:
        return
    card, op = first
    with tempfile.TemporaryDirectory(prefix="zlstore-preflight-") as scratch:
        env = dict(os.environ)
        env.update(caliber_values)
        env.update(
            {
                "AB_ROOT": scratch,
                ISOLATE_TUNER_CACHE: "1",
                "ROUNDS": str(config.rounds),
                "CARD": str(card),
                "CELL_TIMEOUT": num(config.cell_timeout),
                "OP": op.op,
                "DTYPE": op.dtype,
                visible_devices_var(config.backend): config.devices[card] if config.devices else str(card),
                "ZLSTORE_DB": str(Path(store.path).resolve()),
            }
        )
        if config.switch:
            env["SWITCH"] = config.switch
        values: Dict[str, object] = {"op": op.op, "dtype": op.dtype, "card": card, "rounds": config.rounds}
        if config.stopping is not None:
            values["round"] = env["ROUND"] = "1"
        command = fill(config.command, values)
        try:
            flaggems.preflight(command, env, timeout=min(config.cell_timeout, flaggems.PROBE_TIMEOUT_S))
        except flaggems.CannotStart as error:
            raise RunError(str(error)) from None


def _resume(store, root: Path, plan: Plan, rounds: int, states: List[CardState], display: Display):
    """The ops a resumed campaign still runs, per card; the complete ones
    skipped, the cells of the others' earlier runs superseded."""
    done, superseded, summary = settle_resume(store, root, plan, rounds)
    display.event(f"resume: {summary.line()}")
    todo: Dict[int, List[Op]] = {}
    for card in plan.cards:
        state = states[card.card]
        for op in card.ops:
            if (op.op, op.dtype) in done:
                state.remaining.remove(op)
                state.skipped += 1
                display.event(f"card {card.card}: {op.label} already complete in the store, skipped")
            else:
                todo.setdefault(card.card, []).append(op)
                n = superseded.get((card.card, op.op, op.dtype))
                if n:
                    display.event(
                        f"card {card.card}: {op.label} runs again from the start; the {n} cells of its "
                        "earlier run are kept in the store, marked superseded"
                    )
        if card.card not in todo:
            state.finished = state.started = time.monotonic()
            state.state = "done"
    return todo
