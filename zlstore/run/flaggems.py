"""FlagGems' own benchmark as a cell command, for users without a harness.

One cell is one `pytest benchmark/test_<op>.py -m <op> --level <BENCH_LEVEL>
--record log [--dtypes <dtype>]` in the cell's own directory, with the
cell's own Triton cache (TRITON_CACHE_DIR=<cell>/triton_cache) and FlagGems
cache (FLAGGEMS_CACHE_DIR=<cell>/flaggems_cache: FlagGems' generated kernels
and tuned configs) and the switch at its side's value. FlagGems writes its
`[INFO] {json}` records to a result_<args>.log file in its working directory
(benchmark/conftest.py); working in the cell's directory means two cells
running at once never share that file or a cache. Afterwards the records
are appended to the cell's run.log (after the process's own output) and the
compiled .ttgir files listed in index.tsv.

`run_cell` is what `zlstore run screen` calls through `zlstore flaggems
cell` (the runner writes cell.env); `repeat` is what `zlstore run campaign`
calls through `zlstore flaggems repeat` once per op: every round's cells
under <AB_ROOT>/ab_<timestamp>/<op>/r<N>/<side>/, each with cell.env last
(in a campaign that stops when decided, once per round: ROUND alone)."""

import json
import os
import shlex
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import caliber, provenance
from ..read import layout
from ..pytest_plugins.zlstore_outcomes import OUTCOMES_VAR
from ..names import TIMEOUT_RC
from .procs import KILL_GRACE_S, group_alive, interrupts, kill_group, shell_rc, start_group
from .harness import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_SWITCH_VALUES,
    env_text,
    local_now,
    switch_values,
    timestamp,
    write_atomic,
    write_cell_env,
)

# FlagGems' cache (flag_gems/utils/code_cache.py: generated code and tuned
# configs) and Triton's, each a variable naming its directory.
FLAGGEMS_CACHE_VAR, FLAGGEMS_CACHE = "FLAGGEMS_CACHE_DIR", "flaggems_cache"
TRITON_CACHE_VAR = "TRITON_CACHE_DIR"
# benchmark/conftest.py: logging.basicConfig(filename="result_<args>.log")
# in the working directory, one per pytest process.
RECORD_FILES = "result*.log"
MAX_NAME_BYTES = 255
# What this command sets itself; passed through, they would contradict what
# the cell records (its op, its dtype, the caliber's bench_level).
OWN_OPTIONS = {
    "-m": "the cell's op",
    "--level": "BENCH_LEVEL",
    "--record": "always log",
    "--dtypes": "the cell's dtype",
}
# When told to stop, the benchmark gets this long before SIGKILL: the runner
# itself waits KILL_GRACE_S before it kills this command.
STOP_GRACE_S = 1.0
PYTEST_NO_TESTS = 5
NOTE = "zlstore flaggems: "  # how this command's own lines in run.log begin
# The pytest plugins loaded into the benchmark (-p), from PLUGIN_DIR, in
# order: the compat overrides first (they rewrite collection-time skip marks
# and nothing may read the items before them: zlstore_compat's docstring
# says which), then what pytest did with each test (zlstore/read/outcomes.py reads it back).
PLUGIN_DIR = Path(__file__).resolve().parents[1] / "pytest_plugins"
PLUGINS = ("zlstore_compat", "zlstore_outcomes")


class FlagGemsError(Exception):
    """The benchmark cannot be run as asked; nothing was run."""


