"""Running a screening pass and a campaign, writing into the store as each
cell ends.

A screen runs one pair per op, before then after, each side one process
capped by CELL_TIMEOUT; zlstore writes the cell's cell.env last and records
it. A campaign runs a plan: one worker process per card (each with its own
Store), ops one after another within a card, each op the user's command with
the card's own AB_ROOT; the worker records every cell of the op as soon as
its cell.env has RC. Every command runs in its own process group, so a
timeout or a Ctrl-C kills it with its children."""

import datetime
import json
import multiprocessing
import os
import queue as queue_mod
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, IO, List, Optional, Sequence, Tuple

from . import caliber, files, judge, layout
from . import plan as planmod
from .db import write_transaction
from .ingest import now as utc_now
from .display import CardState, Display
from .plan import Op, Plan, PlanError
from .procs import KILL_GRACE_S, signal_group, group_alive, interrupts, kill_group, shell_rc, start_group

DEFAULT_CELL_TIMEOUT = 2400.0
DEFAULT_SWITCH_VALUES = ("0", "1")   # the switch off (before) and on (after)
DEFAULT_ROUNDS = 6
TIMEOUT_RC = 124            # what a cell killed at CELL_TIMEOUT is recorded with
INTERRUPTED_EXIT = 130      # 128 + SIGINT

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


def visible_devices_var(backend: str) -> str:
    try:
        return VISIBLE_DEVICES[backend.strip().lower()]
    except KeyError:
        raise RunError(f"unknown backend {backend!r}; known: {', '.join(sorted(VISIBLE_DEVICES))}") from None


def default_backend() -> str:
    return (os.environ.get("ZL_BACKEND") or "cuda").strip().lower()


def timestamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d_%H%M%S")


def local_now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def fill(template: str, values: Dict[str, object]) -> str:
    """The command template with {name} placeholders replaced by shell-quoted
    values (an empty dtype becomes ''); any other braces (${VAR}) stay."""
    text = template
    for name, value in values.items():
        text = text.replace("{" + name + "}", shlex.quote(str(value)))
    return text


def env_text(items: Sequence[Tuple[str, object]]) -> str:
    """KEY=VALUE lines; values with shell metacharacters are quoted."""
    lines = []
    for key, value in items:
        value = "" if value is None else str(value)
        safe = all(c.isalnum() or c in "_./:,+@%-" for c in value)
        lines.append(f"{key}={value if safe else shlex.quote(value)}\n")
    return "".join(lines)


def write_atomic(path: Path, text: str):
    """Write a file whole or not at all: a reader never sees half of it, and
    a link planted at its place or its temporary name redirects nothing."""
    files.replace_atomic(path, text.encode("utf-8"))


def caliber_items(env: Dict[str, str]) -> List[Tuple[str, str]]:
    """The caliber variables an environment sets, by zlstore.caliber's one list."""
    return [(f.env, env[f.env].strip()) for f in caliber.CALIBER_FIELDS
            if (env.get(f.env) or "").strip()]


def switch_values(text: str) -> Tuple[str, str]:
    """`before,after`: the switch's value on each side (real switches are not
    all 0/1: TRITON_F32_DEFAULT takes ieee, tf32, tf32x3). ValueError unless
    two different non-empty values."""
    values = tuple(v.strip() for v in text.split(","))
    if len(values) != 2 or not all(values) or values[0] == values[1]:
        raise ValueError(f"the switch values are two different values, before,after (e.g. ieee,tf32), not {text!r}")
    return values


