"""The live view of a campaign: per card its state (the local process's,
or the Slurm task's as the scheduler reports it) with its job, its current
op, ops done and left, elapsed time and an estimate from the weights.
Redrawn in place on a terminal; otherwise a line per event and the table
every so often. The table is tabulate's, as every other (output.table);
docs/development.md, "Not a dependency: rich", says why the redraw is not rich's."""

import os
import time
from dataclasses import dataclass, field
from typing import IO, List, Optional

from .. import output
from .plan import Op

COLUMNS = ("card", "state", "job", "current op", "done", "left", "failed", "cells", "elapsed", "est. left")
ALIGN = ("right", "left", "left", "left", "right", "right", "right", "right", "right", "right")


@dataclass
class CardState:
    card: int
    ops: List[Op]
    current: Optional[Op] = None
    current_since: Optional[float] = None
    pgid: Optional[int] = None
    done: int = 0
    skipped: int = 0
    failed: List[str] = field(default_factory=list)
    cells: int = 0
    started: Optional[float] = None
    finished: Optional[float] = None
    interrupted: bool = False
    remaining: List[Op] = field(default_factory=list)
    state: str = ""  # pending, running, done, failed, cancelled, timeout, ...
    job: str = ""  # the Slurm task (<array job>_<task>) or the local pid
    node: str = ""
    timeout_s: Optional[float] = None  # when the current op is killed (card.op_timeout_s)
    stopped_during: Optional[Op] = None  # the op it was running when it was stopped

    def overdue(self, now: float) -> bool:
        """The current op has run past its weight: its end is not known."""
        return self.current is not None and now - (self.current_since or now) > self.current.weight_s

    def estimate_s(self, now: float) -> Optional[float]:
        """Weight still ahead: ops not started plus what is left of the
        current one; None when unknown (no weights, or an op past its own)."""
        total = sum(op.weight_s for op in self.remaining)
        if self.current is not None:
            if self.overdue(now):
                return None
            total += self.current.weight_s - (now - (self.current_since or now))
        return total if total == total else None  # NaN: a plan without weights

    def current_text(self, now: float) -> str:
        if self.current is not None:
            if self.overdue(now) and self.timeout_s is not None:
                left = self.timeout_s - (now - (self.current_since or now))
                return f"{self.current.label} (past its estimate; op timeout in {_clock(max(0.0, left))})"
            return self.current.label
        if self.interrupted:
            return "(interrupted)"
        if self.finished is not None:
            return "(finished)"
        if self.started is None or self.state.startswith("pending"):
            return "(starting)" if self.ops else "(idle)"
        return "-"


def _clock(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


class Display:
    """The live view: redrawn in place on a terminal; otherwise a line per
    event and the status table every status_every_s seconds."""

    def __init__(self, title: str, cards: List[CardState], stream: IO, status_every_s: float = 30.0):
        self.title, self.cards, self.stream = title, cards, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.monotonic()
        self.drawn = 0
        self.last_status = self.start
        self.status_every_s = status_every_s

    def screen(self) -> List[str]:
        now = time.monotonic()
        estimates = [c.estimate_s(now) for c in self.cards]
        known = [e for e in estimates if e is not None]
        eta = max(known, default=0.0) if len(known) == len(estimates) else None
        lines = [f"{self.title}: {len(self.cards)} cards, elapsed {_clock(now - self.start)}, est. {_clock(eta)} left"]
        rows = []
        for c, estimate in zip(self.cards, estimates):
            left = len(c.remaining) + (1 if c.current is not None else 0)
            end = c.finished if c.finished is not None else now
            elapsed = (end - c.started) if c.started is not None else 0.0
            job = f"{c.job} on {c.node}" if c.job and c.node else c.job
            rows.append(
                dict(
                    zip(
                        COLUMNS,
                        (
                            c.card,
                            c.state or "-",
                            job or "-",
                            c.current_text(now),
                            c.done + c.skipped,
                            left,
                            len(c.failed),
                            c.cells,
                            _clock(elapsed),
                            _clock(estimate),
                        ),
                    )
                )
            )
        lines.extend(output.table(rows, COLUMNS, align=ALIGN).split("\n"))
        for c in self.cards:
            for failure in c.failed:
                lines.append(f"  failed: {failure}")
        return lines

    def event(self, text: str):
        if not self.tty:
            self.stream.write(f"[{_clock(time.monotonic() - self.start)}] {text}\n")
            self.stream.flush()

    def refresh(self, force: bool = False):
        now = time.monotonic()
        if self.tty:
            lines = self._fitted(self.screen())
            if self.drawn:
                self.stream.write(f"\x1b[{self.drawn}F\x1b[J")
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
            self.drawn = len(lines)
        elif force or now - self.last_status >= self.status_every_s:
            self.stream.write("\n".join(self.screen()) + "\n")
            self.stream.flush()
            self.last_status = now

    def _fitted(self, lines: List[str]) -> List[str]:
        """Lines cut to the terminal's width: a line that wrapped would take
        two rows, and the next redraw would move up too few and leave a
        stale copy behind."""
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return lines
        return [line if len(line) < width else line[: max(width - 4, 1)] + "..." for line in lines]

    def final(self) -> List[str]:
        lines = self.screen()
        if self.tty:
            self.refresh()
        else:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        return lines
