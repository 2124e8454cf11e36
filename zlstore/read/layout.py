"""Finding roots and cells on disk, and inferring each cell's values.

A value comes from the cell's own cell.env, then its path, then the root's
env file, then the root's screen.tsv row (or a campaign's partition.tsv row);
a value none of them gives stays unknown, and every value records its source."""

import collections.abc
import errno
import hashlib
import json
import operator
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from .. import caliber, names, provenance, stats

SIDES = ("before", "after")
TORCH_DTYPES = frozenset(
    """float16 bfloat16 float32 float64 half float double complex32 complex64
    complex128 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool
    float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz""".split()
)
ROOT_ENV, CAMPAIGN_ENV = "root.env", "campaign.env"
SCREEN_TSV, SCREEN_TSV_ORIG, PARTITION_TSV = "screen.tsv", "screen.tsv.orig", "partition.tsv"
ROOT_FILES = (ROOT_ENV, CAMPAIGN_ENV, SCREEN_TSV, SCREEN_TSV_ORIG, PARTITION_TSV)
# An until-decided campaign's stops, in its tree as in op_stops: one file per
# writer (stops/campaign.tsv the local runner's, stops/card<N>.tsv a card
# deciding alone, a Slurm task), each rewritten whole, so none clobbers another.
STOPS_DIR = "stops"
STOPS_COLUMNS = ("op", "dtype", "round", "reason", "recorded_at")
CELL_ENV, RUN_LOG, INDEX_TSV, TRITON_CACHE = "cell.env", "run.log", "index.tsv", "triton_cache"

# The screen.tsv columns in the harness's order (ARTIFACTS.md).
SCREEN_COLUMNS = (
    "op",
    "dtype",
    "verdict",
    "cl_before",
    "cl_after",
    "fp_before",
    "fp_after",
    "elapsed_before",
    "elapsed_after",
    "rc_before",
    "rc_after",
) + caliber.NAMES
PARTITION_COLUMNS = ("card", "op", "dtype", "weight_min")
# What the harness writes in screen.tsv's fp_before / fp_after for a side
# that compiled no .ttgir (not the hash of the empty set).
NO_IR_FINGERPRINT = "-"

_ROUND = re.compile(r"^r(\d+)$")
_CARD = re.compile(r"^card(\d+)$")


@dataclass
class Problem:
    file: str
    line: Optional[int]
    message: str

    def __post_init__(self):
        # A name or message holding bytes that are not UTF-8 (a directory
        # name, an OSError's filename) is shown and stored with them escaped.
        self.file, self.message = printable(self.file), printable(self.message)

    def as_dict(self):
        return {"file": self.file, "line": self.line, "message": self.message}

    def __str__(self):
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


