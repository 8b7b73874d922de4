"""Every README code block runs in CI exactly as written: each bash block line by line, each
python block in one interpreter, in private namespaces against moto where it names S3 (see
``readme_child.py``). A block the README gains must be listed here — run, or left out with
the reason — so the README cannot drift from what works.

The data-cache command block has its own test (``test_readme_datacache.py``: a real mount,
its metrics port, a recorded job).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_blocks() -> list[tuple[str, str, str]]:
    """(heading, language, code) of every fenced ``bash``/``python`` block, the heading being
    the nearest section title above it (lines inside code blocks are not titles)."""
    out, heading, lang, code = [], "", None, []
    for line in (ROOT / "README.md").read_text().splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if lang is None and fence:
            lang, code = fence.group(1), []
        elif lang is not None and line.startswith("```"):
            if lang in ("bash", "python"):
                out.append((heading, lang, "\n".join(code) + "\n"))
            lang = None
        elif lang is not None:
            code.append(line)
        elif line.startswith("#"):
            heading = line
    return out


def commands(code: str) -> list[str]:
    """A bash block's commands: continuation lines joined, comment-only lines dropped."""
    joined = re.sub(r"\\\n\s*", "", code)
    return [ln for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


#: blocks not run here, by heading prefix, and why
LEFT_OUT = {
    ("## The two commands", "bash"): "make test is CI itself (.ci/run); make demo is set-up plus "
                                     "the full demo, minutes beyond the suite's budget",
    ("### Data cache as a FUSE mount", "bash"): "run by test_readme_datacache.py (a real mount, "
                                                "metrics, record)",
    ("### Use with vLLM", "bash"): "vllm serve needs a model (MODEL is a placeholder); the "
                                   "connector is run in-process by test_integration_vllm_*.py",
    ("### Use with SGLang", "bash"): "launch_server needs a model (MODEL is a placeholder) and "
                                     "SGLang's GPU kernels; the storage backend is run in-process "
                                     "by test_integration_sglang_storage.py",
    ("### Benchmarks", "bash"): "each benchmark runs for minutes (make bench); benchmarks are "
                                "ratios, not tests",
}

#: the JPEG the fsspec example reads, served by moto
JPEG = bytes(range(256)) * 400
#: the files the DataLoader example reads (a few blocks' worth, distinct contents)
IMAGES = {f"bucket/imagenet/train/{i:04d}.JPEG": bytes([i]) * (1000 + 97 * i) + JPEG for i in range(10)}

#: blocks run here: heading prefix, language -> (S3 objects, python observation, files made)
RUN = {
    ("### Cache simulation", "bash"): ({}, "", ["w1.csv", "w1.oracleGeneral.bin", "mrc.png"]),
    ("### Data cache (Chiron) with fsspec", "python"): (
        {"bucket/imagenet/train/0001.JPEG": JPEG},
        "import hashlib; print(json.dumps({'sha': hashlib.sha256(data).hexdigest()}))", []),
    # the DataLoader's forked workers read every file; the observation makes one more epoch
    # and reports what the workers returned
    ("### Data cache under a PyTorch DataLoader", "python"): (
        IMAGES,
        "import hashlib; print(json.dumps({'epochs': epoch + 1, 'sha': sorted("
        "hashlib.sha256(x).hexdigest() for b in loader for x in b)}))", []),
    ("### Tiered KV store", "bash"): ({}, "", ["agent.jsonl"]),
    ("### Tiered KV store", "python"): (
        {}, "print(json.dumps({'hit_blocks': plan.hit_blocks, "
            "'loaded': [bytes(b) == p for b, p in zip(bufs, payloads)]}))", []),
    ("### Semantic prefix eviction", "bash"): ({}, "", []),
    ("### Experiments", "bash"): ({}, "", ["results/report.html"]),
}


def _key(heading: str, lang: str, table: dict) -> tuple[str, str] | None:
    return next((k for k in table if heading.startswith(k[0]) and lang == k[1]), None)


def test_every_readme_block_is_run_or_left_out_with_a_reason() -> None:
    blocks = readme_blocks()
    unlisted = [(h, lang) for h, lang, _ in blocks
                if _key(h, lang, RUN) is None and _key(h, lang, LEFT_OUT) is None]
    assert not unlisted, f"README blocks neither run nor left out: {unlisted}"
    seen = {_key(h, lang, RUN) for h, lang, _ in blocks} | {_key(h, lang, LEFT_OUT) for h, lang, _ in blocks}
    assert set(RUN) | set(LEFT_OUT) <= seen, "a listed block is gone from the README"


@pytest.mark.parametrize("key", list(RUN), ids=[f"{h.lstrip('# ').split()[0]}-{lang}" for h, lang in RUN])
def test_readme_block_runs_as_written(key: tuple[str, str], tmp_path: Path) -> None:
    heading, lang, code = next(b for b in readme_blocks() if _key(b[0], b[1], RUN) == key)
    objects, observe, made = RUN[key]
    work = tmp_path / "work"
    work.mkdir()
    spec = {"lang": lang, "code": commands(code) if lang == "bash" else code,
            "workdir": str(work), "objects": {p: d.hex() for p, d in objects.items()},
            "observe": "import json\n" + observe}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = subprocess.run(["unshare", "--mount", "--net", "--fork", sys.executable,
                        str(ROOT / "tests" / "readme_child.py"), str(tmp_path / "spec.json")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads((work / "out.json").read_text())["results"]
    for res in results:
        assert res["rc"] == 0, res
        if " --json" in res["cmd"]:  # one JSON object on stdout, as every --json command
            assert isinstance(json.loads(res["stdout"]), dict), res
    for name in made:
        assert (work / name).is_file() and os.path.getsize(work / name) > 0, name
    if key == ("### Data cache (Chiron) with fsspec", "python"):
        import hashlib

        assert json.loads(results[0]["stdout"].splitlines()[-1]) == {"sha": hashlib.sha256(JPEG).hexdigest()}
    if key == ("### Data cache under a PyTorch DataLoader", "python"):
        import hashlib

        assert json.loads(results[0]["stdout"].splitlines()[-1]) == {
            "epochs": 2, "sha": sorted(hashlib.sha256(d).hexdigest() for d in IMAGES.values())}
    if key == ("### Tiered KV store", "python"):
        assert json.loads(results[0]["stdout"].splitlines()[-1]) == {"hit_blocks": 3, "loaded": [True] * 3}
