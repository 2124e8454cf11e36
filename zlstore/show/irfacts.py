"""What a kernel's IR is made of, read from its printed text: its operations
by name with their attributes, and the shapes that say which autotune
config it was compiled for.

`zlstore diff` pairs the kernels of one name by their config (tile
shapes, num_warps, num_stages) before anything a switch can change, and
says what changed in a pair as operations and attributes gained or lost
(irsummary.py): both read these facts. Nothing here knows an op by name
but the tile shapes: a config's block sizes are the shapes of its dots
(`tt.dot`, `ttng.warp_group_dot`, any op whose name holds `dot` or `mma`),
the extents of its `tt.make_range`s and the blocks of its block pointers
and tensor descriptors, none of which a switch that changes layouts,
precision, shared memory or pipelining touches. The reading is by line
(MLIR's printer puts one operation, and every attribute dictionary, on
one line), linear in the text; a text past MAX_LINES or MAX_CHARS is not
read."""

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Tuple

# Texts longer than this are not read (a hostile or broken tree): their
# facts are None and pairing goes on without them. A real kernel's TTGIR
# is a few thousand lines, some hundred kB.
MAX_LINES = 400_000
MAX_CHARS = 4 << 20

# An operation line: results (`%a`, `%a:3`, `%a, %b`), then the op's name,
# bare or quoted (the generic form).
_OP = re.compile(r'\s*(?:(%[^=]*?)=\s*)?"?([A-Za-z_][\w$]*(?:\.[\w$]+)+)"?(?=[\s(<{]|$)')
_RESULTS = re.compile(r"%[^\s,:]+(?::(\d+))?")
# An alias definition: `#mma = #ttg.nvidia_mma<{...}>`, `!t = !tt.ptr<f32>`.
_ALIAS = re.compile(r"\s*([#!][\w.$\-]+)\s*=\s*([#!][A-Za-z_][\w.$]*)")
_SHAPE = re.compile(r"(?:tensor|memdesc)<((?:\d+x)+)")
_DESCRIPTOR = re.compile(r"tensordesc<tensor<((?:\d+x)+)")
# `name = value` among an op's operands (custom forms such as tt.dot's
# `inputPrecision = tf32`).
_INLINE_ATTR = re.compile(r"(?<![\w.%#$])([A-Za-z_]\w*)\s*=\s*([\w.\-]+)")
_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_LOC = re.compile(r"\s*\bloc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")
_TILE_OP = re.compile(r"dot|mma")
_OPEN, _CLOSE = "([{<", ")]}>"


@dataclass(frozen=True)
class Facts:
    """A kernel's operations in order, their count by name (alias kinds
    such as `#ttg.nvidia_mma` counted too), the attributes seen per op name
    (key -> the set of values it took), its tile shapes and its signature
    (the tt.func line without locations: argument types and attributes,
    which carry the specialization)."""

    ops: Tuple[str, ...]
    counts: Dict[str, int]
    attrs: Dict[str, Dict[str, FrozenSet[str]]]
    tiles: tuple
    signature: str = field(default="")
    # per op name, the tensor and memdesc shapes its lines hold, and how
    # many results it gives (`%a:3 = ...`: 3)
    shapes: Dict[str, FrozenSet[Tuple[int, ...]]] = field(default_factory=dict)
    results: Dict[str, FrozenSet[int]] = field(default_factory=dict)


def _dims(text: str) -> Tuple[int, ...]:
    return tuple(int(d) for d in text.rstrip("x").split("x"))


def _entries(body: str) -> List[Tuple[str, str]]:
    """The `key = value` (or bare `key`) entries of an attribute
    dictionary's body, split at the commas outside brackets and strings."""
    out, depth, start, i, n = [], 0, 0, 0, len(body)
    while i <= n:
        c = body[i] if i < n else ","
        if c == '"':
            m = _STRING.match(body, i)
            i = m.end() if m else i + 1
            continue
        if c == "-" and body.startswith("->", i):
            i += 2
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth <= 0:
            key, eq, value = body[start:i].partition("=")
            key = key.strip().strip('"')
            if key:
                out.append((key, " ".join(value.split()) if eq else ""))
            start = i + 1
        i += 1
    return out


def _dictionaries(rest: str) -> Tuple[List[Tuple[str, str]], str]:
    """The entries of every attribute dictionary closed on this line, and
    the line with them taken out (a `{` left open is a region's)."""
    if "{" not in rest:
        return [], rest
    entries: List[Tuple[str, str]] = []
    kept, i, n = [], 0, len(rest)
    while i < n:
        c = rest[i]
        if c == '"':
            m = _STRING.match(rest, i)
            j = m.end() if m else i + 1
            kept.append(rest[i:j])
            i = j
            continue
        if c != "{":
            kept.append(c)
            i += 1
            continue
        depth, j = 0, i
        while j < n:
            if rest[j] == '"':
                m = _STRING.match(rest, j)
                j = m.end() if m else j + 1
                continue
            depth += (rest[j] == "{") - (rest[j] == "}")
            j += 1
            if depth == 0:
                break
        if depth:
            break  # a region opens here
        entries.extend(_entries(rest[i + 1 : j - 1]))
        i = j
    return entries, "".join(kept)


