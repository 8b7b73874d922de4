"""The package as a user installs it: the wheel that ``pip wheel .`` (the same PEP 517 build
``python -m build`` runs) makes from a clean copy of the tree, installed with its declared
dependencies into a new venv that sees none of this one's packages, runs the CLI.

It proves what an editable install cannot: the wheel carries the compiled hot path (under
``make test``, ``AICACHE_EXPECT_COMPILED=1``, every module of ``aicache.native.COMPILED``),
its package data and its entry point, and its metadata names every dependency
``aicache --version``, ``aicache demo --help`` and ``aicache sim cache`` import. The build
requirements and the dependencies come from pip's configured package index (or its cache).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from aicache import __version__
from aicache.native import COMPILED

ROOT = Path(__file__).resolve().parents[2]
EXPECT_ENV = "AICACHE_EXPECT_COMPILED"

pytestmark = pytest.mark.slow


def _clean_env() -> dict[str, str]:
    """This process's environment without what points Python at the source tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AICACHE_PURE_PYTHON", "VIRTUAL_ENV", "PYTHONHOME")}
    return env


def _tracked_tree(dest: Path) -> None:
    """The files a clone has (tracked, plus new ones git does not ignore): never an editable
    install's extensions, build folders or the venv."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))


def _lru_hits(ids: list[int], capacity: int) -> int:
    """The reference: an LRU of ``capacity`` objects, by hand."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for i in ids:
        if i in cache:
            hits += 1
            cache.move_to_end(i)
            continue
        if len(cache) == capacity:
            cache.popitem(last=False)
        cache[i] = None
    return hits


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_the_wheel_installs_in_a_clean_venv_and_runs_the_cli(tmp_path: Path) -> None:
    env = _clean_env()
    tree = tmp_path / "tree"
    _tracked_tree(tree)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(tree)],
         tmp_path, env, timeout=600)

    (wheel,) = wheels.glob("aicache-*.whl")
    assert wheel.name.startswith(f"aicache-{__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "aicache/experiments/transcripts/" in {n.rsplit("/", 1)[0] + "/" for n in names
                                                    if n.endswith(".jsonl")}
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    in_wheel = [m for m in COMPILED if m.replace(".", "/") + ext in names]
    if os.environ.get(EXPECT_ENV) == "1":
        assert in_wheel == list(COMPILED)
        assert not wheel.name.endswith("-none-any.whl")  # a platform wheel: it holds binaries
    else:  # a machine without a compiler builds a pure wheel; never half of the hot path
        assert in_wheel in ([], list(COMPILED))

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    py = venv / "bin" / "python"
    assert _run([str(py), "-c", "import sys; print(sys.flags.no_site, sys.prefix != sys.base_prefix)"],
                tmp_path, env).split() == ["0", "True"]
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheel)],
         tmp_path, env, timeout=600)

    aicache = str(venv / "bin" / "aicache")
    # the installed package, not this tree's sources, with the wheel's compiled modules
    where = json.loads(_run([str(py), "-c",
                             "import json, aicache; from aicache.native import compiled_modules; "
                             "print(json.dumps([aicache.__file__, compiled_modules()]))"],
                            tmp_path, env))
    assert Path(where[0]).is_relative_to(venv)
    assert where[1] == in_wheel

    assert _run([aicache, "--version"], tmp_path, env).strip() == f"aicache {__version__}"
    assert "usage: aicache demo" in _run([aicache, "demo", "--help"], tmp_path, env)

    ids = [1, 2, 3, 1, 2, 4, 1, 5, 2, 3, 6, 1, 2, 7, 3, 1]
    trace = tmp_path / "trace.txt"
    trace.write_text("".join(f"{i}\n" for i in ids))
    for capacity in (2, 3, 5):
        res = json.loads(_run([aicache, "sim", "cache", "--trace", str(trace), "--policy", "lru",
                               "--cache-size", str(capacity), "--json"], tmp_path, env))
        assert (res["format"], res["requests"]) == ("lcs-txt", len(ids))
        assert res["hits"] == _lru_hits(ids, capacity), capacity
