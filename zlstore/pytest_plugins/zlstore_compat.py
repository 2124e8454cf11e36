"""FlagGems' benchmark beyond CUDA: loaded by `zlstore flaggems` (-p
zlstore_compat) before any other of its plugins. Where flag_gems has
dispatched to a vendor other than NVIDIA (flag_gems.vendor_name), it lifts
the skip guards that FlagGems wrote as `torch.cuda.is_available()` but that
the vendor's code path does not need: the op dispatches through
flag_gems.device, and the guard would record a working operator as "not
measured". Each override is pinned to one test file and one exact skip
reason (OVERRIDES); a guard of another file, or with another reason, is
left alone. Every guard lifted is said on a line of its own in the output
(run.log). It does nothing where flag_gems was not imported or its vendor
is nvidia.

Lifted (OVERRIDES):

* benchmark/test_fft.py, "CUDA is not available": fft runs through
  flag_gems.device; skipped entirely on MThreads, unskipped on an S5000 it
  gave 25 rows.

Kept on purpose (KEPT; their vendor path needs CUDA, or nobody has run them
on a vendor device yet, so a lifted guard would fail rather than measure):

* test_cudnn_attention_forward.py, "CUDA is not available": cuDNN is
  NVIDIA's library; there is no vendor path.
* test_apply_repetition_penalties.py, "CUDA required": its baseline is
  vLLM's CUDA op.
* test_embedding_dense_backward.py, "CUDA backend is not available for
  this benchmark.": the guard tests flag_gems.device == "cuda" itself.
* test_scaled_dot_product_attention_math.py and
  test_flash_attention_forward.py, "CUDA is not available": not probed on a
  vendor device.

Standalone: imports nothing of zlstore (the benchmark's Python need not
have it)."""

import os
import sys

import pytest

# (test file name, exact skip reason) -> why the vendor's path does not need it
OVERRIDES = {
    (
        "test_fft.py",
        "CUDA is not available",
    ): "fft dispatches through flag_gems.device (25 rows on an MThreads S5000 once unskipped)",
}
KEPT = {
    ("test_cudnn_attention_forward.py", "CUDA is not available"): "cuDNN is NVIDIA's library",
    ("test_apply_repetition_penalties.py", "CUDA required"): "its baseline is vLLM's CUDA op",
    (
        "test_embedding_dense_backward.py",
        "CUDA backend is not available for this benchmark.",
    ): "the guard tests flag_gems.device itself",
    ("test_scaled_dot_product_attention_math.py", "CUDA is not available"): "not probed on a vendor device",
    ("test_flash_attention_forward.py", "CUDA is not available"): "not probed on a vendor device",
}
NVIDIA = "nvidia"
NOTE = "zlstore compat: "


def vendor():
    """The vendor flag_gems dispatched to, where the benchmark imported it; else None."""
    flag_gems = sys.modules.get("flag_gems")
    name = getattr(flag_gems, "vendor_name", None) if flag_gems is not None else None
    return str(name).strip().lower() if name else None


def lifted_marks(item):
    """The skipif marks of item that an override lifts."""
    name = os.path.basename(str(getattr(item, "path", None) or item.fspath))
    return [
        mark for mark in item.own_markers if mark.name == "skipif" and (name, mark.kwargs.get("reason")) in OVERRIDES
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    dispatched = vendor()
    if dispatched is None or dispatched == NVIDIA:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for item in items:
        lifted = lifted_marks(item)
        if not lifted:
            continue
        item.own_markers = [mark for mark in item.own_markers if all(mark is not m for m in lifted)]
        for mark in lifted:
            line = (
                f"{NOTE}lifted the skip guard {mark.kwargs['reason']!r} of {item.nodeid} on vendor "
                f"{dispatched}: {OVERRIDES[(os.path.basename(str(item.fspath)), mark.kwargs['reason'])]}"
            )
            if reporter is not None:
                reporter.write_line(line)
            else:
                print(line)
