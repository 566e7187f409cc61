"""Predicted vs observed: did a pulled lever save what its finding promised?

    verify(base, base_findings, new, new_findings, noise) -> Verification
    SHORTFALL_RATIO: a pulled lever that delivered less than this fraction of
                     its prediction is called out

A rule of BASE is *pulled* in NEW when its finding is gone there (vanished) or
its estimated saving is smaller (shrunk). For each pulled rule:

  * predicted_ps: BASE's estimated saving minus NEW's (the part that was
    pulled; all of it when the finding vanished), read from the Findings;
  * observed_ps: what the step actually lost, BASE mean step - NEW mean step
    (positive = faster);
  * ratio: observed / predicted (None when nothing was predicted);
  * within_noise: |observed| is not above compare's significance threshold
    (max(NOISE_K sigma of the step delta, MIN_EFFECT of the base step)): the
    ratio is then not evidence either way;
  * buckets: per time pool the finding claimed (`claims`: `bucket:<name>` or
    `remat`), the claimed ps and the observed drop of that pool.

When several rules were pulled between the same two runs, the step change is
theirs together: each entry names the others in `shared_with` and is
credited with a share of it in proportion to its prediction
(`attributed_ps`), so all of them carry the joint ratio, observed / the sum
of their predictions.

Not counted (ratio None): a *follow-on* finding, one that shrank only because
another lever shrank the pools it claims (its saving per claimed ps of pool is
unchanged, within FOLLOW_ON_TOLERANCE; e.g. FP8's estimate after remat removed
recomputed matmuls), and a prediction at or below the significance threshold
(`too small` to show in the step).

Verification needs the same workload and machine on both sides (the guide
workload row, the chip, the TensorCore count); otherwise it is skipped with a
reason. Imports: model and vocab only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from profanalyzer.core.errors import InputError
from profanalyzer.core.stats import SHORTFALL_RATIO
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.documents import read_document, read_json
from profanalyzer.model.findings import Finding, Findings
from profanalyzer.model.invariants import claim_capacity
from profanalyzer.model.records import to_jsonable

#: A finding counts as shrunk when its saving fell by more than this share;
#: it is a follow-on (not pulled) when its saving per claimed ps of pool
#: moved by less than this share.
FOLLOW_ON_TOLERANCE = 0.05
#: Calibration across a history: a change counts when the prediction exceeds
#: this share of the earlier run's step (compare's MIN_EFFECT floor).
CALIBRATION_MIN_EFFECT = 0.005


@dataclass(frozen=True)
class PoolCheck:
    """One time pool a finding claimed: what it claimed, what the pool lost."""

    claimed_ps: float
    base_ps: float
    new_ps: float
    observed_ps: float  # base - new (positive: the pool shrank)
    noise_ps: float | None  # one sigma of the pool's delta (None: no per-step series)


@dataclass(frozen=True)
class RuleCheck:
    code: str
    lever: str
    title: str
    status: str  # vanished | shrunk | follow_on (see STATUS)
    predicted_ps: float
    observed_ps: float  # step time saved, BASE mean - NEW mean (positive: faster)
    attributed_ps: float  # this rule's share of observed_ps: all of it when pulled alone, in proportion
    #                       to the predictions when several were pulled together; 0 when not counted
    ratio: float | None  # attributed / predicted (None: follow-on or too small to verify)
    within_noise: bool
    noise_ps: float | None  # one sigma of the step delta
    threshold_ps: float  # |observed| above this is beyond noise
    buckets: Mapping[str, PoolCheck]
    shared_with: tuple[str, ...]  # other rules pulled between the same runs
    shortfall: bool  # ratio < SHORTFALL_RATIO (called out)
    verdict: str  # delivered | shortfall | overshoot | within noise | too small | follow-on


@dataclass(frozen=True)
class Verification:
    checks: tuple[RuleCheck, ...]
    skipped: str  # why nothing was verified ('' when it ran)

    def to_list(self) -> list:
        return to_jsonable(list(self.checks))


def _pool_ps(a: Analysis, key: str) -> float:
    """The time a claim's pool holds (invariants.claim_capacity); 0 for a pool no longer known (an old document)."""
    try:
        return claim_capacity(a, key)
    except ValueError:
        return 0.0


