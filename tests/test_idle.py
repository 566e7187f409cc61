"""The idle bucket split into causes (profanalyzer.analyze.idle) against the
synthesizer's schedule, and the causes' bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import analysis_of, sample_names

from profanalyzer.analyze.analysis import analyze_trace
from profanalyzer.core.vocab import IDLE_CAUSES
from profanalyzer.read.xspace.build import load_trace
from profanalyzer.synth import real_shapes
from profanalyzer.synth.builder import DONE, OP, START, SYNC, WB, WE
from profanalyzer.synth.model import simulate
from profanalyzer.synth.program import build_plan
from profanalyzer.synth.scenarios import get_scenario
from profanalyzer.synth.writer import hostnames_for, write_host


def _windows(tl, c: int, kept_pos: list[int]) -> list[tuple[int, int]]:
    """The kept step windows of core c: the Steps line's, else the runs of the
    program with the most time (the analysis's steps, in run order)."""
    if tl.plan.spec.steps_line:
        return [(int(tl.step_start[s, c]), int(tl.step_end[s, c])) for s in kept_pos]
    tot = np.bincount(tl.mod_prog, weights=(tl.mod_end[:, c] - tl.mod_start[:, c]).astype(float))
    runs = np.flatnonzero(tl.mod_prog == int(np.argmax(tot)))
    return [(int(tl.mod_start[runs[i], c]), int(tl.mod_end[runs[i], c])) for i in kept_pos]


def _schedule_idle(tl, kept: list[int]) -> dict[str, float]:
    """Per cause, idle ps summed over cores and kept steps, from the schedule:
    the gaps between the top-level op occurrences inside each step window,
    outside every program run (host_dispatch), or ending at a host-offload op
    (host_wait), at a collective (peer_wait), or at anything else."""
    plan = tl.plan
    ops = plan.ops
    top = []
    row = 0
    for _ in range(tl.steps):
        for prog in plan.programs:
            depth = 0
            for code, _k in prog.items:
                if code in (OP, START, DONE, SYNC, WB):
                    if depth == 0:
                        top.append(row)
                    if code == WB:
                        depth += 1
                    row += 1
                elif code == WE:
                    depth -= 1
    top = np.asarray(top)
    out = dict.fromkeys(IDLE_CAUSES, 0.0)
    for c in range(tl.C):
        st = tl.occ_start[top, c]
        en = st + tl.occ_dur[top, c]
        kinds = []
        for r in top:
            o = ops[int(tl.occ_tid[r])]
            kinds.append("host_wait" if o.bucket == "host_offload" else ("peer_wait" if o.coll else "unexplained"))
        ms_, me_ = tl.mod_start[:, c], tl.mod_end[:, c]
        for a, b in _windows(tl, c, kept):
            sel = np.flatnonzero((st < b) & (en > a))
            prev = a
            for i in sel.tolist() + [None]:
                end = b if i is None else int(st[i])
                if end > prev:
                    inside = sum(max(0, min(end, int(y)) - max(prev, int(x))) for x, y in zip(ms_, me_, strict=True))
                    out["host_dispatch"] += end - prev - inside
                    # the op's own program run: from its start (at the earliest) to the op
                    run = [(int(x), int(y)) for x, y in zip(ms_, me_, strict=True) if i is not None and x < st[i] <= y]
                    mine = max(0, end - max(prev, run[0][0])) if run else 0
                    out[kinds[i] if i is not None else "unexplained"] += mine
                    out["unexplained"] += inside - mine
                if i is not None:
                    prev = max(prev, int(en[i]))
    return out


@pytest.mark.parametrize("scenario", ["dense_short_fsdp", "host_offload_loop", "moe_large_pp", "host_bound_input"])
def test_idle_causes_match_schedule(scenario, tmp_path):
    spec = get_scenario(scenario)
    assert spec.overlap_ps == 0  # sequential ops: the gaps are the idle time exactly
    plan = build_plan(spec, seed=0, layers=3, programs_of=real_shapes.PROGRAM_BUILDERS, host_offload=real_shapes.splice_host_offload)
    tl = simulate(plan, seed=0, hosts=1, steps=4)
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(write_host(tl, 0, hostnames_for(spec.name, 0, 1)[0], 0, {}))
    a = analyze_trace(load_trace(path))
    kept = [i for i, r in enumerate(sorted(a.steps.table, key=lambda r: r.number)) if r.kept]
    want = _schedule_idle(tl, kept)
    n = tl.C * len(kept)
    # the gaps before collectives are the synthesizer's scheduling bubbles (no barrier: every
    # wait for a peer is inside the collective ops), so peer_wait only takes the noise of the
    # per-core lag; it and unexplained together are the rest of idle
    for cause in ("host_dispatch", "host_wait"):
        got = a.idle_causes[cause].ps
        assert got == pytest.approx(want[cause] / n, rel=2e-3, abs=2e3), cause
    rest = a.idle_causes["peer_wait"].ps + a.idle_causes["unexplained"].ps
    assert rest == pytest.approx((want["peer_wait"] + want["unexplained"]) / n, rel=2e-3, abs=2e3)
    assert a.idle_causes["peer_wait"].ps <= want["peer_wait"] / n * (1 + 2e-3) + 2e3
    assert sum(want.values()) / n == pytest.approx(a.breakdown["idle"].ps, rel=1e-6)
    if scenario == "host_offload_loop":  # copy-done of host buffers at the program's top level
        assert want["host_wait"] > 0
    elif scenario == "host_bound_input":  # the late launch is host dispatch
        assert want["host_dispatch"] / n > 0.1 * a.steps.step_time_ps["mean"]
    else:
        assert want["host_dispatch"] > 0 and want["peer_wait"] > 0


def _gated(name: str, tmp_path, gate: bool):
    spec = get_scenario(name).with_(peer_gate=gate)
    plan = build_plan(spec, seed=0, layers=3, programs_of=real_shapes.PROGRAM_BUILDERS, host_offload=real_shapes.splice_host_offload)
    tl = simulate(plan, seed=0, hosts=1, steps=5)
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(write_host(tl, 0, hostnames_for(spec.name, 0, 1)[0], 0, {}))
    a = analyze_trace(load_trace(path))
    nums = sorted(r.number for r in a.steps.table)
    kept = [i for i, r in enumerate(sorted(a.steps.table, key=lambda r: r.number)) if r.kept]
    truth = tl.peer_idle if tl.peer_idle is not None else np.zeros((tl.steps, tl.C), dtype=np.int64)
    return a, tl, truth, kept, nums


def test_peer_wait_is_what_the_slowest_core_gates(tmp_path):
    """straggler_core with a barrier before every collective: the other cores idle
    until TPU:5 arrives; the synthesizer records each core's wait (its ground truth)."""
    a, tl, truth, kept, nums = _gated("straggler_core", tmp_path, True)
    want = truth[kept].sum() / (tl.C * len(kept))
    assert want > 0.01 * a.steps.step_time_ps["mean"]  # the barrier waits are material
    assert a.idle_causes["peer_wait"].ps == pytest.approx(want, rel=0.15)
    # per core: the straggler waits least, the others about as the truth says
    for c, pc in enumerate(a.per_core):
        got = pc.idle_causes["peer_wait"]
        assert got == pytest.approx(truth[kept, c].mean(), rel=0.25, abs=0.02 * want), pc.core
    slow = min(a.per_core, key=lambda pc: pc.idle_causes["peer_wait"])
    assert slow.core.endswith("TPU:5") or slow.plane.endswith("TPU:5")
    # per step (mean over cores)
    assert sorted(a.idle_causes_by_step) == sorted(str(nums[i]) for i in kept)
    for i in kept:
        got = a.idle_causes_by_step[str(nums[i])]["peer_wait"]
        assert got == pytest.approx(truth[i].mean(), rel=0.25), nums[i]
    # every core has every kept step: the mean over steps of the per-step sums is the idle bucket
    sums = [sum(v.values()) for v in a.idle_causes_by_step.values()]
    assert np.mean(sums) == pytest.approx(a.breakdown["idle"].ps, rel=1e-9)


def test_no_peer_wait_without_a_barrier(tmp_path):
    """straggler_core as sampled: the other cores wait inside the collective done ops
    (exposed communication), not idle before them: the truth has no peer idle."""
    a, tl, truth, kept, _ = _gated("straggler_core", tmp_path, False)
    assert truth.sum() == 0
    gated = _gated("straggler_core", tmp_path, True)[0]
    assert a.idle_causes["peer_wait"].ps < 0.1 * gated.idle_causes["peer_wait"].ps


@pytest.mark.parametrize("name", sample_names())
def test_idle_causes_sum_to_idle(name):
    a = analysis_of(name)
    assert set(a.idle_causes) == set(IDLE_CAUSES)
    assert all(c.ps >= 0 for c in a.idle_causes.values())
    # each figure is whole picoseconds (issue 23): the causes sum to idle within half a picosecond each
    assert sum(c.ps for c in a.idle_causes.values()) == pytest.approx(a.breakdown["idle"].ps, rel=1e-9, abs=0.5 * (len(IDLE_CAUSES) + 1))
    assert sum(c.fraction for c in a.idle_causes.values()) == pytest.approx(a.breakdown["idle"].fraction, rel=1e-9, abs=1e-12)


def testreconcile_is_exact():
    from profanalyzer.analyze.idle import reconcile

    raw = np.array([[5, 3, 2, 0], [10, 10, 0, 0]], dtype=np.int64)
    fixed = reconcile(raw, np.array([12, 7], dtype=np.int64))
    assert fixed.sum(axis=1).tolist() == [12, 7]
    assert (fixed >= 0).all() and fixed[0].tolist() == [5, 3, 2, 2]


def test_host_activity_names_what_the_host_did(monkeypatch):
    from conftest import sample_path

    from profanalyzer.pipeline.run import RunOptions, run_analysis
    from profanalyzer.synth.builder import US
    from profanalyzer.synth.scenarios import SCENARIOS

    spec = SCENARIOS["host_bound_input"]
    a = run_analysis(sample_path("host_bound_input"), RunOptions(host_activity=True))
    top = a.idle_host_activity[0]
    # the synthesizer's input-pipeline event spans exactly the late launch of every step
    assert top.name == "InputPipeline::GetNext"
    assert top.ps == pytest.approx(spec.host_gap_us * US, rel=0.01)
    assert top.fraction == pytest.approx(a.idle_causes["host_dispatch"].ps / (a.idle_causes["host_dispatch"].ps + a.idle_causes["host_wait"].ps), rel=0.01)
    # the rule cites it
    from profanalyzer.heuristics.host_bound import host_bound

    (f,) = host_bound.check(a)
    assert any("InputPipeline::GetNext" in e for e in f.evidence)

    # without the option the host planes are never read
    import profanalyzer.read.xspace.hostlines as hp

    def boom(*args, **kw):
        raise AssertionError("host planes read without --host-activity")

    monkeypatch.setattr(hp, "read_host_events", boom)
    assert run_analysis(sample_path("host_bound_input")).idle_host_activity == ()


def test_no_host_planes_is_said():
    from realcap import VLLM, real_path

    from profanalyzer.pipeline.run import RunOptions, run_analysis

    a = run_analysis(real_path(VLLM), RunOptions(host_activity=True))
    assert a.idle_host_activity == () and any("no host planes" in n for n in a.notes)


def test_host_activity_on_the_real_v6e_capture():
    from realcap import V6E, real_path

    from profanalyzer.pipeline.run import RunOptions, run_analysis

    a = run_analysis(real_path(V6E), RunOptions(host_activity=True))
    names = {h.name for h in a.idle_host_activity}
    assert "PjitFunction(f)" in names  # JAX dispatching jit_f while the core waits for it
    assert all(0 < h.fraction <= 1 for h in a.idle_host_activity)
