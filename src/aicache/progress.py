"""Progress bars on stderr for long runs, hidden when stderr is not a terminal, under CI
or with ``AICACHE_NO_PROGRESS`` set, so piped output and logs stay clean. Used by the CLI,
the simulator and the experiment runner alike."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class ProgressBar(Protocol):
    def advance(self, n: float = 1) -> None: ...


def progress_enabled() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI") and not os.environ.get("AICACHE_NO_PROGRESS")


@contextmanager
def progress(total: float | None, description: str, *, enabled: bool | None = None) -> Iterator[ProgressBar]:
    """A rich progress bar on stderr; yields an object with ``advance(n)``."""
    if enabled is None:
        enabled = progress_enabled()
    if not enabled:
        yield _NullBar()
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(),
                  console=Console(file=sys.stderr), transient=True) as prog:
        task = prog.add_task(description, total=total)
        yield _Bar(prog, task)


class _NullBar:
    def advance(self, n: float = 1) -> None:
        pass


class _Bar:
    def __init__(self, prog: Any, task: Any) -> None:
        self._prog, self._task = prog, task

    def advance(self, n: float = 1) -> None:
        self._prog.advance(self._task, n)
