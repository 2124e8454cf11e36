import pytest

from benchmark.performance_utils import Benchmark


@pytest.mark.abs
def test_abs():
    Benchmark("abs", "pointwise").run()


@pytest.mark.abs_
def test_abs_():
    Benchmark("abs_", "pointwise").run()
