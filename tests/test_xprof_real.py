"""Cross-check of profanalyzer's time breakdown and per-op self times against XProf's own
op statistics on the real TPU captures in `../shared/real-traces/` (issue 14).

Needs the `[xprof]` extra and the real captures; without either, every test here is
skipped with the reason.

How XProf is run
----------------
`xprof.convert.raw_to_tool_data.xspace_to_tool_data` (the converters behind XProf's
`hlo_stats` and `op_profile` pages) on a decompressed copy of the capture laid out as
`<tmp>/run/host.xplane.pb`, with `use_saved_result=False`, inside `xprof_util.sandbox`.
The converters write their caches (`ALL_HOSTS.op_stats_v2.pb`, `<program>.hlo_proto.pb`)
next to the copy whatever the option says; `xprof_util.run_converters` asserts that the
real-traces folder is unchanged and that no XProf cache appeared in the real temp dir.
Both tools take well under a second on these captures; each capture runs once per
session (`functools.lru_cache`).

What XProf reports (measured on v6e_host_offload)
-------------------------------------------------
`hlo_stats`: one row per (program, HLO instruction), summed over all TensorCores:
category, HLO text, occurrences, total and self time (us). `op_profile` (`byProgram`):
one node per program (`jit_f(<program id>)`) with per-category children, plus an
`IDLE` node: the time of the capture on each core that no op covers (between programs,
before the first and after the last op). Its root time is XProf's device time, the
denominator of hlo_stats' `total_self_time_percent` (asserted).

Time base (the choice, and why)
-------------------------------
profanalyzer's step is one run of the dominant program on the `XLA Modules` line
(`jit_f`, 100 runs x 4 TensorCores). XProf has no steps on this capture, but it
attributes every op to its program by `program_id`. So the comparison is *within the
dominant program*: XProf's fraction of a category is its self time in that program's
`op_profile` node over the node's time (the sum of its ops' self time, over all cores
and runs); ours is `Analysis.breakdown[bucket].fraction` (kept steps, per core and step).
XProf's dominant program is the `op_profile` program with the most time, found
independently of us, and asserted to be the program our steps come from. Whole-capture
numbers (other programs, IDLE) are read too, and only used to check XProf's own totals.

Per op: our `top_ops[i].self_ps` is self time per (TensorCore, kept step); XProf's is
the op's total self time in the program over the number of (TensorCore, kept step)
pairs of our analysis.

Category -> bucket (the intended definitions of issue 14)
---------------------------------------------------------
`copy-start` / `copy-done` whose HLO text names host memory space `S(5)` ->
`host_offload`; any other copy (HBM <-> HBM) -> `other_compute`. Fusions (`loop
fusion`, `input fusion`, `output fusion`), `non-fusion elementwise`, `data formatting`,
`broadcast`, slices, copies -> `other_compute`. `convolution` / `convolution fusion` ->
the matmul buckets (summed). Collective categories -> their collective bucket. XProf's
`IDLE` -> `idle`. A category not in the table fails the test (so a new category is
looked at, not silently dropped).

Differences by design (each measured here; listed for README's definitions)
----------------------------------------------------------------------------
* Programs outside the step: the `jit__psum` all-reduces (3 per core, ~122 ms each),
  `jit_broadcast_in_dim` and `jit_convert_element_type` run before the first `jit_f`
  run. XProf counts them in its device time (all-reduce 0.40% of it); our steps are the
  `jit_f` runs, so they are in no step and our `all_reduce` is 0. Within `jit_f`, both
  have no all-reduce.
* Idle: XProf's `IDLE` is capture time outside every op (13.4% of its device time here,
  mostly between programs); inside a program node XProf has no idle. Ours is the gaps
  inside the steps (2e-5 here).
* Step edges: we assign an op to the step its start falls in (the `XLA Modules` event's
  span); XProf assigns it to its program. Each `jit_f` run's first ops (three
  `copy-start` and the first `copy-done`) start ~0.25 ms before the run's `XLA
  Modules` event, so they land in the previous step, and for the first run in no step:
  one `copy-done` per core (~189 ms) is in XProf's `jit_f` totals and not in ours, i.e.
  that op's per-step self time is 1.0% lower in ours (`count` 0.99). The op-level check
  adds these occurrences back, measured from the trace, before comparing.
* Denominator: ours is the step time (module span, idle inside included); XProf's is
  the program's op time. They differ by our in-step idle (2e-5).
* No attention category in XProf: attention kernels are fusions or custom calls there.
  Our `attention` is compared inside the compute group only.

On `vllm_w4_tp2_*` (converted from trace-viewer JSON, no `program_id`/`symbol_id`, no
HLO protos) XProf's op tools drop every op: `hlo_stats` has no row and `op_profile` is a
single `IDLE` node of the whole capture (132.3 ms over two cores). There is nothing to
compare; the comparison tests skip with that measured reason.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

try:
    import xprof.convert.raw_to_tool_data  # noqa: F401
except ImportError as exc:  # not installed, or its native library does not load
    pytest.skip(f"XProf cross-check needs the optional extra: pip install -e '.[xprof]' ({exc})", allow_module_level=True)

from xprof_util import datatable, run_converters  # noqa: E402

from profanalyzer.model.trace import LINE_OPS  # noqa: E402
from profanalyzer.pipeline.run import run_analysis  # noqa: E402
from profanalyzer.read.xspace.build import load_trace  # noqa: E402

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real-traces"
CAPTURES = ("v6e_host_offload", "vllm_w4_tp2_*")

POINT = 0.01  # issue 14: each bucket within 1 point of XProf's categories
OP_REL = 0.01  # per-op self time per step within 1%
US_PS = 1_000_000

#: XProf hlo category -> our bucket. Copies are split by memory space (see _bucket_of).
CATEGORY_BUCKET = {
    "loop fusion": "other_compute",
    "input fusion": "other_compute",
    "output fusion": "other_compute",
    "non-fusion elementwise": "other_compute",
    "data formatting": "other_compute",
    "broadcast": "other_compute",
    "copy": "other_compute",
    "slice": "other_compute",
    "dynamic-slice": "other_compute",
    "dynamic-update-slice": "other_compute",
    "convolution": "matmul",
    "convolution fusion": "matmul",
    "all-reduce": "all_reduce",
    "all-reduce fusion": "all_reduce",
    "all-gather": "all_gather",
    "all-gather fusion": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "reduce-scatter fusion": "reduce_scatter",
    "all-to-all": "all_to_all",
    "collective-permute": "other_collective",
    "send": "other_collective",
    "recv": "other_collective",
    "IDLE": "idle",
}
COPY_CATEGORIES = ("copy-start", "copy-done")
HOST_MEMORY = re.compile(r"S\(5\)")  # memory space 5: host memory

#: Compared groups: (our buckets, XProf's mapped buckets). `matmul` sums our matmul
#: buckets; XProf has no attention category, so attention sits with compute.
TODAY = {
    "compute + host copies": ({"other_compute", "host_offload", "attention"}, {"other_compute", "host_offload"}),
    "matmul": ({"matmul*"}, {"matmul"}),
    "all_reduce": ({"all_reduce"}, {"all_reduce"}),
    "all_gather": ({"all_gather"}, {"all_gather"}),
    "reduce_scatter": ({"reduce_scatter"}, {"reduce_scatter"}),
    "all_to_all": ({"all_to_all"}, {"all_to_all"}),
    "other_collective": ({"other_collective"}, {"other_collective"}),
    "idle": ({"idle"}, {"idle"}),
}
#: The split issue 14 asks for (our `host_offload` bucket does not exist yet).
INTENDED = {
    "host_offload": ({"host_offload"}, {"host_offload"}),
    "other_compute": ({"other_compute", "attention"}, {"other_compute"}),
}


def _capture(pattern: str) -> Path:
    if not REAL.is_dir():
        pytest.skip(f"real captures not found: {REAL} is absent")
    found = sorted(REAL.glob(f"{pattern}.xplane.pb*"))
    if not found:
        pytest.skip(f"real capture {pattern} not in {REAL}")
    return found[0]


def _bucket_of(category: str, expression: str) -> str:
    if category in COPY_CATEGORIES:
        return "host_offload" if HOST_MEMORY.search(expression) else "other_compute"
    return CATEGORY_BUCKET.get(category, f"unmapped XProf category {category!r}")


@dataclass(frozen=True, eq=False)
class XProf:
    hlo: pd.DataFrame  # hlo_stats rows, plus self_ps, total_ps and our bucket
    programs: dict[str, tuple[str, int]]  # op_profile program node name -> (program id, time ps)
    categories: dict[str, dict[str, int]]  # program node name -> {category: time ps}
    idle_ps: int  # op_profile IDLE node
    device_ps: int  # op_profile root: XProf's device time (all cores)
    written: tuple[str, ...]  # files XProf wrote in its sandbox


@functools.cache
def xprof(pattern: str) -> XProf:
    tools, written = run_converters(_capture(pattern), ("hlo_stats", "op_profile"))
    hlo = datatable(tools["hlo_stats"])
    if len(hlo):
        hlo["self_ps"] = [round(v * US_PS) for v in hlo["total_self_time"]]
        hlo["total_ps"] = [round(v * US_PS) for v in hlo["total_time"]]
        hlo["bucket"] = [_bucket_of(c, e) for c, e in zip(hlo["category"], hlo["hlo_op_expression"], strict=True)]
    root = tools["op_profile"]["byProgram"]
    nodes = [root] if root["name"] == "IDLE" else root["children"]
    programs, categories, idle = {}, {}, 0
    for n in nodes:
        t = int(n["metrics"].get("rawTime", 0))
        if n["name"] == "IDLE":
            idle += t
            continue
        m = re.fullmatch(r".*\((\d+)\)", n["name"])
        programs[n["name"]] = (m.group(1) if m else "", t)
        categories[n["name"]] = {c["name"]: int(c["metrics"].get("rawTime", 0)) for c in n.get("children", [])}
    return XProf(hlo, programs, categories, idle, int(root["metrics"].get("rawTime", 0)), written)


@functools.cache
def ours(pattern: str):
    return run_analysis(_capture(pattern))


def _with_ops(pattern: str) -> XProf:
    x = xprof(pattern)
    if not len(x.hlo):
        pytest.skip(
            f"XProf's op tools drop every op of {pattern} (no program_id/symbol_id): hlo_stats has no row, "
            f"op_profile is {len(x.programs)} programs and IDLE {x.idle_ps / 1e9:.1f} ms"
        )
    return x


def _step_program(x: XProf) -> str:
    """XProf's dominant program: the op_profile program node with the most time."""
    return max(sorted(x.programs), key=lambda k: x.programs[k][1])


