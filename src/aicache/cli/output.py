"""The CLI's output: a readable table by default, exact JSON with ``--json``, and help
text from a command's docstring. Progress bars live in :mod:`aicache.progress`, which the
simulator and experiments use too (they sit below the CLI and must not import it)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def _clean(v: Any) -> Any:
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(_clean(obj), sort_keys=False)


def emit(result: Mapping[str, Any], *, as_json: bool, title: str = "") -> None:
    """Print ``result`` as one JSON object (``--json``) or as a two-column table."""
    if as_json:
        print(dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for k, v in result.items():
        if isinstance(v, list) and v and isinstance(v[0], Mapping):
            continue
        table.add_row(str(k), _fmt(v))
    console().print(table)
    for k, v in result.items():
        if isinstance(v, list) and v and isinstance(v[0], Mapping):
            print_rows(v, title=str(k))


def print_rows(rows: Sequence[Mapping[str, Any]], *, title: str = "") -> None:
    """A list of dicts as a table (columns from the first row)."""
    from rich.console import Console
    from rich.table import Table

    if not rows:
        return
    table = Table(title=title or None)
    cols = list(rows[0].keys())
    for c in cols:
        table.add_column(str(c))
    for r in rows:
        table.add_row(*[_fmt(r.get(c)) for c in cols])
    console().print(table)


def console() -> Any:
    """The stdout console. Piped output (CI logs, ``| tee``) gets a wide fixed width instead
    of rich's 80 columns, so tables are not squeezed into unreadable wrapped cells."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.4e}"
    if v is None:
        return "-"
    return str(v)


def help_text(doc: str | None) -> str:
    """A command module's docstring as its ``--help`` description: whole paragraphs (a
    first line alone stops mid-sentence), without reST's double back-quotes; for a parser
    with ``argparse.RawDescriptionHelpFormatter``, which keeps the paragraphs."""
    import textwrap

    paras = (textwrap.fill(" ".join(p.split()).replace("``", ""), 88)
             for p in (doc or "").strip().split("\n\n"))
    return "\n\n".join(paras)
