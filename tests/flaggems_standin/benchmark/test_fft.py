import pytest

import flag_gems
from benchmark.performance_utils import Benchmark


# As FlagGems' benchmark/test_fft.py guards it: torch.cuda.is_available(),
# though the op dispatches through flag_gems.device (it runs on MUSA).
@pytest.mark.skipif(not flag_gems.cuda_available(), reason="CUDA is not available")
@pytest.mark.fft
def test_perf_fft():
    Benchmark("fft", "pointwise", dtypes=("float32",)).run()
