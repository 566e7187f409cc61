"""The report sections added for issue #16 (where in the model the time went,
why the core was idle, HBM headroom): their view records and builders, kept
out of context.py so that module only hooks them in.

Plain text and formatted numbers, as the other views; the template escapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.format import ms, pct
from profanalyzer.model import Analysis
from profanalyzer.scopes import DEFAULT_DEPTH, collapse
from profanalyzer.vocab import BUCKETS

__all__ = ["ScopeRowView", "ScopesView", "Sections", "scopes_view", "build_sections", "SCOPE_ROWS"]

#: Rows of the HTML/Markdown scope table.
SCOPE_ROWS = 40


@dataclass(frozen=True)
class ScopeRowView:
    scope: str
    ps: float
    ms: str
    pct: str
    main_bucket: str
    comm_ps: float
    comm_ms: str
    remat_ps: float
    remat_ms: str
    ops: int
    count: int


@dataclass(frozen=True)
class ScopesView:
    depth: int
    rows: tuple[ScopeRowView, ...]
    more: int  # rows left out
    note: str


def sort_key(x: float) -> int:
    """A table's sort key (data-v): whole picoseconds."""
    return int(round(x))


def _main_bucket(buckets) -> str:
    order = {b: i for i, b in enumerate(BUCKETS)}
    best = sorted(buckets.items(), key=lambda kv: (-kv[1], order.get(kv[0], 99)))
    return best[0][0] if best else ""


def scopes_view(a: Analysis, depth: int = DEFAULT_DEPTH, limit: int = SCOPE_ROWS) -> ScopesView | None:
    """The scope table at `depth` (None when the analysis has no scope rollup)."""
    if not a.scopes:
        return None
    rows = collapse(a.scopes, depth)
    out = tuple(
        ScopeRowView(r.scope, sort_key(r.ps), ms(r.ps), pct(r.fraction), _main_bucket(r.buckets), sort_key(r.exposed_comm_ps),
                     ms(r.exposed_comm_ps), sort_key(r.remat_ps), ms(r.remat_ps), r.ops, r.count)
        for r in rows[:limit]
    )
    note = (f"Self time per kept step, averaged over TensorCores, by JAX name scope (tf_op) to depth {depth}: "
            "jit/jvp/transpose/vmap wrappers, while/body and checkpoint plumbing dropped, layer indices folded "
            "(count: layers folded, or runs per step of the scope's most run op, e.g. a scanned loop's trip count). "
            "Rows sum to the busy time (the step minus idle).")
    return ScopesView(depth, out, max(0, len(rows) - limit), note)


@dataclass(frozen=True)
class Sections:
    scopes: ScopesView | None


def build_sections(a: Analysis) -> Sections:
    return Sections(scopes=scopes_view(a))
