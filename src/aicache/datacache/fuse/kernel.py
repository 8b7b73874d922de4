"""Kernel tuning for a mount: its readahead window (sysfs) and the largest read request
whose reply can be spliced (pipe sizing).

The kernel only sends read requests as large as its readahead window, so after mounting
the mount's ``read_ahead_kb`` (``/sys/class/bdi/MAJ:MIN``, root only, best effort) is
raised to the block size, as gcsfuse and s3fs users are told to do by hand. libfuse
splices only replies that fit one pipe, which cannot grow beyond ``fs.pipe-max-size``
(1 MiB by default) without privileges a container's root often lacks, so requests are
capped a few pages below it (:func:`splice_request_bytes`); a reply that does not fit is
copied, still correct.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re

log = logging.getLogger("aicache.fuse")

MiB = 1024 * 1024
#: pages a spliced reply needs beyond its data: libfuse sizes the pipe as one page per
#: header iovec and per buffer, plus one, plus the bytes; one more for a block file's data
#: starting mid-page (its 24-byte header), for up to two buffers (a request across a block
#: boundary)
SPLICE_SLACK_PAGES = 5


_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def mount_device(mountpoint: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """``MAJ:MIN`` of the filesystem mounted at ``mountpoint`` (an absolute path with no
    symlinks; the last, i.e. topmost, mount there), read from ``mountinfo`` — no ``stat``
    of the mount point, which from inside the FUSE server would wait on its own reply."""
    want = mountpoint
    dev = None
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.split(" ", 5)
                if len(parts) > 4:
                    path = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), parts[4])
                    if path == want:
                        dev = parts[2]
    except OSError:
        return None
    return dev


def raise_readahead(mountpoint: str, kb: int, sysfs: str = "/sys/class/bdi") -> int | None:
    """Raise the mount's kernel readahead window to at least ``kb`` KiB (never lowers it).

    Returns the window now in force, or None when it cannot be read or set (not root, no
    sysfs, mount not found): then the kernel keeps its default and reads still work."""
    dev = mount_device(mountpoint)
    if dev is None:
        return None
    path = os.path.join(sysfs, dev, "read_ahead_kb")
    try:
        with open(path) as f:
            cur = int(f.read().strip())
        if cur >= kb:
            return cur
        with open(path, "w") as f:
            f.write(str(kb))
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError) as exc:
        log.info("could not raise readahead of %s to %d KiB: %s", mountpoint, kb, exc)
        return None



def splice_request_bytes(want: int = MiB, pipe_max: str = "/proc/sys/fs/pipe-max-size") -> int:
    """The largest read request (whole pages, at most ``want``) whose reply libfuse can
    splice: header, data and slack must fit one pipe, and this process can grow a pipe to
    ``want`` plus slack only with CAP_SYS_RESOURCE or a raised ``fs.pipe-max-size``.
    0 when no useful size fits (then replies are copied)."""
    page = os.sysconf("SC_PAGE_SIZE")
    slack = SPLICE_SLACK_PAGES * page
    r, w = os.pipe()
    try:
        if fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, want + slack) >= want + slack:
            return want
    except (OSError, OverflowError):
        pass
    finally:
        os.close(r)
        os.close(w)
    try:
        with open(pipe_max) as f:
            cap = int(f.read().strip())
    except (OSError, ValueError):
        return 0
    n = (cap - slack) // page * page
    return min(want, n) if n >= 32 * page else 0
