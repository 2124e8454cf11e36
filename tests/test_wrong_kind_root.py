"""A root given to a command that does not read its kind: exit 2, saying
what the root is and which command reads it (never an empty answer with
status 0)."""

import pytest

from zlstore import output
from zlstore.show.judge import WrongKind, root_for

from .judging import invoke

SCREEN_ROOT = "ab_rlc_20261012_101500"
CAMPAIGN = "campaign_20261013_090000"


@pytest.mark.parametrize(
    "args,kind,reader",
    [
        (("screen", CAMPAIGN), "a campaign root", f"zlstore ab {CAMPAIGN}"),
        (("rescore", CAMPAIGN), "a campaign root", f"zlstore ab {CAMPAIGN}"),
        (("rescore", CAMPAIGN, "--write"), "a campaign root", f"zlstore ab {CAMPAIGN}"),
        (("export", CAMPAIGN), "a campaign root", f"zlstore ab {CAMPAIGN}"),
        (("compare", SCREEN_ROOT, CAMPAIGN), "a campaign root", f"zlstore ab {CAMPAIGN}"),
        (("ab", SCREEN_ROOT), "a screening root", f"zlstore screen {SCREEN_ROOT}"),
        (("ab", SCREEN_ROOT, "--json"), "a screening root", f"zlstore screen {SCREEN_ROOT}"),
    ],
)
def test_a_root_of_another_kind_is_refused_naming_its_kind_and_reader(example_store, args, kind, reader):
    result = invoke(example_store.path, *args)
    assert result.exit_code == 2, result.output
    assert kind in result.stderr and reader in result.stderr
    assert result.stdout == ""


def test_ab_lists_a_screening_roots_unpaired_rows(example_store):
    result = invoke(example_store.path, "ab", SCREEN_ROOT, "--rejected")
    assert result.exit_code == 0 and SCREEN_ROOT in result.stdout


def test_the_reader_named_carries_the_database(example_store):
    with output.hints_for("my runs/x.db"):
        with pytest.raises(WrongKind, match="zlstore screen ab_rlc_20261012_101500 --db 'my runs/x.db'"):
            root_for(example_store, SCREEN_ROOT, "ab")
    assert root_for(example_store, CAMPAIGN, "ab")["name"] == CAMPAIGN
