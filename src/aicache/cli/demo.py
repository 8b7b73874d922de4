"""``aicache demo``: the project's main job on embedded defaults, in minutes, offline.

Runs the experiments listed in :data:`aicache.experiments.demo.DEMO_EXPERIMENTS`, prints
their headline tables and writes ``OUT/report.html`` (default ``results/demo/``). A listed
experiment that is not registered is skipped with a note on stderr (and under
``"skipped"`` in ``--json``), never silently.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.experiment import add_run_options

    p = subparsers.add_parser(
        "demo", help="run the main experiments on embedded defaults",
        description="Run the project's main experiments on embedded defaults (offline, minutes "
                    "on 2 cores), print the headline tables and write OUT/report.html.")
    add_run_options(p, default_out=Path("results/demo"))
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.experiment import RunSpec, run_specs
    from aicache.errors import BadInput
    from aicache.experiments import EXPERIMENTS
    from aicache.experiments import demo as demo_config

    specs: list[RunSpec] = []
    skipped: list[dict[str, str]] = []
    for entry in demo_config.DEMO_EXPERIMENTS:
        if entry.name not in EXPERIMENTS:
            skipped.append({"name": entry.name, "reason": "not registered yet"})
            print(f"demo: skipping {entry.name!r} ({entry.why or 'no description'}): "
                  "not registered yet", file=sys.stderr)
            continue
        specs.append(RunSpec(entry.name, entry.quick, entry.select))
    if not specs:
        raise BadInput("demo: none of the configured experiments is registered; see "
                       "`aicache experiment list`")
    return run_specs(specs, out=args.out, workers=args.workers, ray_address=args.ray_address,
                     as_json=args.json, skipped=skipped)


__all__ = ["add_parser", "run"]
