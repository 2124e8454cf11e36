"""The stand-in's Benchmark: what FlagGems' benchmark/performance_utils.py
does as far as `zlstore flaggems` can see it, with no torch and no GPU.

- One `[INFO] {json}` record per dtype through `logging` (the result file
  conftest.py opened), in FlagGems' BenchmarkResult layout; in --query mode
  the operator's attributes as a Python dict repr, as FlagGems logs them.
- Kernels "compiled" into a Triton-like cache: <TRITON_CACHE_DIR>/<hash>/
  <kernel>.ttgir with its .json and __grp__ .json. The hash covers
  TRITON_F32_DEFAULT (a cache-invalidating variable in Triton), so it
  differs by side even where the IR does not.
- Generated kernels (abs, like FlagGems' pointwise_dynamic) are written
  under FLAGGEMS_CACHE_DIR/code_cache and their IR's locations point there:
  two cells with their own caches give the same IR different `loc` paths.

Where the IR depends on the switch: mm's tt.dot on float32 operands takes
TRITON_F32_DEFAULT as its inputPrecision (IR_CHANGED for mm:float32); abs,
softmax and topk compile the same IR under every value. mm compiles two
autotune configs (block 64 and 128) whose shared memory, on float32, grows
under tf32, as bmm's did on the H100.

Controls for tests (environment):
    STANDIN_SLEEP    seconds each benchmark takes, default 0
    STANDIN_HANG     op or op:value items (value: TRITON_F32_DEFAULT's) that
                     hang after their first record, with a child sleeper
    STANDIN_PID_DIR  a directory to leave one file per process (name = pid)
    STANDIN_TRACE    a file to append one JSON line per benchmark start and end
                     (pid, op, cwd, the caches, the switch value, time)
    STANDIN_MEET     DIR:N: after its start, each benchmark leaves a file in DIR
                     and waits (60 s at most) until N have, so that N cells
                     overlap however slowly a loaded machine starts them
"""

import base64
import hashlib
import json
import logging
import os
import random
import subprocess
import time
from pathlib import Path

from .conftest import Config

F32_DEFAULT_VAR = "TRITON_F32_DEFAULT"
F32_DEFAULT = "tf32"  # Triton's own default on NVIDIA
ELEMENT_TYPES = {"float16": "f16", "float32": "f32", "bfloat16": "bf16"}
FLOAT_DTYPES = ("float16", "float32", "bfloat16")
SHAPES = {  # core shapes first; comprehensive adds the rest
    "pointwise": ([[64, 64]], [[4096, 4096]], [[64, 512, 512]], [[1024, 1024, 1024]]),
    "softmax": ([[64, 64], 1], [[4096, 4096], 1], [[1048576], 0], [[64, 512, 512], 2]),
    "mm": (
        [[384, 384], [384, 384]],
        [[1024, 1024], [1024, 1024]],
        [[4096, 4096], [4096, 4096]],
        [[2048, 2048], [2048, 2048]],
    ),
    "topk": ([[64, 1024], 32], [[1024, 4096], 64], [[8, 256], 4], [[4096, 4096], 128]),
}
CORE_SHAPES = 3
# How much faster FlagGems' kernel runs under each TRITON_F32_DEFAULT value,
# where the value reaches the code (mm on float32).
DOT_SPEED = {"ieee": 1.0, "tf32": 0.5, "tf32x3": 0.8}
# mm autotunes two configs, as FlagGems' bmm with its list trimmed to two:
# one kernel of one name per block size.
AUTOTUNE_BLOCKS = (64, 128)


def _items(name):
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def _pid(pid):
    directory = os.environ.get("STANDIN_PID_DIR")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / str(pid)).write_text("")


def _meet():
    """Wait for the others that STANDIN_MEET names: an overlap a test can
    rely on without counting on how fast processes start."""
    meet = os.environ.get("STANDIN_MEET")
    if not meet:
        return
    directory, count = meet.rsplit(":", 1)
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / str(os.getpid())).write_text("")
    deadline = time.monotonic() + 60
    while len(list(Path(directory).iterdir())) < int(count) and time.monotonic() < deadline:
        time.sleep(0.05)


