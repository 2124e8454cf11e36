"""Reading FlagGems run.log measurement records.

A run.log is mostly noise (pytest output, test-driver progress, colour codes)
with, here and there, one `[INFO] {json}` line per (op, dtype) benchmark. This
module finds those records, tolerates what real logs do to them (CRLF, ANSI
colours, Python dict reprs, records cut off by a timeout kill or split over
lines, bytes that are not UTF-8) and says, in `counted`, what counts as a
measurement. Each row comes out as the store keeps it (STORED_FIELDS), in
one pass over its record; `RunLog.rows` gives the rows as Row objects, with
their values as the record held them. It never raises on the content of a
log: what it cannot read becomes a `Problem` with a line number and what is
wrong (a record cut off, a NUL byte, nesting too deep, text that is not
JSON), and the rest of the file still parses.

Pure parsing (of zlstore, only canonical.py's JSON): ingest, views and CLI build on it.
"""

from __future__ import annotations

import ast
import codecs
import itertools
import json
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Tuple

import orjson

from .. import canonical

# Why a row is stored but does not count as a measurement; `counted` returns
# only these names, and the schema and views take them from here.
NOT_COUNTED_REASONS = (
    "ERROR_MSG",
    "LATENCY_MISSING",
    "LATENCY_NOT_POSITIVE",
    "LATENCY_NOT_FINITE",
)

# The fields of a FlagGems result row this project knows by name; any other
# key a newer FlagGems adds goes to Row.extra instead of being dropped.
KNOWN_FIELDS = (
    "legacy_shape",
    "shape_detail",
    "latency_base",
    "latency",
    "speedup",
    "gbps_base",
    "gbps",
    "accuracy",
    "tflops",
    "utilization",
    "compared_speedup",
    "error_msg",
)

# Record-level keys read into Row attributes; other record keys go to
# Row.extra["_record"].
RECORD_FIELDS = ("op_name", "dtype", "mode", "level", "result")

# A line holding this says the next measurement record was timed by the
# direct fallback rather than under a CUDA graph: a different timing regime.
FALLBACK_MARKER = b"BENCHMARK_DIRECT_NO_CUDAGRAPH"

# How far a record that does not parse on its first line may be continued
# before it is given up: a runaway never costs more than this.
MAX_RECORD_LINES = 2000
MAX_RECORD_BYTES = 8 * 1024 * 1024

_KNOWN_SET = frozenset(KNOWN_FIELDS)
_RECORD_SET = frozenset(RECORD_FIELDS)


@dataclass(slots=True)  # a hundred thousand per campaign
class Row:
    """One element of a record's `result` list: one measured shape. Stored
    whether or not it counts, so an incomplete pairing can say why."""

    line: int  # 1-based line where its [INFO] record starts
    record: int  # 0-based index of the record in the file
    index: int  # 0-based position in the record's result list
    op_name: Optional[str]
    dtype: Optional[str]  # without "torch.": "float16"
    mode: Optional[str]  # as written: "kernel", "operator", "cuda", ...
    level: Optional[str]
    shape_key: str  # canonical_shape(shape_detail); "null" if absent
    values: dict  # KNOWN_FIELDS -> value, in that order; missing -> None
    extra: dict  # other row keys; other record keys under "_record"
    counted: bool
    not_counted_reason: Optional[str]  # one of NOT_COUNTED_REASONS, or None
    fallback: bool  # a BENCHMARK_DIRECT_NO_CUDAGRAPH line preceded the record


@dataclass
class Problem:
    """Something in a run.log that could not be read as written; the parse
    goes on, and the caller decides whether to warn or to refuse."""

    line: int  # 1-based
    message: str


