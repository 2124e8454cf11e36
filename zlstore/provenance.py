"""What a cell ran on: the GPU and its driver, the runtime, the versions of
torch, Triton and FlagGems and the commits they were built from, Python and
the host. Two campaigns on different GPUs or Triton builds otherwise look
alike in every table, so the runners capture these once per process, where
they can see them, and write them into each cell.env as ENV_* keys; the
store keeps one row per distinct environment (the environments table) and
points each cell at its row. This module is the one list of those fields:
the schema's columns, cell.env's keys and every header derive from it.

A cell that records none of them (an older harness) has an unknown
environment: stored as today, never an error. Provenance is never part of
the caliber: it names what may explain a difference, it does not decide
whether two latencies may be compared."""

import json
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple


class Field(NamedTuple):
    name: str  # the environments column and the JSON key
    env: str  # the cell.env key, and the variable a runner exports to its command
    label: str  # how a header names it


FIELDS: Tuple[Field, ...] = (
    Field("gpu", "ENV_GPU", "GPU"),
    Field("gpu_count", "ENV_GPU_COUNT", "GPUs"),
    Field("devices", "ENV_DEVICES", "devices"),
    Field("driver", "ENV_DRIVER", "driver"),
    Field("runtime", "ENV_RUNTIME", "runtime"),
    Field("torch", "ENV_TORCH", "torch"),
    Field("triton", "ENV_TRITON", "triton"),
    Field("triton_commit", "ENV_TRITON_COMMIT", "Triton commit"),
    Field("flag_gems", "ENV_FLAG_GEMS", "flag_gems"),
    Field("flaggems_commit", "ENV_FLAGGEMS_COMMIT", "FlagGems commit"),
    Field("python", "ENV_PYTHON", "Python"),
    Field("hostname", "ENV_HOSTNAME", "host"),
)
NAMES: Tuple[str, ...] = tuple(f.name for f in FIELDS)
# What a heading or a history entry names of an environment: which card a
# cell ran on (devices) is the tables' business, not the description's.
DESCRIBED: Tuple[str, ...] = tuple(name for name in NAMES if name != "devices")
BY_NAME: Dict[str, Field] = {f.name: f for f in FIELDS}
# What makes two environments one machine kind for a noise floor
# (ARTIFACTS.md, Noise floors): a floor measured on another GPU model,
# driver or runtime says nothing of this one's noise. Known where the GPU is.
MACHINE: Tuple[str, ...] = ("gpu", "driver", "runtime")
BY_ENV: Dict[str, Field] = {f.env: f for f in FIELDS}
# A cell command may leave this file in its OUT_DIR with ENV_* lines for what
# only it can see (the benchmark's own Python); the screen's runner, which
# writes the cell.env, folds it in, the command's values first.
COMMAND_FILE = "provenance.env"
MAX_VALUE_CHARS = 200
COMMIT_CHARS = 12


def clean(values: Mapping[str, object]) -> Dict[str, str]:
    """The known fields of values (by name), as short single-line strings;
    empty ones left out."""
    out = {}
    for name in NAMES:
        value = values.get(name)
        if value is None:
            continue
        text = " ".join(str(value).split())[:MAX_VALUE_CHARS]
        if text:
            out[name] = text
    return out


def from_env(env: Mapping[str, str]) -> Optional[Dict[str, str]]:
    """The environment a cell.env (or a process environment) records, by
    field name; None when it records none of it."""
    values = clean({f.name: env.get(f.env) for f in FIELDS})
    return values or None


def env_items(values: Mapping[str, str]) -> List[Tuple[str, str]]:
    """cell.env lines for an environment, in FIELDS' order."""
    values = clean(values)
    return [(f.env, values[f.name]) for f in FIELDS if f.name in values]


def exported(values: Mapping[str, str]) -> Dict[str, str]:
    """The ENV_* variables a runner hands its command: what the runner saw,
    for a command that writes its own cell.env."""
    return dict(env_items(values))


def key(values: Mapping[str, str]) -> str:
    """The environments row's identity: its fields as canonical JSON."""
    return json.dumps(clean(values), sort_keys=True, separators=(",", ":"))


def describe(values: Mapping[str, object], names: Sequence[str] = NAMES) -> str:
    """One line for a header: `NVIDIA H200 x1, driver 570.86, cuda 12.8,
    torch 2.11.0, triton 3.6.0, ...`; unknown fields left out."""
    parts = []
    gpu, count = values.get("gpu"), values.get("gpu_count")
    if "gpu" in names and gpu:
        parts.append(f"{gpu} x{count}" if count else str(gpu))
    for name in names:
        value = values.get(name)
        if name in ("gpu", "gpu_count") or value in (None, ""):
            continue
        parts.append(f"{BY_NAME[name].label} {value}")
    return ", ".join(parts) or "unknown"


def changes(before: Mapping[str, object], after: Mapping[str, object]) -> List[str]:
    """What differs from one environment to the next, one `field a -> b` per
    field (`?` for unknown), in FIELDS' order."""
    out = []
    for f in FIELDS:
        a, b = before.get(f.name), after.get(f.name)
        if (a or None) != (b or None):
            out.append(f"{f.label} {a or '?'} -> {b or '?'}")
    return out


# -- capture -------------------------------------------------------------------

_SMI_FIELDS = "index,uuid,name,driver_version"


