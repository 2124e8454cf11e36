"""Walking runs/ trees into the store, a cell whole or not at all.

Everything of a cell is read and parsed first, then written in one
transaction (`record`, a live writer) or in one savepoint of a batch that
commits every BATCH_SECONDS (a whole-tree ingest). Re-ingesting is cheap:
a stored cell whose files and directories have the same sizes and times is
skipped without listing or reading them (unchanged.py); where those changed,
the full scan and then a content hash decide."""

import collections
import contextlib
import datetime
import errno
import hashlib
import io
import itertools
import json
import operator
import os
import re
import sqlite3
import stat
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import caliber, forked, judge, layout, pairing, roots, runlog, ttgir, unchanged
from .db import bulk_checkpoints, retry_busy, write_transaction
from .layout import Problem

# What a summary reports, in the order it is printed.
COUNTS = (
    "roots", "cells_added", "cells_replaced", "cells_unchanged", "cells_unfinished",
    "cells_failed", "rows_added", "kernels_added", "ir_texts_added",
)

MEASUREMENT_COLUMNS = (
    "cell_id", "line", "record", "idx", "op_name", "dtype", "mode", "level", "shape",
) + tuple(f for f in runlog.KNOWN_FIELDS if f != "shape_detail") + (
    "extra", "counted", "not_counted_reason", "fallback", "occurrence",
)
_JSON_FIELDS = {"legacy_shape"}
_STORED_FIELDS = tuple(f for f in runlog.KNOWN_FIELDS if f != "shape_detail")
_JSON_POSITIONS = frozenset(i for i, f in enumerate(_STORED_FIELDS) if f in _JSON_FIELDS)
_STORED_VALUES = operator.itemgetter(*_STORED_FIELDS)
_CONTAINERS = frozenset((list, dict))
_COUNTED = MEASUREMENT_COLUMNS.index("counted") - 1  # in a stored row without its cell_id
# The cells columns a cell's files give (ParsedCell.cell_columns); the
# writer adds root_id, caliber_id, stat_sig and ingested_at.
CELL_COLUMNS = (
    "path", "relpath", "repeat_dir", "card", "op", "dtype", "side", "round", "rc", "elapsed_s",
    "started_at", "nodeid", "switch", "switch_value", "cell_timeout", "caliber_missing",
    "card_source", "op_source", "dtype_source", "side_source", "round_source", "rc_source",
    "elapsed_source", "caliber_source", "provenance", "n_records", "n_rows", "n_counted",
    "n_kernels", "convert_layouts", "index_hash", "n_problems", "content_sig", "ir_incomplete",
)
_INSERT_CELL = (f"INSERT INTO cells (root_id, caliber_id, stat_sig, ingested_at, {', '.join(CELL_COLUMNS)}) "
                f"VALUES ({', '.join('?' * (4 + len(CELL_COLUMNS)))})")
# A kernels row but for its cell_id.
Kernel = collections.namedtuple("Kernel", "name cache_dir ir_hash convert_layouts num_warps num_stages")
_INSERT_KERNEL = (f"INSERT INTO kernels (cell_id, {', '.join(Kernel._fields)}) "
                  f"VALUES ({', '.join('?' * (1 + len(Kernel._fields)))})")
RECORDED_VERDICT_COLUMNS = (
    "root_id", "file", "line", "op", "dtype", "verdict", "raw_verdict", "cl_before", "cl_after",
    "fp_before", "fp_after", "elapsed_before", "elapsed_after", "rc_before", "rc_after",
) + caliber.NAMES + ("extra",)


def plural(n: int, noun: str) -> str:
    """'1 problem', '2 problems': a count with its noun, as a sentence says it."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def now() -> str:
    """The time a cell or run is stored, to the microsecond: a merge keeps
    the newer of two contents, and two hosts ingest in the same second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


@dataclass
class Summary:
    counts: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    problems: List[Problem] = field(default_factory=list)  # found by this run
    unfinished: List[str] = field(default_factory=list)
    moved: List[Dict[str, str]] = field(default_factory=list)  # roots seen at a new path: root, from, to
    # The stored problems still open in what the run covered, its own
    # included (open_problems): a file that is still bad stays counted.
    open_problems: Optional[int] = None
    state: str = "complete"  # or "stopped: <why>" (a full disk): the counts are what was committed

    @property
    def stopped(self) -> bool:
        return self.state != "complete"

    def problem_count(self) -> int:
        return len(self.problems) if self.open_problems is None else max(self.open_problems, len(self.problems))

    def as_dict(self) -> dict:
        return {**self.counts, "problems": [p.as_dict() for p in self.problems],
                "open_problems": self.problem_count(), "state": self.state,
                "unfinished": self.unfinished, "moved": self.moved}

    def line(self) -> str:
        c = self.counts
        return (
            f"{plural(c['roots'], 'root')}, cells: {c['cells_added']} added, {c['cells_replaced']} replaced, "
            f"{c['cells_unchanged']} unchanged"
            + (f", {c['cells_unfinished']} unfinished" if c["cells_unfinished"] else "")
            + (f", {c['cells_failed']} failed" if c["cells_failed"] else "")
            + f"; {c['rows_added']} rows, {c['kernels_added']} kernels, "
            f"{c['ir_texts_added']} new IR texts; {plural(self.problem_count(), 'problem')}"
            + (f"; {plural(len(self.moved), 'root')} moved" if self.moved else "")
        )


@dataclass
class CellFiles:
    """A cell directory's relevant files and their stat signature."""

    path: Path
    stats: Dict[str, Optional[os.stat_result]]  # relpath (a directory's ends in /) -> stat, None: missing
    ttgir: List[Tuple[str, str]]          # (relpath, kernel name)
    meta_json: Dict[str, str]              # ttgir relpath -> sibling .json relpath
    # What of triton_cache could not be listed or entered: the cell's IR is
    # then incomplete, and a verdict must not rest on it.
    problems: List[Problem] = field(default_factory=list)

    @property
    def stat_sig(self) -> str:
        return unchanged.files_sig(self.stats)


