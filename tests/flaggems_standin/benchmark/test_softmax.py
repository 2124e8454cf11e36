import pytest

from benchmark.performance_utils import Benchmark


@pytest.mark.softmax
def test_softmax():
    Benchmark("softmax", "softmax", shape_desc="M, N, dim").run()
