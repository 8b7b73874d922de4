"""One self-contained ``report.html`` over the stored results of several experiments.

The report reads only what the runner stored (``OUT/NAME/cells.jsonl`` + ``run.json``), so
it can be rebuilt at any time without rerunning cells. Each experiment's ``report`` draws
its PNGs into ``OUT/NAME/`` and returns a :class:`ReportSection`; the HTML references the
PNGs by paths relative to ``report.html`` (move the whole ``OUT`` folder and it still
works). Plain HTML with inline CSS: no JavaScript, no network, opens from a file system.

A goal's ``met`` is True, False, or None for "not evaluated" (shown grey, e.g. when a cell
filter left out the runs it needs). Failed cells are not handed to the experiment's ``report`` (their metrics are missing);
they are listed in their own table with the error. An experiment whose ``report`` raises
gets a section that says so instead of taking the whole report down.
"""

from __future__ import annotations

import html
import os
import socket
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from numbers import Real
from pathlib import Path
from typing import Any

import aicache
from aicache.experiments.base import ReportSection, Table
from aicache.experiments.runner import git_commit, load_rows, make_experiment


@dataclass
class RenderedSection:
    """An experiment's section plus what the report says about the run itself."""

    name: str
    section: ReportSection | None
    meta: dict[str, Any]
    rows: int
    failed_rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def render_sections(out_dir: Path, names: Sequence[str]) -> list[RenderedSection]:
    """Call each experiment's ``report`` on its stored successful rows."""
    out: list[RenderedSection] = []
    for name in names:
        rows, meta = load_rows(Path(out_dir), name)
        good = [r for r in rows if "_error" not in r]
        failed = [r for r in rows if "_error" in r]
        try:
            exp = make_experiment(name)
            section: ReportSection | None = exp.report(good, Path(out_dir) / name)
            err = None
        except Exception as exc:  # noqa: BLE001 - one broken report must not hide the others
            section = None
            err = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
        out.append(RenderedSection(name, section, meta, len(rows), failed, err))
    return out


