"""The data tools people use, each run for real against moto S3 through aicache on its
defaults (the default cache directory, no tuning), bytes checked against the source, and
what each costs counted at the server (:class:`aicache.testing.s3.RequestLog`):

* PyTorch DataLoader with ``num_workers=2`` over a filesystem made before the workers
  start (fork and spawn): each worker reads through an engine and a target of its own;
* DuckDB (``register_filesystem``), Polars (``read_*(use_pyarrow=True)`` with string
  options, ``scan_parquet`` of an open file), HuggingFace ``datasets`` (``load_dataset``
  and streaming), pyarrow and zarr;
* metadata within ``metadata_ttl`` answered from the cache: a warm pass makes no request;
* ``hit_bytes`` counts the bytes served, not the blocks;
* a ``daemon=True`` policy daemon exits soon after its last client.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import aicache.datacache.fs  # noqa: F401 - registers the "aicache" protocol
from aicache.datacache.daemon import IDLE_EXIT_S
from aicache.datacache.fs import AICacheFileSystem
from aicache.errors import BadInput
from aicache.testing import S3Server, start_s3

BUCKET = "aicache-clients"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3((BUCKET,))
    try:
        yield server
    finally:
        server.stop()


def _table(n: int = 20_000) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table({"id": np.arange(n, dtype=np.int64), "x": rng.normal(size=n),
                     "tag": [f"t{i % 97}" for i in range(n)]})


@pytest.fixture(scope="module")
def source(s3: S3Server) -> dict[str, bytes]:
    """The remote objects (path → bytes): the reference every read is checked against."""
    table = _table()
    pbuf, cbuf = io.BytesIO(), io.BytesIO()
    pq.write_table(table, pbuf, row_group_size=5_000)
    pacsv.write_csv(table, cbuf)
    rng = np.random.default_rng(9)
    objs = {f"{BUCKET}/tab/t.parquet": pbuf.getvalue(), f"{BUCKET}/csv/t.csv": cbuf.getvalue()}
    for i in range(8):
        objs[f"{BUCKET}/samples/s{i:02d}.bin"] = rng.bytes(int(rng.integers(1, 300_000)))
    raw = fsspec.filesystem("s3", **s3.client_options, skip_instance_cache=True)
    raw.pipe(objs)
    return objs


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's default cache directory (``$XDG_CACHE_HOME/aicache``) under ``tmp_path``;
    every aicache filesystem is closed (and so its engine) afterwards."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    yield tmp_path / "xdg" / "aicache"
    AICacheFileSystem.clear_instance_cache()
    gc.collect()


def _defaults(s3: S3Server) -> dict[str, Any]:
    """aicache on its defaults: only the target is named."""
    return {"target_protocol": "s3", "target_options": s3.client_options}


def _requests_during(s3: S3Server, fn: Any) -> tuple[Any, Counter[str]]:
    before = s3.requests.snapshot()
    out = fn()
    return out, s3.requests.snapshot() - before


# -- PyTorch DataLoader ------------------------------------------------------------------------
class FileDigests:
    """A map-style dataset: item ``i`` is the SHA-256 of file ``i`` read through ``fs``
    (a DataLoader takes any object with ``__len__`` and ``__getitem__``)."""

    def __init__(self, fs: AICacheFileSystem, paths: list[str]) -> None:
        self.fs = fs
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> str:
        with self.fs.open(self.paths[i], "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_read_through_a_filesystem_made_before_they_start(
        s3: S3Server, source: dict[str, bytes], home: Path, start_method: str) -> None:
    """The common pattern: the filesystem is made (and used) in the main process, then
    ``num_workers=2``. A forked worker inherits the parent's s3fs, whose event loop and
    aiobotocore session do not survive fork: it must build its own."""
    import torch.utils.data

    fs = fsspec.filesystem("aicache", **_defaults(s3))
    paths = sorted(p for p in source if "/samples/" in p)
    assert fs.cat_file(paths[0]) == source[paths[0]]  # the parent's target is live at the fork
    loader = torch.utils.data.DataLoader(FileDigests(fs, paths), batch_size=2, num_workers=2,
                                         multiprocessing_context=start_method)
    got = [d for batch in loader for d in batch]
    assert got == [hashlib.sha256(source[p]).hexdigest() for p in paths]
    assert fs.cat_file(paths[-1]) == source[paths[-1]]  # the parent's engine is untouched


# -- DuckDB -------------------------------------------------------------------------------------
def test_duckdb_queries_parquet_and_csv_and_a_warm_query_asks_the_remote_nothing(
        s3: S3Server, source: dict[str, bytes], home: Path) -> None:
    import duckdb

    ref = pq.read_table(io.BytesIO(source[f"{BUCKET}/tab/t.parquet"]))
    con = duckdb.connect()
    con.register_filesystem(fsspec.filesystem("aicache", **_defaults(s3)))
    query = f"SELECT id, x, tag FROM read_parquet('aicache://{BUCKET}/tab/t.parquet') ORDER BY id"
    assert con.sql(query).to_arrow_table().equals(ref)
    warm, calls = _requests_during(s3, lambda: con.sql(query).to_arrow_table())
    assert warm.equals(ref) and calls == Counter()
    csv = con.sql(f"SELECT count(*), sum(id), sum(x) FROM read_csv('aicache://{BUCKET}/csv/t.csv')")
    n, ids, xs = csv.fetchall()[0]
    assert (n, ids) == (ref.num_rows, sum(ref["id"].to_pylist()))
    assert xs == pytest.approx(sum(ref["x"].to_pylist()))


# -- Polars -------------------------------------------------------------------------------------
def test_polars_reads_through_fsspec_with_every_option_a_string(
        s3: S3Server, source: dict[str, bytes], home: Path) -> None:
    """Polars hands ``storage_options`` to ``fsspec.open`` only on its pyarrow path
    (``read_parquet``/``read_csv`` with ``use_pyarrow=True``; its own readers take cloud
    URLs only), as one flat dict of strings: aicache's options and the target's together."""
    import polars as pl

    ref = pl.read_parquet(io.BytesIO(source[f"{BUCKET}/tab/t.parquet"]))
    opts = {"target_protocol": "s3", "key": "testing", "secret": "testing",
            "endpoint_url": s3.endpoint_url, "cache_size": "1GiB", "block_size": "4MiB",
            "metadata_ttl": "60", "max_prefetch": "8", "share_engine": "true",
            "free_space_ratio": "0.1", "request_timeout": "none"}
    got = pl.read_parquet(f"aicache://{BUCKET}/tab/t.parquet", use_pyarrow=True, storage_options=opts)
    assert got.equals(ref)
    csv = pl.read_csv(f"aicache://{BUCKET}/csv/t.csv", use_pyarrow=True, storage_options=opts)
    assert csv.equals(pl.read_csv(io.BytesIO(source[f"{BUCKET}/csv/t.csv"])))
    # Polars' lazy reader takes an open file of any fsspec filesystem
    with fsspec.open(f"aicache://{BUCKET}/tab/t.parquet", **opts) as f:
        assert pl.scan_parquet(f).filter(pl.col("id") < 100).collect().equals(ref.head(100))
    with pytest.raises(BadInput, match="cache_size 'lots' is not a size"):
        pl.read_parquet(f"aicache://{BUCKET}/tab/t.parquet", use_pyarrow=True,
                        storage_options={**opts, "cache_size": "lots"})


def test_every_option_in_its_string_form_names_the_same_engine(tmp_path: Path) -> None:
    typed = {"cache_size": 1 << 30, "block_size": 1 << 20, "max_prefetch": 4,
             "max_prefetch_bytes": 64 << 20, "retries": 2, "request_timeout": 5.0,
             "metadata_ttl": 30.0, "seed": 7, "daemon": False, "verify_checksum": "full",
             "mmap_bytes": 0, "share_engine": True, "cache_mode": 0o640,
             "free_space_ratio": 0.2}
    text = {"cache_size": "1GiB", "block_size": "1MiB", "max_prefetch": "4",
            "max_prefetch_bytes": "64MiB", "retries": "2", "request_timeout": "5s",
            "metadata_ttl": "30", "seed": "7", "daemon": "false", "verify_checksum": "FULL",
            "mmap_bytes": "0", "share_engine": "yes", "cache_mode": "0640",
            "free_space_ratio": "0.2"}
    a = AICacheFileSystem(target_protocol="file", cache_dir=str(tmp_path / "c"), **typed)
    b = AICacheFileSystem(target_protocol="file", cache_dir=str(tmp_path / "c"), **text)
    try:
        assert a is not b and a._spec.differences(b._spec) == [] and a.engine is b.engine
        for name, bad in [("max_prefetch", "many"), ("retries", "-1"), ("metadata_ttl", "soon"),
                          ("share_engine", "perhaps"), ("free_space_ratio", "half"),
                          ("block_size", "big"), ("request_timeout", "-3"),
                          ("target_options", "{not json")]:
            with pytest.raises(BadInput, match=name):
                AICacheFileSystem(target_protocol="file", cache_dir=str(tmp_path / "d"),
                                  skip_instance_cache=True, **{**text, name: bad})
    finally:
        a.close()
        b.close()


# -- HuggingFace datasets -----------------------------------------------------------------------
def test_hf_datasets_load_and_stream_on_the_default_cache_dir_beside_another_target(
        s3: S3Server, source: dict[str, bytes], home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``datasets`` builds filesystems of its own from ``storage_options`` while the job
    already holds one of another target on the same (default) cache directory.

    The URL is ``aicache://…`` with the target in ``storage_options["aicache"]``: a chained
    ``aicache::s3://…`` data file is not a URL ``datasets`` keeps whole (it re-appends the
    part after ``::`` to every file it globs)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # nothing under the user's home
    import datasets

    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "x.bin").write_bytes(b"local bytes")
    mine = fsspec.filesystem("aicache", target_protocol="file")  # the job's own, default dir
    assert mine.cat_file(str(tmp_path / "local" / "x.bin")) == b"local bytes"
    ref = pq.read_table(io.BytesIO(source[f"{BUCKET}/tab/t.parquet"])).to_pylist()
    so = {"aicache": _defaults(s3)}
    url = f"aicache://{BUCKET}/tab/*.parquet"
    ds = datasets.load_dataset("parquet", data_files=url, storage_options=so, split="train",
                               cache_dir=str(tmp_path / "hf"))
    assert ds.to_list() == ref
    streamed = datasets.load_dataset("parquet", data_files=url, storage_options=so,
                                     split="train", streaming=True)
    assert list(streamed) == ref
    assert home.is_dir() and mine.cat_file(str(tmp_path / "local" / "x.bin")) == b"local bytes"


# -- pyarrow and zarr ---------------------------------------------------------------------------
def test_pyarrow_reads_right_and_a_warm_read_asks_the_remote_nothing(
        s3: S3Server, source: dict[str, bytes], home: Path) -> None:
    fs = fsspec.filesystem("aicache", **_defaults(s3))
    ref = pq.read_table(io.BytesIO(source[f"{BUCKET}/tab/t.parquet"]))
    assert pq.read_table(f"{BUCKET}/tab/t.parquet", filesystem=fs).equals(ref)
    warm, calls = _requests_during(s3, lambda: pq.read_table(f"{BUCKET}/tab/t.parquet", filesystem=fs))
    assert warm.equals(ref) and calls == Counter()
    # a dataset over the folder (a listing, then each file)
    import pyarrow.dataset as pds

    def folder() -> pa.Table:
        return pds.dataset(f"{BUCKET}/tab", filesystem=fs, format="parquet").to_table()

    assert folder().equals(ref)
    warm, calls = _requests_during(s3, folder)
    assert warm.equals(ref) and calls == Counter()


def test_zarr_reads_right_through_aicache(s3: S3Server, home: Path) -> None:
    import zarr
    from zarr.storage import FsspecStore

    data = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 7
    out = FsspecStore.from_url(f"s3://{BUCKET}/z.zarr", read_only=False,
                               storage_options={**s3.client_options, "skip_instance_cache": True})
    w = zarr.create_array(out, shape=data.shape, chunks=(16, 16), dtype=data.dtype)
    w[:] = data
    store = FsspecStore.from_url(f"aicache://{BUCKET}/z.zarr", read_only=True,
                                 storage_options=_defaults(s3))
    r = zarr.open_array(store, mode="r")
    assert np.array_equal(r[:], data) and np.array_equal(r[5:37, 20:21], data[5:37, 20:21])
    warm, calls = _requests_during(s3, lambda: zarr.open_array(store, mode="r")[:])
    assert np.array_equal(warm, data) and calls == Counter()


# -- metadata within the TTL --------------------------------------------------------------------
def test_metadata_within_the_ttl_is_answered_from_the_cache(
        s3: S3Server, source: dict[str, bytes], home: Path) -> None:
    """As documented (``metadata_ttl``, 60 s by default): after the first call, ``info``,
    ``size``, ``exists``, ``isfile``, ``isdir``, ``modified`` make no HEAD and ``ls``,
    ``find``, ``glob``, ``walk`` no LIST — and agree with the target's own answers."""
    fs = fsspec.filesystem("aicache", **_defaults(s3))
    raw = fsspec.filesystem("s3", **s3.client_options, skip_instance_cache=True)
    f, d = f"{BUCKET}/tab/t.parquet", f"{BUCKET}/tab"

    def ask() -> list[Any]:
        return [fs.info(f)["size"], fs.size(f), fs.exists(f), fs.exists(f + ".nope"),
                fs.isfile(f), fs.isdir(d), fs.isdir(f), fs.modified(f),
                sorted(fs.ls(d, detail=False)), sorted(fs.find(BUCKET)), sorted(fs.glob(f"{BUCKET}/*/*.csv")),
                [(r, sorted(fl)) for r, _d, fl in fs.walk(BUCKET)]]

    first, cold = _requests_during(s3, ask)
    assert cold["head"] + cold["list"] > 0  # the server does count them
    assert first == [len(source[f]), len(source[f]), True, False, True, True, False,
                     raw.modified(f), sorted(raw.ls(d, detail=False)), sorted(raw.find(BUCKET)),
                     sorted(raw.glob(f"{BUCKET}/*/*.csv")),
                     [(r, sorted(fl)) for r, _d, fl in raw.walk(BUCKET)]]
    again, warm = _requests_during(s3, ask)
    assert again == first and warm == Counter()


