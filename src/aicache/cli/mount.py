"""``aicache mount REMOTE_URL MOUNTPOINT --cache-dir DIR --cache-size SIZE`` — a read-only
FUSE mount of any fsspec store (``s3://bucket/data``, ``gs://…``, ``/local/dir``) through
the adaptive block cache. Runs until SIGINT (Ctrl-C), SIGTERM or ``aicache umount
MOUNTPOINT``, then unmounts cleanly. S3-compatible stores: ``--endpoint-url http://…``,
``--region``; other remote options: ``-o anon=true`` … (values parsed as JSON when they
parse). ``--shared-cache URL`` adds a cache level under the local one that every node of a
cluster shares (a bucket near the nodes, ``--shared-cache-endpoint-url`` for an S3-compatible
one): a block one node fetched is read from there by the others instead of the origin.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import socket
import stat
from typing import TYPE_CHECKING, Any

from aicache.cli.chiron_flags import add_gate_prompt_args, check_prompt_advisor, gate_params, prompted_advisor
from aicache.errors import BadInput
from aicache.units import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec
    from aicache.cli import Subparsers
    from aicache.policies.system import DataCacheSystem


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.output import help_text

    p = subparsers.add_parser("mount", help="mount a remote store read-only through the cache",
                              description=help_text(__doc__),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("remote_url", metavar="REMOTE_URL")
    p.add_argument("mountpoint", metavar="MOUNTPOINT")
    add_engine_args(p)
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics here")
    p.add_argument("--foreground", action="store_true", help="stay in the foreground")
    p.add_argument("--kernel-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="keep file pages in the kernel across opens, as JuiceFS does: a re-read of an "
                        "unchanged file is served by the kernel, unseen by the policy (default: on with "
                        "the low-level driver, where each version of a file is its own inode; the "
                        "high-level driver cannot keep versions apart and refuses it)")
    p.add_argument("--direct-io", action="store_true",
                   help="bypass the kernel page cache on every open (fastest for large sequential "
                        "reads; no mmap, no kernel readahead for small reads). Without it, a "
                        "reader that opens with O_DIRECT gets the same path for its own file")
    p.add_argument("--readahead-kb", type=int, default=None, metavar="KB",
                   help="kernel readahead window set after mounting (root only; default: the block "
                        "size; 0 = the kernel's 128 KiB); it bounds the size of the kernel's read requests")
    p.add_argument("--fuse-api", default="auto", choices=("auto", "lowlevel", "highlevel"),
                   help="libfuse API: lowlevel (one thread answers cached reads inline, workers "
                        "wait on the remote), highlevel (libfuse's thread pool), auto (default: "
                        "lowlevel on libfuse 3 before 3.17, else highlevel)")
    p.add_argument("--allow-other", action="store_true",
                   help="let other users read the mount (libfuse's allow_other; a non-root user "
                        "needs user_allow_other in /etc/fuse.conf). Default: only you")
    p.add_argument("--uid", default=None, metavar="UID",
                   help="owner of the files and directories in the mount: a user id or name "
                        "(default: you)")
    p.add_argument("--gid", default=None, metavar="GID",
                   help="their group: a group id or name (default: your group)")
    p.add_argument("--log-file", default=None, metavar="PATH",
                   help="where the mount logs (default: CACHE_DIR/mount.log when it runs in the "
                        "background; stderr with --foreground)")
    p.add_argument("--record", default=None, help=argparse.SUPPRESS)  # used by `aicache record`
    return p


#: ``--log-level`` names, as logging's
LOG_LEVELS = ("debug", "info", "warning", "error")


def add_engine_args(p: argparse.ArgumentParser, *, cache_required: bool = True) -> None:
    """The options of an engine and its remote (``mount``, ``record``). Without
    ``cache_required``, ``--cache-dir`` and ``--cache-size`` default to the fsspec
    filesystem's defaults (``~/.cache/aicache``, 10GiB)."""
    if cache_required:
        p.add_argument("--cache-dir", required=True, help="local cache directory (persists)")
        p.add_argument("--cache-size", required=True, help="byte budget, e.g. 100GiB")
    else:
        from aicache.datacache.engine import default_cache_dir

        p.add_argument("--cache-dir", default=default_cache_dir(),
                       help="local cache directory (persists; default %(default)s)")
        p.add_argument("--cache-size", default="10GiB", help="byte budget (default %(default)s)")
    p.add_argument("--block-size", default=f"{DEFAULT_BLOCK_SIZE >> 20}MiB",  # a string, as typed
                   help=f"cache block size (default {DEFAULT_BLOCK_SIZE >> 20}MiB)")
    p.add_argument("--policy", default="chiron", help="chiron, juicefs, alluxio, lru, … (default chiron)")
    p.add_argument("--advisor", default=None, help="statistical (default), openai, replay:FILE")
    p.add_argument("--executors", default=None, choices=("ours", "seed"),
                   help="chiron's executor set: ours (default) or seed (the seed's table; docs/design/chiron.md); "
                        "seed = --policy chiron-seed")
    add_gate_prompt_args(p)
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="storage option for the remote filesystem (repeatable)")
    p.add_argument("--s3-client", default="auto", choices=("auto", "s3fs", "obstore"),
                   help="client of S3 block reads: auto (default: obstore where it can take the "
                        "remote's settings over exactly, else s3fs), s3fs, or obstore (a Rust "
                        "client, about a quarter of s3fs's CPU per GET; metadata stays on s3fs)")
    p.add_argument("--verify-checksum", default="stat", choices=("full", "stat", "none"),
                   help="full: hash every read; stat (default): once per file content version; none")
    p.add_argument("--metadata-ttl", default="60", metavar="SECONDS",
                   help="how long a stat, listing or open may use metadata older than the "
                        "remote's (default 60; 0: ask the remote every time)")
    p.add_argument("--cache-mode", default="0600", metavar="MODE",
                   help="octal mode of the cache's files (directories get x where it has r): "
                        "0600 (default) keeps cached copies private; e.g. 0640 shares a cache "
                        "with your group")
    p.add_argument("--free-space-ratio", default="0.1", metavar="RATIO",
                   help="keep this share of the cache's disk free: a larger --cache-size is "
                        "capped, with a warning (default 0.1; 0: only the free space caps it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--endpoint-url", default=None, metavar="URL",
                   help="S3-compatible endpoint for an s3:// REMOTE_URL (MinIO, Ceph, R2, …), "
                        "e.g. http://127.0.0.1:9000")
    p.add_argument("--region", default=None, help="S3 region of the bucket, e.g. eu-west-1")
    p.add_argument("--shared-cache", default=None, metavar="URL",
                   help="a second cache level under the local one, shared by every node: an "
                        "fsspec URL (s3://bucket/prefix on a bucket near the nodes, "
                        "file:///mnt/shared/aicache); bound it with the store's lifecycle rules")
    p.add_argument("--shared-cache-option", action="append", default=[], metavar="KEY=VALUE",
                   help="storage option for the --shared-cache store (repeatable)")
    p.add_argument("--shared-cache-endpoint-url", default=None, metavar="URL",
                   help="S3-compatible endpoint for an s3:// --shared-cache, e.g. http://10.0.0.5:9000")
    p.add_argument("--shared-cache-timeout", default="2", metavar="SECONDS",
                   help="longest wait for one shared-cache call before the origin is read "
                        "(default 2)")
    p.add_argument("--log-level", default=None, type=str.lower, choices=LOG_LEVELS,
                   help="log this and worse (default: info to the log file of a background "
                        "mount, warnings to stderr in the foreground)")


