"""``aicache cache stats|verify|clear --cache-dir DIR [--json]`` — inspect a cache directory.

Works on a directory an engine (mount, fsspec filesystem) created, while engines use it:
``verify`` and ``clear`` take the store's lock, so concurrent readers stay safe. A damaged
directory still opens: a corrupt or missing index is rebuilt from the block headers, and
``clear`` first removes entries of the wrong type (``blocks/`` a file, ``lock`` a directory).
``stats`` also sums the counters every engine (mount, fsspec filesystem, any process) keeps
under the directory (:mod:`aicache.datacache.counters`): hits, misses, hit ratio, bytes served
from the cache and fetched from the remote, prefetches, evictions. ``stats --watch [SECONDS]``
prints, every SECONDS (1 by default), the rates of the last interval (as ``juicefs stats``);
engines write their counters once a second, so rates are exact over longer intervals.
JSON keys: ``stats`` → ``cache_dir, blocks, used_bytes, capacity_bytes, block_size,
checksum, hits, misses, hit_ratio, hit_bytes, remote_bytes, prefetch_issued, evictions`` (and
the other counters of ``counters.PERSISTED``, the shared tier's ``shared_*`` among them),
``origin_requests_saved`` (= ``shared_hits``: local misses the shared tier answered),
``live_engines``; ``--watch --json``: one object
per interval, keys as in :data:`WATCH_KEYS`; ``verify`` → ``cache_dir, checked, bad, misplaced, missing, orphans, removed, clean``
(``misplaced``: valid blocks whose header names another block); ``clear`` → ``cache_dir,
removed, repaired`` (the wrong-type entries it removed).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.datacache.store import BlockStore

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("cache", help="inspect, verify or empty a cache directory",
                              description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["stats", "verify", "clear"])
    p.add_argument("--cache-dir", required=True, help="the cache directory")
    p.add_argument("--no-clean", action="store_true", help="verify: report only, drop nothing")
    p.add_argument("--watch", nargs="?", type=_interval, const=1.0, default=None, metavar="SECONDS",
                   help="stats: print the last interval's rates every SECONDS (default 1) "
                   "until Ctrl-C")
    p.add_argument("--count", type=int, default=0, metavar="N",
                   help="stats --watch: stop after N intervals (0: until Ctrl-C)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout "
                   "(--watch: one per interval)")
    return p


def _interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"--watch {text!r}: give a positive number of seconds, "
                                         "e.g. --watch 2")
    return v


#: one row of ``stats --watch``: per-second rates over the last interval
WATCH_KEYS = ("interval_s", "hits_per_s", "misses_per_s", "hit_ratio", "hit_MBps", "remote_MBps",
              "prefetch_per_s", "evictions_per_s")


def watch_rows(read: Callable[[], Mapping[str, float]], sleep: Callable[[float], None],
               interval: float, count: int = 0) -> Iterator[dict[str, float | None]]:
    """Rows of ``stats --watch``: after each ``sleep(interval)``, the counters' change
    since the previous read divided by ``interval`` (``hit_ratio``: of that interval's
    demand reads; None when there were none). ``count`` > 0 stops after that many rows."""
    prev = dict(read())
    n = 0
    while count <= 0 or n < count:
        sleep(interval)
        cur = dict(read())
        d = {k: cur.get(k, 0.0) - prev.get(k, 0.0) for k in cur}
        reads = d["hits"] + d["misses"]
        yield {"interval_s": interval, "hits_per_s": d["hits"] / interval,
               "misses_per_s": d["misses"] / interval,
               "hit_ratio": d["hits"] / reads if reads else None,
               "hit_MBps": d["hit_bytes"] / interval / 1e6,
               "remote_MBps": d["remote_bytes"] / interval / 1e6,
               "prefetch_per_s": d["prefetch_issued"] / interval,
               "evictions_per_s": d["evictions"] / interval}
        prev = cur
        n += 1


def _watch(args: argparse.Namespace) -> int:
    import time

    from aicache.cli.output import dumps
    from aicache.datacache.counters import read_totals

    def read() -> Mapping[str, float]:
        return read_totals(args.cache_dir).values

    if not args.json:
        print(" ".join(f"{k:>15}" for k in WATCH_KEYS), flush=True)
    try:
        for row in watch_rows(read, time.sleep, args.watch, args.count):
            if args.json:
                print(dumps(row), flush=True)
            else:
                print(" ".join(f"{'-' if row[k] is None else f'{row[k]:.3f}':>15}"
                               for k in WATCH_KEYS), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from aicache.cli.output import emit
    from aicache.datacache.counters import read_totals
    from aicache.datacache.store import BlockStore

    check_cache_dir(args.cache_dir, clearing=args.action == "clear")
    if args.watch is not None or args.count:
        if args.action != "stats" or args.watch is None:
            raise BadInput("--watch/--count go with `aicache cache stats --watch [SECONDS]`")
        _open_store(args.cache_dir).close()  # refuse what is not a cache
        return _watch(args)
    repaired = BlockStore.repair_layout(args.cache_dir) if args.action == "clear" else []
    store = _open_store(args.cache_dir, recover=args.action != "stats")
    try:
        out: dict[str, Any]
        if args.action == "stats":
            totals = read_totals(store.cache_dir)
            v = totals.values
            out = {**asdict(store.stats()), "hits": v["hits"], "misses": v["misses"],
                   "hit_ratio": totals.hit_ratio, **v,
                   "origin_requests_saved": v["shared_hits"], "live_engines": totals.live}
        elif args.action == "verify":
            res = store.verify(clean=not args.no_clean)
            out = {"cache_dir": store.cache_dir, **asdict(res),
                   "clean": not (res.bad or res.misplaced or res.missing or res.orphans)}
        else:
            out = {"cache_dir": store.cache_dir, "removed": store.clear(), "repaired": repaired}
    finally:
        store.close()
    emit(out, as_json=args.json, title=f"aicache cache {args.action}")
    if args.action == "verify" and not out["clean"]:
        return 1
    return 0


def _open_store(path: str, recover: bool = False) -> BlockStore:
    """The cache at ``path``; a damaged layout (an entry of the wrong type, which only
    ``clear`` repairs) is the user's to fix: BadInput naming the entry and the fix."""
    from aicache.datacache.store import BlockStore, CacheDirDamaged

    try:
        return BlockStore.open_existing(path, recover=recover)
    except CacheDirDamaged as exc:
        raise BadInput(f"--cache-dir {path!r} is damaged: {exc.strerror}") from None