def _xprof_fractions(x: XProf) -> dict[str, float]:
    """Per mapped bucket: self time inside the step program over the program's time."""
    prog = _step_program(x)
    pid, t = x.programs[prog]
    rows = x.hlo[x.hlo["program_id"] == pid]
    return {b: float(s) / t for b, s in rows.groupby("bucket")["self_ps"].sum().items()}


def _our_sum(a, buckets: set[str]) -> float:
    return sum(
        s.fraction for b, s in a.breakdown.items() if b in buckets or ("matmul*" in buckets and b.startswith("matmul"))
    )


def _compare(a, x: XProf, groups: dict) -> pd.DataFrame:
    xf = _xprof_fractions(x)
    rows = [(g, _our_sum(a, mine), sum(xf.get(b, 0.0) for b in theirs)) for g, (mine, theirs) in groups.items()]
    return pd.DataFrame(rows, columns=["group", "ours", "xprof"]).set_index("group").assign(diff=lambda d: d.ours - d.xprof)


# ---------------------------------------------------------------------------
# XProf itself: run in a sandbox, and its two tools agree with each other
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", CAPTURES)
def test_xprof_ran_on_a_sandboxed_copy(pattern):
    x = xprof(pattern)  # run_converters asserts the real-traces folder and temp dir are untouched
    outside = [f for f in x.written if not f.startswith("run/")]
    assert not outside, f"XProf wrote outside its run folder: {outside}"
    assert x.device_ps > 0