def scan_cell(cell: Path) -> CellFiles:
    """List what feeds the store: cell.env, run.log, index.tsv, and inside
    triton_cache/ every .ttgir with its sibling .json. Interrupted compiles
    (tmp.pid_*), group files (__grp__*.json) and launcher directories with
    no .ttgir play no part. The stat signature covers cell.env, run.log,
    index.tsv and every directory entered, not the files in triton_cache:
    Triton writes a cache directory once, by rename, so an entry added,
    removed or renamed changes its directory's times (unchanged.py).
    triton_cache and the directories below it are entered only as what they
    are, never through a symbolic link (README: "What is read"); one that is
    a link, not a directory, or cannot be listed is a problem of the cell's
    IR."""
    stats, kernels, meta, problems = {}, [], {}, []
    top = str(cell)
    for name in (layout.CELL_ENV, layout.RUN_LOG, layout.INDEX_TSV):  # stat'ed by name: no listing
        stats[name] = _stat(None, os.path.join(top, name))
    cache = os.path.join(top, layout.TRITON_CACHE)
    cache_stat = stats[layout.TRITON_CACHE + "/"] = _stat(None, cache)
    if cache_stat is not None or os.path.islink(cache):
        refused = _not_a_directory(cache)
        if refused:
            problems.append(Problem(cache, None, refused))
            cache_stat = None
    if cache_stat is not None and stat.S_ISDIR(cache_stat.st_mode):
        pending = [(cache, layout.TRITON_CACHE)]
        while pending:  # depth first, sorted: the order os.walk gave
            directory, rel_dir = pending.pop()
            listing = _listing(directory, problems)
            files = {n: e for n, e in listing.items() if not _is_dir(e)}
            below = []
            for n, e in listing.items():
                if n in files or n.startswith("tmp.pid_"):
                    continue
                if n.endswith(".ttgir"):
                    problems.append(Problem(e.path, None, "a directory where a kernel's .ttgir belongs: "
                                                          "its IR is not read"))
                if e.is_symlink():
                    problems.append(Problem(e.path, None, "a symbolic link to a directory: not followed, "
                                                          "its kernels not read"))
                    continue
                below.append((e.path, rel_dir + "/" + n, e))
            below.sort(reverse=True)  # paths differ: entries are never compared
            for path, rel, entry in below:
                stats[rel + "/"] = _stat(entry)
                pending.append((path, rel))
            # name[:-6].strip("."): what os.path.splitext calls a stem (".ttgir" has none)
            found = [(rel_dir + "/" + name, name[:-6])
                     for name in sorted(files) if name.endswith(".ttgir") and name[:-6].strip(".")]
            kernels.extend(found)
            for rel, stem in found:
                sibling = stem + ".json"
                if ((sibling in files and not sibling.startswith("__grp__"))
                        or os.path.exists(os.path.join(directory, sibling))):
                    meta[rel] = rel_dir + "/" + sibling
    return CellFiles(cell, stats, kernels, meta, problems)


def _not_a_directory(cache: str) -> Optional[str]:
    """Why a cell's triton_cache cannot be read as its kernels, or None."""
    try:
        st = os.lstat(cache)
    except OSError as error:
        return f"cannot read: {error.strerror or error}; the cell's kernels are not read"
    if stat.S_ISLNK(st.st_mode):
        return (f"a symbolic link (to {os.readlink(cache)}), not a directory: not followed, "
                "the cell's kernels not read")
    if not stat.S_ISDIR(st.st_mode):
        return f"{layout._kind(st.st_mode)}, not a directory: the cell's kernels not read"
    return None


def _stat(entry, path: Optional[str] = None) -> Optional[os.stat_result]:
    """A listed entry's (or else path's) stat, following links; None: missing
    (a cell that is not a directory has none of its files)."""
    try:
        return entry.stat() if entry is not None else (os.stat(path) if path else None)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink loop: there, and refused when read
            return None
        raise


def _listing(directory: str, problems: List[Problem]) -> dict:
    """name -> DirEntry; a directory that cannot be listed lists nothing,
    and is named in problems."""
    try:
        with os.scandir(directory) as it:
            return {e.name: e for e in it}
    except OSError as error:
        problems.append(Problem(directory, None, f"cannot list this directory: {error.strerror or error}; "
                                                 "the kernels in it are not read"))
        return {}


