"""A campaign on Slurm: one job array, one task a card, each task
`zlstore run card` on the shared campaign root.

What a task does is what a local card process does (card.py); what differs
is how it starts and how it is watched. sbatch submits the array; the state
of each task comes from `scontrol show job` (no accounting is assumed:
sacct needs a database many clusters do not run); scancel stops it. The
tasks are given no database: the submitting process records every cell
from the shared tree, as the tasks' status files name them, so no database
file is written from more than one host (runner.py)."""

import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .card import INHERIT, LOG_DIR, Task, op_spec
from .plan import Op

SLURM_DIR = "slurm"  # in the campaign root: the array scripts, jobs.tsv, options.json
JOBS_TSV = "jobs.tsv"
OPTIONS_JSON = "options.json"
COMMANDS = ("sbatch", "scontrol", "scancel")
COMMAND_TIMEOUT_S = 30.0

# scontrol's job states: the ones a task has ended in, and how the display names them.
ENDED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
SHOWN = {"COMPLETED": "done", "COMPLETING": "running", "CONFIGURING": "running"}


class SlurmError(Exception):
    """Slurm refused or could not be reached; the message says what it said."""


@dataclass
class SlurmOptions:
    """What each task asks Slurm for, passed through to sbatch. gres
    "auto": gpu:1 where the partition has GPUs as a GRES, else none (a
    cluster without GRES, like the test cluster); "none": never."""

    partition: Optional[str] = None
    gres: str = "auto"
    time: Optional[str] = None
    account: Optional[str] = None
    sbatch_args: List[str] = field(default_factory=list)

    def given(self) -> bool:
        return self != SlurmOptions()


def missing_commands() -> List[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"{argv[0]}: {error}") from None


def resolve_gres(options: SlurmOptions) -> Tuple[Optional[str], str]:
    """The --gres each task asks for, and a line saying why."""
    if options.gres == "none":
        return None, "no --gres (--gres none): tasks ask for no GPU"
    if options.gres != "auto":
        return options.gres, f"--gres {options.gres} per task"
    argv = ["sinfo", "-h", "-o", "%G"] + (["-p", options.partition] if options.partition else [])
    found = _run(argv).stdout if shutil.which("sinfo") else ""
    if any(part.strip().startswith("gpu") for line in found.splitlines() for part in line.split(",")):
        return "gpu:1", "--gres gpu:1 per task (the partition has GPUs as a GRES; --gres none to ask for none)"
    return None, (
        "no --gres: the partition has no GPU GRES configured, so tasks ask for no GPU (give --gres to ask for one)"
    )


def array_script(
    root: Path, run_id: str, todo: Dict[int, List[Op]], python: str = sys.executable, poll_s: float = 0.5
) -> str:
    """The batch script: task N runs `zlstore run card` for card N with the
    ops it has left, on the device Slurm gave it, recording nothing."""
    q = shlex.quote
    cases = "".join(f"  {card}) OPS={q(','.join(op_spec(o) for o in ops))} ;;\n" for card, ops in sorted(todo.items()))
    return (
        "#!/bin/sh\n"
        f"# zlstore run campaign --slurm, run {run_id}: one array task per card of {root.name}.\n"
        "# Each task runs its card's ops with `zlstore run card`; the process that\n"
        "# submitted this array records their cells: no database is written here.\n"
        'case "$SLURM_ARRAY_TASK_ID" in\n'
        f"{cases}"
        '  *) echo "zlstore: card $SLURM_ARRAY_TASK_ID is not in this submission" >&2; exit 2 ;;\n'
        "esac\n"
        f'exec {q(python)} -m zlstore run card {q(str(root))} --card "$SLURM_ARRAY_TASK_ID" --ops "$OPS" '
        f"--run-id {q(run_id)} --device {INHERIT} --poll {poll_s:g}\n"
    )


def request_flags(options: SlurmOptions, gres: Optional[str]) -> List[str]:
    """What each task asks for: the options passed through, as sbatch flags."""
    flags = [
        f"{flag}={value}"
        for flag, value in (
            ("--partition", options.partition),
            ("--gres", gres),
            ("--time", options.time),
            ("--account", options.account),
        )
        if value
    ]
    return ["--ntasks=1"] + flags + list(options.sbatch_args)


