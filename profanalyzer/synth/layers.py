"""Layer bodies of the synthetic MaxText decoder layer: attention core, Q/K/V, MLP and
MoE (experts, dispatch) forward and backward ops, and the per-layer forward/backward
sequences (:func:`layer_fwd`, :func:`layer_bwd`) built with :class:`.builder.Builder`."""

from __future__ import annotations

from . import hlo as H
from .builder import (
    CORE_PEAK_BF16,
    CORE_PEAK_FP8,
    OP,
    Builder,
    OpT,
    compute_ps,
)
from .hlo import DG_ATTN, DG_DGRAD, DG_F32, DG_FWD, DG_WGRAD, nbytes, shape

# ---------------------------------------------------------------------------
# Layer bodies
# ---------------------------------------------------------------------------

def mm_dts(b: Builder, which: str) -> tuple[str, str]:
    if not b.fp8:
        return ("bf16", "bf16")
    return {"fwd": ("f8e4m3fn", "f8e4m3fn"), "dgrad": ("f8e5m2", "f8e4m3fn"), "wgrad": ("f8e4m3fn", "f8e5m2")}[which]


def _quant(b: Builder, sc: str, dims, phase: str, what: str, remat: bool = False) -> list:
    """FP8 quantisation fusion (amax, scale, convert) when precision is fp8."""
    if not b.fp8:
        return []
    op = b.ew(f"{sc}/{what}/qwix_quantize/convert_element_type[new_dtype=float8_e4m3fn weak_type=False]",
              dims, phase=phase, n_in=1, flops_per=6, out_dt="f8e4m3fn", source="qwix/qconfig.py:210",
              remat=remat)
    return [(OP, op.idx)]


