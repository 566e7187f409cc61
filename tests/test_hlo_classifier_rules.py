"""The classifier rules the real compiled programs called for (issue #25),
on op texts shaped like the MaxText TPU7x dump's: collective-matmul ring
hops, and async / SparseCore wrappers around compute."""

from __future__ import annotations

import pytest

from profanalyzer.classify import classify_op

FWD = "jit(train_step)/jvp()/while/body/eval_jaxpr/dot_general"
BWD = "jit(train_step)/transpose(jvp())/while/body/eval_jaxpr/checkpoint/dot_general"
SHARD = "bf16[1,256,32,128]{3,1,0,2:T(16,128)(2,1)}"
START = (f"%collective-permute-start.4 = ({SHARD}, {SHARD}, u32[]{{:S(2)}}, u32[]{{:S(2)}}) "
         "collective-permute-start(%SRC), channel_id=3, source_target_pairs={{0,1},{1,0}}")


@pytest.mark.parametrize("src,tf_op,kind", [
    ("wide.param.3#1", FWD, "all_gather"),  # forward: the FSDP weight gather
    ("dynamic-slice_convert_fusion.22", FWD, "all_gather"),  # forward, the hop pipelined out of the loop
    ("wide.param.3#1", BWD, "all_gather"),  # passes a loop-carried shard along
    ("collective-permute-done.4", BWD, "all_gather"),  # passes the previous hop's shard along
    ("get-tuple-element.12", BWD, "all_gather"),  # the proto form of a loop-carried shard
    ("broadcast_select_fusion.35", BWD, "reduce_scatter"),  # sends partial sums it computed
    ("fusion.797#0", BWD, "reduce_scatter"),
])
def test_collective_matmul_ring_hops(src, tf_op, kind):
    r = classify_op(START.replace("SRC", src), "collective-permute-start.4", "collective-permute-start", tf_op)
    assert (r.bucket, r.collective, r.role) == (kind, kind, "start")
    assert "collective-matmul ring" in r.reason


def test_ring_done_takes_its_starts_kind_and_other_permutes_stay_permutes():
    done = f"%collective-permute-done.4 = {SHARD} collective-permute-done(%collective-permute-start.4)"
    r = classify_op(done, "collective-permute-done.4", "collective-permute-done", BWD)
    assert (r.bucket, r.collective, r.role) == ("other_collective", None, "done")  # attribution pairs it
    # a permute not emitted for a dot (pipeline stages, ring attention...) is a plain collective-permute
    r = classify_op(START.replace("SRC", "fusion.1"), "collective-permute-start.4", "", "jit(f)/ppermute")
    assert (r.bucket, r.collective) == ("other_collective", "collective_permute")


@pytest.mark.parametrize("name,text", [
    ("gather_offload_async_start.update", "%gather_offload_async_start.update = ((bf16[128256,4096], s32[8192]), "
     "bf16[8192,4096]) async-update(%gather_offload_async_start, %all-gather.54.cloned.1.call-done, %c)"),
    ("gather_offload_async_done", "%gather_offload_async_done = bf16[8192,4096] async-done(%gather_offload_async_start.update)"),
    ("scatter_offload_async_start", '%scatter_offload_async_start = ((), (), (s32[1])) async-start(), '
     'async_execution_thread="sparsecore", calls=%async_computation.40'),
    ("sparse-core-data-format-call.7.cloned.1.call-start", '%sparse-core-data-format-call.7.cloned.1.call-start = '
     '((), (), (s32[1])) async-start(), async_execution_thread="sparsecore", calls=%async_computation.8'),
    ("copy.3.cloned.1.call-done", "%copy.3.cloned.1.call-done = bf16[4,256] async-done(%copy.3.cloned.1.call-update)"),
])
def test_async_wrappers_around_compute_are_compute(name, text):
    for category in ("", "async-start"):
        r = classify_op(text, name, category, "jit(train_step)/jvp()/gather")
        assert (r.bucket, r.collective) == ("other_compute", None), (name, r.reason)


def test_offload_wrappers_of_collectives_stay_collectives():
    for name, kind in (("all-gather.54.cloned.1.call-start", "all_gather"),
                       ("reduce-scatter.543.cloned.1.call-done", "reduce_scatter"),
                       ("reduce_scatter.5.cloned.1.call-start", "reduce_scatter")):
        r = classify_op("", name, "", "", "")
        assert (r.bucket, r.collective) == (kind, kind), name
