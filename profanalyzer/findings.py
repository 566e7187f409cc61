"""Findings stage: run the guide-lever rules over an Analysis.

    analysis (frozen) -> run_rules(analysis) -> Findings (frozen)

Rules live in the `heuristics` package, one module per lever; each module
exposes `RULES`, a tuple of `Rule` objects. A rule reads only the Analysis and
returns findings with an estimated saving (ps per step, computed from the
trace), the evidence behind it and the exact flags / config to change.

Ranking and merging: findings are ranked by estimated saving. Two findings that
claim the same time (the same `claims` key, e.g. `bucket:all_gather`) never
both count it: the lower-ranked one keeps only the part of its saving not
already claimed, and says so.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

from profanalyzer.model import Analysis, Finding, Findings, RuleDoc, WorkloadClass  # noqa: F401 - old import path

#: Severity by estimated saving (fraction of step time).
SEVERITY = (("high", 0.10), ("medium", 0.03), ("low", 0.0))

GUIDE_SECTIONS = {
    "fp8": "L1 — FP8 low-precision training (fp8)",
    "sharding": "L2 — Sharding and parallelism (sharding)",
    "sc_offload": "L3 — Communication optimisation: SparseCore collective offload (sc_offload)",
    "remat": "L4 — Activation rematerialisation (remat)",
    "scoped_vmem": "L5 — Scoped VMEM tuning (scoped_vmem)",
    "tokamax": "L6 — Tokamax kernels (tokamax)",
}
LEVERS = tuple(GUIDE_SECTIONS)


def parse_doc(doc: str | None) -> RuleDoc:
    """Split a rule docstring into its sections.

    The docstring must contain the headings `What it detects:`,
    `Why it costs time:` and `What to change:` in this order.
    """
    text = inspect.cleandoc(doc or "")
    heads = ("What it detects:", "Why it costs time:", "What to change:")
    pos = [text.find(h) for h in heads]
    if any(p < 0 for p in pos) or pos != sorted(pos):
        raise ValueError("rule docstring lacks the sections: " + ", ".join(heads))
    parts = []
    for i, h in enumerate(heads):
        start = pos[i] + len(h)
        end = pos[i + 1] if i + 1 < len(heads) else len(text)
        parts.append(re.sub(r"\s+", " ", text[start:end]).strip())
    return RuleDoc(*parts)


@dataclass(frozen=True)
class Rule:
    code: str
    lever: str
    title: str
    check: Callable[[Analysis], list[Finding]]
    doc: RuleDoc
    fixtures: tuple[str, str]  # (scenario where it fires, scenario where it stays quiet)

    def finding(
        self,
        analysis: Analysis,
        saving_ps: float,
        evidence: Iterable[str],
        actions: Iterable[str],
        assumptions: Iterable[str] = (),
        claims: Mapping[str, float] | None = None,
        title: str | None = None,
    ) -> Finding:
        """Build a finding of this rule with severity from its saving."""
        step = analysis.steps.step_time_ps["mean"] or 1.0
        saving_ps = max(0.0, float(saving_ps))
        frac = saving_ps / step
        return Finding(
            code=self.code,
            lever=self.lever,
            title=title or self.title,
            severity=severity_of(frac),
            estimated_saving_ps=saving_ps,
            estimated_saving_fraction=frac,
            evidence=tuple(evidence),
            actions=tuple(actions),
            assumptions=tuple(assumptions),
            guide_section=GUIDE_SECTIONS[self.lever],
            claims=tuple(sorted((claims or {}).items())),
        )


def rule(code: str, lever: str, title: str, fixtures: tuple[str, str]):
    """Decorator: turn `check(analysis) -> list[Finding]` into a Rule.

    The function's docstring becomes the rule's doc (fixed sections).
    """

    def wrap(fn: Callable[[Rule, Analysis], list[Finding]]) -> Rule:
        r: Rule

        def check(analysis: Analysis) -> list[Finding]:
            return fn(r, analysis)

        r = Rule(code, lever, title, check, parse_doc(fn.__doc__), fixtures)
        return r

    return wrap


def severity_of(fraction: float) -> str:
    for name, floor in SEVERITY:
        if fraction >= floor:
            return name
    return "low"


def all_rules() -> tuple[Rule, ...]:
    from heuristics import registry

    return registry()


def _selected(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool:
    sel = tuple(select)
    if sel and not any(code.startswith(p) for p in sel):
        return False
    return not any(code.startswith(p) for p in ignore)


def claim_capacity(analysis: Analysis, key: str) -> float:
    """How much time a claim key stands for: `bucket:<name>` or `remat`."""
    if key == "remat":
        return analysis.remat.ps
    if key.startswith("bucket:"):
        b = analysis.breakdown.get(key[len("bucket:"):])
        return b.ps if b is not None else 0.0
    raise ValueError(f"unknown claim key {key!r}")


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


def run_rules(analysis: Analysis, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> Findings:
    from heuristics.workload import classify_workload

    rules = [r for r in all_rules() if _selected(r.code, select, ignore)]
    found: list[Finding] = []
    for r in rules:
        found.extend(r.check(analysis))
    return Findings(
        recommendations=merge(found, analysis),
        workload=classify_workload(analysis),
        rules_run=tuple(r.code for r in rules),
        selection={"select": tuple(select), "ignore": tuple(ignore)},
    )


def result_document(analysis: Analysis, findings: Findings) -> dict:
    """The JSON document `analyze --json` writes: the analysis plus the
    findings stage's sections (recommendations, workload, rules run)."""
    d = analysis.to_dict()
    d.update(findings.to_dict())
    return d
