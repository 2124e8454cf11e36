"""run.log parsing: the real FlagGems samples, and one test per way a real log
can break a naive reader."""

import json
import math
import os
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

try:
    import zlstore.read.runlog  # noqa: F401
except ImportError:  # a fresh clone run with bare `pytest`, package not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import given, settings
from hypothesis import strategies as st

from zlstore.read import runlog
from zlstore.read.runlog import (
    KNOWN_FIELDS,
    NOT_COUNTED_REASONS,
    Problem,
    RunLog,
    canonical_shape,
    counted,
    parse_runlog,
    read_runlog,
    strip_torch_prefix,
)

HERE = Path(__file__).resolve().parent


def _samples_dir():
    """The copy under tests/ keeps CI on a fresh clone honest; the env var and
    the shared directory let the same tests run against newer logs."""
    candidates = []
    if os.environ.get("ZLSTORE_SAMPLES"):
        candidates.append(Path(os.environ["ZLSTORE_SAMPLES"]))
    candidates += [HERE / "samples", HERE.parents[1] / "shared" / "samples"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.log")):
            return c
    return None


SAMPLES = _samples_dir()
needs_samples = pytest.mark.skipif(
    SAMPLES is None,
    reason="no sample logs: tests/samples/, $ZLSTORE_SAMPLES and ../shared/samples are all absent",
)
SAMPLE_FILES = sorted(SAMPLES.glob("*.log")) if SAMPLES else []


def _row(**over):
    r = {
        "legacy_shape": None,
        "shape_detail": [[64, 64]],
        "latency_base": 0.02,
        "latency": 0.01,
        "speedup": 2.0,
        "gbps_base": None,
        "gbps": None,
        "accuracy": None,
        "tflops": None,
        "utilization": None,
        "compared_speedup": None,
        "error_msg": None,
    }
    r.update(over)
    return r


def _rec(op="topk", dtype="torch.float16", rows=None, **extra):
    rec = {
        "op_name": op,
        "dtype": dtype,
        "mode": "kernel",
        "level": "core",
        "result": rows if rows is not None else [_row()],
    }
    rec.update(extra)
    return "[INFO] " + json.dumps(rec)


def _log(*lines, nl="\n"):
    return (nl.join(lines) + nl).encode("utf-8")


# ------------------------------------------------------------------ samples


def _independent_count(data: bytes):
    """Counted the obvious way, so the parser is checked against something it
    does not share code with."""
    records = rows = 0
    for line in data.split(b"\n"):
        if line.startswith(b"[INFO] {"):
            obj = json.loads(line[len(b"[INFO] ") :])
            if isinstance(obj, dict) and isinstance(obj.get("result"), list):
                records += 1
                rows += len(obj["result"])
    return records, rows


@needs_samples
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_sample_parses_cleanly_with_independent_counts(path):
    data = path.read_bytes()
    log = parse_runlog(data)
    assert log.problems == []
    assert (log.records, len(log.rows)) == _independent_count(data)
    assert log.lines == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    for r in log.rows:
        assert r.op_name and r.dtype and not r.dtype.startswith("torch.")
        assert r.counted, (r.line, r.index, r.not_counted_reason)


@needs_samples
def test_record_samples_are_not_vacuous():
    """A parser that found nothing would pass the count test on empty logs."""
    found = {p.name: parse_runlog(p.read_bytes()) for p in SAMPLE_FILES}
    assert found["flaggems_test_driver_run.log"].records == 0
    assert found["flaggems_no_records.log"].records == 0
    assert found["flaggems_multi_op_record_log.log"].records > 1
    assert len({(r.op_name, r.dtype) for r in found["flaggems_multi_op_record_log.log"].rows}) > 3
    assert len(found["flaggems_fused_rope_record_log.log"].rows) == 10


@needs_samples
def test_test_driver_log_is_noise_and_cheap():
    """Thousands of [INFO] lines with no record must neither match nor cost."""
    data = (SAMPLES / "flaggems_test_driver_run.log").read_bytes()
    assert len(data) > 300_000
    start = time.perf_counter()
    log = parse_runlog(data)
    elapsed = time.perf_counter() - start
    assert (log.records, log.rows, log.problems) == (0, [], [])
    assert elapsed < 0.5, elapsed


@needs_samples
def test_logspace_object_shapes_have_sorted_keys():
    log = read_runlog(SAMPLES / "flaggems_logspace_record_log.log")
    r = log.rows[0]
    assert isinstance(r.values["shape_detail"], dict)
    assert r.shape_key.startswith('{"base":')
    keys = list(json.loads(r.shape_key))
    assert keys == sorted(keys)
    assert " " not in r.shape_key.replace("torch.float16", "")


@needs_samples
def test_slice_scatter_keeps_mode_cuda_and_missing_fields_are_none():
    """This older log has no gbps/error_msg fields at all."""
    log = read_runlog(SAMPLES / "flaggems_slice_scatter_record_log.log")
    assert {r.mode for r in log.rows} == {"cuda"}
    r = log.rows[2]
    assert r.values["legacy_shape"] == 1024
    assert r.values["error_msg"] is None and r.values["gbps"] is None
    assert r.extra == {}
    assert r.shape_key == "[[1024,1024],[504,1024],0,16,1024,2]"


@needs_samples
def test_bundled_samples_match_shared_originals():
    """tests/samples must stay byte-identical copies of the real logs."""
    shared = HERE.parents[1] / "shared" / "samples"
    if not shared.is_dir() or not (HERE / "samples").is_dir():
        pytest.skip(
            "../shared/samples, the original logs tests/samples copies, is not beside this checkout "
            "(it is outside the repository: a fresh clone has none)"
        )
    for p in shared.glob("*.log"):
        assert (HERE / "samples" / p.name).read_bytes() == p.read_bytes(), p.name


def test_parse_is_within_a_small_factor_of_bare_json_loads():
    """Ingest is benchmarked against a floor that only json.loads each record
    line; the parser may cost more (it builds rows) but not wildly more."""
    data = _log(
        *[_rec(rows=[_row(shape_detail=[[i, j]]) for j in range(5)]) for i in range(400)],
        *(["[INFO] [23:07:06][GPU  0] benchmark abs ..."] * 2000),
    )

    def floor():
        for line in data.split(b"\n"):
            if line.startswith(b"[INFO] {"):
                json.loads(line[7:])

    def best(f):
        times = []
        for _ in range(3):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times)

    assert best(lambda: parse_runlog(data)) < 10 * best(floor) + 0.01


