"""A real Slurm on this machine for the tests and bench/slurm.py: Debian's
slurmctld and N slurmd "nodes" of one CPU each, started by start_slurm.sh
under a directory of its own, on ports nothing else listens on, so that
two of them (a test session and a benchmark) can run at once."""

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent
PROGRAMS = ("slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "munged", "mungekey")
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def missing_programs() -> list:
    return [p for p in PROGRAMS if shutil.which(p, path=SBIN_PATH) is None]


def free_ports(count: int, start: int = 21000) -> int:
    """The first of count consecutive ports nothing listens on."""
    for first in range(start, 60000, 97):
        try:
            for port in range(first, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError("no free ports")


class ClusterError(RuntimeError):
    """The cluster did not start; the message holds its logs."""


class Cluster:
    """start_slurm.sh with `nodes` nodes; env is what every Slurm command needs."""

    def __init__(self, nodes: int = 4):
        # munged wants every directory above its socket open to all: not a 0700 tmp_path
        self.base = Path(tempfile.mkdtemp(prefix="zlstore-slurm-", dir="/tmp"))
        self.base.chmod(0o755)
        port = free_ports(nodes + 1)
        self.script_env = dict(
            os.environ,
            PATH=SBIN_PATH,
            SLURM_BASE=str(self.base),
            NODES=str(nodes),
            SLURMCTLD_PORT=str(port),
            SLURMD_PORT=str(port + 1),
        )
        started = subprocess.run(
            ["bash", str(HERE / "start_slurm.sh")], env=self.script_env, capture_output=True, text=True, timeout=120
        )
        if started.returncode != 0:
            logs = "".join(f"--- {log}\n{log.read_text()[-2000:]}" for log in (self.base / "run" / "log").glob("*.log"))
            self.stop()
            raise ClusterError(f"the Slurm cluster did not start:\n{started.stdout}{started.stderr}{logs}")
        self.env: Dict[str, str] = {"SLURM_CONF": str(self.base / "slurm.conf"), "PATH": SBIN_PATH}

    def stop(self):
        subprocess.run(["bash", str(HERE / "stop_slurm.sh")], env=self.script_env, capture_output=True, timeout=120)
        shutil.rmtree(self.base, ignore_errors=True)