def check_cache_dir(path: str, clearing: bool = False) -> None:
    """Refuse, with the real reason, what the store cannot open: a directory this user
    cannot write (every action takes the store's lock and may update its index), and an
    index whose recorded block size is not a positive number (no engine writes one). A
    ``clear`` of the latter drops the index first (it empties the cache anyway), so that
    ``aicache cache clear`` always works."""
    from aicache.datacache.budget import index_meta

    index = os.path.join(path, "index.sqlite")
    if os.path.isdir(path) and os.path.isfile(index) and not os.access(path, os.W_OK):
        raise BadInput(f"--cache-dir {path!r} is read-only for this user; aicache cache takes "
                       "the cache's lock, so run it as the cache's owner or on a writable mount")
    row = index_meta(path, "block_size")
    if row is None:
        return  # no index, a damaged one (the store reports or rebuilds it), or no record
    try:
        ok = int(row[0]) > 0
    except (TypeError, ValueError):
        ok = False
    if ok:
        return
    if clearing:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(index + suffix)
            except FileNotFoundError:
                pass
        return
    raise BadInput(f"--cache-dir {path!r}: its index records block size {row[0]!r}, which no "
                   f"cache writes (a damaged index); run aicache cache clear --cache-dir {path} "
                   "(it only holds cached copies)")
