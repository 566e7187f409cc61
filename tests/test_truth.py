"""Attribution and overlap against the synthesizer's ground truth, on every sample."""

from __future__ import annotations

import pytest
from conftest import analysis_of, sample_names, truth_of

from profanalyzer.classify import BUCKETS

NAMES = sample_names()
BUCKET_TOL = 0.01  # 1 point of step time
EXPOSED_REL_TOL = 0.05


@pytest.mark.parametrize("name", NAMES)
def test_buckets_and_remat_match_truth(name):
    a = analysis_of(name)
    t = truth_of(name)["summary"]
    for b in BUCKETS:
        got = a.breakdown[b].fraction
        want = t["breakdown_fraction"][b]
        assert got == pytest.approx(want, abs=BUCKET_TOL), f"{name}: {b} {got:.4f} vs truth {want:.4f}"
    assert a.remat.fraction == pytest.approx(t["remat_fraction"], abs=BUCKET_TOL)
    assert sum(s.fraction for s in a.breakdown.values()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_dropped_steps_match_truth(name):
    a = analysis_of(name)
    truth = truth_of(name)["steps"]
    dropped = sorted(r.number for r in a.steps.dropped)
    assert dropped == sorted(truth["warmup"])


@pytest.mark.parametrize("name", NAMES)
def test_conservation_on_every_core_and_step(name):
    from conftest import sample_path

    from profanalyzer.analyze.attribution import attribute_trace
    from profanalyzer.read.xspace.build import load_trace

    for w in attribute_trace(load_trace(sample_path(name))):
        w.attribution.self_check()
        sums = w.attribution.buckets.sum(axis=1)
        assert (sums == w.attribution.step_ps).all()


@pytest.mark.parametrize("name", NAMES)
def test_exposed_per_collective_type_matches_truth(name):
    a = analysis_of(name)
    t = truth_of(name)["summary"]
    step = a.steps.step_time_ps["mean"]
    for ctype, want_frac in t["exposed_fraction"].items():
        want = want_frac * step
        got = sum(c.exposed_ps for c in a.collectives.values() if c.bucket == ctype)
        if want == 0:
            assert got <= 0.001 * step, f"{name}: {ctype} exposed {got} but truth has none"
        else:
            assert got == pytest.approx(want, rel=EXPOSED_REL_TOL), f"{name}: {ctype}"


@pytest.mark.parametrize("name", NAMES)
def test_offload_verdict_matches_truth(name):
    a = analysis_of(name)
    t = truth_of(name)["summary"]["offload"]
    assert a.sparsecore_offload.verdict == t["verdict"], a.sparsecore_offload.reason
    got = sorted(k for k, v in a.sparsecore_offload.offloaded.items() if v)
    assert got == sorted(t["offloaded_types"])
