"""FlagGems beyond CUDA: zlstore flaggems loads zlstore_compat
(zlstore/pytest_plugins/zlstore_compat.py), which lifts the CUDA-only skip
guards a non-NVIDIA vendor's code path does not need, each pinned to one
file and one skip reason, and does nothing on CUDA. Against the FlagGems
stand-in, its vendor faked by STANDIN_VENDOR (tests/flaggems_standin/src/flag_gems)."""

import subprocess
import sys

import pytest

from zlstore.run import flaggems
from zlstore.read import outcomes
from zlstore.pytest_plugins import zlstore_compat

from .real_caliber import REAL_CALIBER
from .test_flaggems import STANDIN, env_for


def cell(tmp_path, op, dtype="float32", **standin):
    """One benchmark process of op in a cell directory of its own, as zlstore flaggems runs it."""
    out = tmp_path / f"{op}_{'_'.join(f'{k}{v}' for k, v in standin.items())}"
    env = env_for(tmp_path, **standin)
    run = flaggems.run_cell(
        flaggems.Benchmark(STANDIN, sys.executable, ("--warmup", "2", "--iter", "3")),
        out,
        op,
        dtype,
        "TRITON_F32_DEFAULT",
        "ieee",
        REAL_CALIBER["BENCH_LEVEL"],
        60,
        env,
    )
    log = (out / "run.log").read_bytes()
    return run, outcomes.summary(outcomes.read(log)), log.decode()


def test_a_non_cuda_vendor_measures_fft_once_its_guard_is_lifted(tmp_path):
    run, outcome, log = cell(tmp_path, "fft", STANDIN_VENDOR="mthreads")
    assert run.rc == 0 and run.records == 1 and outcome == ("passed", None)
    assert (
        "zlstore compat: lifted the skip guard 'CUDA is not available' of "
        "benchmark/test_fft.py::test_perf_fft on vendor mthreads"
    ) in log


def test_a_guard_of_another_file_with_the_same_reason_stays(tmp_path):
    run, outcome, log = cell(tmp_path, "cudnn_attention_forward", "float16", STANDIN_VENDOR="mthreads")
    assert run.records == 0 and outcome == ("skipped", "CUDA is not available")
    assert "zlstore compat:" not in log


@pytest.mark.parametrize("cuda", ["0", "1"])
def test_inert_on_cuda(tmp_path, cuda):
    """On NVIDIA the guards are FlagGems' own: fft runs where CUDA is there
    and stays skipped where it is not, and nothing is lifted."""
    run, outcome, log = cell(tmp_path, "fft", STANDIN_VENDOR="nvidia", STANDIN_CUDA=cuda)
    assert "zlstore compat:" not in log
    if cuda == "1":
        assert run.records == 1 and outcome == ("passed", None)
    else:
        assert run.records == 0 and outcome == ("skipped", "CUDA is not available")


def test_inert_where_flag_gems_was_never_imported(tmp_path):
    """A test module that does not import flag_gems: no vendor, nothing lifted."""
    (tmp_path / "test_fft.py").write_text(
        "import pytest\n\n@pytest.mark.skipif(True, reason='CUDA is not available')\ndef test_perf_fft():\n    pass\n"
    )
    env = {"PYTHONPATH": str(flaggems.PLUGIN_DIR), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "zlstore_compat",
            "-p",
            "no:cacheprovider",
            "-rs",
            str(tmp_path / "test_fft.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert "1 skipped" in result.stdout and "zlstore compat:" not in result.stdout


def test_each_override_is_one_file_and_one_reason_and_none_is_kept_too():
    assert all(
        name.startswith("test_") and name.endswith(".py") and reason for name, reason in zlstore_compat.OVERRIDES
    )
    assert not set(zlstore_compat.OVERRIDES) & set(zlstore_compat.KEPT)
    for name, reason in (*zlstore_compat.OVERRIDES, *zlstore_compat.KEPT):
        assert name in zlstore_compat.__doc__ and reason in " ".join(zlstore_compat.__doc__.split())
    # the compat plugin comes first: it rewrites marks before any other plugin reads the items
    assert flaggems.PLUGINS[0] == "zlstore_compat"
