"""The engine's metadata cache: file size/version (``_meta``, for reads), the target's
``info`` answers (``_info``: FUSE attributes, the fsspec ``info``/``exists``/``size``…), its
directory listings (``_lists``: ``ls``, FUSE ``readdir``) and its ``find`` answers
(``_finds``: ``find``/``glob``), all reused for ``metadata_ttl_s``: within it a metadata call
asks the remote nothing, past it the next one asks again (bypassing the target's own
listing cache, which never expires in s3fs).

The tables stay separate: ``_meta`` holds a :class:`FileMeta` keyed by the stripped path
and is what block keys are pinned to (a :class:`~aicache.datacache.version.VersionGone` drops
only it), while ``_info`` holds raw records keyed by the path asked for, including
remembered absences; they are invalidated by different events. A listing or ``find``
answer also fills ``_info`` with its entries (as old as the listing), so the ``info`` of a
listed file is no second request, and :meth:`stat` reads a fresh ``_info`` record (an
``info``, a listing or ``find`` entry, a remembered absence) before it asks the remote:
``info`` then ``open`` (pyarrow's order) is one HEAD, and a globbed file none. A listing
entry is as good a version as a stat's (the block map adopts them too): it lacks only an
S3 VersionId, and reads of it are then pinned by ``If-Match``.

Every answer handed out is the cached record itself: callers copy before changing one
(the fsspec filesystem does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aicache.datacache.engine.params import EngineParams
from aicache.datacache.version import VersionScheme

@dataclass(frozen=True, slots=True)
class FileMeta:
    """What the engine knows of one remote file: its size and version (the block key's
    version, see :mod:`aicache.datacache.version`); ``pin`` is what a range read asks the
    remote for to get exactly that version, when it is not the version itself."""

    path: str
    size: int
    version: str
    pin: str = ""



def file_meta(scheme: VersionScheme, path: str, info: dict[str, Any]) -> FileMeta:
    """``path``'s metadata as ``scheme`` identifies the target's ``info`` record."""
    ident = scheme.identify(info)
    return FileMeta(path, ident.size, ident.version, ident.pin)


class MetadataCache:
    """:class:`~aicache.datacache.engine.CacheEngine`'s metadata methods (a mixin: the
    state lives on the engine, guarded by its ``_lock``)."""

    params: EngineParams
    target: Any
    versions: VersionScheme
    _clock: Callable[[], float]
    _lock: threading.Lock
    _meta: dict[str, tuple[FileMeta, float]]
    _info: dict[str, tuple[dict[str, Any] | None, float]]
    _target_since: dict[str, float]
    _lists: dict[str, tuple[list[dict[str, Any]], float]]
    _listed: set[str]
    #: folders being mapped by a first stat → the lock its siblings' stats wait on
    _mapping: dict[str, threading.Lock]
    _finds: dict[tuple[str, int | None, bool], tuple[dict[str, dict[str, Any]], float]]
    _remote: Callable[..., Any]
    _ensure_mapped: Callable[[FileMeta], None]
    _ensure_listed: Callable[[str], None]
    _read_first_page: Callable[[str], tuple[dict[str, Any], bytes] | None]
    keep_first_page: Callable[[FileMeta, bytes], None]
    _seen_once: set[str]

    def stat(self, path: str, first_page: bool = False) -> FileMeta:
        """Size and version of ``path`` (cached for ``metadata_ttl_s``: an answer is never
        older than that, since a remote stat bypasses the target's own listing cache). A
        path found missing (or a directory) is remembered as such for the TTL as well
        (readers such as zarr probe for files that do not exist on every open); a fresh
        ``info`` or listing record of the file answers without a request.

        ``first_page`` (an open): when the stat must ask the remote about a file this
        engine has no record of, however old, and the target's range reads carry size and
        version (S3), ask with a GET of the file's first page instead of a HEAD, and keep
        the page (:meth:`~.sparse.PageReader.keep_first_page`): one request, as before, of
        which most readers use the bytes (a format's header)."""
        now = self._clock()
        meta = self._cached_meta(path, now)
        if meta is not None:
            return meta
        path = self.target._strip_protocol(path)
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
                    self._ensure_listed(path)
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
        record, else from the remote; maps the file's folder (``_ensure_mapped``)."""
        info: dict[str, Any] | None
        first: tuple[dict[str, Any], bytes] | None = None
        known = self._info.get(path)  # an info or listing answer within the TTL
        if known is not None and now - known[1] < self.params.metadata_ttl_s and (
                known[0] is None or known[0].get("type") == "directory"
                or known[0].get("size") is not None):  # (an HTTP index lists no sizes)
            info, asked = known
        else:
            self.target.invalidate_cache(path)  # s3fs would answer from a listing of any age
            # a file seen before (its record expired): its first page is likely stored
            # already, so a HEAD (no bytes) asks whether its version is still current
            first_page = first_page and known is None and path not in self._meta
            try:
                first = self._read_first_page(path) if first_page else None
                info = first[0] if first is not None else self._remote(self.target.info, path)
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
        self._ensure_mapped(meta)
        with self._lock:
            self._meta[path] = (meta, asked)
        if first is not None:
            self.keep_first_page(meta, first[1])
        return meta

    def forget(self, path: str) -> None:
        """Drop ``path``'s cached metadata: the next :meth:`stat` asks the remote."""
        with self._lock:
            self._meta.pop(path, None)

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
        if t is None or now - t >= self.params.metadata_ttl_s:
            self.target.invalidate_cache(None if subtree else path)
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
        if hit is not None and now - hit[1] < self.params.metadata_ttl_s:
            return hit[0]
        if hit is None:  # never seen: its folder's listing (made once) may hold it
            try:
                self._ensure_listed(path)
            except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
                pass
            hit = self._info.get(path)
            if hit is not None and now - hit[1] < self.params.metadata_ttl_s:
                return hit[0]
        self.target.invalidate_cache(path)
        try:
            info: dict[str, Any] | None = self._remote(self.target.info, path)
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
        if hit is not None and now - hit[1] < self.params.metadata_ttl_s:
            return hit[0]
        since = self.target_cache_since(path)
        entries: list[dict[str, Any]] = self._remote(self.target.ls, path, detail=True)
        base = path.rstrip("/")
        for e in entries:
            name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name:
                self._remember_info(f"{base}/{name}", e, since)
        with self._lock:
            if len(self._lists) >= 1 << 14:  # bounded: a cleared listing is asked again
                self._lists.clear()
            self._lists[path] = (entries, since)
        return entries

    def find(self, path: str, maxdepth: int | None = None,
             withdirs: bool = False) -> dict[str, dict[str, Any]]:
        """The target's ``find(path, maxdepth, withdirs, detail=True)`` (name → info), no
        older than ``metadata_ttl_s`` (reused within it, per arguments), through the
        remote's retries and timeout; each entry's ``info`` is cached as old as the answer."""
        key = (path, maxdepth, withdirs)
        now = self._clock()
        hit = self._finds.get(key)
        if hit is not None and now - hit[1] < self.params.metadata_ttl_s:
            return hit[0]
        since = self.target_cache_since(path, subtree=True)
        found: dict[str, dict[str, Any]] = self._remote(
            self.target.find, path, maxdepth=maxdepth, withdirs=withdirs, detail=True)
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
        return hit is not None and self._clock() - hit[1] < self.params.metadata_ttl_s

    def cached_info(self, path: str) -> dict[str, Any] | None:
        """``path``'s cached ``info``, however old (None: none, or no such path)."""
        hit = self._info.get(path)
        return hit[0] if hit is not None else None

    def _remember_info(self, path: str, info: dict[str, Any] | None, asked: float) -> None:
        with self._lock:
            if len(self._info) >= 1 << 18:  # bounded: a cleared entry is asked again
                self._info.clear()
            self._info[path] = (info, asked)

    def stat_is_cached(self, path: str) -> bool:
        """Whether :meth:`stat` of ``path`` would answer without asking the remote (a FUSE
        session answers such requests inline and sends the others to a worker)."""
        return self._cached_meta(path, self._clock()) is not None

    def _cached_meta(self, path: str, now: float) -> FileMeta | None:
        hit = self._meta.get(path)  # a dict read is atomic: no lock
        return hit[0] if hit is not None and now - hit[1] < self.params.metadata_ttl_s else None
