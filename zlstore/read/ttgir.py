"""IR fingerprint rules: how a cell's Triton GPU IR (``.ttgir``) becomes one hash.

A cell's fingerprint is a hash over the *multiset* of its kernels: for every
``.ttgir`` file, the kernel name (the file stem) and the digest of its
normalized text; sorted; hashed.  The cache directory a file sits in is never
part of it: Triton's cache key changes with the switch's environment even when
the IR does not, so the ``before`` and ``after`` sides of a pair always compile
into differently named directories.

The normalization has changed over time and every rule ever used must stay
computable from what is stored (a screening root is re-judged against the
current rule in seconds; re-running it takes over an hour):

* ``v1``: the raw ``.ttgir`` texts plus the raw bytes of ``index.tsv``.  Made
  every op look changed: ``index.tsv`` lists cache hashes, which differ by side.
* ``v2``: the raw ``.ttgir`` texts.
* ``v3`` (current): v2 with every ``ttg.rlc-*`` annotation removed.  The switch
  stamps these into the IR even where it changed nothing.
* ``v4``: v3 with MLIR location information removed.  FlagGems writes its
  generated kernels under its own cache directory, so two runs with separate
  caches give the same IR different ``loc`` paths.

Adding a rule is one normalize function and one line in ``RULES``; a rule
may also give the same on the stored bytes (``normalize_raw``, used by
:func:`raw_digest`), so that a rescore of thousands of stored texts need not
decode and re-encode them, and name its ``triggers``: the substrings a text
must hold for the rule to change it.  A text holding none is left as it is
by construction (:meth:`Rule.leaves` is asked first), and the store records
which triggers each text holds (:func:`markers`), so that a rescore digests
such a text without reading it.  Of zlstore, this module imports only
leaves (canonical.py, its JSON; names.py, the default rule), and every
function in it is pure (the caches only remember answers).

The layout-conversion count (:func:`count_convert_layouts`) says what *kind* of
change a fingerprint difference is.  It is not the criterion: equal counts do
not mean equal code.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Tuple, Union

from .. import canonical, names

__all__ = [
    "Rule",
    "RULES",
    "DEFAULT_RULE",
    "STRICTEST_RULE",
    "get_rule",
    "digest",
    "text_digest",
    "raw_digest",
    "combine",
    "fingerprint",
    "count_convert_layouts",
    "strip_rlc_annotations",
    "strip_rlc_annotations_raw",
    "keep_raw",
    "markers",
    "TRIGGERS",
    "strip_locations",
    "normalize_v1",
    "normalize_v2",
    "normalize_v3",
    "normalize_v4",
    "normalize_v4_raw",
]


# ---------------------------------------------------------------------------
# Lexical pieces shared by the scanners.  MLIR's printer never puts a raw
# newline inside a string literal (it escapes it), so a string never spans a
# line; an unterminated quote is simply not a string and is left alone.

_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'  # unrolled: no backtracking
_STRING_RE = re.compile(_STRING)

_RLC_PREFIX = "ttg.rlc-"
_HSPACE = " \t"
_WS = " \t\r\n"


def _inside_string(text: str, pos: int) -> bool:
    """Whether pos (not itself a quote) lies inside a string literal of its line."""
    p = text.rfind("\n", 0, pos) + 1
    if text.find('"', p, pos) < 0:
        return False
    while True:
        m = _STRING_RE.search(text, p)
        if m is None or m.start() >= pos:
            return False
        if m.end() > pos:
            return True
        p = m.end()


# ---------------------------------------------------------------------------
# v3: ttg.rlc-* annotations
#
# Only lines that contain "ttg.rlc-" are looked at (the printer keeps every
# attribute dictionary on one line).  On such a line each "{" outside a string
# is tried as an attribute dictionary: entries are `key`, `key = value`, keys
# bare or quoted, values skipped with string literals and bracket depth
# tracked (nested dictionaries are parsed recursively, so an rlc entry inside
# one goes too).  A "{" that does not parse as a dictionary on that line (a
# region opener) is left alone.  Changes are collected as (start, end, repl)
# edits and applied once per line.

_DICT_KEY = re.compile(_STRING + r"|[A-Za-z_][\w.$\-]*")
_DICT_OPEN = re.compile(_STRING + r"|\{")
_VALUE_TOKEN = re.compile(_STRING + r"|->|[{}\[\]()<>,]")

_Edit = tuple  # (start, end, replacement)


def _skip_ws(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _WS:
        i += 1
    return i


def _parse_dict(s: str, open_pos: int):  # noqa: C901 -- the scanner of MLIR attribute dictionaries: a branch per token kind, the hot path of a fingerprint
    """Parse the attribute dictionary whose "{" is at open_pos.

    Returns (close_pos, edits, emptied) or None when it is not a well-formed
    dictionary on this line.  ``emptied``: it had entries and all were rlc
    annotations; the caller decides what an empty dictionary means in its
    position.  ``edits`` never cover a removed entry's interior."""
    n = len(s)
    p = open_pos + 1
    entries = []  # (start, end, is_rlc, inner_edits)
    while True:
        p = _skip_ws(s, p)
        if p >= n:
            return None
        if s[p] == "}":
            break
        m = _DICT_KEY.match(s, p)
        if m is None:
            return None
        key = m.group()
        name = key[1:-1] if key[0] == '"' else key
        start = p
        inner: list = []
        q = _skip_ws(s, m.end())
        if q < n and s[q] == "=":
            end = _skip_value(s, q + 1, inner)
            if end is None:
                return None
        else:
            end = q
        stop = end  # the "," or "}" after the entry
        while end > start and s[end - 1] in _WS:
            end -= 1
        entries.append((start, end, name.startswith(_RLC_PREFIX), inner))
        if stop >= n:
            return None
        if s[stop] == ",":
            p = stop + 1
            continue
        if s[stop] == "}":
            p = stop
            break
        return None
    close = p

    kept = [i for i, e in enumerate(entries) if not e[2]]
    edits: list = []
    for i in kept:
        edits.extend(entries[i][3])
    if len(kept) == len(entries):
        return close, edits, False
    if not kept:
        return close, [], True
    # Keep each kept entry with the separator that followed it in the
    # original; the last kept entry is followed by the original trailing
    # whitespace.  Everything between is deleted.
    first = kept[0]
    if first > 0:
        edits.append((entries[0][0], entries[first][0], ""))
    for a, b in zip(kept, kept[1:]):
        if b > a + 1:
            edits.append((entries[a + 1][0], entries[b][0], ""))
    last = kept[-1]
    if last < len(entries) - 1:
        edits.append((entries[last][1], entries[-1][1], ""))
    return close, edits, False