def sbatch_argv(
    root: Path, cards: Sequence[int], options: SlurmOptions, gres: Optional[str], script: Path, cwd: str
) -> List[str]:
    return (
        [
            "sbatch",
            "--parsable",
            f"--array={','.join(str(c) for c in sorted(cards))}",
            f"--job-name=zlstore:{root.name}",
            f"--output={root / LOG_DIR / 'card%a.out'}",
            "--open-mode=append",
            "--no-requeue",
            f"--chdir={cwd}",
            "--export=ALL",
        ]
        + request_flags(options, gres)
        + [str(script)]
    )


def check_submission(options: SlurmOptions, gres: Optional[str], cards: int):
    """sbatch --test-only with the tasks' options, before anything is
    written: a partition, account, gres or time Slurm would refuse is
    refused here with Slurm's own words."""
    result = _run(
        ["sbatch", "--test-only", f"--array=0-{max(cards, 1) - 1}"] + request_flags(options, gres) + ["--wrap", "true"]
    )
    if result.returncode != 0:
        said = " ".join(line.strip() for line in result.stderr.splitlines() if line.strip())
        raise SlurmError(f"Slurm refuses these task options ({' '.join(request_flags(options, gres))}): {said}")


def submit(
    root: Path, run_id: str, todo: Dict[int, List[Op]], options: SlurmOptions, gres: Optional[str], poll_s: float = 0.5
) -> str:
    """Write the array script and submit it; returns the array job id. The
    job is written down in <root>/slurm/jobs.tsv (a resume checks that none
    of its tasks still runs)."""
    directory = Path(root) / SLURM_DIR
    directory.mkdir(exist_ok=True)
    script = directory / f"array-{run_id}.sh"
    script.write_text(array_script(Path(root), run_id, todo, poll_s=poll_s), encoding="utf-8")
    script.chmod(0o755)
    result = _run(sbatch_argv(Path(root), list(todo), options, gres, script, os.getcwd()))
    if result.returncode != 0:
        raise SlurmError(f"sbatch refused the array ({script}): {result.stderr.strip() or result.stdout.strip()}")
    job = result.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise SlurmError(f"sbatch printed no job id: {result.stdout.strip()!r}")
    jobs = directory / JOBS_TSV
    new = not jobs.exists()
    with open(jobs, "a", encoding="utf-8") as f:
        if new:
            f.write("submitted_at\tjob\tcards\trun_id\tscript\n")
        when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        f.write(f"{when}\t{job}\t{','.join(str(c) for c in sorted(todo))}\t{run_id}\t{script.name}\n")
    return job


def save_options(root: Path, options: SlurmOptions):
    directory = Path(root) / SLURM_DIR
    directory.mkdir(exist_ok=True)
    (directory / OPTIONS_JSON).write_text(json.dumps(asdict(options)) + "\n", encoding="utf-8")


