"""Realistic `runs/` trees, generated: for the tests, the benchmarks and the demo.

The suite's test oracle: it knows what every tree it writes SHOULD give
(its own verdict precedence, median and fingerprint identities, from its own
spec), so it lives here under tests/, not in the package. Deterministic
given a seed: the same call writes the same bytes. Of zlstore it reads only
the caliber fields.

* `ttgir_text` - Triton GPU IR (MLIR) the way Triton dumps it, with the knobs
  the fingerprint rules care about: real code (`variant`, `convert_layouts`),
  the switch's `ttg.rlc-*` annotations (`rlc`), FlagGems' cache path in the
  `loc(...)` information (`loc_root`) and size (`target_bytes`).
* `RowSpec` / `CellSpec` / `write_cell` - one cell directory (run.log,
  triton_cache/, index.tsv, cell.env written last) with the run.log traps real
  logs have (CRLF, ANSI colours, dict reprs, a tail cut by a timeout kill,
  non-UTF-8 bytes, an empty file, NaN latencies, test-driver noise).
* `make_example_tree` - the small demo/test tree (three screening roots, one
  campaign) covering every verdict, every trap and every rejection reason; it
  returns a manifest of what each pair and row SHOULD give, computed from this
  module's own spec (never by calling the parser, the rules or the SQL).
* `make_campaign_corpus` - the benchmark corpus (scale 1: 8 cards x 60 ops x 6
  rounds x 2 sides = 5,760 cells, ~115k rows, 17,280 .ttgir files) plus the
  screening root it was planned from.

    python -m tests.generator examples/runs            # the example tree (from the checkout's top)
    python -m tests.generator --corpus --scale 1 DEST  # the benchmark corpus
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from zlstore.caliber import CALIBER_FIELDS

__all__ = [
    "DEFAULT_LOC_ROOT",
    "RowSpec",
    "CellSpec",
    "ttgir_text",
    "write_cell",
    "cell_dir_name",
    "make_example_tree",
    "make_campaign_corpus",
    "main",
]

DEFAULT_LOC_ROOT = "/root/.flaggems/code_cache"
SWITCH = "FLAGTREE_MUSA_RLC_ENHANCE"
HOST = "s5000-node3"
TRAPS = ("crlf", "ansi", "dict_repr", "truncated_tail", "non_utf8", "empty", "nan", "noise")
TIMEOUT_RCS = (124, 137)  # contract: a cell killed at CELL_TIMEOUT
RULES = ("v1", "v2", "v3", "v4")

# caliber env var -> caliber field name (the single definition is zlstore.caliber)
_CAL_ENV = tuple(f.env for f in CALIBER_FIELDS)
_CAL_NAME = {f.env: f.name for f in CALIBER_FIELDS}

# The caliber of the example screening roots: musa, core, 1, 1, 100, file, 0:
# the caliber a campaign measures under (campaigns force
# ZL_ISOLATE_TUNER_CACHE=1), so that the screens' noise floors apply to
# the campaign's ranges.
SCREEN_CALIBER = {
    "ZL_BACKEND": "musa",
    "BENCH_LEVEL": "core",
    "ZL_ENABLE_CUDAGRAPH": "1",
    "ZL_ISOLATE_TUNER_CACHE": "1",
    "ZL_DIRECT_REPEAT": "100",
    "SHAPE_MODE": "file",
    "USE_FLAGTUNE": "0",
}
# Campaigns force ZL_ISOLATE_TUNER_CACHE=1.
CAMPAIGN_CALIBER = dict(SCREEN_CALIBER, ZL_ISOLATE_TUNER_CACHE="1")

# An operator's own dtype when a cell was run without one.
_OP_DEFAULT_DTYPE = {"fft": "complex64", "rfft": "complex64", "ifft": "complex64"}


def _h(*parts: Any) -> int:
    """A stable 64-bit hash (Python's hash() is salted per process)."""
    data = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def canonical_shape(shape: Any) -> str:
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


# ====================================================================== ttgir

_ELEM = ("f16", "f32", "bf16")
_SPT = (1, 2, 4, 8)
_UNARY = ("math.absf", "math.exp", "math.sqrt", "math.log", "arith.negf", "math.exp2", "math.rsqrt")
_TRITON_STD = "/usr/local/lib/python3.10/site-packages/triton/language/standard.py"
_RLC_STAMPS = (" {ttg.rlc-phase = 2 : i32}", ' {"ttg.rlc-phase" = 3 : i32}', ', "ttg.rlc-origin" = "phase3"')


class _IR:
    """Builds one .ttgir text: SSA values, loc definitions, layouts."""

    def __init__(self, path: str, first_line: int, canon_path: str):
        self.path = path
        # Sizes are counted as if with the default loc root and without rlc
        # annotations, so neither can change how much padding a text gets.
        self.path_delta = len(canon_path) - len(path)
        self.lines: List[str] = []
        self.locs: List[str] = []  # #loc1.. definitions, in order
        self.n = 0
        self.src_line = first_line + 1
        self.size = 0

    def val(self) -> str:
        v = f"%{self.n}"
        self.n += 1
        return v

    def loc(self, col: int = 0, *, unknown: bool = False, name: Optional[str] = None, std: bool = False) -> str:
        """A new #locN, defined at the bottom; returns its reference."""
        if unknown:
            text = "loc(unknown)"
        else:
            self.src_line += 1
            text = f'loc("{self.path}":{self.src_line}:{col})'
        ref = self._def(text)
        if std:  # an inlined triton.language helper: loc(callsite(#a at #b))
            inner = self._def(f'loc("{_TRITON_STD}":{180 + ref % 97}:{11 + ref % 23})')
            ref = self._def(f"loc(callsite(#loc{inner} at #loc{ref}))")
        if name is not None:
            ref = self._def(f'loc("{name}"(#loc{ref}))')
        return f"#loc{ref}"

    def _def(self, text: str) -> int:
        self.locs.append(text)
        n = len(self.locs)
        self.size += len(text) + 9 + len(str(n))  # "#locN = " + text + "\n"
        if text.startswith(f'loc("{self.path}"'):
            self.size += self.path_delta
        return n

    def op(self, text: str, loc: str) -> None:
        line = f"    {text} loc({loc})"
        self.lines.append(line)
        self.size += len(line) + 1
        if "ttg.rlc-" in line:
            for stamp in _RLC_STAMPS:
                if stamp in line:
                    self.size -= len(stamp)


def ttgir_text(  # noqa: C901 -- the test oracle: a generated tree's cases are its branches
    kernel: str,
    *,
    variant: int = 0,
    convert_layouts: int = 2,
    rlc: bool = False,
    loc_root: str = DEFAULT_LOC_ROOT,
    target_bytes: Optional[int] = None,
    seed: int = 0,
) -> str:
    """Realistic Triton GPU IR for a kernel named `kernel`.

    Deterministic in its arguments. `variant` (every value distinct) and
    `convert_layouts` (the exact number of `ttg.convert_layout` ops) change real
    code; `seed` changes the padding ops (real code too) when `target_bytes`
    asks for padding. `rlc=True` adds `ttg.rlc-*` annotations and nothing else:
    a bare `{ttg.rlc-phase = 2 : i32}` dictionary on the first load and on the
    first convert_layout, a quoted `{"ttg.rlc-phase" = 3 : i32}` on the store,
    `"ttg.rlc-origin" = "phase3"` appended to make_range's dictionary, a
    module-level `"ttg.rlc-enhance" = true` in the middle of the module's
    dictionary, and a bare one on some padding ops. `loc_root` changes only the
    `#locN = loc("<loc_root>/<kernel>.py":L:C)` definition lines.
    """
    if convert_layouts < 0:
        raise ValueError("convert_layouts must be >= 0")
    h = _h("ttgir", kernel)
    ety = _ELEM[h % 3]
    block = (256, 512, 1024, 2048)[(h >> 4) % 4]
    warps = (4, 8)[(h >> 8) % 2]
    n_in = 1 + (h >> 9) % 2
    spt0 = _SPT[(h >> 10) % 4]
    spt1 = [x for x in _SPT if x != spt0][((h >> 14) + variant) % 3]
    main_op = _UNARY[((h >> 12) + variant) % len(_UNARY)]
    first_line = 10 + (h >> 16) % 40
    path = f"{loc_root}/{kernel}.py"
    canon_path = f"{DEFAULT_LOC_ROOT}/{kernel}.py"
    ir = _IR(path, first_line, canon_path)

    def tens(layout: str, et: str = ety) -> str:
        return f"tensor<{block}x{et}, {layout}>"

    def ptrs(layout: str) -> str:
        return f"tensor<{block}x!tt.ptr<{ety}>, {layout}>"

    # ---- function body
    cst = f"%c{block}_i32"
    ir.lines.append(f"    {cst} = arith.constant {block} : i32 loc({ir.loc(unknown=True)})")
    pid = ir.val()
    ir.op(f"{pid} = tt.get_program_id x : i32", ir.loc(24, name="pid"))
    start = ir.val()
    ir.op(f"{start} = arith.muli {pid}, {cst} : i32", ir.loc(24, name="block_start"))
    offsets: Dict[str, Tuple[str, str]] = {}
    first_range = [True]

    def offs(layout: str) -> Tuple[str, str]:
        """Offsets and mask in a layout (rematerialized per layout, as Triton does)."""
        if layout in offsets:
            return offsets[layout]
        rng = ir.val()
        attrs = f"end = {block} : i32, start = 0 : i32"
        if rlc and first_range[0]:
            attrs += ', "ttg.rlc-origin" = "phase3"'
        first_range[0] = False
        ir.op(f"{rng} = tt.make_range {{{attrs}}} : {tens(layout, 'i32')}", ir.loc(41))
        spl = ir.val()
        loc = ir.loc(28)
        ir.op(f"{spl} = tt.splat {start} : i32 -> {tens(layout, 'i32')}", loc)
        off = ir.val()
        ir.op(f"{off} = arith.addi {spl}, {rng} : {tens(layout, 'i32')}", ir.loc(28, name="offsets"))
        lim = ir.val()
        loc = ir.loc(21)
        ir.op(f"{lim} = tt.splat %arg{n_in + 1} : i32 -> {tens(layout, 'i32')}", loc)
        mask = ir.val()
        ir.op(f"{mask} = arith.cmpi slt, {off}, {lim} : {tens(layout, 'i32')}", ir.loc(21, name="mask"))
        offsets[layout] = (off, mask)
        return off, mask

    off, mask = offs("#blocked")
    loaded = []
    for i in range(n_in):
        p = ir.val()
        loc = ir.loc(24 + i * 8)
        ir.op(f"{p} = tt.splat %arg{i} : !tt.ptr<{ety}> -> {ptrs('#blocked')}", loc)
        q = ir.val()
        ir.op(f"{q} = tt.addptr {p}, {off} : {ptrs('#blocked')}, {tens('#blocked', 'i32')}", loc)
        x = ir.val()
        stamp = " {ttg.rlc-phase = 2 : i32}" if (rlc and i == 0) else ""
        ir.op(f"{x} = tt.load {q}, {mask}{stamp} : {ptrs('#blocked')}", ir.loc(16, name=f"x{i}"))
        loaded.append(x)
    layout = "#blocked"
    cur = loaded[0]
    if n_in == 2:
        v = ir.val()
        ir.op(f"{v} = arith.addf {loaded[0]}, {loaded[1]} : {tens(layout)}", ir.loc(17))
        cur = v
    v = ir.val()
    ir.op(f"{v} = {main_op} {cur} : {tens(layout)}", ir.loc(16, std=main_op in ("math.exp2", "math.rsqrt")))
    cur = v
    if variant:  # a different constant folded into the kernel: every variant is distinct code
        c = f"%cst_{variant}"
        ir.op(f"{c} = arith.constant dense<{1 + variant / 8:.6e}> : {tens(layout)}", ir.loc(unknown=True))
        v = ir.val()
        ir.op(f"{v} = arith.mulf {cur}, {c} : {tens(layout)}", ir.loc(18))
        cur = v
    prev = cur
    for j in range(convert_layouts):
        dst = "#blocked1" if layout == "#blocked" else "#blocked"
        v = ir.val()
        stamp = " {ttg.rlc-phase = 2 : i32}" if (rlc and j == 0) else ""
        ir.op(f"{v} = ttg.convert_layout {cur}{stamp} : {tens(layout)} -> {tens(dst)}", ir.loc(8))
        layout = dst
        w = ir.val()
        kind = _UNARY[(h + j + variant) % len(_UNARY)]
        ir.op(f"{w} = {kind} {v} : {tens(layout)}", ir.loc(20))
        prev, cur = v, w
    # ---- padding up to target_bytes: more elementwise work, realistic ops
    if target_bytes:
        rnd = random.Random(_h("pad", kernel, variant, seed))
        # the store and return still to come, the head and the module's closing lines
        tail_estimate = 560 + 3 * (len(canon_path) + 30) + (4 * (len(canon_path) + 50) if layout != "#blocked" else 0)
        header_estimate = 560 + len(canon_path) + 30 + n_in * 110
        k = 0
        while header_estimate + ir.size + tail_estimate < target_bytes:
            t = tens(layout)
            choice = rnd.randrange(9)
            stamp = " {ttg.rlc-phase = 2 : i32}" if (rlc and k % 9 == 4) else ""
            k += 1
            v = ir.val()
            if choice == 0:
                ir.op(f"{v} = arith.mulf {cur}, {prev}{stamp} : {t}", ir.loc(rnd.randrange(8, 40)))
            elif choice == 1:
                ir.op(f"{v} = arith.addf {cur}, {prev}{stamp} : {t}", ir.loc(rnd.randrange(8, 40)))
            elif choice == 2:
                ir.op(f"{v} = arith.subf {cur}, {prev}{stamp} : {t}", ir.loc(rnd.randrange(8, 40)))
            elif choice == 3:
                ir.op(f"{v} = arith.maxnumf {cur}, {prev}{stamp} : {t}", ir.loc(rnd.randrange(8, 40), std=True))
            elif choice == 4:
                ir.op(f"{v} = math.fma {cur}, {prev}, {cur}{stamp} : {t}", ir.loc(rnd.randrange(8, 40)))
            elif choice == 5:
                c = v
                ir.op(f"{c} = arith.cmpf ogt, {cur}, {prev}{stamp} : {t}", ir.loc(rnd.randrange(8, 40)))
                v = ir.val()
                ir.op(
                    f"{v} = arith.select {c}, {cur}, {prev} : {tens(layout, 'i1')}, {t}",
                    ir.loc(rnd.randrange(8, 40), std=True),
                )
            elif choice == 6 and ety != "f32":
                ir.op(f"{v} = arith.extf {cur}{stamp} : {t} to {tens(layout, 'f32')}", ir.loc(rnd.randrange(8, 40)))
                w = ir.val()
                loc = ir.loc(rnd.randrange(8, 40))
                ir.op(f"{w} = math.exp {v} : {tens(layout, 'f32')}", loc)
                v = ir.val()
                ir.op(f"{v} = arith.truncf {w} : {tens(layout, 'f32')} to {t}", loc)
            else:
                op = _UNARY[rnd.randrange(len(_UNARY))]
                ir.op(f"{v} = {op} {cur}{stamp} : {t}", ir.loc(rnd.randrange(8, 40)))
            prev, cur = cur, v
    # ---- store, in the layout the value ended in
    soff, smask = offs(layout)
    p = ir.val()
    loc = ir.loc(26)
    out = f"%arg{n_in}"
    ir.op(f"{p} = tt.splat {out} : !tt.ptr<{ety}> -> {ptrs(layout)}", loc)
    q = ir.val()
    ir.op(f"{q} = tt.addptr {p}, {soff} : {ptrs(layout)}, {tens(layout, 'i32')}", loc)
    stamp = ' {"ttg.rlc-phase" = 3 : i32}' if rlc else ""
    ir.op(f"tt.store {q}, {cur}, {smask}{stamp} : {ptrs(layout)}", ir.loc(26))
    ir.op("tt.return", ir.loc(4))

    # ---- assemble
    args = []
    for i in range(n_in):
        args.append(f'%arg{i}: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("in{i}_ptr"(#loc))')
    args.append(f'%arg{n_in}: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("out0_ptr"(#loc))')
    args.append(f'%arg{n_in + 1}: i32 {{tt.divisibility = 16 : i32}} loc("num_tasks"(#loc))')
    mod = f'"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = {warps} : i32'
    if rlc:
        mod += ', "ttg.rlc-enhance" = true'
    mod += ', ttg.target = "musa:31", "ttg.threads-per-warp" = 32 : i32'
    head = [
        f"#blocked = #ttg.blocked<{{sizePerThread = [{spt0}], threadsPerWarp = [32], "
        f"warpsPerCTA = [{warps}], order = [0]}}>",
        f"#blocked1 = #ttg.blocked<{{sizePerThread = [{spt1}], threadsPerWarp = [32], "
        f"warpsPerCTA = [{warps}], order = [0]}}>",
        f'#loc = loc("{path}":{first_line}:0)',
        "#shared = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0]}>",
        "#smem = #ttg.shared_memory",
        f"module attributes {{{mod}}} {{",
        f"  tt.func public @{kernel}({', '.join(args)}) attributes {{noinline = false}} {{",
    ]
    tail = ["  } loc(#loc)", "} loc(#loc)"]
    tail += [f"#loc{i} = {text}" for i, text in enumerate(ir.locs, 1)]
    return "\n".join(head + ir.lines + tail) + "\n"


# ============================================================== cells


@dataclass
class RowSpec:
    """One FlagGems result row."""

    shape: Any  # shape_detail: list, nested list or dict
    latency: Optional[float]  # FlagGems latency in ms; None -> the field is missing
    latency_base: Optional[float] = None  # torch latency; None -> derived from latency (x1.07)
    error_msg: Optional[str] = None
    op_name: Optional[str] = None  # default: the cell's op
    dtype: Optional[str] = None  # default: the cell's dtype (or the op's default set's first)


@dataclass
class CellSpec:
    op: str
    dtype: str
    side: str
    round: int
    card: int
    rc: int = 0
    elapsed_s: float = 30.0
    started_at: str = "2026-10-12T10:15:00"
    caliber: Dict[str, str] = field(default_factory=lambda: dict(SCREEN_CALIBER))
    rows: List[RowSpec] = field(default_factory=list)
    kernels: Dict[str, str] = field(default_factory=dict)  # kernel name -> ttgir text
    index_tsv: bool = True
    cell_env: str = "full"  # "full" | "partial" | "none"
    fallback_record: Optional[int] = None
    traps: Tuple[str, ...] = ()
    extra_env: Dict[str, str] = field(default_factory=dict)
    # Extensions (not in the original brief):
    drop_env: Tuple[str, ...] = ()  # cell.env keys to leave out (on top of cell_env)
    launcher_only: bool = False  # no kernels, but a triton_cache/<hash>/ launcher dir
    noise: bool = True  # pytest/table noise around the records

    def __post_init__(self):
        if self.side not in ("before", "after"):
            raise ValueError(f"side must be before/after, not {self.side!r}")
        if self.cell_env not in ("full", "partial", "none"):
            raise ValueError(f"cell_env must be full/partial/none, not {self.cell_env!r}")
        bad = [t for t in self.traps if t not in TRAPS]
        if bad:
            raise ValueError(f"unknown traps {bad}; known: {TRAPS}")


# "partial" cell.env: what an older harness did not write yet.
PARTIAL_DROPS = ("DTYPE", "ZL_DIRECT_REPEAT", "SHAPE_MODE", "USE_FLAGTUNE")


def cell_dir_name(op: str, dtype: str, side: str) -> str:
    """A screening root's cell dir name: <op>[_<dtype>]_<side>."""
    return f"{op}_{dtype}_{side}" if dtype else f"{op}_{side}"


def _row_dtype(spec: CellSpec, row: RowSpec) -> str:
    if row.dtype:
        return row.dtype
    if spec.dtype:
        return spec.dtype
    return _OP_DEFAULT_DTYPE.get(row.op_name or spec.op, "float32")


def _groups(spec: CellSpec) -> List[Tuple[Tuple[str, str], List[RowSpec]]]:
    """Rows grouped into records: one per (op_name, dtype), in first-seen order."""
    out: Dict[Tuple[str, str], List[RowSpec]] = {}
    for row in spec.rows:
        out.setdefault((row.op_name or spec.op, _row_dtype(spec, row)), []).append(row)
    return list(out.items())


_NAN_SHAPE = [[1, 1]]


def _counted(latency: Optional[float], error_msg: Optional[str]) -> bool:
    return error_msg is None and latency is not None and math.isfinite(latency) and latency > 0


def expected_rows(spec: CellSpec) -> List[dict]:
    """The rows a correct parser reads from the run.log `write_cell` writes for
    `spec`: {op, dtype, shape (canonical JSON), latency, counted, fallback}.
    Derived from the spec (the trap semantics below), not from parsing."""
    if "empty" in spec.traps:
        return []
    groups = _groups(spec)
    if "truncated_tail" in spec.traps:
        groups = groups[:-1]  # the last record is cut mid-JSON
    out = []
    for gi, ((op_name, dtype), rows) in enumerate(groups):
        fb = spec.fallback_record == gi
        for r in rows:
            out.append(
                {
                    "op": op_name,
                    "dtype": dtype,
                    "shape": canonical_shape(r.shape),
                    "latency": r.latency,
                    "counted": _counted(r.latency, r.error_msg),
                    "fallback": fb,
                }
            )
        if gi == 0 and "nan" in spec.traps:
            out.append(
                {
                    "op": op_name,
                    "dtype": dtype,
                    "shape": canonical_shape(_NAN_SHAPE),
                    "latency": math.nan,
                    "counted": False,
                    "fallback": fb,
                }
            )
    return out


# ---------------------------------------------------------------- run.log

_BENCH_FILE = {
    "topk": "test_special_perf.py",
    "sort": "test_special_perf.py",
    "argsort": "test_special_perf.py",
    "softmax": "test_reduction_perf.py",
    "layer_norm": "test_norm_perf.py",
    "argmax": "test_reduction_perf.py",
    "fft": "test_special_perf.py",
    "rand": "test_tensor_constructor_perf.py",
    "slice_scatter": "test_select_and_slice_perf.py",
    "pad": "test_special_perf.py",
    "constant_pad_nd": "test_special_perf.py",
}


def _bench_file(op: str) -> str:
    return "benchmark/" + _BENCH_FILE.get(op, "test_unary_pointwise_perf.py")


def _num(x: Optional[float]) -> str:
    if x is None:
        return "None"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.6f}"


