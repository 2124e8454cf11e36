"""Rules on stored bytes (ttgir.raw_digest, Rule.normalize_raw) against the
str path they shortcut: a rescore digests texts as the bytes they were stored
as, and must give the digest ingest gave the decoded text, byte for byte,
whatever the bytes are (rlc annotations in every position, strings, CRLF,
bytes that are not UTF-8, characters that are)."""

import hashlib
import json
import random

import pytest

from zlstore.read import ttgir

SE = "surrogateescape"

INDENTS = ["", "  ", "    ", "\t", " \t "]
HEADS = [
    "%3 = tt.splat %1",
    "%9 = tt.load %8",
    "module",
    "module attributes",
    "tt.func public @k(%arg0: i32",
    '%5 = "tt.load"(%4)',
    "%5 = tt.load <",
    "xattributes",
    "}",
    "    } ",
    "#loc",
    "%7 = tt.foo %5 attributes",
    "%x = ttg.rlc-op %y",
    'tt.assert %6, "msg {ttg.rlc-z = 1}"',
    "#loc\xc3",
    "caf\xc3\xa9 %1",
    "%\xff = op",
]
DICTS = [
    "{ttg.rlc-phase = 2 : i32}",
    "{ ttg.rlc-applied }",
    "{ttg.rlc-applied}",
    "{\tttg.rlc-x\r= 1 }",
    "<{ttg.rlc-phase = 1 : i32}>",
    '{"ttg.rlc-origin" = "phase3"}',
    '{end = 1024 : i32, "ttg.rlc-q" = "v, {x}"}',
    "{a = 1, ttg.rlc-b = 2 : i32, c = 3}",
    "{ttg.rlc-a, b}",
    "{ttg.rlc-\xc3\xa9 = 1}",
    "{ttg.rlc-a = \xff}",
    "{ttg.rlc-a = [1, 2]}",
    "{ttg.rlc-a = {b = 1, ttg.rlc-c = 2}}",
    "{a = {ttg.rlc-q = 1}, b = [{c = 2, ttg.rlc-s = 3}]}",
    "{ttg.rlc-a = 1",
    "{}",
    "{ttg.rlc-a = #blocked<{x = 1}>}",
    "{ttg.rlc-x = 1 -> 2}",
    "{ttg.rlc-a = (1, 2)}",
    "{ttg.rlc-$.- = 1}",
    '{"ttg.rlc-\\"q" = 1}',
    "{ttg.rlc-a = 1 : i32, \xe2\x82}",
    '{ttg.rlc-x = "\xc3"}',
]
TAILS = [
    " : i32 -> tensor<4xi32>",
    " loc(#loc)",
    "\r",
    "",
    ' "{ttg.rlc-z}"',
    " {",
    " attributes {ttg.rlc-y}",
    " : \xa9",
    " {ttg.rlc-w = 1}",
    '\xa9 = loc("a")',
    ' loc("/p/ttg.rlc-x.py":1:0)',
    " }",
]
PLAIN = [
    "",
    "module {",
    "}",
    '#loc = loc("/a/b.py":1:0)',
    "  %0 = tt.get_program_id x : i32 loc(#loc1)",
    "#loc1 = loc(callsite(#loc at #loc2))",
    "  tt.return loc(#loc)",
    "// caf\xc3\xa9 \xff\xfe",
    '#loc2 = loc("n(a)me"(#loc))',
    '%1 = arith.addi %0, %0 : i32 loc("x"(callsite(#loc1 at #loc)))',
]


def _latin(s: str) -> bytes:
    return s.encode("latin-1")  # the pieces spell their bytes one char each


# The lines the bytes pattern takes: one dictionary holding one rlc entry
# with a plain value, nothing quoted or braced around it (ASCII or not).
SIMPLE_HEADS = [
    "",
    "%3 = tt.splat %1",
    "    } ",
    "module attributes",
    "  attributes",
    "%5 = op <",
    "#loc\xc3",
    "%x = ttg.rlc-op %y",
    "%2 = tt.make_range",
]
SIMPLE_DICTS = [
    "{ttg.rlc-phase = 2 : i32}",
    "{ ttg.rlc-applied }",
    "{\tttg.rlc-x\r= 1 }",
    "{ttg.rlc-a = #blocked}",
    "{ttg.rlc-$.- = 1 : i64}",
    "{ttg.rlc-\xc3\xa9 = 1}",
    "{ttg.rlc-a = \xff}",
    "{ttg.rlc-a=}",
    # look simple and are not: a second entry, brackets, a key no pattern takes
    "{ttg.rlc-a = 1, b = 2}",
    "{ttg.rlc-a = [1]}",
    "{ttg.rlc-a = (1)}",
    "{ttg.rlc-a = <1>}",
    "{ttg.rlc-\xff = 1}",
    "{ttg.rlc-a b = 1}",
    "{ttg.rlc-a = 1 -> 2}",
]
SIMPLE_TAILS = ["", " : i32 -> tensor<4xi32>", " loc(#loc5)", "\r", " : \xa9", "\xa9 = 1", " ttg.rlc-more"]