def write_cell_env(out: Path, *, op: str, dtype: str, side: str, round_: int, card: int, started_at: str,
                   switch: str, switch_value: str, cell_timeout: float, env: Dict[str, str],
                   elapsed_s: float, rc: int, nodeid: Optional[str] = None):
    """A finished cell's cell.env, whole, RC last: a cell.env with RC says
    the cell is finished. The caliber variables are those env sets."""
    items = [("OP", op), ("DTYPE", dtype), ("SIDE", side), ("ROUND", round_), ("CARD", card),
             ("STARTED_AT", started_at)] + ([("NODEID", nodeid)] if nodeid else [])
    items += [("SWITCH", switch), ("SWITCH_VALUE", switch_value), ("CELL_TIMEOUT", _num(cell_timeout))]
    items += caliber_items(env)
    items += [("ELAPSED_S", f"{elapsed_s:.3f}"), ("RC", rc)]
    write_atomic(Path(out) / layout.CELL_ENV, env_text(items))


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
           WHERE root_id = ? AND file = 'screen.tsv' ORDER BY line""", (root["id"],)):
        pairs[(op, dtype or "")] = {"before": before, "after": after}
    for op, dtype, side, elapsed in store.conn.execute(
        """SELECT op, COALESCE(dtype, ''), side, elapsed_s FROM cells
           WHERE root_id = ? AND op IS NOT NULL AND side IS NOT NULL ORDER BY id""", (root["id"],)):
        pair = pairs.setdefault((op, dtype), {"before": None, "after": None})
        if elapsed is not None:
            pair[side] = elapsed
    return root, pairs


def ir_changed_ops(store, root: dict) -> List[Tuple[str, str]]:
    """The pairs the verdicts view judges IR_CHANGED under the current rule."""
    rows = store.conn.execute(
        "SELECT op, COALESCE(dtype, '') FROM verdicts WHERE root_path = ? AND verdict = 'IR_CHANGED' ORDER BY op, dtype",
        (root["path"],),
    ).fetchall()
    return [(op, dtype) for op, dtype in rows]


def hinted_ops(store, root: dict) -> List[Tuple[str, str, str]]:
    """The IR_CHANGED pairs of a screening root that carry a hint under the
    current rule (verdicts.hint): (op, dtype, hint). A campaign on them would
    measure nothing the switch changed."""
    rows = store.conn.execute(
        "SELECT op, COALESCE(dtype, ''), hint FROM verdicts WHERE root_id = ? AND hint IS NOT NULL ORDER BY op, dtype",
        (root["id"],),
    ).fetchall()
    return [tuple(row) for row in rows]


def resolve_ops(pairs: Dict[Tuple[str, str], dict], specs, root_name: str) -> List[Tuple[str, str]]:
    """`op` or `op:dtype` specs against the root's pairs; a bare op needs the
    root to have exactly one pair for it."""
    chosen = []
    for op, dtype in specs:
        if dtype is not None:
            if (op, dtype) not in pairs:
                raise PlanError(f"op {op}:{dtype} has no screening pair in {root_name}"
                                + _known(pairs, op))
            chosen.append((op, dtype))
            continue
        matches = sorted(d for (o, d) in pairs if o == op)
        if len(matches) != 1:
            what = "no screening pair" if not matches else f"{len(matches)} pairs ({', '.join(op + ':' + d for d in matches)}); name the dtype"
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
            raise PlanError(f"op {label} has no screening time ({' and '.join('elapsed_' + s for s in missing)} "
                            f"unknown in {root_name}); it cannot be weighed")
        ops.append(Op(op, dtype, (pair["before"] + pair["after"]) * rounds))
    return ops


def plan_from_store(store, screen_root: str, cards: int, rounds: int,
                    ops: Optional[str] = None, extra_ops: Optional[str] = None) -> Tuple[Plan, dict]:
    """The longest-first plan for a screening root's ops (default: its
    IR_CHANGED pairs under the current rule). Returns (plan, root row)."""
    if rounds < 1:
        raise PlanError(f"--rounds must be at least 1, not {rounds}")
    root, pairs = screen_pairs(store, screen_root)
    if ops:
        chosen = resolve_ops(pairs, planmod.parse_op_spec(ops), root["name"])
    else:
        chosen = ir_changed_ops(store, root)
        if not chosen:
            raise PlanError(f"{root['name']} has no IR_CHANGED pair under the current rule; name ops with --ops")
    extra = resolve_ops(pairs, planmod.parse_op_spec(extra_ops), root["name"]) if extra_ops else []
    plan = planmod.make_plan(weighted_ops(pairs, chosen, rounds, root["name"]), cards,
                             weighted_ops(pairs, extra, rounds, root["name"]))
    return plan, root


def log_problem(store, command: str, paths: List[str], file: str, message: str):
    """A problem outside any cell (a failed op command) in the ingest log."""
    conn = store.conn
    with write_transaction(conn):
        run_id = conn.execute(
            "INSERT INTO ingest_runs (started_at, finished_at, command, paths, summary) VALUES (?, ?, ?, ?, ?)",
            (utc_now(), utc_now(), command, json.dumps(paths), json.dumps({"problems": [message]})),
        ).lastrowid
        conn.execute("INSERT INTO ingest_problems (run_id, file, line, message) VALUES (?, ?, NULL, ?)",
                     (run_id, file, message))


# == screen ===================================================================


@dataclass
class ScreenConfig:
    root: Path
    ops: List[Tuple[str, str]]
    command: str
    switch: str
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    card: int = 0
    backend: str = field(default_factory=default_backend)
    device: Optional[str] = None
    grace: float = KILL_GRACE_S
    values: Tuple[str, str] = DEFAULT_SWITCH_VALUES   # the switch's value before, after


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
    root.mkdir(parents=True, exist_ok=True)
    started = local_now()
    write_atomic(root / layout.ROOT_ENV, env_text(
        [("KIND", "screen"), ("SWITCH", config.switch), ("SWITCH_VALUES", ",".join(config.values)),
         ("HOST", socket.gethostname()), ("STARTED_AT", started), ("CELL_TIMEOUT", _num(config.cell_timeout))]
        + caliber_items(dict(os.environ))))
    results: List[SideResult] = []
    for op, dtype in config.ops:
        for side, value in zip(layout.SIDES, config.values):
            with interrupts():
                result = _screen_side(store, config, root, op, dtype, side, value, visible)
            results.append(result)
            label = op_label(op, dtype)
            how = f"killed at the {_num(config.cell_timeout)} s timeout, RC {result.rc}" if result.timed_out else f"RC {result.rc}"
            report(f"{label} {side}: {how}, {result.elapsed_s:.1f} s, recorded")
    screen_tsv = judge.write_screen_tsv(store, str(root))
    store.ingest_summary([root], command="run screen")  # recorded_verdicts: the file just written
    return {"root": str(root), "sides": len(results), "switch": config.switch, "switch_values": list(config.values),
            "screen_tsv": str(screen_tsv or root / layout.SCREEN_TSV),
            "timed_out": [f"{r.op}:{r.dtype}:{r.side}" for r in results if r.timed_out],
            "failed": [{"label": op_label(r.op, r.dtype), "side": r.side, "rc": r.rc, "timed_out": r.timed_out,
                        "log": str(r.path / layout.RUN_LOG)} for r in results if r.rc != 0 or r.timed_out]}


def screen_config(*, ops: str, command: str, switch: str, cell_timeout: float = DEFAULT_CELL_TIMEOUT,
                  root_dir: Optional[str] = None, card: int = 0, backend: Optional[str] = None,
                  values: str = ",".join(DEFAULT_SWITCH_VALUES)) -> ScreenConfig:
    """A screening pass's config from the command's options: ops and switch
    values parsed (ValueError names a bad spec), root and backend defaulted,
    and an unknown backend refused (RunError) before anything is written."""
    pairs = [(op, dtype or "") for op, dtype in planmod.parse_op_spec(ops)]
    config = ScreenConfig(
        root=root_dir or f"runs/screen_{timestamp()}", ops=pairs, command=command,
        switch=switch, cell_timeout=cell_timeout, card=card,
        backend=backend or default_backend(), values=switch_values(values))
    visible_devices_var(config.backend)
    return config


def screen_tsv_rows(result: dict) -> List[dict]:
    """The rows of the screen.tsv a screening pass wrote (empty when it has
    none), for the table printed at its end."""
    return [row for _, row in layout.read_tsv(Path(result["screen_tsv"]), []) or []]


def _num(value: float) -> str:
    return format(value, "g")


def _screen_side(store, config: ScreenConfig, root: Path, op: str, dtype: str, side: str,
                 value: str, visible: str) -> SideResult:
    out = root / _cell_name(op, dtype, side)
    out.mkdir(parents=True)
    env = dict(os.environ)
    env.update({
        "OUT_DIR": str(out), "OP": op, "DTYPE": dtype, "SIDE": side, "ROUND": "0",
        "CARD": str(config.card), "SWITCH": config.switch, "SWITCH_VALUE": value,
        config.switch: value, "CELL_TIMEOUT": _num(config.cell_timeout),
        visible: str(config.device if config.device is not None else config.card),
        "ZLSTORE_DB": str(Path(store.path).resolve()),
    })
    command = fill(config.command, {"op": op, "dtype": dtype, "side": side, "out_dir": out,
                                    "card": config.card, "switch": config.switch, "switch_value": value})
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
    write_cell_env(out, op=op, dtype=dtype, side=side, round_=0, card=config.card, started_at=started_at,
                   switch=config.switch, switch_value=value, cell_timeout=config.cell_timeout, env=env,
                   elapsed_s=elapsed, rc=rc)
    store.record([out])
    return SideResult(op, dtype, side, rc, elapsed, timed_out, out)


def _cell_name(op: str, dtype: str, side: str) -> str:
    return f"{op}_{dtype}_{side}" if dtype else f"{op}_{side}"


# == campaign =================================================================


@dataclass
class CampaignConfig:
    root: Path
    plan: Plan
    command: str
    rounds: int = DEFAULT_ROUNDS
    switch: Optional[str] = None
    screen_root: Optional[str] = None
    backend: str = field(default_factory=default_backend)
    devices: Optional[List[str]] = None   # card N -> devices[N]; default the card number
    poll_s: float = 0.5
    grace: float = KILL_GRACE_S
    resume: bool = False
    status_every_s: float = 30.0


def campaign_config(store, *, plan_path=None, screen_root: Optional[str] = None, ops: Optional[str] = None,
                    cards: int = 8, rounds: int = DEFAULT_ROUNDS, extra_ops: Optional[str] = None,
                    command: Optional[str] = None, root_dir=None, resume: bool = False,
                    switch: Optional[str] = None, backend: Optional[str] = None, devices: Optional[str] = None,
                    poll_s: float = 0.5, status_every_s: float = 30.0) -> CampaignConfig:
    """A campaign's config from the command's options. With resume, the
    root's campaign.env fills what was not given (rounds, command, switch,
    screening root) and its partition.tsv is the plan; otherwise the plan is
    plan_path's, or computed from the screening root as `zlstore plan` does.
    The switch and screening root default to the screening root's own.
    RunError when the options do not make a campaign; LookupError or
    ValueError (PlanError) from the root or the plan."""
    screen_row = None
    if resume:
        if not root_dir:
            raise RunError("--resume needs --root: the campaign root to continue")
        env, plan = read_campaign(root_dir)
        rounds = int(env.get("ROUNDS") or rounds)
        command = command or env.get("COMMAND")
        switch = switch or env.get("SWITCH") or None
        screen_root = screen_root or env.get("SCREEN_ROOT") or None
    elif plan_path:
        plan = planmod.read_partition_tsv(plan_path)
    elif screen_root:
        plan, screen_row = plan_from_store(store, screen_root, cards, rounds, ops, extra_ops)
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
        root=root_dir or f"runs/campaign_{timestamp()}", plan=plan, command=command,
        rounds=rounds, switch=switch or (screen_row or {}).get("switch"),
        screen_root=(screen_row or {}).get("path") or screen_root,
        backend=backend or default_backend(),
        devices=[d.strip() for d in devices.split(",")] if devices else None,
        poll_s=poll_s, resume=resume, status_every_s=status_every_s)


def op_label(op: str, dtype: str) -> str:
    return f"{op}:{dtype}" if dtype else op


def prepare_campaign(config: CampaignConfig) -> Path:
    """A new campaign root with campaign.env and partition.tsv (refusing an
    existing one), or, with resume, the existing root as it is."""
    root = Path(config.root).resolve()
    if config.resume:
        if not (root / layout.CAMPAIGN_ENV).is_file():
            raise RunError(f"--resume: {root} has no {layout.CAMPAIGN_ENV}; is it a campaign root?")
        return root
    if root.exists() and any(root.iterdir()):
        raise RunError(f"{root} exists and is not empty; continue it with --resume, or choose another --root")
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, ZL_ISOLATE_TUNER_CACHE="1")
    items = [("KIND", "campaign"), ("ROUNDS", config.rounds), ("CARDS", len(config.plan.cards))]
    items += [(k, v) for k, v in (("SWITCH", config.switch), ("SCREEN_ROOT", config.screen_root)) if v]
    items += [("HOST", socket.gethostname()), ("STARTED_AT", local_now()),
             ("BACKEND_VISIBLE_DEVICES", visible_devices_var(config.backend)),
             ("COMMAND", config.command)]
    items += caliber_items(env)
    planmod.write_partition_tsv(config.plan, root / layout.PARTITION_TSV)
    write_atomic(root / layout.CAMPAIGN_ENV, env_text(items))
    return root


def read_campaign(root: Path) -> Tuple[Dict[str, str], Plan]:
    """A campaign root's campaign.env and partition.tsv, for --resume."""
    root = Path(root)
    env = layout.read_env(root / layout.CAMPAIGN_ENV, []) or {}
    try:
        line = next(l for l in (root / layout.CAMPAIGN_ENV).read_text().splitlines() if l.startswith("COMMAND="))
        words = shlex.split(line[len("COMMAND="):])
        env["COMMAND"] = words[0] if len(words) == 1 else " ".join(words)
    except (StopIteration, ValueError, FileNotFoundError):
        env.pop("COMMAND", None)
    if not (root / layout.PARTITION_TSV).is_file():
        raise RunError(f"{root} has no {layout.PARTITION_TSV}")
    return env, planmod.read_partition_tsv(root / layout.PARTITION_TSV)


