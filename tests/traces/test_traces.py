"""Trace readers and writers: every format on small files written here, against plain
references (``struct`` for the binary layout, ``hashlib`` for hashed ids, a dict walk for
next-access times), plus malformed records, skipping, streaming and auto-detection."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.errors import BadInput, TraceFormatError
from aicache.traces import FORMATS, KV_FORMATS
from aicache.traces.base import KVRequest, Phase, RequestBatch
from aicache.traces.formats._common import make_batch
from aicache.traces.formats.oracle_general import next_access_times
from aicache.traces.io import BlockCsvWriter, detect_format, open_trace, write_trace

BLOCK_FORMATS = ("lcs-csv", "lcs-txt", "oracle-general", "block-csv")


def _cols(src, batch_size: int = 65536) -> dict[str, list]:
    out: dict[str, list] = {"t": [], "id": [], "size": [], "next": [], "unit": [], "phase": [], "op": []}
    for b in src.batches(batch_size):
        out["t"] += b.timestamp.tolist()
        out["id"] += b.obj_id.tolist()
        out["size"] += b.obj_size.tolist()
        if b.next_access_vtime is not None:
            out["next"] += b.next_access_vtime.tolist()
        if b.unit is not None:
            out["unit"] += b.unit.tolist()
        if b.phase is not None:
            out["phase"] += b.phase.tolist()
        if b.op is not None:
            out["op"] += b.op.tolist()
    return out


def _write(path: Path, text: str, newline: str = "\n") -> Path:
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def _blake(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


# ---------------------------------------------------------------------------- registry
def test_every_format_is_registered_and_loads() -> None:
    assert set(FORMATS.names()) == {*BLOCK_FORMATS, *KV_FORMATS}
    for name in FORMATS.names():
        cls = FORMATS.get(name)
        assert cls.format == name  # type: ignore[attr-defined]
        assert cls.kind == ("kv" if name in KV_FORMATS else "block")  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- lcs-csv
@pytest.mark.parametrize("header", [
    "timestamp,obj_id,obj_size",
    "time,id,size",
    "# timestamp, obj_id, obj_size",
    '"Timestamp","Key","Size"',
    "obj_size,op,obj_id,timestamp",  # other order, an extra column ignored
    "version,time,op,size,lbn",  # the header of libCacheSim's data/trace.csv
])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_lcs_csv_header_variants(tmp_path: Path, header: str, newline: str) -> None:
    names = [h.strip().strip('"').lstrip("#").strip().lower() for h in header.split(",")]
    canon = {"timestamp": "t", "time": "t", "obj_id": "id", "id": "id", "key": "id", "lbn": "id",
             "obj_size": "size", "size": "size", "op": "op", "version": "v"}
    rows = [(10, 7, 100), (11, 8, 200), (12, 7, 100)]
    lines = [header, ""]  # a blank line after the header is skipped
    for t, i, s in rows:
        vals = {"t": t, "id": i, "size": s, "op": "2a", "v": 1}
        lines.append(",".join(str(vals[canon[n]]) for n in names))
    p = _write(tmp_path / "a.csv", "\n".join(lines) + "\n\n", newline)
    src = open_trace(p)
    assert src.format == "lcs-csv"
    c = _cols(src)
    assert c["t"] == [10.0, 11.0, 12.0]
    assert c["id"] == [7, 8, 7]
    assert c["size"] == [100, 200, 100]


def test_lcs_csv_headerless_and_next_access_and_hashed_ids(tmp_path: Path) -> None:
    p = _write(tmp_path / "h.csv", "1,5,10,3\n2,6,20,-1\n3,5,10,9223372036854775807\n")
    c = _cols(open_trace(p, "lcs-csv"))
    assert (c["t"], c["id"], c["size"], c["next"]) == ([1.0, 2.0, 3.0], [5, 6, 5], [10, 20, 10], [3, -1, -1])
    q = _write(tmp_path / "s.csv", "key,size\nabc,3\n42,4\nabc,3\n")
    c = _cols(open_trace(q))
    assert c["id"] == [_blake("abc"), 42, _blake("abc")]
    assert c["t"] == [0.0, 1.0, 2.0]  # no time column: the request index


def test_lcs_csv_without_id_column_is_bad_input(tmp_path: Path) -> None:
    p = _write(tmp_path / "n.csv", "time,size\n1,2\n")
    with pytest.raises(BadInput, match="object id"):
        list(open_trace(p, "lcs-csv").batches())


# ---------------------------------------------------------------------------- lcs-txt
def test_lcs_txt_ids_blank_lines_crlf(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.txt", "3\n\n  4 \nfoo\n3\n18446744073709551616\n", "\r\n")
    src = open_trace(p)
    assert src.format == "lcs-txt"
    c = _cols(src)
    assert c["id"] == [3, 4, _blake("foo"), 3, _blake("18446744073709551616")]  # 2**64 is hashed
    assert c["size"] == [1] * 5
    assert c["t"] == [0.0, 1.0, 2.0, 3.0, 4.0]


# ---------------------------------------------------------------------------- oracle-general
def _pack(records: list[tuple[int, int, int, int]]) -> bytes:
    return b"".join(struct.pack("<IQIq", *r) for r in records)


def test_oracle_general_matches_struct_layout(tmp_path: Path) -> None:
    recs = [(1, 2**63 + 5, 4096, 2), (2, 9, 1, -1), (3, 2**63 + 5, 4096, 2**63 - 1)]
    p = tmp_path / "t.bin"
    p.write_bytes(_pack(recs))
    src = open_trace(p)
    assert src.format == "oracle-general"
    c = _cols(src)
    assert c["t"] == [1.0, 2.0, 3.0]
    assert c["id"] == [2**63 + 5, 9, 2**63 + 5]
    assert c["size"] == [4096, 1, 4096]
    assert c["next"] == [2, -1, -1]  # INT64_MAX (libCacheSim's "never") normalised to -1


def test_oracle_general_writer_is_the_struct_layout(tmp_path: Path) -> None:
    b = make_batch([0, 1, 2], [7, 8, 7], [10, 20, 10])
    p = tmp_path / "w.bin"
    write_trace(str(p), "oracle-general", [b])
    assert p.read_bytes() == _pack([(0, 7, 10, 2), (1, 8, 20, -1), (2, 7, 10, -1)])


def test_oracle_general_truncated_and_bad_next(tmp_path: Path) -> None:
    p = tmp_path / "t.bin"
    p.write_bytes(_pack([(1, 1, 1, -1), (2, 2, 1, -5), (3, 3, 1, -1)]) + b"\x01\x02\x03")
    with pytest.raises(TraceFormatError) as ei:
        list(open_trace(p, "oracle-general").batches())
    assert ei.value.record == 2 and "below -1" in str(ei.value)
    src = open_trace(p, "oracle-general", skip_bad=True)
    assert _cols(src)["id"] == [1, 3]
    assert src.bad_records == 2  # record 2 and the truncated record 4
    q = tmp_path / "u.bin"
    q.write_bytes(_pack([(1, 1, 1, -1)]) + b"\x00" * 10)
    with pytest.raises(TraceFormatError) as ei:
        list(open_trace(q, "oracle-general").batches())
    assert ei.value.record == 2 and "truncated" in str(ei.value)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=60))
def test_next_access_times_match_a_dict_walk(ids: list[int]) -> None:
    expected = [-1] * len(ids)
    last: dict[int, int] = {}
    for i in range(len(ids) - 1, -1, -1):
        expected[i] = last.get(ids[i], -1)
        last[ids[i]] = i
    assert next_access_times(np.asarray(ids, dtype=np.uint64)).tolist() == expected


# ---------------------------------------------------------------------------- block-csv
def test_block_csv_units_phase_op(tmp_path: Path) -> None:
    text = ("timestamp,unit,obj_id,size,phase,op\n"
            "0.5,train/a.jpg,10,4096,sequential,read\n"
            "\n"
            '1,"val,b.jpg",11,4096,Random,w\n'
            "2,train/a.jpg,12,100,,\n")
    p = _write(tmp_path / "b.csv", text, "\r\n")
    src = open_trace(p)
    assert src.format == "block-csv"
    c = _cols(src)
    assert src.units == ["train/a.jpg", "val,b.jpg"]
    assert c["unit"] == [0, 1, 0]
    assert c["id"] == [10, 11, 12]
    assert c["size"] == [4096, 4096, 100]
    assert c["t"] == [0.5, 1.0, 2.0]
    assert c["phase"] == [Phase.SEQUENTIAL, Phase.RANDOM, Phase.UNKNOWN]
    assert c["op"] == [0, 1, 0]


def test_block_csv_optional_columns_any_order(tmp_path: Path) -> None:
    p = _write(tmp_path / "b.csv", "obj_id,size,unit,timestamp\n5,1,u,3\n")
    c = _cols(open_trace(p))
    assert (c["id"], c["t"], c["phase"], c["op"]) == ([5], [3.0], [-1], [0])


@pytest.mark.parametrize("line, why", [
    ("3,u,notanint,10,,", "bad field"),
    ("3,u,4,10,zigzag,", "bad field"),
    ("3,u,4", "fields"),
    ("3,u,4,-1,,", "non-negative"),
])
def test_block_csv_malformed_record_number(tmp_path: Path, line: str, why: str) -> None:
    text = "timestamp,unit,obj_id,size,phase,op\n1,u,1,10,,\n\n2,u,2,10,,\n" + line + "\n5,u,5,10,,\n"
    p = _write(tmp_path / "b.csv", text)
    with pytest.raises(TraceFormatError) as ei:
        list(open_trace(p).batches())
    assert ei.value.record == 5  # 1-based line number: header, 2 records, a blank line, then it
    assert why in str(ei.value) and str(p) in str(ei.value) and "--skip-bad" in str(ei.value)
    src = open_trace(p, skip_bad=True)
    assert _cols(src)["id"] == [1, 2, 5]
    assert src.bad_records == 1
    assert _cols(src)["id"] == [1, 2, 5] and src.bad_records == 1  # a second pass recounts


def test_block_csv_writer_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "w.csv"
    with BlockCsvWriter(str(p)) as w:
        w.write(0.25, "a", 1, 10, Phase.SEQUENTIAL, "read")
        w.write(1, "b", 2, 20, "random", "write")
        w.write_batch(make_batch([2, 3.5], [3, 1], [30, 10], unit=[1, 0], phase=[2, -1], op=[0, 1]),
                      ["a", "b"])
        with pytest.raises(ValueError, match="phase 'zigzag'"):
            w.write(4, "a", 1, 10, "zigzag")
    src = open_trace(p)
    c = _cols(src)
    assert src.units == ["a", "b"]
    assert c == {"t": [0.25, 1.0, 2.0, 3.5], "id": [1, 2, 3, 1], "size": [10, 20, 30, 10], "next": [],
                 "unit": [0, 1, 1, 0], "phase": [0, 1, 2, -1], "op": [0, 1, 0, 1]}


# ---------------------------------------------------------------------------- streaming
@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_batches_are_bounded_and_lazy(tmp_path: Path, fmt: str) -> None:
    n = 1000
    b = make_batch(list(range(n)), [i % 37 for i in range(n)], [1] * n, unit=[0] * n)
    p = tmp_path / f"t.{fmt}"
    write_trace(str(p), fmt, [b], ["u"])
    sizes = [len(x) for x in open_trace(p, fmt).batches(batch_size=64)]
    assert max(sizes) <= 64 and sum(sizes) == n and len(sizes) == -(-n // 64)
    # Lazy: a malformed record at the end is not reached while reading the first batch.
    if fmt == "oracle-general":
        p.write_bytes(p.read_bytes() + b"\x01")
    elif fmt != "lcs-txt":  # any text is a valid lcs-txt id
        with open(p, "a") as f:
            f.write("x,y,z,w\n" if fmt != "lcs-csv" else "1,2,bad\n")
    it = open_trace(p, fmt).batches(batch_size=64)
    assert len(next(it)) == 64
    if fmt != "lcs-txt":
        with pytest.raises(TraceFormatError):
            list(it)


def test_kv_requests_stream_lazily(tmp_path: Path) -> None:
    p = tmp_path / "k.jsonl"
    p.write_text('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{oops\n')
    it = open_trace(p).requests()
    assert next(it).hash_ids == [1]
    with pytest.raises(TraceFormatError) as ei:
        next(it)
    assert ei.value.record == 2


# ---------------------------------------------------------------------------- KV formats
MOONCAKE_LINES = [
    {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
    {"timestamp": 2500, "input_length": 600, "output_length": 7, "hash_ids": [1, 4]},
]


def test_mooncake_ms_to_seconds_and_block_expansion(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(json.dumps(d) for d in MOONCAKE_LINES) + "\n\n")
    src = open_trace(p)
    assert src.format == "mooncake"
    reqs = list(src.requests())
    assert [r.timestamp for r in reqs] == [0.0, 2.5]
    assert all(r.block_tokens == 512 and r.session_id is None for r in reqs)
    c = _cols(src)  # one block request per hash id, partial last block
    assert c["id"] == [1, 2, 3, 1, 4]
    assert c["size"] == [512, 512, 1100 - 1024, 512, 600 - 512]
    assert c["t"] == [0.0, 0.0, 0.0, 2.5, 2.5]


def test_bailian_sessions_follow_parent_links(tmp_path: Path) -> None:
    lines = [
        {"chat_id": 10, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 32, "output_length": 3,
         "type": "text", "turn": 1, "hash_ids": [1, 2]},
        {"chat_id": 11, "parent_chat_id": -1, "timestamp": 2.0, "input_length": 16, "output_length": 3,
         "type": "search", "turn": 1, "hash_ids": [7]},
        {"chat_id": 12, "parent_chat_id": 10, "timestamp": 3.0, "input_length": 40, "output_length": 3,
         "type": "text", "turn": 2, "hash_ids": [1, 2, 3]},
        {"chat_id": 13, "parent_chat_id": 12, "timestamp": 4.0, "input_length": 48, "output_length": 3,
         "type": "image", "turn": 3, "hash_ids": [1, 2, 3, 4]},
        {"chat_id": 14, "parent_chat_id": 99, "timestamp": 5.0, "input_length": 8, "output_length": 1,
         "type": "text", "turn": 4, "hash_ids": [9]},
    ]
    p = tmp_path / "b.jsonl"
    p.write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    src = open_trace(p)
    assert src.format == "bailian"
    reqs = list(src.requests())
    assert [r.session_id for r in reqs] == ["10", "11", "10", "10", "99"]
    assert [r.parent_chat_id for r in reqs] == [None, None, "10", "12", "99"]
    assert [r.request_type for r in reqs] == ["text", "search", "text", "image", "text"]
    assert [r.extra["chat_id"] for r in reqs] == [10, 11, 12, 13, 14]
    assert all(r.block_tokens == 16 for r in reqs) and reqs[0].timestamp == 1.5


def test_kv_jsonl_fields_and_extra(tmp_path: Path) -> None:
    d = {"timestamp": 3.25, "input_length": 20, "output_length": 4, "hash_ids": [5, 6],
         "session_id": 77, "turn": 2, "session_type": "agentic", "block_types": ["system", "tool"],
         "block_tokens": 16, "model": "x"}
    p = tmp_path / "k.jsonl"
    p.write_text(json.dumps(d) + "\n")
    src = open_trace(p)
    assert src.format == "kv-jsonl"
    (r,) = list(src.requests())
    assert r == KVRequest(timestamp=3.25, input_length=20, output_length=4, hash_ids=[5, 6],
                          block_tokens=16, session_id="77", turn=2, session_type="agentic",
                          block_types=["system", "tool"], extra={"model": "x"})


@pytest.mark.parametrize("fmt, line, why", [
    ("mooncake", '{"timestamp": 1, "input_length": 5, "output_length": 1}', "hash_ids"),
    ("mooncake", '{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": [1]}', "non-negative"),
    ("mooncake", '[1, 2]', "object"),
    ("bailian", '{"chat_id": "x", "parent_chat_id": -1, "timestamp": 1, "input_length": 5, '
                '"output_length": 1, "hash_ids": [1]}', "chat_id"),
    ("kv-jsonl", '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1, 2], '
                 '"block_types": ["user"]}', "block_types"),
    ("kv-jsonl", '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}', "hash_ids"),
])
def test_kv_malformed_record_number_and_skip(tmp_path: Path, fmt: str, line: str, why: str) -> None:
    good = {"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1]}
    if fmt == "bailian":
        good |= {"chat_id": 1, "parent_chat_id": -1}
    g = json.dumps(good)
    p = tmp_path / "k.jsonl"
    p.write_text("\n".join([g, "", g, line, g]) + "\n")
    with pytest.raises(TraceFormatError) as ei:
        list(open_trace(p, fmt).requests())
    assert ei.value.record == 4 and why in str(ei.value)
    src = open_trace(p, fmt, skip_bad=True)
    assert len(list(src.requests())) == 3 and src.bad_records == 1


def test_block_source_refuses_requests(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.txt", "1\n2\n")
    with pytest.raises(BadInput, match="not a KV trace"):
        list(open_trace(p).requests())


# ---------------------------------------------------------------------------- detection
def _sample_requests(block_tokens: int) -> list[KVRequest]:
    return [KVRequest(timestamp=1.0, input_length=2 * block_tokens, output_length=3, hash_ids=[1, 2],
                      block_tokens=block_tokens, session_id="s", turn=1, session_type="chat",
                      block_types=["system", "user"])]


@pytest.mark.parametrize("fmt", [*BLOCK_FORMATS, *KV_FORMATS])
def test_auto_detection_by_content_not_name(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / "trace.dat"  # the name says nothing
    if fmt in KV_FORMATS:
        write_trace(str(p), fmt, _sample_requests(512 if fmt == "mooncake" else 16))
    else:
        write_trace(str(p), fmt, [make_batch([0, 1, 2], [5, 6, 5], [10, 20, 10], unit=[0, 0, 0])], ["u"])
    assert detect_format(str(p)) == fmt
    assert open_trace(p).format == fmt


def test_detection_edge_cases(tmp_path: Path) -> None:
    empty = tmp_path / "e"
    empty.write_bytes(b"")
    assert detect_format(str(empty)) == "lcs-txt"
    assert list(open_trace(empty).batches()) == []
    junk = tmp_path / "j.bin"
    junk.write_bytes(b"\x00\x01\x02" * 7)  # binary, 21 bytes: not a multiple of 24
    with pytest.raises(BadInput, match="binary"):
        open_trace(junk)
    js = tmp_path / "x.jsonl"
    js.write_text('{"a": 1}\n')
    with pytest.raises(BadInput, match="--format"):
        open_trace(js)


def test_unreadable_or_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(BadInput, match="nope.csv"):
        open_trace(missing)
    with pytest.raises(BadInput, match=str(tmp_path)):
        open_trace(tmp_path)  # a directory
    p = _write(tmp_path / "t.txt", "1\n")
    with pytest.raises(BadInput, match="unknown trace format 'csv'"):
        open_trace(p, "csv")


# ---------------------------------------------------------------------------- round trips
ids_st = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(1, 2**31), st.integers(0, 2),
                            st.integers(-1, 2), st.integers(0, 1)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(ids_st, st.sampled_from(BLOCK_FORMATS))
def test_block_round_trip(tmp_path_factory: pytest.TempPathFactory, rows: list, fmt: str) -> None:
    n = len(rows)
    b = make_batch([float(i) for i in range(n)], [r[0] for r in rows], [r[1] for r in rows],
                   unit=[r[2] for r in rows], phase=[r[3] for r in rows], op=[r[4] for r in rows])
    units = ["a", "b,c", 'd"e']
    p = tmp_path_factory.mktemp("rt") / "t"
    write_trace(str(p), fmt, [b], units)
    src = open_trace(p, fmt)
    c = _cols(src, batch_size=7)
    assert c["id"] == b.obj_id.tolist()
    assert c["t"] == b.timestamp.tolist()
    assert c["size"] == (b.obj_size.tolist() if fmt != "lcs-txt" else [1] * n)
    if fmt == "block-csv":
        assert [src.units[u] for u in c["unit"]] == [units[u] for u in b.unit.tolist()]  # type: ignore[union-attr]
        assert c["phase"] == b.phase.tolist() and c["op"] == b.op.tolist()  # type: ignore[union-attr]
    if fmt == "oracle-general":
        assert c["next"] == next_access_times(b.obj_id).tolist()


kv_st = st.lists(st.tuples(st.integers(0, 10**6), st.lists(st.integers(0, 2**63 - 1), max_size=6),
                           st.integers(0, 100), st.sampled_from(["s1", "s2", "s3"])), min_size=1, max_size=15)


@settings(max_examples=40, deadline=None)
@given(kv_st)
def test_kv_jsonl_round_trip_is_lossless(tmp_path_factory: pytest.TempPathFactory, rows: list) -> None:
    reqs = [KVRequest(timestamp=ms / 1000, input_length=16 * len(h), output_length=o, hash_ids=h,
                      block_tokens=16, session_id=s, turn=i, session_type="chat",
                      block_types=["user"] * len(h), parent_chat_id=None, request_type="text",
                      extra={"k": i})
            for i, (ms, h, o, s) in enumerate(rows)]
    p = tmp_path_factory.mktemp("kv") / "t.jsonl"
    assert write_trace(str(p), "kv-jsonl", reqs) == len(reqs)
    assert list(open_trace(p, "kv-jsonl").requests()) == reqs


def test_writers_refuse_wrong_block_sizes(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="512"):
        write_trace(str(tmp_path / "m"), "mooncake", _sample_requests(16))
    with pytest.raises(BadInput, match="16"):
        write_trace(str(tmp_path / "b"), "bailian", _sample_requests(512))


def test_request_batch_dtypes(tmp_path: Path) -> None:
    p = _write(tmp_path / "b.csv", "timestamp,unit,obj_id,size\n1,u,18446744073709551615,3\n")
    (b,) = list(open_trace(p).batches())
    assert isinstance(b, RequestBatch)
    assert b.obj_id.dtype == np.uint64 and int(b.obj_id[0]) == 2**64 - 1
    assert b.obj_size.dtype == np.int64 and b.timestamp.dtype == np.float64
    assert b.unit.dtype == np.int32 and b.phase.dtype == np.int8  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- csv fast path
csv_rows = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 2**64 - 1), st.integers(0, 10**9),
                              st.sampled_from(["a", "b", "c d"]), st.sampled_from(["", "random", "Skewed "]),
                              st.sampled_from(["", "read", "W"])), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(csv_rows, st.integers(1, 9), st.booleans())
def test_csv_column_fast_path_equals_row_path(tmp_path_factory: pytest.TempPathFactory, rows: list,
                                              batch: int, blank: bool) -> None:
    """Clean chunks are parsed column-wise, others row by row; both must give the same batches
    (the row path is the csv module, the obviously-correct reference)."""
    import aicache.traces.formats.block_csv as bc
    import aicache.traces.formats.lcs_csv as lc

    d = tmp_path_factory.mktemp("fast")
    blines = ["timestamp,unit,obj_id,size,phase,op"] + [f"{t / 8},{u},{i},{s},{p},{o}" for t, i, s, u, p, o in rows]
    llines = ["time,id,size"] + [f"{t / 8},{i},{s}" for t, i, s, *_ in rows]
    if blank:  # a blank line sends its chunk to the row path
        blines.insert(len(blines) // 2 + 1, "")
        llines.insert(len(llines) // 2 + 1, "")
    (d / "b.csv").write_text("\n".join(blines) + "\n")
    (d / "l.csv").write_text("\n".join(llines) + "\n")
    results = []
    for force_rows in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            if force_rows:
                mp.setattr(bc._Columns, "fast", lambda *a: None)
                mp.setattr(lc._Columns, "fast", lambda *a: None)
            b, lsrc = open_trace(d / "b.csv"), open_trace(d / "l.csv")
            results.append((_cols(b, batch), b.units, _cols(lsrc, batch)))
    assert results[0] == results[1]
    assert results[0][0]["id"] == [r[1] for r in rows]
    assert results[0][2]["t"] == [r[0] / 8 for r in rows]


# ---------------------------------------------------------------------------- compression
@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("fmt", [*BLOCK_FORMATS, *KV_FORMATS])
def test_compressed_traces_are_read_transparently(tmp_path: Path, fmt: str, codec: str) -> None:
    """libCacheSim's public traces ship as .zst: the magic bytes decide, not the name."""
    import gzip

    import zstandard

    plain = tmp_path / "plain"
    if fmt in KV_FORMATS:
        write_trace(str(plain), fmt, _sample_requests(512 if fmt == "mooncake" else 16))
    else:
        n = 5000  # several zstd frames' worth, so short reads happen
        write_trace(str(plain), fmt, [make_batch(list(range(n)), [i * 7 % 301 for i in range(n)],
                                                 [3] * n, unit=[0] * n)], ["u"])
    data = plain.read_bytes()
    packed = gzip.compress(data) if codec == "gzip" else zstandard.ZstdCompressor().compress(data)
    z = tmp_path / "trace"
    z.write_bytes(packed)
    src, ref = open_trace(z), open_trace(plain)
    assert src.format == fmt
    if fmt in KV_FORMATS:
        assert list(src.requests()) == list(ref.requests())
    else:
        assert _cols(src, 999) == _cols(ref, 999)


def test_zstd_without_zstandard_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import zstandard

    p = tmp_path / "t.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(b"1\n2\n"))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import now raises ImportError
    with pytest.raises(BadInput, match="zstd-compressed; pip install zstandard"):
        open_trace(p)
