"""Commands in their own process groups: started as group (and session)
leaders, so a timeout or a Ctrl-C kills a command with all its children;
a terminal's Ctrl-C does not reach them, the runner does."""

import contextlib
import os
import signal
import subprocess
import time
from typing import Dict, IO

KILL_GRACE_S = 3.0  # SIGTERM, then this long, then SIGKILL


def start_group(command: str, env: Dict[str, str], stdout: IO, cwd=None) -> subprocess.Popen:
    """Start a shell command as the leader of its own process group (and session)."""
    return subprocess.Popen(
        ["/bin/sh", "-c", command],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs; zombies (exited, waiting
    for a reaper that may never come in a container) do not count."""
    if not signal_group(pgid, 0):
        return False
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return True
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def kill_group(proc: subprocess.Popen, grace: float = KILL_GRACE_S):
    """SIGTERM the whole group, SIGKILL whatever is left after grace, reap the leader."""
    pgid = proc.pid
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(pgid):
            break
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@contextlib.contextmanager
def interrupts(ignore: bool = False):
    """SIGINT and SIGTERM raise KeyboardInterrupt here (even where a shell
    started us with SIGINT ignored), so the commands' process groups, which
    a terminal's Ctrl-C does not reach, are killed on the way out; with
    ignore, both are ignored (while stopping). The old handlers come back after."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def to_interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, signal.SIG_IGN if ignore else to_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def shell_rc(returncode: int) -> int:
    """A return code as a shell reports it: killed by signal n is 128 + n."""
    return 128 - returncode if returncode < 0 else returncode
