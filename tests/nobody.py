"""Running zlstore as another user: permission bits do not stop root, and
the tests run as root in CI. A test that needs a file to be unreadable runs
`zlstore` as nobody (setpriv), on a tree and a database that user can reach."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

NOBODY = 65534


@pytest.fixture
def nobody_dir(tmp_path):
    """A directory nobody can enter (pytest's tmp_path is root's alone),
    with db/ inside it that nobody can write; removed afterwards."""
    if os.geteuid() != 0:
        (tmp_path / "db").mkdir()
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(prefix="zlstore-nobody-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        (base / "db").mkdir()
        os.chown(base / "db", NOBODY, NOBODY)
        yield base
    finally:
        for directory, _, _ in os.walk(base):
            os.chmod(directory, 0o755)
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(args, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -m zlstore ARGS` as nobody (as this user where it is not root)."""
    command = [sys.executable, "-m", "zlstore", *args]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is not installed: cannot run as another user")
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
        probe = subprocess.run(command[: -len(args) - 2] + ["-c", "import zlstore"], capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"user nobody cannot run this checkout's python and zlstore: {probe.stderr.strip()[-200:]}")
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd="/")
