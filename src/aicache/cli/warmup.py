"""``aicache warmup PATH... --cache-dir DIR`` — pre-fill a cache directory with the blocks of
remote files or folders (as ``juicefs warmup``), so that a later mount or fsspec job on the
same directory reads them as hits.

PATH: a remote file or folder (``s3://bucket/data/train``, ``/local/dir``), all PATHs on one
store; folders are walked recursively. Blocks already cached are not fetched again; the
summary says how many bytes were cached before, fetched now, and whether everything fits
the budget (when it does not, the policy evicts earlier blocks to admit later ones).
``--cache-size`` defaults to the budget the cache directory records (the budget a running
mount uses, see the budget rules), else 10GiB; ``--block-size`` must be the one the
directory's readers use (4MiB by default), or their blocks are other blocks.
JSON keys: ``cache_dir, files, bytes, blocks, cached_bytes, fetched_bytes, capacity_bytes,
fits, seconds``.

``--shared-cache URL`` fills the cluster's shared tier as well, once for every node: each
block the tier lacks is written there (from the origin, or from this cache when it holds
the block), waiting for the tier's writer instead of dropping blocks as readers do; blocks
the tier holds already are read from it, not from the origin. Extra JSON keys then:
``shared_cache, shared_hits, shared_blocks_written, shared_blocks_dropped``.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.mount import add_engine_args
    from aicache.cli.output import help_text

    p = subparsers.add_parser("warmup", help="pre-fill the cache with remote files or folders",
                              description=help_text(__doc__),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="PATH")
    add_engine_args(p, cache_required=False)
    p.set_defaults(policy="lru", cache_size=None)  # no prefetch: warmup reads every block itself
    for action in p._actions:
        if action.dest == "cache_size":
            action.help = "byte budget (default: the one the cache dir records, else 10GiB)"
    p.add_argument("--threads", type=int, default=8, help="files read at once (default 8)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def _files(fs: Any, url: str, root: str) -> list[tuple[str, int]]:
    try:
        info = fs.info(root)
    except FileNotFoundError:
        raise BadInput(f"PATH {url!r} does not exist on the remote; give a file or folder") from None
    except Exception as exc:  # noqa: BLE001 - unreachable store
        raise BadInput(f"PATH {url!r} is unreachable ({type(exc).__name__}: {exc}); check the "
                       "URL, credentials and --endpoint-url") from None
    if info.get("type") != "directory":
        return [(fs._strip_protocol(root), int(info.get("size") or 0))]
    found = fs.find(root, detail=True)
    return sorted((fs._strip_protocol(p), int(i.get("size") or 0)) for p, i in found.items()
                  if i.get("type", "file") != "directory")


def run(args: argparse.Namespace) -> int:
    import concurrent.futures as cf
    import time

    import fsspec

    from aicache.cli.mount import (check_cache_dir, engine_config, engine_policy, remote_options_of,
                                   shared_spec_of)
    from aicache.cli.output import emit
    from aicache.progress import progress
    from aicache.datacache.budget import recorded_budget
    from aicache.datacache.engine import CacheEngine
    from aicache.datacache.store import BlockKey, stored_size

    if args.threads < 1:
        raise BadInput(f"--threads {args.threads}: give 1 or more")
    cache_dir = os.path.abspath(os.path.expanduser(args.cache_dir))
    if args.cache_size is None:
        recorded = recorded_budget(cache_dir)
        args.cache_size = str(recorded) if recorded else "10GiB"
    size, params = engine_config(args)
    params.list_root = False
    args.remote_url = args.paths[0]  # the store whose options --endpoint-url/-o name
    options = remote_options_of(args)
    shared_spec = shared_spec_of(args, block_on_full=True)
    fs: Any = None
    files: list[tuple[str, int]] = []
    for url in args.paths:
        try:
            pfs, root = fsspec.core.url_to_fs(url, **options)
        except ImportError as exc:  # the store's fsspec package is an extra (s3fs: aicache[s3])
            raise BadInput(f"PATH {url!r}: {exc} (S3: pip install 'aicache[s3]')") from None
        except ValueError as exc:
            raise BadInput(f"PATH {url!r}: {exc}; use e.g. s3://bucket/prefix or /local/dir") from None
        if fs is None:
            fs = pfs
        elif type(pfs) is not type(fs):
            raise BadInput(f"PATH {url!r} is on another store than {args.paths[0]!r}; warm one "
                           "store per call")
        files.extend(_files(fs, url, root))
    files = sorted(set(files))
    check_cache_dir(cache_dir, params.cache_mode)
    total = sum(n for _p, n in files)
    B = params.block_size
    t0 = time.monotonic()
    cached = fetched = 0
    policy = engine_policy(args, size, params.block_size)[0]
    with CacheEngine(fs, cache_dir, size, policy=policy, params=params,
                     shared=shared_spec) as engine, progress(total, "warmup") as bar:
        shared = engine.shared

        def warm(path: str) -> tuple[int, int]:
            meta = engine.stat(path)
            had = got = 0
            for idx in range(-(-meta.size // B)):
                n = min(B, meta.size - idx * B)
                key = BlockKey(meta.path, meta.version, idx)
                local = engine.store.contains(key)
                if local:
                    had += n
                data = engine.read_block(meta, idx)  # a local miss reads the tier, then the origin
                if shared is not None and local and shared.contains(key) is False:
                    shared.offer(key, data)  # the tier lacks what this cache holds
                bar.advance(n)
                got += n
            return had, got - had

        with cf.ThreadPoolExecutor(max_workers=args.threads) as pool:
            for had, new in pool.map(warm, [p for p, _n in files]):
                cached += had
                fetched += new
        capacity, room = engine.store.capacity, engine.store.block_capacity
    # what the files' blocks take of the budget (each block's stored_size), not their bytes
    charged = sum((n // B) * stored_size(B) + (stored_size(n % B) if n % B else 0) for _p, n in files)
    out = {"cache_dir": cache_dir, "files": len(files), "bytes": total,
           "blocks": sum(-(-n // B) for _p, n in files), "cached_bytes": cached,
           "fetched_bytes": fetched, "capacity_bytes": capacity, "fits": charged <= room,
           "seconds": round(time.monotonic() - t0, 3)}
    if shared_spec is not None:  # the engine's close waited for the tier's writer
        m = engine.metrics
        out.update(shared_cache=shared_spec.url, shared_hits=int(m.value("shared_hits")),
                   shared_blocks_written=int(m.value("shared_writes")),
                   shared_blocks_dropped=int(m.value("shared_write_drops")))
    emit(out, as_json=args.json, title="aicache warmup")
    return 0