def _base(r: RowSpec) -> Optional[float]:
    """The torch latency written for a row (derived when the spec leaves it out)."""
    lat = r.latency
    if r.latency_base is None and lat is not None and math.isfinite(lat) and lat > 0:
        return round(lat * 1.07, 6)
    return r.latency_base


def _record(op_name: str, dtype: str, level: str, rows: List[RowSpec], nan_row: bool) -> dict:
    result = []
    for r in rows:
        lat = r.latency
        base = _base(r)
        d: Dict[str, Any] = {"legacy_shape": None, "shape_detail": r.shape, "latency_base": base}
        if lat is not None:
            d["latency"] = lat
        speed = None
        if base is not None and lat is not None and lat != 0 and math.isfinite(base) and math.isfinite(lat):
            speed = base / lat
        d.update(
            {
                "gbps_base": None,
                "gbps": None,
                "speedup": speed,
                "accuracy": None,
                "tflops": None,
                "utilization": None,
                "compared_speedup": None,
                "error_msg": r.error_msg,
            }
        )
        result.append(d)
    if nan_row:
        result.append(
            {
                "legacy_shape": None,
                "shape_detail": _NAN_SHAPE,
                "latency_base": math.inf,
                "latency": math.nan,
                "gbps_base": None,
                "gbps": None,
                "speedup": math.nan,
                "accuracy": None,
                "tflops": None,
                "utilization": None,
                "compared_speedup": None,
                "error_msg": None,
            }
        )
    return {"op_name": op_name, "dtype": f"torch.{dtype}", "mode": "kernel", "level": level, "result": result}


