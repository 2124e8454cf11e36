"""IR fingerprint rules v1..v4 and the convert_layout count.

The fingerprint decides IR_CHANGED against NO_IR_DIFF, so every way it has
been wrong before is pinned here: index.tsv's cache hashes differ by side
(v1), the switch stamps ttg.rlc-* annotations into IR it did not change (v2),
FlagGems writes its generated kernels under its own cache dir so the same IR
carries different loc paths (v3), and the Triton cache directory name changes
with the switch's environment (never part of any rule).  Each test shows a
rule seeing a difference the next rule removes, and a real code difference
surviving every rule.
"""

import itertools
import re
import time
from pathlib import PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zlstore.read import ttgir
from zlstore.read.ttgir import (
    DEFAULT_RULE,
    RULES,
    Rule,
    combine,
    count_convert_layouts,
    digest,
    get_rule,
    text_digest,
)


def fingerprint(rule, kernels, index_bytes=None):
    """A cell's fingerprint from its (kernel name, IR text) pairs and the raw
    bytes of its index.tsv (None: it has none), as the store assembles it
    (ttgir.fingerprint), each text digested by text_digest."""
    r = get_rule(rule)
    kernels = list(kernels)
    texts = {digest(text): text for _, text in kernels}
    return ttgir.fingerprint(
        r,
        [(name, digest(text)) for name, text in kernels],
        lambda ir_hash: text_digest(r, texts[ir_hash]),
        None if index_bytes is None else digest(index_bytes),
    )


# A realistic FlagGems kernel as Triton dumps it (MLIR with debug locations).
# Placeholders: {path} the generated source file, {mod_attrs} extra module
# attribute entries, {range_attrs} the make_range dict, {splat} the splat op.
TEMPLATE = """\
#blocked = #ttg.blocked<{{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}}>
#blocked1 = #ttg.blocked<{{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}}>
#loc = loc("{path}":12:0)
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32{mod_attrs}, ttg.target = "musa:31", "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @abs_func_kernel(%arg0: !tt.ptr<f16> {{tt.divisibility = 16 : i32}} loc("in0_ptr"(#loc)), %arg1: !tt.ptr<f16> {{tt.divisibility = 16 : i32}} loc("out0_ptr"(#loc)), %arg2: i32 {{tt.divisibility = 16 : i32}} loc("n_elements"(#loc))) attributes {{noinline = false}} {{
    %c1024_i32 = arith.constant 1024 : i32 loc(#loc1)
    %0 = tt.get_program_id x : i32 loc(#loc2)
    %1 = arith.muli %0, %c1024_i32 : i32 loc(#loc3)
    %2 = tt.make_range {range_attrs} : tensor<1024xi32, #blocked> loc(#loc4)
    {splat}
    %4 = arith.addi %3, %2 : tensor<1024xi32, #blocked> loc(#loc5)
    %5 = tt.splat %arg2 : i32 -> tensor<1024xi32, #blocked> loc(#loc6)
    %6 = arith.cmpi slt, %4, %5 : tensor<1024xi32, #blocked> loc(#loc6)
    %7 = tt.splat %arg0 : !tt.ptr<f16> -> tensor<1024x!tt.ptr<f16>, #blocked> loc(#loc7)
    %8 = tt.addptr %7, %4 : tensor<1024x!tt.ptr<f16>, #blocked>, tensor<1024xi32, #blocked> loc(#loc7)
    %9 = tt.load %8, %6 : tensor<1024x!tt.ptr<f16>, #blocked> loc(#loc8)
    %10 = math.absf %9 : tensor<1024xf16, #blocked> loc(#loc9)
    %11 = ttg.convert_layout %10 : tensor<1024xf16, #blocked> -> tensor<1024xf16, #blocked1> loc(#loc10)
    %12 = ttg.convert_layout %10 : tensor<1024xf16, #blocked> -> tensor<1024xf16, #blocked1> loc(#loc10)
    %13 = tt.splat %arg1 : !tt.ptr<f16> -> tensor<1024x!tt.ptr<f16>, #blocked1> loc(#loc11)
    %14 = ttg.convert_layout %8 : tensor<1024x!tt.ptr<f16>, #blocked> -> tensor<1024x!tt.ptr<f16>, #blocked1> loc(#loc11)
    %15 = ttg.convert_layout %6 : tensor<1024xi1, #blocked> -> tensor<1024xi1, #blocked1> loc(#loc12)
    tt.store %14, %11, %15 : tensor<1024x!tt.ptr<f16>, #blocked1> loc(#loc12)
    tt.return loc(#loc13)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("{path}":14:24)
#loc3 = loc("{path}":15:24)
#loc4 = loc("{path}":16:41)
#loc5 = loc("{path}":16:28)
#loc6 = loc("{path}":17:21)
#loc7 = loc("{path}":18:24)
#loc8 = loc("{path}":18:16)
#loc9 = loc("{path}":19:16)
#loc10 = loc("{path}":20:8)
#loc11 = loc("{path}":21:25)
#loc12 = loc(callsite(#loc10 at #loc11))
#loc13 = loc(callsite(#loc12 at #loc9))
"""