def _attention_core_fwd(b: Builder, sc: str, phase: str, remat: bool) -> list:
    s = b.s
    T, S_kv = b.Tm, s.seq_len
    causal_units = b.B * b.S_l * S_kv * b.Hq * b.Hd  # one causal score or value matmul = 2*units/2 flops
    att = f"{sc}/self_attention/AttentionOp_0/AttentionOp_0.apply_attention"
    if s.attention == "splash":
        inst, comp = H.splash_name("fwd", s.kernel_block)
        tf = f"{att}/AttentionOp_0.tpu_flash_attention/jit(shmap_body)/vmap(jit(_splash_attention))/{comp}/jit(wrapped)/pallas_call"
        flops = 2 * causal_units * (b.Tm / b.T)
        qb = nbytes("bf16", (b.Tm, b.qd))
        kvb = 2 * nbytes("bf16", (S_kv, b.kvd))
        nb = int(2 * qb + kvb * max(1, b.S_l // s.kernel_block) * 0.5 * (b.Tm / b.T) + kvb)
        op = b.kernel(inst, tf, phase=phase, flops=int(flops), nbytes_=nb, eff=s.kernel_eff, bucket="attention",
                      outs=[shape("f32", (s.kernel_block, 128)), shape("bf16", (b.Hq, T, b.Hd)),
                            shape("f32", (b.Hq, T, b.Hd))],
                      ins=[shape("s8", (1, 4, 4)), shape("bf16", (b.Hq, T, b.Hd)), shape("bf16", (b.KV, S_kv, b.Hd)),
                           shape("bf16", (b.KV, S_kv, b.Hd))],
                      source="splash_attention_kernel.py:2286", remat=remat)
        return [(OP, op.idx)]
    # unfused: QK^T dot, masked softmax, PV dot -- the score matrix goes through HBM
    tfd = f"{att}/AttentionOp_0.apply_attention_dot"
    out = []
    qk = b.matmul(f"{tfd}/einsum/{DG_ATTN}", T, b.Hd, S_kv, phase=phase, batch=b.Hq, attention=True,
                  out_dt="f32", eff=0.45, remat=remat, source="attentions.py:493")
    out.append((OP, qk.idx))
    sm = b.ew(f"{tfd}/softmax/reduce_max[axes=(-1,)]", (b.Hq, T, S_kv), phase=phase, dt="f32", n_in=1,
              n_out=1, flops_per=5, attention=True, remat=remat, source="attentions.py:512", out_dt="bf16")
    out.append((OP, sm.idx))
    pv = b.matmul(f"{tfd}/einsum/{DG_ATTN}", T, S_kv, b.Hd, phase=phase, batch=b.Hq, attention=True,
                  eff=0.5, remat=remat, source="attentions.py:530")
    out.append((OP, pv.idx))
    return out


def _attention_core_bwd(b: Builder, sc: str) -> list:
    s = b.s
    T, S_kv = b.Tm, s.seq_len
    units = b.B * b.S_l * S_kv * b.Hq * b.Hd * (b.Tm / b.T)
    att = f"{sc}/self_attention/AttentionOp_0/AttentionOp_0.apply_attention"
    out = []
    if s.attention == "splash":
        base = f"{att}/AttentionOp_0.tpu_flash_attention/jit(shmap_body)/vmap(jit(_splash_attention))"
        qb = nbytes("bf16", (b.Tm, b.qd))
        kvb = 2 * nbytes("bf16", (S_kv, b.kvd))
        rereads = max(1, b.S_l // s.kernel_block) * 0.5 * (b.Tm / b.T)
        for kind, mult in (("dq", 3), ("dkv", 4)):
            inst, comp = H.splash_name(kind, s.kernel_block)
            tf = f"{base}/{comp}/jit(wrapped)/pallas_call"
            nb = int(3 * qb + kvb * rereads * (1.5 if kind == "dkv" else 1.0) + 2 * kvb)
            outs = ([shape("f32", (s.kernel_block, 128)), shape("bf16", (b.Hq, T, b.Hd))] if kind == "dq" else
                    [shape("f32", (s.kernel_block, 128)), shape("f32", (s.kernel_block, 128)),
                     shape("bf16", (b.KV, S_kv, b.Hd)), shape("bf16", (b.KV, S_kv, b.Hd))])
            op = b.kernel(inst, tf, phase="bwd", flops=int(mult * units), nbytes_=nb, eff=s.kernel_eff * 0.92,
                          bucket="attention", outs=outs,
                          ins=[shape("s8", (1, 4, 4)), shape("bf16", (b.Hq, T, b.Hd)),
                               shape("bf16", (b.KV, S_kv, b.Hd)), shape("bf16", (b.KV, S_kv, b.Hd))],
                          source="splash_attention_kernel.py:2286")
            out.append((OP, op.idx))
        return out
    tfd = f"{att}/AttentionOp_0.apply_attention_dot"
    for M, K, N, label in ((S_kv, T, b.Hd, "dv"), (T, b.Hd, S_kv, "dp")):
        op = b.matmul(f"{tfd}/einsum/{DG_ATTN}", M, K, N, phase="bwd", batch=b.Hq, attention=True, eff=0.45,
                      out_dt="f32" if label == "dp" else "bf16", source="attentions.py:493")
        out.append((OP, op.idx))
    sm = b.ew(f"{tfd}/softmax/mul", (b.Hq, T, S_kv), phase="bwd", dt="f32", n_in=2, flops_per=4, attention=True,
              source="attentions.py:512", out_dt="bf16")
    out.append((OP, sm.idx))
    red = b.ew(f"{tfd}/softmax/reduce_sum[axes=(-1,)]", (b.Hq, T, 128), phase="bwd", dt="f32", n_in=1,
               flops_per=2, attention=True, category="reduce", opcode="reduce", source="attentions.py:514",
               hlo_body=f"reduce(f32[{b.Hq},{T},{S_kv}] {b.last}, f32[] %constant.{b.nm.num('constant')}), "
                        f"dimensions={{2}}, to_apply=%region_{b.nm.num('region')}.add")
    out.append((OP, red.idx))
    for M, K, N in ((T, S_kv, b.Hd), (S_kv, T, b.Hd)):
        op = b.matmul(f"{tfd}/einsum/{DG_ATTN}", M, K, N, phase="bwd", batch=b.Hq, attention=True, eff=0.45,
                      source="attentions.py:493")
        out.append((OP, op.idx))
    return out


def _qkv_fwd(b: Builder, sc: str, phase: str, remat: bool) -> list:
    out = []
    dts = mm_dts(b, "fwd")
    for proj, width in (("query", b.qd), ("key", b.kvd), ("value", b.kvd)):
        pname = "query_projection" if proj == "query" else "kv_projection"
        op = b.matmul(f"{sc}/self_attention/self_attention.{pname}/{proj}/{DG_FWD}", b.Tm, b.D, width,
                      phase=phase, dts=dts, remat=remat)
        out.append((OP, op.idx))
    return out


def _mlp_fwd_ops(b: Builder, sc: str, phase: str, remat: bool, upto_silu: bool = False) -> list:
    dts = mm_dts(b, "fwd")
    out = []
    w0 = b.matmul(f"{sc}/mlp/wi_0/{DG_FWD}", b.Tm, b.D, b.F, phase=phase, dts=dts, remat=remat)
    w1 = b.matmul(f"{sc}/mlp/wi_1/{DG_FWD}", b.Tm, b.D, b.F, phase=phase, dts=dts, remat=remat, dedup=w0.name)
    out += [(OP, w0.idx), (OP, w1.idx)]
    si = b.ew(f"{sc}/mlp/mul", (1, b.Tm, b.F), phase=phase, n_in=2, flops_per=6, remat=remat,
              remat_suffix=remat, source="linears.py:262")
    out.append((OP, si.idx))
    if not upto_silu:
        if b.s.custom_matmul and not b.fp8:
            wo = custom_matmul_kernel(b, f"{sc}/mlp/wo", b.Tm, b.F, b.D, phase=phase, remat=remat)
        else:
            wo = b.matmul(f"{sc}/mlp/wo/{DG_FWD}", b.Tm, b.F, b.D, phase=phase, dts=dts, remat=remat)
        out.append((OP, wo.idx))
    return out


#: The custom kernel's name: no matmul word in it, so only its shapes can say what it computes.
CUSTOM_MATMUL_KERNEL = "fused_ffn_down_block"


def custom_matmul_kernel(b: Builder, scope: str, M: int, K: int, N: int, *, phase: str, remat: bool) -> OpT:
    """A user's Pallas kernel computing x[M, K] @ w[K, N] -> [M, N] in bf16
    under a name that says nothing (``fused_ffn_down_block``): a
    tpu_custom_call with typed operands, an xprof_metadata JSON of block sizes
    and no flops stat. Truth: matmul_bf16, FLOPs 2*M*N*K."""
    if b.s.opaque_kernel:
        return opaque_matmul_kernel(b, scope, M, K, N, phase=phase, remat=remat)
    name = b.nm.name(CUSTOM_MATMUL_KERNEL)
    x, w, o = shape("bf16", (M, K)), shape("bf16", (K, N)), shape("bf16", (M, N))
    text = (f"%{name} = {o}{{1,0}} custom-call({x}{{1,0}} {b.last}, {w}{{1,0}} %param.{b.nm.num('param')}), "
            f"custom_call_target=\"tpu_custom_call\", operand_layout_constraints={{{x}{{1,0}}, {w}{{1,0}}}}, "
            f"frontend_attributes={{kernel_metadata={{xprof_metadata=\"{{\\\"block_m\\\":512,"
            f"\\\"block_n\\\":512,\\\"block_k\\\":1024}}\"}}}}")
    flops = 2 * M * N * K
    byts = nbytes("bf16", (M, K)) + nbytes("bf16", (K, N)) + nbytes("bf16", (M, N))
    op = b.new_op(name=name, hlo=text, category="custom-call", bucket="matmul_bf16", phase=phase,
                  tf_op=f"{scope}/jit({CUSTOM_MATMUL_KERNEL})/pallas_call:", source="model/ffn_kernel.py:88",
                  flops=flops, model_flops=0 if remat else flops, bytes_accessed=0, raw_bytes=0, shape=o,
                  base_ps=compute_ps(flops, byts, CORE_PEAK_BF16, b.s.matmul_eff, eff_m=0.85), stat_flops=False,
                  precision="bf16", remat=remat)
    b.last = "%" + name
    return op


#: The opaque kernel's name: nothing in it, in its scope or in its HLO says matmul.
OPAQUE_MATMUL_KERNEL = "ffn_down_tiled"


def opaque_matmul_kernel(b: Builder, scope: str, M: int, K: int, N: int, *, phase: str, remat: bool) -> OpT:
    """The same x[M, K] @ w[K, N] kernel as ``custom_matmul_kernel``, but its
    HLO text names its operands bare (no types, no operand layout
    constraints) and carries no kernel metadata, so name, metadata and
    shapes say nothing: only its hardware counters (MXU busy, synth.counters)
    say it is a matmul. Truth: matmul_bf16 when the capture has counters,
    else other_compute (nothing to tell); its FLOPs are not derivable."""
    name = b.nm.name(OPAQUE_MATMUL_KERNEL)
    o = shape("bf16", (M, N))
    text = (f"%{name} = {o}{{1,0}} custom-call({b.last}, %param.{b.nm.num('param')}), "
            f"custom_call_target=\"tpu_custom_call\"")
    flops = 2 * M * N * K
    byts = nbytes("bf16", (M, K)) + nbytes("bf16", (K, N)) + nbytes("bf16", (M, N))
    op = b.new_op(name=name, hlo=text, category="custom-call", bucket="matmul_bf16" if b.s.counters else "other_compute",
                  phase=phase, tf_op=f"{scope}/jit({OPAQUE_MATMUL_KERNEL})/pallas_call:", source="model/ffn_kernel.py:120",
                  flops=flops, model_flops=0 if remat else flops, bytes_accessed=0, raw_bytes=0, shape=o,
                  base_ps=compute_ps(flops, byts, CORE_PEAK_BF16, b.s.matmul_eff, eff_m=0.85), stat_flops=False,
                  precision="bf16" if b.s.counters else "", remat=remat)
    b.last = "%" + name
    return op


def _moe_fwd_ops(b: Builder, sc: str, phase: str, remat: bool, with_comm: bool = True) -> list:
    s = b.s
    out = []
    moe = f"{sc}/MoeBlock_0"
    r = b.matmul(f"{moe}/gate/{DG_F32}", b.Tm, b.D, s.experts, phase=phase, dts=("f32", "f32"), out_dt="f32",
                 remat=remat, source="moe.py:402", eff=0.35)
    out.append((OP, r.idx))
    tk = b.ew(f"{moe}/top_k[k={s.top_k}]", (b.Tm, s.experts), phase=phase, dt="f32", n_in=1, flops_per=20,
              remat=remat, remat_suffix=remat, source="moe.py:431")
    out.append((OP, tk.idx))
    routed = b.Tm * s.top_k
    perm = b.ew(f"{moe}/permute/gather", (routed, b.D), phase=phase, n_in=1, flops_per=1, remat=remat,
                source="moe.py:470", category="loop fusion")
    out.append((OP, perm.idx))
    if with_comm:
        k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase=phase, group=s.ep,
                   tf=f"{moe}/shard_map/all_to_all[split_axis=0 concat_axis=0 axis_name=expert tiled=True]",
                   source="moe.py:512")
        out += [("S", k), ("D", k)]
    out += _experts(b, moe, phase, remat, "fwd")
    if with_comm:
        k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase=phase, group=s.ep,
                   tf=f"{moe}/shard_map/all_to_all[split_axis=0 concat_axis=0 axis_name=expert tiled=True]",
                   source="moe.py:540")
        out += [("S", k), ("D", k)]
    un = b.ew(f"{moe}/unpermute/mul", (b.Tm, b.D), phase=phase, n_in=3, flops_per=3, remat=remat,
              source="moe.py:560")
    out.append((OP, un.idx))
    return out


def _experts(b: Builder, moe: str, phase: str, remat: bool, which: str) -> list:
    """Expert FFN: megablox gmm kernels or padded dense einsums."""
    s = b.s
    D, Fm = b.D, s.moe_d_ff
    routed = b.Tm * s.top_k  # tokens this core's experts process (balanced)
    out = []
    dts = mm_dts(b, "fwd")
    peak = CORE_PEAK_FP8 if b.fp8 else CORE_PEAK_BF16
    if s.moe_impl == "dense_padded":
        padded = int(routed * s.capacity_factor)
        tfb = f"{moe}/dense_matmul"
        mats = [("wi_0", padded, D, Fm), ("wi_1", padded, D, Fm), ("wo", padded, Fm, D)]
        if which == "fwd":
            for nm_, M, K, N in mats:
                op = b.matmul(f"{tfb}/{nm_}/{DG_FWD}", M, K, N, phase=phase, dts=dts, remat=remat,
                              model_flops=2 * routed * K * N, source="moe.py:655")
                out.append((OP, op.idx))
                if nm_ == "wi_1":
                    op = b.ew(f"{tfb}/mul", (padded, Fm), phase=phase, flops_per=6, remat=remat,
                              remat_suffix=remat, source="moe.py:668")
                    out.append((OP, op.idx))
        else:
            for nm_, M, K, N in reversed(mats):
                for g, dd in (("dgrad", mm_dts(b, "dgrad")), ("wgrad", mm_dts(b, "wgrad"))):
                    mm = (M, N, K) if g == "dgrad" else (K, M, N)
                    op = b.matmul(f"{tfb}/{nm_}/{DG_DGRAD if g == 'dgrad' else DG_WGRAD}", *mm, phase="bwd",
                                  dts=dd, model_flops=2 * routed * K * N, source="moe.py:655")
                    out.append((OP, op.idx))
                if nm_ == "wo":
                    op = b.ew(f"{tfb}/mul", (padded, Fm), phase="bwd", n_in=3, flops_per=8, source="moe.py:668")
                    out.append((OP, op.idx))
        return out
    # megablox gmm / tgmm
    gdt = "f8e4m3fn" if b.fp8 else "bf16"

    def gmm(kind: str, M: int, K: int, N: int, ph: str, rm: bool, tag: str) -> OpT:
        flops = 2 * M * K * N
        nb = nbytes(gdt, (M, K)) + nbytes(gdt, (s.experts // s.ep, K, N)) + nbytes("bf16", (M, N))
        inst = f"{kind}-{tag}"
        tf = f"{moe}/jit({kind})/{kind}/pallas_call"
        eff = 0.66 * min(1.0, s.kernel_eff / 0.62)
        ins = [shape(gdt, (M, K)), shape(gdt, (max(1, s.experts // s.ep), K, N)), shape("s32", (s.experts,))]
        return b.kernel(inst, tf, phase=ph, flops=flops, nbytes_=nb, eff=eff,
                        bucket="matmul_fp8" if b.fp8 else "matmul_bf16",
                        outs=[shape("bf16", (M, N))], ins=ins, source="megablox/gmm.py:320", remat=rm, peak=peak)

    if which == "fwd":
        out.append((OP, gmm("gmm", routed, D, Fm, phase, remat, "wi_0").idx))
        out.append((OP, gmm("gmm", routed, D, Fm, phase, remat, "wi_1").idx))
        op = b.ew(f"{moe}/mul", (routed, Fm), phase=phase, flops_per=6, remat=remat, remat_suffix=remat,
                  source="moe.py:610")
        out.append((OP, op.idx))
        out.append((OP, gmm("gmm", routed, Fm, D, phase, remat, "wo").idx))
    else:
        out.append((OP, gmm("gmm", routed, D, Fm, "bwd", False, "wo_dgrad").idx))
        out.append((OP, gmm("tgmm", Fm, routed, D, "bwd", False, "wo").idx))
        op = b.ew(f"{moe}/mul", (routed, Fm), phase="bwd", n_in=3, flops_per=8, source="moe.py:610")
        out.append((OP, op.idx))
        for w in ("wi_0", "wi_1"):
            out.append((OP, gmm("gmm", routed, Fm, D, "bwd", False, f"{w}_dgrad").idx))
            out.append((OP, gmm("tgmm", D, routed, Fm, "bwd", False, w).idx))
    return out


def _moe_bwd_ops(b: Builder, sc: str) -> list:
    s = b.s
    moe = f"{sc}/MoeBlock_0"
    routed = b.Tm * s.top_k
    out = []
    a2a_tf = f"{moe}/shard_map/all_to_all[split_axis=0 concat_axis=0 axis_name=expert tiled=True]"
    k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase="bwd", group=s.ep, tf=a2a_tf, source="moe.py:540")
    out += [("S", k), ("D", k)]
    out += _experts(b, moe, "bwd", False, "bwd")
    k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase="bwd", group=s.ep, tf=a2a_tf, source="moe.py:512")
    out += [("S", k), ("D", k)]
    r1 = b.matmul(f"{moe}/gate/{DG_F32}", b.Tm, s.experts, b.D, phase="bwd", dts=("f32", "f32"), out_dt="f32",
                  source="moe.py:402", eff=0.3)
    r2 = b.matmul(f"{moe}/gate/{DG_F32}", b.D, b.Tm, s.experts, phase="bwd", dts=("f32", "f32"), out_dt="f32",
                  source="moe.py:402", eff=0.3)
    out += [(OP, r1.idx), (OP, r2.idx)]
    return out


def _dus(b: Builder, dims: tuple[int, ...], dt: str, phase: str) -> OpT:
    full = (b.layers,) + tuple(dims)
    return b.misc("dynamic-update-slice", "dynamic-update-slice",
                  f"dynamic-update-slice({shape(dt, full)} {b.nm.gte()}, {shape(dt, (1,) + tuple(dims))} {b.last}, "
                  f"s32[] {b.nm.gte()}, s32[] %constant.{b.nm.num('constant')}, s32[] %constant.{b.nm.num('constant')})",
                  shape(dt, full, minor_first=(len(full) == 3 and dt == "f32")), phase=phase,
                  tf=f"{H.FWD if phase == 'fwd' else H.BWD}/while/body/dynamic_update_slice",
                  nbytes_=2 * nbytes(dt, dims), source="axes_scan.py:166")


def layer_fwd(b: Builder) -> tuple[list, list, list]:
    """(loop prologue, scanned layer body, loop epilogue) of the forward pass."""
    s = b.s
    sc = H.layer_scope("fwd", pipeline=b.pipeline)
    D, Tm = b.D, b.Tm
    items: list = []
    attn_w = b.coll("all_gather", (2 * b.qd + 2 * b.kvd, D), phase="fwd", group=s.fsdp,
                    tf=f"{sc}/self_attention/self_attention.query_projection/query/{DG_FWD}", source="linears.py:118")
    if s.arch == "moe":
        mlp_w = b.coll("all_gather", (3 * max(1, s.experts // s.ep) * s.moe_d_ff, D), phase="fwd",
                       group=max(1, s.fsdp // s.ep), tf=f"{sc}/MoeBlock_0/wi_0/all_gather", source="moe.py:380")
    else:
        mlp_w = b.coll("all_gather", (3 * b.F, D), phase="fwd", group=s.fsdp,
                       tf=f"{sc}/mlp/wi_0/{DG_FWD}", source="linears.py:118")
    vcopy = b.coll(None, (D, D // 8), phase="fwd", tf=None, group=1)
    items.append((OP, b.ew(f"{sc}/pre_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="fwd", n_in=2,
                           flops_per=5, source="normalizations.py:68").idx))
    items.append(("S", vcopy))
    items += _quant(b, sc + "/self_attention", (1, Tm, D), "fwd", "query")
    items.append(("D", attn_w))
    items += _qkv_fwd(b, sc, "fwd", False)
    items.append(("S", attn_w))  # prefetch the next layer's attention weights
    items.append((OP, b.ew(f"{sc}/self_attention/rotary_embedding/mul", (1, Tm, b.qd + b.kvd), phase="fwd",
                           n_in=3, flops_per=6, source="embeddings.py:297").idx))
    if s.cp > 1:
        kv = b.coll("all_gather", (2 * s.seq_len, b.kvd), phase="fwd", group=s.cp,
                    tf=f"{sc}/self_attention/AttentionOp_0/all_gather[axis_name=context tiled=True]",
                    source="attentions.py:402")
        items.insert(len(items) - 1, ("S", kv))
        items.append((OP, b.ew(f"{sc}/self_attention/AttentionOp_0/transpose", (1, Tm, b.qd), phase="fwd",
                               n_in=1, flops_per=0, category="data formatting", opcode="copy",
                               source="attentions.py:398").idx))
        items.append(("D", kv))
    items += _attention_core_fwd(b, sc, "fwd", False)
    items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.out_projection/out/{DG_FWD}", Tm, b.qd, D,
                               phase="fwd", dts=mm_dts(b, "fwd")).idx))
    items.append((OP, b.ew(f"{sc}/post_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="fwd", n_in=3,
                           flops_per=6, source="normalizations.py:68").idx))
    items.append(("D", vcopy))
    items += _quant(b, sc + "/mlp", (1, Tm, D), "fwd", "wi_0")
    items.append(("D", mlp_w))
    if s.arch == "moe":
        items += _moe_fwd_ops(b, sc, "fwd", False)
    else:
        items += _mlp_fwd_ops(b, sc, "fwd", False)
    items.append(("S", mlp_w))  # prefetch the next layer's MLP weights
    items.append((OP, b.ew(f"{sc}/add", (1, Tm, D), phase="fwd", n_in=2, flops_per=1,
                           source="decoders.py:142").idx))
    items.append((OP, _dus(b, (Tm, D), "bf16", "fwd").idx))
    pre, post = b.prefetch([attn_w, mlp_w])
    body = b.realize(items)
    return b.realize(pre), body, b.realize(post)


def layer_bwd(b: Builder) -> tuple[list, list, list]:
    """(loop prologue, scanned layer body, loop epilogue) of the backward pass."""
    s = b.s
    sc = H.layer_scope("bwd", pipeline=b.pipeline)
    rsc = H.layer_scope("bwd", remat=True, pipeline=b.pipeline)
    D, Tm = b.D, b.Tm
    items: list = []
    if s.arch == "moe":
        mlp_dims = (3 * max(1, s.experts // s.ep) * s.moe_d_ff, D)
        mlp_group = max(1, s.fsdp // s.ep)
    else:
        mlp_dims, mlp_group = (3 * b.F, D), s.fsdp
    ag_mlp = b.coll("all_gather", mlp_dims, phase="bwd", group=mlp_group,
                    tf=f"{sc}/mlp/wi_0/{DG_DGRAD}" if s.arch != "moe" else f"{sc}/MoeBlock_0/wi_0/all_gather",
                    source="linears.py:118")
    ag_attn = b.coll("all_gather", (2 * b.qd + 2 * b.kvd, D), phase="bwd", group=s.fsdp,
                     tf=f"{sc}/self_attention/self_attention.query_projection/query/{DG_DGRAD}",
                     source="linears.py:118")
    items.append((OP, b.misc("dynamic-slice", "dynamic-slice",
                             f"dynamic-slice(bf16[{b.layers},{Tm},{D}] {b.nm.gte()}, s32[] {b.nm.gte()}, "
                             f"s32[] %constant.{b.nm.num('constant')}, s32[] %constant.{b.nm.num('constant')}), "
                             f"dynamic_slice_sizes={{1,{Tm},{D}}}",
                             shape("bf16", (1, Tm, D)), phase="bwd", tf=f"{H.BWD}/while/body/dynamic_slice",
                             nbytes_=2 * nbytes("bf16", (Tm, D)), source="axes_scan.py:160").idx))
    # -- recompute (remat policy) ---------------------------------------------
    pol = s.remat
    items.append((OP, b.ew(f"{sc}/pre_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=2,
                           flops_per=5, remat=True, remat_suffix=True, source="normalizations.py:68").idx))
    if pol == "full":
        items += _quant(b, rsc + "/self_attention", (1, Tm, D), "bwd", "query", remat=True)
        items.append(("D", ag_attn))
        items += _qkv_fwd(b, rsc, "bwd", True)
        items += _attention_core_fwd(b, rsc, "bwd", True)
        items.append((OP, b.matmul(f"{rsc}/self_attention/self_attention.out_projection/out/{DG_FWD}", Tm, b.qd,
                                   D, phase="bwd", dts=mm_dts(b, "fwd"), remat=True).idx))
    items.append((OP, b.ew(f"{sc}/post_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=3,
                           flops_per=6, remat=True, remat_suffix=True, source="normalizations.py:68").idx))
    items.append(("D", ag_mlp))
    if pol in ("full", "moderate"):
        if s.arch == "moe":
            items += _moe_fwd_ops(b, rsc, "bwd", True, with_comm=(pol == "full"))
        else:
            items += _mlp_fwd_ops(b, rsc, "bwd", True, upto_silu=(pol == "moderate"))
    # -- MLP / MoE backward ------------------------------------------------------
    if s.arch == "moe":
        items += _moe_bwd_ops(b, sc)
        rs_mlp = b.coll("reduce_scatter", mlp_dims, phase="bwd", group=mlp_group,
                        tf=f"{sc}/MoeBlock_0/wi_0/reduce_scatter", source="moe.py:380")
    else:
        dd, wd = mm_dts(b, "dgrad"), mm_dts(b, "wgrad")
        items += _quant(b, sc + "/mlp", (1, Tm, D), "bwd", "wo_grad")
        items.append((OP, b.matmul(f"{sc}/mlp/wo/{DG_DGRAD}", Tm, D, b.F, phase="bwd", dts=dd).idx))
        items.append((OP, b.matmul(f"{sc}/mlp/wo/{DG_WGRAD}", b.F, Tm, D, phase="bwd", dts=wd).idx))
        items.append((OP, b.ew(f"{sc}/mlp/mul", (1, Tm, b.F), phase="bwd", n_in=3, flops_per=8,
                               source="linears.py:262").idx))
        for w in ("wi_0", "wi_1"):
            items.append((OP, b.matmul(f"{sc}/mlp/{w}/{DG_DGRAD}", Tm, b.F, D, phase="bwd", dts=dd).idx))
            items.append((OP, b.matmul(f"{sc}/mlp/{w}/{DG_WGRAD}", D, Tm, b.F, phase="bwd", dts=wd).idx))
        rs_mlp = b.coll("reduce_scatter", mlp_dims, phase="bwd", group=mlp_group,
                        tf=f"{sc}/mlp/wi_0/{DG_WGRAD}", source="linears.py:118")
    items.append(("S", ag_mlp))  # prefetch the next (lower) layer's MLP weights
    items.append(("S", rs_mlp))
    items.append((OP, b.ew(f"{sc}/post_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=3,
                           flops_per=8, source="normalizations.py:68").idx))
    if pol != "full":
        items.append(("D", ag_attn))
    dd, wd = mm_dts(b, "dgrad"), mm_dts(b, "wgrad")
    items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.out_projection/out/{DG_DGRAD}", Tm, D, b.qd,
                               phase="bwd", dts=dd).idx))
    items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.out_projection/out/{DG_WGRAD}", b.qd, Tm, D,
                               phase="bwd", dts=wd).idx))
    items += _attention_core_bwd(b, sc)
    rs_kv = None
    if s.cp > 1:
        rs_kv = b.coll("reduce_scatter", (2 * s.seq_len, b.kvd), phase="bwd", group=s.cp,
                       tf=f"{sc}/self_attention/AttentionOp_0/reduce_scatter[axis_name=context]",
                       source="attentions.py:402")
        items.append(("S", rs_kv))
    rs_attn = b.coll("reduce_scatter", (2 * b.qd + 2 * b.kvd, D), phase="bwd", group=s.fsdp,
                     tf=f"{sc}/self_attention/self_attention.query_projection/query/{DG_WGRAD}",
                     source="linears.py:118")
    for proj, width in (("query", b.qd), ("key", b.kvd), ("value", b.kvd)):
        pname = "query_projection" if proj == "query" else "kv_projection"
        items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.{pname}/{proj}/{DG_DGRAD}", Tm, width, D,
                                   phase="bwd", dts=dd).idx))
        items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.{pname}/{proj}/{DG_WGRAD}", D, Tm, width,
                                   phase="bwd", dts=wd).idx))
        if proj == "query":
            items.append(("S", rs_attn))
        if rs_kv is not None and proj == "key":
            items.append(("D", rs_kv))
    items.append(("S", ag_attn))  # prefetch the next (lower) layer's attention weights
    items.append((OP, b.ew(f"{sc}/pre_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=3,
                           flops_per=8, source="normalizations.py:68").idx))
    ar = b.coll("all_reduce", (2, D), phase="bwd", group=s.fsdp, dt="f32",
                tf=f"{sc}/pre_self_attention_layer_norm/rms_norm/reduce_sum[axes=(0, 1)]",
                source="normalizations.py:70")
    items.append(("S", ar))
    gdims = (max(1, b.F // 4), D) if s.arch != "moe" else (max(1, s.moe_d_ff // 4), D)
    items.append((OP, _dus(b, gdims, "f32", "bwd").idx))
    items.append(("D", rs_mlp))
    items.append(("D", ar))
    items.append((OP, _dus(b, (D, b.qd // 4), "f32", "bwd").idx))
    items.append(("D", rs_attn))
    pre, post = b.prefetch([ag_mlp, ag_attn])
    body = b.realize(items)
    return b.realize(pre), body, b.realize(post)
