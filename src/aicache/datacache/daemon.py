"""The cache daemon: one owner of the policy state per cache directory.

PyTorch DataLoader workers are separate processes, each seeing a fragment of the access
stream (worker 0 gets batches 0, 2, 4…). A policy per process would misread a sequential
pass as strided and split the budget blindly. So fsspec clients opened
with ``daemon=True`` do not build a policy: they talk to this daemon, which holds one
:class:`~aicache.datacache.policy.driver.SystemDriver` (the block map + the DataCacheSystem) for
the whole directory. Clients still read and write the shared block files themselves (the
store is multi-process safe on its own); only *decisions* cross the socket, one exchange
per event of :class:`~aicache.datacache.policy.driver.PolicyPort`: block ids, reads (→ prefetch
lists), inserts (→ admission and victims) and blocks the store lost.

Protocol: a Unix socket at ``CACHE_DIR/policy.sock``; one JSON object per line each way,
``{"m": method, "a": [args]}`` → ``{"r": result}`` or ``{"e": message}``. Times are the
daemon's own clock (clients' clocks are ignored), so every process shares one timeline.
A client checks every reply's shape and range (a block index that is negative or not the
one asked for, a wrong type, an unknown admission): a bad reply is counted and treated as
no answer (the client decides locally, as when the daemon fails), never raised into a read.

Lifetime: the first client that finds no daemon starts one (``python -m
aicache.datacache.daemon``, its own session, log in ``CACHE_DIR/daemon.log``); an
``flock`` on ``CACHE_DIR/daemon.lock`` makes it the only one; it exits
:data:`IDLE_EXIT_S` seconds (``--idle-exit``) after its last client disconnected, so a job's
daemon goes with the job. Short on purpose, but longer than the gap between two epochs when
only the workers read (a DataLoader starts new workers, each importing torch, which took
over 10 s on two loaded cores): only a gap with no reading process at all (between two jobs)
outlasts it, and the next client then starts a fresh daemon — decisions start over, the
cached blocks stay. A daemon a job serves itself (:class:`PolicyDaemon` in the job's
process) is stopped by that job, not by idleness. If the daemon dies, stops (SIGSTOP) or wedges,
a client's call gives up after ``daemon_timeout_s`` (EngineParams), the client falls back
to a policy of its own (logged) and keeps reading, and reconnects in the background with
backoff once the daemon answers again: the daemon improves decisions, the store guarantees
safety, and no reader ever waits on the daemon for longer than one timeout per outage.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import socket
import socketserver
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from aicache.datacache.policy.blockmap import BlockMap
from aicache.datacache.policy.driver import (
    AccessResult,
    Admission,
    Placement,
    Source,
    SystemDriver,
    Victim,
    make_engine_system,
)
from aicache.datacache.keys import BlockKey
from aicache.policies.system import DataCacheSystem
from aicache.datacache.store import ALLOC_UNIT, HEADER_SIZE, INDEX_ROW, block_budget
from aicache.errors import BadInput
from aicache.units import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec

log = logging.getLogger("aicache.daemon")

SOCK = "policy.sock"
#: seconds a daemon with no client waits before it exits (see the module docstring)
IDLE_EXIT_S = 30.0


Driver = SystemDriver[BlockKey]


def store_driver(system: DataCacheSystem, block_size: int, cache_size: int) -> Driver:
    """The driver of ``system`` over a block store of ``cache_size``: the budget its blocks
    may take and each block's charge are the store's (:func:`~aicache.datacache.store.
    block_budget`, :func:`~aicache.datacache.store.stored_size`), so the policy, not the
    store's own FIFO, picks every eviction."""
    return SystemDriver(system, block_size, capacity=block_budget(cache_size), overhead=HEADER_SIZE,
                        align=ALLOC_UNIT, extra=INDEX_ROW)
T = TypeVar("T")


class BadAnswer(ValueError):
    """A daemon reply of the wrong shape or out of range (a bug or a hostile process on the
    socket): the client treats it as no answer."""


def _nat(x: Any) -> int:
    """``x`` if it is a non-negative int (JSON bools are not ints here), else BadAnswer."""
    if type(x) is not int or x < 0:
        raise BadAnswer(f"{x!r} is not a non-negative integer")
    return x


