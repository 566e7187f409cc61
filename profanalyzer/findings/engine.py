"""Findings stage: run the guide-lever rules over an Analysis.

    analysis (frozen) -> run_rules(analysis) -> Findings (frozen)

Rules live in the `heuristics` package, one module per lever; each module
exposes `RULES`, a tuple of `profanalyzer.findings.rules.Rule` objects. A rule reads
only the Analysis and returns findings with an estimated saving (ps per step,
computed from the trace), the evidence behind it and the exact flags / config
to change.

Ranking and merging: findings are ranked by estimated saving. Two findings that
claim the same time (the same `claims` key, e.g. `bucket:all_gather`) never
both count it: the lower-ranked one keeps only the part of its saving not
already claimed, and says so.

This module also reads a saved document back (`load_analysis`); the library
entry of `profanalyze analyze` for either input is profanalyzer.pipeline.run.run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from profanalyzer.analyze.sourcelines import finding_sources
from profanalyzer.core.vocab import WHAT_IF_LEVERS
from profanalyzer.findings.rules import Rule, RuleFacts, severity_of
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.documents import read_document, read_json
from profanalyzer.model.findings import Finding, Findings, RuleDoc
from profanalyzer.model.invariants import claim_capacity

__all__ = [
    "all_rules", "merge", "run_rules", "rule_docs", "load_analysis", "completed", "together",
]


def all_rules() -> tuple[Rule, ...]:
    from profanalyzer.heuristics import registry

    return registry()


def _selected(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool:
    sel = tuple(select)
    if sel and not any(code.startswith(p) for p in sel):
        return False
    return not any(code.startswith(p) for p in ignore)


def merge(findings: list[Finding], analysis: Analysis) -> tuple[Finding, ...]:
    """Rank by saving; a finding's claimed time that a higher-ranked finding
    already took is removed from its saving, so savings never double count."""
    step_ps = analysis.steps.step_time_ps["mean"] or 1.0
    ranked = sorted(findings, key=lambda f: (-f.estimated_saving_ps, f.code, f.title))
    used: dict[str, float] = {}
    out: list[Finding] = []
    for f in ranked:
        saving = f.estimated_saving_ps
        shared = []
        for key, amount in f.claims:
            left = max(0.0, claim_capacity(analysis, key) - used.get(key, 0.0))
            allowed = min(amount, left)
            if allowed < amount:
                saving -= amount - allowed
                shared.append(key)
            used[key] = used.get(key, 0.0) + allowed
        saving = max(0.0, saving)
        frac = saving / step_ps
        out.append(
            replace(
                f,
                estimated_saving_ps=saving,
                estimated_saving_fraction=frac,
                severity=severity_of(frac),
                merged_note=(f"saving reduced: {', '.join(shared)} already claimed by a higher-ranked finding" if shared else ""),
            )
        )
    out.sort(key=lambda f: (-f.estimated_saving_ps, f.code, f.title))
    return tuple(out)


#: A finding that claims step time but would save less than this share of the step is not ranked as a
#: recommendation (a finding that claims no time, a capture-quality warning, stays).
MIN_RECOMMENDATION_FRACTION = 0.005


def _worth_ranking(f: Finding, analysis: Analysis) -> bool:
    step = analysis.steps.step_time_ps.get("mean") or 0
    return not f.claims or step <= 0 or f.estimated_saving_ps >= MIN_RECOMMENDATION_FRACTION * step


def run_rules(analysis: Analysis, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> Findings:
    rules = [r for r in all_rules() if _selected(r.code, select, ignore)]
    facts = RuleFacts.of(analysis)  # derived once, read by every rule
    found: list[Finding] = []
    for r in rules:
        found.extend(x if x.doc is not None else replace(x, doc=r.doc) for x in r.check(analysis, facts)
                     if _worth_ranking(x, analysis))
    findings = Findings(
        recommendations=tuple(finding_sources(f, analysis) for f in merge(found, analysis)),
        workload=facts.workload,
        rules_run=tuple(r.code for r in rules),
        selection={"select": tuple(select), "ignore": tuple(ignore)},
    )
    findings.self_check(analysis)
    return replace(findings, together=together(analysis, findings))


def together(analysis: Analysis, findings: Findings) -> tuple[tuple[str, ...], float] | None:
    """(levers, saving ps per step) of the recommendations' levers pulled
    together (whatif.what_if, as `analyze --what-if`), when the re-timing
    models every finding's claims (whatif.modelled); else None."""
    from profanalyzer.findings.whatif import modelled, what_if

    recs = findings.recommendations
    levers = tuple(lv for lv in WHAT_IF_LEVERS if any(f.lever == lv for f in recs))
    if levers and all(modelled(f) for f in recs):
        return levers, what_if(analysis, findings, levers).saving_ps
    return None


def rule_docs(codes: Iterable[str] | None = None) -> dict[str, RuleDoc]:
    """The docs of the registered rules by code (all, or those in `codes`),
    for the report's rule explanations."""
    want = None if codes is None else set(codes)
    return {r.code: r.doc for r in all_rules() if want is None or r.code in want}


def completed(analysis: Analysis, findings: Findings) -> Findings:
    """Saved findings with what the JSON does not hold: each finding's rule
    doc (from the registry; a code no longer registered keeps none) and the
    levers' saving pulled together."""
    docs = rule_docs({f.code for f in findings.recommendations})
    f = replace(findings, recommendations=tuple(
        x if x.doc is not None or x.code not in docs else replace(x, doc=docs[x.code]) for x in findings.recommendations))
    return replace(f, together=together(analysis, f))


def load_analysis(path: str | Path, doc: Any = None) -> tuple[Analysis, Findings]:
    """A saved `analyze --json` document, typed and self-checked, ready to
    render again (each finding with its rule's doc). A document without
    findings sections gets the rules run on it now. `doc`: its JSON value when
    the caller read it (a Source); else the file is read. InputError (one
    line) when the file is not such a document."""
    a, f = read_document(read_json(path) if doc is None else doc, str(path))
    return a, (completed(a, f) if f is not None else run_rules(a))


