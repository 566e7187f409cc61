"""Source lines: the Python `file:line` (and function) each op's HLO came
from, for the top ops, the scope rows and the findings.

Where a location comes from, first that has one:
  1. the op's HLO instruction in the programs the capture carries
     (`/host:metadata` HloProtos, or the compiled program itself): its stack
     frame (`stack_frame_id` -> file, line, function), else its
     `source_file` / `source_line` metadata;
  2. the `XLA Ops` metadata's `source` stat (`file:line`);
  3. for data-movement ops that carry none (copies, copy-start/-done,
     bitcasts, tuples: the compiler inserts them), the location of the value
     they move: the op producing their operand, else the first op using
     their result, through up to `MAX_HOPS` such ops (the location then says
     `via <op>`).
An op with none of these has no source line (it is left out, never guessed).

Reads the trace and, through profanalyzer.read.hlo, the programs in it; writes
`TopOp.source`, `ScopeRow.source` and `Finding.sources`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from profanalyzer.analyze.attributed import Attributed
from profanalyzer.analyze.scopes import fold_scope
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Finding
from profanalyzer.model.trace import Trace

__all__ = ["SourceLine", "source_lines", "with_source_lines", "finding_sources", "MAX_HOPS", "MOVERS"]

#: Opcodes that only move or regroup a value: they take the location of the value they move.
MOVERS = frozenset({"copy", "copy-start", "copy-done", "bitcast", "get-tuple-element", "tuple", "reshape",
                    "transpose", "async-start", "async-done", "slice-start", "slice-done", "dynamic-update-slice",
                    "dynamic-slice", "send", "recv", "send-done", "recv-done"})
MAX_HOPS = 4
#: A family row of the top ops: instruction numbers folded (`copy.* (5 ops)`).
GROUP = re.compile(r"^(.+?)\.\* \(\d+ ops\)$")
#: Source lines a finding lists at most.
FINDING_SOURCES = 3


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    function: str = ""
    via: str = ""  # the op whose location a data-movement op took

    @property
    def text(self) -> str:
        s = f"{self.file}:{self.line}"
        if self.function:
            s += f" ({self.function})"
        if self.via:
            s += f" via {self.via}" if not self.via[0].isdigit() else f" ({self.via})"
        return s


def _split_file_line(s: str) -> tuple[str, int] | None:
    f, sep, ln = s.strip().rpartition(":")
    if not sep or not f or not ln.isdigit():
        return None
    return f, int(ln)


def _hlo_locations(program) -> tuple[dict[str, SourceLine], dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]]:
    """(instruction -> own location, instruction -> (opcode, operands, users)) over every module the capture holds."""
    own: dict[str, SourceLine] = {}
    graph: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
    if program is None:
        return own, graph
    for m in program.modules:
        for c in m.computations:
            users: dict[str, list[str]] = {}
            for i in c.instructions:
                for o in i.operands:
                    users.setdefault(o, []).append(i.name)
            for i in c.instructions:
                md = i.metadata
                loc = None
                if md.stack_frame_id:
                    got = m.stack.user_location(md.stack_frame_id)
                    if got is not None and got[0]:
                        loc = SourceLine(got[0], int(got[1]), got[2])
                if loc is None and md.source_file:
                    loc = SourceLine(md.source_file, int(md.source_line))
                if loc is not None:
                    own.setdefault(i.name, loc)
                graph.setdefault(i.name, (i.opcode, tuple(i.operands), tuple(users.get(i.name, ()))))
    return own, graph


def _members(names: Iterable[str], stems: set[str]) -> dict[str, list[str]]:
    """Family stem (of `stems`) -> the names it covers, sorted: `x` covers `x`
    and `x.<digits>` (what the top ops' row `x.* (k ops)` folds: the regex
    `x(\\.\\d+)?$`, whose `$` also takes a trailing newline)."""
    out: dict[str, list[str]] = {}
    for m in names:
        t = m[:-1] if m.endswith("\n") else m
        if t in stems:
            out.setdefault(t, []).append(m)
        head, dot, tail = t.rpartition(".")
        if dot and head in stems and tail.isdecimal():  # isdecimal: the digits `\d` matches
            out.setdefault(head, []).append(m)
    for v in out.values():
        v.sort()
    return out


def source_lines(trace: Trace, names: Iterable[str], program=None) -> dict[str, SourceLine]:
    """The location of each op named (instruction / display names), where one is
    known: from `program` (the HLO the trace carries, hlo.model.Program), else
    the ops' `source` stats."""
    own, graph = _hlo_locations(program)
    stat: dict[str, SourceLine] = {}
    parsed: dict[str, SourceLine | None] = {}  # each distinct `source` stat parsed once
    for p in trace.tensorcores[:1] or trace.tensorcores:
        md = p.meta
        for row, s in enumerate(md.source):
            if s:
                if s in parsed:
                    loc = parsed[s]
                else:
                    fl = _split_file_line(s)
                    loc = parsed[s] = SourceLine(*fl) if fl is not None else None
                if loc is not None:
                    stat.setdefault(md.short_name(row), loc)

    def direct(n: str) -> SourceLine | None:
        return own.get(n) or stat.get(n)

    def moved(n: str) -> SourceLine | None:
        seen = {n}
        frontier = [n]
        for _ in range(MAX_HOPS):
            nxt: list[str] = []
            for x in frontier:
                g = graph.get(x)
                if g is None or g[0] not in MOVERS:
                    continue
                for y in (*g[1], *g[2]):  # producers first, then users
                    if y in seen:
                        continue
                    seen.add(y)
                    loc = direct(y)
                    if loc is not None:
                        return replace(loc, via=y)
                    nxt.append(y)
            frontier = nxt
        return None

    def one(n: str) -> SourceLine | None:
        return direct(n) or moved(n)

    found: dict[str, SourceLine | None] = {}
    stems: dict[str, str] = {}  # a family row of the top ops (`copy.* (5 ops)`) -> its stem (`copy`)
    for n in dict.fromkeys(names):
        found[n] = loc = one(n)
        g = GROUP.match(n) if loc is None else None
        if g is not None:
            stems[n] = g.group(1)
    if stems:  # a family row's line: its members' most common one
        members = _members(set(graph) | set(stat), set(stems.values()))
        for n, stem in stems.items():
            locs = [x for x in (one(m) for m in members.get(stem, ())) if x is not None]
            if locs:
                texts = Counter(x.text for x in locs)
                best, k = texts.most_common(1)[0]
                loc = next(x for x in locs if x.text == best)
                if len(texts) > 1:
                    loc = replace(loc, via=(loc.via + "; " if loc.via else "") + f"{k} of {len(locs)} ops")
                found[n] = loc
    return {n: loc for n, loc in found.items() if loc is not None}