PATH_A = "/root/.flaggems/code_cache/abs_func/abs_func_kernel_rank_1.py"
PATH_B = "/home/ci/.flaggems_isolated/card3/code_cache/abs_func/abs_func_kernel_rank_1.py"
PLAIN_RANGE = "{end = 1024 : i32, start = 0 : i32}"
PLAIN_SPLAT = "%3 = tt.splat %1 : i32 -> tensor<1024xi32, #blocked> loc(#loc5)"


def ir(path=PATH_A, mod_attrs="", range_attrs=PLAIN_RANGE, splat=PLAIN_SPLAT):
    return TEMPLATE.format(path=path, mod_attrs=mod_attrs, range_attrs=range_attrs, splat=splat)


BASE = ir()
KERNEL = "abs_func_kernel"
INDEX_BEFORE = b"abs_func_kernel\tQ2VLTXJ4Y3P5\t/runs/ab/abs_before/triton_cache/Q2VLTXJ4Y3P5/abs_func_kernel.ttgir\n"
INDEX_AFTER = b"abs_func_kernel\tZZ7H4A0KD1M2\t/runs/ab/abs_after/triton_cache/ZZ7H4A0KD1M2/abs_func_kernel.ttgir\n"


def fp(rule, text, index=None):
    return fingerprint(rule, [(KERNEL, text)], index)


# --- v1 / v2: index.tsv ----------------------------------------------------


def test_v1_differs_when_only_index_tsv_differs_v2_equal():
    """index.tsv lists the Triton cache hash, which differs by side even for
    byte-identical IR: v1 made every op look changed; v2 dropped it."""
    assert fp("v1", BASE, INDEX_BEFORE) != fp("v1", BASE, INDEX_AFTER)
    assert fp("v2", BASE, INDEX_BEFORE) == fp("v2", BASE, INDEX_AFTER)
    # a v1 cell without index.tsv is a distinct, stable state
    assert fp("v1", BASE, None) == fp("v1", BASE, None) != fp("v1", BASE, INDEX_BEFORE)


# --- v2 / v3: ttg.rlc-* annotations ----------------------------------------

RLC_CASES = {
    # name: (annotated text, the text v3 must give back)
    "bare_only_entry_splat": (
        ir(splat="%3 = tt.splat %1 {ttg.rlc-phase = 2 : i32} : i32 -> tensor<1024xi32, #blocked> loc(#loc5)"),
        BASE,
    ),
    "quoted_first": (ir(range_attrs='{"ttg.rlc-origin" = "phase3", end = 1024 : i32, start = 0 : i32}'), BASE),
    "bare_middle": (ir(range_attrs="{end = 1024 : i32, ttg.rlc-phase = 2 : i32, start = 0 : i32}"), BASE),
    "bare_last": (ir(range_attrs="{end = 1024 : i32, start = 0 : i32, ttg.rlc-phase = 2 : i32}"), BASE),
    "unit_attribute": (ir(range_attrs="{end = 1024 : i32, ttg.rlc-applied, start = 0 : i32}"), BASE),
    "unit_attribute_last": (ir(range_attrs="{end = 1024 : i32, start = 0 : i32, ttg.rlc-applied}"), BASE),
    "several_and_values": (
        ir(
            range_attrs='{ttg.rlc-applied, end = 1024 : i32, "ttg.rlc-note" = "say \\"hi\\", {x}",'
            " ttg.rlc-shape = [1, 2], start = 0 : i32,"
            " ttg.rlc-info = {from = #blocked, to = #ttg.blocked<{sizePerThread = [8]}>}}"
        ),
        BASE,
    ),
    "module_attributes": (ir(mod_attrs=', "ttg.rlc-enhance" = 1 : i32, ttg.rlc-applied'), BASE),
}