# ------------------------------------------------------------------ traps


def test_crlf_never_reaches_a_value():
    data = _log(
        "[INFO] Benchmark record logger enabled",
        _rec(dtype="torch.bfloat16"),
        _rec(op="softmax", rows=[_row(error_msg="boom")]),
        nl="\r\n",
    )
    log = parse_runlog(data)
    assert log.problems == [] and log.records == 2 and log.lines == 3
    last = log.rows[-1]
    assert [r.dtype for r in log.rows] == ["bfloat16", "float16"]
    assert last.values["error_msg"] == "boom" and last.level == "core"
    for r in log.rows:
        for v in [r.op_name, r.dtype, r.mode, r.level, r.shape_key, *r.values.values()]:
            assert "\r" not in str(v)


def test_crlf_pretty_printed_record_has_no_cr():
    body = json.dumps(
        {"op_name": "x", "dtype": "torch.int8", "mode": "kernel", "level": "core", "result": [_row(error_msg="")]},
        indent=2,
    )
    log = parse_runlog(("[INFO] " + body + "\n").replace("\n", "\r\n").encode())
    assert log.problems == [] and log.rows[0].dtype == "int8"
    assert log.rows[0].values["error_msg"] == ""


def test_ansi_colours_and_leading_space_around_prefix():
    rec = _rec()[len("[INFO] ") :]
    data = _log(
        "\x1b[32m[INFO]\x1b[0m " + rec,
        "  [\x1b[1;32mINFO\x1b[0m] " + rec + "\x1b[0m",
        "\t\x1b[0m[INFO]\x1b[0m\t" + rec + "  ",
        "\x1b[32m[INFO] " + rec + "\x1b[0m \x1b[K \r",
        "\x1b[35mSYMBOL_REWRITE \x1b[0m\x1b[32mtorch success\x1b[0m",
    )
    log = parse_runlog(data)
    assert log.problems == [] and log.records == 4
    for r in log.rows:
        assert r.op_name == "topk" and r.dtype == "float16" and r.level == "core"
        assert "\x1b" not in repr(r)