def with_source_lines(analysis: Analysis, att: Attributed) -> Analysis:
    """The analysis with `source` set on its top / remat / kernel ops and its scope rows."""
    ops = (*analysis.top_ops, *analysis.remat_ops, *analysis.kernel_ops)
    locs = source_lines(att.trace, (o.name for o in ops), att.programs[0])
    if not locs:
        return analysis

    def put(rows):
        return tuple(replace(o, source=locs[o.name].text) if o.name in locs else o for o in rows)

    # a scope's line: the most common location of its ops (over the top ops and the op metadata)
    by_scope: dict[str, Counter] = {}
    for o in ops:
        if o.name in locs and o.tf_op:
            by_scope.setdefault(fold_scope(o.tf_op)[0], Counter())[locs[o.name].text] += 1
    scopes = tuple(replace(r, source=by_scope[r.scope].most_common(1)[0][0]) if r.scope in by_scope else r
                   for r in analysis.scopes)
    return replace(analysis, top_ops=put(analysis.top_ops), remat_ops=put(analysis.remat_ops),
                   kernel_ops=put(analysis.kernel_ops), scopes=scopes)


def finding_sources(f: Finding, analysis: Analysis) -> Finding:
    """The finding with the source lines of the top ops its evidence names (up to FINDING_SOURCES)."""
    if f.sources:
        return f
    named: dict[str, None] = {}
    text = "\n".join(f.evidence)
    for o in (*analysis.top_ops, *analysis.kernel_ops, *analysis.remat_ops):
        # the whole name: `copy-done` is not named by `copy-done.4`
        if o.source and o.name and re.search(rf"(?<![\w.-]){re.escape(o.name)}(?![\w-]|\.\d)", text):
            named.setdefault(f"{o.name}: {o.source}", None)
    return replace(f, sources=tuple(named)[:FINDING_SOURCES]) if named else f


def source_index(analysis: Analysis) -> Mapping[str, str]:
    """Op name -> its source line, over the ops the analysis lists."""
    return {o.name: o.source for o in (*analysis.top_ops, *analysis.kernel_ops, *analysis.remat_ops) if o.source}
