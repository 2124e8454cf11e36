"""One card of a campaign: `zlstore run card`, the process that runs a
card's ops one after another. The local runner starts one per card; on
Slurm each array task is one. Same code either way.

Everything it needs is in the campaign root: campaign.env (rounds, the op
command, the switch, CELL_TIMEOUT and the caliber every host measures
under) and partition.tsv (the card's ops). It reports in the root too: a
status file per card (status/card<N>.json), replaced whole at each event,
so a submitter on another host reads it from the shared tree (a rename is
what NFS's close-to-open consistency shows whole), and the same events as
JSON lines on stdout for its log. Each event names the cells that finished
(cell.env with RC), so whoever records them needs no walk of the tree.

It records those cells itself only when given a database (a local
campaign: every card its own writer). On Slurm it is given none: the one
process that submitted the array records, so no database is written from
two hosts (runner.py, slurm.py).

An op is its command in its own process group, killed with its children
after a bound derived from CELL_TIMEOUT and the rounds (op_timeout_s). The
cells it left unfinished then get a cell.env with RC 124 (TRUNCATED: a cost
problem, not a verdict) and the card goes on with its next op.

In a campaign that stops when decided (adaptive.py) the command runs one
round (ROUND): locally the runner starts the card once per step, each op at
the round plans/step<N>.tsv gives it (--step); on Slurm the card runs its
ops round after round and decides them itself, from a store of its own."""

import json
import os
import shlex
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, IO, List, Optional, Sequence, Tuple

from . import adaptive
from .. import caliber, provenance
from ..read import layout
from . import plan as planmod
from ..db import now as utc_now
from ..names import EXIT_INTERRUPTED, TIMEOUT_RC
from .plan import Op
from .procs import KILL_GRACE_S, group_alive, interrupts, kill_group, shell_rc, start_group
from ..store.store import Store
from .harness import DEFAULT_CELL_TIMEOUT, caliber_items, env_text, fill, write_atomic
from ..store.journal import log_problem

STATUS_DIR = "status"
LOG_DIR = "logs"
INHERIT = "inherit"  # --device inherit: the scheduler chose the device (Slurm's --gres)


class CardError(Exception):
    """The card cannot run as asked (no such card, an op not in its plan)."""


def op_timeout_s(cell_timeout: float, rounds: int) -> float:
    """How long one op may run before it is killed: every one of its 2 x
    rounds cells may take its whole CELL_TIMEOUT (the harness kills a cell
    there itself), plus one CELL_TIMEOUT for the op's own start and end. An
    op past this hangs outside any cell, or its harness's timeout failed."""
    return (2 * rounds + 1) * cell_timeout


def status_path(root: Path, card: int) -> Path:
    return Path(root) / STATUS_DIR / f"card{card}.json"


def card_dir(root: Path, card: int) -> Path:
    return Path(root) / f"card{card}"


def op_log_name(card: int, op: str, dtype: str) -> str:
    return f"card{card}_{op}{'_' + dtype if dtype else ''}.log"


def read_command(root: Path) -> Optional[str]:
    """campaign.env's COMMAND as it was given: read_env would have split a
    quoted template into words."""
    try:
        line = next(l for l in (Path(root) / layout.CAMPAIGN_ENV).read_text().splitlines() if l.startswith("COMMAND="))
        words = shlex.split(line[len("COMMAND=") :])
    except (StopIteration, ValueError, OSError):
        return None
    return words[0] if len(words) == 1 else " ".join(words)


def op_spec(op: Op) -> str:
    """op:dtype for --ops; op: for the op's own default set (a bare op
    would mean any dtype of it)."""
    return f"{op.op}:{op.dtype}" if op.dtype else f"{op.op}:"


@dataclass
class Task:
    """A card's process, or its Slurm task, as its scheduler last said."""

    state: str  # as shown: pending, running, done, failed, cancelled, timeout, node_fail, ...
    job: str = ""  # <array job>_<task>, or the local pid
    node: str = ""
    reason: str = ""
    ended: bool = False
    exit_code: Optional[int] = None
    raw_state: str = ""  # scontrol's JobState (TIMEOUT), or the local exit status