# -- HTML -----------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1200px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.88em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.t,th.t{text-align:left}
.meta td,.meta th{text-align:left}.note{color:#555;font-size:.85em;margin-top:-.6em}
.goal-met{background:#e3f6e3}.goal-not{background:#fbe1e1}
.badge{display:inline-block;padding:0 .5em;border-radius:3px;font-weight:600;font-size:.85em}
.badge.met{background:#2e7d32;color:#fff}.badge.not{background:#c62828;color:#fff}
.badge.na{background:#9e9e9e;color:#fff}.goal-na{background:#f3f3f3}
.side{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start}.side>div{flex:1 1 420px}
figure{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top}
figure img{max-width:560px;width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#444;max-width:560px}
.err{background:#fbe1e1;border:1px solid #c62828;padding:.5em;white-space:pre-wrap;font-family:monospace;font-size:.8em}
.missing{color:#c62828}.quick{background:#fff6db;border:1px solid #e0c060;padding:.4em .6em}
.scroll{overflow-x:auto;max-width:100%}
"""


def fmt(v: Any) -> str:
    """A value as table text: floats with 4 significant digits, ``None`` as a dash."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return "nan"
        return f"{v:.4g}" if v == 0 or 1e-4 <= abs(v) < 1e6 else f"{v:.3e}"
    if isinstance(v, Mapping):  # e.g. a cell filter or a failed cell's params: no Python repr
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items()) or "–"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def _e(v: Any) -> str:
    return html.escape(fmt(v))


def table_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows of dicts as an HTML table; columns are the union of keys in first-seen order."""
    if not rows:
        return "<p class='note'>(no rows)</p>"
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    numeric = {c: all(isinstance(r.get(c), Real) or r.get(c) is None for r in rows) for c in cols}
    head = "".join(f"<th class='{'' if numeric[c] else 't'}'>{html.escape(str(c))}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td class='{'' if numeric[c] else 't'}'>{_e(r.get(c))}</td>" for c in cols)
        + "</tr>" for r in rows)
    # a wide table scrolls inside its box instead of widening the page
    return (f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            "</table></div>")


def _table_block(t: Table) -> str:
    note = f"<p class='note'>{html.escape(t.note)}</p>" if t.note else ""
    return f"<h3>{html.escape(t.title)}</h3>{table_html(t.rows)}{note}"


def _meta_html(meta: Mapping[str, Any], rows: int) -> str:
    if not meta:
        return f"<p class='note'>{rows} stored rows; no run.json (run metadata unknown).</p>"
    items = [
        ("cells", f"{meta.get('cells')} ({meta.get('ran')} run now, {meta.get('skipped')} reused, "
                  f"{meta.get('failed')} failed)"),
        ("quick", meta.get("quick")), ("cell filter", meta.get("select")),
        ("executor", meta.get("executor")),
        ("wall time", f"{fmt(meta.get('wall_s'))} s (cells: {fmt(meta.get('cells_wall_s'))} s CPU-serial sum)"),
        ("documented full wall time", meta.get("full_wall_time")),
        ("started / finished", f"{meta.get('started_at')} / {meta.get('finished_at')}"),
        ("aicache version / commit", f"{meta.get('version')} / {meta.get('git_commit')}"),
        ("host", meta.get("host")), ("results", meta.get("results")),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    return f"<table class='meta'>{body}</table>"


def _goals_html(goals: Sequence[Mapping[str, Any]]) -> str:
    if not goals:
        return ""
    rows = []
    for g in goals:
        met = g.get("met")
        if met is None:  # not evaluated (e.g. a cell filter left out the evidence)
            cls, badge = "goal-na", "<span class='badge na'>not evaluated</span>"
        elif met:
            cls, badge = "goal-met", "<span class='badge met'>met</span>"
        else:
            cls, badge = "goal-not", "<span class='badge not'>not met</span>"
        rows.append(f"<tr class='{cls}'><td class='t'>{_e(g.get('goal'))}</td>"
                    f"<td class='t'>{_e(g.get('value'))}</td><td class='t'>{badge}</td></tr>")
    return ("<h3>Goals</h3><table><thead><tr><th class='t'>goal</th><th class='t'>ours</th>"
            f"<th class='t'>status</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _figure_html(path: Path, caption: str, report_dir: Path) -> str:
    p = Path(path)
    if not p.is_absolute():
        p = Path.cwd() / p
    if not p.exists():
        return f"<p class='missing'>figure missing: {html.escape(str(path))}</p>"
    rel = os.path.relpath(p.resolve(), report_dir.resolve())
    src = html.escape(Path(rel).as_posix(), quote=True)
    return (f"<figure><img src=\"{src}\" alt=\"{html.escape(caption, quote=True)}\">"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _section_html(rs: RenderedSection, report_dir: Path) -> str:
    parts = []
    title = rs.section.title if rs.section and rs.section.title else rs.meta.get("title", rs.name)
    parts.append(f"<h2 id='{html.escape(rs.name, quote=True)}'>{html.escape(str(title))} "
                 f"<small>({html.escape(rs.name)})</small></h2>")
    if rs.meta.get("reproduces"):
        parts.append(f"<p><b>Reproduces:</b> {html.escape(str(rs.meta['reproduces']))}</p>")
    if rs.section and rs.section.description:
        parts.append(f"<p>{html.escape(rs.section.description)}</p>")
    parts.append(_meta_html(rs.meta, rs.rows))
    if rs.meta.get("quick"):
        parts.append("<p class='quick'><b>Quick run.</b> These cells are the quick grid (fewer "
                     "and smaller cells than the paper's); the goals below are checked on it but "
                     "do not test the paper's claims. Run without <code>--quick</code> for that.</p>")
    if rs.error:
        parts.append(f"<div class='err'>report failed: {html.escape(rs.error)}</div>")
    sec = rs.section
    if sec is not None:
        parts.append(_goals_html(sec.goals))
        parts.extend(_figure_html(f.path, f.caption, report_dir) for f in sec.figures)
        ours = "".join(_table_block(t) for t in sec.tables)
        if sec.published:
            parts.append(f"<div class='side'><div><h3>Ours</h3>{ours}</div>"
                         f"<div><h3>Published (paper)</h3>{table_html(sec.published)}</div></div>")
        else:
            parts.append(ours)
    if rs.failed_rows:
        frows = [{"cell": r.get("_key"), "params": {k: v for k, v in r.items() if not k.startswith("_")},
                  "error": r.get("_error")} for r in rs.failed_rows]
        parts.append(f"<h3 class='missing'>Failed cells ({len(frows)})</h3>{table_html(frows)}")
    return "\n".join(parts)


def write_report(out_dir: Path, names: Sequence[str],
                 sections: Sequence[RenderedSection] | None = None) -> Path:
    """Write ``OUT/report.html`` for ``names`` (rendering their sections unless given)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if sections is None:
        sections = render_sections(out_dir, names)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    total_wall = sum(float(s.meta.get("wall_s") or 0.0) for s in sections)
    toc = "".join(f"<li><a href='#{html.escape(s.name, quote=True)}'>{html.escape(s.name)}</a>"
                  f"{' — <span class=missing>failures</span>' if s.failed_rows or s.error else ''}</li>"
                  for s in sections)
    head = (f"<h1>aicache experiment report</h1><p class='note'>generated {now} on "
            f"{html.escape(socket.gethostname())} · aicache {html.escape(aicache.__version__)} · "
            f"commit {html.escape(git_commit())} · total wall time {fmt(total_wall)} s</p>"
            f"<ul>{toc}</ul>")
    body = "\n".join(_section_html(s, out_dir) for s in sections)
    doc = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
           f"<title>aicache experiment report</title><style>{_CSS}</style></head>"
           f"<body>{head}{body}</body></html>\n")
    path = out_dir / "report.html"
    tmp = out_dir / "report.html.tmp"
    tmp.write_text(doc, encoding="utf-8")
    os.replace(tmp, path)
    return path


__all__ = ["RenderedSection", "fmt", "render_sections", "table_html", "write_report"]
