"""The engine's block layout (:class:`BlockLayout`): stable block ids per file (ranges
registered with the policy's block map, in the order the metadata cache finds files) and
the ``unit`` a file's blocks are reported under. It owns the id ranges and the per-file read
records; the policy port is its only collaborator."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from aicache.datacache.policy.driver import PolicyPort, SystemDriver
from aicache.datacache.keys import BlockKey, FileMeta

#: separates a version from the page size in a sparse page's key. A version is an ETag, a
#: generation, a VersionId or a decimal stat tuple (:mod:`aicache.datacache.version`): none
#: holds an ASCII record separator, so a page key never equals a block key
PAGE_TAG = "\x1epage"
#: what a file's page id range is registered under in the block map (same reason)
PAGES_SUFFIX = "\x1epages"


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


class BlockLayout:
    """Block ids of files: ``register`` hands out ranges through ``policy`` (whose block
    map is shared with the simulator's replay, or the daemon's), ``file_blocks`` gives the
    record a read of one version of a file uses. ``root``: paths are reported to the
    system relative to it (:meth:`unit_of`).

    Thread-safety: ranges are written under this part's lock; the read records are a
    dict read (atomic) on the hot path, and a record is immutable but for its key memo."""

    def __init__(self, policy: PolicyPort, block_size: int, root: str = "") -> None:
        self.policy = policy
        self.block_size = block_size
        self._root = root.rstrip("/")
        self._lock = threading.Lock()
        self._bases: dict[str, int] = {}
        self._nblocks: dict[str, int] = {}
        self._files: dict[str, FileBlocks] = {}
        #: path → (first id, count) of its sparse pages' range
        self._page_ids: dict[str, tuple[int, int]] = {}

    def register(self, files: Sequence[tuple[str, int]]) -> None:
        """Give ``files`` (path, size) their block ranges in the policy's block map."""
        if files:
            got = self.policy.register(files)
            with self._lock:
                for path, (base, n) in got.items():
                    self._bases[path] = base
                    self._nblocks[path] = n

    def register_file(self, path: str, nblocks: int, size: int) -> None:
        """A range for ``path`` unless it has one of ``nblocks`` blocks or more (a new
        file, or one that grew)."""
        if self._bases.get(path) is None or self._nblocks.get(path, 0) < nblocks:
            self.register([(path, size)])

    def file_blocks(self, meta: FileMeta) -> FileBlocks:
        """The read record of ``meta``'s file (registered alone first if it has no range:
        files found by the metadata cache have one already)."""
        fb = self._files.get(meta.path)
        if fb is not None and fb.meta is meta:  # the hot path: this metadata's record
            return fb
        if fb is not None and fb.meta == meta:  # a re-stat of an unchanged file
            fb.meta = meta  # the next read of this metadata takes the ``is`` test
            return fb
        base = self._bases.get(meta.path)
        if base is None:
            self.register_file(meta.path, max(1, -(-meta.size // self.block_size)), meta.size)
            base = self._bases[meta.path]
        fb = FileBlocks(meta, base, self.unit_of(meta.path))
        self._files[meta.path] = fb  # one per path: bounded like ``_bases``
        return fb

    def page_base(self, meta: FileMeta, page_size: int) -> int:
        """The first block id of ``meta``'s sparse pages of ``page_size`` (registered on
        first use; anew when the file grew past its range)."""
        n = max(1, -(-meta.size // page_size))
        have = self._page_ids.get(meta.path)
        if have is not None and have[1] >= n:
            return have[0]
        # the block map gives ceil(size / block_size) ids: ask for n blocks' worth
        got = self.policy.register([(meta.path + PAGES_SUFFIX, n * self.block_size)])
        base, count = got[meta.path + PAGES_SUFFIX]
        with self._lock:
            if len(self._page_ids) >= 1 << 16:
                self._page_ids.clear()
            self._page_ids[meta.path] = (base, count)
        return base

    def id_of(self, key: BlockKey) -> int | None:
        """The block id of a stored block or page ``key`` (None: its file has no range)."""
        if PAGE_TAG in key.version:
            have = self._page_ids.get(key.path)
            return None if have is None else have[0] + key.index
        base = self._bases.get(key.path)
        return None if base is None else base + key.index

    def block_id(self, path: str, index: int) -> int:
        """The stable global id of block ``index`` of ``path`` (after it was registered)."""
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

    def unit_of_block(self, bid: int) -> str | None:
        """The ``unit`` (:meth:`unit_of`) of the file block ``bid`` belongs to, from the
        local block map; None while no registered file holds it."""
        assert isinstance(self.policy, SystemDriver)
        loc = self.policy.map.locate(bid)
        return None if loc is None else self.unit_of(loc[0])

    def extent_of_unit(self, unit: str) -> tuple[int, int] | None:
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
