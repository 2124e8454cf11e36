import pytest

from benchmark.performance_utils import Benchmark


@pytest.mark.topk
def test_topk():
    Benchmark("topk", "topk", dtypes=("float16", "float32"), shape_desc="M, N, k").run()