def _table(op_name: str, dtype: str, level: str, rows: List[RowSpec], ansi: bool) -> List[str]:
    out = [
        f"Operator: {op_name}  Performance Test (dtype=torch.{dtype}, mode=kernel,level={level})",
        "Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail",
        "-" * 95,
    ]
    for r in rows:
        ok = _counted(r.latency, r.error_msg)
        status = "SUCCESS" if ok else "FAILED"
        if ansi:
            status = ("\x1b[32m" if ok else "\x1b[31m") + status + "\x1b[0m"
        sp = ""
        base = _base(r)
        if ok and base:
            assert r.latency is not None  # counted: a finite positive latency
            sp = f"{base / r.latency:.3f}"
        out.append(f"{status:<12}{_num(base):>18}{_num(r.latency):>20}{sp:>21}          {r.shape}")
        if r.error_msg:
            out.append(f"    {r.error_msg}")
    out.append("")
    return out


def _fmt_time(started_at: str, plus_s: float) -> str:
    try:
        t = _dt.datetime.fromisoformat(started_at) + _dt.timedelta(seconds=plus_s)
    except ValueError:
        return "00:00:00"
    return t.strftime("%H:%M:%S")


def render_run_log(spec: CellSpec) -> bytes:  # noqa: C901 -- the test oracle: a generated tree's cases are its branches
    """The bytes of a cell's run.log (see `expected_rows` for what it holds)."""
    traps = set(spec.traps)
    if "empty" in traps:
        return b""
    ansi = "ansi" in traps
    level = spec.caliber.get("BENCH_LEVEL", "core") or "core"
    groups = _groups(spec)
    L: List[str] = []
    hhmm = _fmt_time(spec.started_at, 0)
    if "noise" in traps:
        L += [
            "nohup: ignoring input",
            f"[INFO] Test started at ... {spec.started_at.replace('T', ' ')}",
            "[INFO] PyTorch detected ... 2.5.0",
            "[INFO] flag_gems vendor detection ... mthreads",
            f"[INFO] [{hhmm}][GPU  {spec.card}] benchmark {spec.op:<40} ...",
        ]
    if ansi:
        L.append("\x1b[35mSYMBOL_REWRITE \x1b[0m\x1b[32mtorch success\x1b[0m")
    if spec.noise:
        L.append("[INFO] Benchmark record logger enabled")
    if "dict_repr" in traps:
        # FlagGems --query mode: a Python dict repr, not a measurement record.
        op_name, dtype = groups[0][0] if groups else (spec.op, spec.dtype or "float32")
        shapes = [r.shape for r in (groups[0][1] if groups else [])]
        L.append(
            "[INFO] "
            + repr(
                {
                    "op_name": op_name,
                    "dtype": f"torch.{dtype}",
                    "mode": "query",
                    "level": level,
                    "shape_detail": shapes,
                    "recorded": False,
                    "latency": None,
                }
            )
        )
    if spec.noise:
        bar = "=" * 29
        sess = f"{bar} test session starts {bar}"
        L += [
            ("\x1b[1m" + sess + "\x1b[0m") if ansi else sess,
            "platform linux -- Python 3.10.12, pytest-8.3.2, pluggy-1.5.0",
            "rootdir: /root/FlagGems",
            "configfile: pytest.ini",
            "plugins: anyio-4.4.0",
            f"collecting ... collected {len(groups) or 1} item" + ("s" if len(groups) > 1 else ""),
            "",
        ]
    cut: Optional[str] = None
    for gi, ((op_name, dtype), rows) in enumerate(groups):
        if spec.noise:
            L.append(f"{_bench_file(op_name)}::test_perf_{op_name} ")
        if spec.fallback_record == gi:
            L.append(
                f"[WARNING] BENCHMARK_DIRECT_NO_CUDAGRAPH: graph capture unsupported for "
                f"{op_name}, timing with direct repeat"
            )
        if spec.noise:
            L += _table(op_name, dtype, level, rows, ansi)
        line = "[INFO] " + json.dumps(_record(op_name, dtype, level, rows, gi == 0 and "nan" in traps))
        if "truncated_tail" in traps and gi == len(groups) - 1:
            cut = line[: max(40, int(len(line) * 0.6))]
            break
        L.append(line)
        if spec.noise:
            L.append(("\x1b[32mPASSED\x1b[0m" if ansi else "PASSED"))
    if cut is None:
        if spec.noise:
            bar = "=" * 24
            fin = f"{bar} {len(groups)} passed in {spec.elapsed_s:.2f}s {bar}"
            L += ["", ("\x1b[32m" + fin + "\x1b[0m") if ansi else fin]
        if "noise" in traps:
            L += [
                f"[INFO] [{_fmt_time(spec.started_at, spec.elapsed_s)}][GPU  {spec.card}] "
                f"benchmark {spec.op:<40} [OK {spec.elapsed_s:>12.1f}s]  (100%   1/1 ops)",
                "[INFO] [",
                f'    {{"op_name": "{spec.op}", "gpu": {spec.card}, "status": "OK", "elapsed_s": {spec.elapsed_s}}},',
                f'    {{"op_name": "{spec.op}_backward", "gpu": {spec.card}, "status": "SKIP", "elapsed_s": 0.0}}',
                "]",
                "[INFO] Test completed.",
            ]
    body = "\n".join(L) + "\n"
    if cut is not None:
        body += cut  # killed mid-line: no newline at the end
    data = body.encode("utf-8")
    if "non_utf8" in traps:
        # A vendor tool's GBK-encoded message and a stray 0xff byte.
        bad = b"[WARNING] musa driver: " + "\u8bbe\u5907".encode("gbk") + b" MTT S5000 \xff\xfe ready\n"
        first_nl = data.find(b"\n") + 1
        data = data[:first_nl] + bad + data[first_nl:]
    if "crlf" in traps:
        data = data.replace(b"\n", b"\r\n")
    return data


# ---------------------------------------------------------------- writing

_BYTES = [0]  # bytes written by _write since import (the corpus reports it)


def _write(path, data: Any) -> None:
    """Every file the generator writes goes through here (plain open().write)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(path, "wb", buffering=0) as f:
        f.write(data)
    _BYTES[0] += len(data)


_HASH_CACHE: Dict[Tuple[str, str, str], str] = {}


def cache_hash(kernel: str, side: str, text: str) -> str:
    """A Triton-style cache key (base32 sha256). The switch's environment is
    part of Triton's key, so it differs by side even for identical IR."""
    key = (kernel, side, text)
    v = _HASH_CACHE.get(key)
    if v is None:
        if len(_HASH_CACHE) > 20000:
            _HASH_CACHE.clear()
        d = hashlib.sha256(f"{kernel}\x00{side}\x00".encode() + text.encode()).digest()
        v = base64.b32encode(d).decode().rstrip("=")
        _HASH_CACHE[key] = v
    return v


def index_tsv_bytes(spec: CellSpec) -> bytes:
    lines = []
    for name, text in spec.kernels.items():
        hsh = cache_hash(name, spec.side, text)
        lines.append(f"{name}\t{hsh}\ttriton_cache/{hsh}/{name}.ttgir\n")
    return "".join(lines).encode()


def _warps(text: str) -> int:
    i = text.find('"ttg.num-warps" = ', 0, 4000)
    if i < 0:
        return 4
    j = i + len('"ttg.num-warps" = ')
    return int(text[j : text.find(" ", j)])


def _siblings(name: str, hsh: str, text: str) -> Dict[str, str]:
    warps = _warps(text)
    meta = {
        "hash": hsh,
        "target": {"backend": "musa", "arch": 31, "warp_size": 32},
        "num_warps": warps,
        "num_ctas": 1,
        "num_stages": 3 if warps == 4 else 2,
        "maxnreg": None,
        "debug": False,
        "name": name,
        "shared": 0,
    }
    return {
        ".json": json.dumps(meta),
        ".ttir": (
            f"module {{\n  tt.func public @{name}(%arg0: !tt.ptr<f16>, %arg1: !tt.ptr<f16>, "
            f"%arg2: i32) attributes {{noinline = false}} {{\n    tt.return\n  }}\n}}\n"
        ),
        ".llir": (
            f"; ModuleID = 'LLVMDialectModule'\nsource_filename = \"LLVMDialectModule\"\n\n"
            f"define void @{name}(ptr addrspace(1) %0, ptr addrspace(1) %1, i32 %2) {{\n"
            f"  ret void\n}}\n"
        ),
        ".ptx": (
            f"//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 8.4\n.target sm_80\n"
            f".address_size 64\n\n.visible .entry {name}()\n{{\n\tret;\n}}\n"
        ),
    }


def cell_env_items(spec: CellSpec) -> List[Tuple[str, str]]:
    """The cell.env lines write_cell writes ([] for cell_env="none")."""
    if spec.cell_env == "none":
        return []
    env: Dict[str, str] = {
        "OP": spec.op,
        "DTYPE": spec.dtype,
        "SIDE": spec.side,
        "ROUND": str(spec.round),
        "CARD": str(spec.card),
        "STARTED_AT": spec.started_at,
    }
    env.update({k: str(v) for k, v in spec.extra_env.items()})
    for k in _CAL_ENV:
        if k in spec.caliber:
            env[k] = str(spec.caliber[k])
    env["ELAPSED_S"] = f"{spec.elapsed_s:.1f}"
    env["RC"] = str(spec.rc)  # the harness writes RC last: a cell is finished when it has RC
    drops = set(spec.drop_env)
    if spec.cell_env == "partial":
        drops |= set(PARTIAL_DROPS)
    drops.discard("RC")
    return [(k, v) for k, v in env.items() if k not in drops]