@pytest.mark.parametrize("case", sorted(RLC_CASES))
def test_v2_sees_rlc_annotation_v3_removes_it_cleanly(case):
    """The switch stamps ttg.rlc-* annotations into the IR even where it
    changed nothing: v2 calls that a change, v3 strips them and leaves every
    other byte as it was (first/middle/last entry, unit and valued, a dict
    left empty goes with the space before it, module attributes)."""
    annotated, plain = RLC_CASES[case]
    assert annotated != plain
    assert fp("v2", annotated) != fp("v2", plain)
    assert ttgir.normalize_v3(annotated) == plain
    assert fp("v3", annotated) == fp("v3", plain)


def test_v3_splat_example_exact():
    """The example from the rule's definition, on one line."""
    assert ttgir.normalize_v3("%4 = tt.splat %1 {ttg.rlc-phase = 2 : i32} : i32") == "%4 = tt.splat %1 : i32"


@pytest.mark.parametrize(
    "annotated, plain",
    [
        # module dict left empty: the `attributes` keyword goes too
        ("module attributes {ttg.rlc-applied} {\n}\n", "module {\n}\n"),
        # property dict left empty: its <{ }> goes with it
        (
            '%5 = "tt.load"(%4) <{ttg.rlc-phase = 1 : i32}> : (tensor<4x!tt.ptr<f16>>) -> tensor<4xf16>',
            '%5 = "tt.load"(%4) : (tensor<4x!tt.ptr<f16>>) -> tensor<4xf16>',
        ),
        # property dict with other entries
        (
            '%5 = "tt.load"(%4) <{cache = 1 : i32, "ttg.rlc-phase" = 1 : i32, isVolatile = false}> : (i32) -> i32',
            '%5 = "tt.load"(%4) <{cache = 1 : i32, isVolatile = false}> : (i32) -> i32',
        ),
        # func attributes and an argument dict
        (
            "tt.func public @k(%arg0: !tt.ptr<f16> {tt.divisibility = 16 : i32, ttg.rlc-arg = 0 : i32} loc(#loc),"
            " %arg1: i32 {ttg.rlc-arg = 1 : i32} loc(#loc)) attributes {ttg.rlc-applied} {",
            "tt.func public @k(%arg0: !tt.ptr<f16> {tt.divisibility = 16 : i32} loc(#loc), %arg1: i32 loc(#loc)) {",
        ),
        # nested: an rlc entry inside another attribute's dictionary value; that dict stays (it is a value)
        (
            "%6 = tt.foo %5 {a = {ttg.rlc-q = 1}, b = [{c = 2, ttg.rlc-s = 3}]} : f16",
            "%6 = tt.foo %5 {a = {}, b = [{c = 2}]} : f16",
        ),
        # an scf.for's attributes follow its region's closing brace
        (
            "    } {tt.num_stages = 3 : i32, ttg.rlc-pipelined = 2 : i32} loc(#loc7)",
            "    } {tt.num_stages = 3 : i32} loc(#loc7)",
        ),
        ("    } {ttg.rlc-pipelined = 2 : i32} loc(#loc7)", "    } loc(#loc7)"),
        # odd spacing elsewhere is kept byte for byte
        ("%7 = tt.foo %5 {a  =  1 ,  ttg.rlc-x = 2 ,b=3} : f16", "%7 = tt.foo %5 {a  =  1 ,  b=3} : f16"),
    ],
)
def test_v3_dict_positions(annotated, plain):
    """Annotations sit in module, property, function and argument dicts; each
    goes, an emptied dict goes with its wrapper, nothing else moves."""
    assert ttgir.normalize_v3(annotated) == plain