class CannotStart(FlagGemsError):
    """FLAGGEMS_PYTHON cannot import flag_gems or the benchmark's conftest
    (missing: the module it lacks, where one is); nothing was run."""

    def __init__(self, message: str, missing: Optional[str] = None):
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class Benchmark:
    """How to run FlagGems' benchmark: the checkout, the Python that has
    flag_gems and torch, the pytest options passed through, and the test
    path (relative to the checkout, {op} replaced; by default
    benchmark/test_<op>.py where it exists, else the benchmark directory,
    whose tests -m selects)."""

    checkout: Path
    python: str = "python3"
    pytest_args: Tuple[str, ...] = ()
    tests: Optional[str] = None

    def __post_init__(self):
        checkout = Path(self.checkout).expanduser().resolve()
        if not (checkout / "benchmark" / "conftest.py").is_file():
            raise FlagGemsError(f"{checkout} is not a FlagGems checkout: it has no benchmark/conftest.py")
        object.__setattr__(self, "checkout", checkout)
        if os.sep in self.python:  # the benchmark runs in the cell's directory
            object.__setattr__(self, "python", os.path.abspath(os.path.expanduser(self.python)))
        for arg in self.pytest_args:
            name = arg.split("=", 1)[0]
            if name in OWN_OPTIONS:
                raise FlagGemsError(f"{name} is set by zlstore flaggems ({OWN_OPTIONS[name]}); do not pass it through")
        object.__setattr__(self, "pytest_args", tuple(self.pytest_args))

    def test_path(self, op: str) -> str:
        if self.tests:
            return self.tests.replace("{op}", op)
        own = f"benchmark/test_{op}.py"
        return own if (self.checkout / own).is_file() else "benchmark"

    def pytest_argv(self, op: str, dtype: str, level: str) -> List[str]:
        """pytest's arguments: what FlagGems names its record file after."""
        return (
            [str(self.checkout / self.test_path(op)), "-m", op, "--level", level, "--record", "log"]
            + (["--dtypes", dtype] if dtype else [])
            + list(self.pytest_args)
        )

    def argv(self, op: str, dtype: str, level: str) -> List[str]:
        return [self.python, "-m", "pytest"] + self.pytest_argv(op, dtype, level)

    def nodeid(self, op: str) -> str:
        return f"{self.test_path(op)}::-m {op}"

    def check_record_name(self, op: str, dtype: str, level: str):
        """FlagGems names its record file after the arguments (the test's
        absolute path among them); a name longer than a file name may be
        would fail every cell, so it is refused before anything runs."""
        args = [a.replace(".py", "").replace("=", "_").replace("/", "_") for a in self.pytest_argv(op, dtype, level)]
        name = "result_{}.log".format("_".join(args)).replace("_-", "-")
        if len(name.encode()) > MAX_NAME_BYTES:
            raise FlagGemsError(
                f"FlagGems would name its record file {name[:60]}... ({len(name.encode())} bytes, "
                f"over the {MAX_NAME_BYTES} a file name may have): use a checkout with a shorter path"
            )


# == can the benchmark start? one probe before the first cell =================

# What the probe reports of the Python and machine the benchmark runs on:
# strings, None where unknown.
PROBE_KEYS = (
    "gpu",
    "gpu_count",
    "runtime",
    "torch",
    "triton",
    "flag_gems",
    "flaggems_commit",
    "triton_commit",
    "python",
    "driver",
)
# Set by run screen / run campaign for their one probe of the command: the
# cell command then probes, prints the result and runs nothing.
PROBE_ONLY_VAR = "ZLSTORE_FLAGGEMS_PROBE_ONLY"
# A probe already made (by run screen, for its cells): {"checkout", "python", "env"}.
PROBED_VAR = "ZLSTORE_FLAGGEMS_PROBED"
PROBE_TIMEOUT_S = 300.0