def _skip_value(s: str, p: int, edits: list) -> Optional[int]:  # noqa: C901 -- the scanner of an MLIR attribute value: a branch per token kind
    """Skip an attribute value starting at p; return the position of the ","
    or "}" that ends it, or None.  Nested dictionaries are parsed (their edits
    appended); an emptied nested dictionary stays as "{}" (it is a value)."""
    stack: list = []
    while True:
        m = _VALUE_TOKEN.search(s, p)
        if m is None:
            return None
        t = m.group()
        st = m.start()
        p = m.end()
        c = t[0]
        if c == '"' or t == "->":
            continue
        if c == "{":
            res = _parse_dict(s, st)
            if res is None:
                return None
            close, inner, emptied = res
            edits.extend([(st + 1, close, "")] if emptied else inner)
            p = close + 1
        elif c in "([<":
            stack.append(c)
        elif c == ">":
            if stack and stack[-1] == "<":
                stack.pop()
        elif c in ")]":
            want = "(" if c == ")" else "["
            while stack and stack[-1] == "<":
                stack.pop()
            if not stack or stack[-1] != want:
                return None
            stack.pop()
        elif c == ",":
            if not stack:
                return st
        else:  # "}"
            while stack and stack[-1] == "<":
                stack.pop()
            if stack:
                return None
            return st


def _drop_dict(s: str, open_pos: int, close_pos: int) -> _Edit:
    """The edit removing a top-level dictionary left empty: with its `<{ }>`
    wrapper, an `attributes` keyword before it, and the space before it."""
    start, end = open_pos, close_pos + 1
    if start > 0 and s[start - 1] == "<" and end < len(s) and s[end] == ">":
        start -= 1
        end += 1
    k = start
    while k > 0 and s[k - 1] in _HSPACE:
        k -= 1
    kw = "attributes"
    if s.endswith(kw, 0, k) and (k == len(kw) or s[k - len(kw) - 1] in _WS):
        k -= len(kw)
        while k > 0 and s[k - 1] in _HSPACE:
            k -= 1
    if k == 0 or s[k - 1] == "\n":
        k = start  # nothing before it on the line: keep the indentation
    return (k, end, "")


