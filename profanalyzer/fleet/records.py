"""The fleet's records and result types (JSON types, frozen dataclasses).

* :func:`host_record`: the small per-file record a task sends back (the only
  code that reads the single-trace analysis document);
* :class:`Failure`: a host file or PATH that could not be analysed;
* :class:`HostResult`, :class:`RunResult`, :class:`Trend`, :class:`FleetResult`:
  what :mod:`profanalyzer.fleet.aggregate` builds from the records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from profanalyzer.core.errors import ProfanalyzerError
from profanalyzer.findings.verify import CalibrationRow
from profanalyzer.model.records import to_jsonable

FLEET_SCHEMA_VERSION = 1
#: Version of the per-file record layout (part of the cache key).
RECORD_VERSION = 2


@dataclass(frozen=True)
class FleetOptions:
    """Options of the per-file analysis; all of them are part of the cache key."""

    chip: str | None = None

    def to_dict(self) -> dict:
        return {"chip": self.chip.lower() if self.chip else None}


#: The defaults, one shared instance (frozen) for every `options=` default.
DEFAULT_FLEET_OPTIONS = FleetOptions()


@dataclass(frozen=True)
class Failure:
    """A host file (or a PATH) that could not be analysed, with its one-line error."""

    path: str
    run: str | None
    host: str | None
    error: str
    error_type: str


def failure_from(path: str, err: BaseException, run: str | None = None, host: str | None = None) -> Failure:
    if isinstance(err, ProfanalyzerError):
        msg = str(err)
    else:
        msg = f"internal error: {type(err).__name__}: {err}"
    return Failure(path=path, run=run, host=host, error=one_line(msg), error_type=type(err).__name__)


def one_line(text: str, limit: int = 500) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _findings_of(a, f) -> dict:
    from profanalyzer.findings.verify import point_of

    p = point_of("", a, f)
    return {code: {"lever": lever, "saving_ps": ps, "rates": dict(p.rates.get(code, {}))} for code, (lever, ps) in p.savings.items()}


def host_record(analysis, findings) -> dict:
    """The small per-file record (JSON types only) the fleet aggregates, read
    from the typed Analysis and Findings (numbers rounded as the JSON rounds them)."""
    a = analysis
    st = a.steps.step_time_ps
    recs = findings.recommendations if findings is not None else ()
    workload = findings.workload if findings is not None else None
    buckets = {b: v.ps for b, v in a.breakdown.items()}
    rec = to_jsonable({
        "record_version": RECORD_VERSION,
        "tool_version": a.tool_version,
        "hostnames": list(a.hosts),
        "chip": a.hardware.name,
        "chip_source": a.chip_source,
        "tensorcores": a.tensorcores,
        "sparsecores": a.sparsecores,
        "steps": {
            "count": a.steps.count,
            "kept": a.steps.kept,
            "source": a.steps.source,
            "mean_ps": st["mean"],
            "median_ps": st["median"],
            "min_ps": st["min"],
            "max_ps": st["max"],
        },
        "buckets": buckets,
        "idle_ps": buckets.get("idle", 0.0),
        "exposed_comm_ps": a.communication.exposed_total_ps or 0.0,
        "remat_ps": a.remat.ps,
        "mfu": a.utilisation.mfu,
        "straggler_cores": [c.core for c in a.per_core if c.straggler],
        "workload": workload.row if workload is not None else None,
        "recommendations": [
            {
                "code": r.code,
                "lever": r.lever,
                "title": r.title,
                "severity": r.severity,
                "saving_fraction": r.estimated_saving_fraction,
            }
            for r in recs[:3]
        ],
        "notes": list(a.notes),
        # every finding's saving and claim rates: calibration across runs (profanalyzer.findings.verify)
        "findings": _findings_of(a, findings) if findings is not None else {},
    })
    # JSON round trip: a fresh record and a cached one are the same objects.
    return json.loads(json.dumps(rec, sort_keys=True))


@dataclass(frozen=True)
class HostResult:
    host: str  # file stem (XProf names host files <host>.xplane.pb)
    path: str
    ok: bool
    error: str | None
    hostnames: tuple[str, ...]  # host name(s) inside the file
    sha256: str | None
    tensorcores: int | None
    steps_kept: int | None
    step_ps: float | None  # mean per kept step, averaged over the host's TensorCores
    step_median_ps: float | None
    buckets: Mapping[str, float]  # ps per step
    idle_ps: float | None
    exposed_comm_ps: float | None
    wait_ps: float | None  # idle + exposed communication
    remat_ps: float | None
    mfu: float | None
    step_z: float | None
    wait_z: float | None
    straggler: bool
    straggler_reasons: tuple[str, ...]
    straggler_cores: tuple[str, ...]  # straggler TensorCores inside this host (single-file rule)
    top_recommendation: str | None
    workload: str | None


@dataclass(frozen=True)
class CriticalBucket:
    host: str  # the slowest host
    bucket: str
    host_ps: float
    pod_median_ps: float
    excess_ps: float  # host - pod median, for this bucket
    step_excess_ps: float  # host step - pod median step
    reason: str


@dataclass(frozen=True)
class RunResult:
    run: str
    path: str
    time: str | None
    time_source: str
    hosts_total: int
    hosts_ok: int
    hosts_failed: int
    step_ps: float | None  # mean over analysed hosts
    step_median_ps: float | None  # median over analysed hosts
    step_max_ps: float | None
    buckets: Mapping[str, float]  # mean over analysed hosts, ps per step
    wait_ps: float | None
    slowest_host: str | None
    critical: CriticalBucket | None
    stragglers: tuple[str, ...]
    straggler_check: str
    workload: str | None
    chip: str | None
    hosts: tuple[HostResult, ...]


@dataclass(frozen=True)
class Regression:
    metric: str  # step_time or a bucket
    run: str
    value_ps: float
    baseline_ps: float  # median over the previous runs (window)
    delta_ps: float
    threshold_ps: float
    noise_ps: float
    baseline_runs: int


@dataclass(frozen=True)
class TrendRow:
    run: str
    time: str | None
    hosts_ok: int
    values: Mapping[str, float | None]  # metric -> ps per step (None: no analysed host)
    regressed: tuple[str, ...]  # metrics that regressed at this run


@dataclass(frozen=True)
class Trend:
    metrics: tuple[str, ...]
    rows: tuple[TrendRow, ...]  # sorted by run time
    regressions: tuple[Regression, ...]
    first_regression: Mapping[str, Regression]  # metric -> first run where it regressed
    rule: str


@dataclass(frozen=True)
class FleetResult:
    schema_version: int
    tool_version: str
    inputs: tuple[str, ...]
    options: Mapping[str, object]
    files: int
    files_ok: int
    files_failed: int
    runs: tuple[RunResult, ...]  # sorted by run time
    trend: Trend
    failures: tuple[Failure, ...]
    cache: Mapping[str, object]
    definitions: Mapping[str, str]
    calibration: tuple[CalibrationRow, ...] = ()  # per rule: predicted vs observed over consecutive runs

    def to_dict(self) -> dict:
        return to_jsonable(self)

    @property
    def stragglers(self) -> tuple[tuple[str, str], ...]:
        return tuple((r.run, h) for r in self.runs for h in r.stragglers)


# ---------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------