def _flag(x: Any) -> bool:
    if type(x) is not bool:
        raise BadAnswer(f"{x!r} is not a boolean")
    return x


def _seq(x: Any, n: int | None = None) -> list[Any]:
    if type(x) is not list or (n is not None and len(x) != n):
        raise BadAnswer(f"{x!r} is not a list" + ("" if n is None else f" of {n}"))
    return x


def _text(x: Any) -> str:
    if type(x) is not str:
        raise BadAnswer(f"{x!r} is not a string")
    return x


def _wire_key(k: Any) -> BlockKey:
    """A block key from a daemon reply, checked (the store hashes its fields)."""
    path, version, index = _seq(k, 3)
    return BlockKey(_text(path), _text(version), _nat(index))


def _key(k: Sequence[Any]) -> BlockKey:
    return BlockKey(str(k[0]), str(k[1]), int(k[2]))


def _wire(k: BlockKey) -> list[Any]:
    return [k.path, k.version, k.index]


def _socket_mode(cache_dir: str) -> int:
    """The socket's mode: that of the cache's ``lock`` file (the store gives it the cache
    mode: 0600 unless the cache is deliberately shared), else owner-only."""
    try:
        return stat.S_IMODE(os.stat(os.path.join(cache_dir, "lock")).st_mode) & 0o666
    except OSError:
        return 0o600


