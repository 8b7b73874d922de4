"""``aicache umount MOUNTPOINT [--lazy]`` — unmount an ``aicache mount`` (its process then
exits by itself), including one whose process died (the kernel then says "Transport
endpoint is not connected" to every access). ``--lazy`` detaches a busy mount at once; it
is unmounted when the last file open in it is closed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.output import help_text

    p = subparsers.add_parser("umount", help="unmount an aicache mount", description=help_text(__doc__),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mountpoint", metavar="MOUNTPOINT")
    p.add_argument("--lazy", "-z", action="store_true",
                   help="detach now even if files are open there; unmount when they are closed")
    return p


def mount_entry(mountpoint: str, mounts: str = "/proc/self/mounts") -> tuple[str, str] | None:
    """(source, type) of the topmost mount at ``mountpoint`` (absolute, no symlinks), read
    from ``mounts`` — no ``stat``, which hangs or fails on a mount whose process died."""
    found = None
    with open(mounts, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and _unescape(parts[1]) == mountpoint:
                found = (_unescape(parts[0]), parts[2])
    return found


def _unescape(field: str) -> str:
    # /proc/self/mounts writes space, tab, newline and backslash as octal escapes
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


def run(args: argparse.Namespace) -> int:
    mp = os.path.realpath(os.path.abspath(args.mountpoint))
    entry = mount_entry(mp)
    if entry is None:
        if not os.path.lexists(mp):
            raise BadInput(f"MOUNTPOINT {args.mountpoint!r} does not exist; give the directory "
                           "passed to aicache mount")
        raise BadInput(f"MOUNTPOINT {args.mountpoint!r} is not mounted; nothing to unmount")
    source, fstype = entry
    if source != "aicache" or not fstype.startswith("fuse"):
        raise BadInput(f"MOUNTPOINT {args.mountpoint!r} is a {fstype} mount of {source!r}, not an "
                       "aicache mount; unmount it with umount")
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    if tool is None:
        raise BadInput("fusermount3 is not installed (apt-get install fuse3); it unmounts FUSE mounts")
    r = subprocess.run([tool, "-u", *(["-z"] if args.lazy else []), mp],
                       capture_output=True, text=True)
    if r.returncode == 0:
        return 0
    why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"{tool} exited {r.returncode}"
    if "busy" in why.lower():
        print(f"aicache: error: {args.mountpoint} is busy (a process has a file or its working "
              "directory there); close it, or use --lazy to detach now and unmount when it "
              "is closed", file=sys.stderr)
    else:
        print(f"aicache: error: could not unmount {args.mountpoint}: {why}", file=sys.stderr)
    return 1
