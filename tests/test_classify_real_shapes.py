"""Classifier and reader rules that real captures showed were missing (#14):
quantized matmul kernels, host-offload copies, non-collective async pairs,
layout ops feeding a fused attention kernel, and 1 ps overlaps on a line.
The op texts follow the shapes of real TPU captures (see
../shared/real-traces/README.md); names are generic."""

from __future__ import annotations

import numpy as np
import pytest

from profanalyzer.classify import classify_op, matmul_kernel_flops
from profanalyzer.model.trace import nesting, sequential_overlaps

QMM = ("%{name} = bf16[{m},{n}]{{1,0}} custom-call(bf16[{m},{k}]{{1,0}} %x, {wt}[{n},{k}]{{1,0:T(64,128)(8,1)E(4)}} %w, "
       "f32[10,1,{n}]{{2,1,0}} %s), custom_call_target=\"tpu_custom_call\", "
       "operand_layout_constraints={{bf16[{m},{k}]{{1,0}}, {wt}[{n},{k}]{{1,0}}}}")


@pytest.mark.parametrize("wt,prec", [("f4e2m1fn", "w4a16"), ("s4", "w4a16"), ("s8", "w8a16")])
def test_weight_only_quantized_kernel_is_a_bf16_matmul_with_shape_flops(wt, prec):
    text = QMM.format(name="my_qmm_kernel_1.3", m=1024, n=2048, k=512, wt=wt)
    r = classify_op(text, "", "custom-call", "jit(step)/Linear/jit(quantized_matmul_kernel)/k/pallas_call:")
    assert (r.bucket, r.precision, r.kernel) == ("matmul_bf16", prec, "quantized_matmul")
    assert r.shape_flops == 2.0 * 1024 * 2048 * 512
    assert "operand shapes" in r.reason


def test_quantized_kernel_by_name_with_int8_or_fp8_activations():
    t = ('%w8a8_matmul.1 = bf16[256,1024]{1,0} custom-call(s8[256,4096]{1,0} %x, s8[1024,4096]{1,0} %w, '
         'f32[1,1024]{1,0} %s), custom_call_target="tpu_custom_call"')
    r = classify_op(t, "", "custom-call")
    assert (r.bucket, r.precision) == ("matmul_int8", "w8a8")
    assert r.shape_flops == 2.0 * 256 * 1024 * 4096
    t = ('%qmm.2 = bf16[256,1024]{1,0} custom-call(f8e4m3fn[256,4096]{1,0} %x, f8e4m3fn[4096,1024]{1,0} %w), '
         'custom_call_target="tpu_custom_call"')
    r = classify_op(t, "", "custom-call")
    assert (r.bucket, r.precision) == ("matmul_fp8", "fp8")


def test_a_custom_call_that_is_not_a_matmul_stays_other():
    t = '%quantize_act.1 = s8[256,4096]{1,0} custom-call(bf16[256,4096]{1,0} %x), custom_call_target="tpu_custom_call"'
    assert classify_op(t, "", "custom-call").bucket == "other_compute"


def test_shape_flops_refuses_shapes_it_cannot_read():
    assert matmul_kernel_flops("bf16[1024,512]{1,0} %x", "bf16[1024,2048]{1,0}") is None  # one operand
    assert matmul_kernel_flops("bf16[1000,7]{1,0} %x, s8[13,11]{1,0} %w", "bf16[1000,13]{1,0}") is None  # K mismatch


