"""Consistency with the remote: what a long-lived engine, fsspec filesystem and FUSE mount
see after the remote changes (docs/consistency.md).

Real components: moto's S3 server on loopback (with s3fs's own listing cache on, as users
run it), real local files, real FUSE mounts. Time is an injected clock or an explicit
``metadata_ttl`` of 0: no test sleeps for a TTL to pass.
"""

from __future__ import annotations

import errno
import hashlib
import http.server
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import fsspec
import pytest
from s3fixtures import s3, s3_mount_options, start_mount, stop_mount  # noqa: F401

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.fs import AICacheFileSystem
from aicache.datacache.fuse import fuse_available
from aicache.datacache.keys import BlockKey
from aicache.testing import S3Server, SlowFileSystem

BLOCK = 64 * 1024
BUCKET = "aicache-consistency"



class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def s3fs_with_listing_cache(server: S3Server):
    """s3fs as users get it: listings cached (``use_listings_cache`` left on)."""
    opts = dict(server.storage_options)
    opts.pop("use_listings_cache")
    return fsspec.filesystem("s3", **opts)


def rand(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture()
def prefix(s3: S3Server, request: pytest.FixtureRequest) -> str:  # noqa: F811
    fs = s3.filesystem()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    return f"{BUCKET}/" + "".join(c if c.isalnum() else "-" for c in request.node.name)  # no globs


def engine(target, cache_dir: Path, ttl: float, **kw) -> CacheEngine:
    return CacheEngine(target, str(cache_dir), 64 << 20, policy="lru",
                       params=EngineParams(block_size=BLOCK, metadata_ttl_s=ttl), **kw)


# -- S3 through the engine and the fsspec filesystem --------------------------------------
def test_s3_overwrite_is_seen_after_the_ttl(s3: S3Server, prefix: str, tmp_path: Path) -> None:  # noqa: F811
    remote = s3fs_with_listing_cache(s3)
    path = f"{prefix}/a.bin"
    old, new = rand(1, 3 * BLOCK), rand(2, 3 * BLOCK)
    remote.pipe_file(path, old)
    with engine(remote, tmp_path / "c0", ttl=0.0) as e:  # TTL 0: every stat asks
        assert e.read(path) == old
        s3.filesystem().pipe_file(path, new)  # another writer
        assert e.read(path) == new
    s3.filesystem().pipe_file(path, old)
    clock = Clock()
    with engine(remote, tmp_path / "c", ttl=30.0, clock=clock) as e:
        assert e.read(path) == old
        s3.filesystem().pipe_file(path, new)
        assert e.read(path) == old  # within the TTL: the metadata (and blocks) it has
        clock.t += 30.0
        assert e.read(path) == new
        assert e.read(path, BLOCK + 5, 100) == new[BLOCK + 5:BLOCK + 105]


def test_s3_delete_and_new_object_are_seen(s3: S3Server, prefix: str, tmp_path: Path) -> None:  # noqa: F811
    remote = s3fs_with_listing_cache(s3)
    gone, born = f"{prefix}/gone.bin", f"{prefix}/born.bin"
    remote.pipe_file(gone, rand(3, BLOCK + 7))
    remote.pipe_file(f"{prefix}/stay.bin", b"x")
    fs = AICacheFileSystem(fs=remote, cache_dir=str(tmp_path / "c"), cache_size="64MiB",
                           block_size=BLOCK, policy="lru", metadata_ttl=0.0, skip_instance_cache=True)
    try:
        assert fs.cat_file(gone) == rand(3, BLOCK + 7)
        assert sorted(fs.ls(prefix, detail=False)) == sorted([gone, f"{prefix}/stay.bin"])
        other = s3.filesystem()
        other.rm(gone)
        other.pipe_file(born, rand(4, 2 * BLOCK))
        with pytest.raises(FileNotFoundError):
            fs.cat_file(gone)
        with pytest.raises(FileNotFoundError):
            fs.open(gone)
        assert not fs.exists(gone)
        assert fs.cat_file(born) == rand(4, 2 * BLOCK)
        assert sorted(fs.ls(prefix, detail=False)) == sorted([born, f"{prefix}/stay.bin"])
        assert sorted(fs.find(prefix)) == sorted([born, f"{prefix}/stay.bin"])
        assert fs.info(born)["size"] == 2 * BLOCK
    finally:
        fs.close()


def test_s3_open_file_never_mixes_versions(s3: S3Server, prefix: str, tmp_path: Path) -> None:  # noqa: F811
    remote = s3fs_with_listing_cache(s3)
    path = f"{prefix}/span.bin"
    old, new = rand(5, 4 * BLOCK), rand(6, 4 * BLOCK)  # same size: only the version tells
    remote.pipe_file(path, old)
    fs = AICacheFileSystem(fs=remote, cache_dir=str(tmp_path / "c"), cache_size="64MiB",
                           block_size=BLOCK, policy="lru", metadata_ttl=0.0, skip_instance_cache=True)
    try:
        f = fs.open(path)
        old_version = f.meta.version
        assert f.read(BLOCK) == old[:BLOCK]
        s3.filesystem().pipe_file(path, new)
        with pytest.raises(OSError) as err:
            f.read()  # blocks 1..3 of the old version are gone from the remote
        assert err.value.errno == errno.ESTALE
        for i in range(4):  # nothing of the new version is stored under the old key
            got = fs.engine.store.get(BlockKey(path, old_version, i))
            assert got is None or got == old[i * BLOCK:(i + 1) * BLOCK]
        assert fs.engine.stats()["versions_gone"] >= 1
        with fs.open(path) as g:  # a new open reads the new version whole
            assert g.read() == new
    finally:
        fs.close()


def test_s3_versioned_bucket_reads_the_opened_version_to_the_end(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    remote = s3fs_with_listing_cache(s3)
    bucket = "aicache-versioned"
    if not remote.exists(bucket):
        remote.mkdir(bucket)
    remote.call_s3("put_bucket_versioning", Bucket=bucket,
                   VersioningConfiguration={"Status": "Enabled"})
    path = f"{bucket}/v.bin"
    old, new = rand(7, 3 * BLOCK), rand(8, 3 * BLOCK)
    remote.pipe_file(path, old)
    with engine(remote, tmp_path / "c", ttl=0.0) as e:
        meta = e.stat(path)
        assert e.read_meta(meta, 0, BLOCK) == old[:BLOCK]
        s3.filesystem().pipe_file(path, new)
        assert e.read_meta(meta, BLOCK) == old[BLOCK:]  # the old version is still there
        assert e.read(path) == new
        assert meta.pin  # its VersionId pinned those reads


def test_s3_open_asks_with_its_first_page_and_reads_that_version(
        s3: S3Server, prefix: str, tmp_path: Path) -> None:  # noqa: F811
    """An open that must ask the remote makes one GET of the file's first page instead of
    a HEAD (S3 answers a range read with the object's size, ETag and VersionId), and keeps
    the page: the header a reader reads first costs no second request. The version is the
    one s3fs's ``info`` (a HEAD) names; a whole small file is one request in all; an empty
    object, a missing path and a folder answer as they did with a HEAD."""
    remote = s3fs_with_listing_cache(s3)
    sizes = {"big": 3 * BLOCK + 5, "small": 100, "empty": 0}
    files = {f"{prefix}/{name}/f.bin": rand(11 + i, n) for i, (name, n) in enumerate(sizes.items())}
    big, small, empty = files
    remote.pipe(files)  # one folder each: each open is the first in its folder (no listing)
    fs = AICacheFileSystem(fs=remote, cache_dir=str(tmp_path / "c"), cache_size="64MiB",
                           block_size=BLOCK, policy="lru", skip_instance_cache=True)
    try:
        head = s3.filesystem().info(big)
        before = s3.requests.snapshot()
        with fs.open(big) as f:
            assert f.read(8) + f.read(92) == files[big][:100]  # a header read: the open's page
            assert s3.requests.snapshot() - before == {"get": 1}
            assert (f.size, f.meta.version) == (head["size"], "etag:" + head["ETag"].strip('"'))
            f.seek(2 * BLOCK + 3)
            assert f.read(1000) == files[big][2 * BLOCK + 3:2 * BLOCK + 1003]
        assert fs.info(big)["size"] == len(files[big])  # the open's record answers info
        before = s3.requests.snapshot()
        with fs.open(small) as f:
            assert f.read() == files[small]
        assert fs.cat_file(small) == files[small]
        assert s3.requests.snapshot() - before == {"get": 1}
        with fs.open(empty) as f:  # S3 refuses a range of an empty object: info answers
            assert f.size == 0 and f.read() == b""
        with pytest.raises(FileNotFoundError):
            fs.open(f"{prefix}/none/f.bin")
        with pytest.raises(IsADirectoryError):
            fs.open(f"{prefix}/big")
        before = s3.requests.snapshot()
        with fs.open(big) as f:  # the same reads again, within the TTL: nothing asked
            assert f.read(100) == files[big][:100]
            f.seek(2 * BLOCK + 3)
            assert f.read(1000) == files[big][2 * BLOCK + 3:2 * BLOCK + 1003]
        assert fs.cat_file(small) == files[small] and fs.cat_file(empty) == b""
        assert s3.requests.snapshot() - before == {}
    finally:
        fs.close()


def test_s3_versioned_bucket_open_is_pinned_by_the_version_its_first_page_named(
        s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    remote = s3fs_with_listing_cache(s3)
    bucket = "aicache-versioned-open"
    if not remote.exists(bucket):
        remote.mkdir(bucket)
    remote.call_s3("put_bucket_versioning", Bucket=bucket,
                   VersioningConfiguration={"Status": "Enabled"})
    path = f"{bucket}/v.bin"
    old, new = rand(21, 3 * BLOCK), rand(22, 3 * BLOCK)
    remote.pipe_file(path, old)
    fs = AICacheFileSystem(fs=remote, cache_dir=str(tmp_path / "c"), cache_size="64MiB",
                           block_size=BLOCK, policy="lru", metadata_ttl=0.0, skip_instance_cache=True)
    try:
        with fs.open(path) as f:
            assert f.meta.pin == s3.filesystem().info(path)["VersionId"]
            assert f.read(10) == old[:10]
            s3.filesystem().pipe_file(path, new)
            f.seek(BLOCK + 1)
            assert f.read() == old[BLOCK + 1:]  # the opened version, to the end
        with fs.open(path) as f:
            assert f.read() == new
        before, got = s3.requests.snapshot(), s3.requests.get_bytes
        with fs.open(path) as f:  # a file seen before (TTL 0: asked again): a HEAD, no
            assert f.read() == new  # first-page GET (its page may well be held: it is)
        assert (s3.requests.snapshot() - before, s3.requests.get_bytes - got) == ({"head": 1}, 0)
    finally:
        fs.close()


# -- local files ----------------------------------------------------------------------------
def rewrite_keeping_size_and_mtime(p: Path, data: bytes, *, rename: bool) -> None:
    """What ``cp -p`` (in place) or ``rsync -t`` (a temp file renamed over) leave: same
    size, same mtime (to the nanosecond), new bytes."""
    st = p.stat()
    if rename:
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, p)
    else:
        p.write_bytes(data)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = p.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


NEW_PROCESS = textwrap.dedent("""
    import hashlib, sys
    import fsspec
    from aicache.datacache.engine import CacheEngine, EngineParams
    path, cache, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with CacheEngine(fsspec.filesystem("file"), cache, 64 << 20, policy="lru",
                     params=EngineParams(block_size=block)) as e:
        print(hashlib.sha256(e.read(path)).hexdigest())
""")


@pytest.mark.parametrize("rename", [False, True], ids=["cp-p", "rsync-t"])
def test_local_same_size_rewrite_with_mtime_restored_is_seen(tmp_path: Path, rename: bool) -> None:
    src = tmp_path / "src"
    src.mkdir()
    p = src / "shard.bin"
    old, new = rand(9, 3 * BLOCK + 11), rand(10, 3 * BLOCK + 11)
    p.write_bytes(old)
    cache = tmp_path / "cache"
    local = fsspec.filesystem("file")
    with engine(local, cache, ttl=0.0) as e:
        assert e.read(str(p)) == old
        rewrite_keeping_size_and_mtime(p, new, rename=rename)
        assert e.read(str(p)) == new
    rewrite_keeping_size_and_mtime(p, old, rename=rename)
    with engine(local, cache, ttl=60.0) as e:  # the old version's blocks are still cached
        assert e.read(str(p)) == old
    rewrite_keeping_size_and_mtime(p, new, rename=rename)
    out = subprocess.run([sys.executable, "-c", NEW_PROCESS, str(p), str(cache), str(BLOCK)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == hashlib.sha256(new).hexdigest()


def test_local_file_rewritten_while_open_fails_the_read(tmp_path: Path) -> None:
    p = tmp_path / "f.bin"
    old, new = rand(11, 3 * BLOCK), rand(12, 3 * BLOCK)
    p.write_bytes(old)
    with engine(fsspec.filesystem("file"), tmp_path / "c", ttl=0.0) as e:
        meta = e.stat(str(p))
        assert e.read_meta(meta, 0, BLOCK) == old[:BLOCK]
        rewrite_keeping_size_and_mtime(p, new, rename=False)
        with pytest.raises(OSError) as err:
            e.read_meta(meta, BLOCK, BLOCK)
        assert err.value.errno == errno.ESTALE
        assert e.store.get(BlockKey(meta.path, meta.version, 1)) is None
        assert e.read(str(p)) == new


def test_a_hit_within_the_ttl_asks_the_remote_nothing(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "x.bin").write_bytes(rand(13, 2 * BLOCK))
    remote = SlowFileSystem(fs=fsspec.filesystem("file"))
    clock = Clock()
    with engine(remote, tmp_path / "c", ttl=10.0, clock=clock) as e:
        path = str(src / "x.bin")
        assert e.read(path) == rand(13, 2 * BLOCK)
        before = remote.requests
        for _ in range(5):
            assert e.read(path) == rand(13, 2 * BLOCK)
        assert remote.requests == before
        clock.t += 10.0  # past the TTL: one stat, no block fetch (same version)
        assert e.read(path) == rand(13, 2 * BLOCK)
        assert remote.requests == before + 1


# -- a real FUSE mount ----------------------------------------------------------------------
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_mount_sees_overwrite_delete_and_new_objects(s3: S3Server, prefix: str,  # noqa: F811
                                                     tmp_path: Path, api: str) -> None:
    from aicache.datacache.fuse import lowlevel_abi

    # setup.sh installs Debian's fuse3 (libfuse 3.14): both drivers must run, as root
    assert fuse_available() is None, fuse_available()
    assert api == "highlevel" or lowlevel_abi.supported(), "setup installs libfuse 3 before 3.17"
    remote = s3.filesystem()
    a, gone, born = f"{prefix}/a.bin", f"{prefix}/gone.bin", f"{prefix}/born.bin"
    remote.pipe_file(a, rand(20, 2 * BLOCK + 3))
    remote.pipe_file(gone, b"bye")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(f"s3://{prefix}", str(mnt), str(tmp_path / "c"), "--cache-size", "64MiB",
                       "--block-size", str(BLOCK), "--policy", "lru", "--metadata-ttl", "0",
                       "--fuse-api", api, *s3_mount_options(s3))
    try:
        assert sorted(os.listdir(mnt)) == ["a.bin", "gone.bin"]
        assert (mnt / "a.bin").read_bytes() == rand(20, 2 * BLOCK + 3)
        assert (mnt / "gone.bin").read_bytes() == b"bye"
        remote.pipe_file(a, rand(21, 3 * BLOCK))  # overwritten, and larger
        remote.rm(gone)
        remote.pipe_file(born, rand(22, BLOCK))
        assert sorted(os.listdir(mnt)) == ["a.bin", "born.bin"]
        assert os.stat(mnt / "a.bin").st_size == 3 * BLOCK
        assert (mnt / "a.bin").read_bytes() == rand(21, 3 * BLOCK)
        assert (mnt / "born.bin").read_bytes() == rand(22, BLOCK)
        with pytest.raises(FileNotFoundError):
            (mnt / "gone.bin").read_bytes()

        # an open handle reads the version it opened, or fails: never a mix
        remote.pipe_file(a, rand(23, 3 * BLOCK))
        fd = os.open(mnt / "a.bin", os.O_RDONLY | os.O_DIRECT)
        try:
            assert os.pread(fd, BLOCK, 0) == rand(23, 3 * BLOCK)[:BLOCK]
            remote.pipe_file(a, rand(24, 3 * BLOCK))
            with pytest.raises(OSError) as err:
                os.pread(fd, BLOCK, 2 * BLOCK)  # not cached: the opened version is gone
            assert err.value.errno == errno.ESTALE
            assert os.pread(fd, BLOCK, 0) == rand(23, 3 * BLOCK)[:BLOCK]  # cached: still served
        finally:
            os.close(fd)
        assert (mnt / "a.bin").read_bytes() == rand(24, 3 * BLOCK)
    finally:
        rc = stop_mount(proc, str(mnt))
    assert rc == 0


def test_mount_sees_a_local_same_size_rewrite(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    p = src / "x.bin"
    p.write_bytes(rand(30, 2 * BLOCK))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(str(src), str(mnt), str(tmp_path / "c"), "--cache-size", "64MiB",
                       "--block-size", str(BLOCK), "--policy", "lru", "--metadata-ttl", "0")
    try:
        assert (mnt / "x.bin").read_bytes() == rand(30, 2 * BLOCK)
        rewrite_keeping_size_and_mtime(p, rand(31, 2 * BLOCK), rename=False)
        assert (mnt / "x.bin").read_bytes() == rand(31, 2 * BLOCK)
    finally:
        rc = stop_mount(proc, str(mnt))
    assert rc == 0


# -- HTTP: ETag + If-Match ------------------------------------------------------------------
class _Objects(http.server.BaseHTTPRequestHandler):
    """A minimal HTTP object server: HEAD/GET with ETag, one-range Range and If-Match."""

    objects: dict[str, bytes] = {}

    def log_message(self, *args: object) -> None:
        pass

    def _head(self) -> bytes | None:
        data = self.objects.get(self.path)
        if data is None:
            self.send_error(404)
            return None
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        if self.headers.get("If-Match") not in (None, etag):
            self.send_error(412)
            return None
        body, status, extra = data, 200, {}
        rng = self.headers.get("Range")
        if rng:
            a, b = rng.split("=", 1)[1].split("-")
            start, end = int(a), min(int(b) + 1 if b else len(data), len(data))
            body, status = data[start:end], 206
            extra["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        self.send_response(status)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        return body

    def do_HEAD(self) -> None:  # noqa: N802
        self._head()

    def do_GET(self) -> None:  # noqa: N802
        body = self._head()
        if body is not None:
            self.wfile.write(body)


@pytest.fixture()
def http_objects():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Objects)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Objects.objects
    finally:
        server.shutdown()
        server.server_close()
        _Objects.objects.clear()


def test_http_overwrite_seen_and_open_handle_pinned_by_etag(http_objects, tmp_path: Path) -> None:
    base, objects = http_objects
    url = f"{base}/d/x.bin"
    old, new = rand(40, 3 * BLOCK), rand(41, 3 * BLOCK)
    objects["/d/x.bin"] = old
    with engine(fsspec.filesystem("http", skip_instance_cache=True), tmp_path / "c", ttl=0.0) as e:
        meta = e.stat(url)
        assert e.read_meta(meta, 0, BLOCK) == old[:BLOCK]
        objects["/d/x.bin"] = new
        with pytest.raises(OSError) as err:
            e.read_meta(meta, BLOCK, BLOCK)
        assert err.value.errno == errno.ESTALE
        assert e.store.get(BlockKey(meta.path, meta.version, 1)) is None
        assert e.read(url) == new
        assert meta.version.startswith("etag:")  # keyed (and pinned) by the ETag


def test_fuse_operations_use_no_metadata_older_than_the_ttl(s3: S3Server, prefix: str,  # noqa: F811
                                                            tmp_path: Path) -> None:
    """The mount's operations (no kernel in between) under an injected clock: within the
    TTL they answer from what they have, at the TTL from the remote, although s3fs's own
    listing cache (never expiring) holds the old listing."""
    from aicache.datacache.fuse import CacheFuse

    remote = s3fs_with_listing_cache(s3)
    remote.pipe_file(f"{prefix}/a.bin", rand(50, BLOCK))
    clock = Clock()
    ops = CacheFuse(lambda: engine(remote, tmp_path / "c", ttl=30.0, clock=clock), prefix)
    ops.init("/")
    try:
        assert sorted(ops.readdir("/", 0)) == [".", "..", "a.bin"]
        assert ops.getattr("/a.bin")["st_size"] == BLOCK
        other = s3.filesystem()
        other.pipe_file(f"{prefix}/a.bin", rand(51, 2 * BLOCK))
        other.pipe_file(f"{prefix}/b.bin", b"new")
        clock.t += 29.0
        assert ops.getattr("/a.bin")["st_size"] == BLOCK  # within the TTL
        clock.t += 1.0
        assert sorted(ops.readdir("/", 0)) == [".", "..", "a.bin", "b.bin"]
        assert ops.getattr("/a.bin")["st_size"] == 2 * BLOCK
        fh = ops.open("/a.bin", os.O_RDONLY)
        assert ops.read("/a.bin", 2 * BLOCK, 0, fh) == rand(51, 2 * BLOCK)
        ops.release("/a.bin", fh)
    finally:
        ops.destroy("/")