def card_dir(root: Path, card: int) -> Path:
    return Path(root) / f"card{card}"


def _log_name(card: int, op: str, dtype: str) -> str:
    return f"card{card}_{op}{'_' + dtype if dtype else ''}.log"


def complete_ops(store, root: Path, rounds: int) -> set:
    """(op, dtype) pairs with all 2 x rounds cells of the campaign recorded."""
    rows = store.conn.execute(
        """SELECT cells.op, COALESCE(cells.dtype, ''), COUNT(DISTINCT cells.round || ':' || cells.side)
           FROM cells JOIN roots ON roots.id = cells.root_id
           WHERE roots.path = ? AND cells.round BETWEEN 1 AND ? AND cells.side IN ('before', 'after')
             AND cells.rc IS NOT NULL
           GROUP BY cells.op, COALESCE(cells.dtype, '')""",
        (str(Path(root).resolve()), rounds),
    ).fetchall()
    return {(op, dtype) for op, dtype, n in rows if n >= 2 * rounds}


class _Recorder:
    """Records a card's finished cells, each once, as they appear."""

    def __init__(self, store, directory: Path):
        self.store, self.directory = store, Path(directory)
        self.seen = {p for (p,) in store.conn.execute(
            "SELECT path FROM cells WHERE path LIKE ?", (str(self.directory) + os.sep + "%",))}
        self.stale = set()

    def mark_stale(self):
        """Cells left unfinished by an earlier command (an interrupted run):
        never stored as they are by a later op's final sweep."""
        self.stale.update(str(c) for c in layout.find_cell_dirs(self.directory) if str(c) not in self.seen)

    def sweep(self, final: bool = False) -> Tuple[int, List[str]]:
        """Record every finished cell not yet recorded; with final (the
        command has returned, nothing will finish them), the unfinished too.
        Returns (cells recorded, the unfinished ones stored as they are)."""
        new = [c for c in layout.find_cell_dirs(self.directory) if str(c) not in self.seen]
        if not new:
            return 0, []
        finished = [c for c in new if _finished(c)]
        recorded, leftovers = 0, []
        if finished:
            summary = self.store.record(finished)
            unfinished = set(summary["unfinished"])
            self.seen.update(str(c) for c in finished if str(c) not in unfinished)
            recorded += sum(summary[k] for k in ("cells_added", "cells_replaced", "cells_unchanged"))
        if final:
            rest = [c for c in new if str(c) not in self.seen and str(c) not in self.stale]
            if rest:
                summary = self.store.ingest_summary(rest, command="record").as_dict()
                self.seen.update(str(c) for c in rest)
                recorded += sum(summary[k] for k in ("cells_added", "cells_replaced", "cells_unchanged"))
                leftovers = [str(c) for c in rest]
        return recorded, leftovers


