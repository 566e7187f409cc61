"""The findings stage's records: each `Finding` (a ranked recommendation tied
to a lever), the `WorkloadClass`, and `Findings`, the JSON document's second
half. The JSON form is `Record`'s (model/records.py), as for the analysis
(model/analysis.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from profanalyzer.core.errors import InvariantError
from profanalyzer.model.invariants import check_findings
from profanalyzer.model.records import Record

if TYPE_CHECKING:
    from profanalyzer.model.analysis import Analysis


@dataclass(frozen=True)
class RuleDoc(Record):
    """The three fixed sections of a rule's docstring (shown verbatim)."""

    detects: str
    why: str
    change: str


@dataclass(frozen=True)
class Finding(Record):
    code: str
    lever: str
    title: str
    severity: str
    estimated_saving_ps: float
    estimated_saving_fraction: float
    evidence: tuple[str, ...]
    actions: tuple[str, ...]  # exact config / comment lines, one item a line (the flags are in `flags`)
    assumptions: tuple[str, ...]
    guide_section: str
    claims: tuple[tuple[str, float], ...] = ()  # (pool key, ps) this saving comes out of

    merged_note: str = ""
    #: LIBTPU_INIT_ARGS flags to add, in order (profanalyzer.core.shell renders them for each format)
    flags: tuple[str, ...] = ()
    #: "op: file:line (function)" of the ops its evidence names (profanalyzer.analyze.sourcelines)
    sources: tuple[str, ...] = ()
    #: The rule's doc, set when the rule builds the finding (Rule.finding) or
    #: when a saved document is read back (findings.with_docs): renderers read
    #: it here, not in the rule registry. Not in the JSON.
    doc: RuleDoc | None = field(default=None, compare=False, repr=False, metadata={"json": False})

    def _repr_html_(self) -> str:
        from profanalyzer.model.frames import finding_card

        return finding_card(self)


@dataclass(frozen=True)
class WorkloadClass(Record):
    kind: str  # dense | moe | no model (no matmul or attention in the step)
    sequence: str  # short | long | unknown | n/a
    row: str  # the guide table row (training), or the serving verdict
    primary_sharding: str
    secondary_sharding: str
    main_bottleneck: str
    reasons: tuple[str, ...]
    run_kind: str = "training"  # training | inference | unknown
    run_kind_reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Findings(Record):
    recommendations: tuple[Finding, ...]
    workload: WorkloadClass | None
    rules_run: tuple[str, ...]
    selection: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: (levers, ps per step) the recommendations' levers save pulled together
    #: (the what-if re-timing, profanalyzer.findings.whatif), when it models every
    #: finding's claims; None otherwise. Set by the findings stage; not in the JSON.
    together: tuple[tuple[str, ...], float] | None = field(default=None, compare=False, repr=False, metadata={"json": False})

    def self_check(self, analysis: Analysis) -> None:
        """Raise InvariantError when a finding claims more than the time it
        names or than the step (see check_findings)."""
        problems = check_findings(self, analysis)
        if problems:
            raise InvariantError(f"findings self-check failed: {problems[0]}")
