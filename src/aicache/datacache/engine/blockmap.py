"""The engine's use of the block map: stable block ids per file (directory or dataset-root
listings registered with the policy) and the ``unit`` a file's blocks are reported under."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from aicache.datacache.engine.meta import file_meta
from aicache.datacache.engine.params import EngineParams
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.policy.driver import PolicyPort, SystemDriver
from aicache.datacache.version import VersionScheme


class FileBlocks:
    """What a read of one file's blocks needs, worked out once per :class:`FileMeta`: its
    first block id, the unit it is reported under, and the :class:`BlockKey` of each block
    read so far (a key is a pure function of the metadata and the index, so a hit reuses
    one instead of building and hashing a new one per read).

    Invariant: ``meta`` equals the metadata the record was built from; a read with other
    metadata (a new version, a grown file) builds a new record."""

    __slots__ = ("meta", "base", "unit", "keys")

    def __init__(self, meta: FileMeta, base: int, unit: str) -> None:
        self.meta = meta
        self.base = base
        self.unit = unit
        self.keys: dict[int, BlockKey] = {}

    def key(self, idx: int) -> BlockKey:
        k = self.keys.get(idx)
        if k is None:
            m = self.meta
            k = self.keys.setdefault(idx, BlockKey(m.path, m.version, idx))
        return k


class BlockMapping:
    """:class:`~aicache.datacache.engine.CacheEngine`'s block-map methods (a mixin: the
    state lives on the engine, guarded by its ``_lock``)."""

    params: EngineParams
    target: Any
    versions: VersionScheme
    policy: PolicyPort
    block_size: int
    _root: str
    _clock: Callable[[], float]
    _lock: threading.Lock
    _meta: dict[str, tuple[FileMeta, float]]
    _info: dict[str, tuple[dict[str, Any] | None, float]]
    _listed: set[str]
    #: folders one file of which was mapped without a listing
    _seen_once: set[str]
    _bases: dict[str, int]
    _nblocks: dict[str, int]
    _files: dict[str, FileBlocks]
    _remote: Callable[..., Any]

    def _file_blocks(self, meta: FileMeta) -> FileBlocks:
        """The read record of ``meta``'s file (registered with the policy first if new)."""
        fb = self._files.get(meta.path)
        if fb is not None and fb.meta == meta:  # a re-stat of an unchanged file
            fb.meta = meta  # the next read of this metadata takes the ``is`` test
            return fb
        base = self._bases.get(meta.path)
        if base is None:
            self._ensure_mapped(meta)
            base = self._bases[meta.path]
        fb = FileBlocks(meta, base, self.unit_of(meta.path))
        self._files[meta.path] = fb  # one per path: bounded like ``_bases``
        return fb

    def _ensure_mapped(self, meta: FileMeta) -> None:
        """Give ``meta``'s file its block range. The first file read in a folder is
        registered alone (its stat was a HEAD, which pins an S3 VersionId, and a job that
        reads one file pays no listing); the second lists the folder once (its entries then
        answer the stats of the rest, sorted ids following the first file's range)."""
        parent = meta.path.rsplit("/", 1)[0] if "/" in meta.path else ""
        if parent in self._listed or (self._root and self.params.list_root):
            self._ensure_listed(meta.path)
        else:
            with self._lock:
                first = parent not in self._seen_once
                if first:
                    if len(self._seen_once) >= 1 << 16:  # bounded: a cleared folder is listed
                        self._seen_once.clear()
                    self._seen_once.add(parent)
            if not first:
                self._ensure_listed(meta.path)
        n = max(1, math.ceil(meta.size / self.block_size))
        if self._bases.get(meta.path) is None or self._nblocks.get(meta.path, 0) < n:
            base, have = self.policy.register([(meta.path, meta.size)])[meta.path]
            self._bases[meta.path] = base
            self._nblocks[meta.path] = have

    def _ensure_listed(self, path: str) -> None:
        """List ``path``'s folder (or the dataset root) once, registering its files' block
        ranges and caching their metadata and ``info`` from the listing: the first read
        in a folder pays one listing, and its other files need no HEAD (stat or FUSE
        attributes) for the metadata TTL."""
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        if self._root and self.params.list_root and self._root not in self._listed \
                and path.startswith(self._root + "/"):
            self._map_root()
        if parent not in self._listed:
            asked = self._clock()  # the entries are no older than this
            try:
                self.target.invalidate_cache(parent or "/")
                entries = self._remote(self.target.ls, parent or "/", detail=True)
            except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
                entries = []
            files: list[tuple[str, int]] = []
            with self._lock:
                if parent not in self._listed:
                    self._listed.add(parent)
                    files = self._adopt_listing(((e.get("name", ""), e) for e in entries), asked)
            self._register(files)

    def _map_root(self) -> None:
        """Register every file under the dataset root at once, sorted by path: a sorted
        traversal of the dataset is then one stride, across folder boundaries too."""
        asked = self._clock()  # the entries are no older than this
        try:
            self.target.invalidate_cache()  # a find may answer from any sub-folder's listing
            found = self._remote(self.target.find, self._root, detail=True)
        except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
            found = {}
        with self._lock:
            if self._root in self._listed:
                return
            self._listed.add(self._root)
            files = self._adopt_listing(found.items(), asked)
            for name, _ in files:
                self._listed.add(name.rsplit("/", 1)[0] if "/" in name else "")
        self._register(files)

    def _adopt_listing(self, entries: Iterable[tuple[str, dict[str, Any]]],
                       asked: float) -> list[tuple[str, int]]:
        """Cache the metadata of the files among listing ``entries`` (name, detail) seen at
        ``asked``, keeping fresher entries already cached; their (path, size). Caller holds
        ``_lock``."""
        files: list[tuple[str, int]] = []
        for name, e in entries:
            if e.get("type") != "file":
                continue
            name = self.target._strip_protocol(name)
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

    def _register(self, files: list[tuple[str, int]]) -> None:
        """Give ``files`` (path, size) their block ranges in the policy's block map."""
        if files:
            for path, (base, n) in self.policy.register(files).items():
                self._bases[path] = base
                self._nblocks[path] = n

    def block_id(self, path: str, index: int) -> int:
        """The stable global id of block ``index`` of ``path`` (after :meth:`stat`)."""
        return self._bases[path] + index

    def unit_of(self, path: str) -> str:
        """The ``unit`` told to the system: the file's path relative to ``root`` (the mount's
        remote root, if any). Systems group files into dataset units themselves (the first
        path component(s)), and file-aware prefetchers (SFP) need the file."""
        r = self._root
        if r and path.startswith(r):
            rel = path[len(r):].lstrip("/")
            if not rel:
                return path
            # a file directly under the root belongs to the root's unit ("."), like the
            # files of a folder to that folder's: bare "name" would read as a unit of its
            # own, i.e. one unit (with its own statistics and reviews) per top-level file
            return rel if "/" in rel else "./" + rel
        return path

    def _unit_of_block(self, bid: int) -> str | None:
        """The ``unit`` (:meth:`unit_of`) of the file block ``bid`` belongs to, from the
        local block map; None while no registered file holds it."""
        assert isinstance(self.policy, SystemDriver)
        loc = self.policy.map.locate(bid)
        return None if loc is None else self.unit_of(loc[0])

    def _extent_of_unit(self, unit: str) -> tuple[int, int] | None:
        """The block range of the file :meth:`unit_of` named ``unit`` (its inverse), from the
        local block map; None while the file is not registered."""
        assert isinstance(self.policy, SystemDriver)
        bmap = self.policy.map
        r = self._root
        if r and not unit.startswith(r):
            ext = bmap.extent(f"{r}/{unit[2:] if unit.startswith('./') else unit}")
            if ext is not None:
                return ext
        return bmap.extent(unit)