def printable(text) -> str:
    """text with what cannot be written as UTF-8 (the surrogates that stand
    for a file name's undecodable bytes) spelled as backslash escapes."""
    text = str(text)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:  # a file name's bytes as \xff
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate from elsewhere (a JSON "\ud800") as \ud800
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def storable(text: str) -> bool:
    """Whether SQLite can take text as TEXT (valid UTF-8, which a file name
    need not be)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# What zlstore reads of a runs/ tree (docs/layout.md: "How a tree is read"): regular files
# only, each at most MAX_FILE_BYTES; a symbolic link only where it resolves to
# a regular file inside the file's root; directories only as they are, never
# through a link. Anything else is a named problem, and no read may block: a
# FIFO or a device is refused before a byte is read.
MAX_FILE_BYTES = 256 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, "a regular file"),
)


class Unreadable(OSError):
    """A file zlstore will not or cannot read; str() says why, for a
    Problem that names the file."""

    def __str__(self):
        return self.args[0]


def file_kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(path, within: Optional[str] = None, cap: int = MAX_FILE_BYTES) -> bytes:
    """A whole regular file, read without ever blocking. FileNotFoundError
    where there is none; Unreadable (an OSError) for what the policy above
    refuses or the system will not give: a symlink (followed only where it
    resolves inside `within`, a root directory), a FIFO, a device, a
    directory, a file over cap bytes, a permission denied. One open, one
    fstat and one read for a file of the usual size: an ingest reads ten
    files per cell, tens of thousands in all."""
    path = os.fspath(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        if error.errno == errno.ELOOP:  # the name is a symlink (O_NOFOLLOW)
            return read_bytes(_link_target(path, within), None, cap)
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            raise FileNotFoundError(error.errno, error.strerror, path) from None
        raise Unreadable(f"cannot read: {error.strerror or error}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{file_kind(st.st_mode)}, not a regular file: not read")
        size = st.st_size
        if size > cap:
            raise Unreadable(f"{size} bytes, over the {cap >> 20} MB a file may have: not read")
        try:
            data = os.read(fd, size + 1)
            if len(data) <= size:
                return data
            chunks, total = [data], len(data)  # grown since the fstat: read on, up to the cap
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                total += len(chunk)
                if total > cap:
                    raise Unreadable(f"grew over the {cap >> 20} MB a file may have while read: not read")
                chunks.append(chunk)
        except Unreadable:
            raise
        except OSError as error:
            raise Unreadable(f"cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)


def _link_target(path: str, within: Optional[str]) -> str:
    """Where a symlink leads, if the policy lets it be followed; else Unreadable."""
    target = os.path.realpath(path)
    try:
        shown = os.readlink(path)
    except OSError:
        shown = target
    if within is None:
        raise Unreadable(f"a symbolic link (to {shown}): not followed")
    inside = within.rstrip("/") + "/"
    if not target.startswith(inside):
        raise Unreadable(f"a symbolic link to {shown}, outside {within}: not followed")
    if os.path.islink(target):
        raise Unreadable("a symbolic link loop: not read")
    if not os.path.lexists(target):
        raise Unreadable(f"a dangling symbolic link (to {shown}): not read")
    return target


def read_env(path: Path, problems: List[Problem], within: Optional[str] = None) -> Optional[Dict[str, str]]:
    """KEY=VALUE lines as the harness writes them (shell quoting, `export`,
    comments, CRLF tolerated). None when the file does not exist."""
    return read_env_bytes(path, problems, within)[0]


def finished(cell, problems: Optional[List[Problem]] = None, within: Optional[str] = None) -> bool:
    """Whether a cell is done: the harness writes its cell.env last, with
    RC, so before that the cell is still running. A cell.env that cannot be
    read is named in problems."""
    env = read_env(Path(cell) / CELL_ENV, [] if problems is None else problems, within)
    return env is not None and (env.get("RC") or "").strip() != ""


def read_env_bytes(
    path, problems: List[Problem], within: Optional[str] = None
) -> Tuple[Optional[Dict[str, str]], Optional[bytes]]:
    """read_env, and the bytes it read (an ingest hashes them): (None,
    None) where it read none."""
    data = read_file(path, problems, within)
    if data is None:
        return None, None
    return parse_env(data, path, problems), data


def read_file(path, problems: List[Problem], within: Optional[str] = None) -> Optional[bytes]:
    """read_bytes, with what it refuses named in problems; None where the
    file is missing or refused."""
    try:
        return read_bytes(path, within)
    except FileNotFoundError:
        return None
    except OSError as error:
        problems.append(
            Problem(
                str(path),
                None,
                str(error) if isinstance(error, Unreadable) else f"cannot read: {error.strerror or error}",
            )
        )
        return None


def decoded_lines(data: bytes, path, problems: List[Problem]) -> List[str]:
    """data's lines as text; a line with bytes that are not UTF-8 is named
    in problems (its bad bytes read as U+FFFD)."""
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        pass
    lines = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(Problem(str(path), number, "bytes that are not UTF-8 (read as U+FFFD)"))
            lines.append(raw.decode("utf-8", "replace"))
    return lines


def parse_env(data: bytes, path, problems: List[Problem]) -> Dict[str, str]:
    env = {}
    for number, raw in enumerate(decoded_lines(data, path, problems), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _ENV_KEY.match(key):
            problems.append(Problem(str(path), number, f"not a KEY=VALUE line: {raw[:80]!r}"))
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key] = value
    return env


def read_tsv(
    path: Path, problems: List[Problem], within: Optional[str] = None
) -> Optional[List[Tuple[int, Mapping[str, str]]]]:
    """A harness TSV with a header row, columns matched by name: (line, row)
    pairs, each row what dict(zip(header, values)) gives (a TsvRow). None
    where the file is missing or refused (a problem then names it)."""
    data = read_file(path, problems, within)
    if data is None:
        return None
    lines = decoded_lines(data, path, problems)
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("\t")]
    repeated = repeated_columns(header)
    if repeated:
        problems.append(
            Problem(
                str(path),
                1,
                f"the header names a column twice: {repeated}; "
                "no row is used (which of them a value belongs to is unknown)",
            )
        )
        return None
    columns = {name: at for at, name in enumerate(header)}
    seen: Dict[str, str] = {}
    rows: List[Tuple[int, Mapping[str, str]]] = []
    for number, raw in enumerate(lines[1:], 2):
        if not raw.strip():
            continue
        values = [v.strip() for v in raw.split("\t")]
        if len(values) != len(header):
            problems.append(Problem(str(path), number, f"{len(values)} fields where the header has {len(header)}"))
        if len(columns) < len(header):  # columns without a name (trailing tabs): as dict(zip()) has it
            rows.append((number, dict(zip(header, values))))
        else:
            rows.append((number, TsvRow(columns, tuple(seen.setdefault(v, v) for v in values[: len(header)]))))
    return rows


def repeated_columns(header: List[str]) -> str:
    """The names a TSV header gives to more than one column, with their
    positions ("'op' (columns 1 and 4)"), or '' where there are none. Such
    a file is not read: a value taken by name could be the other column's,
    a verdict given to the wrong op."""
    at: Dict[str, List[int]] = {}
    for number, name in enumerate(header, 1):
        if name:  # a column without a name is read by none
            at.setdefault(name, []).append(number)
    return ", ".join(
        f"{name!r} (columns {', '.join(map(str, numbers[:-1]))} and {numbers[-1]})"
        for name, numbers in at.items()
        if len(numbers) > 1
    )


class TsvRow(collections.abc.Mapping):
    """A TSV row as a read-only mapping, column name -> value, in a fraction
    of a dict's memory: the rows of a file share their column positions and
    equal values. A campaign's screen.tsv and partition.tsv are read whole by
    every process of an ingest, and grow with the campaign."""

    __slots__ = ("_columns", "_values")

    def __init__(self, columns: Dict[str, int], values: tuple):
        self._columns = columns  # name -> position, in the header's order
        self._values = values  # a row with fewer values than the header lacks the rest

    def __getitem__(self, name: str) -> str:
        at = self._columns[name]
        if at >= len(self._values):
            raise KeyError(name)
        return self._values[at]

    def __iter__(self) -> Iterator[str]:
        n = len(self._values)
        return (name for name, at in self._columns.items() if at < n)

    def __len__(self) -> int:
        return min(len(self._values), len(self._columns))

    def __repr__(self) -> str:
        return repr(dict(self))


def split_screen_name(name: str) -> Optional[Tuple[str, str, str]]:
    """`<op>[_<dtype>]_<side>` -> (op, dtype, side); dtype '' for the op's
    default set. Op names contain underscores, so only a torch dtype name
    counts as a dtype suffix."""
    for side in SIDES:
        if name.endswith("_" + side):
            stem = name[: -len(side) - 1]
            if not stem:
                return None
            op, sep, last = stem.rpartition("_")
            if sep and op and last in TORCH_DTYPES:
                return op, last, side
            return stem, "", side
    return None


def find_cell_dirs(top: Path) -> Iterator[Path]:
    """Every cell directory under top (or top itself), sorted, never entering
    a cell's own triton_cache."""
    for path in cell_paths(str(top)):
        yield Path(path)


