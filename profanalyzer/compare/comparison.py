"""compare(base, new) -> Comparison: what changed between two analyses.

    load_document(path) -> dict      # a trace (analysed now) or a saved `analyze --json`
    compare(base_doc, new_doc) -> Comparison (frozen; `to_dict()` deterministic)

Both sides are the JSON documents `profanalyze analyze --json` writes
(`Analysis.to_dict()` + `Findings.to_dict()`), so CI can keep a small JSON of a
known-good run instead of its trace; `compare` reads them with
`Analysis.from_dict` / `Findings.from_dict` (`typed_side`) and works on the
typed records (a typed Analysis, or an (Analysis, Findings) pair, works too).

What is compared
  * step time: mean over kept steps (the buckets sum to it), with a noise
    estimate from the per-step spread of each side (below); the median too;
  * every bucket (ps per step and fraction points), remat, exposed
    communication per collective type (+ its engine and hidden fraction),
    MFU, the SparseCore offload verdict;
  * findings by rule code: new, vanished, persisting (saving before/after);
  * ops that got slower / faster, matched by OP_KEY (below).

Noise estimate (`noise_ps`, one sigma of the delta): the standard error of the
mean of the kept steps of each side, combined in quadrature,
    noise = sqrt(s_base^2 / n_base + s_new^2 / n_new),
with s the sample standard deviation of the per-step values (step time from
`steps.table`, each bucket from the table's per-step buckets, exposed time per
collective type from `communication.per_step_exposed`). A delta is a
regression (or improvement) when |delta| > max(NOISE_K x noise, MIN_EFFECT x
base step time); otherwise `within noise` (`unchanged` when exactly 0).
Per-step spread does not see run-to-run effects (another slice, another
compile), hence the MIN_EFFECT floor.

OP_KEY: instruction numbers change between compiles (`fusion.198` in one build
is `fusion.311` in the next), so ops are matched by
    (tf_op, instruction name with its `.N` numbers removed, bucket)
where the name is the op's `deduplicated_name` when XProf gives one (the
canonical fusion it duplicates) and its display name otherwise:
`fusion.325.remat` -> `fusion.remat`, `all-gather-start.3` ->
`all-gather-start`, kernel names are kept whole. The bucket keeps apart ops
that share a scope and a name (a matmul fusion and the reduce-scatter fusion
XLA fused into the same dot's scope). All ops of a side sharing a key are summed. The ops come from the analyses' top/remat/kernel op lists
(top 30 by self time), so an op listed on one side only `entered` or `left`
those lists; its time on the other side is below that side's smallest listed op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profanalyzer.compare.opmatch import OP_KEY, OpsChange, ops_change
from profanalyzer.core.errors import InputError
from profanalyzer.core.format import ms, signed_ms
from profanalyzer.core.stats import MIN_EFFECT, NOISE_K
from profanalyzer.core.vocab import (
    BUCKETS,
    CLAIM_BUCKET,
    COLLECTIVE_TYPES,
    IDLE_CAUSES,
    PREDICTED_INPUT_KINDS,
)
from profanalyzer.findings.verify import RuleCheck, verify
from profanalyzer.model.analysis import Analysis, BucketShare, StepRow
from profanalyzer.model.documents import (
    is_finite_number,
    is_json_document,
    read_json,
    validate_document,
)
from profanalyzer.model.findings import Finding, Findings
from profanalyzer.model.records import SchemaError, to_jsonable

#: Comparison JSON schema version.
COMPARISON_SCHEMA_VERSION = 1
#: Analysis JSON schema versions this module reads.
#: Significance: NOISE_K and MIN_EFFECT (profanalyzer.core.stats).
# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def _looks_like_json(p: Path) -> bool:
    name = p.name.lower()
    if name.endswith(".json") or name.endswith(".json.gz"):
        return True
    if name.endswith(".pb") or name.endswith(".pb.gz"):
        return False
    return is_json_document(p)


def load_document(path: str | Path, chip: str | None = None, memory: bool = False) -> dict:
    """The analysis document of `path`: a saved `profanalyze analyze --json`
    file (validated), or a trace / run folder / log dir analysed now (with the
    default rules). Raises InputError with one line when it is neither."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file or directory")
    if p.is_file() and _looks_like_json(p):
        doc = read_json(p)
        validate_document(doc, str(path))
        return doc
    from profanalyzer.pipeline.run import RunOptions, run

    return run(p, RunOptions(chip=chip, memory=memory)).document()


