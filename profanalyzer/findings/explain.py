"""`profanalyze explain CODE`: a rule code -> its documentation (the three
fixed sections of its docstring, shown verbatim in reports), its lever and
the guide section it is tied to, its thresholds' fixtures, and every
LIBTPU_INIT_ARGS flag the rule may set (printed as the shell assignment of
profanalyzer.core.shell: the "flags below" a rule's text refers to).

Everything comes from the rule registry (`heuristics.registry()` through
`findings.all_rules`) and the lever vocabulary (`vocab.LEVER_BY_ID`): no text
here is specific to one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.errors import InputError
from profanalyzer.core.vocab import LEVER_BY_ID
from profanalyzer.findings.engine import all_rules
from profanalyzer.model.records import Record

__all__ = ["RuleExplanation", "explain", "known_codes"]


@dataclass(frozen=True)
class RuleExplanation(Record):
    code: str
    title: str
    lever: str  # lever id (the heuristics module)
    lever_title: str
    guide_section: str  # as a finding carries it: 'L1 — FP8 low-precision training (fp8)'
    section: str  # L1..L6
    detects: str
    why: str
    change: str
    fires_on: str  # sample scenario where the rule fires
    quiet_on: str  # sample scenario where it stays quiet
    flags: tuple[str, ...] = ()  # every LIBTPU_INIT_ARGS flag the rule may set (a finding sets those that apply)


def known_codes() -> tuple[str, ...]:
    return tuple(r.code for r in all_rules())


def explain(code: str) -> RuleExplanation:
    """The explanation of one rule code (case-insensitive); InputError (one
    line, listing the codes) when no rule has it."""
    want = code.strip().upper()
    for r in all_rules():
        if r.code == want:
            lv = LEVER_BY_ID[r.lever]
            return RuleExplanation(
                code=r.code, title=r.title, lever=r.lever, lever_title=lv.title, guide_section=lv.guide_section,
                section=lv.section, detects=r.doc.detects, why=r.doc.why, change=r.doc.change,
                fires_on=r.fixtures[0], quiet_on=r.fixtures[1], flags=r.flags,
            )
    raise InputError(f"no rule {code!r}; the rules are {', '.join(known_codes())}")