def test_v3_leaves_rlc_text_inside_strings_alone():
    """`ttg.rlc-` inside some other attribute's string value (or a loc path)
    is data, not an annotation: v3 must not touch it."""
    text = ir(
        path="/tmp/ttg.rlc-phase = 2/abs.py",
        range_attrs='{end = 1024 : i32, start = 0 : i32, tt.note = "{ttg.rlc-phase = 2 : i32}"}',
    )
    assert "ttg.rlc-" in text
    assert ttgir.normalize_v3(text) == text
    assert ttgir.normalize_v3(text) != ttgir.normalize_v3(ir(path="/tmp/abs.py"))


def test_v3_is_idempotent_and_keeps_unannotated_text():
    annotated = RLC_CASES["several_and_values"][0]
    once = ttgir.normalize_v3(annotated)
    assert ttgir.normalize_v3(once) == once
    assert ttgir.normalize_v3(BASE) == BASE


# --- v3 / v4: locations ----------------------------------------------------


def test_v3_sees_loc_paths_v4_does_not():
    """FlagGems writes generated kernels under its own cache dir: two runs
    with separate caches give the same IR different loc paths."""
    a, b = ir(path=PATH_A), ir(path=PATH_B)
    assert fp("v3", a) != fp("v3", b)
    assert fp("v4", a) == fp("v4", b)


def test_v4_removes_every_location():
    """#loc definition lines (whole line), callsite chains, named locs on
    function arguments and op suffixes all go; nothing else does."""
    out = ttgir.normalize_v4(BASE)
    assert "loc(" not in out and not re.search(r"#loc\b|#loc\d", out)
    assert "%1 = arith.muli %0, %c1024_i32 : i32\n" in out
    assert "%arg0: !tt.ptr<f16> {tt.divisibility = 16 : i32}, %arg1:" in out
    assert "  }\n}\n" in out
    assert out.endswith("}\n")
    assert out.count("\n") == BASE.count("\n") - 14  # the 14 #loc definition lines
    assert ttgir.normalize_v4(out) == out


def test_v4_nested_and_block_argument_locs():
    text = (
        '#loc = loc("/a/b.py":1:0)\n'
        "#loc12 = loc(callsite(#loc9 at #loc24))\n"
        '#loc3 = loc("in0_ptr"(#loc))\n'
        "#loc20 = loc(fused[#loc3, callsite(#loc12 at #loc)])\n"
        '    %r = "tt.reduce"(%x) <{axis = 0 : i32}> ({\n'
        '    ^bb0(%arg5: f32 loc(callsite(#loc1 at #loc2)), %arg6: f32 loc("x"(callsite(#loc1 at #loc2)))):\n'
        "      %s = arith.addf %arg5, %arg6 : f32 loc(#loc20)\n"
        "      tt.reduce.return %s : f32 loc(#loc20)\n"
        "    }) : (tensor<4xf32>) -> f32 loc(#loc12)\n"
    )
    assert ttgir.normalize_v4(text) == (
        '    %r = "tt.reduce"(%x) <{axis = 0 : i32}> ({\n'
        "    ^bb0(%arg5: f32, %arg6: f32):\n"
        "      %s = arith.addf %arg5, %arg6 : f32\n"
        "      tt.reduce.return %s : f32\n"
        "    }) : (tensor<4xf32>) -> f32\n"
    )


def test_v4_respects_parentheses_and_loc_inside_strings():
    """A path with parentheses (or the text `loc(`) inside a loc string does
    not end the loc early; a `loc(` inside an ordinary string stays."""
    weird = "/tmp/run (copy) loc(x/abs).py"
    a = ir(path=weird)
    out = ttgir.normalize_v4(a)
    assert out == ttgir.normalize_v4(ir(path=PATH_A))
    assert "copy" not in out
    line = 'tt.assert %6, "bad index loc(3) (see \\"loc(x)\\")" : tensor<1024xi1, #blocked> loc(#loc6)\n'
    assert (
        ttgir.normalize_v4(line) == 'tt.assert %6, "bad index loc(3) (see \\"loc(x)\\")" : tensor<1024xi1, #blocked>\n'
    )