def _by_code(f: Findings) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for x in f.recommendations:
        if x.code:
            out.setdefault(x.code, []).append(x)
    return out


def _claims(found: list[Finding]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in found:
        for key, ps in f.claims:
            out[key] = out.get(key, 0.0) + float(ps)
    return out


def _same_rate(bl: list[Finding], nl: list[Finding], base: Analysis, new: Analysis) -> bool:
    """The finding shrank only because the pools it claims shrank (another
    lever's doing): every pool it claims on BASE it still claims on NEW, at
    the same share of the pool (within FOLLOW_ON_TOLERANCE), or the same
    share of the step when its saving is bounded by one."""
    def rates(found: list[Finding], a: Analysis) -> dict[str, float]:
        return {k: (c / _pool_ps(a, k) if _pool_ps(a, k) > 0 else 0.0) for k, c in _claims(found).items()}

    def step_shares(found: list[Finding], a: Analysis) -> dict[str, float]:
        step = a.steps.step_time_ps["mean"] or 1.0
        return {k: c / step for k, c in _claims(found).items()}

    # the same share of its pools, or (a saving bounded by a share of the step,
    # e.g. the guide's FP8 "up to 1.3x") the same share of the step
    return _same_rates(rates(bl, base), rates(nl, new)) or _same_rates(step_shares(bl, base), step_shares(nl, new))


def comparable(base: Analysis, base_f: Findings, new: Analysis, new_f: Findings) -> str:
    """Why the two runs cannot be checked against each other ('' when they can)."""
    if base.hardware.key != new.hardware.key:
        return f"different chips ({base.hardware.name} vs {new.hardware.name})"
    if base.tensorcores != new.tensorcores:
        return f"different TensorCore counts ({base.tensorcores} vs {new.tensorcores})"
    bw, nw = base_f.workload, new_f.workload
    if bw is not None and nw is not None and bw.row != nw.row:
        return f"different workloads ({bw.row} vs {nw.row})"
    return ""


def ratio_verdict(predicted: float, observed: float, threshold: float) -> tuple[float | None, bool, bool, str]:
    """(ratio, within_noise, shortfall, verdict) of one prediction (`observed`:
    the step time this rule's lever is credited with)."""
    ratio = observed / predicted if predicted > 0 else None
    within = abs(observed) <= threshold
    if ratio is None:
        return None, within, False, "no prediction"
    if predicted <= threshold:
        return ratio, within, False, "too small"
    if within:
        # nothing measurable happened: a large prediction that did not show is a shortfall
        short = predicted > threshold and ratio < SHORTFALL_RATIO
        return ratio, True, short, "shortfall" if short else "within noise"
    if ratio < SHORTFALL_RATIO:
        return ratio, False, True, "shortfall"
    if ratio > 1.0 / SHORTFALL_RATIO:
        return ratio, False, False, "overshoot"
    return ratio, False, False, "delivered"


def verify(base: Analysis, base_f: Findings | None, new: Analysis, new_f: Findings | None,
           step_noise_ps: float | None, threshold_ps: float,
           pool_noise_ps: Mapping[str, float | None] | None = None) -> Verification:
    """Every rule of BASE pulled in NEW, predicted vs observed (see the module
    docstring). `threshold_ps` is compare's significance threshold of the
    step delta, `pool_noise_ps` one sigma per claim key (optional)."""
    if base_f is None or new_f is None:
        return Verification((), "findings missing on a side")
    why = comparable(base, base_f, new, new_f)
    if why:
        return Verification((), why)
    b_step = base.steps.step_time_ps.get("mean", 0.0) or 0.0
    n_step = new.steps.step_time_ps.get("mean", 0.0) or 0.0
    observed = b_step - n_step
    bmap, nmap = _by_code(base_f), _by_code(new_f)
    pulled: list[tuple[str, str, float, list[Finding]]] = []
    for code in sorted(bmap):
        bl, nl = bmap[code], nmap.get(code, [])
        b_save = math.fsum(float(f.estimated_saving_ps) for f in bl)
        n_save = math.fsum(float(f.estimated_saving_ps) for f in nl)
        if not nl:
            pulled.append((code, "vanished", b_save, bl))
        elif b_save - n_save > FOLLOW_ON_TOLERANCE * b_save and b_save > 0:
            status = "follow_on" if _same_rate(bl, nl, base, new) else "shrunk"
            pulled.append((code, status, b_save - n_save, bl))
    # Rules whose lever was pulled, with a prediction the step can show.
    levers = [p for p in pulled if p[1] != "follow_on" and p[2] > threshold_ps]
    joint = math.fsum(p[2] for p in levers)
    checks = []
    for code, status, predicted, bl in pulled:
        pools = {}
        for key, claimed in sorted(_claims(bl).items()):
            bp, np_ = _pool_ps(base, key), _pool_ps(new, key)
            pools[key] = PoolCheck(claimed, bp, np_, bp - np_, (pool_noise_ps or {}).get(key))
        counted = any(p[0] == code for p in levers)
        attributed = observed * predicted / joint if counted else 0.0
        ratio, within, short, verdict = ratio_verdict(predicted, attributed, threshold_ps)
        if not counted:
            ratio, short, verdict = None, False, "follow-on" if status == "follow_on" else "too small"
        checks.append(
            RuleCheck(
                code=code,
                lever=bl[0].lever,
                title=bl[0].title,
                status=status,
                predicted_ps=predicted,
                observed_ps=observed,
                attributed_ps=attributed,
                ratio=ratio,
                within_noise=abs(observed) <= threshold_ps,
                noise_ps=step_noise_ps,
                threshold_ps=threshold_ps,
                buckets=pools,
                shared_with=tuple(p[0] for p in levers if p[0] != code) if counted else (),
                shortfall=short,
                verdict=verdict,
            )
        )
    return Verification(tuple(checks), "")


# ---------------------------------------------------------------------------
# Calibration across runs
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPoint:
    """What calibration needs of one run: its step, its findings' savings."""

    label: str
    chip: str
    workload: str | None
    step_ps: float
    savings: Mapping[str, tuple[str, float]]  # code -> (lever, estimated saving ps)
    rates: Mapping[str, Mapping[str, float]]  # code -> claim key -> claimed ps / the pool's ps (follow-on test)


@dataclass(frozen=True)
class CalibrationRow:
    code: str
    lever: str
    changes: int  # pulled-lever changes counted
    median_ratio: float
    low_ratio: float  # smallest and largest ratio seen
    high_ratio: float
    predicted_ps: float  # summed over the changes
    observed_ps: float  # credited, summed
    runs: tuple[str, ...]  # the NEW side of each change

    @property
    def sentence(self) -> str:
        return f"{self.code} has delivered {self.median_ratio:.2g}x of its estimate over {self.changes} change{'s' if self.changes != 1 else ''}"


def point_of(label: str, a: Analysis, f: Findings) -> RunPoint:
    sav: dict[str, tuple[str, float]] = {}
    found = _by_code(f)
    for code, xs in found.items():
        sav[code] = (xs[0].lever, math.fsum(float(x.estimated_saving_ps) for x in xs))
    rates = {code: {k: (c / _pool_ps(a, k) if _pool_ps(a, k) > 0 else 0.0) for k, c in _claims(xs).items()} for code, xs in found.items()}
    return RunPoint(label, a.hardware.key, f.workload.row if f.workload is not None else None,
                    float(a.steps.step_time_ps.get("mean", 0.0) or 0.0), sav, rates)


def _same_rates(b: Mapping[str, float], n: Mapping[str, float]) -> bool:
    if not b or set(b) - set(n):
        return False
    return all(b[k] > 0 and abs(n[k] - b[k]) <= FOLLOW_ON_TOLERANCE * b[k] for k in b)


def pair_ratios(b: RunPoint, n: RunPoint, threshold_ps: float) -> list[tuple[str, str, float, float]]:
    """(code, lever, predicted, credited) of the rules of `b` pulled in `n`
    (vanished, or shrunk by more than FOLLOW_ON_TOLERANCE) whose prediction
    can show above `threshold_ps`; credit shared in proportion to predictions."""
    if b.chip != n.chip or (b.workload and n.workload and b.workload != n.workload):
        return []
    pulled = []
    for code, (lever, bs) in sorted(b.savings.items()):
        ns = n.savings.get(code, (lever, 0.0))[1]
        if code in n.savings and _same_rates(b.rates.get(code, {}), n.rates.get(code, {})):
            continue  # follow-on: its pools shrank under another lever
        if bs - ns > FOLLOW_ON_TOLERANCE * bs and bs - ns > threshold_ps:
            pulled.append((code, lever, bs - ns))
    joint = math.fsum(p[2] for p in pulled)
    observed = b.step_ps - n.step_ps
    return [(code, lever, pred, observed * pred / joint) for code, lever, pred in pulled]


def calibrate(points: Sequence[RunPoint], min_effect: float = CALIBRATION_MIN_EFFECT) -> tuple[CalibrationRow, ...]:
    """Per rule, over consecutive runs of `points` (in time order): the ratio
    credited / predicted of every change that pulled its lever. The threshold
    of a change is `min_effect` of the earlier run's step (runs in a history
    carry no per-step spread of each other)."""
    acc: dict[str, list[tuple[float, float, str, str]]] = {}
    for b, n in pairwise(points):
        for code, lever, pred, cred in pair_ratios(b, n, min_effect * b.step_ps):
            acc.setdefault(code, []).append((pred, cred, lever, n.label))
    rows = []
    for code, xs in sorted(acc.items()):
        ratios = sorted(c / p for p, c, _, _ in xs)
        rows.append(CalibrationRow(code, xs[0][2], len(xs), statistics.median(ratios), ratios[0], ratios[-1],
                                   math.fsum(p for p, _, _, _ in xs), math.fsum(c for _, c, _, _ in xs), tuple(x[3] for x in xs)))
    return tuple(rows)


def history_points(folder: str | Path) -> list[RunPoint]:
    """The runs of a history folder: every `*.json` / `*.json.gz` in it (saved
    `profanalyze analyze --json` documents with findings), in file-name order
    (name them so that order is time order, e.g. by date). InputError (one
    line) when the folder is missing or a file is not such a document."""
    d = Path(folder)
    if not d.is_dir():
        raise InputError(f"{folder}: --history needs a folder of `profanalyze analyze --json` files")
    files = sorted(p for p in d.iterdir() if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))
    out = []
    for p in files:
        a, f = read_document(read_json(p), str(p))
        if f is None:
            raise InputError(f"{p}: an analysis JSON without recommendations; the history needs `analyze --json` documents")
        out.append(point_of(p.name.removesuffix(".gz").removesuffix(".json"), a, f))
    return out