# A row as the store keeps it (schema.sql: measurements, but for its
# cell_id), built in the parse's one pass over a record: where it is, its
# identity, the KNOWN_FIELDS but shape_detail (a list or an object among
# them, and legacy_shape whatever it is, as JSON text), the row's other
# keys and the record's as JSON text, whether it counts and why not, the
# fallback, and which occurrence of its identity in the log it is (the
# n-th row of an identity in a cell pairs with the n-th on the other side).
VALUE_FIELDS = tuple(f for f in KNOWN_FIELDS if f != "shape_detail")
STORED_FIELDS = (
    ("line", "record", "idx", "op_name", "dtype", "mode", "level", "shape")
    + VALUE_FIELDS
    + (
        "extra",
        "counted",
        "not_counted_reason",
        "fallback",
        "occurrence",
    )
)
_LEGACY_SHAPE_AT = VALUE_FIELDS.index("legacy_shape")  # stored as JSON text whatever it holds
_STORED_AT = {name: i for i, name in enumerate(STORED_FIELDS)}
# Where a result element's KNOWN_FIELDS values (a tuple in that order) hold what the row needs.
_SHAPE_AT, _LATENCY_AT, _ERROR_AT = (KNOWN_FIELDS.index(f) for f in ("shape_detail", "latency", "error_msg"))
_VALUES = operator.itemgetter(*map(KNOWN_FIELDS.index, VALUE_FIELDS))
_CONTAINERS = frozenset((list, dict))


@dataclass
class RunLog:
    stored: List[tuple] = field(default_factory=list)  # each row as stored: STORED_FIELDS
    problems: List[Problem] = field(default_factory=list)
    records: int = 0  # measurement records read (objects with "result")
    lines: int = 0
    # Per stored row, its result element and its record's other keys: what
    # rows builds its Row objects from, when asked (an ingest never asks).
    sources: List[tuple] = field(default_factory=list, repr=False, compare=False)

    @property
    def rows(self) -> List[Row]:
        """The rows as objects, with their values as the record gave them."""
        return [_row(stored, element, record_keys) for stored, (element, record_keys) in zip(self.stored, self.sources)]


# ---------------------------------------------------------------- values


def counted(values: dict) -> Tuple[bool, Optional[str]]:
    """The one definition of 'a counted measurement': (True, None), or False
    with the first reason that applies, checked in the order ERROR_MSG,
    LATENCY_MISSING, LATENCY_NOT_FINITE, LATENCY_NOT_POSITIVE (so -inf is
    NOT_FINITE).

    Only a real int or float latency counts: booleans and numeric strings such
    as "0.02" are LATENCY_MISSING, so a counted row's latency can always be
    divided by without conversion. An error_msg is empty when it is None, a
    blank string, or any other falsy value (False, 0, [], {})."""
    return _counted(values.get("error_msg"), values.get("latency"))


def _counted(err: Any, lat: Any) -> Tuple[bool, Optional[str]]:
    if err is not None:
        if isinstance(err, str):
            if err.strip():
                return False, "ERROR_MSG"
        elif _truthy(err):
            return False, "ERROR_MSG"
    if isinstance(lat, bool) or not isinstance(lat, (int, float)):
        return False, "LATENCY_MISSING"
    if isinstance(lat, float) and not math.isfinite(lat):
        return False, "LATENCY_NOT_FINITE"
    if lat <= 0:
        return False, "LATENCY_NOT_POSITIVE"
    return True, None


def _truthy(v: Any) -> bool:
    try:
        return bool(v)
    except Exception:  # an object whose truth is undefined is not "empty"
        return True


_CANON = canonical.json_encoder(ascii=False)
_canon_encode = canonical.encode_function(ascii=False)  # a cycle still ends in the fallback


