"""Provenance: what each cell ran on, stored once per environment, shown in
the headers, warned about where the cells behind one pair or range differ;
and `zlstore history`, one op across roots over time with what changed."""

import json
import subprocess
import sys
from typing import Callable

import pytest
from click.testing import CliRunner

from zlstore import Store, provenance
from zlstore.cli import cli

from . import generator
from .effects import Shape, shape_key, write_repeat_root
from .test_flaggems import query as rows

H200 = {
    "ENV_GPU": "NVIDIA H200",
    "ENV_GPU_COUNT": "1",
    "ENV_DRIVER": "570.86.15",
    "ENV_TORCH": "2.11.0",
    "ENV_TRITON": "3.5.0",
    "ENV_FLAGGEMS_COMMIT": "a1b2c3d4e5f6",
    "ENV_HOSTNAME": "h200-1",
}


def invoke(db, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(db)], catch_exceptions=False)


# -- capture -------------------------------------------------------------------

GPUS = [
    {"index": "0", "uuid": "GPU-5a1c0f2e-0000", "name": "NVIDIA H200", "driver_version": "570.86.15"},
    {"index": "1", "uuid": "GPU-9b7d41aa-1111", "name": "NVIDIA H100", "driver_version": "570.86.15"},
]


@pytest.mark.parametrize(
    "devices, expected",
    [
        (None, ["0", "1"]),
        ("1", ["1"]),
        ("1,0", ["1", "0"]),
        ("GPU-9b7d", ["1"]),
        ("", []),
        ("7,0", []),  # CUDA stops at the first device it cannot resolve
    ],
)
def test_a_process_sees_the_gpus_its_visible_devices_name(devices, expected):
    assert [g["index"] for g in provenance.visible(GPUS, devices)] == expected


