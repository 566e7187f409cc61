"""Predicted vs observed (profanalyzer.findings.verify, through compare): the
synthesizer's lever pairs are the ground truth of what pulling a lever saves."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli, sample_doc, sample_names

from profanalyzer.compare.comparison import compare
from profanalyzer.core.stats import SHORTFALL_RATIO
from profanalyzer.findings.verify import ratio_verdict
from profanalyzer.synth.scenarios import SCENARIOS

#: (before, after, rule code of the lever the pair changes) for every pair in the catalog
PAIRS = [
    (s.name, s.pair, s.stresses)
    for s in SCENARIOS.values()
    if s.role == "before" and s.pair in SCENARIOS and s.name in sample_names() and s.pair in sample_names()
]


def test_catalog_has_pairs():
    assert len(PAIRS) >= 6


@pytest.mark.parametrize("before,after,lever", PAIRS, ids=[p[0] for p in PAIRS])
def test_pulled_lever_is_checked_against_the_measured_change(before, after, lever):
    c = compare(sample_doc(before), sample_doc(after))
    assert c.verification_skipped == ""
    counted = [v for v in c.verification if v.ratio is not None]
    assert counted, f"{before} -> {after}: no rule verified"
    levers = {v.lever for v in counted}
    assert lever in levers or (lever == "sharding" and "tokamax" in levers)
    observed = c.step_time.base_ps - c.step_time.new_ps
    for v in counted:
        assert v.observed_ps == pytest.approx(observed)
        assert v.ratio == pytest.approx(v.attributed_ps / v.predicted_ps)
        assert not v.within_noise  # every pair moves the step well beyond its noise
        # the synthesizer's pairs are the ground truth: the rules land within a factor of 1.5
        assert 1 / 1.5 < v.ratio < 1.5, (v.code, v.ratio)
        assert v.verdict == "delivered" and not v.shortfall
    # credited shares add up to the observed change
    assert sum(v.attributed_ps for v in counted) == pytest.approx(observed)


def test_verification_json_keys():
    c = compare(sample_doc("offload_off"), sample_doc("offload_on"))
    d = c.to_dict()
    json.dumps(d)
    (v,) = [v for v in d["verification"] if v["code"] == "SC001"]
    for k in ("code", "lever", "predicted_ps", "observed_ps", "ratio", "within_noise", "buckets", "attributed_ps", "shared_with", "verdict"):
        assert k in v
    assert v["lever"] == "sc_offload" and v["status"] == "vanished"
    # the pools SC001 claimed, each with its claimed and observed ps
    assert set(v["buckets"]) >= {"bucket:all_gather", "bucket:reduce_scatter"}
    for p in v["buckets"].values():
        assert p["claimed_ps"] > 0 and p["observed_ps"] == pytest.approx(p["base_ps"] - p["new_ps"])
        assert p["noise_ps"] is not None
    assert d["verification_skipped"] == ""


def test_follow_on_shrink_is_not_a_pulled_lever():
    """remat_full -> remat_minimal: FP8's estimate shrinks because the recomputed
    matmuls went away, at the same saving per ps of BF16 matmul."""
    c = compare(sample_doc("remat_full"), sample_doc("remat_minimal"))
    by = {v.code: v for v in c.verification}
    assert by["RM001"].ratio is not None and not by["RM001"].shared_with
    fp = by.get("FP001")
    assert fp is not None and fp.status == "follow_on" and fp.ratio is None and fp.attributed_ps == 0


def test_two_levers_pulled_together_share_the_change():
    c = compare(sample_doc("remat_full"), sample_doc("fp8_dense"))
    by = {v.code: v for v in c.verification if v.ratio is not None}
    assert set(by) == {"FP001", "RM001"}
    assert by["FP001"].shared_with == ("RM001",) and by["RM001"].shared_with == ("FP001",)
    joint = (c.step_time.base_ps - c.step_time.new_ps) / (by["FP001"].predicted_ps + by["RM001"].predicted_ps)
    assert by["FP001"].ratio == pytest.approx(joint) and by["RM001"].ratio == pytest.approx(joint)


def test_lever_pulled_without_effect_is_called_out():
    """NEW is BASE with FP001's finding removed: the lever 'was pulled' (the finding
    is gone) but the step did not move: within noise, ratio 0, a shortfall."""
    base = sample_doc("bf16_dense")
    new = sample_doc("bf16_dense")
    new["recommendations"] = [f for f in new["recommendations"] if f["code"] != "FP001"]
    c = compare(base, new)
    (v,) = [v for v in c.verification if v.code == "FP001"]
    assert v.within_noise and v.observed_ps == 0 and v.ratio == 0
    assert v.shortfall and v.verdict == "shortfall"
    assert "Saved far less than predicted: FP001" in c.headline
    from profanalyzer.report.diff import format_text, render_diff_markdown
    from profanalyzer.report.diff_html import render_diff_html

    assert "SHORTFALL FP001" in format_text(c)
    assert "**Shortfall:** FP001" in render_diff_markdown(c)
    assert 'data-verdict="shortfall"' in render_diff_html(c)


def test_different_workloads_are_not_verified():
    base, new = sample_doc("offload_off"), sample_doc("offload_on")
    new["workload"]["row"] = "MoE, very large"
    c = compare(base, new)
    assert c.verification == () and c.verification_skipped.startswith("different workloads")


def test_self_comparison_verifies_nothing():
    c = compare(sample_doc("bf16_dense"), sample_doc("bf16_dense"))
    assert c.verification == () and c.verification_skipped == ""


@pytest.mark.parametrize(
    "predicted,observed,threshold,expect",
    [
        (10.0, 9.0, 1.0, "delivered"),
        (10.0, 4.0, 1.0, "shortfall"),  # beyond noise but under half
        (10.0, 0.5, 1.0, "shortfall"),  # nothing measurable for a large prediction
        (10.0, 25.0, 1.0, "overshoot"),
        (0.8, 0.5, 1.0, "too small"),  # the prediction cannot show above the threshold
        (10.0, -3.0, 1.0, "shortfall"),  # the step got slower
        (0.0, 3.0, 1.0, "no prediction"),
    ],
)
def test_ratio_verdict_noise_logic(predicted, observed, threshold, expect):
    ratio, within, short, verdict = ratio_verdict(predicted, observed, threshold)
    assert verdict == expect
    assert within == (abs(observed) <= threshold)
    if ratio is not None:
        assert ratio == pytest.approx(observed / predicted)
        assert short == (verdict == "shortfall")
        if verdict == "shortfall" and not within:
            assert ratio < SHORTFALL_RATIO


def test_compare_cli_json_has_verification(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(sample_doc("offload_off")))
    b.write_text(json.dumps(sample_doc("offload_on")))
    rc, out, _ = run_cli(capsys, "compare", a, b, "--json", "-")
    assert rc == 0
    d = json.loads(out)
    assert [v["code"] for v in d["verification"] if v["ratio"] is not None] == ["SC001"]


def test_fleet_keeps_a_calibration_table(tmp_path):
    """A run history (log dir, timestamped runs): remat_full then remat_minimal
    then bf16_dense then fp8_dense. RM001 and FP001 each pulled once."""
    import shutil

    from conftest import sample_path

    from profanalyzer.fleet import run_fleet

    runs = ("remat_full", "remat_minimal", "bf16_dense", "fp8_dense")
    for i, name in enumerate(runs):
        d = tmp_path / "plugins" / "profile" / f"2024_01_0{i + 1}_00_00_00"
        d.mkdir(parents=True)
        shutil.copy(sample_path(name), d / "t1v-host-0.xplane.pb.gz")
    res = run_fleet([str(tmp_path)], workers=0, use_cache=False)
    cal = {r.code: r for r in res.calibration}
    assert set(cal) >= {"RM001", "FP001"}
    assert cal["RM001"].changes == 1 and cal["FP001"].changes == 1
    assert cal["RM001"].runs == ("2024_01_02_00_00_00",) and cal["FP001"].runs == ("2024_01_04_00_00_00",)
    for r in cal.values():
        assert 1 / 1.5 < r.median_ratio < 1.5 and r.low_ratio <= r.median_ratio <= r.high_ratio
    d = res.to_dict()
    assert {x["code"] for x in d["calibration"]} == set(cal)