def _trace(event, op):
    path = os.environ.get("STANDIN_TRACE")
    if not path:
        return
    line = json.dumps(
        {
            "event": event,
            "pid": os.getpid(),
            "op": op,
            "cwd": os.getcwd(),
            "triton_cache": os.environ.get("TRITON_CACHE_DIR"),
            "flaggems_cache": os.environ.get("FLAGGEMS_CACHE_DIR"),
            "f32_default": os.environ.get(F32_DEFAULT_VAR),
            "time": time.time(),
        }
    )
    with open(path, "a") as out:
        out.write(line + "\n")


def _hang():
    child = subprocess.Popen(["sleep", "1000"])
    _pid(child.pid)
    while True:
        time.sleep(1000)


# -- the Triton-like caches ------------------------------------------------------


def triton_cache_dir() -> Path:
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def flaggems_code_cache() -> Path:
    """flag_gems.utils.code_cache.code_cache_dir(), same variable, same default."""
    directory = Path(os.environ.get("FLAGGEMS_CACHE_DIR") or Path.home() / ".flaggems") / "code_cache"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _put(directory: Path, name: str, text: str):
    """Written aside and renamed into place, as Triton's FileCacheManager does."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"tmp.pid_{os.getpid()}_{random.getrandbits(32):08x}"
    tmp.mkdir()
    (tmp / name).write_text(text)
    os.replace(tmp / name, directory / name)
    tmp.rmdir()


def compile_kernel(kernel: str, source: str, ttgir: str, f32_default: str, shared: int = 0):
    """A kernel into the cache: the key covers the source and the switch's
    environment, never only the IR."""
    key = hashlib.sha256(f"{kernel}\0{source}\0{F32_DEFAULT_VAR}={f32_default}".encode()).digest()
    name = base64.b32encode(key).decode().rstrip("=")
    directory = triton_cache_dir() / name
    if (directory / f"{kernel}.ttgir").is_file():
        return  # a warm cache: nothing compiled
    meta = {
        "hash": key.hex(),
        "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
        "num_warps": 4,
        "num_stages": 3,
        "shared": shared,
        "default_dot_input_precision": f32_default,
        F32_DEFAULT_VAR: f32_default,
        "triton_version": "standin",
        "name": kernel,
    }
    _put(directory, f"{kernel}.ttgir", ttgir)
    _put(directory, f"{kernel}.json", json.dumps(meta))
    _put(
        directory,
        f"__grp__{kernel}.json",
        json.dumps(
            {"child_paths": {f"{kernel}.{ext}": str(directory / f"{kernel}.{ext}") for ext in ("ttgir", "json")}}
        ),
    )


# -- the IR ------------------------------------------------------------------------------

_POINTWISE = """\
#blocked = #ttg.blocked<{{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}}>
#loc = loc("{src}":{line}:0)
#loc9 = loc("in0_ptr"(#loc))
#loc10 = loc("out0_ptr"(#loc))
#loc11 = loc("n"(#loc))
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "cuda:90", "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @{kernel}(%in0_ptr: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("in0_ptr"(#loc)), %out0_ptr: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("out0_ptr"(#loc)), %n: i32 loc("n"(#loc))) attributes {{noinline = false}} {{
    %c512_i32 = arith.constant 512 : i32 loc(#loc1)
    %pid = tt.get_program_id x : i32 loc(#loc2)
    %offs = arith.muli %pid, %c512_i32 : i32 loc(#loc2)
    %range = tt.make_range {{end = 512 : i32, start = 0 : i32}} : tensor<512xi32, #blocked> loc(#loc3)
    %base = tt.splat %offs : i32 -> tensor<512xi32, #blocked> loc(#loc3)
    %idx = arith.addi %base, %range : tensor<512xi32, #blocked> loc(#loc3)
    %bound = tt.splat %n : i32 -> tensor<512xi32, #blocked> loc(#loc3)
    %mask = arith.cmpi slt, %idx, %bound : tensor<512xi32, #blocked> loc(#loc3)
    %in = tt.splat %in0_ptr : !tt.ptr<{ety}> -> tensor<512x!tt.ptr<{ety}>, #blocked> loc(#loc4)
    %in_1 = tt.addptr %in, %idx : tensor<512x!tt.ptr<{ety}>, #blocked>, tensor<512xi32, #blocked> loc(#loc4)
    %x = tt.load %in_1, %mask : tensor<512x!tt.ptr<{ety}>, #blocked> loc(#loc4)
    %y = {op} %x : tensor<512x{ety}, #blocked> loc(#loc5)
    %out = tt.splat %out0_ptr : !tt.ptr<{ety}> -> tensor<512x!tt.ptr<{ety}>, #blocked> loc(#loc6)
    %out_1 = tt.addptr %out, %idx : tensor<512x!tt.ptr<{ety}>, #blocked>, tensor<512xi32, #blocked> loc(#loc6)
    tt.store %out_1, %y, %mask : tensor<512x!tt.ptr<{ety}>, #blocked> loc(#loc6)
    tt.return loc(#loc7)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("{src}":{line2}:24)
#loc3 = loc("{src}":{line3}:16)
#loc4 = loc("{src}":{line4}:19)
#loc5 = loc("{src}":{line5}:12)
#loc6 = loc("{src}":{line6}:8)
#loc7 = loc("{src}":{line6}:4)
"""

_SOFTMAX = """\
#blocked = #ttg.blocked<{{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}}>
#blocked1 = #ttg.blocked<{{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}}>
#loc = loc("{src}":{line}:0)
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "cuda:90", "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @{kernel}(%out_ptr: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("out_ptr"(#loc)), %in_ptr: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("in_ptr"(#loc))) attributes {{noinline = false}} {{
    %range = tt.make_range {{end = 1024 : i32, start = 0 : i32}} : tensor<1024xi32, #blocked> loc(#loc1)
    %in = tt.splat %in_ptr : !tt.ptr<{ety}> -> tensor<1024x!tt.ptr<{ety}>, #blocked> loc(#loc2)
    %in_1 = tt.addptr %in, %range : tensor<1024x!tt.ptr<{ety}>, #blocked>, tensor<1024xi32, #blocked> loc(#loc2)
    %x = tt.load %in_1 : tensor<1024x!tt.ptr<{ety}>, #blocked> loc(#loc2)
    %m = "tt.reduce"(%x) <{{axis = 0 : i32}}> ({{
    ^bb0(%a: {ety} loc(unknown), %b: {ety} loc(unknown)):
      %max = arith.maxnumf %a, %b : {ety} loc(#loc3)
      tt.reduce.return %max : {ety} loc(#loc3)
    }}) : (tensor<1024x{ety}, #blocked>) -> {ety} loc(#loc3)
    %ms = tt.splat %m : {ety} -> tensor<1024x{ety}, #blocked> loc(#loc4)
    %d = arith.subf %x, %ms : tensor<1024x{ety}, #blocked> loc(#loc4)
    %e = math.exp %d : tensor<1024x{ety}, #blocked> loc(#loc4)
    %e_1 = ttg.convert_layout %e : tensor<1024x{ety}, #blocked> -> tensor<1024x{ety}, #blocked1> loc(#loc5)
    %s = "tt.reduce"(%e_1) <{{axis = 0 : i32}}> ({{
    ^bb0(%a: {ety} loc(unknown), %b: {ety} loc(unknown)):
      %sum = arith.addf %a, %b : {ety} loc(#loc5)
      tt.reduce.return %sum : {ety} loc(#loc5)
    }}) : (tensor<1024x{ety}, #blocked1>) -> {ety} loc(#loc5)
    %ss = tt.splat %s : {ety} -> tensor<1024x{ety}, #blocked> loc(#loc6)
    %y = arith.divf %e, %ss : tensor<1024x{ety}, #blocked> loc(#loc6)
    %out = tt.splat %out_ptr : !tt.ptr<{ety}> -> tensor<1024x!tt.ptr<{ety}>, #blocked> loc(#loc7)
    %out_1 = tt.addptr %out, %range : tensor<1024x!tt.ptr<{ety}>, #blocked>, tensor<1024xi32, #blocked> loc(#loc7)
    tt.store %out_1, %y : tensor<1024x!tt.ptr<{ety}>, #blocked> loc(#loc7)
    tt.return loc(#loc8)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc("{src}":{line2}:20)
#loc2 = loc("{src}":{line3}:16)
#loc3 = loc("{src}":{line4}:22)
#loc4 = loc("{src}":{line4}:40)
#loc5 = loc("{src}":{line5}:14)
#loc6 = loc("{src}":{line6}:12)
#loc7 = loc("{src}":{line6}:30)
#loc8 = loc("{src}":{line6}:4)
"""

_MM = """\
#blocked = #ttg.blocked<{{sizePerThread = [1, 4], threadsPerWarp = [8, 4], warpsPerCTA = [4, 1], order = [1, 0]}}>
#mma = #ttg.nvidia_mma<{{versionMajor = 2, versionMinor = 0, warpsPerCTA = [2, 2], instrShape = [16, 8]}}>
#loc = loc("{src}":{line}:0)
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "cuda:90", "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @{kernel}(%A: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("A"(#loc)), %B: !tt.ptr<{ety}> {{tt.divisibility = 16 : i32}} loc("B"(#loc)), %C: !tt.ptr<f32> {{tt.divisibility = 16 : i32}} loc("C"(#loc))) attributes {{noinline = false}} {{
    %cst = arith.constant dense<0.000000e+00> : tensor<{bm}x{bm}xf32, #mma> loc(#loc1)
    %a_ptrs = tt.splat %A : !tt.ptr<{ety}> -> tensor<{bm}x32x!tt.ptr<{ety}>, #blocked> loc(#loc2)
    %b_ptrs = tt.splat %B : !tt.ptr<{ety}> -> tensor<32x{bm}x!tt.ptr<{ety}>, #blocked> loc(#loc3)
    %a = tt.load %a_ptrs : tensor<{bm}x32x!tt.ptr<{ety}>, #blocked> loc(#loc2)
    %b = tt.load %b_ptrs : tensor<32x{bm}x!tt.ptr<{ety}>, #blocked> loc(#loc3)
    %a_1 = ttg.convert_layout %a : tensor<{bm}x32x{ety}, #blocked> -> tensor<{bm}x32x{ety}, #ttg.dot_op<{{opIdx = 0, parent = #mma, kWidth = 1}}>> loc(#loc4)
    %b_1 = ttg.convert_layout %b : tensor<32x{bm}x{ety}, #blocked> -> tensor<32x{bm}x{ety}, #ttg.dot_op<{{opIdx = 1, parent = #mma, kWidth = 1}}>> loc(#loc4)
    %acc = tt.dot %a_1, %b_1, %cst{precision} : tensor<{bm}x32x{ety}, #ttg.dot_op<{{opIdx = 0, parent = #mma, kWidth = 1}}>> * tensor<32x{bm}x{ety}, #ttg.dot_op<{{opIdx = 1, parent = #mma, kWidth = 1}}>> -> tensor<{bm}x{bm}xf32, #mma> loc(#loc4)
    %c = ttg.convert_layout %acc : tensor<{bm}x{bm}xf32, #mma> -> tensor<{bm}x{bm}xf32, #blocked> loc(#loc5)
    %c_ptrs = tt.splat %C : !tt.ptr<f32> -> tensor<{bm}x{bm}x!tt.ptr<f32>, #blocked> loc(#loc5)
    tt.store %c_ptrs, %c : tensor<{bm}x{bm}x!tt.ptr<f32>, #blocked> loc(#loc5)
    tt.return loc(#loc6)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("{src}":{line2}:20)
#loc3 = loc("{src}":{line3}:20)
#loc4 = loc("{src}":{line4}:23)
#loc5 = loc("{src}":{line5}:8)
#loc6 = loc("{src}":{line5}:4)
"""

TEMPLATES = {"pointwise": _POINTWISE, "softmax": _SOFTMAX, "mm": _MM, "topk": _POINTWISE}
UNARY = {"abs": "math.absf", "exp": "math.exp", "neg": "arith.negf", "topk": "math.absf"}
# Where a kernel's source lives: FlagGems' own files (the same path in every
# cell) for hand-written kernels; generated ones are written per cache.
KERNEL_SOURCE = Path(__file__).resolve().parent / "kernels.py"


def ttgir_text(
    kind: str, kernel: str, op: str, ety: str, src: str, line: int, f32_default: str, block: int = 64
) -> str:
    precision = f", inputPrecision = {f32_default}" if kind == "mm" and ety == "f32" else ""
    return TEMPLATES[kind].format(
        src=src,
        line=line,
        line2=line + 3,
        line3=line + 9,
        line4=line + 10,
        line5=line + 11,
        line6=line + 12,
        kernel=kernel,
        ety=ety,
        op=UNARY.get(op, "math.absf"),
        precision=precision,
        bm=block,
    )


def shared_memory(kind: str, ety: str, f32_default: str, block: int) -> int:
    """What Triton reports as the kernel's shared memory: mm's grows with its
    block and, on float32 under tf32, with the operands' swizzled layout
    (as bmm's did on the H100: 32768 -> 49152 and 65536 -> 98304)."""
    if kind != "mm":
        return 0
    return block * 512 * (3 if ety == "f32" and f32_default != "ieee" else 2) // 2


def kernel_source(kind: str, kernel: str, op: str, ety: str) -> str:
    """Where the kernel's code is: generated into FlagGems' code cache for
    pointwise ops (as pointwise_dynamic does), else FlagGems' own file."""
    if kind != "pointwise":
        return str(KERNEL_SOURCE)
    code = (
        f"# generated by the stand-in's pointwise_dynamic\n@triton.jit\ndef {kernel}(in0_ptr, out0_ptr, n):\n    ...\n"
    )
    digest = hashlib.sha256(f"{op}{ety}{code}".encode()).hexdigest()
    path = flaggems_code_cache() / f"pointwise_dynamic_{digest}_{kernel}_bptr_t512.py"
    path.write_text(code)
    return str(path)


class Benchmark:
    """One operator over its dtypes and the level's shapes."""

    def __init__(self, op_name: str, kind: str, dtypes=FLOAT_DTYPES, shape_desc: str = "M, N"):
        self.op_name, self.kind, self.dtypes, self.shape_desc = op_name, kind, dtypes, shape_desc

    @property
    def kernel(self) -> str:
        return {
            "pointwise": f"{self.op_name}_func_kernel_rank_1",
            "softmax": "softmax_kernel_inner",
            "mm": "mm_kernel_general",
            "topk": "topk_stage1_kernel",
        }[self.kind]

    def shapes(self):
        shapes = SHAPES[self.kind]
        return shapes[:CORE_SHAPES] if Config.bench_level == "core" else shapes

    def run(self):
        if Config.query:
            attributes = {
                "op_name": self.op_name,
                "recommended_core_shapes": self.shapes(),
                "shape_desc": self.shape_desc,
            }
            print(attributes)
            logging.info(attributes)
            return
        f32_default = os.environ.get(F32_DEFAULT_VAR) or F32_DEFAULT
        hang = self.op_name in _items("STANDIN_HANG") or f"{self.op_name}:{f32_default}" in _items("STANDIN_HANG")
        _trace("start", self.op_name)
        _meet()
        dtypes = [d for d in self.dtypes if not Config.user_desired_dtypes or d in Config.user_desired_dtypes]
        for dtype in dtypes:
            ety = ELEMENT_TYPES[dtype]
            src = kernel_source(self.kind, self.kernel, self.op_name, ety)
            for block in AUTOTUNE_BLOCKS if self.kind == "mm" else (64,):
                text = ttgir_text(self.kind, self.kernel, self.op_name, ety, src, 40, f32_default, block)
                compile_kernel(
                    self.kernel,
                    f"{src}{ety}{block}",
                    text,
                    f32_default,
                    shared_memory(self.kind, ety, f32_default, block),
                )
            result = {
                "op_name": self.op_name,
                "dtype": f"torch.{dtype}",
                "mode": Config.mode,
                "level": Config.bench_level,
                "result": [self.metrics(shape, dtype, f32_default) for shape in self.shapes()],
            }
            print(result)
            logging.info(json.dumps(result))
            if hang:
                _hang()
        time.sleep(float(os.environ.get("STANDIN_SLEEP") or 0))
        _trace("end", self.op_name)

    def metrics(self, shape, dtype, f32_default) -> dict:
        """FlagGems' BenchmarkMetrics fields; latencies in ms with a little
        noise; mm on float32 runs at the speed its dot precision allows."""
        numel = 1
        for n in shape[0]:  # the first input's elements
            numel *= n
        base = 0.004 + numel * (4 if dtype == "float32" else 2) / 3.0e9
        speed = DOT_SPEED.get(f32_default, 1.0) if self.kind == "mm" and dtype == "float32" else 1.0
        latency_base = base * random.uniform(0.99, 1.01)
        latency = base * 1.05 * speed * random.uniform(0.99, 1.01)
        wanted = Config.user_desired_metrics

        def metric(name, value):
            return value if not wanted or name in wanted else None

        return {
            "legacy_shape": None,
            "shape_detail": shape,
            "latency_base": metric("latency_base", latency_base),
            "latency": metric("latency", latency),
            "gbps_base": None,
            "gbps": None,
            "speedup": metric("speedup", latency_base / latency),
            "accuracy": None,
            "tflops": None,
            "utilization": None,
            "compared_speedup": None,
            "error_msg": None,
        }
