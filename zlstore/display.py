"""The live view of a campaign: per card its current op, ops done and left,
elapsed time and an estimate from the weights. Redrawn in place on a
terminal; otherwise a line per event and the table every so often."""

import time
from dataclasses import dataclass, field
from typing import IO, List, Optional

from .plan import Op


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

    def estimate_s(self, now: float) -> Optional[float]:
        """Weight still ahead: ops not started plus what is left of the current one."""
        total = sum(op.weight_s for op in self.remaining)
        if self.current is not None:
            total += max(0.0, self.current.weight_s - (now - (self.current_since or now)))
        return total if total == total else None  # NaN: a plan without weights


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
        eta = None if any(e is None for e in estimates) else max(estimates, default=0.0)
        lines = [f"{self.title}: {len(self.cards)} cards, elapsed {_clock(now - self.start)}, "
                 f"est. {_clock(eta)} left"]
        header = ("card", "current op", "done", "left", "failed", "cells", "elapsed", "est. left")
        rows = []
        for c, estimate in zip(self.cards, estimates):
            if c.current is not None:
                current = c.current.label
            elif c.interrupted:
                current = "(interrupted)"
            elif c.finished is not None:
                current = "(finished)"
            elif c.started is None:
                current = "(starting)" if c.ops else "(idle)"
            else:
                current = "-"
            left = len(c.remaining) + (1 if c.current is not None else 0)
            end = c.finished if c.finished is not None else now
            elapsed = (end - c.started) if c.started is not None else 0.0
            rows.append((str(c.card), current, str(c.done + c.skipped), str(left), str(len(c.failed)),
                         str(c.cells), _clock(elapsed), _clock(estimate)))
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        fmt = lambda values: "  ".join(v.ljust(w) if i == 1 else v.rjust(w)
                                       for i, (v, w) in enumerate(zip(values, widths))).rstrip()
        lines.append(fmt(header))
        lines.extend(fmt(r) for r in rows)
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
            lines = self.screen()
            if self.drawn:
                self.stream.write(f"\x1b[{self.drawn}F\x1b[J")
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
            self.drawn = len(lines)
        elif force or now - self.last_status >= self.status_every_s:
            self.stream.write("\n".join(self.screen()) + "\n")
            self.stream.flush()
            self.last_status = now

    def final(self) -> List[str]:
        lines = self.screen()
        if self.tty:
            self.refresh()
        else:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        return lines