def check_cache_dir(path: str, mode: int = 0o600) -> None:
    """Create ``--cache-dir`` if needed (with the directory mode of the cache ``mode``) and
    check that it takes files, before anything is mounted (a mount whose engine cannot
    start would only fail on its first request)."""
    from aicache.datacache.store import dir_mode
    from aicache.datacache.trust import check_cache_dir_trust

    d = os.path.abspath(path)
    try:
        check_cache_dir_trust(d, mode)  # before anything (the log) is written there
        if not os.path.lexists(d):
            os.makedirs(d, mode=dir_mode(mode))
            os.chmod(d, dir_mode(mode))  # the umask may have narrowed a shared mode
        probe = os.path.join(d, f".aicache-probe-{os.getpid()}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise BadInput(f"--cache-dir {path!r} is not a writable directory ({exc.strerror}); "
                       "give a directory on a local disk") from None


def owner_ids(uid: str | None, gid: str | None) -> tuple[int | None, int | None]:
    """``--uid``/``--gid`` as ids: a number (0 … 2**32 - 2) or a user/group name of this
    machine; None where not given (the mounting user's)."""
    import grp
    import pwd

    def resolve(flag: str, value: str | None, by_name: Any, kind: str) -> int | None:
        if value is None:
            return None
        if value.isdigit():
            n = int(value)
            if n < 2 ** 32 - 1:  # (uid_t) -1 means "unchanged" to the kernel
                return n
        else:
            try:
                return int(by_name(value)[2])
            except KeyError:
                pass
        raise BadInput(f"{flag} {value!r} is not a {kind} id (0 to {2 ** 32 - 2}) or a {kind} "
                       f"name of this machine; give e.g. {flag} 1000")

    return (resolve("--uid", uid, pwd.getpwnam, "user"),
            resolve("--gid", gid, grp.getgrnam, "group"))


