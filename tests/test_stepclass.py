"""Periodic heavy steps reported as a class (profanalyzer.analyze.stepclass)."""

from __future__ import annotations

import pytest
from conftest import analysis_of, sample_names

from profanalyzer.analyze.stepclass import step_classes
from profanalyzer.model.analysis import StepRow
from profanalyzer.synth.builder import US
from profanalyzer.synth.scenarios import SCENARIOS


def test_periodic_checkpoint_is_a_class():
    spec = SCENARIOS["periodic_checkpoint"]
    a = analysis_of("periodic_checkpoint")
    want = [s for s in range(spec.steps) if s >= spec.heavy_every and s % spec.heavy_every == 0]
    (c,) = a.steps.classes
    assert (c.kind, c.period, c.first, list(c.steps)) == ("periodic", spec.heavy_every, want[0], want)
    assert c.extra_ps == pytest.approx(spec.heavy_extra_us * US, rel=0.05)
    assert c.main_bucket == "idle" and c.main_bucket_extra_ps == pytest.approx(spec.heavy_extra_us * US, rel=0.05)
    med = a.steps.step_time_ps["median"]
    assert c.amortized_fraction == pytest.approx(c.extra_ps / spec.heavy_every / med, rel=1e-6)
    # still out of the steady state, and still listed as dropped with a reason
    assert set(want) <= {r.number for r in a.steps.dropped}


@pytest.mark.parametrize("name", [n for n in sample_names() if n != "periodic_checkpoint"])
def test_no_class_without_a_schedule(name):
    assert analysis_of(name).steps.classes == ()


def _table(times: dict[int, float], dropped: set[int]) -> tuple[StepRow, ...]:
    return tuple(StepRow(n, t, n not in dropped, "" if n not in dropped else "slow", {"idle": t - 100.0, "other_compute": 100.0})
                 for n, t in sorted(times.items()))


def test_sporadic_or_broken_schedules_are_not_classes():
    base = {n: 100.0 for n in range(12)}
    periodic = {**base, 0: 300.0, 4: 150.0, 8: 150.0}
    (c,) = step_classes(_table(periodic, {0, 4, 8}))
    assert (c.period, c.steps, c.extra_ps, c.main_bucket) == (4, (4, 8), 50.0, "idle")
    sporadic = {**base, 3: 150.0, 8: 150.0}  # gcd 5, but step 13 is beyond the capture: 3 and 8 only
    assert step_classes(_table(sporadic, {3, 8}))[0].period == 5
    broken = {**base, 2: 150.0, 4: 150.0, 8: 150.0}  # period 2, but 6 and 10 are normal
    assert step_classes(_table(broken, {2, 4, 8})) == ()
    coprime = {**base, 4: 150.0, 7: 150.0}  # period 3 would need step 10 too
    assert step_classes(_table(coprime, {4, 7})) == ()
    assert step_classes(_table({**base, 5: 150.0}, {5})) == ()  # one heavy step is no period
