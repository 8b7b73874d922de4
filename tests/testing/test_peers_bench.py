"""The peers benchmark's instruments, and a quick run of it.

The delay line must hand each side exactly the bytes the other sent; the counting S3 server
must count what a client did, checked against the requests made with boto3 (the outside
reference: one call is one request); and a ``--quick`` run of ``benchmarks/peers.py`` must
end with every system's bytes checked equal to the dataset's.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicache.testing.delayline import DelayLine
from aicache.testing.s3count import CountingS3, classify, start_counting_s3

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def s3() -> Iterator[CountingS3]:
    server = start_counting_s3()
    yield server
    server.stop()


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return srv, int(srv.getsockname()[1])


def test_the_delay_line_forwards_every_byte_in_order() -> None:
    srv, port = _echo_server()
    payload = random.Random(7).randbytes(3 * 1024 * 1024 + 17)
    with DelayLine(("127.0.0.1", port), delay_s=0.002) as line, \
            socket.create_connection(("127.0.0.1", line.port)) as c:
        got = bytearray()

        def receive() -> None:
            while data := c.recv(65536):
                got.extend(data)

        rx = threading.Thread(target=receive)
        rx.start()
        for i in range(0, len(payload), 100_003):  # uneven pieces: chunking must not matter
            c.sendall(payload[i:i + 100_003])
        c.shutdown(socket.SHUT_WR)  # the half-close reaches the echo server after the bytes
        rx.join(timeout=60)
        assert not rx.is_alive()
        assert bytes(got) == payload
        assert line.stats.bytes_up == len(payload) == line.stats.bytes_down
    srv.close()


def test_the_delay_line_holds_each_chunk_until_its_due_time() -> None:
    """With an injected clock: a chunk stamped at t is sent at t + delay, no sooner."""
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    srv, port = _echo_server()
    with DelayLine(("127.0.0.1", port), delay_s=0.5, clock=lambda: now[0], sleep=sleep) as line, \
            socket.create_connection(("127.0.0.1", line.port)) as c:
        c.sendall(b"ping")
        assert c.recv(4) == b"ping"
    srv.close()
    assert slept and slept[0] == pytest.approx(0.5)


def test_request_classification() -> None:
    assert classify("GET", "/b/k/x.bin", "") == ("get", "b")
    assert classify("GET", "/b", "list-type=2&prefix=data/") == ("list", "b")
    assert classify("GET", "/b/", "") == ("list", "b")
    assert classify("GET", "/b", "location") == ("other", "b")
    assert classify("HEAD", "/b/k", "") == ("head", "b")
    assert classify("PUT", "/b/k", "") == ("other", "b")


def test_the_server_counts_what_boto3_asked_for_through_the_delay_line(s3: CountingS3) -> None:
    import boto3

    with DelayLine(("127.0.0.1", s3.port), delay_s=0.001) as line:
        client = boto3.client("s3", endpoint_url=line.url, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket="count")
        rng = random.Random(3)
        blobs = {f"d/f{i}.bin": rng.randbytes(rng.randint(1, 300_000)) for i in range(6)}
        for k, v in blobs.items():
            client.put_object(Bucket="count", Key=k, Body=v)
        before = s3.counts().bucket("count")
        for k, v in blobs.items():
            assert client.get_object(Bucket="count", Key=k)["Body"].read() == v
        ranged = client.get_object(Bucket="count", Key="d/f0.bin", Range="bytes=10-109")["Body"].read()
        assert ranged == blobs["d/f0.bin"][10:110]
        for k in list(blobs)[:4]:
            client.head_object(Bucket="count", Key=k)
        listed = client.list_objects_v2(Bucket="count", Prefix="d/")
        assert sorted(o["Key"] for o in listed["Contents"]) == sorted(blobs)
        d = s3.counts().bucket("count").minus(before)
    assert (d.get, d.head, d.list, d.other) == (len(blobs) + 1, 4, 1, 0)
    assert d.get_bytes == sum(len(v) for v in blobs.values()) + 100


@pytest.mark.parametrize("moto_as_is", [False, True])
def test_ranged_gets_and_overwrites_answer_the_bytes_put_in_both_server_modes(moto_as_is: bool) -> None:
    """The default server keeps each object's bytes beside moto's buffer so that a range
    costs its own bytes; every answer must still be the bytes last put (a 12 MiB object
    lives on disk in moto's buffer), including after an overwrite and a multipart upload."""
    import boto3

    server = start_counting_s3(moto_as_is=moto_as_is)
    try:
        client = boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket="ranges")
        rng = random.Random(11)
        big = rng.randbytes(12 << 20)
        client.put_object(Bucket="ranges", Key="big", Body=big)
        spans = [(0, 99), (5 << 20, (9 << 20) - 1), ((12 << 20) - 7, (12 << 20) - 1)]
        spans += [(a, a + rng.randrange(1, 1 << 20)) for a in (rng.randrange(11 << 20) for _ in range(6))]
        for a, b in spans:
            got = client.get_object(Bucket="ranges", Key="big", Range=f"bytes={a}-{b}")["Body"].read()
            assert got == big[a:b + 1]
        new = rng.randbytes(7 << 20)
        client.put_object(Bucket="ranges", Key="big", Body=new)
        assert client.get_object(Bucket="ranges", Key="big", Range="bytes=100-199")["Body"].read() == new[100:200]
        assert client.get_object(Bucket="ranges", Key="big")["Body"].read() == new
        up = client.create_multipart_upload(Bucket="ranges", Key="parts")["UploadId"]
        parts = [rng.randbytes(5 << 20), rng.randbytes(1 << 20)]
        etags = [client.upload_part(Bucket="ranges", Key="parts", UploadId=up, PartNumber=i + 1,
                                    Body=p)["ETag"] for i, p in enumerate(parts)]
        client.complete_multipart_upload(Bucket="ranges", Key="parts", UploadId=up, MultipartUpload={
            "Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]})
        whole = b"".join(parts)
        a = (5 << 20) - 10
        got = client.get_object(Bucket="ranges", Key="parts", Range=f"bytes={a}-{a + 19}")["Body"].read()
        assert got == whole[a:a + 20]
    finally:
        server.stop()


def _installed_peers() -> list[str]:
    """The real peers the test extra and scripts/setup.sh install (present on this machine)."""
    here = os.path.dirname(sys.executable)
    out = []
    for system, tool in (("juicefs", "juicefs"), ("rclone", "rclone"), ("s3fs-fuse", "s3fs")):
        if os.access(os.path.join(here, tool), os.X_OK) or any(
                os.access(os.path.join(p, tool), os.X_OK) for p in os.environ.get("PATH", "").split(":")):
            out.append(system)
    return out


def test_a_quick_run_checks_every_byte_of_every_system(tmp_path: Path) -> None:
    systems = ["aicache", "aicache-chiron", "aicache-lru", *_installed_peers()]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--quick", "--json",
                        "--scale", "0.5", "--jobs", "A,C", "--systems", ",".join(systems),
                        "--record-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    ran = [x for x in out["results"] if not x["status"].startswith("unavailable")]
    assert {x["system"] for x in ran} == set(systems), r.stderr[-3000:]
    for x in ran:
        assert x["status"] == "ok" and x["bytes_ok"], x
        assert x["reads"] > 0 and x["bytes_read"] > 0
        # every system had to fetch the data it served at least once
        assert x["get_bytes"] > 0 and x["gets"] > 0, x
    # aicache default's mount recorded a block trace per job
    traces = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert [t.split("-")[0] for t in traces] == ["A", "C"]
    assert all((tmp_path / t).stat().st_size > 0 for t in traces)
