"""The partition: longest-first onto the lightest card, the floor set by the
heaviest op, extra ops by weight, weights from the screening root."""

import json

import pytest
from click.testing import CliRunner

from zlstore import Store

from . import generator
from zlstore.cli import cli
from zlstore.run.plan import MAX_CARDS, Op, PlanError, hash_makespan, make_plan, read_partition_tsv, write_partition_tsv

# The seed's batch, in minutes for 6 rounds: topk alone is 70.6 against an
# ideal share of 45.4 on 8 cards (the other ops are made up to hold that).
SEED_MINUTES = {
    ("topk", "float16"): 70.6,
    ("fft", "complex64"): 26.0,
    ("slice_scatter", ""): 24.4,
    ("sort", "float32"): 23.0,
    ("cumsum", ""): 22.2,
    ("argmax", ""): 21.0,
    ("softmax", "float16"): 20.4,
    ("layer_norm", ""): 19.6,
    ("index_add", ""): 18.8,
    ("scatter", ""): 18.0,
    ("gather", ""): 17.2,
    ("rms_norm", ""): 16.4,
    ("isin", ""): 16.0,
    ("mm", "bfloat16"): 15.2,
    ("pad", ""): 14.0,
    ("logspace", ""): 12.4,
    ("rand", ""): 8.0,
}
ROUNDS = 6


def seed_ops():
    return [Op(op, dtype, minutes * 60) for (op, dtype), minutes in SEED_MINUTES.items()]


def test_seed_batch_critical_path_is_the_heaviest_op():
    plan = make_plan(seed_ops(), 8)
    assert plan.ideal_s / 60 == pytest.approx(45.4)
    assert plan.heaviest is not None and plan.heaviest.op == "topk"
    assert plan.makespan_s == pytest.approx(70.6 * 60)  # the floor, reached
    assert plan.makespan_s == plan.heaviest_s
    assert plan.critical_card is not None
    assert [o.op for o in plan.critical_card.ops] == ["topk"]
    assert plan.hash_makespan_s > plan.makespan_s
    # every op placed exactly once
    assert sorted((o.op, o.dtype) for o in plan.ops) == sorted(SEED_MINUTES)


def test_longest_first_to_the_lightest_card_ties_to_the_lowest():
    ops = [Op("a", "", 10), Op("b", "", 10), Op("c", "", 7), Op("d", "", 3)]
    plan = make_plan(ops, 2)
    assert [[o.op for o in c.ops] for c in plan.cards] == [["a", "c"], ["b", "d"]]
    assert plan.makespan_s == 17


def test_extra_ops_go_to_the_lightest_card_by_weight_not_count():
    # one heavy op on card 0 outweighs three light ones on card 1
    plan = make_plan(
        [Op("heavy", "", 60), Op("l1", "", 10), Op("l2", "", 10), Op("l3", "", 10)], 2, extra=[Op("extra", "", 5)]
    )
    assert [o.op for o in plan.cards[0].ops] == ["heavy"]
    assert [o.op for o in plan.cards[1].ops] == ["l1", "l2", "l3", "extra"]
    # extras are placed after the plan in the order given, each onto the then-lightest card
    plan = make_plan([Op("heavy", "", 60), Op("light", "", 10)], 2, extra=[Op("x1", "", 55), Op("x2", "", 20)])
    assert [o.op for o in plan.cards[0].ops] == ["heavy", "x2"]
    assert [o.op for o in plan.cards[1].ops] == ["light", "x1"]


def test_an_op_without_weight_is_an_error_that_names_it():
    with pytest.raises(PlanError, match="rand"):
        make_plan([Op("topk", "", 10), Op("rand", "", 0)], 2)
    with pytest.raises(PlanError, match="cards"):
        make_plan([Op("topk", "", 10)], 0)


def test_hash_partition_is_deterministic():
    ops = seed_ops()
    assert hash_makespan(ops, 8) == hash_makespan(list(reversed(ops)), 8)


