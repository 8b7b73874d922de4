"""moto's S3 server on a loopback port, for tests, benchmarks and the demo.

``start_s3()`` runs moto's S3 server (the one s3fs's own test suite uses) on a free
loopback port and returns its endpoint. Importing this module changes nothing: the AWS
credential variables moto expects are set by :func:`start_s3`, when a server is started.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem


@dataclass(slots=True)
class S3Server:
    """A running moto S3 server; ``storage_options`` go to ``fsspec.filesystem("s3", ...)``."""

    endpoint_url: str
    server: Any

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
    fs = s3.filesystem()
    for b in buckets:  # moto's state is per Python process: a bucket may already exist
        if not fs.exists(b):
            fs.mkdir(b)
    return s3
