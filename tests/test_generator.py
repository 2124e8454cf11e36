"""Sanity tests of the runs/ tree generator itself (tests/generator.py).

They check that the generator writes what its manifest says, using only the
standard library: no parser, fingerprint rule or SQL of this project is
involved, so a failure here is the generator's, never the code under test's.
"""

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from . import generator as T
from .generator import (
    CellSpec,
    RowSpec,
    cell_dir_name,
    make_campaign_corpus,
    make_example_tree,
    ttgir_text,
    write_cell,
)

KERNELS = ["abs_func_kernel_rank_1", "topk_stage1_kernel", "softmax_kernel_inner", "k", "x" * 40]

# Independent, deliberately simple strippers (the real rules live elsewhere).
_RLC_DICT = re.compile(r' \{"?ttg\.rlc-[\w-]+"? = [^,{}]+\}')
_RLC_ENTRY = re.compile(r', "?ttg\.rlc-[\w-]+"? = [^,{}]+')
_LOC_SUFFIX = re.compile(r" loc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")


def strip_rlc(text):
    return _RLC_ENTRY.sub("", _RLC_DICT.sub("", text))


def strip_loc(text):
    lines = [ln for ln in text.splitlines() if not re.match(r"#loc\d* = loc\(", ln)]
    return "\n".join(_LOC_SUFFIX.sub("", ln) for ln in lines)


# ------------------------------------------------------------------ ttgir


@pytest.mark.parametrize("kernel", KERNELS)
def test_ttgir_shape_of_the_text(kernel):
    t = ttgir_text(kernel)
    assert t == ttgir_text(kernel)  # deterministic
    assert t.startswith("#blocked = #ttg.blocked<")
    assert "#shared = #ttg.swizzled_shared<" in t
    assert re.search(r'^module attributes \{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = \d : i32', t, re.M)
    assert f"tt.func public @{kernel}(%arg0: !tt.ptr<" in t
    assert 'loc("in0_ptr"(#loc))' in t
    assert "tt.load " in t and "tt.store " in t
    assert re.search(r'^#loc = loc\("/root/.flaggems/code_cache/' + re.escape(kernel) + r'\.py":\d+:0\)$', t, re.M)
    assert re.search(r"^#loc\d+ = loc\(unknown\)$", t, re.M)
    assert "ttg.rlc-" not in t
    body = [ln for ln in t.splitlines() if ln.startswith("    %") or ln.startswith("    tt.")]
    assert body and all(re.search(r" loc\(#loc\d+\)$", ln) for ln in body)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_ttgir_exact_convert_layout_count(n):
    for k in KERNELS:
        t = ttgir_text(k, convert_layouts=n, target_bytes=12000)
        assert len(re.findall(r"= ttg\.convert_layout ", t)) == n
        assert t.count("convert_layout") == n


@pytest.mark.parametrize("target", [None, 8000, 30000])
@pytest.mark.parametrize("kernel", KERNELS)
def test_ttgir_rlc_only_adds_annotations(kernel, target):
    plain = ttgir_text(kernel, target_bytes=target)
    stamped = ttgir_text(kernel, rlc=True, target_bytes=target)
    assert stamped != plain
    a, b = plain.splitlines(), stamped.splitlines()
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x != y:
            assert "ttg.rlc-" in y and "ttg.rlc-" not in x
    assert strip_rlc(stamped) == plain
    # every form the switch uses: bare dict, quoted dict, entry in an existing
    # dict (make_range: last entry), module-level (middle of the dict)
    assert " {ttg.rlc-phase = 2 : i32} : " in stamped
    assert ' {"ttg.rlc-phase" = 3 : i32} : ' in stamped
    assert 'start = 0 : i32, "ttg.rlc-origin" = "phase3"} : ' in stamped
    assert '"ttg.rlc-enhance" = true, ttg.target' in stamped