# -- what a card runs ----------------------------------------------------------


@dataclass
class CardPlan:
    """A card's share of a campaign, read from the campaign root alone."""

    root: Path
    card: int
    ops: List[Op]
    rounds: int
    command: str
    cell_timeout: float
    switch: Optional[str]
    visible: Optional[str]  # the backend's visible-devices variable
    caliber: List[Tuple[str, str]]  # campaign.env's caliber variables
    stopping: Optional[adaptive.Stopping] = None  # until-decided: an op's rounds run one at a time
    op_rounds: Dict[Tuple[str, str], int] = field(default_factory=dict)  # a step's round per op

    def rounds_per_run(self, round_: Optional[int]) -> int:
        """How many rounds one run of the command makes: one when a round is asked."""
        return 1 if round_ is not None else self.rounds

    def op_timeout_s(self, round_: Optional[int] = None) -> float:
        return op_timeout_s(self.cell_timeout, self.rounds_per_run(round_))


def read_card_plan(root, card: int, only: Optional[str] = None, step: Optional[int] = None) -> CardPlan:
    """The card's ops (all of them, or those `only` names, op[:dtype]
    comma-separated, in the plan's order) and the campaign's settings; with
    step, the ops and rounds of an until-decided campaign's step N
    (plans/step<N>.tsv) instead of partition.tsv's."""
    root = Path(root).resolve()
    env = layout.read_env(root / layout.CAMPAIGN_ENV, [])
    if env is None:
        raise CardError(f"{root} has no {layout.CAMPAIGN_ENV}: not a campaign root")
    source = adaptive.step_path(root, step) if step is not None else root / layout.PARTITION_TSV
    op_rounds: Dict[Tuple[str, str], int] = {}
    try:
        if step is not None:
            plan, op_rounds = planmod.read_step_tsv(source)
        else:
            plan = planmod.read_partition_tsv(source)
    except OSError as error:
        raise CardError(f"{root}: cannot read {source.name}: {error}") from None
    if card >= len(plan.cards):
        raise CardError(f"{root}: no card {card} in {source.name} (cards 0..{len(plan.cards) - 1})")
    ops = list(plan.cards[card].ops)
    if only is not None:
        wanted = planmod.parse_op_spec(only)
        for op, dtype in wanted:
            if not any(o.op == op and (dtype is None or o.dtype == dtype) for o in ops):
                label = f"{op}:{dtype}" if dtype else op
                raise CardError(f"op {label} is not one of card {card}'s ops in {source}")
        ops = [o for o in ops if any(o.op == op and (dtype is None or o.dtype == dtype) for op, dtype in wanted)]
    command = read_command(root)
    if not command:
        raise CardError(f"{root / layout.CAMPAIGN_ENV} has no COMMAND")
    try:
        rounds = int(env.get("ROUNDS") or "")
        cell_timeout = float(env.get("CELL_TIMEOUT") or DEFAULT_CELL_TIMEOUT)
    except ValueError as error:
        raise CardError(f"{root / layout.CAMPAIGN_ENV}: {error}") from None
    return CardPlan(
        root,
        card,
        ops,
        rounds,
        command,
        cell_timeout,
        env.get("SWITCH") or None,
        env.get("BACKEND_VISIBLE_DEVICES") or None,
        caliber_items(env),
        adaptive.stopping(env),
        op_rounds,
    )


# -- reporting: the status file and stdout --------------------------------------


class Status:
    """The card's events, each appended and the whole file replaced; a
    reader keeps how many it has seen (StatusReader)."""

    def __init__(self, root: Path, card: int, run_id: Optional[str], out: Optional[IO] = None):
        self.path = status_path(root, card)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.doc: Dict[str, Any] = {
            "run_id": run_id,
            "card": card,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "slurm_job": slurm_task_id(os.environ),
            "started_at": utc_now(),
            "state": "running",
            "events": [],
        }
        self._write()

    def event(self, kind: str, **fields):
        event = {"event": kind, "at": utc_now(), **fields}
        self.doc["events"].append(event)
        if kind in ("finished", "interrupted"):
            self.doc["state"] = kind
        self._write()
        if self.out is not None:
            self.out.write(json.dumps(event) + "\n")
            self.out.flush()

    def _write(self):
        write_atomic(self.path, json.dumps(self.doc))  # by rename: NFS shows it whole


