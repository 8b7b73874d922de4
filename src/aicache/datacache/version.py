"""A remote file's *version*: the identity its cached blocks are keyed by, and the reads
pinned to it.

Every place that turns target metadata into a version (the engine's stat and listings,
the fsspec filesystem, the FUSE mount) goes through the :class:`VersionScheme` of the
target's protocol, chosen from :data:`SCHEMES` by :func:`scheme_for`:

========  =====================================  ==========================================
scheme    version (the block key's ``version``)  a pinned range read
========  =====================================  ==========================================
``s3``    the ETag                               ``VersionId`` when known, else ``If-Match``
``gcs``   the generation (else the md5/etag)     plain read, then the generation re-checked
``http``  ETag, else Last-Modified + size        ``If-Match`` / ``If-Unmodified-Since``
``local`` inode, size, mtime_ns, ctime_ns        ``fstat`` checked before and after ``pread``
generic   the target's identity, then            plain read (no pinning)
          ETag/generation if given, else
          mtime + size
========  =====================================  ==========================================

One cache directory holds the blocks of every target a process reads (one engine per
target, :mod:`aicache.datacache.sharing`), keyed by remote path and version alone, so a
version must not name other bytes on another target with the same path. S3 ETags are
content hashes and GCS generations unique per object write; HTTP paths carry the host;
local versions are one machine's inodes. The generic scheme's mtime + size is not unique
that way (two hosts, one path, one size, one second), so its versions are prefixed with
:func:`version_namespace` of the target (its class and options as plain data, alike in
every process).

Invariants: the same object state gives the same version whichever call described it (a
listing entry or a stat), so cached blocks are shared by every path into the cache and by
every process; a new write gives a new version (S3 and HTTP ETags change with the bytes; a
local rewrite changes ``ctime_ns`` even when ``cp -p``/``rsync -t`` restore size and mtime,
since ``ctime`` cannot be set). A pinned read returns bytes of exactly that version or
raises :class:`VersionGone`; so bytes of a newer version are never cached under an older
version's key, and an open handle never mixes two versions.

The S3 key is the ETag alone, not ETag + VersionId: listings (``ListObjectsV2``) carry no
VersionId, so a key that included it would differ between a listed and a stat-ed file;
the ETag already changes with every write of different bytes. The VersionId, when a stat
returns one, pins the reads (:attr:`Identity.pin`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from fsspec.spec import AbstractFileSystem
from fsspec.utils import tokenize

from aicache.registry import Registry


class VersionGone(OSError):
    """The version an open handle reads is no longer on the remote (overwritten or
    deleted): nothing was cached, and the handle must be reopened (ESTALE)."""

    def __init__(self, path: str, version: str, why: str) -> None:
        super().__init__(errno.ESTALE, f"{path}: version {version} is gone from the remote "
                                       f"({why}); reopen the file to read the current version")


@dataclass(frozen=True, slots=True)
class Identity:
    """What a version scheme makes of one metadata record."""

    size: int
    #: the block key's version: equal iff the bytes are (as far as the target can tell)
    version: str
    #: what a pinned read asks the remote for, when it is not the version itself
    #: (an S3 VersionId); "" when there is none
    pin: str = ""


class VersionScheme:
    """How one kind of target names versions and reads a range of one version."""

    name: ClassVar[str] = "generic"
    #: whether :meth:`read` checks the version (False: a plain read, best effort)
    pinned: ClassVar[bool] = False
    #: whether :meth:`read_first` can answer (a range read carries size and version)
    reads_carry_info: ClassVar[bool] = False

    def __init__(self, namespace: str = "") -> None:
        #: prefixed to every version (the target's identity, see the module docstring)
        self.namespace = namespace

    def identify(self, info: Mapping[str, Any]) -> Identity:
        """The identity described by ``info`` (an ``info()`` or ``ls(detail=True)`` entry)."""
        ns = f"{self.namespace}|" if self.namespace else ""
        for k in ("ETag", "etag", "generation", "md5Hash", "VersionId"):
            v = info.get(k)
            if v:
                return Identity(int(info["size"]), f"{ns}{k}:{str(v).strip(chr(34))}")
        mtime = info.get("mtime", info.get("LastModified", info.get("last_modified",
                                                                    info.get("created", ""))))
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        return Identity(int(info["size"]), f"{ns}m:{mtime}:{info.get('size')}")

    def read(self, fs: AbstractFileSystem, path: str, version: str, pin: str, start: int,
             end: int) -> bytes:
        """Bytes ``[start, end)`` of ``version`` of ``path`` (``pin``: its
        :attr:`Identity.pin`); raises
        :class:`VersionGone` when that version is no longer there (pinned schemes)."""
        return bytes(fs.cat_file(path, start=start, end=end))

    def connect(self, fs: AbstractFileSystem, path: str) -> None:
        """Build now whatever :meth:`read` of a path under ``path`` would build at its
        first call (a client, a connection pool), so that the first read does not wait on
        it. Nothing here: fsspec's own clients are built with the filesystem."""

    def read_first(self, fs: AbstractFileSystem, path: str,
                   length: int) -> tuple[dict[str, Any], bytes] | None:
        """``path``'s ``info`` record (as ``fs.info`` gives it) and its first ``length``
        bytes (all of it when shorter), both of the current version, from one request: for
        a target whose range reads answer with the object's size and version. None where
        they do not (fsspec's ``cat_file`` returns bytes only: the caller asks ``info``),
        or where the answer cannot tell what ``path`` is (a missing key, a folder, an empty
        object): the caller then asks ``info``, as without this."""
        return None