def rlc_line(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        parts = [
            rng.choice(INDENTS),
            rng.choice(SIMPLE_HEADS),
            rng.choice(["", " ", "\t "]),
            rng.choice(SIMPLE_DICTS),
            rng.choice(SIMPLE_TAILS),
        ]
    else:
        parts = [rng.choice(INDENTS), rng.choice(HEADS), rng.choice(["", " ", "  ", "\t"]), rng.choice(DICTS)]
        parts.extend(rng.choice(TAILS) for _ in range(rng.randrange(3)))
    return _latin("".join(parts))


def random_text(rng: random.Random) -> bytes:
    lines = [rlc_line(rng) if rng.random() < 0.5 else _latin(rng.choice(PLAIN)) for _ in range(rng.randrange(1, 12))]
    eol = rng.choice([b"\n", b"\r\n"])
    return eol.join(lines) + rng.choice([b"", eol])


def via_str(rule, raw: bytes) -> str:
    """The digest the str path (ingest, the harness) gives the text."""
    return ttgir.text_digest(rule, raw.decode("utf-8", SE))


def test_strip_rlc_raw_matches_the_str_path_on_random_texts():
    rng = random.Random(20261012)
    changed = unchanged = 0
    for _ in range(3000):
        raw = random_text(rng)
        text = raw.decode("utf-8", SE)
        want = ttgir.strip_rlc_annotations(text)
        got = ttgir.strip_rlc_annotations_raw(raw)
        assert got == want.encode("utf-8", SE), raw
        if want == text:
            unchanged += 1
        else:
            changed += 1
            assert got is not raw
    assert changed > 1000 and unchanged > 100  # both kinds were tried


def test_strip_rlc_raw_lines_match_the_str_scanner():
    """Each line alone: the bytes pattern (simple lines) and the cached
    parser fallback give what _strip_rlc_line gives the decoded line."""
    rng = random.Random(7)
    for _ in range(5000):
        line = rlc_line(rng).replace(b"\n", b"")
        want = ttgir._strip_rlc_line(line.decode("utf-8", SE)).encode("utf-8", SE)
        assert ttgir._strip_rlc_line_raw(line) == want, line
        assert ttgir._strip_rlc_line_raw(line) == want, line  # from the cache this time


def test_strip_rlc_raw_line_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(ttgir, "RLC_LINE_CACHE", 8)
    ttgir._rlc_lines.clear()
    for i in range(50):
        line = b'%%%d = op {"ttg.rlc-q" = %d, a = 1}' % (i, i)
        assert ttgir._strip_rlc_line_raw(line) == b"%%%d = op {a = 1}" % i
        assert len(ttgir._rlc_lines) <= 8


@pytest.mark.parametrize(
    "raw, want",
    [
        (b"%4 = tt.splat %1 {ttg.rlc-phase = 2 : i32} : i32\n", b"%4 = tt.splat %1 : i32\n"),
        (b"    {ttg.rlc-x = 1} : i32\r\n", b"    {ttg.rlc-x = 1} : i32\r\n".replace(b"{ttg.rlc-x = 1}", b"")),
        (b"module attributes {ttg.rlc-applied} {\n}\n", b"module {\n}\n"),
        (b"%5 = op <{ttg.rlc-p = 1}> : i32", b"%5 = op : i32"),
        (b"%5 = op attributes {ttg.rlc-p = 1}", b"%5 = op"),
        (b"%5 = opattributes {ttg.rlc-p = 1}", b"%5 = opattributes"),  # the keyword is a word of its own
        # a removal that joins two escaped bytes into a valid UTF-8 sequence
        (b"#loc\xc3 {ttg.rlc-x}\xa9 = 1\n", b"#loc\xc3\xa9 = 1\n"),
        (b"no annotation here\n", None),
        (b'%1 = op {note = "ttg.rlc-x = 1"}\n', None),
    ],
)
def test_strip_rlc_raw_cases(raw, want):
    got = ttgir.strip_rlc_annotations_raw(raw)
    if want is None:
        assert got is raw  # unchanged: a rescore reuses the blob's own hash
    else:
        assert got == want
    assert got == ttgir.strip_rlc_annotations(raw.decode("utf-8", SE)).encode("utf-8", SE)


@pytest.mark.parametrize("rule", list(ttgir.RULES))
def test_raw_digest_is_the_str_digest_under_every_rule(rule):
    rng = random.Random(rule)
    texts = [random_text(rng) for _ in range(600)] + [b"", b"\n", b"\xff", b"loc(", b"ttg.rlc-"]
    for raw in texts:
        assert ttgir.raw_digest(rule, raw, hashlib.sha256(raw).hexdigest()) == via_str(rule, raw), raw


def test_v4_raw_leaves_non_ascii_to_the_str_path():
    """Where an rlc removal joins escaped bytes into a character, str patterns
    (\\w in a #loc name) see it differently from bytes: v4 does not shortcut."""
    raw = b'#loc\xc3 {ttg.rlc-x}\xa9 = loc("a.py":1:0)\n%0 = op : i32 loc(#loc)\n'
    assert ttgir.normalize_v4_raw(raw) is None
    assert ttgir.raw_digest("v4", raw, hashlib.sha256(raw).hexdigest()) == via_str("v4", raw)
    ascii_raw = b'#loc1 = loc("a.py":1:0)\n%0 = op {ttg.rlc-x = 1} : i32 loc(#loc1)\n'
    assert ttgir.normalize_v4_raw(ascii_raw) == b"%0 = op : i32\n"


def test_a_text_a_rule_leaves_alone_hashes_to_its_blob_hash():
    """No rlc annotation under v3, any text under v1/v2: the blob hash is the
    digest, and raw_digest does not hash again (it trusts the hash given)."""
    raw = b"%1 = op : i32 loc(#loc)\n"
    for rule in ("v1", "v2", "v3"):
        assert ttgir.raw_digest(rule, raw, "blob-hash") == "blob-hash"
    assert ttgir.raw_digest("v4", raw, "blob-hash") != "blob-hash"


def test_a_rule_without_a_raw_normalizer_takes_the_str_path():
    """Adding a rule is still one normalize function: raw_digest decodes for it."""
    rule = ttgir.Rule("vx", lambda text: text.replace("a", "b"), False, "test rule")
    for raw in (b"abc\xff\n", b"xyz"):
        text = raw.decode("utf-8", SE)
        assert ttgir.raw_digest(rule, raw, "blob") == (
            "blob" if rule.normalize(text) == text else ttgir.digest(rule.normalize(text))
        )
    assert all(r.normalize_raw is not None for r in ttgir.RULES.values())  # the shipped ones shortcut


def defanged(raw: bytes, rule) -> bytes:
    """raw with every trigger of rule spelled otherwise (its second last character replaced)."""
    for trigger in rule.triggers:
        raw = raw.replace(trigger.encode("ascii"), trigger[:-2].encode("ascii") + b"~" + trigger[-1:].encode("ascii"))
    return raw


@pytest.mark.parametrize("rule", [r for r in ttgir.RULES.values() if r.triggers])
def test_a_rule_changes_only_texts_that_hold_its_triggers(rule):
    """Rule.leaves is asked before normalizing, so a text without triggers is
    kept by construction; this checks that the normalize functions agree (the
    store tells such texts from their markers and never runs them)."""
    rng = random.Random(1013)
    changed = 0
    for _ in range(3000):
        raw = random_text(rng)
        text = raw.decode("utf-8", SE)
        changed += rule.normalize(text) != text
        plain = defanged(raw, rule)
        assert not any(t.encode() in plain for t in rule.triggers)
        assert rule.leaves(plain) and rule.leaves(plain.decode("utf-8", SE))
        assert rule.normalize(plain.decode("utf-8", SE)) == plain.decode("utf-8", SE)
        assert ttgir.raw_digest(rule, plain, "own") == "own"
    assert changed > 1000  # the texts with triggers do change


def test_markers_say_which_triggers_a_text_holds():
    assert ttgir.TRIGGERS == ("loc(", "ttg.rlc-")
    assert json.loads(ttgir.markers(b"%1 = op {ttg.rlc-a = 1} loc(#loc)")) == {"loc(": 1, "ttg.rlc-": 1}
    assert json.loads(ttgir.markers(b"%1 = op {ttg.rlc = 1} lo(c(")) == {"loc(": 0, "ttg.rlc-": 0}
    for rule in ttgir.RULES.values():  # a rule that changes nothing, and one without triggers
        assert rule.triggers is not None and set(rule.triggers) <= set(ttgir.TRIGGERS)
    assert not ttgir.Rule("x", str.upper, False, "no triggers").leaves("abc")
