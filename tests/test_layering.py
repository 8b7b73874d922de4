"""Layers point downward: the simulator and the experiments do not import the CLI, and the
product's data cache does not import the test fixtures or the benchmark harness. Checked on
the import graph from the AST (``scripts/import_graph.py``), function-level imports
included, so an import moved into a function to dodge the rule still counts."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent

#: (importing package, package it must not import, even inside a function)
FORBIDDEN = [
    ("aicache.sim", "aicache.cli"),
    ("aicache.experiments", "aicache.cli"),
    ("aicache.datacache", "aicache.testing"),
    ("aicache.datacache", "aicache.experiments"),
    ("aicache.datacache", "aicache.cli"),
    ("aicache.testing", "aicache.datacache"),
]


def _graph():  # type: ignore[no-untyped-def]
    mod = load_script(ROOT / "scripts/import_graph.py", "import_graph")
    g, _ = mod.cycles(ROOT / "src", deferred_edges=True)
    return g


def _inside(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def test_layers_point_downward() -> None:
    g = _graph()
    assert any(_inside(m, "aicache.datacache.fuse") for m in g.modules)  # the walk saw them
    bad = sorted(f"{m} -> {t}" for m, targets in g.edges.items() for t in targets
                 for src, dst in FORBIDDEN if _inside(m, src) and _inside(t, dst))
    assert not bad, "imports against the layering:\n" + "\n".join(bad)
