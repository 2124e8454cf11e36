"""What pytest did with each test of a cell, for zlstore: loaded by
`zlstore flaggems` (-p zlstore_outcomes), it appends one line per test
outcome (passed, skipped with its reason, failed, error) and one for the
session (collected, deselected, the -m expression, the exit status) to the
file $ZLSTORE_PYTEST_OUTCOMES names, the cell's run.log, each line
``zlstore pytest: {json}``. So a cell without rows says why: its tests were
skipped ("CUDA not available"), none matched -m, or they errored.

Standalone: imports nothing of zlstore (the benchmark's Python need not
have it). Inert where the variable is unset."""

import json
import os

MARKER = "zlstore pytest: "
OUTCOMES_VAR = "ZLSTORE_PYTEST_OUTCOMES"
_deselected = [0]


def _write(record: dict):
    path = os.environ.get(OUTCOMES_VAR)
    if not path:
        return
    line = (MARKER + json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8", "replace")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of a whole line, O_APPEND: never interleaved with the benchmark's output
    finally:
        os.close(fd)


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, "Skipped: why")
        text = str(longrepr[2])
        return text[len("Skipped: ") :] if text.startswith("Skipped: ") else text
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    text = crash or str(longrepr or "")
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def pytest_runtest_logreport(report):
    if report.when == "call" or not report.passed:
        if report.skipped:
            outcome = "skipped"
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
        else:
            outcome = "passed"
        record = {"nodeid": report.nodeid, "outcome": outcome, "when": report.when}
        if outcome != "passed":
            record["reason"] = _reason(report)
        _write(record)


def pytest_collectreport(report):
    if report.failed:
        _write({"nodeid": report.nodeid, "outcome": "error", "when": "collect", "reason": _reason(report)})


def pytest_deselected(items):
    _deselected[0] += len(items)


def pytest_sessionfinish(session, exitstatus):
    _write(
        {
            "session": int(exitstatus),
            "collected": session.testscollected,
            "deselected": _deselected[0],
            "markexpr": getattr(session.config.option, "markexpr", "") or "",
        }
    )