def _apply(s: str, edits: list) -> str:
    if not edits:
        return s
    edits.sort()
    out = []
    pos = 0
    for start, end, repl in edits:
        out.append(s[pos:start])
        out.append(repl)
        pos = end
    out.append(s[pos:])
    return "".join(out)


# The common line, `%9 = tt.load %8 {ttg.rlc-phase = 2 : i32} : ...`: one
# dictionary holding one rlc entry with a plain value, no strings, no `<{`
# wrapper, no `attributes` keyword. What the parser below does to it, done
# directly; any other line goes to the parser.
_RLC_ONLY = re.compile(r"[ \t\r\n]*ttg\.rlc-[\w.$\-]*[ \t\r\n]*(?:=[^,\[\]()<>{}\"]*)?")


def _strip_rlc_line_simple(line: str) -> Optional[str]:
    if '"' in line or line.count("{") != 1 or line.count("}") != 1:
        return None
    o, c = line.find("{"), line.find("}")
    if c < o or (o > 0 and line[o - 1] == "<") or not _RLC_ONLY.fullmatch(line, o + 1, c):
        return None
    k = o
    while k > 0 and line[k - 1] in _HSPACE:
        k -= 1
    if line.endswith("attributes", 0, k):
        return None
    return line[: k if k else o] + line[c + 1 :]


def _strip_rlc_line(line: str) -> str:
    simple = _strip_rlc_line_simple(line)
    if simple is not None:
        return simple
    edits: list = []
    p = 0
    while True:
        m = _DICT_OPEN.search(line, p)
        if m is None:
            break
        if m.group() != "{":
            p = m.end()
            continue
        res = _parse_dict(line, m.start())
        if res is None:
            p = m.end()
            continue
        close, inner, emptied = res
        if emptied:
            edits.append(_drop_dict(line, m.start(), close))
        else:
            edits.extend(inner)
        p = close + 1
    return _apply(line, edits)


# v3 and v4 both strip the annotations of the same text, one after the other
# (ingest, rescore of several rules): the last answer is kept for its text.
_rlc_last: Tuple[Optional[str], str] = (None, "")


def strip_rlc_annotations(text: str) -> str:
    """Remove every ``ttg.rlc-*`` attribute entry (and a dictionary it leaves
    empty) from an IR text; everything else stays byte-identical."""
    global _rlc_last
    last = _rlc_last
    if last[0] is text:
        return last[1]
    out = _strip_rlc_annotations(text)
    _rlc_last = (text, out)
    return out


def _strip_rlc_annotations(text: str) -> str:
    return _strip_lines(text, _RLC_PREFIX, "\n", _strip_rlc_line, "".join)


def _strip_lines(text, prefix, newline, strip_line, join):
    """text with each line holding prefix replaced by strip_line(line); text
    itself when no line changed. For str and bytes alike."""
    pos = text.find(prefix)
    if pos < 0:
        return text
    out = []
    last = 0
    n = len(text)
    while pos >= 0:
        ls = text.rfind(newline, 0, pos) + 1
        le = text.find(newline, pos)
        if le < 0:
            le = n
        line = text[ls:le]
        new = strip_line(line)
        if new != line:
            out.append(text[last:ls])
            out.append(new)
            last = le
        pos = text.find(prefix, le)
    if not out:
        return text
    out.append(text[last:])
    return join(out)


# The same on the bytes a text is stored as (a rescore reads thousands): a
# text is never decoded whole, only a line holding an annotation that the
# bytes pattern below does not take. Exact because "\n" is no byte of a
# multi-byte sequence and surrogateescape maps every other byte it cannot
# decode on its own, so a line decodes alone as it does within the whole text;
# and encoding works code point by code point, so the encoded result is the
# untouched bytes around the encoded new lines.
_RLC_PREFIX_RAW = _RLC_PREFIX.encode("ascii")

