"""What an experiment is: a named grid of independent simulation cells plus a report.

A cell is a JSON-serialisable ``params`` dict; ``run_cell(params)`` is a pure,
deterministic, picklable function (module level) returning a flat dict of metrics. The
runner (process pool or Ray) executes cells, stores one row per cell with its params,
seed, package version and git commit, skips cells already stored, and hands all rows to
``report`` which draws the seed's figure and tables.

To add an experiment: subclass :class:`Experiment` in a module under
``aicache.experiments`` and register it in ``aicache/experiments/__init__.py`` with one line.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict


def cell_key(experiment: str, params: Mapping[str, Any]) -> str:
    """Stable identity of a cell: hash of the experiment name and its sorted params."""
    blob = json.dumps({"experiment": experiment, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    experiment: str
    params: Mapping[str, Any]

    @property
    def key(self) -> str:
        return cell_key(self.experiment, self.params)


@dataclass
class Figure:
    """A PNG the report embeds, with a caption."""

    path: Path
    caption: str


@dataclass
class Table:
    """A table for the report and the terminal: rows of dicts with the same keys."""

    title: str
    rows: list[dict[str, Any]]
    note: str = ""


class Goal(TypedDict):
    """One of the project's goals for an experiment, as checked on its rows."""

    goal: str  #: what is claimed, in words
    met: bool | None  #: None = not evaluated (a cell filter left out the evidence)
    value: str  #: the measured value that decides it


@dataclass
class ReportSection:
    """What an experiment contributes to ``report.html``."""

    title: str
    description: str = ""
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    #: The seed's published numbers, shown next to ours: rows of dicts.
    published: list[dict[str, Any]] = field(default_factory=list)
    #: The project's goals for the experiment, as checked on its rows.
    goals: list[Goal] = field(default_factory=list)


class Experiment(ABC):
    """A registered, named grid of cells."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: Which seed / figure this reproduces, e.g. "Chiron Fig. 11/12".
    reproduces: ClassVar[str] = ""
    #: Wall time of the full (non-quick) version on a 2-core machine, documented.
    full_wall_time: ClassVar[str] = "unknown"

    @abstractmethod
    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        """The grid: one params dict per cell. ``quick`` = a small CI-sized version."""

    @staticmethod
    @abstractmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        """Run one cell; deterministic in ``params`` (which include the seed)."""

    @abstractmethod
    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        """Draw figures (PNG into ``outdir``) and tables from all rows of this experiment.

        Each row is ``{**params, **metrics}`` plus bookkeeping keys prefixed ``_``.
        """
