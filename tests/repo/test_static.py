"""Static checks of the source tree that CI would otherwise not run (CI runs ``make test``).

* ``mypy`` is clean with the configuration in ``pyproject.toml`` (``[tool.mypy]``: strict, over
  the whole of ``src/aicache``; a module is relaxed only by an override there that says why).
  mypy keeps its cache in ``.mypy_cache`` at the repository root: a warm run takes a few
  seconds, a cold one (a fresh checkout, as in CI) about 3 minutes of CPU on this package.
* A ``type: ignore`` anywhere in the package names its error code and says why after it
  (a gap in a third-party stub is the only accepted reason).
* ``src/aicache`` has no import cycle at module level, imports under ``TYPE_CHECKING``
  included (``scripts/import_graph.py``: the import graph built from the AST, cycles as
  strongly connected components); the checker itself is tested on a small package with a
  known cycle, a cycle closed only under ``TYPE_CHECKING``, a function-level import and a
  relative import.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[^\]]+\])?(?P<rest>.*)$")


def test_pyproject_makes_mypy_strict_over_the_package() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    conf = tomllib.loads(text)["tool"]["mypy"]
    assert conf["strict"] is True and conf["files"] == ["src/aicache"]
    # every override says why in a comment before its ``module =`` line
    blocks = text.split("[[tool.mypy.overrides]]")[1:]
    assert len(blocks) == len(conf["overrides"])
    unexplained = [b.split("module", 1)[1].split("\n", 1)[0] for b in blocks
                   if not b.split("module", 1)[0].strip().startswith("#")]
    assert not unexplained, f"mypy overrides without a reason: {unexplained}"
    inline = [str(p.relative_to(ROOT)) for p in sorted((SRC / "aicache").rglob("*.py"))
              if re.search(r"^#\s*mypy:", p.read_text(), re.MULTILINE)]
    assert not inline, f"relax mypy in pyproject.toml (with the reason), not inline: {inline}"


def test_mypy_clean_from_pyproject() -> None:
    """``mypy`` with no options: pyproject's ``[tool.mypy]`` decides what is checked and how."""
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"mypy (strict, from pyproject.toml) found errors:\n{out.stdout}{out.stderr}"


def test_type_ignores_name_a_code_and_a_reason() -> None:
    bare = []
    paths = sorted((SRC / "aicache").rglob("*.py"))
    assert len(paths) > 100  # the walk found the package
    for path in paths:
        for no, line in enumerate(path.read_text().splitlines(), 1):
            m = _IGNORE.search(line)
            if m and (m["code"] is None or not m["rest"].strip(" #-:")):
                bare.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not bare, "type: ignore without an error code and a reason:\n" + "\n".join(bare)


def _import_graph() -> ModuleType:
    return load_script(ROOT / "scripts/import_graph.py", "import_graph")


def test_import_graph_checker_on_a_known_package(tmp_path: Path) -> None:
    ig = _import_graph()
    pkg = tmp_path / "aicache"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from aicache import b\n",
        "b.py": "import aicache.a\ntry:\n    import aicache.sub.e\nexcept ImportError:\n    pass\n",
        "c.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aicache import a\n"
                 "def f() -> None:\n    from aicache.b import x\n"),
        "sub/__init__.py": "",
        "sub/d.py": "from ..a import thing\nfrom . import e\n",
        "sub/e.py": "import numpy\n",
        # a cycle the interpreter never meets (f's import is for the type checker) is a cycle
        "f.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aicache.g import G\n",
        "g.py": "from aicache import f\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    g, found = ig.cycles(tmp_path)
    assert found == [["aicache.a", "aicache.b"], ["aicache.f", "aicache.g"]]
    assert ig.shortest_cycle(g, found[0]) == ["aicache.a", "aicache.b", "aicache.a"]
    assert g.edges["aicache.b"] == {"aicache.a", "aicache.sub.e"}  # a try block runs
    assert g.edges["aicache.c"] == {"aicache.a"} and g.deferred["aicache.c"] == 1
    assert g.edges["aicache.sub.d"] == {"aicache.a", "aicache.sub.e"}
    assert g.edges["aicache.sub.e"] == set()  # imports outside the package are not edges
    g2, found2 = ig.cycles(tmp_path, deferred_edges=True)
    assert g2.edges["aicache.c"] == {"aicache.a", "aicache.b"} and found2 == found


def test_no_import_cycles_in_the_package() -> None:
    g, found = _import_graph().cycles(SRC)
    assert len(g.modules) > 100  # the walk found the package
    assert not found, "import cycles (python scripts/import_graph.py shows them):\n" + "\n".join(
        " -> ".join(c) for c in found)


_ISSUE = re.compile(r"\bissues?\s*#?\d+|\bmust-show\b", re.IGNORECASE)
_DOC = re.compile(r"\b((?:docs|traces|benchmarks|scripts)/[\w./-]+\.(?:md|json|csv|html|py))\b")


def test_code_cites_only_documents_that_ship_with_it() -> None:
    """No issue numbers (the tracker does not ship with the code), and every repository
    document a module names exists."""
    bad = []
    for path in sorted((SRC / "aicache").rglob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{no}: {line.strip()}"
            if _ISSUE.search(line):
                bad.append(where)
            bad += [f"{where} (no {doc})" for doc in _DOC.findall(line) if not (ROOT / doc).exists()]
    assert not bad, "citations of documents outside the repository:\n" + "\n".join(bad)
