"""``aicache experiment list|run``: the registered experiments, run resumably, reported.

``run`` stores rows under ``--out`` (default ``results/``), prints each experiment's summary
tables and goals, writes ``OUT/report.html`` (with every other experiment already stored
under ``OUT`` after this run's) and prints its path. Rerunning the same
command reuses every finished cell (a killed run resumes). Exit status: 0, 1 when any
cell or report failed (the report is still written), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.cli import Subparsers


@dataclass(frozen=True)
class RunSpec:
    """One experiment to run: its name, size and cell filter."""

    name: str
    quick: bool = False
    select: Mapping[str, Any] | None = None
    stored_only: bool = False


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "experiment", help="list and run the registered experiments",
        description="List and run the registered experiments. Results are stored per cell under "
                    "--out (a rerun resumes), summary tables are printed and OUT/report.html is "
                    "written.")
    sub = p.add_subparsers(dest="experiment_command", metavar="COMMAND")
    lp = sub.add_parser("list", help="registered experiments, their grid sizes and wall times")
    lp.add_argument("--json", action="store_true", help="one JSON object on stdout")
    rp = sub.add_parser("run", help="run experiments, write results and report.html")
    rp.add_argument("names", nargs="+", metavar="NAME", help="experiment names, or 'all'")
    rp.add_argument("--quick", action="store_true", help="the small CI-sized grid")
    add_run_options(rp, default_out=Path("results"))
    rp.add_argument("--select", action="append", default=[], metavar="PARAM=V[,V...]",
                    help="run only cells whose PARAM is one of the values (repeatable)")
    rp.add_argument("--stored-only", action="store_true",
                    help="run nothing: results and report from the cells already stored in --out")
    p.set_defaults(_experiment_parser=p)
    return p


def add_run_options(p: argparse.ArgumentParser, default_out: Path) -> None:
    """Options shared by ``experiment run`` and ``demo``."""
    p.add_argument("--out", type=Path, default=default_out,
                   help=f"results directory (default {default_out}/)")
    p.add_argument("--workers", type=int, default=None,
                   help="process-pool size (default: CPU count; 0 = in-process, serial)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="run cells on Ray: 'local' (start one here), 'auto' or HOST:PORT")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def parse_select(items: Sequence[str]) -> dict[str, Any] | None:
    """``["policy=lru,fifo", "seed=0"]`` → ``{"policy": ["lru", "fifo"], "seed": [0]}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, vals = item.partition("=")
        if not sep or not key or not vals:
            raise BadInput(f"--select {item!r}: expected PARAM=VALUE[,VALUE...], e.g. policy=lru,fifo")
        parsed = []
        for v in vals.split(","):
            try:
                parsed.append(json.loads(v))
            except ValueError:
                parsed.append(v)
        out.setdefault(key, []).extend(parsed)
    return out or None


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "experiment_command", None)
    if cmd == "list":
        return _list(args.json)
    if cmd == "run":
        names = resolve_names(args.names)
        select = parse_select(args.select)
        specs = [RunSpec(n, args.quick, select, args.stored_only) for n in names]
        check_out_dir(args.out)
        return run_specs(specs, out=args.out, workers=args.workers,
                         ray_address=args.ray_address, as_json=args.json)
    args._experiment_parser.print_help(sys.stderr)
    return 2