def slurm_task_id(env) -> Optional[str]:
    """<array job>_<task> inside a Slurm array task, the job id in a plain job."""
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


class StatusReader:
    """A card's status file as a stream of new events, for one run id (an
    earlier run's file is not this run's news)."""

    def __init__(self, root: Path, card: int, run_id: Optional[str]):
        self.path, self.run_id = status_path(root, card), run_id
        self.seen = 0
        self.doc: Optional[dict] = None
        self._sig: Optional[Tuple[int, int, int]] = None

    def new_events(self) -> List[dict]:
        try:
            st = os.stat(self.path)
            sig = (st.st_ino, st.st_mtime_ns, st.st_size)
            if sig == self._sig:
                return []
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        if doc.get("run_id") != self.run_id:
            return []
        self._sig, self.doc = sig, doc
        events = doc.get("events") or []
        fresh, self.seen = events[self.seen :], len(events)
        return fresh

    @property
    def final(self) -> bool:
        """The card said it ended (finished or interrupted)."""
        return self.doc is not None and self.doc.get("state") in ("finished", "interrupted")


def still_running(root: Path, card: int) -> Optional[str]:
    """The card's process when its status says it runs, on this host, and
    that process is still a `zlstore run card`: a resume must not start
    the card twice. (On Slurm the scheduler says: slurm.live_jobs.)"""
    try:
        doc = json.loads(status_path(root, card).read_text(encoding="utf-8"))
        if doc.get("state") != "running" or doc.get("host") != socket.gethostname() or doc.get("slurm_job"):
            return None
        cmdline = Path(f"/proc/{int(doc['pid'])}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return f"card {card} (pid {doc['pid']})" if b"run\0card\0" in cmdline else None


# -- the cells of an op ----------------------------------------------------------


class CellWatch:
    """The cell directories under a card's directory: which ones appeared
    since the op started, which of those finished (cell.env with RC), and
    when each was first seen."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.known = set(self._scan())  # earlier ops' and earlier runs' cells
        self.reported: set = set()
        self.first_seen: Dict[str, float] = {}

    def _scan(self) -> List[str]:
        return [str(c) for c in layout.find_cell_dirs(self.directory)] if self.directory.is_dir() else []

    def start_op(self):
        self.known.update(self._scan())

    def new_cells(self) -> List[str]:
        now = time.monotonic()
        found = [c for c in self._scan() if c not in self.known]
        for c in found:
            self.first_seen.setdefault(c, now)
        return found

    def newly_finished(self) -> List[str]:
        """Cells of this op finished since the last call."""
        done = [c for c in self.new_cells() if c not in self.reported and layout.finished(c)]
        self.reported.update(done)
        return done

    def unfinished(self) -> List[str]:
        return [c for c in self.new_cells() if c not in self.reported and not layout.finished(c)]


def write_truncated_env(
    cell: Path, plan: CardPlan, op: Op, elapsed_s: float, environment: Optional[Dict[str, str]] = None
):
    """cell.env for a cell its op's timeout killed: RC 124, the values its
    path and the campaign give, RC last as the harness writes it."""
    parts = Path(cell).relative_to(plan.root).parts
    values = layout.path_values(layout.RootRef(plan.root, "campaign", parts))
    side = values.get("side")
    items = [("OP", values.get("op") or op.op), ("DTYPE", op.dtype)]
    items += [(k, v) for k, v in (("SIDE", side), ("ROUND", values.get("round"))) if v is not None]
    items += [("CARD", plan.card)]
    if plan.switch:
        items += [("SWITCH", plan.switch)]
    if side in layout.SIDES:
        items += [("SWITCH_VALUE", layout.SIDES.index(side))]
    items += [("CELL_TIMEOUT", format(plan.cell_timeout, "g"))]
    items += caliber_items(dict(plan.caliber, ZL_ISOLATE_TUNER_CACHE="1"))
    items += provenance.env_items(environment or {})
    items += [("ELAPSED_S", f"{elapsed_s:.3f}"), ("RC", TIMEOUT_RC)]
    (Path(cell) / layout.CELL_ENV).write_text(env_text(items), encoding="utf-8")


# -- recording: in the card (local) or in the submitter (Slurm) -------------------


class Recorder:
    """Records what a card's events name: the cells that finished, and at
    an op's end the cells it left unfinished (stored as they are) and its
    problems. The card uses one when given a database; a Slurm submitter
    uses one per card, reading the events from the shared tree, where a
    cell.env another host wrote may show late: such a cell is tried again
    until NFS_GRACE_S, then stored as it is."""

    NFS_GRACE_S = 60.0

    def __init__(self, store, root: Path, card: int):
        self.store, self.root, self.card = store, Path(root), card
        self.recorded = 0
        self.pending: Dict[str, float] = {}

    def apply(self, event: dict):
        """Take what an event names: its finished cells wait for flush();
        at an op's end, the cells it left unfinished are stored as they
        are and its problems logged."""
        if event["event"] == "cells":
            self.add(event["paths"])
        elif event["event"] == "done":
            self.flush()
            self.as_they_are(event.get("leftovers") or [])
            for message in event.get("problems") or []:
                self.problem(event, message)
        elif event["event"] == "stopped":  # a card that decides alone: its stop, in this store too
            self.flush()
            adaptive.record(
                self.store.conn,
                self.root,
                [(event["op"], event["dtype"])],
                event["round"],
                event["reason"],
                tree=False,  # the card wrote it in the tree
            )

    def add(self, relpaths: Sequence[str]):
        now = time.monotonic()
        for p in relpaths:
            self.pending.setdefault(p, now)

    def flush(self) -> int:
        """Record the pending cells in one call (a transaction per cell);
        one not seen finished yet waits for the next flush, at most
        NFS_GRACE_S. Returns the cells recorded."""
        if not self.pending:
            return 0
        now = time.monotonic()
        summary = self.store.record([self.root / p for p in self.pending])
        late = {str(Path(p).relative_to(self.root)) for p in summary["unfinished"]}
        expired = [p for p in late if now - self.pending[p] > self.NFS_GRACE_S]
        self.pending = {p: t for p, t in self.pending.items() if p in late and p not in expired}
        n = sum(summary[k] for k in ("cells_added", "cells_replaced", "cells_unchanged"))
        self.recorded += n
        return n + self.as_they_are(expired)

    def as_they_are(self, relpaths: Sequence[str]) -> int:
        if not relpaths:
            return 0
        summary = self.store.ingest_summary([self.root / p for p in relpaths], command="record").as_dict()
        n = sum(summary[k] for k in ("cells_added", "cells_replaced", "cells_unchanged"))
        self.recorded += n
        return n

    def problem(self, event: dict, message: str):
        log_problem(
            self.store.conn,
            f"run campaign card {self.card}",
            [str(card_dir(self.root, self.card))],
            str(self.root / LOG_DIR / op_log_name(self.card, event["op"], event["dtype"])),
            message,
        )


# -- running the ops -----------------------------------------------------------------


@dataclass
class OpResult:
    rc: int
    elapsed_s: float
    timed_out: bool = False
    leftovers: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)


class Card:
    """A card's ops in turn; each op's finished cells published as they
    appear (and recorded, with a recorder)."""

    def __init__(
        self,
        plan: CardPlan,
        status: Status,
        recorder: Optional[Recorder] = None,
        device: Optional[str] = None,
        poll_s: float = 0.5,
        grace: float = KILL_GRACE_S,
        decider: Optional[Recorder] = None,
    ):
        self.plan, self.status, self.recorder = plan, status, recorder
        # until-decided without a step: the card decides its own ops from the store this records into
        self.decider = decider or recorder
        self.device, self.poll_s, self.grace = device, poll_s, grace
        self.directory = card_dir(plan.root, plan.card)
        self.proc: Optional[subprocess.Popen] = None
        self.current: Optional[Op] = None
        self.watch: Optional[CellWatch] = None
        # what this card's cells run on, seen once: its command may know better (ENV_* it writes itself)
        self.environment = provenance.capture(self.visible_devices())

    def visible_devices(self) -> Optional[str]:
        """The devices this card's commands see: its own, or what the
        scheduler set (--device inherit)."""
        if self.plan.visible and self.device != INHERIT:
            return str(self.device if self.device is not None else self.plan.card)
        return os.environ.get(self.plan.visible or "CUDA_VISIBLE_DEVICES")

    def op_env(self, op: Op, round_: Optional[int] = None) -> Dict[str, str]:
        """The op's environment: the caliber campaign.env recorded (the same
        on every host and after a resume), the card's own AB_ROOT and
        device, ZL_ISOLATE_TUNER_CACHE=1 (eight processes on one tuner
        cache is what campaigns avoid)."""
        plan = self.plan
        env = dict(os.environ)
        env.update(provenance.exported(self.environment))
        env.update(plan.caliber)
        env.update(
            {
                "AB_ROOT": str(self.directory),
                "ZL_ISOLATE_TUNER_CACHE": "1",
                "ROUNDS": str(plan.rounds),
                "CARD": str(plan.card),
                "CAMPAIGN_ROOT": str(plan.root),
                "CELL_TIMEOUT": format(plan.cell_timeout, "g"),
                "OP": op.op,
                "DTYPE": op.dtype,
            }
        )
        if plan.switch:
            env["SWITCH"] = plan.switch
        if round_ is not None:
            env["ROUND"] = str(round_)  # run this round only (the harness author's contract: docs/campaigns.md)
        else:
            env.pop("ROUND", None)  # one inherited would make the command run a single round
        if plan.visible and self.device != INHERIT:
            devices = self.visible_devices()
            assert devices is not None  # the card's own, given the condition above
            env[plan.visible] = devices
        if self.recorder is not None:
            env["ZLSTORE_DB"] = str(Path(self.recorder.store.path).resolve())
        else:
            env.pop("ZLSTORE_DB", None)  # no database on this host: the submitter records
        return env

    def publish(self, op: Op, cells: List[str]):
        if not cells:
            return
        relpaths = [str(Path(c).relative_to(self.plan.root)) for c in cells]
        for recorder in {id(r): r for r in (self.recorder, self.decider) if r is not None}.values():
            recorder.add(relpaths)  # recorded before they are announced
            recorder.flush()
        self.status.event("cells", op=op.op, dtype=op.dtype, paths=relpaths)

    def run(self) -> int:
        """Every op; 0 when each ran cleanly, 1 when some failed. A
        KeyboardInterrupt (SIGINT, SIGTERM) kills the running op's group
        and goes up to the caller."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.plan.root / LOG_DIR).mkdir(exist_ok=True)
        watch = self.watch = CellWatch(self.directory)
        if self.plan.stopping is not None and not self.plan.op_rounds:
            failed = self.run_until_decided(watch)
        else:
            failed = sum(
                self.run_one(op, watch, self.plan.op_rounds.get((op.op, op.dtype))).rc != 0 for op in self.plan.ops
            )
        self.status.event("finished")
        return 1 if failed else 0

    def run_one(self, op: Op, watch: "CellWatch", round_: Optional[int] = None) -> "OpResult":
        """One run of the op's command (every round, or round_ alone), reported as done."""
        self.current = op
        try:
            result = self.run_op(op, watch, round_)
        except Exception as error:  # the card goes on with its next op
            self.stop_op()
            result = OpResult(
                1, 0.0, problems=[f"op {op.label} on card {self.plan.card}: {type(error).__name__}: {error}"]
            )
        self.current = None
        event = dict(
            op=op.op,
            dtype=op.dtype,
            rc=result.rc,
            elapsed_s=round(result.elapsed_s, 3),
            timed_out=result.timed_out,
            leftovers=result.leftovers,
            problems=result.problems,
        )
        if round_ is not None:
            event["round"] = round_
        for recorder in {id(r): r for r in (self.recorder, self.decider) if r is not None}.values():
            recorder.apply({"event": "done", **event})
        self.status.event("done", **event)
        return result

    def run_until_decided(self, watch: "CellWatch") -> int:
        """An until-decided campaign's ops on this card alone (Slurm, or
        `run card` by hand): a round of each op that goes on, then the
        stops, until none goes on. Each decision is the card's own, from
        the store it records into; each stop is an event ("stopped") that
        the submitter records in its store too. A resumed card takes up
        each op after its complete rounds. Returns how many ops failed."""
        plan, decider = self.plan, self.decider
        assert plan.stopping is not None and decider is not None
        store, root, rule = decider.store, plan.root, plan.stopping
        found = layout.find_cell_dirs(self.directory) if self.directory.is_dir() else []
        if found:
            store.record(found)  # what an earlier run of this card left
        done = adaptive.complete_rounds(store.conn, root)
        mine = {adaptive.key(op): op for op in plan.ops}
        current = {k: done.get(k, 0) for k in mine}
        progress = adaptive.Progress(rule, {}, {})
        started = {k: r for k, r in current.items() if r > 0}
        going = set(adaptive.after_round(store, root, rule, started, [], progress, plan.card)) if started else set()
        going |= {k for k, r in current.items() if r == 0}
        self._said_stops(progress, set())
        failed_ops = 0
        while going:
            ran: Dict[Tuple[str, str], int] = {}
            failed = set()
            for op in plan.ops:
                k = adaptive.key(op)
                if k not in going:
                    continue
                adaptive.supersede_after(store, root, k, current[k])
                ran[k] = current[k] + 1
                if self.run_one(op, watch, ran[k]).rc != 0:
                    failed.add(k)
            before = set(progress.stops)
            going = set(adaptive.after_round(store, root, rule, ran, failed, progress, plan.card))
            current.update(ran)
            failed_ops += len(failed)
            self._said_stops(progress, before)
            self.status.event("round", round=max(ran.values()), line=progress.line(max(ran.values()), len(going)))
        return failed_ops

    def _said_stops(self, progress: "adaptive.Progress", before: set):
        for (op, dtype), (round_, reason) in sorted(progress.stops.items()):
            if (op, dtype) not in before:
                self.status.event("stopped", op=op, dtype=dtype, round=round_, reason=reason)

    def stop_op(self):
        if self.proc is not None:
            kill_group(self.proc, self.grace)
            self.proc = None

    def interrupted(self):
        """Stopped from outside (Ctrl-C, scancel, a time limit): the running
        op's group killed, the cells it finished so far published, and the
        card says so. Its unfinished cells stay as they are: a resumed
        campaign runs the op again and supersedes them."""
        self.stop_op()
        if self.current is not None and self.watch is not None:
            self.publish(self.current, self.watch.newly_finished())
        self.status.event(
            "interrupted",
            op=self.current.op if self.current else None,
            dtype=self.current.dtype if self.current else None,
        )

    def run_op(self, op: Op, watch: CellWatch, round_: Optional[int] = None) -> OpResult:
        """The op's command: every round, or round_ alone (ROUND, {round})."""
        plan, card = self.plan, self.plan.card
        watch.start_op()
        values: Dict[str, object] = {"op": op.op, "dtype": op.dtype, "card": card, "rounds": plan.rounds}
        if round_ is not None:
            values["round"] = round_
        command = fill(plan.command, values)
        timeout = plan.op_timeout_s(round_)
        t0 = time.monotonic()
        published = set(watch.reported)
        with open(plan.root / LOG_DIR / op_log_name(card, op.op, op.dtype), "ab") as log:
            self.proc = proc = start_group(
                command, self.op_env(op, round_), log
            )  # in this directory: relative paths work
            self.status.event(
                "start",
                op=op.op,
                dtype=op.dtype,
                pgid=proc.pid,
                timeout_s=timeout,
                weight_s=op.weight_s if op.weight_s == op.weight_s else None,
            )
            timed_out = False
            while proc.poll() is None:
                time.sleep(self.poll_s)
                self.publish(op, watch.newly_finished())
                if time.monotonic() - t0 > timeout:
                    timed_out = True
                    break
        if timed_out or group_alive(proc.pid):  # stragglers would compete with the next op for the card
            kill_group(proc, self.grace)
        self.proc = None
        elapsed = time.monotonic() - t0
        self.publish(op, watch.newly_finished())
        result = OpResult(TIMEOUT_RC if timed_out else shell_rc(proc.returncode), elapsed, timed_out)
        unfinished = watch.unfinished()
        where = f"op {op.label} on card {card}"
        if timed_out:
            now = time.monotonic()
            for cell in unfinished:
                write_truncated_env(Path(cell), plan, op, now - watch.first_seen.get(cell, now), self.environment)
            self.publish(op, watch.newly_finished())
            result.problems.append(
                f"{where}: killed at its timeout of {format(timeout, 'g')} s "
                f"((2 x {plan.rounds_per_run(round_)} rounds + 1) x "
                f"CELL_TIMEOUT {format(plan.cell_timeout, 'g')} s); {len(unfinished)} unfinished cells "
                f"recorded with RC {TIMEOUT_RC} (TRUNCATED)"
            )
        else:
            if result.rc != 0:
                result.problems.append(f"{where}: command exited with status {result.rc}")
            if unfinished:
                result.leftovers = [str(Path(c).relative_to(plan.root)) for c in unfinished]
                watch.reported.update(unfinished)
                result.problems.append(
                    f"{where}: {len(unfinished)} cells had no cell.env with RC when the command returned; "
                    f"stored as they are: {', '.join(result.leftovers[:3])}"
                )
        if round_ is not None:
            other = sorted({str(r) for r in map(_round_of, watch.reported - published) if r != round_})
            if other:  # its cells would claim rounds another run claims too
                result.problems.append(
                    f"{where}: asked for round {round_} (ROUND={round_}) but wrote round(s) "
                    f"{', '.join(other)}: the command must run only the round it is given"
                )
                result.rc = result.rc or 1
        return result