def _run(argv: Sequence[str], timeout: float = 10.0, cwd: Optional[str] = None) -> Optional[str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia_gpus(smi: Optional[str] = None) -> List[Dict[str, str]]:
    """The GPUs nvidia-smi lists: index, uuid, name, driver_version."""
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return []
    text = _run([smi, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"])
    gpus = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append(dict(zip(_SMI_FIELDS.split(","), parts)))
    return gpus


def visible(gpus: List[Dict[str, str]], devices: Optional[str]) -> List[Dict[str, str]]:
    """The GPUs a process sees under CUDA_VISIBLE_DEVICES=devices (indices
    or UUIDs, comma-separated; unset: all of them)."""
    if devices is None:
        return gpus
    chosen = []
    for item in (d.strip() for d in devices.split(",") if d.strip()):
        for gpu in gpus:
            if item == gpu["index"] or (len(item) > 4 and gpu["uuid"].startswith(item)):
                chosen.append(gpu)
                break
        else:
            break  # CUDA stops at the first device it cannot resolve
    return chosen


def git_commit(directory) -> Optional[str]:
    """The commit a checkout has out, read from its .git without running git
    (a detached HEAD, a branch's ref file or packed-refs); None when it is
    no git checkout."""
    path = Path(directory)
    for top in [path, *path.parents]:
        git = top / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: PATH"
            text = git.read_text(errors="replace").strip()
            if not text.startswith("gitdir:"):
                return None
            git = (top / text[len("gitdir:") :].strip()).resolve()
        if git.is_dir():
            return _head(git)
    return None


def _head(git: Path) -> Optional[str]:
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head[:COMMIT_CHARS] or None
        ref = head[4:].strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()[:COMMIT_CHARS]
        for base in (git, common):
            if (base / "packed-refs").is_file():
                for line in (base / "packed-refs").read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0][:COMMIT_CHARS]
    except OSError:
        return None
    return None


def dist_commit(distribution: str) -> Optional[str]:
    """The commit a Python distribution was installed from: pip's
    direct_url.json (vcs_info.commit_id for a git URL; an editable install
    from a local checkout: that checkout's commit)."""
    import importlib.metadata  # noqa: PLC0415 (lazy: dist_version's docstring says why)

    try:
        text = importlib.metadata.distribution(distribution).read_text("direct_url.json")
        info = json.loads(text) if text else {}
    except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
        return None
    commit = (info.get("vcs_info") or {}).get("commit_id")
    if commit:
        return str(commit)[:COMMIT_CHARS]
    url = info.get("url") or ""
    if url.startswith("file://"):
        return git_commit(url[len("file://") :])
    return None


def dist_version(*distributions: str) -> Optional[str]:
    """The version of the first of these distributions installed. Its
    import is here, not at the top: importlib.metadata (with email) is
    11 ms of the start of every command that imports provenance, an
    ingest's included, and only a runner asks for versions."""
    import importlib.metadata  # noqa: PLC0415 (lazy: the docstring says why)

    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def python_packages() -> Dict[str, str]:
    """The versions this Python has installed, without importing them (an
    import of torch takes seconds): what a runner in the benchmark's own
    environment sees. A FlagGems run asks the benchmark's Python instead
    (flaggems.py)."""
    return clean(
        {
            "torch": dist_version("torch"),
            "triton": dist_version("triton", "flagtree", "pytorch-triton"),
            "triton_commit": dist_commit("triton") or dist_commit("flagtree"),
            "flag_gems": dist_version("flag_gems", "flag-gems"),
            "flaggems_commit": dist_commit("flag_gems") or dist_commit("flag-gems"),
            "python": platform.python_version(),
        }
    )


_HOST: Optional[dict] = None


def host(devices: Optional[str] = None) -> Dict[str, str]:
    """What this host has: its name, and the GPUs a process sees under
    CUDA_VISIBLE_DEVICES=devices (model, count, which, driver). nvidia-smi
    runs once per process."""
    global _HOST
    if _HOST is None:
        _HOST = {"hostname": socket.gethostname(), "gpus": nvidia_gpus()}
    gpus = visible(_HOST["gpus"], devices)
    models = sorted({g["name"] for g in gpus})
    return clean(
        {
            "hostname": _HOST["hostname"],
            "gpu": " + ".join(models) if models else None,
            "gpu_count": len(gpus) if gpus else None,
            "devices": ",".join(g["index"] for g in gpus) if gpus else None,
            "driver": " + ".join(sorted({g["driver_version"] for g in gpus})) if gpus else None,
        }
    )


_PACKAGES: Optional[Dict[str, str]] = None


def capture(devices: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """What a runner records for the cells it runs: the host, the GPUs
    under devices, this Python's packages (once per process), then whatever
    ENV_* variables env already sets (a caller who knows better)."""
    global _PACKAGES
    if _PACKAGES is None:
        _PACKAGES = python_packages()
    values = {**_PACKAGES, **host(devices)}
    values.update(from_env(env if env is not None else os.environ) or {})
    return values


def command_file(out_dir) -> Dict[str, str]:
    """What a cell command left in OUT_DIR/provenance.env (ENV_* lines), if
    it left one: a regular file of at most 64 KiB, else nothing."""
    path = Path(out_dir) / COMMAND_FILE
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 65536:
            return {}
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    env = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() in BY_ENV:
            env[name.strip()] = value.strip().strip("'\"")
    return from_env(env) or {}
