"""Shared fixtures: stores on real SQLite files, generated runs/ trees, and
a real Slurm cluster on this machine."""

import shutil
from pathlib import Path

import pytest

from zlstore import Store

from .nobody import nobody_dir  # noqa: F401 (a fixture: a directory only another user can enter)


def pytest_configure(config):
    """A suite started in the background by a shell without job control
    inherits SIGINT ignored, and so would every process it starts: the
    Ctrl-C tests would then test nothing (their process runs to its end).
    Python's own handler back, as in a terminal; and no $COLUMNS."""
    import os
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Text for people fits $COLUMNS even through a pipe (output.terminal_width):
    # a shell that exports it would change what the tests and the processes
    # they start read (those about widths set it themselves). GNU readline,
    # once imported (pytest's debugger support does), sets COLUMNS in the C
    # environment that processes inherit, not in os.environ: imported here
    # first, so that what it set is unset for good.
    try:
        import readline  # noqa: F401
    except ImportError:
        pass
    os.environ.pop("COLUMNS", None)
    os.unsetenv("COLUMNS")


# The modules that take longest (the sum of --durations=0 on two cores), longest first.
# With -n, xdist hands out whole modules (--dist loadscope) in collection
# order: a long module collected last (test_until_decided.py, near the end of
# the alphabet) would run alone while the other worker idles. Started first,
# they overlap the short ones. Only the order changes: every test still runs.
LONGEST_FIRST = (
    "test_flaggems.py",
    "test_across_roots.py",
    "test_containment.py",
    "test_hostile_stores.py",
    "test_db_faults.py",
    "test_until_decided.py",
    "test_merge.py",
    "test_flaggems_probe.py",
    "test_output.py",
    "test_report_readable.py",
    "test_exit_status.py",
    "test_reads.py",
    "test_duplicate_cells.py",
    "test_serve.py",
    "test_ingest.py",
    "test_hostile_pages.py",
    "test_ingest_workers.py",
    "test_readme.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # sorted() is stable: within a module, and among the other modules, the order stays
    items[:] = sorted(items, key=lambda item: rank.get(item.path.name, len(rank)))


# A stand-in for FlagGems' benchmark, run by zlstore flaggems in its own
# pytest process (test_flaggems.py); its tests are not this suite's.
collect_ignore = ["flaggems_standin"]


@pytest.fixture(scope="session")
def example_source(tmp_path_factory):
    """The example tree, generated once per session, with its manifest."""
    from . import generator

    dest = tmp_path_factory.mktemp("example") / "runs"
    manifest = generator.make_example_tree(dest)
    return dest, manifest


@pytest.fixture
def example_tree(example_source, tmp_path):
    """A private copy of the example tree that a test may change."""
    source, manifest = example_source
    dest = tmp_path / "runs"
    shutil.copytree(source, dest)
    return dest, manifest


@pytest.fixture(scope="session")
def example_store_path(example_source, tmp_path_factory):
    """A database holding the example tree, ingested once per session
    (read-only use), and holding every fingerprint rule, as after
    `zlstore rescore --rule v4` (an ingest computes v1-v3 only)."""
    from zlstore.read import ttgir

    source, _ = example_source
    path = tmp_path_factory.mktemp("store") / "example.db"
    with Store(path) as store:
        store.ingest(source)
        for rule in ttgir.RULES:
            store.compute_fingerprints(rule)
    return path


@pytest.fixture
def example_store(example_store_path, tmp_path):
    """A private copy of the ingested example database that a test may change."""
    path = tmp_path / "example.db"
    with Store(example_store_path) as source:
        source.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(example_store_path, path)
    with Store(path) as store:
        yield store


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "test.db") as store:
        yield store


SAMPLES = Path(__file__).parent / "samples"


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real Slurm (Debian's slurmctld, slurmd, munge) on this machine with
    four slurmd "nodes" of one CPU each, started once for the session by
    tests/slurm/start_slurm.sh and stopped at its end. Yields the
    environment every Slurm command needs (SLURM_CONF). Skipped only when
    Slurm is not installed (.ci/run installs it)."""
    from .slurm.cluster import Cluster, ClusterError, missing_programs

    missing = missing_programs()
    if missing:
        pytest.skip(
            f"slurm is not installed ({', '.join(missing)} not found): "
            "apt-get install slurmctld slurmd slurm-client munge, as .ci/run does"
        )
    try:
        cluster = Cluster(nodes=4)
    except ClusterError as error:
        pytest.fail(str(error))
    try:
        yield cluster.env
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def signals_left_as_they_were():
    """A test leaves SIGINT's handler and this thread's signal mask as it
    found them: a process a later test starts inherits an ignored or
    blocked SIGINT, and its Ctrl-C tests then wait forever (they share a
    worker process under pytest -n)."""
    import signal

    handler, mask = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    now_handler, now_mask = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if (now_handler, now_mask) != (handler, mask):
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        pytest.fail(f"the test left SIGINT's handler {now_handler} (was {handler}), the mask {now_mask} (was {mask})")