def cell_paths(top: str, problems: Optional[List[Problem]] = None) -> Iterator[str]:
    """find_cell_dirs on path strings; directories that cannot be listed are
    named in problems, where given."""
    for path, _ in walk_cells(top, problems=problems):
        yield path


def walk_cells(
    top: str,
    markers: Optional[dict] = None,
    enter: Optional[Callable[[str], bool]] = None,
    likely: Optional[Callable[[str], bool]] = None,
    listings=None,
    problems: Optional[List[Problem]] = None,
) -> Iterator[Tuple[str, Optional[os.stat_result]]]:
    """find_cell_dirs on path strings, without recursion (a campaign has
    thousands of directories), each cell with the stat of its run.log where
    that is what told it a cell (else None). markers, a locate_root cache,
    gets the root files of each directory listed: locating the cells found
    lists nothing again. enter(path) false leaves out a directory below top
    and all under it. likely(path) false lists a directory before looking
    for its run.log: most directories are not cells, most likely ones are.
    listings (unchanged.Listings) gives the listings of directories that
    have not changed since a walk listed them, and keeps the new ones. A
    directory that cannot be listed (permissions, a path too long) is named
    in problems, where given: nothing under it is stored."""
    pending = [top]
    while pending:
        directory = pending.pop()
        # A stat, not a listing, for the directories that are cells.
        if likely is None or likely(directory):
            found = _regular(directory + "/" + RUN_LOG)
            if found is not None:
                yield directory, found
                continue
        kept = listings.get(directory) if listings is not None else None
        if kept is not None:
            subdirs, root_files = kept
        else:
            try:
                with os.scandir(directory) as it:
                    entries = sorted(it, key=_NAME)
            except OSError as error:
                # A cell we may not list.
                if _is_file(os.path.join(directory, RUN_LOG)) or _is_file(os.path.join(directory, CELL_ENV)):
                    yield directory, None
                elif problems is not None and not isinstance(error, (NotADirectoryError, FileNotFoundError)):
                    problems.append(
                        Problem(
                            directory,
                            None,
                            f"cannot list this directory: {error.strerror or error}; nothing under it is stored",
                        )
                    )
                continue
            names = [e.name for e in entries]
            if RUN_LOG in names or CELL_ENV in names:
                yield directory, None
                continue
            subdirs = [e.name for e in entries if e.is_dir(follow_symlinks=False) and e.name != TRITON_CACHE]
            root_files = [n for n in names if n in ROOT_FILES]
            linked = [e for e in entries if e.is_symlink() and entry_is_dir(e)]
            if problems is not None:
                problems.extend(
                    Problem(
                        e.path,
                        None,
                        f"a symbolic link to a directory (to {_target(e.path)}): "
                        "not entered, so no cell under it is stored; ingest the directory "
                        "itself, or put it here in place of the link",
                    )
                    for e in linked
                )
            if listings is not None and not linked:  # else listed again each walk: its problems stay named
                listings.add(directory, subdirs, root_files)
        if markers is not None:
            _markers(directory, markers, root_files)
        prefix = directory if directory.endswith("/") else directory + "/"
        pending.extend(  # reversed: popped in name order, depth first
            path for path in (prefix + name for name in reversed(subdirs)) if enter is None or enter(path)
        )


