"""Child process of ``test_datacache_engine_sharing``: the README's fsspec pattern in a loop.

``python fsspec_loop_child.py SPEC.json`` lowers its open-file limit to 1,024 (as a usual
login shell has it), opens every listed file with ``fsspec.open("aicache::s3://…")`` and the
same options, checks each file's SHA-256 against the spec, and writes to ``spec["out"]`` the
open descriptors and OS threads counted after each listed ``sample`` file.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))

    import fsspec

    import aicache.datacache.fs  # noqa: F401 - registers the "aicache" protocol

    s3 = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": spec["endpoint"]}}
    samples: dict[str, list[int]] = {}
    wrong: list[str] = []
    for i, (path, digest) in enumerate(spec["files"], 1):
        with fsspec.open(f"aicache::s3://{path}", "rb", s3=s3, aicache=spec["aicache"]) as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                wrong.append(path)
        if i in spec["samples"]:
            samples[str(i)] = [len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))]
    with open(spec["out"], "w") as f:
        json.dump({"samples": samples, "wrong": wrong, "read": len(spec["files"])}, f)


if __name__ == "__main__":
    main(sys.argv[1])
