"""A cell's files, read and parsed into what the store keeps of it (a
ParsedCell): its values and where each came from, its rows as stored, its
kernels with their IR, and its fingerprints under every rule of the run.

No database: the parser is given the rules, and its caches hold what a
run's cells share (every round of an op compiles the same kernels). The
writer (ingest.py) stores what this gives; on a large tree, worker
processes call it (parallel.py)."""

import collections
import errno
import hashlib
import json
import operator
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from isal import isal_zlib

from . import layout, outcomes, runlog, ttgir, unchanged
from ..errors import StoreError
from .layout import Problem

MEASUREMENT_COLUMNS = ("cell_id",) + runlog.STORED_FIELDS  # a row as the parse stores it
_COUNTED = MEASUREMENT_COLUMNS.index("counted") - 1  # in a stored row without its cell_id
# The measurements columns most rows leave NULL (FlagGems reports them for
# some ops only). A row with none of them is INSERTed without them
# (DENSE_COLUMNS, insert_runs): binding the NULLs of a hundred thousand rows
# was half the time of a campaign's measurements INSERT, in the process all
# the others wait for.
SPARSE_COLUMNS = (
    "legacy_shape",
    "gbps_base",
    "gbps",
    "accuracy",
    "tflops",
    "utilization",
    "compared_speedup",
    "error_msg",
    "extra",
    "not_counted_reason",
)
DENSE_COLUMNS = tuple(c for c in MEASUREMENT_COLUMNS if c not in SPARSE_COLUMNS)
_SPARSE_VALUES = operator.itemgetter(*(MEASUREMENT_COLUMNS.index(c) - 1 for c in SPARSE_COLUMNS))
_DENSE_VALUES = operator.itemgetter(*(MEASUREMENT_COLUMNS.index(c) - 1 for c in DENSE_COLUMNS[1:]))
_NONE_SPARSE = (None,) * len(SPARSE_COLUMNS)
# The cells columns a cell's files give (ParsedCell.cell_columns); the
# writer adds root_id, caliber_id, stat_sig and ingested_at.
CELL_COLUMNS = (
    "path",
    "relpath",
    "repeat_dir",
    "card",
    "op",
    "dtype",
    "side",
    "round",
    "rc",
    "elapsed_s",
    "started_at",
    "nodeid",
    "switch",
    "switch_value",
    "cell_timeout",
    "caliber_missing",
    "card_source",
    "op_source",
    "dtype_source",
    "side_source",
    "round_source",
    "rc_source",
    "elapsed_source",
    "caliber_source",
    "provenance",
    "n_records",
    "n_rows",
    "n_counted",
    "n_kernels",
    "convert_layouts",
    "index_hash",
    "n_problems",
    "content_sig",
    "ir_incomplete",
    "test_outcome",
    "test_reason",
)
_N_ROWS = CELL_COLUMNS.index("n_rows")
# A kernels row but for its cell_id.
# shared: bytes of shared memory, as the kernel's .json gives it (Triton's "shared")
Kernel = collections.namedtuple("Kernel", "name cache_dir ir_hash convert_layouts num_warps num_stages shared")


@dataclass
class CellFiles:
    """A cell directory's relevant files and their stat signature."""

    path: Path
    stats: Dict[str, Optional[os.stat_result]]  # relpath (a directory's ends in /) -> stat, None: missing
    ttgir: List[Tuple[str, str]]  # (relpath, kernel name)
    meta_json: Dict[str, str]  # ttgir relpath -> sibling .json relpath
    # What of triton_cache could not be listed or entered: the cell's IR is
    # then incomplete, and a verdict must not rest on it.
    problems: List[Problem] = field(default_factory=list)

    @property
    def stat_sig(self) -> str:
        return unchanged.files_sig(self.stats)