_NAME = operator.attrgetter("name")


def entry_is_dir(entry: os.DirEntry) -> bool:
    """Whether a listed entry is a directory, or leads to one (following
    links); False where that cannot be told (a loop, a permission denied)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _is_file(path: str) -> bool:
    """Path(path).is_file() without building a Path."""
    return _regular(path) is not None


def _regular(path: str) -> Optional[os.stat_result]:
    """The stat of path if it is a regular file (following links), else None."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):  # missing, a loop, a permission denied, a name too long: not a file here
        return None
    return found if stat.S_ISREG(found.st_mode) else None


@dataclass
class RootRef:
    """Where a cell's root is, what kind it is, and the cell's path inside it."""

    path: Path
    kind: str
    parts: Tuple[str, ...]


def _markers(directory: str, cache: dict, names: Optional[Iterable[str]] = None) -> frozenset:
    """The root files in directory; names, where given, are its entries
    (those among ROOT_FILES will do)."""
    if directory not in cache:
        if names is None:
            try:  # one listing rather than a stat per marker name: most directories have none
                with os.scandir(directory) as it:
                    names = [e.name for e in it if e.name in ROOT_FILES]
            except OSError:
                names = ROOT_FILES
        cache[directory] = frozenset(n for n in names if n in ROOT_FILES and _is_file(os.path.join(directory, n)))
    return cache[directory]


def locate_root(cell: Union[str, Path], cache: Optional[dict] = None) -> RootRef:
    """The root a cell (an absolute path) belongs to: see root_of. With a
    cache, the cells of one root share one Path object for it (a worker
    sends them together: pickled once)."""
    cell_path = str(cell)
    root, kind = root_of(cell_path, cache)
    path = None if cache is None else cache.get(("path of", root))
    if path is None:
        path = Path(root)
        if cache is not None:
            cache[("path of", root)] = path
    return RootRef(path, kind, relative_parts(cell_path, root))


def root_of(cell: str, cache: Optional[dict] = None) -> Tuple[str, str]:
    """(root directory, kind) of a cell given as an absolute, normalized path
    string. A campaign cell belongs to the campaign directory, not to its
    card's repeat run; without marker files the layout's shape decides.
    Strings, not Paths: a re-ingest locates every cell of a tree."""
    cache = {} if cache is None else cache
    # Siblings share the answer: look it up once per parent directory (the
    # cache also holds the markers per directory). Without markers a cell's
    # own name counts too.
    parent, name = _split(cell)
    found = cache.get(("root of", parent)) or cache.get(("shape of", parent, name in SIDES))
    if found is not None:
        return found
    ancestors: List[str] = []
    directory = cell
    while len(ancestors) < 6 and directory != "/":
        directory = _split(directory)[0]
        ancestors.append(directory)
    for ancestor in ancestors:
        if CAMPAIGN_ENV in _markers(ancestor, cache):
            found = cache[("root of", parent)] = (ancestor, "campaign")
            return found
    for ancestor in ancestors:
        markers = _markers(ancestor, cache)
        if markers:
            kind = "screen" if (SCREEN_TSV in markers or SCREEN_TSV_ORIG in markers) else None
            if kind is None:
                kind = _kind_from_shape(relative_parts(cell, ancestor))
            found = cache[("root of", parent)] = (ancestor, kind)
            return found
    # No marker files: an older root; the directory shape says what it is.
    if len(ancestors) >= 5 and _CARD.match(_split(ancestors[3])[1]) and _ROUND.match(_split(parent)[1]):
        found = ancestors[4], "campaign"
    elif len(ancestors) >= 3 and _ROUND.match(_split(parent)[1]) and name in SIDES:
        found = ancestors[2], "repeat"
    else:
        found = parent, "screen"
    cache[("shape of", parent, name in SIDES)] = found
    return found


