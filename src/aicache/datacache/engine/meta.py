"""The engine's metadata cache (:class:`MetadataCache`): file size/version (``_meta``, for
reads), the target's ``info`` answers (``_info``: FUSE attributes, the fsspec
``info``/``exists``/``size``…), its directory listings (``_lists``: ``ls``, FUSE
``readdir``) and its ``find`` answers (``_finds``: ``find``/``glob``), all reused for
``metadata_ttl_s``: within it a metadata call asks the remote nothing, past it the next one
asks again (bypassing the target's own listing cache, which never expires in s3fs). One
cache serves every front end: the fsspec filesystem and the FUSE mount read the same
records, under this part's own lock.

The records are kept by kind because they are invalidated by different events: ``_meta``
holds a :class:`FileMeta` keyed by the stripped path and is what block keys are pinned to
(a :class:`~aicache.datacache.version.VersionGone` drops only it), while ``_info`` holds raw
records keyed by the path asked for, including remembered absences. A listing or ``find``
answer also fills ``_info`` with its entries (as old as the listing), so the ``info`` of a
listed file is no second request, and :meth:`MetadataCache.stat` reads a fresh ``_info``
record (an ``info``, a listing or ``find`` entry, a remembered absence) before it asks the
remote: ``info`` then ``open`` (pyarrow's order) is one HEAD, and a globbed file none. A
listing entry is as good a version as a stat's (the block map adopts them too): it lacks
only an S3 VersionId, and reads of it are then pinned by ``If-Match``.

Folder listings for the block map: the first file read in a folder is stat'ed alone (its
stat was a HEAD, which pins an S3 VersionId, and a job that reads one file pays no
listing); the second lists the folder once (its entries then answer the stats of the rest).
The files a listing or a stat finds are handed to the :class:`FileRegistry` (the block
layout), which gives them block ranges; the cache never reads the layout back.

Every answer handed out is the cached record itself: callers copy before changing one
(the fsspec filesystem does).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from aicache.datacache.keys import FileMeta
from aicache.datacache.version import VersionScheme


def file_meta(scheme: VersionScheme, path: str, info: dict[str, Any]) -> FileMeta:
    """``path``'s metadata as ``scheme`` identifies the target's ``info`` record."""
    ident = scheme.identify(info)
    return FileMeta(path, ident.size, ident.version, ident.pin)


class MetadataSource(Protocol):
    """What the metadata cache asks the remote (:class:`~.remote.RemoteClient`: each call
    with its retries and timeout). ``info`` raises FileNotFoundError for no such path."""

    def strip(self, path: str) -> str: ...

    def invalidate(self, path: str | None = None) -> None: ...

    def info(self, path: str) -> dict[str, Any]: ...

    def ls(self, path: str) -> list[dict[str, Any]]: ...

    def find(self, path: str, maxdepth: int | None = None,
             withdirs: bool = False) -> dict[str, dict[str, Any]]: ...

    def read_first(self, path: str, page: int) -> tuple[dict[str, Any], bytes] | None:
        """``path``'s ``info`` and first ``page`` bytes from one request (None: the target
        cannot, or did not tell: ask ``info``)."""


class FirstPages(Protocol):
    """Who keeps the first page an open fetched with the file's metadata (the page reader)."""

    def keep_first_page(self, meta: FileMeta, data: bytes) -> None: ...


class FileRegistry(Protocol):
    """Who gives the files the cache finds their block ranges (the block layout)."""

    def register(self, files: Sequence[tuple[str, int]]) -> None:
        """Block ranges for ``files`` (path, size), in this order, after every range so far."""

    def register_file(self, path: str, nblocks: int, size: int) -> None:
        """A range for ``path`` unless it has one of ``nblocks`` blocks or more."""