@pytest.mark.parametrize("target", [None, 20000])
@pytest.mark.parametrize("kernel", KERNELS)
def test_ttgir_loc_root_changes_only_loc_lines(kernel, target):
    a = ttgir_text(kernel, target_bytes=target)
    other = "/home/ci/.flaggems_isolated/card3/code_cache"
    b = ttgir_text(kernel, target_bytes=target, loc_root=other)
    la, lb = a.splitlines(), b.splitlines()
    assert len(la) == len(lb)
    diff = [(x, y) for x, y in zip(la, lb) if x != y]
    assert diff
    assert all(re.match(r"#loc\d* = loc\(", y) and other in y for _, y in diff)
    assert b.replace(other, T.DEFAULT_LOC_ROOT) == a
    assert strip_loc(a) == strip_loc(b)
    # and together with annotations: only both kinds of difference
    c = ttgir_text(kernel, target_bytes=target, loc_root=other, rlc=True)
    assert strip_loc(strip_rlc(c)) == strip_loc(a)


@pytest.mark.parametrize("kernel", KERNELS)
def test_ttgir_variant_and_layouts_change_real_code(kernel):
    base = strip_loc(ttgir_text(kernel))
    variants = {strip_loc(ttgir_text(kernel, variant=v)) for v in range(40)}
    assert len(variants) == 40
    assert strip_loc(ttgir_text(kernel, convert_layouts=3)) != base
    assert strip_loc(ttgir_text(kernel, seed=1, target_bytes=10000)) != strip_loc(
        ttgir_text(kernel, seed=0, target_bytes=10000)
    )


@pytest.mark.parametrize("target", [5000, 8000, 15000, 27500, 50000])
def test_ttgir_target_bytes(target):
    for k in KERNELS:
        for cl in (0, 2, 4):
            n = len(ttgir_text(k, convert_layouts=cl, target_bytes=target).encode())
            assert 0.8 * target <= n <= 1.2 * target, (k, cl, n)


# ------------------------------------------------------------------ cells


def _spec(**kw):
    base: dict[str, Any] = dict(
        op="topk",
        dtype="float16",
        side="before",
        round=0,
        card=0,
        rows=[RowSpec([[64, 1024], 32], 0.02), RowSpec([[4096, 4096], 128], 0.3)],
        kernels={"topk_kernel": ttgir_text("topk_kernel")},
    )
    base.update(kw)
    return CellSpec(**base)


def test_cell_dir_name():
    assert cell_dir_name("topk", "float16", "before") == "topk_float16_before"
    assert cell_dir_name("rand", "", "after") == "rand_after"
    assert cell_dir_name("slice_scatter", "float16", "after") == "slice_scatter_float16_after"


def test_write_cell_writes_cell_env_last(tmp_path, monkeypatch):
    order = []
    real = T._write

    def spy(path, data):
        order.append(Path(path).relative_to(tmp_path).as_posix())
        real(path, data)

    monkeypatch.setattr(T, "_write", spy)
    write_cell(tmp_path / "c", _spec(extra_env={"SWITCH": T.SWITCH, "NODEID": "b.py::t"}))
    assert order[0] == "c/run.log"
    assert order[-1] == "c/cell.env"
    assert "c/index.tsv" in order
    assert any(p.endswith("/topk_kernel.ttgir") for p in order)
    for ext in (".json", ".ttir", ".llir", ".ptx"):
        assert any(p.endswith("/topk_kernel" + ext) for p in order)
    env = dict(ln.split("=", 1) for ln in (tmp_path / "c/cell.env").read_text().splitlines())
    assert env["OP"] == "topk" and env["DTYPE"] == "float16" and env["RC"] == "0"
    assert env["NODEID"] == "b.py::t"
    assert all(v in env for v in T._CAL_ENV)
    meta = json.loads(next((tmp_path / "c/triton_cache").glob("*/topk_kernel.json")).read_text())
    assert meta["num_warps"] in (4, 8) and "num_stages" in meta


def test_cache_dir_differs_by_side_even_for_identical_ir(tmp_path):
    write_cell(tmp_path / "b", _spec(side="before"))
    write_cell(tmp_path / "a", _spec(side="after"))
    hb = [p.name for p in (tmp_path / "b/triton_cache").iterdir()]
    ha = [p.name for p in (tmp_path / "a/triton_cache").iterdir()]
    assert hb != ha
    assert (tmp_path / "b/index.tsv").read_bytes() != (tmp_path / "a/index.tsv").read_bytes()
    tb = next((tmp_path / "b").glob("triton_cache/*/*.ttgir")).read_bytes()
    ta = next((tmp_path / "a").glob("triton_cache/*/*.ttgir")).read_bytes()
    assert ta == tb
    kernel, hsh, path = (tmp_path / "b/index.tsv").read_text().strip().split("\t")
    assert kernel == "topk_kernel" and (tmp_path / "b" / path).is_file() and hsh in path


