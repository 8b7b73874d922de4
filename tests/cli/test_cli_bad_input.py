"""Bad input through the real CLI (a subprocess): exit code 2 and one line on stderr that
names the input and the fix — never a traceback, a MemoryError, or a silent background
failure."""

from __future__ import annotations

import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HANG_S = 60.0


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def bad(r: subprocess.CompletedProcess[str], *gist: str) -> str:
    """Exit 2, one line, every ``gist`` in it (case-insensitive)."""
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(err.splitlines()) == 1, err
    for g in gist:
        assert g.lower() in err.lower(), (g, err)
    return err


@pytest.fixture()
def lcs_csv(tmp_path: Path) -> str:
    p = tmp_path / "t.csv"
    p.write_text("time,obj_id,obj_size\n1,1,100\n2,2,100\n3,1,100\n")
    return str(p)


def test_a_cache_size_past_any_number_is_named(lcs_csv: str) -> None:
    bad(cli("sim", "cache", "--trace", lcs_csv, "--policy", "lru", "--cache-size", "1e400"),
        "cache size", "1e400", "too large", "4GiB")


def test_a_scale_whose_plan_cannot_fit_in_memory_is_refused_before_allocating() -> None:
    """W1 at scale 1e9 is a 1.3 EiB dataset; the plan's size is computed from the file and
    block counts before anything is allocated, and the largest scale that fits is named."""
    for args in (["sim", "datacache", "--workload", "W1", "--scale", "1e9", "--system", "lru+none"],
                 ["gen", "workflow", "W1", "--scale", "1e9", "--out", os.devnull]):
        bad(cli(*args, timeout=60), "--scale", "memory", "at most --scale")


def test_the_largest_scale_that_fits_is_accepted_by_the_same_check() -> None:
    from aicache.traces.workflows import SPECS, _check_scale, plan_bytes

    spec = SPECS["W1"]
    memory = math.ceil(plan_bytes(spec, 100.0))  # a machine that holds scale 100's plan exactly
    _check_scale(100.0, spec, memory=memory)
    from aicache.errors import BadInput

    with pytest.raises(BadInput, match="at most --scale 100"):
        _check_scale(101.0, spec, memory=memory)


@pytest.mark.parametrize("fmt,header,row,ok", [
    ("lcs-csv", "time,obj_id,obj_size", "1,{big},100", "2,2,100"),
    ("block-csv", "timestamp,unit,obj_id,size", "1,{big},1,100", "2,u,2,100"),
])
def test_a_csv_field_over_128_kib_is_a_bad_record(tmp_path: Path, fmt: str, header: str, row: str,
                                                  ok: str) -> None:
    """Both the column-wise fast path and the per-row path reject it (a unit name in
    block-csv would otherwise pass the fast path), and --skip-bad skips it."""
    p = tmp_path / "big.csv"
    p.write_text(f"{header}\n{row.format(big='x' * (140 * 1024))}\n{ok}\n")
    bad(cli("sim", "cache", "--trace", str(p), "--format", fmt, "--policy", "lru", "--cache-size", "1"),
        "big.csv", "record 2", "128 KiB", "--skip-bad")
    r = cli("sim", "cache", "--trace", str(p), "--format", fmt, "--policy", "lru", "--cache-size", "1",
            "--skip-bad", "--json")
    assert r.returncode == 0, r.stderr
    assert '"requests": 1' in r.stdout


