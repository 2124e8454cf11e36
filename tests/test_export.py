"""export: a root's verdict table in the harness's screen.tsv column order."""

import csv
import io
import json

import pytest

from zlstore import Store
from zlstore.show import judge
from zlstore.read import layout

from .judging import invoke, screen_pairs

ROOT = "ab_rlc_20261012_101500"


def expected(manifest, root=ROOT):
    return {(op, dtype): spec["verdict"]["v3"] for r, op, dtype, spec in screen_pairs(manifest) if r == root}


@pytest.mark.parametrize("options,delimiter", [((), "\t"), (("--tsv",), "\t"), (("--csv",), ",")])
def test_delimited(example_store_path, example_source, options, delimiter):
    _, manifest = example_source
    result = invoke(example_store_path, "export", ROOT, *options)
    assert result.exit_code == 0, result.output
    reader = csv.reader(io.StringIO(result.stdout), delimiter=delimiter)
    header, *rows = list(reader)
    assert header == list(layout.SCREEN_COLUMNS)
    records = [dict(zip(header, r)) for r in rows]
    assert {(r["op"], r["dtype"]): r["verdict"] for r in records} == expected(manifest)


def test_json(example_store_path, example_source):
    _, manifest = example_source
    rows = json.loads(invoke(example_store_path, "export", ROOT, "--json").stdout)
    assert all(list(r) == list(layout.SCREEN_COLUMNS) for r in rows)
    assert {(r["op"], r["dtype"]): r["verdict"] for r in rows} == expected(manifest)


def test_rows_keep_the_order_of_the_roots_screen_tsv(example_store_path, example_source):
    source, _ = example_source
    on_disk = [line.split("\t")[0] for line in (source / ROOT / "screen.tsv").read_text().splitlines()[1:] if line]
    result = invoke(example_store_path, "export", ROOT)
    exported = [line.split("\t")[0] for line in result.stdout.splitlines()[1:]]
    assert exported == on_disk


def test_export_refuses_what_is_not_a_screening_root(example_store_path, example_source):
    _, manifest = example_source
    assert invoke(example_store_path, "export", "nope").exit_code == 2
    result = invoke(example_store_path, "export", manifest["campaign"]["root"])
    assert result.exit_code == 2 and "not a screening root" in result.output


def test_tsv_is_the_harness_screen_tsv_the_default_prints(example_store_path):
    """--tsv means one thing in export: the harness's screen.tsv text (what
    the default prints and rescore --write writes), so that every format
    option of the other commands works here too."""
    default = invoke(example_store_path, "export", ROOT)
    assert default.exit_code == 0, default.output
    assert invoke(example_store_path, "export", ROOT, "--tsv").stdout == default.stdout
    with Store(example_store_path) as store:
        assert default.stdout == judge.screen_tsv_text(judge.export_rows(store, ROOT))
    assert "screen.tsv" in invoke(example_store_path, "export", "--help").output.split("--tsv", 1)[1].split("--", 1)[0]


def test_rule_is_a_view(example_store_path, example_source):
    _, manifest = example_source
    rows = json.loads(invoke(example_store_path, "export", ROOT, "--rule", "v1", "--json").stdout)
    assert {(r["op"], r["dtype"]): r["verdict"] for r in rows} == {
        (op, dtype): spec["verdict"]["v1"] for r, op, dtype, spec in screen_pairs(manifest) if r == ROOT
    }
    with Store(example_store_path) as store:
        assert store.current_rule == "v3"


@pytest.mark.parametrize("options", [(), ("--json",)])
def test_a_side_without_ir_is_written_as_the_harness_writes_it(example_store_path, example_source, options):
    """A side that compiled no .ttgir is `-` in the harness's screen.tsv, not
    the hash of the empty set: a script comparing the two must see the same."""
    source, _ = example_source

    def no_ir(rows):
        return {
            (r["op"], r["dtype"] or "", side)
            for r in rows
            for side in ("fp_before", "fp_after")
            if r[side] == layout.NO_IR_FINGERPRINT
        }

    on_disk = list(csv.DictReader(io.StringIO((source / ROOT / "screen.tsv").read_text()), delimiter="\t"))
    result = invoke(example_store_path, "export", ROOT, *options)
    exported = (
        json.loads(result.stdout) if options else list(csv.DictReader(io.StringIO(result.stdout), delimiter="\t"))
    )
    assert no_ir(on_disk) and no_ir(exported) == no_ir(on_disk)
    assert ("fft", "complex64", "fp_before") in no_ir(exported)
