"""Worker processes forked from this one, each doing its share of a job and
writing its results, pickled, into a pipe of its own, which this process
reads in its main thread when it wants them. No helper threads: a
multiprocessing.Pool's cost the reading process a second of CPU on a
campaign's ingest, which is the process everything waits for. Linux only
(fork, and pipes made larger)."""

import fcntl
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, Generic, Iterable, Iterator, List, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")  # what a worker's work yields

PIPE_BYTES = 1 << 20  # how far a worker may get ahead of the reading: a full pipe stops it


class Workers(Generic[R]):
    """count processes; work(i) runs in the i-th and yields its results.

        with Workers(2, work) as workers:
            first = workers.next_from(0)      # in order, from one worker
            for result in workers.as_ready(): # or from any, as they come
                ...

    A worker's exception (not a cell's: those are results) is raised here
    as a RuntimeError; a worker that ends before its results are read
    whole raises one on next_from, and ends its part of as_ready. Ctrl-C
    is this process's to handle: the workers ignore it and are ended when
    the with block is left, however it is left."""

    def __init__(self, count: int, work: Callable[[int], Iterable[R]]):
        context = multiprocessing.get_context("fork")
        self.work = work
        self.pipes = [context.Pipe(duplex=False) for _ in range(count)]
        self.processes = [context.Process(target=self._run, args=(i,), daemon=True) for i in range(count)]

    def __enter__(self) -> "Workers[R]":
        try:
            for _, sender in self.pipes:
                _widen(sender)
            for process in self.processes:
                process.start()
        finally:
            for _, sender in self.pipes:
                sender.close()  # a worker's pipe then ends when the worker does
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            if process.is_alive():
                process.terminate()
            if process.pid is not None:
                process.join()
        for receiver, _ in self.pipes:
            receiver.close()

    def next_from(self, i: int) -> R:
        """Worker i's next result."""
        try:
            return _result(self.pipes[i][0].recv_bytes())
        except EOFError:
            raise RuntimeError(f"worker process {i} ended before it was done") from None

    def as_ready(self) -> Iterator[R]:
        """Every worker's results, each as soon as it is there."""
        waiting = [receiver for receiver, _ in self.pipes]
        while waiting:
            # wait() gives back some of the connections it was given
            for receiver in cast(List[Connection], multiprocessing.connection.wait(waiting)):
                try:
                    data = receiver.recv_bytes()
                except EOFError:
                    waiting.remove(receiver)
                    continue
                yield _result(data)

    def _run(self, me: int):
        """In worker me: its results into its pipe, then the end of it."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for i, (receiver, sender) in enumerate(self.pipes):
            receiver.close()
            if i != me:
                sender.close()
        sender = self.pipes[me][1]
        try:
            try:
                for result in self.work(me):
                    sender.send_bytes(pickle.dumps(result, pickle.HIGHEST_PROTOCOL))
            except BrokenPipeError:
                raise
            except Exception as error:
                failure = _Failure(f"worker process {me}: {type(error).__name__}: {error}")
                sender.send_bytes(pickle.dumps(failure, pickle.HIGHEST_PROTOCOL))
        except BrokenPipeError:  # the reading process is gone: so is the work
            return
        sender.close()


def shared_out(count: int, workers: int, job: Callable[[int], T]) -> List[T]:
    """job(i) for each i in range(count), in this process and in workers
    forked ones (Workers): each takes the next i whenever it is free (one
    byte of a pipe; a read of it is the taking), so that a process the
    machine slows takes fewer. A job a worker took and could not finish
    runs here afterwards. count: at most 255."""
    read, write = os.pipe()
    try:
        os.write(write, bytes(range(count)))  # a pipe holds 64 KB: never blocks
    finally:
        os.close(write)  # before the fork: once the bytes are taken, a read gets the end

    def taken() -> Iterator[int]:
        while True:
            token = os.read(read, 1)
            if not token:
                return
            yield token[0]

    results: Dict[int, T] = {}
    try:
        with Workers(workers, lambda me: ((i, job(i)) for i in taken())) as others:
            results.update((i, job(i)) for i in taken())
            try:
                results.update(others.as_ready())
            except RuntimeError:  # a worker failed: what it took and did not send is done below
                pass
    finally:
        os.close(read)
    for i in range(count):
        if i not in results:
            results[i] = job(i)
    return [results[i] for i in range(count)]


class _Failure(str):
    """A worker's exception, as its message, where a result would be."""


def _result(data: bytes) -> Any:
    result = pickle.loads(data)
    if isinstance(result, _Failure):
        raise RuntimeError(str(result))
    return result


def _widen(connection):
    """Give a pipe PIPE_BYTES (Linux: 64 KB unless asked), or as much as
    the system allows."""
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            size = min(PIPE_BYTES, int(f.read()))
        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, size)
    except (OSError, ValueError, AttributeError):
        pass
