"""`aicache cache stats|verify|clear`, the Prometheus endpoint over HTTP, and the mount
command's bad-input contract (one line on stderr, exit 2)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import urllib.request

import pytest

from aicache.cli.main import main
from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.keys import BlockKey
from aicache.testing import SlowFileSystem
from aicache.datacache.store import HEADER_SIZE, stored_size

BLOCK = 32 * 1024


@pytest.fixture()
def warm_cache(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    data = random.Random(1).randbytes(5 * BLOCK + 7)
    (src / "a.bin").write_bytes(data)
    cache = tmp_path / "cache"
    e = CacheEngine(SlowFileSystem(), str(cache), 10 * BLOCK, policy="alluxio",
                    params=EngineParams(block_size=BLOCK))
    assert e.read(str(src / "a.bin")) == data
    e.wait_prefetches()  # every block written (write-behind)
    return e, str(src / "a.bin"), str(cache), data


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(list(argv))
    out = capsys.readouterr().out
    return rc, json.loads(out)


def _charged(data: bytes) -> int:
    """The budget the file's blocks take: each block file rounded up to the allocation unit."""
    return sum(stored_size(len(data[i:i + BLOCK])) for i in range(0, len(data), BLOCK))


def test_cache_stats_verify_clear(warm_cache, capsys) -> None:
    e, path, cache, data = warm_cache
    rc, st = run_json(capsys, "cache", "stats", "--cache-dir", cache, "--json")
    assert rc == 0
    assert st["blocks"] == 6
    assert st["used_bytes"] == _charged(data)
    assert st["capacity_bytes"] == 10 * BLOCK and st["block_size"] == BLOCK

    rc, v = run_json(capsys, "cache", "verify", "--cache-dir", cache, "--json")
    assert rc == 0 and v["checked"] == 6 and v["bad"] == 0 and v["clean"] is True

    victim = e.store.block_path(BlockKey(path, e.stat(path).version, 2))
    with open(victim, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(b"\x00" * 16 if f.read(16) != b"\x00" * 16 else b"\x01" * 16)
    rc, v = run_json(capsys, "cache", "verify", "--cache-dir", cache, "--json")
    assert rc == 1 and v["bad"] == 1 and v["removed"] == 1 and v["clean"] is False
    assert not os.path.exists(victim)
    rc, v = run_json(capsys, "cache", "verify", "--cache-dir", cache, "--json")
    assert rc == 0 and v["checked"] == 5

    rc, c = run_json(capsys, "cache", "clear", "--cache-dir", cache, "--json")
    assert rc == 0 and c["removed"] == 5
    rc, st = run_json(capsys, "cache", "stats", "--cache-dir", cache, "--json")
    assert st["blocks"] == 0 and st["used_bytes"] == 0
    # the engine still works on the emptied directory: everything is refetched
    before = e.metrics.value("remote_bytes")
    assert e.read(path) == data
    assert e.metrics.value("remote_bytes") == before + len(data)
    e.close()


def test_cache_admin_on_a_non_cache_dir_is_bad_input(tmp_path, capsys) -> None:
    assert main(["cache", "stats", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no aicache cache" in err


def test_metrics_endpoint_over_http(warm_cache) -> None:
    e, path, _cache, data = warm_cache
    assert e.read(path, 0, BLOCK) == data[:BLOCK]  # one more hit
    server = e.metrics.serve(0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        server.shutdown()
        e.close()
    samples = {line.split(" ")[0]: float(line.split(" ")[1])
               for line in text.splitlines() if line and not line.startswith("#")}
    assert samples["aicache_hits_total"] == 1.0
    assert samples["aicache_misses_total"] == 6.0
    assert samples["aicache_remote_bytes_total"] == float(len(data))
    assert samples["aicache_used_bytes"] == float(_charged(data))
    for name in ("aicache_prefetch_issued_total", "aicache_evictions_total", "aicache_corrupt_blocks_total",
                 "aicache_enospc_total", "aicache_remote_retries_total", "aicache_advisor_calls"):
        assert name in samples


@pytest.mark.parametrize("argv, needle", [
    (["s3://b/x", "/no/such/dir", "--cache-size", "1GiB"], "MOUNTPOINT"),
    (["{tmp}", "{tmp}", "--cache-size", "lots"], "--cache-size"),
    (["{tmp}", "{tmp}", "--cache-size", "1GiB", "--policy", "nope"], "nope"),
    (["{tmp}", "{tmp}", "--cache-size", "1GiB", "--block-size", "-4"], "--block-size"),
    (["nosuchproto://x/y", "{tmp}", "--cache-size", "1GiB"], "REMOTE_URL"),
    (["{tmp}/missing", "{tmp}", "--cache-size", "1GiB"], "REMOTE_URL"),
    (["{tmp}", "{tmp}", "--cache-size", "1GiB", "-o", "novalue"], "--option"),
    (["{tmp}", "{tmp}", "--cache-size", "1GiB", "--direct-io", "--kernel-cache"], "--direct-io"),
])
def test_mount_bad_input_exits_2_with_one_line(tmp_path, argv, needle) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", *args,
                        "--cache-dir", str(tmp_path / "c")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("aicache: error:")
    assert needle in r.stderr
    assert not os.path.ismount(tmp_path)


@pytest.mark.parametrize("foreground", [True, False])
def test_mount_with_an_unusable_cache_dir_exits_2_before_mounting(tmp_path, foreground) -> None:
    """A cache directory that cannot hold files is named in one line, exit 2, nothing
    mounted — not a mount whose engine fails to start (it used to log the error from
    inside the FUSE session and exit 0)."""
    (tmp_path / "file").write_bytes(b"x")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", str(tmp_path), str(mnt),
                        "--cache-size", "1GiB", "--cache-dir", str(tmp_path / "file" / "c"),
                        *(["--foreground"] if foreground else [])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("aicache: error: --cache-dir")
    assert not os.path.ismount(mnt)


def test_record_writes_a_block_trace_of_what_the_command_read(tmp_path) -> None:
    from aicache.traces.io import open_trace

    src = tmp_path / "src" / "ds"
    src.mkdir(parents=True)
    rng = random.Random(4)
    sizes = {"a": 3 * BLOCK, "b": BLOCK + 5, "c": 2 * BLOCK}
    for name, n in sizes.items():
        (src / name).write_bytes(rng.randbytes(n))
    out = tmp_path / "trace.csv"
    reader = ("import os,sys; m=os.environ['AICACHE_MOUNT'];"
              "d=open(m+'/ds/a','rb').read()+open(m+'/ds/c','rb').read();"
              f"sys.exit(0 if d==open('{src}/a','rb').read()+open('{src}/c','rb').read() else 5)")
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "record", str(tmp_path / "src"),
                        "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--cache-size", "1MiB",
                        "--block-size", str(BLOCK), "--", sys.executable, "-c", reader],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    src_trace = open_trace(str(out))
    assert src_trace.format == "block-csv"
    rows = []
    for b in src_trace.batches():
        units = src_trace.units
        rows += [(units[u], int(i), int(s)) for u, i, s in zip(b.unit.tolist(), b.obj_id.tolist(),
                                                               b.obj_size.tolist())]
    # files sorted by path get consecutive id ranges: a → 0..2, b → 3..4, c → 5..6;
    # b was never read (the kernel may split a block's reads, so compare sets)
    assert sorted(set(rows)) == [("ds/a", 0, BLOCK), ("ds/a", 1, BLOCK), ("ds/a", 2, BLOCK),
                            ("ds/c", 5, BLOCK), ("ds/c", 6, BLOCK)]


def test_record_without_command_is_bad_input(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "record", str(tmp_path), "--out",
                        str(tmp_path / "t.csv"), "--cache-dir", str(tmp_path / "c"), "--cache-size", "1MiB"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "COMMAND" in r.stderr
