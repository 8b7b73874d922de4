"""What each data tool costs at the server, through aicache on its defaults and through s3fs.

    python benchmarks/client_requests.py [--rows 200000] [--json]

A Parquet file (``--rows`` rows, 4 row groups, beside three sibling files), a CSV of the
same table, a zarr array, a ``.npy`` array and a safetensors file are written into a moto
S3 server on loopback; each client reads them once cold (a fresh default cache directory)
and once warm (the same process, within ``metadata_ttl``), and the requests the server
answered are counted by kind (HEAD, LIST, GET) with the bytes the GETs returned. The same
cold read straight through s3fs is the reference, twice: on its defaults (readahead in
blocks of 50 MB), and with ``default_cache_type="none"``, where every read of the client
is one GET of exactly its range — the bytes of that run are *the bytes the client read*,
the denominator of ``ratio`` (aicache cold bytes / bytes read). Nothing is timed.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import struct
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import aicache.datacache.fs  # noqa: F401 - registers the "aicache" protocol
from aicache.datacache.fs import AICacheFileSystem
from aicache.testing import S3Server, start_s3

BUCKET = "aicache-bench-clients"


@dataclass(slots=True)
class Cost:
    """Requests the server answered during one read, and the bytes its GETs returned."""

    head: int
    list: int
    get: int
    get_bytes: int

    @property
    def requests(self) -> int:
        return self.head + self.list + self.get


@dataclass(slots=True)
class Row:
    client: str
    object_bytes: int  #: size of the object(s) the client reads
    read: Cost  #: s3fs with no cache: one GET per read of the client, its exact range
    s3fs_cold: Cost
    aicache_cold: Cost
    aicache_warm: Cost
    #: aicache's cold and warm results equal s3fs's
    same: bool = False

    @property
    def ratio(self) -> float:
        """aicache's cold bytes over the bytes the client read."""
        return self.aicache_cold.get_bytes / max(1, self.read.get_bytes)


def _cost(s3: S3Server, fn: Callable[[], Any], out: list[Any] | None = None) -> Cost:
    """What ``fn()`` cost at the server; its result is appended to ``out``."""
    before, b0 = s3.requests.snapshot(), s3.requests.get_bytes
    got = fn()
    if out is not None:
        out.append(got)
    d: Counter[str] = s3.requests.snapshot() - before
    return Cost(d["head"], d["list"], d["get"], s3.requests.get_bytes - b0)


def _same(a: Any, b: Any) -> bool:
    """Whether two clients' results are equal (tables, frames, arrays, query rows)."""
    if isinstance(a, pa.Table):
        return bool(a.equals(b))
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    if hasattr(a, "equals"):  # a pandas DataFrame
        return bool(a.equals(b))
    # query rows of numbers: DuckDB sums in parallel, so the last bits may differ
    return bool(np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                            rtol=1e-12, atol=0.0))