def test_cell_env_variants(tmp_path):
    write_cell(tmp_path / "p", _spec(cell_env="partial"))
    env = (tmp_path / "p/cell.env").read_text()
    assert "DTYPE=" not in env and "SHAPE_MODE" not in env and "RC=0" in env
    write_cell(tmp_path / "n", _spec(cell_env="none"))
    assert not (tmp_path / "n/cell.env").exists() and (tmp_path / "n/run.log").exists()
    write_cell(tmp_path / "d", _spec(drop_env=("SHAPE_MODE",)))
    env = (tmp_path / "d/cell.env").read_text()
    assert "SHAPE_MODE" not in env and "ZL_DIRECT_REPEAT=100" in env


def _records(data: bytes):
    """A minimal independent reader: `[INFO] {json}` lines whose JSON parses."""
    out, fallback = [], False
    for raw in data.split(b"\n"):
        line = raw.rstrip(b"\r").decode("utf-8", "replace")
        if "BENCHMARK_DIRECT_NO_CUDAGRAPH" in line:
            fallback = True
        if not line.startswith("[INFO] {"):
            continue
        try:
            obj = json.loads(line[len("[INFO] ") :])
        except ValueError:
            continue
        if isinstance(obj, dict) and "result" in obj:
            out.append((obj, fallback))
            fallback = False
    return out


def _counted(row):
    lat = row.get("latency")
    return not row.get("error_msg") and isinstance(lat, (int, float)) and math.isfinite(lat) and lat > 0


def test_run_log_records_and_traps(tmp_path):
    rows = [
        RowSpec([[8]], 0.01),
        RowSpec({"N": 3}, None, error_msg="boom"),
        RowSpec([[8]], 0.02, op_name="other", dtype="float32"),
    ]
    spec = _spec(rows=rows, traps=("crlf", "ansi", "nan", "noise", "non_utf8"), fallback_record=1)
    write_cell(tmp_path / "c", spec)
    data = (tmp_path / "c/run.log").read_bytes()
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert b"\x1b[" in data
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    assert b"[INFO] [\r\n" in data  # the multi-line test-driver block
    recs = _records(data)
    assert [(r["op_name"], r["dtype"], fb) for r, fb in recs] == [
        ("topk", "torch.float16", False),
        ("other", "torch.float32", True),
    ]
    first = recs[0][0]["result"]
    assert len(first) == 3 and math.isnan(first[-1]["latency"])  # the nan trap's row
    assert "latency" not in first[1]  # latency None -> the field is missing
    expected = T.expected_rows(spec)
    assert len(expected) == 4 and sum(r["counted"] for r in expected) == 2
    assert [r["fallback"] for r in expected] == [False, False, False, True]


def test_run_log_truncated_dict_repr_empty(tmp_path):
    rows = [RowSpec([[8]], 0.01), RowSpec([[8]], 0.02, op_name="argsort")]
    write_cell(tmp_path / "t", _spec(rows=rows, traps=("truncated_tail",), rc=124))
    data = (tmp_path / "t/run.log").read_bytes()
    assert not data.endswith(b"\n")
    assert [r["op_name"] for r, _ in _records(data)] == ["topk"]
    write_cell(tmp_path / "d", _spec(traps=("dict_repr",)))
    data = (tmp_path / "d/run.log").read_text()
    assert "[INFO] {'op_name': 'topk'" in data
    assert len(_records(data.encode())) == 1
    write_cell(tmp_path / "e", _spec(traps=("empty",)))
    assert (tmp_path / "e/run.log").read_bytes() == b""
    assert T.expected_rows(_spec(traps=("empty",))) == []


def test_empty_dtype_rows_take_the_ops_default(tmp_path):
    write_cell(tmp_path / "r", _spec(op="rand", dtype="", rows=[RowSpec([[64, 64]], 0.005)]))
    ((rec, _),) = _records((tmp_path / "r/run.log").read_bytes())
    assert rec["dtype"] == "torch.float32"
    write_cell(tmp_path / "f", _spec(op="fft", dtype="", rows=[RowSpec([[1024]], 0.03)]))
    ((rec, _),) = _records((tmp_path / "f/run.log").read_bytes())
    assert rec["dtype"] == "torch.complex64"


