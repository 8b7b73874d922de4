"""Run an experiment's cells on a local process pool or a Ray cluster, resumably.

Layout under ``OUT/NAME/``:

* ``cells.jsonl`` — one JSON row per finished cell, appended (write + flush + fsync) the
  moment the cell finishes, so a killed run loses at most the cells in flight. A row is
  ``{**params, **metrics}`` plus bookkeeping keys prefixed ``_`` (``_key``, ``_seed``,
  ``_version``, ``_git_commit``, ``_run_id``, ``_wall_s``, ``_host``; ``_error`` and
  ``_traceback`` when the cell raised).
* ``results.parquet`` (or ``results.csv`` without pyarrow) — the current grid's rows in
  cell order, rewritten at the end of every run.
* ``run.json`` — what the last run covered (its cell keys, quick/select, executor, times),
  which the report uses to pick the rows of the current grid.

Resuming: a rerun skips every cell whose key (:func:`aicache.experiments.base.cell_key`)
already has a row without ``_error``; failed cells are retried. A half-written last line
(the process died mid-write) is cut off before appending. When a cell appears more than
once the last row wins. An exclusive lock (``lockf``) on ``OUT/NAME/.lock`` stops two runs from
interleaving rows in the same directory.

Invariant: the rows of a finished run depend only on the cells' params (cells are pure),
not on the executor, the number of workers, or how often the run was interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import aicache
from aicache.errors import BadInput
from aicache.experiments.base import Experiment, cell_key

CELLS_FILE = "cells.jsonl"
RUN_FILE = "run.json"

RunCell = Callable[[Mapping[str, Any]], Mapping[str, Any]]


@dataclass
class RunResult:
    """What one ``run_experiment`` call did."""

    name: str
    out_dir: Path
    #: The current grid's rows, in cell order (including failed cells, with ``_error``).
    rows: list[dict[str, Any]]
    ran: int
    skipped: int
    failed: int
    wall_s: float
    results_path: Path
    executor: str
    run_id: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failed == 0


# -- the part that runs in workers ---------------------------------------------------------


def _jsonable(v: Any) -> Any:
    """numpy scalars/arrays → Python values, tuples → lists, so every row is plain JSON."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        return v.tolist()
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    return v


