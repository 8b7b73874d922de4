"""The README's data-cache commands run exactly as written (mount, umount, cache stats and
verify, record, both simulations), against moto S3, each exiting 0; see
``readme_datacache_child.py`` for the private namespaces that make the fixed paths safe."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands(section: str = "### Data cache as a FUSE mount") -> list[str]:
    """The shell commands of the first ``bash`` block after ``section``: continuation
    lines joined, comment-only lines dropped."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index(section):], re.S)
    assert block is not None
    joined = re.sub(r"\\\n\s*", "", block.group(1))
    return [ln for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_readme_datacache_commands_run_as_written(tmp_path: Path) -> None:
    commands = readme_commands()
    assert [c.split()[1] for c in commands][:5] == ["mount", "umount", "cache", "cache", "record"]
    spec = {"commands": commands, "workdir": str(tmp_path), "out": str(tmp_path / "out.json")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = subprocess.run(["unshare", "--mount", "--net", "--fork", sys.executable,
                        str(ROOT / "tests" / "readme_datacache_child.py"), str(tmp_path / "spec.json")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    for res in out["results"]:
        assert res["rc"] == 0, res
    assert out["served"] and out["metrics"]
    stats = next(res for res in out["results"] if res["cmd"].startswith("aicache cache stats"))
    assert "blocks" in stats["stdout"]
    sims = [res for res in out["results"] if res["cmd"].startswith("aicache sim datacache --trace")]
    assert sims and "juicefs" in sims[0]["stdout"]
