"""libCacheSim as an outside oracle for the eviction policies (helper module, not a test).

The ``libcachesim`` PyPI package wraps libCacheSim's C simulator. Two ways to drive it:

* :func:`lcs_run` feeds the trace request by request through ``cache.get(req)`` and returns
  the per-request hit vector, so a mismatch can be located at the first request where the two
  simulators disagree (not only "the ratios differ").
* :func:`lcs_process_trace` writes the trace as an ``oracleGeneral`` binary file (the format
  libCacheSim's own tools read, with ``next_access_vtime`` filled in) and runs the C loop
  ``process_trace`` over a ``TraceReader``: the path libCacheSim users actually take.

:func:`run_ours` runs one of our registered policies over :class:`aicache.sim.cache.Cache`
on the same arrays, returning the same :class:`RunResult` shape.

Modes: ``"objects"`` gives every request size 1 (libCacheSim's "ignore object size"), and
``"bytes"`` passes the real sizes. A trace is two numpy arrays, ``ids`` (non-negative
ints) and ``sizes`` (positive ints; an object keeps one size across requests).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcachesim as lcs
import numpy as np

from aicache.policies import make_eviction
from aicache.sim.cache import Cache

#: our registry name -> libcachesim class. LeCaR is randomised in both (with different
#: generators), so it is compared within a tolerance, not exactly.
LCS_POLICIES: dict[str, Any] = {
    "lru": lcs.LRU,
    "fifo": lcs.FIFO,
    "clock": lcs.Clock,
    "sieve": lcs.Sieve,
    "s3fifo": lcs.S3FIFO,
    "arc": lcs.ARC,
    "lfu": lcs.LFU,
    "belady": lcs.Belady,
    "lecar": lcs.LeCaR,
    "2q": lcs.TwoQ,
    "lirs": lcs.LIRS,
    "wtinylfu": lcs.WTinyLFU,
    "lhd": lcs.LHD,
    "gdsf": lcs.GDSF,
}

INT64_MAX = np.iinfo(np.int64).max
#: libCacheSim's hash tables grow on demand; its default 2**24 buckets cost 128 MiB and
#: ~0.1 s of page faults per cache instance (three instances for S3-FIFO), for nothing here.
HASHPOWER = 12

#: libCacheSim's oracleGeneral record: u32 clock_time, u64 obj_id, u32 obj_size, i64 next vtime
ORACLE_GENERAL = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


@dataclass(frozen=True)
class RunResult:
    """Per-request hits and the two ratios libCacheSim reports."""

    hits: np.ndarray  # bool, one per request
    miss_ratio: float
    byte_miss_ratio: float


def _result(hits: np.ndarray, sizes: np.ndarray) -> RunResult:
    n = len(hits)
    total = int(sizes.sum())
    return RunResult(
        hits=hits,
        miss_ratio=1.0 - int(hits.sum()) / n if n else 0.0,
        byte_miss_ratio=1.0 - int(sizes[hits].sum()) / total if total else 0.0,
    )


def next_access(ids: np.ndarray) -> np.ndarray:
    """Index of the next request to the same object, ``-1`` when there is none."""
    ids = np.asarray(ids)
    n = len(ids)
    order = np.lexsort((np.arange(n), ids))  # grouped by id, in request order
    nxt = np.full(n, -1, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def working_set(ids: np.ndarray, sizes: np.ndarray, mode: str) -> int:
    """Distinct objects (objects mode) or their total bytes (bytes mode)."""
    _, first = np.unique(np.asarray(ids), return_index=True)
    if mode == "objects":
        return len(first)
    return int(np.asarray(sizes)[first].sum())


def _req_sizes(sizes: np.ndarray, mode: str) -> np.ndarray:
    return np.ones(len(sizes), dtype=np.int64) if mode == "objects" else np.asarray(sizes)


def lcs_run(name: str, ids: np.ndarray, sizes: np.ndarray, cap: int, mode: str) -> RunResult:
    """libCacheSim, one ``get`` per request. Belady gets the next access time per request
    (``INT64_MAX`` for never, as libCacheSim's readers write it)."""
    cache = LCS_POLICIES[name](cache_size=int(cap), hashpower=HASHPOWER)
    rsizes = _req_sizes(sizes, mode).tolist()
    nxt = next_access(ids)
    nxt = np.where(nxt < 0, INT64_MAX, nxt + 1).tolist()  # libCacheSim vtimes count from 1
    req = lcs.Request()
    hits = np.zeros(len(ids), dtype=bool)
    get = cache.get
    for i, key in enumerate(np.asarray(ids).tolist()):
        req.obj_id = key
        req.obj_size = rsizes[i]
        req.next_access_vtime = nxt[i]
        hits[i] = get(req)
    return _result(hits, np.asarray(sizes))


def write_oracle_general(path: Path, ids: np.ndarray, sizes: np.ndarray) -> None:
    """Write an oracleGeneral file (24-byte records, next access as a request index)."""
    rec = np.zeros(len(ids), dtype=ORACLE_GENERAL)
    rec["t"] = np.arange(len(ids), dtype=np.uint32)
    rec["id"] = np.asarray(ids, dtype=np.uint64)
    rec["size"] = np.asarray(sizes, dtype=np.uint32)
    rec["next"] = next_access(ids)
    rec.tofile(path)


def lcs_process_trace(
    name: str, ids: np.ndarray, sizes: np.ndarray, cap: int, mode: str, path: Path
) -> tuple[float, float]:
    """(miss ratio, byte miss ratio) from libCacheSim's C loop over an oracleGeneral file.

    In objects mode the file carries size 1 for every request, so libCacheSim's byte miss
    ratio equals its miss ratio there.
    """
    write_oracle_general(path, ids, _req_sizes(sizes, mode))
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = LCS_POLICIES[name](cache_size=int(cap), hashpower=HASHPOWER)
    mr, bmr = cache.process_trace(reader)
    return float(mr), float(bmr)


_FRESH = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from lcs_oracle import lcs_run
d = np.load(sys.argv[2])
name, mode, caps, repeats = sys.argv[3], sys.argv[4], json.loads(sys.argv[5]), int(sys.argv[6])
print(json.dumps([[lcs_run(name, d["ids"], d["sizes"], c, mode).miss_ratio
                   for _ in range(repeats)] for c in caps]))
"""


def lcs_miss_ratios_fresh_process(
    name: str, ids: np.ndarray, sizes: np.ndarray, caps: list[int], mode: str, repeats: int
) -> list[list[float]]:
    """Miss ratios ``[cap][repeat]`` from libCacheSim run in a new interpreter.

    libCacheSim's randomised policies (LeCaR) draw from one process-wide generator with a
    fixed seed, so in-process results depend on everything that ran before (test order,
    ``-k`` selections). A fresh process starts that generator from the same state every
    time, making the oracle's numbers reproducible; ``repeats`` consecutive runs then give
    independent draws to average over.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.npz"
        np.savez(path, ids=np.asarray(ids), sizes=np.asarray(sizes))
        out = subprocess.run(
            [sys.executable, "-c", _FRESH, str(Path(__file__).parent), str(path), name, mode,
             json.dumps([int(c) for c in caps]), str(repeats)],
            check=True, capture_output=True, text=True,
        )
    result: list[list[float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


_FRESH_HITS = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from lcs_oracle import lcs_run
d = np.load(sys.argv[2])
np.save(sys.argv[2] + ".hits.npy", lcs_run(sys.argv[3], d["ids"], d["sizes"], int(sys.argv[5]),
                                          sys.argv[4]).hits)
"""


def lcs_run_fresh_process(name: str, ids: np.ndarray, sizes: np.ndarray, cap: int,
                          mode: str) -> RunResult:
    """:func:`lcs_run` as the first run of a new interpreter, whose libCacheSim thread
    starts its shared random generator (``next_rand``) at 0: the start state our LHD
    is given, so that sampled policies can be compared request by request."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.npz"
        np.savez(path, ids=np.asarray(ids), sizes=np.asarray(sizes))
        subprocess.run([sys.executable, "-c", _FRESH_HITS, str(Path(__file__).parent),
                        str(path), name, mode, str(int(cap))],
                       check=True, capture_output=True, text=True)
        hits = np.load(str(path) + ".hits.npy")
    return _result(hits, np.asarray(sizes))


def run_ours(
    policy: str, ids: np.ndarray, sizes: np.ndarray, cap: int, mode: str, seed: int = 0
) -> RunResult:
    """Our policy over :class:`Cache`; the byte miss ratio always uses the real sizes."""
    pol = make_eviction(policy, int(cap), rng=random.Random(seed))
    cache = Cache(int(cap), pol, size_mode=mode)
    sizes = np.asarray(sizes)
    id_list = ids.tolist()
    size_list = sizes.tolist()
    hits = np.zeros(len(id_list), dtype=bool)
    request = cache.request
    if pol.needs_future:
        tell = pol.set_next_access
        for i, nxt in enumerate(next_access(ids).tolist()):
            tell(nxt)
            hits[i] = request(id_list[i], size_list[i], float(i))
    else:
        for i in range(len(id_list)):
            hits[i] = request(id_list[i], size_list[i], float(i))
    return _result(hits, sizes)


def first_mismatch(a: RunResult, b: RunResult) -> int:
    """Index of the first request where the hit vectors differ, -1 if none."""
    diff = np.flatnonzero(a.hits != b.hits)
    return int(diff[0]) if len(diff) else -1
