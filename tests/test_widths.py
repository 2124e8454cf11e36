"""Text for people fits the terminal ($COLUMNS, also through a pipe):
headings, summaries and range lines wrap; a table leaves out its rightmost
columns (never the ones that name a row or its result) and says which,
and -t or -c prints them again. The mechanism is output.table's, so a
column a command gains is fitted with the rest."""

import pytest
from click.testing import CliRunner

from zlstore import output
from zlstore.cli import cli

SCREEN_ROOT = "ab_rlc_20261012_101500"
CAMPAIGN = "campaign_20261013_090000"

COMMANDS = [
    ["screen"],
    ["ab", CAMPAIGN],
    ["ab", CAMPAIGN, "--rejected"],
    ["noise"],
    ["history", "softmax:float32"],
    ["problems"],
    ["plan", SCREEN_ROOT, "--cards", "2"],
    ["compare", SCREEN_ROOT, "ab_rlc_20261014_083000"],
]


def run(args, db, columns=None):
    env = {"COLUMNS": str(columns)} if columns else {"COLUMNS": ""}
    return CliRunner().invoke(cli, [*args, "--db", str(db)], env=env)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_line_fits_the_terminal(example_store_path, width):
    for args in COMMANDS:
        result = run(args, example_store_path, width)
        assert result.exit_code in (0, 1), (args, result.output)
        lines = result.stdout.splitlines()
        assert lines, args
        too_wide = [line for line in lines if len(line) > width]
        assert not too_wide, (args, too_wide)


def test_a_narrow_table_names_what_it_left_out_and_t_prints_it(example_store_path):
    narrow = run(["ab", CAMPAIGN], example_store_path, 80).stdout
    header = next(line for line in narrow.splitlines() if line.startswith("op "))
    assert header.split()[:3] == ["op", "dtype", "shape"] and "finding" in header and "effect" in header
    assert "noise floor" not in header and "q" not in header.split()
    # the interval is what makes an effect a finding: the latencies go first, it stays
    assert "95% interval" in header and "ms before -> after" not in header
    left_out = " ".join(narrow[narrow.index("(left out to fit 80 columns: ") :].split())
    assert "ms before -> after" in left_out and "noise floor" in left_out and "-t prints every column" in left_out
    assert "95% interval" not in left_out
    # what was left out comes back with -t (a table of every column of the human one) and -c
    table = run(["ab", CAMPAIGN, "-t"], example_store_path, 80).stdout
    header = table.splitlines()[0]
    assert all(f"  {name}  " in header for name in ("95% interval", "q", "noise floor"))
    picked = run(["ab", CAMPAIGN, "-c", "op", "-c", "q_value", "-c", "noise_floor"], example_store_path, 80).stdout
    assert picked.splitlines()[0].split() == ["op", "q_value", "noise_floor"]
    # wide enough, nothing is left out
    assert "left out" not in run(["ab", CAMPAIGN], example_store_path, 200).stdout


def test_through_a_pipe_without_columns_lines_stay_whole(example_store_path):
    piped = run(["ab", CAMPAIGN], example_store_path).stdout
    assert "left out" not in piped
    assert any(len(line) > 120 for line in piped.splitlines())  # the heading, on one line


def test_a_column_any_command_adds_is_fitted_too():
    """The width is output.table's: a column a table gains (another
    helper's per-side latency, say) is left out, rightmost first, before
    the ones kept; then the longest cells are shortened."""
    rows = [
        {"op": "topk", "shape": "[[4096,4096],128]", "finding": "faster", "latency_before_ms": 1.25, "stop": 7},
        {"op": "pad", "shape": "[[64,64],[1,1]]", "finding": "no change", "latency_before_ms": 0.5, "stop": 3},
    ]
    columns = list(rows[0])
    with output.fitted_to(40) as left_out:
        text = output.table(rows, columns, keep=("op", "shape", "finding"))
    assert max(map(len, text.splitlines())) <= 40
    assert text.splitlines()[0].split() == ["op", "shape", "finding"]
    assert left_out == ["latency_before_ms", "stop"]
    with output.fitted_to(30):
        cut = output.table(rows, columns, keep=("op", "shape", "finding"))
    assert max(map(len, cut.splitlines())) <= 30 and "~" in cut
    assert output.table(rows, columns) == output.table(rows, columns, width=None)  # no width: every column
