"""A stand-in for FlagGems' benchmark/conftest.py, without torch or a GPU.

It takes FlagGems' options (--mode, --level, --warmup, --iter, --query,
--metrics, --dtypes, --shape_file, --record) and, with --record log, sends
the records to a `result_<args>.log` file in the working directory, named as
FlagGems names it (record_file_name). What
`zlstore flaggems` relies on is this file, the Triton cache under
TRITON_CACHE_DIR and the generated code under FLAGGEMS_CACHE_DIR
(performance_utils.py)."""

import logging
import os

import flag_gems  # noqa: F401 (as FlagGems' conftest: the benchmark cannot start without it)

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
    parser.addoption(
        "--mode",
        action="store",
        default="kernel",
        choices=["kernel", "operator", "wrapper"],
        help="what the latency measures",
    )
    parser.addoption(
        "--level",
        action="store",
        default="comprehensive",
        choices=list(BENCH_LEVELS),
        help="which shapes: core or comprehensive",
    )
    parser.addoption("--warmup", default=DEFAULT_WARMUP_COUNT, help="warm-up runs")
    parser.addoption("--iter", default=DEFAULT_ITER_COUNT, help="timed runs")
    parser.addoption(
        "--query", action="store_true", default=False, help="log the ops' attributes instead of timing them"
    )
    parser.addoption(
        "--metrics",
        action="append",
        default=None,
        choices=["latency_base", "latency", "speedup", "gbps", "tflops", "accuracy", "utilization"],
    )
    parser.addoption("--dtypes", action="append", default=None, choices=list(DTYPE_NAMES), help="dtypes to run")
    parser.addoption("--shape_file", action="store", default=Config.shape_file, help="a shape file")
    parser.addoption(
        "--record",
        action="store",
        default="none",
        choices=["none", "log"],
        help="log: write the records to result_<args>.log",
    )


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
        logging.basicConfig(
            filename=record_file_name(config.invocation_params.args),
            filemode="w",
            level=logging.INFO,
            format="[%(levelname)s] %(message)s",
        )
        logging.info("Benchmark record logger enabled")


def record_file_name(args) -> str:
    """The record file FlagGems' benchmark names after its command line:
    result_ and the arguments joined by "_", each
    without ".py" and with "=" and "/" made "_"; "_-" is then "-"."""
    parts = [arg.replace(".py", "").replace("=", "_").replace("/", "_") for arg in args]
    return ("result_" + "_".join(parts)).replace("_-", "-") + ".log"