# -- stats --------------------------------------------------------------------------------------
def test_hit_bytes_counts_the_bytes_served_not_the_blocks(
        s3: S3Server, source: dict[str, bytes], home: Path) -> None:
    path = max((p for p in source if "/samples/" in p), key=lambda p: len(source[p]))
    assert len(source[path]) > 6000
    fs = fsspec.filesystem("aicache", **_defaults(s3))
    assert fs.cat_file(path) == source[path]  # cold: one miss
    before = fs.engine.metrics.value("hit_bytes")
    for i in range(0, 1040, 10):  # 104 one-byte reads, every one a hit
        assert fs.cat_file(path, start=i, end=i + 1) == source[path][i:i + 1]
    with fs.open(path) as f:  # an open file: the first read is the access, later ones too
        f.seek(5000)
        assert f.read(3) == source[path][5000:5003] and f.read(7) == source[path][5003:5010]
    assert fs.engine.metrics.value("hit_bytes") - before == 104 + 10
    cache_dir = fs.engine.store.cache_dir
    fs.close()
    AICacheFileSystem.clear_instance_cache()
    gc.collect()  # the engine closes: its counters are written for `aicache cache stats`
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "cache", "stats", "--cache-dir",
                        cache_dir, "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hit_bytes"] == 104 + 10