def canonical_shape(shape_detail: Any) -> str:
    """The form in which a row's shape is compared across cells: a list, a
    nested list, an object (keys sorted at every depth) or a scalar all get
    one spelling; absent or None is "null"."""
    try:
        return _canon_encode(shape_detail)
    except (TypeError, ValueError, RecursionError):
        # Non-string or mixed keys, tuples as keys, sets: spell them as JSON
        # would rather than fail to give the row an identity.
        try:
            return _CANON.encode(_jsonable(shape_detail))
        except (TypeError, ValueError, RecursionError):
            return json.dumps(repr(shape_detail), ensure_ascii=False)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {_key(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((_jsonable(x) for x in v), key=canonical_shape)
    if v is None or isinstance(v, (str, int, float)):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _key(k: Any) -> str:
    if isinstance(k, str):
        return k
    try:
        return _CANON.encode(_jsonable(k))
    except (TypeError, ValueError, RecursionError):
        return str(k)


def strip_torch_prefix(dtype: Any) -> Optional[str]:
    """Dtypes are stored as "float16", the way cell directories and cell.env
    spell them, not "torch.float16" as run.log records do; absent or blank is
    None."""
    if dtype is None:
        return None
    s = (dtype if isinstance(dtype, str) else str(dtype)).strip()
    if s.startswith("torch."):
        s = s[6:]
    return s or None


def _text(v: Any) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    return str(v)


# ---------------------------------------------------------------- lines

_ANSI = rb"\x1b\[[0-?]*[ -/]*[@-~]"
_PAD = rb"(?:\s|" + _ANSI + rb")*"
_TAG = rb"\[(?:" + _ANSI + rb")*INFO(?:" + _ANSI + rb")*\]"
_PREFIX = re.compile(_PAD + _TAG + _PAD)
# A carriage return redraws the terminal line (progress bars printed to the
# same stream): what follows the last one is the line a reader saw.
_PREFIX_AFTER_CR = re.compile(rb"[^\n]*\r" + _PAD + _TAG + _PAD)
_ANSI_AT = re.compile(_ANSI)


def _body_start(line: bytes) -> Optional[int]:
    """Where the text after an `[INFO]` prefix starts, or None when the line
    is not an [INFO] line; only whitespace and colour codes may precede it."""
    m = _PREFIX.match(line)
    if m is None and b"\r" in line:
        m = _PREFIX_AFTER_CR.match(line)
    return None if m is None else m.end()


def _is_info_line(line: bytes) -> bool:
    return b"INFO" in line and _body_start(line) is not None


def _rstrip_noise(b: bytes) -> bytes:
    """Trailing whitespace (the CR of CRLF too) and colour resets never belong
    to a record."""
    while True:
        b = b.rstrip()
        i = b.rfind(b"\x1b", max(0, len(b) - 24))
        if i >= 0:
            m = _ANSI_AT.match(b, i)
            if m is not None and m.end() == len(b):
                b = b[:i]
                continue
        return b


def _strip_cr(b: bytes) -> bytes:
    return b[:-1] if b.endswith(b"\r") else b


# ---------------------------------------------------------------- bodies

_FAIL = object()
_DECODER = json.JSONDecoder()

# A string literal (left alone) or a bare nan/inf token that literal_eval
# does not accept.
_PY_TOKEN = re.compile(
    r"""('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
    r"""|(?<![\w.])(-\s*)?(nan|NaN|inf|Infinity)(?![\w.(])"""
)
_PY_WORD = re.compile(r"None|True|False|nan|inf|NaN|Infinity")
_NAN_SENTINEL = "\x00zlstore-nan\x00"


def _py_token(m: "re.Match[str]") -> str:
    if m.group(1) is not None:
        return m.group(1)
    if m.group(3) in ("nan", "NaN"):
        return repr(_NAN_SENTINEL)  # literal_eval cannot spell NaN; mark it
    return "-1e999" if m.group(2) else "1e999"


def _from_py(v: Any) -> Any:
    """A dict repr read like the JSON it stands for: tuples as lists, keys as
    strings, the NaN mark back to float NaN."""
    if isinstance(v, dict):
        return {_key(k): _from_py(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_from_py(x) for x in v]
    if isinstance(v, str) and v == _NAN_SENTINEL:
        return math.nan
    if isinstance(v, (set, frozenset, bytes, complex)):
        return _jsonable(v)
    return v


def _literal(text: str) -> Any:
    """FlagGems `--query` mode logs `str(dict)`: single quotes, None,
    True/False and bare nan/inf, which json refuses. Text with none of
    these is no repr, and is not given to the Python parser (which takes
    seconds and a lot of memory over a long line of garbage)."""
    if "'" not in text and not _PY_WORD.search(text):
        return _FAIL
    try:
        return _from_py(_eval_repr(text))
    except Exception:  # SyntaxError, ValueError, MemoryError, RecursionError ...
        return _FAIL


def _eval_repr(text: str) -> Any:
    if "nan" in text or "inf" in text or "NaN" in text or "Infinity" in text:
        text = _PY_TOKEN.sub(_py_token, text)
    return ast.literal_eval(text)


# A run of 19 digits, where an integer beyond 64 bits may be: told by a
# bytes.translate (every digit made a 9) and a substring test, for a record
# orjson would read other than json does (it makes such an integer a float)
# and for one whose rows SQLite may not store (_suspect). A regex search
# cost half of a parse.
_DIGITS_AS_9 = bytes.maketrans(b"0123456789", b"9" * 10)
_LONG_RUN = b"9" * 19


def _long_number(data: bytes) -> bool:
    return _LONG_RUN in data.translate(_DIGITS_AS_9)


def _parse_body(b: bytes) -> Tuple[Any, bool, bool]:
    """(object or _FAIL, text followed the object, bytes were not UTF-8).
    Where orjson reads the record (strict JSON in valid UTF-8, nothing after
    it, no integer beyond 64 bits), it gives what json.loads would, in two
    thirds of the time: json's extensions (NaN, Infinity, a lone surrogate
    escape, 1e999), text after the record and invalid bytes are json's."""
    if not _long_number(b):
        try:
            return orjson.loads(b), False, False
        except orjson.JSONDecodeError:
            pass
    try:
        text = b.decode("utf-8")
        bad = False
    except UnicodeDecodeError:
        text = b.decode("utf-8", "replace")
        bad = True
    try:
        return json.loads(text), False, bad
    except (ValueError, RecursionError):
        pass
    try:
        obj, _ = _DECODER.raw_decode(text)
        return obj, True, bad
    except (ValueError, RecursionError):
        pass
    return _literal(text), False, bad


# ---------------------------------------------------------------- the log


def parse_runlog(data: bytes) -> RunLog:  # noqa: C901 -- one pass over a run.log, a branch per kind of line
    """Every measurement record of a run.log as rows, and whatever could not
    be read as problems. Works on bytes and decodes only candidate lines, so
    a large log of noise costs little more than splitting it into lines."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    elif not isinstance(data, bytes):
        data = bytes(data)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    out = RunLog(lines=len(lines))
    seen: dict = {}  # rows per identity so far: their occurrences
    has_marker = FALLBACK_MARKER in data
    pending_fallback = False
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i]
        if b"{" not in line or b"INFO" not in line:
            if has_marker and FALLBACK_MARKER in line:
                pending_fallback = True
            i += 1
            continue
        start = _body_start(line)
        if start is None or line[start : start + 1] != b"{":
            if has_marker and FALLBACK_MARKER in line:
                pending_fallback = True
            i += 1
            continue

        obj, trailing, bad_lines, end, why = _read_candidate(lines, i, start)
        if obj is _FAIL:
            out.problems.append(Problem(i + 1, why))
            if has_marker and FALLBACK_MARKER in line:
                pending_fallback = True
            i += 1  # the lines it swallowed are not [INFO] lines: rescan them
            continue
        for j in bad_lines:  # named even where the object is no record: its bytes may hide one
            out.problems.append(Problem(j + 1, "invalid UTF-8 bytes replaced"))
        if not isinstance(obj, dict) or "result" not in obj:
            # Some other [INFO] object: noise, unless it carries the marker.
            if has_marker and any(FALLBACK_MARKER in x for x in lines[i:end]):
                pending_fallback = True
            i = end
            continue

        if trailing:
            out.problems.append(Problem(i + 1, "text after the record's closing brace ignored"))
        suspect = any(map(_suspect, lines[i:end]))
        _add_record(out, obj, i + 1, pending_fallback, suspect, seen)
        pending_fallback = False
        i = end
    return out


def _read_candidate(lines: List[bytes], i: int, start: int):
    """Read the record starting at lines[i][start:], continuing onto the
    following lines when it does not parse alone (pretty-printed JSON, or a
    record split by a stray newline). Returns (object or _FAIL, trailing,
    indexes of lines with invalid UTF-8, index after the last line used,
    problem message)."""
    first = lines[i][start:]
    obj, trailing, bad = _parse_body(_rstrip_noise(first))
    if obj is not _FAIL:
        return obj, trailing, [i] if bad else [], i + 1, None

    # Pieces are joined with nothing between them: a stray newline inside a
    # string then leaves the string as it was, and the newlines of a
    # pretty-printed record were only whitespace between tokens.
    pieces = [_strip_cr(first)]
    size = len(pieces[0])
    n = len(lines)
    j = i + 1
    while True:
        if j >= n:
            why = CUT_OFF
            break
        if j - i >= MAX_RECORD_LINES or size > MAX_RECORD_BYTES:
            why = (
                "unparseable [INFO] record (no end within "
                f"{MAX_RECORD_LINES} lines / {MAX_RECORD_BYTES // (1024 * 1024)} MB)"
            )
            break
        nxt = lines[j]
        if _is_info_line(nxt):
            why = "unparseable [INFO] record"
            break
        piece = _strip_cr(nxt)
        pieces.append(piece)
        size += len(piece)
        j += 1
        if _rstrip_noise(piece).endswith(b"}"):
            obj, trailing, bad = _parse_body(_rstrip_noise(b"".join(pieces)))
            if obj is not _FAIL:
                bad_lines = []
                if bad:
                    for k, p in enumerate(pieces):
                        try:
                            p.decode("utf-8")
                        except UnicodeDecodeError:
                            bad_lines.append(i + k)
                return obj, trailing, bad_lines, j, None
    return _FAIL, False, [], j, _unread(lines, i, start, pieces, why)


# What is said of a record whose text ends before the record does: only
# such a one, at the end of the file, is cut off (the other failures, told
# apart by _unread, are records complete but not readable).
CUT_OFF = "record cut off mid-JSON (timeout kill?)"

# A record nested deeper than the JSON decoder goes is named with its depth,
# counted in its first MB: never more work than a fraction of a second.
DEPTH_COUNTED = 1 << 20

# What is left where the JSON decoder stopped when the text ran out: nothing,
# or a token the end cut (1. 1e- tr nu -Inf, a \u escape).
_RAN_OUT = re.compile(
    r"\s*(?:-?(?:\d+\.?\d*(?:[eE][-+]?\d*)?|I(?:n(?:f(?:i(?:n(?:i(?:ty?)?)?)?)?)?)?)?"
    r"|\.\d*(?:[eE][-+]?\d*)?|[eE][-+]?\d*|N(?:aN?)?|t(?:r(?:ue?)?)?|f(?:a(?:l(?:se?)?)?)?"
    r"|n(?:u(?:ll?)?)?|u[0-9a-fA-F]{0,3})"
)
# ... and what Python's parser says then, of a dict repr.
_REPR_RAN_OUT = ("was never closed", "unterminated string literal", "unexpected EOF", "incomplete input")
_REPR_START = re.compile(r"\{\s*'")

# A string (JSON's; a dict repr's single-quoted ones too) matched once, never
# backtracked into (a lookahead is atomic): linear however the line ends.
_STRING_JSON = re.compile(rb'"(?=([^"\\]*(?:\\.[^"\\]*)*))\1"', re.S)
_STRING_REPR = re.compile(rb'"(?=([^"\\]*(?:\\.[^"\\]*)*))\1"|\'(?=([^\'\\]*(?:\\.[^\'\\]*)*))\2\'', re.S)
# A failed record's brackets, its strings gone, as steps: opening 2, closing 0.
_BRACKET_STEP = bytes.maketrans(b"[{(]})", b"\2\2\2\0\0\0")
_NOT_BRACKET_JSON = bytes(c for c in range(256) if c not in b"[]{}")
_NOT_BRACKET_REPR = bytes(c for c in range(256) if c not in b"[]{}()")


def _depths(data: bytes, repr_like: bool) -> Iterator[int]:
    """The nesting depth after each bracket of the record data starts with
    (0: it ends there), its strings left out; a string never closed ends
    the text (it ran out in it). C-level iterators, as in the decoder."""
    data = (_STRING_REPR if repr_like else _STRING_JSON).sub(b"", data)
    quotes = [at for at in (data.find(b'"'), data.find(b"'") if repr_like else -1) if at >= 0]
    steps = data[: min(quotes, default=len(data))].translate(
        _BRACKET_STEP, _NOT_BRACKET_REPR if repr_like else _NOT_BRACKET_JSON
    )
    return map(operator.sub, itertools.accumulate(steps), itertools.count(1))


def _deep(text: str, repr_like: bool) -> str:
    data = text.encode()
    deepest = max(_depths(data[:DEPTH_COUNTED], repr_like), default=0)
    return f"record nested too deeply to read ({'' if len(data) <= DEPTH_COUNTED else 'at least '}{deepest} levels)"


def _fault(text: str) -> Tuple[Optional[str], Optional[int]]:
    """What is wrong in a record's text that did not parse, and where (None:
    not known), or (None, None) where nothing is but that it ran out: a
    valid beginning, with its end missing."""
    repr_like = _REPR_START.match(text) is not None
    try:
        _DECODER.raw_decode(text)
    except RecursionError:
        return _deep(text, repr_like), None
    except ValueError as error:
        at = text.find("\0") if repr_like else getattr(error, "pos", 0)
        if text[at : at + 1] == "\0":  # JSON: the first fault the decoder met
            return "record holds a NUL byte", at
        if not repr_like:
            if getattr(error, "msg", "").startswith("Unterminated string") or _RAN_OUT.fullmatch(text, at):
                return None, None
            return f"record is not valid JSON: {getattr(error, 'msg', error)}", at
    else:  # parsed whole: it is followed, on the line it ends on, by text never tried alone
        return "unparseable [INFO] record", None
    try:
        _eval_repr(text)
    except (RecursionError, MemoryError):
        return _deep(text, True), None
    except Exception as error:
        why = getattr(error, "msg", None) or str(error) or type(error).__name__
        if "too many nested" in why:
            return _deep(text, True), None
        if any(said in why for said in _REPR_RAN_OUT):
            return None, None
        return f"record is neither JSON nor a Python dict repr: {why}", None
    return "unparseable [INFO] record", None


def _unread(lines: List[bytes], i: int, start: int, pieces: List[bytes], stopped: str) -> str:
    """Why the record at lines[i][start:], read on as pieces until stopped
    said why, could not be read. Only a record that failed comes here,
    never a good line. What is wrong before its end is named (a NUL byte,
    nesting deeper than the parser goes, text that is not JSON); a record
    whose text ran out before its end gets stopped (at the end of the
    file: CUT_OFF). Its first line decides, unless that ran out and more
    lines were read: then they do, where the record ends in them."""
    why, at = _fault(_rstrip_noise(pieces[0]).decode("utf-8", "replace"))
    if why is None and len(pieces) > 1:
        data = _rstrip_noise(b"".join(pieces))
        text = data.decode("utf-8", "replace")
        if 0 in _depths(data, _REPR_START.match(text) is not None):
            why, at = _fault(text)
    if why is None:
        return stopped
    return why if at is None else why + _place(lines, i, start, pieces, at)


def _place(lines: List[bytes], i: int, start: int, pieces: List[bytes], pos: int) -> str:
    """' at column C' (of the record's first line) or ' at line L, column C'
    for the character at pos of the pieces joined."""
    for k, piece in enumerate(pieces):
        width = len(piece.decode("utf-8", "replace"))
        if pos < width or k == len(pieces) - 1:
            if k == 0:
                return f" at column {len(lines[i][:start].decode('utf-8', 'replace')) + pos + 1}"
            return f" at line {i + 1 + k}, column {pos + 1}"
        pos -= width
    return ""


# What a record's text must hold for a value in it to be one SQLite cannot
# store: an integer beyond 64 bits (19 digits or more, or a Python dict
# repr's 0x... literal: any ' marks a repr), or a \\u escape (a lone
# surrogate, "\\ud800", is no UTF-8). Only such a record's rows are
# checked one by one (_unstorable): the test costs a few microseconds a
# line, the check a Python loop per value.
_INT64 = range(-(1 << 63), 1 << 63)


def _suspect(line: bytes) -> bool:
    return b"\\" in line or b"'" in line or _long_number(line)


def _unstorable(values: Iterable[Any]) -> Optional[str]:
    """What in a row's values SQLite could not take as they are, or None.
    Lists and objects are stored as JSON text (escaped): only scalars matter."""
    for value in values:
        if type(value) is int and value not in _INT64:
            return "an integer beyond 64 bits"
        if type(value) is str and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "a string with a lone surrogate escape (\\ud800 ...), which is not UTF-8"
    return None


def _add_record(out: RunLog, obj: dict, line: int, fallback: bool, suspect: bool, seen: dict) -> None:
    """The record's rows, each as stored (STORED_FIELDS), into out. seen:
    how many rows of each identity the log had so far (occurrence)."""
    record = out.records
    out.records += 1
    op_name = _text(obj.get("op_name"))
    dtype = strip_torch_prefix(obj.get("dtype"))
    mode = _text(obj.get("mode"))
    level = _text(obj.get("level"))
    record_keys = {k: v for k, v in obj.items() if k not in _RECORD_SET}
    result = obj["result"]
    if not isinstance(result, list):
        out.problems.append(
            Problem(
                line,
                f"record {record} ({op_name}): 'result' is {type(result).__name__}, not a list; no rows read",
            )
        )
        return
    record_extra = _extra_json(_extra({}, record_keys))  # a row with no keys of its own has this
    fallback_flag = 1 if fallback else 0
    stored, sources = out.stored, out.sources
    for index, r in enumerate(result):
        if not isinstance(r, dict):
            out.problems.append(
                Problem(
                    line,
                    f"record {record} ({op_name}): result[{index}] is {type(r).__name__}, not an object; skipped",
                )
            )
            continue
        # The hot loop of an ingest (a hundred thousand rows): C-level
        # building where it is free, no object per row but the stored tuple.
        values = tuple(map(r.get, KNOWN_FIELDS))
        ok, reason = _counted(values[_ERROR_AT], values[_LATENCY_AT])
        shape_key = canonical_shape(values[_SHAPE_AT])
        if suspect:
            why = _unstorable((op_name, dtype, mode, level, shape_key, *values))
            if why is not None:
                out.problems.append(
                    Problem(line, f"record {record} ({op_name}): result[{index}] holds {why}; that row is not stored")
                )
                continue
        kept = _VALUES(values)
        if not _CONTAINERS.isdisjoint(map(type, kept)) or kept[_LEGACY_SHAPE_AT] is not None:
            kept = tuple(
                json.dumps(value, sort_keys=True)
                if value is not None and (i == _LEGACY_SHAPE_AT or isinstance(value, (list, dict)))
                else value
                for i, value in enumerate(kept)
            )
        identity = (op_name, dtype, shape_key)
        seen[identity] = occurrence = seen.get(identity, 0) + 1
        stored.append(
            (
                line,
                record,
                index,
                op_name,
                dtype,
                mode,
                level,
                shape_key,
                *kept,
                record_extra if r.keys() <= _KNOWN_SET else _extra_json(_extra(r, record_keys)),
                1 if ok else 0,
                reason,
                fallback_flag,
                occurrence,
            )
        )
        sources.append((r, record_keys))


def _extra(element: dict, record_keys: dict) -> dict:
    """A row's keys this release does not know, and its record's under "_record"."""
    extra = {} if element.keys() <= _KNOWN_SET else {k: v for k, v in element.items() if k not in _KNOWN_SET}
    if record_keys:
        extra["_record"] = dict(record_keys)
    return extra


def _extra_json(extra: dict) -> Optional[str]:
    return json.dumps(extra, sort_keys=True, default=str) if extra else None


def _row(stored: tuple, element: dict, record_keys: dict) -> Row:
    """A stored row as a Row, its values as its result element held them."""
    at = _STORED_AT
    return Row(
        stored[at["line"]],
        stored[at["record"]],
        stored[at["idx"]],
        stored[at["op_name"]],
        stored[at["dtype"]],
        stored[at["mode"]],
        stored[at["level"]],
        stored[at["shape"]],
        dict(zip(KNOWN_FIELDS, map(element.get, KNOWN_FIELDS))),
        _extra(element, record_keys),
        stored[at["counted"]] == 1,
        stored[at["not_counted_reason"]],
        stored[at["fallback"]] == 1,
    )


def read_runlog(path) -> RunLog:
    """A cell without a run.log is a fact to record (no rows), not an error."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return RunLog()
    return parse_runlog(data)