def _split(path: str) -> Tuple[str, str]:
    """os.path.split of an absolute, normalized path, faster."""
    at = path.rfind("/")
    return path[:at] or "/", path[at + 1 :]


def relative_parts(cell: str, root: str) -> Tuple[str, ...]:
    """Path(cell).relative_to(root).parts, on strings."""
    return tuple(cell[len(root.rstrip("/")) + 1 :].split("/"))


def _kind_from_shape(parts: Tuple[str, ...]) -> str:
    if len(parts) >= 3 and _ROUND.match(parts[-2]):
        return "repeat"
    return "screen"


def path_values(ref: RootRef) -> Dict[str, object]:
    """What a cell's path inside its root says: op, dtype, side, round, card,
    and for a campaign the card's repeat directory."""
    parts = ref.parts
    values: Dict[str, object] = {}
    if len(parts) == 1:
        split = split_screen_name(parts[0])
        if split:
            values.update(op=split[0], dtype=split[1], side=split[2], round=0)
        return values
    if len(parts) >= 3 and (round_dir := _ROUND.match(parts[-2])) and parts[-1] in SIDES:
        values.update(op=parts[-3], round=to_int(round_dir.group(1)), side=parts[-1])
        leading = parts[:-3]
        if leading and (card_dir := _CARD.match(leading[0])):
            values["card"] = to_int(card_dir.group(1))
            if len(leading) >= 2:
                values["repeat_dir"] = leading[1]
        elif leading:
            values["repeat_dir"] = leading[-1]
    return values


def path_claims(ref: RootRef) -> Tuple[Dict[str, object], bool]:
    """What a cell's path claims of its values (path_values), and whether
    its name leaves its dtype out: `<op>_<side>` says no dtype, not which
    (resolve_cell), so it claims none and disagrees with none."""
    said = path_values(ref)
    no_dtype = said.get("dtype") == ""
    if no_dtype:
        del said["dtype"]
    return said, no_dtype


@dataclass
class Root:
    """A root's own files, read once for all its cells."""

    path: Path
    kind: str
    env_file: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)
    screen: List[Tuple[int, Mapping[str, str]]] = field(default_factory=list)
    screen_orig: List[Tuple[int, Mapping[str, str]]] = field(default_factory=list)
    partition: List[Tuple[int, Mapping[str, str]]] = field(default_factory=list)
    stops: List["Stop"] = field(default_factory=list)
    files_sig: str = ""
    problems: List[Problem] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def identity(self) -> str:
        return root_identity(self.name, self.env_file, self.env if self.env_file else None)

    def caliber(self) -> Dict[str, str]:
        return caliber.from_env(self.env)

    def screen_row(self, op: Optional[str], dtype: Optional[str]) -> Optional[Mapping[str, str]]:
        """The screen.tsv row for (op, dtype); with the dtype unknown, only
        when the root has exactly one row for the op."""
        return _row_for(self._rows_of(self.screen, op), op, dtype)

    def partition_row(self, op: Optional[str], dtype: Optional[str]) -> Optional[Mapping[str, str]]:
        return _row_for(self._rows_of(self.partition, op), op, dtype)

    def _rows_of(self, rows, op):
        """The (line, row) pairs of rows whose op is op, in file order: an
        index built once per table, not a scan per cell."""
        index = self.__dict__.setdefault("_op_index", {})
        entry = index.get(id(rows))
        if entry is None or entry[0] is not rows or entry[1] != len(rows):
            by_op: Dict[Optional[str], list] = {}
            for item in rows:
                by_op.setdefault(item[1].get("op"), []).append(item)
            entry = index[id(rows)] = (rows, len(rows), by_op)
        return entry[2].get(op, ()) if op is not None else ()


def _row_for(rows, op, dtype):
    if op is None:
        return None
    matches = [row for _, row in rows if row.get("op") == op]
    if dtype is not None:
        exact = [row for row in matches if (row.get("dtype") or "") == dtype]
        return exact[0] if len(exact) == 1 else None
    return matches[0] if len(matches) == 1 else None


def load_root(ref: RootRef) -> Root:
    """A root's own files, read once for all its cells. A file that cannot
    be read, or a value in it that is not what it should be, is a problem
    of the root, named with its file and line; the cells are still stored,
    without what it would have given them."""
    root = Root(path=ref.path, kind=ref.kind)
    root.files_sig = root_files_sig(ref.path)
    within = str(ref.path)
    for env_name in (CAMPAIGN_ENV, ROOT_ENV):
        env = read_env(ref.path / env_name, root.problems, within)
        if env is not None:
            root.env_file, root.env = env_name, env
            break
    kind = (root.env.get("KIND") or "").strip().lower()
    if ref.kind != "campaign" and kind in ("screen", "repeat"):
        root.kind = kind
    root.screen = read_tsv(ref.path / SCREEN_TSV, root.problems, within) or []
    root.screen_orig = read_tsv(ref.path / SCREEN_TSV_ORIG, root.problems, within) or []
    root.partition = read_tsv(ref.path / PARTITION_TSV, root.problems, within) or []
    for path in stops_files(ref.path):
        root.stops.extend(read_stops(path, root.problems, within))
    return root


