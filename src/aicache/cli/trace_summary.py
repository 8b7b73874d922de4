"""``aicache trace summary PATH``: a trace's popularity (Zipf alpha, top-object shares),
one-hit wonders, object sizes and reuse (time and LRU distance), as libCacheSim's
traceAnalyzer reports them; a table, or one JSON object with ``--json``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    from aicache.cli.output import help_text

    p: argparse.ArgumentParser = subparsers.add_parser(
        "summary", help="popularity, one-hit wonders and reuse distances of a trace",
        description=help_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="PATH", help="trace file (any format; KV traces by prefix block)")
    p.add_argument("--format", default="auto", metavar="FMT", help="trace format (default: detect)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.traces.io import open_trace
    from aicache.traces.summary import summarize

    d = summarize(open_trace(args.trace, args.format, skip_bad=args.skip_bad)).to_dict()
    if args.json:
        emit(d, as_json=True)
        return 0
    flat: dict[str, Any] = {}
    for k, v in d.items():  # the distributions as one row each
        if isinstance(v, dict):
            flat[k] = "  ".join(f"{n} {x:.4g}" if isinstance(x, float) else f"{n} {x}"
                                for n, x in v.items())
        else:
            flat[k] = v
    emit(flat, as_json=False, title="trace summary")
    return 0
