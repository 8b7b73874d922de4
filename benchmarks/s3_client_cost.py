"""What one small GET costs the client, through s3fs (aiobotocore) and through obstore (Rust).

    python benchmarks/s3_client_cost.py [--gets 300] [--size 100000] [--threads 4] [--repeat 2] [--json]

The peers benchmark's jobs are CPU-bound on two cores, and a GIL profile of the aicache
mount puts about 40 % of a cold epoch's samples in the S3 client (signing, parsing,
aiohttp). This script measures that lever on its own: ``--gets`` objects of ``--size``
bytes in the counting moto server on loopback, read once each by ``--threads`` threads
through an ``s3fs.S3FileSystem`` (``cat_file`` of the whole range, as the engine's GET is)
and through ``obstore.get_range`` on an ``S3Store`` of the same bucket, alternating, each
``--repeat`` times. It prints wall time and this process's CPU per GET (the server runs in
its own process, so the CPU is the client's). Every body is compared with what was put.
obstore is not a dependency of aicache: without it only s3fs is measured (said so).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gets", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000, help="bytes per object")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    for name in ("gets", "size", "threads", "repeat"):
        if getattr(a, name) < 1:
            print(f"s3_client_cost.py: --{name} {getattr(a, name)} must be at least 1", file=sys.stderr)
            return 2
    import s3fs

    from aicache.testing.s3count import start_counting_s3

    server = start_counting_s3()
    rows: list[dict[str, object]] = []
    try:
        fs0 = s3fs.S3FileSystem(key="testing", secret="testing", skip_instance_cache=True,
                                client_kwargs={"endpoint_url": server.endpoint_url})
        fs0.mkdir("cost")
        blobs = {f"o/{i:05d}": os.urandom(a.size) for i in range(a.gets)}
        fs0.pipe({f"cost/{k}": v for k, v in blobs.items()})
        fs = s3fs.S3FileSystem(key="testing", secret="testing", skip_instance_cache=True,
                               client_kwargs={"endpoint_url": server.endpoint_url})
        clients: dict[str, Callable[[str], bytes]] = {
            "s3fs": lambda k: fs.cat_file(f"cost/{k}", start=0, end=a.size)}
        try:
            import obstore
            from obstore.store import S3Store

            store = S3Store("cost", endpoint=server.endpoint_url, access_key_id="testing",
                            secret_access_key="testing", region="us-east-1",
                            client_options={"allow_http": True}, virtual_hosted_style_request=False)
            clients["obstore"] = lambda k: bytes(obstore.get_range(store, k, start=0, end=a.size))
        except ImportError:
            print("s3_client_cost.py: obstore is not installed (pip install obstore); s3fs only",
                  file=sys.stderr)
        for rep in range(a.repeat):
            for name, get in clients.items():
                get(next(iter(blobs)))  # connections up
                c0, t0 = time.process_time(), time.perf_counter()
                with cf.ThreadPoolExecutor(a.threads) as ex:
                    got = list(ex.map(get, blobs))
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                if got != list(blobs.values()):
                    print(f"s3_client_cost.py: {name} returned wrong bytes", file=sys.stderr)
                    return 1
                rows.append({"client": name, "run": rep, "wall_s": round(wall, 3),
                             "cpu_ms_per_get": round(cpu / a.gets * 1000, 3)})
    finally:
        server.stop()
    if a.json:
        print(json.dumps({"gets": a.gets, "size": a.size, "threads": a.threads, "rows": rows}))
    else:
        for r in rows:
            print(f"{r['client']:8} run {r['run']}: {a.gets} GETs of {a.size} B in {r['wall_s']:.2f} s, "
                  f"client CPU {r['cpu_ms_per_get']:.2f} ms per GET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