def _finished(cell: Path) -> bool:
    env = layout.read_env(cell / layout.CELL_ENV, [])
    return bool(env) and (env.get("RC") or "").strip() != ""


def _run_op(spec: dict, store, recorder: "_Recorder", op: str, dtype: str, events, state: dict):
    """One op's command in its own process group, its cells recorded as they
    finish and the rest when it returns. Returns (exit status, problems)."""
    card = spec["card"]
    env = dict(os.environ)
    env.update(spec["env"])
    env.update({"OP": op, "DTYPE": dtype})
    command = fill(spec["command"], {"op": op, "dtype": dtype, "card": card, "rounds": spec["rounds"]})
    recorder.mark_stale()
    with open(Path(spec["log_dir"]) / _log_name(card, op, dtype), "ab") as log:
        proc = state["proc"] = start_group(command, env, log, cwd=spec["cwd"])
        events.put(("start", card, op, dtype, proc.pid))
        while proc.poll() is None:
            time.sleep(spec["poll_s"])
            n, _ = recorder.sweep()
            if n:
                events.put(("cells", card, n))
    if group_alive(proc.pid):  # stragglers would compete with the next op for the card
        kill_group(proc, spec["grace"])
    state["proc"] = None
    rc = shell_rc(proc.returncode)
    n, leftovers = recorder.sweep(final=True)
    if n:
        events.put(("cells", card, n))
    problems = []
    if rc != 0:
        problems.append(f"op {op_label(op, dtype)} on card {card}: command exited with status {rc}")
    if leftovers:
        problems.append(f"op {op_label(op, dtype)} on card {card}: {len(leftovers)} cells had no cell.env "
                        f"with RC when the command returned; stored as they are: {', '.join(leftovers[:3])}")
    return rc, problems


