"""The mount on libfuse's *high-level* (path) API, with libfuse's own pool of worker threads.

Used on libfuse 2 and ≥ 3.17 (where :mod:`.lowlevel`'s structure layouts do not hold), or
when asked for (``fuse_api="highlevel"``): concurrent readers (DataLoader workers) are
served in parallel by the engine's thread-safe read path, one libfuse thread per request
in flight.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from aicache.datacache.fuse.binding import FUSE, LIBFUSE_MAJOR
from aicache.datacache.fuse.ops import CacheFuse

#: libfuse's worker threads (a fixed pool: as many may idle as may run, so none is retired)
FUSE_THREADS = 10
_callback_thread = threading.local()


def keep_thread_state() -> None:
    """Keep this foreign (libfuse) thread's Python thread state across callbacks.

    A ctypes callback on a thread Python did not create makes a fresh thread state on
    entry and destroys it on return (``PyGILState_Ensure``/``Release``): per FUSE request,
    on every worker thread. One extra ``Ensure`` that is never released keeps the state,
    so later callbacks on this thread only take the GIL (a small file's open, read and
    release are three callbacks, each mostly that set-up). The state lives as long as the thread;
    the mount keeps a fixed pool of worker threads (:data:`FUSE_THREADS`), so none
    accumulate."""
    if not getattr(_callback_thread, "kept", False):
        ctypes.pythonapi.PyGILState_Ensure()
        _callback_thread.kept = True


if FUSE is not None:
    class _ZeroCopyFUSE(FUSE):  # type: ignore[misc]  # the binding's FUSE is Any (picked at run time)
        """The binding's FUSE with its ``read`` callback handing our operations libfuse's
        reply buffer: the block file is read straight into it (``preadv``), instead of
        into a new bytes object that the binding then copies (``memmove``) — one copy and
        one 1 MiB allocation less per request. Operations without ``read_into`` get the
        binding's own ``read``. Every callback first keeps its thread's Python state
        (:func:`keep_thread_state`)."""

        def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            keep_thread_state()
            return super()._wrapper(func, *args, **kwargs)

        def open(self, path: bytes, fip: Any) -> int:
            """The binding's open, with the page-cache flags the operations chose for this
            handle (one version per handle: see :mod:`.ops`)."""
            n: int = super().open(path, fip)
            use = self.operations.cache_use(fip.contents.fh)
            fip.contents.direct_io = 1 if use.direct_io else 0
            fip.contents.keep_cache = 1 if use.keep_cache else 0
            return n

        def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
            ops = self.operations
            into = getattr(ops, "read_into", None)
            if into is None or self.raw_fi:
                n: int = super().read(path, buf, size, offset, fip)
                return n
            addr = ctypes.cast(buf, ctypes.c_void_p).value or 0
            view = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")
            got: int = into(None if path is None else path.decode(self.encoding, self.errors),
                            view, offset, fip.contents.fh)
            return got
else:
    _ZeroCopyFUSE = None  # type: ignore[assignment, misc]  # None: no binding


def serve(ops: CacheFuse, mountpoint: str, *, foreground: bool = True,
          kernel_cache: bool = False, direct_io: bool = False, max_read: int = 0,
          timeout_s: float = 1.0, allow_other: bool = False) -> None:
    """Mount ``ops`` read-only at ``mountpoint`` and serve until unmounted (SIGINT/SIGTERM/
    SIGHUP, which libfuse's handlers take, or ``fusermount3 -u``). ``timeout_s``: the
    kernel's attribute and entry cache timeout; ``max_read``: the read request cap (the
    splice size, 0: the kernel's)."""
    assert _ZeroCopyFUSE is not None, "fuse_available() is checked before mounting"
    # kernel_cache and direct_io are chosen per open by the operations (libfuse's options
    # of those names would force them on every open: see .ops)
    opts: dict[str, Any] = {}
    if allow_other:  # else the kernel lets only the mounting user in
        opts["allow_other"] = True
    if max_read:
        opts["max_read"] = max_read
    opts.update(attr_timeout=timeout_s, entry_timeout=timeout_s, negative_timeout=0)
    if LIBFUSE_MAJOR >= 3:
        # a fixed pool: threads are never retired (see keep_thread_state); setting
        # max_idle_threads also silences libfuse 3.14's warning about its unset default
        opts["max_threads"] = opts["max_idle_threads"] = FUSE_THREADS
    try:
        _ZeroCopyFUSE(ops, mountpoint, foreground=foreground, ro=True, nothreads=False,
                      fsname="aicache", default_permissions=True, **opts)
    except RuntimeError as exc:
        # libfuse 3's fuse_main returns 8 when its loop ended on a signal (SIGINT/SIGTERM,
        # after unmounting): the clean way to stop a mount, not a failure
        if not (LIBFUSE_MAJOR >= 3 and exc.args == (8,) and not os.path.ismount(mountpoint)):
            raise
