"""A whole tree prepared in worker processes while this process writes
it: which worker prepares which cells (assign), what a worker does with a
cell (Preparer: read, parse, pack) and what it sends of it (a ParsedCell,
pickled small), and the workers themselves (forked.Workers).

Reading and parsing are most of an ingest: the workers prepare the cells
and the writing process (ingest.py) stores them, in the walk's order.
ZLSTORE_INGEST_WORKERS sets how many (0: prepare in this process)."""

import copyreg
import itertools
import os
import sys
from pathlib import Path
from typing import Dict, Generator, Iterable

from .. import forked
from . import layout, parse
from .parse import CellFiles, ParsedCell, bounded

PARALLEL_MIN_CELLS = 64  # fewer cells are prepared in the writing process
PREPARE_CHUNK = 16


def worker_count(cells: int) -> int:
    """How many worker processes prepare (or rescore) this many cells (texts):
    0 under PARALLEL_MIN_CELLS, off Linux (forked workers) and on one core."""
    if cells < PARALLEL_MIN_CELLS or not sys.platform.startswith("linux"):  # forked workers: Linux only
        return 0
    setting = os.environ.get("ZLSTORE_INGEST_WORKERS", "").strip()
    if setting.isdigit():
        return int(setting)
    # the cores this process may run on (taskset, a Slurm task's cgroup), not the machine's
    cores = len(os.sched_getaffinity(0))
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


def assign(cells: Iterable[str], workers: int):
    """(worker, chunk of cells) in the order the cells are written. The cells
    of one op always go to the same worker: its rounds (and its screening
    pair) share their IR, which each worker normalizes and compresses once.
    An op met for the first time goes to the least loaded worker: the writes
    take the cells in order, so an idle worker waits. Deterministic: the
    writing process and every worker compute the same assignment."""
    owner: Dict[str, int] = {}
    load = [0] * workers
    for key, grouped in itertools.groupby(cells, _op_key):
        group = list(grouped)
        if key not in owner:
            bounded(owner, 4 * parse.CACHE_ENTRIES)
            owner[key] = load.index(min(load))
        load[owner[key]] += len(group)
        for i in range(0, len(group), PREPARE_CHUNK):
            yield owner[key], group[i : i + PREPARE_CHUNK]


def prepared(cells: Iterable[str], workers: int, preparer: "Preparer") -> Generator[tuple, None, None]:
    """(cell, what a worker prepared for it) in order. Each worker goes
    through the same assignment (assign) and prepares its own chunks;
    this process reads each chunk from its worker when it gets to it."""

    def share(me):
        for owner, chunk in assign(cells, workers):
            if owner == me:
                yield [preparer.prepare(Path(cell)) for cell in chunk]

    with forked.Workers(workers, share) as ready:
        for owner, chunk in assign(cells, workers):
            yield from zip(chunk, ready.next_from(owner))


class Preparer:
    """What a worker does with each of its cells. known: the stored cells
    (path -> (id, stat_sig, content_sig)), read before the workers start: a
    forked worker must not query the store."""

    def __init__(self, parser: parse.CellParser, known: Dict[str, tuple], rehash: bool = False):
        self.parser, self.known, self.rehash = parser, known, rehash
        self.root_refs: dict = {}  # layout.locate_root's cache
        self.loaded_roots: Dict[Path, layout.Root] = {}
        self.sent: set = set()  # texts packed already: each is sent once

    def prepare(self, cell: Path):
        """(root ref, the files' stat signature, the parsed cell made
        portable, or None where the stored cell has the same stat
        signature, or the error's (type name, message))."""
        try:
            bounded(self.root_refs, parse.ROOT_CACHE_ENTRIES)
            bounded(self.sent)
            ref = layout.locate_root(cell, self.root_refs)
            root = self.loaded_roots.get(ref.path)
            if root is None:
                root = self.loaded_roots[ref.path] = layout.load_root(ref)
            files = parse.scan_cell(cell)
            files_sig = files.stat_sig
            known = self.known.get(str(cell))
            if known and not self.rehash and known[1] == files_sig + root.files_sig:
                return ref, files_sig, None
            return ref, files_sig, self._portable(self.parser.parse(files, ref, root))
        except Exception as error:
            return None, None, (type(error).__name__, str(error))

    def _portable(self, parsed: ParsedCell) -> ParsedCell:
        """What the writing process needs of a parsed cell, small to send."""
        for ir_hash, (raw, _) in parsed.texts.items():
            if ir_hash not in self.sent:
                assert raw is not None  # parsed here: every text's bytes are there
                self.sent.add(ir_hash)
                parsed.packed[ir_hash] = parse.packed(raw, "ttgir")
        return parsed  # pickled by _reduce: only what the writer needs


def _reduce(parsed: ParsedCell):
    """A ParsedCell as a worker sends it (Preparer._portable): plain values,
    which the writing process unpickles at a fraction of the cost of
    objects. Registered with copyreg: pickle uses it for every ParsedCell."""
    return (
        _portable_cell,
        (
            str(parsed.files.path),
            parsed.ref,
            parsed.values["caliber"],
            parsed.values.get("environment"),
            parsed.cell_columns(),
            [tuple(k) for k in parsed.kernels],
            tuple(parsed.texts),
            parsed.index,
            parsed.content_sig,
            parsed.problems,
            parsed.insert_runs(),
            parsed.fingerprints,
            parsed.packed,
            parsed.reread,
        ),
    )


def _portable_cell(
    path,
    ref,
    caliber_values,
    environment,
    columns,
    kernels,
    texts,
    index,
    content_sig,
    problems,
    runs,
    fingerprints,
    packed,
    reread,
) -> ParsedCell:
    """A ParsedCell as a worker sent it: what the writer needs, nothing more
    (its rows as they are INSERTed: insert_runs)."""
    return ParsedCell(
        CellFiles(path, {}, [], {}),
        None,
        ref,
        None,
        {"caliber": caliber_values, "environment": environment},
        None,
        kernels,
        dict.fromkeys(texts, (None, None)),
        index,
        content_sig,
        problems,
        fingerprints,
        packed,
        columns,
        reread,
        runs,
    )


copyreg.pickle(ParsedCell, _reduce)
