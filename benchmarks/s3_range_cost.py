"""What a ranged GET costs the benchmarks' S3 stand-in, against a whole object of the same size.

    python benchmarks/s3_range_cost.py [--repeat 3] [--json]

S3 charges a ranged GET by the bytes it returns. moto, the stand-in every data-cache
benchmark here serves from, reads the *whole object* for every GET before slicing the
range (objects past 5 MiB live in a spooled temporary file). So a reader that fetches 4 MiB
ranges of 32 MiB shards (aicache, rclone, s3fs-fuse, fsspec's blockcache) pays for 32 MiB
each time, while one that stores 4 MiB objects of its own (JuiceFS) does not. The counting
server (:mod:`aicache.testing.s3count`) keeps each object's bytes beside moto's buffer by
default; ``--moto-as-is`` serves as moto does. This script starts both servers in turn and
times, from one client on loopback (no delay line), eight GETs of 4 MiB each three ways: a
range of a 32 MiB object, a range of an 8 MiB object, and a whole 4 MiB object, with one
and four client threads. The ratio ``range of 32 MiB / whole 4 MiB`` is what the stand-in
adds to a range reader's request; S3's is 1. Timings are wall-clock on a shared machine:
compare the ratios, not the milliseconds.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
from collections.abc import Callable

BLOCK = 4 << 20
GETS = 8


def _measure(moto_as_is: bool, repeat: int) -> dict[str, float]:
    import s3fs

    from aicache.testing.s3count import start_counting_s3

    server = start_counting_s3(moto_as_is=moto_as_is)
    try:
        fs = s3fs.S3FileSystem(key="testing", secret="testing", skip_instance_cache=True,
                               client_kwargs={"endpoint_url": server.endpoint_url})
        fs.mkdir("cost")
        big = os.urandom(32 << 20)
        mid = os.urandom(8 << 20)
        fs.pipe_file("cost/big", big)
        fs.pipe_file("cost/mid", mid)
        for i in range(GETS):
            fs.pipe_file(f"cost/part{i}", big[i * BLOCK:(i + 1) * BLOCK])
        ways: dict[str, tuple[Callable[[int], bytes], Callable[[int], bytes]]] = {
            "range of 32 MiB": (lambda i: fs.cat_file("cost/big", start=i * BLOCK, end=(i + 1) * BLOCK),
                                lambda i: big[i * BLOCK:(i + 1) * BLOCK]),
            "range of 8 MiB": (lambda i: fs.cat_file("cost/mid", start=(i % 2) * BLOCK,
                                                     end=(i % 2 + 1) * BLOCK),
                               lambda i: mid[(i % 2) * BLOCK:(i % 2 + 1) * BLOCK]),
            "whole 4 MiB": (lambda i: fs.cat_file(f"cost/part{i}"),
                            lambda i: big[i * BLOCK:(i + 1) * BLOCK]),
        }
        out: dict[str, float] = {}
        for name, (get, want) in ways.items():
            get(0)  # the connection and, as-is, moto's first read of the object
            for threads in (1, 4):
                best = float("inf")
                for _ in range(repeat):
                    t = time.perf_counter()
                    with cf.ThreadPoolExecutor(threads) as ex:
                        got = list(ex.map(get, range(GETS)))
                    best = min(best, (time.perf_counter() - t) / GETS)
                    for i, g in enumerate(got):  # every byte checked
                        if g != want(i):
                            raise SystemExit(f"s3_range_cost: {name}: GET {i} returned wrong bytes")
                out[f"{name}, {threads} thread{'s' * (threads > 1)}"] = best * 1000
        return out
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per way; the best is kept (default 3)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        print(f"s3_range_cost.py: --repeat {a.repeat} must be at least 1", file=sys.stderr)
        return 2
    rows = []
    for as_is in (True, False):
        ms = _measure(as_is, a.repeat)
        server = "moto as is" if as_is else "kept values (default)"
        for way, v in ms.items():
            rows.append({"server": server, "way": way, "ms_per_get": round(v, 2)})
        for threads in ("1 thread", "4 threads"):
            ratio = ms[f"range of 32 MiB, {threads}"] / ms[f"whole 4 MiB, {threads}"]
            rows.append({"server": server, "way": f"ratio range of 32 MiB / whole 4 MiB, {threads}",
                         "ratio": round(ratio, 2)})
    if a.json:
        print(json.dumps({"gets": GETS, "block_bytes": BLOCK, "rows": rows}))
    else:
        for r in rows:
            print(f"{r['server']:22} {r['way']:48} {r.get('ms_per_get', r.get('ratio')):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
