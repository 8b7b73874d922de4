"""``--s3-client obstore``: block reads through obstore, metadata through s3fs, against a
real moto S3 server on loopback; every byte compared with what was put."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import fsspec
import pytest
from s3fixtures import s3  # noqa: F401

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.native_s3 import ObstoreS3Scheme, auto_scheme, obstore_scheme
from aicache.datacache.version import S3Scheme, VersionGone, scheme_for
from aicache.errors import BadInput
from aicache.testing import S3Server


BUCKET = "aicache-native"
BLOCK = 256 * 1024


def rand(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _remote(server: S3Server, bucket: str = BUCKET, versioned: bool = False):
    fs = server.filesystem()
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    if versioned:
        fs.call_s3("put_bucket_versioning", Bucket=bucket,
                   VersioningConfiguration={"Status": "Enabled"})
    return fs


def test_ranges_of_the_opened_version_and_a_version_gone(s3: S3Server) -> None:  # noqa: F811
    """Unversioned bucket: reads pinned by If-Match on the ETag s3fs's ``info`` gave; an
    overwrite or a delete after that is a version gone, never the new bytes."""
    fs = _remote(s3)
    path = f"{BUCKET}/plain/a.bin"
    data = rand(1, 3 * BLOCK + 17)
    fs.pipe_file(path, data)
    scheme = obstore_scheme(fs, scheme_for(fs))
    assert isinstance(scheme, ObstoreS3Scheme)
    ident = scheme.identify(fs.info(path))
    rng = random.Random(2)
    spans = [(0, 1), (0, len(data)), (BLOCK, 2 * BLOCK), (len(data) - 5, len(data))]
    spans += [(a, a + rng.randrange(1, BLOCK)) for a in (rng.randrange(len(data) - BLOCK) for _ in range(8))]
    for a, b in spans:
        assert scheme.read(fs, path, ident.version, ident.pin, a, b) == data[a:b]
    fs.pipe_file(path, rand(3, 2 * BLOCK))
    with pytest.raises(VersionGone):
        scheme.read(fs, path, ident.version, ident.pin, 0, 10)
    fs.rm(path)
    with pytest.raises(VersionGone):
        scheme.read(fs, path, ident.version, ident.pin, 0, 10)


def test_versioned_bucket_reads_the_pinned_version_after_an_overwrite(s3: S3Server) -> None:  # noqa: F811
    fs = _remote(s3, "aicache-native-v", versioned=True)
    path = "aicache-native-v/v.bin"
    old, new = rand(4, 2 * BLOCK), rand(5, 2 * BLOCK)
    fs.pipe_file(path, old)
    scheme = obstore_scheme(fs, scheme_for(fs))
    ident = scheme.identify(fs.info(path))
    assert ident.pin  # the VersionId
    fs.pipe_file(path, new)
    assert scheme.read(fs, path, ident.version, ident.pin, 10, BLOCK + 10) == old[10:BLOCK + 10]
    with pytest.raises(VersionGone):
        scheme.read(fs, path, ident.version, "no-such-version", 0, 10)


def test_the_engine_reads_the_same_bytes_with_the_same_requests_as_through_s3fs(
        s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    """A whole file and a jumping read through two engines, one per client: equal bytes,
    equal blocks fetched and equal remote bytes (only the client of the GETs differs)."""
    fs = _remote(s3)
    path = f"{BUCKET}/eng/f.bin"
    data = rand(6, 5 * BLOCK + 99)
    fs.pipe_file(path, data)
    seen = {}
    for client in ("s3fs", "obstore"):
        with CacheEngine(s3.filesystem(), str(tmp_path / client), 64 << 20, policy="lru",
                         params=EngineParams(block_size=BLOCK, s3_client=client)) as e:
            assert isinstance(e.versions, ObstoreS3Scheme) == (client == "obstore")
            assert e.read(path, 3 * BLOCK + 5, 1000) == data[3 * BLOCK + 5:3 * BLOCK + 1005]
            assert e.read(path) == data
            assert e.read(path) == data  # warm
            seen[client] = (e.metrics.value("remote_bytes"), e.metrics.value("misses"))
    assert seen["obstore"] == seen["s3fs"]


def test_refused_where_it_cannot_act_as_s3fs_would(s3: S3Server, tmp_path: Path,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    local = fsspec.filesystem("file")
    with pytest.raises(BadInput, match="not S3"):
        obstore_scheme(local, scheme_for(local))
    payer = fsspec.filesystem("s3", requester_pays=True, skip_instance_cache=True,
                              **{k: v for k, v in s3.storage_options.items() if k != "skip_instance_cache"})
    with pytest.raises(BadInput, match="RequestPayer"):
        obstore_scheme(payer, S3Scheme())
    with pytest.raises(BadInput, match="s3_client"):
        CacheEngine(s3.filesystem(), str(tmp_path / "c"), 1 << 20, policy="lru",
                    params=EngineParams(s3_client="boto"))
    monkeypatch.setitem(sys.modules, "obstore", None)  # as if not installed
    with pytest.raises(BadInput, match="pip install obstore"):
        obstore_scheme(s3.filesystem(), S3Scheme())


def test_auto_takes_obstore_only_where_s3fs_would_use_the_same_settings(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The default client: obstore for explicit credentials and an endpoint (or the AWS_*
    key variables without a profile); s3fs for botocore's other sources and for settings
    only s3fs applies; the scheme itself for a target that is not S3."""
    opts = {k: v for k, v in s3.storage_options.items() if k != "skip_instance_cache"}

    def fs(**kw: object):
        return fsspec.filesystem("s3", skip_instance_cache=True, **kw)

    assert isinstance(auto_scheme(fs(**opts), S3Scheme()), ObstoreS3Scheme)
    no_keys = {k: v for k, v in opts.items() if k not in ("key", "secret")}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    assert type(auto_scheme(fs(**no_keys), S3Scheme())) is S3Scheme  # botocore's chain
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert isinstance(auto_scheme(fs(**no_keys), S3Scheme()), ObstoreS3Scheme)
    monkeypatch.setenv("AWS_PROFILE", "other")  # botocore would read the profile
    assert type(auto_scheme(fs(**no_keys), S3Scheme())) is S3Scheme
    assert type(auto_scheme(fs(**opts, config_kwargs={"signature_version": "s3"}), S3Scheme())) is S3Scheme
    custom_ca = {**opts, "client_kwargs": {**opts["client_kwargs"], "verify": "/etc/ca.pem"}}
    assert type(auto_scheme(fs(**custom_ca), S3Scheme())) is S3Scheme
    local = fsspec.filesystem("file")
    assert auto_scheme(local, scheme_for(local)) is not None
    assert not isinstance(auto_scheme(local, scheme_for(local)), ObstoreS3Scheme)
    monkeypatch.setitem(sys.modules, "obstore", None)
    assert type(auto_scheme(fs(**opts), S3Scheme())) is S3Scheme


