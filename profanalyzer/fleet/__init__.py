"""Fleet scale: many hosts and many runs, analysed on a Dask cluster.

    from profanalyzer.fleet import run_fleet
    result = run_fleet(["gs://bucket/nightly/", "logs/"], workers=8)   # -> FleetResult
    result.to_dict()                                                   # deterministic JSON

Pipeline:

1. **Expand** PATHS (:func:`expand_paths`): run folders (``<run>/<host>.xplane.pb``),
   log dirs (every ``**/plugins/profile/<run>/``, not only the newest), single
   host files and globs. Local paths always work; URLs (``gs://``, ``s3://``,
   ``file://`` ...) go through fsspec when it (and the protocol's package, e.g.
   gcsfs) is installed. fsspec is imported lazily, only for URLs.
2. **Analyse** every host file as one task (:func:`analyse_host_file`): the full
   single-file analysis (:func:`profanalyzer.analyze.analysis.analyze` plus the rules)
   runs where the task runs, and only a small JSON record (a few KB: step time,
   buckets, idle and exposed communication, top recommendations) comes back.
   The trace never travels. Tasks run on a Dask cluster: a
   ``dask.distributed.LocalCluster`` (processes, one single-threaded worker per
   core) or the cluster of a given scheduler address; ``workers=0`` runs them
   in this process without Dask (the sequential reference path).
3. **Cache**: each record (or the InputError of a file that cannot be read) is
   stored under a content address (sha256 of the file bytes + profanalyzer
   version and code fingerprint + record version + options) in the user cache
   dir (``$PROFANALYZER_CACHE_DIR``, else ``$XDG_CACHE_HOME/profanalyzer``, else
   ``~/.cache/profanalyzer``), never next to the traces. A local run hashes and
   looks up local files in this process first (threads), so an unchanged fleet
   starts no cluster; tasks on a remote cluster use their workers' cache.
4. **Isolate failures**: a missing or corrupt host file becomes a failure entry
   (its one-line :class:`~profanalyzer.core.errors.ProfanalyzerError` message); the
   other files complete.
5. **Aggregate** (:func:`aggregate`): per run the pod view (per-host step time and
   buckets, straggler hosts by modified z-score, the slowest host's critical
   bucket); across runs a trend of step time and every bucket, sorted by run
   time, with the first run where each regressed.

Modules, each importing only those listed before it:

    records    FleetOptions, the per-file record (host_record), Failure, result types
    cache      the per-file record cache (RecordCache, default_cache_dir)
    paths      PATHS -> runs -> host files; local paths and fsspec URLs
    aggregate  pod view, stragglers, critical bucket, trend, regressions
    execute    the per-file task, sequential or on Dask; run_fleet

Nothing here imports Dask at module level: the single-trace command must not
pay for it (``dask`` is the optional ``[fleet]`` extra).
"""

from __future__ import annotations

from profanalyzer.core.vocab import XPLANE_SUFFIXES
from profanalyzer.fleet.aggregate import (
    DEFINITIONS,
    REGRESSION_K,
    REGRESSION_MIN_NOISE_RUNS,
    REGRESSION_MIN_POINTS,
    REGRESSION_WINDOW,
    STRAGGLER_MIN_HOSTS,
    STRAGGLER_Z,
    aggregate_fleet,
    bucket_names,
    pod_view,
    trend,
)
from profanalyzer.fleet.cache import (
    PATH_MARK,
    RecordCache,
    code_fingerprint,
    default_cache_dir,
)
from profanalyzer.fleet.execute import (
    FleetDependencyError,
    Progress,
    analyse_dask,
    analyse_host_file,
    analyse_sequential,
    probe_cache,
    run_fleet,
    start_local_cluster,
)
from profanalyzer.fleet.paths import (
    RUN_NAME_RE,
    Expansion,
    RunInput,
    expand_paths,
    host_stem,
    run_time,
)
from profanalyzer.fleet.records import (
    FLEET_SCHEMA_VERSION,
    RECORD_VERSION,
    CriticalBucket,
    Failure,
    FleetOptions,
    FleetResult,
    HostResult,
    Regression,
    RunResult,
    Trend,
    TrendRow,
    host_record,
)
from profanalyzer.read.sources import is_url

__all__ = [
    "DEFINITIONS", "FLEET_SCHEMA_VERSION", "PATH_MARK", "RECORD_VERSION", "REGRESSION_K", "REGRESSION_MIN_NOISE_RUNS",
    "REGRESSION_MIN_POINTS", "REGRESSION_WINDOW", "RUN_NAME_RE", "STRAGGLER_MIN_HOSTS", "STRAGGLER_Z", "XPLANE_SUFFIXES",
    "CriticalBucket", "Expansion", "Failure", "FleetDependencyError", "FleetOptions", "FleetResult", "HostResult",
    "Progress", "RecordCache", "Regression", "RunInput", "RunResult", "Trend", "TrendRow",
    "aggregate_fleet", "analyse_dask", "analyse_host_file", "analyse_sequential", "bucket_names", "code_fingerprint",
    "default_cache_dir", "expand_paths", "host_record", "host_stem", "is_url", "pod_view", "probe_cache", "run_fleet",
    "run_time", "start_local_cluster", "trend",
]