class PolicyDaemon:
    """Serves one SystemDriver over ``cache_dir/policy.sock`` (threads: one per client)."""

    def __init__(self, cache_dir: str, policy: Driver, idle_exit_s: float = IDLE_EXIT_S) -> None:
        self.cache_dir = cache_dir
        self.policy = policy
        self.idle_exit_s = idle_exit_s
        self.path = os.path.join(cache_dir, SOCK)
        self._t0 = time.monotonic()
        self.clients = 0
        self._last_client = time.monotonic()
        self._mutex = threading.Lock()
        self.accesses = 0
        daemon = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with daemon._mutex:
                    daemon.clients += 1
                try:
                    for line in self.rfile:
                        try:
                            req = json.loads(line)
                            out = {"r": daemon.dispatch(req["m"], req.get("a", []))}
                        except Exception as exc:  # noqa: BLE001 - answered, never fatal
                            out = {"e": f"{type(exc).__name__}: {exc}"}
                        self.wfile.write(json.dumps(out).encode() + b"\n")
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a client that timed out and went local; it reconnects afresh
                finally:
                    with daemon._mutex:
                        daemon.clients -= 1
                        daemon._last_client = time.monotonic()

        if os.path.exists(self.path):
            os.unlink(self.path)  # stale: we hold daemon.lock, so its owner is gone
        self.server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        os.chmod(self.path, _socket_mode(os.path.dirname(self.path)))
        self.server.daemon_threads = True

    def now(self) -> float:
        return time.monotonic() - self._t0

    def dispatch(self, m: str, a: list[Any]) -> Any:
        fn = self._methods.get(m)
        if fn is None:
            raise ValueError(f"unknown method {m!r}")
        return fn(self, a)

    def _read(self, a: list[Any]) -> Any:
        unit, bid, key, size, source = a
        p = self.policy
        with self._mutex:
            self.accesses += 1
        r = p.read(unit, int(bid), _key(key), int(size), Source(source), self.now())
        return [r.hit, list(r.prefetch), r.prefetch_used]

    def _opened(self, a: list[Any]) -> Any:
        self.policy.opened(a[0], int(a[1]), self.now())
        return None

    def _insert(self, a: list[Any]) -> Any:
        unit, bid, key, size, used, prefetched = a
        r = self.policy.insert(unit, int(bid), _key(key), int(size), int(used), self.now(),
                               bool(prefetched))
        return [r.admission.value, [[v.block, _wire(v.key), v.wasted] for v in r.victims]]

    def _forget(self, a: list[Any]) -> Any:
        self.policy.forget(int(a[0]), _key(a[1]))
        return None

    def _register(self, a: list[Any]) -> Any:
        files = [(f, int(s)) for f, s in a[0]]
        return {path: list(r) for path, r in self.policy.register(files).items()}

    def _locate(self, a: list[Any]) -> Any:
        loc = self.policy.locate(int(a[0]))
        if loc is None:
            return None
        return [loc[0], loc[1], self.policy.base(loc[0])]

    def _hello(self, a: list[Any]) -> Any:
        p = self.policy
        return {"block_size": p.map.block_size, "policy": p.name, "pid": os.getpid()}

    def _stats(self, a: list[Any]) -> Any:
        s = self.policy.stats()
        s["accesses"] = self.accesses
        s["clients"] = self.clients
        return s

    _methods: dict[str, Callable[[PolicyDaemon, list[Any]], Any]] = {
        "read": _read, "opened": _opened, "insert": _insert, "forget": _forget, "register": _register,
        "locate": _locate, "hello": _hello, "stats": _stats}

    def serve(self) -> None:
        """Serve until idle for ``idle_exit_s`` (or :meth:`stop`)."""
        t = threading.Thread(target=self.server.serve_forever, name="aicache-daemon", daemon=True)
        t.start()
        try:
            while t.is_alive():
                time.sleep(0.2)
                with self._mutex:
                    idle = self.clients == 0 and time.monotonic() - self._last_client > self.idle_exit_s
                if idle:
                    break
        finally:
            self.stop()

    def start_thread(self) -> threading.Thread:
        """Serve in a background thread (tests, embedding)."""
        t = threading.Thread(target=self.server.serve_forever, name="aicache-daemon", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.policy.close()


class _Link:
    """One connection to the daemon: its socket and the bytes read past the last reply.

    Every exchange is bounded by a deadline: a stopped or wedged daemon costs a caller at
    most ``timeout_s``, never a hang (the kernel still accepts connections for a stopped
    process, so neither ``connect`` nor ``send`` notices it: only a bounded wait does)."""

    __slots__ = ("sock", "_buf")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    @classmethod
    def open(cls, path: str, timeout_s: float) -> _Link:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout_s)
            s.connect(path)
        except BaseException:
            s.close()
            raise
        return cls(s)

    def call(self, m: str, a: list[Any], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(timeout_s)
        self.sock.sendall(json.dumps({"m": m, "a": a}).encode() + b"\n")
        buf = self._buf
        while (nl := buf.find(b"\n")) < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the cache daemon did not answer {m!r} within {timeout_s:g}s")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the cache daemon closed the connection")
            buf += chunk
        self._buf = buf[nl + 1:]
        out = json.loads(buf[:nl])
        if "e" in out:
            raise RuntimeError(f"cache daemon: {out['e']}")
        return out["r"]

    def wake(self) -> None:
        """Make a ``recv`` blocked in another thread return; the descriptor stays open
        (closing it under a reader could hand its number to another file)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already disconnected

    def close(self) -> None:
        self.sock.close()


class DaemonPolicy:
    """The :class:`~aicache.datacache.policy.driver.PolicyPort`, answered by the directory's daemon
    (see module docstring).

    Never hangs a reader: each call waits at most ``call_timeout_s`` (for the connection's
    lock, then for the answer). A call that times out or fails drops the connection and
    answers from a local policy (over the block map this process already uses); from then
    on calls stay local until a background thread reconnects, retrying after
    ``reconnect_s``, doubling up to ``reconnect_max_s``. It reconnects only if the daemon's
    block map agrees with this process's (ranges handed out meanwhile elsewhere could
    collide with ones the local policy gave out); if not, this process stays on its own.
    ``timeouts`` / ``failures`` / ``reconnects`` count what happened."""

    def __init__(self, path: str, block_size: int, fallback: Callable[[], Driver], *,
                 call_timeout_s: float = 1.0, reconnect_s: float = 1.0,
                 reconnect_max_s: float = 30.0) -> None:
        self.path = path
        self.call_timeout_s = call_timeout_s
        self.reconnect_s = reconnect_s
        self.reconnect_max_s = reconnect_max_s
        self._fallback_factory = fallback
        self._lock = threading.Lock()  # one exchange at a time on the link
        self._state = threading.Lock()  # link / local / reconnector transitions
        self._link: _Link | None = None
        self._local: Driver | None = None
        self._retired: list[Driver] = []
        self._reconnector: threading.Thread | None = None
        self._closed = threading.Event()
        self.timeouts = 0
        self.failures = 0
        self.reconnects = 0
        #: replies of the wrong shape or range (each treated as no answer)
        self.bad_answers = 0
        self.waited_s = 0.0  # time readers spent in calls that then failed
        self._name = ""
        self.block_size = block_size
        self.map = BlockMap(block_size)  # ranges learned from the daemon

    def attach(self, link: _Link) -> None:
        """Use ``link`` (first connection): learn the daemon's block size and policy name."""
        hello = link.call("hello", [], self.call_timeout_s)
        if type(hello) is not dict:
            raise BadAnswer(f"bad answer to 'hello': {hello!r}")
        self._name = _text(hello.get("policy"))
        if _nat(hello.get("block_size")) != self.block_size:
            link.close()
            raise BadInput(f"the cache daemon of {os.path.dirname(self.path)!r} uses block size "
                           f"{hello['block_size']}, not {self.block_size}; use the same block size "
                           "in every process")
        self._link = link

    @classmethod
    def connect(cls, cache_dir: str, cache_size: int, block_size: int, policy: str,
                advisor: AdvisorSpec | None,
                seed: int, spawn: bool = True, timeout_s: float = 15.0,
                call_timeout_s: float = 1.0, reconnect_s: float = 1.0) -> DaemonPolicy:
        """Join the directory's daemon (starting one unless ``spawn`` is False). A daemon
        that exists but does not answer within ``call_timeout_s`` leaves this process on a
        local policy, reconnecting later; none at all (``spawn=False``) or one that does
        not start within ``timeout_s`` is an error."""
        os.makedirs(cache_dir, exist_ok=True)
        path = os.path.join(cache_dir, SOCK)

        def fallback() -> Driver:
            return store_driver(make_engine_system(policy, cache_size, block_size, advisor, seed),
                                block_size, cache_size)

        dp = cls(path, block_size, fallback, call_timeout_s=call_timeout_s, reconnect_s=reconnect_s)
        deadline = time.monotonic() + timeout_s
        spawned = False
        while True:
            try:
                link = _Link.open(path, call_timeout_s)
            except (FileNotFoundError, ConnectionRefusedError):
                if not spawn:
                    raise OSError(f"no cache daemon at {path}; start one with "
                                  "python -m aicache.datacache.daemon") from None
                if not spawned:
                    spawn_daemon(cache_dir, cache_size, block_size, policy, advisor, seed)
                    spawned = True
                if time.monotonic() > deadline:
                    raise OSError(f"the cache daemon did not start; see {cache_dir}/daemon.log") from None
                time.sleep(0.05)
                continue
            except OSError as exc:  # a full backlog of a stopped daemon: connect timed out
                dp._degrade("connect", exc)
                return dp
            try:
                dp.attach(link)
            except (OSError, ValueError, RuntimeError) as exc:
                link.close()
                dp._degrade("hello", exc)
            return dp

    def _call(self, m: str, a: list[Any]) -> Any:
        return self._exchange(self._link, m, a)

    def _exchange(self, link: _Link | None, m: str, a: list[Any]) -> Any:
        if link is None:
            raise ConnectionError("not connected to the cache daemon")
        if not self._lock.acquire(timeout=self.call_timeout_s):
            raise TimeoutError(f"the cache daemon connection stayed busy for {self.call_timeout_s:g}s")
        try:
            if self._link is not link:  # dropped while we waited
                raise ConnectionError("the cache daemon connection was dropped")
            return link.call(m, a, self.call_timeout_s)
        finally:
            if self._link is not link:
                link.close()  # whoever holds the lock closes a dropped link: no reader is in it
            self._lock.release()

    def _degrade(self, m: str, exc: BaseException, link: _Link | None = None) -> Driver:
        """Answer locally from now on; drop ``link`` if it is still the current one (a late
        failure on a link already replaced must not drop its successor)."""
        with self._state:
            if isinstance(exc, TimeoutError):
                self.timeouts += 1
            else:
                self.failures += 1
            if link is not None and self._link is link:
                self._link = None
                link.wake()
                if self._lock.acquire(blocking=False):  # else its holder closes it
                    link.close()
                    self._lock.release()
            if self._local is None:
                log.warning("aicache: cache daemon call %s failed (%s); this process decides on "
                            "its own and reconnects later", m, exc)
                self._local = self._fallback_factory()
                self._local.map = self.map  # keep the ids this process already uses
            if self._reconnector is None and not self._closed.is_set():
                self._reconnector = threading.Thread(target=self._reconnect_loop,
                                                     name="aicache-daemon-reconnect", daemon=True)
                self._reconnector.start()
            return self._local

    def _reconnect_loop(self) -> None:
        delay = self.reconnect_s
        while not self._closed.wait(delay):
            delay = min(2 * delay, self.reconnect_max_s)
            try:
                link = _Link.open(self.path, self.call_timeout_s)
            except OSError:
                continue
            try:
                hello = link.call("hello", [], self.call_timeout_s)
                if int(hello["block_size"]) != self.block_size:
                    raise ValueError(f"block size {hello['block_size']}")
                mine = self.map.ranges()
                theirs = link.call("register", [[[p, n * self.block_size] for p, (_b, n) in mine.items()]],
                                   self.call_timeout_s) if mine else {}
            except (OSError, ValueError, RuntimeError, KeyError, TypeError):
                link.close()
                continue
            if any(tuple(theirs.get(p, ())) != r for p, r in mine.items()):
                link.close()
                log.warning("aicache: the cache daemon's block map differs from this process's; "
                            "this process keeps deciding on its own")
                return
            with self._state:
                if self._closed.is_set():
                    link.close()
                    return
                self._link = link
                if self._local is not None:
                    self._retired.append(self._local)  # a reader may still be inside it
                self._local = None
                self._reconnector = None
                self.reconnects += 1
            log.warning("aicache: reconnected to the cache daemon")
            return

    @property
    def connected(self) -> bool:
        return self._link is not None and self._local is None

    def _rpc(self, m: str, a: list[Any], local: Callable[[Driver], T],
             parse: Callable[[Any], T]) -> T:
        """The daemon's answer to ``m`` checked by ``parse`` (which raises on a reply of the
        wrong shape or range), or ``local``'s when the daemon fails or answers wrongly: a
        bad answer is counted (``bad_answers``) and treated as none, never raised into a read."""
        lp = self._local
        if lp is not None:
            return local(lp)
        link = self._link
        t0 = time.monotonic()
        try:
            raw = self._exchange(link, m, a)
        except (OSError, ValueError, RuntimeError) as exc:  # gone, stopped, garbled, failed inside
            self.waited_s += time.monotonic() - t0
            return local(self._degrade(m, exc, link))
        try:
            return parse(raw)
        except (BadAnswer, ValueError, TypeError, KeyError, IndexError) as exc:
            with self._state:
                self.bad_answers += 1
            return local(self._degrade(m, BadAnswer(f"bad answer to {m!r}: {exc}"), link))

    # -- the PolicyPort ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        def parse(r: Any) -> dict[str, tuple[int, int]]:
            if type(r) is not dict:
                raise BadAnswer(f"{r!r} is not a map of ranges")
            out = {}
            for path, _size in files:  # every file asked for, each a non-empty range
                base, n = _seq(r[path], 2)
                if _nat(n) < 1:
                    raise BadAnswer(f"empty range for {path!r}")
                out[path] = (_nat(base), n)
            return out

        ranges = self._rpc("register", [[list(f) for f in files]], lambda p: p.register(files),
                           parse)
        self.map.learn(ranges)
        return ranges

    def base(self, path: str) -> int | None:
        return self.map.base(path)

    def locate(self, bid: int) -> tuple[str, int] | None:
        loc = self.map.locate(bid)
        if loc is not None or self._local is not None:
            return loc

        def parse(r: Any) -> tuple[str, int] | None:
            if r is None:
                return None
            path, idx, base = _seq(r, 3)
            _text(path), _nat(idx), _nat(base)
            if base + idx != bid:
                raise BadAnswer(f"block {idx} of {path!r} at {base} is not block {bid}")
            return path, idx

        return self._rpc("locate", [bid], lambda p: p.locate(bid), parse)

    def read(self, unit: str, bid: int, key: BlockKey, size: int, source: Source,
             now: float) -> AccessResult:
        def parse(r: Any) -> AccessResult:
            hit, prefetch, used = _seq(r, 3)
            return AccessResult(_flag(hit), [_nat(b) for b in _seq(prefetch)], _flag(used))

        return self._rpc("read", [unit, bid, _wire(key), size, source.value],
                         lambda p: p.read(unit, bid, key, size, source, now), parse)

    def opened(self, unit: str, bid: int, now: float) -> None:
        self._rpc("opened", [unit, bid], lambda p: p.opened(unit, bid, now), lambda r: None)

    def is_resident(self, bid: int) -> bool:
        return self._local.is_resident(bid) if self._local is not None else False

    def insert(self, unit: str, bid: int, key: BlockKey, size: int, used: int, now: float,
               prefetched: bool) -> Placement[BlockKey]:
        def parse(r: Any) -> Placement[BlockKey]:
            adm, victims = _seq(r, 2)
            out = []
            for v in _seq(victims):
                b, k, w = _seq(v, 3)
                out.append(Victim(_nat(b), _wire_key(k), _flag(w)))
            return Placement(Admission(_text(adm)), out)

        return self._rpc("insert", [unit, bid, _wire(key), size, used, prefetched],
                         lambda p: p.insert(unit, bid, key, size, used, now, prefetched), parse)

    def forget(self, bid: int, key: BlockKey) -> None:
        self._rpc("forget", [bid, _wire(key)], lambda p: p.forget(bid, key), lambda r: None)

    def stats(self) -> dict[str, object]:
        def parse(r: Any) -> dict[str, object]:
            if type(r) is not dict:
                raise BadAnswer(f"{r!r} is not a map of statistics")
            return dict(r)

        s: dict[str, object] = dict(self._rpc("stats", [], lambda p: p.stats(), parse))
        s["daemon_timeouts"], s["daemon_failures"] = self.timeouts, self.failures
        s["daemon_reconnects"], s["daemon_bad_answers"] = self.reconnects, self.bad_answers
        return s

    def close(self) -> None:
        self._closed.set()
        with self._state:
            link, self._link = self._link, None
            policies = self._retired + ([self._local] if self._local is not None else [])
            self._retired = []
        if link is not None:
            link.wake()
            with self._lock:
                link.close()
        for p in policies:
            p.close()