def _types_start(rest: str) -> int:
    """Where an op's types begin: the first ` : ` outside brackets."""
    depth = 0
    for i, c in enumerate(rest):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE and not (c == ">" and i and rest[i - 1] == "-"):
            depth -= 1
        elif c == ":" and depth <= 0 and rest[i - 1 : i] == " " and rest[i + 1 : i + 2] == " ":
            return i
    return len(rest)


def _parse(line: str) -> Optional[Tuple[str, str, List[Tuple[str, str]], Optional[int]]]:
    """An operation or alias line as (its name, the text after the name,
    its attribute entries, the number of results: None for an alias and
    for `module`); None for any other line."""
    if "loc(" in line:
        line = _LOC.sub("", line)
    alias = _ALIAS.match(line)
    if alias:
        rest = line[alias.end() :]
        return alias.group(2), rest, _dictionaries(rest)[0], None
    m = _OP.match(line)
    if m is None:
        if not line.lstrip().startswith("module"):
            return None
        name, rest, given = "module", line.lstrip()[len("module") :], None
    else:
        name, rest = m.group(2), line[m.end() :]
        given = sum(int(n or 1) for n in _RESULTS.findall(m.group(1) or ""))
    # a dictionary inside a type (a layout's) is the type's, not the op's
    entries, operands = _dictionaries(rest[: _types_start(rest)])
    entries.extend(_INLINE_ATTR.findall(operands))
    return name, rest, entries, given


class _Tiles:
    """What identifies a config's block sizes, gathered op by op."""

    def __init__(self) -> None:
        self.dots: set = set()
        self.ranges: set = set()
        self.blocks: set = set()

    def add(self, name: str, rest: str, entries: List[Tuple[str, str]], shapes: set) -> None:
        if _TILE_OP.search(name.rpartition(".")[2]):
            self.dots.update(shapes)
        elif name.endswith("make_range"):
            found = {k: v.partition(" : ")[0] for k, v in entries}  # `64 : i32`: 64
            self.ranges.add((found.get("start", ""), found.get("end", "")))
        elif name.endswith("make_tensor_ptr"):
            self.blocks.update(shapes)
        if "tensordesc<" in rest:
            self.blocks.update(_dims(s) for s in _DESCRIPTOR.findall(rest))

    def key(self, text: str) -> tuple:
        tiles = (tuple(sorted(self.dots)), tuple(sorted(self.ranges)), tuple(sorted(self.blocks)))
        if not any(tiles):  # no dot, range or block: every tensor shape it has
            tiles = ((), (), tuple(sorted({_dims(s) for s in _SHAPE.findall(text)})))
        return tiles


def readable(text: str) -> bool:
    """Whether read reads text: not past MAX_LINES lines or MAX_CHARS
    characters."""
    return len(text) <= MAX_CHARS and text.count("\n") <= MAX_LINES


def read(text: str) -> Optional[Facts]:
    """The facts of one IR text; None for a text past MAX_LINES lines or
    MAX_CHARS characters."""
    if not readable(text):
        return None
    ops: List[str] = []
    counts: Counter = Counter()
    attrs: Dict[str, Dict[str, set]] = {}
    shapes: Dict[str, set] = {}
    results: Dict[str, set] = {}
    tiles = _Tiles()
    signature = ""
    for line in text.split("\n"):
        parsed = _parse(line)
        if parsed is None:
            continue
        name, rest, entries, given = parsed
        counts[name] += 1
        if not name.startswith(("#", "!")):
            ops.append(name)
        if given is not None:
            results.setdefault(name, set()).add(given)
        seen = attrs.setdefault(name, {})
        for key, value in entries:
            seen.setdefault(key, set()).add(value)
        found = {_dims(s) for s in _SHAPE.findall(rest)}
        shapes.setdefault(name, set()).update(found)
        tiles.add(name, rest, entries, found)
        if name.endswith(".func") and not signature:
            signature = " ".join(_LOC.sub("", line).split())
    return Facts(
        tuple(ops),
        dict(counts),
        {op: {k: frozenset(v) for k, v in keys.items()} for op, keys in attrs.items()},
        tiles.key(text),
        signature,
        {op: frozenset(found) for op, found in shapes.items()},
        {op: frozenset(found) for op, found in results.items()},
    )


def tile_text(tiles: tuple) -> str:
    """Tile shapes as a person reads them: the dots' shapes, else the
    ranges' extents, else the blocks ('128x32 32x128 128x128')."""
    dots, ranges, blocks = tiles
    if dots:
        return " ".join("x".join(map(str, d)) for d in dots)
    if ranges:
        return " ".join(sorted({end for _, end in ranges}, key=lambda e: (len(e), e)))
    return " ".join("x".join(map(str, d)) for d in blocks)
