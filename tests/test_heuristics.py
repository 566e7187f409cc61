"""Rules: registry completeness, fixtures (fires / stays quiet), ranking,
calibration against the synthesizer's before/after pairs."""

from __future__ import annotations

import re

import pytest
from conftest import analysis_of, findings_of, real_tpu_names, sample_names

from profanalyzer.core.vocab import LEVERS
from profanalyzer.findings.engine import merge, run_rules
from profanalyzer.heuristics import LEVER_MODULES, registry
from profanalyzer.model.findings import Finding
from profanalyzer.synth import SCENARIOS

RULES = registry()
PAIR_TOLERANCE = 0.25
QUIET_MAX = 0.03


def test_registry_is_complete():
    assert set(LEVER_MODULES) == set(LEVERS)
    levers_with_rules = {r.lever for r in RULES}
    assert levers_with_rules == set(LEVERS), "every guide lever has at least one rule"
    for r in RULES:
        assert re.fullmatch(r"[A-Z]{2}\d{3}", r.code), r.code
        assert r.lever in LEVERS
        assert r.title
        for section in (r.doc.detects, r.doc.why, r.doc.change):
            assert len(section) > 40, f"{r.code}: doc section too short"
        for f in (x.partition("@")[0] for x in r.fixtures):  # NAME@CHIP: the sample analysed as that chip
            # a synthesized sample, or a program of the real-TPU corpus (`real-tpu/NAME`)
            assert (f in SCENARIOS and f in sample_names()) or f in real_tpu_names(), (r.code, f)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_fires_on_its_fixture(rule):
    found = rule.check(analysis_of(rule.fixtures[0]))
    assert found, f"{rule.code} must fire on {rule.fixtures[0]}"
    for f in found:
        assert isinstance(f, Finding)
        assert f.code == rule.code and f.lever == rule.lever
        assert (f.actions or f.flags) and f.evidence  # a change to make: config/comment lines or flags
        assert f.estimated_saving_ps >= 0


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_stays_quiet_on_its_fixture(rule):
    found = rule.check(analysis_of(rule.fixtures[1]))
    assert not found, f"{rule.code} must stay quiet on {rule.fixtures[1]}: {[f.title for f in found]}"


STRESSED = sorted(n for n in sample_names() if SCENARIOS[n].stresses and SCENARIOS[n].role != "after")


@pytest.mark.parametrize("name", STRESSED)
def test_stressed_lever_is_in_top_two(name):
    lever = SCENARIOS[name].stresses
    recs = findings_of(name).recommendations
    top2 = [f.lever for f in recs[:2]]
    assert lever in top2, f"{name}: {lever} not in top two {[(f.code, f.estimated_saving_fraction) for f in recs[:4]]}"


PAIRS = sorted(
    (n, SCENARIOS[n].pair)
    for n in sample_names()
    if SCENARIOS[n].role == "before" and SCENARIOS[n].pair in sample_names() and not SCENARIOS[n].also  # two-lever pairs: tests/test_whatif.py
)


@pytest.mark.parametrize("before,after", PAIRS)
def test_predicted_saving_matches_pair(before, after):
    lever = SCENARIOS[before].stresses
    a0, a1 = analysis_of(before), analysis_of(after)
    measured = a0.steps.step_time_ps["mean"] - a1.steps.step_time_ps["mean"]
    assert measured > 0, f"{after} is not faster than {before}"
    recs = [f for f in findings_of(before).recommendations if f.lever == lever]
    assert recs, f"no {lever} finding on {before}"
    predicted = recs[0].estimated_saving_ps
    err = abs(predicted - measured) / measured
    assert err <= PAIR_TOLERANCE, f"{before}->{after}: predicted {predicted / 1e9:.3f} ms, measured {measured / 1e9:.3f} ms ({err:.0%} off)"


def test_well_tuned_trace_is_quiet():
    recs = findings_of("well_tuned").recommendations
    loud = [(f.code, round(f.estimated_saving_fraction, 4)) for f in recs if f.estimated_saving_fraction > QUIET_MAX]
    assert not loud


def test_select_and_ignore_by_prefix():
    a = analysis_of("offload_off")
    only_sc = run_rules(a, select=("SC",))
    assert only_sc.rules_run and all(c.startswith("SC") for c in only_sc.rules_run)
    no_sc = run_rules(a, ignore=("SC",))
    assert not any(c.startswith("SC") for c in no_sc.rules_run)
    assert not any(f.code.startswith("SC") for f in no_sc.recommendations)


def test_merge_never_double_counts():
    a = analysis_of("offload_off")
    cap = a.breakdown["all_gather"].ps
    mk = lambda code, s: Finding(code, "sharding", code, "high", s, s / 1, (), ("x",), (), "", claims=(("bucket:all_gather", s),))
    merged = merge([mk("AA001", cap * 0.8), mk("BB001", cap * 0.8)], a)
    assert merged[0].estimated_saving_ps == pytest.approx(cap * 0.8)
    assert merged[1].estimated_saving_ps == pytest.approx(cap * 0.2)
    assert "already claimed" in merged[1].merged_note
    total = sum(f.estimated_saving_ps for f in merged)
    assert total <= cap + 1


def test_recommendation_json_fields():
    from profanalyzer.cli import result_dict

    d = result_dict(analysis_of("offload_off"), findings_of("offload_off"))
    assert d["recommendations"], "offload_off has findings"
    for rec in d["recommendations"]:
        for k in ("code", "lever", "title", "severity", "estimated_saving_ps", "estimated_saving_fraction", "evidence", "actions"):
            assert k in rec
    assert d["workload"]["row"] in ("dense, short sequence", "dense, long sequence", "MoE, short sequence", "MoE, very large")
    assert d["workload"]["reasons"]


#: Analysis fields a rule may read that a capture can lack (None then): issue 26's per-collective
#: diagnosis, hardware counters, HLO anti-patterns.
OPTIONAL_EVIDENCE = ("collective_diagnosis", "kernel_counters", "antipatterns", "attention_kernels", "decode_cache")


def _optional_reads(rule) -> tuple[str, ...]:
    """The optional-evidence fields the module of a rule's check reads (its source, helpers included)."""
    import inspect

    fn = inspect.getclosurevars(rule.check).nonlocals["fn"]
    src = inspect.getsource(inspect.getmodule(fn))
    return tuple(f for f in OPTIONAL_EVIDENCE if f in src)


OPTIONAL_READERS = [r for r in RULES if _optional_reads(r)]


def test_the_optional_evidence_readers_are_found():
    assert "LC001" in {r.code for r in OPTIONAL_READERS}


@pytest.mark.parametrize("rule", OPTIONAL_READERS, ids=lambda r: r.code)
def test_rule_quiet_without_its_optional_evidence(rule):
    from dataclasses import replace

    a = analysis_of(rule.fixtures[0])
    assert rule.check(a)
    assert not rule.check(replace(a, **{f: None for f in _optional_reads(rule)}))


def test_the_docs_list_every_rule():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs" / "rules"
    text = (docs / "index.md").read_text(encoding="utf-8")
    for r in RULES:
        row = f"| [`{r.code}`]({r.code}.md) | {r.lever} | {r.title} | `{r.fixtures[0]}` | `{r.fixtures[1]}` |"
        assert row in text, f"docs/rules/index.md lacks {r.code} (or its lever, title, fixtures changed): make docs"
        assert (docs / f"{r.code}.md").read_text(encoding="utf-8").startswith(f"# {r.code}: {r.title}\n")
