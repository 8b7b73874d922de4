"""The cache daemon: one owner of the policy state per cache directory.

PyTorch DataLoader workers are separate processes, each seeing a fragment of the access
stream (worker 0 gets batches 0, 2, 4…). A policy per process would misread a sequential
pass as strided and split the budget blindly (ARCHITECTURE.md). So fsspec clients opened
with ``daemon=True`` do not build a policy: they talk to this daemon, which holds one
:class:`~aicache.datacache.policy.LocalPolicy` (the block map + the DataCacheSystem) for
the whole directory. Clients still read and write the shared block files themselves (the
store is multi-process safe on its own); only *decisions* cross the socket: block ids,
accesses (→ prefetch lists), admission, inserts and victims.

Protocol: a Unix socket at ``CACHE_DIR/policy.sock``; one JSON object per line each way,
``{"m": method, "a": [args]}`` → ``{"r": result}`` or ``{"e": message}``. Times are the
daemon's own clock (clients' clocks are ignored), so every process shares one timeline.

Lifetime: the first client that finds no daemon starts one (``python -m
aicache.datacache.daemon``, its own session, log in ``CACHE_DIR/daemon.log``); an
``flock`` on ``CACHE_DIR/daemon.lock`` makes it the only one; it exits after
``--idle-exit`` seconds without clients. If the daemon dies, clients fall back to a
policy of their own (logged) and keep reading: the daemon improves decisions, the
store guarantees safety.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from aicache.datacache.policy import AccessResult, BlockMap, LocalPolicy
from aicache.datacache.store import BlockKey

log = logging.getLogger("aicache.daemon")

SOCK = "policy.sock"


def _key(k: Sequence[Any] | None) -> BlockKey | None:
    return None if k is None else BlockKey(str(k[0]), str(k[1]), int(k[2]))


class PolicyDaemon:
    """Serves one LocalPolicy over ``cache_dir/policy.sock`` (threads: one per client)."""

    def __init__(self, cache_dir: str, policy: LocalPolicy, idle_exit_s: float = 300.0) -> None:
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
                finally:
                    with daemon._mutex:
                        daemon.clients -= 1
                        daemon._last_client = time.monotonic()

        if os.path.exists(self.path):
            os.unlink(self.path)  # stale: we hold daemon.lock, so its owner is gone
        self.server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        self.server.daemon_threads = True

    def now(self) -> float:
        return time.monotonic() - self._t0

    def dispatch(self, m: str, a: list[Any]) -> Any:
        p = self.policy
        if m == "access":
            unit, bid, key, size, local, got = a
            with self._mutex:
                self.accesses += 1
            r = p.access(unit, int(bid), _key(key), int(size), bool(local), bool(got), self.now())  # type: ignore[arg-type]
            pf = [b for b in r.prefetch if not p.is_resident(b)]
            return [r.hit, pf, r.prefetch_used]
        if m == "admit":
            unit, bid, size, used = a
            return p.admit(unit, int(bid), int(size), int(used), self.now())
        if m == "inserted":
            unit, bid, key, size, prefetched = a
            p.inserted(unit, int(bid), _key(key), int(size), self.now(), bool(prefetched))  # type: ignore[arg-type]
            return None
        if m == "victim":
            k, wasted = p.victim(self.now())
            return [None if k is None else [k.path, k.version, k.index], wasted]
        if m == "register":
            return {path: list(r) for path, r in p.register([(f, int(s)) for f, s in a[0]]).items()}
        if m == "locate":
            loc = p.locate(int(a[0]))
            if loc is None:
                return None
            base = p.base(loc[0])
            return [loc[0], loc[1], base]
        if m == "hello":
            return {"block_size": p.map.block_size, "policy": getattr(p.system, "name", ""),
                    "pid": os.getpid()}
        if m == "stats":
            s = p.stats()
            s["accesses"] = self.accesses
            s["clients"] = self.clients
            return s
        raise ValueError(f"unknown method {m!r}")

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


class DaemonPolicy:
    """LocalPolicy's interface, answered by the directory's daemon (see module docstring)."""

    def __init__(self, sock: socket.socket, fallback: Any) -> None:
        self._sock = sock
        self._f = sock.makefile("rwb")
        self._lock = threading.Lock()
        self._fallback_factory = fallback
        self._local: LocalPolicy | None = None
        self.map: BlockMap | None = None  # ranges learned from the daemon
        hello = self._call("hello", [])
        self.name = hello["policy"]
        self.block_size = int(hello["block_size"])
        self.map = BlockMap(self.block_size)
        self.system = None

    @classmethod
    def connect(cls, cache_dir: str, cache_size: int, block_size: int, policy: str, advisor: Any,
                seed: int, spawn: bool = True, timeout_s: float = 15.0) -> DaemonPolicy:
        from aicache.datacache.engine import make_engine_system
        from aicache.errors import BadInput

        os.makedirs(cache_dir, exist_ok=True)
        path = os.path.join(cache_dir, SOCK)

        def fallback() -> LocalPolicy:
            return LocalPolicy(make_engine_system(policy, cache_size, block_size, advisor, seed),
                               block_size)

        deadline = time.monotonic() + timeout_s
        spawned = False
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                dp = cls(s, fallback)
                if dp.block_size != block_size:
                    raise BadInput(f"the cache daemon of {cache_dir!r} uses block size {dp.block_size}, "
                                   f"not {block_size}; use the same block size in every process")
                return dp
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if not spawn:
                    raise OSError(f"no cache daemon at {path}; start one with "
                                  "python -m aicache.datacache.daemon") from None
                if not spawned:
                    spawn_daemon(cache_dir, cache_size, block_size, policy, advisor, seed)
                    spawned = True
                if time.monotonic() > deadline:
                    raise OSError(f"the cache daemon did not start; see {cache_dir}/daemon.log") from None
                time.sleep(0.05)

    def _call(self, m: str, a: list[Any]) -> Any:
        with self._lock:
            self._f.write(json.dumps({"m": m, "a": a}).encode() + b"\n")
            self._f.flush()
            line = self._f.readline()
        if not line:
            raise ConnectionError("the cache daemon closed the connection")
        out = json.loads(line)
        if "e" in out:
            raise RuntimeError(f"cache daemon: {out['e']}")
        return out["r"]

    def _degraded(self) -> LocalPolicy:
        if self._local is None:
            log.warning("aicache: lost the cache daemon; this process now decides on its own")
            self._local = self._fallback_factory()
            assert self.map is not None
            self._local.map = self.map  # keep the ids this process already uses
        return self._local

    def _rpc(self, m: str, a: list[Any], local: Any) -> Any:
        if self._local is not None:
            return local(self._local)
        try:
            return self._call(m, a)
        except (OSError, ValueError, RuntimeError) as exc:  # gone, garbled, or failed inside
            log.warning("aicache: cache daemon call %s failed: %s", m, exc)
            return local(self._degraded())

    # -- LocalPolicy's interface -----------------------------------------------------------
    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        r = self._rpc("register", [[list(f) for f in files]], lambda p: p.register(files))
        ranges = {k: (int(v[0]), int(v[1])) for k, v in r.items()}
        assert self.map is not None
        self.map.learn(ranges)
        return ranges

    def base(self, path: str) -> int | None:
        assert self.map is not None
        return self.map.base(path)

    def locate(self, bid: int) -> tuple[str, int] | None:
        assert self.map is not None
        loc = self.map.locate(bid)
        if loc is not None or self._local is not None:
            return loc
        r = self._rpc("locate", [bid], lambda p: p.locate(bid))
        if r is None:
            return None
        return str(r[0]), int(r[1])

    def access(self, unit: str, bid: int, key: BlockKey, size: int, local: bool, got: bool,
               now: float) -> AccessResult:
        r = self._rpc("access", [unit, bid, [key.path, key.version, key.index], size, local, got],
                      lambda p: p.access(unit, bid, key, size, local, got, now))
        if isinstance(r, AccessResult):
            return r
        return AccessResult(bool(r[0]), [int(b) for b in r[1]], bool(r[2]))

    def is_resident(self, bid: int) -> bool:
        return self._local.is_resident(bid) if self._local is not None else False

    def admit(self, unit: str, bid: int, size: int, used: int, now: float) -> bool | None:
        return self._rpc("admit", [unit, bid, size, used], lambda p: p.admit(unit, bid, size, used, now))  # type: ignore[no-any-return]

    def inserted(self, unit: str, bid: int, key: BlockKey, size: int, now: float, prefetched: bool) -> None:
        self._rpc("inserted", [unit, bid, [key.path, key.version, key.index], size, prefetched],
                  lambda p: p.inserted(unit, bid, key, size, now, prefetched))

    def victim(self, now: float) -> tuple[BlockKey | None, bool]:
        r = self._rpc("victim", [], lambda p: p.victim(now))
        if isinstance(r, tuple):
            return r
        return _key(r[0]), bool(r[1])

    def stats(self) -> dict[str, Any]:
        return self._rpc("stats", [], lambda p: p.stats())  # type: ignore[no-any-return]

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass  # the daemon is gone: nothing to flush to
        try:
            self._sock.close()
        finally:
            if self._local is not None:
                self._local.close()


def spawn_daemon(cache_dir: str, cache_size: int, block_size: int, policy: str, advisor: Any,
                 seed: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "aicache.datacache.daemon", "--cache-dir", cache_dir,
           "--cache-size", str(cache_size), "--block-size", str(block_size), "--policy", policy,
           "--seed", str(seed)]
    if isinstance(advisor, str):
        cmd += ["--advisor", advisor]
    logf = open(os.path.join(cache_dir, "daemon.log"), "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                start_new_session=True, close_fds=True)
    finally:
        logf.close()


def main(argv: Sequence[str] | None = None) -> int:
    from aicache.datacache.engine import make_engine_system
    from aicache.units import parse_size

    ap = argparse.ArgumentParser(prog="python -m aicache.datacache.daemon",
                                 description="the policy daemon of one cache directory")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--cache-size", required=True)
    ap.add_argument("--block-size", default="4MiB")
    ap.add_argument("--policy", default="chiron")
    ap.add_argument("--advisor", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--idle-exit", type=float, default=300.0, help="exit after this many idle seconds")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.makedirs(args.cache_dir, exist_ok=True)
    lock = os.open(os.path.join(args.cache_dir, "daemon.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another daemon owns this directory
    size = parse_size(args.cache_size, what="--cache-size")
    block = parse_size(args.block_size, what="--block-size")
    system = make_engine_system(args.policy, size, block, advisor=args.advisor, seed=args.seed)
    d = PolicyDaemon(os.path.abspath(args.cache_dir), LocalPolicy(system, block), args.idle_exit)
    log.info("serving %s (policy %s, pid %d)", d.path, args.policy, os.getpid())
    d.serve()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
