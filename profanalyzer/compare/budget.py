"""Performance budgets for CI: load, validate, evaluate.

    load_budget(path) -> Budget          # profanalyze.toml, or pyproject.toml [tool.profanalyze]
    evaluate(budget, doc, baseline_doc=None) -> CheckReport

The budget file (TOML; keys are validated, an unknown key is an error that
lists the valid ones)::

    baseline = "baselines/dense_short_fsdp.json"  # trace or `analyze --json` file, relative to this file
    fail_on = ["SC001", "SH"]                      # finding codes (or code prefixes) that fail the check

    [budget]                                       # absolute limits: metric = { max = N } and/or { min = N }
    step_time_ms = { max = 95.0 }
    mfu = { min = 0.55 }
    remat.fraction = { max = 0.15 }
    exposed.all_gather.fraction = { max = 0.03 }

    [max_regression]                               # against the baseline: "N%" of the baseline value,
    step_time = "3%"                               # or a number in the metric's unit (ms, or fraction points)
    exposed.total.fraction = 0.01

In a `pyproject.toml` the same keys live under `[tool.profanalyze]`
(`[tool.profanalyze.budget]`, `[tool.profanalyze.max_regression]`).
TOML dotted keys (`remat.fraction = ...`) and quoted keys
(`"remat.fraction" = ...`) are the same thing here.

Metrics (METRICS): `step_time_ms` (median of kept steps), `step_time_mean_ms`,
`mfu`, `mxu_matmul`, `remat.{fraction,ms}`, `bucket.<bucket>.{fraction,ms}`
for every attribution bucket (idle included), `exposed.<type>.{fraction,ms}`
for every collective type and `total`. Fractions are of the step time, 0..1.
`max_regression` also takes `step_time`: the mean step time, the number
`profanalyze compare` reports with its noise estimate. For `mfu` and
`mxu_matmul` higher is better, so a regression is a decrease.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profanalyzer.core.errors import InputError
from profanalyzer.core.format import GIB, NOT_AVAILABLE, noise
from profanalyzer.core.vocab import BUCKETS, COLLECTIVE_TYPES, IDLE_CAUSES
from profanalyzer.model.analysis import Analysis, BucketShare
from profanalyzer.model.documents import is_finite_number
from profanalyzer.model.findings import Findings
from profanalyzer.model.records import SchemaError, to_jsonable

TOP_KEYS = ("baseline", "fail_on", "budget", "max_regression")
BOUND_KEYS = ("max", "min")
BUDGET_FILE = "profanalyze.toml"
PYPROJECT = "pyproject.toml"

_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


class BudgetError(InputError):
    """The budget file is missing, malformed or names an unknown key (exit 2)."""


def _buckets() -> tuple[str, ...]:
    return BUCKETS


def _collective_types() -> tuple[str, ...]:
    return (*COLLECTIVE_TYPES, "total")


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # ms | fraction | bytes
    higher_is_better: bool
    doc: str


def _metrics() -> dict[str, Metric]:
    m = [
        Metric("step_time_ms", "ms", False, "median step time over kept steps"),
        Metric("step_time_mean_ms", "ms", False, "mean step time over kept steps (the buckets sum to it)"),
        Metric("mfu", "fraction", True, "model FLOPs utilisation"),
        Metric("mxu_matmul", "fraction", True, "matmul FLOPs / (matmul time x peak)"),
        Metric("remat.fraction", "fraction", False, "recompute share of the step"),
        Metric("remat.ms", "ms", False, "recompute time per step"),
    ]
    for b in _buckets():
        m.append(Metric(f"bucket.{b}.fraction", "fraction", False, f"{b} share of the step"))
        m.append(Metric(f"bucket.{b}.ms", "ms", False, f"{b} time per step"))
    for t in _collective_types():
        what = "all collectives" if t == "total" else t
        m.append(Metric(f"exposed.{t}.fraction", "fraction", False, f"exposed {what} share of the step"))
        m.append(Metric(f"exposed.{t}.ms", "ms", False, f"exposed {what} time per step"))
    for c in IDLE_CAUSES:
        m.append(Metric(f"idle.{c}.fraction", "fraction", False, f"idle time ({c}) share of the step"))
        m.append(Metric(f"idle.{c}.ms", "ms", False, f"idle time ({c}) per step"))
    m.append(Metric("memory.peak_bytes", "bytes", False, "peak HBM in use per device (analyze --memory)"))
    m.append(Metric("program.hbm_peak_bytes", "bytes", False,
                    "a compiled program's HBM per TensorCore: argument + output - alias + temp"))
    m.append(Metric("program.hbm_fraction", "fraction", False,
                    "a compiled program's HBM per TensorCore over the chip's HBM per TensorCore"))
    return {x.name: x for x in m}


METRICS: Mapping[str, Metric] = _metrics()
#: max_regression accepts every metric plus `step_time` (mean step time, as `compare` reports it).
REGRESSION_METRICS: tuple[str, ...] = ("step_time", *METRICS)


def metric_value(doc: Analysis | Mapping, name: str) -> float | None:
    """A metric of an analysis (typed, or its saved document; None when the
    analysis has no value for it). Metric names read like the JSON's paths
    (`bucket.<name>.ms`, `exposed.<type>.fraction`) and resolve against the
    typed Analysis."""
    if name not in METRICS and name != "step_time":
        raise KeyError(name)
    a = _analysis(doc)
    t = a.steps.step_time_ps
    if name == "step_time_ms":
        return _num(t.get("median"), 1e-9)
    if name in ("step_time_mean_ms", "step_time"):
        return _num(t.get("mean"), 1e-9)
    if name in ("mfu", "mxu_matmul"):
        return _num(getattr(a.utilisation, name))
    group, rest = name.split(".", 1)
    if group == "remat":
        return _share(a.remat, rest)
    if group == "bucket":
        b, kind = rest.rsplit(".", 1)
        s = a.breakdown.get(b)
        return _share(s, kind) if s is not None else None
    if group == "exposed":
        ty, kind = rest.rsplit(".", 1)
        if ty == "total":
            c = a.communication
            return _num(c.exposed_total_fraction) if kind == "fraction" else _num(c.exposed_total_ps, 1e-9)
        ct = a.collectives.get(ty)
        if ct is None:  # the type does not occur: nothing exposed
            return 0.0
        return _num(ct.fraction_of_step) if kind == "fraction" else _num(ct.exposed_ps, 1e-9)
    if group == "memory":
        mem = a.memory
        return _num(mem.peak_bytes) if mem is not None and mem.peak_bytes is not None else None
    if group == "program":
        pm = a.program_memory
        if pm is None:
            return None
        return _num(pm.peak_bytes) if rest == "hbm_peak_bytes" else _num(pm.fraction)
    if group == "idle":
        cause, kind = rest.rsplit(".", 1)
        ic = a.idle_causes.get(cause)
        if ic is None:  # an analysis saved before idle causes existed
            return None
        return _num(ic.fraction) if kind == "fraction" else _num(ic.ps, 1e-9)
    raise KeyError(name)


def _analysis(doc: Analysis | Mapping) -> Analysis:
    if isinstance(doc, Analysis):
        return doc
    try:
        return Analysis.from_dict(doc)
    except SchemaError as e:
        raise InputError(f"malformed analysis JSON ({e})") from None


def _findings(doc: Analysis | Mapping) -> Findings | None:
    if isinstance(doc, Analysis) or "recommendations" not in doc:
        return None
    try:
        return Findings.from_dict({"rules_run": (), "workload": None, **doc})
    except SchemaError as e:
        raise InputError(f"malformed analysis JSON ({e})") from None


def _num(x: Any, scale: float = 1.0) -> float | None:
    if not is_finite_number(x):
        return None
    return float(x) * scale


def _share(s: BucketShare, kind: str) -> float | None:
    return _num(s.fraction) if kind == "fraction" else _num(s.ps, 1e-9)


# ---------------------------------------------------------------------------
# The budget file
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    metric: str
    max: float | None
    min: float | None


@dataclass(frozen=True)
class RegressionLimit:
    metric: str
    relative: float | None  # 0.03 for "3%"
    absolute: float | None  # in the metric's unit
    text: str  # as written


@dataclass(frozen=True)
class Budget:
    source: str
    section: str  # "" or "[tool.profanalyze]"
    baseline: Path | None  # resolved against the budget file's folder
    baseline_text: str | None
    fail_on: tuple[str, ...]
    limits: tuple[Limit, ...]
    regressions: tuple[RegressionLimit, ...]

    @property
    def empty(self) -> bool:
        return not (self.fail_on or self.limits or self.regressions)


def find_budget(folder: str | Path = ".") -> Path | None:
    """Default budget: ./profanalyze.toml, else ./pyproject.toml with a [tool.profanalyze] section."""
    d = Path(folder)
    if (d / BUDGET_FILE).is_file():
        return d / BUDGET_FILE
    pp = d / PYPROJECT
    if pp.is_file():
        try:
            data = tomllib.loads(pp.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
            return pp  # load_budget reports the problem
        if isinstance(data.get("tool"), dict) and "profanalyze" in data["tool"]:
            return pp
    return None


def load_budget(path: str | Path) -> Budget:
    p = Path(path)
    if not p.is_file():
        raise BudgetError(f"{path}: budget file not found")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BudgetError(f"{path}: malformed TOML: {e}") from None
    except (UnicodeDecodeError, OSError) as e:
        raise BudgetError(f"{path}: cannot read the budget file ({e})") from None
    section = ""
    if p.name == PYPROJECT:
        tool = data.get("tool")
        if not isinstance(tool, dict) or "profanalyze" not in tool:
            raise BudgetError(f"{path}: no [tool.profanalyze] section")
        data, section = tool["profanalyze"], "[tool.profanalyze]"
        if not isinstance(data, dict):
            raise BudgetError(f"{path}: [tool.profanalyze] must be a table")
    return parse_budget(data, source=str(path), base_dir=p.parent, section=section)


def parse_budget(data: Mapping, source: str = "<budget>", base_dir: str | Path = ".", section: str = "") -> Budget:
    where = f"{source}{' ' + section if section else ''}"
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise BudgetError(_unknown(where, "", unknown[0], TOP_KEYS))
    baseline = baseline_text = None
    if "baseline" in data:
        v = data["baseline"]
        if not isinstance(v, str) or not v.strip():
            raise BudgetError(f"{where}: bad value for baseline: expected a path string, got {_show(v)}")
        baseline_text = v
        baseline = Path(v) if Path(v).is_absolute() else Path(os.path.normpath(Path(base_dir) / v))
    fail_on = _parse_fail_on(data.get("fail_on", []), where) if "fail_on" in data else ()
    limits = _parse_limits(_table(data, "budget", where), where)
    regressions = _parse_regressions(_table(data, "max_regression", where), where)
    b = Budget(source, section, baseline, baseline_text, fail_on, limits, regressions)
    if b.empty:
        raise BudgetError(f"{where}: defines no checks (add [budget] limits, [max_regression] limits or fail_on)")
    return b


def _table(data: Mapping, key: str, where: str) -> Mapping:
    v = data.get(key, {})
    if not isinstance(v, Mapping):
        raise BudgetError(f"{where}: [{key}] must be a table, got {_show(v)}")
    return v


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _unknown(where: str, table: str, key: str, valid: Iterable[str]) -> str:
    valid = list(valid)
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    in_table = f" in [{table}]" if table else ""
    return f"{where}: unknown key {key!r}{in_table}{hint}; valid keys: {', '.join(valid)}"


def _flatten(table: Mapping, valid: Iterable[str], where: str, name: str) -> list[tuple[str, Any]]:
    """[(metric, value)] from a table whose keys are metrics, written flat
    (quoted "a.b.c") or as TOML dotted keys / nested tables."""
    valid = tuple(valid)
    out: list[tuple[str, Any]] = []

    def walk(t: Mapping, prefix: str) -> None:
        for k, v in t.items():
            key = f"{prefix}{k}"
            if key in valid:
                out.append((key, v))
            elif isinstance(v, Mapping) and any(m.startswith(key + ".") for m in valid):
                walk(v, key + ".")
            else:
                while isinstance(v, Mapping) and len(v) == 1 and not set(v) <= set(BOUND_KEYS):
                    k2, v = next(iter(v.items()))
                    key = f"{key}.{k2}"
                raise BudgetError(_unknown(where, name, key, valid))

    walk(table, "")
    return out


def _check_range(metric: str, unit: str, v: float, where: str, table: str, what: str) -> None:
    if v < 0:
        raise BudgetError(f"{where}: bad value for [{table}] {metric}: {what} must be >= 0, got {v:g}")
    if unit == "fraction" and v > 1:
        raise BudgetError(f"{where}: bad value for [{table}] {metric}: fractions are 0..1 (0.03 = 3%), got {v:g}")


def _parse_limits(table: Mapping, where: str) -> tuple[Limit, ...]:
    out = []
    for metric, v in _flatten(table, METRICS, where, "budget"):
        example = f"{metric} = {{ {'min' if METRICS[metric].higher_is_better else 'max'} = N }}"
        if not isinstance(v, Mapping) or not v:
            raise BudgetError(f"{where}: bad value for [budget] {metric}: expected a table like {example}, got {_show(v)}")
        bad = [k for k in v if k not in BOUND_KEYS]
        if bad:
            raise BudgetError(f"{where}: bad bound {bad[0]!r} for [budget] {metric}: use max and/or min, e.g. {example}")
        bounds = {}
        for k in BOUND_KEYS:
            if k in v:
                if not is_finite_number(v[k]):
                    raise BudgetError(f"{where}: bad value for [budget] {metric}.{k}: expected a number, got {_show(v[k])}")
                _check_range(metric, METRICS[metric].unit, float(v[k]), where, "budget", k)
                bounds[k] = float(v[k])
        if "max" in bounds and "min" in bounds and bounds["min"] > bounds["max"]:
            raise BudgetError(f"{where}: bad value for [budget] {metric}: min {bounds['min']:g} > max {bounds['max']:g}")
        out.append(Limit(metric, bounds.get("max"), bounds.get("min")))
    return tuple(out)


def _parse_regressions(table: Mapping, where: str) -> tuple[RegressionLimit, ...]:
    out = []
    for metric, v in _flatten(table, REGRESSION_METRICS, where, "max_regression"):
        unit = "ms" if metric == "step_time" else METRICS[metric].unit
        if isinstance(v, str):
            m = _PERCENT.match(v)
            if not m:
                raise BudgetError(f'{where}: bad value for [max_regression] {metric}: expected "N%" or a number in {unit}, got {_show(v)}')
            out.append(RegressionLimit(metric, float(m.group(1)) / 100.0, None, v.strip()))
        elif is_finite_number(v):
            _check_range(metric, unit, float(v), where, "max_regression", "the limit")
            text = f"{float(v):g} {unit}" if unit in ("ms", "bytes") else f"{float(v) * 100:g} pts ({float(v):g})"
            out.append(RegressionLimit(metric, None, float(v), text))
        else:
            raise BudgetError(f'{where}: bad value for [max_regression] {metric}: expected "N%" or a number in {unit}, got {_show(v)}')
    return tuple(out)


def _known_codes() -> tuple[str, ...]:
    from profanalyzer.findings.engine import all_rules

    return tuple(sorted(r.code for r in all_rules()))


def _parse_fail_on(v: Any, where: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise BudgetError(f'{where}: bad value for fail_on: expected a list of finding codes like ["SC001"], got {_show(v)}')
    codes = _known_codes()
    out = []
    for x in v:
        c = x.strip().upper()
        if not any(k.startswith(c) for k in codes):
            raise BudgetError(f"{where}: unknown finding code {x!r} in fail_on; known codes: {', '.join(codes)}")
        if c not in out:
            out.append(c)
    return tuple(out)


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    name: str  # e.g. budget.step_time_ms, max_regression.step_time, fail_on.SC001
    kind: str  # budget | regression | finding
    metric: str
    passed: bool
    value: float | None  # the measured value (budget), the change (regression), finding count
    limit: str  # the limit as text
    message: str  # one line


@dataclass(frozen=True)
class CheckReport:
    passed: bool
    trace: str
    budget: str
    baseline: str | None
    checks: tuple[CheckResult, ...]
    failed: tuple[str, ...]
    comparison: str | None  # compare headline against the baseline

    def to_dict(self) -> dict:
        return to_jsonable(self)


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return NOT_AVAILABLE
    if unit == "ms":
        return f"{v:.3f} ms"
    if unit == "bytes":
        return f"{v:,.0f} bytes ({v / GIB:.2f} GiB)"
    return f"{v:.4f} ({v * 100:.2f}%)"


def _fmt_limit(v: float, unit: str) -> str:
    if unit == "bytes":
        return f"{v:,.0f} bytes"
    return f"{v:g} ms" if unit == "ms" else f"{v:g} ({v * 100:.4g}%)"


def evaluate(budget: Budget, doc: Mapping, baseline_doc: Mapping | None = None, *, trace: str = "", baseline: str | None = None) -> CheckReport:
    """Run every check of `budget` on the analysis document `doc` (and the
    baseline's for max_regression). A metric the analysis cannot give fails its check."""
    checks: list[CheckResult] = []
    a = _analysis(doc)
    for lim in budget.limits:
        checks.append(_check_limit(lim, a))
    comparison = None
    if budget.regressions:
        if baseline_doc is None:
            raise BudgetError(f"{budget.source}: [max_regression] needs a baseline (baseline = \"path\" in the budget file, or --baseline)")
    if baseline_doc is not None:
        from profanalyzer.compare.comparison import compare

        base_a = _analysis(baseline_doc)
        comparison = compare(dict(baseline_doc), dict(doc), baseline or "baseline", trace or "trace")
        for r in budget.regressions:
            checks.append(_check_regression(r, a, base_a, comparison))
    found = _findings(doc)
    for code in budget.fail_on:
        checks.append(_check_finding(code, found))
    failed = tuple(c.name for c in checks if not c.passed)
    return CheckReport(
        passed=not failed,
        trace=trace,
        budget=budget.source + (f" {budget.section}" if budget.section else ""),
        baseline=baseline,
        checks=tuple(checks),
        failed=failed,
        comparison=comparison.headline if comparison is not None else None,
    )


def _check_limit(lim: Limit, a: Analysis) -> CheckResult:
    m = METRICS[lim.metric]
    v = metric_value(a, lim.metric)
    parts = []
    if lim.max is not None:
        parts.append(f"<= {_fmt_limit(lim.max, m.unit)}")
    if lim.min is not None:
        parts.append(f">= {_fmt_limit(lim.min, m.unit)}")
    limit = " and ".join(parts)
    name = f"budget.{lim.metric}"
    if v is None:
        return CheckResult(name, "budget", lim.metric, False, None, limit, f"{lim.metric}: not available in this analysis ({m.doc}); limit {limit}")
    ok = (lim.max is None or v <= lim.max) and (lim.min is None or v >= lim.min)
    if ok:
        msg = f"{lim.metric} = {_fmt(v, m.unit)}, limit {limit}"
    elif lim.max is not None and v > lim.max:
        msg = f"{lim.metric} = {_fmt(v, m.unit)} > max {_fmt_limit(lim.max, m.unit)}"
    else:
        assert lim.min is not None  # failed, and not above the max: below the min
        msg = f"{lim.metric} = {_fmt(v, m.unit)} < min {_fmt_limit(lim.min, m.unit)}"
    return CheckResult(name, "budget", lim.metric, ok, v, limit, msg)


def _check_regression(r: RegressionLimit, a: Analysis, base: Analysis, comparison) -> CheckResult:
    name = f"max_regression.{r.metric}"
    unit = "ms" if r.metric == "step_time" else METRICS[r.metric].unit
    higher_better = METRICS[r.metric].higher_is_better if r.metric in METRICS else False
    bv, nv = metric_value(base, r.metric), metric_value(a, r.metric)
    limit = f"worse by <= {r.text}"
    if bv is None or nv is None:
        return CheckResult(name, "regression", r.metric, False, None, limit, f"{name}: not available in {'the baseline' if bv is None else 'this analysis'}; limit {limit}")
    worse = (bv - nv) if higher_better else (nv - bv)  # > 0: got worse
    if r.absolute is not None:
        allowed = r.absolute
    else:
        assert r.relative is not None  # _parse_regressions gives each limit one of the two
        allowed = abs(bv) * r.relative
    ok = worse <= allowed
    rel = f" ({(nv - bv) / abs(bv):+.2%})" if bv and (unit in ("ms", "bytes") or r.relative is not None) else ""
    delta = f"{nv - bv:+.3f} ms" if unit == "ms" else (f"{nv - bv:+,.0f} bytes" if unit == "bytes" else f"{(nv - bv) * 100:+.2f} pts")
    msg = f"{name}: {_fmt(bv, unit)} -> {_fmt(nv, unit)}, {delta}{rel}; allowed worse by {r.text}"
    if r.metric == "step_time":
        st = comparison.step_time
        if st.noise_ps is not None:
            msg += f"; noise {noise(st.noise_ps)} ms ({st.verdict})"
            if allowed * 1e9 < 3 * st.noise_ps:
                msg += "; the limit is below 3x the noise estimate: this check may flake"
    return CheckResult(name, "regression", r.metric, ok, nv - bv, limit, msg)


def _check_finding(code: str, found: Findings | None) -> CheckResult:
    name = f"fail_on.{code}"
    limit = f"no finding {code}{'*' if len(code) < 5 else ''}"
    if found is None:
        return CheckResult(name, "finding", code, False, None, limit, f"fail_on {code}: this analysis has no findings section (re-run `profanalyze analyze --json`)")
    hits = [f for f in found.recommendations if f.code.startswith(code)]
    if not hits:
        return CheckResult(name, "finding", code, True, 0.0, limit, f"fail_on {code}: no such finding")
    desc = "; ".join(f"{f.code} {f.title} (saves ~{_num(f.estimated_saving_ps, 1e-9) or 0:.3f} ms/step)" for f in hits)
    return CheckResult(name, "finding", code, False, float(len(hits)), limit, f"fail_on {code}: {desc}")