@dataclass(frozen=True)
class Stop:
    """A line of a campaign's stops/*.tsv: an op that stopped, when and why."""

    op: str
    dtype: str
    round: int
    reason: str
    recorded_at: Optional[str]


def stops_files(root: Path) -> List[Path]:
    """The root's stops/*.tsv, in name order (a stop once read stays: the first wins)."""
    try:
        return sorted(p for p in (Path(root) / STOPS_DIR).glob("*.tsv") if _is_file(str(p)))
    except OSError:
        return []


def read_stops(path: Path, problems: List[Problem], within: Optional[str] = None) -> List[Stop]:
    """A stops file's stops; a line that is not one is a problem naming it
    (file and line), and the other lines are still read."""
    stops = []
    for line, row in read_tsv(path, problems, within) or []:
        round_ = to_int(row.get("round"))
        reason, op = row.get("reason") or "", row.get("op") or ""
        if not op or round_ is None or round_ < 0 or reason not in names.STOP_REASONS:
            problems.append(
                Problem(
                    str(path),
                    line,
                    f"not a stop (op, a round from 0, a reason of {', '.join(names.STOP_REASONS)}): "
                    f"op {op!r}, round {row.get('round')!r}, reason {reason!r}; not stored",
                )
            )
            continue
        stops.append(Stop(op, row.get("dtype") or "", round_, reason, row.get("recorded_at") or None))
    return stops


def stops_tsv(stops: Iterable[Stop]) -> bytes:
    """A stops file's bytes (STOPS_COLUMNS), one line per stop, by op."""
    lines = ["\t".join(STOPS_COLUMNS)]
    for s in sorted(stops, key=lambda s: (s.op, s.dtype)):
        lines.append("\t".join((s.op, s.dtype, str(s.round), s.reason, s.recorded_at or "")))
    return ("\n".join(lines) + "\n").encode()


