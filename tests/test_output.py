"""Output like sqlite-utils: every command that prints rows prints them as
--json, --nl, --csv, --tsv and -t (with --fmt), the same rows in each, and
each output parses as what it says it is."""

import csv
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from zlstore import db as dbmod
from zlstore import Store, output
from zlstore.store import ingest, merge
from zlstore.show import judge, report
from zlstore.run import plan
from zlstore.cli import cli

from .test_cli_help import all_commands

SCREEN_ROOT = "ab_rlc_20261012_101500"
OTHER_SCREEN_ROOT = "ab_rlc_20261014_083000"  # the same caliber: comparable
CAMPAIGN = "campaign_20261013_090000"


def rows(document):
    return document


def summarized(document):
    """The rows of a --json that carries its summary: {"summary", "rows"}."""
    assert set(document) == {"summary", "rows"}
    return document["rows"]


def whole(document):
    return [document]


def counts_of(names):
    return lambda document: [{name: document[name] for name in names}]


def planned_ops(document):
    return [{"card": card["card"], **op} for card in document["cards"] for op in card["ops"]]


# name: (arguments, the rows --json's document holds, the database: a copy of
# the example store or a new file, whether the rows come in one order in
# every format). {tree}: the example runs/ tree; {source}: the example store.
COMMANDS = {
    "screen": (["screen"], summarized, "copy", True),
    "screen --rule": (["screen", SCREEN_ROOT, "--rule", "v4"], summarized, "copy", True),
    "rescore": (["rescore"], summarized, "copy", True),
    "rescore --rule": (["rescore", "--rule", "v1"], summarized, "copy", True),
    "rule": (["rule"], whole, "copy", True),
    # --json and --nl are SQLite's text (by key), the others the rows (findings first)
    "ab": (["ab", CAMPAIGN], summarized, "copy", False),
    "ab --rejected": (["ab", "--rejected"], rows, "copy", True),
    "noise": (["noise"], summarized, "copy", True),
    "compare": (["compare", SCREEN_ROOT, OTHER_SCREEN_ROOT], rows, "copy", True),
    "export": (["export", SCREEN_ROOT], rows, "copy", True),
    "plan": (["plan", SCREEN_ROOT, "--cards", "3", "--rounds", "3"], planned_ops, "copy", True),
    "forget": (["forget", CAMPAIGN], whole, "copy", True),
    "check": (["check"], whole, "copy", True),
    "init": (["init"], whole, "new", True),
    "ingest": (["ingest", "{tree}"], counts_of(ingest.COUNTS), "new", True),
    "record": (["record", f"{{tree}}/{SCREEN_ROOT}/topk_float16_before"], counts_of(ingest.COUNTS), "new", True),
    "merge": (["merge", "{source}"], counts_of(merge.COUNTS), "new", True),
}

# Commands whose -t prints their human table's columns (the rest: every column).
SHOWN = {
    "screen": report.screen_shown,
    "screen --rule": report.screen_shown,
    "ab": report.ab_shown,
    "noise": report.noise_shown,
}

FORMATS = {
    "json": ["--json"],
    "nl": ["--nl"],
    "csv": ["--csv"],
    "tsv": ["--tsv"],
    "table": ["-t"],
    "github": ["--fmt", "github"],
    "grid": ["-t", "--fmt", "grid"],
}

NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?")


def text(value) -> str:
    """A value as CSV carries it, numbers to 12 significant digits (SQLite
    writes 15, Python 17), so that a row compares equal in every format."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False)
    value = str(value)
    if NUMBER.fullmatch(value) and not value.lstrip("-").isdigit():
        return f"{float(value):.12g}"
    return value


def simple_table(printed: str):
    """tabulate's "simple" layout back as a header and rows, cut where the rule under the header says."""
    lines = printed.rstrip("\n").split("\n")
    spans = [match.span() for match in re.finditer(r"-+", lines[1])]
    cut = lambda line: [line[a : b if i < len(spans) - 1 else None].strip() for i, (a, b) in enumerate(spans)]
    return cut(lines[0]), [cut(line) for line in lines[2:]]