def execute_cell(run_cell: RunCell, params: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Run one cell and build its row; never raises (a failure becomes ``_error``).

    Runs in a pool worker or a Ray task, so it must stay a module-level function. ``_host``
    is read here, in the worker, so a Ray row says which node computed it.
    """
    t0 = time.perf_counter()
    row: dict[str, Any] = dict(params)
    try:
        metrics = run_cell(params)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"run_cell returned {type(metrics).__name__}, not a dict of metrics")
        row.update(_jsonable(dict(metrics)))
    except Exception as exc:  # noqa: BLE001 - one failing cell must not lose the others
        row["_error"] = f"{type(exc).__name__}: {exc}"
        row["_traceback"] = traceback.format_exc(limit=8)
    row.update(meta)
    row["_wall_s"] = time.perf_counter() - t0
    row["_host"] = socket.gethostname()
    return row


def _die_with_parent() -> None:
    """Pool initializer: on Linux, ask the kernel to kill this worker when the parent dies,
    so a killed ``aicache experiment run`` leaves no orphaned workers behind."""
    with contextlib.suppress(Exception):
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


# -- the result store -----------------------------------------------------------------------


class CellStore:
    """``cells.jsonl``: append-only rows, last row per key wins, a torn tail is ignored."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self, *, repair: bool = False) -> dict[str, dict[str, Any]]:
        """Rows by ``_key``. With ``repair``, cut a half-written last line off the file so
        the next append starts on a fresh line (only the run that holds the lock may)."""
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if repair and end != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())
        rows: dict[str, dict[str, Any]] = {}
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn line from an old crash; its cell simply runs again
            if isinstance(row, dict) and isinstance(row.get("_key"), str):
                rows[row["_key"]] = row
        return rows

    def append(self, row: Mapping[str, Any]) -> None:
        line = json.dumps(row, sort_keys=False, default=str) + "\n"
        with open(self.path, "ab") as f:
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def _exclusive(dirpath: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: run unlocked rather than not at all
        yield
        return
    with open(dirpath / ".lock", "w") as f:
        try:
            # a POSIX record lock: owned by this process only (pool workers forked while it
            # is held do not inherit it), released by the kernel when the process dies
            fcntl.lockf(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise BadInput(
                f"{dirpath}: another run is writing this experiment's results; wait for it "
                "or pass a different --out"
            ) from None
        try:
            yield
        finally:
            fcntl.lockf(f.fileno(), fcntl.LOCK_UN)


# -- metadata -------------------------------------------------------------------------------

_GIT_COMMIT: str | None = None


def git_commit() -> str:
    """The commit of the aicache source being run (``git rev-parse HEAD`` in the package's
    directory, read once per process), or ``"unknown"`` outside a git checkout."""
    global _GIT_COMMIT
    if _GIT_COMMIT is None:
        try:
            out = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=Path(aicache.__file__).parent,
                capture_output=True, text=True, timeout=10, check=True,
            )
            _GIT_COMMIT = out.stdout.strip() or "unknown"
        except (OSError, subprocess.SubprocessError):
            _GIT_COMMIT = "unknown"
    return _GIT_COMMIT


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- selection ------------------------------------------------------------------------------


def select_cells(
    cells: Sequence[Mapping[str, Any]], select: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    """Cells whose params match every ``select`` entry (a value, or a list of values)."""
    if not select:
        return list(cells)
    known = {k for c in cells for k in c}
    for k in select:
        if k not in known:
            raise BadInput(
                f"cell filter {k!r} is not a parameter of this experiment; "
                f"valid: {', '.join(sorted(known))}"
            )
    wanted = {k: (list(v) if isinstance(v, (list, tuple, set, frozenset)) else [v])
              for k, v in select.items()}
    out = [c for c in cells if all(k in c and c[k] in vs for k, vs in wanted.items())]
    if not out:
        raise BadInput(f"cell filter {dict(select)} matches no cell; check the values")
    return out


# -- executors ------------------------------------------------------------------------------

Job = tuple[str, Mapping[str, Any], dict[str, Any]]  # (key, params, meta)


Results = Iterator[tuple[Job, dict[str, Any]]]


@contextlib.contextmanager
def _run_serial(run_cell: RunCell, jobs: Sequence[Job]) -> Iterator[Results]:
    yield ((job, execute_cell(run_cell, job[1], job[2])) for job in jobs)


@contextlib.contextmanager
def _run_pool(run_cell: RunCell, jobs: Sequence[Job], workers: int) -> Iterator[Results]:
    """Submit every job now, yield their rows as they finish.

    Submitting happens on entry, before the caller starts its progress-bar thread: the pool
    forks its workers on the first submit, and forking while another thread holds a lock
    is how pools deadlock.
    """
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent)
    try:
        futures: dict[Future[dict[str, Any]], Job] = {
            pool.submit(execute_cell, run_cell, job[1], job[2]): job for job in jobs
        }

        def collect() -> Results:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    job = futures[fut]
                    try:
                        row = fut.result()
                    except Exception as exc:  # noqa: BLE001 - a worker died (OOM, segfault)
                        row = _failed_row(job, exc)
                    yield job, row

        yield collect()
    finally:
        # On Ctrl-C (or any early exit) drop the queued cells instead of running them all;
        # the ones already stored are kept and a rerun resumes from there.
        pool.shutdown(wait=True, cancel_futures=True)


def _failed_row(job: Job, exc: BaseException) -> dict[str, Any]:
    row = dict(job[1])
    row["_error"] = f"{type(exc).__name__}: {exc}"
    row.update(job[2])
    row["_wall_s"] = 0.0
    row["_host"] = socket.gethostname()
    return row


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a ``HOST:PORT`` nobody listens on: ``ray.init`` would retry for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # "local", "auto", "ray://..." are Ray's to resolve
    host = host.removeprefix("ray://").strip("[]") or "127.0.0.1"
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise BadInput(
            f"--ray-address {address}: nothing answers there ({exc.strerror or exc}); start a "
            "cluster with `ray start --head` or pass --ray-address local"
        ) from None


@contextlib.contextmanager
def ray_session(address: str, workers: int | None) -> Iterator[Any]:
    try:
        import ray
    except ImportError:
        raise BadInput(
            f"--ray-address {address} needs Ray; install it with: pip install 'aicache[ray]'"
        ) from None
    if ray.is_initialized():
        # The caller (a notebook, a test) already connected; use that cluster, leave it up.
        yield ray
        return
    _probe(address)
    try:
        if address == "local":
            ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                     log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
        raise BadInput(
            f"cannot connect to Ray at {address!r} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
            "start a cluster with `ray start --head` or pass --ray-address local"
        ) from None
    try:
        yield ray
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _run_ray(run_cell: RunCell, jobs: Sequence[Job], ray: Any) -> Iterator[Results]:
    """Submit every job as a Ray task (1 CPU each), yield rows as tasks finish."""
    task = ray.remote(num_cpus=1, max_retries=0)(execute_cell)
    fn_ref = ray.put(run_cell)
    refs = {task.remote(fn_ref, job[1], job[2]): job for job in jobs}
    pending = list(refs)

    def collect() -> Results:
        nonlocal pending
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                job = refs[ref]
                try:
                    row = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a task's worker died
                    row = _failed_row(job, exc)
                yield job, row

    try:
        yield collect()
    finally:
        for ref in pending:  # an early exit: do not leave tasks running on the cluster
            with contextlib.suppress(Exception):
                ray.cancel(ref)


# -- results file ---------------------------------------------------------------------------


def write_results(rows: Sequence[Mapping[str, Any]], out_dir: Path) -> Path:
    """``results.parquet`` via pyarrow, else ``results.csv``. Columns are the union of all
    rows' keys; nested values are stored as JSON text; a column whose values pyarrow cannot
    type (mixed str/int) is stored as text rather than failing the run."""
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)

    def cell(v: Any) -> Any:
        return json.dumps(v) if isinstance(v, (list, dict)) else v

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        import csv

        path = out_dir / "results.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows:
                w.writerow({k: cell(r.get(k)) for k in cols})
        return path
    arrays = {}
    for k in cols:
        vals = [cell(r.get(k)) for r in rows]
        try:
            arrays[k] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            arrays[k] = pa.array([None if v is None else str(v) for v in vals], type=pa.string())
    path = out_dir / "results.parquet"
    pq.write_table(pa.table(arrays), path)
    return path


