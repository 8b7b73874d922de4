"""The module-level import graph of ``src/aicache``, built statically, and its cycles.

An edge A → B means that A needs B when it is imported or type-checked: a module-level
``import`` or ``from … import`` anywhere outside a function or class body, including the
branches of module-level ``if``/``try`` and ``if TYPE_CHECKING:``. An import under
``TYPE_CHECKING`` never runs, but two modules whose types name each other still depend on
each other, so it is an edge like any other (hiding a cycle there does not remove it).
``from P import x`` is an edge to ``P.x`` when that is a module, else to ``P``. Imports
inside functions are not edges (they run later, not at import time); they are counted,
because they are the usual way a cycle is dodged.

A cycle is a strongly connected component with more than one module. For each one the
report gives the modules and one shortest cycle through them. ``--deferred`` also counts
function-level imports as edges: the cycles it adds are the ones dodged by deferring an
import (not an import-time failure, but two modules that still need each other).

    python scripts/import_graph.py [--src src] [--deferred] [--json]

The exit status is 1 when there is a cycle, else 0.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "aicache"


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, set[str]] = field(default_factory=dict)
    #: module → number of imports of the package made inside functions or classes
    deferred: dict[str, int] = field(default_factory=dict)


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements outside functions and classes (``if TYPE_CHECKING:`` included)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse,
                          node.finalbody):
                yield from _module_level(block)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            yield from _module_level(node.body)


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The absolute module a ``from`` import names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = name.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool,
             modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    mod = _absolute(node, name, is_package)
    out = []
    for a in node.names:
        sub = f"{mod}.{a.name}"
        out.append(sub if sub in modules else mod)
    return out


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The package module an import runs (``import a.b.c`` of a missing ``c`` → ``a.b``)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def build(src: Path, deferred_edges: bool = False) -> Graph:
    g = Graph()
    for path in sorted((src / PACKAGE).rglob("*.py")):
        g.modules[module_name(path, src)] = path
    for name, path in g.modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        level = {id(n) for n in _module_level(tree.body)}
        edges: set[str] = set()
        deferred = 0
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = [t for t in _targets(node, name, is_package, g.modules)
                       if t == PACKAGE or t.startswith(PACKAGE + ".")]
            if not targets:
                continue
            if id(node) not in level:
                deferred += 1
                if not deferred_edges:
                    continue
            for t in targets:
                r = _resolve(t, g.modules)
                if r is not None and r != name:
                    edges.add(r)
        g.edges[name] = edges
        g.deferred[name] = deferred
    return g


def strongly_connected(g: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components in a deterministic order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(g.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(g.edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return sorted(out)


def shortest_cycle(g: Graph, comp: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside it)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(g.edges[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def cycles(src: Path, deferred_edges: bool = False) -> tuple[Graph, list[list[str]]]:
    g = build(src, deferred_edges)
    return g, [c for c in strongly_connected(g) if len(c) > 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    ap.add_argument("--deferred", action="store_true",
                    help="count function-level imports as edges too")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    g, found = cycles(Path(args.src), args.deferred)
    report = {
        "modules": len(g.modules),
        "edges": sum(map(len, g.edges.values())),
        "function_level_imports": sum(g.deferred.values()),
        "cycles": [{"modules": c, "example": shortest_cycle(g, c)} for c in found],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        kind = "import edges (function-level included)" if args.deferred else "module-level import edges"
        print(f"{report['modules']} modules, {report['edges']} {kind}, "
              f"{report['function_level_imports']} function-level imports of {PACKAGE}")
        print(f"{len(found)} import cycle(s)")
        for c in report["cycles"]:
            print(f"  {len(c['modules'])} modules: {' -> '.join(c['example'])}")
            if len(c["modules"]) > len(c["example"]) - 1:
                print(f"    all: {', '.join(c['modules'])}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