class LocalScheme(VersionScheme):
    """Local files: (inode, size, mtime_ns, ctime_ns) from a ``stat`` of the path (the
    fsspec entry's float times are too coarse to tell two writes a microsecond apart)."""

    name = "local"
    pinned = True

    @staticmethod
    def of_stat(st: os.stat_result) -> Identity:
        return Identity(st.st_size, f"local:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")

    def identify(self, info: Mapping[str, Any]) -> Identity:
        return self.of_stat(os.stat(info["name"]))

    def read(self, fs: AbstractFileSystem, path: str, version: str, pin: str, start: int,
             end: int) -> bytes:
        fd = os.open(fs._strip_protocol(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            # the descriptor pins the inode (a rename over the path does not change it); an
            # in-place write changes its mtime/ctime, seen by the second check
            if self.of_stat(os.fstat(fd)).version != version:
                raise VersionGone(path, version, "the file was rewritten")
            data = os.pread(fd, end - start, start)
            if self.of_stat(os.fstat(fd)).version != version:
                raise VersionGone(path, version, "the file changed while being read")
        finally:
            os.close(fd)
        return data


class S3Scheme(VersionScheme):
    """S3 (s3fs): the ETag; reads pinned by VersionId when known, else ``If-Match``."""

    name = "s3"
    pinned = True
    reads_carry_info = True

    def identify(self, info: Mapping[str, Any]) -> Identity:
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
        vid = info.get("VersionId")
        pin = str(vid) if vid and vid != "null" else ""
        if not etag:  # not from S3 itself (a gateway without ETags): what the target gives
            return VersionScheme.identify(self, info)
        return Identity(int(info["size"]), f"etag:{etag}", pin)

    def read(self, fs: AbstractFileSystem, path: str, version: str, pin: str, start: int,
             end: int) -> bytes:
        if not version.startswith("etag:"):
            return VersionScheme.read(self, fs, path, version, pin, start, end)
        from fsspec.asyn import sync

        bucket, key, _ = fs.split_path(path)
        cond = {"VersionId": pin} if pin else {"IfMatch": '"' + version[5:] + '"'}

        async def get() -> bytes:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key,
                                     Range=f"bytes={start}-{end - 1}", **cond)
            try:
                return bytes(await resp["Body"].read())
            finally:
                resp["Body"].close()

        try:
            data: bytes = sync(fs.loop, get)
            return data
        except FileNotFoundError as exc:  # NoSuchKey / NoSuchVersion
            raise VersionGone(path, version, "deleted") from exc
        except OSError as exc:
            if _precondition_failed(exc):
                raise VersionGone(path, version, "overwritten") from exc
            raise

    def read_first(self, fs: AbstractFileSystem, path: str,
                   length: int) -> tuple[dict[str, Any], bytes] | None:
        """A GET of ``bytes=0-(length-1)`` answers with the object's size (the total of its
        ``Content-Range``), ETag and VersionId: the record s3fs's ``info`` makes of a HEAD."""
        from fsspec.asyn import sync

        bucket, key, vid = fs.split_path(path)
        if not key or vid:
            return None

        async def get() -> tuple[dict[str, Any], bytes]:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key,
                                     Range=f"bytes=0-{length - 1}")
            try:
                return resp, bytes(await resp["Body"].read())
            finally:
                resp["Body"].close()

        try:
            resp, body = sync(fs.loop, get)
        except FileNotFoundError:  # a missing key, or a folder: info tells which
            return None
        except OSError as exc:
            if _status_is(exc, 416, "InvalidRange"):  # an empty object has no byte 0
                return None
            raise
        total = str(resp.get("ContentRange") or "").rpartition("/")[2]
        if resp.get("ContentRange") and not total.isdigit():  # "*": size unknown
            return None
        size = int(total) if total.isdigit() else int(resp["ContentLength"])  # range ignored
        info = {"ETag": resp.get("ETag", ""), "LastModified": resp.get("LastModified", ""),
                "size": size, "name": f"{bucket}/{key}", "type": "file",
                "StorageClass": resp.get("StorageClass", "STANDARD"),
                "VersionId": resp.get("VersionId"), "ContentType": resp.get("ContentType")}
        return info, body[:length]


class GCSScheme(VersionScheme):
    """GCS (gcsfs): the generation; a read is followed by a metadata check of it."""

    name = "gcs"
    pinned = True

    def identify(self, info: Mapping[str, Any]) -> Identity:
        gen = info.get("generation")
        if gen:
            return Identity(int(info["size"]), f"gen:{gen}")
        return VersionScheme.identify(self, info)

    def read(self, fs: AbstractFileSystem, path: str, version: str, pin: str, start: int,
             end: int) -> bytes:
        data = bytes(fs.cat_file(path, start=start, end=end))
        fs.invalidate_cache(path)
        try:
            now = self.identify(fs.info(path))
        except FileNotFoundError as exc:
            raise VersionGone(path, version, "deleted") from exc
        if now.version != version:  # the bytes may be the new generation's
            raise VersionGone(path, version, "overwritten")
        return data