def card_worker(spec: dict, events) -> None:
    """One card: its ops one after another, each op's cells recorded as they
    finish. Runs in its own process with its own Store. SIGINT / SIGTERM
    kill the current op's process group and end the worker."""
    state = {"stopping": False}

    def on_signal(signum, frame):
        if not state["stopping"]:
            state["stopping"] = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    from .store import Store  # here: the spawned process opens its own connection

    card = spec["card"]
    store = None
    try:
        store = Store(spec["db"])
        directory = Path(spec["card_dir"])
        directory.mkdir(parents=True, exist_ok=True)
        recorder = _Recorder(store, directory)
        n, _ = recorder.sweep()  # cells a previous run finished but did not record
        if n:
            events.put(("cells", card, n))
        done = complete_ops(store, spec["root"], spec["rounds"]) if spec["resume"] else set()
        for op, dtype, weight in spec["ops"]:
            if (op, dtype) in done:
                events.put(("skip", card, op, dtype))
                continue
            t0 = time.monotonic()
            try:
                rc, problems = _run_op(spec, store, recorder, op, dtype, events, state)
            except Exception as error:  # the card goes on with its next op
                if state.get("proc") is not None:
                    kill_group(state.pop("proc"), spec["grace"])
                rc = 1
                problems = [f"op {op_label(op, dtype)} on card {card}: {type(error).__name__}: {error}"]
            for message in problems:
                log_problem(store, f"run campaign card {card}", [str(directory)],
                            str(Path(spec["log_dir"]) / _log_name(card, op, dtype)), message)
            events.put(("done", card, op, dtype, rc, time.monotonic() - t0, problems))
        events.put(("finished", card))
    except KeyboardInterrupt:
        if state.get("proc") is not None:
            kill_group(state["proc"], spec["grace"])
        events.put(("interrupted", card))
        sys.exit(INTERRUPTED_EXIT)
    finally:
        if store is not None:
            store.close()


