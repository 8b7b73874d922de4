"""``aicache cache stats|verify|clear --cache-dir DIR [--json]`` — inspect a cache directory.

Works on a directory an engine (mount, fsspec filesystem) created, while engines use it:
``verify`` and ``clear`` take the store's lock, so concurrent readers stay safe. A damaged
directory still opens: a corrupt or missing index is rebuilt from the block headers, and
``clear`` first removes entries of the wrong type (``blocks/`` a file, ``lock`` a directory).
JSON keys: ``stats`` → ``cache_dir, blocks, used_bytes, capacity_bytes, block_size,
checksum``; ``verify`` → ``cache_dir, checked, bad, misplaced, missing, orphans, removed, clean``
(``misplaced``: valid blocks whose header names another block); ``clear`` → ``cache_dir,
removed, repaired`` (the wrong-type entries it removed).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from typing import Any

from aicache.errors import BadInput


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("cache", help="inspect, verify or empty a cache directory",
                              description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["stats", "verify", "clear"])
    p.add_argument("--cache-dir", required=True, help="the cache directory")
    p.add_argument("--no-clean", action="store_true", help="verify: report only, drop nothing")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from aicache.cli.output import emit
    from aicache.datacache.store import BlockStore

    check_cache_dir(args.cache_dir, clearing=args.action == "clear")
    repaired = BlockStore.repair_layout(args.cache_dir) if args.action == "clear" else []
    store = BlockStore.open_existing(args.cache_dir, recover=args.action != "stats")
    try:
        out: dict[str, Any]
        if args.action == "stats":
            out = asdict(store.stats())
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


def check_cache_dir(path: str, clearing: bool = False) -> None:
    """Refuse, with the real reason, what the store cannot open: a directory this user
    cannot write (every action takes the store's lock and may update its index), and an
    index whose recorded block size is not a positive number (no engine writes one). A
    ``clear`` of the latter drops the index first (it empties the cache anyway), so that
    ``aicache cache clear`` always works."""
    index = os.path.join(path, "index.sqlite")
    if os.path.isdir(path) and os.path.isfile(index) and not os.access(path, os.W_OK):
        raise BadInput(f"--cache-dir {path!r} is read-only for this user; aicache cache takes "
                       "the cache's lock, so run it as the cache's owner or on a writable mount")
    try:
        db = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT v FROM meta WHERE k = 'block_size'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return  # no index, or a damaged one: the store reports or rebuilds it
    if row is None:
        return
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
