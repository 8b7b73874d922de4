"""moto's S3 server in a child process, counting at the server what its clients ask for.

``start_counting_s3()`` runs ``python -m aicache.testing.s3count`` on a free loopback port.
A WSGI middleware in front of moto's application classifies every request (path-style
addressing, which every client here is configured for) and counts, per bucket:

- ``get``: GET of an object (ranged or whole), and ``get_bytes``, the body bytes of its
  2xx answers as they left the server;
- ``head``: HEAD of an object or a bucket;
- ``list``: GET of a bucket (ListObjects/ListObjectsV2, with or without a prefix);
- ``other``: everything else (PUT, POST, DELETE, bucket sub-resources).

**Ranged GETs cost what they serve.** moto keeps an object's bytes in a spooled temporary
file (on disk past 5 MiB) and reads *the whole object* on every GET, ranged or not, before
slicing the range: a 4 MiB range of a 32 MiB object costs the server about three times a
whole 4 MiB object (``benchmarks/peers.py`` measures it, see docs/results/peers). S3 itself
charges a range by its bytes. So by default the server keeps each object's bytes as one
immutable ``bytes`` value beside moto's buffer (:func:`keep_values_in_memory`), and a
ranged GET copies only its range; ``--moto-as-is`` (``start_counting_s3(moto_as_is=True)``)
serves with moto unchanged.

``GET /__counts__`` answers the totals as JSON; bucket names cannot contain ``_``, so the
path never shadows a bucket. Counters only grow: a benchmark takes the difference of two
snapshots around the phase it measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qs

from aicache.testing.s3 import free_port

COUNTS_PATH = "/__counts__"
#: bucket sub-resources a GET on a bucket may name that are not listings
_BUCKET_SUBRESOURCES = frozenset({"location", "versioning", "acl", "policy", "cors", "lifecycle",
                                  "tagging", "website", "logging", "notification", "encryption",
                                  "uploads", "object-lock", "replication", "ownershipControls",
                                  "publicAccessBlock", "accelerate", "requestPayment"})


@dataclass(slots=True)
class RequestCounts:
    """Requests seen by the server (one bucket, or all of them)."""

    get: int = 0
    head: int = 0
    list: int = 0
    other: int = 0
    get_bytes: int = 0

    def minus(self, before: RequestCounts) -> RequestCounts:
        return RequestCounts(self.get - before.get, self.head - before.head, self.list - before.list,
                             self.other - before.other, self.get_bytes - before.get_bytes)

    @property
    def requests(self) -> int:
        return self.get + self.head + self.list + self.other


@dataclass(slots=True)
class CountSnapshot:
    """Counts per bucket at one moment."""

    buckets: dict[str, RequestCounts] = field(default_factory=dict)

    def bucket(self, name: str) -> RequestCounts:
        return self.buckets.get(name, RequestCounts())

    def minus(self, before: CountSnapshot) -> CountSnapshot:
        return CountSnapshot({b: c.minus(before.bucket(b)) for b, c in self.buckets.items()})

    def total(self) -> RequestCounts:
        out = RequestCounts()
        for c in self.buckets.values():
            out = RequestCounts(out.get + c.get, out.head + c.head, out.list + c.list,
                                out.other + c.other, out.get_bytes + c.get_bytes)
        return out


def classify(method: str, path: str, query: str) -> tuple[str, str]:
    """(kind, bucket) of one path-style S3 request; kind is a :class:`RequestCounts` field."""
    parts = path.lstrip("/").split("/", 1)
    bucket = parts[0]
    has_key = len(parts) == 2 and parts[1] != ""
    if method == "HEAD":
        return "head", bucket
    if method == "GET":
        if has_key:
            return "get", bucket
        if bucket and not (set(parse_qs(query, keep_blank_values=True)) & _BUCKET_SUBRESOURCES):
            return "list", bucket
    return "other", bucket


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class CountingMiddleware:
    """Counts requests (see the module's docstring) before handing them to ``app``."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._counts: dict[str, RequestCounts] = {}

    def snapshot(self) -> CountSnapshot:
        with self._lock:
            return CountSnapshot({b: RequestCounts(**asdict(c)) for b, c in self._counts.items()})

    def _add(self, bucket: str, kind: str, nbytes: int = 0) -> None:
        with self._lock:
            c = self._counts.setdefault(bucket, RequestCounts())
            if kind:
                setattr(c, kind, getattr(c, kind) + 1)
            c.get_bytes += nbytes

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        if path == COUNTS_PATH and method == "GET":
            snap = self.snapshot()
            body = json.dumps({b: asdict(c) for b, c in snap.buckets.items()}).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        kind, bucket = classify(method, path, environ.get("QUERY_STRING", ""))
        self._add(bucket, kind)
        if kind != "get":
            return self.app(environ, start_response)
        status: list[str] = []

        def recording_start(st: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(st)
            return start_response(st, headers, exc_info) if exc_info else start_response(st, headers)

        return self._count_body(self.app(environ, recording_start), bucket, status)

    def _count_body(self, body: Iterable[bytes], bucket: str, status: list[str]) -> Iterator[bytes]:
        sent = 0
        try:
            for chunk in body:
                sent += len(chunk)
                yield chunk
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            if status and status[-1][:1] == "2":
                self._add(bucket, "", sent)


def keep_values_in_memory() -> None:
    """Make moto's object value a kept ``bytes`` (module docstring): the setter keeps the
    value it writes, and the getter returns that object. Invariant: the kept value is either
    None or equal to the buffer's content, since the setter is the only writer of the buffer.
    A value kept lazily (an object put before this ran) is read once, under a lock: racing
    first GETs of a large object would each read all of it."""
    from moto.s3.models import FakeKey

    prop = FakeKey.__dict__.get("value")
    if not isinstance(prop, property) or prop.fget is None or prop.fset is None:
        return  # another moto: serve as it does
    if getattr(FakeKey, "_aicache_kept", False):
        return
    getter, setter = prop.fget, prop.fset

    fill = threading.Lock()  # one whole read per object, not one per racing GET

    def get_value(self: Any) -> bytes:
        kept: bytes | None = self.__dict__.get("_aicache_value")
        if kept is None:
            with fill:
                kept = self.__dict__.get("_aicache_value")
                if kept is None:
                    kept = getter(self)
                    self.__dict__["_aicache_value"] = kept
        return kept

    def set_value(self: Any, new_value: bytes | str) -> None:
        self.__dict__["_aicache_value"] = None
        setter(self, new_value)
        # Kept at once (as the setter encodes it), so no GET ever reads the spooled buffer.
        self.__dict__["_aicache_value"] = (new_value.encode() if isinstance(new_value, str)
                                           else bytes(new_value))

    setattr(FakeKey, "value", property(get_value, set_value))
    setattr(FakeKey, "_aicache_kept", True)


def serve(port: int, moto_as_is: bool = False) -> None:
    """Serve moto's S3 with counting on ``127.0.0.1:port`` until killed (the child's main)."""
    import logging

    from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                               create_backend_app)
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    if not moto_as_is:
        keep_values_in_memory()
    app = CountingMiddleware(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"ready {server.server_port}", flush=True)
    server.serve_forever()


@dataclass(slots=True)
class CountingS3:
    """A counting moto S3 child process on ``127.0.0.1:port`` (credentials testing/testing)."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def counts(self) -> CountSnapshot:
        with urllib.request.urlopen(self.endpoint_url + COUNTS_PATH, timeout=30) as r:
            raw = json.loads(r.read())
        return CountSnapshot({b: RequestCounts(**c) for b, c in raw.items()})

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_counting_s3(timeout_s: float = 60.0, moto_as_is: bool = False) -> CountingS3:
    """Start the counting server on a free loopback port; the AWS credential variables moto's
    clients expect are set in this process's environment. ``moto_as_is``: ranged GETs read
    the whole object, as moto does (module docstring)."""
    for var, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(var, value)
    port = free_port()
    argv = [sys.executable, "-m", "aicache.testing.s3count", str(port)]
    proc = subprocess.Popen(argv + ["--moto-as-is"] * moto_as_is, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()  # "ready PORT" once it listens; b"" if it died
    if not line.startswith("ready"):
        proc.kill()
        raise RuntimeError(f"the counting S3 server did not start (exit {proc.wait()})")
    s3 = CountingS3(port, proc)
    deadline = time.monotonic() + timeout_s
    while True:  # the port is bound before serve_forever runs: wait for an answer
        try:
            s3.counts()
            return s3
        except OSError:
            if time.monotonic() > deadline:
                s3.stop()
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    serve(int(sys.argv[1]), moto_as_is="--moto-as-is" in sys.argv[2:])
