"""Telling the stored cells of a tree unchanged without listing them.

A re-ingest of a tree the store already holds must cost a few stat()s per
cell. A cell's stat signature covers the files the harness writes in place
(cell.env, run.log, index.tsv: size, mtime and ctime; a missing one counted
as missing) and every directory the scan entered (mtime and ctime: adding,
removing or renaming an entry changes them). The files inside triton_cache
are not stat'ed one by one: Triton writes a cache directory once, into
tmp.pid_* and then by rename, and never rewrites its files, so their
directories' times tell every change it makes (`zlstore ingest --rehash`
reads every cell, for a file edited in place by hand). The signature names
the directories below triton_cache it covers, so a stored cell is checked
with one stat() per path, no listing, and nothing read from the store but
its cells row's signature. Where the check fails, the full scan and then
the content hash decide.

The directories above the cells are listed once: a walk keeps each
listing with the directory's inode and times (walked_dirs), and the next
walk takes a directory whose inode and times are the same from there, for
one stat() instead of a listing. Only directories that are not cells are
kept, so a cell is never hidden: every subdirectory is still walked, and a
directory that gains or loses an entry is listed again.

Timestamps have a granularity (a few ms, 2 s on some file systems): a file
rewritten within the granule after its stat would keep its times. A file
touched in the RACY_NS before the scan leaves the cell a signature that
matches nothing, so that the next ingest reads the cell again (as git does
with racily clean entries)."""

import functools
import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .. import forked
from . import layout
from ..db import write_transaction

PREFIX = "q3:"  # a signature this module can check; older ones go to the full scan
RACY = "racy:"  # a signature too young to trust: matches nothing
RACY_NS = 2_000_000_000
_DIGEST = len(PREFIX) + 40
_ABSENT = (-1, -1, -1)
_FIXED = (layout.CELL_ENV, layout.RUN_LOG, layout.INDEX_TSV, layout.TRITON_CACHE + "/")
_CACHE = layout.TRITON_CACHE + "/"
MARKER_ENTRIES = 2048  # root lookups kept while walking: siblings follow each other
SPLIT_MIN_CELLS = 1024  # fewer stored cells are checked faster than a fork is made
LISTINGS_SAVED_AT = 1024  # new listings a walk holds before it saves them


def files_sig(stats: Dict[str, Optional[os.stat_result]]) -> str:
    """The signature of a cell's files. stats: relpath (a directory's ends
    in /) -> its stat, None where missing, taken just now: cell.env,
    run.log, index.tsv, triton_cache/ and the directories below it."""
    now = time.time_ns()
    if any(st is not None and max(st.st_mtime_ns, st.st_ctime_ns) > now - RACY_NS for st in stats.values()):
        return f"{RACY}{now}"
    rels = sorted(stats)
    below = [rel[len(_CACHE) : -1] for rel in rels if rel.startswith(_CACHE) and rel != _CACHE]
    return PREFIX + _digest(_named(rels), [stats[r] for r in rels]) + (json.dumps(below) if below else "")


def _named(rels: Iterable[str]):
    """The digest's start: the relpaths, in order."""
    return hashlib.sha1("\n".join(rels).encode("utf-8", "surrogateescape"))