class MetadataCache:
    """Metadata of ``remote``'s files, reused for ``ttl_s`` by the ``clock``; files found
    are registered with ``registry``. ``root``/``list_root``: list the whole dataset root
    once (a ``find``) instead of folder by folder. ``block_size`` sizes a stat'ed file's
    range for the registry. ``first_pages``: where an open's first page goes, when it asks
    with one (``page_size`` bytes; 0: never)."""

    def __init__(self, remote: MetadataSource, versions: VersionScheme, registry: FileRegistry,
                 *, ttl_s: float, block_size: int, clock: Callable[[], float],
                 root: str = "", list_root: bool = False, first_pages: FirstPages | None = None,
                 page_size: int = 0) -> None:
        self.remote = remote
        self.versions = versions
        self.registry = registry
        self.ttl_s = ttl_s
        self.block_size = block_size
        self._clock = clock
        self._root = root.rstrip("/")
        self._list_root = list_root
        self.first_pages = first_pages
        #: the bytes of an open's first-page request (0: opens ask with ``info``)
        self.page_size = page_size
        self._lock = threading.Lock()
        self._meta: dict[str, tuple[FileMeta, float]] = {}
        #: the target's ``info`` answers (None: no such path) and when they were asked
        self._info: dict[str, tuple[dict[str, Any] | None, float]] = {}
        self._lists: dict[str, tuple[list[dict[str, Any]], float]] = {}
        self._finds: dict[tuple[str, int | None, bool], tuple[dict[str, dict[str, Any]], float]] = {}
        self._target_since: dict[str, float] = {}
        #: folders listed (or the root, found) once for the block map
        self._listed: set[str] = set()
        #: folders one file of which was mapped without a listing
        self._seen_once: set[str] = set()
        #: folders being mapped by a first stat → the lock its siblings' stats wait on
        self._mapping: dict[str, threading.Lock] = {}

    # -- file metadata (reads) -----------------------------------------------------------------
    def stat(self, path: str, first_page: bool = False) -> FileMeta:
        """Size and version of ``path`` (cached for ``metadata_ttl_s``: an answer is never
        older than that, since a remote stat bypasses the target's own listing cache). A
        path found missing (or a directory) is remembered as such for the TTL as well
        (readers such as zarr probe for files that do not exist on every open); a fresh
        ``info`` or listing record of the file answers without a request.

        ``first_page`` (an open): when the stat must ask the remote about a file this
        cache has no record of, however old, and the target's range reads carry size and
        version (S3), ask with a GET of the file's first page instead of a HEAD, and hand
        the page to ``first_pages``: one request, as before, of which most readers use the
        bytes (a format's header)."""
        now = self._clock()
        meta = self._cached_meta(path, now)
        if meta is not None:
            return meta
        path = self.remote.strip(path)
        meta = self._cached_meta(path, now)
        if meta is not None:
            return meta
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        if parent in self._listed:
            return self._stat_remote(path, now, first_page)
        # the first stats of a folder not mapped yet: one of them asks the remote and maps the
        # folder (one listing, whose entries answer the others); concurrent readers of its
        # other files (zarr reads chunks in parallel) wait for that instead of asking too
        with self._folder_lock(parent):
            meta = self._cached_meta(path, self._clock())
            if meta is not None:
                return meta
            try:
                if parent in self._seen_once:
                    # a second file of the folder: the listing first (one request, made for
                    # the block map anyway); its entry answers this stat (no HEAD)
                    self.ensure_listed(path)
                return self._stat_remote(path, now, first_page)
            finally:
                with self._lock:
                    if parent in self._listed:
                        self._mapping.pop(parent, None)

    def _folder_lock(self, parent: str) -> threading.Lock:
        with self._lock:
            lock = self._mapping.get(parent)
            if lock is None:
                if len(self._mapping) >= 1 << 14:  # bounded (folders of missing paths stay):
                    self._mapping.clear()  # a waiter keeps its lock; later ones make new ones
                lock = self._mapping[parent] = threading.Lock()
            return lock

    def _stat_remote(self, path: str, now: float, first_page: bool = False) -> FileMeta:
        """:meth:`stat` of a stripped ``path`` not in ``_meta``: from a fresh ``_info``
        record, else from the remote; maps the file (:meth:`ensure_mapped`)."""
        info: dict[str, Any] | None
        first: tuple[dict[str, Any], bytes] | None = None
        known = self._info.get(path)  # an info or listing answer within the TTL
        if known is not None and now - known[1] < self.ttl_s and (
                known[0] is None or known[0].get("type") == "directory"
                or known[0].get("size") is not None):  # (an HTTP index lists no sizes)
            info, asked = known
        else:
            self.remote.invalidate(path)  # s3fs would answer from a listing of any age
            # a file seen before (its record expired): its first page is likely stored
            # already, so a HEAD (no bytes) asks whether its version is still current
            first_page = (first_page and self.first_pages is not None and known is None
                          and path not in self._meta)
            try:
                first = self.remote.read_first(path, self.page_size) if first_page else None
                info = first[0] if first is not None else self.remote.info(path)
                asked = now
            except FileNotFoundError:
                info, asked = None, now
            self._remember_info(path, info, now)
        if info is None:
            self.forget(path)
            raise FileNotFoundError(path)
        if info.get("type", "file") == "directory":
            self.forget(path)
            raise IsADirectoryError(path)
        meta = file_meta(self.versions, path, info)
        self.ensure_mapped(meta)
        with self._lock:
            self._meta[path] = (meta, asked)
        if first is not None and self.first_pages is not None:
            self.first_pages.keep_first_page(meta, first[1])
        return meta

    def forget(self, path: str) -> None:
        """Drop ``path``'s cached metadata: the next :meth:`stat` asks the remote."""
        with self._lock:
            self._meta.pop(path, None)

    def forget_version(self, meta: FileMeta) -> None:
        """The remote no longer holds ``meta``'s version: drop it (unless a newer one is
        cached already) and the path's ``info`` record (which a stat would otherwise take
        its version from again), so that the next open asks the remote for the current one."""
        with self._lock:
            if self._meta.get(meta.path, (None,))[0] == meta:
                del self._meta[meta.path]
            self._info.pop(meta.path, None)

    def known(self, path: str) -> FileMeta | None:
        """The metadata cached for the stripped ``path``, however old (None: none)."""
        hit = self._meta.get(path)  # a dict read is atomic: no lock
        return hit[0] if hit is not None else None

    def stat_is_cached(self, path: str) -> bool:
        """Whether :meth:`stat` of ``path`` would answer without asking the remote (a FUSE
        session answers such requests inline and sends the others to a worker)."""
        return self._cached_meta(path, self._clock()) is not None

    def _cached_meta(self, path: str, now: float) -> FileMeta | None:
        hit = self._meta.get(path)  # a dict read is atomic: no lock
        return hit[0] if hit is not None and now - hit[1] < self.ttl_s else None

    # -- the block map's listings --------------------------------------------------------------
    def ensure_mapped(self, meta: FileMeta) -> None:
        """Give ``meta``'s file its block range: the first file read in a folder is
        registered alone, the second lists the folder (:meth:`ensure_listed`)."""
        parent = meta.path.rsplit("/", 1)[0] if "/" in meta.path else ""
        if parent in self._listed or (self._root and self._list_root):
            self.ensure_listed(meta.path)
        else:
            with self._lock:
                first = parent not in self._seen_once
                if first:
                    if len(self._seen_once) >= 1 << 16:  # bounded: a cleared folder is listed
                        self._seen_once.clear()
                    self._seen_once.add(parent)
            if not first:
                self.ensure_listed(meta.path)
        self.registry.register_file(meta.path, max(1, math.ceil(meta.size / self.block_size)),
                                    meta.size)

    def ensure_listed(self, path: str) -> None:
        """List ``path``'s folder (or the dataset root) once, registering its files' block
        ranges and caching their metadata and ``info`` from the listing: the first read
        in a folder pays one listing, and its other files need no HEAD (stat or FUSE
        attributes) for the metadata TTL."""
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        if self._root and self._list_root and self._root not in self._listed \
                and path.startswith(self._root + "/"):
            self._map_root()
        if parent not in self._listed:
            asked = self._clock()  # the entries are no older than this
            try:
                self.remote.invalidate(parent or "/")
                entries = self.remote.ls(parent or "/")
            except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
                entries = []
            files: list[tuple[str, int]] = []
            with self._lock:
                if parent not in self._listed:
                    self._listed.add(parent)
                    files = self._adopt_listing(((e.get("name", ""), e) for e in entries), asked)
            if files:
                self.registry.register(files)

    def _map_root(self) -> None:
        """Register every file under the dataset root at once, sorted by path: a sorted
        traversal of the dataset is then one stride, across folder boundaries too."""
        asked = self._clock()  # the entries are no older than this
        try:
            self.remote.invalidate()  # a find may answer from any sub-folder's listing
            found = self.remote.find(self._root)
        except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
            found = {}
        with self._lock:
            if self._root in self._listed:
                return
            self._listed.add(self._root)
            files = self._adopt_listing(found.items(), asked)
            for name, _ in files:
                self._listed.add(name.rsplit("/", 1)[0] if "/" in name else "")
        if files:
            self.registry.register(files)

    def _adopt_listing(self, entries: Iterable[tuple[str, dict[str, Any]]],
                       asked: float) -> list[tuple[str, int]]:
        """Cache the metadata of the files among listing ``entries`` (name, detail) seen at
        ``asked``, and the ``info`` of its files and subfolders, keeping fresher entries
        already cached; the files' (path, size). Caller holds ``_lock``."""
        files: list[tuple[str, int]] = []
        for name, e in entries:
            if e.get("type") != "file":
                if e.get("type") == "directory":  # a subfolder's info, as its files' below
                    name = self.remote.strip(name).rstrip("/")
                    old = self._info.get(name)
                    if name and (old is None or old[1] < asked):
                        self._info[name] = (e, asked)
                continue
            name = self.remote.strip(name)
            try:
                m = file_meta(self.versions, name, e)
            except FileNotFoundError:  # gone since it was listed
                continue
            self._meta.setdefault(name, (m, asked))
            old = self._info.get(name)
            if old is None or old[1] < asked:
                self._info[name] = (e, asked)
            files.append((name, m.size))
        return files

    # -- the target's records (fsspec info/ls/find, FUSE getattr/readdir) ----------------------
    def target_cache_since(self, path: str, subtree: bool = False) -> float:
        """Before asking the target about ``path`` (a listing, an ``info``): drop what the
        target's own metadata cache (s3fs's dircache, which never expires) holds about it
        once that may be ``metadata_ttl_s`` old. Returns the time since which anything the
        target answers about ``path`` was fetched (a lower bound on its age).

        Sound because an invalidation of ``path`` drops its entry and its parents' (the
        listing an ``info`` of a file is answered from), so whatever the target answers
        from later was fetched after it. ``subtree``: about everything under ``path`` too
        (a ``find``, which may answer sub-folders from their own cached listings): the
        target's whole cache is dropped when it may be stale."""
        now = self._clock()
        key = path + "/**" if subtree else path
        t = self._target_since.get(key)
        if t is None or now - t >= self.ttl_s:
            self.remote.invalidate(None if subtree else path)
            with self._lock:
                if len(self._target_since) >= 1 << 16:
                    self._target_since.clear()
                self._target_since[key] = t = now
        return t

    def info(self, path: str) -> dict[str, Any] | None:
        """The target's ``info`` of ``path`` (None: no such path), from the metadata cache
        while younger than ``metadata_ttl_s``, else asked through the remote's retries and
        timeout (bypassing the target's own listing cache, as :meth:`stat` does). A path
        that does not exist is remembered as such for the TTL too."""
        now = self._clock()
        hit = self._info.get(path)  # a dict read is atomic: no lock
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        if hit is None:  # never seen: its folder's listing (made once) may hold it
            try:
                self.ensure_listed(path)
            except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
                pass
            hit = self._info.get(path)
            if hit is not None and now - hit[1] < self.ttl_s:
                return hit[0]
        self.remote.invalidate(path)
        info: dict[str, Any] | None
        try:
            info = self.remote.info(path)
        except FileNotFoundError:
            info = None
        self._remember_info(path, info, now)
        return info

    def ls(self, path: str) -> list[dict[str, Any]]:
        """The target's detailed listing of directory ``path``, no older than
        ``metadata_ttl_s`` (reused within it), through the remote's retries and timeout;
        each entry's ``info`` is cached under ``path/NAME`` as old as the listing may be."""
        now = self._clock()
        hit = self._lists.get(path)  # a dict read is atomic: no lock
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        since = self.target_cache_since(path)
        entries = self.remote.ls(path)
        base = path.rstrip("/")
        for e in entries:
            name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name:
                self._remember_info(f"{base}/{name}", e, since)
        folder = self.remote.strip(path).rstrip("/")
        files: list[tuple[str, int]] = []
        with self._lock:
            if len(self._lists) >= 1 << 14:  # bounded: a cleared listing is asked again
                self._lists.clear()
            self._lists[path] = (entries, since)
            # the folder's listing for the block map too (unless the root is found whole):
            # its files' stats need no second listing
            if folder not in self._listed and not (self._root and self._list_root):
                self._listed.add(folder)
                files = self._adopt_listing(((e.get("name", ""), e) for e in entries), since)
        if files:
            self.registry.register(files)
        return entries

    def find(self, path: str, maxdepth: int | None = None,
             withdirs: bool = False) -> dict[str, dict[str, Any]]:
        """The target's ``find(path, maxdepth, withdirs, detail=True)`` (name → info), no
        older than ``metadata_ttl_s`` (reused within it, per arguments), through the
        remote's retries and timeout; each entry's ``info`` is cached as old as the answer."""
        key = (path, maxdepth, withdirs)
        now = self._clock()
        hit = self._finds.get(key)
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        since = self.target_cache_since(path, subtree=True)
        found = self.remote.find(path, maxdepth, withdirs)
        for name, e in found.items():
            self._remember_info(str(name).rstrip("/"), e, since)
        with self._lock:
            if len(self._finds) >= 1 << 12:
                self._finds.clear()
            self._finds[key] = (found, since)
        return found

    def forget_listings(self, path: str) -> None:
        """Drop the cached listings and ``find`` answers of ``path`` (a caller's
        ``refresh=True``): the next ones ask the remote."""
        with self._lock:
            self._lists.pop(path, None)
            for key in [k for k in self._finds if k[0] == path]:
                del self._finds[key]

    def forget_info(self, path: str) -> None:
        """Drop ``path``'s cached ``info`` (its attributes predate the version opened)."""
        with self._lock:
            self._info.pop(path, None)

    def info_is_cached(self, path: str) -> bool:
        """Whether :meth:`info` of ``path`` would answer without asking the remote."""
        hit = self._info.get(path)
        return hit is not None and self._clock() - hit[1] < self.ttl_s

    def cached_info(self, path: str) -> dict[str, Any] | None:
        """``path``'s cached ``info``, however old (None: none, or no such path)."""
        hit = self._info.get(path)
        return hit[0] if hit is not None else None

    def _remember_info(self, path: str, info: dict[str, Any] | None, asked: float) -> None:
        with self._lock:
            if len(self._info) >= 1 << 18:  # bounded: a cleared entry is asked again
                self._info.clear()
            self._info[path] = (info, asked)