# _strip_rlc_line_simple's line, ASCII only (where bytes and str patterns
# agree), before the `attributes` test: the text before the "{" (with the
# spaces before it) and after the "}". A line this misses takes the str path.
_RLC_ONLY_LINE_RAW = re.compile(
    rb'([^"{}\n\x80-\xff]*)(?<!<)\{[ \t\r]*ttg\.rlc-[A-Za-z0-9_.$\-]*[ \t\r]*'
    rb'(?:=[^,\[\]()<>{}"\n\x80-\xff]*)?\}([^"{}\n\x80-\xff]*)'
)

# Lines the parser strips repeat across texts (module attributes, the same op
# in many kernels): its answers, per process, bounded.
_rlc_lines: dict = {}
RLC_LINE_CACHE = 4096


def _strip_rlc_line_raw(line: bytes) -> bytes:
    m = _RLC_ONLY_LINE_RAW.fullmatch(line)
    if m is not None:
        head = m[1].rstrip(b" \t")
        if not head.endswith(b"attributes"):
            return (head or m[1]) + m[2]  # no text before it: the indentation stays
    new = _rlc_lines.get(line)
    if new is None:
        text = line.decode("utf-8", "surrogateescape")
        stripped = _strip_rlc_line(text)
        new = line if stripped == text else stripped.encode("utf-8", "surrogateescape")
        if len(_rlc_lines) >= RLC_LINE_CACHE:
            _rlc_lines.clear()
        _rlc_lines[line] = new
    return new


def strip_rlc_annotations_raw(raw: bytes) -> bytes:
    """strip_rlc_annotations on raw decoded as UTF-8 with surrogateescape,
    encoded back the same way; raw itself when nothing was removed."""
    return _strip_lines(raw, _RLC_PREFIX_RAW, b"\n", _strip_rlc_line_raw, b"".join)


# ---------------------------------------------------------------------------
# v4: MLIR locations
#
# Driven by the occurrences of "loc(" (found by str.find, so the op lines
# cost little).  For each: if its line is a `#loc... = loc(...)` definition,
# the whole line goes, newline included; if it sits inside a string literal of
# its line (an assert message, a path) it stays; if it is preceded by a name
# character (`foo.loc(`) it stays; otherwise `loc(...)` goes with the
# horizontal whitespace before it.  The body is matched with balanced
# parentheses, strings inside it respected: by one regex up to two levels deep
# (`loc("x"(callsite(#loc1 at #loc2)))`, the common case), by a scanner beyond.

# Unrolled loops (a run of plain characters, then a string or a nested group,
# then a run ...) so that a failing match cannot backtrack.
_LOC_PLAIN = r'[^()"\n]*'
_LOC_L0 = r"\(" + _LOC_PLAIN + r"(?:" + _STRING + _LOC_PLAIN + r")*\)"
_LOC_L1 = r"\(" + _LOC_PLAIN + r"(?:(?:" + _STRING + r"|" + _LOC_L0 + r")" + _LOC_PLAIN + r")*\)"
# what follows a `loc(` up to its balancing ")"
_LOC_BODY = re.compile(_LOC_PLAIN + r"(?:(?:" + _STRING + r"|" + _LOC_L1 + r")" + _LOC_PLAIN + r")*\)")
_LOC_DEFN = re.compile(r"\#loc[\w.$\-]*[ \t]*=[ \t]*loc\(")
_PAREN = re.compile(_STRING + r"|[()]")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$#-")


def _close_paren(s: str, p: int) -> int:
    """Position just after the ")" balancing an already-open "(" before p,
    or -1."""
    m = _LOC_BODY.match(s, p)
    if m is not None:
        return m.end()
    depth = 1
    while True:
        m = _PAREN.search(s, p)
        if m is None:
            return -1
        t = m.group()
        p = m.end()
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
            if depth == 0:
                return p