def test_v4_deeper_nesting_and_lookalikes():
    """Nesting beyond the common two levels is balanced by the scanner; a
    name merely ending in `loc(` is not a location."""
    text = (
        "%0 = tt.foo %a : i32 loc(fused[callsite(callsite(#loc1 at callsite(#loc2 at #loc3)) at #loc4),"
        ' "n(a)me"(callsite("(("(#loc5) at #loc6))])\n'
        "#loc7 = loc(callsite(callsite(callsite(#loc1 at #loc2) at #loc3) at #loc4))\n"
        "%1 = tt.call @my.loc(%0) : (i32) -> i32 loc(#loc7)\n"
    )
    assert ttgir.normalize_v4(text) == "%0 = tt.foo %a : i32\n%1 = tt.call @my.loc(%0) : (i32) -> i32\n"


def test_v4_crlf_definition_lines_go_whole():
    text = '#loc = loc("/a.py":1:0)\r\n%0 = tt.get_program_id x : i32 loc(#loc)\r\n#loc1 = loc("/a.py":2:0)\r\n'
    assert ttgir.normalize_v4(text) == "%0 = tt.get_program_id x : i32\r\n"


def test_v4_also_strips_rlc():
    annotated = RLC_CASES["bare_middle"][0].replace(PATH_A, PATH_B)
    assert fp("v4", annotated) == fp("v4", BASE)


# Pieces of IR lines where locations hide: the fast passes of strip_locations
# must remove exactly what the scanner does, for every mix of them.
_LOC_PIECES = [
    '#loc = loc("/a/b.py":1:0)',
    '#loc7 = loc("/a/b (copy).py":12:3)',
    "#loc.x = loc(unknown)",
    '#loc2 = loc("x\\"y":3:4)',
    "#loc12 = loc(callsite(#loc9 at #loc24))",
    '#loc3 = loc("in0_ptr"(#loc))',
    '#loc4 =loc("a.py":1:2)',
    '#loc5 = loc("a.py":1:2) ',
    '#loc6 = loc("a.py":1:2)\r',
    '#loc8 = loc("a.py":x:2)',
    "#loc9 = loc(",
    "  %0 = tt.get_program_id x : i32",
    " loc(#loc1)",
    "\tloc(#loc2)",
    "  loc(#loc)",
    ' loc("n(a)me"(callsite(#loc1 at #loc2)))',
    ' "s loc(3)"',
    "@my.loc(%0)",
    " {a = 1}",
    ")",
    "",
]


@given(st.lists(st.lists(st.sampled_from(_LOC_PIECES), max_size=4).map("".join), min_size=1, max_size=12))
@settings(max_examples=400, deadline=None)
def test_v4_fast_passes_remove_what_the_scanner_removes(lines):
    text = "\n".join(lines) + "\n"
    assert ttgir.strip_locations(text) == ttgir._strip_locations_scan(text)


# --- real code differences survive every rule ------------------------------


def _other_layout(text):
    return text.replace(
        "#blocked1 = #ttg.blocked<{sizePerThread = [8]", "#blocked1 = #ttg.blocked<{sizePerThread = [2]"
    )


def _extra_convert(text):
    return text.replace(
        "    tt.return",
        "    %16 = ttg.convert_layout %11 : tensor<1024xf16, #blocked1> -> tensor<1024xf16, #blocked> loc(#loc12)\n"
        "    tt.return",
    )


@pytest.mark.parametrize("change", [_other_layout, _extra_convert])
@pytest.mark.parametrize("rule", list(RULES))
def test_real_code_difference_is_kept(rule, change):
    """Normalization removes noise, never code: a different layout or an
    extra convert_layout is IR_CHANGED under every rule, also next to
    annotation and loc noise."""
    changed = change(BASE)
    assert changed != BASE
    assert fp(rule, BASE) != fp(rule, changed)
    noisy = change(RLC_CASES["quoted_first"][0]).replace(PATH_A, PATH_B)
    assert fp(rule, BASE) != fp(rule, noisy)


