"""``aicache sim cache`` on the text formats people write by hand (one id per line, and csv
with a header) against libCacheSim reading the same file with its own readers
(``PLAIN_TXT_TRACE``, ``CSV_TRACE``), and the byte-level parsers behind those readers
(:mod:`aicache.traces.formats._fastparse`) against the general path they stand in for.

The parsers accept only the unambiguous case and hand anything else to the general path;
the property tests here generate files from tricky pieces (blank lines, CRLF, lone CR, a
byte-order mark, signs, spaces, quotes, ids at and beyond 2**64, floats with many digits,
next-access values of -1, -2 and INT64_MAX, rows too short or too long) and check that the
reader returns exactly the requests of the general path — or the same error — with chunks
cut anywhere. Where the parser module is not compiled, the same code runs as Python here
(``compiled`` is forced on), so both builds test it.
"""

from __future__ import annotations

import json
from pathlib import Path

import libcachesim as lcs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.cli.main import main
from aicache.errors import BadInput
from aicache.traces.formats import _fastparse, _textchunks
from aicache.traces.formats.lcs_csv import LcsCsvSource
from aicache.traces.formats.lcs_txt import LcsTxtSource

LCS = {"lru": lcs.LRU, "fifo": lcs.FIFO, "clock": lcs.Clock, "sieve": lcs.Sieve,
       "s3fifo": lcs.S3FIFO, "arc": lcs.ARC}
N = 20_000


def _zipf_ids(n: int = N, objects: int = 3000, seed: int = 5) -> list[int]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, objects + 1) ** 0.9
    ranks = rng.choice(objects, size=n, p=p / p.sum())
    return (rng.permutation(objects).astype(np.int64) * 7919 + 1)[ranks].tolist()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("text")
    ids = _zipf_ids()
    txt = d / "ids.txt"
    txt.write_text("".join(f"{k}\n" for k in ids))
    csv = d / "reqs.csv"
    csv.write_text("timestamp,obj_id,obj_size\n" + "".join(f"{i},{k},1\n" for i, k in enumerate(ids)))
    crlf = d / "reqs_crlf.csv"
    crlf.write_bytes(csv.read_bytes().replace(b"\n", b"\r\n"))
    return {"txt": txt, "csv": csv, "csv-crlf": crlf}


def _libcachesim(path: Path, kind: str, policy: str, size: int) -> float:
    params = lcs.ReaderInitParam()
    if kind == "txt":
        trace_type = lcs.TraceType.PLAIN_TXT_TRACE
    else:
        trace_type = lcs.TraceType.CSV_TRACE
        params.has_header = True
        params.has_header_set = True
        params.delimiter = ","
        params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3  # 1-based
    reader = lcs.TraceReader(str(path), trace_type, params)
    mr, _ = LCS[policy](cache_size=size, hashpower=14).process_trace(reader)
    return float(mr)