@dataclass
class CampaignResult:
    root: Path
    interrupted: bool
    cards: List[CardState]
    last_screen: List[str]

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

    def as_dict(self) -> dict:
        return {
            "root": str(self.root), "interrupted": self.interrupted,
            "cards": [{"card": c.card, "done": c.done, "skipped": c.skipped, "failed": c.failed,
                       "cells": c.cells, "left": len(c.remaining) + (1 if c.current else 0)} for c in self.cards],
            "failed": self.failed,
        }


def run_campaign(store_path, config: CampaignConfig, stream: IO = sys.stderr) -> CampaignResult:
    """Run a plan with one worker process per card; returns when every card
    is done, or after Ctrl-C / SIGTERM has stopped every worker and command."""
    plan = config.plan
    visible = visible_devices_var(config.backend)
    devices = config.devices
    if devices is not None and len(devices) < len(plan.cards):
        raise RunError(f"--devices names {len(devices)} devices for {len(plan.cards)} cards")
    root = prepare_campaign(config)
    log_dir = root / "logs"
    log_dir.mkdir(exist_ok=True)
    store_path = str(Path(store_path).resolve())
    states = [CardState(c.card, list(c.ops), remaining=list(c.ops)) for c in plan.cards]
    display = Display(root.name, states, stream, config.status_every_s)
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    workers: Dict[int, multiprocessing.Process] = {}
    interrupted = False
    try:
        with interrupts():
            _start_workers(config, root, log_dir, store_path, visible, ctx, events, workers, states)
            _pump(events, workers, states, display)
    except KeyboardInterrupt:
        interrupted = True
        with interrupts(ignore=True):
            _stop(events, workers, states, display, config.grace)
    last = display.final()
    return CampaignResult(root, interrupted, states, last)


