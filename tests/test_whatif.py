"""Levers together (profanalyzer.findings.whatif): the combined re-timed step on the
synthesizer's two-lever pairs, the guide bounds, the range, the CLI."""

from __future__ import annotations

import json

import pytest
from conftest import analysis_of, findings_of, run_cli, sample_names, sample_path

from profanalyzer.findings.whatif import (
    FP8_MAX_SPEEDUP,
    GUIDE_REMAT_MAX_OVERHEAD,
    WHAT_IF_LEVERS,
    parse_levers,
    what_if,
)
from profanalyzer.synth.scenarios import SCENARIOS

#: Pairs of the catalog that change two levers at once.
TWO_LEVER = sorted(
    (s.name, s.pair, (s.stresses, *s.also))
    for s in SCENARIOS.values()
    if s.role == "before" and s.also and s.name in sample_names() and s.pair in sample_names()
)
#: The issue's acceptance bound: combined what-if within 15% of the measured change.
TOLERANCE = 0.15


def test_catalog_has_two_lever_pairs():
    assert len(TWO_LEVER) >= 3
    assert {frozenset(lv) for _, _, lv in TWO_LEVER} >= {frozenset(("fp8", "sc_offload")), frozenset(("fp8", "remat")), frozenset(("remat", "sc_offload"))}


@pytest.mark.parametrize("before,after,levers", TWO_LEVER, ids=[p[0] for p in TWO_LEVER])
def test_combined_what_if_matches_the_measured_combined_change(before, after, levers):
    a0, a1 = analysis_of(before), analysis_of(after)
    measured = a0.steps.step_time_ps["mean"] - a1.steps.step_time_ps["mean"]
    w = what_if(a0, findings_of(before), levers)
    assert measured > 0
    err = abs(w.saving_ps - measured) / measured
    assert err <= TOLERANCE, f"{before}->{after} {levers}: what-if {w.saving_ps / 1e9:.3f} ms, measured {measured / 1e9:.3f} ms ({err:.0%} off)"
    # the combination is re-timed, not summed: never more than the claims together
    assert w.saving_ps <= w.sum_of_claims_ps + 1
    assert w.low_ps <= w.step_time_ps <= w.high_ps
    assert w.low_ps <= a1.steps.step_time_ps["mean"] * (1 + TOLERANCE)


@pytest.mark.parametrize("name", ["bf16_dense", "remat_full", "offload_off", "fp8_offload_before", "fp8_remat_before"])
def test_guide_bounds_and_range(name):
    a, f = analysis_of(name), findings_of(name)
    w = what_if(a, f, WHAT_IF_LEVERS)
    base = a.steps.step_time_ps["mean"]
    assert w.base_step_ps == pytest.approx(base)
    assert 0 < w.low_ps <= w.step_time_ps <= w.high_ps <= base + 1
    fp8 = w.contributions["fp8"]
    # FP8: never faster than the fastest published recipe (1.54x end to end), on every core
    assert fp8.alone_ps <= base * (1 - 1 / FP8_MAX_SPEEDUP) + 1
    for c in what_if(a, f, ("fp8",)).per_core:
        assert c.new_step_ps >= c.step_ps / FP8_MAX_SPEEDUP - 1
    # remat: ~25-30% extra FLOPs, so removing it saves at most 30/130 of the compute
    compute = sum(v.ps for b, v in a.breakdown.items() if b in ("matmul_bf16", "matmul_fp8", "matmul_other", "attention", "other_compute"))
    assert w.contributions["remat"].alone_ps <= compute * GUIDE_REMAT_MAX_OVERHEAD / (1 + GUIDE_REMAT_MAX_OVERHEAD) + 1
    # a lever's marginal saving in the combination is never above its saving alone
    for e in w.contributions.values():
        assert e.combined_ps <= e.alone_ps + 1
    assert sum(e.combined_ps for e in w.contributions.values()) == pytest.approx(w.saving_ps, rel=1e-9, abs=1)


def test_interaction_is_not_the_sum():
    """remat removes recomputed BF16 matmuls: FP8 has less left to speed up."""
    w = what_if(analysis_of("remat_full"), findings_of("remat_full"), ("fp8", "remat"))
    fp8 = w.contributions["fp8"]
    assert fp8.combined_ps < fp8.alone_ps
    assert w.saving_ps < w.sum_of_claims_ps


def test_offload_hides_only_behind_independent_compute():
    a, f = analysis_of("offload_off"), findings_of("offload_off")
    w = what_if(a, f, ("sc_offload",))
    assert w.hideable_fraction and all(0 <= h <= 1 for h in w.hideable_fraction.values())
    assert w.saving_ps <= w.contributions["sc_offload"].claimed_ps + 1
    # less compute (FP8 on top) leaves less to hide behind
    both = what_if(a, f, ("fp8", "sc_offload"))
    assert both.contributions["sc_offload"].combined_ps <= w.contributions["sc_offload"].alone_ps + 1
    assert all(both.hideable_fraction[t] <= w.hideable_fraction[t] + 1e-12 for t in w.hideable_fraction)


def test_lever_without_finding_changes_nothing():
    w = what_if(analysis_of("fp8_dense"), findings_of("fp8_dense"), ("fp8", "remat"))
    assert w.saving_ps == 0 and w.step_time_ps == w.low_ps == w.high_ps == w.base_step_ps
    assert any("nothing to pull" in n for n in w.notes)


def test_parse_levers():
    assert parse_levers("sc_offload, FP8") == ("fp8", "sc_offload")
    from profanalyzer.core.errors import InputError

    for bad in ("fp9", "", ","):
        with pytest.raises(InputError):
            parse_levers(bad)


def test_cli_what_if_and_history(tmp_path, capsys):
    hist = tmp_path / "hist"
    hist.mkdir()
    for i, n in enumerate(("remat_full", "remat_minimal")):
        rc, _, err = run_cli(capsys, "analyze", sample_path(n), "--json", hist / f"{i:02d}_{n}.json", "--no-html", "-q")
        assert rc == 0, err
    out_json = tmp_path / "o.json"
    rc, out, err = run_cli(capsys, "analyze", sample_path("bf16_dense"), "--no-html", "--what-if", "fp8,remat", "--history", hist, "--json", out_json)
    assert rc == 0, err
    d = json.loads(out_json.read_text())
    w = d["what_if"]
    for k in ("levers", "step_time_ps", "low_ps", "high_ps", "contributions"):
        assert k in w
    assert w["levers"] == ["remat", "fp8"] and w["low_ps"] <= w["step_time_ps"] <= w["high_ps"]
    cal = {r["code"]: r for r in d["calibration"]["rules"]}
    assert cal["RM001"]["changes"] == 1 and 0.5 < cal["RM001"]["median_ratio"] < 1.5
    assert "RM001 has delivered" in out and "what-if remat+fp8" in out
    # the document with the extra keys still reads as an analysis
    rc, _, err = run_cli(capsys, "compare", out_json, hist / "00_remat_full.json", "-q")
    assert rc == 0, err
    rc, _, err = run_cli(capsys, "analyze", sample_path("bf16_dense"), "--no-html", "-q", "--what-if", "warp")
    assert rc == 2 and "unknown lever" in err
    rc, _, err = run_cli(capsys, "analyze", sample_path("bf16_dense"), "--no-html", "-q", "--history", tmp_path / "nope")
    assert rc == 2 and "--history" in err