# -- the policy daemon --------------------------------------------------------------------------
_DAEMON_CLIENT = """
import sys, fsspec, aicache.datacache.fs
fs = fsspec.filesystem("aicache", target_protocol="file", cache_dir=sys.argv[1], daemon=True)
assert fs.cat_file(sys.argv[2]) == b"daemon bytes"
assert fs.engine.policy_name
"""


def test_a_shared_policy_daemon_exits_soon_after_its_last_client(tmp_path: Path) -> None:
    """The daemon holds ``daemon.lock`` for its whole life: once a client process has
    read and exited, the lock is free again within the idle timeout (polled, bounded)."""
    src = tmp_path / "x.bin"
    src.write_bytes(b"daemon bytes")
    cache = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-c", _DAEMON_CLIENT, str(cache), str(src)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "serving" in (cache / "daemon.log").read_text()  # the client started one
    lock = os.open(cache / "daemon.lock", os.O_RDWR)
    try:
        deadline = time.monotonic() + IDLE_EXIT_S + 30
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, f"the daemon outlived {IDLE_EXIT_S + 30:g} s"
                time.sleep(0.2)
    finally:
        os.close(lock)
    assert not (cache / "policy.sock").exists()


# -- what each client costs at the server: fetch what is read ---------------------------------
def test_each_client_fetches_what_it_reads_cold_and_nothing_warm() -> None:
    """``benchmarks/client_requests.py`` (the table in docs/results/clients): per client,
    against the bytes it read (s3fs with no cache: one GET of exactly each read's range),
    aicache's cold bytes are at most 1.25x; warm (within ``metadata_ttl``) it asks the
    remote nothing; its results equal s3fs's; and its cold requests are no more than
    s3fs's on its defaults for the Parquet readers, zarr, safetensors and ``.npy`` (where
    s3fs's 50 MB readahead makes one GET of the whole file), and no more than one exact
    GET per read for the CSV stream (s3fs: one GET of the whole 5 MB file; aicache: one
    per 4 MiB block)."""
    from script_module import load_script

    bench = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "client_requests.py",
                        "client_requests_bench")
    rows = {r.client: r for r in bench.measure(rows=100_000)}
    assert len(rows) == 8
    for name, r in rows.items():
        assert r.same, f"{name}: aicache's result differs from s3fs's"
        assert r.aicache_warm.requests == 0, f"{name}: warm read asked the remote {r.aicache_warm}"
        assert r.read.get_bytes > 0
        assert r.aicache_cold.get_bytes <= 1.25 * r.read.get_bytes, \
            f"{name}: fetched {r.aicache_cold.get_bytes} for {r.read.get_bytes} read"
        ref = r.read if "csv" in name else r.s3fs_cold
        assert r.aicache_cold.requests <= ref.requests, \
            f"{name}: {r.aicache_cold} requests against s3fs's {ref}"
