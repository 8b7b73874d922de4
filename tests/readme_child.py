"""Child of ``test_readme_commands``: runs one README code block exactly as written, inside
private mount and network namespaces (``unshare --mount --net``), so the fixed paths the
README names (``/mnt/nvme/aicache``, ``/tmp/kvstore-demo``) belong to this run alone.

The namespace gets: loopback up; a tmpfs on ``/mnt`` with the test's scratch directory
bound at ``/mnt/work`` (the block's working directory, holding links to the clone's
``traces/`` and ``tests/data/``, as a clone's root does); a tmpfs on ``/tmp`` (the clone
and its venv bound back where they sit under it); ``aicache``
and ``python`` on ``PATH`` as this interpreter; and, when the spec lists objects, a moto S3
server holding them (named by ``AWS_ENDPOINT_URL``, as any S3-compatible store).

``python readme_child.py SPEC.json``: spec = {"lang": "bash"|"python", "code": ...,
"workdir": ..., "objects": {path: hex}, "observe": python}; a bash block runs line by line
(each line's exit code and output tails recorded), a python block runs in one interpreter
followed by ``observe`` (which prints what the test checks). Results go to
``WORKDIR/out.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "aicache-readme", "/mnt"], check=True)
    work = "/mnt/work"
    os.makedirs(work)
    subprocess.run(["mount", "--bind", spec["workdir"], work], check=True)
    _private_tmp()
    os.makedirs("/mnt/nvme")
    for name in ("traces", os.path.join("tests", "data")):
        os.makedirs(os.path.dirname(os.path.join(work, name)) or work, exist_ok=True)
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    env = dict(os.environ, AICACHE_NO_PROGRESS="1", XDG_CACHE_HOME=os.path.join(work, "xdg"))
    server = None
    if spec.get("objects"):
        from aicache.testing import start_s3

        buckets = sorted({p.split("/", 1)[0] for p in spec["objects"]})
        server = start_s3(tuple(buckets))
        server.filesystem().pipe({p: bytes.fromhex(h) for p, h in spec["objects"].items()})
        env.update({k: v for k, v in os.environ.items() if k.startswith("AWS_")})  # its credentials
        env["AWS_ENDPOINT_URL"] = server.endpoint_url
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    for name, target in (("aicache", f"{sys.executable} -m aicache.cli.main"), ("python", sys.executable)):
        with open(os.path.join(bindir, name), "w") as f:
            f.write(f'#!/bin/sh\nexec {target} "$@"\n')
        os.chmod(os.path.join(bindir, name), 0o755)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    results = []
    if spec["lang"] == "bash":
        for cmd in spec["code"]:
            r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True,
                               text=True, timeout=300)
            results.append({"cmd": cmd, "rc": r.returncode, "stdout": r.stdout[-4000:],
                            "stderr": r.stderr[-2000:]})
    else:
        with open(os.path.join(work, "block.py"), "w") as f:
            f.write(spec["code"])
        program = "exec(compile(open('block.py').read(), 'README block', 'exec'))\n" + spec["observe"]
        r = subprocess.run([sys.executable, "-c", program], cwd=work, env=env, capture_output=True,
                           text=True, timeout=300)
        results.append({"cmd": "python block", "rc": r.returncode, "stdout": r.stdout[-4000:],
                        "stderr": r.stderr[-2000:]})
    if server is not None:
        server.stop()
    with open(os.path.join(work, "out.json"), "w") as f:
        json.dump({"results": results}, f)


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def _private_tmp() -> None:
    """Cover ``/tmp`` with a tmpfs, keeping visible what this run itself lives in there.

    A clean checkout may sit under ``/tmp`` (CI clones there), and so may its venv and any
    ``sys.path`` entry; each such path is bound aside on ``/mnt`` before the tmpfs goes on
    and bound back at the same path after, so the interpreter, the package and the clone's
    ``traces/`` stay where every path in this process says they are.
    """
    candidates = {os.path.realpath(p) for p in (ROOT, sys.prefix, *sys.path) if p and os.path.exists(p)}
    keep = sorted(p for p in candidates if _under_tmp(p) and p != "/tmp")
    # only the outermost of nested paths: binding a parent brings its children along
    keep = [p for p in keep if not any(p != q and p.startswith(q + "/") for q in keep)]
    aside = []
    for i, path in enumerate(keep):
        spot = f"/mnt/.keep{i}"
        os.makedirs(spot)
        subprocess.run(["mount", "--bind", path, spot], check=True)
        aside.append((spot, path))
    subprocess.run(["mount", "-t", "tmpfs", "aicache-readme-tmp", "/tmp"], check=True)
    for spot, path in aside:
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "--bind", spot, path], check=True)


if __name__ == "__main__":
    main(sys.argv[1])