def spawn_daemon(cache_dir: str, cache_size: int, block_size: int, policy: str,
                 advisor: AdvisorSpec | None,
                 seed: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "aicache.datacache.daemon", "--cache-dir", cache_dir,
           "--cache-size", str(cache_size), "--block-size", str(block_size), "--policy", policy,
           "--seed", str(seed)]
    if isinstance(advisor, str):
        cmd += ["--advisor", advisor]
    # never through a link: another user's link would aim our log lines at a file of theirs
    logf = os.open(os.path.join(cache_dir, "daemon.log"),
                   os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, _socket_mode(cache_dir))
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                start_new_session=True, close_fds=True)
    finally:
        os.close(logf)


def main(argv: Sequence[str] | None = None) -> int:
    from aicache.units import parse_size

    ap = argparse.ArgumentParser(prog="python -m aicache.datacache.daemon",
                                 description="the policy daemon of one cache directory")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--cache-size", required=True)
    ap.add_argument("--block-size", default=f"{DEFAULT_BLOCK_SIZE >> 20}MiB")
    ap.add_argument("--policy", default="chiron")
    ap.add_argument("--advisor", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--idle-exit", type=float, default=IDLE_EXIT_S,
                    help="exit this many seconds after the last client disconnected")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.makedirs(args.cache_dir, exist_ok=True)
    lock = os.open(os.path.join(args.cache_dir, "daemon.lock"),
                   os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another daemon owns this directory
    size = parse_size(args.cache_size, what="--cache-size")
    block = parse_size(args.block_size, what="--block-size")
    system = make_engine_system(args.policy, size, block, advisor=args.advisor, seed=args.seed)
    driver = store_driver(system, block, size)
    d = PolicyDaemon(os.path.abspath(args.cache_dir), driver, args.idle_exit)
    log.info("serving %s (policy %s, pid %d)", d.path, args.policy, os.getpid())
    d.serve()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
