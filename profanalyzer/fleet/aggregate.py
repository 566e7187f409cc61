"""Aggregation of the per-file task outputs: per run the pod view (stragglers,
the slowest host's critical bucket), across runs the trend and its regressions."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import replace

from profanalyzer.core.stats import (
    STRAGGLER_MIN_MEMBERS,
    STRAGGLER_MIN_REL_SCALE,
    STRAGGLER_Z,
    modified_z,
)
from profanalyzer.core.version import __version__
from profanalyzer.fleet.paths import Expansion, RunInput, host_stem, natural
from profanalyzer.fleet.records import (
    DEFAULT_FLEET_OPTIONS,
    FLEET_SCHEMA_VERSION,
    CriticalBucket,
    Failure,
    FleetOptions,
    FleetResult,
    HostResult,
    Regression,
    RunResult,
    Trend,
    TrendRow,
)

#: Straggler hosts: modified z-score above STRAGGLER_Z (needs >= STRAGGLER_MIN_HOSTS analysed hosts).
STRAGGLER_MIN_HOSTS = STRAGGLER_MIN_MEMBERS
#: (The z-score scale is floored at STRAGGLER_MIN_REL_SCALE of the pod's median
#: step time, so hosts that agree to the picosecond do not turn noise into
#: stragglers; see profanalyzer.core.stats.)
#: Regression rule: value - baseline > max(K x noise, MIN_POINTS x baseline step time).
REGRESSION_K = 3.0
REGRESSION_MIN_POINTS = 0.01
REGRESSION_WINDOW = 7  # previous runs the baseline is taken over
REGRESSION_MIN_NOISE_RUNS = 3  # fewer previous runs: noise is 0 (the 1-point floor decides)



def bucket_names() -> tuple[str, ...]:
    """The buckets of the single-trace analysis, in their report order."""
    from profanalyzer.classify import BUCKETS

    return tuple(BUCKETS)


def _ms(ps: float) -> str:
    return f"{ps / 1e9:.3f} ms"


def host_result(path: str, out: dict, buckets: tuple[str, ...]) -> HostResult:
    host = host_stem(path)
    if not out.get("ok"):
        return HostResult(
            host, path, False, out.get("error") or "failed", (), out.get("sha256"), None, None, None, None, {},
            None, None, None, None, None, None, None, False, (), (), None, None,
        )
    r = out["record"]
    b = {k: float(r["buckets"].get(k, 0.0)) for k in buckets}
    idle = float(r.get("idle_ps") or 0.0)
    exp = float(r.get("exposed_comm_ps") or 0.0)
    recs = r.get("recommendations") or []
    top = None
    if recs:
        top = f"{recs[0]['code']} {recs[0]['title']} (~{recs[0]['saving_fraction'] * 100:.1f}% of the step)"
    return HostResult(
        host=host,
        path=path,
        ok=True,
        error=None,
        hostnames=tuple(r.get("hostnames") or ()),
        sha256=out.get("sha256"),
        tensorcores=int(r.get("tensorcores") or 0),
        steps_kept=int(r["steps"]["kept"]),
        step_ps=float(r["steps"]["mean_ps"]),
        step_median_ps=float(r["steps"]["median_ps"]),
        buckets=b,
        idle_ps=idle,
        exposed_comm_ps=exp,
        wait_ps=idle + exp,
        remat_ps=float(r.get("remat_ps") or 0.0),
        mfu=r.get("mfu"),
        step_z=None,
        wait_z=None,
        straggler=False,
        straggler_reasons=(),
        straggler_cores=tuple(r.get("straggler_cores") or ()),
        top_recommendation=top,
        workload=r.get("workload"),
    )


def _mode(values: Iterable[str | None]) -> str | None:
    vals = [v for v in values if v]
    if not vals:
        return None
    counts: dict[str, int] = {}
    for v in vals:
        counts[v] = counts.get(v, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def _measured(h: HostResult) -> tuple[float, float]:
    """(step, wait) of an analysed host: host_result sets both when it is ok."""
    if h.step_ps is None or h.wait_ps is None:
        raise ValueError(f"{h.host}: analysed, but without a step or wait time")
    return h.step_ps, h.wait_ps


def pod_view(run: RunInput, outputs: Sequence[dict], buckets: tuple[str, ...]) -> RunResult:
    """Per-run aggregation: hosts, stragglers, the slowest host's critical bucket."""
    hosts = [host_result(p, o, buckets) for p, o in zip(run.files, outputs, strict=True)]
    ok = [h for h in hosts if h.ok]
    n_ok = len(ok)
    if not ok:
        return RunResult(
            run.name, run.path, run.time, run.time_source, len(hosts), 0, len(hosts), None, None, None, {}, None, None, None, (),
            "skipped: no host file of this run could be analysed", None, None, tuple(hosts),
        )
    measured = [_measured(h) for h in ok]
    steps = [step for step, _ in measured]
    waits = [wait for _, wait in measured]
    med_step = statistics.median(steps)
    floor = STRAGGLER_MIN_REL_SCALE * med_step
    stragglers: list[str] = []
    if n_ok >= STRAGGLER_MIN_HOSTS:
        zs = modified_z(steps, floor)
        zw = modified_z(waits, floor)
        med_wait = statistics.median(waits)
        new: dict[int, HostResult] = {}
        for h, step, wait, z1, z2 in zip(ok, steps, waits, zs, zw, strict=True):
            reasons = []
            if z1 > STRAGGLER_Z:
                reasons.append(f"step time {_ms(step)} is {_ms(step - med_step)} above the pod median {_ms(med_step)} (z {z1:.1f})")
            if z2 < -STRAGGLER_Z:
                reasons.append(
                    f"idle + exposed communication {_ms(wait)} is {_ms(med_wait - wait)} below the pod median "
                    f"{_ms(med_wait)} (z {z2:.1f}): the other hosts wait for it"
                )
            elif z2 > STRAGGLER_Z:
                reasons.append(
                    f"idle + exposed communication {_ms(wait)} is {_ms(wait - med_wait)} above the pod median "
                    f"{_ms(med_wait)} (z {z2:.1f}): slow links, input pipeline or host-side stalls"
                )
            new[id(h)] = replace(h, step_z=z1, wait_z=z2, straggler=bool(reasons), straggler_reasons=tuple(reasons))
            if reasons:
                stragglers.append(h.host)
        hosts = [new.get(id(h), h) for h in hosts]
        check = (
            f"modified z-score of step time and of idle + exposed communication over {n_ok} hosts; "
            f"straggler when step z > {STRAGGLER_Z:g} or |wait z| > {STRAGGLER_Z:g}"
        )
    else:
        check = f"skipped: {n_ok} analysed host{'s' if n_ok != 1 else ''} (needs >= {STRAGGLER_MIN_HOSTS})"
    ok = [h for h in hosts if h.ok]  # the same hosts, in the same order, with their z-scores
    mean_b = {b: statistics.fmean(h.buckets[b] for h in ok) for b in buckets}
    slowest_step, slowest = max(zip(steps, ok, strict=True), key=lambda sh: (sh[0], natural(sh[1].host)))
    med_b = {b: statistics.median(h.buckets[b] for h in ok) for b in buckets}
    excess = {b: slowest.buckets[b] - med_b[b] for b in buckets}
    step_excess = slowest_step - med_step
    crit_b = max(buckets, key=lambda b: (excess[b], -buckets.index(b)))
    if n_ok > 1 and step_excess > floor and excess[crit_b] > 0:
        reason = (
            f"{slowest.host} is {_ms(step_excess)} per step slower than the pod median; {crit_b} is "
            f"{_ms(excess[crit_b])} above its pod median, the largest excess of any bucket"
        )
    else:
        crit_b = max(buckets, key=lambda b: (slowest.buckets[b], -buckets.index(b)))
        reason = (
            f"{crit_b} is the largest bucket of {slowest.host} ({_ms(slowest.buckets[crit_b])} per step)"
            + (
                f"; no host is more than {STRAGGLER_MIN_REL_SCALE:.1%} slower than the pod median"
                if n_ok > 1
                else ""
            )
        )
    critical = CriticalBucket(slowest.host, crit_b, slowest.buckets[crit_b], med_b[crit_b], excess[crit_b], step_excess, reason)
    return RunResult(
        run=run.name,
        path=run.path,
        time=run.time,
        time_source=run.time_source,
        hosts_total=len(hosts),
        hosts_ok=n_ok,
        hosts_failed=len(hosts) - n_ok,
        step_ps=statistics.fmean(steps),
        step_median_ps=med_step,
        step_max_ps=slowest_step,
        buckets=mean_b,
        wait_ps=statistics.fmean(waits),
        slowest_host=slowest.host,
        critical=critical,
        stragglers=tuple(stragglers),
        straggler_check=check,
        workload=_mode(h.workload for h in ok),
        chip=_mode(o["record"].get("chip") for o in outputs if o.get("ok")),
        hosts=tuple(hosts),
    )