# ---------------------------------------------------------------------------
# Output types
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    label: str  # what the user passed (path)
    source: str
    tool_version: str
    chip: str
    hosts: int
    tensorcores: int
    steps_kept: int
    steps_count: int
    offload: str  # SparseCore offload verdict


@dataclass(frozen=True)
class StepTimeChange:
    base_ps: float  # mean over kept steps
    new_ps: float
    delta_ps: float
    relative: float | None  # delta / base
    base_median_ps: float
    new_median_ps: float
    median_delta_ps: float
    base_sem_ps: float | None  # standard error of the mean of each side
    new_sem_ps: float | None
    noise_ps: float | None  # one sigma of the delta
    noise_relative: float | None
    z: float | None  # delta / noise
    threshold_ps: float  # |delta| above this is significant
    verdict: str  # regression | improvement | within noise | unchanged


@dataclass(frozen=True)
class ShareChange:
    """A time share (ps per step and fraction of the step) before and after."""

    base_ps: float
    new_ps: float
    delta_ps: float
    base_fraction: float
    new_fraction: float
    delta_points: float  # new_fraction - base_fraction (0.01 = one percentage point)
    noise_ps: float | None
    verdict: str


@dataclass(frozen=True)
class ExposedChange:
    type: str
    exposed: ShareChange
    base_engine: str
    new_engine: str
    base_hidden_fraction: float | None
    new_hidden_fraction: float | None


@dataclass(frozen=True)
class ValueChange:
    base: float | None
    new: float | None
    delta: float | None


@dataclass(frozen=True)
class FindingChange:
    code: str
    lever: str
    title: str
    status: str  # new | vanished | persisting
    base_saving_ps: float | None
    new_saving_ps: float | None
    base_saving_fraction: float | None
    new_saving_fraction: float | None
    severity: str  # on the side that has it (new side when both)


@dataclass(frozen=True)
class Comparison:
    schema_version: int
    base: Side
    new: Side
    step_time: StepTimeChange
    buckets: Mapping[str, ShareChange]
    remat: ShareChange
    exposed: Mapping[str, ExposedChange]  # per collective type + "total"
    utilisation: Mapping[str, ValueChange]
    findings: tuple[FindingChange, ...]
    ops: OpsChange
    headline: str
    method: Mapping[str, str]
    notes: tuple[str, ...]
    verification: tuple[RuleCheck, ...] = ()  # rules of BASE pulled in NEW: predicted vs observed (profanalyzer.findings.verify)
    verification_skipped: str = ""  # why no rule was checked ('' when the check ran)
    idle_causes: Mapping[str, ShareChange] = field(default_factory=dict)  # the idle bucket by cause (both sides have them)
    memory: Mapping[str, ValueChange] = field(default_factory=dict)  # bytes (peak_bytes, headroom_bytes, ...) when both sides read memory
    #: measured (two captures) | predicted (two compiled programs, replayed): never one of each
    basis: str = "measured"

    @property
    def new_findings(self) -> tuple[FindingChange, ...]:
        return tuple(f for f in self.findings if f.status == "new")

    @property
    def vanished_findings(self) -> tuple[FindingChange, ...]:
        return tuple(f for f in self.findings if f.status == "vanished")

    def to_dict(self) -> dict:
        return to_jsonable(self)


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------


def _sem(values: list[float]) -> float | None:
    n = len(values)
    if n < 2:
        return None
    m = math.fsum(values) / n
    var = math.fsum((v - m) ** 2 for v in values) / (n - 1)
    return math.sqrt(var / n)