def root_identity(name: str, env_file: Optional[str], env: Optional[Mapping[str, str]]) -> str:
    """What a root is, wherever it is seen (another mount point, host or
    copy): its directory name and its env file's settings, parsed (as
    roots.env stores them). Its other files are content, not identity:
    screen.tsv is written at the end and rewritten by a rescore (which adds
    screen.tsv.orig), and partition.tsv gains EXTRA_OPS; the env file is
    written once, at the start. A root without one is known by its name."""
    text = json.dumps([name, env_file, dict(env) if env_file and env is not None else None], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def check_root_numbers(root: Root):
    """Name in root.problems every number in its files that is not one (or
    does not fit 64 bits): what is stored of it is unknown. Asked for where
    the root is stored, not every time it is read."""
    if root.env_file:
        check_numbers(root.env, ROOT_NUMBERS, str(root.path / root.env_file), None, root.problems)
    for name, rows, numbers in (
        (SCREEN_TSV, root.screen, SCREEN_NUMBERS),
        (SCREEN_TSV_ORIG, root.screen_orig, SCREEN_NUMBERS),
        (PARTITION_TSV, root.partition, PARTITION_NUMBERS),
    ):
        for line, row in rows:
            check_numbers(row, numbers, str(root.path / name), line, root.problems)


def root_files_sig(path: Path) -> str:
    """The hash of a root's own files: what Root.files_sig holds, without
    parsing them (a re-ingest compares it, and parses nothing). A file the
    reading policy refuses counts as its refusal, so that it stays a
    problem until it changes."""
    digest = hashlib.sha256()
    for name in ROOT_FILES:
        try:
            data = read_bytes(path / name, str(path))
        except FileNotFoundError:
            continue
        except OSError as error:
            data = b"\0refused\0" + str(error).encode("utf-8", "backslashreplace")
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for stops in stops_files(path):  # a stop written after the root was stored: read again
        try:
            data = read_bytes(stops, str(path))
        except OSError as error:
            data = b"\0refused\0" + str(error).encode("utf-8", "backslashreplace")
        digest.update(f"{STOPS_DIR}/{stops.name}".encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


# SQLite's INTEGER is 64-bit: a larger value is unknown, and a problem.
INT64 = range(-(1 << 63), 1 << 63)


def to_int(value) -> Optional[int]:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number in INT64 else None


def to_float(value) -> Optional[float]:
    try:
        return float(str(value).strip())
    except (TypeError, ValueError):
        return None


# The numeric values of each file, by key or column: the function that reads one.
CELL_NUMBERS = {"RC": to_int, "ROUND": to_int, "CARD": to_int, "ELAPSED_S": to_float, "CELL_TIMEOUT": to_float}
ROOT_NUMBERS = {"ROUNDS": to_int, "CARDS": to_int, "MIN_ROUNDS": to_int}

# How a campaign decides its number of rounds (campaign.env STOPPING): the
# one definition the runner writes and ingest reads into roots.stopping.
# Absent or FIXED: every op runs ROUNDS rounds and its ranges are judged by
# the fixed-sample t-test. UNTIL_DECIDED: an op stops once every range of
# it is decided under the anytime-valid rule (zlstore/store/sequential.py), after
# at least MIN_ROUNDS and at most ROUNDS rounds, and the root's ranges are
# judged by that rule. The values are names.STOPPINGS (the SQL's, too).
STOPPING_KEY, MIN_ROUNDS_KEY = "STOPPING", "MIN_ROUNDS"
STOPPING_FIXED, STOPPING_UNTIL_DECIDED = names.STOPPINGS
STOPPINGS = names.STOPPINGS
# The floor of rounds an until-decided campaign runs before any op may stop:
# by default the rounds a range needs for a test at all.
DEFAULT_MIN_ROUNDS = stats.MIN_ROUNDS


def stopping(env: Mapping[str, str]) -> str:
    """A root's stopping rule from its env file: FIXED unless it says
    UNTIL_DECIDED (an unknown value is judged as today: fixed)."""
    value = (env.get(STOPPING_KEY) or "").strip().lower()
    return value if value in STOPPINGS else STOPPING_FIXED


def min_rounds(env: Mapping[str, str]) -> int:
    """A root's floor of rounds (MIN_ROUNDS), DEFAULT_MIN_ROUNDS when absent
    or not a positive number."""
    value = to_int(env.get(MIN_ROUNDS_KEY))
    return value if value is not None and value > 0 else DEFAULT_MIN_ROUNDS


SCREEN_NUMBERS = {
    "cl_before": to_int,
    "cl_after": to_int,
    "rc_before": to_int,
    "rc_after": to_int,
    "elapsed_before": to_float,
    "elapsed_after": to_float,
}
PARTITION_NUMBERS = {"card": to_int, "weight_min": to_float}


def check_numbers(
    values: Mapping[str, str], numbers: Mapping[str, Callable], file: str, line: Optional[int], problems: List[Problem]
):
    """Name in problems each value of numbers' keys that is set but is not a
    number that fits (an integer beyond 64 bits): it is not used, so the next
    source of the value gives it (resolve_cell's order), else it is unknown."""
    for key, read in numbers.items():
        value = values.get(key)
        if value is not None and value.strip() and read(value) is None:
            what = "a 64-bit integer" if read is to_int else "a number"
            problems.append(
                Problem(
                    file,
                    line,
                    f"{key}: {value[:40]!r} is not {what}; not used (the next source "
                    f"that has the value gives it, else it is unknown)",
                )
            )


def _side(value: Optional[str]) -> Optional[str]:
    """A side as cell.env spells it, read whatever its case and spaces; None
    where it is not one."""
    side = (value or "").strip().lower()
    return side if side in SIDES else None


def check_cell_env(env: Mapping[str, str], ref: "RootRef", file: str, problems: List[Problem]):
    """Name a cell.env SIDE that is neither side (the path's is used), and
    an OP, DTYPE, SIDE, ROUND or CARD that says otherwise than the cell's
    path: a directory copied with its cell.env (r4 copied from r1 still
    says ROUND=1) then claims another cell's place, and its numbers would
    pass for that cell's (names.DUPLICATE)."""
    value = env.get("SIDE")
    if value is not None and value.strip() and _side(value) is None:
        problems.append(
            Problem(
                file,
                None,
                f"SIDE: {value[:40]!r} is neither {' nor '.join(SIDES)}; the side the path gives is used, if any",
            )
        )
    from_path, _ = path_claims(ref)
    from_env = {
        "op": (env.get("OP") or "").strip() or None,
        "side": _side(env.get("SIDE")),
        "round": to_int(env.get("ROUND")),
        "card": to_int(env.get("CARD")),
        "dtype": env["DTYPE"].strip().removeprefix("torch.") if "DTYPE" in env else None,
    }
    for name, said in from_env.items():
        if said is not None and from_path.get(name) is not None and said != from_path[name]:
            problems.append(
                Problem(
                    file,
                    None,
                    f"{name.upper()}={said} here, but the path says {name} "
                    f"{from_path[name]} (a copied directory?): cell.env's value is used",
                )
            )


def resolve_cell(ref: RootRef, root: Root, cell_env: Optional[Dict[str, str]]) -> Dict[str, object]:  # noqa: C901 -- ARTIFACTS.md's order of sources, one take() per value
    """A cell's values, each with its source, by the order ARTIFACTS.md gives:
    cell.env, path, root env file, screen.tsv (partition.tsv in a campaign)."""
    env = cell_env or {}
    from_path = path_values(ref)
    values: Dict[str, Any] = {"repeat_dir": from_path.get("repeat_dir")}  # str, int, float or None by name
    sources: Dict[str, str] = {}

    def take(name, candidates):
        for source, value in candidates:
            if value is not None and value != "":
                values[name], sources[name] = value, source
                return
        values[name] = None

    take("op", [(CELL_ENV, env.get("OP")), ("path", from_path.get("op"))])
    take("side", [(CELL_ENV, _side(env.get("SIDE"))), ("path", from_path.get("side"))])
    take("round", [(CELL_ENV, to_int(env.get("ROUND"))), ("path", from_path.get("round"))])
    take("card", [(CELL_ENV, to_int(env.get("CARD"))), ("path", from_path.get("card"))])
    # An empty DTYPE in cell.env is a value: the operator's own default set.
    if "DTYPE" in env:
        values["dtype"], sources["dtype"] = env["DTYPE"].strip().removeprefix("torch."), CELL_ENV
    elif "dtype" in from_path:
        values["dtype"], sources["dtype"] = from_path["dtype"], "path"
    else:
        values["dtype"] = None
    if values["side"] not in SIDES and values["side"] is not None:
        values["side"] = None

    table_name, table_row = "", None
    if root.kind == "screen":
        table_name, table_row = SCREEN_TSV, root.screen_row(values["op"], values["dtype"])
    elif root.kind == "campaign":
        table_name, table_row = PARTITION_TSV, root.partition_row(values["op"], values["dtype"])
    if values["dtype"] is None and table_row is not None:
        values["dtype"], sources["dtype"] = (table_row.get("dtype") or ""), table_name
    elif values["dtype"] == "" and sources.get("dtype") == "path" and root.kind == "screen":
        # `<op>_<side>` says no dtype, not which: the root's one screen.tsv
        # row for the op does (ARTIFACTS.md), where it has exactly one.
        only = root.screen_row(values["op"], None)
        if only is not None:
            table_row = only
            values["dtype"], sources["dtype"] = (only.get("dtype") or "").removeprefix("torch."), SCREEN_TSV

    side = values["side"]
    screen_row = table_row if table_name == SCREEN_TSV else None
    take(
        "rc",
        [(CELL_ENV, to_int(env.get("RC")))]
        + ([(SCREEN_TSV, to_int(screen_row.get(f"rc_{side}")))] if screen_row and side else []),
    )
    take(
        "elapsed_s",
        [(CELL_ENV, to_float(env.get("ELAPSED_S")))]
        + ([(SCREEN_TSV, to_float(screen_row.get(f"elapsed_{side}")))] if screen_row and side else []),
    )
    if "elapsed_s" in sources:
        sources["elapsed"] = sources.pop("elapsed_s")
    take("started_at", [(CELL_ENV, env.get("STARTED_AT"))])
    take("nodeid", [(CELL_ENV, env.get("NODEID"))])
    take("switch", [(CELL_ENV, env.get("SWITCH")), (root.env_file, root.env.get("SWITCH"))])
    take("switch_value", [(CELL_ENV, env.get("SWITCH_VALUE"))])
    take("cell_timeout", [(CELL_ENV, to_float(env.get("CELL_TIMEOUT")))])

    fields: Dict[str, str] = {}
    layers = [(CELL_ENV, caliber.from_env(env)), (root.env_file, root.caliber())]
    if screen_row:
        layers.append(
            (SCREEN_TSV, {n: screen_row[n].strip() for n in caliber.NAMES if (screen_row.get(n) or "").strip()})
        )
    for name in caliber.NAMES:
        for source, layer in layers:
            if source and name in layer:
                fields[name], sources[name] = layer[name], source
                break
    values["caliber"] = caliber.complete(fields)
    values["caliber_fields"] = fields
    values["caliber_missing"] = ",".join(n for n in caliber.NAMES if n not in fields) or None
    used = {sources[name] for name in caliber.NAMES if name in sources}
    values["caliber_source"] = "+".join(source for source, _ in layers if source in used) or None
    values["sources"] = sources
    values["environment"] = provenance.from_env(env)
    return values


def provenance_json(sources: Dict[str, str]) -> str:
    return json.dumps(sources, sort_keys=True)
