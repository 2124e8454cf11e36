"""A stand-in for the flag_gems package, as FlagGems' benchmark reads it:
the vendor it dispatched to (vendor_name) and its device. Which one comes
from $STANDIN_VENDOR (nvidia by default, then cuda; mthreads: musa), so a
test can fake a non-CUDA vendor without one. cuda_available() stands in
for torch.cuda.is_available(): true on nvidia unless STANDIN_CUDA=0."""

import os

_DEVICES = {"nvidia": "cuda", "mthreads": "musa", "metax": "cuda", "iluvatar": "cuda", "cambricon": "mlu"}

vendor_name = os.environ.get("STANDIN_VENDOR") or "nvidia"
device = _DEVICES.get(vendor_name, vendor_name)


def cuda_available() -> bool:
    default = "1" if vendor_name == "nvidia" else "0"
    return (os.environ.get("STANDIN_CUDA") or default) == "1"