def write_cell(cell_dir, spec: CellSpec) -> None:
    """Write one cell: run.log, triton_cache/, index.tsv, then cell.env LAST."""
    d = os.fspath(cell_dir)
    os.makedirs(d, exist_ok=True)
    join = os.path.join
    _write(join(d, "run.log"), render_run_log(spec))
    if spec.kernels:
        for name, text in spec.kernels.items():
            hsh = cache_hash(name, spec.side, text)
            kd = join(d, "triton_cache", hsh)
            os.makedirs(kd, exist_ok=True)
            _write(join(kd, name + ".ttgir"), text)
            sib = _SIB_CACHE.get((name, hsh))
            if sib is None:
                if len(_SIB_CACHE) > 20000:
                    _SIB_CACHE.clear()
                sib = _SIB_CACHE[(name, hsh)] = [
                    (name + ext, content.encode()) for ext, content in _siblings(name, hsh, text).items()
                ]
            for fname, content in sib:
                _write(join(kd, fname), content)
    elif spec.launcher_only:
        hsh = cache_hash("__triton_launcher", spec.side, spec.op)
        kd = join(d, "triton_cache", hsh)
        os.makedirs(kd, exist_ok=True)
        _write(join(kd, "__triton_launcher.so"), b"\x7fELF\x02\x01\x01\x00" + bytes(56))
        _write(join(kd, "cuda_utils.so"), b"\x7fELF\x02\x01\x01\x00" + bytes(24))
    if spec.index_tsv:
        _write(join(d, "index.tsv"), index_tsv_bytes(spec))
    items = cell_env_items(spec)
    if items:
        _write(join(d, "cell.env"), "".join(f"{k}={v}\n" for k, v in items))


_SIB_CACHE: Dict[Tuple[str, str], List[Tuple[str, bytes]]] = {}


# ====================================================== spec-level truth


@dataclass(frozen=True)
class _K:
    """A kernel by its ttgir_text parameters: what the manifest reasons about."""

    name: str
    variant: int = 0
    cl: int = 2
    rlc: bool = False
    loc_root: str = DEFAULT_LOC_ROOT
    target_bytes: Optional[int] = None
    seed: int = 0

    def text(self) -> str:
        return _ttgir_cached(self)

    def key(self, rule: str) -> tuple:
        """Two kernels hash equal under `rule` iff their keys are equal:
        v2 sees everything, v3 not the rlc annotations, v4 not the loc paths
        either (loc_root changes only loc lines, rlc only annotations)."""
        k: tuple = (self.name, self.variant, self.cl, self.target_bytes, self.seed)
        if rule in ("v1", "v2", "v3"):
            k += (self.loc_root,)
        if rule in ("v1", "v2"):
            k += (self.rlc,)
        return k


_TTGIR_CACHE: Dict[_K, str] = {}


def _ttgir_cached(k: _K) -> str:
    t = _TTGIR_CACHE.get(k)
    if t is None:
        t = ttgir_text(
            k.name,
            variant=k.variant,
            convert_layouts=k.cl,
            rlc=k.rlc,
            loc_root=k.loc_root,
            target_bytes=k.target_bytes,
            seed=k.seed,
        )
        _TTGIR_CACHE[k] = t
    return t


def _fp_key(kernels: List[_K], rule: str, index: Optional[bytes]) -> tuple:
    key = tuple(sorted(k.key(rule) for k in kernels))
    if rule == "v1":
        key += (("index.tsv", index),)
    return key


def _verdicts(b: CellSpec, a: CellSpec, kb: List[_K], ka: List[_K]) -> Dict[str, str]:
    """The verdict of a pair under each rule, from the spec."""
    out = {}
    for rule in RULES:
        if b.rc in TIMEOUT_RCS or a.rc in TIMEOUT_RCS:
            v = "TRUNCATED"
        elif not any(r["counted"] for r in expected_rows(b)) or not any(r["counted"] for r in expected_rows(a)):
            v = "NO_ROWS"
        elif not kb and not ka:
            v = "NO_TRITON"
        else:
            ib = index_tsv_bytes(b) if b.index_tsv else None
            ia = index_tsv_bytes(a) if a.index_tsv else None
            v = "IR_CHANGED" if _fp_key(kb, rule, ib) != _fp_key(ka, rule, ia) else "NO_IR_DIFF"
        out[rule] = v
    return out


def _pair_ratios(b: CellSpec, a: CellSpec) -> Tuple[List[dict], List[dict]]:
    """Ratios (before/after) of rows counted on both sides, and the rows that
    did not pair with why (MISSING_SIDE / NOT_COUNTED)."""
    rb = {(r["op"], r["dtype"], r["shape"]): r for r in expected_rows(b)}
    ra = {(r["op"], r["dtype"], r["shape"]): r for r in expected_rows(a)}
    ratios: List[dict] = []
    unpaired: List[dict] = []
    for key in list(rb) + [k for k in ra if k not in rb]:
        x, y = rb.get(key), ra.get(key)
        if x is None or y is None:
            unpaired.append({"key": key, "reason": "MISSING_SIDE", "present": "before" if y is None else "after"})
        elif not (x["counted"] and y["counted"]):
            side = [s for s, r in (("before", x), ("after", y)) if not r["counted"]]
            unpaired.append({"key": key, "reason": "NOT_COUNTED", "not_counted": side})
        else:
            ratios.append(
                {"key": key, "ratio": x["latency"] / y["latency"], "fallback": x["fallback"] or y["fallback"]}
            )
    return ratios, unpaired


def _resolved_caliber(spec: CellSpec, root_env: Dict[str, str]) -> Dict[str, Optional[str]]:
    """Caliber by field name as cell.env, then the root's env file, give it."""
    env = dict(cell_env_items(spec))
    out = {}
    for var in _CAL_ENV:
        v = env.get(var) or root_env.get(var) or None
        out[_CAL_NAME[var]] = v
    return out


def _median(xs: List[float]) -> Optional[float]:
    s = sorted(xs)
    n = len(s)
    if not n:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# ============================================================ example tree


def _rows(op_shapes: List[Tuple[Any, float, float]], *, side: str, **kw) -> List[RowSpec]:
    """(shape, before latency, after latency) triples -> rows of one side."""
    return [RowSpec(shape=s, latency=(b if side == "before" else a), **kw) for s, b, a in op_shapes]


def _env_text(items: List[Tuple[str, str]]) -> str:
    return "".join(f"{k}={v}\n" for k, v in items)


class _Tree:
    """Collects cells and the manifest while the example tree is written."""

    def __init__(self, dest: Path):
        self.dest = dest
        self.cells: Dict[str, dict] = {}
        self.rows = 0
        self.counted = 0

    def cell(
        self,
        rel: str,
        spec: CellSpec,
        kernels: List[_K],
        root_env: Dict[str, str],
        kind: str,
        overrides: Optional[dict] = None,
    ) -> None:
        spec.kernels = {k.name: k.text() for k in kernels}
        write_cell(self.dest / rel, spec)
        rows = expected_rows(spec)
        self.rows += len(rows)
        self.counted += sum(r["counted"] for r in rows)
        env = dict(cell_env_items(spec))
        src: Dict[str, Optional[str]] = {}
        vals: Dict[str, Any] = {}
        # value <- cell.env, then the path, then the root env, then screen.tsv
        path_vals: Dict[str, Any] = {"op": spec.op, "side": spec.side}
        if kind == "screen":
            path_vals["round"] = 0
            if spec.dtype:
                path_vals["dtype"] = spec.dtype
        else:
            path_vals["round"] = spec.round
            path_vals["card"] = spec.card
        for name, var in (
            ("op", "OP"),
            ("dtype", "DTYPE"),
            ("side", "SIDE"),
            ("round", "ROUND"),
            ("card", "CARD"),
            ("rc", "RC"),
            ("elapsed_s", "ELAPSED_S"),
        ):
            if var in env:
                raw = env[var]
                vals[name] = int(raw) if name in ("round", "card", "rc") else float(raw) if name == "elapsed_s" else raw
                src[name] = "cell.env"
            elif name in path_vals:
                vals[name], src[name] = path_vals[name], "path"
            elif overrides and name in overrides:
                vals[name], src[name] = overrides[name]
            else:
                vals[name], src[name] = None, None
        cal: Dict[str, Optional[str]] = {}
        for var in _CAL_ENV:
            fname = _CAL_NAME[var]
            if env.get(var):
                cal[fname] = env[var]
                src["caliber." + fname] = "cell.env"
            elif root_env.get(var):
                cal[fname] = root_env[var]
                src["caliber." + fname] = "campaign.env" if kind == "campaign" else "root.env"
            else:
                cal[fname] = None
                src["caliber." + fname] = None
        self.cells[rel] = dict(
            vals,
            caliber=cal,
            caliber_known=all(v is not None for v in cal.values()),
            sources=src,
            rows=len(rows),
            counted=sum(r["counted"] for r in rows),
            fallback_rows=sum(r["fallback"] for r in rows),
            ttgir=len(kernels),
            convert_layouts=sum(k.cl for k in kernels),
            cell_env=spec.cell_env,
            traps=list(spec.traps),
        )


def _fp_hex(kernels: List[_K], rule: str, salt: str) -> str:
    if not kernels:
        return "-"
    return hashlib.sha1((salt + repr(_fp_key(kernels, rule, None))).encode()).hexdigest()[:16]


