"""``make test`` (what CI runs) sets ``AICACHE_EXPECT_COMPILED=1``: there the install must
have compiled the whole hot path (``aicache.native.COMPILED``), so a build that silently fell
back to pure Python (no compiler, a mypyc error, a stale build) fails CI instead of passing
on the slower path. Elsewhere (a plain ``pytest`` on a tree without extensions) either
path is valid and ``tests/core/test_native.py`` checks the two agree."""

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


def _setup_namespace() -> dict[str, object]:
    """setup.py's definitions without its closing ``setup(...)`` call (which would build)."""
    import ast
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "setup.py"
    tree = ast.parse(path.read_text())
    tree.body = [n for n in tree.body
                 if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                         and getattr(n.value.func, "id", "") == "setup")]
    ns: dict[str, object] = {"__file__": str(path), "__name__": "aicache_setup"}
    exec(compile(tree, str(path), "exec"), ns)
    return ns


def test_a_failing_c_compiler_leaves_the_package_pure(tmp_path, monkeypatch, capsys) -> None:
    # what a machine without a working compiler does to the build: OptionalBuildExt warns,
    # removes every extension it was to build, and the install goes on pure
    from setuptools import Distribution, Extension

    (tmp_path / "probe.c").write_text("int probe(void) { return 1; }\n")
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.chdir(tmp_path)
    ns = _setup_namespace()
    dist = Distribution({"name": "probe", "ext_modules": [Extension("probe", ["probe.c"])],
                         "cmdclass": {"build_ext": ns["OptionalBuildExt"]}})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.ensure_finalized()
    cmd.run()
    assert not list(tmp_path.glob("probe*.so"))
    assert "not compiling the simulator's hot path" in capsys.readouterr().err


def test_no_cython_or_mypyc_means_no_extensions(monkeypatch, capsys) -> None:
    import sys

    monkeypatch.delenv(PURE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "Cython.Build", None)  # import fails as if not installed
    ns = _setup_namespace()
    assert ns["extensions"]() == []  # type: ignore[operator]
    assert "mypyc or Cython unavailable" in capsys.readouterr().err
