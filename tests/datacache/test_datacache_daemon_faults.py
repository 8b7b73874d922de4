"""The policy daemon never hangs a reader (a real daemon process, real reader processes).

A stopped (SIGSTOP) daemon still accepts connections and requests, it just never answers;
a killed one refuses them. Either way every reader must go on reading right bytes on a
local policy after at most one bounded wait, and rejoin the daemon once it answers again.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

BLOCK = 4096
READERS = 8
TIMEOUT_S = 0.25  # the readers' daemon_timeout_s
HANG_S = 120.0  # only a hang gets near this: a reply that never comes fails the test here

READER = textwrap.dedent("""
    import json, os, sys, time
    import fsspec
    from aicache.datacache.engine import CacheEngine, EngineParams
    cache, src, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    eng = CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="juicefs", daemon="connect",
                      params=EngineParams(block_size=4096, daemon_timeout_s=timeout, max_prefetch=0))
    paths = sorted(os.path.join(src, f) for f in os.listdir(src))
    truth = {p: open(p, "rb").read() for p in paths}

    def one_pass():
        t0 = time.monotonic()
        for p in paths:
            if eng.read(p) != truth[p]:
                sys.exit(3)
        return time.monotonic() - t0

    def report(**kw):
        dp = eng.policy
        kw.update(timeouts=dp.timeouts, failures=dp.failures, reconnects=dp.reconnects,
                  connected=dp.connected, waited=dp.waited_s)
        print(json.dumps(kw), flush=True)

    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "pass":
            report(elapsed=one_pass())
        elif cmd == "until-connected":  # read on until the daemon answers again
            deadline = time.monotonic() + 100
            while not eng.policy.connected and time.monotonic() < deadline:
                one_pass()
                time.sleep(0.02)
            report(elapsed=one_pass())
        elif cmd == "until-lost":  # read on, say so, until the daemon is gone
            print("reading", flush=True)
            deadline = time.monotonic() + 100
            while eng.policy.connected and time.monotonic() < deadline:
                one_pass()
            report(elapsed=one_pass())
        elif cmd == "quit":
            break
    eng.close()
""")


def _daemon(cache: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-m", "aicache.datacache.daemon", "--cache-dir", cache,
                          "--cache-size", str(1 << 26), "--block-size", str(BLOCK), "--policy",
                          "juicefs", "--idle-exit", "600"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock = os.path.join(cache, "policy.sock")
    deadline = time.monotonic() + HANG_S
    while not os.path.exists(sock):  # a condition polled under a generous deadline
        assert p.poll() is None and time.monotonic() < deadline, "the daemon did not start"
        time.sleep(0.02)
    return p


class _Readers:
    def __init__(self, cache: str, src: str) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", READER, cache, src, str(TIMEOUT_S)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                      for _ in range(READERS)]

    def ask(self, cmd: str) -> list[dict[str, Any]]:
        self.tell(cmd)
        return self.answers()

    def tell(self, cmd: str) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(cmd + "\n")
            p.stdin.flush()

    def answers(self) -> list[dict[str, Any]]:
        return [json.loads(self._line(p)) for p in self.procs]

    def lines(self) -> list[str]:
        return [self._line(p).strip() for p in self.procs]

    @staticmethod
    def _line(p: subprocess.Popen[str]) -> str:
        import selectors

        assert p.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout=HANG_S)  # a reader that hangs fails here
        sel.close()
        assert ready, "a reader hung"
        line = p.stdout.readline()
        assert line, f"a reader died (exit {p.wait()}: 3 = wrong bytes)"
        return line

    def close(self) -> list[int]:
        rcs = []
        for p in self.procs:
            try:
                assert p.stdin is not None
                p.stdin.write("quit\n")
                p.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                rcs.append(p.wait(timeout=HANG_S))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append(p.wait())
        return rcs



def _rejoin_and_quit(readers: _Readers) -> None:
    """Every reader finds the running daemon again, once, and then exits cleanly."""
    back = readers.ask("until-connected")
    assert all(r["connected"] and r["reconnects"] == 1 for r in back)
    assert readers.close() == [0] * READERS


def _stop(daemon: subprocess.Popen[bytes], readers: _Readers) -> None:
    daemon.kill()
    daemon.wait()
    readers.close()


@pytest.fixture()
def dataset(tmp_path) -> tuple[str, str]:
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(15)
    for i in range(24):
        (src / f"s-{i:02d}").write_bytes(rng.randbytes(rng.randrange(1, 3 * BLOCK)))
    cache = tmp_path / "cache"
    cache.mkdir()
    return str(cache), str(src)


def test_a_stopped_daemon_costs_each_reader_one_bounded_wait_and_they_rejoin_it(dataset) -> None:
    """SIGSTOP the daemon: each of 8 readers waits once, for its timeout, then reads on a
    local policy. Exactly one timeout per reader is the bound that does not depend on the
    machine's load; the time it waited is checked against 2 s (8x the timeout: a late
    wake-up on a loaded machine stays far below it, a hang or a second wait does not).
    SIGCONT: they rejoin."""
    cache, src = dataset
    daemon = _daemon(cache)
    readers = _Readers(cache, src)
    try:
        up = readers.ask("pass")  # misses: fetch, store, tell the daemon
        up = readers.ask("pass")  # hits, every access answered by the daemon
        assert all(r["connected"] and r["timeouts"] == r["failures"] == 0 for r in up)
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            stopped = readers.ask("pass")
            for r in stopped:
                assert r["timeouts"] == 1 and r["failures"] == 0 and not r["connected"]
                assert TIMEOUT_S * 0.9 <= r["waited"] <= max(2.0, 8 * TIMEOUT_S)
            again = readers.ask("pass")  # still stopped: no more waiting at all
            assert all(r["timeouts"] == 1 and not r["connected"] for r in again)
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        _rejoin_and_quit(readers)
    finally:
        _stop(daemon, readers)


def test_a_killed_daemon_leaves_readers_reading_and_a_new_one_takes_them_back(dataset) -> None:
    """SIGKILL the daemon while 8 readers are reading: they notice (a refused or reset
    connection, at most one timed-out call) and read on; a new daemon takes them back."""
    cache, src = dataset
    daemon = _daemon(cache)
    readers = _Readers(cache, src)
    try:
        readers.ask("pass")
        readers.tell("until-lost")
        assert readers.lines() == ["reading"] * READERS  # all 8 are mid-pass, in a loop
        daemon.kill()  # SIGKILL: no goodbye, the socket file stays behind
        daemon.wait()
        gone = readers.answers()  # each noticed, finished its pass right, and read once more
        # a dead daemon refuses at once; only a call caught while the kernel was still
        # tearing the process down can time out, once
        assert all(not r["connected"] and r["failures"] + r["timeouts"] >= 1
                   and r["timeouts"] <= 1 for r in gone), gone
        daemon = _daemon(cache)  # a fresh daemon, empty block map: readers re-register theirs
        _rejoin_and_quit(readers)
    finally:
        _stop(daemon, readers)
