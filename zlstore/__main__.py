"""`python -m zlstore` and the `zlstore` command: the zlstore command line.

Ctrl-C while the command line is still being imported (a second or so on a
busy machine) ends it as Ctrl-C during a command does: "interrupted" and
what it kept (nothing: the command had not started), exit status 130, no
traceback. Once a command runs, cli.ZlstoreGroup handles it. Once it is over (its database closed, its summary printed), a Ctrl-C no
longer raises: raised in Python's own ending (an atexit callback, a
finalizer) it would print a traceback and leave the exit status as it was;
the process ends as interrupted instead, after everything else."""

import atexit
import os
import signal
import sys

from .names import EXIT_INTERRUPTED  # a leaf module: imports nothing of zlstore

_late: list = []  # a Ctrl-C once the command was over
_status: list = []  # the command's exit status


def _interrupted_early(signum, frame):
    sys.stderr.write("interrupted before the command started: nothing was read or written\n")
    raise SystemExit(EXIT_INTERRUPTED)


def _interrupted_late(signum, frame):
    _late.append(signum)


_interrupted_early.after_command = _interrupted_late  # type: ignore[attr-defined]  # db.interruptible installs it when a command ends


def _exit_as_interrupted():
    """Registered first, run last: a Ctrl-C that came once the command was
    over ends the process as one during it would."""
    if not _late or _status == [EXIT_INTERRUPTED]:
        # From here Python ends with SIGINT's default action, which would
        # kill the process without a word: a Ctrl-C now changes nothing.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


def main():
    atexit.register(_exit_as_interrupted)
    signal.signal(signal.SIGINT, _interrupted_early)
    from .cli import cli  # after the handler: a Ctrl-C while the command line loads is handled

    try:
        cli(prog_name="zlstore")
    except SystemExit as done:
        _status.append(done.code)
        raise


if __name__ == "__main__":
    main()