def scan_cell(cell: Path) -> CellFiles:  # noqa: C901 -- one pass over a cell's files, a branch per file kind and fault
    """List what feeds the store: cell.env, run.log, index.tsv, and inside
    triton_cache/ every .ttgir with its sibling .json. Interrupted compiles
    (tmp.pid_*), group files (__grp__*.json) and launcher directories with
    no .ttgir play no part. The stat signature covers cell.env, run.log,
    index.tsv and every directory entered, not the files in triton_cache:
    Triton writes a cache directory once, by rename, so an entry added,
    removed or renamed changes its directory's times (unchanged.py).
    triton_cache and the directories below it are entered only as what they
    are, never through a symbolic link (docs/layout.md: "How a tree is read"); one that is
    a link, not a directory, or cannot be listed is a problem of the cell's
    IR."""
    stats, kernels, meta, problems = {}, [], {}, []
    top = str(cell)
    for name in (layout.CELL_ENV, layout.RUN_LOG, layout.INDEX_TSV):  # stat'ed by name: no listing
        stats[name] = _stat(None, os.path.join(top, name))
    cache = os.path.join(top, layout.TRITON_CACHE)
    cache_stat = stats[layout.TRITON_CACHE + "/"] = _plain_directory(cache)  # the usual case: one lstat
    if cache_stat is None:
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
            files = {n: e for n, e in listing.items() if not layout.entry_is_dir(e)}
            below = []
            for n, e in listing.items():
                if n in files or n.startswith("tmp.pid_"):
                    continue
                if n.endswith(".ttgir"):
                    problems.append(
                        Problem(e.path, None, "a directory where a kernel's .ttgir belongs: its IR is not read")
                    )
                if e.is_symlink():
                    problems.append(
                        Problem(e.path, None, "a symbolic link to a directory: not followed, its kernels not read")
                    )
                    continue
                below.append((e.path, rel_dir + "/" + n, e))
            below.sort(reverse=True)  # paths differ: entries are never compared
            for path, rel, entry in below:
                stats[rel + "/"] = _stat(entry)
                pending.append((path, rel))
            # name[:-6].strip("."): what os.path.splitext calls a stem (".ttgir" has none)
            found = [
                (rel_dir + "/" + name, name[:-6])
                for name in sorted(files)
                if name.endswith(".ttgir") and name[:-6].strip(".")
            ]
            kernels.extend(found)
            for rel, stem in found:
                sibling = stem + ".json"
                if (sibling in files and not sibling.startswith("__grp__")) or os.path.exists(
                    os.path.join(directory, sibling)
                ):
                    meta[rel] = rel_dir + "/" + sibling
    return CellFiles(cell, stats, kernels, meta, problems)


def _plain_directory(path: str) -> Optional[os.stat_result]:
    """path's stat where it is a directory, not a link to one (its lstat is
    then its stat); None for anything else, which scan_cell looks at again."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISDIR(st.st_mode) else None


def _not_a_directory(cache: str) -> Optional[str]:
    """Why a cell's triton_cache cannot be read as its kernels, or None."""
    try:
        st = os.lstat(cache)
    except OSError as error:
        return f"cannot read: {error.strerror or error}; the cell's kernels are not read"
    if stat.S_ISLNK(st.st_mode):
        return f"a symbolic link (to {os.readlink(cache)}), not a directory: not followed, the cell's kernels not read"
    if not stat.S_ISDIR(st.st_mode):
        return f"{layout.file_kind(st.st_mode)}, not a directory: the cell's kernels not read"
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
        problems.append(
            Problem(
                directory,
                None,
                f"cannot list this directory: {error.strerror or error}; the kernels in it are not read",
            )
        )
        return {}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_read = layout.read_bytes


def _cache_dir(rel: str) -> str:
    """The directory of a triton_cache/... relpath, relative to triton_cache."""
    directory = os.path.dirname(rel)
    prefix = layout.TRITON_CACHE + "/"
    if directory.startswith(prefix) and "/." not in directory and "//" not in directory:
        return directory[len(prefix) :]
    return os.path.relpath(directory, layout.TRITON_CACHE)


