"""Static checks of the source tree that CI would otherwise not run (CI runs ``make test``).

* ``mypy --strict`` is clean on the core packages (:data:`STRICT`). mypy keeps its cache in
  ``.mypy_cache`` at the repository root: a warm run takes a few seconds, a cold one (a
  fresh checkout) well under a minute.
* A ``type: ignore`` in those packages names its error code and says why after it
  (a gap in a third-party stub is the only accepted reason).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
#: the packages kept ``mypy --strict`` clean
STRICT = ("aicache/policies", "aicache/kv", "aicache/kvstore")

_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[^\]]+\])?(?P<rest>.*)$")


def test_mypy_strict_core_packages() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         *(str(SRC / p) for p in STRICT)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"mypy --strict found errors:\n{out.stdout}{out.stderr}"


def test_type_ignores_name_a_code_and_a_reason() -> None:
    bare = []
    for pkg in STRICT:
        for path in sorted((SRC / pkg).rglob("*.py")):
            for no, line in enumerate(path.read_text().splitlines(), 1):
                m = _IGNORE.search(line)
                if m and (m["code"] is None or not m["rest"].strip(" #-:")):
                    bare.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not bare, "type: ignore without an error code and a reason:\n" + "\n".join(bare)
