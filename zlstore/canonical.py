"""Canonical JSON, the one encoder: keys sorted at every depth, no spaces
(separators "," and ":"), NaN and the infinities as JavaScript spells them.
A row's shape is compared across cells in it (runlog.canonical_shape), and a
cell's fingerprint hashes its kernels in it, ASCII only (ttgir.combine).
Imports nothing of zlstore."""

import json
from typing import Any, Callable


def json_encoder(ascii: bool) -> json.JSONEncoder:
    """The encoder; ascii: every character beyond ASCII escaped (\\uXXXX)."""
    return json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=ascii, allow_nan=True)


def encode_function(ascii: bool) -> Callable[[Any], str]:
    """json_encoder(ascii).encode, with its C encoder made once rather than
    per call: encode() builds a new one each time, which costs more than
    encoding a shape or a fingerprint's document. No circular check: parsed
    JSON and a fingerprint's document have no cycles (a cycle still ends in
    RecursionError)."""
    python = json_encoder(ascii)
    make = getattr(json.encoder, "c_make_encoder", None)  # private: typeshed does not declare it
    if make is None:
        return python.encode
    strings = json.encoder.encode_basestring_ascii if ascii else json.encoder.encode_basestring
    fast = make(None, python.default, strings, None, ":", ",", True, False, True)
    return lambda value: "".join(fast(value, 0))
