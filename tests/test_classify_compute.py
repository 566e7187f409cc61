"""Tests for profanalyzer.classify, the compute rules: matmuls and their
precision, attention (kernels, unfused attention, projections and their
neighbours), Megablox and other Pallas kernels and custom calls.

Fixtures are short strings written in the forms real TPU profiles use (HLO
text as XProf stores it in event metadata, MaxText/JAX name stacks); the
shared ones come from test_classify.py, which holds the other rules.
"""

from __future__ import annotations

import pytest
from test_classify import BWD, DG, FWD, REMAT, SPLASH_SCOPE, L, conv_fusion

from profanalyzer.classify import classify_op


# --------------------------------------------------------------------------
# matmuls and precision
# --------------------------------------------------------------------------
def test_convolution_fusion_bf16():
    text = conv_fusion("fusion.556", f"bf16[1,2048,2048]{L}", f"bf16[1,2048,2048]{L}", f"bf16[1,7168,2048]{L}",
                       f"bf16[2048,7168]{L}")
    r = classify_op(text, "fusion.556", "convolution fusion", FWD + "mlp/wo/" + DG)
    assert (r.bucket, r.precision, r.phase, r.remat, r.collective, r.role) == (
        "matmul_bf16", "bf16", "forward", False, None, None)
    assert r.reason.startswith("[matmul]") and "convolution fusion" in r.reason


