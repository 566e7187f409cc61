"""Running the per-file tasks: in this process, or on a Dask cluster (a local
one or a scheduler's). Dask is imported only when a cluster is used."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence

from profanalyzer.core.errors import InputError, ProfanalyzerError
from profanalyzer.fleet.aggregate import aggregate_fleet
from profanalyzer.fleet.cache import (
    PATH_MARK,
    RecordCache,
    default_cache_dir,
    from_cache,
)
from profanalyzer.fleet.paths import expand_paths, fetch_remote, sha256_local
from profanalyzer.fleet.records import (
    DEFAULT_FLEET_OPTIONS,
    FleetOptions,
    FleetResult,
    failure_from,
    host_record,
    one_line,
)
from profanalyzer.read.sources import is_url


def analyse_host_file(
    path: str,
    options: FleetOptions = DEFAULT_FLEET_OPTIONS,
    cache_dir: str | None = None,
    use_cache: bool = True,
    sha256: str | None = None,
) -> dict:
    """One task: analyse one host file (local path or URL) and return a small dict.

    ``{"path", "ok", "cached", "sha256", "record", "error", "error_type"}``. Never
    raises for a bad file: the error is in the dict (one line). ``cache_dir``
    None: the default user cache dir of the machine the task runs on.
    ``sha256``: the local file's hash when the caller already computed it.
    """
    out = {"path": path, "ok": False, "cached": False, "sha256": None, "record": None, "error": None, "error_type": None}
    tmp = None
    try:
        if is_url(path):
            tmp, sha = fetch_remote(path)
            local = tmp
        else:
            sha = sha256 or sha256_local(path)
            local = path
        out["sha256"] = sha
        cache = RecordCache(cache_dir) if use_cache else None
        key = RecordCache.key(sha, options) if cache else ""  # "": no cache, so never looked up or stored
        hit = cache.get(key) if cache else None
        if hit is not None:
            return from_cache(path, sha, hit)
        from profanalyzer.pipeline.run import RunOptions, run

        try:
            r = run(local, RunOptions(chip=options.chip))
        except InputError as e:  # the bytes cannot be analysed: remember that too
            if cache:
                msg = failure_from(path, e).error.replace(local, PATH_MARK)
                cache.put(key, sha, failure={"error": msg, "error_type": type(e).__name__})
            raise
        rec = host_record(r.analysis, r.findings)
        if cache:
            cache.put(key, sha, record=rec)
        out.update(ok=True, record=rec)
    except Exception as e:  # isolation: any failure of one file is that file's result
        f = failure_from(path, e)
        msg = f.error.replace(tmp, path) if tmp else f.error
        out.update(ok=False, error=msg, error_type=f.error_type)
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return out


class FleetDependencyError(ProfanalyzerError):
    """Dask is not installed (the optional [fleet] extra)."""


Progress = Callable[[int, int], None]


def _task(path: str, sha256: str | None, options: FleetOptions, cache_dir: str | None, use_cache: bool) -> dict:
    return analyse_host_file(path, options, cache_dir, use_cache, sha256)


def probe_cache(files: Sequence[str], options: FleetOptions, cache_dir: str | None, threads: int | None = None) -> list[tuple[str | None, dict | None]]:
    """Hash the local files (threads: hashlib releases the GIL) and look their
    records up in the cache, here, before any cluster starts: per file
    ``(sha256, task output)``; the output is None on a miss, the hash None for
    URLs and unreadable files (their task fetches or reports them)."""
    from concurrent.futures import ThreadPoolExecutor

    cache = RecordCache(cache_dir)

    def one(f: str) -> tuple[str | None, dict | None]:
        if is_url(f):
            return None, None
        try:
            sha = sha256_local(f)
        except ProfanalyzerError:
            return None, None
        hit = cache.get(RecordCache.key(sha, options))
        return sha, (from_cache(f, sha, hit) if hit is not None else None)

    with ThreadPoolExecutor(max_workers=threads or min(32, (os.cpu_count() or 1) * 2)) as ex:
        return list(ex.map(one, files))


def analyse_sequential(
    files: Sequence[str],
    options: FleetOptions,
    cache_dir: str | None,
    use_cache: bool,
    progress: Progress | None = None,
    shas: Sequence[str | None] | None = None,
) -> list[dict]:
    out = []
    shas = shas or [None] * len(files)
    for i, (f, sha) in enumerate(zip(files, shas, strict=True)):
        out.append(analyse_host_file(f, options, cache_dir, use_cache, sha))
        if progress:
            progress(i + 1, len(files))
    return out


def start_local_cluster(n_workers: int, memory_limit: str | float | int | None = "auto"):
    """A ``LocalCluster`` of ``n_workers`` single-threaded worker processes.

    Two departures from Dask's defaults, both for this workload (one big numpy
    analysis per task):

    * glibc's dynamic malloc thresholds are kept: Dask spawns workers with
      ``MALLOC_TRIM_THRESHOLD_=65536``, which fixes the mmap threshold too, so
      every large temporary array is mmap'd, faulted in and unmapped again
      (~10x page faults, the analysis ~30% slower). A value the user set in
      the environment is kept.
    * this process's environment is left as it was: Dask's nannies write their
      pre-spawn variables (``MALLOC_TRIM_THRESHOLD_``, ``OMP_NUM_THREADS``,
      ``PYTHONHASHSEED``, ...) into ``os.environ`` of the process that starts them.

    The dashboard binds a free port (no clash with a running cluster).
    """
    import dask
    from dask.distributed import LocalCluster

    saved = dict(os.environ)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            return LocalCluster(
                n_workers=n_workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=logging.ERROR,
                memory_limit=memory_limit,
            )
    finally:
        for k in set(os.environ) - set(saved):
            del os.environ[k]
        for k, v in saved.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def analyse_dask(
    files: Sequence[str],
    options: FleetOptions,
    cache_dir: str | None,
    use_cache: bool,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    memory_limit: str | float | int | None = "auto",
    shas: Sequence[str | None] | None = None,
) -> list[dict]:
    """Map :func:`analyse_host_file` over ``files`` on a Dask cluster; results in input order."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise FleetDependencyError(
            "the fleet command needs Dask: pip install 'profanalyzer[fleet]' (or dask[distributed]); "
            "--workers 0 analyses in this process without it"
        ) from None
    if not files:
        return []
    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as e:
            raise InputError(f"cannot connect to the Dask scheduler at {scheduler}: {e}") from None
    else:
        n = workers or os.cpu_count() or 1
        n = max(1, min(n, len(files)))
        cluster = start_local_cluster(n, memory_limit=memory_limit)
        client = Client(cluster)
    try:
        futures = client.map(
            _task,
            list(files),
            list(shas or [None] * len(files)),
            options=options,
            cache_dir=cache_dir,
            use_cache=use_cache,
            pure=False,
        )
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[dict | None] = [None] * len(files)
        done = 0
        for fut in as_completed(futures):
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except Exception as e:  # worker died (KilledWorker), lost connection, ...
                results[i] = {
                    "path": files[i], "ok": False, "cached": False, "sha256": None, "record": None,
                    "error": one_line(f"{files[i]}: the Dask task failed: {type(e).__name__}: {e}"),
                    "error_type": type(e).__name__,
                }
            done += 1
            if progress:
                progress(done, len(files))
            fut.release()
        return results  # type: ignore[return-value]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_fleet(
    paths: Iterable[str],
    *,
    options: FleetOptions = DEFAULT_FLEET_OPTIONS,
    scheduler: str | None = None,
    workers: int | None = None,
    use_cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> FleetResult:
    """Expand, analyse (``workers=0``: in this process, no Dask; else on a Dask
    cluster: ``scheduler`` address or a local one with ``workers`` processes,
    default one per core) and aggregate.

    Raises InputError when no PATH yields a host file.
    """
    paths = [str(p) for p in paths]
    exp = expand_paths(paths)
    files = exp.files
    if not files:
        msgs = "; ".join(f.error for f in exp.failures[:3]) or "no PATHS given"
        raise InputError(f"no host files to analyse: {msgs}")
    # A local run resolves the cache dir here (same machine); a remote cluster's
    # workers use their own user cache dir unless one is given.
    remote = bool(scheduler) and workers != 0
    if cache_dir is not None:
        cdir: str | None = str(cache_dir)
    elif remote:
        cdir = None
    else:
        cdir = str(default_cache_dir())
    outputs: list[dict | None] = [None] * len(files)
    shas: list[str | None] = [None] * len(files)
    if use_cache and not remote:
        # Local run: cache hits are found here, and a rerun of an unchanged fleet
        # starts no cluster at all. (A remote cluster's workers probe their own cache.)
        for i, (sha, out) in enumerate(probe_cache(files, options, cdir)):
            shas[i], outputs[i] = sha, out
    todo = [i for i, o in enumerate(outputs) if o is None]
    done = len(files) - len(todo)
    if progress and done:
        progress(done, len(files))
    if todo:
        sub, sub_shas = [files[i] for i in todo], [shas[i] for i in todo]
        step = (lambda k, n: progress(done + k, len(files))) if progress else None
        if workers == 0:
            res = analyse_sequential(sub, options, cdir, use_cache, step, sub_shas)
        else:
            res = analyse_dask(sub, options, cdir, use_cache, scheduler=scheduler, workers=workers, progress=step, shas=sub_shas)
        for i, r in zip(todo, res, strict=True):
            outputs[i] = r
    return aggregate_fleet(exp, outputs, inputs=paths, options=options, use_cache=use_cache)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Aggregation: result types
# ---------------------------------------------------------------------------
