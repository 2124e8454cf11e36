"""Running zlstore as another user: permission bits do not stop root, and
the tests run as root in CI. A test that needs a file to be unreadable runs
`zlstore` as nobody (setpriv), on a tree and a database that user can reach.

The checkout itself may sit where nobody cannot reach it (a clone in a
`mktemp -d` directory, mode 700, its venv inside): then nobody runs a copy
of what zlstore imports, in a directory every user can read (nobody_python)."""

import atexit
import errno
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

NOBODY = 65534
REPO = Path(__file__).resolve().parent.parent
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]

# What the venv holds for the tests and tools alone: nobody runs only zlstore.
_NOT_COPIED = {"mypy", "mypyc", "ruff", "selenium", "hypothesis", "pip", "setuptools", "_pytest", "pytest", "cogapp"}

_python: Dict[str, Tuple[List[str], Optional[dict]]] = {}


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


def _runs_as_nobody(python: List[str], env: Optional[dict]) -> subprocess.CompletedProcess:
    return subprocess.run(
        SETPRIV + python + ["-c", "import zlstore.cli"], capture_output=True, text=True, env=env, cwd="/"
    )


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (the same file, no copy) where source and target share a filesystem."""
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        shutil.copy2(source, target)


def _readable_copy() -> Path:
    """This venv's site-packages (less the test tools) with this checkout's
    zlstore and schema.sql in it, in a new directory every user can read;
    removed when the tests end."""
    base = Path(tempfile.mkdtemp(prefix="zlstore-nobody-py-", dir="/tmp"))
    atexit.register(shutil.rmtree, base, True)
    os.chmod(base, 0o755)
    target = base / "site"
    for packages in site.getsitepackages():
        if Path(packages).is_dir() and Path(packages).resolve().is_relative_to(Path(sys.prefix).resolve()):
            shutil.copytree(
                packages,
                target,
                copy_function=_link_or_copy,
                dirs_exist_ok=True,
                ignore=lambda _, names: (
                    [n for n in names if n in _NOT_COPIED or n.startswith("__editable__")] + ["zlstore"]
                ),
            )
    shutil.copytree(REPO / "zlstore", target / "zlstore", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "schema.sql", target / "zlstore" / "schema.sql")  # where a wheel has it
    for directory, _, _ in os.walk(base):
        os.chmod(directory, 0o755)
    return target


def nobody_python() -> Tuple[List[str], Optional[dict]]:
    """(argv, environment) of a Python that imports this checkout's zlstore
    when run as nobody: this one where nobody can reach it and the checkout,
    else the interpreter the venv was made from on a readable copy
    (_readable_copy) on PYTHONPATH. Skips the test where neither works."""
    if "python" in _python:
        return _python["python"]
    here = ([sys.executable], None)
    if os.geteuid() != 0 or _runs_as_nobody(*here).returncode == 0:
        _python["python"] = here
        return here
    copy = _readable_copy()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONPATH=str(copy), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    readable = ([os.path.realpath(sys.executable)], env)
    probe = _runs_as_nobody(*readable)
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run zlstore, even from a copy in {copy}: {probe.stderr.strip()[-200:]}")
    _python["python"] = readable
    return readable


def as_nobody(args, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -m zlstore ARGS` as nobody (as this user where it is not root)."""
    if os.geteuid() != 0:
        return subprocess.run(
            [sys.executable, "-m", "zlstore", *args], capture_output=True, text=True, timeout=timeout, cwd="/"
        )
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed: cannot run as another user")
    python, env = nobody_python()
    return subprocess.run(
        SETPRIV + python + ["-m", "zlstore", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd="/"
    )