def _digest(named, stats: list) -> str:
    """named (from _named) continued with each stat's size, mtime and ctime."""
    values: List[int] = []
    add = values.extend
    for st in stats:
        add(_ABSENT if st is None else (st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    digest = named.copy()
    try:
        digest.update(struct.pack(f"<{len(values)}q", *values))
    except struct.error:  # a time beyond 2262
        digest.update(repr(values).encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=4096)  # a kernel set per op, dtype and side: a campaign has about a thousand
def _rels(tail: str) -> tuple:
    """The relpaths in the signature whose tail (after the digest) is
    tail: all but run.log, where run.log goes among them, and the digest's
    start. Cached: every round of an op compiles the same kernels into the
    same directories."""
    rels = sorted({*_FIXED, *(_CACHE + below + "/" for below in (json.loads(tail) if tail else ()))})
    at = rels.index(layout.RUN_LOG)
    return tuple(rels[:at] + rels[at + 1 :]), at, _named(rels)


def is_unchanged(cell: str, stored: str, root_sig: str, run_log: Optional[os.stat_result] = None) -> bool:
    """Whether the files of a stored cell still have the stat signature
    stored (stat_sig: its files' signature, then its root's files_sig).
    run_log: its stat, where the walk that found the cell took it."""
    if not (stored.startswith(PREFIX) and stored.endswith(root_sig) and len(stored) >= _DIGEST + len(root_sig)):
        return False
    try:
        rels, at, named = _rels(stored[_DIGEST : len(stored) - len(root_sig)])
    except (ValueError, TypeError):
        return False
    stat, base = os.stat, cell + "/"
    try:
        stats: List[Optional[os.stat_result]] = [stat(base + rel) for rel in rels]
        stats.insert(at, run_log or stat(base + layout.RUN_LOG))
    except OSError:  # a missing file counts as missing; any other error is a change
        stats = []
        for rel in (*rels[:at], layout.RUN_LOG, *rels[at:]):
            try:
                stats.append(stat(base + rel))
            except FileNotFoundError:
                stats.append(None)
            except OSError:
                return False
    return _digest(named, stats) == stored[len(PREFIX) : _DIGEST]


# -- sorting a tree out -------------------------------------------------------


@dataclass
class Found:
    """What a walk found: how many cells, which need the full ingest (in
    walk order), how many are stored unchanged, and each root with the first
    cell it was met at: (cell, root, kind, parts in root, cell unchanged).
    changed may be an iterator that walks as it goes (a whole tree's cells
    are never all in a list): the rest is complete once it is exhausted."""

    cells: int = 0
    changed: Iterable[str] = field(default_factory=list)
    unchanged: int = 0
    roots: List[Tuple[str, str, str, Tuple[str, ...], bool]] = field(default_factory=list)
    listings: Optional["Listings"] = None  # a share's new listings, for the parent to save
    problems: list = field(default_factory=list)  # directories that could not be listed (layout.Problem)


class Listings:
    """The listings of the directories above the cells (walked_dirs) for
    layout.walk_cells: get() gives a directory's listing where its inode and
    times are those stored, add() keeps a new one. New listings are saved by
    save(new rows, directories gone), where given, LISTINGS_SAVED_AT at a
    time, and by flush()."""

    def __init__(self, stored: Dict[str, tuple], save: Optional[Callable[[list, list], None]] = None):
        self.stored = stored  # path -> (ino, mtime_ns, ctime_ns, subdirs, root_files)
        self.save = save
        self.new: List[tuple] = []  # walked_dirs rows
        self.gone: List[str] = []  # subdirectories a directory listed again no longer has
        self._taken: Optional[Tuple[str, os.stat_result]] = None  # (directory, its stat): taken before listing it

    def get(self, directory: str) -> Optional[Tuple[List[str], List[str]]]:
        """(subdirectory names, root file names) of directory, as kept; None:
        list it (its stat is taken now, before the listing, so that a change
        made meanwhile makes the listing kept look stale, not current)."""
        try:
            st = os.stat(directory)
        except OSError:
            self._taken = None
            return None
        self._taken = directory, st
        row = self.stored.get(directory)
        if row is None or (row[0], row[1], row[2]) != (st.st_ino, st.st_mtime_ns, st.st_ctime_ns):
            return None
        return _names(row[3]), _names(row[4])

    def add(self, directory: str, subdirs: List[str], root_files: List[str]):
        """Keep the listing of directory, made after get(directory)."""
        if self._taken is None or self._taken[0] != directory:
            return
        st = self._taken[1]
        before = self.stored.get(directory)
        if before is not None:
            prefix = _under(directory)[0]
            self.gone.extend(prefix + name for name in set(_names(before[3])).difference(subdirs))
        if not layout.storable(directory + "".join(subdirs)):  # not UTF-8: listed every time, never kept
            return
        if max(st.st_mtime_ns, st.st_ctime_ns) <= time.time_ns() - RACY_NS:  # else too young to trust
            self.new.append(
                (directory, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, "/".join(subdirs), "/".join(root_files))
            )
        if self.save is not None and len(self.new) + len(self.gone) >= LISTINGS_SAVED_AT:
            self.flush()

    def flush(self):
        if self.save is not None and (self.new or self.gone):
            self.save(self.new, self.gone)
            self.new, self.gone = [], []


def _names(joined: str) -> List[str]:
    return joined.split("/") if joined else []


def stored_listings(conn, top: str) -> Dict[str, tuple]:
    """The walked_dirs rows of top and of every directory under it."""
    rows = conn.execute(
        f"SELECT path, ino, mtime_ns, ctime_ns, subdirs, root_files FROM walked_dirs WHERE {AT_OR_UNDER}",
        at_or_under(top),
    )
    return {row[0]: row[1:] for row in rows}


def save_listings(conn, new: list, gone: list):
    """Store a walk's new listings; forget what was kept of directories gone."""
    with write_transaction(conn):
        for directory in gone:
            conn.execute(f"DELETE FROM walked_dirs WHERE {AT_OR_UNDER}", at_or_under(directory))
        conn.executemany(
            "INSERT OR REPLACE INTO walked_dirs (path, ino, mtime_ns, ctime_ns, subdirs, root_files) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            new,
        )


def sort_out(conn, top: str, processes: Callable[[int], int] = lambda cells: 1) -> Found:
    """Walk top: the cells found, those stored unchanged only counted. With
    enough stored cells, processes(stored cells) processes walk the tree:
    this one and forked children, each taking the next of SHARES_EACH times
    as many ranges of paths as there are processes whenever it is free, so
    that one slowed by the machine takes fewer. A stat() costs microseconds,
    and a cell needs seven."""
    known, listed = stored_cells(conn, top), stored_listings(conn, top)
    parts = max(1, processes(len(known))) if len(known) >= SPLIT_MIN_CELLS else 1
    if parts == 1:
        found = Found()
        found.changed = _walk(top, known, None, None, found, Listings(listed, functools.partial(save_listings, conn)))
        return found
    # Read here, before the fork: the children inherit it, and never touch
    # the store (another thread may hold a lock of SQLite's at the fork).
    bounds = [None, *_splits(known, min(255, parts * SHARES_EACH)), None]
    ranges = list(zip(bounds, bounds[1:]))
    caches: Tuple[dict, dict] = {}, {}  # root markers and root signatures, per process: its shares meet the same roots
    shares = forked.shared_out(len(ranges), parts - 1, lambda i: _share(known, listed, top, *ranges[i], *caches))
    new = [
        row for share in shares if share.listings is not None for row in share.listings.new
    ]  # _share leaves listings
    gone = [path for share in shares if share.listings is not None for path in share.listings.gone]
    if new or gone:
        save_listings(conn, new, gone)
    for share in shares:
        share.listings = None
    return _merged(shares)


def _under(top: str) -> Tuple[str, str]:
    """The bounds of the paths strictly under top."""
    prefix = top if top.endswith("/") else top + "/"
    return prefix, prefix[:-1] + "0"  # '0' follows '/'


def at_or_under_test(column: str, at: str = "?", low: str = "?", high: str = "?") -> str:
    """A path column's test for top and every path under it, given
    at_or_under(top): as three ? parameters, or as the names given."""
    return f"({column} = {at} OR ({column} > {low} AND {column} < {high}))"


AT_OR_UNDER = at_or_under_test("path")


def at_or_under(top: str) -> Tuple[str, str, str]:
    return (top, *_under(top))


def is_at_or_under(path: str, top: str) -> bool:
    """The same test in Python."""
    at, low, high = at_or_under(top)
    return path == at or low < path < high


SHARES_EACH = 8  # ranges per process: the last one taken is what a process can finish late by


def _splits(known: Dict[str, str], parts: int) -> List[str]:
    """Paths that share the stored cells (known) out in parts ranges of
    about as many cells each, as _walk and _enter compare paths."""
    paths = sorted(known)
    return sorted({paths[len(paths) * i // parts] for i in range(1, parts)})


def stored_cells(conn, top: str) -> Dict[str, str]:
    """path -> stat_sig of every cell under top with a signature this
    module checks: one query (on the cells_stat_sig index), not one per
    cell."""
    rows = conn.execute(
        f"SELECT path, stat_sig FROM cells WHERE {AT_OR_UNDER} AND substr(stat_sig, 1, ?) = ?",
        (*at_or_under(top), len(PREFIX), PREFIX),
    )
    return dict(rows)


def _share(
    known: Dict[str, str],
    listed: Dict[str, tuple],
    top: str,
    low: Optional[str],
    high: Optional[str],
    markers: dict,
    root_sigs: dict,
) -> Found:
    """Sort out the cells under top whose paths are in [low, high) (None:
    open), from the stored cells and listings read before. The new
    listings are left in found.listings, for the parent to save."""
    found = Found()
    found.listings = Listings(listed)
    found.changed = list(_walk(top, known, low, high, found, found.listings, markers, root_sigs))
    found.listings.stored = {}  # the parent has them: only the new ones go back
    return found


def _walk(
    top: str,
    known: dict,
    low: Optional[str],
    high: Optional[str],
    found: Found,
    listings: Listings,
    markers: Optional[dict] = None,
    root_sigs: Optional[dict] = None,
) -> Iterator[str]:
    """Yield the cells under top in [low, high) that need the full ingest,
    in walk order; count in found the cells, those unchanged, the roots.
    The directories above the cells are listed through listings. markers
    and root_sigs: what a walk learns of the roots, kept between walks of
    one tree where given."""
    markers = {} if markers is None else markers
    root_sigs = {} if root_sigs is None else root_sigs
    roots = set()
    enter = None if low is None and high is None else _enter(low, high)
    likely = known.__contains__ if known else None  # else every directory may be a new cell
    for cell, run_log in layout.walk_cells(top, markers, enter, likely, listings, found.problems):
        if (low is not None and cell < low) or (high is not None and cell >= high):
            continue
        found.cells += 1
        if len(markers) >= MARKER_ENTRIES:
            markers.clear()
        try:
            root, kind = layout.root_of(cell, markers)
            entry = known.get(cell)
            same = entry is not None and is_unchanged(cell, entry, _root_sig(root, root_sigs), run_log)
        except Exception:  # the full ingest of the cell names the problem
            yield cell
            continue
        if root not in roots:
            roots.add(root)
            found.roots.append((cell, root, kind, layout.relative_parts(cell, root), same))
        if same:
            found.unchanged += 1
        else:
            yield cell
    listings.flush()


def _enter(low: Optional[str], high: Optional[str]) -> Callable[[str], bool]:
    def enter(directory: str) -> bool:
        """Whether directory or anything under it, all in [directory,
        directory + '0'), can be in [low, high)."""
        return (high is None or directory < high) and (low is None or directory + "0" > low)

    return enter


def _merged(shares: List[Found]) -> Found:
    """The shares' findings as one walk's: in walk order (path keys), which
    a range of paths is not."""
    if len(shares) == 1:
        return shares[0]
    found = Found()
    changed: List[str] = []
    first: Dict[str, Tuple[str, str, str, Tuple[str, ...], bool]] = {}
    for share in shares:
        found.cells += share.cells
        changed += share.changed
        found.unchanged += share.unchanged
        found.problems += [p for p in share.problems if p not in found.problems]  # shares walk common ancestors
        for met in share.roots:
            if met[1] not in first or _key(met[0]) < _key(first[met[1]][0]):
                first[met[1]] = met
    changed.sort(key=_key)
    found.changed = changed
    found.roots = sorted(first.values(), key=lambda met: _key(met[0]))
    return found


def _key(path: str) -> List[str]:
    """A path's place in the walk's order (depth first, by name)."""
    return path.split("/")


def _root_sig(root: str, cache: Dict[str, str]) -> str:
    """The root's files_sig, read once per walk, parsed never."""
    sig = cache.get(root)
    if sig is None:
        sig = cache[root] = layout.root_files_sig(Path(root))
    return sig
