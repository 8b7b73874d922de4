"""``aicache trace convert PATH --to FMT --out OUT``: rewrite a trace in another format
(lcs-csv, lcs-txt, oracle-general, block-csv; and mooncake, bailian, kv-jsonl from a KV
trace). A KV trace converts to a block format by its prefix blocks. What the target format
cannot hold is dropped, and a line on stderr says what."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.output import help_text

    p: argparse.ArgumentParser = subparsers.add_parser(
        "convert", help="rewrite a trace in another format",
        description=help_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="PATH", help="input trace")
    p.add_argument("--to", required=True, metavar="FMT", help="output format")
    p.add_argument("--out", required=True, metavar="OUT", help="output path")
    p.add_argument("--format", default="auto", metavar="FMT", help="input format (default: detect)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    import os

    from aicache.cli.output import emit
    from aicache.errors import BadInput
    from aicache.traces.convert import DROPS, convert
    from aicache.traces.io import open_trace

    src = open_trace(args.trace, args.format, skip_bad=args.skip_bad)
    if os.path.exists(args.out) and os.path.samefile(args.out, args.trace):
        raise BadInput(f"--out {args.out!r} is the input trace; give another path")
    n = convert(src, args.out, args.to)
    if args.to in DROPS:
        print(f"aicache trace convert: {args.to} drops {DROPS[args.to]}", file=sys.stderr)
    emit({"trace": src.path, "format": src.format, "to": args.to, "out": args.out, "records": n,
          "bad_records": src.bad_records}, as_json=args.json, title="trace convert")
    return 0