def test_xprof_drops_ops_without_program_id():
    """Recorded behaviour on the vLLM capture (no program_id/symbol_id): XProf's op
    tools see no op, and call the whole capture idle, while we see its ops."""
    x = xprof("vllm_w4_tp2_*")
    a = ours("vllm_w4_tp2_*")
    assert len(x.hlo) == 0 and x.programs == {}
    assert x.idle_ps == x.device_ps > 0
    assert len(a.top_ops) > 0 and a.breakdown["idle"].fraction < 0.5


@pytest.mark.parametrize("pattern", CAPTURES)
def test_xprof_tools_agree(pattern):
    """hlo_stats' rows add up to op_profile's program nodes, and its self-time shares
    are over op_profile's device time (IDLE included): we read XProf's units right."""
    x = _with_ops(pattern)
    by_prog = x.hlo.groupby("program_id")["self_ps"].sum()
    for name, (pid, t) in x.programs.items():
        assert by_prog.get(pid, 0) == pytest.approx(t, rel=1e-6), name
        assert sum(x.categories[name].values()) == pytest.approx(t, rel=1e-6), name
    assert by_prog.sum() + x.idle_ps == pytest.approx(x.device_ps, rel=1e-6)
    share = x.hlo["total_self_time_percent"] / 100
    assert np.allclose(share, x.hlo["self_ps"] / x.device_ps, rtol=1e-6)
    assert (x.hlo["self_ps"] <= x.hlo["total_ps"] + 1).all()


