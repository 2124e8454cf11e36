"""The server's limits on the Python it runs inside a query: zlstore's SQL
functions and aggregates, which SQLite's own limits never see.

SQLite's time limit (datasette's progress handler) runs between SQLite's
steps, never inside a Python function; its heap limit counts SQLite's
memory, never Python's. So each Python function the plugin registers is
bounded here:

- time: a call that runs past the query's time limit is stopped where it
  is (an exception raised in its thread at the next Python instruction,
  timed_call), and the query answers with an error that says so;
- memory: its input is capped (kernel_diff: the IR texts it would read;
  median: the values it holds, BoundedMedian);
- Ctrl-C: stop_all() stops every call in flight and interrupts every
  query of a store, so the server stops at once instead of waiting for
  them (serve.serve calls it on the first Ctrl-C).
"""

import ctypes
import sqlite3
import sys
import threading
import weakref
from typing import Callable, Optional

from ..stats import Median

# The most memory one median() may hold (its values, and the list it sorts
# them in): a quarter of the server's heap limit (serve.HEAP_LIMIT_BYTES),
# so datasette's three query threads, each in one, stay within it.
MEDIAN_MAX_BYTES = 256 << 20
_SLOT_BYTES = 16  # a value's place in the list, and in the sorted copy

# The most IR text one kernel_diff call reads, both cells' kernels together:
# two of the largest value a query may hold (datasette_plugin.MAX_VALUE_BYTES).
KERNEL_DIFF_MAX_BYTES = 64 << 20


class OverTime(Exception):
    """Raised inside a call that ran past its time limit (timed_call)."""


_in_flight: "weakref.WeakSet[_Watch]" = weakref.WeakSet()
# Datasette keeps a connection per query thread for the server's life; a
# Connection takes no weak reference.
_connections: "set[sqlite3.Connection]" = set()
_connections_lock = threading.Lock()
_stopping = threading.Event()


class _Watch:
    """One call's deadline: fire() raises OverTime in the calling thread,
    once, and only while the call runs (finish() makes sure no OverTime
    outlives it)."""

    def __init__(self):
        self.thread = threading.get_ident()
        self.lock = threading.Lock()
        self.done = self.fired = False

    def fire(self):
        with self.lock:
            if not (self.done or self.fired):
                self.fired = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread), ctypes.py_object(OverTime))

    def finish(self):
        with self.lock:
            self.done = True
            if self.fired:  # not yet raised: taken back before the call's caller sees it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread), None)


def timed_call(seconds: float, fn: Callable, *args, on_overtime: Callable[[str], object]):
    """fn(*args), stopped after `seconds` (or at once by stop_all): then
    on_overtime(why) is the answer. A call inside C (inflating a blob) is
    stopped when it is back in Python."""
    watch = _Watch()
    _in_flight.add(watch)
    timer = threading.Timer(seconds, watch.fire)
    timer.daemon = True
    try:
        try:
            if _stopping.is_set():
                raise OverTime
            timer.start()
            try:
                return fn(*args)
            finally:
                timer.cancel()
                watch.finish()
        except Exception as error:
            # OverTime, or what it became on its way: raised inside SQLite's
            # progress handler, it ends the statement as "interrupted"
            if not (isinstance(error, OverTime) or watch.fired):
                raise
            return on_overtime(
                "the server is stopping" if _stopping.is_set() else f"over the time limit of {seconds:g} s"
            )
    finally:
        _in_flight.discard(watch)


def watch_connection(conn: sqlite3.Connection):
    """A store's connection stop_all interrupts."""
    with _connections_lock:
        _connections.add(conn)


def stop_all():
    """Stop every Python call in flight (timed_call) and interrupt every
    query of a store: the server's Ctrl-C does not wait for them."""
    _stopping.set()
    for watch in list(_in_flight):
        watch.fire()
    with _connections_lock:
        connections = list(_connections)
    for conn in connections:
        try:
            conn.interrupt()
        except sqlite3.ProgrammingError:  # closed
            pass


class TooMuch(Exception):
    """An aggregate's values past its memory bound."""


class BoundedMedian(Median):
    """median(), holding at most MEDIAN_MAX_BYTES of values: past it, the
    query fails (the aggregate raises) instead of the server's memory
    growing with the values (a median over a million 1 MB strings)."""

    def __init__(self):
        super().__init__()
        self.held = 0

    def step(self, value):
        if value is not None:
            self.held += sys.getsizeof(value) + _SLOT_BYTES
            if self.held > MEDIAN_MAX_BYTES:
                self.values = []
                raise TooMuch(f"median(): over {MEDIAN_MAX_BYTES >> 20} MB of values")
        super().step(value)


def kernel_diff_input(conn: sqlite3.Connection, before_cell_id, after_cell_id) -> Optional[str]:
    """Why kernel_diff will not read the two cells' IR (the bytes their
    kernels' texts inflate to, over KERNEL_DIFF_MAX_BYTES), or None."""
    (size,) = conn.execute(
        "SELECT coalesce(sum(b.size), 0) FROM kernels k JOIN blobs b ON b.hash = k.ir_hash WHERE k.cell_id IN (?, ?)",
        (before_cell_id, after_cell_id),
    ).fetchone()
    if isinstance(size, int) and size <= KERNEL_DIFF_MAX_BYTES:
        return None
    return (
        f"the two cells' IR texts are {size} bytes, over the {KERNEL_DIFF_MAX_BYTES >> 20} MB the server "
        "diffs: run zlstore diff on the command line"
    )
