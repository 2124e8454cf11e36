"""`python -m zlstore` and the `zlstore` command: the zlstore command line.

Ctrl-C while the command line is still being imported (a second or so on a
busy machine) ends it as Ctrl-C during a command does: "interrupted" and
what it kept (nothing: the command had not started), exit status 130, no
traceback. Once a command runs, cli.ZlstoreGroup handles it."""

import signal
import sys

from .names import EXIT_INTERRUPTED  # a leaf module: imports nothing of zlstore


def _interrupted_early(signum, frame):
    sys.stderr.write("interrupted before the command started: nothing was read or written\n")
    raise SystemExit(EXIT_INTERRUPTED)


def main():
    signal.signal(signal.SIGINT, _interrupted_early)
    from .cli import cli  # after the handler: a Ctrl-C while the command line loads is handled

    cli(prog_name="zlstore")


if __name__ == "__main__":
    main()