def _screen_root(
    tree: _Tree, name: str, started: str, caliber: Dict[str, str], pairs: List[dict], *, orig: bool
) -> Dict[str, dict]:
    """Write one screening root; returns its manifest section."""
    root = tree.dest / name
    root.mkdir(parents=True, exist_ok=True)
    root_env = [
        ("KIND", "screen"),
        ("SWITCH", SWITCH),
        ("HOST", HOST),
        ("STARTED_AT", started),
        ("CELL_TIMEOUT", "2400"),
    ] + [(k, caliber[k]) for k in _CAL_ENV]
    _write(root / "root.env", _env_text(root_env))
    renv = dict(root_env)
    t0 = _dt.datetime.fromisoformat(started)
    clock = 0.0
    section: Dict[str, dict] = {}
    tsv = [
        [
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
        ]
        + [_CAL_NAME[v] for v in _CAL_ENV]
    ]
    tsv_orig = [["op", "dtype", "verdict", "cl_before", "cl_after", "fp_before", "fp_after", "rc_before", "rc_after"]]
    for p in pairs:
        op, dtype = p["op"], p["dtype"]
        specs = {}
        for side in ("before", "after"):
            kw = dict(p.get(side + "_kw", {}))
            elapsed = kw.pop("elapsed_s", 30.0)
            spec = CellSpec(
                op=op,
                dtype=dtype,
                side=side,
                round=0,
                card=0,
                elapsed_s=elapsed,
                started_at=(t0 + _dt.timedelta(seconds=round(clock))).isoformat(),
                caliber=dict(caliber),
                rows=p[side + "_rows"],
                extra_env={
                    "SWITCH": SWITCH,
                    "SWITCH_VALUE": "0" if side == "before" else "1",
                    "NODEID": f"{_bench_file(op)}::test_perf_{op}",
                    "CELL_TIMEOUT": "2400",
                },
                **kw,
            )
            clock += elapsed + 3
            specs[side] = spec
        b, a = specs["before"], specs["after"]
        kb, ka = p["before_k"], p["after_k"]
        for side, spec, ks in (("before", b, kb), ("after", a, ka)):
            ov: Optional[Dict[str, Tuple[Any, str]]] = None
            if spec.cell_env == "none":
                ov = {"rc": (spec.rc, "screen.tsv"), "elapsed_s": (round(spec.elapsed_s, 1), "screen.tsv")}
                if not spec.dtype:
                    ov["dtype"] = (spec.dtype, "screen.tsv")
            tree.cell(f"{name}/{cell_dir_name(op, dtype, side)}", spec, ks, renv, "screen", ov)
        verdict = _verdicts(b, a, kb, ka)
        ratios, unpaired = _pair_ratios(b, a)
        key = f"{op}|{dtype}"
        orig_v = None
        if orig:
            orig_v = "NO_KERNEL" if verdict["v2"] == "NO_TRITON" else verdict["v2"]
        section[key] = {
            "verdict": verdict,
            "ratios": sorted(r["ratio"] for r in ratios),
            # each paired row's own op, dtype and canonical shape with its ratio: floors are per shape
            "paired_rows": [
                {"op": r["key"][0], "dtype": r["key"][1], "shape": r["key"][2], "ratio": r["ratio"]} for r in ratios
            ],
            "recorded": verdict["v3"],
            "orig": orig_v,
            "orig_canonical": verdict["v2"] if orig else None,
            "cells": {
                "before": f"{name}/{cell_dir_name(op, dtype, 'before')}",
                "after": f"{name}/{cell_dir_name(op, dtype, 'after')}",
            },
            "convert_layouts": [sum(k.cl for k in kb), sum(k.cl for k in ka)],
            "ttgir": [len(kb), len(ka)],
            "counted": [sum(r["counted"] for r in expected_rows(b)), sum(r["counted"] for r in expected_rows(a))],
            "unpaired": [
                {"op": u["key"][0], "dtype": u["key"][1], "shape": u["key"][2], "reason": u["reason"]} for u in unpaired
            ],
            "elapsed": [b.elapsed_s, a.elapsed_s],
            "note": p.get("note", ""),
        }
        cal_cols = [caliber[v] for v in _CAL_ENV]
        tsv.append(
            [
                op,
                dtype,
                verdict["v3"],
                str(sum(k.cl for k in kb)),
                str(sum(k.cl for k in ka)),
                _fp_hex(kb, "v3", "zl"),
                _fp_hex(ka, "v3", "zl"),
                f"{b.elapsed_s:.1f}",
                f"{a.elapsed_s:.1f}",
                str(b.rc),
                str(a.rc),
            ]
            + cal_cols
        )
        tsv_orig.append(
            [
                op,
                dtype,
                orig_v or "",
                str(sum(k.cl for k in kb)),
                str(sum(k.cl for k in ka)),
                _fp_hex(kb, "v2", "old"),
                _fp_hex(ka, "v2", "old"),
                str(b.rc),
                str(a.rc),
            ]
        )
    _write(root / "screen.tsv", "".join("\t".join(r) + "\n" for r in tsv))
    if orig:
        # As if RESCORE had run: the harness's file from before (an older
        # harness: no elapsed or caliber columns, NO_KERNEL spelling).
        _write(root / "screen.tsv.orig", "".join("\t".join(r) + "\n" for r in tsv_orig))
    return section


# The example's operators: kernels per side and rows (shape, before ms, after ms).
_LOC_B = "/root/.flaggems_isolated/after/code_cache"

_TOPK_K = (
    [_K("topk_stage1_kernel", cl=2), _K("topk_stage2_kernel", cl=1)],
    [_K("topk_stage1_kernel", cl=3, rlc=True), _K("topk_stage2_kernel", cl=1, rlc=True)],
)
_SOFTMAX_K = ([_K("softmax_kernel_inner", cl=2)], [_K("softmax_kernel_inner", cl=2, rlc=True)])
_ABS_K = ([_K("abs_func_kernel_rank_1", cl=1)], [_K("abs_func_kernel_rank_1", cl=1, rlc=True, loc_root=_LOC_B)])
_RAND_K = ([_K("rand_kernel", cl=0)], [_K("rand_kernel", cl=0)])
_LN_K = (
    [_K("layer_norm_persistent_kernel", cl=2), _K("layer_norm_loop_kernel", cl=1)],
    [_K("layer_norm_persistent_kernel", cl=2, rlc=True), _K("layer_norm_loop_kernel", cl=1, rlc=True)],
)
_PAD_K = (
    [_K("pad_kernel_rank_2", cl=1), _K("constant_pad_nd_kernel", cl=0)],
    [_K("pad_kernel_rank_2", cl=1, variant=1, rlc=True), _K("constant_pad_nd_kernel", cl=0, rlc=True)],
)

_TOPK_ROWS = [
    ([[64, 1024], 32], 0.0220, 0.0200),
    ([[1024, 4096], 64], 0.0902, 0.0820),
    ([[4096, 4096], 128], 0.3360, 0.3000),
    ([[64, 65536], 256], 0.1296, 0.1200),
]
_SOFTMAX_ROWS = [([[1048576]], 0.2022, 0.2000), ([[64, 64], 1], 0.0067, 0.0068), ([[4096, 4096], 1], 0.1790, 0.1800)]
_ABS_ROWS = [([[64, 64]], 0.0071, 0.0070), ([[4096, 4096]], 0.0420, 0.0420), ([[64, 512, 512]], 0.0416, 0.0420)]
_RAND_ROWS = [([[64, 64]], 0.0051, 0.0050), ([[4096, 4096]], 0.0490, 0.0500), ([[1073741824]], 2.5000, 2.5000)]
_LN_ROWS = [
    ([[1024, 4096], [4096], [4096]], 0.0505, 0.0500),
    ([[4096, 8192], [8192], [8192]], 0.0990, 0.1000),
    ([[16384, 8192], [8192], [8192]], 0.2010, 0.2000),
]


def _pad_rows(side: str, scale: float = 1.0) -> List[RowSpec]:
    """`scale` multiplies the before latencies only (so the ratios move with it)."""
    # One process, two operators, two dtypes; the same shape in both ops.
    spec = [
        ("pad", "float16", [[64, 64], [1, 1]], 0.0110, 0.0100),
        ("pad", "float16", [[256, 1024], [2, 2]], 0.0240, 0.0200),
        ("constant_pad_nd", "float16", [[64, 64], [1, 1]], 0.0095, 0.0100),
        ("constant_pad_nd", "float16", [[1024, 1024], [3, 3]], 0.0315, 0.0300),
        ("pad", "float32", [[64, 64], [1, 1]], 0.0130, 0.0125),
        ("constant_pad_nd", "float32", [[64, 64], [1, 1]], 0.0120, 0.0120),
    ]
    return [
        RowSpec(shape=s, latency=(round(b * scale, 6) if side == "before" else a), op_name=o, dtype=d)
        for o, d, s, b, a in spec
    ]


def _screen1_pairs() -> List[dict]:
    def both(rows):
        return {"before_rows": _rows(rows, side="before"), "after_rows": _rows(rows, side="after")}

    sort_rows = [
        ([[1024, 1024], 1], 0.0880, 0.0800),
        ([[4096, 4096], 1], 1.3200, 1.2000),
        ([[64, 65536], 1], 0.5250, 0.5000),
    ]
    argsort_rows = [([[1024, 1024], 1], 0.0990, 0.0900), ([[4096, 4096], 1], 1.4300, 1.3000)]

    def sort_side(side):
        return _rows(sort_rows, side=side, dtype="bfloat16") + _rows(
            argsort_rows, side=side, op_name="argsort", dtype="bfloat16"
        )

    ss_shapes = [
        [[64, 64], [64, 32], 1, 0, 64, 2],
        [[256, 256], [256, 128], 1, 0, 256, 2],
        [[1024, 1024], [504, 1024], 0, 16, 1024, 2],
    ]
    ss_err = "RuntimeError: MUSA error: invalid configuration argument"
    return [
        dict(
            op="topk",
            dtype="float16",
            before_k=_TOPK_K[0],
            after_k=_TOPK_K[1],
            before_kw={"elapsed_s": 610.4},
            after_kw={"elapsed_s": 589.6},
            note="real code change: after has one more convert_layout, plus rlc annotations",
            **both(_TOPK_ROWS),
        ),
        dict(
            op="softmax",
            dtype="float32",
            before_k=_SOFTMAX_K[0],
            after_k=_SOFTMAX_K[1],
            before_kw={"elapsed_s": 201.3},
            after_kw={"elapsed_s": 188.7},
            note="ttg.rlc-* annotations only",
            **both(_SOFTMAX_ROWS),
        ),
        dict(
            op="abs",
            dtype="float16",
            before_k=_ABS_K[0],
            after_k=_ABS_K[1],
            before_kw={"elapsed_s": 121.0, "cell_env": "partial"},
            after_kw={"elapsed_s": 109.0},
            note="loc paths (separate FlagGems cache) + annotations; before cell.env partial "
            "(no DTYPE, ZL_DIRECT_REPEAT, SHAPE_MODE, USE_FLAGTUNE: from path / root.env)",
            **both(_ABS_ROWS),
        ),
        dict(
            op="rand",
            dtype="",
            before_k=_RAND_K[0],
            after_k=_RAND_K[1],
            before_kw={"elapsed_s": 58.5},
            after_kw={"elapsed_s": 56.5},
            note="identical IR, index.tsv differs by side (cache hash): noise floor",
            before_rows=_rows(_RAND_ROWS, side="before", dtype="float32"),
            after_rows=_rows(_RAND_ROWS, side="after", dtype="float32"),
        ),
        dict(
            op="fft",
            dtype="complex64",
            before_k=[],
            after_k=[],
            before_kw={"elapsed_s": 40.2, "index_tsv": False},
            after_kw={"elapsed_s": 39.8, "launcher_only": True},
            note="no .ttgir on either side (before: no triton_cache; after: launcher dir only, empty index.tsv)",
            **both([([[1024]], 0.0310, 0.0300), ([[4096, 4096]], 0.8240, 0.8000)]),
        ),
        dict(
            op="slice_scatter",
            dtype="float16",
            before_k=[_K("slice_scatter_kernel", cl=0)],
            after_k=[_K("slice_scatter_kernel", cl=0, rlc=True)],
            before_kw={"elapsed_s": 35.0},
            after_kw={"elapsed_s": 12.5},
            note="after: every row has error_msg",
            before_rows=[RowSpec(s, l) for s, l in zip(ss_shapes, (0.0096, 0.0115, 0.0124))],
            after_rows=[
                RowSpec(ss_shapes[0], None, None, ss_err),
                RowSpec(ss_shapes[1], 0.0, 0.0127, ss_err),
                RowSpec(ss_shapes[2], None, 0.0183, ss_err),
            ],
        ),
        dict(
            op="sort",
            dtype="bfloat16",
            before_k=[_K("sort_kernel", cl=1)],
            after_k=[_K("sort_kernel", cl=2, rlc=True)],
            before_kw={"elapsed_s": 1710.2},
            after_kw={"elapsed_s": 2400.3, "rc": 124, "traps": ("truncated_tail",)},
            note="after killed at CELL_TIMEOUT (rc 124); its last record (argsort) is cut mid-JSON",
            before_rows=sort_side("before"),
            after_rows=sort_side("after"),
        ),
        dict(
            op="argmax",
            dtype="float16",
            before_k=[_K("argmax_kernel_1", cl=1), _K("argmax_kernel_2", cl=0)],
            after_k=[_K("argmax_kernel_1", cl=1), _K("argmax_kernel_2", cl=0)],
            before_kw={"elapsed_s": 45.2, "cell_env": "none", "index_tsv": False},
            after_kw={"elapsed_s": 44.8, "cell_env": "none", "index_tsv": False},
            note="older pair: no cell.env (op/dtype/side from path, caliber from root.env, "
            "elapsed/rc from screen.tsv), no index.tsv, identical IR",
            **both(
                [([[1048576]], 0.1019, 0.1020), ([[64, 64], 1], 0.0082, 0.0082), ([[4096, 4096], 1], 0.0366, 0.0365)]
            ),
        ),
        dict(
            op="layer_norm",
            dtype="float16",
            before_k=_LN_K[0],
            after_k=_LN_K[1],
            before_kw={"elapsed_s": 251.0, "traps": ("crlf", "ansi", "nan", "noise", "non_utf8")},
            after_kw={"elapsed_s": 239.0, "traps": ("dict_repr", "crlf")},
            note="trap pair: annotation-only difference; before has a NaN-latency row (not counted)",
            **both(_LN_ROWS),
        ),
        dict(
            op="mul",
            dtype="float16",
            before_k=[_K("mul_func_kernel_rank_1", cl=0)],
            after_k=[],
            before_kw={"elapsed_s": 30.5},
            after_kw={"elapsed_s": 3.1, "rc": 1, "traps": ("empty",), "index_tsv": False},
            note="after: empty run.log (crashed, rc 1), nothing compiled",
            **both([([[1024, 1024], [1024, 1024]], 0.0120, 0.0110)]),
        ),
        dict(
            op="pad",
            dtype="",
            before_k=_PAD_K[0],
            after_k=_PAD_K[1],
            before_kw={"elapsed_s": 64.0},
            after_kw={"elapsed_s": 61.0},
            note="multi-op cell: records of pad and constant_pad_nd, float16 and float32; the same shape in both ops",
            before_rows=_pad_rows("before"),
            after_rows=_pad_rows("after"),
        ),
    ]


