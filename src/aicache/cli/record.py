"""``aicache record REMOTE_URL --out TRACE.csv -- COMMAND...`` — run COMMAND reading through
the cache and write every demand block access as a ``block-csv`` trace.

How: REMOTE_URL is mounted read-only (FUSE) at a fresh temporary directory, exported to
COMMAND as ``$AICACHE_MOUNT``; COMMAND reads its data under that path (e.g.
``--data-dir $AICACHE_MOUNT``). A FUSE mount sees the accesses of every process COMMAND
starts (DataLoader workers included) as one stream, which is what a trace must contain;
an environment variable read by the fsspec filesystem would miss non-Python readers.
After COMMAND exits the mount is unmounted and the trace closed; the exit code is
COMMAND's. Trace columns: ``timestamp`` (seconds since the mount started), ``unit`` (the
file, relative to REMOTE_URL), ``obj_id`` (stable block id: files sorted by path get
consecutive ranges), ``size`` (bytes of the block).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.cli import Subparsers


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (via BadInput), no usage dump
        raise BadInput(f"aicache record: {message}; see aicache record --help")


def _inner_parser() -> argparse.ArgumentParser:
    from aicache.cli.mount import add_engine_args

    p = _RaisingParser(prog="aicache record", add_help=False)
    p.add_argument("remote_url", metavar="REMOTE_URL")
    p.add_argument("--out", required=True, help="trace file to write (block-csv)")
    add_engine_args(p, cache_required=False)
    p.set_defaults(policy="alluxio")
    return p


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.output import help_text

    # argparse cannot mix options, a positional and a ``-- COMMAND...`` tail under a
    # subcommand, so everything is taken raw here and split at ``--`` in run().
    p = subparsers.add_parser(
        "record", help="run a command reading through the cache; write a block trace",
        description=help_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_inner_parser().format_help().replace("usage: ", "arguments: ", 1) + " -- COMMAND...")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="REMOTE_URL --out T.csv ... -- COMMAND...")
    return p


def run(args: argparse.Namespace) -> int:
    import subprocess
    import sys
    import tempfile
    import time

    raw = list(args.argv)
    if "--" not in raw or raw.index("--") == len(raw) - 1:
        raise BadInput("no COMMAND given; use: aicache record REMOTE_URL --out T.csv -- python train.py")
    cut = raw.index("--")
    cmd = raw[cut + 1:]
    args = _inner_parser().parse_args(raw[:cut])
    out = os.path.abspath(args.out)
    if not os.path.isdir(os.path.dirname(out)):
        raise BadInput(f"--out {args.out!r}: directory {os.path.dirname(out)!r} does not exist")
    from aicache.cli.mount import engine_config, open_remote, remote_options_of, shared_spec_of
    from aicache.datacache.fuse import fuse_available

    engine_config(args)
    shared_spec_of(args)  # bad --shared-cache options: exit 2 before mounting
    why = fuse_available()
    if why:
        raise BadInput(why)
    open_remote(args.remote_url, remote_options_of(args))  # fail fast on a bad URL
    mnt = tempfile.mkdtemp(prefix="aicache-record-")
    mount_cmd = [sys.executable, "-m", "aicache.cli.main", "mount", args.remote_url, mnt,
                 "--cache-dir", args.cache_dir, "--cache-size", args.cache_size,
                 "--block-size", args.block_size, "--policy", args.policy, "--seed", str(args.seed),
                 "--verify-checksum", args.verify_checksum, "--metadata-ttl", str(args.metadata_ttl),
                 "--foreground", "--record", out]
    for flag, value in (("--advisor", args.advisor), ("--endpoint-url", args.endpoint_url),
                        ("--region", args.region), ("--log-level", args.log_level),
                        ("--gate", args.gate), ("--prompt", args.prompt),
                        ("--shared-cache", args.shared_cache),
                        ("--shared-cache-endpoint-url", args.shared_cache_endpoint_url),
                        ("--shared-cache-timeout", args.shared_cache_timeout)):
        if value:
            mount_cmd += [flag, value]
    for o in args.option:
        mount_cmd += ["-o", o]
    for o in args.shared_cache_option:
        mount_cmd += ["--shared-cache-option", o]
    # the mount's stderr (its log with --log-level, an error) into a file: a pipe read only
    # on failure fills up and stalls the mount
    errlog = tempfile.TemporaryFile()
    mounter = subprocess.Popen(mount_cmd, stderr=errlog)
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            if mounter.poll() is not None or time.monotonic() > deadline:
                errlog.seek(0)
                err = errlog.read().decode(errors="replace").strip()
                raise RuntimeError(f"mounting {args.remote_url} failed: {err or 'timeout'}")
            time.sleep(0.05)
        env = dict(os.environ, AICACHE_MOUNT=mnt)
        rc = subprocess.call(cmd, env=env)
    finally:
        if mounter.poll() is None:
            mounter.terminate()  # SIGTERM: libfuse unmounts, the engine flushes the trace
            try:
                mounter.wait(timeout=60)
            except subprocess.TimeoutExpired:
                mounter.kill()
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
        try:
            os.rmdir(mnt)
        except OSError:
            pass
        errlog.seek(0)  # the mount's warnings (its log, with --log-level), after COMMAND's output
        sys.stderr.write(errlog.read().decode(errors="replace"))
        errlog.close()
    return rc
