"""Mutations of a generated runs/ tree, and one ingest of it judged: the
fuzz test (test_fuzz.py) and the standalone fuzzer (bench/fuzz.py) share
this. Only tests/generator.py and zlstore.cli are used, so that the same cases
run against an older checkout (PYTHONPATH) for a before/after figure.

A case copies the template tree, applies a few mutations (each names the
path it touched and whether a problem must name it), ingests the copy in a
forked child under an alarm, and checks: no traceback, exit status 0 or 1,
no hang, every cell the mutations did not touch stored (as in the ingest of
the unmutated tree, where its root was not touched either), and a problem
naming every touched path that must have one."""

import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT_FILES = ("root.env", "campaign.env", "screen.tsv", "screen.tsv.orig", "partition.tsv")
TEXT_FILES = ("cell.env", "root.env", "campaign.env", "screen.tsv", "partition.tsv")
TIMEOUT_S = 20
# The files zlstore reads (a .ptx or .so in triton_cache is never read: its mutation changes nothing).
READ = frozenset(ROOT_FILES + ("cell.env", "run.log", "index.tsv", "ttgir", "kernel.json"))


@dataclass
class Touched:
    path: str  # what the mutation changed (after it: a renamed directory's new name)
    must_report: bool  # a problem must name it (or a path under it)
    how: str
    was: Optional[str] = None  # a renamed directory's old name

    def covers(self, path: str) -> bool:
        """Whether path is at, under or above what this touched."""
        return any(p is not None and (_under(path, p) or _under(p, path)) for p in (self.path, self.was))


@dataclass
class Outcome:
    status: Optional[int]  # exit status; None: killed at the timeout (a hang)
    crashed: bool  # a traceback, or an exit status other than 0 and 1
    lost: List[str] = field(default_factory=list)  # untouched cells not stored as they should be
    unreported: List[Touched] = field(default_factory=list)
    detail: str = ""


class Tree:
    """The template tree's inventory: its roots, cells and files."""

    def __init__(self, top: Path):
        self.top = top
        self.cells = sorted(
            str(p.parent.relative_to(top)) for p in top.rglob("run.log") if "triton_cache" not in p.parts
        )
        self.roots = sorted({str(p.parent.relative_to(top)) for name in ROOT_FILES for p in top.rglob(name)})
        self.files: Dict[str, List[str]] = {}
        for path in sorted(top.rglob("*")):
            if path.is_file() and _kind(path) in READ:
                self.files.setdefault(_kind(path), []).append(str(path.relative_to(top)))
        self.taken: List["Touched"] = []  # what the case's mutations touched so far

    def free(self, path: str) -> bool:
        return not any(t.covers(path) for t in self.taken)

    def pick(self, copy: Path, rels: List[str], rng) -> Path:
        """One of rels under copy that no earlier mutation touched (nor a
        directory above it): a mutation never writes through another's link.
        IndexError where there is none."""
        free = [r for r in rels if self.free(str(copy / r))]
        if not free:
            raise IndexError("nothing left to touch")
        return copy / rng.choice(free)


def _kind(path: Path) -> str:
    if path.name.endswith(".ttgir"):
        return "ttgir"
    if path.suffix == ".json" and "triton_cache" in path.parts:
        return "kernel.json"
    return path.name


def _records(data: bytes) -> List[Tuple[int, int]]:
    """(start, end) of every [INFO] {...} line."""
    spans, at = [], 0
    for line in data.split(b"\n"):
        if line.startswith(b"[INFO] {"):
            spans.append((at, at + len(line)))
        at += len(line) + 1
    return spans


# -- the mutations: each (copy, tree, rng, outside) -> [Touched], or [] where it does not apply ----------


def truncate_record(copy: Path, tree: Tree, rng, outside) -> List[Touched]:
    """run.log cut off inside its last record, as a timeout kill leaves it."""
    path = tree.pick(copy, tree.files["run.log"], rng)
    data = path.read_bytes()
    spans = _records(data)
    if not spans:
        return []
    start, end = spans[-1]
    path.write_bytes(data[: rng.randrange(start + 9, max(start + 10, end - 1))])
    return [Touched(str(path), True, "truncate a record")]