def _scaled(rows, f_before: float, f_after: float):
    return [(s, round(b * f_before, 6), round(a * f_after, 6)) for s, b, a in rows]


def _campaign(tree: _Tree, name: str, screen_root: str, screen1: Dict[str, dict]) -> dict:  # noqa: C901 -- the test oracle: a generated tree's cases are its branches
    """The example campaign (3 cards, 3 rounds) and its manifest section."""
    root = tree.dest / name
    root.mkdir(parents=True, exist_ok=True)
    rounds, cards = 3, 3
    camp_env = [
        ("KIND", "campaign"),
        ("ROUNDS", str(rounds)),
        ("CARDS", str(cards)),
        ("SWITCH", SWITCH),
        ("SCREEN_ROOT", f"../{screen_root}"),
        ("HOST", HOST),
        ("STARTED_AT", "2026-10-13T09:00:00"),
        ("CELL_TIMEOUT", "2400"),
        ("ZL_BACKEND", "musa"),
        ("ZL_ISOLATE_TUNER_CACHE", "1"),
    ]
    _write(root / "campaign.env", _env_text(camp_env))
    cenv = dict(camp_env)

    # Partition: longest-first onto the lightest card, weights from the screen.
    first = [("topk", "float16"), ("layer_norm", "float16"), ("softmax", "float32"), ("abs", "float16"), ("rand", "")]
    later = [("pad", "")]  # EXTRA_OPS, added after the first plan: lightest card by weight

    def weight(op, dtype):
        b, a = screen1[f"{op}|{dtype}"]["elapsed"]
        return (b + a) * rounds / 60.0

    load = [0.0] * cards
    plan = []
    for op, dtype in sorted(first, key=lambda od: -weight(*od)) + later:
        c = min(range(cards), key=lambda i: (load[i], i))
        load[c] += weight(op, dtype)
        plan.append((c, op, dtype, weight(op, dtype)))
    _write(
        root / "partition.tsv",
        "card\top\tdtype\tweight_min\n" + "".join(f"{c}\t{op}\t{dt}\t{w:.2f}\n" for c, op, dt, w in plan),
    )

    # Rows per op: (shape, after ms, before/after ratio per round 1..3).
    def rows3(shape_after: List[Tuple[Any, float]], ratios: List[Tuple[float, float, float]]):
        return [(s, a, r) for (s, a), r in zip(shape_after, ratios)]

    plans = {
        ("topk", "float16"): dict(
            k=_TOPK_K,
            rows=rows3(
                [([[64, 1024], 32], 0.0200), ([[1024, 4096], 64], 0.0800), ([[4096, 4096], 128], 0.3000)],
                [(1.10, 1.12, 1.09), (1.05, 1.10, 1.08), (1.15, 1.10, 1.125)],
            ),
        ),
        ("layer_norm", "float16"): dict(
            k=_LN_K,
            rows=rows3(
                [(_LN_ROWS[0][0], 0.0500), (_LN_ROWS[1][0], 0.1000), (_LN_ROWS[2][0], 0.2000)],
                [(1.01, 0.99, 1.0), (0.98, 1.02, 1.0), (1.005, 1.015, 0.995)],
            ),
        ),
        ("softmax", "float32"): dict(
            k=_SOFTMAX_K,
            rows=rows3([([[1048576]], 0.2000), ([[4096, 4096], 1], 0.1800)], [(1.01, 1.03, 0.99), (1.0, 0.97, 1.02)]),
        ),
        ("abs", "float16"): dict(
            k=_ABS_K,
            rows=rows3([([[64, 64]], 0.0070), ([[4096, 4096]], 0.0420)], [(1.0, 1.02, 0.97), (0.99, 1.01, 1.04)]),
        ),
        ("rand", ""): dict(
            k=_RAND_K,
            rows=rows3([([[64, 64]], 0.0050), ([[4096, 4096]], 0.0500)], [(1.02, 0.98, 1.0), (0.99, 1.03, 1.01)]),
            row_dtype="float32",
        ),
        ("pad", ""): dict(k=_PAD_K, rows=None),
    }
    special = {
        # (op, dtype, round): what is different in that round
        ("pad", "", 2): "fallback",  # after: constant_pad_nd float16 record by the direct fallback
        ("softmax", "float32", 2): "mismatch",  # after: ZL_DIRECT_REPEAT=200
        ("abs", "float16", 3): "unknown",  # before: cell.env without SHAPE_MODE
        ("layer_norm", "float16", 1): "missing",  # after: the third shape absent
        ("rand", "", 2): "error",  # after: one row with error_msg
    }
    runs: Dict[int, List[Tuple[str, List[Tuple[str, str]]]]] = {}  # card -> list of (ab_root, [(op, dtype)])
    for c, op, dt, _ in plan:
        ab = f"card{c}/ab_20261013_{90000 + c:06d}"
        if (op, dt) in later:
            ab = f"card{c}/ab_20261013_{103500 + c:06d}"  # a second repeat run on that card
        lst = runs.setdefault(c, [])
        if lst and lst[-1][0] == ab:
            lst[-1][1].append((op, dt))
        else:
            lst.append((ab, [(op, dt)]))

    paired: Dict[str, dict] = {}
    rejected: List[dict] = []
    cells_written = 0
    for c in sorted(runs):
        clock = 0.0
        for ab, ops in runs[c]:
            t0 = _dt.datetime.fromisoformat("2026-10-13T09:00:00" if "0900" in ab else "2026-10-13T10:35:00")
            for op, dt in ops:
                p = plans[(op, dt)]
                kb, ka = p["k"]
                for r in range(1, rounds + 1):
                    what = special.get((op, dt, r))
                    specs = {}
                    for side in ("before", "after"):
                        if p["rows"] is None:
                            rows = _pad_rows(side, scale=(1.0, 1.02, 0.98)[r - 1])
                        else:
                            rows = []
                            for i, (s, a_ms, rat) in enumerate(p["rows"]):
                                if what == "missing" and side == "after" and i == 2:
                                    continue
                                lat = a_ms if side == "after" else round(a_ms * rat[r - 1], 6)
                                err = None
                                if what == "error" and side == "after" and i == 1:
                                    lat, err = None, "RuntimeError: MUSA error: out of memory"
                                rows.append(RowSpec(s, lat, error_msg=err, dtype=p.get("row_dtype")))
                        cal = dict(CAMPAIGN_CALIBER)
                        drop: Tuple[str, ...] = ()
                        if what == "mismatch" and side == "after":
                            cal["ZL_DIRECT_REPEAT"] = "200"
                        if what == "unknown" and side == "before":
                            drop = ("SHAPE_MODE",)
                        elapsed = 30.0 + 7 * len(rows) + r + (0.5 if side == "after" else 0.0)
                        spec = CellSpec(
                            op=op,
                            dtype=dt,
                            side=side,
                            round=r,
                            card=c,
                            elapsed_s=elapsed,
                            started_at=(t0 + _dt.timedelta(seconds=round(clock))).isoformat(),
                            caliber=cal,
                            rows=rows,
                            drop_env=drop,
                            fallback_record=1 if (what == "fallback" and side == "after") else None,
                            extra_env={
                                "SWITCH": SWITCH,
                                "SWITCH_VALUE": "0" if side == "before" else "1",
                                "NODEID": f"{_bench_file(op)}::test_perf_{op}",
                                "CELL_TIMEOUT": "2400",
                            },
                        )
                        clock += elapsed + 2
                        specs[side] = spec
                        rel = f"{name}/{ab}/{op}/r{r}/{side}"
                        tree.cell(rel, spec, kb if side == "before" else ka, cenv, "campaign")
                        cells_written += 1
                    b, a = specs["before"], specs["after"]
                    cb, ca = _resolved_caliber(b, cenv), _resolved_caliber(a, cenv)
                    reason, fields = None, []
                    if None in cb.values() or None in ca.values():
                        reason = "CALIBER_UNKNOWN"
                        fields = sorted(
                            {f for f in cb if cb[f] is None or ca[f] is None},
                            key=[x.name for x in CALIBER_FIELDS].index,
                        )
                    elif cb != ca:
                        reason = "CALIBER_MISMATCH"
                        fields = [f.name for f in CALIBER_FIELDS if cb[f.name] != ca[f.name]]
                    ratios, unpaired = _pair_ratios(b, a)
                    base = {"round": r, "card": c, "cell_op": op, "cell_dtype": dt, "ab_root": f"{name}/{ab}"}
                    if reason:
                        for x in ratios + unpaired:
                            o, d, s = x["key"]
                            rejected.append(dict(op=o, dtype=d, shape=s, reason=reason, fields=fields, **base))
                        continue
                    for u in unpaired:
                        o, d, s = u["key"]
                        extra = {k: v for k, v in u.items() if k not in ("key", "reason")}
                        rejected.append(dict(op=o, dtype=d, shape=s, reason=u["reason"], fields=[], **base, **extra))
                    for x in ratios:
                        o, d, s = x["key"]
                        e = paired.setdefault(f"{o}|{d}|{s}", {"ratios": [], "fallback": False})
                        e["ratios"].append(x["ratio"])
                        e["fallback"] = e["fallback"] or x["fallback"]
    for e in paired.values():
        e["ratios"].sort()
        e["n"] = len(e["ratios"])
        e["median"] = _median(e["ratios"])
    return {
        "root": name,
        "screen_root": screen_root,
        "rounds": rounds,
        "cards": cards,
        "partition": [{"card": c, "op": op, "dtype": dt, "weight_min": round(w, 2)} for c, op, dt, w in plan],
        "ab_roots": {str(c): [f"{name}/{ab}" for ab, _ in runs[c]] for c in sorted(runs)},
        "cells": cells_written,
        "ranges": dict(sorted(paired.items())),
        "rejected": rejected,
        "cases": {
            "fallback": {
                "op": "pad",
                "dtype": "",
                "round": 2,
                "side": "after",
                "record": 1,
                "rows": "constant_pad_nd float16",
            },
            "caliber_mismatch": {
                "op": "softmax",
                "dtype": "float32",
                "round": 2,
                "side": "after",
                "fields": ["direct_repeat"],
                "values": ["100", "200"],
            },
            "caliber_unknown": {
                "op": "abs",
                "dtype": "float16",
                "round": 3,
                "side": "before",
                "fields": ["shape_mode"],
            },
            "missing_side": {"op": "layer_norm", "dtype": "float16", "round": 1, "present": "before"},
            "not_counted": {"op": "rand", "dtype": "float32", "round": 2, "side": "after"},
        },
    }


