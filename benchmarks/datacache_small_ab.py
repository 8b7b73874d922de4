"""Small-file hit reads of two source trees, A/B, interleaved round by round (CPU time).

    python benchmarks/datacache_small_ab.py OLD/src NEW/src [--rounds 40] [--files 512]
                                            [--file-kib 128]

On a loaded machine, whole benchmark runs of two trees taken one after the other see
different neighbours; here one reader process per tree (``PYTHONPATH=TREE``) is warmed once
and the two then take turns, one round each (ABBA order), so both see the same load. A
round times, by the reader's CPU time (``time.process_time``), plain ``open().read()`` of
every file (128 KiB by default; ``--file-kib 4`` makes the copy small, so what is left
is the per-read work of the code) and ``cat_file`` of every file through aicache with ``chiron`` and with
``lru`` (warm, page-cached, past the store's racy window, as ``datacache_speed.py``'s
``small_vs_local`` / ``small_lru_vs_local``). Per tree: the median over rounds of each
round's ``local / aicache`` ratio, and µs per read. Prints JSON.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

POLICIES = ("chiron", "lru")
RACY_WAIT_S = 2.1  # the store's DEFAULT_RACY_WINDOW_S plus a tick


def worker(src: str, cache: str) -> None:
    """One tree's reader: warm up, then one timed round per line on stdin."""
    from aicache.datacache.fs import AICacheFileSystem

    params = inspect.signature(AICacheFileSystem.__init__).parameters
    kw = {n: "stat" for n in ("verify_checksum", "verify") if n in params}
    files = sorted(os.path.join(src, f) for f in os.listdir(src))
    fss = {p: AICacheFileSystem(target_protocol="file", cache_dir=os.path.join(cache, p),
                                cache_size=1 << 31, policy=p, skip_instance_cache=True, **kw)
           for p in POLICIES}
    for fs in fss.values():
        for f in files:
            fs.cat_file(f)
        fs.engine.wait_prefetches()
    time.sleep(RACY_WAIT_S)
    for fs in fss.values():  # verified, then mapped (the store maps a block on its second read)
        for _ in range(3):
            for f in files:
                fs.cat_file(f)
    print("ready", flush=True)
    clock = time.process_time
    for _ in sys.stdin:
        out: dict[str, float] = {}
        t0 = clock()
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                fh.read()
        out["local"] = clock() - t0
        for p, fs in fss.items():
            t0 = clock()
            for f in files:
                fs.cat_file(f)
            out[p] = clock() - t0
        print(json.dumps(out), flush=True)
    for fs in fss.values():
        fs.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--files", type=int, default=512)
    ap.add_argument("--file-kib", type=int, default=128)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return {}
    work = tempfile.mkdtemp(prefix="aicache-ab-")
    try:
        src = os.path.join(work, "src")
        os.makedirs(src)
        rng = random.Random(0)
        for i in range(args.files):
            with open(os.path.join(src, f"img-{i:05d}.jpg"), "wb") as f:
                f.write(rng.randbytes(args.file_kib * 1024))
        trees = {"old": args.old, "new": args.new}
        procs = {t: subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", src, os.path.join(work, t),
             "x", "x"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=work,
            env={**os.environ, "PYTHONPATH": os.path.abspath(tree)}) for t, tree in trees.items()}
        for p in procs.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        rounds: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
        for r in range(args.rounds):
            for t in (("old", "new") if r % 2 == 0 else ("new", "old")):
                p = procs[t]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("round\n")
                p.stdin.flush()
                rounds[t].append(json.loads(p.stdout.readline()))
        for p in procs.values():
            assert p.stdin is not None
            p.stdin.close()
            p.wait()
    finally:
        subprocess.run(["rm", "-rf", work], check=False)
    res: dict[str, Any] = {"config": {"rounds": args.rounds, "files": args.files,
                                      "file_kib": args.file_kib, "clock": "cpu",
                                      "cpus": os.cpu_count(), "load1": round(os.getloadavg()[0], 2),
                                      "old": args.old, "new": args.new}}
    n = args.files
    for t, rs in rounds.items():
        s: dict[str, float] = {"local_us_per_read": round(statistics.median(x["local"] for x in rs) / n * 1e6, 2)}
        for p in POLICIES:
            name = "small_vs_local" if p == "chiron" else f"small_{p}_vs_local"
            s[name] = round(statistics.median(x["local"] / x[p] for x in rs), 3)
            s[f"{p}_us_per_read"] = round(statistics.median(x[p] for x in rs) / n * 1e6, 2)
        res[t] = s
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
