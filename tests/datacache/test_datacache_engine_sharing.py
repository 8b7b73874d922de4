"""One engine per cache directory and target per process (:mod:`aicache.datacache.sharing`):
the README's ``fsspec.open("aicache::s3://…")`` loop keeps threads and descriptors flat,
equal options share, different ones are refused, several targets share one directory
without mixing their blocks, engines close with their last filesystem, and a forked worker
gets an engine of its own."""

from __future__ import annotations

import gc
import hashlib
import json
import multiprocessing
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import fsspec
import pytest
from fsspec.spec import AbstractFileSystem

from aicache.datacache.fs import AICacheFileSystem
from aicache.datacache.sharing import ENGINES
from aicache.errors import BadInput
from s3fixtures import s3  # noqa: F401 - fixture

BLOCK = 64 * 1024
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture()
def local(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(5)
    files = {}
    for i in range(6):
        data = rng.randbytes(rng.randrange(1, 3 * BLOCK))
        (src / f"f{i}.bin").write_bytes(data)
        files[str(src / f"f{i}.bin")] = data
    yield tmp_path, files
    fsspec.get_filesystem_class("aicache").clear_instance_cache()
    gc.collect()


def _opts(tmp_path: Path, **kw: object) -> dict[str, object]:
    return {"cache_dir": str(tmp_path / "cache"), "cache_size": "16MiB", "block_size": BLOCK, **kw}


def _chained(path: str, aic: dict[str, object]) -> tuple[bytes, AICacheFileSystem]:
    with fsspec.open(f"aicache::file://{path}", "rb", aicache=aic) as f:
        return f.read(), f.fs


def test_chained_urls_with_equal_options_share_one_engine_across_files_and_threads(local) -> None:
    tmp_path, files = local
    aic = _opts(tmp_path)
    seen = []
    for path, data in files.items():
        got, fs = _chained(path, aic)
        assert got == data
        seen.append(fs)
    assert all(fs is seen[0] for fs in seen)  # fsspec's instance cache: "fo" is not the key
    out: list[tuple[bytes, AICacheFileSystem]] = []
    path = sorted(files)[2]
    threads = [threading.Thread(target=lambda: out.append(_chained(path, aic))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got for got, _fs in out] == [files[path]] * 4
    # fsspec keeps an instance per thread; they all read through the one engine
    assert {id(fs.engine) for _got, fs in out} == {id(seen[0].engine)}
    assert ENGINES.open_dirs()[os.path.realpath(tmp_path / "cache")] == len({id(seen[0])} | {id(fs) for _g, fs in out})


def test_other_options_on_an_open_cache_dir_are_refused_by_name(local) -> None:
    tmp_path, files = local
    path = sorted(files)[0]
    _chained(path, _opts(tmp_path))
    with pytest.raises(BadInput, match=r"block_size=131072 \(open: 65536\)") as e:
        _chained(path, _opts(tmp_path, block_size=2 * BLOCK))
    assert "another cache_dir" in str(e.value)
    with pytest.raises(BadInput, match=r"cache_size=.*policy='lru' \(open: 'chiron'\)"):
        _chained(path, _opts(tmp_path, cache_size="8MiB", policy="lru"))
    # another target is an engine of its own on the same directory, with the same options only
    with pytest.raises(BadInput, match=r"block_size=131072 \(open: 65536\)"):
        AICacheFileSystem(target_protocol="memory", **_opts(tmp_path, block_size=2 * BLOCK))
    # another cache dir is another engine; skip_instance_cache gives a private one
    got, other = _chained(path, _opts(tmp_path, cache_dir=str(tmp_path / "c2"), block_size=2 * BLOCK))
    assert got == files[path]
    private = AICacheFileSystem(target_protocol="file", skip_instance_cache=True,
                                **_opts(tmp_path, block_size=2 * BLOCK))
    try:
        assert private.cat_file(path) == files[path]
        assert private.engine is not _chained(path, _opts(tmp_path))[1].engine
    finally:
        private.close()
    assert private.engine._closed


class _TwinStore(AbstractFileSystem):
    """A generic target (no ETag, no inode): each ``store`` option names its own files, all
    with one mtime, so two stores can hold one path with one size and one mtime."""

    protocol = "twin-test"
    STORES: dict[str, dict[str, bytes]] = {}

    def __init__(self, store: str, **kwargs: object) -> None:
        super().__init__(store=store, **kwargs)
        self.files = self.STORES[store]

    def _entry(self, path: str) -> dict[str, object]:
        return {"name": path, "size": len(self.files[path]), "type": "file", "mtime": 1.0e9}

    def info(self, path: str, **kwargs: object) -> dict[str, object]:
        path = self._strip_protocol(path)
        if path in self.files:
            return self._entry(path)
        if any(f.startswith(path.rstrip("/") + "/") for f in self.files):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def ls(self, path: str, detail: bool = True, **kwargs: object) -> list[object]:
        path = self._strip_protocol(path).rstrip("/")
        out = [self._entry(f) for f in sorted(self.files) if f.rsplit("/", 1)[0] == path]
        return out if detail else [e["name"] for e in out]

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: object) -> bytes:
        return self.files[self._strip_protocol(path)][start:end]


def test_two_targets_share_one_cache_dir_and_never_each_others_blocks(local) -> None:
    """The default cache dir serves every target of a process: one engine per target, and
    one path with one size and one mtime on two generic targets (whose versions would
    otherwise be equal) reads each target's own bytes, cold and warm."""
    tmp_path, _files = local
    _TwinStore.STORES.update(a={"/d/x.bin": b"a" * (BLOCK + 5)}, b={"/d/x.bin": b"b" * (BLOCK + 5)})
    fa = AICacheFileSystem(fs=_TwinStore(store="a"), **_opts(tmp_path))
    fb = AICacheFileSystem(fs=_TwinStore(store="b"), **_opts(tmp_path))
    assert fa.engine is not fb.engine
    assert ENGINES.engines_of(os.path.realpath(tmp_path / "cache")) == 2
    for _ in range(2):  # cold, then from the cache
        assert fa.cat_file("/d/x.bin") == _TwinStore.STORES["a"]["/d/x.bin"]
        assert fb.cat_file("/d/x.bin") == _TwinStore.STORES["b"]["/d/x.bin"]
    assert fa.engine.metrics.value("hits") >= 2 and fb.engine.metrics.value("hits") >= 2
    # the same store reached again (another instance, equal options) shares the blocks
    fa2 = AICacheFileSystem(fs=_TwinStore(store="a", skip_instance_cache=True),
                            **_opts(tmp_path, skip_instance_cache=True))
    try:
        assert fa2.cat_file("/d/x.bin") == _TwinStore.STORES["a"]["/d/x.bin"]
        assert fa2.engine.metrics.value("misses") == 0
    finally:
        fa2.close()


def test_the_engine_closes_with_its_last_filesystem(local) -> None:
    tmp_path, files = local
    path = sorted(files)[1]
    a = AICacheFileSystem(target_protocol="file", **_opts(tmp_path))
    b = AICacheFileSystem(target_protocol="file", **_opts(tmp_path), seed=0, retries=3)
    assert a is not b and a.engine is b.engine  # other fsspec tokens, the same engine
    engine = a.engine
    key = os.path.realpath(tmp_path / "cache")
    assert ENGINES.open_dirs().get(key) == 2
    a.close()
    assert not engine._closed and b.cat_file(path) == files[path]
    a.close()  # a second close gives back nothing more
    assert ENGINES.open_dirs().get(key) == 1
    del b  # garbage collection gives back the last lease (after the instance cache forgets it)
    AICacheFileSystem.clear_instance_cache()
    gc.collect()
    assert engine._closed and key not in ENGINES.open_dirs()
    c = AICacheFileSystem(target_protocol="file", **_opts(tmp_path))
    assert c.engine is not engine and c.cat_file(path) == files[path]  # a new one, same cache
    assert c.engine.metrics.value("hits") >= 1


def _child_reads(fs: AICacheFileSystem, path: str, parent_engine_id: int, q: multiprocessing.Queue) -> None:
    q.put((fs.cat_file(path), id(fs.engine) != parent_engine_id, ENGINES.generation))


def test_a_forked_worker_reads_through_an_engine_of_its_own(local) -> None:
    """A DataLoader worker inherits a filesystem built in the parent: its first read takes
    a fresh engine (the parent's index connection and threads are not the child's)."""
    tmp_path, files = local
    path = sorted(files)[3]
    fs = AICacheFileSystem(target_protocol="file", **_opts(tmp_path))
    assert fs.cat_file(path) == files[path]
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_reads, args=(fs, path, id(fs.engine), q))
    p.start()
    got, fresh, generation = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and got == files[path] and fresh and generation != ENGINES.generation
    assert fs.cat_file(path) == files[path] and not fs.engine._closed  # the parent's is untouched