# The same removals as literal-led regex passes, for speed (a rescore
# normalizes thousands of texts). 1: definition lines, matched from the
# newline before them (the text gets a leading newline for the first line).
# 2: string literals become placeholders, so a "loc(" inside one is never
# seen and a body's strings are single tokens. 3: each "loc(" not after a
# name character, with its balanced body, becomes a mark; the spaces before a
# mark go with it. Every removal is line-local when the body regex matches:
# when a "loc(" survives (unbalanced, nested deeper), or the text does not end
# in a newline or holds the mark characters, the scanner decides instead.
_LOC_DEFN_LINE = re.compile(r"\n\#loc[\w.$\-]*[ \t]*=[ \t]*loc\(" + _LOC_BODY.pattern + r"[^\n]*")
# Nine definition lines in ten are `#locN = loc("file":line:col)`: a pass for
# that form alone takes them at half the cost of the general one, which
# then sees only the rest (each removal is line-local: the order is free).
_LOC_DEFN_LINE_PLAIN = re.compile(r'\n\#loc[0-9]* = loc\("[^"\\\n()]*":[0-9]+:[0-9]+\)(?=\n)')
_LOC_SUFFIX = re.compile(r"loc\((?<![A-Za-z0-9_.$#\-]loc\()" + _LOC_BODY.pattern)
_LOC_KEPT = re.compile("\x02([0-9]+)\x03")


def strip_locations(text: str) -> str:
    """Remove ``#loc... = loc(...)`` definition lines (including the newline)
    and every `` loc(...)`` suffix from an IR text."""
    if "loc(" not in text:
        return text
    if not text.endswith("\n") or "\x01" in text or "\x02" in text or "\x03" in text:
        return _strip_locations_scan(text)
    s = _LOC_DEFN_LINE.sub("", _LOC_DEFN_LINE_PLAIN.sub("", "\n" + text))
    kept: list = []
    if '"' in s:

        def keep(m):
            kept.append(m.group())
            return "\x02%d\x03" % (len(kept) - 1)

        s = _STRING_RE.sub(keep, s)
    s = _LOC_SUFFIX.sub("\x01", s)
    if "loc(" in s:
        return _strip_locations_scan(text)
    before_marks = s.split("\x01")  # the spaces and tabs before a mark go with it
    after_last = before_marks.pop()
    s = "".join([part.rstrip(" \t") for part in before_marks]) + after_last
    if kept:
        s = _LOC_KEPT.sub(lambda m: kept[int(m.group(1))], s)
    return s[1:]


def _strip_locations_scan(text: str) -> str:
    i = text.find("loc(")
    if i < 0:
        return text
    out = []
    last = 0  # text[:last] is done
    while i >= 0:
        ls = text.rfind("\n", 0, i) + 1
        if ls >= last and text.startswith("#loc", ls):
            m = _LOC_DEFN.match(text, ls)
            if m is not None and m.end() == i + 4:
                end = _close_paren(text, m.end())
                if end >= 0:
                    nl = text.find("\n", end)
                    end = len(text) if nl < 0 else nl + 1
                    out.append(text[last:ls])
                    last = end
                    i = text.find("loc(", end)
                    continue
        if _inside_string(text, i) or (i > 0 and text[i - 1] in _NAME_CHARS):
            i = text.find("loc(", i + 4)
            continue
        end = _close_paren(text, i + 4)
        if end < 0:
            i = text.find("loc(", i + 4)
            continue
        start = i
        while start > last and text[start - 1] in _HSPACE:
            start -= 1  # the space before the suffix goes with it
        out.append(text[last:start])
        last = end
        i = text.find("loc(", end)
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# ---------------------------------------------------------------------------
# The rules


def normalize_v1(text: str) -> str:
    """v1: the raw text (index.tsv is added by combine())."""
    return text


def normalize_v2(text: str) -> str:
    """v2: the raw text."""
    return text


def normalize_v3(text: str) -> str:
    """v3: the raw text without ttg.rlc-* annotations."""
    return strip_rlc_annotations(text)


def normalize_v4(text: str) -> str:
    """v4: v3 without location information."""
    return strip_locations(strip_rlc_annotations(text))


def normalize_v4_raw(raw: bytes) -> Optional[bytes]:
    """normalize_v4 on stored bytes, for an ASCII text only: elsewhere a
    removal could join escaped bytes into a character that decodes (and so
    matches strip_locations' patterns) differently from the str path."""
    if not raw.isascii():
        return None
    stripped = strip_rlc_annotations_raw(raw)
    text = stripped.decode("ascii")
    out = strip_locations(text)
    return stripped if out is text else out.encode("ascii")


def keep_raw(raw: bytes) -> bytes:
    """v1 and v2 on stored bytes: every text hashes as it was stored."""
    return raw


