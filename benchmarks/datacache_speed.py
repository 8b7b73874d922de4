"""Hot-cache speed of the real data cache, as ratios against named peers, in one run.

    python benchmarks/datacache_speed.py [--large-mib 256] [--small-files 512] [--json]

Every peer reads the *same bytes*, warm (page-cached) and from the same disk:

* ``large_vs_local``  — 4 MiB sequential reads of one big file through ``aicache`` (fsspec
  ``open().read(4MiB)``) ÷ plain ``open().read(4MiB)`` of the source file. Goal ≥ 0.8.
* ``small_vs_local``  — whole-file reads of 128 KiB files (``cat_file``) ÷ plain reads. Goal ≥ 0.5.
* ``vs_simplecache`` / ``vs_blockcache`` — the same large reads against fsspec's
  ``simplecache`` and ``blockcache`` over the same warm data. Goal ≥ 1.0. (Those do no
  checksums and hold no budget; aicache verifies every block it reads.)
* ``fuse_vs_local`` — 4 MiB reads through ``aicache mount`` ÷ plain reads (large file;
  every open drops the kernel's pages, so each pass goes through the engine). Goal ≥ 0.3.
  ``fuse_kernel_cache_vs_local``: the same with ``--kernel-cache`` (re-reads served by
  the kernel's page cache, unseen by the policy).
* ``policy_us`` — median µs of a hit read (``engine.read_block``) under each policy, and of
  the pure policy calls (``on_access`` + ``tick``) per read: chiron's overhead vs lru's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import fsspec

MiB = 1024 * 1024


def _paired(fns: dict[str, Any], nbytes: int, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` MiB/s of each reader, the readers *interleaved* round by round so
    that load from other processes on a shared machine hits all of them alike."""
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            got = fn()
            dt = time.perf_counter() - t0
            assert got == nbytes, (k, got, nbytes)
            best[k] = min(best[k], dt)
    return {k: nbytes / MiB / v for k, v in best.items()}


def read_seq(opener, path: str, chunk: int = 4 * MiB) -> int:
    n = 0
    with opener(path) as f:
        while True:
            b = f.read(chunk)
            if not b:
                return n
            n += len(b)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large-mib", type=int, default=256)
    ap.add_argument("--small-files", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-fuse", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from aicache.datacache.fs import AICacheFileSystem

    work = tempfile.mkdtemp(prefix="aicache-bench-")
    src = os.path.join(work, "src")
    os.makedirs(os.path.join(src, "small"))
    rng = random.Random(0)
    big = os.path.join(src, "big.bin")
    with open(big, "wb") as f:
        for _ in range(args.large_mib):
            f.write(rng.randbytes(MiB))
    smalls = []
    for i in range(args.small_files):
        p = os.path.join(src, "small", f"img-{i:05d}.jpg")
        with open(p, "wb") as f:
            f.write(rng.randbytes(128 * 1024))
        smalls.append(p)
    big_bytes = args.large_mib * MiB
    small_bytes = 128 * 1024 * len(smalls)
    res: dict[str, Any] = {"large_mib": args.large_mib, "small_files": args.small_files}

    def local_open(p: str):
        return open(p, "rb", buffering=0)

    # -- aicache (fsspec) ------------------------------------------------------------------
    fs = AICacheFileSystem(target_protocol="file", cache_dir=os.path.join(work, "cache"),
                           cache_size=2 * (big_bytes + small_bytes), policy="chiron",
                           skip_instance_cache=True)
    read_seq(fs.open, big)  # warm
    for p in smalls:
        fs.cat_file(p)
    fs.engine.wait_prefetches()
    others = {}
    for name in ("simplecache", "blockcache"):  # fsspec's caches on the same warm data
        others[name] = o = fsspec.filesystem(name, target_protocol="file",
                                             cache_storage=os.path.join(work, name),
                                             skip_instance_cache=True)
        read_seq(o.open, big)
    large = _paired({"local": lambda: read_seq(local_open, big),
                     "aicache": lambda: read_seq(fs.open, big),
                     **{k: (lambda o=o: read_seq(o.open, big)) for k, o in others.items()}},
                    big_bytes, args.repeat)
    mibs_local, mibs_aic = large["local"], large["aicache"]
    for name in others:
        res[f"{name}_large_mibs"] = round(large[name])
        res[f"vs_{name}"] = round(mibs_aic / large[name], 3)

    def small_local() -> int:
        n = 0
        for p in smalls:
            with open(p, "rb", buffering=0) as f:
                n += len(f.read())
        return n

    def small_aic() -> int:
        return sum(len(fs.cat_file(p)) for p in smalls)

    small = _paired({"local": small_local, "aicache": small_aic}, small_bytes, args.repeat)
    s_local, s_aic = small["local"], small["aicache"]
    res.update(local_large_mibs=round(mibs_local), aicache_large_mibs=round(mibs_aic),
               large_vs_local=round(mibs_aic / mibs_local, 3),
               local_small_mibs=round(s_local), aicache_small_mibs=round(s_aic),
               small_vs_local=round(s_aic / s_local, 3))

    # -- per-read policy overhead ---------------------------------------------------------
    res["policy_us"] = policy_overhead(work, src)
    fs.close()

    # -- FUSE -----------------------------------------------------------------------------
    if not args.no_fuse:
        res.update(fuse_bench(work, src, big, big_bytes, args.repeat))
    subprocess.run(["rm", "-rf", work], check=False)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>24}  {v}")
    return res