def test_carriage_return_progress_bar_before_prefix():
    """A progress bar redrawn with \\r on the same stream leaves its text in
    front of the record; the record is what a terminal showed."""
    data = _log(" 50%|#####     |\r" + _rec())
    log = parse_runlog(data)
    assert log.records == 1 and log.problems == []


def test_other_text_before_prefix_is_noise():
    log = parse_runlog(_log("echo " + _rec(), "E   " + _rec()))
    assert (log.records, log.problems) == (0, [])


def test_dict_repr_record_with_none_nan_inf():
    rec = {
        "op_name": "topk",
        "dtype": "torch.float16",
        "mode": "kernel",
        "level": "core",
        "result": [
            {"shape_detail": (64, 1024), "latency": 0.02, "error_msg": None, "accuracy": True},
            {
                "shape_detail": [8],
                "latency": float("nan"),
                "speedup": float("inf"),
                "gbps": -float("inf"),
                "error_msg": None,
                "note": "nan inf 'quoted'",
            },
        ],
    }
    text = "[INFO] " + repr(rec)
    assert "None" in text and "nan" in text and "'" in text
    log = parse_runlog(_log(text))
    assert log.problems == [] and log.records == 1
    a, b = log.rows
    assert a.dtype == "float16" and a.values["error_msg"] is None and a.values["accuracy"] is True
    assert a.shape_key == "[64,1024]" and a.counted
    assert math.isnan(b.values["latency"])
    assert b.values["speedup"] == math.inf and b.values["gbps"] == -math.inf
    assert b.extra["note"] == "nan inf 'quoted'"
    assert (b.counted, b.not_counted_reason) == (False, "LATENCY_NOT_FINITE")


