"""Fuzzing ingest with mutated trees (tests/mutations.py): whatever is done
to a few files, an ingest ends (no hang) without a traceback, exits 0 or 1,
stores every cell no mutation touched as the unmutated tree's ingest does,
and names every touched file that cannot be read as written.

hypothesis draws the cases (a seeded Random per example: the mutations
themselves are the ones bench/fuzz.py runs by the thousand), replays the
failing ones first on the next run, and shrinks a failure to fewer
mutations. A bounded number of examples keeps this to seconds."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import mutations

EXAMPLES = int(os.environ.get("ZLSTORE_FUZZ_EXAMPLES", "30"))


@pytest.fixture(scope="module")
def fuzzer():
    work = Path(tempfile.mkdtemp(prefix="zlstore-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        yield mutations.Fuzzer(work)
    finally:
        mutations._remove(work)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=False), count=st.integers(min_value=1, max_value=3))
def test_mutated_trees_are_contained(fuzzer, rng, count):
    touched, outcome = fuzzer.case(rng, count)
    what = [(t.how, t.path) for t in touched]
    assert outcome.status is not None, f"ingest hung: {what}"
    assert not outcome.crashed, f"{what}: {outcome.detail}"
    assert outcome.status in (0, 1)
    assert not outcome.lost, f"{what}: good cells lost: {outcome.lost}"
    assert not outcome.unreported, f"no problem names {[(t.how, t.path) for t in outcome.unreported]}"


def test_every_mutation_can_happen(fuzzer):
    """Each kind of mutation applies to the template tree (a fuzzer whose
    mutations silently stopped applying would pass on anything)."""
    import random

    for name, mutation in mutations.MUTATIONS.items():
        work = fuzzer.work / f"check-{name}"
        shutil.copytree(fuzzer.tree.top, work, symlinks=True)
        fuzzer.tree.taken = []
        done = []
        for seed in range(20):
            done = mutation(work, fuzzer.tree, random.Random(seed), fuzzer.outside)
            if done:
                break
        assert done, name
        mutations._remove(work)