def _combine(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return math.sqrt(a * a + b * b)


def significance_threshold(noise_ps: float | None, base_step_ps: float) -> float:
    return max(NOISE_K * noise_ps if noise_ps is not None else 0.0, MIN_EFFECT * abs(base_step_ps))


def verdict_of(delta: float, noise_ps: float | None, base_step_ps: float, higher_is_worse: bool = True) -> str:
    if delta == 0:
        return "unchanged"
    if abs(delta) <= significance_threshold(noise_ps, base_step_ps):
        return "within noise"
    worse = delta > 0 if higher_is_worse else delta < 0
    return "regression" if worse else "improvement"


# ---------------------------------------------------------------------------
# The two sides, typed
# ---------------------------------------------------------------------------


def _f(x: Any, default: float = 0.0) -> float:
    return float(x) if is_finite_number(x) else default


def typed_side(doc: Mapping | Analysis | tuple[Analysis, Findings | None], label: str = "analysis") -> tuple[Analysis, Findings | None]:
    """The (Analysis, Findings or None) of a side: a saved document is
    validated and read with Analysis.from_dict / Findings.from_dict."""
    if isinstance(doc, tuple):
        return doc
    if isinstance(doc, Analysis):
        return doc, None
    validate_document(doc, label)
    try:
        a = Analysis.from_dict(doc)
        f = Findings.from_dict({"rules_run": (), "workload": None, **doc}) if "recommendations" in doc else None
    except SchemaError as e:
        raise InputError(f"{label}: malformed analysis JSON ({e})") from None
    return a, f


def _kept_rows(a: Analysis) -> list[StepRow]:
    return [r for r in a.steps.table if r.kept]


def step_mean_ps(a: Analysis) -> float:
    return _f(a.steps.step_time_ps.get("mean"))


def step_median_ps(a: Analysis) -> float:
    t = a.steps.step_time_ps
    return _f(t.get("median"), _f(t.get("mean")))


def _side(a: Analysis, label: str) -> Side:
    return Side(
        label=str(label),
        source=a.source,
        tool_version=a.tool_version,
        chip=a.hardware.name,
        hosts=len(a.hosts),
        tensorcores=a.tensorcores,
        steps_kept=a.steps.kept,
        steps_count=a.steps.count,
        offload=a.sparsecore_offload.verdict,
    )


def _per_step_exposed(a: Analysis, types: list[str]) -> dict[str, list[float]]:
    """Per collective type (and 'total'): exposed ps of each kept step."""
    per = a.communication.per_step_exposed
    out: dict[str, list[float]] = {t: [] for t in types}
    out["total"] = []
    for r in _kept_rows(a):
        row = per.get(r.number) or {}
        for t in types:
            out[t].append(_f(row.get(t)))
        out["total"].append(math.fsum(_f(v) for v in row.values()))
    return out


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------


def compare(base: Mapping | Analysis | tuple[Analysis, Findings | None], new: Mapping | Analysis | tuple[Analysis, Findings | None],
            base_label: str = "BASE", new_label: str = "NEW") -> Comparison:
    """Compare two analyses (saved documents, or typed; see the module docstring)."""
    (base, base_f), (new, new_f) = typed_side(base, base_label), typed_side(new, new_label)
    predicted = base.input_kind in PREDICTED_INPUT_KINDS, new.input_kind in PREDICTED_INPUT_KINDS
    if predicted[0] != predicted[1]:
        guess, ran = (base_label, new_label) if predicted[0] else (new_label, base_label)
        raise InputError(f"{guess} is a compiled program's prediction and {ran} a measured capture: their difference "
                         "is the prediction's error, not a regression; compare a prediction with a prediction and a "
                         "capture with a capture (a capture's 'Expected vs measured' section sets the compiler's "
                         "estimates beside what ran)")
    notes: list[str] = []
    b_step, n_step = step_mean_ps(base), step_mean_ps(new)
    b_rows, n_rows = _kept_rows(base), _kept_rows(new)

    # --- step time --------------------------------------------------------
    b_sem = _sem([_f(r.step_ps) for r in b_rows])
    n_sem = _sem([_f(r.step_ps) for r in n_rows])
    noise = _combine(b_sem, n_sem)
    if noise is None:
        notes.append("fewer than 2 kept steps on a side: no noise estimate; only the minimum effect size separates noise from change")
    d = n_step - b_step
    step = StepTimeChange(
        base_ps=b_step,
        new_ps=n_step,
        delta_ps=d,
        relative=d / b_step if b_step else None,
        base_median_ps=step_median_ps(base),
        new_median_ps=step_median_ps(new),
        median_delta_ps=step_median_ps(new) - step_median_ps(base),
        base_sem_ps=b_sem,
        new_sem_ps=n_sem,
        noise_ps=noise,
        noise_relative=noise / b_step if noise is not None and b_step else None,
        z=d / noise if noise else None,
        threshold_ps=significance_threshold(noise, b_step),
        verdict=verdict_of(d, noise, b_step),
    )

    # --- buckets ------------------------------------------------------------
    buckets = {}
    present = set(base.breakdown) | set(new.breakdown)
    order = [b for b in BUCKETS if b in present] + sorted(present - set(BUCKETS))
    for b in order:
        bs, ns = base.breakdown.get(b), new.breakdown.get(b)
        bn = _combine(_sem([_f(r.buckets.get(b)) for r in b_rows]), _sem([_f(r.buckets.get(b)) for r in n_rows]))
        buckets[b] = _share(_ps_fraction(bs), _ps_fraction(ns), bn, b_step)

    remat = _share(_ps_fraction(base.remat), _ps_fraction(new.remat), None, b_step)

    exposed = _exposed_changes(base, new, b_step)

    # --- utilisation ---------------------------------------------------------
    util = {}
    for k in ("mfu", "mxu_matmul"):
        bv, nv = _opt(getattr(base.utilisation, k)), _opt(getattr(new.utilisation, k))
        util[k] = ValueChange(bv, nv, (nv - bv) if bv is not None and nv is not None else None)

    # --- findings, ops -----------------------------------------------------
    if base_f is None or new_f is None:
        notes.append("findings missing on a side (analysis JSON without recommendations): new/vanished findings not compared")
        findings: tuple[FindingChange, ...] = ()
    else:
        findings = _findings(base_f, new_f)
    ops = ops_change(base, new, b_step)

    pools = {CLAIM_BUCKET + b: s.noise_ps for b, s in buckets.items()}
    checked = verify(base, base_f, new, new_f, step.noise_ps, step.threshold_ps, pools)

    base_side, new_side = _side(base, base_label), _side(new, new_label)
    if base_side.chip != new_side.chip:
        notes.append(f"different chips: {base_side.chip} vs {new_side.chip}")
    if base_side.tensorcores != new_side.tensorcores:
        notes.append(f"different TensorCore counts ({base_side.tensorcores} vs {new_side.tensorcores}): times are per TensorCore per step on both sides")
    bw, nw = (base_f.workload if base_f else None), (new_f.workload if new_f else None)
    if bw is not None and nw is not None and bw.row and nw.row and bw.row != nw.row:
        notes.append(f"different workloads ({bw.row} vs {nw.row}): are these runs of the same model?")
    if base_side.offload != new_side.offload:
        notes.append(f"SparseCore offload verdict changed: {base_side.offload or '-'} -> {new_side.offload or '-'}")

    return Comparison(
        schema_version=COMPARISON_SCHEMA_VERSION,
        base=base_side,
        new=new_side,
        step_time=step,
        buckets=buckets,
        remat=remat,
        exposed=exposed,
        utilisation=util,
        findings=findings,
        ops=ops,
        headline=("PREDICTED (both sides are compiled programs replayed before any run, not measured): "
                  if predicted[0] else "") + _headline(step, buckets, remat, exposed, findings, checked.checks),
        basis="predicted" if predicted[0] else "measured",
        method={
            "step_time": "mean over kept steps (the buckets sum to it); median reported too",
            "noise": (
                "one sigma of the delta: sqrt(SEM_base^2 + SEM_new^2), SEM = sample std of the kept steps' values / sqrt(kept steps)"
            ),
            "significance": f"|delta| > max({NOISE_K:g} x noise, {MIN_EFFECT:.1%} of the base step time); else within noise",
            "op_match": OP_KEY,
            "remat_noise": "remat has no per-step series in the analysis: its verdict uses the minimum effect only",
            "verification": (
                "rules of BASE whose finding vanished or shrank in NEW: predicted = BASE saving - NEW saving, observed = BASE step - NEW step; "
                "ratio = observed / predicted; within noise when |observed| <= the step significance threshold; shortfall when ratio < 0.5"
            ),
        },
        notes=tuple(notes),
        verification=checked.checks,
        verification_skipped=checked.skipped,
        idle_causes=_idle_changes(base, new, b_step, notes),
        memory=_memory_changes(base, new, notes),
    )


#: The memory numbers compare reports (bytes).
MEMORY_KEYS = ("peak_bytes", "headroom_bytes", "hbm_bytes", "host_offload_bytes", "program_hbm_bytes")


def _memory_changes(base: Analysis, new: Analysis, notes: list[str]) -> dict[str, ValueChange]:
    """Memory deltas (bytes), when both sides read memory (`--memory`)."""
    if base.memory is None or new.memory is None:
        if base.memory is not None or new.memory is not None:
            notes.append("memory read on one side only (analyze --memory): memory not compared")
        return {}
    out = {}
    for k in MEMORY_KEYS:
        bv, nv = getattr(base.memory, k), getattr(new.memory, k)
        bf = float(bv) if bv is not None else None
        nf = float(nv) if nv is not None else None
        out[k] = ValueChange(bf, nf, (nf - bf) if bf is not None and nf is not None else None)
    return out


def _idle_changes(base: Analysis, new: Analysis, b_step: float, notes: list[str]) -> dict[str, ShareChange]:
    """Idle-cause deltas (minimum-effect verdict: no per-step series), when both sides have them."""
    if not base.idle_causes or not new.idle_causes:
        if base.idle_causes or new.idle_causes:
            notes.append("idle causes on one side only (an analysis saved by an older version): not compared")
        return {}
    out = {}
    for c in IDLE_CAUSES:
        bc, nc = base.idle_causes.get(c), new.idle_causes.get(c)
        out[c] = _share((bc.ps, bc.fraction) if bc else (0.0, 0.0), (nc.ps, nc.fraction) if nc else (0.0, 0.0), None, b_step)
    return out


def _exposed_changes(base: Analysis, new: Analysis, b_step: float) -> dict[str, ExposedChange]:
    """Exposed communication per collective type present on a side, and the total."""
    seen = set(base.collectives) | set(new.collectives)
    types = [t for t in COLLECTIVE_TYPES if t in seen] + sorted(seen - set(COLLECTIVE_TYPES))
    b_per, n_per = _per_step_exposed(base, types), _per_step_exposed(new, types)
    exposed: dict[str, ExposedChange] = {}
    for t in types:
        bc, nc = base.collectives.get(t), new.collectives.get(t)
        share = _share(
            (bc.exposed_ps, bc.fraction_of_step) if bc else (0.0, 0.0),
            (nc.exposed_ps, nc.fraction_of_step) if nc else (0.0, 0.0),
            _combine(_sem(b_per[t]), _sem(n_per[t])),
            b_step,
        )
        exposed[t] = ExposedChange(
            type=t,
            exposed=share,
            base_engine=bc.engine if bc else "",
            new_engine=nc.engine if nc else "",
            base_hidden_fraction=_opt(bc.hidden_fraction) if bc else None,
            new_hidden_fraction=_opt(nc.hidden_fraction) if nc else None,
        )
    bcomm, ncomm = base.communication, new.communication
    exposed["total"] = ExposedChange(
        type="total",
        exposed=_share(
            (bcomm.exposed_total_ps, bcomm.exposed_total_fraction),
            (ncomm.exposed_total_ps, ncomm.exposed_total_fraction),
            _combine(_sem(b_per["total"]), _sem(n_per["total"])),
            b_step,
        ),
        base_engine="",
        new_engine="",
        base_hidden_fraction=None,
        new_hidden_fraction=None,
    )
    return exposed


def _opt(x: Any) -> float | None:
    return float(x) if is_finite_number(x) else None


def _ps_fraction(s: BucketShare | None) -> tuple[float, float]:
    return (s.ps, s.fraction) if s is not None else (0.0, 0.0)


def _share(b: tuple[float, float], n: tuple[float, float], noise: float | None, base_step: float) -> ShareChange:
    """b, n: (ps, fraction) of each side."""
    bp, np_ = _f(b[0]), _f(n[0])
    bf, nf = _f(b[1]), _f(n[1])
    d = np_ - bp
    return ShareChange(bp, np_, d, bf, nf, nf - bf, noise, verdict_of(d, noise, base_step))


def _findings(base: Findings, new: Findings) -> tuple[FindingChange, ...]:
    def by_code(found: Findings) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in found.recommendations:
            if f.code:
                out.setdefault(f.code, []).append(f)
        return out

    bmap, nmap = by_code(base), by_code(new)
    out = []
    for code in sorted(set(bmap) | set(nmap)):
        bl, nl = bmap.get(code, []), nmap.get(code, [])
        ref = (nl or bl)[0]
        status = "persisting" if bl and nl else ("new" if nl else "vanished")
        out.append(
            FindingChange(
                code=code,
                lever=ref.lever,
                title=ref.title,
                status=status,
                base_saving_ps=math.fsum(_f(f.estimated_saving_ps) for f in bl) if bl else None,
                new_saving_ps=math.fsum(_f(f.estimated_saving_ps) for f in nl) if nl else None,
                base_saving_fraction=math.fsum(_f(f.estimated_saving_fraction) for f in bl) if bl else None,
                new_saving_fraction=math.fsum(_f(f.estimated_saving_fraction) for f in nl) if nl else None,
                severity=ref.severity,
            )
        )
    rank = {"new": 0, "vanished": 1, "persisting": 2}
    out.sort(key=lambda f: (rank[f.status], f.code))
    return tuple(out)


def _ms(ps: float) -> str:
    return ms(ps)


def _signed_ms(ps: float) -> str:
    return signed_ms(ps, zero_unsigned=False)


def _headline(step: StepTimeChange, buckets, remat, exposed, findings, checks: tuple[RuleCheck, ...] = ()) -> str:
    rel = f" ({step.relative:+.2%})" if step.relative is not None else ""
    noise = f", noise ±{_ms(step.noise_ps)} ms" if step.noise_ps is not None else ""
    head = f"Step time {_ms(step.base_ps)} -> {_ms(step.new_ps)} ms{rel}{noise}: {step.verdict}."
    movers = []
    for b, s in buckets.items():
        if s.verdict in ("regression", "improvement"):
            movers.append((abs(s.delta_ps), f"{b} {_signed_ms(s.delta_ps)} ms ({s.delta_points * 100:+.1f} pts)"))
    if remat.verdict in ("regression", "improvement"):
        movers.append((abs(remat.delta_ps), f"remat {_signed_ms(remat.delta_ps)} ms ({remat.delta_points * 100:+.1f} pts)"))
    tot = exposed.get("total")
    if tot is not None and tot.exposed.verdict in ("regression", "improvement"):
        movers.append((abs(tot.exposed.delta_ps), f"exposed communication {_signed_ms(tot.exposed.delta_ps)} ms ({tot.exposed.delta_points * 100:+.1f} pts)"))
    movers.sort(key=lambda m: (-m[0], m[1]))
    if movers:
        head += " Largest changes: " + ", ".join(m[1] for m in movers[:4]) + "."
    new = [f.code for f in findings if f.status == "new"]
    gone = [f.code for f in findings if f.status == "vanished"]
    if new:
        head += f" New findings: {', '.join(new)}."
    if gone:
        head += f" Resolved: {', '.join(gone)}."
    short = [c for c in checks if c.shortfall]
    if short:
        head += " Saved far less than predicted: " + ", ".join(f"{c.code} ({c.ratio:.2f}x)" for c in short if c.ratio is not None) + "."
    return head
