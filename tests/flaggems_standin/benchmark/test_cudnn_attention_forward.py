import pytest

import flag_gems
from benchmark.performance_utils import Benchmark


# As FlagGems guards its cuDNN attention: CUDA only, and rightly (cuDNN is
# NVIDIA's); the same reason as test_fft.py's guard, in another file: no
# compat override lifts it.
@pytest.mark.skipif(not flag_gems.cuda_available(), reason="CUDA is not available")
@pytest.mark.cudnn_attention_forward
def test_perf_cudnn_attention_forward():
    Benchmark("cudnn_attention_forward", "pointwise", dtypes=("float16",)).run()
