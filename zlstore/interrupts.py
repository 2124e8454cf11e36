"""What Ctrl-C leaves behind, said on stderr as the command ends: what was
kept and what to run again. A writing command commits in whole units (a
cell, a merged root, a forget), so what it says is the unit; a command that
only reads changed nothing."""

import shlex
from typing import Optional, Sequence

# What each writing command keeps of an interrupted run, and why running it
# again is safe; any other command read only, or committed whole.
_KEPT = {
    "ingest": "every cell stored before it is kept, whole; the cell being read is not stored. "
    "Running it again stores only the cells not stored yet",
    "record": "every cell stored before it is kept, whole; the cell being read is not stored. "
    "Running it again stores only the cells not stored yet",
    "merge": "the roots merged before it are kept, whole (a root is one transaction); the root being merged is "
    "not. Running it again merges the rest: a root already merged is matched, not added twice",
    "forget": "nothing was forgotten (a forget is one transaction: all of it or nothing)",
    "rescore": "a screen.tsv rewritten before it is kept, whole (the original as screen.tsv.orig); "
    "running it again rewrites the rest",
}
# The commands that only read: an interrupt changed nothing.
_READ_ONLY = {
    "serve",
    "metadata",
    "problems",
    "screen",
    "ab",
    "noise",
    "compare",
    "report",
    "history",
    "diff",
    "export",
}
_READ = "nothing was written (the command only reads)"
_OTHER = "what it committed before is kept, whole; nothing is half-written"


def interrupted_text(words: Sequence[str], early: bool = False) -> str:
    """The line Ctrl-C ends a command with: what was kept, and the command
    to run again (words: the command line's arguments after `zlstore`)."""
    if early:
        return "interrupted before the command started: nothing was read or written"
    name: Optional[str] = next((w for w in words if not w.startswith("-")), None)
    kept = _KEPT.get(name or "") or (_READ if name in _READ_ONLY else _OTHER)
    again = " ".join(shlex.quote(w) for w in ("zlstore", *words))
    return f"interrupted: {kept}; to finish: {again}"