def _is_dir(entry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_read = layout.read_bytes


def _cache_dir(rel: str) -> str:
    """The directory of a triton_cache/... relpath, relative to triton_cache."""
    directory = os.path.dirname(rel)
    prefix = layout.TRITON_CACHE + "/"
    if directory.startswith(prefix) and "/." not in directory and "//" not in directory:
        return directory[len(prefix):]
    return os.path.relpath(directory, layout.TRITON_CACHE)


def _kernel_meta(data: bytes) -> Tuple[Optional[int], Optional[int], Optional[str]]:
    """(num_warps, num_stages, what is wrong with the file or None)."""
    try:
        meta = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        return None, None, f"not JSON ({str(error)[:80] or type(error).__name__})"
    if not isinstance(meta, dict):
        return None, None, f"a JSON {type(meta).__name__}, not an object"

    def as_int(value):
        return value if isinstance(value, int) and not isinstance(value, bool) and value in layout.INT64 else None

    return as_int(meta.get("num_warps")), as_int(meta.get("num_stages")), None


# A control character in a name: stored where it can be, and always named.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The stat signature of a cell not read in full: matches no signature, so
# that the next ingest reads the cell again (a file inside triton_cache that
# is made readable keeps its directory's times).
_UNREAD_SIG = "unread:"


@dataclass
class ParsedCell:
    files: CellFiles
    root: layout.Root
    ref: layout.RootRef
    env: Optional[Dict[str, str]]
    values: Dict[str, object]
    log: runlog.RunLog
    kernels: List[tuple]                    # Kernel, or a plain tuple of its fields where a worker sent it
    texts: Dict[str, Tuple[bytes, str]]     # ir_hash -> (raw bytes, text or None: all computed already)
    index: Optional[Tuple[str, bytes]]
    content_sig: str
    problems: List[Problem]
    # Filled by the process that parsed the cell, and all a worker sends of
    # it (texts and Row objects stay in the worker): its rows as stored,
    # its fingerprints and text digests (Ingester._fingerprints), the
    # (size, zlib data) of the texts that worker had not sent before, and
    # the cells row.
    measurements: Optional[List[tuple]] = None
    fingerprints: Optional[tuple] = None
    packed: Dict[str, Tuple[int, bytes, Optional[str]]] = field(default_factory=dict)  # ir_hash -> _packed(its text)
    columns: Optional[tuple] = None  # cell_columns()
    reread: bool = False  # something was not read: the next ingest reads the cell again (_UNREAD_SIG)

    def __reduce__(self):
        """As a worker sends it (see Ingester._portable): plain values, which
        the writing process unpickles at a fraction of the cost of objects."""
        return (_portable_cell, (str(self.files.path), self.ref, self.values["caliber"], self.cell_columns(),
                                 [tuple(k) for k in self.kernels], tuple(self.texts), self.index, self.content_sig, self.problems,
                                 self.stored_rows(), self.fingerprints, self.packed, self.reread))

    def cell_columns(self) -> tuple:
        """The cells row's CELL_COLUMNS, as INSERTed."""
        if self.columns is None:
            v, rows, sources = self.values, self.stored_rows(), self.values["sources"]
            self.columns = (
                str(self.files.path), "/".join(self.ref.parts), v["repeat_dir"], v["card"], v["op"], v["dtype"],
                v["side"], v["round"], v["rc"], v["elapsed_s"], v["started_at"], v["nodeid"], v["switch"],
                v["switch_value"], v["cell_timeout"], v["caliber_missing"],
                *(sources.get(k) for k in ("card", "op", "dtype", "side", "round", "rc", "elapsed")),
                v["caliber_source"], layout.provenance_json(sources), self.log.records, len(rows),
                sum(1 for r in rows if r[_COUNTED]), len(self.kernels),
                sum(k.convert_layouts for k in self.kernels),
                self.index[0] if self.index else None, len(self.problems), self.content_sig,
                v["ir_incomplete"],
            )
        return self.columns

    def stored_rows(self) -> List[tuple]:
        """The measurements rows without their cell_id, as INSERTed."""
        if self.measurements is None:
            seen: Dict[tuple, int] = {}
            self.measurements = []
            for row in self.log.rows:
                # The n-th row of an identity in a cell pairs with the n-th on the other side.
                identity = (row.op_name, row.dtype, row.shape_key)
                seen[identity] = occurrence = seen.get(identity, 0) + 1
                self.measurements.append(Ingester._measurement_values(row) + (occurrence,))
        return self.measurements


def _portable_cell(path, ref, caliber_values, columns, kernels, texts, index, content_sig, problems,
                   measurements, fingerprints, packed, reread) -> ParsedCell:
    """A ParsedCell as a worker sent it: what the writer needs, nothing more."""
    return ParsedCell(
        CellFiles(path, {}, [], {}), None, ref, None, {"caliber": caliber_values}, None, kernels,
        dict.fromkeys(texts, (None, None)), index, content_sig, problems, measurements, fingerprints, packed,
        columns, reread)


# A whole tree is prepared (walked, read, hashed, parsed, normalized) in
# worker processes while this process writes the cells, in the same order, in
# batches (_Batch): reading and parsing are most of an ingest.
# ZLSTORE_INGEST_WORKERS sets how many (0: prepare in this process).
PARALLEL_MIN_CELLS = 64
ZLIB_LEVEL = 2  # IR is stored once; level 2 is within 15% of 6's size at a third of its time
PREPARE_CHUNK = 16
BATCH_SECONDS = 2.0  # a whole-tree ingest commits its cells this often


def _packed(raw: bytes, kind: str) -> Tuple[int, bytes, Optional[str]]:
    """A blob as stored: its size, its zlib data, and for a .ttgir the
    fingerprint-rule triggers it holds (ttgir.markers)."""
    return len(raw), zlib.compress(raw, ZLIB_LEVEL), ttgir.markers(raw) if kind == "ttgir" else None


def _worker_count(cells: int) -> int:
    if cells < PARALLEL_MIN_CELLS or not sys.platform.startswith("linux"):  # forked workers: Linux only
        return 0
    setting = os.environ.get("ZLSTORE_INGEST_WORKERS", "").strip()
    if setting.isdigit():
        return int(setting)
    cores = os.cpu_count() or 1
    return min(cores, 2) if cores > 1 else 0


def _op_key(cell: str) -> str:
    """Which op a cell path is most likely of (`.../<op>/r<N>/<side>`,
    `.../<op>[_<dtype>]_<side>`): only for sharing work out, never a value."""
    parts = cell.rsplit("/", 3)
    if len(parts) == 4 and parts[2][:1] == "r" and parts[2][1:].isdigit():
        return parts[1]
    stem = parts[-1].rpartition("_")[0]
    op, _, last = stem.rpartition("_")
    return op if op and last in layout.TORCH_DTYPES else stem


def _assign(cells: "_CellPaths", workers: int):
    """(worker, chunk of cells) in the order the cells are written. The cells
    of one op always go to the same worker: its rounds (and its screening
    pair) share their IR, which each worker normalizes and compresses once.
    An op met for the first time goes to the least loaded worker: the writes
    take the cells in order, so an idle worker waits. Deterministic: the
    writing process and every worker compute the same assignment."""
    owner: Dict[str, int] = {}
    load = [0] * workers
    for key, group in itertools.groupby(cells, _op_key):
        group = list(group)
        if key not in owner:
            _bounded(owner, 4 * CACHE_ENTRIES)
            owner[key] = load.index(min(load))
        load[owner[key]] += len(group)
        for i in range(0, len(group), PREPARE_CHUNK):
            yield owner[key], group[i:i + PREPARE_CHUNK]


CACHE_ENTRIES = 2048
# Kernel sets (with their fingerprints and digests, a few KB each) kept for
# the rounds that follow: an op's rounds come together, so a few hundred do,
# and a campaign four times as large needs no more memory.
COMBINED_ENTRIES = 256
ROOT_CACHE_ENTRIES = 256  # directories' markers and roots: siblings follow each other


class _CellPaths:
    """The cell directories found, in order, as strings: one NUL-joined
    string per input path, not an object per cell (a campaign has tens of
    thousands; an ingest's memory must not grow with the tree)."""

    def __init__(self):
        self.parts: List[Tuple[str, str]] = []
        self.count = 0

    def add(self, top: Path, found: Iterable[Path]) -> int:
        base, joined, n = str(top), io.StringIO(), 0
        for cell in found:
            joined.write(str(cell)[len(base):])
            joined.write("\0")
            n += 1
        if n:
            self.parts.append((base, joined.getvalue()))
            self.count += n
        return n

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        for base, joined in self.parts:
            start = 0
            while start < len(joined):
                end = joined.index("\0", start)
                yield base + joined[start:end]
                start = end + 1


def _bounded(cache, limit: int = CACHE_ENTRIES):
    """A run's caches (digests, layout counts, known blobs, root lookups) are
    emptied when full: memory stays flat whatever the size of the tree."""
    if len(cache) >= limit:
        cache.clear()


class _KnownCells(dict):
    """path -> (id, stat_sig, content_sig), read from the cells table on first use."""

    def __init__(self, conn):
        super().__init__()
        self.conn = conn

    complete = False  # after preload(): a path not in the dict is not stored

    def preload(self, tops):
        """Every stored cell under tops, one query per top: an ingest of a
        whole tree asks once, not once per cell."""
        for top in map(str, tops):
            for path, *row in self.conn.execute(
                f"SELECT path, id, stat_sig, content_sig FROM cells WHERE {unchanged.AT_OR_UNDER}",
                unchanged.at_or_under(top),
            ):
                self[path] = tuple(row)
        self.complete = True

    def get(self, key, default=None):
        if not dict.__contains__(self, key):
            if self.complete:
                return default
            row = self.conn.execute("SELECT id, stat_sig, content_sig FROM cells WHERE path = ?", (key,)).fetchone()
            if row is None:
                return default
            self[key] = tuple(row)
        return dict.get(self, key, default)


class _KnownBlobs(set):
    """Blob hashes known stored; others are looked up, and remembered when
    found. Blobs are never deleted, and a cell that fails rolls back only
    its own writes, whose hashes are still pending (Ingester.pending_blobs),
    not found here: a hash found is there for the rest of the run."""

    def __init__(self, conn):
        super().__init__()
        self.conn = conn

    def __contains__(self, digest):
        if set.__contains__(self, digest):
            return True
        if self.conn.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone() is None:
            return False
        _bounded(self)
        self.add(digest)
        return True


def ingest_rules(conn: sqlite3.Connection) -> tuple:
    """The rules an ingest fingerprints a repeat run's or campaign's cells
    under: the current rule and the rules that change no text. Any other rule
    is computed from the stored IR when it is first asked for
    (Store.compute_fingerprints), so a costly rule nobody uses (v4 strips
    every location) is not paid for on every round of a campaign. A
    screening cell gets every rule (SCREENING_RULES): the verdicts compare
    rules, and the strictest tells whether the axis is live."""
    row = conn.execute("SELECT current_rule FROM judging_settings").fetchone()
    current = row[0] if row else ttgir.DEFAULT_RULE
    return tuple(rule for name, rule in ttgir.RULES.items() if name == current or rule.triggers == ())


SCREENING_RULES = tuple(ttgir.RULES.values())


def cell_rules(conn: sqlite3.Connection, root_kind: str) -> tuple:
    """The rules an ingest fingerprints a cell of a root of root_kind under."""
    return SCREENING_RULES if root_kind == "screen" else ingest_rules(conn)


class StoreStopped(Exception):
    """The database cannot take more writes (disk full, I/O error): the run
    stops, with what it committed."""


class NotStored(Exception):
    """A cell zlstore will not store, and why; filename: what to name."""

    def __init__(self, message: str, filename: str):
        super().__init__(message)
        self.filename = filename


def _storage_failure(error: BaseException) -> bool:
    """Whether SQLite said the disk is full or failing: no write will do better."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)
    return "disk is full" in str(error) or "disk I/O error" in str(error)


def _resolved(path) -> Path:
    """An input path made absolute, links resolved where they can be (a
    loop or a name too long is left for the walk to name)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


# A file column's test for a path and every path under it, given _file_bounds(path).
_FILE_AT_OR_UNDER = "(file = :at OR (file > :low AND file < :high))"


def _file_bounds(path: str) -> dict:
    prefix = path if path.endswith("/") else path + "/"
    return {"at": path, "low": prefix, "high": prefix[:-1] + "0"}


class _Batch:
    """The cells of a whole-tree ingest share a transaction for up to
    BATCH_SECONDS, each cell in a savepoint of its own: a cell is still stored
    whole or not at all, but the commit, which writes every page the cells
    touched into the WAL, and the re-pairing of their rounds (pairing.py) are
    paid once per batch instead of once per cell. Other writers wait at most
    about that long for the lock. A live writer (`record`) commits each cell
    at once."""

    def __init__(self, conn: sqlite3.Connection, seconds: Optional[float] = None):
        self.conn, self.started = conn, None
        self.seconds = BATCH_SECONDS if seconds is None else seconds

    def open(self):
        if not self.conn.in_transaction:
            retry_busy(lambda: self.conn.execute("BEGIN IMMEDIATE"))
            self.started = time.monotonic()

    def due(self) -> bool:
        return self.started is not None and time.monotonic() - self.started >= self.seconds

    def commit(self):
        """Commit the cells written so far, their rounds re-paired first."""
        if self.conn.in_transaction:
            pairing.refresh(self.conn)
            retry_busy(lambda: self.conn.execute("COMMIT"))
        self.started = None

    def rollback(self):
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.started = None


class Ingester:
    """One ingest or record run over one store."""

    def __init__(self, store, command: str = "ingest", rehash: bool = False):
        self.store = store
        self.conn: sqlite3.Connection = store.conn
        self.command = command
        self.summary = Summary()
        self.root_refs: dict = {}  # layout.root_of's cache: markers per directory, roots per parent
        self.roots: Dict[Path, Tuple[layout.Root, int]] = {}
        # Looked up per path and per hash (index hits): `zlstore record` of one
        # cell must not read every cell and blob of the store.
        self.cells: Dict[str, Tuple[int, str, str]] = _KnownCells(self.conn)
        self.blobs = _KnownBlobs(self.conn)
        self.pending_blobs: Dict[str, str] = {}  # written in the open transaction: known once it commits
        self.caliber_ids: Dict[tuple, int] = {}
        self.digests: Dict[Tuple[str, str], str] = {}
        self.combined: Dict[tuple, tuple] = {}  # a cell's kernels and index -> _fingerprints
        self.kernel_meta: Dict[str, tuple] = {}  # a kernel .json's sha256 -> (num_warps, num_stages)
        self.layout_counts: Dict[str, int] = {}
        self.run_id: Optional[int] = None
        self.packed: Dict[str, Tuple[int, bytes, Optional[str]]] = {}  # from workers, until stored
        self.digested: set = set()                      # texts whose digests this run stored
        self.pending_digested: set = set()
        self.sent: set = set()                          # in a worker: texts packed already
        self.loaded_roots: Dict[Path, layout.Root] = {}  # in a worker
        self.roots_met: set = set()                      # by _find: roots of cells found, as strings
        self.batch: Optional[_Batch] = None              # a whole-tree ingest's open batch
        self.rules = ingest_rules(self.conn)
        self.rehash = rehash  # read every cell: its content hash decides, not its stat signature

    # -- the run -----------------------------------------------------------

    def run(self, paths: Iterable, progress: Optional[Callable[[int, int], None]] = None,
            require_finished: bool = False) -> Summary:
        """Store the cells under paths. On a full disk (or a failing one) the
        run stops at once: the summary counts what was committed, and its
        state names the cause; the next run, with space, stores the rest."""
        paths = [_resolved(p) for p in paths]
        try:
            with self._write():
                self.run_id = self.conn.execute(
                    "INSERT INTO ingest_runs (started_at, command, paths) VALUES (?, ?, ?)",
                    (now(), self.command, json.dumps([str(p) for p in paths])),
                ).lastrowid
            cells = _CellPaths()
            for path in paths:
                if not os.path.lexists(path):
                    self.problem(Problem(str(path), None, "no such file or directory"))
                    continue
                if not self._find(path, cells, require_finished):
                    self.problem(Problem(str(path), None, "no cell directories found (no run.log or cell.env)"))
            workers = 0 if require_finished else _worker_count(len(cells))
            if workers or len(cells) > PARALLEL_MIN_CELLS:  # a forked worker must not query the store
                self.cells.preload(paths)
            prepared = self._prepared(cells, workers) if workers else ((cell, None) for cell in cells)
            bulk = len(cells) > PARALLEL_MIN_CELLS
            with contextlib.closing(prepared), bulk_checkpoints(self.conn, bulk):  # closing: the workers end with it
                self._write_all(prepared, len(cells), _Batch(self.conn) if bulk and not require_finished else None,
                                require_finished, progress)
            self._close_covered(paths)
            self.summary.open_problems = self._open_problems(paths)
        except StoreStopped as stop:
            self.summary.state = f"stopped: {stop}"
            self._forget_uncommitted()
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.summary.counts["roots"] = self._stored_roots()
            self._finish()
            return self.summary
        self.summary.counts["roots"] = len({root_id for _, root_id in self.roots.values()})
        self._finish()
        return self.summary

    def _finish(self):
        """The run's row gets its summary: what was committed, nothing else
        (on a full disk it may not get even that)."""
        if self.run_id is None:
            return
        try:
            with self._write():
                self.conn.execute(
                    "UPDATE ingest_runs SET finished_at = ?, summary = ? WHERE id = ?",
                    (now(), json.dumps(self.summary.as_dict()), self.run_id),
                )
        except StoreStopped:
            pass

    def _stored_roots(self) -> int:
        """The roots this run met that are stored (after a rollback, some may not be)."""
        ids = [root_id for _, root_id in self.roots.values()]
        return sum(1 for root_id in ids
                   if self.conn.execute("SELECT 1 FROM roots WHERE id = ?", (root_id,)).fetchone())

    def _close_covered(self, paths: List[Path]):
        """Close the earlier problems under paths that no stored cell or root
        holds (a cell that could not be stored, a directory that could not be
        listed): this run looked at their files again, and named what it found."""
        where = f"closed_by IS NULL AND run_id < :run AND cell_id IS NULL AND root_id IS NULL AND {_FILE_AT_OR_UNDER}"
        covered = [{"run": self.run_id, **_file_bounds(str(path))} for path in paths]
        covered = [bounds for bounds in covered  # most runs close nothing: no write lock for them
                   if self.conn.execute(f"SELECT 1 FROM ingest_problems WHERE {where} LIMIT 1", bounds).fetchone()]
        if covered:
            with self._write():
                for bounds in covered:
                    self.conn.execute(f"UPDATE ingest_problems SET closed_by = :run WHERE {where}", bounds)

    def _open_problems(self, paths: List[Path]) -> int:
        """The problems still open in what this run covered, and its own."""
        clauses = " OR ".join(f"({_FILE_AT_OR_UNDER.replace(':', f':p{i}_')})" for i in range(len(paths)))
        bounds = {f"p{i}_{k}": v for i, path in enumerate(paths) for k, v in _file_bounds(str(path)).items()}
        return self.conn.execute(
            f"SELECT count(*) FROM ingest_problems WHERE closed_by IS NULL AND (run_id = :run OR {clauses or '0'})",
            {"run": self.run_id, **bounds}).fetchone()[0]

    def _write_all(self, prepared, total: int, batch: Optional[_Batch], require_finished: bool, progress):
        """Store each (cell, what a worker prepared) in batches, or each in
        a transaction of its own (batch None). The summary counts a batch's
        cells when it commits: a batch rolled back (a full disk) counts none."""
        self.batch = batch
        committed = (dict(self.summary.counts), len(self.summary.problems))
        try:
            try:
                for done, (cell, ready) in enumerate(prepared, 1):
                    self.cell(cell if ready is not None else Path(cell), require_finished, ready)
                    if batch and batch.due():
                        batch.commit()
                        committed = (dict(self.summary.counts), len(self.summary.problems))
                    if progress:
                        progress(done, total)
                if batch:
                    batch.commit()
            except sqlite3.OperationalError as error:  # a walk's listings, a batch's commit
                if _storage_failure(error):
                    raise StoreStopped(error) from error
                raise
        except (KeyboardInterrupt, SystemExit):
            if batch:  # every cell written so far is whole: keep them
                batch.commit()
            raise
        except BaseException:
            if batch:
                batch.rollback()
                self.summary.counts = committed[0]
                del self.summary.problems[committed[1]:]
            raise
        finally:
            self.batch = None

    def _find(self, top: Path, cells: "_CellPaths", require_finished: bool = False) -> int:
        """Add the cells under top to cells, but for those stored unchanged:
        these are only counted, and their roots looked up (as a cell's are,
        by the first cell of each). Returns how many cells were found."""
        try:
            if require_finished or self.rehash:  # a harness's record: new cells, each to be seen finished first
                walked: List[Problem] = []
                n = cells.add(top, layout.cell_paths(str(top), walked))
                for problem in walked:
                    self.problem(problem)
                return n
            found = unchanged.sort_out(self.conn, str(top), _worker_count)
            cells.add(top, found.changed)
        except sqlite3.OperationalError as error:  # the walk's listings (walked_dirs)
            if _storage_failure(error):
                raise StoreStopped(error) from error
            raise
        for problem in found.problems:
            self.problem(problem)
        self.summary.counts["cells_unchanged"] += found.unchanged
        for _, root, kind, parts, first_unchanged in found.roots:
            if root not in self.roots_met:
                self.roots_met.add(root)
                if first_unchanged:  # else that first cell is ingested, and looks its root up then
                    self.root(layout.RootRef(Path(root), kind, parts))
        return found.cells

    def _prepared(self, cells: "_CellPaths", workers: int):
        """(cell, what a worker prepared for it) in order. Each worker goes
        through the same assignment (_assign) and prepares its own chunks;
        this process reads each chunk from its worker when it gets to it."""
        def share(me):
            for owner, chunk in _assign(cells, workers):
                if owner == me:
                    yield [self.prepare(Path(cell)) for cell in chunk]

        with forked.Workers(workers, share) as prepared:
            for owner, chunk in _assign(cells, workers):
                yield from zip(chunk, prepared.next_from(owner))

    @contextlib.contextmanager
    def _write(self):
        """A cell's writes: a transaction of their own, or a savepoint in a
        whole-tree ingest's batch. Pairs are brought up to date before any
        commit (pairing.py), so a committed database never has stale ones.
        A full disk is StoreStopped."""
        try:
            if self.batch is not None:
                self.batch.open()
            outermost = not self.conn.in_transaction
            with write_transaction(self.conn):
                yield
                if outermost:
                    pairing.refresh(self.conn)
        except sqlite3.OperationalError as error:
            if _storage_failure(error):
                raise StoreStopped(error) from error
            raise

    def prepare(self, cell: Path):
        """In a worker: (root ref, the files' stat signature, the parsed cell
        made portable, or None where the stored cell has the same stat
        signature, or the error's (type name, message))."""
        try:
            _bounded(self.root_refs, ROOT_CACHE_ENTRIES)
            _bounded(self.sent)
            ref = layout.locate_root(cell, self.root_refs)
            root = self.loaded_roots.get(ref.path)
            if root is None:
                root = self.loaded_roots[ref.path] = layout.load_root(ref)
            files = scan_cell(cell)
            files_sig = files.stat_sig
            known = self.cells.get(str(cell))
            if known and not self.rehash and known[1] == files_sig + root.files_sig:
                return ref, files_sig, None
            return ref, files_sig, self._portable(self.parse(files, ref, root))
        except Exception as error:
            return None, None, (type(error).__name__, str(error))

    def _portable(self, parsed: ParsedCell) -> ParsedCell:
        """What the writing process needs of a parsed cell, small to send."""
        for ir_hash, (raw, _) in parsed.texts.items():
            if ir_hash not in self.sent:
                self.sent.add(ir_hash)
                parsed.packed[ir_hash] = _packed(raw, "ttgir")
        parsed.stored_rows()
        return parsed  # pickled by ParsedCell.__reduce__: only what the writer needs

    def problem(self, problem: Problem, store: bool = True):
        self.summary.problems.append(problem)
        if store and self.run_id is not None:
            with self._write():
                self._store_problems([problem])

    def _store_problems(self, problems: List[Problem], cell_id: Optional[int] = None, root_id: Optional[int] = None):
        """A cell's (or a root's) problems stay open while it is stored as
        it was read; others until a later run covers their file (open_problems)."""
        self.conn.executemany(
            "INSERT INTO ingest_problems (run_id, file, line, message, cell_id, root_id) VALUES (?, ?, ?, ?, ?, ?)",
            [(self.run_id, p.file, p.line, p.message, cell_id, root_id) for p in problems],
        )

    # -- one cell ----------------------------------------------------------

    def cell(self, cell: Path, require_finished: bool = False, prepared=None) -> str:
        """Store one cell; returns what happened: added, replaced, unchanged,
        unfinished or failed."""
        try:
            return self._cell(cell, require_finished, prepared)
        except (KeyboardInterrupt, SystemExit, StoreStopped):
            self._forget_uncommitted()
            raise
        except Exception as error:  # one bad cell never stops the run
            self._forget_uncommitted()
            if _storage_failure(error):
                raise StoreStopped(error) from error
            self.summary.counts["cells_failed"] += 1
            if isinstance(error, (layout.Unreadable, NotStored)):
                problem = Problem(error.filename or str(cell), None, f"not stored: {error}")
            elif isinstance(error, OSError):
                problem = Problem(error.filename or str(cell), None, f"not stored: cannot read: "
                                                                    f"{error.strerror or error}")
            else:
                problem = Problem(str(cell), None, f"not stored: {type(error).__name__}: {error}")
            self.problem(problem)
            return "failed"

    def _cell(self, cell: Union[Path, str], require_finished: bool, prepared=None) -> str:
        """cell: a str only where a worker prepared it (no Path per cell then)."""
        key = str(cell)
        if prepared is not None and isinstance(prepared[2], ParsedCell):
            # first: the worker sends each text once, and later cells of the
            # op need it even when this one goes no further
            self.packed.update(prepared[2].packed)
        if not layout.storable(key):
            raise NotStored("its path holds bytes that are not UTF-8, which the store cannot keep as a path "
                            "(rename the directory)", key)
        if require_finished and not self._finished(cell):  # before the root: store nothing at all
            self.summary.counts["cells_unfinished"] += 1
            self.summary.unfinished.append(key)
            return "unfinished"
        if prepared is not None and isinstance(prepared[2], tuple):
            prepared = None  # the worker failed on it: fail here, the same way
        if prepared is None:
            cell = Path(cell)
            _bounded(self.root_refs, ROOT_CACHE_ENTRIES)
            ref = layout.locate_root(cell, self.root_refs)
        else:
            ref, files_sig, parsed = prepared
        root, root_id = self.root(ref)
        if prepared is None:
            files, parsed = scan_cell(cell), None
            files_sig = files.stat_sig
        known = self.cells.get(key)
        stat_sig = files_sig + root.files_sig
        if known and not self.rehash and known[1] == stat_sig:
            self.summary.counts["cells_unchanged"] += 1
            return "unchanged"
        if parsed is None:
            if prepared is not None:  # the worker saw it unchanged; this process does not
                files = scan_cell(Path(cell))
                stat_sig = files.stat_sig + root.files_sig
            parsed = self.parse(files, ref, root)
        else:
            parsed.root = root
        if parsed.reread:
            stat_sig = _UNREAD_SIG
        if known and known[2] == parsed.content_sig:
            with self._write():
                self.conn.execute("UPDATE cells SET stat_sig = ? WHERE id = ?", (stat_sig, known[0]))
            self.cells[key] = (known[0], stat_sig, known[2])
            self.summary.counts["cells_unchanged"] += 1
            return "unchanged"
        with self._write():
            # Another writer may have stored this cell since we looked.
            row = self.conn.execute("SELECT id, content_sig FROM cells WHERE root_id = ? AND relpath = ?",
                                    (root_id, parsed.cell_columns()[1])).fetchone()
            if row and row[1] == parsed.content_sig:
                outcome = "unchanged"
                self.conn.execute("UPDATE cells SET stat_sig = ? WHERE id = ?", (stat_sig, row[0]))
                cell_id = row[0]
            else:
                if row:  # its problems were the old files': closed
                    self.conn.execute("UPDATE ingest_problems SET closed_by = ? WHERE cell_id = ? AND closed_by IS NULL",
                                      (self.run_id, row[0]))
                    self.conn.execute("DELETE FROM cells WHERE id = ?", (row[0],))
                cell_id = self._insert(parsed, root_id, stat_sig)
                outcome = "replaced" if row else "added"
        self._committed()
        for ir_hash in parsed.texts:  # stored now, by this cell or an earlier one
            self.packed.pop(ir_hash, None)
        if not self.cells.complete:  # a whole tree: each path comes once, keep nothing per cell
            self.cells[key] = (cell_id, stat_sig, parsed.content_sig)
        self.summary.counts["cells_" + outcome] += 1
        if outcome != "unchanged":  # an unchanged cell's problems were told when it was stored
            self.summary.counts["rows_added"] += len(parsed.stored_rows())
            self.summary.counts["kernels_added"] += len(parsed.kernels)
            self.summary.problems.extend(parsed.problems)
        return outcome

    def _forget_uncommitted(self):
        """A rolled-back transaction takes its blobs and calibers with it."""
        self.pending_blobs.clear()
        self.pending_digested.clear()
        self.caliber_ids.clear()

    def _committed(self):
        _bounded(self.blobs)
        _bounded(self.digested, 4 * CACHE_ENTRIES)  # an entry per text: a campaign has thousands
        self.digested.update(self.pending_digested)
        self.pending_digested.clear()
        for digest, kind in self.pending_blobs.items():
            self.blobs.add(digest)
            if kind == "ttgir":
                self.summary.counts["ir_texts_added"] += 1
        self.pending_blobs.clear()

    def _finished(self, cell: Path) -> bool:
        """The harness writes cell.env last, with RC: before that the cell is
        still running. A cell.env that cannot be read is not a running cell:
        NotStored, naming it."""
        refused: List[Problem] = []
        within = str(layout.locate_root(Path(cell), self.root_refs).path)
        env = layout.read_env(Path(cell) / layout.CELL_ENV, refused, within)
        if refused:
            raise NotStored(refused[0].message, refused[0].file)
        return bool(env) and (env.get("RC") or "").strip() != ""

    # -- roots -------------------------------------------------------------

    def root(self, ref: layout.RootRef) -> Tuple[layout.Root, int]:
        """The stored root of ref (roots.py: known by what it is, wherever
        it is seen), stored or moved here first where it is not."""
        if ref.path in self.roots:
            return self.roots[ref.path]
        root = layout.load_root(ref)
        row = roots.stored_at(self.conn, str(ref.path))
        if row and row[1:] == (root.identity, root.files_sig):
            root_id = row[0]
        else:
            with self._write():  # looked up again inside: another writer may have been first
                root_id = self._place_root(root)
        self._stored_twice(root, root_id)
        self.roots[ref.path] = (root, root_id)
        return root, root_id

    def _place_root(self, root: layout.Root) -> int:
        """The id of the stored root that root is, brought up to date: the
        one at its path; else the one with its identity, moved here (the
        tree was moved or copied, or is seen from elsewhere), setting aside
        another root of its name stored at this path; else a new one."""
        path, identity = str(root.path), root.identity
        here = roots.stored_at(self.conn, path)
        same = roots.with_identity(self.conn, identity, path)
        if here and (here[1] == identity or not same):
            # where not the same identity, its env file was edited here: read its files again
            root_id, files_sig = here[0], here[2] if here[1] == identity else None
        elif same:
            root_id = same[0][0]
            if here:
                away = roots.set_aside(self.conn, path)
                self.problem(Problem(path, None, f"the root stored at this path was another root named {root.name}: "
                                                 f"it is kept as {away}"))
            moved_from = roots.relocate(self.conn, root_id, path)
            self.summary.moved.append({"root": root.name, "from": moved_from, "to": path})
            files_sig = self.conn.execute("SELECT files_sig FROM roots WHERE id = ?", (root_id,)).fetchone()[0]
        else:
            root_id = files_sig = None
            others = roots.namesakes(self.conn, root.name, identity)
            if others:
                self.problem(Problem(path, None, roots.namesake_message(root.name, root.env_file, root.env, others)))
        if root_id is None or files_sig != root.files_sig:
            layout.check_root_numbers(root)
            known = root_id is not None
            root_id = self._upsert_root(root, root_id)
            if known:  # its problems were the old files': closed
                self.conn.execute("UPDATE ingest_problems SET closed_by = ? "
                                  "WHERE root_id = ? AND cell_id IS NULL AND closed_by IS NULL",
                                  (self.run_id, root_id))
            self._store_problems(root.problems, root_id=root_id)
            self.summary.problems.extend(root.problems)
        return root_id

    def _stored_twice(self, root: layout.Root, root_id: int):
        """Name the other rows of the same root: a store made before roots
        were known by identity holds a moved tree twice."""
        for _, path in roots.with_identity(self.conn, root.identity):
            if path != str(root.path):
                self.problem(Problem(str(root.path), None, f"the same root ({root.name}, the same "
                                     f"{root.env_file or 'name'}) is also stored from {path}, by an older zlstore: "
                                     f"`zlstore forget '{path}'` removes that copy"))

    def _upsert_root(self, root: layout.Root, root_id: Optional[int]) -> int:
        env = root.env
        values = dict(
            path=str(root.path), name=root.name, kind=root.kind, switch=env.get("SWITCH"),
            host=env.get("HOST"), started_at=env.get("STARTED_AT"),
            rounds=layout._int(env.get("ROUNDS")), cards=layout._int(env.get("CARDS")),
            screen_root=env.get("SCREEN_ROOT"), caliber_id=self.caliber_id(caliber.complete(root.caliber())),
            env_file=root.env_file, env=json.dumps(env, sort_keys=True) if root.env_file else None,
            files_sig=root.files_sig, ingested_at=now(), identity=root.identity,
        )
        if root_id is None:
            columns = ", ".join(values)
            root_id = self.conn.execute(
                f"INSERT INTO roots ({columns}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            ).lastrowid
        else:
            assignments = ", ".join(f"{k} = ?" for k in values)
            self.conn.execute(f"UPDATE roots SET {assignments} WHERE id = ?", (*values.values(), root_id))
            self.conn.execute("DELETE FROM recorded_verdicts WHERE root_id = ?", (root_id,))
            self.conn.execute("DELETE FROM partitions WHERE root_id = ?", (root_id,))
        for file_name, rows in ((layout.SCREEN_TSV, root.screen), (layout.SCREEN_TSV_ORIG, root.screen_orig)):
            self.conn.executemany(
                f"INSERT INTO recorded_verdicts ({', '.join(RECORDED_VERDICT_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(RECORDED_VERDICT_COLUMNS))})",
                [self._verdict_row(root_id, file_name, line, row) for line, row in rows if row.get("op")],
            )
        self.conn.executemany(
            "INSERT INTO partitions (root_id, line, card, op, dtype, weight_min) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (root_id, line, layout._int(row.get("card")), row["op"], row.get("dtype") or "",
                 layout._float(row.get("weight_min")))
                for line, row in root.partition if row.get("op")
            ],
        )
        return root_id

    @staticmethod
    def _verdict_row(root_id, file_name, line, row):
        known = set(layout.SCREEN_COLUMNS)
        extra = {k: v for k, v in row.items() if k not in known}
        raw = row.get("verdict")
        return (
            root_id, file_name, line, row["op"], row.get("dtype") or "",
            judge.canonical_verdict(raw), raw or None,
            layout._int(row.get("cl_before")), layout._int(row.get("cl_after")),
            row.get("fp_before") or None, row.get("fp_after") or None,
            layout._float(row.get("elapsed_before")), layout._float(row.get("elapsed_after")),
            layout._int(row.get("rc_before")), layout._int(row.get("rc_after")),
            *[(row.get(n) or None) for n in caliber.NAMES],
            json.dumps(extra) if extra else None,
        )

    def caliber_id(self, values: Optional[tuple]) -> Optional[int]:
        """The id of a complete caliber, created on first use; None stays None."""
        if values is None:
            return None
        if values not in self.caliber_ids:
            where = " AND ".join(f"{n} = ?" for n in caliber.NAMES)
            row = self.conn.execute(f"SELECT id FROM calibers WHERE {where}", values).fetchone()
            if row is None:
                in_txn = self.conn.in_transaction
                insert = (f"INSERT OR IGNORE INTO calibers ({', '.join(caliber.NAMES)}) "
                          f"VALUES ({', '.join('?' * len(values))})")
                if in_txn:
                    self.conn.execute(insert, values)
                else:
                    with self._write():
                        self.conn.execute(insert, values)
                row = self.conn.execute(f"SELECT id FROM calibers WHERE {where}", values).fetchone()
            self.caliber_ids[values] = row[0]
        return self.caliber_ids[values]

    # -- parsing (no writes) -----------------------------------------------

    def parse(self, files: CellFiles, ref: layout.RootRef, root: layout.Root) -> ParsedCell:
        cell = files.path
        top = str(cell)
        _bounded(self.digests, 4 * CACHE_ENTRIES)  # an entry per text and rule
        _bounded(self.layout_counts)
        problems: List[Problem] = []
        content = hashlib.sha256(root.files_sig.encode())

        def add_content(name: str, digest: str):
            content.update(f"{name}\0{digest}\n".encode("utf-8", "surrogateescape"))

        within = str(ref.path)
        problems.extend(files.problems)
        reread = bool(files.problems)  # what was not read leaves no trace in the stat signature

        def read(rel: str, missing: Optional[str] = None) -> Tuple[Optional[bytes], Optional[str]]:
            """A file of the cell and its sha256, or (None, None): missing (a
            problem if missing says why), or refused (a problem names it; its
            refusal goes into the content hash, so that it stays until the
            file changes)."""
            path = os.path.join(top, rel)
            try:
                data = _read(path, within)
            except FileNotFoundError:
                if missing:
                    problems.append(Problem(path, None, missing))
                return None, None
            except OSError as error:
                message = str(error) if isinstance(error, layout.Unreadable) else f"cannot read: {error}"
                problems.append(Problem(path, None, message))
                add_content(rel, "refused: " + message)
                return None, None
            digest = _sha256(data)
            add_content(rel, digest)
            return data, digest

        env_bytes, _ = read(layout.CELL_ENV)
        env = None
        if env_bytes is not None:
            env_path = os.path.join(top, layout.CELL_ENV)
            env = layout._parse_env(env_bytes, env_path, problems)
            layout.check_numbers(env, layout.CELL_NUMBERS, env_path, None, problems)
            layout.check_side(env, env_path, problems)
        values = layout.resolve_cell(ref, root, env)
        log_bytes, _ = read(layout.RUN_LOG, "missing: the cell has no run.log")
        if log_bytes is not None:
            log = runlog.parse_runlog(log_bytes)
            problems.extend(Problem(str(cell / layout.RUN_LOG), p.line, p.message) for p in log.problems)
        else:
            log = runlog.RunLog(rows=[], problems=[], records=0, lines=0)
        index = None
        index_bytes, index_hash = read(layout.INDEX_TSV)
        if index_bytes is not None:
            index = (index_hash, index_bytes)
        kernels, texts = [], {}
        for rel, name in files.ttgir:
            if not layout.storable(rel) or _CONTROL.search(rel):
                problems.append(Problem(os.path.join(top, rel), None, "a kernel name that is not printable "
                                        "UTF-8 (a control character, or bytes that are not UTF-8): not read"))
                reread = True
                continue
            raw, ir_hash = read(rel)
            if raw is None:
                reread = True
                continue
            if ir_hash not in texts:  # decoded only where something is still to be computed from it
                known = ir_hash in self.layout_counts and all(
                    (ir_hash, r.name) in self.digests for r in self.rules_for(root))
                texts[ir_hash] = (raw, None if known else raw.decode("utf-8", "surrogateescape"))
            if ir_hash not in self.layout_counts:
                self.layout_counts[ir_hash] = ttgir.count_convert_layouts(texts[ir_hash][1])
            warps = stages = None
            meta_bytes, meta_hash = read(files.meta_json[rel]) if rel in files.meta_json else (None, None)
            if meta_bytes is not None:
                if meta_hash not in self.kernel_meta:  # every round compiles the same kernels
                    _bounded(self.kernel_meta, COMBINED_ENTRIES)
                    self.kernel_meta[meta_hash] = _kernel_meta(meta_bytes)
                warps, stages, fault = self.kernel_meta[meta_hash]
                if fault:
                    problems.append(Problem(os.path.join(top, files.meta_json[rel]), None,
                                            f"{fault}: the kernel's num_warps and num_stages are unknown"))
            elif rel in files.meta_json:
                reread = True
            kernels.append(Kernel(name, _cache_dir(rel), ir_hash, self.layout_counts[ir_hash], warps, stages))
        values["ir_incomplete"] = 1 if len(kernels) < len(files.ttgir) or files.problems else 0
        if _CONTROL.search(top):
            problems.append(Problem(top, None, "the cell's path holds a control character (a newline?): "
                                               "stored, but tools that read paths by lines will misread it"))
        parsed = ParsedCell(files, root, ref, env, values, log, kernels, texts, index,
                            content.hexdigest(), problems, reread=reread)
        parsed.fingerprints = self._fingerprints(parsed)  # here, not under the write lock in _insert
        return parsed

    def digest(self, rule: ttgir.Rule, ir_hash: str, text: str) -> str:
        key = (ir_hash, rule.name)
        if key not in self.digests:
            normalized = rule.normalized(text)
            # Left as it was, the text hashes to its own ir_hash (the sha256 of
            # the bytes it was decoded from with surrogateescape).
            self.digests[key] = ir_hash if normalized is text else ttgir.digest(normalized)
        return self.digests[key]

    # -- writing (inside the cell's transaction) ---------------------------

    def _insert(self, parsed: ParsedCell, root_id: int, stat_sig: str) -> int:
        rows = parsed.stored_rows()
        caliber_id = self.caliber_id(parsed.values["caliber"])
        if parsed.index and parsed.index[0] not in self.pending_blobs and parsed.index[0] not in self.blobs:
            self._insert_blob(parsed.index[0], "index.tsv", parsed.index[1])
        cell_id = self.conn.execute(_INSERT_CELL, (root_id, caliber_id, stat_sig, now(), *parsed.cell_columns())).lastrowid
        self.conn.executemany(
            f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(MEASUREMENT_COLUMNS))})",
            [(cell_id, *row) for row in rows],
        )
        for ir_hash, (raw, _) in parsed.texts.items():
            if ir_hash not in self.pending_blobs and ir_hash not in self.blobs:
                self._insert_blob(ir_hash, "ttgir", raw, self.packed.get(ir_hash))
        self.conn.executemany(_INSERT_KERNEL, [(cell_id, *k) for k in parsed.kernels])
        fingerprints, digests = parsed.fingerprints
        digests = [d for d in digests if d[0] not in self.digested]  # stored by this run already
        self.pending_digested.update(d[0] for d in digests)
        if digests:
            self.conn.executemany("INSERT OR IGNORE INTO ir_digests (ir_hash, rule, digest) VALUES (?, ?, ?)", digests)
        self.conn.executemany("INSERT INTO fingerprints (cell_id, rule, fingerprint) VALUES (?, ?, ?)",
                              [(cell_id, rule, fingerprint) for rule, fingerprint in fingerprints])
        if parsed.problems:
            self._store_problems(parsed.problems, cell_id=cell_id)
        return cell_id

    def _fingerprints(self, parsed: ParsedCell):
        """The cell's (rule, fingerprint) under every rule of this run, and
        the (ir_hash, rule, digest) of each of its texts. Every round of an
        op compiles the same kernels: they are combined once."""
        key = (tuple((k.name, k.ir_hash) for k in parsed.kernels), parsed.index and parsed.index[0],
               parsed.root.kind == "screen")
        if key not in self.combined:
            _bounded(self.combined, COMBINED_ENTRIES)
            self.combined[key] = self._combine(parsed)
        return self.combined[key]

    def _combine(self, parsed: ParsedCell):
        fingerprints, digests = [], []
        for rule in self.rules_for(parsed.root):
            pairs = []
            for k in parsed.kernels:
                digest = self.digest(rule, k.ir_hash, parsed.texts[k.ir_hash][1])
                pairs.append((k.name, digest))
            for ir_hash, (_, text) in parsed.texts.items():
                digests.append((ir_hash, rule.name, self.digest(rule, ir_hash, text)))
            index_digest = parsed.index[0] if (rule.hashes_index and parsed.index) else None
            fingerprints.append((rule.name, ttgir.combine(rule, pairs, index_digest)))
        return fingerprints, digests

    def rules_for(self, root: layout.Root) -> tuple:
        """The rules a cell of root is fingerprinted under (ingest_rules)."""
        return SCREENING_RULES if root.kind == "screen" else self.rules

    def _insert_blob(self, digest: str, kind: str, raw: Optional[bytes],
                     packed: Optional[Tuple[int, bytes, Optional[str]]] = None):
        """raw bytes, or what a worker made of them (_packed)."""
        size, data, markers = packed if raw is None else _packed(raw, kind)
        self.conn.execute(
            "INSERT OR IGNORE INTO blobs (hash, kind, size, data, markers) VALUES (?, ?, ?, ?, ?)",
            (digest, kind, size, data, markers),
        )
        self.pending_blobs[digest] = kind

    @staticmethod
    def _measurement_values(row: "runlog.Row") -> tuple:
        values = _STORED_VALUES(row.values)
        # A hundred thousand rows: the common case (only scalars, no JSON
        # field set) is told at C speed; the rest is encoded field by field.
        if not _CONTAINERS.isdisjoint(map(type, values)) or any(values[i] is not None for i in _JSON_POSITIONS):
            values = [
                json.dumps(value, sort_keys=True)
                if value is not None and (i in _JSON_POSITIONS or isinstance(value, (list, dict))) else value
                for i, value in enumerate(values)
            ]
        return (
            row.line, row.record, row.index, row.op_name, row.dtype, row.mode, row.level,
            row.shape_key, *values, json.dumps(row.extra, sort_keys=True, default=str) if row.extra else None,
            1 if row.counted else 0, row.not_counted_reason, 1 if row.fallback else 0,
        )

