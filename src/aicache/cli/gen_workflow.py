"""``aicache gen workflow NAME``: write a published Chiron workload (``docs/design/chiron.md``) as a block-csv trace with
true phase labels, optionally materialising the dataset as real files."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "workflow", help="generate an AI data workflow trace (W1..W3, T1..T6)",
        description="Generate a block-csv trace of a published Chiron workload (files sorted by path "
                    "map to consecutive 4 MiB blocks; phase column = true pattern label).")
    p.add_argument("name", metavar="NAME", help="W1..W3 or T1..T6")
    p.add_argument("--out", required=True, metavar="TRACE.csv", help="output block-csv path")
    p.add_argument("--scale", type=float, default=1.0, help="dataset size factor (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--materialize", metavar="DIR", default=None,
                   help="also write the dataset's files (exact sizes, seeded bytes) under DIR")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.traces.workflows import generate_workflow, materialize, write_workflow
    from aicache.units import format_bytes

    tr = generate_workflow(args.name, scale=args.scale, seed=args.seed)
    n = write_workflow(tr, args.out)
    ds = tr.dataset
    print(f"wrote {n} reads of {len(ds.paths)} files ({format_bytes(ds.total_bytes)}, "
          f"{ds.n_blocks} blocks) to {args.out}", file=sys.stderr)
    if args.materialize:
        total = materialize(ds, args.materialize, seed=args.seed)
        print(f"materialized {len(ds.paths)} files ({format_bytes(total)}) under {args.materialize}",
              file=sys.stderr)
    return 0