def policy_overhead(work: str, src: str, n: int = 3000) -> dict[str, float]:
    """Median µs per hit read (engine) and per policy decision, lru vs chiron."""
    from aicache.datacache.engine import CacheEngine, EngineParams

    out: dict[str, float] = {}
    smalls = sorted(os.listdir(os.path.join(src, "small")))[:64]
    for policy in ("lru", "chiron"):
        e = CacheEngine(fsspec.filesystem("file"), os.path.join(work, f"pol-{policy}"), 1 << 32,
                        policy=policy, params=EngineParams(block_size=4 * MiB))
        metas = [e.stat(os.path.join(src, "small", s)) for s in smalls]
        for m in metas:
            e.read_block(m, 0)
        e.wait_prefetches()
        rng = random.Random(1)
        order = [rng.randrange(len(metas)) for _ in range(n)]
        lat = []
        for i in order:
            t0 = time.perf_counter()
            e.read_block(metas[i], 0)
            lat.append(time.perf_counter() - t0)
        out[f"{policy}_hit_read_median_us"] = round(statistics.median(lat) * 1e6, 1)
        sysm = e.system
        ids = [e.block_id(m.path, 0) for m in metas]
        lat = []
        t = 1e6
        for i in order:
            t += 0.001
            t0 = time.perf_counter()
            sysm.on_access(e.unit_of(metas[i].path), ids[i], 128 * 1024, True, t)
            sysm.tick(t)
            lat.append(time.perf_counter() - t0)
        out[f"{policy}_policy_median_us"] = round(statistics.median(lat) * 1e6, 2)
        e.close()
    out["chiron_minus_lru_hit_read_us"] = round(out["chiron_hit_read_median_us"] - out["lru_hit_read_median_us"], 1)
    return out


def fuse_bench(work: str, src: str, big: str, big_bytes: int, repeat: int
               ) -> dict[str, Any]:
    from aicache.datacache.fuse import fuse_available

    if fuse_available():
        return {"fuse_vs_local": None, "fuse_skipped": fuse_available()}
    out: dict[str, Any] = {}
    for kernel_cache in (False, True):
        out.update(_fuse_once(work, src, big, big_bytes, repeat, kernel_cache))
    return out


def _fuse_once(work: str, src: str, big: str, big_bytes: int, repeat: int, kernel_cache: bool
               ) -> dict[str, Any]:
    sfx = "_kernel_cache" if kernel_cache else ""
    mnt = os.path.join(work, "mnt" + sfx)
    os.makedirs(mnt)
    proc = subprocess.Popen([sys.executable, "-m", "aicache.cli.main", "mount", src, mnt,
                             "--cache-dir", os.path.join(work, "fcache"), "--cache-size",
                             str(2 * big_bytes), "--policy", "chiron", "--foreground",
                             *(["--kernel-cache"] if kernel_cache else [])],
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "mount failed")
            time.sleep(0.05)
        path = os.path.join(mnt, os.path.basename(big))
        def opener(p: str):
            return open(p, "rb", buffering=0)

        read_seq(opener, path)  # warm the cache dir
        r = _paired({"local": lambda: read_seq(opener, big), "fuse": lambda: read_seq(opener, path)},
                    big_bytes, repeat)
        return {f"fuse{sfx}_large_mibs": round(r["fuse"]), f"fuse{sfx}_local_mibs": round(r["local"]),
                f"fuse{sfx}_vs_local": round(r["fuse"] / r["local"], 3)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
