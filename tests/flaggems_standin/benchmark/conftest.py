"""A stand-in for FlagGems' benchmark/conftest.py, without torch or a GPU.

It takes FlagGems' options (--mode, --level, --warmup, --iter, --query,
--metrics, --dtypes, --shape_file, --record) and, with --record log, sends
the records to a `result_<args>.log` file in the working directory under the
very name FlagGems' conftest gives it (the code below is FlagGems'). What
`zlstore flaggems` relies on is this file, the Triton cache under
TRITON_CACHE_DIR and the generated code under FLAGGEMS_CACHE_DIR
(performance_utils.py)."""

import logging
import os

DTYPE_NAMES = ("float16", "float32", "bfloat16", "int16", "int32", "bool", "cfloat")
BENCH_LEVELS = ("comprehensive", "core")
DEFAULT_WARMUP_COUNT = 1000
DEFAULT_ITER_COUNT = 100


class BenchConfig:
    def __init__(self):
        self.mode = "kernel"
        self.bench_level = "comprehensive"
        self.warm_up = DEFAULT_WARMUP_COUNT
        self.repetition = DEFAULT_ITER_COUNT
        self.record_log = False
        self.user_desired_dtypes = None
        self.user_desired_metrics = None
        self.shape_file = os.path.join(os.path.dirname(__file__), "core_shapes.yaml")
        self.query = False


Config = BenchConfig()


def pytest_addoption(parser):
    parser.addoption("--mode", action="store", default="kernel", choices=["kernel", "operator", "wrapper"],
                     help="Specify how to measure latency.")
    parser.addoption("--level", action="store", default="comprehensive", choices=list(BENCH_LEVELS),
                     help="Specify the benchmark level: comprehensive, or core.")
    parser.addoption("--warmup", default=DEFAULT_WARMUP_COUNT, help="Number of warmup runs before benchmark run.")
    parser.addoption("--iter", default=DEFAULT_ITER_COUNT, help="Number of reps for each benchmark run.")
    parser.addoption("--query", action="store_true", default=False, help="Enable query mode")
    parser.addoption("--metrics", action="append", default=None,
                     choices=["latency_base", "latency", "speedup", "gbps", "tflops", "accuracy", "utilization"])
    parser.addoption("--dtypes", action="append", default=None, choices=list(DTYPE_NAMES),
                     help="Specify the data types for benchmarks.")
    parser.addoption("--shape_file", action="store", default=Config.shape_file,
                     help="Specify the shape file name for benchmarks.")
    parser.addoption("--record", action="store", default="none", choices=["none", "log"],
                     help="Benchmark info recorded in log files or not")


def pytest_configure(config):
    Config.mode = config.getoption("--mode")
    Config.query = config.getoption("--query")
    Config.bench_level = config.getoption("--level")
    Config.warm_up = int(config.getoption("--warmup"))
    Config.repetition = int(config.getoption("--iter"))
    Config.user_desired_dtypes = config.getoption("--dtypes")
    Config.user_desired_metrics = config.getoption("--metrics")
    Config.shape_file = config.getoption("--shape_file")
    Config.record_log = config.getoption("--record") == "log"
    if Config.record_log:
        # FlagGems' own naming, unchanged: the file lands in the working directory.
        cmd_args = [
            arg.replace(".py", "").replace("=", "_").replace("/", "_")
            for arg in config.invocation_params.args
        ]
        logging.basicConfig(
            filename="result_{}.log".format("_".join(cmd_args)).replace("_-", "-"),
            filemode="w",
            level=logging.INFO,
            format="[%(levelname)s] %(message)s",
        )
        logging.info("Benchmark record logger enabled")
