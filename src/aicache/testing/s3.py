"""moto's S3 server on a loopback port, for tests, benchmarks and the demo.

``start_s3()`` runs moto's S3 server (the one s3fs's own test suite uses) on a free
loopback port and returns its endpoint. Importing this module changes nothing: the AWS
credential variables moto expects are set by :func:`start_s3`, when a server is started.

Every request the server answers is counted by kind (:class:`RequestLog`): what a client
pays for, seen at the server, whichever process or library sent it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import fsspec
from fsspec.spec import AbstractFileSystem


class RequestLog:
    """Requests a server answered, by kind: ``head`` (HeadObject/HeadBucket), ``get`` (an
    object's bytes), ``list`` (a bucket listing), or the method in lower case. Thread-safe;
    :meth:`snapshot` and differences of snapshots are what tests compare."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self.get_bytes = 0

    @staticmethod
    def kind(method: str, path: str, query: str) -> str:
        """The kind of one path-style request (``/bucket`` or ``/bucket/key``)."""
        has_key = "/" in path.strip("/")
        if method == "HEAD":
            return "head"
        if method == "GET":
            if has_key:
                return "get"
            return "list" if not parse_qs(query) or "list-type" in query or "prefix" in query \
                else "get-bucket"
        return method.lower()

    def add(self, kind: str, nbytes: int = 0) -> None:
        with self._lock:
            self._counts[kind] += 1
            self.get_bytes += nbytes

    def snapshot(self) -> Counter[str]:
        """The counts so far (a copy): ``later - earlier`` counts what happened between."""
        with self._lock:
            return Counter(self._counts)

    def wrap(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """``app`` (a WSGI application) counting each request it answers."""
        log = self

        def counted(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            kind = log.kind(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""),
                            environ.get("QUERY_STRING", ""))
            body = b"".join(app(environ, start_response))
            log.add(kind, len(body) if kind == "get" else 0)
            return [body]

        return counted


@dataclass(slots=True)
class S3Server:
    """A running moto S3 server; ``storage_options`` go to ``fsspec.filesystem("s3", ...)``;
    ``requests`` counts what it answered."""

    endpoint_url: str
    server: Any
    requests: RequestLog = field(default_factory=RequestLog)

    @property
    def client_options(self) -> dict[str, Any]:
        """What a user passes to s3fs for this server, every other option on its default
        (s3fs's listing cache included)."""
        return {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": self.endpoint_url}}

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"key": "testing", "secret": "testing", "anon": False,
                "client_kwargs": {"endpoint_url": self.endpoint_url},
                "skip_instance_cache": True, "use_listings_cache": False}

    def filesystem(self) -> AbstractFileSystem:
        return fsspec.filesystem("s3", **self.storage_options)

    def stop(self) -> None:
        self.server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_s3(buckets: tuple[str, ...] = ()) -> S3Server:
    """Start moto's S3 on a free loopback port (credentials: testing/testing)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    s3 = S3Server(endpoint_url=f"http://127.0.0.1:{port}", server=server)
    # the WSGI server looks its application up per request: counting wraps it in place
    wsgi = server._server  # noqa: SLF001 - moto exposes no hook for this
    if wsgi is not None:  # set by start(), which returns once the server is ready
        wsgi.app = s3.requests.wrap(wsgi.app)
    fs = s3.filesystem()
    for b in buckets:  # moto's state is per Python process: a bucket may already exist
        if not fs.exists(b):
            fs.mkdir(b)
    return s3
