"""Fixtures for tests, benchmarks and the demo: a fault-injecting remote and a local S3.

Nothing here is imported by the product's read path, and importing this package registers
no fsspec protocol and sets no environment variable; each fixture does so when called.
"""

from aicache.testing.s3 import S3Server, free_port, start_s3
from aicache.testing.slowfs import SlowFileSystem, register_slow_protocol

__all__ = ["S3Server", "SlowFileSystem", "free_port", "register_slow_protocol", "start_s3"]
