"""``tests/`` mirrors ``src/aicache/``: a test file sits in the folder of the package it tests.

Two folders have no package of that name: ``core/`` (the package's root modules: registry,
units, errors, native) and ``repo/`` (checks of the repository itself). The root of
``tests/`` keeps only what every test shares (conftest, helpers, ``data/``, ``harness/``).
Test files carry no ``__init__.py``, so pytest imports them by their base name: two files
with the same name in different folders would not both load.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SRC = ROOT / "src" / "aicache"
NOT_PACKAGES = {"core", "repo"}


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_no_test_file_sits_at_the_root_of_tests() -> None:
    assert [p.name for p in TESTS.glob("test_*.py")] == []


def test_every_test_folder_is_a_package_of_src_or_core_or_repo() -> None:
    folders = {p.parent.relative_to(TESTS) for p in _test_files()}
    assert folders, "no test files found"
    strays = sorted(str(f) for f in folders
                    if f.parts[0] not in NOT_PACKAGES and not (SRC / f / "__init__.py").is_file())
    assert strays == [], f"test folders with no package under src/aicache/: {strays}"


def test_test_file_names_are_unique_across_folders() -> None:
    counts = Counter(p.name for p in _test_files())
    assert [name for name, n in counts.items() if n > 1] == []
