"""A stand-in for FlagGems' flag_gems package (src/flag_gems, on sys.path
through pytest.ini's `pythonpath = src`, as in FlagGems' checkout): what the
benchmark's conftest imports and reads, the vendor it dispatched to
(vendor_name) and its device. Which vendor comes from $STANDIN_VENDOR
(nvidia by default, then cuda; mthreads: musa), so a test can fake a
non-CUDA vendor without one. cuda_available() stands in for
torch.cuda.is_available(): true on nvidia unless STANDIN_CUDA=0.
STANDIN_IMPORTS names a file to append one JSON line to per import, so
that tests can count the processes that imported it."""

import json
import os

__version__ = "0.0.standin"

_DEVICES = {"nvidia": "cuda", "mthreads": "musa", "metax": "cuda", "iluvatar": "cuda", "cambricon": "mlu"}

vendor_name = os.environ.get("STANDIN_VENDOR") or "nvidia"
device = _DEVICES.get(vendor_name, vendor_name)


def cuda_available() -> bool:
    default = "1" if vendor_name == "nvidia" else "0"
    return (os.environ.get("STANDIN_CUDA") or default) == "1"


if os.environ.get("STANDIN_IMPORTS"):
    with open(os.environ["STANDIN_IMPORTS"], "a") as _out:
        _out.write(json.dumps({"pid": os.getpid(), "cwd": os.getcwd()}) + "\n")
