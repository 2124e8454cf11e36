"""Shared fixtures: stores on real SQLite files, generated runs/ trees, and
a real Slurm cluster on this machine."""

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from zlstore import Store


@pytest.fixture(scope="session")
def example_source(tmp_path_factory):
    """The example tree, generated once per session, with its manifest."""
    from zlstore import testing as generator

    dest = tmp_path_factory.mktemp("example") / "runs"
    manifest = generator.make_example_tree(dest)
    return dest, manifest


@pytest.fixture
def example_tree(example_source, tmp_path):
    """A private copy of the example tree that a test may change."""
    source, manifest = example_source
    dest = tmp_path / "runs"
    shutil.copytree(source, dest)
    return dest, manifest


@pytest.fixture(scope="session")
def example_store_path(example_source, tmp_path_factory):
    """A database holding the example tree, ingested once per session
    (read-only use), and holding every fingerprint rule, as after
    `zlstore rescore --rule v4` (an ingest computes v1-v3 only)."""
    from zlstore import ttgir

    source, _ = example_source
    path = tmp_path_factory.mktemp("store") / "example.db"
    with Store(path) as store:
        store.ingest(source)
        for rule in ttgir.RULES:
            store.compute_fingerprints(rule)
    return path


@pytest.fixture
def example_store(example_store_path, tmp_path):
    """A private copy of the ingested example database that a test may change."""
    path = tmp_path / "example.db"
    with Store(example_store_path) as source:
        source.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(example_store_path, path)
    with Store(path) as store:
        yield store


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "test.db") as store:
        yield store


SAMPLES = Path(__file__).parent / "samples"


SLURM_SCRIPTS = Path(__file__).parent / "slurm"
SLURM_PROGRAMS = ("slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "munged", "mungekey")
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def _free_ports(count: int) -> int:
    """The first of count consecutive ports nothing listens on."""
    for first in range(21000, 40000, 97):
        try:
            for port in range(first, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError("no free ports")


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real Slurm (Debian's slurmctld, slurmd, munge) on this machine with
    four slurmd "nodes" of one CPU each, started once for the session by
    tests/slurm/start_slurm.sh and stopped at its end. Yields the
    environment every Slurm command needs (SLURM_CONF). Skipped only when
    Slurm is not installed (.ci/run installs it)."""
    missing = [p for p in SLURM_PROGRAMS if shutil.which(p, path=SBIN_PATH) is None]
    if missing:
        pytest.skip(f"slurm is not installed ({', '.join(missing)} not found): "
                    "apt-get install slurmctld slurmd slurm-client munge, as .ci/run does")
    # munged wants every directory above its socket open to all: not pytest's 0700 tmp_path
    base = Path(tempfile.mkdtemp(prefix="zlstore-slurm-", dir="/tmp"))
    base.chmod(0o755)
    ports = _free_ports(5)
    env = dict(os.environ, PATH=SBIN_PATH, SLURM_BASE=str(base), NODES="4",
               SLURMCTLD_PORT=str(ports), SLURMD_PORT=str(ports + 1))
    started = subprocess.run(["bash", str(SLURM_SCRIPTS / "start_slurm.sh")], env=env,
                             capture_output=True, text=True, timeout=120)
    try:
        if started.returncode != 0:
            logs = "".join(f"--- {log}\n{log.read_text()[-2000:]}" for log in (base / "run" / "log").glob("*.log"))
            pytest.fail(f"the Slurm test cluster did not start:\n{started.stdout}{started.stderr}{logs}")
        yield {"SLURM_CONF": str(base / "slurm.conf"), "PATH": SBIN_PATH}
    finally:
        subprocess.run(["bash", str(SLURM_SCRIPTS / "stop_slurm.sh")], env=env, capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)