def _kernel_meta(data: bytes) -> Tuple[Optional[int], Optional[int], Optional[int], Optional[str]]:
    """(num_warps, num_stages, shared memory bytes, what is wrong with the file or None)."""
    try:
        meta = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        return None, None, None, f"not JSON ({str(error)[:80] or type(error).__name__})"
    if not isinstance(meta, dict):
        return None, None, None, f"a JSON {type(meta).__name__}, not an object"

    def as_int(value):
        return value if isinstance(value, int) and not isinstance(value, bool) and value in layout.INT64 else None

    return as_int(meta.get("num_warps")), as_int(meta.get("num_stages")), as_int(meta.get("shared")), None


# A control character in a name: stored where it can be, and always named.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class ParsedCell:
    files: CellFiles
    root: Optional[layout.Root]  # None in a cell a worker sent, until the writer sets it
    ref: layout.RootRef
    env: Optional[Dict[str, str]]
    values: Dict[str, Any]  # str, int, float or None by name (layout.resolve_cell)
    log: Optional[runlog.RunLog]  # None in a cell a worker sent: its rows came as runs
    kernels: List[Any]  # Kernel, or a plain tuple of its fields where a worker sent it
    # ir_hash -> (raw bytes, text or None: all computed already); (None, None) in a cell a worker sent
    texts: Dict[str, Tuple[Optional[bytes], Optional[str]]]
    index: Optional[Tuple[str, bytes]]
    content_sig: str
    problems: List[Problem]
    # Filled by the process that parsed the cell, and all a worker sends of
    # it (texts and the log stay in the worker: parallel.py): its rows as
    # INSERTed (runs), its fingerprints and text digests
    # (CellParser._fingerprints), the (size, zlib data) of the texts that
    # worker had not sent before, and the cells row.
    fingerprints: Optional[tuple] = None
    packed: Dict[str, Tuple[int, bytes, Optional[str]]] = field(default_factory=dict)  # ir_hash -> packed(its text)
    columns: Optional[tuple] = None  # cell_columns()
    reread: bool = False  # something was not read: the next ingest reads the cell again (cellingest.UNREAD_SIG)
    runs: Optional[List[Tuple[bool, List[tuple]]]] = None  # insert_runs(): what a worker sends of the rows

    def cell_columns(self) -> tuple:
        """The cells row's CELL_COLUMNS, as INSERTed."""
        if self.columns is None:
            assert self.log is not None  # a worker's cell came with its columns
            v, rows, sources = self.values, self.stored_rows(), self.values["sources"]
            self.columns = (
                str(self.files.path),
                "/".join(self.ref.parts),
                v["repeat_dir"],
                v["card"],
                v["op"],
                v["dtype"],
                v["side"],
                v["round"],
                v["rc"],
                v["elapsed_s"],
                v["started_at"],
                v["nodeid"],
                v["switch"],
                v["switch_value"],
                v["cell_timeout"],
                v["caliber_missing"],
                *(sources.get(k) for k in ("card", "op", "dtype", "side", "round", "rc", "elapsed")),
                v["caliber_source"],
                layout.provenance_json(sources),
                self.log.records,
                len(rows),
                sum(1 for r in rows if r[_COUNTED]),
                len(self.kernels),
                sum(k.convert_layouts for k in self.kernels),
                self.index[0] if self.index else None,
                len(self.problems),
                self.content_sig,
                v["ir_incomplete"],
                v.get("test_outcome"),
                v.get("test_reason"),
            )
        return self.columns

    def stored_rows(self) -> List[tuple]:
        """The measurements rows without their cell_id, as INSERTed."""
        assert self.log is not None  # a worker's cell came with its rows as runs
        return self.log.stored

    def insert_runs(self) -> List[Tuple[bool, List[tuple]]]:
        """The measurements rows in the order they are INSERTed, as runs of
        (dense, rows): a dense row is its DENSE_COLUMNS (without cell_id),
        the others all of MEASUREMENT_COLUMNS'."""
        if self.runs is None:
            self.runs = []
            for row in self.stored_rows():
                dense = _SPARSE_VALUES(row) == _NONE_SPARSE
                if not self.runs or self.runs[-1][0] != dense:
                    self.runs.append((dense, []))
                self.runs[-1][1].append(_DENSE_VALUES(row) if dense else row)
        return self.runs

    @property
    def row_count(self) -> int:
        return self.cell_columns()[_N_ROWS]


