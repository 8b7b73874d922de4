"""``aicache`` — an fsspec filesystem that reads any fsspec store through the block cache.

Usage::

    fs = fsspec.filesystem("aicache", target_protocol="s3", target_options={...},
                           cache_dir="/mnt/nvme/aicache", cache_size="100GiB", policy="chiron")
    with fsspec.open("aicache::s3://bucket/data/x.bin", s3={...}, aicache={"cache_size": "10GiB"}) as f:
        f.read()

Engines: the filesystems of one process that name one cache directory and one target
read through one engine (one policy, one prefetch pool, one index connection), so a loop of
``fsspec.open("aicache::…")`` — an instance per thread, each file's path stripped from
fsspec's instance key — stays at one engine; another target (or the same store with other
options) gets its own engine on the same directory, so the default cache directory serves
them all. Asking for an open cache directory with other options (block size, budget,
policy…) is a ``BadInput`` naming them; ``skip_instance_cache=True`` gives a private engine.
An engine closes with the last filesystem using it; a forked child (a DataLoader worker of
a filesystem made at module level) takes its own engine and a new target filesystem built
from the same options (see :mod:`aicache.datacache.sharing`).

Options may be given as strings too (``"1GiB"``, ``"true"``, ``"8"``, ``"30s"``; Polars
passes every storage option as one); a value that is none of its forms is a ``BadInput``.
Options that are not aicache's go to the target built from ``target_protocol`` (below those
in ``target_options``), so one flat dict serves both layers of a chained URL.

Read-only towards the remote: ``open`` (mode ``rb``), ``cat``/``cat_file`` (ranges
included), ``ls``, ``info``, ``find``/``glob``, ``exists``, ``modified`` behave as the
target's; bytes come through :class:`~aicache.datacache.engine.CacheEngine` by block.
Writing raises ``PermissionError``.

Unlike fsspec's ``simplecache``/``blockcache``, the cache is bounded (``cache_size``),
persistent across restarts, checksummed, and safe to share between processes; the policy
(``chiron`` by default) adapts prefetch and eviction to the access pattern.

Several processes (DataLoader workers): pass ``daemon=True`` so that they share one
policy (one access stream, one budget) through the cache directory's daemon
(:mod:`aicache.datacache.daemon`, started on first use); without it each process decides
alone, which is still safe (the store is multi-process safe) but blind to the others.

``verify_checksum`` (``full`` | ``stat``, the default | ``none``): when a cached block's
checksum is re-checked on a hit — every read, once per content version of the block file,
or never (see :mod:`aicache.datacache.store`).

``mmap_bytes`` (default 1 GiB; 0 turns it off): verified blocks read more than once are
kept memory-mapped, so their hits copy from mapped pages instead of calling ``pread``
(see :mod:`aicache.datacache.mapped`).

``metadata_ttl`` (seconds, default 60): how long ``open``, ``ls``, ``info`` (``size``,
``exists``, ``isfile``, ``isdir``, ``modified``) and ``find`` (``glob``) answer from the
engine's metadata cache: within it they ask the remote nothing after the first call, past
it the next call asks again (the target's own listing cache is bypassed). An open file
reads the version it opened, start to end, or fails with ESTALE once the
remote no longer holds that version (:mod:`aicache.datacache.version`).

``cache_mode`` (default ``0o600``: owner-only; e.g. ``"0640"`` for a cache shared with a
group): the mode of the cache's files, directories getting ``x`` where it has ``r``.

``free_space_ratio`` (default 0.1): the share of the cache's disk kept free; a larger
``cache_size`` is capped at open, with a warning (:mod:`aicache.datacache.budget`, which also
states the rule for two processes giving one cache dir different budgets).

``shared_cache`` (an fsspec URL: ``s3://bucket/prefix``, ``file:///mnt/shared/aicache``;
default none), ``shared_cache_options`` (that store's options, a dict or JSON text;
``endpoint_url`` goes to s3fs's ``client_kwargs``), ``shared_cache_timeout`` (seconds, default
2): a second cache level under the local one, shared by every node reading the same origin
(:mod:`aicache.datacache.shared`).

An open file keeps the last block it read, so many small reads inside one block cost one
(verified) block read and count as one access — what the kernel page cache does for FUSE.
An open file that jumps (a Parquet footer, then one column; a slice of a ``.npy``) into a
block the cache does not hold fetches only the 16 KiB pages its read covers; one that
streams gets whole blocks and the policy's readahead (:mod:`aicache.datacache.engine.sparse`).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import weakref
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.implementations.chained import ChainedFileSystem
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from aicache.datacache.budget import check_free_space_ratio
from aicache.datacache.engine import (
    CacheEngine,
    DaemonMode,
    EngineParams,
    default_cache_dir,
)
from aicache.datacache.engine.sparse import ReadStream
from aicache.datacache.keys import FileMeta
from aicache.datacache.shared import DEFAULT_TIMEOUT_S, SharedTierSpec
from aicache.datacache.sharing import ENGINES, EngineSpec
from aicache.datacache.store import check_cache_mode
from aicache.datacache.version import target_token
from aicache.errors import BadInput
from aicache.units import DEFAULT_BLOCK_SIZE, parse_bool, parse_count, parse_ratio, parse_seconds, parse_size

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec
    from aicache.policies.system import DataCacheSystem

log = logging.getLogger("aicache.datacache")


class _SkipMeansPrivate(type(ChainedFileSystem)):  # type: ignore[misc]  # fsspec is untyped (Any)
    """fsspec's ``skip_instance_cache=True`` ("a fresh instance, shared with nobody") also
    gives the instance a private engine; fsspec consumes that flag before ``__init__``
    (as truthy: a client's ``"false"`` is read as a bool here first)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "skip_instance_cache" in kwargs:
            kwargs["skip_instance_cache"] = parse_bool(kwargs["skip_instance_cache"],
                                                       what="skip_instance_cache")
        if kwargs.get("skip_instance_cache"):
            kwargs.setdefault("share_engine", False)
        return super().__call__(*args, **kwargs)


class AICacheFileSystem(ChainedFileSystem, metaclass=_SkipMeansPrivate):  # type: ignore[misc]  # as above
    """Block-cached, read-only view of ``target_protocol`` (see the module docstring)."""

    protocol = "aicache"
    #: a chained URL passes the file's path as ``fo``: without this, every file of
    #: ``fsspec.open("aicache::s3://…")`` got its own instance (and engine)
    _strip_tokenize_options = ("fo",)

    def __init__(self, target_protocol: str | None = None,
                 target_options: dict[str, Any] | str | None = None,
                 fs: AbstractFileSystem | None = None, cache_dir: str | None = None,
                 cache_size: str | int = "10GiB", block_size: str | int = DEFAULT_BLOCK_SIZE,
                 policy: str | DataCacheSystem = "chiron", advisor: AdvisorSpec | None = None,
                 max_prefetch: int | str = 8,
                 max_prefetch_bytes: str | int = "256MiB", retries: int | str = 3,
                 request_timeout: float | str | None = None, metadata_ttl: float | str = 60.0,
                 seed: int | str = 0, root: str = "", daemon: bool | str = False, fo: str = "",
                 verify_checksum: str = "stat", mmap_bytes: str | int = "1GiB",
                 share_engine: bool | str = True, cache_mode: int | str = 0o600,
                 free_space_ratio: float | str = 0.1, shared_cache: str | None = None,
                 shared_cache_options: dict[str, Any] | str | None = None,
                 shared_cache_timeout: float | str = DEFAULT_TIMEOUT_S,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if fs is None:
            if target_protocol is None:
                raise BadInput("aicache needs a target: pass target_protocol='s3' (or fs=...) "
                               "or chain a URL like aicache::s3://bucket/path")
            # options that are not aicache's belong to the target: a client that hands one
            # flat dict to fsspec.open("aicache::s3://…", **options) (Polars) gives them here
            # (not fsspec's asynchronous/loop: they say how *this* instance is called)
            flat = {k: v for k, v in kwargs.items() if k not in ("asynchronous", "loop")}
            fs = fsspec.filesystem(target_protocol, **{**flat, **_target_options(target_options)})
        self.fs = fs
        self._paths: dict[str, str] = {}
        self.target_protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        # every option also in its string form: clients such as Polars hand storage
        # options over as strings ("1GiB", "true", "8"), and nonsense is a BadInput
        params = EngineParams(block_size=parse_size(block_size, what="block_size"),
                              max_prefetch=parse_count(max_prefetch, what="max_prefetch"),
                              max_prefetch_bytes=parse_size(max_prefetch_bytes,
                                                            what="max_prefetch_bytes"),
                              retries=parse_count(retries, what="retries"),
                              request_timeout_s=parse_seconds(request_timeout, what="request_timeout",
                                                              optional=True),
                              metadata_ttl_s=_seconds(metadata_ttl, "metadata_ttl"),
                              seed=parse_count(seed, what="seed"),
                              verify=str(verify_checksum).strip().lower(),
                              mmap_bytes=parse_size(mmap_bytes, what="mmap_bytes"),
                              cache_mode=check_cache_mode(cache_mode),
                              free_space_ratio=check_free_space_ratio(
                                  parse_ratio(free_space_ratio, what="free_space_ratio")))
        self._spec = EngineSpec(
            cache_dir=os.path.realpath(os.path.expanduser(cache_dir or default_cache_dir())),
            target=target_token(fs), cache_size=parse_size(cache_size, what="cache_size"),
            policy=policy, advisor=None if advisor in ("", "none", "None") else advisor,
            params=params, root=root, daemon=DaemonMode.of(daemon),
            shared=shared_spec(shared_cache, shared_cache_options, shared_cache_timeout))
        self._share = parse_bool(share_engine, what="share_engine")
        self._engine: CacheEngine | None = None
        self._generation = -1
        self._release: weakref.finalize[..., Any] | None = None
        self._attach()

    def _build_engine(self) -> CacheEngine:
        s = self._spec
        return CacheEngine(self.fs, s.cache_dir, s.cache_size, policy=s.policy, advisor=s.advisor,
                           params=s.params, root=s.root, daemon=s.daemon, shared=s.shared)

    def _attach(self) -> None:
        """Lease this process's engine of the cache dir and target (see
        :mod:`aicache.datacache.sharing`). In a forked child (a DataLoader worker) the
        inherited engine is the parent's: kept, never used or closed here; and the target
        filesystem is built anew from its options, since the parent's may hold what does
        not survive a fork (s3fs's event loop and aiobotocore session, a connection pool)."""
        if self._engine is not None:
            ENGINES.inherited(self._engine)
            if self._release is not None:
                self._release.detach()
            self.fs = _target_in_child(self.fs)
        engine = ENGINES.acquire(self._spec, self._build_engine) if self._share \
            else self._build_engine()
        self._engine, self._generation = engine, ENGINES.generation
        self._release = weakref.finalize(self, ENGINES.release, self._spec.key, engine,
                                         self._generation)

    @property
    def engine(self) -> CacheEngine:
        """The engine reads go through (taken afresh in a forked child)."""
        if self._generation != ENGINES.generation:
            self._attach()
        return self._engine  # type: ignore[return-value]  # _attach() always sets it

    # -- paths ----------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("aicache://"):
            path = path[len("aicache://"):]
        elif path.startswith("aicache::"):
            path = path[len("aicache::"):]
        return path.rstrip("/") or path

    def _target_path(self, path: str) -> str:
        # memoised: the target's _strip_protocol (path normalisation) costs more than a
        # cached 128 KiB read's Python overhead; a pure function of the string, bounded
        hit = self._paths.get(path)
        if hit is None:
            hit = self.fs._strip_protocol(self._strip_protocol(path))
            if len(self._paths) >= 1 << 16:
                self._paths.clear()
            self._paths[path] = hit
        return hit

    # -- metadata: the engine's cache of the target's answers (metadata_ttl) --------------
    def _info_of(self, path: str) -> dict[str, Any] | None:
        """``path``'s info record on the target (None: no such path), from the engine's
        metadata cache within ``metadata_ttl``: no remote call after the first."""
        return self.engine.info(self._target_path(path))

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("refresh"):
            self.engine.forget_info(self._target_path(path))
        rec = self._info_of(path)
        if rec is None:
            raise FileNotFoundError(path)
        return dict(rec)  # a copy: the cached record is shared

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        engine, p = self.engine, self._target_path(path)
        if kwargs.pop("refresh", False):
            engine.forget_listings(p)
        entries = engine.ls(p)
        return [dict(e) for e in entries] if detail else [e["name"] for e in entries]

    def find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
             detail: bool = False, **kwargs: Any) -> Any:
        engine, p = self.engine, self._target_path(path)
        if kwargs:  # options of the target's own (a prefix…): its answer, not cached
            engine.target_cache_since(p, subtree=True)
            return engine.target.find(p, maxdepth=maxdepth, withdirs=withdirs, detail=detail,
                                      **kwargs)
        found = engine.find(p, maxdepth, withdirs)
        return {k: dict(v) for k, v in found.items()} if detail else list(found)

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self._info_of(path) is not None

    def isdir(self, path: str) -> bool:
        rec = self._info_of(path)
        return rec is not None and rec.get("type") == "directory"

    def isfile(self, path: str) -> bool:
        rec = self._info_of(path)
        return rec is not None and rec.get("type", "file") == "file"

    def modified(self, path: str) -> datetime.datetime:
        """When ``path`` was last written, from its (cached) info record (DuckDB asks
        before every scan); the target's own answer where the record carries no time."""
        return self._time_of(path, ("LastModified", "last_modified", "mtime", "updated",
                                    "modified", "timeCreated", "created"), "modified")

    def created(self, path: str) -> datetime.datetime:
        """When ``path`` was created, as :meth:`modified` (object stores only know when
        an object was last written)."""
        return self._time_of(path, ("created", "timeCreated", "LastModified", "last_modified",
                                    "mtime"), "created")

    def _time_of(self, path: str, keys: tuple[str, ...], method: str) -> datetime.datetime:
        rec = self._info_of(path)
        if rec is None:
            raise FileNotFoundError(path)
        for k in keys:
            t = _as_datetime(rec.get(k))
            if t is not None:
                return t
        answer: datetime.datetime = getattr(self.engine.target, method)(self._target_path(path))
        return answer

    # -- bytes: through the cache ---------------------------------------------------------
    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        engine = self.engine
        meta = engine.stat(self._target_path(path))
        if start is None and end is None:  # whole file (the common case): no range maths
            return engine.read_meta(meta)
        s, e = _resolve_range(meta.size, start, end)
        return engine.read_meta(meta, s, e - s)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True,
              cache_options: Any = None, **kwargs: Any) -> AICacheFile:
        if mode != "rb":
            raise PermissionError(f"{path}: aicache is read-only towards the remote (mode {mode!r}); "
                                  "write to the target filesystem directly")
        p = self._target_path(path)
        return AICacheFile(self, p, self.engine.stat(p, first_page=True))

    # -- unsupported writes ---------------------------------------------------------------
    def _readonly(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError("aicache is read-only towards the remote; write to the target directly")

    rm_file = _readonly
    rm = _readonly
    mkdir = _readonly
    makedirs = _readonly
    pipe_file = _readonly
    cp_file = _readonly
    put_file = _readonly
    mv = _readonly

    def close(self) -> None:
        """Give back this instance's engine lease (the engine closes with its last lease,
        see :mod:`aicache.datacache.sharing`); fsspec's instance cache forgets this
        instance, so the next ``fsspec.filesystem("aicache", ...)`` builds a new one."""
        if self._release is not None:
            self._release()
        token = getattr(self, "_fs_token_", None)
        if token is not None:  # a closed instance must not be handed out again
            type(self)._cache.pop(token, None)


def _target_options(opts: dict[str, Any] | str | None) -> dict[str, Any]:
    """``target_options`` as a dict; a client that passes every option as a string
    (Polars) may give it as JSON text."""
    if opts is None or isinstance(opts, dict):
        return dict(opts or {})
    try:
        parsed = json.loads(opts)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise BadInput(f"target_options {opts!r} is not a dict or a JSON object; give e.g. "
                       '\'{"endpoint_url": "http://host:9000"}\'')
    return parsed


def shared_spec(url: str | None, options: dict[str, Any] | str | None,
                timeout: float | str) -> SharedTierSpec | None:
    """The shared tier the options name (None: no ``shared_cache``); its options may be
    JSON text, as ``target_options``."""
    if url is None or str(url).strip() in ("", "none", "None"):
        return None
    try:
        opts = _target_options(options)
    except BadInput:
        raise BadInput(f"shared_cache_options {options!r} is not a dict or a JSON object; give "
                       'e.g. \'{"endpoint_url": "http://host:9000"}\'') from None
    if "endpoint_url" in opts:  # s3fs takes it inside client_kwargs
        opts.setdefault("client_kwargs", {})["endpoint_url"] = opts.pop("endpoint_url")
    return SharedTierSpec(str(url), opts, timeout_s=_seconds(timeout, "shared_cache_timeout"))


def _seconds(value: float | str, what: str) -> float:
    s = parse_seconds(value, what=what)
    assert s is not None  # not optional: None is refused
    return s


def _target_in_child(fs: AbstractFileSystem) -> AbstractFileSystem:
    """A new instance of ``fs`` made from its class and options (fsspec records both), for
    a forked child; ``fs`` itself when it records none."""
    opts = getattr(fs, "storage_options", None)
    if opts is None:
        return fs
    try:
        fresh: AbstractFileSystem = type(fs)(*getattr(fs, "storage_args", ()),
                                             **{**opts, "skip_instance_cache": True})
    except Exception as exc:  # noqa: BLE001 - a target that cannot be rebuilt: try the inherited one
        log.warning("aicache: could not rebuild the %s target in a forked child (%s: %s); "
                    "reading through the parent's", type(fs).__name__, type(exc).__name__, exc)
        return fs
    return fresh


def _as_datetime(value: Any) -> datetime.datetime | None:
    """A timestamp of an info record (a datetime, epoch seconds, or ISO 8601 text) as an
    aware datetime; None when ``value`` is none of those."""
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.datetime.fromtimestamp(value, tz=datetime.timezone.utc)
    if isinstance(value, str) and value:
        try:
            return _as_datetime(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _resolve_range(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """fsspec range semantics: None = file edge, negative = from the end, clipped."""
    s = 0 if start is None else (size + start if start < 0 else start)
    e = size if end is None else (size + end if end < 0 else end)
    s = min(max(s, 0), size)
    e = min(max(e, s), size)
    return s, e


class AICacheFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped (Any)
    """A read-only file whose reads go through the engine by block (see module docstring)."""

    def __init__(self, fs: AICacheFileSystem, path: str, meta: FileMeta) -> None:
        self.meta = meta
        self.engine = fs.engine
        #: what this file reads its blocks through
        self.reader = fs.engine.reader
        self._memo_idx = -1
        self._memo: bytes = b""
        self._memo_hit = False
        self._stream = ReadStream()  # tells a streaming reader from a jumping one
        super().__init__(fs, path, mode="rb", block_size=fs.engine.block_size,
                         cache_type="none", size=meta.size)

    def read(self, length: int = -1) -> bytes:
        """``length`` bytes from the current position (all that remain if negative), as
        :class:`AbstractBufferedFile` reads with ``cache_type="none"`` — without its
        per-read cache-statistics string, which costs more than a mapped block hit's
        bookkeeping."""
        length = -1 if length is None else int(length)
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        end = self.size if length < 0 else min(self.loc + length, self.size)
        if end <= self.loc:
            return b""
        out = self._fetch_range(self.loc, end)
        self.loc += len(out)
        return out

    def _fetch_range(self, start: int, end: int) -> bytes:
        reader = self.reader
        B = reader.block_size
        if end <= start:
            return b""
        self._stream.note(start, end, reader.page_size, self.meta.size)
        idx = start // B
        if (end - 1) // B != idx:  # spans blocks: let the engine assemble them
            return reader.read_range(self.meta, start, end - start, self._stream)
        s, e = start - idx * B, end - idx * B
        if idx != self._memo_idx:
            whole = s == 0 and e >= min(B, self.meta.size - idx * B)
            if not whole and reader.page_size:  # a sparse read of a block not held: its pages
                got = reader.read_sparse(self.meta, start, end, self._stream)
                if got is not None:
                    return got
            # a reader that jumps is not read ahead for (its accesses are still told)
            ahead = reader.ahead(self._stream)
            if whole:
                # a whole block (the sequential reader's 4 MiB read): not memoised, so that
                # it is freed as soon as the caller drops it — keeping it alive made every
                # next read allocate (and page-fault) a fresh 4 MiB buffer
                return reader.read_block(self.meta, idx, None, ahead)[0]
            self._memo, self._memo_hit = reader.read_block(self.meta, idx, e - s, ahead)
            self._memo_idx = idx
        elif self._memo_hit:  # a later piece of a block held after a hit: its bytes count
            reader.count_bytes(min(e, len(self._memo)) - s)
        blk = self._memo
        return blk if (s == 0 and e >= len(blk)) else blk[s:e]


fsspec.register_implementation("aicache", AICacheFileSystem, clobber=True)