def test_layout_change_keeps_convert_count():
    """Equal convert_layout counts do not mean equal code: the count is not the criterion."""
    changed = _other_layout(BASE)
    assert count_convert_layouts(changed) == count_convert_layouts(BASE)
    assert fp(DEFAULT_RULE, changed) != fp(DEFAULT_RULE, BASE)


# --- the multiset of kernels -----------------------------------------------


def _cell(paths_and_texts):
    """What the store does: the kernel name is the .ttgir file stem."""
    return [(PurePosixPath(p).stem, t) for p, t in paths_and_texts]


@pytest.mark.parametrize("rule", list(RULES))
def test_cache_directory_name_is_not_part(rule):
    """The Triton cache key changes with the switch's environment even when
    the IR does not; the fingerprint takes kernel names, never paths."""
    before = _cell([("/runs/ab/abs_before/triton_cache/Q2VLTXJ4Y3P5/abs_func_kernel.ttgir", BASE)])
    after = _cell([("/runs/ab/abs_after/triton_cache/ZZ7H4A0KD1M2/abs_func_kernel.ttgir", BASE)])
    assert fingerprint(rule, before, b"") == fingerprint(rule, after, b"")


@pytest.mark.parametrize("rule", list(RULES))
def test_multiset_duplicates_count_and_order_does_not(rule):
    other = ("copy_func_kernel", _other_layout(BASE))
    one = [(KERNEL, BASE)]
    two = [(KERNEL, BASE), (KERNEL, BASE)]
    assert fingerprint(rule, one) != fingerprint(rule, two)
    cell = [(KERNEL, BASE), other, (KERNEL, RLC_CASES["bare_last"][0])]
    fps = {fingerprint(rule, list(p)) for p in itertools.permutations(cell)}
    assert len(fps) == 1
    # the name is part of it: the same text under another kernel name differs
    assert fingerprint(rule, [("other_kernel", BASE)]) != fingerprint(rule, one)


@pytest.mark.parametrize("rule", list(RULES))
def test_empty_cell_has_a_fixed_fingerprint(rule):
    empty = fingerprint(rule, [])
    assert empty == combine(rule, [], None) == fingerprint(get_rule(rule), iter(()))
    assert len(empty) == 64
    assert empty != fingerprint(rule, [(KERNEL, "")])


@pytest.mark.parametrize("index", [None, b"", INDEX_BEFORE])
@pytest.mark.parametrize("rule", list(RULES))
def test_fingerprint_equals_combine_of_text_digests(rule, index):
    """The store caches text_digest per distinct text and combines per cell:
    both paths must give the same value exactly."""
    kernels = [(KERNEL, RLC_CASES["bare_middle"][0]), ("copy_func_kernel", ir(path=PATH_B)), (KERNEL, BASE)]
    r = get_rule(rule)
    idx = digest(index) if r.hashes_index and index is not None else None
    expected = combine(rule, [(n, text_digest(rule, t)) for n, t in kernels], idx)
    assert fingerprint(rule, kernels, index) == expected
    assert fingerprint(r, kernels, index) == combine(r, [(n, text_digest(r, t)) for n, t in kernels], idx)
    if not r.hashes_index:
        # index.tsv plays no part in a rule that does not hash it
        assert combine(rule, [(n, text_digest(rule, t)) for n, t in kernels], digest(b"x")) == expected


def test_digest_surrogateescape_matches_raw_bytes():
    """A .ttgir decoded with surrogateescape hashes as its original bytes."""
    raw = b"// caf\xe9\n"
    assert digest(raw.decode("utf-8", errors="surrogateescape")) == digest(raw)
    assert digest("abc") == digest(b"abc")
    assert text_digest("v2", "abc") == digest(b"abc")


# --- convert_layout count --------------------------------------------------


