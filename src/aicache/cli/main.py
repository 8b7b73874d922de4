"""Entry point: builds the argument parser from one module per command.

Each command module defines ``add_parser(subparsers) -> ArgumentParser`` and
``run(args) -> int`` and must not import heavy dependencies at module import time (the
CLI should start fast). Errors: :class:`aicache.errors.BadInput` → one line on stderr,
exit 2; any other exception → one line, exit 1 (``AICACHE_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aicache import __version__
from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.cli import Subparsers

#: (group or None, module). A group ("sim") gets one sub-parser level more.
COMMANDS: list[tuple[str | None, str]] = [
    ("sim", "aicache.cli.sim_cache"),
    ("sim", "aicache.cli.sim_mrc"),
    ("sim", "aicache.cli.sim_datacache"),
    ("sim", "aicache.cli.sim_kv"),
    ("sim", "aicache.cli.sim_prefix"),
    ("gen", "aicache.cli.gen_workflow"),
    ("gen", "aicache.cli.gen_sessions"),
    ("trace", "aicache.cli.trace_summary"),
    ("trace", "aicache.cli.trace_convert"),
    (None, "aicache.cli.mount"),
    (None, "aicache.cli.umount"),
    (None, "aicache.cli.record"),
    (None, "aicache.cli.warmup"),
    (None, "aicache.cli.cache_admin"),
    (None, "aicache.cli.experiment"),
    (None, "aicache.cli.demo"),
]

GROUP_HELP = {"sim": "trace-driven simulation", "gen": "workload and trace generators",
              "trace": "trace analysis and format conversion"}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; where ``argv`` starts with a group's name (``sim …``),
    of that group's commands only: some parsers import what their defaults name (``record``
    the data cache's engine, for its default cache directory), which a simulator run
    should not pay for at start-up."""
    only = argv[0] if argv and argv[0] in GROUP_HELP else None
    parser = argparse.ArgumentParser(
        prog="aicache", description="Adaptive caching for AI systems (Chiron, SARIA, SAECache)."
    )
    parser.add_argument("--version", action="version", version=f"aicache {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, Subparsers] = {}
    for group, module_name in COMMANDS:
        if only is not None and group != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # command not built yet
            raise
        if group is None:
            sub = top
        else:
            if group not in groups:
                gp = top.add_parser(group, help=GROUP_HELP.get(group, ""))
                groups[group] = gp.add_subparsers(dest=f"{group}_command", metavar="COMMAND")
                gp.set_defaults(_group_parser=gp)
            sub = groups[group]
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        (getattr(args, "_group_parser", None) or parser).print_help(sys.stderr)
        return 2
    try:
        return int(run(args) or 0)
    except BadInput as exc:
        print(f"aicache: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aicache: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        if os.environ.get("AICACHE_DEBUG"):
            raise
        print(f"aicache: failed: {type(exc).__name__}: {exc} (AICACHE_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