def check_mountpoint(path: str) -> None:
    """MOUNTPOINT must be a directory; a dead FUSE mount there (its daemon gone, every
    access ENOTCONN) is named as such, with the command that clears it."""
    mp = os.path.abspath(path)
    try:
        st = os.stat(mp)
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:
            raise BadInput(f"MOUNTPOINT {path!r} is a stale FUSE mount (its process is gone); "
                           f"run fusermount3 -u {mp} and mount again") from None
        raise BadInput(f"MOUNTPOINT {path!r} is not an existing directory ({exc.strerror}); "
                       "create it first") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"MOUNTPOINT {path!r} is not a directory; give an empty directory")


def check_metrics_port(port: int, addr: str = "127.0.0.1") -> None:
    """``--metrics-port`` is a TCP port this process can listen on (checked by binding it,
    as the metrics server will, with SO_REUSEADDR)."""
    if not 1 <= port <= 65535:
        raise BadInput(f"--metrics-port {port} is not a TCP port; give one in 1-65535, e.g. 9100")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
    except OSError as exc:
        raise BadInput(f"--metrics-port {port} cannot be served on {addr} ({exc.strerror}); "
                       "give a free port") from None
    finally:
        s.close()


def remote_options(pairs: list[str]) -> dict[str, Any]:
    return _pairs(pairs, "--option")