def trend(runs: Sequence[RunResult], buckets: tuple[str, ...]) -> Trend:
    """Step time and every bucket per run (runs already sorted by time), and regressions.

    Rule, per metric, for each run with analysed hosts: baseline = median of the
    metric over the up to REGRESSION_WINDOW previous such runs; noise = 1.4826 x
    MAD of those (0 with fewer than REGRESSION_MIN_NOISE_RUNS); the run regressed
    when value - baseline > max(REGRESSION_K x noise, REGRESSION_MIN_POINTS x
    the baseline step time).
    """
    metrics = ("step_time", *buckets)
    rows: list[TrendRow] = []
    history: list[dict[str, float]] = []
    regs: list[Regression] = []
    first: dict[str, Regression] = {}
    for r in runs:
        if r.hosts_ok == 0 or r.step_ps is None:
            rows.append(TrendRow(r.run, r.time, 0, {m: None for m in metrics}, ()))
            continue
        vals = {"step_time": r.step_ps, **{b: r.buckets[b] for b in buckets}}
        flagged = []
        prev = history[-REGRESSION_WINDOW:]
        if prev:
            base_step = statistics.median(p["step_time"] for p in prev)
            for m in metrics:
                pv = [p[m] for p in prev]
                base = statistics.median(pv)
                noise = 1.4826 * statistics.median([abs(v - base) for v in pv]) if len(pv) >= REGRESSION_MIN_NOISE_RUNS else 0.0
                thr = max(REGRESSION_K * noise, REGRESSION_MIN_POINTS * base_step)
                delta = vals[m] - base
                if delta > thr:
                    reg = Regression(m, r.run, vals[m], base, delta, thr, noise, len(pv))
                    regs.append(reg)
                    flagged.append(m)
                    first.setdefault(m, reg)
        history.append(vals)
        rows.append(TrendRow(r.run, r.time, r.hosts_ok, vals, tuple(flagged)))
    rule = (
        f"per metric (step time, each bucket; mean over a run's analysed hosts, ps per step): a run regressed when "
        f"its value exceeds the median of the previous {REGRESSION_WINDOW} runs by more than max({REGRESSION_K:g} x noise, "
        f"{REGRESSION_MIN_POINTS * 100:g}% of the baseline step time); noise = 1.4826 x MAD of those runs "
        f"(0 with fewer than {REGRESSION_MIN_NOISE_RUNS})"
    )
    return Trend(metrics, tuple(rows), tuple(regs), first, rule)