CACHE_ENTRIES = 2048
# Kernel sets (with their fingerprints and digests, a few KB each) kept for
# the rounds that follow: an op's rounds come together, so a few hundred do,
# and a campaign four times as large needs no more memory.
COMBINED_ENTRIES = 256
ROOT_CACHE_ENTRIES = 256  # directories' markers and roots: siblings follow each other


def bounded(cache, limit: int = CACHE_ENTRIES):
    """A run's caches (digests, layout counts, known blobs, root lookups) are
    emptied when full: memory stays flat whatever the size of the tree."""
    if len(cache) >= limit:
        cache.clear()


# Every rule: a screening cell is fingerprinted under each (the verdicts
# compare rules, and the strictest tells whether the axis is live).
SCREENING_RULES = tuple(ttgir.RULES.values())
# A blob's data is a zlib stream (RFC 1950), written and read by ISA-L
# (isal_zlib), which does zlib's format at several times its speed: its
# level 1 packs a campaign's IR in a quarter of the time of zlib's level 2,
# a little smaller, and reads it back in half the time (a rescore reads
# thousands). Any zlib reads what it writes, and it reads any zlib's.
ZLIB_LEVEL = 1  # isal_zlib's levels are 0-3


def packed(raw: bytes, kind: str) -> Tuple[int, bytes, Optional[str]]:
    """A blob as stored: its size, its zlib data, and for a .ttgir the
    fingerprint-rule triggers it holds (ttgir.markers)."""
    return len(raw), isal_zlib.compress(raw, ZLIB_LEVEL), ttgir.markers(raw) if kind == "ttgir" else None


class BlobError(StoreError):
    """A stored blob that is not what its row says: data that is not zlib,
    a size claim over MAX_BLOB_BYTES or not its inflated size, a zlib bomb.
    A store's fault (merged from a hostile source, or damaged): the message
    names the blob."""


# The most a blob inflates to: what an ingest reads of one file (a blob is
# one file's bytes), so a zlib bomb in a store costs at most this much.
MAX_BLOB_BYTES = layout.MAX_FILE_BYTES
_INFLATE_STEP = 1 << 20  # compressed bytes fed to the inflater at a time


def unpacked(data: bytes, size: int, name: str = "a blob", cap: int = MAX_BLOB_BYTES) -> bytes:
    """A blob's bytes from its stored data and size: inflated in steps, never
    past the size it claims (nor past cap), and exactly that size, else
    BlobError naming it: whatever the store holds, this takes at most
    min(size, cap) bytes."""
    if not isinstance(size, int) or not 0 <= size <= cap:
        raise BlobError(f"{name}: a size of {size!r} bytes, over the {cap >> 20} MB a blob may inflate to")
    if not isinstance(data, bytes):
        raise BlobError(f"{name}: its data is {type(data).__name__}, not zlib bytes")
    inflater = isal_zlib.decompressobj()
    out = bytearray()
    try:
        for at in range(0, max(len(data), 1), _INFLATE_STEP):
            # max_length: one byte past the claim tells a lie (a bomb) without inflating it
            out += inflater.decompress(data[at : at + _INFLATE_STEP], size + 1 - len(out))
            if len(out) > size or inflater.unconsumed_tail:
                raise BlobError(f"{name}: inflates past the {size} bytes it claims (a zlib bomb?)")
            if inflater.eof:
                break
    except isal_zlib.error as error:  # type: ignore[misc]  # an exception class; its stub says otherwise
        raise BlobError(f"{name}: its data is not a zlib stream ({error})") from None
    if not inflater.eof or inflater.unused_data or data[at + _INFLATE_STEP :]:
        raise BlobError(f"{name}: its data is not one whole zlib stream")
    if len(out) != size:
        raise BlobError(f"{name}: inflates to {len(out)} bytes, not the {size} it claims")
    return bytes(out)


