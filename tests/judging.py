"""Helpers for the judging tests (verdicts, rescore, A/B, noise, compare,
export): what the generator's manifest says each view SHOULD give. Every
expected number is computed here from the manifest, never read back from
the views."""

import json
import statistics

from click.testing import CliRunner

from zlstore.cli import cli

RULES = ("v1", "v2", "v3", "v4")
NO_RANGE = ("TRUNCATED", "NO_ROWS", "NO_TRITON")


def invoke(db_path, *args):
    """Run the CLI against a database file; returns click's Result."""
    return CliRunner().invoke(cli, [*map(str, args), "--db", str(db_path)], catch_exceptions=False)


def json_out(result):
    """What --json printed; of a command with a summary ({"summary", "rows"}), its rows."""
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    if isinstance(printed, dict) and set(printed) == {"summary", "rows"}:
        return printed["rows"]
    return printed


def screen_pairs(manifest):
    """(root, op, dtype, spec) for every screening pair the manifest describes."""
    for root, pairs in manifest["screen"].items():
        for key, spec in pairs.items():
            op, _, dtype = key.partition("|")
            yield root, op, dtype, spec


def has_orig(manifest, root):
    return any(spec.get("orig") is not None for spec in manifest["screen"][root].values())


def original_verdict(manifest, root, spec):
    """The harness's original judgement: screen.tsv.orig's where the root has one, else screen.tsv's."""
    return spec["orig_canonical"] if has_orig(manifest, root) else spec["recorded"]


def median(values):
    """The middle value, or the mean of the two middle values (independent of the SQL)."""
    return statistics.median(values)


def by_key(rows, *keys):
    return {tuple(row[k] for k in keys): row for row in rows}


# Columns whose values are the store's own (row ids, where a tree was
# ingested from): two stores holding the same runs differ in them only.
STORE_LOCAL = ("root_path", "path")


def judged(db_path) -> dict:
    """What `screen --json`, `noise --json` and `ab --json` print, without the
    store-local columns (ids, paths), the roots of a floor as a set, and in
    an order of their own (the commands' order ends in caliber ids): equal
    for any two stores that hold the same runs, however they came to."""

    def plain(row):
        # the statistics sum over the rounds in the order the rows were
        # stored: 12 significant digits are the same however they came
        row = {
            k: float(f"{v:.12g}") if isinstance(v, float) else v
            for k, v in row.items()
            if not k.endswith("_id") and k not in STORE_LOCAL
        }
        if "roots" in row and row["roots"]:
            row["roots"] = sorted(row["roots"].split(","))
        if isinstance(row.get("ir_changes"), dict):  # its command names the store file (--db)
            row["ir_changes"] = {**row["ir_changes"], "command": None}
        return row

    return {
        command: sorted(
            (plain(row) for row in json_out(invoke(db_path, command, "--json"))),
            key=lambda row: json.dumps(row, sort_keys=True),
        )
        for command in ("screen", "noise", "ab")
    }
