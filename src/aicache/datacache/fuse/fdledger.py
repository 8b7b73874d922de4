"""The descriptors of spliced replies on the high-level driver, closed once libfuse sent them."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


def _live_thread_ids() -> set[int] | None:
    """Native ids of this process's threads, or None when ``/proc`` cannot say."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return None


class FdLedger:
    """Block-file descriptors handed to libfuse for spliced replies, closed once sent.

    libfuse sends a reply on the thread whose ``read_buf`` made it, right after that call
    returns, and a worker thread serves one request at a time: so when a thread calls in
    again, its previous reply is out and the descriptors it handed over can be closed.
    Threads that libfuse retires (it stops surplus idle workers) never call again; their
    descriptors are closed by a sweep over the live threads once more than ``sweep_at``
    threads hold some. ``close``, ``current_thread`` and ``live_threads`` are injected so
    the rules can be checked without depending on which descriptor numbers or thread ids
    the process reuses."""

    __slots__ = ("_held", "sweep_at", "_close", "_current", "_live")

    def __init__(self, sweep_at: int = 32, *,
                 close: Callable[[int], None] = os.close,
                 current_thread: Callable[[], int] = threading.get_native_id,
                 live_threads: Callable[[], set[int] | None] = _live_thread_ids) -> None:
        self._held: dict[int, list[int]] = {}
        self.sweep_at = sweep_at
        self._close = close
        self._current = current_thread
        self._live = live_threads

    def settle(self) -> int:
        """Close what this thread handed over before; returns its id for :meth:`hold`."""
        tid = self._current()
        for fd in self._held.pop(tid, ()):
            self._close(fd)
        return tid

    def hold(self, tid: int, fds: list[int]) -> None:
        if fds:
            self._held[tid] = fds
            if len(self._held) > self.sweep_at:
                self._sweep()

    def _sweep(self) -> None:
        alive = self._live()
        if alive is None:
            return
        for tid in [t for t in list(self._held) if t not in alive]:
            for fd in self._held.pop(tid, ()):
                self._close(fd)

    def open_count(self) -> int:
        return sum(len(v) for v in list(self._held.values()))

    def close_all(self) -> None:
        while self._held:
            for fd in self._held.popitem()[1]:
                self._close(fd)