def read_run_meta(out_dir: Path) -> dict[str, Any]:
    p = Path(out_dir) / RUN_FILE
    if not p.exists():
        return {}
    try:
        meta = json.loads(p.read_text())
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _rows_from_results(exp_dir: Path) -> dict[str, dict[str, Any]]:
    """The rows of ``results.parquet`` (or ``results.csv``) keyed by ``_key``: what a
    published results folder keeps when its append log ``cells.jsonl`` is not shipped.

    The inverse of :func:`write_results` for what it writes: JSON text that encoded a list
    or dict is decoded, and a column a row did not have (null there) is left out of that
    row, so a section renders from these rows as from the stored cells."""
    rows: list[dict[str, Any]] = []
    pq_path, csv_path = exp_dir / "results.parquet", exp_dir / "results.csv"
    if pq_path.exists():
        try:
            import pyarrow.parquet as pq
        except ImportError:
            return {}
        rows = pq.read_table(pq_path).to_pylist()
    elif csv_path.exists():
        import csv

        with open(csv_path, newline="") as f:
            rows = [{k: v for k, v in r.items() if v != ""} for r in csv.DictReader(f)]
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        row: dict[str, Any] = {}
        for k, v in r.items():
            if v is None:
                continue
            if isinstance(v, str) and v[:1] in "[{":
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
            row[k] = v
        key = row.get("_key")
        if isinstance(key, str):
            out[key] = row
    return out


