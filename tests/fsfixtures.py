"""A real small filesystem for the tests that fill a disk: a tmpfs mounted where asked."""

from __future__ import annotations

import subprocess
from pathlib import Path


def mount_tmpfs(where: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` (mount's syntax, e.g. ``1m``) on ``where``; False where
    mounting is not allowed (the caller then emulates the small disk)."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                           capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0