def _start_workers(config, root, log_dir, store_path, visible, ctx, events, workers, states):
    """One worker process per card that has ops, each with its card's environment."""
    devices = config.devices
    for card in config.plan.cards:
        if not card.ops:
            continue
        directory = card_dir(root, card.card)
        directory.mkdir(parents=True, exist_ok=True)
        env = {
            "AB_ROOT": str(directory), "ZL_ISOLATE_TUNER_CACHE": "1", "ROUNDS": str(config.rounds),
            "CARD": str(card.card), visible: str(devices[card.card] if devices else card.card),
            "ZLSTORE_DB": store_path, "CAMPAIGN_ROOT": str(root),
        }
        if config.switch:
            env["SWITCH"] = config.switch
        spec = {
            "card": card.card, "ops": [(o.op, o.dtype, o.weight_s) for o in card.ops],
            "db": store_path, "root": str(root), "card_dir": str(directory), "log_dir": str(log_dir),
            "command": config.command, "rounds": config.rounds, "env": env, "poll_s": config.poll_s,
            "grace": config.grace, "resume": config.resume, "cwd": os.getcwd(),
        }
        worker = ctx.Process(target=card_worker, args=(spec, events), name=f"zlstore-card{card.card}")
        worker.start()
        workers[card.card] = worker
        states[card.card].started = time.monotonic()