@dataclass(frozen=True)
class Rule:
    name: str  # "v1"
    normalize: Callable[[str], str]  # text -> normalized text
    hashes_index: bool  # index.tsv raw bytes are part of the fingerprint
    description: str  # one line, shown to users
    # The same on the bytes a text decodes from (UTF-8, surrogateescape),
    # giving the normalized text's encoding, raw itself when unchanged, or
    # None: no shortcut for this text, use normalize (see raw_digest).
    normalize_raw: Optional[Callable[[bytes], Optional[bytes]]] = None
    # ASCII substrings a text must hold for the rule to change it: () for a
    # rule that changes nothing, None where any text may change.
    triggers: Optional[Tuple[str, ...]] = None
    # What the rule leaves out of a fingerprint, in words: a pair that
    # differs under one rule and not under a stricter one differs only in
    # what the stricter one leaves out beyond it.
    ignores: Tuple[str, ...] = ()
    # A rule that is another's normalization and then more: normalized(text)
    # is finish(RULES[builds_on].normalized(text)), so that a text digested
    # under both is not normalized twice (an ingest's screening cells).
    builds_on: Optional[str] = None
    finish: Optional[Callable[[str], str]] = None

    def leaves(self, data: Union[str, bytes]) -> bool:
        """Whether the rule leaves data (a text, or the bytes it decodes from)
        as it is because it holds none of the triggers. Asked before every
        normalization, so that this is true by construction."""
        if self.triggers is None:
            return False
        if isinstance(data, str):
            return not any(t in data for t in self.triggers)
        return not any(t.encode("ascii") in data for t in self.triggers)

    def normalized(self, text: str) -> str:
        """normalize(text), or text itself where the rule leaves it."""
        return text if self.leaves(text) else self.normalize(text)


RULES: dict = {
    r.name: r
    for r in (
        Rule("v1", normalize_v1, True, "raw .ttgir texts plus the raw bytes of index.tsv", keep_raw, ()),
        Rule("v2", normalize_v2, False, "raw .ttgir texts", keep_raw, (), ("index.tsv cache hashes",)),
        Rule(
            "v3",
            normalize_v3,
            False,
            ".ttgir texts without the switch's ttg.rlc-* annotations",
            strip_rlc_annotations_raw,
            (_RLC_PREFIX,),
            ("index.tsv cache hashes", "ttg.rlc-* annotations"),
        ),
        Rule(
            "v4",
            normalize_v4,
            False,
            ".ttgir texts without ttg.rlc-* annotations and without loc() location information",
            normalize_v4_raw,
            (_RLC_PREFIX, "loc("),
            ("index.tsv cache hashes", "ttg.rlc-* annotations", "source locations"),
            "v3",
            strip_locations,
        ),
    )
}
assert all(r.finish is not None and r.builds_on in RULES for r in RULES.values() if r.builds_on)

# The rule that leaves the most out: a pair IR_CHANGED under the current
# rule but not under this one differs only in what it leaves out (the
# verdicts' hint), and a switch that changes nothing under it is dead.
STRICTEST_RULE = "v4"
assert all(set(r.ignores) <= set(RULES[STRICTEST_RULE].ignores) for r in RULES.values())


def ignored_beyond(rule: "RuleLike", stricter: "RuleLike") -> Tuple[str, ...]:
    """What `stricter` leaves out of a fingerprint that `rule` keeps."""
    kept = set(get_rule(rule).ignores)
    return tuple(item for item in get_rule(stricter).ignores if item not in kept)


# Every rule's triggers: which of them a text holds is stored with it.
TRIGGERS = tuple(sorted({t for r in RULES.values() for t in r.triggers or ()}))
assert all(t.isascii() and '"' not in t and "'" not in t for t in TRIGGERS)  # used as JSON keys in SQL


def markers(raw: bytes) -> str:
    """Which TRIGGERS the bytes of a text hold, as the JSON object the store
    keeps (blobs.markers): {"loc(": 1, "ttg.rlc-": 0}. An ASCII trigger is
    in the bytes exactly where it is in the text they decode to."""
    return json.dumps({t: int(t.encode("ascii") in raw) for t in TRIGGERS}, separators=(",", ":"))