# ------------------------------------------------------------ example tree


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    dest = tmp_path_factory.mktemp("ex") / "runs"
    return dest, make_example_tree(dest)


def _files(root: Path):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_example_tree_is_deterministic(example, tmp_path):
    dest, manifest = example
    again = make_example_tree(tmp_path / "runs")
    assert json.dumps(again, sort_keys=True) == json.dumps(manifest, sort_keys=True)
    a, b = _files(dest), _files(tmp_path / "runs")
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []


def test_example_tree_is_small_and_json(example):
    dest, manifest = example
    assert sum(len(v) for v in _files(dest).values()) < 1_500_000
    json.dumps(manifest, allow_nan=False)


def test_example_cells(example):
    dest, m = example
    cells = {p.parent.relative_to(dest).as_posix() for p in dest.rglob("run.log")}
    assert cells == set(m["cell_index"])
    assert m["cells"] == len(cells) == 72
    assert sorted(m["roots"]) == sorted(p.name for p in dest.iterdir())
    for rel, info in m["cell_index"].items():
        d = dest / rel
        env = d / "cell.env"
        assert env.exists() == (info["cell_env"] != "none"), rel
        if env.exists():
            last = max(p.stat().st_mtime_ns for p in d.rglob("*") if p.is_file())
            assert env.stat().st_mtime_ns == last, rel
            assert "RC=" in env.read_text()
        assert len(list(d.glob("triton_cache/*/*.ttgir"))) == info["ttgir"], rel


def test_example_rows_are_what_the_manifest_says(example):
    dest, m = example
    total = counted = 0
    for rel, info in m["cell_index"].items():
        recs = _records((dest / rel / "run.log").read_bytes())
        rows = [(r, fb) for rec, fb in recs for r in rec["result"]]
        assert len(rows) == info["rows"], rel
        assert sum(_counted(r) for r, _ in rows) == info["counted"], rel
        assert sum(fb for _, fb in rows) == info["fallback_rows"], rel
        total += len(rows)
        counted += sum(_counted(r) for r, _ in rows)
    assert (total, counted) == (m["rows"], m["counted_rows"])


def test_example_screen_verdicts(example):
    dest, m = example
    s = m["screen"]["ab_rlc_20261012_101500"]
    CH, NO = "IR_CHANGED", "NO_IR_DIFF"

    def v(key):
        return [s[key]["verdict"][r] for r in ("v1", "v2", "v3", "v4")]

    assert v("topk|float16") == [CH] * 4
    assert v("softmax|float32") == [CH, CH, NO, NO]
    assert v("abs|float16") == [CH, CH, CH, NO]
    assert v("rand|") == [CH, NO, NO, NO]
    assert v("fft|complex64") == ["NO_TRITON"] * 4
    assert v("slice_scatter|float16") == ["NO_ROWS"] * 4
    assert v("sort|bfloat16") == ["TRUNCATED"] * 4
    assert v("argmax|float16") == [NO] * 4
    assert v("mul|float16") == ["NO_ROWS"] * 4
    assert v("pad|") == [CH] * 4
    assert v("layer_norm|float16") in ([CH, CH, NO, NO], [CH] * 4)
    assert [round(x, 6) for x in s["topk|float16"]["ratios"]] == [1.08, 1.1, 1.1, 1.12]
    assert len(s["layer_norm|float16"]["ratios"]) == 3  # the NaN row is not counted
    for root, pairs in m["screen"].items():
        lines = (dest / root / "screen.tsv").read_text().splitlines()
        header = lines[0].split("\t")
        assert header == [
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
            "backend",
            "bench_level",
            "cudagraph",
            "isolate_tuner_cache",
            "direct_repeat",
            "shape_mode",
            "flagtune",
        ]
        got = {f"{r[0]}|{r[1]}": r[2] for r in (ln.split("\t") for ln in lines[1:])}
        assert got == {k: p["recorded"] for k, p in pairs.items()}
        assert all(p["recorded"] == p["verdict"]["v3"] for p in pairs.values())
    orig = (dest / "ab_rlc_20261012_101500/screen.tsv.orig").read_text()
    assert "\tNO_KERNEL\t" in orig and "NO_TRITON" not in orig
    assert s["fft|complex64"]["orig"] == "NO_KERNEL"
    assert not (dest / "ab_rlc_20261014_083000/screen.tsv.orig").exists()
    levels = {r: i["caliber"]["bench_level"] for r, i in m["root_info"].items()}
    assert levels["ab_rlc_20261015_120000"] == "comprehensive"
    assert levels["ab_rlc_20261012_101500"] == levels["ab_rlc_20261014_083000"] == "core"


