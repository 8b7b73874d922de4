"""Cache units: a file path's dataset directory, the stream a data-cache policy sees.

A unit is the first ``depth`` components of a file's path (a file directly under a shorter
path belongs to its parent directory; a bare name is its own unit). Files of one unit have
consecutive block ranges (the block map sorts files by path), so a sorted traversal of a
dataset directory is one stride in its unit.
"""

from __future__ import annotations

from aicache.errors import BadInput


class UnitMapper:
    """file path → cache unit (the first ``depth`` path components), memoised."""

    __slots__ = ("depth", "_memo")

    def __init__(self, depth: int = 1) -> None:
        if depth < 1:
            raise BadInput(f"unit_depth={depth!r} must be >= 1")
        self.depth = depth
        self._memo: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        u = self._memo.get(path)
        if u is None:
            parts = path.strip("/").split("/")
            u = "/".join(parts[: self.depth]) if len(parts) > self.depth else (
                "/".join(parts[:-1]) or path)
            self._memo[path] = u
        return u
