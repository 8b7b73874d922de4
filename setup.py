"""Build hook: compile the simulator's hot path where a compiler is present.

The modules listed in ``aicache.native.COMPILED`` are compiled from their unchanged ``.py``
sources into extension modules beside them: those in ``aicache.native.CYTHON`` by Cython
(pure-Python mode), the rest by mypyc. Everything else about the package is in
pyproject.toml. The compile is skipped — the package stays pure Python and behaves the
same — when ``AICACHE_PURE_PYTHON=1`` is set, when mypyc or Cython cannot be imported or
rejects a module, or when the C compiler fails (``OptionalBuildExt``). All or none: the
compiled modules call each other's classes, so a half-built set is not used.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def native_list(name: str) -> list[str]:
    """The tuple ``name`` (``COMPILED``, ``CYTHON``) of src/aicache/native.py, read without
    importing the package."""
    tree = ast.parse((ROOT / "src/aicache/native.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == name):
            return list(ast.literal_eval(node.value))
    raise RuntimeError(f"src/aicache/native.py defines no {name} tuple")


#: Cython's checks that the policy core never needs: its indices are valid slot ids
#: (never negative), checked where slots are handed out
CYTHON_DIRECTIVES = {"language_level": 3, "boundscheck": False, "wraparound": False,
                     "initializedcheck": False}


def warn(why: str) -> None:
    print(f"aicache: not compiling the simulator's hot path ({why}); "
          "the pure-Python modules are used", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compiler failure means "no extension"
            warn(f"{type(exc).__name__}: {exc}")
            for ext in self.extensions:  # a shim without its shared library would not import
                path = Path(self.get_ext_fullpath(ext.name))
                path.unlink(missing_ok=True)
            return
        # A module's shim is unchanged when only its source changed (the code is in the
        # group's shared library), so the copy keeps the old build's mtime; the stale-source
        # check (aicache.native.stale_sources) compares against it: stamp the outputs now.
        for ext in self.extensions:
            path = Path(self.get_ext_fullpath(ext.name))
            if path.exists():
                os.utime(path)
        if self.inplace:  # an old build's extensions of modules that are Python now
            for name in native_list("RETIRED"):
                path = Path(self.get_ext_fullpath(name))
                if path.exists():
                    path.unlink()


def extensions() -> list[object]:
    if os.environ.get("AICACHE_PURE_PYTHON", "") not in ("", "0"):
        warn("AICACHE_PURE_PYTHON is set")
        return []
    try:
        from Cython.Build import cythonize
        from mypyc.build import mypycify
    except ImportError as exc:
        warn(f"mypyc or Cython unavailable: {exc}")
        return []
    cython = native_list("CYTHON")
    def path(m: str) -> str:
        return f"src/{m.replace('.', '/')}.py"
    try:
        exts = list(mypycify([path(m) for m in native_list("COMPILED") if m not in cython],
                             opt_level="3", debug_level="0"))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - mypyc exits on type errors
        warn(f"mypyc failed: {exc}")
        return []
    try:
        mods = cythonize([path(m) for m in cython], compiler_directives=CYTHON_DIRECTIVES,
                         quiet=True)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a Cython compile error
        warn(f"Cython failed: {exc}")
        return []
    for ext in mods:  # cythonize names them by file; the package path is their import name
        ext.name = ext.name if ext.name.startswith("aicache.") else "aicache." + ext.name.split("aicache.", 1)[-1]
    return exts + list(mods)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