def test_partition_tsv_round_trip(tmp_path):
    plan = make_plan(seed_ops(), 8)
    path = write_partition_tsv(plan, tmp_path / "partition.tsv")
    data = path.read_bytes()
    assert b"\r" not in data
    assert data.splitlines()[0] == b"card\top\tdtype\tweight_min"
    assert b"0\ttopk\tfloat16\t70.6" in data.splitlines()
    back = read_partition_tsv(path)
    assert [[(o.op, o.dtype) for o in c.ops] for c in back.cards] == [
        [(o.op, o.dtype) for o in c.ops] for c in plan.cards
    ]
    assert back.makespan_s == pytest.approx(plan.makespan_s, rel=1e-4)


def test_a_partition_whose_header_names_a_column_twice_is_refused(tmp_path):
    """`card op dtype card`: which card an op runs on is unknown."""
    path = tmp_path / "partition.tsv"
    path.write_text("card\top\tdtype\tcard\n0\ttopk\tfloat16\t3\n")
    with pytest.raises(
        PlanError, match=r"partition.tsv:1: the header names a column twice: 'card' \(columns 1 and 4\)"
    ):
        read_partition_tsv(path)


# -- from the store ------------------------------------------------------------


def write_screen_root(root, pairs, drop_elapsed=(), screen_tsv=None):
    """A screening root: pairs maps (op, dtype) -> (elapsed_before, elapsed_after, ir_changed)."""
    root.mkdir(parents=True)
    (root / "root.env").write_text(
        "KIND=screen\nSWITCH=FLAGTREE_MUSA_RLC_ENHANCE\n"
        + "".join(f"{k}={v}\n" for k, v in generator.SCREEN_CALIBER.items())
    )
    for (op, dtype), (before, after, changed) in pairs.items():
        for side, elapsed in (("before", before), ("after", after)):
            kernel = f"{op}_kernel"
            text = generator.ttgir_text(kernel, variant=1 if (changed and side == "after") else 0, rlc=side == "after")
            spec = generator.CellSpec(
                op=op,
                dtype=dtype,
                side=side,
                round=0,
                card=0,
                elapsed_s=elapsed or 0.0,
                rows=[generator.RowSpec(shape=[64, 64], latency=0.02)],
                kernels={kernel: text},
                drop_env=("ELAPSED_S",) if (op, dtype) in drop_elapsed else (),
                noise=False,
            )
            generator.write_cell(root / generator.cell_dir_name(op, dtype, side), spec)
    if screen_tsv:
        lines = ["op\tdtype\tverdict\telapsed_before\telapsed_after"]
        lines += [f"{op}\t{dtype}\t\t{b}\t{a}" for (op, dtype), (b, a) in screen_tsv.items()]
        (root / "screen.tsv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def seed_store(tmp_path):
    pairs = {
        key: (minutes * 60 / ROUNDS / 2, minutes * 60 / ROUNDS / 2, key != ("rand", ""))
        for key, minutes in SEED_MINUTES.items()
    }
    write_screen_root(tmp_path / "runs" / "ab_rlc_seed", pairs)
    db = tmp_path / "plan.db"
    with Store(db) as store:
        store.ingest(tmp_path / "runs")
    return db


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("cards", [MAX_CARDS + 1, 10_000_000, 10**20])
def test_more_cards_than_a_plan_can_have_is_a_usage_error(seed_store, cards):
    """Ten million cards ran out of memory (or a while) before saying anything."""
    result = CliRunner().invoke(cli, ["plan", "ab_rlc_seed", "--cards", str(cards), "--db", str(seed_store)])
    assert result.exit_code == 2 and "--cards" in result.output
    with pytest.raises(PlanError, match="--cards must be from 1"):
        make_plan([Op("topk", "float16", 60.0)], cards)


def test_plan_command_on_the_seed_batch(seed_store, tmp_path):
    ops = ",".join(f"{op}:{dtype}" if dtype else op for op, dtype in SEED_MINUTES)
    out = tmp_path / "partition.tsv"
    result = invoke(
        "plan",
        "ab_rlc_seed",
        "--ops",
        ops,
        "--cards",
        8,
        "--rounds",
        ROUNDS,
        "--json",
        "--out",
        out,
        "--db",
        seed_store,
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert set(plan) >= {"cards", "makespan_s", "heaviest_s", "ideal_s", "hash_makespan_s"}
    assert plan["makespan_s"] == pytest.approx(70.6 * 60)
    assert plan["heaviest_s"] == pytest.approx(70.6 * 60)
    assert plan["ideal_s"] == pytest.approx(45.4 * 60)
    assert plan["hash_makespan_s"] > plan["makespan_s"]
    critical = max(plan["cards"], key=lambda c: c["weight_s"])
    assert [o["op"] for o in critical["ops"]] == ["topk"]
    assert sorted(c["card"] for c in plan["cards"]) == list(range(8))
    assert read_partition_tsv(out).makespan_s == pytest.approx(70.6 * 60, rel=1e-4)

    text = invoke("plan", "ab_rlc_seed", "--ops", ops, "--cards", 8, "--db", seed_store).output
    assert "critical path" in text and "70.6 min" in text and "45.4 min" in text
    assert "heaviest op" in text and "topk:float16" in text and "hash partition" in text


def test_plan_defaults_to_the_ir_changed_pairs(seed_store):
    result = invoke("plan", "ab_rlc_seed", "--cards", 8, "--json", "--db", seed_store)
    assert result.exit_code == 0, result.output
    planned = {o["op"] for c in json.loads(result.output)["cards"] for o in c["ops"]}
    assert planned == {op for op, _ in SEED_MINUTES} - {"rand"}  # rand: NO_IR_DIFF


def test_plan_bare_op_and_extra_ops(seed_store):
    result = invoke(
        "plan",
        "ab_rlc_seed",
        "--ops",
        "topk,fft,rand",
        "--extra-ops",
        "pad",
        "--cards",
        2,
        "--json",
        "--db",
        seed_store,
    )
    assert result.exit_code == 0, result.output
    cards = json.loads(result.output)["cards"]
    assert [o["op"] for o in cards[0]["ops"]] == ["topk"]
    assert [o["op"] for o in cards[1]["ops"]] == ["fft", "rand", "pad"]  # pad: lightest by weight
    assert cards[0]["ops"][0]["dtype"] == "float16"


def test_weights_from_cells_fall_back_to_screen_tsv_and_never_zero(tmp_path):
    root = write_screen_root(
        tmp_path / "runs" / "ab_rlc_w",
        {
            ("topk", "float16"): (100.0, 110.0, True),
            ("fft", "complex64"): (None, None, True),
            ("rand", ""): (None, None, True),
        },
        drop_elapsed={("fft", "complex64"), ("rand", "")},
        screen_tsv={("topk", "float16"): (1, 1), ("fft", "complex64"): (300, 320)},
    )
    db = tmp_path / "w.db"
    with Store(db) as store:
        store.ingest(root)
    result = invoke("plan", "ab_rlc_w", "--ops", "topk,fft", "--cards", 2, "--rounds", 3, "--json", "--db", db)
    assert result.exit_code == 0, result.output
    weights = {o["op"]: o["weight_s"] for c in json.loads(result.output)["cards"] for o in c["ops"]}
    assert weights == {"topk": pytest.approx(210 * 3), "fft": pytest.approx(620 * 3)}

    result = invoke("plan", "ab_rlc_w", "--ops", "topk,rand", "--cards", 2, "--db", db)
    assert result.exit_code == 2
    assert "rand" in result.output and "screening time" in result.output
    result = invoke("plan", "ab_rlc_w", "--ops", "nosuch", "--db", db)
    assert result.exit_code == 2 and "nosuch" in result.output
