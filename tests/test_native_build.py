"""``make test`` (what CI runs) sets ``AICACHE_EXPECT_COMPILED=1``: there the install must
have compiled the whole hot path (``aicache.native.COMPILED``), so a build that silently fell
back to pure Python (no compiler, a mypyc error, a stale build) fails CI instead of passing
on the slower path. Elsewhere (a plain ``pytest`` on a tree without extensions) either
path is valid and ``tests/test_native.py`` checks the two agree."""

from __future__ import annotations

import os

from aicache.native import COMPILED, PURE_ENV, compiled_modules, stale_sources

EXPECT_ENV = "AICACHE_EXPECT_COMPILED"


def test_the_install_compiled_every_hot_path_module() -> None:
    if os.environ.get(EXPECT_ENV) != "1":
        # a plain pytest may run either path, but never a mix of compiled and pure modules
        assert compiled_modules() in ([], list(COMPILED))
        return
    assert os.environ.get(PURE_ENV) != "1", f"{PURE_ENV}=1 contradicts {EXPECT_ENV}=1"
    assert stale_sources() == [], "extensions older than their sources: reinstall (make setup)"
    assert compiled_modules() == list(COMPILED)