def test_truncated_last_line_is_a_problem_and_earlier_records_stay():
    whole = _rec(op="a"), _rec(op="b")
    cut = _rec(op="c")[:60]
    data = ("\n".join([*whole, "some noise", cut])).encode()  # no final newline
    log = parse_runlog(data)
    assert [r.op_name for r in log.rows] == ["a", "b"]
    assert log.problems == [Problem(4, "record cut off mid-JSON (timeout kill?)")]
    # Cut off too: followed by the note `zlstore flaggems` writes after a
    # kill, cut inside a string, or pretty-printed and cut in its middle.
    pretty = "[INFO] " + json.dumps(json.loads(_rec(op="p")[7:]), indent=2)
    for data in (
        _log(*whole, cut, "zlstore flaggems: killed at 10 s (CELL_TIMEOUT): RC 124"),
        _log(*whole, cut[:22]),
        _log(*whole, pretty[: len(pretty) // 2]),
    ):
        log = parse_runlog(data)
        assert [r.op_name for r in log.rows] == ["a", "b"]
        assert log.problems == [Problem(3, "record cut off mid-JSON (timeout kill?)")]


def test_unparseable_record_mid_file_does_not_stop_the_rest():
    data = _log(_rec(op="a"), '[INFO] {"op_name": "b", "result": [oops]}', _rec(op="c"))
    log = parse_runlog(data)
    assert [r.op_name for r in log.rows] == ["a", "c"]
    assert log.problems == [Problem(2, "record is not valid JSON: Expecting value at column 36")]


@pytest.mark.parametrize(
    "bad,why",
    [
        (_rec(op="NUL").replace("kernel", "ker\0nel"), "record holds a NUL byte at column 65"),
        ("[INFO] " + '{"a":' * 5000 + "1" + "}" * 5000, "record nested too deeply to read (5000 levels)"),
        (
            _rec(op="bad").replace('"mode"', '"mode" "kernel",'),
            "record is not valid JSON: Expecting ':' delimiter at column 60",
        ),
        (
            "[INFO] " + repr({"op_name": "x", "result": []}).replace(": 'x'", ": 'x' 'y' z"),
            "record is neither JSON nor a Python dict repr: invalid syntax",
        ),
    ],
    ids=["NUL byte", "nested 5000 deep", "not JSON", "not a dict repr"],
)
@pytest.mark.parametrize("then", [[], ["some noise"], [_rec(op="next")]], ids=["last", "then noise", "then a record"])
def test_a_whole_record_that_cannot_be_read_says_why_never_cut_off(bad, why, then):
    """A record whose line ends, read to the end of the file or not, is not
    cut off: what is wrong in it is named, and the other records are read."""
    log = parse_runlog(_log(_rec(op="a"), bad, *then))
    assert [r.op_name for r in log.rows] == ["a"] + ["next" for line in then if "next" in line]
    assert [p.line for p in log.problems] == [2]
    assert log.problems[0].message.startswith(why)


def test_invalid_utf8_in_a_record_keeps_it_with_a_problem():
    good = _rec(op="x")
    bad = _rec(op="OPNAME").encode().replace(b"OPNAME", b"op\xff\xfe")
    data = good.encode() + b"\n" + bad + b"\n"
    log = parse_runlog(data)
    assert log.records == 2
    assert log.rows[1].op_name == "op\ufffd\ufffd"
    assert [(p.line, p.message) for p in log.problems] == [(2, "invalid UTF-8 bytes replaced")]


def test_invalid_utf8_in_a_noise_line_is_silent():
    data = b"\xff\xfe garbage \xc3\n[INFO] [GPU 0] \xff {\n" + _rec().encode() + b"\n"
    log = parse_runlog(data)
    assert (log.records, log.problems) == (1, [])


@pytest.mark.parametrize("data", [b"", b"\n", b"   \r\n\n"])
def test_empty_file(data):
    log = parse_runlog(data)
    assert (log.rows, log.problems, log.records) == ([], [], 0)


def test_missing_file_is_no_rows_and_no_problem(tmp_path):
    assert read_runlog(tmp_path / "run.log") == RunLog()


def test_read_runlog_reads_bytes(tmp_path):
    p = tmp_path / "run.log"
    p.write_bytes(_log(_rec(), _rec(dtype="torch.float32")))
    assert [r.dtype for r in read_runlog(p).rows] == ["float16", "float32"]
    assert [r.dtype for r in read_runlog(str(p)).rows] == ["float16", "float32"]


@pytest.mark.parametrize("token,value", [("NaN", math.nan), ("Infinity", math.inf), ("-Infinity", -math.inf)])
def test_non_finite_latency_stored_not_counted(token, value):
    line = _rec(rows=[_row(latency=0.5)]).replace('"latency": 0.5', '"latency": ' + token)
    log = parse_runlog(_log(line))
    r = log.rows[0]
    assert log.problems == []
    assert (r.counted, r.not_counted_reason) == (False, "LATENCY_NOT_FINITE")
    stored = r.values["latency"]
    assert math.isnan(stored) if math.isnan(value) else stored == value


def test_error_msg_row_not_counted_even_with_a_good_latency():
    log = parse_runlog(
        _log(
            _rec(
                rows=[
                    _row(error_msg="CUDA error: out of memory"),
                    _row(error_msg=""),
                    _row(error_msg="  "),
                    _row(error_msg="bad", latency=None),
                ]
            )
        )
    )
    got = [(r.counted, r.not_counted_reason) for r in log.rows]
    assert got == [(False, "ERROR_MSG"), (True, None), (True, None), (False, "ERROR_MSG")]


@pytest.mark.parametrize(
    "latency,reason",
    [
        (0, "LATENCY_NOT_POSITIVE"),
        (0.0, "LATENCY_NOT_POSITIVE"),
        (-0.01, "LATENCY_NOT_POSITIVE"),
        (None, "LATENCY_MISSING"),
        (True, "LATENCY_MISSING"),
        ("0.02", "LATENCY_MISSING"),
        ([0.02], "LATENCY_MISSING"),
        (float("-inf"), "LATENCY_NOT_FINITE"),
        (0.02, None),
        (3, None),
        (10**400, None),
    ],
)
def test_counted_latency_rules(latency, reason):
    """Booleans and numeric strings are not latencies: a counted row's latency
    must be usable in a ratio as it is."""
    assert counted(_row(latency=latency)) == (reason is None, reason)


def test_missing_latency_key_and_reason_names():
    values = _row()
    del values["latency"]
    assert counted(values) == (False, "LATENCY_MISSING")
    assert counted({}) == (False, "LATENCY_MISSING")
    assert set(NOT_COUNTED_REASONS) == {"ERROR_MSG", "LATENCY_MISSING", "LATENCY_NOT_POSITIVE", "LATENCY_NOT_FINITE"}


def test_zero_negative_missing_latency_in_a_log():
    row_missing = _row()
    del row_missing["latency"]
    log = parse_runlog(_log(_rec(rows=[_row(latency=0), _row(latency=-1.5), row_missing])))
    assert [r.not_counted_reason for r in log.rows] == [
        "LATENCY_NOT_POSITIVE",
        "LATENCY_NOT_POSITIVE",
        "LATENCY_MISSING",
    ]
    assert log.rows[2].values["latency"] is None


def test_fallback_marker_applies_to_the_next_record_only_across_noise():
    data = _log(
        _rec(op="a"),
        "[WARN] BENCHMARK_DIRECT_NO_CUDAGRAPH: graph capture failed, timing directly",
        "[INFO] [23:07:06][GPU  0] benchmark b ...",
        '[INFO] {"not": "a record"}',
        "some pytest output",
        _rec(op="b", rows=[_row(), _row(shape_detail=[1])]),
        _rec(op="c"),
    )
    log = parse_runlog(data)
    assert [(r.op_name, r.fallback) for r in log.rows] == [("a", False), ("b", True), ("b", True), ("c", False)]


def test_fallback_marker_at_end_marks_nothing():
    log = parse_runlog(_log(_rec(op="a"), "BENCHMARK_DIRECT_NO_CUDAGRAPH"))
    assert [r.fallback for r in log.rows] == [False]


def test_multiline_info_bracket_block_with_braces_is_ignored():
    data = _log(
        "[INFO] [",
        "    {'name': 'BLOCK_M', 'value': 64},",
        '    {"name": "num_warps", "value": 4}',
        "]",
        "[INFO] [attrs] {",
        "  }",
        _rec(op="after"),
    )
    log = parse_runlog(data)
    assert log.problems == []
    assert [r.op_name for r in log.rows] == ["after"] and log.rows[0].line == 7


def test_pretty_printed_multiline_record():
    body = json.dumps(
        {
            "op_name": "pretty",
            "dtype": "torch.float16",
            "mode": "kernel",
            "level": "core",
            "result": [_row(), _row(shape_detail={"b": 1, "a": [2]})],
        },
        indent=4,
    )
    data = _log("noise", "[INFO] " + body, _rec(op="next"))
    log = parse_runlog(data)
    assert log.problems == []
    assert [(r.op_name, r.line, r.record, r.index) for r in log.rows] == [
        ("pretty", 2, 0, 0),
        ("pretty", 2, 0, 1),
        ("next", 3 + body.count("\n"), 1, 0),
    ]
    assert log.rows[1].shape_key == '{"a":[2],"b":1}'


def test_record_split_by_a_stray_newline_is_rejoined():
    line = _rec(op="split_me", rows=[_row(error_msg="two words")])
    cut = line.index("two ") + 4
    log = parse_runlog(_log(line[:cut], line[cut:], _rec(op="z")))
    assert log.problems == []
    assert [r.op_name for r in log.rows] == ["split_me", "z"]
    assert log.rows[0].values["error_msg"] == "two words"


def test_runaway_record_stops_at_the_next_info_line():
    data = _log(_rec(op="a")[:50], "{ continuation", "[INFO] [GPU 0] progress", _rec(op="b"))
    log = parse_runlog(data)
    assert [r.op_name for r in log.rows] == ["b"]
    assert [(p.line, p.message) for p in log.problems] == [(1, "unparseable [INFO] record")]


def test_text_after_the_record_is_reported_not_fatal():
    log = parse_runlog(_log(_rec(op="a") + " PASSED"))
    assert [r.op_name for r in log.rows] == ["a"]
    assert [p.line for p in log.problems] == [1]


def test_unknown_fields_kept_in_extra():
    log = parse_runlog(_log(_rec(rows=[_row(p99_latency=0.03, tuner={"BLOCK": 64})], host="gpu-07", vendor="mthreads")))
    r = log.rows[0]
    assert r.extra == {"p99_latency": 0.03, "tuner": {"BLOCK": 64}, "_record": {"host": "gpu-07", "vendor": "mthreads"}}
    assert list(r.values) == list(KNOWN_FIELDS)


def test_missing_fields_are_none():
    log = parse_runlog(_log('[INFO] {"result": [{"latency": 0.1}]}'))
    r = log.rows[0]
    assert (r.op_name, r.dtype, r.mode, r.level) == (None, None, None, None)
    assert r.shape_key == "null"
    assert r.values == {k: (0.1 if k == "latency" else None) for k in KNOWN_FIELDS}
    assert r.counted and r.extra == {}


def test_bad_result_shapes_are_problems_not_crashes():
    data = _log(
        '[INFO] {"op_name": "a", "result": {"latency": 1}}',
        '[INFO] {"op_name": "b", "result": [1, {"latency": 0.2}, null]}',
        '[INFO] {"op_name": "c", "note": "no result key: noise"}',
    )
    log = parse_runlog(data)
    assert [(r.op_name, r.index, r.record) for r in log.rows] == [("b", 1, 1)]
    assert [p.line for p in log.problems] == [1, 2, 2]
    assert log.records == 2


def test_canonical_shape_forms():
    assert canonical_shape([[64, 1024], 32]) == "[[64,1024],32]"
    assert (
        canonical_shape({"z": {"b": 1, "a": 2}, "a": [{"y": 1, "x": 2}]}) == '{"a":[{"x":2,"y":1}],"z":{"a":2,"b":1}}'
    )
    assert canonical_shape(7) == "7" and canonical_shape(None) == "null"
    assert canonical_shape("é") == '"é"'
    assert canonical_shape((1, 2)) == canonical_shape([1, 2])
    assert canonical_shape({1: "a", "b": 2}) == '{"1":"a","b":2}'


def test_strip_torch_prefix():
    assert strip_torch_prefix("torch.float16") == "float16"
    assert strip_torch_prefix("complex64") == "complex64"
    assert strip_torch_prefix(None) is None and strip_torch_prefix("") is None


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: beyond 64 bits too
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),  # lone surrogates too
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON_VALUES, st.booleans(), st.sampled_from([b"", b" ", b"\r", b"}", b" x", b"\x00", b"\xff"]))
@settings(max_examples=500, deadline=None)
def test_orjson_reads_a_record_as_json_does(value, ascii_only, after):
    """The fast reading (orjson) of a record gives what the json reading
    gives, value for value (ints stay ints, NaN stays NaN), or leaves the
    record to it: json's extensions, integers beyond 64 bits, lone
    surrogates, invalid UTF-8 and text after the record."""
    body = json.dumps({"result": [value]}, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") + after
    fast = runlog._parse_body(body)
    with mock.patch.object(runlog, "_LONG_RUN", b""):  # in every record: the json reading only
        slow = runlog._parse_body(body)
    assert repr(fast) == repr(slow)


def test_utf8_bom_at_start_does_not_hide_the_first_record():
    log = parse_runlog(b"\xef\xbb\xbf" + _log(_rec()))
    assert log.records == 1 and log.problems == []


def test_runaway_record_is_bounded(monkeypatch):
    """A record that never closes must not swallow the rest of a huge log."""
    import zlstore.read.runlog as runlog

    monkeypatch.setattr(runlog, "MAX_RECORD_LINES", 5)
    data = _log(_rec(op="a")[:40], *["x" * 10] * 20, _rec(op="b"))
    log = parse_runlog(data)
    assert [r.op_name for r in log.rows] == ["b"]
    assert [p.line for p in log.problems] == [1]
    assert "no end within 5 lines" in log.problems[0].message