# Run by FLAGGEMS_PYTHON with the checkout and a result file: imports the
# benchmark's conftest (and through it what it imports: torch, flag_gems
# and their dependencies) as pytest would, with the checkout and pytest.ini's
# pythonpath on sys.path, then writes what it sees. Its own failure is
# written too, so that the caller can name the module that is missing. It
# reads Triton's commit as provenance.dist_commit does, but in the
# benchmark's Python, which need not have zlstore.
PROBE_SCRIPT = r"""
import configparser, importlib, importlib.metadata, json, os, platform, sys, traceback
checkout, result = sys.argv[1], sys.argv[2]

def write(doc):
    with open(result, "w") as f:
        json.dump(doc, f)

ini = configparser.ConfigParser(interpolation=None, strict=False)
try:
    ini.read(os.path.join(checkout, "pytest.ini"))
    pythonpath = ini.get("pytest", "pythonpath", fallback="").split()
except configparser.Error:
    pythonpath = []
package = os.path.isfile(os.path.join(checkout, "benchmark", "__init__.py"))
for path in reversed([checkout if package else os.path.join(checkout, "benchmark")]
                     + [os.path.join(checkout, p) for p in pythonpath]):
    sys.path.insert(0, path)
try:
    importlib.import_module("benchmark.conftest" if package else "conftest")
    import flag_gems
except BaseException as error:
    frames = [f.filename for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith("<") and "importlib" not in f.filename]
    write({"missing": error.name if isinstance(error, ModuleNotFoundError) else None,
           "error": "".join(traceback.format_exception_only(type(error), error)).strip(),
           "where": os.path.relpath(frames[-1], checkout) if frames else None})
    sys.exit(0)

def text(value):
    return None if value in (None, "", "unknown") else str(value)

def version(module, dist):
    found = text(getattr(sys.modules.get(module), "__version__", None))
    if found:
        return found
    try:
        return text(importlib.metadata.version(dist))
    except Exception:
        return None

def triton_commit():
    try:
        url = json.loads(importlib.metadata.distribution("triton").read_text("direct_url.json") or "{}")
    except Exception:
        url = {}
    if url.get("vcs_info", {}).get("commit_id"):
        return url["vcs_info"]["commit_id"]
    local = version("triton", "triton") or ""
    if "+git" in local:                    # nightly wheels: 3.4.0+git1234abcd
        return local.split("+git", 1)[1].split(".")[0] or None
    return None

torch = sys.modules.get("torch")
device_fn = getattr(getattr(flag_gems, "runtime", None), "torch_device_fn", None) or getattr(torch, "cuda", None)
gpu = count = runtime = None
try:
    if device_fn is not None and device_fn.is_available():
        count = str(device_fn.device_count())
        gpu = text(device_fn.get_device_name(0))
except Exception:
    pass
for name in ("cuda", "hip", "musa", "xpu"):
    found = getattr(getattr(torch, "version", None), name, None)
    if isinstance(found, str) and found:
        runtime = f"{name} {found}"
        break
write({"env": {"gpu": gpu, "gpu_count": count, "runtime": runtime, "torch": version("torch", "torch"),
               "triton": version("triton", "triton"), "flag_gems": version("flag_gems", "flag_gems"),
               "triton_commit": triton_commit(), "python": platform.python_version()}})
"""


_probed: Dict[Tuple[str, str], Dict[str, Optional[str]]] = {}