@dataclass(frozen=True)
class Calibration:
    """`analyze --history DIR`: the rules' predictions over a history of runs and this one, in time order
    (`calibrate`), as the JSON key `calibration` and the terminal / Markdown lines read it."""

    history: str  # the folder, as given
    runs: tuple[str, ...]  # the runs' labels, this run last
    rows: tuple[CalibrationRow, ...]
    own: tuple[str, ...]  # this run's recommendation codes

    def to_dict(self) -> dict:
        return {"runs": list(self.runs), "rules": to_jsonable(list(self.rows))}


def calibration(history: str, label: str, a: Analysis, f: Findings) -> Calibration:
    """This run (`label`) read after the saved runs of the folder `history` (history_points)."""
    points = history_points(history) + [point_of(label, a, f)]
    return Calibration(history, tuple(p.label for p in points), calibrate(points),
                       tuple(x.code for x in f.recommendations))


def called_out(v: Verification) -> tuple[RuleCheck, ...]:
    """The pulled levers that saved far less than predicted."""
    return tuple(c for c in v.checks if c.shortfall)


__all__ = ["history_points", "RunPoint", "CalibrationRow", "point_of", "pair_ratios", "calibrate", "CALIBRATION_MIN_EFFECT", "SHORTFALL_RATIO", "PoolCheck", "RuleCheck", "Verification", "verify", "comparable", "ratio_verdict", "called_out"]
