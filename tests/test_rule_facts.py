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
