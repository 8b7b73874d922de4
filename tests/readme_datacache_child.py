"""Child of ``test_readme_datacache``: runs the README data-cache section's commands exactly
as written, inside private mount and network namespaces (``unshare --mount --net``), so its
fixed paths (``/mnt/dataset``, ``/mnt/nvme/aicache``) and port (9100) belong to this run
alone: a tmpfs on ``/mnt``, loopback up, a moto S3 server holding ``s3://bucket/dataset``
(named by ``AWS_ENDPOINT_URL``, as any S3-compatible store).

``python readme_datacache_child.py SPEC.json``: spec = {"commands": [...], "workdir": ...,
"out": ...}; writes, per command, its exit code and output tails, plus whether the mount
served the dataset's bytes, to ``out``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

TRAIN = """import os
root = os.environ["AICACHE_MOUNT"]
for name in sorted(os.listdir(root)):
    with open(os.path.join(root, name), "rb") as f:
        while f.read(1 << 16):
            pass
"""


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "aicache-readme", "/mnt"], check=True)
    os.makedirs("/mnt/dataset")
    os.makedirs("/mnt/nvme")

    from aicache.testing import start_s3

    server = start_s3(("bucket",))
    files = {f"bucket/dataset/part-{i}.bin": os.urandom(n) for i, n in enumerate((1, 3 << 20, 6 << 20))}
    server.filesystem().pipe(files)
    work = spec["workdir"]
    with open(os.path.join(work, "train.py"), "w") as f:
        f.write(TRAIN)
    env = dict(os.environ, AWS_ENDPOINT_URL=server.endpoint_url)
    bindir = os.path.join(work, "bin")  # `aicache` and `python` on PATH: this interpreter
    os.makedirs(bindir, exist_ok=True)
    for name, target in (("aicache", f"{sys.executable} -m aicache.cli.main"), ("python", sys.executable)):
        with open(os.path.join(bindir, name), "w") as f:
            f.write(f'#!/bin/sh\nexec {target} "$@"\n')
        os.chmod(os.path.join(bindir, name), 0o755)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["XDG_CACHE_HOME"] = os.path.join(work, "xdg")  # record's default cache dir: not ~
    results = []
    served = None
    metrics = None
    for cmd in spec["commands"]:
        r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                           timeout=300)
        results.append({"cmd": cmd, "rc": r.returncode, "stdout": r.stdout[-2000:],
                        "stderr": r.stderr[-2000:]})
        if cmd.startswith("aicache mount "):  # the mount is up: it serves the remote's bytes
            served = (served is not False) and all(open("/mnt/dataset/" + p.rsplit("/", 1)[1], "rb").read() == d
                         for p, d in files.items())
            if "--metrics-port 9100" in cmd:  # the first mount; the shared-tier one has none
                with urllib.request.urlopen("http://127.0.0.1:9100/metrics", timeout=30) as resp:
                    metrics = "aicache_" in resp.read().decode()
    server.stop()
    with open(spec["out"], "w") as f:
        json.dump({"results": results, "served": served, "metrics": metrics}, f)


if __name__ == "__main__":
    main(sys.argv[1])