DEFINITIONS = {
    "step_time": "per host: mean of its kept steps, averaged over its TensorCores (the single-trace analysis); per run: mean over analysed hosts",
    "buckets": "exclusive time per step (ps) of each bucket, as the single-trace analysis attributes it; per run: mean over analysed hosts",
    "wait": "idle + exposed communication per step: the time a host's TensorCores compute nothing",
    "straggler": (
        f"modified z-score 0.6745 (x - median) / max(MAD, {STRAGGLER_MIN_REL_SCALE:.1%} of the pod's median step time) over the "
        f"run's analysed hosts (>= {STRAGGLER_MIN_HOSTS}); a host is a straggler when its step-time z > {STRAGGLER_Z:g} "
        f"or its wait z is beyond +/-{STRAGGLER_Z:g} (below: the others wait for it; above: it waits on links or input)"
    ),
    "critical_bucket": (
        f"for the run's slowest host: the bucket with the largest excess over the pod's per-bucket median when the host is "
        f"more than {STRAGGLER_MIN_REL_SCALE:.1%} slower than the pod median step, else its largest bucket"
    ),
    "calibration": (
        "per rule, over consecutive runs of the same chip and workload: a rule whose finding vanished or shrank (not only because "
        "another lever shrank the pool it claims) is credited with the run's step change, shared in proportion to the predictions "
        "when several were pulled; ratio = credited / predicted; median, range and count per rule"
    ),
    "run_time": "the run folder name when it is a YYYY_MM_DD_HH_MM_SS timestamp (read as UTC), else the folder's modification time",
    "cache": (
        "per-file records (or the InputError of an unreadable file) stored by sha256(file bytes) + profanalyzer version "
        "and code fingerprint + record version + options in the user cache dir; hits: files answered from it, "
        "analysed: the others"
    ),
}