def test_a_checkout_commit_is_read_without_git(tmp_path):
    repo = tmp_path / "FlagGems"
    (repo / "src").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    try:
        subprocess.run(git[:3] + ["init", "-q"], check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git to make a checkout with")
    (repo / "src" / "a.py").write_text("x = 1\n")
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert provenance.git_commit(repo / "src") == head[:12]  # from inside the checkout, as git does
    subprocess.run(git + ["pack-refs", "--all"], check=True)  # the branch now only in packed-refs
    assert provenance.git_commit(repo) == head[:12]
    subprocess.run(git[:3] + ["checkout", "-q", "--detach"], check=True)
    assert provenance.git_commit(repo) == head[:12]
    assert provenance.git_commit(tmp_path / "elsewhere") is None


def test_the_cell_env_keys_come_from_the_one_list():
    values = {"gpu": "NVIDIA H200", "triton": "3.6.0", "unknown_field": "x", "torch": "  "}
    assert provenance.env_items(values) == [("ENV_GPU", "NVIDIA H200"), ("ENV_TRITON", "3.6.0")]
    assert provenance.from_env(dict(provenance.env_items(values))) == {"gpu": "NVIDIA H200", "triton": "3.6.0"}
    assert provenance.from_env({"OP": "abs"}) is None
    assert provenance.changes({"triton": "3.5.0", "gpu": "A"}, {"triton": "3.6.0", "gpu": "A"}) == [
        "triton 3.5.0 -> 3.6.0"
    ]


def test_a_command_file_is_read_only_for_its_env_keys(tmp_path):
    (tmp_path / provenance.COMMAND_FILE).write_text("ENV_TORCH='2.11.0'\nRC=0\nnot a line\nENV_GPU=X\n")
    assert provenance.command_file(tmp_path) == {"gpu": "X", "torch": "2.11.0"}
    (tmp_path / "elsewhere").write_text("ENV_GPU=Y\n")
    (tmp_path / provenance.COMMAND_FILE).unlink()
    (tmp_path / provenance.COMMAND_FILE).symlink_to(tmp_path / "elsewhere")
    assert provenance.command_file(tmp_path) == {}  # a link planted there says nothing


# -- stored, shown, warned -----------------------------------------------------------


def screening_root(dest, name, before_env, after_env):
    """A screening root of one pair (softmax float16, same IR both sides)
    whose sides recorded the given ENV_* keys."""
    root = dest / name
    root.mkdir(parents=True)
    (root / "root.env").write_text(
        "KIND=screen\n"
        + f"SWITCH={generator.SWITCH}\n"
        + "".join(f"{k}={v}\n" for k, v in generator.SCREEN_CALIBER.items())
    )
    text = generator.ttgir_text("softmax_kernel")
    for side, env in (("before", before_env), ("after", after_env)):
        generator.write_cell(
            root / generator.cell_dir_name("softmax", "float16", side),
            generator.CellSpec(
                op="softmax",
                dtype="float16",
                side=side,
                round=0,
                card=0,
                kernels={"softmax_kernel": text},
                rows=[generator.RowSpec([[64, 64]], 0.5), generator.RowSpec([[1024, 1024]], 1.0)],
                extra_env=env,
                noise=False,
            ),
        )
    return root


def test_each_distinct_environment_is_stored_once_and_unknown_stays_unknown(tmp_path):
    runs = tmp_path / "runs"
    screening_root(runs, "ab_same", H200, H200)
    screening_root(runs, "ab_older", {}, {})
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(runs)
    assert rows(db, "SELECT count(*) AS n FROM environments")[0]["n"] == 1
    cells = rows(db, "SELECT root, gpu, triton, hostname, environment_id FROM cell_summary ORDER BY root")
    assert [(c["root"], c["gpu"], c["triton"]) for c in cells] == [
        ("ab_older", None, None),
        ("ab_older", None, None),
        ("ab_same", "NVIDIA H200", "3.5.0"),
        ("ab_same", "NVIDIA H200", "3.5.0"),
    ]
    result = invoke(db, "screen")
    lines = result.stdout.splitlines()
    assert lines[lines.index(next(l for l in lines if l.startswith("ab_same"))) + 1] == (
        "  ran on: NVIDIA H200 x1, driver 570.86.15, torch 2.11.0, triton 3.5.0, FlagGems commit a1b2c3d4e5f6, "
        "host h200-1"
    )
    assert "  ran on: unknown (its cells record no environment)" in lines
    assert rows(db, "SELECT * FROM environment_differences") == []
    assert "differ" not in result.stderr


def test_a_pair_whose_sides_ran_on_two_triton_builds_is_warned_about_by_field(tmp_path):
    runs = tmp_path / "runs"
    screening_root(runs, "ab_mixed", H200, dict(H200, ENV_TRITON="3.6.0", ENV_HOSTNAME="h200-2"))
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(runs)
    result = invoke(db, "screen")
    assert (
        "warning: ab_mixed softmax:float16: cells differ in triton 3.5.0 before, 3.6.0 after; "
        "host h200-1 before, h200-2 after"
    ) in result.stderr
    assert (
        "    environment: cells differ in triton 3.5.0 before, 3.6.0 after; host h200-1 before, h200-2 after"
        in result.stdout
    )
    assert "ran on 2 environments" in result.stdout
    pair = json.loads(invoke(db, "screen", "--json").stdout)["rows"][0]
    assert pair["environment_differs"] == {"triton": ["3.5.0", "3.6.0"], "hostname": ["h200-1", "h200-2"]}
    assert pair["verdict"] == "NO_IR_DIFF"  # the caliber guard is what it was


def test_a_campaign_whose_rounds_ran_on_two_gpu_models_is_warned_about_in_ab_and_its_json(tmp_path):
    runs = tmp_path / "runs"
    shapes = [Shape(1.0, 0.01)] * 2
    write_repeat_root(
        runs,
        "ab_gpus",
        shapes,
        rounds=4,
        seed=1,
        environment=lambda side, rnd: dict(H200, ENV_GPU="NVIDIA H100" if rnd > 2 else "NVIDIA H200"),
    )
    write_repeat_root(runs, "ab_one_gpu", shapes, rounds=4, seed=2, op="abs", environment=lambda side, rnd: H200)
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.ingest(runs)
    result = invoke(db, "ab")
    assert "warning: ab_gpus softmax:float16: cells differ in GPU NVIDIA H100 | NVIDIA H200" in result.stderr
    assert "ab_one_gpu" not in result.stderr
    assert result.stdout.count("cells differ in GPU NVIDIA H100 | NVIDIA H200") == len(shapes)
    ranges = json.loads(invoke(db, "ab", "--json").stdout)["rows"]
    differs = {(r["root"], r["shape"]): r["environment_differs"] for r in ranges}
    assert differs == {("ab_gpus", shape_key(i)): {"gpu": ["NVIDIA H100", "NVIDIA H200"]} for i in range(2)} | {
        ("ab_one_gpu", shape_key(i)): None for i in range(2)
    }
    # datasette's ab_ranges says the same as the CLI
    view = rows(db, "SELECT root, shape, environment_differs FROM ab_ranges")
    assert {
        (r["root"], r["shape"]): json.loads(r["environment_differs"]) if r["environment_differs"] else None
        for r in view
    } == differs


def test_merge_carries_environments_by_their_fields(tmp_path):
    runs = tmp_path / "runs"
    screening_root(runs, "ab_one", H200, H200)
    screening_root(runs, "ab_two", dict(H200, ENV_TRITON="3.6.0"), dict(H200, ENV_TRITON="3.6.0"))
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    with Store(source) as store:
        store.ingest(runs / "ab_two")
    with Store(target) as store:
        store.ingest(runs / "ab_one")
    assert invoke(target, "merge", str(source)).exit_code == 0
    got = rows(target, "SELECT root, triton FROM cell_summary ORDER BY root, side")
    assert [(r["root"], r["triton"]) for r in got] == [("ab_one", "3.5.0")] * 2 + [("ab_two", "3.6.0")] * 2
    assert rows(target, "SELECT count(*) AS n FROM environments")[0]["n"] == 2


# -- history --------------------------------------------------------------------------

CAMPAIGNS = [  # (name, when, triton, effect of shape 0)
    ("ab_oct", "2026-10-01T09:00:00", "3.4.0", 1.5),
    ("ab_nov", "2026-11-01T09:00:00", "3.5.0", 1.5),
    ("ab_dec", "2026-12-01T09:00:00", "3.6.0", 1.0),
]


def on_triton(version: str) -> Callable[[str, int], dict[str, str]]:
    """Every cell's environment: the H200's, with this Triton build."""
    return lambda side, rnd: dict(H200, ENV_TRITON=version)


@pytest.fixture(scope="module")
def three_campaigns(tmp_path_factory):
    """Three repeat runs of softmax over two shapes, a month apart, each on
    its own Triton build: shape 0 is 1.5x faster until the December build
    takes it away; shape 1 never changes. Written oldest last, so that the
    order comes from STARTED_AT, not from the walk."""
    tmp = tmp_path_factory.mktemp("history")
    for name, when, triton, effect in reversed(CAMPAIGNS):
        write_repeat_root(
            tmp / "runs",
            name,
            [Shape(effect, 0.002), Shape(1.0, 0.002)],
            rounds=4,
            seed=3,
            started_at=when,
            environment=on_triton(triton),
        )
    db = tmp / "s.db"
    with Store(db) as store:
        store.ingest(tmp / "runs")
    return db


def test_history_lists_every_root_oldest_first_with_what_changed(three_campaigns):
    result = json.loads(invoke(three_campaigns, "history", "softmax:float16", "--json").stdout)
    entries = result["entries"]
    assert [e["root"] for e in entries] == [name for name, *_ in CAMPAIGNS]
    assert [e["started_at"] for e in entries] == [when for _, when, *_ in CAMPAIGNS]
    assert [e["changes"] for e in entries] == [[], ["triton 3.4.0 -> 3.5.0"], ["triton 3.5.0 -> 3.6.0"]]
    assert entries[0]["environment"]["triton"] == "3.4.0"
    findings = [{r["shape"]: r["finding"] for r in e["results"]} for e in entries]
    assert findings == [{shape_key(0): "faster", shape_key(1): "no change"}] * 2 + [
        {shape_key(0): "no change", shape_key(1): "no change"}
    ]


def test_a_finding_that_flips_between_consecutive_campaigns_is_flagged_with_both_intervals(three_campaigns):
    result = json.loads(invoke(three_campaigns, "history", "softmax", "--json").stdout)
    assert [
        (f["shape"], f["from"]["root"], f["to"]["root"], f["from"]["finding"], f["to"]["finding"])
        for f in result["flips"]
    ] == [(shape_key(0), "ab_nov", "ab_dec", "faster", "no change")]
    flip = result["flips"][0]
    assert flip["from"]["ci_low"] > 1.4 and flip["to"]["ci_high"] < 1.02
    text = invoke(three_campaigns, "history", "softmax").stdout
    assert "  changed: triton 3.5.0 -> 3.6.0" in text
    assert text.count("<< flipped") == 1
    assert f"softmax:float16 {shape_key(0)}: faster -> no change" in text


def test_history_of_one_shape_and_of_an_unknown_op(three_campaigns):
    shape = json.loads(shape_key(1))
    spaced = json.dumps(shape)  # as a person types it
    result = json.loads(invoke(three_campaigns, "history", "softmax", "--shape", spaced, "--json").stdout)
    assert {r["shape"] for e in result["entries"] for r in e["results"]} == {shape_key(1)}
    assert result["flips"] == []
    unknown = invoke(three_campaigns, "history", "nosuch")
    assert unknown.exit_code == 2 and "no stored root measured nosuch; ops with results: softmax" in unknown.output


def test_importlib_metadata_is_imported_only_where_a_version_is_asked():
    """Every command's start pays for what it imports: importlib.metadata
    (with email) waits for a runner asking a distribution's version."""
    probe = (
        "import sys, zlstore.cli; print('importlib.metadata' in sys.modules); "
        "from zlstore import provenance; provenance.dist_version('click'); "
        "print('importlib.metadata' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]