def test_host_offload_copies_by_memory_space_and_hbm_copies_stay_compute():
    done = ("%copy-done = f32[5,1024]{1,0:T(8,128)} copy-done((f32[5,1024]{1,0:T(8,128)}, "
            "f32[5,1024]{1,0:T(8,128)S(5)}, u32[]{:S(2)}) %copy-start)")
    start = ("%copy-start = (f32[5,1024]{1,0:T(8,128)}, f32[5,1024]{1,0:T(8,128)S(5)}, u32[]{:S(2)}) "
             "copy-start(f32[5,1024]{1,0:T(8,128)S(5)} %param)")
    assert classify_op(done, "", "copy-done").bucket == "host_offload"
    assert classify_op(start, "", "copy-start").bucket == "host_offload"
    hbm = ("%copy-start.206 = (s32[1024]{0:T(1024)S(1)}, s32[1024]{0:T(1024)}, u32[]{:S(2)}) "
           "copy-start(s32[1024]{0:T(1024)} %param.787)")
    r = classify_op(hbm, "", "copy-start")
    assert (r.bucket, r.collective) == ("other_compute", None)
    # S(5) in a non-copy op (a fusion reading a host buffer) is not a transfer
    assert classify_op("%f = f32[8]{0} fusion(f32[8]{0:S(5)} %p), kind=kLoop", "", "loop fusion").bucket == "other_compute"


def test_async_slice_and_wrapped_compute_are_not_collectives():
    start = ("%slice-start = ((s8[1048576]{0}), s8[4096]{0:S(1)}, s32[]{:S(2)}) async-start(s8[1048576]{0} %b), "
             "calls=%async_computation")
    done = ("%slice-done = s8[4096]{0:S(1)} async-done(((s8[1048576]{0}), s8[4096]{0:S(1)}, s32[]{:S(2)}) "
            "%slice-start)")
    for t, cat in ((start, "async-start"), (done, "async-done")):
        r = classify_op(t, "", cat)
        assert (r.bucket, r.collective, r.role) == ("other_compute", None, None), t
    # an async-done of a real collective still pairs as one
    r = classify_op("%all-gather-done = f32[8]{0} async-done((f32[4]{0}, f32[8]{0}) %all-gather-start)", "", "async-done")
    assert (r.bucket, r.role) == ("all_gather", "done")


def test_layout_ops_under_a_fused_kernel_scope_are_attention_layout_not_unfused():
    tf = "jit(step)/jit(attn)/shard_map/jit(ragged_paged_attention)/transpose:"
    r = classify_op("%copy_bitcast_fusion.1 = bf16[4,16]{1,0} fusion(bf16[16,4]{1,0} %b), kind=kLoop", "",
                    "loop fusion", tf)
    assert (r.bucket, r.attention_part) == ("attention", "layout")
    k = classify_op('%RPA-bq_32.1 = bf16[4,16]{1,0} custom-call(bf16[4,16]{1,0} %q), custom_call_target="tpu_custom_call"',
                    "", "custom-call", "jit(step)/jit(ragged_paged_attention)/RPA-bq_32/pallas_call:")
    assert (k.bucket, k.attention_part, k.kernel) == ("attention", "kernel", "ragged_paged_attention")
    u = classify_op("%fusion.3 = f32[8,128,128]{2,1,0} fusion(f32[8,128,128]{2,1,0} %s), kind=kLoop", "",
                    "loop fusion", "jit(train)/decoder/layers/self_attention/softmax/exp:")
    assert (u.bucket, u.attention_part) == ("attention", "unfused")


def _a(*v):
    return np.asarray(v, dtype=np.int64)


def test_one_ps_overlaps_are_sequential_and_lose_only_the_overlap():
    # three ops back to back, each overlapping the next by 1 ps; a real parent with a child after them
    start, end = _a(0, 99, 199, 400, 410), _a(100, 200, 300, 500, 450)
    moved, s2, order = sequential_overlaps(start, end)
    assert moved == 2
    e2 = end[order]
    parent, depth, e3 = nesting(s2, e2)
    assert parent.tolist() == [-1, -1, -1, -1, 3]  # only real containment nests
    dur = (e3 - s2).tolist()
    assert dur == [100, 100, 100, 100, 40]  # each lost its 1 ps overlap, nothing more
    assert sequential_overlaps(_a(0, 10), _a(100, 50))[0] == 0  # containment is untouched