def load_rows(out: Path, name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of the last run of ``name`` under ``out`` (its grid, cell order) and its
    ``run.json``; without ``run.json`` every stored row. Without ``cells.jsonl`` (a
    published results folder) the rows come from the results file."""
    exp_dir = Path(out) / name
    stored = CellStore(exp_dir / CELLS_FILE).load()
    if not stored:
        stored = _rows_from_results(exp_dir)
    meta = read_run_meta(exp_dir)
    keys = meta.get("keys")
    if isinstance(keys, list):
        return [stored[k] for k in keys if k in stored], meta
    return list(stored.values()), meta


# -- the entry point ------------------------------------------------------------------------


def make_experiment(name: str) -> Experiment:
    """Instantiate the experiment registered as ``name`` (unknown → BadInput listing names)."""
    from aicache.experiments import EXPERIMENTS

    return EXPERIMENTS.get(name)()


def run_experiment(
    name: str,
    quick: bool = False,
    out: Path = Path("results"),
    ray_address: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    select: Mapping[str, Any] | None = None,
    stored_only: bool = False,
) -> RunResult:
    """Run the cells of experiment ``name`` that ``OUT/NAME/cells.jsonl`` lacks.

    ``stored_only``: run nothing; the results and report cover the (selected) cells that
    are already stored — a long grid's partial results, e.g. the sizes of a 1 TB run
    that have finished, reported while the rest is still to be run.

    ``workers``: process-pool size (default ``os.cpu_count()``; ``0`` runs the cells
    serially in this process, for debuggers and profilers); with Ray, the CPUs of a
    ``"local"`` cluster. ``ray_address``: ``None`` = process pool, ``"local"`` = start a
    Ray instance in-process, ``"auto"`` or ``HOST:PORT`` = connect to a running cluster.
    ``select``: keep only cells whose params match (``{"policy": ["lru", "fifo"]}``).
    """
    if workers is not None and workers < 0:
        raise BadInput(f"--workers {workers}: must be >= 0 (0 runs cells in-process)")
    exp = make_experiment(name)
    run_cell: RunCell = type(exp).run_cell
    cells = select_cells(exp.cells(quick), select)
    keys: list[str] = []
    seen: set[str] = set()
    for params in cells:
        json.dumps(params)  # a cell must be plain JSON: it is stored and hashed
        k = cell_key(name, params)
        if k in seen:
            raise ValueError(f"experiment {name!r} yields the same cell twice: {dict(params)}")
        seen.add(k)
        keys.append(k)

    exp_dir = Path(out) / name
    exp_dir.mkdir(parents=True, exist_ok=True)
    store = CellStore(exp_dir / CELLS_FILE)
    run_id = uuid.uuid4().hex[:12]
    started = _now_iso()
    t0 = time.perf_counter()
    with _exclusive(exp_dir):
        stored = store.load(repair=True)
        if stored_only and not stored:
            # a published folder ships results.parquet, not the append log: its rows are
            # the stored cells (without this the rewrite below would empty the results)
            stored = _rows_from_results(exp_dir)
        if stored_only:
            got = [k for k in keys if k in stored and "_error" not in stored[k]]
            if not got:
                # nothing of this grid is stored: report the other grid's stored cells (a
                # quick run reported without --quick) instead of an empty section
                other = [cell_key(name, p) for p in select_cells(exp.cells(not quick), select)]
                got = [k for k in other if k in stored and "_error" not in stored[k]]
                if got:
                    quick = not quick
            keys = got
            todo: list[tuple[str, Mapping[str, Any]]] = []
        else:
            todo = [(k, p) for k, p in zip(keys, cells)
                    if k not in stored or "_error" in stored[k]]
        base_meta = {"_experiment": name, "_version": aicache.__version__,
                     "_git_commit": git_commit(), "_run_id": run_id}
        jobs: list[Job] = [
            (k, p, {**base_meta, "_key": k, "_seed": p.get("seed")}) for k, p in todo
        ]
        n_workers = min(workers if workers is not None else (os.cpu_count() or 1), max(1, len(jobs)))
        ray_ctx: contextlib.AbstractContextManager[Any]
        if ray_address is not None and jobs:
            ray_ctx = ray_session(ray_address, workers)
            executor = f"ray({ray_address})"
        elif ray_address is not None:
            ray_ctx = contextlib.nullcontext(None)
            executor = f"ray({ray_address})"
        else:
            ray_ctx = contextlib.nullcontext(None)
            executor = "in-process" if n_workers == 0 else f"process-pool({n_workers})"
        from aicache.progress import progress as progress_bar

        with ray_ctx as ray:
            if ray is not None:
                execution = _run_ray(run_cell, jobs, ray)
            elif n_workers == 0 or not jobs:
                execution = _run_serial(run_cell, jobs)
            else:
                execution = _run_pool(run_cell, jobs, n_workers)
            with execution as results, \
                    progress_bar(len(jobs), f"{name}: cells", enabled=None if progress else False) as bar:
                for job, row in results:
                    store.append(row)
                    stored[job[0]] = row
                    bar.advance(1)
        rows = [stored[k] for k in keys]
        failed = sum(1 for r in rows if "_error" in r)
        results_path = write_results(rows, exp_dir)
        wall = time.perf_counter() - t0
        meta = {
            "experiment": name, "title": exp.title or name, "reproduces": exp.reproduces,
            "quick": quick, "select": dict(select) if select else None,
            "cells": len(keys), "ran": len(jobs), "skipped": len(keys) - len(jobs),
            "failed": failed, "executor": executor, "run_id": run_id,
            "started_at": started, "finished_at": _now_iso(), "wall_s": round(wall, 3),
            "cells_wall_s": round(sum(float(r.get("_wall_s") or 0.0) for r in rows), 3),
            "version": aicache.__version__, "git_commit": git_commit(),
            "host": socket.gethostname(), "full_wall_time": exp.full_wall_time,
            "results": results_path.name, "keys": keys,
        }
        tmp = exp_dir / (RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, exp_dir / RUN_FILE)
    return RunResult(name=name, out_dir=exp_dir, rows=rows, ran=len(jobs),
                     skipped=len(keys) - len(jobs), failed=failed, wall_s=wall,
                     results_path=results_path, executor=executor, run_id=run_id, meta=meta)


__all__ = [
    "CellStore",
    "RunResult",
    "execute_cell",
    "git_commit",
    "load_rows",
    "make_experiment",
    "ray_session",
    "run_experiment",
    "select_cells",
    "write_results",
]
