"""The shipped package holds no test code: no module under ``src/aicache`` imports a test
framework or a test helper, and moto (the local S3 server) is imported only by the local-S3
fixtures ``aicache demo`` runs on (``aicache.testing``), inside the function that starts
the server, so that importing any module never loads it.

The reference is the source itself: every ``import`` statement of every module, read with
:mod:`ast` (function-level imports included), not a list kept by hand.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "aicache"
#: test frameworks and this repository's test-only modules (tests/, tests/harness/)
TEST_ONLY = {"pytest", "hypothesis", "_pytest", "conftest", "harness", "script_module",
             "fsfixtures", "s3fixtures", "vllm_harness", "sglang_harness", "lcs_oracle"}
#: the only modules that may import moto, and only below module level
MOTO_OWNERS = {"aicache/testing/s3.py", "aicache/testing/s3count.py"}


def _imports(tree: ast.AST) -> list[tuple[str, bool]]:
    """(top-level package imported, whether at module level) for every import in ``tree``."""
    out: list[tuple[str, bool]] = []
    top = set(map(id, getattr(tree, "body", [])))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out += [(n.split(".")[0], id(node) in top) for n in names]
    return out


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_the_walk_sees_the_package() -> None:
    found = {p.relative_to(SRC).as_posix() for p in _modules()}
    assert len(found) > 100 and MOTO_OWNERS <= found


def test_no_shipped_module_imports_a_test_framework_or_test_helper() -> None:
    bad = [(p.relative_to(SRC).as_posix(), name) for p in _modules()
           for name, _ in _imports(ast.parse(p.read_text(), str(p))) if name in TEST_ONLY]
    assert bad == []


def test_moto_is_imported_only_by_the_local_s3_fixture_and_only_when_started() -> None:
    bad = []
    for p in _modules():
        rel = p.relative_to(SRC).as_posix()
        for name, module_level in _imports(ast.parse(p.read_text(), str(p))):
            if name == "moto" and (rel not in MOTO_OWNERS or module_level):
                bad.append(rel)
    assert bad == []


def test_importing_the_demo_job_and_the_fixtures_loads_no_test_code() -> None:
    """What the AST walk claims, at run time: the modules that drive the demo's S3 job and
    the package's fixtures import without moto or pytest."""
    code = ("import sys, aicache.experiments.datacache_job, aicache.testing, "
            "aicache.experiments.datacache_real; "
            "print(sorted(m for m in ('moto', 'pytest', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
