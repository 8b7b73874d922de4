"""Layers point downward. :data:`LAYERS` lists the packages from the bottom up; a module may
import its own package and the packages of lower layers, never a higher layer and never
another package of its own layer (packages that share a layer are independent). Checked on
the import graph from the AST (``scripts/import_graph.py``), function-level imports and
imports under ``TYPE_CHECKING`` included, so an import moved into a function or behind
the type checker to dodge the rule still counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]

#: the packages, bottom layer first
LAYERS: list[tuple[str, ...]] = [
    ("aicache.errors",),
    ("aicache.native", "aicache.compiled_abc", "aicache.units", "aicache.registry",
     "aicache.progress"),
    ("aicache",),  # the package's own __init__ (version, compiled-module switch)
    ("aicache.policies",),
    ("aicache.traces", "aicache.adaptive", "aicache.kv"),
    # the shipped test fixtures (a slow fsspec filesystem, a local S3) stand beside the
    # product's data cache, which must not depend on them, nor they on it
    ("aicache.kvstore", "aicache.datacache", "aicache.testing"),
    ("aicache.integrations", "aicache.sim"),
    ("aicache.experiments",),
    ("aicache.cli",),
]


def _graph() -> Any:
    mod = load_script(ROOT / "scripts/import_graph.py", "import_graph")
    g, _ = mod.cycles(ROOT / "src", deferred_edges=True)
    return g


def _package(module: str) -> str | None:
    """The :data:`LAYERS` entry ``module`` belongs to: the longest one that is it or holds
    it (the root package only as itself)."""
    found = [p for layer in LAYERS for p in layer
             if module == p or (p != "aicache" and module.startswith(p + "."))]
    return max(found, key=len) if found else None


def _layer(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def test_every_module_has_a_layer() -> None:
    g = _graph()
    assert len(g.modules) > 100  # the walk found the package
    assert any(m.startswith("aicache.datacache.fuse.") for m in g.modules)
    unplaced = sorted(m for m in g.modules if _package(m) is None)
    assert not unplaced, f"modules in no layer (add their package to LAYERS): {unplaced}"


def test_layers_point_downward() -> None:
    g = _graph()
    bad = []
    for m, targets in sorted(g.edges.items()):
        src = _package(m)
        assert src is not None
        for t in sorted(targets):
            dst = _package(t)
            assert dst is not None
            if src != dst and _layer(dst) >= _layer(src):
                bad.append(f"{m} -> {t} ({src} is not above {dst})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_check_sees_an_upward_import() -> None:
    """The rule itself: an edge to a higher layer or a same-layer sibling is refused."""
    def refused(m: str, t: str) -> bool:
        src, dst = _package(m), _package(t)
        assert src is not None and dst is not None
        return src != dst and _layer(dst) >= _layer(src)

    assert refused("aicache.sim.kv", "aicache.cli.main")
    assert refused("aicache.datacache.daemon", "aicache.testing.slowfs")  # same layer
    assert refused("aicache.testing.slowfs", "aicache.datacache.fs")
    assert refused("aicache.adaptive.controller", "aicache.datacache.policy.driver")
    assert not refused("aicache.sim.datacache", "aicache.datacache.policy.driver")
    assert not refused("aicache.kv.saria", "aicache.kv.radix")  # inside one package
    assert not refused("aicache.cli.main", "aicache")
    assert refused("aicache.units", "aicache")
