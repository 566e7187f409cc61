"""Overlap and SparseCore offload on hand-built traces, and per-core spread."""

from __future__ import annotations

import pytest
from conftest import analysis_of
from xsb import SpaceBuilder

from profanalyzer.pipeline.run import run_analysis

AG_START = "%all-gather-start.{n} = (bf16[8,128]{{1,0}}, bf16[64,128]{{1,0}}) all-gather-start(bf16[8,128]{{1,0}} %p0), dimensions={{0}}"
AG_DONE = "%all-gather-done.{n} = bf16[64,128]{{1,0}} all-gather-done((bf16[8,128]{{1,0}}, bf16[64,128]{{1,0}}) %all-gather-start.{n})"
MATMUL = "%fusion.{n} = bf16[8,128]{{1,0}} fusion(bf16[8,64]{{1,0}} %a, bf16[64,128]{{1,0}} %b), kind=kOutput, calls=%c"
RS_START = "%reduce-scatter.{n}.cloned.1.call-start = ((bf16[64,128]{{1,0}}), bf16[8,128]{{1,0}}) call-start(bf16[64,128]{{1,0}} %g)"
RS_DONE = "%reduce-scatter.{n}.cloned.1.call-done = bf16[8,128]{{1,0}} call-done(%reduce-scatter.{n}.cloned.1.call-start)"


def _op(line, text, n, start, dur, cat, step=0):
    name = text.format(n=n)
    disp = name.split("=", 1)[0].strip().lstrip("%")
    line.event(name, start, dur, display=disp, meta_stats={"hlo_category": cat}, stats={"group_id": step})


def _trace(tmp_path, sc_planes=False, wrappers=False):
    sp = SpaceBuilder("h0")
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    tc.line("Steps").event("0", 0, 1_000_000, stats={"group_id": 0})
    ops = tc.line("XLA Ops")
    # Window 1: start, 490k of compute, the done op waits 100k (exposed).
    _op(ops, AG_START, 1, 0, 10_000, "all-gather")
    _op(ops, MATMUL, 10, 10_000, 490_000, "convolution fusion")
    _op(ops, AG_DONE, 1, 500_000, 100_000, "all-gather")
    # Window 2: fully hidden (a 1k done op).
    _op(ops, AG_START, 2, 600_000, 1_000, "all-gather")
    _op(ops, MATMUL, 11, 601_000, 299_000, "convolution fusion")
    _op(ops, AG_DONE, 2, 900_000, 1_000, "all-gather")
    # An unmatched done (its start was before the capture).
    _op(ops, AG_DONE, 3, 901_000, 9_000, "all-gather")
    # A synchronous all-reduce: its own window, fully exposed.
    ops.event("%all-reduce.4 = f32[128]{0} all-reduce(f32[128]{0} %x), to_apply=%add", 950_000, 40_000,
              display="all-reduce.4", meta_stats={"hlo_category": "all-reduce"}, stats={"group_id": 0})
    if wrappers:
        _op(ops, RS_START, 5, 991_000, 2_000, "async-start")
        _op(ops, RS_DONE, 5, 995_000, 3_000, "async-done")
    if sc_planes:
        for k in (0, 1):
            scp = sp.plane(f"/device:TPU:0 SparseCore {k}")
            scp.line("Sparse Core Ops")  # present but empty
    p = tmp_path / "h0.xplane.pb"
    p.write_bytes(sp.bytes())
    return p


def test_waiting_done_hidden_window_unmatched_and_sync(tmp_path):
    a = run_analysis(_trace(tmp_path))
    ag = a.collectives["all_gather"]
    assert ag.count == 2
    assert ag.window_ps == 600_000 + 301_000
    assert ag.hidden_ps == 490_000 + 299_000
    # Exposed = the time the all-gather's own ops occupy the core (attribution bucket).
    assert ag.exposed_ps == 10_000 + 100_000 + 1_000 + 1_000 + 9_000
    assert ag.exposed_ps == a.breakdown["all_gather"].ps
    ar = a.collectives["all_reduce"]
    assert ar.count == 1 and ar.hidden_ps == 0 and ar.exposed_ps == 40_000
    assert a.communication.unmatched == {"done": 1}
    classes = sorted((w.name, w.klass) for w in a.communication.top_exposed)
    assert ("all-gather-start.1", "partial") in classes
    assert ("all-reduce.4", "exposed") in classes
    # The hidden window: hidden fraction 299/301.
    win2 = [w for w in a.timeline.windows if w.name == "all-gather-start.2"]
    assert win2 and win2[0].klass == "hidden"
    assert a.sparsecore_offload.verdict == "off"


def test_sparsecore_planes_present_but_empty(tmp_path):
    a = run_analysis(_trace(tmp_path, sc_planes=True, wrappers=True))
    sc = a.sparsecore_offload
    assert sc.planes == 2 and sc.planes_with_activity == 0 and not sc.detected
    assert sc.verdict == "not_visible"
    assert "hold no ops" in sc.reason and "offload_tracing" in sc.reason
    assert a.collectives["reduce_scatter"].engine == "SparseCore"


def test_offload_verdicts_on_samples():
    assert analysis_of("offload_off").sparsecore_offload.verdict == "off"
    on = analysis_of("offload_on").sparsecore_offload
    assert on.verdict == "on" and on.detected and on.concurrency > 0.5
    assert analysis_of("dense_long_fsdp_cp").sparsecore_offload.verdict == "partial"
    assert analysis_of("offload_not_captured").sparsecore_offload.verdict == "not_visible"


def test_straggler_core_is_found():
    a = analysis_of("straggler_core")
    flagged = [c.plane for c in a.per_core if c.straggler]
    assert flagged == ["/device:TPU:5"]
    assert not any(c.straggler for c in analysis_of("dense_short_fsdp").per_core)


def test_all_to_all_share_for_moe():
    moe = analysis_of("moe_short_fsdp_ep").communication
    assert moe.all_to_all_share > 0.5
    assert analysis_of("offload_off").communication.all_to_all_share < 0.1


@pytest.mark.parametrize("name", ["offload_off", "moe_large_pp"])
def test_per_step_exposed_covers_kept_steps(name):
    a = analysis_of(name)
    kept = [r.number for r in a.steps.table if r.kept]
    assert sorted(a.communication.per_step_exposed) == kept