def probe(bench: "Benchmark", env: Optional[Mapping[str, str]] = None) -> Dict[str, Optional[str]]:
    """Can the benchmark start? Runs bench.python once (once per process,
    or not at all where the caller's PROBED_VAR holds this benchmark's)
    importing the benchmark's conftest and flag_gems as pytest would, and
    returns what it saw (PROBE_KEYS). CannotStart names the module missing,
    or says what else failed: nothing was run."""
    env = dict(os.environ if env is None else env)
    key = (str(bench.checkout), bench.python)
    if key in _probed:
        return dict(_probed[key])
    given = _given_probe(env, key)
    if given is not None:
        _probed[key] = given
        return dict(given)
    with tempfile.TemporaryDirectory(prefix="zlstore-probe-") as scratch:
        result = Path(scratch) / "probe.json"
        # Its caches in scratch: importing flag_gems writes nothing of the user's.
        env.update(
            {
                TRITON_CACHE_VAR: str(Path(scratch) / layout.TRITON_CACHE),
                FLAGGEMS_CACHE_VAR: str(Path(scratch) / FLAGGEMS_CACHE),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        returncode, said = _run_probe(bench, result, scratch, env)
        seen = _probe_result(bench, result, returncode, said)
    if "env" not in seen:
        raise _cannot_start(bench, seen)
    found = {name: seen["env"].get(name) for name in PROBE_KEYS}
    if found["triton_commit"]:
        found["triton_commit"] = found["triton_commit"][: provenance.COMMIT_CHARS]
    found.update(
        flaggems_commit=provenance.git_commit(bench.checkout),
        driver=provenance.host(env.get("CUDA_VISIBLE_DEVICES")).get("driver"),
    )
    _probed[key] = found
    return dict(found)


# What the probe's output may cost: its last PROBE_TAIL_BYTES are kept (for
# the message), the rest read and dropped; its probe.json is read up to
# PROBE_JSON_MAX_BYTES. A FLAGGEMS_PYTHON that prints 300 MB on one line
# costs no more memory than a quiet one.
PROBE_TAIL_BYTES = 64 << 10
PROBE_JSON_MAX_BYTES = 1 << 20
EXCERPT_CHARS = 300  # of each of the last three lines quoted in a message


def excerpt(data: bytes, lines: int = 3) -> str:
    """The last lines of a process's output for a message: any bytes (not
    UTF-8 too), each line cut to EXCERPT_CHARS, joined with ' / '."""
    tail = data.decode("utf-8", "replace").strip().splitlines()[-lines:]
    cut = [line if len(line) <= EXCERPT_CHARS else "..." + line[-EXCERPT_CHARS:] for line in tail]
    return " / ".join(cut) or "no output"


def _keep_tail(stream, kept: bytearray):
    for chunk in iter(lambda: stream.read(1 << 16), b""):
        kept += chunk
        del kept[:-PROBE_TAIL_BYTES]


def _run_probe(bench: "Benchmark", result: Path, scratch: str, env: Dict[str, str]) -> Tuple[int, str]:
    """Run PROBE_SCRIPT with bench.python, as the leader of a process group
    that dies with it (a hang's children too); (its exit status, the end of
    its output)."""
    try:
        proc = subprocess.Popen(
            [bench.python, "-c", PROBE_SCRIPT, str(bench.checkout), str(result)],
            cwd=scratch,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise CannotStart(f"FlagGems cannot start: there is no {bench.python} (--python, FLAGGEMS_PYTHON)") from None
    kept = bytearray()
    assert proc.stdout is not None  # stdout=PIPE
    reader = threading.Thread(target=_keep_tail, args=(proc.stdout, kept), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_group(proc, KILL_GRACE_S)
        raise CannotStart(
            f"FlagGems cannot start: importing flag_gems with {bench.python} took over {PROBE_TIMEOUT_S:g} s"
        ) from None
    except BaseException:
        kill_group(proc, STOP_GRACE_S)
        raise
    finally:
        kill_group(proc, STOP_GRACE_S)  # what it left running in the background dies with it
        reader.join(timeout=5)
        proc.stdout.close()
    return proc.returncode, excerpt(bytes(kept))


def _probe_result(bench: "Benchmark", result: Path, returncode: int, said: str) -> dict:
    """What the probe wrote (PROBE_SCRIPT's one JSON object), checked for its
    shape: CannotStart, with the end of its output, for anything else."""

    def garbage(why: str) -> CannotStart:
        return CannotStart(
            f"FlagGems cannot start: {bench.python} could not run the probe (exit status {returncode}; {why}): {said}"
        )

    try:
        with open(result, "rb") as f:
            data = f.read(PROBE_JSON_MAX_BYTES + 1)
    except OSError:
        raise garbage("it wrote no probe.json") from None
    if len(data) > PROBE_JSON_MAX_BYTES:
        raise garbage(f"its probe.json is over {PROBE_JSON_MAX_BYTES >> 20} MB")
    try:
        seen = json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError among them
        raise garbage("its probe.json is not JSON") from None
    text = (str, type(None))
    if not isinstance(seen, dict):
        raise garbage("its probe.json is not a JSON object")
    if "env" in seen:
        if not isinstance(seen["env"], dict):
            raise garbage("its probe.json's env is not an object")
        wrong = [name for name in PROBE_KEYS if not isinstance(seen["env"].get(name), text)]
        if wrong:
            raise garbage(f"its probe.json's env.{wrong[0]} is not text")
    elif not all(isinstance(seen.get(name), text) for name in ("missing", "error", "where")):
        raise garbage("its probe.json's missing, error or where is not text")
    return seen


def _cannot_start(bench: "Benchmark", seen: dict) -> CannotStart:
    seen = {name: excerpt(value.encode("utf-8", "replace"), 1) if value else value for name, value in seen.items()}
    where = f" (imported by {seen['where']})" if seen.get("where") else ""
    if seen.get("missing"):
        module = seen["missing"]
        return CannotStart(
            f"FlagGems cannot start: {bench.python} has no module {module!r}{where}; install it "
            f"for that Python (pip install {module.split('.')[0]}) or name another --python",
            missing=module,
        )
    return CannotStart(
        f"FlagGems cannot start: importing the benchmark's conftest with {bench.python} "
        f"failed{where}: {seen.get('error')}"
    )


def _given_probe(env: Mapping[str, str], key: Tuple[str, str]) -> Optional[Dict[str, Optional[str]]]:
    try:
        given = json.loads(env.get(PROBED_VAR) or "null")
        if given and (given["checkout"], given["python"]) == key:
            return {name: given["env"].get(name) for name in PROBE_KEYS}
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def probed_value(bench: "Benchmark", found: Mapping[str, Optional[str]]) -> str:
    """PROBED_VAR's value: this probe, for the cells a runner starts."""
    return json.dumps({"checkout": str(bench.checkout), "python": bench.python, "env": dict(found)})


def runs_flaggems(command: str) -> bool:
    """Does this --command run `zlstore flaggems cell` or `zlstore flaggems repeat`?"""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return any(
        word == "flaggems"
        and following in ("cell", "repeat")
        and index
        and (words[index - 1] == "zlstore" or words[index - 1].endswith("/zlstore"))
        for index, (word, following) in enumerate(zip(words, words[1:]))
    )


def preflight(command: str, env: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """What run screen and run campaign do before their first cell: where
    command (filled in as for the first cell) runs `zlstore flaggems`, run it
    once with PROBE_ONLY_VAR set, in the caller's directory, so that it
    probes and runs nothing. Returns PROBED_VAR's value for the cells (None
    for any other command); CannotStart with the command's own message."""
    if not runs_flaggems(command):
        return None
    run_env = dict(env)
    run_env[PROBE_ONLY_VAR] = "1"
    with tempfile.TemporaryFile() as output:
        proc = start_group(command, run_env, output)
        try:
            proc.wait(timeout=timeout + KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_group(proc, KILL_GRACE_S)
        except BaseException:
            kill_group(proc, STOP_GRACE_S)
            raise
        output.seek(0)
        lines = output.read().decode(errors="replace").strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            json.loads(lines[-1])["env"]
            return lines[-1]
        except (ValueError, KeyError, TypeError):
            pass
    said = " / ".join(line.removeprefix("Error: ").strip() for line in lines[-3:]) or "no output"
    raise CannotStart(
        f"the cell command cannot start FlagGems (exit status {shell_rc(proc.returncode)}): {said}; "
        f"nothing was run. The command: {command}"
    )


def bench_level(env: Mapping[str, str]) -> str:
    """FlagGems' --level, which is the caliber's bench_level: from BENCH_LEVEL
    and nowhere else, so the cell records the level it ran at."""
    level = (env.get("BENCH_LEVEL") or "").strip()
    if not level:
        raise FlagGemsError(
            "BENCH_LEVEL is not set: it is FlagGems' --level (core or comprehensive) and a caliber field; export it"
        )
    return level


def caliber_notes(env: Mapping[str, str]) -> List[str]:
    """What the environment leaves the caliber missing: such cells are stored
    and never paired. FlagGemsError where it contradicts this command: every
    cell has its own FlagGems cache, tuned configs included."""
    isolate = dict(zip(caliber.NAMES, caliber.ENV_VARS))["isolate_tuner_cache"]
    if (env.get(isolate) or "").strip() not in ("", "1"):
        raise FlagGemsError(
            f"{isolate}={env[isolate]} in the environment, but zlstore flaggems gives every cell "
            f"its own FlagGems cache (tuned configs included): set {isolate}=1"
        )
    missing = [f.env for f in caliber.CALIBER_FIELDS if not (env.get(f.env) or "").strip()]
    if not missing:
        return []
    return [f"the caliber is not known ({', '.join(missing)} unset): the cells are stored and never paired"]


def benchmark_env(env: Mapping[str, str], out: Path, switch: str, value: str, level: str) -> Dict[str, str]:
    """The benchmark's environment: the cell's own caches, the switch at its
    value, the level, unbuffered output (a killed process loses none), and
    no pytest cache in the checkout that every cell shares."""
    result = dict(env)
    result.update(
        {
            TRITON_CACHE_VAR: str(out / layout.TRITON_CACHE),
            FLAGGEMS_CACHE_VAR: str(out / FLAGGEMS_CACHE),
            "SWITCH": switch,
            "SWITCH_VALUE": value,
            switch: value,
            "BENCH_LEVEL": level,
            "PYTHONUNBUFFERED": "1",
            # Not arguments: FlagGems names its record file after the arguments.
            "PYTEST_ADDOPTS": (
                result.get("PYTEST_ADDOPTS", "")
                + " -p no:cacheprovider"
                + "".join(f" -p {plugin}" for plugin in PLUGINS)
            ).strip(),
            # zlstore's plugins are single files that import nothing of zlstore
            # (the benchmark's Python need not have it): their directory goes first
            "PYTHONPATH": os.pathsep.join(filter(None, (str(PLUGIN_DIR), result.get("PYTHONPATH")))),
            # what pytest did with each test goes into run.log (zlstore_outcomes)
            OUTCOMES_VAR: str(out / layout.RUN_LOG),
        }
    )
    return result


def inner_limit(cell_timeout: float) -> float:
    """The benchmark's limit inside a runner that kills this whole command at
    cell_timeout: a little earlier (this command's own start-up included),
    so that its records and index.tsv are written. A quarter of it, at most
    5 s: a 20 s bound left 1 s, less than this command's start and the
    benchmark's kill took on a loaded host, and the runner's kill came first."""
    return cell_timeout - min(5.0, cell_timeout / 4)


@dataclass
class CellRun:
    out: Path
    op: str
    dtype: str
    switch_value: str
    rc: int
    elapsed_s: float
    timed_out: bool
    started_at: str
    nodeid: str
    records: int = 0
    kernels: int = 0
    side: str = ""
    round: int = 0

    def as_dict(self) -> dict:
        return {
            "path": str(self.out),
            "op": self.op,
            "dtype": self.dtype,
            "round": self.round,
            "side": self.side,
            "switch_value": self.switch_value,
            "rc": self.rc,
            "elapsed_s": round(self.elapsed_s, 3),
            "timed_out": self.timed_out,
            "records": self.records,
            "kernels": self.kernels,
        }


def run_cell(
    bench: Benchmark,
    out,
    op: str,
    dtype: str,
    switch: str,
    value: str,
    level: str,
    limit: float,
    env: Optional[Mapping[str, str]] = None,
    grace: float = KILL_GRACE_S,
) -> CellRun:
    """One benchmark process in the cell directory out, killed with its whole
    process group at limit seconds (RC 124). Its output goes to out/run.log,
    then the records of the result*.log it wrote there, and its .ttgir files
    to out/index.tsv, also when it was killed or this process is told to
    stop (SIGINT / SIGTERM: the benchmark is killed, the files written, and
    KeyboardInterrupt raised). No cell.env: that is the caller's."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    bench.check_record_name(op, dtype, level)
    run_env = benchmark_env(os.environ if env is None else env, out, switch, value, level)
    argv = bench.argv(op, dtype, level)
    started_at, t0 = local_now(), time.monotonic()
    timed_out = False
    with open(out / layout.RUN_LOG, "a+b") as log:  # read too: _note looks at its last byte
        _note(
            log,
            f"cd {shlex.quote(str(out))} && {switch}={shlex.quote(value)} "
            f"{TRITON_CACHE_VAR}={layout.TRITON_CACHE} {FLAGGEMS_CACHE_VAR}={FLAGGEMS_CACHE} {shlex.join(argv)}",
        )
        try:
            with interrupts():
                proc = start_group(shlex.join(argv), run_env, log, cwd=out)
                try:
                    proc.wait(timeout=limit)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    kill_group(proc, grace)
                except BaseException:
                    kill_group(proc, min(grace, STOP_GRACE_S))
                    raise
                else:
                    if group_alive(proc.pid):  # stragglers would hold the card
                        kill_group(proc, grace)
        except BaseException:
            _note(log, "stopped: the benchmark was killed")
            collect_records(out, log)
            write_index(out)
            raise
        elapsed = time.monotonic() - t0
        rc = TIMEOUT_RC if timed_out else shell_rc(proc.returncode)
        if timed_out:
            _note(log, f"killed at {limit:g} s (CELL_TIMEOUT): RC {rc}")
        elif rc == PYTEST_NO_TESTS:
            _note(log, f"pytest ran no test marked {op} in {bench.test_path(op)}: is the op name right?")
        records = collect_records(out, log)
    return CellRun(
        out,
        op,
        dtype,
        value,
        rc,
        elapsed,
        timed_out,
        started_at,
        bench.nodeid(op),
        records=records,
        kernels=write_index(out),
    )


def _note(log, text: str):
    """One line of this command's own in run.log, on a line of its own even
    where a killed benchmark left its last line unfinished."""
    log.flush()
    fd = log.fileno()
    size = os.fstat(fd).st_size
    start = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
    log.write(start + f"{NOTE}{text}\n".encode())
    log.flush()


def collect_records(out: Path, log) -> int:
    """Append the records of every result*.log in out to the run.log open as
    log, and remove those files (run.log holds them now). Returns the number
    of `[INFO] {` lines: the records, and FlagGems' query-mode dicts."""
    files = sorted(out.glob(RECORD_FILES))
    if not files:
        _note(log, f"the benchmark wrote no {RECORD_FILES} in {out}")
        return 0
    count = 0
    for path in files:
        data = layout.read_bytes(path)
        _note(log, f"the records of {path.name}:")
        log.write(data if data.endswith(b"\n") or not data else data + b"\n")
        log.flush()
        count += sum(1 for line in data.splitlines() if line.startswith(b"[INFO] {"))
        path.unlink()
    return count


def write_index(out: Path) -> int:
    """index.tsv: kernel, cache hash and path of every .ttgir in the cell's
    Triton cache, by hash. Returns how many."""
    cache = out / layout.TRITON_CACHE
    rows = []
    if cache.is_dir():
        for directory in sorted(p for p in cache.iterdir() if p.is_dir()):
            for ttgir in sorted(directory.glob("*.ttgir")):
                rows.append(f"{ttgir.stem}\t{directory.name}\t{layout.TRITON_CACHE}/{directory.name}/{ttgir.name}\n")
    write_atomic(out / layout.INDEX_TSV, "".join(rows))
    return len(rows)


# == what run screen calls: one side ==========================================


@dataclass
class ScreenSide:
    """One side as `zlstore run screen` starts it: the variables it sets."""

    out: Path
    op: str
    dtype: str
    switch: str
    value: str
    cell_timeout: float
    level: str
    notes: List[str] = field(default_factory=list)


SCREEN_VARS = ("OUT_DIR", "OP", "SWITCH", "SWITCH_VALUE")


def screen_side(env: Mapping[str, str]) -> ScreenSide:
    """The side run screen asks for, from its variables; FlagGemsError names
    every one missing."""
    missing = [name for name in SCREEN_VARS if not (env.get(name) or "").strip()]
    if missing:
        raise FlagGemsError(
            f"{', '.join(missing)} not set: zlstore flaggems cell runs one side of "
            "`zlstore run screen`, which sets them"
        )
    try:
        cell_timeout = float(env.get("CELL_TIMEOUT") or DEFAULT_CELL_TIMEOUT)
    except ValueError:
        raise FlagGemsError(f"CELL_TIMEOUT={env['CELL_TIMEOUT']!r} is not a number of seconds") from None
    return ScreenSide(
        Path(env["OUT_DIR"]),
        env["OP"].strip(),
        (env.get("DTYPE") or "").strip(),
        env["SWITCH"].strip(),
        env["SWITCH_VALUE"].strip(),
        cell_timeout,
        bench_level(env),
        caliber_notes(env),
    )


def environment(bench: Benchmark, env: Mapping[str, str]) -> Dict[str, str]:
    """What the benchmark runs on (provenance.py): what the runner saw and
    exported (ENV_*) and this host's GPUs, overruled by what the benchmark's
    own Python saw (probe: torch, Triton and flag_gems as it imports them,
    the GPU through torch) and the FlagGems checkout's commit, which only
    this command knows. CannotStart where the benchmark cannot start."""
    values = provenance.capture(env.get("CUDA_VISIBLE_DEVICES"), env)
    values.update(provenance.clean(probe(bench, env)))
    return values


def run_screen_side(bench: Benchmark, side: ScreenSide, env: Optional[Mapping[str, str]] = None) -> CellRun:
    """One side of a screening pair, inside the runner's CELL_TIMEOUT, once
    the benchmark is known to start (probe: CannotStart, nothing written).
    What it ran on goes to OUT_DIR/provenance.env, which the runner folds
    into the cell.env it writes."""
    ran_on = environment(bench, os.environ if env is None else env)
    write_atomic(Path(side.out) / provenance.COMMAND_FILE, env_text(provenance.env_items(ran_on)))
    with open(Path(side.out) / layout.RUN_LOG, "a+b") as log:  # read too: _note looks at its last byte
        for note in side.notes:
            _note(log, note)
    return run_cell(
        bench,
        side.out,
        side.op,
        side.dtype,
        side.switch,
        side.value,
        side.level,
        inner_limit(side.cell_timeout),
        env,
        grace=STOP_GRACE_S,
    )


# == what run campaign calls: every round of one op ================================


def new_run_dir(ab_root: Path) -> Path:
    """A fresh ab_<timestamp> directory under AB_ROOT, never one that exists."""
    ab_root.mkdir(parents=True, exist_ok=True)
    base = ab_root / f"ab_{timestamp()}"
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}_{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FlagGemsError(f"no free ab_<timestamp> directory under {ab_root}")


def screened_values(env: Mapping[str, str]) -> Optional[Tuple[str, str]]:
    """The switch values the campaign's screening root ran (SWITCH_VALUES in
    its root.env, found through $CAMPAIGN_ROOT/campaign.env), so that the
    campaign's repeats measure what was screened; None where there are none."""
    campaign = (env.get("CAMPAIGN_ROOT") or "").strip()
    if not campaign:
        return None
    screen = (layout.read_env(Path(campaign) / layout.CAMPAIGN_ENV, []) or {}).get("SCREEN_ROOT")
    if not screen:
        return None
    values = (layout.read_env(Path(campaign) / screen / layout.ROOT_ENV, []) or {}).get("SWITCH_VALUES")
    return switch_values(values) if values else None


def repeat_values(given: Optional[str], env: Mapping[str, str]) -> Tuple[str, str]:
    """A repeat's switch values: as given, else the screening root's, else 0,1."""
    return switch_values(given) if given else screened_values(env) or DEFAULT_SWITCH_VALUES


def repeat(
    bench: Benchmark,
    ab_root,
    op: str,
    dtype: str,
    *,
    rounds: int,
    switch: str,
    values: Sequence[str],
    cell_timeout: float = DEFAULT_CELL_TIMEOUT,
    card: int = 0,
    env: Optional[Mapping[str, str]] = None,
    warn: Callable[[str], None] = lambda text: None,
    report: Callable[[CellRun], None] = lambda run: None,
    only_round: Optional[int] = None,
) -> List[CellRun]:
    """rounds x (before, after) cells of one op in a new repeat directory (or
    round only_round alone, into r<only_round>: an until-decided campaign
    runs an op's rounds one at a time), each
    capped at cell_timeout, each cell.env written last with RC; a failed or
    killed cell does not stop the rounds. KeyboardInterrupt (SIGINT, SIGTERM)
    kills the running benchmark and leaves its cell without cell.env:
    unfinished, so a resumed campaign runs the op again."""
    env = dict(os.environ if env is None else env)
    level = bench_level(env)
    for note in caliber_notes(env):
        warn(note)
    bench.check_record_name(op, dtype, level)
    ran_on = environment(bench, env)  # probes first: nothing is written where the benchmark cannot start
    run_dir = new_run_dir(Path(ab_root).resolve())
    runs = []
    for round_ in [only_round] if only_round is not None else range(1, rounds + 1):
        for side, value in zip(layout.SIDES, values):
            out = run_dir / op / f"r{round_}" / side
            run = run_cell(bench, out, op, dtype, switch, value, level, cell_timeout, env)
            run.side, run.round = side, round_
            write_cell_env(
                out,
                op=op,
                dtype=dtype,
                side=side,
                round_=round_,
                card=card,
                started_at=run.started_at,
                switch=switch,
                switch_value=value,
                cell_timeout=cell_timeout,
                env=env,
                elapsed_s=run.elapsed_s,
                rc=run.rc,
                nodeid=run.nodeid,
                environment=ran_on,
            )
            runs.append(run)
            report(run)
    return runs
