"""The test fixtures package (:mod:`aicache.testing`) changes nothing at import: no fsspec
protocol registered, no AWS variable set; each fixture acts only when called."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fsspec

from aicache.testing import SlowFileSystem, register_slow_protocol

_PROBE = """
import json, os
from fsspec.registry import registry
before = (set(registry), {k for k in os.environ if k.startswith("AWS_")})
import aicache.testing, aicache.testing.s3, aicache.testing.slowfs
after = (set(registry), {k for k in os.environ if k.startswith("AWS_")})
print(json.dumps({"protocols": sorted(after[0] - before[0]), "env": sorted(after[1] - before[1])}))
"""


def test_import_registers_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"protocols": [], "env": []}


def test_register_slow_protocol_resolves_urls(tmp_path) -> None:
    (tmp_path / "f").write_bytes(b"abcdef")
    register_slow_protocol()
    fs = fsspec.filesystem("slow", target_protocol="file")
    assert isinstance(fs, SlowFileSystem)
    assert fs.cat_file(str(tmp_path / "f"), 1, 4) == b"bcd"
    assert fs.requests == 1
