"""The name-scope rollup (profanalyzer.analyze.scopes) against the synthesizer's schedule."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from profanalyzer.analyze.analysis import analyze_trace
from profanalyzer.analyze.scopes import NO_SCOPE, TOP_LEVEL, collapse, fold_scope
from profanalyzer.read.xspace.build import load_trace
from profanalyzer.synth import real_shapes
from profanalyzer.synth.builder import DONE, OP, START, SYNC, WB, WE
from profanalyzer.synth.model import simulate
from profanalyzer.synth.program import build_plan
from profanalyzer.synth.scenarios import get_scenario
from profanalyzer.synth.writer import hostnames_for, write_host


@pytest.mark.parametrize("tf_op, path, idx", [
    ("jit(train_step)/jit(main)/transpose(jvp(Transformer))/decoder/while/body/checkpoint/layers/mlp/wi_1/"
     "dot_general[dimension_numbers=(((2,), (1,)), ((), ())) precision=None preferred_element_type=bfloat16]:",
     "decoder/layers/mlp/wi_1", ()),
    ("jit(train_step)/jit(main)/jvp(Transformer)/decoder/layers_12/self_attention/query/dot_general[x=1/2]:",
     "decoder/layers/self_attention/query", (12,)),
    ("model/h.3/attn/add:", "model/h/attn", (3,)),
    ("jit(f)/layers/7/mlp/mul:", "layers/mlp", (7,)),
    ("jit(train_step)/jit(main)/optimizer/scale_by_adam/mul:", "optimizer/scale_by_adam", ()),
    ("custom_call:", TOP_LEVEL, ()),
    ("", NO_SCOPE, ()),
])
def test_fold_scope(tf_op, path, idx):
    assert fold_scope(tf_op) == (path, idx)


def _expected_key(tf_op: str | None, depth: int) -> str:
    """The test's own reading of a MaxText name stack: drop the primitive, the
    transformation wrappers and the loop plumbing, keep `depth` components."""
    if not tf_op:
        return NO_SCOPE
    comps = tf_op.rstrip(":").split("/")
    # the primitive is the last component; its parameters hold no '/' in these templates
    kept = [c for c in comps[:-1] if "(" not in c and c not in ("while", "body", "checkpoint", "rematted_computation")]
    return "/".join(kept[:depth]) if kept else TOP_LEVEL


def _schedule_truth(tl, depth: int, kept_steps: set[int]) -> tuple[dict, dict]:
    """Self time (ps summed over cores and kept steps) per expected scope key,
    and runs per step per core of the most-run op template per key, from the
    simulated schedule (occurrence durations and the programs' nesting)."""
    plan = tl.plan
    ops = plan.ops
    self_ps = tl.occ_dur.astype(np.int64).copy()
    if tl.occ_trim is not None:
        self_ps -= tl.occ_trim[:, None]
    row = 0
    for _ in range(tl.steps):
        for prog in plan.programs:
            stack: list[int] = []
            for code, _k in prog.items:
                if code in (OP, START, DONE, SYNC, WB):
                    if stack:
                        self_ps[stack[-1]] -= tl.occ_dur[row]
                    if code == WB:
                        stack.append(row)
                    row += 1
                elif code == WE:
                    stack.pop()
    assert row == len(tl.occ_tid)
    want: dict[str, float] = defaultdict(float)
    runs: dict[tuple[str, int], int] = defaultdict(int)
    for r in range(row):
        s = int(tl.occ_step[r])
        if s not in kept_steps:
            continue
        k = int(tl.occ_tid[r])
        key = _expected_key(ops[k].tf_op, depth)
        want[key] += float(self_ps[r].sum())
        runs[(key, k)] += 1
    count: dict[str, int] = defaultdict(int)
    for (key, _k), n in runs.items():
        count[key] = max(count[key], round(n / len(kept_steps)))
    return want, count


@pytest.mark.parametrize("scenario", ["dense_short_fsdp", "remat_full"])
def test_rollup_matches_schedule(scenario, tmp_path):
    spec = get_scenario(scenario)
    plan = build_plan(spec, seed=0, layers=6, programs_of=real_shapes.PROGRAM_BUILDERS, host_offload=real_shapes.splice_host_offload)
    tl = simulate(plan, seed=0, hosts=1, steps=4)
    host = hostnames_for(spec.name, 0, 1)[0]
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(write_host(tl, 0, host, 0, {}))
    a = analyze_trace(load_trace(path))
    kept = {r.number for r in a.steps.table if r.kept}
    assert kept == {1, 2, 3}
    n_core_steps = tl.C * len(kept)
    depth = 3
    want, count = _schedule_truth(tl, depth, kept)
    got = {r.scope: r for r in collapse(a.scopes, depth)}
    assert set(got) == {k for k, v in want.items() if v > 0}
    for key, ps in want.items():
        assert got[key].ps == pytest.approx(ps / n_core_steps, rel=1e-3, abs=1e3), key
        assert got[key].count == max(count[key], 1), key
    # the scanned layer loop is one row whose count is the trip count
    layers = [r for k, r in got.items() if k.endswith("/layers")]
    assert layers and all(r.count == 6 for r in layers)
    # the rows sum to the busy time; exposed communication and remat to theirs
    busy = 1 - a.breakdown["idle"].fraction
    assert sum(r.fraction for r in a.scopes) == pytest.approx(busy, rel=1e-9)
    comm = sum(s.ps for b, s in a.breakdown.items() if b in {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv", "other_collective"})
    assert sum(r.exposed_comm_ps for r in a.scopes) == pytest.approx(comm, rel=1e-6, abs=1)
    assert sum(r.remat_ps for r in a.scopes) == pytest.approx(a.remat.ps, rel=1e-6, abs=1)


def test_collapse_sums_exactly():
    from profanalyzer.model.parts import ScopeRow

    rows = [ScopeRow("a/b/c", 3.0, 0.3, {"matmul_bf16": 3.0}, 0.0, 1.0, 2, 4),
            ScopeRow("a/b/d", 2.0, 0.2, {"all_gather": 2.0}, 2.0, 0.0, 1, 8),
            ScopeRow("a/e", 1.0, 0.1, {"matmul_bf16": 1.0}, 0.0, 0.0, 1, 1),
            ScopeRow(NO_SCOPE, 0.5, 0.05, {"other_compute": 0.5}, 0.0, 0.0, 3, 1)]
    one = collapse(rows, 1)
    assert [r.scope for r in one] == ["a", NO_SCOPE]
    a = one[0]
    assert (a.ps, a.exposed_comm_ps, a.remat_ps, a.ops, a.count) == (6.0, 2.0, 1.0, 4, 8)
    assert a.buckets == {"all_gather": 2.0, "matmul_bf16": 4.0}
    assert [r.scope for r in collapse(rows, 2)] == ["a/b", "a/e", NO_SCOPE]


def test_fold_scope_with_a_parts_memo_equals_fold_scope():
    """The roll-up folds many paths with one dict of components (`parts`): the same folds."""
    trace = load_trace("sample_traces/dense_short_fsdp.xplane.pb.gz")
    paths = sorted({t for p in trace.tensorcores for t in p.meta.tf_op if t}) + [
        "a/layers_3/b/c:", "a/layers_3/(x/y)/c", " / /layers.7/ 4 /mlp/x:", "jit(f)/while/body/h_2/mlp/dot"]
    parts: dict = {}
    assert [fold_scope(t, parts) for t in paths] == [fold_scope(t) for t in paths]
    assert parts and len(parts) < sum(t.count("/") for t in paths)