@pytest.mark.parametrize("f8", ["f8e4m3fn", "f8e5m2", "f8e4m3", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz"])
def test_fp8_operands_make_matmul_fp8_even_with_bf16_output(f8):
    text = conv_fusion("fusion.12", f"bf16[2048,7168]{L}", f"{f8}[2048,2048]{{1,0}}", f"{f8}[2048,7168]{{1,0}}",
                       "f32[] %scale_a", "f32[]")
    r = classify_op(text, "fusion.12", "convolution fusion", BWD + "mlp/wi_0/" + DG)
    assert (r.bucket, r.precision, r.phase) == ("matmul_fp8", "fp8", "backward")
    assert "fp8 from operands" in r.reason


def test_output_type_decides_only_when_operands_are_cut_off():
    # XProf may truncate the HLO text: here it stops inside the operand list
    r = classify_op("%fusion.9 = f8e4m3fn[128,256]{1,0} fusion(", "fusion.9", "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_fp8", "fp8") and "output type" in r.reason
    r = classify_op("%fusion.9 = bf16[128,256]{1,0} fus", "fusion.9", "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_bf16", "bf16")
    # cut before the output shape: shape_with_layout decides
    r = classify_op("%fusion.9 = ", "fusion.9", "convolution fusion", "", "f8e5m2[128,256]{1,0:T(8,128)(4,1)}")
    assert r.bucket == "matmul_fp8" and "shape_with_layout" in r.reason
    r = classify_op("%fusion.9 = ", "fusion.9", "output fusion", "", "f32[128,256]{1,0}")
    assert (r.bucket, r.precision) == ("matmul_other", "f32")


def test_precision_ignores_vectors_scalars_and_sync_flags():
    # f32 matmul with a 1-D bf16 norm scale, s32 index and u32 flags: f32
    text = conv_fusion("fusion.318", "f32[2048,32000]{1,0}", "f32[2048,32000]{1,0}", "bf16[2048]{0}",
                       "s32[2048]{0}", "u32[]{:S(2)}")
    r = classify_op(text, "fusion.318", "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_other", "f32")
    # a bf16 matrix next to a bigger f32 matrix: the MXU runs bf16
    text = conv_fusion("fusion.318", "f32[2048,32000]{1,0}", "f32[2048,32000]{1,0}", f"bf16[1,2048,2048]{L}")
    assert classify_op(text, "fusion.318", "convolution fusion").bucket == "matmul_bf16"


def test_int8_and_f16_and_unknown_matmuls_are_matmul_other():
    # int8 weights with bf16 activations run on the MXU in bf16 (weight-only quantization)
    text = conv_fusion("fusion.7", "bf16[64,4096]{1,0}", "s8[4096,4096]{1,0}", "bf16[64,4096]{1,0}", "f32[4096]{0}")
    r = classify_op(text, "fusion.7", "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_bf16", "w8a16")
    # int8 x int8 is an int8 matmul
    text = conv_fusion("fusion.6", "s32[64,4096]{1,0}", "s8[4096,4096]{1,0}", "s8[64,4096]{1,0}", "f32[4096]{0}")
    r = classify_op(text, "fusion.6", "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_int8", "w8a8")
    r = classify_op(conv_fusion("fusion.8", "f16[64,64]{1,0}", "f16[64,64]{1,0}", "f16[64,64]{1,0}"), "fusion.8",
                    "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_other", None)
    r = classify_op("", "fusion.9", "convolution fusion")
    assert (r.bucket, r.precision) == ("matmul_other", None) and "unknown" in r.reason


def test_matmul_without_category_from_opcode_or_output_fusion_kind():
    r = classify_op("%convolution.3 = bf16[8,128,128]{2,1,0} convolution(bf16[8,128,64]{2,1,0} %a, "
                    "bf16[64,128]{1,0} %b), dim_labels=b0f_io->b0f")
    assert (r.bucket, r.precision) == ("matmul_bf16", "bf16") and "opcode 'convolution'" in r.reason
    r = classify_op("%dot.4 = f32[128,128]{1,0} dot(f32[128,64]{1,0} %a, f32[64,128]{1,0} %b), "
                    "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    assert r.bucket == "matmul_other"
    r = classify_op("%fusion.5 = bf16[128,128]{1,0} fusion(bf16[128,64]{1,0} %a, bf16[64,128]{1,0} %b), "
                    "kind=kOutput, calls=%fc")
    assert r.bucket == "matmul_bf16" and "kOutput" in r.reason
    # the same text with a non-matmul XProf category is not a matmul
    r = classify_op("%fusion.5 = bf16[128] fusion(bf16[128] %a), kind=kOutput, calls=%fc", "", "loop fusion")
    assert r.bucket == "other_compute"


def test_operand_names_never_decide_the_kind():
    # a matmul that consumes all-gather/async-collective outputs is a matmul
    text = (f"%fusion.423 = (bf16[2048]{{0}}, bf16[2048,2048]{L}) fusion(bf16[2048,32000]{L} %all-gather.276, "
            f"bf16[1,2048,7168]{L} %async-collective-done.5, bf16[2048]{{0}} %copy-done.41), kind=kOutput, calls=%f")
    assert classify_op(text, "fusion.423", "convolution fusion").bucket == "matmul_bf16"
    text = (f"%fusion.606 = (bf16[7168,512]{L}, f32[16,2048]{{1,0}}) fusion(bf16[7168,2048]{L} %gte.1, "
            f"bf16[1,16,128,2048]{L} %async-collective-done.8), kind=kCustom, calls=%megacore_fusion.2.clone")
    assert classify_op(text, "fusion.606", "megacore fusion").bucket == "other_compute"


# --------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name,kernel", [
    ("splash_mha_fwd_segmented_residuals_block_kv_512_block_q_512_k_layout_1_q_layout_1_v_layout_1", "splash"),
    ("splash_mha_fwd_segmented_residuals_block_kv_512_block_q_512_v_layout_1.1", "splash"),
    ("vmap_splash_mha_dkv_segmented_block_kv_dkv_512_block_q_dkv_512_k_layout_1_q_layout_1_v_layout_1_", "splash"),
    ("vmap_splash_mha_dq_segmented_block_kv_dq_512_block_q_dq_512_k_layout_1_q_layout_1_v_layout_1_", "splash"),
    ("vmap_vmap_splash_mqa_fwd_block_q_512", "splash"),
    ("_flash_attention_kernel", "flash"),
    ("_flash_attention_dq_kernel.2", "flash"),
    ("_flash_attention_dkv_kernel", "flash"),
    ("ragged_paged_attention.1", "ragged_paged_attention"),
    ("paged_attention_kernel", "pallas"),
])
def test_attention_kernels_by_name(name, kernel):
    text = (f"%{name} = (f32[512,128]{{1,0:T(8,128)}}, bf16[16,2048,128]{{2,1,0}}) custom-call("
            f"s8[1,4,4]{{2,1,0}} %mask, bf16[16,2048,128]{{2,1,0}} %q, bf16[16,2048,128]{{2,1,0}} %k, "
            f"f32[16,8,2048]{{2,1,0}} %lse), custom_call_target=\"tpu_custom_call\"")
    r = classify_op(text, name, "custom-call", REMAT + "self_attention/AttentionOp_0/pallas_call:")
    assert (r.bucket, r.kernel, r.precision, r.remat, r.phase) == ("attention", kernel, "bf16", True, "backward")
    assert r.reason.startswith("[attention.kernel]")


def test_attention_kernel_named_only_in_tf_op_or_backend_config():
    tf = FWD + "self_attention/attention/_flash_attention_impl/pallas_call:"
    text = ('%custom-call.5 = bf16[8,2048,128]{2,1,0} custom-call(bf16[8,2048,128]{2,1,0} %q), '
            'custom_call_target="tpu_custom_call"')
    r = classify_op(text, "custom-call.5", "custom-call", tf)
    assert (r.bucket, r.kernel) == ("attention", "flash") and "by tf_op" in r.reason
    text = ('%custom-call.6 = bf16[8,2048,128]{2,1,0} custom-call(bf16[8,2048,128]{2,1,0} %q), '
            'custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {}, '
            '"name": "splash_mha_fwd_no_residuals"}')
    r = classify_op(text, "custom-call.6", "custom-call", "")
    assert (r.bucket, r.kernel) == ("attention", "splash")


def test_attention_core_scope_helpers_are_attention_but_not_kernels():
    # layout copies XLA inserts around the splash call carry its tf_op
    r = classify_op("%copy.482 = bf16[16,2048,128]{2,1,0} copy(bf16[16,2048,128]{1,2,0} %gte.1)", "copy.482",
                    "data formatting", REMAT + SPLASH_SCOPE + "pallas_call:")
    assert (r.bucket, r.kernel, r.remat) == ("attention", None, True)
    assert r.reason.startswith("[attention.scope]")
    r = classify_op("%iota.62 = s32[2048,128]{1,0:T(8,128)} iota(), iota_dimension=0", "iota.62", "iota",
                    FWD + SPLASH_SCOPE + "broadcast_in_dim[shape=(2048, 128) broadcast_dimensions=(0,)]:")
    assert (r.bucket, r.precision) == ("attention", None)


def test_unfused_attention_dots_and_softmax_are_attention():
    qk = conv_fusion("fusion.3", "f32[8,16,2048,2048]{3,2,1,0}", "bf16[8,2048,16,128]{3,2,1,0}",
                     "bf16[8,2048,16,128]{3,2,1,0}")
    r = classify_op(qk, "fusion.3", "convolution fusion",
                    FWD + "self_attention/AttentionOp_0/AttentionOp_0.apply_attention_dot/einsum:")
    assert (r.bucket, r.precision, r.kernel) == ("attention", "bf16", None)
    r = classify_op(qk, "fusion.3", "convolution fusion",
                    FWD + "MultiHeadDotProductAttention_0/dot_general:")
    assert r.bucket == "attention" and "not a projection" in r.reason
    r = classify_op("%fusion.4 = f32[8,16,2048]{2,1,0} fusion(f32[8,16,2048,2048]{3,2,1,0} %s), kind=kLoop",
                    "fusion.4", "loop fusion", FWD + "MultiHeadDotProductAttention_0/reduce_max:")
    assert r.bucket == "attention" and "softmax-like" in r.reason
    r = classify_op("%fusion.5 = f32[8,16,2048,2048] fusion(f32[8,16,2048,2048] %s), kind=kLoop",
                    "fusion.5", "loop fusion", FWD + "self_attn/softmax/exp:")
    assert r.bucket == "attention"
    # other elementwise work directly under a generic attention scope is not attention
    r = classify_op("%fusion.6 = bf16[8,2048,16,128] fusion(bf16[8,2048,2048] %x), kind=kLoop", "fusion.6",
                    "loop fusion", FWD + "MultiHeadDotProductAttention_0/reshape:")
    assert r.bucket == "other_compute"


@pytest.mark.parametrize("scope", [
    "self_attention/self_attention.query_projection/query/",
    "self_attention/self_attention.kv_projection/key/",
    "self_attention/self_attention.kv_projection/value/",
    "self_attention/self_attention.out_projection/out/",
    "self_attention/query/",
    "self_attn/q_proj/",
    "self_attn/o_proj/",
    "attn/c_attn/",
    "MultiHeadDotProductAttention_0/out/",
])
def test_qkv_and_out_projections_are_plain_matmuls(scope):
    text = conv_fusion("fusion.647", f"bf16[1,2048,16,128]{L}", f"bf16[1,2048,2048]{L}", f"bf16[2048,16,128]{L}")
    r = classify_op(text, "fusion.647", "convolution fusion", FWD + scope + DG)
    assert (r.bucket, r.kernel) == ("matmul_bf16", None)


@pytest.mark.parametrize("tf", [
    FWD + "self_attention/self_attention.key_rotary/key_rotary/sub:",
    FWD + "self_attention/query_rotary/mul:",
    FWD + "pre_self_attention_layer_norm/reduce_sum[axes=(2,)]:",
    BWD + "post_self_attention_layer_norm/mul:",
    FWD + "self_attention/self_attention.query_projection/query/convert_element_type[new_dtype=bfloat16]:",
])
def test_rotary_norm_and_casts_near_attention_are_other_compute(tf):
    r = classify_op("%fusion.535 = bf16[1,2048,16,128] fusion(bf16[1,2048,16,128] %a), kind=kLoop", "fusion.535",
                    "loop fusion", tf)
    assert r.bucket == "other_compute"


# --------------------------------------------------------------------------
# Megablox and other Pallas kernels
# --------------------------------------------------------------------------
def test_megablox_gmm_kernels():
    moe = "jit(train_step)/jit(main)/jvp(Transformer)/decoder/layers/moe/"
    text = ('%gmm_v2-fwd.3 = bf16[4096,7168]{1,0} custom-call(f8e4m3fn[4096,2048]{1,0} %x, '
            'f8e4m3fn[8,2048,7168]{2,1,0} %w, s32[8]{0} %g), custom_call_target="tpu_custom_call"')
    r = classify_op(text, "gmm_v2-fwd.3", "custom-call", moe + "gmm/pallas_call:")
    assert (r.bucket, r.kernel, r.precision) == ("matmul_fp8", "megablox_gmm", "fp8")
    text = ('%custom-call.9 = bf16[8,2048,7168]{2,1,0} custom-call(bf16[4096,2048]{1,0} %x, '
            'bf16[4096,7168]{1,0} %dy, s32[8]{0} %g), custom_call_target="tpu_custom_call"')
    moe_bwd = "jit(train_step)/jit(main)/transpose(jvp(Transformer))/decoder/layers/moe/"
    r = classify_op(text, "custom-call.9", "custom-call", moe_bwd + "jit(tgmm)/pallas_call:")
    assert r.phase == "backward"
    assert (r.bucket, r.kernel) == ("matmul_bf16", "megablox_gmm")
    r = classify_op("", "tgmm_v2-bwd.1", "custom fusion", "")
    assert (r.bucket, r.kernel) == ("matmul_other", "megablox_gmm")
    # helper ops under the gmm scope are not MXU work
    r = classify_op("%fusion.77 = s32[9]{0} fusion(s32[8]{0} %g), kind=kLoop, calls=%fc", "fusion.77",
                    "loop fusion", moe + "jit(gmm)/cumsum:")
    assert (r.bucket, r.kernel) == ("other_compute", None)
    # "gmm" inside another word is not Megablox
    assert classify_op("", "fusion.3", "loop fusion", moe + "segmm_helper/add:").kernel is None


def test_other_pallas_and_custom_calls():
    text = ('%custom-call.10 = f32[1024]{0} custom-call(f32[1024]{0} %x), '
            'custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {"body": "..."}}')
    r = classify_op(text, "custom-call.10", "custom-call", FWD + "my_norm_kernel/pallas_call:")
    assert (r.bucket, r.kernel) == ("other_compute", "pallas")
    r = classify_op('%custom-call = u64[2]{0:T(128)} custom-call(u32[2]{0:T(128)} %a, u32[2]{0:T(128)} %b), '
                    'custom_call_target="X64Combine"', "custom-call", "custom-call", "")
    assert (r.bucket, r.kernel) == ("other_compute", None)
