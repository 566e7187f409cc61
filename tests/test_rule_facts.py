"""Issue 33 item 5 (in part): the facts the rules derive from an analysis are
derived once per analysis by the findings stage (`RuleFacts`) and handed to
every rule, instead of each rule deriving them again (the workload was
classified by the findings stage and again by five rules: 6 times a run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import sample_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["moe_short_fsdp_ep", "dense_long_fsdp_cp", "remat_full"])
def test_the_workload_is_classified_once_per_analysis(name, monkeypatch):
    from profanalyzer.analyze import workload
    from profanalyzer.findings import rules
    from profanalyzer.pipeline.run import run

    seen = []
    real = workload.classify_workload

    def counted(analysis):
        seen.append(analysis)
        return real(analysis)

    monkeypatch.setattr(rules, "classify_workload", counted)
    r = run(sample_path(name))
    # the rules that read the workload ran (sharding, tokamax, remat)
    assert {"SH001", "TK002", "RM001"} <= set(r.findings.rules_run)
    # once per analysis the rules ran over (a firing rule's needs can make a second, fuller one)
    assert seen and len(seen) == len({id(a) for a in seen}) <= 2
    assert seen[-1] is r.analysis
    assert r.findings.workload == real(r.analysis)


def test_a_rule_alone_derives_its_facts_and_equals_the_run():
    """A test (or a notebook) may call one rule on an analysis: it derives the facts itself, with the
    same findings as in the run."""
    from profanalyzer.findings.engine import all_rules
    from profanalyzer.findings.rules import RuleFacts
    from profanalyzer.pipeline.run import run

    r = run(sample_path("moe_short_fsdp_ep"))
    facts = RuleFacts.of(r.analysis)
    for rule in all_rules():
        assert rule.check(r.analysis) == rule.check(r.analysis, facts), rule.code


def test_no_rule_derives_the_workload_itself():
    offenders = [p.name for p in (ROOT / "heuristics").glob("*.py") if "classify_workload" in p.read_text()]
    assert offenders == []


@pytest.mark.parametrize("name", ["remat_full", "real-tpu/decode_gqa_bf16"])
def test_the_facts_hold_the_step_serving_and_the_fp8_cap(name):
    """The step, serving or not and the FP8 cap are derived once (RuleFacts), as the analysis states them."""
    from profanalyzer.core.hardware import FP8_MAX_SPEEDUP
    from profanalyzer.findings.rules import RuleFacts
    from profanalyzer.pipeline.run import run

    a = run(sample_path(name)).analysis
    facts = RuleFacts.of(a)
    assert facts.step_ps == a.steps.step_time_ps["mean"] > 0
    assert facts.serving == (a.run_kind is not None and a.run_kind.kind == "inference")
    assert facts.serving == name.startswith("real-tpu/decode")  # a training step and a measured decode step
    assert facts.fp8_cap_ps == pytest.approx((1 - 1 / FP8_MAX_SPEEDUP) * facts.step_ps)


def test_no_rule_derives_a_fact_itself():
    """The step, serving and the FP8 cap come from RuleFacts; a rule names a claim's pool by its type."""
    texts = {p.name: p.read_text() for p in (ROOT / "heuristics").glob("*.py")}
    assert [n for n, t in texts.items() if 'step_time_ps["mean"]' in t] == []
    assert [n for n, t in texts.items() if "run_kind.kind" in t] == []
    assert [n for n, t in texts.items() if '"bucket:' in t or "claims={" in t] == []


def test_a_claim_names_a_pool_that_exists():
    from profanalyzer.core.vocab import BUCKETS
    from profanalyzer.model.findings import Claim

    assert Claim.bucket("idle", 5.0) == ("bucket:idle", 5.0)
    assert Claim.remat(2.0).pool == "remat"
    with pytest.raises(ValueError, match="no time bucket"):
        Claim.bucket("matmul_bf6", 1.0)  # a typo fails where the rule builds the claim
    assert [c.pool for c in Claim.buckets(dict.fromkeys(BUCKETS, 1.0))] == [f"bucket:{b}" for b in BUCKETS]


def test_a_finding_merges_its_claims_by_pool_and_takes_only_claims():
    from profanalyzer.findings.engine import all_rules
    from profanalyzer.model.findings import Claim
    from profanalyzer.pipeline.run import run

    a = run(sample_path("remat_full")).analysis
    r = all_rules()[0]
    f = r.finding(a, 10.0, ["e"], [], claims=[Claim.bucket("idle", 4.0), Claim.remat(1.0), Claim.bucket("idle", 6.0)])
    assert f.claims == (Claim("bucket:idle", 10.0), Claim("remat", 1.0))
    assert all(isinstance(c, Claim) for c in f.claims)
    with pytest.raises(TypeError, match="Claims"):
        r.finding(a, 1.0, ["e"], [], claims={"bucket:idle": 1.0})  # type: ignore[arg-type]  # the old form


def test_claims_read_back_from_a_saved_document_are_claims(tmp_path):
    import json

    from profanalyzer.model.findings import Claim
    from profanalyzer.pipeline.run import run

    r = run(sample_path("remat_full"))
    claimed = [f for f in r.findings.recommendations if f.claims]
    assert claimed
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(r.document()))
    back = run(saved)
    def pools(run_):
        return [[c.pool for c in f.claims] for f in run_.findings.recommendations]

    assert pools(back) == pools(r)
    assert [c.ps for f in back.findings.recommendations for c in f.claims] == pytest.approx(
        [c.ps for f in r.findings.recommendations for c in f.claims], rel=1e-6)  # the JSON keeps 10 digits
    assert all(isinstance(c, Claim) for f in back.findings.recommendations for c in f.claims)
    # the JSON form is the pair [pool, ps], as before the claims were typed
    pool, ps = json.loads(saved.read_text())["recommendations"][0]["claims"][0]
    assert pool.startswith(("bucket:", "remat")) and ps > 0


def test_the_rules_read_the_facts_they_are_handed():
    """The facts decide: handed `serving=True`, the training-only rules stay quiet on a training step."""
    import dataclasses

    from profanalyzer.findings.engine import all_rules
    from profanalyzer.findings.rules import RuleFacts
    from profanalyzer.pipeline.run import run

    a = run(sample_path("remat_full")).analysis
    facts = RuleFacts.of(a)
    rm = next(r for r in all_rules() if r.code == "RM001")
    assert rm.check(a, facts) and not facts.serving
    assert rm.check(a, dataclasses.replace(facts, serving=True)) == []


def test_a_claim_built_without_its_constructors_is_checked_where_the_finding_is_made():
    from profanalyzer.model.findings import Claim

    with pytest.raises(ValueError, match="no pool"):
        Claim.merged([Claim("bucket:typo", 1.0)])
    with pytest.raises(ValueError, match="no pool"):
        Claim.merged([Claim("idle", 1.0)])
    assert Claim.merged([Claim("remat", 1.0), Claim("bucket:idle", 2.0)]) == (Claim("bucket:idle", 2.0), Claim("remat", 1.0))