@pytest.mark.parametrize("pattern", CAPTURES)
def test_xprof_categories_are_mapped(pattern):
    x = _with_ops(pattern)
    unmapped = sorted(set(x.hlo.loc[x.hlo["bucket"].str.startswith("unmapped"), "category"]))
    assert not unmapped, f"XProf categories with no bucket: {unmapped}"
    covered = set().union(*(theirs for _, theirs in (*TODAY.values(), *INTENDED.values())))
    assert set(x.hlo["bucket"]) <= covered


# ---------------------------------------------------------------------------
# Buckets vs XProf categories, within the step program
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", CAPTURES)
def test_step_program_is_xprofs_dominant_program(pattern):
    x = _with_ops(pattern)
    a = ours(pattern)
    assert a.steps.source == f"XLA Modules: {_step_program(x)}"
    # Every one of our steps is one run of that program on one core: XProf's
    # occurrences of an op that runs once per run are our (core, step) pairs.
    n = sum(pc.steps_kept for pc in a.per_core)
    pid = x.programs[_step_program(x)][0]
    occ = x.hlo.loc[x.hlo["program_id"] == pid, "occurrences"]
    assert occ.max() == n


@pytest.mark.parametrize("pattern", CAPTURES)
def test_buckets_match_xprof_categories(pattern):
    """Every group whose definition is the same today: within 1 point."""
    x = _with_ops(pattern)
    a = ours(pattern)
    d = _compare(a, x, TODAY)
    assert (d["diff"].abs() <= POINT).all(), f"buckets vs XProf categories (fractions of the step):\n{d}"
    # Our buckets are covered: every bucket we report is in some group.
    grouped = set().union(*(mine for mine, _ in (*TODAY.values(), *INTENDED.values())))
    loose = {b for b in a.breakdown if b not in grouped and not b.startswith("matmul")}
    assert not loose, f"buckets in no comparison group: {loose}"


@pytest.mark.parametrize("pattern", CAPTURES)
def test_op_times_per_xprof_category_match(pattern):
    """Our top ops' step fractions, grouped by the bucket their XProf category maps to,
    within 1 point of XProf's share of that bucket in the step program (the time side
    of the split, independent of our classifier; step edges included)."""
    x = _with_ops(pattern)
    a = ours(pattern)
    bucket = _program_ops(x).set_index("hlo_op_name")["bucket"]
    mine: dict[str, float] = {}
    for o in a.top_ops:
        if o.name in bucket.index:
            mine[bucket[o.name]] = mine.get(bucket[o.name], 0.0) + o.fraction
    xf = _xprof_fractions(x)
    d = pd.DataFrame({"ours": pd.Series(mine), "xprof": pd.Series(xf)}).fillna(0.0)
    assert ((d["ours"] - d["xprof"]).abs() <= POINT).all(), f"op time per XProf bucket:\n{d}"


@pytest.mark.parametrize("pattern", CAPTURES)
def test_host_offload_split_matches_xprof(pattern):
    """Issue 14's split: host<->HBM copies (S(5)) in `host_offload`, the rest of
    compute in `other_compute`, each within 1 point of XProf."""
    x = _with_ops(pattern)
    a = ours(pattern)
    assert "host_offload" in a.breakdown, "no host_offload bucket"
    d = _compare(a, x, INTENDED)
    assert (d["diff"].abs() <= POINT).all(), f"host_offload / other_compute vs XProf:\n{d}"


@pytest.mark.parametrize("pattern", CAPTURES)
def test_op_buckets_follow_xprof_categories(pattern):
    """Each top op's bucket is the one its XProf category (and memory space) maps to."""
    x = _with_ops(pattern)
    a = ours(pattern)
    want = _program_ops(x).set_index("hlo_op_name")["bucket"]
    got = {o.name: ("matmul" if o.bucket.startswith("matmul") else o.bucket) for o in a.top_ops if o.name in want.index}
    wrong = {k: (v, want[k]) for k, v in got.items() if v != want[k]}
    assert not wrong, f"op: (ours, XProf's category maps to): {wrong}"