DEFAULT_RULE = names.SETTINGS["current_rule"]  # the current rule of a new store
assert DEFAULT_RULE in RULES

RuleLike = Union[Rule, str]


def get_rule(name: RuleLike) -> Rule:
    """The rule of that name (a Rule is returned as is); ValueError naming the
    known rules otherwise."""
    if isinstance(name, Rule):
        return name
    try:
        return RULES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown fingerprint rule {name!r}; known rules: {', '.join(RULES)}") from None


def digest(data: Union[bytes, str]) -> str:
    """sha256 hex of bytes, or of a str encoded as UTF-8 with surrogateescape
    (so a text decoded with surrogateescape hashes as its original bytes)."""
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate surrogateescape cannot map
            raw = data.encode("utf-8", errors="surrogatepass")
    else:
        raw = data
    return hashlib.sha256(raw).hexdigest()


def text_digest(rule: RuleLike, text: str) -> str:
    """digest(rule.normalized(text)): the per-text part of a fingerprint."""
    return digest(get_rule(rule).normalized(text))


def raw_digest(rule: RuleLike, raw: bytes, raw_hash: str) -> str:
    """text_digest(rule, raw decoded as UTF-8 with surrogateescape), given
    raw_hash = digest(raw): how a rescore digests stored texts. A rule's
    normalize_raw skips the decode and encode where it can, and a text the
    rule leaves as it was is not hashed again."""
    r = get_rule(rule)
    if r.leaves(raw):
        return raw_hash
    out = r.normalize_raw(raw) if r.normalize_raw is not None else None
    if out is not None:
        return raw_hash if out is raw else hashlib.sha256(out).hexdigest()
    text = raw.decode("utf-8", "surrogateescape")
    normalized = r.normalize(text)
    return raw_hash if normalized is text else digest(normalized)


def combine(rule: RuleLike, kernel_digests: Iterable[tuple], index_digest: Optional[str] = None) -> str:
    """A cell's fingerprint from its (kernel name, text_digest) pairs.

    The pairs are a multiset (the same kernel may have been compiled into two
    cache directories: both count), sorted, serialized as canonical JSON and
    hashed.  For a rule that hashes_index, index_digest (or None: the cell has
    no index.tsv) is part of it; for any other rule it is ignored.  Cache
    directory names never enter.  A cell without kernels gets a fixed
    fingerprint."""
    r = get_rule(rule)
    doc: dict = {"kernels": sorted([str(n), str(d)] for n, d in kernel_digests)}
    if r.hashes_index:
        doc["index"] = index_digest
    return digest(_canonical_json(doc).encode("ascii"))


_canonical_json = canonical.encode_function(ascii=True)


def fingerprint(
    rule: RuleLike,
    kernels: Iterable[Tuple[str, str]],
    digest_of: Callable[[str], str],
    index_hash: Optional[str] = None,
) -> str:
    """A cell's fingerprint under rule, assembled: its kernels' (name, IR
    hash) pairs, each text's digest under the rule (digest_of(IR hash): a
    text_digest or raw_digest, however it was obtained), and the sha256 of
    its index.tsv bytes (None: it has none; only a rule that hashes_index
    reads it), combined. The one assembly: an ingest and a rescore
    (store.py) both call it."""
    return combine(rule, [(name, digest_of(ir_hash)) for name, ir_hash in kernels], index_hash)


# ---------------------------------------------------------------------------
# convert_layout count
#
# An operation is `= ttg.convert_layout ` (custom form) or
# `= "ttg.convert_layout"(` (generic form), with `triton_gpu.` for older
# Triton, and not inside a string literal of its line.  So a mention in a loc
# path, in a named location (`loc("ttg.convert_layout"(#loc))`: no "=" in
# front) or in an annotation's string value never counts.

_CONVERT_OP = re.compile(
    r"=[ \t]*(?:\"(?:ttg|triton_gpu)\.convert_layout\"\("
    r"|(?:ttg|triton_gpu)\.convert_layout(?=\s))"
)


def count_convert_layouts(text: str) -> int:
    """Number of ttg.convert_layout (or triton_gpu.convert_layout) operations
    in an IR text."""
    if "convert_layout" not in text:
        return 0
    return sum(1 for m in _CONVERT_OP.finditer(text) if not _inside_string(text, m.start()))