def _round_of(cell: str) -> Optional[int]:
    """The round a cell's path names (.../r<N>/<side>)."""
    name = Path(cell).parent.name
    return int(name[1:]) if name[:1] == "r" and name[1:].isdigit() else None


def run_card(
    root,
    card: int,
    *,
    ops: Optional[str] = None,
    db=None,
    run_id: Optional[str] = None,
    device: Optional[str] = None,
    poll_s: float = 0.5,
    out: Optional[IO] = None,
    step: Optional[int] = None,
) -> int:
    """`zlstore run card`: the card's ops, reported in its status file (and
    as JSON lines on out), recorded into db when one is given. Returns the
    exit status: 0 every op ran cleanly, 1 some op failed, 130 interrupted
    (SIGINT or SIGTERM: Ctrl-C, scancel, a Slurm time limit)."""
    plan = read_card_plan(root, card, ops, step)
    missing = [f.env for f in caliber.missing(dict(plan.caliber)) if f.env != "ZL_ISOLATE_TUNER_CACHE"]
    if missing:
        raise CardError(
            f"{plan.root / layout.CAMPAIGN_ENV} lacks the caliber variables {', '.join(missing)}: "
            "every cell would have an unknown caliber"
        )
    store = own = None
    scratch = None
    if db is not None:
        store = Store(db)
    elif plan.stopping is not None and step is None:
        # deciding alone with no database (a Slurm task): a store of its own, on this host, for the decisions only
        scratch = tempfile.TemporaryDirectory(prefix=f"zlstore-card{card}-")
        own = Store(Path(scratch.name) / "decide.db")
    status = Status(plan.root, card, run_id, out)
    runner = Card(
        plan,
        status,
        Recorder(store, plan.root, card) if store else None,
        device,
        poll_s,
        decider=Recorder(own, plan.root, card) if own else None,
    )
    try:
        with interrupts():
            return runner.run()
    except KeyboardInterrupt:
        with interrupts(ignore=True):
            runner.interrupted()
        return EXIT_INTERRUPTED
    finally:
        for opened in (store, own):
            if opened is not None:
                opened.close()
        if scratch is not None:
            scratch.cleanup()