def truncate(copy, tree, rng, outside):
    """Any file cut short: maybe still valid, so nothing must be reported."""
    kind = rng.choice(sorted(tree.files))
    path = tree.pick(copy, tree.files[kind], rng)
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data) + 1)])
    return [Touched(str(path), False, "truncate")]


def garble(copy, tree, rng, outside):
    """Bytes that are not UTF-8 in a line of a text file or a run.log record."""
    kind = rng.choice([k for k in TEXT_FILES + ("run.log",) if k in tree.files])
    path = tree.pick(copy, tree.files[kind], rng)
    data = path.read_bytes()
    if kind == "run.log":  # inside a measurement record: in its [INFO] tag it would only make it noise
        spans = [(start + 8, end) for start, end in _records(data) if b"result" in data[start:end]]
    else:
        spans = [(0, len(data))]
    if not spans or not data:
        return []
    start, end = rng.choice(spans)
    at = rng.randrange(start, max(start + 1, end))
    path.write_bytes(data[:at] + b"\xff\xfe\x80" + data[at:])
    return [Touched(str(path), True, "garble")]


def swap_file_and_dir(copy, tree, rng, outside):
    """A directory where a file belongs, or a file where a directory does."""
    if rng.random() < 0.7:
        kind = rng.choice(sorted(tree.files))
        path = tree.pick(copy, tree.files[kind], rng)
        path.unlink()
        path.mkdir()
        (path / "x").write_text("x")
        return [Touched(str(path), True, "a directory for a file")]
    cell = tree.pick(copy, tree.cells, rng)
    if rng.random() < 0.5 and (cell / "triton_cache").is_dir():
        shutil.rmtree(cell / "triton_cache")
        (cell / "triton_cache").write_text("not a directory")
        return [Touched(str(cell / "triton_cache"), True, "a file for triton_cache")]
    shutil.rmtree(cell)
    cell.write_text("not a cell")
    return [Touched(str(cell), False, "a file for a cell")]


def symlink(copy, tree, rng, outside):
    """A file replaced by a link: out of the tree, to a device, in a loop,
    dangling (all named), or to a file of its kind inside its root (followed)."""
    kind = rng.choice(sorted(tree.files))
    path = tree.pick(copy, tree.files[kind], rng)
    rel = str(path.relative_to(copy))
    path.unlink()
    how = rng.choice(["out", "device", "loop", "dangling", "in"])
    if how == "out":
        path.symlink_to(outside)
    elif how == "device":
        path.symlink_to("/dev/zero")
    elif how == "loop":
        path.symlink_to(path.name)
    elif how == "dangling":
        path.symlink_to(path.name + ".gone")
    else:
        root = next((r for r in tree.roots if rel.startswith(r + "/")), None)
        others = [
            o for o in tree.files[kind] if o != rel and root and o.startswith(root + "/") and tree.free(str(copy / o))
        ]
        if not others:
            path.symlink_to(outside)
            how = "out"
        else:
            path.symlink_to(copy / rng.choice(others))
    return [Touched(str(path), how != "in", f"symlink {how}")]


def link_cache_out(copy, tree, rng, outside):
    """A cell's triton_cache linking out of the tree (to / even)."""
    cell = tree.pick(copy, tree.cells, rng)
    if (cell / "triton_cache").is_dir():
        shutil.rmtree(cell / "triton_cache")
    (cell / "triton_cache").symlink_to(rng.choice(["/", str(outside.parent)]))
    return [Touched(str(cell / "triton_cache"), True, "triton_cache links out")]


def fifo(copy, tree, rng, outside):
    kind = rng.choice(sorted(tree.files))
    path = tree.pick(copy, tree.files[kind], rng)
    path.unlink()
    os.mkfifo(path)
    return [Touched(str(path), True, "fifo")]


def huge_line(copy, tree, rng, outside):
    """A record that never ends, a few MB long."""
    path = tree.pick(copy, tree.files["run.log"], rng)
    with open(path, "ab") as f:
        f.write(b'\n[INFO] {"op_name": "x", "result": [' + b"1, " * (1 << 20))
    return [Touched(str(path), True, "huge line")]


def nul(copy, tree, rng, outside):
    kinds = [k for k in ("cell.env", "root.env", "campaign.env") if k in tree.files]
    path = tree.pick(copy, tree.files[rng.choice(kinds)], rng)
    data = path.read_bytes()
    path.write_bytes(b"K\0Y=1\n" + data)
    return [Touched(str(path), True, "NUL")]