def _apply(event, states: List[CardState], display: Display):
    kind, card = event[0], event[1]
    state = states[card]
    now = time.monotonic()
    if kind == "start":
        _, _, op, dtype, pgid = event
        match = next((o for o in state.remaining if (o.op, o.dtype) == (op, dtype)), Op(op, dtype, float("nan")))
        if match in state.remaining:
            state.remaining.remove(match)
        state.current, state.current_since, state.pgid = match, now, pgid
        display.event(f"card {card}: {match.label} started")
    elif kind == "skip":
        _, _, op, dtype = event
        state.remaining = [o for o in state.remaining if (o.op, o.dtype) != (op, dtype)]
        state.skipped += 1
        display.event(f"card {card}: {op_label(op, dtype)} already complete in the store, skipped")
    elif kind == "cells":
        state.cells += event[2]
    elif kind == "done":
        _, _, op, dtype, rc, elapsed, problems = event
        state.current, state.pgid = None, None
        state.done += 1
        if rc != 0:
            state.failed.append(f"card {card} {op_label(op, dtype)}: exit status {rc}")
        display.event(f"card {card}: {op_label(op, dtype)} done, exit status {rc}, {elapsed:.1f} s")
        for problem in problems:
            display.event("problem: " + problem)
    elif kind == "finished":
        state.finished = now
        display.event(f"card {card}: finished")
    elif kind == "interrupted":
        if state.current is not None:  # not done: still left
            state.remaining.insert(0, state.current)
        state.interrupted, state.current, state.pgid = True, None, None
        state.finished = now


def _drain(events, states, display, timeout: float) -> bool:
    try:
        event = events.get(timeout=timeout)
    except queue_mod.Empty:
        return False
    _apply(event, states, display)
    return True


def _pump(events, workers, states, display):
    """Apply the workers' events until every worker has ended."""
    while any(w.is_alive() for w in workers.values()):
        if _drain(events, states, display, 0.25):
            continue
        display.refresh()
    while _drain(events, states, display, 0.1):
        pass
    for card, worker in workers.items():
        worker.join()
        state = states[card]
        if state.finished is None:  # died without saying so
            state.finished = time.monotonic()
            state.failed.append(f"card {card}: worker ended with exit code {worker.exitcode}")
            if state.pgid:
                signal_group(state.pgid, signal.SIGKILL)


def _stop(events, workers, states, display, grace: float):
    """Ctrl-C: every worker kills its op's process group and ends; a worker
    that does not end in time is killed, and so is its op's group."""
    display.event("interrupted: stopping every card")
    for worker in workers.values():
        if worker.is_alive():
            try:
                os.kill(worker.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace + 15
    while any(w.is_alive() for w in workers.values()) and time.monotonic() < deadline:
        _drain(events, states, display, 0.1)
    for card, worker in workers.items():
        if worker.is_alive():
            worker.kill()
        worker.join(timeout=5)
        if states[card].pgid:
            signal_group(states[card].pgid, signal.SIGKILL)
    while _drain(events, states, display, 0.05):
        pass
    for state in states:
        if state.finished is None:
            if state.current is not None:
                state.remaining.insert(0, state.current)
            state.interrupted, state.current = True, None
