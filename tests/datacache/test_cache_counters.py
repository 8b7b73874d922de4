"""Counters that persist per cache dir (:mod:`aicache.datacache.counters`): two processes
reading through fsspec over moto S3 are both summed by ``aicache cache stats --json``, with
hit and miss counts equal to what the readers did (cold pass: every block a miss, warm pass:
every block a hit — no prefetch, a budget above the data, so exact by construction)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from aicache.cli.cache_admin import watch_rows
from aicache.datacache.counters import PERSISTED, CounterFile, read_totals, retire_dead
from s3fixtures import BLOCK, s3, s3_dataset  # noqa: F401 - fixtures

READER = r"""
import hashlib, json, sys
import fsspec
import aicache.datacache.fs  # noqa: F401 - registers "aicache"
spec = json.loads(sys.argv[1])
s3 = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": spec["endpoint"]}}
bad = []
for path, digest in spec["files"]:
    with fsspec.open("aicache::s3://" + path, "rb", s3=s3, aicache=spec["aicache"]) as f:
        if hashlib.sha256(f.read()).hexdigest() != digest:
            bad.append(path)
print(json.dumps(bad))
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def test_two_fsspec_processes_are_summed_by_cache_stats(s3_dataset, tmp_path: Path) -> None:
    import hashlib

    cache = tmp_path / "cache"
    files = [(p, hashlib.sha256(d).hexdigest()) for p, d in sorted(s3_dataset.files.items())]
    spec = {"endpoint": s3_dataset.server.endpoint_url, "files": files,
            "aicache": {"cache_dir": str(cache), "cache_size": "64MiB", "block_size": BLOCK,
                        "policy": "lru"}}
    blocks = sum(math.ceil(len(d) / BLOCK) for d in s3_dataset.files.values())
    nbytes = sum(len(d) for d in s3_dataset.files.values())
    for _pass in ("cold", "warm"):  # each its own process, never closing its filesystem
        r = subprocess.run([sys.executable, "-c", READER, json.dumps(spec)], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == []
    r = _cli("cache", "stats", "--cache-dir", str(cache), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["misses"], out["hits"]) == (blocks, blocks)
    assert out["hit_ratio"] == 0.5
    assert out["remote_bytes"] == nbytes  # the cold pass fetched each byte once
    assert out["hit_bytes"] == nbytes  # the warm pass was served all of it
    assert out["prefetch_issued"] == 0 and out["evictions"] == 0
    assert out["live_engines"] == 0
    # the warm process folded the cold one's file; both readers' counts survive
    names = sorted(os.listdir(cache / "stats"))
    assert "retired.json" in names and len([n for n in names if n.endswith(".json")]) == 2
    text = _cli("cache", "stats", "--cache-dir", str(cache))
    assert text.returncode == 0 and "hit_ratio" in text.stdout


def test_flush_writes_only_changes_and_retire_folds_dead_processes(tmp_path: Path) -> None:
    vals = dict.fromkeys(PERSISTED, 0.0)
    w = CounterFile(str(tmp_path), lambda: vals, start=False)
    assert w.flush() and not w.flush()  # nothing changed: no write
    vals["hits"] = 3.0
    assert w.flush()
    # a file of a process of this host that is gone (pid 2**22+1 is above pid_max's default)
    dead = tmp_path / "stats" / f"{os.uname().nodename}-{2**22 + 1}-0.json"
    dead.write_text(json.dumps({"hits": 2, "misses": 5, "bogus": 9}))
    (tmp_path / "stats" / "junk.json").write_text("{not json")  # ignored, never fatal
    t = read_totals(str(tmp_path))
    assert (t.values["hits"], t.values["misses"], t.live) == (5.0, 5.0, 2)
    assert retire_dead(str(tmp_path)) == 1 and not dead.exists()
    assert read_totals(str(tmp_path)).values == t.values  # folding keeps every count
    w.close()
    assert json.loads(Path(w.path).read_text())["hits"] == 3.0


def test_watch_rows_are_per_interval_rates() -> None:
    seq = iter([{**dict.fromkeys(PERSISTED, 0.0)},
                {**dict.fromkeys(PERSISTED, 0.0), "hits": 6.0, "misses": 2.0, "hit_bytes": 4e6},
                {**dict.fromkeys(PERSISTED, 0.0), "hits": 6.0, "misses": 2.0, "hit_bytes": 4e6}])
    slept: list[float] = []
    rows = list(watch_rows(lambda: next(seq), slept.append, 2.0, count=2))
    assert slept == [2.0, 2.0]
    assert rows[0]["hits_per_s"] == 3.0 and rows[0]["misses_per_s"] == 1.0
    assert rows[0]["hit_ratio"] == 0.75 and rows[0]["hit_MBps"] == 2.0
    assert rows[1]["hits_per_s"] == 0.0 and rows[1]["hit_ratio"] is None


def test_watch_cli_prints_json_lines_and_refuses_bad_intervals(tmp_path: Path) -> None:
    from aicache.datacache.store import BlockStore

    BlockStore(tmp_path / "c", 1 << 20, BLOCK).close()
    r = _cli("cache", "stats", "--cache-dir", str(tmp_path / "c"), "--watch", "0.01",
             "--count", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 2 and rows[0]["hits_per_s"] == 0.0
    r = _cli("cache", "stats", "--cache-dir", str(tmp_path / "c"), "--watch", "0")
    assert r.returncode == 2 and "--watch" in r.stderr


def test_warmup_prefills_what_a_later_fsspec_job_reads_as_hits(s3_dataset, tmp_path: Path) -> None:
    import hashlib

    cache = tmp_path / "cache"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    argv = [sys.executable, "-m", "aicache.cli.main", "warmup", f"s3://{s3_dataset.root}",
            "--cache-dir", str(cache), "--cache-size", "64MiB", "--block-size", str(BLOCK),
            "--endpoint-url", s3_dataset.server.endpoint_url, "--json"]
    blocks = sum(math.ceil(len(d) / BLOCK) for d in s3_dataset.files.values())
    nbytes = sum(len(d) for d in s3_dataset.files.values())
    first = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert (out["files"], out["bytes"], out["blocks"]) == (len(s3_dataset.files), nbytes, blocks)
    assert (out["cached_bytes"], out["fetched_bytes"], out["fits"]) == (0, nbytes, True)
    again = json.loads(subprocess.run(argv[:-1] + ["--json"], capture_output=True, text=True,
                                      timeout=120, env=env).stdout)
    assert (again["cached_bytes"], again["fetched_bytes"]) == (nbytes, 0)
    files = [(p, hashlib.sha256(d).hexdigest()) for p, d in sorted(s3_dataset.files.items())]
    spec = {"endpoint": s3_dataset.server.endpoint_url, "files": files,
            "aicache": {"cache_dir": str(cache), "cache_size": "64MiB", "block_size": BLOCK,
                        "policy": "lru"}}
    r = subprocess.run([sys.executable, "-c", READER, json.dumps(spec)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
    st = json.loads(_cli("cache", "stats", "--cache-dir", str(cache), "--json").stdout)
    # warmup 1: every block a miss; warmup 2 and the job: every block a hit, nothing refetched
    assert (st["misses"], st["hits"], st["remote_bytes"]) == (blocks, 2 * blocks, nbytes)
    bad = subprocess.run(argv[:4] + [f"s3://{s3_dataset.bucket}/nope", *argv[5:]],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_a_live_mount_flushes_its_counters_while_it_runs(tmp_path: Path) -> None:
    import time

    src, mnt, cache = tmp_path / "src", tmp_path / "m", tmp_path / "c"
    src.mkdir()
    mnt.mkdir()
    data = {f"f{i}.bin": os.urandom(BLOCK * (i + 1) + 7) for i in range(3)}
    for name, b in data.items():
        (src / name).write_bytes(b)
    blocks = sum(math.ceil(len(b) / BLOCK) for b in data.values())
    r = _cli("mount", str(src), str(mnt), "--cache-dir", str(cache), "--cache-size", "16MiB",
             "--block-size", str(BLOCK), "--policy", "lru")
    assert r.returncode == 0, r.stderr
    try:
        for name, b in data.items():
            assert (mnt / name).read_bytes() == b
        deadline = time.monotonic() + 30  # the mount writes its counters once a second
        while True:
            out = json.loads(_cli("cache", "stats", "--cache-dir", str(cache), "--json").stdout)
            if out["misses"] == blocks or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert out["misses"] == blocks and out["live_engines"] == 1
        assert out["remote_bytes"] == sum(len(b) for b in data.values())
    finally:
        _cli("umount", str(mnt))
    out = json.loads(_cli("cache", "stats", "--cache-dir", str(cache), "--json").stdout)
    assert out["misses"] == blocks  # (the mount's process may still be exiting here)