class CellParser:
    """Parses the cells of one run. rules: what a repeat run's or a
    campaign's cell is fingerprinted under (fingerprints.ingest_rules); a
    screening cell gets SCREENING_RULES."""

    def __init__(self, rules: tuple):
        self.rules = rules
        self.digests: Dict[Tuple[str, str], str] = {}
        self.combined: Dict[tuple, tuple] = {}  # a cell's kernels and index -> _fingerprints
        self.kernel_meta: Dict[str, tuple] = {}  # a kernel .json's sha256 -> (num_warps, num_stages, shared)
        self.layout_counts: Dict[str, int] = {}

    def parse(self, files: CellFiles, ref: layout.RootRef, root: layout.Root) -> ParsedCell:  # noqa: C901 -- a cell's files, a branch per file kind and fault
        cell = files.path
        top = str(cell)
        bounded(self.digests, 4 * CACHE_ENTRIES)  # an entry per text and rule
        bounded(self.layout_counts)
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
            env = layout.parse_env(env_bytes, env_path, problems)
            layout.check_numbers(env, layout.CELL_NUMBERS, env_path, None, problems)
            layout.check_cell_env(env, ref, env_path, problems)
        values = layout.resolve_cell(ref, root, env)
        log_bytes, _ = read(layout.RUN_LOG, "missing: the cell has no run.log")
        if log_bytes is not None:
            log = runlog.parse_runlog(log_bytes)
            values["test_outcome"], values["test_reason"] = outcomes.summary(outcomes.read(log_bytes))
            problems.extend(Problem(str(cell / layout.RUN_LOG), p.line, p.message) for p in log.problems)
        else:
            log = runlog.RunLog()
        index = None
        index_bytes, index_hash = read(layout.INDEX_TSV)
        if index_bytes is not None and index_hash is not None:  # read() gives both or neither
            index = (index_hash, index_bytes)
        kernels = []
        texts: Dict[str, Tuple[Optional[bytes], Optional[str]]] = {}
        for rel, name in files.ttgir:
            if not layout.storable(rel) or _CONTROL.search(rel):
                problems.append(
                    Problem(
                        os.path.join(top, rel),
                        None,
                        "a kernel name that is not printable "
                        "UTF-8 (a control character, or bytes that are not UTF-8): not read",
                    )
                )
                reread = True
                continue
            raw, ir_hash = read(rel)
            if raw is None or ir_hash is None:  # read() gives both or neither
                reread = True
                continue
            if ir_hash not in texts:  # decoded only where something is still to be computed from it
                known = ir_hash in self.layout_counts and all(
                    (ir_hash, r.name) in self.digests for r in self.rules_for(root)
                )
                texts[ir_hash] = (raw, None if known else raw.decode("utf-8", "surrogateescape"))
            if ir_hash not in self.layout_counts:
                text = texts[ir_hash][1]
                assert text is not None  # decoded above: it was not known
                self.layout_counts[ir_hash] = ttgir.count_convert_layouts(text)
            warps = stages = shared = None
            meta_bytes, meta_hash = read(files.meta_json[rel]) if rel in files.meta_json else (None, None)
            if meta_bytes is not None and meta_hash is not None:  # read() gives both or neither
                if meta_hash not in self.kernel_meta:  # every round compiles the same kernels
                    bounded(self.kernel_meta, COMBINED_ENTRIES)
                    self.kernel_meta[meta_hash] = _kernel_meta(meta_bytes)
                warps, stages, shared, fault = self.kernel_meta[meta_hash]
                if fault:
                    problems.append(
                        Problem(
                            os.path.join(top, files.meta_json[rel]),
                            None,
                            f"{fault}: the kernel's num_warps and num_stages are unknown",
                        )
                    )
            elif rel in files.meta_json:
                reread = True
            kernels.append(Kernel(name, _cache_dir(rel), ir_hash, self.layout_counts[ir_hash], warps, stages, shared))
        values["ir_incomplete"] = 1 if len(kernels) < len(files.ttgir) or files.problems else 0
        if _CONTROL.search(top):
            problems.append(
                Problem(
                    top,
                    None,
                    "the cell's path holds a control character (a newline?): "
                    "stored, but tools that read paths by lines will misread it",
                )
            )
        parsed = ParsedCell(
            files, root, ref, env, values, log, kernels, texts, index, content.hexdigest(), problems, reread=reread
        )
        parsed.fingerprints = self._fingerprints(parsed)  # here, not under the write lock in CellWriter.write
        return parsed

    def digest(self, rule: ttgir.Rule, ir_hash: str, text: Optional[str], normalized_now: Optional[dict] = None) -> str:
        """The digest of a text under rule. text: None where every digest of
        it is known (CellParser.parse). normalized_now: the texts this
        cell's combine normalized so far, by (ir_hash, rule name), for a
        rule that builds on another's normalization (ttgir.Rule.builds_on)."""
        key = (ir_hash, rule.name)
        if key not in self.digests:
            assert text is not None  # parse() decodes a text whose digests are not all known
            finish = rule.finish  # there with builds_on
            base = normalized_now.get((ir_hash, rule.builds_on)) if normalized_now and rule.builds_on else None
            normalized = finish(base) if base is not None and finish is not None else rule.normalized(text)
            if normalized_now is not None:
                normalized_now[key] = normalized
            # Left as it was, the text hashes to its own ir_hash (the sha256 of
            # the bytes it was decoded from with surrogateescape).
            self.digests[key] = ir_hash if normalized is text else ttgir.digest(normalized)
        return self.digests[key]

    def _fingerprints(self, parsed: ParsedCell):
        """The cell's (rule, fingerprint) under every rule of this run, and
        the (ir_hash, rule, digest) of each of its texts. Every round of an
        op compiles the same kernels: they are combined once."""
        assert parsed.root is not None  # parsed here, not sent by a worker
        key = (
            tuple((k.name, k.ir_hash) for k in parsed.kernels),
            parsed.index and parsed.index[0],
            parsed.root.kind == "screen",
        )
        if key not in self.combined:
            bounded(self.combined, COMBINED_ENTRIES)
            self.combined[key] = self._combine(parsed)
        return self.combined[key]

    def _combine(self, parsed: ParsedCell):
        assert parsed.root is not None  # parsed here, not sent by a worker
        fingerprints = []
        digests: List[Tuple[str, str, str]] = []
        normalized_now: Dict[Tuple[str, Optional[str]], str] = {}
        kernels = [(k.name, k.ir_hash) for k in parsed.kernels]
        for rule in self.rules_for(parsed.root):
            digested = {
                ir_hash: self.digest(rule, ir_hash, text, normalized_now) for ir_hash, (_, text) in parsed.texts.items()
            }
            digests.extend((ir_hash, rule.name, digest) for ir_hash, digest in digested.items())
            fingerprints.append(
                (rule.name, ttgir.fingerprint(rule, kernels, digested.__getitem__, parsed.index and parsed.index[0]))
            )
        return fingerprints, digests

    def rules_for(self, root: layout.Root) -> tuple:
        """The rules a cell of root is fingerprinted under (fingerprints.cell_rules)."""
        return SCREENING_RULES if root.kind == "screen" else self.rules
