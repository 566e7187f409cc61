"""The findings stage's records: each `Finding` (a ranked recommendation tied
to a lever), the `WorkloadClass`, and `Findings`, the JSON document's second
half. The JSON form is `Record`'s (model/records.py), as for the analysis
(model/analysis.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from profanalyzer.core.errors import InvariantError
from profanalyzer.core.vocab import BUCKETS, CLAIM_BUCKET, CLAIM_REMAT
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


class Claim(NamedTuple):
    """Part of a finding's saving and the time it comes out of, its pool: `bucket:<name>` (a bucket of
    the step, one of core.vocab.BUCKETS) or `remat` (the recomputed ops). Built by `Claim.bucket`,
    `Claim.buckets` or `Claim.remat`, which check the pool; the JSON form is the pair `[pool, ps]`. The
    findings' self-check holds each claim to the time its pool holds (model/invariants.check_findings),
    the what-if re-timing reads them (findings/whatif)."""

    pool: str
    ps: float

    @classmethod
    def bucket(cls, name: str, ps: float) -> Claim:
        """`ps` of the step's bucket `name`; ValueError for a name that is no bucket."""
        if name not in BUCKETS:
            raise ValueError(f"a claim on {name!r}, which is no time bucket (core.vocab.BUCKETS)")
        return cls(CLAIM_BUCKET + name, ps)

    @classmethod
    def buckets(cls, ps_by_bucket: Mapping[str, float]) -> list[Claim]:
        """One claim per bucket of `ps_by_bucket` (bucket name -> ps)."""
        return [cls.bucket(name, ps) for name, ps in ps_by_bucket.items()]

    @classmethod
    def remat(cls, ps: float) -> Claim:
        """`ps` of the recomputed ops' time (Analysis.remat)."""
        return cls(CLAIM_REMAT, ps)

    @staticmethod
    def merged(claims: Iterable[Claim]) -> tuple[Claim, ...]:
        """The claims with one per pool (the ps of a pool's claims summed, in order), sorted by pool;
        TypeError for anything that is not a Claim (a rule passing a plain mapping), ValueError for a pool
        that is neither a bucket nor the recompute (a Claim built without its constructors)."""
        by_pool: dict[str, float] = {}
        for c in claims:
            if not isinstance(c, Claim):
                raise TypeError(f"a finding's claims are Claims, not {type(c).__name__} ({c!r})")
            if c.pool != CLAIM_REMAT and not (c.pool.startswith(CLAIM_BUCKET) and c.pool[len(CLAIM_BUCKET):] in BUCKETS):
                raise ValueError(f"a claim on {c.pool!r}, which is no pool (bucket:<name> or remat)")
            by_pool[c.pool] = by_pool[c.pool] + c.ps if c.pool in by_pool else c.ps
        return tuple(sorted(Claim(pool, ps) for pool, ps in by_pool.items()))


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
    claims: tuple[Claim, ...] = ()  # the pools this saving comes out of (Claim)

    merged_note: str = ""
    #: LIBTPU_INIT_ARGS flags to add, in order (profanalyzer.core.shell renders them for each format)
    flags: tuple[str, ...] = ()
    #: "op: file:line (function)" of the ops its evidence names (profanalyzer.analyze.sourcelines)
    sources: tuple[str, ...] = ()
    #: The rule's doc, set when the rule builds the finding (Rule.finding) or
    #: when a saved document is read back (findings.with_docs): renderers read
    #: it here, not in the rule registry. Not in the JSON.
    doc: RuleDoc | None = field(default=None, compare=False, repr=False, metadata={"json": False})


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
