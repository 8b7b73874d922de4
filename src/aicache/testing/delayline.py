"""A TCP delay line on loopback: every byte a client sends reaches the server ``delay_s`` later.

For benchmarks that need a remote's latency where ``tc qdisc ... netem`` is not available.
Each accepted connection gets its own upstream connection (so keep-alive and connection
pools behave as they would against a real endpoint) and two pumps:

- client -> server: each chunk read from the client is stamped with its arrival time and
  queued; a sender thread writes it upstream no earlier than ``arrival + delay_s``. Chunks
  keep their order and later chunks never wait longer than their own delay, so pipelined
  requests each pay the one-way latency once, not once per request ahead of them.
- server -> client: forwarded as it arrives (the delay is charged on the request side only,
  which is where a request-response protocol such as HTTP pays a round trip).

Invariant: the bytes that arrive at either end are exactly the bytes sent, in order; a close
on one side is passed on as a half-close (``shutdown(SHUT_WR)``) after the queued bytes.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

_CHUNK = 1 << 20


@dataclass(slots=True)
class DelayLineStats:
    """Totals over every connection (read under the line's lock)."""

    connections: int = 0
    bytes_up: int = 0  # client -> server
    bytes_down: int = 0  # server -> client


@dataclass(slots=True)
class _Queue:
    """Chunks waiting for their send time; ``None`` marks the client's half-close."""

    items: collections.deque[tuple[float, bytes | None]] = field(default_factory=collections.deque)
    cond: threading.Condition = field(default_factory=threading.Condition)


class DelayLine:
    """Listens on ``127.0.0.1:listen_port`` (0: a free port, see :attr:`port`) and forwards
    to ``target``, delaying the client-to-server direction by ``delay_s``. ``clock`` and
    ``sleep`` are injectable so a test can check the schedule without waiting."""

    def __init__(self, target: tuple[str, int], delay_s: float, listen_port: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s {delay_s} is negative")
        self.target = target
        self.delay_s = float(delay_s)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self.stats = DelayLineStats()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", listen_port))
        self._listener.listen(256)
        self.port: int = int(self._listener.getsockname()[1])
        self._closed = False
        self._socks: set[socket.socket] = set()
        self._accepter = threading.Thread(target=self._accept_loop, name="delayline-accept", daemon=True)
        self._accepter.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop accepting and cut every open connection."""
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> DelayLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.stats.connections += 1
                self._socks.update((client, upstream))
            q = _Queue()
            for target, name in ((self._read_up, "up-read"), (self._send_up, "up-send"),
                                 (self._pump_down, "down")):
                threading.Thread(target=target, args=(client, upstream, q),
                                 name=f"delayline-{name}", daemon=True).start()

    def _read_up(self, client: socket.socket, upstream: socket.socket, q: _Queue) -> None:
        while True:
            try:
                data = client.recv(_CHUNK)
            except OSError:
                data = b""
            with q.cond:
                q.items.append((self._clock() + self.delay_s, data or None))
                q.cond.notify()
            if not data:
                return
            with self._lock:
                self.stats.bytes_up += len(data)

    def _send_up(self, client: socket.socket, upstream: socket.socket, q: _Queue) -> None:
        try:
            while True:
                with q.cond:
                    while not q.items:
                        q.cond.wait()
                    due, data = q.items.popleft()
                wait = due - self._clock()
                if wait > 0:
                    self._sleep(wait)
                if data is None:
                    upstream.shutdown(socket.SHUT_WR)
                    return
                upstream.sendall(data)
        except OSError:
            self._drop(client, upstream)

    def _pump_down(self, client: socket.socket, upstream: socket.socket, q: _Queue) -> None:
        try:
            while True:
                data = upstream.recv(_CHUNK)
                if not data:
                    client.shutdown(socket.SHUT_WR)
                    break
                client.sendall(data)
                with self._lock:
                    self.stats.bytes_down += len(data)
        except OSError:
            pass
        self._drop(client, upstream)

    def _drop(self, client: socket.socket, upstream: socket.socket) -> None:
        with self._lock:
            self._socks.discard(client)
            self._socks.discard(upstream)
        for s in (client, upstream):
            try:  # shutdown wakes a thread blocked in recv on it; close alone would not
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
