import pytest

from benchmark.performance_utils import Benchmark


@pytest.mark.mm
def test_mm():
    Benchmark("mm", "mm", shape_desc="M, K, N").run()