class HTTPScheme(VersionScheme):
    """HTTP(S): the ETag, else Last-Modified + size; reads carry the matching precondition."""

    name = "http"
    pinned = True

    def identify(self, info: Mapping[str, Any]) -> Identity:
        etag = str(info.get("ETag") or info.get("etag") or "")
        lm = info.get("Last-Modified") or info.get("last_modified") or ""
        if etag and not etag.startswith("W/"):
            return Identity(int(info["size"]), f"etag:{etag.strip(chr(34))}")
        # a weak ETag never passes If-Match (a strong comparison): keyed by it, but reads
        # are pinned by Last-Modified when the server gives one
        weak = f":{etag}" if etag else ""
        return Identity(int(info["size"]), f"lm:{lm}:{info['size']}{weak}")

    def read(self, fs: AbstractFileSystem, path: str, version: str, pin: str, start: int,
             end: int) -> bytes:
        v = version
        if v.startswith("etag:"):
            headers = {"If-Match": '"' + v[5:] + '"'}
        elif v.startswith("lm:") and not v.startswith("lm::"):
            # an HTTP date has no ":"-free form, so it is cut at the size that follows it
            lm = v[3:].split(" GMT:", 1)[0] + " GMT" if " GMT:" in v else ""
            headers = {"If-Unmodified-Since": lm} if lm else {}
        else:
            headers = {}
        try:
            return bytes(fs.cat_file(path, start=start, end=end, headers=headers))
        except FileNotFoundError as exc:
            raise VersionGone(path, v, "deleted") from exc
        except Exception as exc:  # noqa: BLE001 - aiohttp's error type, not imported here
            if getattr(exc, "status", None) == 412:
                raise VersionGone(path, v, "overwritten") from exc
            raise


def _precondition_failed(exc: BaseException) -> bool:
    """Whether s3fs's translated error came from a 412 PreconditionFailed."""
    return _status_is(exc, 412, "PreconditionFailed") or "Precondition Failed" in str(exc)


def _status_is(exc: BaseException, status: int, code: str) -> bool:
    """Whether s3fs's translated error came from an S3 error ``code`` (HTTP ``status``)."""
    for e in (exc, exc.__cause__, exc.__context__):
        resp = getattr(e, "response", None)
        if isinstance(resp, dict) and (resp.get("Error", {}).get("Code") in (code, str(status))
                                       or resp.get("ResponseMetadata", {}).get("HTTPStatusCode") == status):
            return True
    return code in str(exc)


#: version schemes by name; :data:`PROTOCOLS` says which one a protocol uses
SCHEMES: Registry[Callable[[], VersionScheme]] = Registry("version scheme")
for _cls in (VersionScheme, LocalScheme, S3Scheme, GCSScheme, HTTPScheme):
    SCHEMES.register(_cls.name, _cls)

PROTOCOLS: dict[str, str] = {"file": "local", "local": "local", "s3": "s3", "s3a": "s3",
                             "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}


def scheme_for(fs: AbstractFileSystem) -> VersionScheme:
    """The version scheme of ``fs``'s protocol (generic, namespaced by the target's
    identity, for any other target)."""
    protos = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    for p in protos:
        if p in PROTOCOLS:
            return SCHEMES.get(PROTOCOLS[p])()
    return VersionScheme(namespace=version_namespace(fs))


def _plain(value: Any) -> Any:
    """``value`` as plain data that every process derives alike: numbers, strings, lists
    and dicts as they are, a filesystem as its class and (plain) options, any other object
    as its class name (a shared counter, a lock: their identity is the process's own)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, AbstractFileSystem):
        return ["fs", type(value).__module__, type(value).__qualname__,
                _plain(getattr(value, "storage_args", ())), _plain(getattr(value, "storage_options", {}))]
    return type(value).__qualname__


def version_namespace(fs: AbstractFileSystem) -> str:
    """The prefix of a generic target's versions: the same in every process that builds
    the target alike (DataLoader workers, the policy daemon's clients share its blocks),
    from its class and its options as plain data (:func:`_plain`); unlike
    :func:`target_token`, never an object's identity."""
    return str(tokenize(type(fs).__module__, type(fs).__qualname__,
                        _plain(getattr(fs, "storage_args", ())),
                        _plain(getattr(fs, "storage_options", {}))))


def target_token(fs: AbstractFileSystem) -> str:
    """Equal for two target filesystems of one class built with the same options (fsspec
    keeps one per thread for synchronous ones): their filesystems may share an engine, and
    a generic target's blocks are keyed by it."""
    opts = getattr(fs, "storage_options", None)
    if opts is None:
        return f"instance:{id(fs)}"
    token: str = tokenize(type(fs).__module__, type(fs).__qualname__,
                          getattr(fs, "storage_args", ()), opts)
    return token