def _pairs(pairs: list[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` storage options (values parsed as JSON when they parse)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            short = "-o" if flag == "--option" else flag
            raise BadInput(f"{flag} {pair!r} is not KEY=VALUE; e.g. {short} endpoint_url=http://127.0.0.1:9000")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    if "endpoint_url" in out:  # s3fs takes it inside client_kwargs
        out.setdefault("client_kwargs", {})["endpoint_url"] = out.pop("endpoint_url")
    return out


def remote_options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The remote's storage options: ``-o`` pairs plus ``--endpoint-url``/``--region``
    (s3fs takes both inside ``client_kwargs``); the two ways disagreeing is bad input."""
    from urllib.parse import urlsplit

    from fsspec.core import split_protocol

    out = remote_options(args.option)
    s3 = {}
    if args.endpoint_url is not None:
        u = urlsplit(args.endpoint_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise BadInput(f"--endpoint-url {args.endpoint_url!r} is not an http(s) URL; "
                           "give e.g. http://127.0.0.1:9000")
        s3["endpoint_url"] = args.endpoint_url
    if args.region is not None:
        if not args.region or not all(c.isalnum() or c == "-" for c in args.region):
            raise BadInput(f"--region {args.region!r} is not a region name; give e.g. us-east-1")
        s3["region_name"] = args.region
    if s3:
        protocol = split_protocol(args.remote_url)[0]
        if protocol not in ("s3", "s3a"):
            raise BadInput(f"--endpoint-url/--region apply to s3:// remotes, not {args.remote_url!r}; "
                           "pass that store's options with -o KEY=VALUE")
        client = out.setdefault("client_kwargs", {})
        for key, value in s3.items():
            flag = "--endpoint-url" if key == "endpoint_url" else "--region"
            if client.get(key, value) != value:
                raise BadInput(f"{flag} {value!r} and -o {key}={client[key]!r} disagree; give one")
            client[key] = value
    return out


def open_remote(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """(fsspec filesystem, root path) for ``url``; bad URLs → BadInput naming the URL."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:  # the store's fsspec package is an extra (s3fs: aicache[s3])
        raise BadInput(f"REMOTE_URL {url!r}: {exc} (S3: pip install 'aicache[s3]')") from None
    except ValueError as exc:
        raise BadInput(f"REMOTE_URL {url!r}: {exc}; use e.g. s3://bucket/prefix or /local/dir") from None
    try:
        ok = fs.isdir(root)
    except Exception as exc:  # noqa: BLE001 - unreachable store
        raise BadInput(f"REMOTE_URL {url!r} is unreachable ({type(exc).__name__}: {exc}); "
                       "check the URL, credentials and -o endpoint_url") from None
    if not ok:
        raise BadInput(f"REMOTE_URL {url!r} is not a directory on the remote; give the dataset folder")
    return fs, root


def shared_spec_of(args: argparse.Namespace, *, block_on_full: bool = False) -> Any:
    """The :class:`~aicache.datacache.shared.SharedTierSpec` that ``--shared-cache`` and its
    options name (None without ``--shared-cache``); a URL fsspec cannot open, or options
    without it, are bad input. The store is not contacted: it being down must not stop a
    mount (reads then go to the origin)."""
    from urllib.parse import urlsplit

    from fsspec.core import split_protocol

    from aicache.datacache.shared import SharedTierSpec

    url = args.shared_cache
    if url is None:
        if args.shared_cache_option or args.shared_cache_endpoint_url:
            raise BadInput("--shared-cache-option/--shared-cache-endpoint-url need --shared-cache URL")
        return None
    if not url.strip():
        raise BadInput("--shared-cache '' is empty; give a URL, e.g. s3://bucket/aicache-shared")
    options = _pairs(args.shared_cache_option, "--shared-cache-option")
    if "endpoint_url" in options:  # s3fs takes it inside client_kwargs
        options.setdefault("client_kwargs", {})["endpoint_url"] = options.pop("endpoint_url")
    if args.shared_cache_endpoint_url is not None:
        u = urlsplit(args.shared_cache_endpoint_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise BadInput(f"--shared-cache-endpoint-url {args.shared_cache_endpoint_url!r} is not "
                           "an http(s) URL; give e.g. http://127.0.0.1:9000")
        if split_protocol(url)[0] not in ("s3", "s3a"):
            raise BadInput(f"--shared-cache-endpoint-url applies to an s3:// --shared-cache, not "
                           f"{url!r}; pass that store's options with --shared-cache-option KEY=VALUE")
        options.setdefault("client_kwargs", {})["endpoint_url"] = args.shared_cache_endpoint_url
    try:
        timeout = float(args.shared_cache_timeout)
    except ValueError:
        timeout = math.nan
    if not (math.isfinite(timeout) and timeout > 0):
        raise BadInput(f"--shared-cache-timeout {args.shared_cache_timeout!r}: give seconds > 0, e.g. 2")
    spec = SharedTierSpec(url, options, timeout_s=timeout, block_on_full=block_on_full)
    spec.filesystem()  # an unknown protocol or bad options: BadInput now, not at the first read
    return spec


def engine_config(args: argparse.Namespace) -> tuple[int, Any]:
    """Validated (cache size, EngineParams); an unknown policy fails here, before mounting."""
    from aicache.datacache.engine import EngineParams, make_engine_system
    from aicache.datacache.budget import check_free_space_ratio
    from aicache.datacache.store import check_cache_mode
    from aicache.units import parse_size

    size = parse_size(args.cache_size, what="--cache-size")
    block = parse_size(args.block_size, what="--block-size")
    if size <= 0 or block <= 0:
        raise BadInput(f"--cache-size {args.cache_size!r} / --block-size {args.block_size!r} must be positive")
    try:
        ttl = float(args.metadata_ttl)
    except ValueError:
        ttl = math.nan
    if not (math.isfinite(ttl) and ttl >= 0):
        raise BadInput(f"--metadata-ttl {args.metadata_ttl!r}: give seconds >= 0, e.g. 60")
    mode = check_cache_mode(args.cache_mode)
    try:
        ratio = check_free_space_ratio(float(args.free_space_ratio))
    except ValueError:
        raise BadInput(f"--free-space-ratio {args.free_space_ratio!r}: give a share of the disk "
                       "in [0, 1), e.g. 0.1") from None
    if args.executors is not None:
        if args.policy not in ("chiron", "chiron-seed"):
            raise BadInput(f"--executors applies to --policy chiron, not {args.policy!r}")
        args.policy = "chiron-seed" if args.executors == "seed" else "chiron"
    check_prompt_advisor(args.advisor, args.prompt)
    make_engine_system(args.policy, size, block, advisor=args.advisor, seed=args.seed,
                       **gate_params(args.gate, args.policy, "--policy")).close()
    return size, EngineParams(block_size=block, seed=args.seed, verify=args.verify_checksum,
                              metadata_ttl_s=ttl, cache_mode=mode, free_space_ratio=ratio,
                              s3_client=args.s3_client)


def engine_policy(args: argparse.Namespace, size: int, block_size: int
                  ) -> tuple[str | DataCacheSystem, AdvisorSpec | None]:
    """(policy, advisor) for the engine (after :func:`engine_config`): the names as given, or,
    with ``--gate``/``--prompt``, the advisor and the system built with them. Build it in the
    process that serves the mount (after a background mount forks): Chiron's advisor runs on
    a thread of its own."""
    from aicache.datacache.engine import make_engine_system

    advisor = prompted_advisor(args.advisor, args.prompt, args.seed)
    params = gate_params(args.gate, args.policy, "--policy")
    if not params:
        return args.policy, advisor
    return make_engine_system(args.policy, size, block_size, advisor=advisor, seed=args.seed,
                              **params), advisor


class CsvRecorder:
    """Writes demand block accesses as block-csv (the project's trace writer), thread-safe."""

    def __init__(self, path: str) -> None:
        import threading

        from aicache.traces.formats.block_csv import BlockCsvWriter

        self._w = BlockCsvWriter(path)
        self._lock = threading.Lock()

    def __call__(self, now: float, unit: str, block: int, size: int) -> None:
        with self._lock:
            self._w.write(now, unit, block, size)

    def close(self) -> None:
        with self._lock:
            self._w.close()


def run(args: argparse.Namespace) -> int:
    from aicache.datacache.budget import check_joinable
    from aicache.datacache.fuse import fuse_available, mount

    mp = os.path.abspath(args.mountpoint)
    check_mountpoint(args.mountpoint)
    if args.metrics_port is not None:
        check_metrics_port(args.metrics_port)  # before detaching: a background mount is silent
    if os.path.ismount(mp):
        raise BadInput(f"MOUNTPOINT {args.mountpoint!r} is already a mount point; unmount it first")
    uid, gid = owner_ids(args.uid, args.gid)
    size, params = engine_config(args)
    check_cache_dir(args.cache_dir, params.cache_mode)
    check_joinable(os.path.abspath(args.cache_dir), size)
    if args.direct_io and args.kernel_cache:
        raise BadInput("--direct-io and --kernel-cache exclude each other (one bypasses the kernel's "
                       "page cache, the other keeps pages in it); pick one")
    if args.readahead_kb is not None and args.readahead_kb < 0:
        raise BadInput(f"--readahead-kb {args.readahead_kb} is negative; give 0 (kernel default) or a size in KiB")
    why = fuse_available()
    if why:
        raise BadInput(why)
    from aicache.datacache.fuse import lowlevel_abi

    if args.fuse_api == "lowlevel" and not lowlevel_abi.supported():
        raise BadInput("--fuse-api lowlevel needs libfuse 3 before 3.17 (this is "
                       f"{lowlevel_abi.libfuse_version()}); use --fuse-api highlevel or auto")
    lowlevel = args.fuse_api == "lowlevel" or (args.fuse_api == "auto" and lowlevel_abi.supported())
    if args.kernel_cache and not lowlevel:
        # the high-level API names inodes by path: two versions of a file would share one
        # inode's pages, and an open could read both
        raise BadInput("--kernel-cache needs the low-level FUSE driver (libfuse 3 before 3.17; "
                       f"this mount uses the high-level one on {lowlevel_abi.libfuse_version()}); "
                       "drop --kernel-cache")
    if args.kernel_cache is None:  # keeps versions apart only with an inode per version;
        # a recording mount sees every read (a re-read the kernel served would be missing)
        args.kernel_cache = lowlevel and not args.direct_io and not args.record
    options = remote_options_of(args)
    shared = shared_spec_of(args)
    fs, root = open_remote(args.remote_url, options)  # bad URL / unreachable: exit 2 here
    log_file = args.log_file or (None if args.foreground else
                                 os.path.join(os.path.abspath(args.cache_dir), "mount.log"))
    if log_file is not None or args.log_level is not None:
        _log_to(log_file, args.log_level or "info")
    if not args.foreground:
        if _detach(mp):
            print(f"mounted {args.remote_url} at {mp} (logs: {log_file}; unmount: aicache umount {mp})")
            return 0  # the parent: the mount is up, served by the detached child
        # the child, after fork: the remote's client (its event-loop thread, its
        # connections) belongs to the parent; fsspec builds a fresh one for this process
        fs, root = open_remote(args.remote_url, options)
        _quiet_once_mounted(mp)
    policy, advisor = engine_policy(args, size, params.block_size)
    recorder = CsvRecorder(args.record) if args.record else None
    try:
        mount(fs, root, mp, cache_dir=os.path.abspath(args.cache_dir), cache_size=size,
              policy=policy, advisor=advisor, params=params,
              foreground=True, metrics_port=args.metrics_port, record=recorder,
              kernel_cache=args.kernel_cache, readahead_kb=args.readahead_kb,
              direct_io=args.direct_io, fuse_api=args.fuse_api, allow_other=args.allow_other,
              uid=uid, gid=gid, shared=shared)
    finally:
        if recorder is not None:
            recorder.close()
    return 0


def _log_to(path: str | None, level: str = "info") -> None:
    """Send the mount's log (``aicache.*``, ``level`` and up) to ``path``, appended, as
    JuiceFS does for a background mount — a detached daemon's stderr goes nowhere — or,
    without a path, to stderr."""
    import logging

    try:
        # never through a link (another user's link would aim our lines at a file of theirs)
        handler: logging.Handler = (
            logging.StreamHandler(os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                                    | os.O_NOFOLLOW, 0o600), "a", encoding="utf-8"))
            if path else logging.StreamHandler())
    except OSError as exc:
        raise BadInput(f"--log-file {path!r} cannot be written ({exc.strerror}); give a writable path") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("aicache")
    root.addHandler(handler)
    root.setLevel(level.upper())


def _quiet_once_mounted(mountpoint: str, timeout_s: float = 60.0) -> None:
    """In the detached child: point stderr at /dev/null once the mount is up (until then
    a mount error still reaches the terminal of the command that started it)."""
    import threading
    import time

    from aicache.datacache.fuse.kernel import mount_device

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if mount_device(mountpoint) is not None:  # /proc/self/mountinfo: no stat of it
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 2)
                os.close(null)
                return
            time.sleep(0.05)

    threading.Thread(target=watch, name="aicache-detach", daemon=True).start()


def _detach(mountpoint: str, timeout_s: float = 60.0) -> bool:
    """Run the mount in the background, as FUSE daemons do: fork (a Python ``os.fork``, so
    that libraries' after-fork hooks run — fsspec's drops the parent's event loop, which
    libfuse's own C-level daemonizing would leave dangling: every S3 read then failed
    with EIO), start a new session, detach from the terminal. Returns True in the parent
    once the mount is up (False in the child, which goes on to mount); raises if the child
    died or the mount did not appear in time."""
    import signal
    import sys
    import time

    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(null, fd)
        os.close(null)
        return False  # stderr stays until mounted: mount errors still reach the caller
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.ismount(mountpoint):
            return True
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            raise SystemExit(code if code > 0 else 1)
        time.sleep(0.05)
    os.kill(pid, signal.SIGTERM)
    raise OSError(f"MOUNTPOINT {mountpoint!r} was not mounted within {timeout_s:.0f}s")