def bad_name(copy, tree, rng, outside):
    """A cell or root directory renamed to hold a byte that is not UTF-8 or a newline."""
    path = tree.pick(copy, tree.cells + tree.roots, rng)
    if not path.is_dir():
        return []
    suffix = rng.choice([b"\xff", b"\n"])
    new = os.fsdecode(os.fsencode(str(path)) + suffix)
    os.rename(path, new)
    return [Touched(new, True, f"name with {suffix!r}", was=str(path))]


def deep_json(copy, tree, rng, outside):
    depth = 100_000
    if rng.random() < 0.5 and "kernel.json" in tree.files:
        path = tree.pick(copy, tree.files["kernel.json"], rng)
        path.write_text("[" * depth + "]" * depth)
    else:
        path = tree.pick(copy, tree.files["run.log"], rng)
        with open(path, "a") as f:
            f.write('\n[INFO] {"result": ' + "[" * depth + "]" * depth + "}\n")
    return [Touched(str(path), True, "deep JSON")]


def big_number(copy, tree, rng, outside):
    """An integer of 64 bits or more where an integer belongs, or a lone surrogate escape."""
    big = str(rng.choice([1 << 63, 1 << 64, 10**30]))
    choice = rng.choice(["log", "env", "tsv", "surrogate"])
    if choice == "env" and "campaign.env" in tree.files:
        path = tree.pick(copy, tree.files["campaign.env"], rng)
        with open(path, "a") as f:
            f.write(f"ROUNDS={big}\n")
    elif choice == "tsv":
        path = tree.pick(copy, tree.files.get("partition.tsv", []) + tree.files["screen.tsv"], rng)
        lines = path.read_text().split("\n")
        header = lines[0].split("\t")
        column = "card" if "card" in header else "rc_before"
        if len(lines) < 3 or column not in header:
            return []
        fields = lines[1].split("\t")
        fields[header.index(column)] = big
        lines[1] = "\t".join(fields)
        path.write_text("\n".join(lines))
    else:
        path = tree.pick(copy, tree.files["run.log"], rng)
        value = big if choice != "surrogate" else '"\\ud800"'
        with open(path, "a") as f:
            f.write(
                '\n[INFO] {"op_name": "x", "dtype": "torch.float16", "result": [{"shape_detail": [1], '
                f'"latency": 0.5, "latency_base": {value}}}]}}\n'
            )
    return [Touched(str(path), True, f"big number ({choice})")]


MUTATIONS: Dict[str, Callable] = {
    f.__name__: f
    for f in (
        truncate_record,
        truncate,
        garble,
        swap_file_and_dir,
        symlink,
        link_cache_out,
        fifo,
        huge_line,
        nul,
        bad_name,
        deep_json,
        big_number,
    )
}


def mutate(copy: Path, tree: Tree, rng: random.Random, outside: Path, count: int) -> List[Touched]:
    """count mutations, each on paths no earlier one touched."""
    touched: List[Touched] = []
    tree.taken = touched
    for _ in range(count * 4):
        if len(touched) >= count:
            break
        try:
            touched.extend(MUTATIONS[rng.choice(sorted(MUTATIONS))](copy, tree, rng, outside))
        except (IndexError, KeyError):
            pass  # nothing left for it to touch
    return touched


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


# -- running one ingest, judging it ---------------------------------------------------------------------------