def test_example_screen_ir_facts(example):
    """The verdicts rest on facts about the files the generator can check itself."""
    dest, m = example
    s = m["screen"]["ab_rlc_20261012_101500"]

    def texts(rel):
        return sorted((p.stem, p.read_text()) for p in (dest / rel).glob("triton_cache/*/*.ttgir"))

    for key, p in s.items():
        b, a = texts(p["cells"]["before"]), texts(p["cells"]["after"])
        v = p["verdict"]
        if {"NO_ROWS", "TRUNCATED", "NO_TRITON"} & set(v.values()):
            continue
        assert (b == a) == (v["v2"] == "NO_IR_DIFF"), key
        same3 = [(k, strip_rlc(t)) for k, t in b] == [(k, strip_rlc(t)) for k, t in a]
        assert same3 == (v["v3"] != "IR_CHANGED"), key
        same4 = [(k, strip_loc(strip_rlc(t))) for k, t in b] == [(k, strip_loc(strip_rlc(t))) for k, t in a]
        assert same4 == (v["v4"] != "IR_CHANGED"), key
    fft = s["fft|complex64"]["cells"]
    assert not (dest / fft["before"] / "triton_cache").exists()
    assert list((dest / fft["after"]).glob("triton_cache/*/__triton_launcher.so"))
    assert not list((dest / fft["after"]).rglob("*.ttgir"))


def test_example_trap_files(example):
    dest, _ = example
    r = dest / "ab_rlc_20261012_101500"
    before = (r / "layer_norm_float16_before/run.log").read_bytes()
    assert b"\r\n" in before and b"\x1b[" in before and b"NaN" in before
    with pytest.raises(UnicodeDecodeError):
        before.decode("utf-8")
    after = (r / "layer_norm_float16_after/run.log").read_bytes()
    assert b"[INFO] {'op_name'" in after and b"\r\n" in after
    assert not (r / "sort_bfloat16_after/run.log").read_bytes().endswith(b"\n")
    assert "RC=124" in (r / "sort_bfloat16_after/cell.env").read_text()
    assert (r / "mul_float16_after/run.log").read_bytes() == b""
    assert not (r / "argmax_float16_before/cell.env").exists()
    pad = _records((r / "pad_before/run.log").read_bytes())
    assert {(x["op_name"], x["dtype"]) for x, _ in pad} == {
        ("pad", "torch.float16"),
        ("constant_pad_nd", "torch.float16"),
        ("pad", "torch.float32"),
        ("constant_pad_nd", "torch.float32"),
    }
    assert all(
        e["error_msg"]
        for x, _ in _records((r / "slice_scatter_float16_after/run.log").read_bytes())
        for e in x["result"]
    )
    for root in ("ab_rlc_20261014_083000", "ab_rlc_20261015_120000"):
        for d in (dest / root).iterdir():
            if d.is_dir():
                assert (d / "cell.env").exists()


