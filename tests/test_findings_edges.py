"""Findings at their edges, found by a hostile review: a shape recorded
several times in one round is one round; settings given or edited to
something that is not a setting never turn noise into a finding."""

import json
import os

from click.testing import CliRunner

from zlstore import Store
from zlstore.cli import cli

from .real_caliber import REAL_CALIBER


def _campaign(root, rounds, per_round):
    """A one-card campaign of abs float16; per_round[r] lists the (before, after)
    latencies of shape [[4096]] recorded in round r+1's cells, in order."""
    os.makedirs(root)
    with open(os.path.join(root, "campaign.env"), "w") as f:
        f.write(f"KIND=campaign\nROUNDS={rounds}\nCARDS=1\nSWITCH=X\n")
        f.writelines(f"{k}={v}\n" for k, v in REAL_CALIBER.items())
    with open(os.path.join(root, "partition.tsv"), "w") as f:
        f.write("card\top\tdtype\tweight_min\n0\tabs\tfloat16\t0\n")
    for r, pairs in enumerate(per_round, 1):
        for i, side in enumerate(("before", "after")):
            d = os.path.join(root, "card0", "ab_20261201_000000", "abs", f"r{r}", side)
            os.makedirs(d)
            rows = [{"shape_detail": [[4096]], "latency_base": 1.0, "latency": p[i], "error_msg": None} for p in pairs]
            with open(os.path.join(d, "run.log"), "w") as f:
                f.write(
                    "[INFO] "
                    + json.dumps(
                        {"op_name": "abs", "dtype": "torch.float16", "mode": "kernel", "level": "core", "result": rows}
                    )
                    + "\n"
                )
            env = dict(OP="abs", DTYPE="float16", SIDE=side, ROUND=r, CARD=0, RC=0, **REAL_CALIBER)
            with open(os.path.join(d, "cell.env"), "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in env.items())


def test_one_round_with_a_shape_recorded_three_times_is_not_three_rounds(tmp_path):
    # The real H200 screen has mm [[4096,4096],[4096,4096]] twice in one cell
    # (occurrence 2). Occurrences within one round are not paired rounds.
    root = tmp_path / "runs" / "campaign_20261201_000001"
    _campaign(str(root), 1, [[(1.5, 1.0), (1.51, 1.0), (1.49, 1.0)]])
    with Store(str(tmp_path / "z.db")) as store:
        store.ingest(str(tmp_path / "runs"))
        (row,) = store.db.query("SELECT rounds, finding FROM ab_ranges")
    assert row["rounds"] == 1 and row["finding"] == "too few rounds", row


def test_min_effect_nan_or_inf_is_refused_not_read_as_zero(tmp_path):
    db = str(tmp_path / "z.db")
    CliRunner().invoke(cli, ["init", "--db", db])
    for value in ("nan", "inf"):
        result = CliRunner().invoke(cli, ["rule", "--min-effect", value, "--db", db])
        assert result.exit_code == 2, (value, result.output)


def test_settings_edited_by_hand_to_no_setting_fall_back_and_say_so(tmp_path):
    """SQLite reads 'nan', 'inf', '' and 'abc' as 0: a min_effect of 0 would
    call every consistent range a finding. The view keeps the default."""
    root = tmp_path / "runs" / "campaign_20261201_000002"
    _campaign(str(root), 4, [[(1.005, 1.0)], [(1.006, 1.0)], [(1.004, 1.0)], [(1.005, 1.0)]])
    db = str(tmp_path / "z.db")
    with Store(db) as store:
        store.ingest(str(tmp_path / "runs"))
        assert [r["finding"] for r in store.db.query("SELECT finding FROM ab_ranges")] == ["no change"]
        for bad in ("nan", "inf", "-0.5", "abc", ""):
            store.conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('min_effect', ?)", (bad,))
            (settings,) = store.db.query("SELECT * FROM judging_settings")
            assert settings["min_effect"] == 0.02, bad
            assert settings["settings_note"] == f"min_effect {bad!r} is not a positive number: 0.02 used", bad
            assert [r["finding"] for r in store.db.query("SELECT finding FROM ab_ranges")] == ["no change"], bad
        store.conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('q_max', '7')")
        assert store.db.execute("SELECT q_max FROM judging_settings").fetchone()[0] == 0.05
    table = CliRunner().invoke(cli, ["ab", "--db", db]).output
    assert "q_max '7' is not in (0, 1]: 0.05 used" in table


def test_the_current_rule_deleted_or_unknown_is_the_default_everywhere(tmp_path, example_store_path):
    """The views, datasette and the CLI agree: the rule judged under is the
    stored one where it names a rule, else v3."""
    db = str(tmp_path / "z.db")
    with Store(example_store_path) as source:
        source.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    import shutil

    shutil.copy(example_store_path, db)
    with Store(db) as store:
        before = [dict(r) for r in store.db.query("SELECT root, op, dtype, verdict FROM verdicts ORDER BY 1, 2, 3")]
        floors = store.db.execute("SELECT count(*) FROM noise_floors").fetchone()[0]
        for edit in (
            "DELETE FROM settings WHERE key = 'current_rule'",
            "INSERT INTO settings (key, value) VALUES ('current_rule', 'v9')",
        ):
            store.conn.execute(edit)
            assert store.current_rule == "v3"
            assert [
                dict(r) for r in store.db.query("SELECT root, op, dtype, verdict FROM verdicts ORDER BY 1, 2, 3")
            ] == before
            assert store.db.execute("SELECT count(*) FROM noise_floors").fetchone()[0] == floors > 0
    result = CliRunner().invoke(cli, ["screen", "--json", "--db", db])
    assert result.exit_code == 0 and len(json.loads(result.stdout)["rows"]) == len(before)
