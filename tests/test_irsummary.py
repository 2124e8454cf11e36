"""The summary of what changed in an op's kernels (irsummary.py) is
computed from the IR, never from a list of op names: invented dialects
and attributes are summed up as Triton's are."""

from zlstore.show import irfacts, irsummary

BEFORE = """#lay = #my.grid<{rows = 4, cols = [1, 2]}>
module attributes {"my.lanes" = 32 : i32} {
  my.func public @k(%a: !my.ptr {my.align = 16 : i32}) {
    %0 = my.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #lay>
    %1 = my.load %a : tensor<128x64xf32, #lay>
    %2 = my.mul %1, %1 : tensor<128x64xf32, #lay>
    %3 = my.mul %2, %1 : tensor<128x64xf32, #lay>
    my.store %a, %3 {cache = 1 : i32} : tensor<128x64xf32, #lay>
    my.return
  }
}
"""
AFTER = (
    BEFORE.replace("my.mul", "my.fma")
    .replace("{cache = 1 : i32}", "{cache = 2 : i32, streaming}")
    .replace("    my.return", "    %4 = my.shuffle %3 : tensor<128x64xf32, #lay>\n    my.return")
)


def test_an_invented_dialect_is_summed_up_as_triton_is():
    before, after = irfacts.read(BEFORE), irfacts.read(AFTER)
    changes = irsummary.pair_changes(before, after)
    assert ("replaced", "my.mul", "my.fma") in changes
    assert ("count", "my.shuffle", 1) in changes
    assert ("attribute", "my.store", "cache", ("1 : i32",), ("2 : i32",)) in changes
    assert ("attribute", "my.store", "streaming", (), ("",)) in changes
    summary = irsummary.summarize([("k", before, after), ("k", before, before), ("j", None, after)])
    assert irsummary.lines(summary) == [
        "my.mul -> my.fma in 1 of 2",
        "my.store: cache 1 : i32 -> 2 : i32 in 1 of 2",
        "my.store: streaming added in 1 of 2",
        "my.shuffle +1 in 1 of 2",
        "j only after: 1",
    ]
    assert irsummary.one_line(summary).startswith("my.mul -> my.fma in 1 of 2; ")


def test_the_same_shapes_and_results_make_a_replacement():
    """An op that vanished and one that appeared as often, on other shapes,
    did not take its place: they are counted apart."""
    other = BEFORE.replace(
        "%3 = my.mul %2, %1 : tensor<128x64xf32, #lay>", "%3 = my.pow %2, %1 : tensor<64x64xf32, #lay>"
    )
    other = other.replace(
        "%2 = my.mul %1, %1 : tensor<128x64xf32, #lay>", "%2 = my.pow %1, %1 : tensor<64x64xf32, #lay>"
    )
    changes = irsummary.pair_changes(irfacts.read(BEFORE), irfacts.read(other))
    assert ("count", "my.mul", -2) in changes and ("count", "my.pow", 2) in changes
    assert not [c for c in changes if c[0] == "replaced"]


def test_tile_shapes_come_from_ranges_where_there_is_no_dot():
    facts = irfacts.read(BEFORE)
    assert facts is not None
    assert facts.tiles == ((), (("0", "128"),), ()) and irfacts.tile_text(facts.tiles) == "128"
    assert facts.signature.startswith("my.func public @k(%a: !my.ptr {my.align = 16 : i32})")
