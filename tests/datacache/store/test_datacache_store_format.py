"""The on-disk format does not drift: a cache directory written by an earlier build of the
store opens, verifies and serves the same bytes, and today's store writes the same files.

``data/store_v2.tar.gz`` is a cache directory that :func:`build` wrote with the store as it
was before it became a package (one module, ``datacache/store.py``); regenerate it only on
a deliberate format change (bump ``FORMAT_VERSION``), with
``python tests/datacache/store/test_datacache_store_format.py OUT.tar.gz``. The reference for every byte is
the payloads themselves (seeded, rebuilt here) and their SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import tarfile
from pathlib import Path

from aicache.datacache.keys import BlockKey
from aicache.datacache.store import HEADER_SIZE, BlockStore, encode_block

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "store_v2.tar.gz"
BLOCK = 16 * 1024
CAPACITY = 4 * 1024 * 1024


def payloads() -> dict[BlockKey, bytes]:
    """The blocks :func:`build` stores: several files, versions and sizes (empty, one
    byte, a page, a full block), and a path that is not UTF-8 (kept as raw bytes)."""
    rng = random.Random(20261207)
    out: dict[BlockKey, bytes] = {}
    paths = ["bucket/a.bin", "bucket/dir/b.parquet", os.fsdecode(b"bucket/\xffodd")]
    sizes = [0, 1, 4096, BLOCK, BLOCK - 1, 777]
    for i, size in enumerate(sizes * 2):
        key = BlockKey(paths[i % len(paths)], f"etag-{i % 2}", i)
        out[key] = rng.randbytes(size)
    return out


def build(cache_dir: str) -> None:
    """Write :func:`payloads` through the store's public API, in order."""
    with BlockStore(cache_dir, CAPACITY, BLOCK) as s:
        for key, data in payloads().items():
            assert s.put(key, data)


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _extract(tmp_path: Path) -> str:
    with tarfile.open(GOLDEN) as tar:
        tar.extractall(tmp_path, filter="data")
    cache = tmp_path / "cache"
    os.chmod(cache, 0o700)  # the data filter keeps modes; make the owner-only mode sure
    return str(cache)


def _block_files(cache_dir: str) -> dict[str, str]:
    """digest → SHA-256 of every block file under ``blocks/``."""
    out = {}
    for root, _dirs, files in os.walk(os.path.join(cache_dir, "blocks")):
        for name in files:
            out[name] = _sha(Path(root, name).read_bytes())
    return out


def test_a_cache_dir_written_before_the_split_opens_verifies_and_serves_its_bytes(
        tmp_path: Path) -> None:
    cache = _extract(tmp_path)
    want = payloads()
    with BlockStore(cache, CAPACITY, BLOCK) as s:
        assert s.rebuilt is None  # the index was read, not rebuilt from the headers
        r = s.verify(clean=False)
        assert (r.checked, r.bad, r.missing, r.orphans, r.misplaced) == (len(want), 0, 0, 0, 0)
        assert s.keys() == list(want)  # paths (the non-UTF-8 one too) and order kept
        for key, data in want.items():
            got = s.get(key)
            assert got is not None and _sha(got) == _sha(data)
            assert s.get(key) is not None  # the second read takes the verified path
    with BlockStore.open_existing(cache) as s:
        assert (s.capacity, s.block_size) == (CAPACITY, BLOCK)


def test_the_store_writes_the_same_block_files_as_before(tmp_path: Path) -> None:
    golden = _block_files(_extract(tmp_path / "old"))
    fresh = str(tmp_path / "new")
    build(fresh)
    assert _block_files(fresh) == golden
    want = {k.digest(BLOCK) + ".blk": _sha(encode_block(k, d, BLOCK))
            for k, d in payloads().items()}
    assert golden == want
    assert all(len(encode_block(k, d, BLOCK)) == HEADER_SIZE + len(d)
               for k, d in payloads().items())


if __name__ == "__main__":  # regenerate the golden directory (see the module docstring)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        build(os.path.join(tmp, "cache"))
        with tarfile.open(sys.argv[1], "w:gz") as tar:
            tar.add(os.path.join(tmp, "cache"), arcname="cache")