def _ours(path: Path, policy: str, size: int, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["sim", "cache", "--trace", str(path), "--policy", policy,
                 "--cache-size", str(size), "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize("kind", ["txt", "csv", "csv-crlf"])
@pytest.mark.parametrize("policy", sorted(LCS))
def test_cli_miss_ratio_equals_libcachesim_own_reader(traces: dict[str, Path], kind: str, policy: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for size in (30, 300):
        ours = _ours(traces[kind], policy, size, capsys)
        assert ours["requests"] == N
        assert ours["format"] == ("lcs-txt" if kind == "txt" else "lcs-csv")
        assert ours["miss_ratio"] == pytest.approx(_libcachesim(traces[kind], kind.split("-")[0], policy, size),
                                                   abs=1e-12), (kind, policy, size)


def test_fast_path_is_taken_on_clean_files_when_compiled(traces: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clean file every chunk is parsed by the byte-level parser (none falls back)."""
    monkeypatch.setattr(_fastparse, "compiled", True)
    monkeypatch.setattr(_textchunks, "CHUNK", 4096)  # many chunks, so many cuts
    fell_back: list[int] = []
    real = _textchunks.text_lines

    def spy(buf: bytearray, end: int) -> list[str]:
        fell_back.append(end)
        return real(buf, end)

    monkeypatch.setattr("aicache.traces.formats.lcs_txt.text_lines", spy)
    monkeypatch.setattr("aicache.traces.formats.lcs_csv.text_lines", spy)
    txt = _read(LcsTxtSource(str(traces["txt"])))
    csv = _read(LcsCsvSource(str(traces["csv"])))
    assert fell_back == []
    assert txt[1] == csv[1] == _zipf_ids()
    assert csv[0] == [float(i) for i in range(N)]


# ------------------------------------------------------------ parsers vs the general path
def _read(src: LcsTxtSource | LcsCsvSource) -> tuple[list[float], list[int], list[int], list[int] | None, int]:
    ts: list[float] = []
    ids: list[int] = []
    sizes: list[int] = []
    nxt: list[int] | None = []
    for b in src.batches(batch_size=5):
        ts += b.timestamp.tolist()
        ids += b.obj_id.tolist()
        sizes += b.obj_size.tolist()
        if b.next_access_vtime is None:
            nxt = None
        elif nxt is not None:
            nxt += b.next_access_vtime.tolist()
    return ts, ids, sizes, nxt, src.bad_records


def _both(cls: type[LcsTxtSource] | type[LcsCsvSource], path: Path,
          chunk: int, skip_bad: bool) -> tuple[object, object]:
    """What the reader returns (or raises) with the parser and without it."""
    out = []
    for on in (False, True):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(_fastparse, "compiled", on)
            m.setattr(_textchunks, "CHUNK", chunk)
            try:
                out.append(_read(cls(str(path), skip_bad=skip_bad)))
            except BadInput as exc:
                out.append(("error", str(exc)))
    return out[0], out[1]


_TXT_PIECES = ["0", "1", "42", "007", "18446744073709551615", "18446744073709551616",
               "99999999999999999999999", "-3", "+5", " 12", "12 ", "1 2", "abc", "x7", "", "\u00e9t\u00e9"]
_ENDS = ["\n", "\r\n", "\r"]


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.tuples(st.sampled_from(_TXT_PIECES), st.sampled_from(_ENDS)), max_size=30),
       bom=st.booleans(), last_end=st.booleans(), chunk=st.integers(1, 64))
def test_txt_reader_same_with_and_without_parser(tmp_path_factory: pytest.TempPathFactory,
                                                 lines: list[tuple[str, str]], bom: bool, last_end: bool,
                                                 chunk: int) -> None:
    text = "".join(t + e for t, e in lines)
    if lines and not last_end:
        text = text[: -len(lines[-1][1])]
    p = tmp_path_factory.mktemp("txt") / "t.txt"
    p.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    general, fast = _both(LcsTxtSource, p, chunk, skip_bad=False)
    assert fast == general


_HEADERS = ["timestamp,obj_id,obj_size", "obj_id", "time,key,size,next_access_vtime",
            "ts,id,x,size", "obj_size,id,timestamp", ""]
_NUMS = ["0", "3", "17", "007", "1.5", "0.1", "2.", ".5", "1e3", "-1", "-2", "-0", " 4", "4 ",
         "9223372036854775807", "9223372036854775808", "18446744073709551615",
         "18446744073709551616", "123456789.123456789", "9007199254740993", "4.0000000000000000000001",
         "", "a", '"5"', "x\ry"]


@settings(max_examples=200, deadline=None)
@given(header=st.sampled_from(_HEADERS),
       rows=st.lists(st.tuples(st.lists(st.sampled_from(_NUMS[:4] * 6 + _NUMS), min_size=1, max_size=5),
                               st.sampled_from(["\n"] * 4 + _ENDS)), max_size=25),
       blank_first=st.booleans(), chunk=st.integers(1, 80), skip_bad=st.booleans())
def test_csv_reader_same_with_and_without_parser(tmp_path_factory: pytest.TempPathFactory,
                                                 header: str,
                                                 rows: list[tuple[list[str], str]], blank_first: bool,
                                                 chunk: int, skip_bad: bool) -> None:
    width = len(header.split(",")) if header else 3
    body = "".join(",".join(fields) + end for fields, end in rows)
    text = ("\n" if blank_first else "") + (header + "\n" if header else "") + body
    # half the rows have the header's width, so the parser gets whole clean chunks too
    clean = "".join(",".join(f"{(i * 7 + j) % 50}" for j in range(width)) + "\n" for i in range(20))
    p = tmp_path_factory.mktemp("csv") / "t.csv"
    p.write_text(text + clean, newline="")
    general, fast = _both(LcsCsvSource, p, chunk, skip_bad)
    assert fast == general


def test_parsers_refuse_what_they_cannot_read_exactly() -> None:
    """The cases the general path reads differently from a digit loop come back -1."""
    ids = np.zeros(4, dtype=np.uint64)
    for bad in (b"1\n\n2\n", b"1\r2\n", b"+1\n", b"1 \n", b"18446744073709551616\n", b"\n"):
        assert _fastparse.parse_ids(bytearray(bad), len(bad), ids) == -1, bad
    good = b"0\r\n18446744073709551615\n007"
    assert _fastparse.parse_ids(bytearray(good), len(good), ids) == 3
    assert ids[:3].tolist() == [0, 2**64 - 1, 7]
    cols = [np.zeros(4, dtype=t) for t in (np.float64, np.uint64, np.int64, np.int64)]
    for line, expect in ((b"0.1,5,3,-1", (0.1, 5, 3, -1)),
                         (b"123.456,5,3,9223372036854775807", (123.456, 5, 3, -1)),
                         (b"9007199254740991,1,0,0", (9007199254740991.0, 1, 0, 0))):
        assert _fastparse.parse_columns(bytearray(line), len(line), 4, 1, 0, 2, 3, 1 << 17, 0, *cols) == 1
        assert (cols[0][0], cols[1][0], cols[2][0], cols[3][0]) == expect
    for line in (b"1e3,5,3,0", b"1,5,-3,0", b"1,5,3,-2", b"9007199254740993,5,3,0", b"1,5,3", b"1,5,3,0,9",
                 b'1,"5",3,0', b"1,5,3,9223372036854775808", b"1, 5,3,0", b".5,5,3,0"):
        assert _fastparse.parse_columns(bytearray(line), len(line), 4, 1, 0, 2, 3, 1 << 17, 0, *cols) == -1, line


# ------------------------------------------------- the simulator's columns without numpy
def _oracle_file(path: Path, rng: np.random.Generator, n: int, bad_at: int | None) -> None:
    from aicache.traces.formats.oracle_general import record_dtype

    rec = np.zeros(n, dtype=record_dtype())
    rec["timestamp"] = np.arange(n)
    rec["obj_id"] = rng.integers(0, 2**64, size=n, dtype=np.uint64) % 50 * 2**58 + 3
    rec["obj_size"] = rng.choice([0, 1, 7, 4096, 2**32 - 1], size=n)
    rec["next_access_vtime"] = rng.choice([-1, 2**63 - 1, 5, 2**40], size=n)
    if bad_at is not None:
        rec["next_access_vtime"][bad_at] = -7
    path.write_bytes(rec.tobytes() + b"\x01\x02")  # and a truncated record


def _columns_via_batches(src: object, batch: int) -> tuple[list[int], list[int], int, int, int]:
    ids: list[int] = []
    sizes: list[int] = []
    total = 0
    for b in src.batches(batch):  # type: ignore[attr-defined]
        ids += b.obj_id.tolist()
        sizes += b.obj_size.tolist()
        total += int(b.obj_size.sum())
    return ids, sizes, total, src.bad_records, src.zero_size_records  # type: ignore[attr-defined]


def _columns_via_id_sizes(src: object, batch: int) -> tuple[list[int], list[int], int, int, int]:
    ids: list[int] = []
    sizes: list[int] = []
    total = 0
    for i, s, t in src.id_sizes(batch):  # type: ignore[attr-defined]
        ids += list(i)
        sizes += list(s)
        total += t
    return ids, sizes, total, src.bad_records, src.zero_size_records  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad_at", [None, 3, 250])
def test_oracle_general_columns_equal_the_numpy_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       bad_at: int | None) -> None:
    """The compiled record parser (forced on, so it runs as Python where not compiled)
    gives the numpy reader's ids, sizes, size-0 skips and bad records."""
    from aicache.traces.formats.oracle_general import OracleGeneralSource

    p = tmp_path / "t.oracleGeneral"
    _oracle_file(p, np.random.default_rng(3), 300, bad_at)
    ref = _columns_via_batches(OracleGeneralSource(str(p), skip_bad=True), 64)
    monkeypatch.setattr(_fastparse, "compiled", True)
    got = _columns_via_id_sizes(OracleGeneralSource(str(p), skip_bad=True), 64)
    assert got == ref
    assert ref[3] == 1 + (bad_at is not None) and ref[4] > 0  # the truncated record, the bad one; zeros
    with pytest.raises(BadInput, match="record 301: truncated" if bad_at is None else f"record {bad_at + 1}:"):
        list(OracleGeneralSource(str(p)).id_sizes(64))


@pytest.mark.parametrize("kind", ["txt", "csv"])
def test_text_columns_equal_batches(traces: dict[str, Path], monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(_fastparse, "compiled", True)
    cls = LcsTxtSource if kind == "txt" else LcsCsvSource
    assert _columns_via_id_sizes(cls(str(traces[kind])), 999) == _columns_via_batches(cls(str(traces[kind])), 999)


@pytest.mark.parametrize("kind", ["txt", "csv", "oracle-general"])
def test_sim_cache_imports_numpy_only_without_the_compiled_parser(traces: dict[str, Path], tmp_path: Path,
                                                                  kind: str) -> None:
    """numpy's import is most of a short run's start-up: the compiled route does without it."""
    import subprocess
    import sys

    path = traces.get(kind)
    if path is None:
        path = tmp_path / "t.oracleGeneral"
        _oracle_file(path, np.random.default_rng(1), 500, None)
        path.write_bytes(path.read_bytes()[:-2])
    code = ("import sys; from aicache.cli.main import main; "
            f"rc = main(['sim', 'cache', '--trace', {str(path)!r}, '--policy', 'lru', '--cache-size', '5', '--json']); "
            "from aicache.traces.formats import _fastparse; "
            "print(rc, 'numpy' in sys.modules, _fastparse.compiled)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    rc, has_numpy, compiled = out.strip().splitlines()[-1].split()
    assert rc == "0"
    assert has_numpy == str(compiled == "False"), out
