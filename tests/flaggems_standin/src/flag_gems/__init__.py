"""A stand-in for FlagGems' flag_gems package (src/flag_gems, on sys.path
through pytest.ini's `pythonpath = src`, as in FlagGems' checkout): what the
benchmark's conftest imports. STANDIN_IMPORTS names a file to append one
JSON line to per import, so that tests can count the processes that
imported it."""

import json
import os

__version__ = "0.0.standin"
device = "cuda"
vendor_name = "standin"

if os.environ.get("STANDIN_IMPORTS"):
    with open(os.environ["STANDIN_IMPORTS"], "a") as _out:
        _out.write(json.dumps({"pid": os.getpid(), "cwd": os.getcwd()}) + "\n")