def aggregate_fleet(
    exp: Expansion,
    outputs: Sequence[dict],
    *,
    inputs: Sequence[str] = (),
    options: FleetOptions = DEFAULT_FLEET_OPTIONS,
    use_cache: bool = True,
) -> FleetResult:
    """Build the FleetResult from the expansion and the per-file task outputs (in ``exp.files`` order)."""
    buckets = bucket_names()
    if len(outputs) != len(exp.files):
        raise ValueError("one output per expanded host file expected")
    by_file = dict(zip(exp.files, outputs, strict=True))
    runs = tuple(pod_view(r, [by_file[f] for f in r.files], buckets) for r in exp.runs)
    failures = list(exp.failures)
    for r in exp.runs:
        for f in r.files:
            o = by_file[f]
            if not o.get("ok"):
                failures.append(Failure(f, r.name, host_stem(f), o.get("error") or "failed", o.get("error_type") or "Error"))
    n_ok = sum(1 for o in outputs if o.get("ok"))
    hits = sum(1 for o in outputs if o.get("cached"))
    return FleetResult(
        schema_version=FLEET_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=tuple(inputs),
        options=options.to_dict(),
        files=len(outputs),
        files_ok=n_ok,
        files_failed=len(outputs) - n_ok,
        runs=runs,
        trend=trend(runs, buckets),
        failures=tuple(failures),
        cache={"enabled": bool(use_cache), "hits": hits, "analysed": len(outputs) - hits},
        definitions=dict(DEFINITIONS),
        calibration=calibration(runs, [[by_file[f] for f in r.files] for r in exp.runs]),
    )


def calibration(runs: Sequence[RunResult], outputs: Sequence[Sequence[dict]]) -> tuple:
    """Per rule, predicted vs observed over consecutive runs (profanalyzer.findings.verify.calibrate):
    a run's step is the mean over its analysed hosts, a rule's saving the mean over them
    (0 on a host without the finding)."""
    from profanalyzer.findings.verify import RunPoint, calibrate

    points = []
    for r, outs in zip(runs, outputs, strict=True):
        recs = [o["record"] for o in outs if o.get("ok") and "findings" in o.get("record", {})]
        if r.step_ps is None or not recs:
            continue
        sav: dict[str, tuple[str, float]] = {}
        rates: dict[str, dict[str, float]] = {}
        for rec in recs:
            for code, x in sorted(rec["findings"].items()):
                lever, ps = sav.get(code, (x["lever"], 0.0))
                sav[code] = (lever, ps + float(x["saving_ps"]) / len(recs))
                rates.setdefault(code, dict(x.get("rates") or {}))
        points.append(RunPoint(r.run, r.chip or "", r.workload, float(r.step_ps), sav, rates))
    return calibrate(points)