def test_a_long_fsspec_open_loop_keeps_threads_and_descriptors_flat(s3, tmp_path) -> None:  # noqa: F811
    """The README pattern over moto S3, 2,000 files, in a child under ``ulimit -n 1024``
    (an engine per file ran out of descriptors at file 338). Counts at file 100 and 2,000
    may differ by at most the prefetch pool's growth (it starts threads on demand, up to
    ``max_prefetch``) and that many pooled remote connections."""
    n, max_prefetch = 2000, 4
    rng = random.Random(11)
    blobs = {f"aicache-test/loop/f{i:05d}.bin": rng.randbytes(rng.randrange(1, 4096)) for i in range(n)}
    s3.filesystem().pipe(blobs)
    spec = {"endpoint": s3.endpoint_url, "out": str(tmp_path / "out.json"), "samples": [100, n],
            "files": [[p, hashlib.sha256(d).hexdigest()] for p, d in sorted(blobs.items())],
            "aicache": {"cache_dir": str(tmp_path / "cache"), "cache_size": "64MiB",
                        "block_size": BLOCK, "max_prefetch": max_prefetch}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = subprocess.run([sys.executable, str(TESTS / "fsspec_loop_child.py"), str(tmp_path / "spec.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["read"] == n and out["wrong"] == []
    (fds_100, threads_100), (fds_n, threads_n) = out["samples"]["100"], out["samples"][str(n)]
    assert threads_n - threads_100 <= max_prefetch, out
    assert fds_n - fds_100 <= 2 * max_prefetch, out
