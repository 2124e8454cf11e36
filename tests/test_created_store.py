"""A command that creates a store says so (a mistyped --db is otherwise a
silent new store), and an error about a database whose path came from
$ZLSTORE_DB says where the path came from."""

from click.testing import CliRunner

from zlstore.cli import cli


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def test_a_writing_command_says_it_created_the_store(tmp_path, example_source):
    source, _ = example_source
    mistyped = tmp_path / "mine.dn"
    first = run("ingest", source / "ab_rlc_20261014_083000", "--db", mistyped, env={"ZLSTORE_DB": None})
    assert first.exit_code == 0, first.output
    assert f"created {mistyped}" in first.stderr.splitlines()
    again = run("ingest", source / "ab_rlc_20261014_083000", "--db", mistyped, env={"ZLSTORE_DB": None})
    assert again.exit_code == 0 and "created" not in again.stderr


def test_init_says_it_created_the_store_once(tmp_path):
    path = tmp_path / "x.db"
    assert f"created {path}" in run("init", "--db", path).stderr
    assert "created" not in run("init", "--db", path).stderr


def test_an_error_about_a_database_from_the_environment_names_the_variable(tmp_path):
    missing = tmp_path / "nope.db"
    from_env = run("screen", env={"ZLSTORE_DB": str(missing)})
    assert from_env.exit_code == 2
    assert f"$ZLSTORE_DB={missing}" in from_env.stderr
    given = run("screen", "--db", missing, env={"ZLSTORE_DB": None})
    assert given.exit_code == 2 and "ZLSTORE_DB" not in given.stderr
    nowhere = tmp_path / "no" / "such" / "x.db"
    cannot_create = run("init", env={"ZLSTORE_DB": str(nowhere)})
    assert cannot_create.exit_code == 2 and f"$ZLSTORE_DB={nowhere}" in cannot_create.stderr


def test_a_damaged_database_from_the_environment_names_the_variable(tmp_path):
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    result = run("screen", env={"ZLSTORE_DB": str(damaged)})
    assert result.exit_code == 2 and f"$ZLSTORE_DB={damaged}" in result.stderr