def test_a_forked_child_reads_the_same_bytes_through_s3fs(s3: S3Server) -> None:  # noqa: F811
    """obstore's runtime does not survive a fork (a DataLoader's workers fork after the
    filesystem is made): after the parent read through obstore, a forked child still gets
    the bytes (through s3fs), instead of waiting forever on the dead runtime; building the
    client ahead (``connect``) in the child neither hangs nor changes that."""
    import os
    import signal

    fs = _remote(s3)
    path = f"{BUCKET}/fork/a.bin"
    data = rand(9, BLOCK + 3)
    fs.pipe_file(path, data)
    scheme = obstore_scheme(fs, scheme_for(fs))
    ident = scheme.identify(fs.info(path))
    assert scheme.read(fs, path, ident.version, ident.pin, 0, BLOCK) == data[:BLOCK]  # runtime up
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only with the right bytes, killed if it hangs
        signal.alarm(60)
        try:
            child_fs = s3.filesystem()
            scheme.connect(child_fs, f"{BUCKET}/fork")  # (a mount's INIT) builds nothing here
            ok = scheme.read(child_fs, path, ident.version, ident.pin, 5, BLOCK + 3) == data[5:]
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_auto_follows_the_endpoint_botocore_reads_from_the_environment(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # noqa: F811
    """``AWS_ENDPOINT_URL`` names the store for s3fs (botocore) and so for obstore: a target
    without an endpoint option reads the same bytes through either; an endpoint that only
    the AWS config file names keeps s3fs."""
    fs = _remote(s3)
    path = f"{BUCKET}/env/e.bin"
    data = rand(12, BLOCK + 9)
    fs.pipe_file(path, data)
    opts = {k: v for k, v in s3.storage_options.items() if k not in ("client_kwargs", "skip_instance_cache")}
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    target = fsspec.filesystem("s3", skip_instance_cache=True, **opts)
    scheme = auto_scheme(target, scheme_for(target))
    assert isinstance(scheme, ObstoreS3Scheme)
    ident = scheme.identify(target.info(path))
    assert scheme.read(target, path, ident.version, ident.pin, 3, BLOCK + 9) == data[3:]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    (tmp_path / "config").write_text("[default]\nendpoint_url = http://127.0.0.1:1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert type(auto_scheme(fsspec.filesystem("s3", skip_instance_cache=True, **opts),
                            S3Scheme())) is S3Scheme