def test_example_campaign(example):
    dest, m = example
    c = m["campaign"]
    root = dest / c["root"]
    env = dict(ln.split("=", 1) for ln in (root / "campaign.env").read_text().splitlines())
    assert env["KIND"] == "campaign" and env["ROUNDS"] == "3" and env["CARDS"] == "3"
    assert "SHAPE_MODE" not in env
    assert (root / env["SCREEN_ROOT"]).resolve() == (dest / "ab_rlc_20261012_101500").resolve()
    part = (root / "partition.tsv").read_text().splitlines()
    assert part[0] == "card\top\tdtype\tweight_min"
    assert len(part) - 1 == len(c["partition"])
    assert len(list((root / "card1").glob("ab_*"))) == 2
    assert c["cells"] == 36
    for cell in root.rglob("cell.env"):
        e = dict(ln.split("=", 1) for ln in cell.read_text().splitlines())
        assert e["ZL_ISOLATE_TUNER_CACHE"] == "1" and "CARD" in e and "ROUND" in e
        assert cell.parent.parent.name == f"r{e['ROUND']}"
        assert cell.parent.parent.parent.parent.parent.name == f"card{e['CARD']}"
    reasons = {r["reason"] for r in c["rejected"]}
    assert reasons == {"MISSING_SIDE", "NOT_COUNTED", "CALIBER_MISMATCH", "CALIBER_UNKNOWN"}
    assert {tuple(r["fields"]) for r in c["rejected"] if r["reason"] == "CALIBER_MISMATCH"} == {("direct_repeat",)}
    assert {tuple(r["fields"]) for r in c["rejected"] if r["reason"] == "CALIBER_UNKNOWN"} == {("shape_mode",)}
    counts = {len(v["ratios"]) for v in c["ranges"].values()}
    assert 2 in counts and 3 in counts  # even and odd medians
    assert any(v["fallback"] for v in c["ranges"].values())
    assert not all(v["fallback"] for v in c["ranges"].values())
    for key, v in c["ranges"].items():
        op, dtype, shape = key.split("|", 2)
        assert dtype and not dtype.startswith("torch.")
        assert json.dumps(json.loads(shape), sort_keys=True, separators=(",", ":")) == shape
        assert v["ratios"] == sorted(v["ratios"])
    assert "rand|float32|[[64,64]]" in c["ranges"]


# ------------------------------------------------------------------ corpus


def test_campaign_corpus_tiny(tmp_path):
    m = make_campaign_corpus(tmp_path / "c", cards=2, ops=3, rounds=2, rows=5, kernels=2, kb=(5, 6))
    camp = tmp_path / "c/campaign_20261013_090000"
    screen = tmp_path / "c/ab_rlc_20261012_101500"
    campaign_cells = [p.parent for p in camp.rglob("cell.env")]
    screen_cells = [p.parent for p in screen.rglob("cell.env")]
    assert len(campaign_cells) == m["campaign_cells"] == 2 * 3 * 2 * 2
    assert len(screen_cells) == m["screen_cells"] == 2 * 3 * 2
    assert m["cells"] == 36
    ttgir = list((tmp_path / "c").rglob("*.ttgir"))
    assert len(ttgir) == m["ttgir_files"] == 36 * 2
    assert all(4000 <= p.stat().st_size <= 7300 for p in ttgir)
    assert m["rows"] == 36 * 5
    assert sum(p.stat().st_size for p in (tmp_path / "c").rglob("*") if p.is_file()) == m["bytes"]
    part = (camp / "partition.tsv").read_text().splitlines()
    assert part[0] == "card\top\tdtype\tweight_min" and len(part) == 7
    assert {p.parent.parent.name for p in campaign_cells} == {op for op in (ln.split("\t")[1] for ln in part[1:])}
    tsv = (screen / "screen.tsv").read_text().splitlines()
    assert len(tsv) == 7
    # deterministic
    m2 = make_campaign_corpus(tmp_path / "d", cards=2, ops=3, rounds=2, rows=5, kernels=2, kb=(5, 6))
    assert _files(tmp_path / "c") == _files(tmp_path / "d")
    assert {k: v for k, v in m.items() if k not in ("dest", "seconds")} == {
        k: v for k, v in m2.items() if k not in ("dest", "seconds")
    }


def test_cli(tmp_path, capsys):
    dest = tmp_path / "runs"
    assert T.main([str(dest)]) == 0
    assert (dest / "ab_rlc_20261012_101500/screen.tsv").exists()
    assert T.main([str(dest)]) == 0  # regenerates over its own tree
    (dest / "precious.txt").write_text("x")
    with pytest.raises(SystemExit):
        T.main([str(dest)])
    assert (dest / "precious.txt").exists()
    out = tmp_path / "corpus"
    assert T.main(["--corpus", "--scale", "0.02", "--cards", "2", "--rounds", "1", str(out)]) == 0
    assert len(list(out.rglob("cell.env"))) == 2 * 1 * 1 * 2 + 2 * 2