def saved_options(root: Path) -> Optional[SlurmOptions]:
    """The options the campaign was first submitted with (a resume asks for the same)."""
    try:
        return SlurmOptions(**json.loads((Path(root) / SLURM_DIR / OPTIONS_JSON).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def _task_ids(text: str) -> List[int]:
    """scontrol's ArrayTaskId: 3, or a pending range 4-7, 1,3,5-6, 0-7%2."""
    ids: List[int] = []
    for part in text.split("%")[0].strip("[]").split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            ids.extend(range(int(first), int(last if last.isdigit() else first) + 1))
    return ids


def parse_jobs(text: str) -> Dict[int, Task]:
    """`scontrol -o show job ARRAY_JOB` (a line per task; the pending ones
    share one line) as a Task per array task id."""
    tasks: Dict[int, Task] = {}
    for line in text.splitlines():
        fields = dict(token.partition("=")[::2] for token in line.split() if "=" in token)
        if "ArrayTaskId" not in fields:
            continue
        raw = fields.get("JobState", "")
        reason = fields.get("Reason", "")
        reason = "" if reason in ("None", "(null)") else reason
        node = fields.get("NodeList", "")
        node = "" if node in ("(null)", "None") else node
        code = fields.get("ExitCode", "").split(":")[0]
        shown = SHOWN.get(raw, raw.lower())
        for task_id in _task_ids(fields["ArrayTaskId"]):
            tasks[task_id] = Task(
                state=f"{shown} ({reason})" if shown == "pending" and reason else shown,
                job=f"{fields.get('ArrayJobId', '')}_{task_id}",
                node=node,
                reason=reason,
                ended=raw in ENDED,
                exit_code=int(code) if code.isdigit() and raw in ENDED else None,
                raw_state=raw,
            )
    return tasks


def job_tasks(job: str) -> Optional[Dict[int, Task]]:
    """The array's tasks as scontrol shows them; {} when Slurm no longer
    knows the job (every task ended long enough ago to be purged:
    MinJobAge); None when it cannot say (slurmctld unreachable)."""
    result = _run(["scontrol", "-o", "show", "job", job])
    if result.returncode != 0:
        return {} if "invalid job id" in result.stderr.lower() else None
    return parse_jobs(result.stdout)


def cancel(job: str):
    _run(["scancel", job])


def live_jobs(root: Path) -> List[str]:
    """Jobs of this campaign (jobs.tsv) with a task still pending or running."""
    try:
        lines = (Path(root) / SLURM_DIR / JOBS_TSV).read_text(encoding="utf-8").splitlines()[1:]
    except OSError:
        return []
    live = []
    for line in lines:
        job = line.split("\t")[1] if line.count("\t") >= 1 else ""
        tasks = job_tasks(job) if job else None
        if tasks and any(not t.ended for t in tasks.values()):
            busy = ", ".join(f"card {card} {t.state}" for card, t in sorted(tasks.items()) if not t.ended)
            live.append(f"job {job} ({busy})")
    return live


class SlurmLauncher:
    """The cards as one job array: submitted with sbatch, watched through
    scontrol, cancelled with scancel. The tasks record nothing: this
    process records their cells (records_here)."""

    records_here = True
    # How long a task's end may precede its status file's last write on this
    # host: the file is renamed on the compute node before the task ends,
    # and NFS shows the rename at the latest when its attribute cache expires.
    settle_s = 30.0

    def __init__(self, options: SlurmOptions, poll_s: float = 0.5):
        self.options, self.poll_s = options, poll_s
        self.job: Optional[str] = None
        self.todo: Dict[int, List[Op]] = {}
        self.tasks: Dict[int, Task] = {}
        self.gres: Optional[str] = None
        self.note = ""

    def check(self, cards: int):
        """Before anything is written: the commands are there, and Slurm
        takes the tasks' options (sbatch --test-only)."""
        missing = missing_commands()
        if missing:
            raise SlurmError(f"--slurm: {', '.join(missing)} not found: is this a Slurm submit host?")
        self.gres, self.note = resolve_gres(self.options)
        check_submission(self.options, self.gres, cards)

    def start(self, root: Path, run_id: str, todo: Dict[int, List[Op]]):
        save_options(root, self.options)
        self.todo = todo
        # A Ctrl-C while sbatch runs waits until its job id is known, so that it can be cancelled.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self.job = submit(Path(root), run_id, todo, self.options, self.gres, self.poll_s)
            self.tasks = {card: Task("pending", job=f"{self.job}_{card}") for card in todo}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def poll(self) -> Dict[int, Task]:
        if self.job is None:
            return self.tasks
        found = job_tasks(self.job)
        if found is None:
            return self.tasks  # keep the last word; scontrol may answer next time
        for card in self.todo:
            if card in found:
                self.tasks[card] = found[card]
            elif not self.tasks[card].ended:  # purged: it ended a while ago
                self.tasks[card] = replace(self.tasks[card], ended=True)
        return self.tasks

    def cancel(self):
        if self.job is not None:
            cancel(self.job)

    def kill(self, pgids: Dict[int, int]):
        """Nothing more to do from here: scancel reached every task's
        processes through slurmstepd, on whichever host they run."""

    def live(self, root: Path) -> List[str]:
        return live_jobs(root)

    def where(self) -> str:
        return f"Slurm job {self.job}" if self.job else "Slurm"