def test_count_convert_layouts_both_spellings():
    """ttg.convert_layout, older triton_gpu.convert_layout, custom and generic form."""
    assert count_convert_layouts(BASE) == 4
    text = (
        "%1 = triton_gpu.convert_layout %0 : tensor<4xf32, #blocked> -> tensor<4xf32, #blocked1>\n"
        '%2 = "triton_gpu.convert_layout"(%1) : (tensor<4xf32, #blocked1>) -> tensor<4xf32, #blocked>\n'
        '%3 = "ttg.convert_layout"(%2) : (tensor<4xf32, #blocked>) -> tensor<4xf32, #blocked1>\n'
        "%4 = ttg.convert_layout %3 : tensor<4xf32, #blocked1> -> tensor<4xf32, #blocked>\n"
    )
    assert count_convert_layouts(text) == 4
    assert count_convert_layouts(_extra_convert(BASE)) == 5
    assert count_convert_layouts("") == 0


def test_count_convert_layouts_ignores_mentions():
    """Mentions in loc lines, named locs, attribute strings and rlc
    annotations are not operations."""
    text = (
        '#loc3 = loc("/root/ttg.convert_layout/%1 = ttg.convert_layout x.py":3:0)\n'
        '#loc4 = loc("ttg.convert_layout"(#loc3))\n'
        '%5 = tt.splat %1 {ttg.rlc-removed = "%2 = ttg.convert_layout %1 : x", '
        'ttg.rlc-origin = "ttg.convert_layout"} : i32 -> tensor<4xi32> loc("ttg.convert_layout"(#loc))\n'
        "%6 = ttg.convert_layout_like %5 : tensor<4xi32>\n"
        "%7 = ttg.convert_layout %5 : tensor<4xi32, #blocked> -> tensor<4xi32, #blocked1> "
        'loc("= ttg.convert_layout "(#loc4))\n'
    )
    assert count_convert_layouts(text) == 1
    assert count_convert_layouts(ir(path="/x/= ttg.convert_layout y.py")) == 4


# --- the rule table --------------------------------------------------------


def test_rules_table_order_and_default():
    """Every rule ever used stays computable; v3 is the current one."""
    assert list(RULES) == ["v1", "v2", "v3", "v4"]
    assert DEFAULT_RULE == "v3"
    assert [r.hashes_index for r in RULES.values()] == [True, False, False, False]
    for name, rule in RULES.items():
        assert isinstance(rule, Rule) and rule.name == name
        assert rule.description and "\n" not in rule.description
        assert get_rule(name) is rule and get_rule(rule) is rule


def test_unknown_rule_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError) as e:
        get_rule("v9")
    for name in ("v9", "v1", "v2", "v3", "v4"):
        assert name in str(e.value)
    with pytest.raises(ValueError):
        fingerprint("v9", [])


# --- speed -----------------------------------------------------------------


def test_normalization_is_linear_enough():
    """Thousands of 5-50 KB texts are normalized per rescore: a ~1 MB text
    full of annotations and locs must not take quadratic time."""
    body = "".join(
        f"    %{i} = tt.splat %a {{ttg.rlc-phase = {i} : i32, x = 1}} : i32 -> tensor<4xi32> "
        f'loc(callsite(#loc{i} at #loc))\n#loc{i} = loc("{PATH_A}":{i}:0)\n'
        for i in range(10000)
    )
    t = time.perf_counter()
    out = ttgir.normalize_v4(body)
    count_convert_layouts(body)
    assert time.perf_counter() - t < 5.0
    assert "rlc" not in out and "loc(" not in out


def test_a_rule_built_on_another_normalizes_as_it_does_from_scratch():
    """v4 digested after v3 at ingest starts from v3's text (Rule.builds_on):
    the same text as normalizing the original from scratch, on every case
    here, the texts left alone, and texts holding only one rule's triggers."""
    texts = [
        BASE,
        *(annotated for annotated, _ in RLC_CASES.values()),
        "no triggers at all\n",
        '%0 = x loc("/a.py":1:0)\n',
        RLC_CASES["bare_middle"][0].replace(PATH_A, PATH_B),
    ]
    for rule in ttgir.RULES.values():
        if rule.builds_on:
            base = ttgir.RULES[rule.builds_on]
            for text in texts:
                assert rule.finish(base.normalized(text)) == rule.normalized(text)