# ---------------------------------------------------------------------------
# Per op
# ---------------------------------------------------------------------------


def _program_ops(x: XProf) -> pd.DataFrame:
    """hlo_stats rows of the step program whose name is unique across programs."""
    pid = x.programs[_step_program(x)][0]
    counts = x.hlo.groupby("hlo_op_name")["program_id"].nunique()
    unique = set(counts[counts == 1].index)
    return x.hlo[(x.hlo["program_id"] == pid) & x.hlo["hlo_op_name"].isin(unique)]


def _outside_steps(pattern: str, names: set[str]) -> dict[str, tuple[int, int]]:
    """Per op name: (occurrences, self ps) on the XLA Ops line that start in no kept
    step of their TensorCore (the step-edge difference), from the trace."""
    a = ours(pattern)
    kept = np.asarray(sorted(r.number for r in a.steps.table if r.kept), dtype=np.int64)
    trace = load_trace(_capture(pattern))
    out: dict[str, tuple[int, int]] = {}
    for plane in trace.tensorcores:
        ln = plane.line(LINE_OPS)
        if ln is None:
            continue
        st = trace.steps[plane.label]
        k = np.isin(st.number, kept)
        ks, ke = st.start_ps[k], st.end_ps[k]
        ev = ln.events
        inside = ((ev.start_ps[:, None] >= ks[None, :]) & (ev.start_ps[:, None] < ke[None, :])).any(axis=1)
        for i in np.flatnonzero(~inside & (ev.meta >= 0)).tolist():
            nm = plane.meta.short_name(int(ev.meta[i]))
            if nm in names:
                c, s = out.get(nm, (0, 0))
                out[nm] = (c + 1, s + int(ev.self_ps[i]))
    return out


@pytest.mark.parametrize("pattern", CAPTURES)
def test_op_self_times_match_xprof(pattern):
    """Per op of the step program: our self time per (core, kept step) vs XProf's self
    time over the same number of (core, step) pairs, within 1% -- after adding back the
    occurrences that start outside our steps (step edges, measured from the trace). Also
    per occurrence, which no step assignment affects."""
    x = _with_ops(pattern)
    a = ours(pattern)
    n = sum(pc.steps_kept for pc in a.per_core)
    theirs = _program_ops(x).set_index("hlo_op_name")
    mine = {o.name: o for o in a.top_ops}
    both = sorted(set(theirs.index) & set(mine))
    assert both, "no op in both"
    if len(a.top_ops) < 30:  # top_ops not truncated: every op of the program is there
        assert set(theirs.index) <= set(mine), set(theirs.index) - set(mine)
    edge = _outside_steps(pattern, set(both))
    rows = []
    for name in both:
        o, t = mine[name], theirs.loc[name]
        c_out, s_out = edge.get(name, (0, 0))
        rows.append({
            "op": name,
            "ours": o.self_ps,
            "xprof": t["self_ps"] / n,
            "ours_plus_edge": o.self_ps + s_out / n,
            "count_ours": round(o.count * n),
            "count_edge": c_out,
            "count_xprof": int(t["occurrences"]),
            "per_occ_ours": o.self_ps / o.count if o.count else np.nan,
            "per_occ_xprof": t["self_ps"] / t["occurrences"],
        })
    d = pd.DataFrame(rows).set_index("op")
    # Occurrences: ours + those outside our steps = XProf's.
    assert (d["count_ours"] + d["count_edge"] == d["count_xprof"]).all(), d[["count_ours", "count_edge", "count_xprof"]]
    rel = (d["ours_plus_edge"] - d["xprof"]).abs() / d["xprof"]
    assert (rel <= OP_REL).all(), f"per-op self time per step (relative difference {rel.max():.2%}):\n{d}"
    rel_occ = (d["per_occ_ours"] - d["per_occ_xprof"]).abs() / d["per_occ_xprof"]
    assert (rel_occ <= OP_REL).all(), f"per-occurrence self time:\n{d}"
    # Where no occurrence lies outside our steps the plain per-step numbers agree.
    plain = d[d["count_edge"] == 0]
    assert ((plain["ours"] - plain["xprof"]).abs() <= OP_REL * plain["xprof"]).all(), plain