def run_ingest(tree: Path, db: Path, out: Path, timeout: Optional[float] = None) -> Tuple[Optional[int], str, str]:
    """`zlstore ingest tree --db db --json` in a forked child under an alarm:
    (exit status or None for a hang, stdout, stderr). A traceback exits 99.
    The child leads a process group of its own: a hung worker dies with it."""
    stdout, stderr = out / "stdout", out / "stderr"
    timeout = TIMEOUT_S if timeout is None else timeout
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.setpgrp()
            for fd, path in ((1, stdout), (2, stderr)):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.stdout = open(1, "w", closefd=False)  # not what a test runner made of them
            sys.stderr = open(2, "w", closefd=False)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            from zlstore.cli import cli

            try:
                cli.main(["ingest", str(tree), "--db", str(db), "--json"], prog_name="zlstore")
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 99
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    try:
        os.killpg(pid, signal.SIGKILL)  # what the child left: workers blocked on a FIFO
    except (ProcessLookupError, PermissionError):
        pass
    code = os.waitstatus_to_exitcode(status)
    return (None if code == -signal.SIGALRM else code), _text(stdout), _text(stderr)


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def stored_cells(db: Path, top: Path) -> Dict[str, tuple]:
    """relpath under top -> what a cell's row holds (rows, kernels, its v3 fingerprint)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT c.path, c.n_rows, c.n_counted, c.n_kernels, f.fingerprint FROM cells c "
            "LEFT JOIN fingerprints f ON f.cell_id = c.id AND f.rule = 'v3'"
        ).fetchall()
    finally:
        conn.close()
    prefix = str(top) + "/"
    return {path[len(prefix) :]: tuple(values) for path, *values in rows if path.startswith(prefix)}


def judge(
    tree: Tree,
    copy: Path,
    touched: List[Touched],
    baseline: Dict[str, tuple],
    status: Optional[int],
    stdout: str,
    stderr: str,
    db: Path,
) -> Outcome:
    """What went wrong in one case (an Outcome with nothing in it: nothing)."""
    if status is None:
        return Outcome(None, False, detail="hang")
    crashed = status not in (0, 1) or "Traceback" in stderr
    outcome = Outcome(status, crashed, detail=stderr[-2000:] if crashed else "")
    try:
        cells = stored_cells(db, copy) if db.exists() else {}
    except sqlite3.DatabaseError:
        cells = {}
    touched_roots = {r for r in tree.roots for t in touched if t.covers(str(copy / r))}
    for rel in tree.cells:
        path = str(copy / rel)
        if any(t.covers(path) for t in touched):
            continue
        root = next((r for r in tree.roots if _under(rel, r)), None)
        if rel not in cells or (root not in touched_roots and cells[rel] != baseline.get(rel)):
            outcome.lost.append(rel)
    try:
        problems = [p["file"] for p in json.loads(stdout)["problems"]]
    except (ValueError, KeyError, TypeError):
        problems = []
    shown = [os.fsencode(p).decode("utf-8", "backslashreplace") for p in problems]
    for t in touched:
        if t.must_report:
            named = os.fsencode(t.path).decode("utf-8", "backslashreplace")
            if not any(_under(p, named) or _under(p, t.path) for p in problems + shown):
                outcome.unreported.append(t)
    return outcome


class Fuzzer:
    """A template tree, its baseline ingest, and cases run against them."""

    def __init__(self, work: Path, make_tree: Optional[Callable[[Path], None]] = None):
        self.work = work
        template = work / "template" / "runs"
        if make_tree is None:
            from . import generator

            generator.make_example_tree(template)
            for path in list(template.rglob("*")):  # what zlstore never reads: copied for nothing
                if path.is_file() and _kind(path) not in READ and "triton_cache" in path.parts:
                    path.unlink()
        else:
            make_tree(template)
        self.tree = Tree(template)
        import zlstore.cli  # noqa: F401 (imported once here, not in every forked child)

        self.outside = work / "outside" / "secret.txt"
        self.outside.parent.mkdir(parents=True, exist_ok=True)
        self.outside.write_text("root:x:0:0:not yours\n")
        status, _, stderr = run_ingest(template, work / "baseline.db", work, timeout=120)
        if status not in (0, 1):
            raise RuntimeError(f"the unmutated tree does not ingest (status {status}): {stderr[-2000:]}")
        self.baseline = stored_cells(work / "baseline.db", template)

    def case(self, rng: random.Random, mutations: int = 2) -> Tuple[List[Touched], Outcome]:
        """One case: a fresh copy, mutated, ingested, judged; the copy removed."""
        case = self.work / "case"
        _remove(case)
        case.mkdir()
        copy = case / "runs"
        shutil.copytree(self.tree.top, copy, symlinks=True, copy_function=shutil.copyfile)
        touched = mutate(copy, self.tree, rng, self.outside, mutations)
        status, stdout, stderr = run_ingest(copy, case / "z.db", case)
        outcome = judge(self.tree, copy, touched, self.baseline, status, stdout, stderr, case / "z.db")
        _remove(case)
        return touched, outcome


def _remove(path: Path):
    if os.path.lexists(path):
        for directory, _subdirs, _ in os.walk(path):
            os.chmod(directory, 0o755)
        shutil.rmtree(path)