_ROOT1, _ROOT2, _ROOT3 = "ab_rlc_20261012_101500", "ab_rlc_20261014_083000", "ab_rlc_20261015_120000"
_CAMPAIGN = "campaign_20261013_090000"


def make_example_tree(dest) -> dict:
    """Write the example runs/ tree into `dest` (created; must not hold an
    earlier tree's files you care about) and return its manifest: what every
    pair, range and rejection SHOULD be, from this module's own spec."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tree = _Tree(dest)
    screen: Dict[str, dict] = {}
    roots_info: Dict[str, dict] = {}

    def info(kind, caliber, started):
        return {"kind": kind, "started_at": started, "caliber": {_CAL_NAME[k]: caliber[k] for k in _CAL_ENV}}

    # 1. the main screening root: every verdict, every trap
    screen[_ROOT1] = _screen_root(tree, _ROOT1, "2026-10-12T10:15:00", SCREEN_CALIBER, _screen1_pairs(), orig=True)
    roots_info[_ROOT1] = info("screen", SCREEN_CALIBER, "2026-10-12T10:15:00")

    # 2. same caliber, a few of the same ops, two days later; all cells have cell.env
    def both(rows, f_b=1.0, f_a=1.0, dtype=None):
        rs = _scaled(rows, f_b, f_a)
        return {
            "before_rows": _rows(rs, side="before", dtype=dtype),
            "after_rows": _rows(rs, side="after", dtype=dtype),
        }

    pairs2 = [
        dict(
            op="topk",
            dtype="float16",
            before_k=_TOPK_K[0],
            after_k=_TOPK_K[1],
            before_kw={"elapsed_s": 605.0},
            after_kw={"elapsed_s": 596.0},
            **both(_TOPK_ROWS, 1.0, 1.01),
        ),
        dict(
            op="softmax",
            dtype="float32",
            before_k=_SOFTMAX_K[0],
            after_k=_SOFTMAX_K[1],
            before_kw={"elapsed_s": 199.0},
            after_kw={"elapsed_s": 192.5},
            **both(_SOFTMAX_ROWS, 1.0, 1.01),
        ),
        dict(
            op="abs",
            dtype="float16",
            before_k=_ABS_K[0],
            after_k=_ABS_K[1],
            before_kw={"elapsed_s": 118.0},
            after_kw={"elapsed_s": 111.0},
            **both(_ABS_ROWS, 1.02, 1.0),
        ),
        dict(
            op="rand",
            dtype="",
            before_k=_RAND_K[0],
            after_k=_RAND_K[1],
            before_kw={"elapsed_s": 57.0},
            after_kw={"elapsed_s": 57.5},
            **both(_RAND_ROWS, 0.99, 1.0, dtype="float32"),
        ),
    ]
    screen[_ROOT2] = _screen_root(tree, _ROOT2, "2026-10-14T08:30:00", SCREEN_CALIBER, pairs2, orig=False)
    roots_info[_ROOT2] = info("screen", SCREEN_CALIBER, "2026-10-14T08:30:00")

    # 3. BENCH_LEVEL=comprehensive: comparing it with 1 or 2 must be refused
    comp = dict(SCREEN_CALIBER, BENCH_LEVEL="comprehensive")
    extra = [([[16384, 16384], 512], 1.1000, 1.0000)]
    pairs3 = [
        dict(
            op="topk",
            dtype="float16",
            before_k=_TOPK_K[0],
            after_k=_TOPK_K[1],
            before_kw={"elapsed_s": 1320.0},
            after_kw={"elapsed_s": 1290.0},
            **both(_TOPK_ROWS + extra, 1.0, 0.98),
        ),
        dict(
            op="softmax",
            dtype="float32",
            before_k=_SOFTMAX_K[0],
            after_k=_SOFTMAX_K[1],
            before_kw={"elapsed_s": 402.0},
            after_kw={"elapsed_s": 398.0},
            **both(_SOFTMAX_ROWS, 1.0, 0.99),
        ),
        dict(
            op="rand",
            dtype="",
            before_k=_RAND_K[0],
            after_k=_RAND_K[1],
            before_kw={"elapsed_s": 90.0},
            after_kw={"elapsed_s": 91.0},
            **both(_RAND_ROWS, 1.01, 1.0, dtype="float32"),
        ),
    ]
    screen[_ROOT3] = _screen_root(tree, _ROOT3, "2026-10-15T12:00:00", comp, pairs3, orig=False)
    roots_info[_ROOT3] = info("screen", comp, "2026-10-15T12:00:00")

    # 4. the campaign, planned from root 1
    campaign = _campaign(tree, _CAMPAIGN, _ROOT1, screen[_ROOT1])
    roots_info[_CAMPAIGN] = {
        "kind": "campaign",
        "started_at": "2026-10-13T09:00:00",
        "caliber": {_CAL_NAME[k]: CAMPAIGN_CALIBER[k] for k in _CAL_ENV},
        "caliber_note": "campaign.env gives only backend and isolate_tuner_cache; "
        "every other field comes from cell.env",
    }

    return {
        "screen": screen,
        "campaign": campaign,
        "cells": len(tree.cells),
        "rows": tree.rows,
        "counted_rows": tree.counted,
        "roots": [_ROOT1, _ROOT2, _ROOT3, _CAMPAIGN],
        "root_info": roots_info,
        "comparable_roots": [[_ROOT1, _ROOT2]],
        "incomparable_roots": [[_ROOT1, _ROOT3, ["bench_level"]], [_ROOT2, _ROOT3, ["bench_level"]]],
        "cell_index": tree.cells,
        "notes": {
            "ratios": "before/after of rows counted on both sides, whatever the pair's verdict "
            "(a printed range is only licensed for IR_CHANGED / NO_IR_DIFF)",
            "rows": "rows a correct parser reads: truncated records, dict reprs and empty logs give "
            "none; NaN rows are rows but not counted",
            "dict_repr": "a --query mode line without 'result': not a measurement record",
        },
    }


# ============================================================ the corpus

_BASE_OPS = """abs add addmm all amax any arange argmax argmin avg_pool2d batch_norm bitwise_and
bitwise_not bitwise_or bmm cat clamp conv2d cos count_nonzero cross_entropy_loss cummax cumsum
diag diag_embed diagonal_backward div dot dropout elu embedding eq erf exp exp2 exponential_
eye fill flip floor_divide full full_like gather ge gelu glu group_norm gt hstack index_add
index_put index_select isclose isfinite isin isinf isnan kron layer_norm le lerp linspace log
log_sigmoid log_softmax logical_and logical_not logical_or logspace lt masked_fill masked_select
max max_pool2d maximum mean min minimum mm mse_loss mul multinomial mv nan_to_num ne neg
nll_loss nonzero normal ones ones_like outer pad polar pow prod quantile rand rand_like randn
randn_like randperm reciprocal relu remainder repeat repeat_interleave resolve_conj resolve_neg
rms_norm rsqrt scatter select_scatter sigmoid silu sin slice_scatter softmax softplus sort sqrt
stack sub sum tan tanh tile topk triu uniform_ unique upsample_bicubic2d upsample_nearest2d
var_mean vdot vector_norm vstack weight_norm where zeros zeros_like""".split()
_SUFFIXES = ("", "_out", "_backward", "__inplace", "_v2", "_v3", "_v4", "_v5")


def _corpus_ops(n: int) -> List[str]:
    out = []
    for suf in _SUFFIXES:
        for b in _BASE_OPS:
            out.append(b + suf if suf != "__inplace" else b + "_")
            if len(out) == n:
                return out
    k = 6
    while len(out) < n:
        for b in _BASE_OPS:
            out.append(f"{b}_v{k}")
            if len(out) == n:
                break
        k += 1
    return out


_SHAPE_POOL = [
    [[64, 64]],
    [[256, 256]],
    [[1024, 1024]],
    [[4096, 4096]],
    [[64, 512, 512]],
    [[1048576]],
    [[64, 64], 1],
    [[4096, 4096], 1],
    [[1024, 65536]],
    [[16, 1024, 1024]],
    [[2, 4096, 4096]],
    [[8192, 8192]],
    [[200, 40999]],
    [[1, 32, 128, 128]],
    [[128, 3, 224, 224]],
    [[32, 64, 56, 56]],
    [[4096, 11008]],
    [[11008, 4096]],
    [[1024, 1024], [1024, 1024]],
    [[4096, 4096], [4096, 4096]],
    [[64, 1024], 32],
    [[1024, 4096], 64],
    {"start": 0, "end": 227, "steps": 1671, "base": 1.05},
    {"N": 1024, "M": 4096, "dim": 1},
]


def _shape(i: int) -> Any:
    """The i-th distinct shape (the pool, then a deterministic family)."""
    if i < len(_SHAPE_POOL):
        return _SHAPE_POOL[i]
    return [[3 * (i + 1), 4097]]


def _greedy(weights: List[Tuple[str, str, float]], cards: int) -> List[Tuple[int, str, str, float]]:
    load = [0.0] * cards
    plan = []
    for op, dt, w in sorted(weights, key=lambda x: (-x[2], x[0])):
        c = min(range(cards), key=lambda i: (load[i], i))
        load[c] += w
        plan.append((c, op, dt, w))
    return plan


def make_campaign_corpus(  # noqa: C901 -- the test oracle: a generated tree's cases are its branches
    dest,
    *,
    cards: int = 8,
    ops: int = 60,
    rounds: int = 6,
    rows: int = 20,
    kernels: int = 3,
    kb: Tuple[float, float] = (5, 50),
    seed: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict:
    """The benchmark corpus: a campaign of `cards` x `ops` operators (ops per
    card on average; each op runs on one card, placed longest-first by its
    screening weight) x `rounds` rounds x 2 sides, `rows` rows and `kernels`
    .ttgir of `kb` KB per cell, plus the screening root it was planned from
    (one pair per op). Each distinct IR text is generated once and reused.
    Returns counts: cells, rows, ttgir files, bytes, seconds."""
    t_start = time.perf_counter()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    bytes0 = _BYTES[0]
    n_ops = cards * ops
    names = _corpus_ops(n_ops)
    assert len(set(names)) == len(names)
    R = random.Random(f"corpus:{seed}")
    dtypes = ("float16", "float32", "bfloat16", "float16", "float32", "")
    entries: List[Dict[str, Any]] = []
    for i, op in enumerate(names):
        dt = dtypes[R.randrange(len(dtypes))]
        kind = ("changed", "changed", "changed", "changed", "changed", "changed", "annot", "annot", "loc", "same")[
            i % 10
        ]
        eb = round(R.uniform(15, 500), 1)
        ea = round(eb * R.uniform(0.9, 1.05), 1)
        ks_b, ks_a = [], []
        for j in range(kernels):
            kname = f"{op.rstrip('_')}_kernel" + (f"_{j}" if j else "")
            tb = int(R.uniform(kb[0], kb[1]) * 1024)
            cl = R.randrange(0, 4)
            kbf = _K(kname, cl=cl, target_bytes=tb, seed=seed)
            if kind == "changed" and j == 0:
                kaf = _K(kname, cl=cl + 1, rlc=True, target_bytes=tb, seed=seed)
            elif kind in ("changed", "annot"):
                kaf = _K(kname, cl=cl, rlc=True, target_bytes=tb, seed=seed)
            elif kind == "loc":
                kaf = _K(kname, cl=cl, rlc=True, loc_root=_LOC_B, target_bytes=tb, seed=seed)
            else:
                kaf = kbf
            ks_b.append(kbf)
            ks_a.append(kaf)
        shape_off = R.randrange(len(_SHAPE_POOL))
        n_pool = min(rows, len(_SHAPE_POOL))
        uniq = [_SHAPE_POOL[(shape_off + s) % len(_SHAPE_POOL)] for s in range(n_pool)]
        uniq += [_shape(len(_SHAPE_POOL) + s) for s in range(rows - n_pool)]
        base_ms = [round(R.uniform(0.004, 3.0), 4) for _ in range(rows)]
        mean_ratio = R.uniform(1.02, 1.2) if kind == "changed" else 1.0
        entries.append(
            dict(
                op=op,
                dtype=dt,
                kind=kind,
                eb=eb,
                ea=ea,
                kb=ks_b,
                ka=ks_a,
                shapes=uniq,
                base=base_ms,
                mean=mean_ratio,
                idx=i,
            )
        )

    total_cells = n_ops * rounds * 2 + n_ops * 2
    done = [0]
    counts = {"rows": 0, "counted_rows": 0, "ttgir_files": 0, "fallback_cells": 0}

    def emit(path: Path, spec: CellSpec, ks: List[_K]) -> None:
        spec.kernels = {k.name: k.text() for k in ks}
        write_cell(path, spec)
        nr = len(spec.rows) + (1 if "nan" in spec.traps else 0)
        counts["rows"] += nr
        counts["counted_rows"] += sum(_counted(r.latency, r.error_msg) for r in spec.rows)
        counts["ttgir_files"] += len(ks)
        counts["fallback_cells"] += spec.fallback_record is not None
        done[0] += 1
        if progress and (done[0] % 64 == 0 or done[0] == total_cells):
            progress(done[0], total_cells)

    def cell_rows(e, side: str, r: int) -> List[RowSpec]:
        rr = random.Random(_h("rows", seed, e["idx"], side, r))
        out = []
        for s, (sh, ms) in enumerate(zip(e["shapes"], e["base"])):
            if side == "after":
                lat = ms
            else:
                lat = round(ms * (e["mean"] + rr.uniform(-0.03, 0.03)), 6)
            out.append(
                RowSpec(sh, lat, round(ms * 1.1, 6), dtype=(None if e["dtype"] else ("float16", "float32")[s % 2]))
            )
        return out

    def traps_for(k: int) -> Tuple[str, ...]:
        t = []
        if k % 17 == 0:
            t.append("crlf")
        if k % 7 == 0:
            t.append("ansi")
        return tuple(t)

    # ---- the screening root the campaign was planned from
    sname = "ab_rlc_20261012_101500"
    sroot = dest / sname
    sroot.mkdir(parents=True, exist_ok=True)
    _write(
        sroot / "root.env",
        _env_text(
            [
                ("KIND", "screen"),
                ("SWITCH", SWITCH),
                ("HOST", HOST),
                ("STARTED_AT", "2026-10-12T10:15:00"),
                ("CELL_TIMEOUT", "2400"),
            ]
            + [(k, SCREEN_CALIBER[k]) for k in _CAL_ENV]
        ),
    )
    tsv = [
        "\t".join(
            [
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
            ]
            + [_CAL_NAME[v] for v in _CAL_ENV]
        )
    ]
    verdicts = {}
    k = 0
    for e in entries:
        v = "IR_CHANGED" if _fp_key(e["kb"], "v3", None) != _fp_key(e["ka"], "v3", None) else "NO_IR_DIFF"
        verdicts[f"{e['op']}|{e['dtype']}"] = v
        for side in ("before", "after"):
            spec = CellSpec(
                op=e["op"],
                dtype=e["dtype"],
                side=side,
                round=0,
                card=0,
                elapsed_s=e["eb"] if side == "before" else e["ea"],
                caliber=dict(SCREEN_CALIBER),
                rows=cell_rows(e, side, 0),
                traps=traps_for(k),
                extra_env={"SWITCH": SWITCH, "SWITCH_VALUE": "0" if side == "before" else "1"},
            )
            k += 1
            emit(sroot / cell_dir_name(e["op"], e["dtype"], side), spec, e["kb"] if side == "before" else e["ka"])
        tsv.append(
            "\t".join(
                [
                    e["op"],
                    e["dtype"],
                    v,
                    str(sum(x.cl for x in e["kb"])),
                    str(sum(x.cl for x in e["ka"])),
                    _fp_hex(e["kb"], "v3", "zl"),
                    _fp_hex(e["ka"], "v3", "zl"),
                    f"{e['eb']:.1f}",
                    f"{e['ea']:.1f}",
                    "0",
                    "0",
                ]
                + [SCREEN_CALIBER[v] for v in _CAL_ENV]
            )
        )
    _write(sroot / "screen.tsv", "\n".join(tsv) + "\n")

    # ---- the campaign
    cname = "campaign_20261013_090000"
    croot = dest / cname
    croot.mkdir(parents=True, exist_ok=True)
    _write(
        croot / "campaign.env",
        _env_text(
            [
                ("KIND", "campaign"),
                ("ROUNDS", str(rounds)),
                ("CARDS", str(cards)),
                ("SWITCH", SWITCH),
                ("SCREEN_ROOT", f"../{sname}"),
                ("HOST", HOST),
                ("STARTED_AT", "2026-10-13T09:00:00"),
                ("ZL_BACKEND", "musa"),
                ("ZL_ISOLATE_TUNER_CACHE", "1"),
            ]
        ),
    )
    plan = _greedy([(e["op"], e["dtype"], (e["eb"] + e["ea"]) * rounds / 60.0) for e in entries], cards)
    _write(
        croot / "partition.tsv",
        "card\top\tdtype\tweight_min\n" + "".join(f"{c}\t{op}\t{dt}\t{w:.2f}\n" for c, op, dt, w in plan),
    )
    by_op = {(e["op"], e["dtype"]): e for e in entries}
    t0 = _dt.datetime(2026, 10, 13, 9, 0, 0)
    clock: Dict[int, float] = {}
    for c, op, dt, _ in plan:
        e = by_op[(op, dt)]
        ab = croot / f"card{c}" / f"ab_20261013_{90000 + c:06d}" / op
        for r in range(1, rounds + 1):
            for side in ("before", "after"):
                fb = 0 if (_h("fb", seed, e["idx"], r) % 29 == 0 and side == "after") else None
                elapsed = round((e["eb"] if side == "before" else e["ea"]) * (0.95 + 0.01 * r), 1)
                started = (t0 + _dt.timedelta(seconds=round(clock.get(c, 0.0)))).isoformat()
                clock[c] = clock.get(c, 0.0) + elapsed + 2
                spec = CellSpec(
                    op=op,
                    dtype=dt,
                    side=side,
                    round=r,
                    card=c,
                    elapsed_s=elapsed,
                    started_at=started,
                    caliber=dict(CAMPAIGN_CALIBER),
                    rows=cell_rows(e, side, r),
                    traps=traps_for(k),
                    fallback_record=fb,
                    extra_env={
                        "SWITCH": SWITCH,
                        "SWITCH_VALUE": "0" if side == "before" else "1",
                        "CELL_TIMEOUT": "2400",
                    },
                )
                k += 1
                emit(ab / f"r{r}" / side, spec, e["kb"] if side == "before" else e["ka"])
    loads: Dict[int, float] = {}
    for c, _, _, w in plan:
        loads[c] = loads.get(c, 0.0) + w
    campaign_cells = n_ops * rounds * 2
    return {
        "dest": str(dest),
        "roots": [sname, cname],
        "cells": total_cells,
        "campaign_cells": campaign_cells,
        "screen_cells": n_ops * 2,
        "ops": n_ops,
        "rows": counts["rows"],
        "counted_rows": counts["counted_rows"],
        "ttgir_files": counts["ttgir_files"],
        "distinct_ttgir": len({k for e in entries for k in e["kb"] + e["ka"]}),
        "fallback_cells": counts["fallback_cells"],
        "bytes": _BYTES[0] - bytes0,
        "seconds": round(time.perf_counter() - t_start, 2),
        "screen_verdicts_v3": verdicts,
        "partition": [{"card": c, "op": op, "dtype": dt, "weight_min": round(w, 2)} for c, op, dt, w in plan],
        "critical_path_min": round(max(loads.values()), 2) if loads else 0.0,
    }


# ================================================================= CLI

_GENERATED_TOP = ("ab_", "campaign_")


def _clear(dest: Path, force: bool) -> None:
    """Delete a previously generated tree; refuse anything that does not look like one."""
    if not dest.exists():
        return
    foreign = [p.name for p in dest.iterdir() if not p.name.startswith(_GENERATED_TOP)]
    if foreign and not force:
        raise SystemExit(f"{dest} holds {foreign[:5]}: not a generated runs/ tree (use --force)")
    shutil.rmtree(dest)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.generator",
        description="Write a generated runs/ tree (the example tree, or with --corpus the benchmark corpus).",
    )
    ap.add_argument("dest", help="directory to (re)create")
    ap.add_argument("--corpus", action="store_true", help="write the benchmark corpus instead")
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="corpus size: ops per card = 60 x scale (default 1: 5,760 campaign cells)",
    )
    ap.add_argument("--cards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--kernels", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--manifest", metavar="FILE", help="also write the manifest as JSON to FILE")
    ap.add_argument("--force", action="store_true", help="delete DEST even if it holds other files")
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    _clear(dest, args.force)
    if args.corpus:
        ops = max(1, int(round(60 * args.scale)))

        def prog(done, total):
            if sys.stderr.isatty():
                print(f"\r{done}/{total} cells", end="", file=sys.stderr, flush=True)

        m = make_campaign_corpus(
            dest,
            cards=args.cards,
            ops=ops,
            rounds=args.rounds,
            rows=args.rows,
            kernels=args.kernels,
            seed=args.seed,
            progress=prog,
        )
        if sys.stderr.isatty():
            print(file=sys.stderr)
        print(
            f"{dest}: {m['cells']} cells ({m['campaign_cells']} campaign + {m['screen_cells']} screen), "
            f"{m['rows']} rows, {m['ttgir_files']} .ttgir, {m['bytes'] / 1e6:.1f} MB in {m['seconds']} s"
        )
    else:
        m = make_example_tree(dest)
        print(
            f"{dest}: {m['cells']} cells, {m['rows']} rows ({m['counted_rows']} counted), "
            f"roots: {', '.join(m['roots'])}"
        )
    if args.manifest:
        Path(args.manifest).write_text(json.dumps(m, indent=1, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