def github_table(printed: str):
    lines = printed.rstrip("\n").split("\n")
    cut = lambda line: [cell.strip() for cell in line.strip().strip("|").split("|")]
    assert re.fullmatch(r"\|[-:|]+\|", lines[1])
    return cut(lines[0]), [cut(line) for line in lines[2:]]


def grid_table(printed: str):
    lines = [line for line in printed.rstrip("\n").split("\n") if not line.startswith("+")]
    cut = lambda line: [cell.strip() for cell in line.strip().strip("|").split("|")]
    return cut(lines[0]), [cut(line) for line in lines[1:]]


# What differs from one run of a command to the next.
VOLATILE = ("seconds",)


@pytest.fixture(scope="module")
def printed(example_source, example_store_path, tmp_path_factory):
    """name -> format -> (exit status, stdout), each command run once per
    format, each time on a database of its own at the same path."""
    tree, _ = example_source
    with sqlite3.connect(example_store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    work = tmp_path_factory.mktemp("output")
    results: dict[str, dict[str, tuple[int, str]]] = {}
    for name, (arguments, _, database, _) in COMMANDS.items():
        results[name] = {}
        path = work / name.replace(" ", "_") / "store.db"
        path.parent.mkdir()
        for fmt, options in FORMATS.items():
            for leftover in path.parent.iterdir():
                leftover.unlink()
            if database == "copy":
                shutil.copy(example_store_path, path)
            argv = [a.format(tree=tree, source=example_store_path) for a in arguments]
            result = CliRunner().invoke(cli, [*argv, *options, "--db", str(path)], catch_exceptions=False)
            results[name][fmt] = (result.exit_code, result.stdout)
    return results


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_format_parses_and_says_the_same_rows(printed, name):
    _, rows_of, _, ordered = COMMANDS[name]
    statuses = {fmt: status for fmt, (status, _) in printed[name].items()}
    assert len(set(statuses.values())) == 1 and statuses["json"] in (0, 1), statuses  # ingest: 1, the example's problem
    document = json.loads(printed[name]["json"][1])
    expected = [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows_of(document)]
    assert expected and all(isinstance(row, dict) for row in expected)
    columns = list(expected[0])

    as_text = [{k: text(v) for k, v in row.items()} for row in expected]
    order = (
        (lambda found: found) if ordered else (lambda found: sorted(found, key=lambda r: json.dumps(r, sort_keys=True)))
    )

    nl = [json.loads(line) for line in printed[name]["nl"][1].splitlines()]
    assert [{k: v for k, v in row.items() if k not in VOLATILE} for row in nl] == expected

    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        reader = csv.DictReader(io.StringIO(printed[name][fmt][1]), delimiter=delimiter)
        found = [{k: text(v) for k, v in row.items() if k not in VOLATILE} for row in reader]
        assert reader.fieldnames is not None
        assert set(reader.fieldnames) - set(VOLATILE) == set(columns), fmt
        assert order(found) == order(as_text), fmt

    as_cells = [{k: output.cell_text(v) for k, v in row.items()} for row in expected]
    table_columns = set(columns)
    if name in SHOWN:  # -t: the human table's columns, the rows as it shows them
        shown = SHOWN[name](expected)
        headers = list(shown.headers or shown.columns)
        as_cells = [{h: output.cell_text(row.get(c)) for h, c in zip(headers, shown.columns)} for row in shown.rows]
        table_columns = set(headers)
    for fmt, parse in (("table", simple_table), ("github", github_table), ("grid", grid_table)):
        header, body = parse(printed[name][fmt][1])
        assert set(header) - set(VOLATILE) == table_columns, fmt
        found = [{k: v for k, v in zip(header, cells) if k not in VOLATILE} for cells in body]
        assert order(found) == order(as_cells), fmt


def test_json_is_laid_out_as_sqlite_utils_prints_rows(printed):
    """One row a line, '[' before the first and ' ' before the others, with
    json.dumps' separators: ab's SQLite-built text too, byte for byte."""
    for name in ("screen", "ab", "noise", "export", "rescore"):
        printed_json = printed[name]["json"][1].rstrip("\n")
        document = json.loads(printed_json)
        if isinstance(document, dict):  # {"summary": ... on the first line, "rows": [ one a line
            first, printed_json = printed_json.split("\n", 1)
            assert first == '{"summary": ' + json.dumps(document["summary"], ensure_ascii=False) + ","
            assert printed_json.startswith(' "rows": [') and printed_json.endswith("]}")
            printed_json = printed_json[len(' "rows": ') : -1]
        assert printed_json == output.json_text(json.loads(printed_json)), name
        lines = printed_json.split("\n")
        assert lines[0].startswith("[{") and all(line.startswith(" {") for line in lines[1:]), name
        assert all(line.endswith("},") for line in lines[:-1]) and lines[-1].endswith("}]"), name


def test_empty_is_an_empty_array(tmp_path):
    path = tmp_path / "empty.db"
    CliRunner().invoke(cli, ["init", "--db", str(path)])
    for argv in (["screen"], ["ab"], ["ab", "--rejected"], ["noise"]):
        result = CliRunner().invoke(cli, [*argv, "--json", "--db", str(path)])
        assert result.exit_code == 0, argv
        document = json.loads(result.stdout)
        assert (document["rows"] if argv != ["ab", "--rejected"] else document) == [], argv
        result = CliRunner().invoke(cli, [*argv, "--nl", "--db", str(path)])
        assert result.exit_code == 0 and result.stdout == "", argv


def test_tabulate_is_imported_only_where_a_table_is_made():
    """Every command's start, an ingest's included, pays for what it imports:
    tabulate (and the importlib.metadata, email and html it brings) waits
    for the first table."""
    probe = (
        "import sys, zlstore.cli; print('tabulate' in sys.modules); "
        "from zlstore import output; output.table([{'a': 1}]); print('tabulate' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_the_formats_go_one_at_a_time(example_store_path):
    result = CliRunner().invoke(cli, ["noise", "--json", "--csv", "--db", str(example_store_path)])
    assert result.exit_code == 2 and "--json and --csv go one at a time" in result.stderr
    result = CliRunner().invoke(cli, ["noise", "-t", "--fmt", "nosuch", "--db", str(example_store_path)])
    assert result.exit_code == 2 and "nosuch" in result.stderr


def test_every_command_with_a_database_says_its_variable(example_store_path):
    """--db comes through click's envvar: every --help shows $ZLSTORE_DB, and
    the variable names the database."""
    with_db = [
        path
        for path, command in all_commands()
        if any(param.name == "db_path" for param in command.params) and path != ("run", "card")
    ]
    assert len(with_db) > 15
    for path in with_db:
        help_text = " ".join(CliRunner().invoke(cli, [*path, "--help"]).output.split())
        assert "[env var: ZLSTORE_DB]" in help_text, path
    result = CliRunner().invoke(cli, ["rule", "--json"], env={"ZLSTORE_DB": str(example_store_path)})
    assert result.exit_code == 0 and json.loads(result.stdout)["current_rule"] == "v3"


def test_init_prints_a_json_summary(tmp_path):
    path = tmp_path / "new.db"
    result = CliRunner().invoke(cli, ["init", "--json", "--db", str(path)])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"path": str(path), "schema_version": dbmod.SCHEMA_VERSION}


def test_rescore_rule_is_a_view_everywhere(example_store):
    """--rule in every command that has it judges under the rule for that
    output only; the current rule stays until `zlstore rule` sets it."""
    for argv in (
        ["screen", "--rule", "v1"],
        ["rescore", "--rule", "v1"],
        ["export", SCREEN_ROOT, "--rule", "v1"],
        ["compare", SCREEN_ROOT, OTHER_SCREEN_ROOT, "--rule", "v1"],
    ):
        result = CliRunner().invoke(cli, [*argv, "--json", "--db", str(example_store.path)])
        assert result.exit_code == 0, (argv, result.output)
        assert example_store.current_rule == "v3", argv
        assert "without making it the current one" in CliRunner().invoke(cli, [*argv[:1], "--help"]).output


# -- numbers for people ------------------------------------------------------


@pytest.mark.parametrize(
    "value,shown",
    [
        (1710.2, "1710.2"),  # an elapsed time keeps its tenth
        (12345.6, "12345.6"),  # never 1.235e+04
        (121.0, "121"),
        (45.25, "45.25"),
        (1.10345, "1.103"),  # a ratio: four significant digits
        (0.9999, "0.9999"),
        (0.03914, "0.03914"),  # a q-value
        (0.0000123, "1.23e-05"),  # never 0
        (-0.00274, "-0.00274"),
        (0.0, "0"),
        (3, "3"),
        (None, ""),
        (float("nan"), "nan"),
    ],
)
def test_numbers_keep_their_meaning(value, shown):
    assert output.cell_text(value) == shown


def test_screen_shows_elapsed_times_whole(example_store_path):
    """The example's sort ran 1710.2 s before, 2400.3 s after (killed at its timeout)."""
    result = CliRunner().invoke(cli, ["screen", SCREEN_ROOT, "--db", str(example_store_path)])
    sort = next(line for line in result.stdout.splitlines() if line.startswith("sort "))
    assert "1710.2" in sort.split() and "2400.3" in sort.split()


def test_a_q_value_too_small_for_four_decimals_is_not_zero(example_store):
    with example_store.conn:
        example_store.conn.execute("UPDATE ab_range_rows SET q_value = 0.0000123 WHERE q_value IS NOT NULL")
    result = CliRunner().invoke(cli, ["ab", CAMPAIGN, "-t", "--db", str(example_store.path)])
    header, body = simple_table(result.stdout)  # the human table's columns
    tested = [dict(zip(header, cells)) for cells in body if dict(zip(header, cells))["95% interval"]]
    assert tested and all(row["q"] == "1.23e-05" for row in tested)


# -- plan: one unit, no binary noise ------------------------------------------


def test_plan_json_says_weights_without_binary_noise():
    ops = [plan.Op("a", "", 1.042 * 3), plan.Op("b", "", 1.021 * 3)]
    assert repr(ops[0].weight_s) == "3.1260000000000003"
    printed = output.json_text(plan.make_plan(ops, 2).as_dict())
    assert json.loads(printed)["cards"][0]["ops"] == [{"op": "a", "dtype": "", "weight_s": 3.126}]
    assert "3.1260000000000003" not in printed and "3.0629999999999997" not in printed
    assert plan.make_plan(ops, 2).rows() == [
        {"card": 0, "op": "a", "dtype": "", "weight_s": 3.126},
        {"card": 1, "op": "b", "dtype": "", "weight_s": 3.063},
    ]


def _units(described: str):
    return set(re.findall(r"\d (s|min)\b", described)) | set(re.findall(r"\((s|min)\)", described))


@pytest.mark.parametrize("minutes,unit", [([70.6, 26.0, 1.5, 0.5], "min"), ([1.5, 0.25, 0.1], "s")])
def test_plan_uses_one_unit(minutes, unit):
    """Minutes from a 2-minute critical path, else seconds: every weight in
    it (cards, ops, critical path, floor, share, hash) in that one unit."""
    described = plan.describe(plan.make_plan([plan.Op(f"op{i}", "", m * 60) for i, m in enumerate(minutes)], 2))
    assert _units(described) == {unit}
    assert f"weight ({unit})" in described and f"ops (weight in {unit})" in described
    if unit == "min":
        assert "op2 (1.5)" in described and "op3 (0.5)" in described  # not "(90.0 s)", "(30.0 s)"
    else:
        assert "op0 (90)" in described and "op2 (6)" in described


# -- the live campaign view ---------------------------------------------------


def test_the_live_view_fits_the_terminal():
    """A line wider than the terminal would wrap, and the redraw would move
    up too few rows and leave stale lines behind: lines are cut to fit."""
    import fcntl
    import struct
    import termios

    from zlstore.run.display import CardState, Display

    controller, terminal = os.openpty()
    try:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
        with os.fdopen(terminal, "w", closefd=False) as stream:
            op = plan.Op("a" * 80, "", 5.0)
            card = CardState(0, [op], current=op, current_since=time.monotonic(), started=time.monotonic())
            display = Display("campaign_x", [card], stream)
            assert display.tty
            wide = display.screen()
            fitted = display._fitted(wide)
        assert max(len(line) for line in wide) > 60
        assert all(len(line) < 60 for line in fitted) and len(fitted) == len(wide)
        assert fitted[1].split()[:2] == ["card", "state"]
    finally:
        os.close(controller)
        os.close(terminal)


# -- tables that fit a terminal; filters; the CI gate --------------------------


def test_the_findings_table_fits_a_terminal_and_notes_go_below(example_store_path):
    """No line of `ab` is wider than the terminal: notes and long headings
    wrap onto lines of their own; the note is not a column there."""
    with Store(example_store_path) as store:
        rows, settings = judge.ab_ranges(store, CAMPAIGN), judge.judging_settings(store)
        pairs = judge.verdicts(store, SCREEN_ROOT)
    for width in (120, 150):  # the widest row (op, shape, interval, finding) is 113
        lines = report.ab(rows, settings, width=width).splitlines()
        assert max(map(len, lines)) <= width, max(lines, key=len)
        assert "note" not in next(line for line in lines if line.startswith("op ")).split()
        assert any(line.startswith("    note: more rounds: at least") for line in lines)
        screen = report.screen(pairs, "v3", width=width)
        assert max(map(len, screen.splitlines())) <= width
        assert "\n    note: after killed at its timeout (rc 124)\n" in screen

    # where the floor column would not fit, the table leaves it out, and the command says so
    def header(text):
        return next(line for line in text.splitlines() if line.startswith("op "))

    assert "noise floor" not in header(report.ab(rows, settings, width=120))
    assert "noise floor" in header(report.ab(rows, settings, width=200))
    narrow = CliRunner().invoke(cli, ["ab", CAMPAIGN, "--db", str(example_store_path)], env={"COLUMNS": "120"})
    said = " ".join(narrow.stdout[narrow.stdout.rindex("(left out to fit 120 columns: ") :].split())
    assert "noise floor" in said.split(";")[0] and said.endswith("or widen the terminal)"), said
    wide = CliRunner().invoke(cli, ["ab", CAMPAIGN, "-t", "--db", str(example_store_path)], env={"COLUMNS": "120"})
    assert "noise floor" in wide.stdout.splitlines()[0]
    # piped (no terminal): the notes still go below their row
    piped = CliRunner().invoke(cli, ["ab", CAMPAIGN, "--db", str(example_store_path)]).stdout
    assert "\n    note: more rounds: at least" in piped


def test_table_formats_print_the_human_columns_and_csv_every_column(example_store_path):
    github = CliRunner().invoke(cli, ["ab", CAMPAIGN, "--fmt", "github", "--db", str(example_store_path)])
    header, _ = github_table(github.stdout)
    assert header == ["root"] + report.AB_HEADERS
    assert not re.search(r"[0-9a-f]{64}", github.stdout)
    every = CliRunner().invoke(cli, ["ab", CAMPAIGN, "--csv", "--db", str(example_store_path)])
    assert {"log_mean", "ci_low", "root_path", "floor_note"} <= set(every.stdout.splitlines()[0].split(","))


def test_column_no_headers_and_arrays_as_sqlite_utils(example_store_path):
    db = ["--db", str(example_store_path)]
    picked = CliRunner().invoke(cli, ["ab", CAMPAIGN, "-c", "op", "-c", "finding", "--csv", "--no-headers", *db])
    lines = picked.stdout.splitlines()
    assert picked.exit_code == 0 and "pad,faster" in lines and not any(line.startswith("op,") for line in lines)
    arrays = json.loads(
        CliRunner()
        .invoke(
            cli,
            ["screen", SCREEN_ROOT, "-c", "op", "-c", "verdict", "--json", "--arrays", "--verdict", "TRUNCATED", *db],
        )
        .stdout
    )
    assert arrays["rows"] == [["sort", "TRUNCATED"]] and arrays["summary"]["verdicts"]["TRUNCATED"] == 1
    bad = CliRunner().invoke(cli, ["noise", "-c", "nosuch", "--csv", *db])
    assert bad.exit_code == 2 and "no such column: nosuch" in bad.stderr
    alone = CliRunner().invoke(cli, ["noise", "-c", "op", "-c", "floor", *db])
    assert alone.stdout.splitlines()[0].split() == ["op", "floor"]


def test_every_summarized_json_says_what_the_human_text_counts(example_store_path):
    db = ["--db", str(example_store_path)]
    for argv, key in ((["screen"], "verdicts"), (["ab"], "findings"), (["rescore"], "moved"), (["noise"], "floors")):
        document = json.loads(CliRunner().invoke(cli, [*argv, "--json", *db]).stdout)
        assert list(document) == ["summary", "rows"] and key in document["summary"], argv
    ab = json.loads(CliRunner().invoke(cli, ["ab", "--json", *db]).stdout)
    assert ab["summary"]["ranges"] == len(ab["rows"]) == 18
    assert ab["summary"]["findings"] == {
        f: sum(1 for r in ab["rows"] if r["finding"] == f) for f in judge.FINDING_NAMES
    }
    human = CliRunner().invoke(cli, ["ab", *db]).stdout
    assert "18 ranges: 4 faster, 0 slower, 0 no change, 8 inconclusive, 6 too few rounds" in " ".join(human.split())


def test_ab_filters_and_sorts(example_store_path):
    db = ["--db", str(example_store_path)]
    rows = json.loads(
        CliRunner()
        .invoke(cli, ["ab", "--op", "topk,pad", "--finding", "faster", "--sort", "effect", "--json", *db])
        .stdout
    )
    assert {r["op"] for r in rows["rows"]} == {"topk", "pad"} and {r["finding"] for r in rows["rows"]} == {"faster"}
    effects = [r["effect"] for r in rows["rows"]]
    assert effects == sorted(effects, reverse=True) and rows["summary"]["ranges"] == 4
    by_q = json.loads(CliRunner().invoke(cli, ["ab", "--sort", "q", "--json", *db]).stdout)["rows"]
    tested = [r["q_value"] for r in by_q if r["q_value"] is not None]
    assert tested == sorted(tested) and by_q[-1]["q_value"] is None
    bad = CliRunner().invoke(cli, ["ab", "--finding", "quicker", *db])
    assert bad.exit_code == 2 and "unknown finding 'quicker'" in bad.stderr
    bad = CliRunner().invoke(cli, ["screen", "--verdict", "CHANGED", *db])
    assert bad.exit_code == 2 and "unknown verdict 'CHANGED'" in bad.stderr


def test_fail_on_is_a_ci_gate(example_store_path):
    """exit 1 naming each offending range where one has a finding named, 0 otherwise."""
    db = ["--db", str(example_store_path)]
    clean = subprocess.run(
        [sys.executable, "-m", "zlstore", "ab", CAMPAIGN, "--fail-on", "slower", *db], capture_output=True, text=True
    )
    assert clean.returncode == 0 and "fail:" not in clean.stderr
    failing = subprocess.run(
        [
            sys.executable,
            "-m",
            "zlstore",
            "ab",
            CAMPAIGN,
            "--fail-on",
            "slower,inconclusive",
            "--op",
            "topk",
            "--fmt",
            "github",
            *db,
        ],
        capture_output=True,
        text=True,
    )
    assert failing.returncode == 1
    assert failing.stderr.splitlines() == [
        "fail: campaign_20261013_090000: topk float16 [[1024,4096],64]: inconclusive "
        "(effect 1.076, 95% interval 1.016 .. 1.141, q 0.07702)",
        "1 range with a finding in --fail-on slower,inconclusive: exit status 1",
    ]
    assert failing.stdout.startswith("| root ")  # the table is printed before the gate says no
    bad = subprocess.run(
        [sys.executable, "-m", "zlstore", "ab", "--fail-on", "regressed", *db], capture_output=True, text=True
    )
    assert bad.returncode == 2
