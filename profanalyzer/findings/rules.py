"""What a guide-lever rule is: `Rule`, the `@rule` decorator, the fixed
sections of its docstring, severity by saving, and `RuleFacts`, what the rules
derive from an analysis (computed once per analysis and handed to each rule).

The heuristics package (one module per lever) imports this module, the
records (`profanalyzer.model.analysis`), the vocabulary and the formatters; never the
findings stage that runs the rules.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from profanalyzer.analyze.workload import classify_workload
from profanalyzer.core.hardware import FP8_MAX_SPEEDUP
from profanalyzer.core.shell import ENV, check_action, check_flag
from profanalyzer.core.vocab import GUIDE_SECTIONS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Claim, Finding, RuleDoc, WorkloadClass

#: Severity by estimated saving (fraction of step time).
SEVERITY = (("high", 0.10), ("medium", 0.03), ("low", 0.0))
DOC_HEADINGS = ("What it detects:", "Why it costs time:", "What to change:")
#: What a rule may need read when it fires (Rule.needs).
NEEDS = ("memory",)


def parse_doc(doc: str | None) -> RuleDoc:
    """Split a rule docstring into its sections.

    The docstring must contain the headings `What it detects:`,
    `Why it costs time:` and `What to change:` in this order.
    """
    text = inspect.cleandoc(doc or "")
    heads = DOC_HEADINGS
    pos = [text.find(h) for h in heads]
    if any(p < 0 for p in pos) or pos != sorted(pos):
        raise ValueError("rule docstring lacks the sections: " + ", ".join(heads))
    parts = []
    for i, h in enumerate(heads):
        start = pos[i] + len(h)
        end = pos[i + 1] if i + 1 < len(heads) else len(text)
        parts.append(re.sub(r"\s+", " ", text[start:end]).strip())
    return RuleDoc(*parts)


def severity_of(fraction: float) -> str:
    for name, floor in SEVERITY:
        if fraction >= floor:
            return name
    return "low"


@dataclass(frozen=True)
class RuleFacts:
    """The facts the rules derive from one analysis, computed once by the findings stage and handed to
    every rule (`check(analysis, facts)`), so no rule derives them again."""

    #: the workload class: the guide's row (dense or MoE, short or long sequences, the sharding and
    #: bottleneck it implies)
    workload: WorkloadClass
    #: the mean step, ps (1.0 when the analysis has none, so a share of it stays finite)
    step_ps: float
    #: an inference (serving) step: training-only advice stays quiet
    serving: bool
    #: the most an FP8 change may save per step, ps: the fastest published Ironwood recipe's
    #: end-to-end speed-up (hardware.FP8_MAX_SPEEDUP) applied to the step
    fp8_cap_ps: float

    @classmethod
    def of(cls, analysis: Analysis) -> RuleFacts:
        step = analysis.steps.step_time_ps["mean"] or 1.0
        return cls(workload=classify_workload(analysis), step_ps=step,
                   serving=analysis.run_kind is not None and analysis.run_kind.kind == "inference",
                   fp8_cap_ps=(1.0 - 1.0 / FP8_MAX_SPEEDUP) * step)


@dataclass(frozen=True)
class Rule:
    code: str
    lever: str
    title: str
    #: `check(analysis, facts=None)`: the findings of the rule (facts: the run's RuleFacts, derived here
    #: when not given, e.g. by a test calling one rule alone)
    check: Callable[..., list[Finding]]
    doc: RuleDoc
    fixtures: tuple[str, str]  # (scenario where it fires, scenario where it stays quiet)
    #: Every LIBTPU_INIT_ARGS flag the rule may set (its findings set a
    #: subset): what `explain` prints for "the flags below".
    flags: tuple[str, ...] = ()
    #: What the rule's findings need beyond the default read, read by
    #: `run.run` when one of them fires (then the rules run again):
    #: "memory" (the HBM headroom in bytes: profanalyzer.analyze.memory).
    needs: tuple[str, ...] = ()

    def finding(
        self,
        analysis: Analysis,
        saving_ps: float,
        evidence: Iterable[str],
        actions: Iterable[str],
        assumptions: Iterable[str] = (),
        claims: Iterable[Claim] = (),
        title: str | None = None,
        flags: Iterable[str] = (),
        lever: str | None = None,
    ) -> Finding:
        """Build a finding of this rule with severity from its saving.

        `flags` are the LIBTPU_INIT_ARGS flags to add, in order (rendered as
        a shell assignment by profanalyzer.core.shell for each output); `actions`
        the other change lines, one item a line (config settings, `# ...`
        comments), never pre-wrapped: renderers wrap comments, never drop
        or cut them. ValueError when either breaks its form. `lever`: the
        lever the estimate is computed from when it is not the rule's own
        (a rule whose fallback estimate is another lever's files it there)."""
        lever = lever or self.lever
        step = analysis.steps.step_time_ps["mean"] or 1.0
        saving_ps = max(0.0, float(saving_ps))
        frac = saving_ps / step
        return Finding(
            code=self.code,
            lever=lever,
            title=title or self.title,
            severity=severity_of(frac),
            estimated_saving_ps=saving_ps,
            estimated_saving_fraction=frac,
            evidence=tuple(evidence),
            actions=tuple(check_action(x) for x in actions),
            assumptions=tuple(assumptions),
            guide_section=GUIDE_SECTIONS[lever],
            claims=Claim.merged(claims),
            flags=tuple(check_flag(x) for x in flags),
            doc=self.doc,
        )


def rule(code: str, lever: str, title: str, fixtures: tuple[str, str], flags: Iterable[str] = (),
         needs: Iterable[str] = ()):
    """Decorator: turn `check(rule, analysis, facts) -> list[Finding]` into a Rule.

    The function's docstring becomes the rule's doc (fixed sections);
    `flags` every LIBTPU_INIT_ARGS flag the rule may set. A doc that refers
    to flags ("flags below", or names LIBTPU_INIT_ARGS) needs them listed.
    `needs`: what a firing rule needs read (NEEDS), see Rule.needs.
    """
    listed = tuple(check_flag(x) for x in flags)
    wanted = tuple(needs)
    unknown = [n for n in wanted if n not in NEEDS]
    if unknown:
        raise ValueError(f"{code}: unknown needs {', '.join(unknown)} (known: {', '.join(NEEDS)})")

    def wrap(fn: Callable[[Rule, Analysis, RuleFacts], list[Finding]]) -> Rule:
        r: Rule

        def check(analysis: Analysis, facts: RuleFacts | None = None) -> list[Finding]:
            found = fn(r, analysis, facts if facts is not None else RuleFacts.of(analysis))
            for f in found:
                extra = [x for x in f.flags if x not in listed]
                if extra:
                    raise ValueError(f"{code}: flags not listed in its rule: {', '.join(extra)}")
            return found

        doc = parse_doc(fn.__doc__)
        if ("flags below" in doc.change or ENV in doc.change) and not listed:
            raise ValueError(f"{code}: its doc refers to {ENV} flags but the rule lists none")
        r = Rule(code, lever, title, check, doc, fixtures, listed, wanted)
        return r

    return wrap