def test_a_csv_header_over_128_kib_is_named(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("x" * (140 * 1024) + ",obj_id,obj_size\n1,2,3\n")
    bad(cli("sim", "cache", "--trace", str(p), "--policy", "lru", "--cache-size", "1"),
        "h.csv", "record 1", "128 KiB")


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
@pytest.mark.parametrize("background", [False, True])
def test_a_metrics_port_that_is_no_port_fails_before_mounting(tmp_path: Path, port: str,
                                                              background: bool) -> None:
    """Also in background mode: checked before detaching, where stderr still reaches the user."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    try:
        r = cli("mount", str(src), str(mnt), "--cache-dir", str(tmp_path / "c"), "--cache-size",
                "1MiB", f"--metrics-port={port}", *([] if background else ["--foreground"]),
                timeout=60)
        bad(r, f"--metrics-port {port}", "1-65535")
        assert not os.path.ismount(mnt)
    finally:
        _unmount(mnt)


def _unmount(mnt: Path) -> None:
    if os.path.ismount(mnt):  # only where the check failed
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, check=False)


def test_a_metrics_port_in_use_fails_before_detaching(tmp_path: Path) -> None:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        try:
            r = cli("mount", str(src), str(mnt), "--cache-dir", str(tmp_path / "c"), "--cache-size",
                    "1MiB", "--metrics-port", str(port), timeout=60)
            bad(r, f"--metrics-port {port}", "free port")
            assert not os.path.ismount(mnt)
        finally:
            _unmount(mnt)


def test_remounting_over_a_dead_fuse_mount_names_the_stale_mount_and_the_unmount(tmp_path: Path) -> None:
    """A FUSE mount whose process was SIGKILLed stays in the mount table, and every access
    to it fails with ENOTCONN: the message says so and gives ``fusermount3 -u``."""
    import errno

    from aicache.datacache.fuse import fuse_available

    why = fuse_available()
    assert not why, why  # fuse3 is part of the test setup (scripts/setup.sh)
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    (src / "a").write_bytes(b"abc")
    mnt.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "aicache.cli.main", "mount", str(src), str(mnt),
                          "--cache-dir", str(tmp_path / "c"), "--cache-size", "1MiB", "--foreground"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_S
        while not os.path.ismount(mnt):  # polled under a generous deadline
            assert p.poll() is None and time.monotonic() < deadline, "the mount did not come up"
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait()
        while True:  # the kernel answers from cached attributes until they expire
            try:
                os.stat(mnt)
            except OSError as exc:
                assert exc.errno == errno.ENOTCONN
                break
            assert time.monotonic() < deadline, "the dead mount kept answering stat"
            time.sleep(0.05)
        err = bad(cli("mount", str(src), str(mnt), "--cache-dir", str(tmp_path / "c"),
                      "--cache-size", "1MiB", timeout=60), "stale FUSE mount")
        assert f"fusermount3 -u {mnt}" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, check=False)


def _cache_dir(tmp_path: Path) -> Path:
    from aicache.datacache.keys import BlockKey
    from aicache.datacache.store import BlockStore

    d = tmp_path / "cache"
    s = BlockStore(str(d), 1 << 20, 4096)
    try:
        s.put(BlockKey("p", "v", 0), b"x" * 100)
    finally:
        s.close()
    return d


def test_cache_stats_on_a_read_only_dir_says_it_is_read_only(tmp_path: Path) -> None:
    """A read-only bind mount (we run as root, so permission bits would not stop us)."""
    d = _cache_dir(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(d), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        err = bad(cli("cache", "stats", "--cache-dir", str(ro)), "read-only", "owner")
        assert "cache clear" not in err  # clearing a read-only dir cannot help
    finally:
        subprocess.run(["umount", str(ro)], check=False)
    r = cli("cache", "stats", "--cache-dir", str(d), "--json")
    assert r.returncode == 0 and '"blocks": 1' in r.stdout  # the same dir, writable: fine


def test_an_index_with_block_size_zero_is_called_damaged(tmp_path: Path) -> None:
    d = _cache_dir(tmp_path)
    db = sqlite3.connect(d / "index.sqlite")
    db.execute("UPDATE meta SET v = '0' WHERE k = 'block_size'")
    db.commit()
    db.close()
    err = bad(cli("cache", "stats", "--cache-dir", str(d)), "block size '0'", "damaged index",
              f"aicache cache clear --cache-dir {d}")
    assert "give e.g. 4MiB" not in err
    r = cli("cache", "clear", "--cache-dir", str(d), "--json")  # the advice works
    assert r.returncode == 0, r.stderr
    r = cli("cache", "stats", "--cache-dir", str(d), "--json")
    assert r.returncode == 0 and '"blocks": 0' in r.stdout, (r.stdout, r.stderr)


OG = np.dtype([("t", "<u4"), ("id", "<u8"), ("s", "<u4"), ("n", "<i8")])


def _og(path: Path, sizes: list[int]) -> str:
    r = np.zeros(len(sizes), dtype=OG)
    r["t"] = np.arange(len(sizes))
    r["id"] = [1 + i % 3 for i in range(len(sizes))]
    r["s"] = sizes
    r["n"] = -1
    path.write_bytes(r.tobytes())
    return str(path)


def test_size_zero_oracle_general_requests_are_skipped_as_libcachesim_skips_them(tmp_path: Path) -> None:
    """Outside oracle: libCacheSim's reader (``ignore_size_zero_req``, on by default) drops
    obj_size-0 requests; ours detects the file, drops the same ones, says how many, and
    its LRU agrees with libCacheSim's on what is left."""
    import libcachesim as lcs

    rng = np.random.default_rng(5)
    sizes = [int(s) for s in rng.choice([0, 0, 1, 1, 1], size=300)]
    p = _og(tmp_path / "z.oracleGeneral", sizes)
    want = sizes.count(1)
    reader = lcs.TraceReader(p, lcs.TraceType.ORACLE_GENERAL_TRACE)
    assert sum(1 for _ in reader) == want
    r = cli("sim", "cache", "--trace", p, "--policy", "lru", "--cache-size", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert f'"requests": {want}' in r.stdout
    assert f"skipped {len(sizes) - want} request(s) of obj_size 0" in r.stderr
    from aicache.sim.cache_sim import simulate

    ours = simulate(p, "lru", 2)
    mr, _ = lcs.LRU(cache_size=2).process_trace(lcs.TraceReader(p, lcs.TraceType.ORACLE_GENERAL_TRACE))
    assert ours.requests == want and ours.miss_ratio == pytest.approx(float(mr), abs=1e-12)


def test_an_oracle_general_trace_of_only_size_zero_requests_says_so(tmp_path: Path) -> None:
    p = _og(tmp_path / "zero.oracleGeneral", [0] * 10)
    err = bad(cli("sim", "cache", "--trace", p, "--policy", "lru", "--cache-size", "1"),
              "zero.oracleGeneral", "obj_size 0", "libCacheSim")
    assert "multiple of 24" not in err


#: the CLI in a process where s3fs cannot be imported (an install without the s3 extra)
NO_S3FS = ("import sys; sys.modules['s3fs'] = None; from aicache.cli.main import main; "
           "sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("argv", [["warmup", "s3://bucket/data"],
                                  ["mount", "s3://bucket/data", "MNT", "--cache-size", "1GiB",
                                   "--foreground"]])
def test_an_s3_url_without_the_s3_extra_names_the_extra(tmp_path: Path, argv: list[str]) -> None:
    argv = [str(tmp_path / "mnt") if a == "MNT" else a for a in argv]
    (tmp_path / "mnt").mkdir()
    r = subprocess.run([sys.executable, "-c", NO_S3FS, *argv, "--cache-dir", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    bad(r, "s3://bucket/data", "s3fs", "pip install 'aicache[s3]'")