def check_out_dir(out: Path) -> None:
    """``--out`` must be (or become) a writable folder before any cell runs."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not os.access(out, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as exc:
        raise BadInput(f"--out {str(out)!r} is not a writable folder ({exc.strerror}); give "
                       "a folder this user can write, e.g. results/") from None


def resolve_names(names: Sequence[str]) -> list[str]:
    """Expand ``all``; reject unknown names up front, before any cell runs."""
    from aicache.errors import UnknownName
    from aicache.experiments import EXPERIMENTS

    if "all" in names:
        return EXPERIMENTS.names()
    out: list[str] = []
    for n in names:
        if n not in EXPERIMENTS:
            raise UnknownName(f"unknown experiment {n!r}; valid: {', '.join(EXPERIMENTS.names())}, all")
        if n not in out:
            out.append(n)
    return out


def _list(as_json: bool) -> int:
    from aicache.cli.output import emit, print_rows
    from aicache.experiments import EXPERIMENTS

    rows = []
    for name in EXPERIMENTS.names():
        row: dict[str, Any] = {"name": name, "title": "", "reproduces": EXPERIMENTS.help(name),
                               "cells_quick": None, "cells_full": None, "full_wall_time": None}
        try:
            exp = EXPERIMENTS.get(name)()
            row.update(title=exp.title, reproduces=exp.reproduces or row["reproduces"],
                       cells_quick=len(exp.cells(True)), cells_full=len(exp.cells(False)),
                       full_wall_time=exp.full_wall_time)
        except Exception as exc:  # noqa: BLE001 - list the others even if one is broken
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    if as_json:
        emit({"experiments": rows}, as_json=True)
    else:
        print_rows([{k: r.get(k) for k in ("name", "reproduces", "cells_quick", "cells_full",
                                          "full_wall_time")} for r in rows], title="experiments")
    return 0


def _met_text(met: Any) -> str:
    return "not evaluated" if met is None else ("met" if met else "NOT MET")


def _union_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    return [{c: r.get(c) for c in cols} for r in rows]


def run_specs(specs: Sequence[RunSpec], *, out: Path, workers: int | None,
              ray_address: str | None, as_json: bool,
              skipped: Sequence[Mapping[str, str]] = ()) -> int:
    """Run each spec, write ``OUT/report.html`` (this run's experiments first, then every
    other experiment already stored under ``OUT``), print this run's tables (or JSON).
    Exit status."""
    import contextlib

    from aicache.cli.output import emit, print_rows
    from aicache.experiments import EXPERIMENTS
    from aicache.experiments.report import render_sections, write_report
    from aicache.experiments.runner import RUN_FILE, ray_session, run_experiment

    results = []
    session = ray_session(ray_address, workers) if ray_address else contextlib.nullcontext()
    with session:
        for spec in specs:
            results.append(run_experiment(spec.name, quick=spec.quick, out=out,
                                          ray_address=ray_address, workers=workers,
                                          select=spec.select, stored_only=spec.stored_only))
    names = [r.name for r in results]
    # OUT/report.html covers every experiment stored under OUT, not just this run's: running
    # one experiment must not drop the others' sections from a shared results folder
    stored = [n for n in EXPERIMENTS.names()
              if n not in names and (Path(out) / n / RUN_FILE).is_file()]
    all_sections = render_sections(out, names + stored)
    path = write_report(out, names + stored, all_sections)
    sections = all_sections[:len(names)]
    status = 0 if all(r.ok for r in results) and not any(s.error for s in sections) else 1

    if as_json:
        exps = []
        for res, sec in zip(results, sections):
            s = sec.section
            exps.append({
                "name": res.name, "cells": len(res.rows), "ran": res.ran, "skipped": res.skipped,
                "failed": res.failed, "wall_seconds": round(res.wall_s, 3),
                "executor": res.executor, "results": str(res.results_path),
                "tables": [{"title": t.title, "rows": t.rows, "note": t.note} for t in s.tables] if s else [],
                "goals": list(s.goals) if s else [],
                "published": list(s.published) if s else [],
                "figures": [str(f.path) for f in s.figures] if s else [],
                "error": sec.error.splitlines()[0] if sec.error else None,
            })
        emit({"experiments": exps, "skipped": list(skipped), "report": str(path), "ok": status == 0},
             as_json=True)
        return status

    for res, sec in zip(results, sections):
        print(f"\n== {res.name}: {len(res.rows)} cells ({res.ran} run, {res.skipped} reused, "
              f"{res.failed} failed) in {res.wall_s:.1f} s on {res.executor}")
        if sec.section is not None:
            for t in sec.section.tables:
                print_rows(_union_rows(t.rows), title=t.title)
            if sec.section.goals:
                print_rows([{"goal": g.get("goal"), "value": g.get("value"),
                             "met": _met_text(g.get("met"))} for g in sec.section.goals],
                           title="goals")
        if sec.error:
            print(f"report of {res.name} failed: {sec.error.splitlines()[0]}", file=sys.stderr)
        for r in res.rows:
            if "_error" in r:
                print(f"{res.name}: cell {r['_key']} failed: {r['_error']}", file=sys.stderr)
    print(f"\nreport: {path}")
    return status


__all__ = ["RunSpec", "add_parser", "add_run_options", "parse_select", "resolve_names", "run",
           "run_specs"]