def _clients(s3: S3Server, rows: int) -> list[tuple[str, int, Callable[[Any, str], Any]]]:
    """(name, bytes of what it reads, read(filesystem, scheme prefix))."""
    import duckdb
    import pandas as pd
    import zarr
    from safetensors.numpy import save as st_save
    from zarr.storage import FsspecStore

    rng = np.random.default_rng(1)
    table = pa.table({"id": np.arange(rows, dtype=np.int64), "x": rng.normal(size=rows)})
    pbuf, cbuf = io.BytesIO(), io.BytesIO()
    pq.write_table(table, pbuf, row_group_size=max(1, rows // 4))
    pacsv.write_csv(table, cbuf)
    # a .npy of 960 rows of 16 KiB (15.7 MB), read 20 rows at a time
    npy = io.BytesIO()
    np.save(npy, rng.normal(size=(960, 4096)).astype(np.float32))
    # a safetensors file of eight 4 MiB tensors (33.6 MB), read one tensor
    tensors = {f"layer{i}.weight": rng.normal(size=(1024, 1024)).astype(np.float32) for i in range(8)}
    st = st_save(tensors)
    objs = {f"{BUCKET}/pq/t.parquet": pbuf.getvalue(), f"{BUCKET}/csv/t.csv": cbuf.getvalue(),
            f"{BUCKET}/npy/a.npy": npy.getvalue(), f"{BUCKET}/st/model.safetensors": st}
    for i in range(4):  # a folder of Parquet files: pandas reads the first one
        b = io.BytesIO()
        pq.write_table(pa.table({"id": np.arange(rows, dtype=np.int64) + i * rows,
                                 "x": rng.normal(size=rows)}), b, row_group_size=max(1, rows // 4))
        objs[f"{BUCKET}/many/part-{i}.parquet"] = b.getvalue()
    raw = fsspec.filesystem("s3", **s3.client_options, skip_instance_cache=True)
    raw.pipe(objs)
    arr = rng.normal(size=(512, 512)).astype(np.float32)
    z = zarr.create_array(FsspecStore.from_url(f"s3://{BUCKET}/z.zarr", read_only=False,
                                               storage_options={**s3.client_options,
                                                                "skip_instance_cache": True}),
                          shape=arr.shape, chunks=(128, 128), dtype=arr.dtype)
    z[:] = arr
    zarr_bytes = sum(raw.du(f"{BUCKET}/z.zarr", total=False).values())

    def duck(fs: Any, scheme: str) -> Any:
        con = duckdb.connect()
        con.register_filesystem(fs)
        return con.sql(f"SELECT sum(x) FROM read_parquet('{scheme}{BUCKET}/pq/t.parquet')").fetchall()

    def zarr_read(fs: Any, scheme: str) -> Any:
        store = FsspecStore(fs if fs.async_impl else _async(fs), path=f"{BUCKET}/z.zarr",
                            read_only=True)
        return zarr.open_array(store, mode="r")[:]

    def npy_rows(fs: Any, _s: str) -> Any:
        """Rows 500..519 through a file object: the header, then one seek and read."""
        with fs.open(f"{BUCKET}/npy/a.npy", "rb") as f:
            major, _minor = np.lib.format.read_magic(f)
            header = (np.lib.format.read_array_header_1_0 if major == 1
                      else np.lib.format.read_array_header_2_0)
            shape, _order, dtype = header(f)
            row = int(np.prod(shape[1:])) * dtype.itemsize
            f.seek(f.tell() + 500 * row)
            return np.frombuffer(f.read(20 * row), dtype=dtype).reshape(20, *shape[1:])

    def st_tensor(fs: Any, _s: str) -> Any:
        """One tensor of a safetensors file through a file object (its 8-byte header
        length, the JSON header, then the tensor's byte range), as remote loaders do."""
        with fs.open(f"{BUCKET}/st/model.safetensors", "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            meta = json.loads(f.read(n))["layer5.weight"]
            a, b = meta["data_offsets"]
            f.seek(8 + n + a)
            return np.frombuffer(f.read(b - a), dtype=np.float32).reshape(meta["shape"])

    return [
        ("pyarrow read_table", len(pbuf.getvalue()),
         lambda fs, _s: pq.read_table(f"{BUCKET}/pq/t.parquet", filesystem=fs)),
        ("pyarrow read_table, 1 column", len(pbuf.getvalue()),
         lambda fs, _s: pq.read_table(f"{BUCKET}/pq/t.parquet", filesystem=fs, columns=["x"])),
        ("pyarrow.csv", len(cbuf.getvalue()),
         lambda fs, _s: pacsv.read_csv(fs.open(f"{BUCKET}/csv/t.csv"))),
        ("duckdb read_parquet, sum(x)", len(pbuf.getvalue()), duck),
        ("zarr 512x512 float32, 16 chunks", zarr_bytes, zarr_read),
        ("safetensors, 1 of 8 tensors", len(st), st_tensor),
        ("numpy .npy, 20 of 960 rows", len(npy.getvalue()), npy_rows),
        ("pandas read_parquet, 1 of 4 files", len(objs[f"{BUCKET}/many/part-0.parquet"]),
         lambda fs, _s: pd.read_parquet(f"{BUCKET}/many/part-0.parquet", filesystem=fs)),
    ]


def _async(fs: Any) -> Any:
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    return AsyncFileSystemWrapper(fs)


def measure(rows: int) -> list[Row]:
    # zarr warns that a wrapped synchronous filesystem "may lead to surprising behavior"
    warnings.filterwarnings("ignore", message=".*was not created with `asynchronous=True`")
    s3 = start_s3((BUCKET,))
    out: list[Row] = []
    try:
        for name, nbytes, read in _clients(s3, rows):
            exact = fsspec.filesystem("s3", **s3.client_options, skip_instance_cache=True,
                                      default_cache_type="none")
            results: list[Any] = []
            read_cost = _cost(s3, lambda: read(exact, "s3://"), results)
            plain = fsspec.filesystem("s3", **s3.client_options, skip_instance_cache=True)
            s3fs_cold = _cost(s3, lambda: read(plain, "s3://"))
            with tempfile.TemporaryDirectory() as home:
                os.environ["XDG_CACHE_HOME"] = home  # a fresh default cache directory
                fs = fsspec.filesystem("aicache", target_protocol="s3",
                                       target_options=s3.client_options, skip_instance_cache=True)
                cold = _cost(s3, lambda: read(fs, "aicache://"), results)
                warm = _cost(s3, lambda: read(fs, "aicache://"), results)
                fs.close()
                AICacheFileSystem.clear_instance_cache()
                gc.collect()
            out.append(Row(name, nbytes, read_cost, s3fs_cold, cold, warm,
                           _same(results[0], results[1]) and _same(results[0], results[2])))
    finally:
        s3.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = measure(args.rows)
    if args.json:
        json.dump([{**asdict(r), "ratio": round(r.ratio, 4)} for r in rows], sys.stdout, indent=1)
        print()
        return 0

    def f(c: Cost) -> str:
        return f"{c.head}/{c.list}/{c.get} {c.get_bytes:>10,}"

    print(f"{'client':34} {'object':>10} | {'bytes read':>10} | {'s3fs no cache':>22} | "
          f"{'s3fs cold':>22} | {'aicache cold':>22} | {'ratio':>5} | {'warm':>5}")
    print(f"{'':34} {'bytes':>10} | {'':>10} | {'H/L/G  bytes':>22} | {'H/L/G  bytes':>22} | "
          f"{'H/L/G  bytes':>22} | {'':>5} | {'H/L/G':>5}")
    for r in rows:
        w = r.aicache_warm
        print(f"{r.client:34} {r.object_bytes:>10,} | {r.read.get_bytes:>10,} | {f(r.read):>22} | "
              f"{f(r.s3fs_cold):>22} | {f(r.aicache_cold):>22} | {r.ratio:>5.2f} | "
              f"{f'{w.head}/{w.list}/{w.get}':>5}" + ("" if r.same else "  RESULTS DIFFER"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
