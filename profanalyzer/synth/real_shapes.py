"""Programs shaped like the real captures of issue #14 (serving steps, host offload).

Three builders the plan dispatches to by ``Scenario.program`` / ``Scenario.host_offload``:

* :func:`build_vllm` -- a vLLM-style serving step ``jit_step_fun`` with tensor parallelism:
  Pallas ``quantized_matmul_kernel_*`` custom calls (low-bit weights, bf16 activations, f32
  scales, *no* ``flops`` stat: their FLOPs are 2*M*N*K from the operand shapes), the ragged
  paged attention kernel ``RPA-...`` and the transpose/reshape/copy layout ops feeding it under
  ``jit(ragged_paged_attention)``, a synchronous TP ``psum`` all-reduce after each row-parallel
  linear (it consumes the matmul right before it), all-to-alls of the QKV scales, async
  ``slice-start``/``slice-done`` (``async-start``/``async-done`` with ``calls=%async_computation``)
  and VMEM ``copy-start``/``copy-done`` pairs;
* :func:`build_offload_loop` -- a jitted loop ``jit_f`` that prefetches host-resident arrays
  (memory space ``S(5)``) with ``copy-start``/``copy-done``, runs elementwise fusions on them and
  copies one result back to host;
* :func:`splice_host_offload` -- ``remat_policy=offload`` activation offload added to the
  MaxText layer bodies (to host in the forward loop, back in the backward loop).

Bucket rules these templates follow (the truth is written in them):

* host<->HBM copies (an ``S(5)`` shape in the copy's operand or output): ``host_offload``;
  copies within device memory and async slices stay ``other_compute``;
* quantized matmul kernels: by the MXU input (activation) type -- int8/int4 -> ``matmul_int8``,
  fp8 -> ``matmul_fp8``, bf16 -> ``matmul_bf16`` -- with a precision tag ``w<bits>a<bits>``;
* the RPA kernel and its layout ops (``layout=True``): ``attention``.
"""

from __future__ import annotations

from .builder import (
    CORE_HBM,
    CORE_ICI,
    CORE_PEAK_BF16,
    CORE_PEAK_FP8,
    DONE,
    MB,
    ME,
    OP,
    START,
    SYNC,
    US,
    Builder,
    OpT,
    Program,
    compute_ps,
)
from .hlo import nbytes, shape

_BITS = {"f4e2m1fn": 4, "s4": 4, "s8": 8, "bf16": 16, "f8e4m3fn": 8, "f8e5m2": 8}


def precision_bucket(act_dtype: str) -> str:
    """Matmul bucket of a kernel by its MXU input (activation) element type."""
    if act_dtype in ("s8", "s4", "u8", "u4"):
        return "matmul_int8"
    if act_dtype.startswith("f8"):
        return "matmul_fp8"
    return "matmul_bf16"


def precision_tag(weight_dtype: str, act_dtype: str) -> str:
    return f"w{_BITS[weight_dtype]}a{_BITS[act_dtype]}"


# ---------------------------------------------------------------------------
# op templates
# ---------------------------------------------------------------------------

def host_copy(b: Builder, dims: tuple[int, ...], dt: str, direction: str, *, phase: str,
              tf: str | None = None) -> tuple[OpT, OpT]:
    """copy-start/copy-done between HBM and host memory (``S(5)``); bucket ``host_offload``."""
    nm = b.nm
    n = nm.num("copy")
    dev = shape(dt, dims)
    host = shape(dt, dims, mem="S(5)")
    nb = nbytes(dt, dims)
    src, dst = (dev, host) if direction == "to_host" else (host, dev)
    sname, dname = nm.claim(f"copy-start.{n}"), nm.claim(f"copy-done.{n}")
    tup = f"({dst}, {src}, u32[]{{:S(2)}})"
    st = b.new_op(name=sname, hlo=f"%{sname} = {tup} copy-start({src} {b.last})", category="copy-start",
                  bucket="host_offload", phase=phase, tf_op=(tf + ":") if tf else None, role="start", shape=tup,
                  base_ps=300_000, engine="host", form="host_copy", bytes_accessed=nb, raw_bytes=nb,
                  host_dir=direction)
    dn = b.new_op(name=dname, hlo=f"%{dname} = {dst} copy-done({tup} %{sname})", category="copy-done",
                  bucket="host_offload", phase=phase, tf_op=(tf + ":") if tf else None, role="done", shape=dst,
                  base_ps=200_000, engine="host", form="host_copy", bytes_accessed=nb, raw_bytes=nb,
                  host_bytes=nb, host_dir=direction)
    st.transfer_ps = int(nb / (b.s.host_gbps * 1e9) * 1e12) + 2 * US
    st.peer, dn.peer = dn.idx, st.idx
    b.last = "%" + dname
    return st, dn


def vmem_copy(b: Builder, n_elems: int, *, phase: str) -> tuple[OpT, OpT]:
    """copy-start/copy-done within device memory (HBM -> VMEM ``S(1)``): other_compute."""
    nm = b.nm
    n = nm.num("copy")
    src = f"s32[{n_elems}]{{0:T(1024)}}"
    dst = f"s32[{n_elems}]{{0:T(1024)S(1)}}"
    tup = f"({dst}, {src}, u32[]{{:S(2)}})"
    sname, dname = nm.claim(f"copy-start.{n}"), nm.claim(f"copy-done.{n}")
    nb = 4 * n_elems
    st = b.new_op(name=sname, hlo=f"%{sname} = {tup} copy-start({src} %param.{nm.num('param')})",
                  category="copy-start", bucket="other_compute", phase=phase, role="start", shape=tup,
                  base_ps=1_200, engine="dma", form="copy", bytes_accessed=3 * nb, raw_bytes=3 * nb)
    dn = b.new_op(name=dname, hlo=f"%{dname} = {dst} copy-done({tup} %{sname})", category="copy-done",
                  bucket="other_compute", phase=phase, role="done", shape=dst, base_ps=2_400, engine="dma",
                  form="copy", bytes_accessed=nb, raw_bytes=nb)
    st.transfer_ps = int(nb / (CORE_HBM * 0.45) * 1e12) + 1 * US
    st.peer, dn.peer = dn.idx, st.idx
    return st, dn


def async_slice(b: Builder, n_src: int, n_out: int, *, phase: str, opname: str = "slice") -> tuple[OpT, OpT]:
    """``slice-start``/``slice-done`` (async-start/async-done, ``calls=%async_computation``): other_compute."""
    nm = b.nm
    src = f"s8[{n_src}]{{0:T(1024)(128)(4,1)}}"
    out = f"s8[{n_out}]{{0:T(1024)(128)(4,1)S(1)}}"
    tup = f"(({src}), {out}, s32[]{{:S(2)}})"
    n = nm.num(opname + "-start")
    sname, dname = nm.claim(f"{opname}-start.{n}"), nm.claim(f"{opname}-done.{n}")
    st = b.new_op(name=sname, hlo=f"%{sname} = {tup} async-start({src} %bitcast.{nm.num('bitcast')}), "
                                  f"calls=%async_computation.{nm.num('async_computation')}",
                  category="async-start", bucket="other_compute", phase=phase, role="start", shape=tup,
                  base_ps=2_400, engine="dma", form="async", bytes_accessed=2 * n_out, raw_bytes=2 * n_out)
    dn = b.new_op(name=dname, hlo=f"%{dname} = {out} async-done({tup} %{sname})", category="async-done",
                  bucket="other_compute", phase=phase, role="done", shape=out, base_ps=1_200, engine="dma",
                  form="async", bytes_accessed=n_out, raw_bytes=n_out)
    st.transfer_ps = int(n_out / (CORE_HBM * 0.45) * 1e12) + 1 * US
    st.peer, dn.peer = dn.idx, st.idx
    return st, dn


def tp_collective(b: Builder, ctype: str, dims: tuple[int, ...], dt: str, *, tf: str, source: str | None,
                  group: int, prefix: str | None = None, phase: str = "fwd") -> OpT:
    """A synchronous TP collective (``psum`` all-reduce / all-to-all) consuming ``b.last``."""
    nm = b.nm
    s_ = shape(dt, dims)
    nb = nbytes(dt, dims)
    chan = nm.num("channel")
    if ctype == "all_reduce":
        name = nm.name(prefix or "all-reduce")
        text = (f"%{name} = {s_} all-reduce({s_} {b.last}), channel_id={chan}, "
                f"replica_groups={{{{{','.join(str(i) for i in range(group))}}}}}, use_global_device_ids=true, "
                f"to_apply=%region_{nm.num('region')}.0")
        cat, vol, eff = "all-reduce", 2 * nb * (group - 1) / group, 0.72
    else:
        name = nm.name(prefix or "all-to-all")
        text = (f"%{name} = {s_} all-to-all({s_} {b.last}), channel_id={chan}, "
                f"replica_groups=[1,{group}]<=[{group}], dimensions={{{len(dims) - 2}}}")
        cat, vol, eff = "all-to-all", nb * (group - 1) / group, 0.42
    op = b.new_op(name=name, hlo=text, category=cat, bucket=ctype, phase=phase, tf_op=tf + ":", source=source,
                  shape=s_, coll=ctype, role="sync", base_ps=400_000, bytes_accessed=nb, raw_bytes=nb,
                  engine="ici", form="sync")
    op.transfer_ps = int(vol / (CORE_ICI * eff) * 1e12) + 6 * US
    b.last = "%" + name
    return op


def quantized_matmul(b: Builder, scope: str, M: int, K: int, N: int, *, source: str, phase: str = "fwd") -> OpT:
    """Pallas ``quantized_matmul_kernel_*`` custom call: no flops stat; truth FLOPs = 2*M*N*K."""
    s = b.s
    wdt, adt = s.weight_dtype, s.act_dtype
    groups = max(1, K // 512)
    bm, bn, bk = min(M, 512), min(N, 6400), max(512, min(K // 2, 4096))
    kname = f"quantized_matmul_kernel_{bm}_{bn}_{bk}"
    name = b.nm.name(kname)
    atile = "T(16,128)(2,1)" if adt == "bf16" else "T(32,128)(4,1)"
    act = f"{adt}[{M},{K}]{{1,0:{atile}}}"
    w = f"{wdt}[{N},{K}]{{1,0:T(64,128)(8,1)E(4)}}" if _BITS[wdt] == 4 else f"{wdt}[{N},{K}]{{1,0:T(32,128)(4,1)}}"
    sc = f"f32[{groups},1,{N}]{{2,1,0:T(1,128)}}"
    out = f"bf16[{M},{N}]{{1,0:T(8,128)(2,1)}}"
    text = (f"%{name} = {out} custom-call({act} {b.last}, {w} %param.{b.nm.num('param')}, "
            f"{sc} %bitcast.{b.nm.num('bitcast')}), custom_call_target=\"tpu_custom_call\", "
            f"operand_layout_constraints={{{adt}[{M},{K}]{{1,0}}, {wdt}[{N},{K}]{{1,0}}, f32[{groups},1,{N}]{{2,1,0}}}}, "
            f"frontend_attributes={{kernel_metadata={{}}}}")
    flops = 2 * M * N * K
    byts = M * K * _BITS[adt] // 8 + N * K * _BITS[wdt] // 8 + 2 * M * N + 4 * groups * N
    bucket = precision_bucket(adt)
    peak = CORE_PEAK_BF16 if bucket == "matmul_bf16" else CORE_PEAK_FP8
    op = b.new_op(name=name, hlo=text, category="custom-call", bucket=bucket, phase=phase,
                  tf_op=f"{scope}/shard_map/jit(quantized_matmul_kernel)/{kname}/pallas_call:", source=source,
                  flops=flops, model_flops=flops, bytes_accessed=0, raw_bytes=0, shape=out,
                  base_ps=compute_ps(flops, byts, peak, s.matmul_eff, eff_m=0.85), stat_flops=False,
                  precision=precision_tag(wdt, adt))
    b.last = "%" + name
    return op


# ---------------------------------------------------------------------------
# vLLM serving step
# ---------------------------------------------------------------------------

def build_vllm(b: Builder, ids: list[int]) -> tuple[list[Program], int]:
    """(programs, estimated step ps): ``jit_step_fun`` (the step) then ``jit_compute_logits_func``."""
    s = b.s
    L, T, D = b.layers, b.T, b.D
    tp = max(1, s.tp)
    q, kv = s.n_heads * s.head_dim // tp, s.n_kv_heads * s.head_dim // tp
    F = s.d_ff // tp
    root = "jit(step_fun)"
    attn = f"{root}/jit(_jax_attn_func)/shard_map/jit(ragged_paged_attention)"
    qwen = "vllm/model_executor/models/qwen3.py"

    step = Program("jit_step_fun", ids[0], is_train=True)
    b.prog = 0
    items: list = [(MB, 0)]

    def op(o: OpT) -> None:
        items.append((OP, o.idx))

    # prologue: embedding gather under TP + the embedding all-reduce, index copies to VMEM
    st, dn = vmem_copy(b, T, phase="prologue")
    items.append((START, st.idx))
    op(b.ew(f"{root}/aten::embedding/jit(_take)/gather", (T, D), phase="prologue", n_in=1, flops_per=0,
            category="custom fusion", kind="kCustom", source="torchax/ops/jaten.py:583"))
    items.append((DONE, dn.idx))
    op(b.ew(f"{root}/aten::embedding/jit(_take)/gather", (T, D), phase="prologue", n_in=2, flops_per=1,
            source="torchax/ops/jaten.py:583"))
    items.append((SYNC, tp_collective(b, "all_reduce", (T, D), "bf16", tf=f"{root}/aten::embedding/jit(_take)/gather",
                                      source="torchax/ops/jaten.py:583", group=tp).idx))
    for _ in range(L):
        # input norm
        op(b.ew(f"{root}/aten::mean.dim/reduce_sum", (T, D), phase="fwd", dt="f32", n_in=1, flops_per=2,
                source="torchax/ops/jaten.py:280", name=b.nm.name("multiply_reduce_fusion")))
        op(b.ew(f"{root}/aten::mul.Tensor/mul", (T, D), phase="fwd", n_in=2, flops_per=3,
                source="torchax/ops/jaten.py:280"))
        # QKV scales: reduce, relayout, all-to-all over the TP group
        qkv_scope = f"{root}/QKVParallelLinear"
        op(b.misc("reduce", "reduce", f"reduce(f32[{max(1, D // 1024)},1,{2 * (q + 2 * kv)}]{{2,1,0:T(1,128)S(1)}} "
                  f"%copy-done.{b.nm.num('copy')}, f32[]{{:T(128)}} %constant.{b.nm.num('constant')}), dimensions={{1}}",
                  f"f32[{max(1, D // 1024)},{2 * (q + 2 * kv)}]{{1,0:T(8,128)S(1)}}", phase="fwd",
                  tf="params_and_buffers['layers.self_attn.qkv_proj.weight_scale']",
                  nbytes_=8 * max(1, D // 1024) * (q + 2 * kv)))
        sdims = (max(1, D // 1024), 1, tp, q + 2 * kv)
        op(b.ew(f"{qkv_scope}/shard_map", sdims, phase="fwd", dt="f32", n_in=1, flops_per=0,
                category="data formatting", opcode="reshape", source="tpu_inference/layers/vllm/linear.py:57"))
        op(b.ew(f"{qkv_scope}/shard_map", sdims, phase="fwd", dt="f32", n_in=1, flops_per=0,
                category="data formatting", opcode="copy", source="tpu_inference/layers/vllm/linear.py:57"))
        items.append((SYNC, tp_collective(b, "all_to_all", sdims, "f32", tf=f"{qkv_scope}/shard_map",
                                          source="tpu_inference/layers/vllm/linear.py:57", group=tp).idx))
        op(quantized_matmul(b, qkv_scope, T, D, q + 2 * kv, source=f"{qwen}:142"))
        # rope
        op(b.ew(f"{root}/aten::sub.Tensor/sub", (T, s.n_heads // tp, s.head_dim // 2), phase="fwd", n_in=3,
                n_out=2, flops_per=3, source="torchax/ops/jaten.py:828", name=b.nm.name("multiply_subtract_fusion")))
        op(b.ew(f"{root}/aten::cat/concatenate", (T, s.n_heads // tp, s.head_dim), phase="fwd", n_in=2, flops_per=1,
                source="torchax/tensor.py:277", name=b.nm.name("pad_maximum_fusion")))
        # layout ops feeding the attention kernel (attention layout time)
        for opcode, cat, what, name in (("fusion", "loop fusion", "transpose", b.nm.name("copy_bitcast_fusion")),
                                        ("reshape", "data formatting", "reshape", None),
                                        ("copy", "data formatting", "copy", None)):
            lo = b.ew(f"{attn}/{what}", (4, T, s.n_heads // tp, s.head_dim), phase="fwd", n_in=1,
                      flops_per=0, category=cat, opcode=opcode, attention=True, name=name,
                      source="tpu_inference/layers/vllm/attention.py:198")
            lo.layout = True
            op(lo)
        # the fused ragged paged attention kernel (no flops stat either)
        ctx = 16 * T
        kname = "RPA-bq_32-bkvp_32-p_128-"
        inst = b.nm.name(kname)
        pages = ctx // 128 + 1
        kv_s = f"bf16[{pages},128,{max(1, s.n_kv_heads // tp)},2,{s.head_dim}]{{4,3,2,1,0:T(2,128)(2,1)}}"
        q_s = f"bf16[{T},{s.n_heads // tp},{s.head_dim}]{{2,1,0:T(8,128)(2,1)}}"
        text = (f"%{inst} = ({q_s}, {kv_s}) custom-call(s32[256]{{0:T(256)}} %param.{b.nm.num('param')}, "
                f"s32[{ctx}]{{0:T(1024)}} %param.{b.nm.num('param')}, {q_s} {b.last}, {kv_s} %param.{b.nm.num('param')}), "
                f"custom_call_target=\"tpu_custom_call\", operand_layout_constraints={{s32[256]{{0}}, s32[{ctx}]{{0}}, "
                f"bf16[{T},{s.n_heads // tp},{s.head_dim}]{{2,1,0}}, bf16[{pages},128,{max(1, s.n_kv_heads // tp)},2,{s.head_dim}]{{4,3,2,1,0}}}}")
        aflops = 4 * T * ctx * (s.n_heads // tp) * s.head_dim
        abytes = 2 * pages * 128 * max(1, s.n_kv_heads // tp) * 2 * s.head_dim + 4 * T * q
        rpa = b.new_op(name=inst, hlo=text, category="custom-call", bucket="attention", phase="fwd",
                       tf_op=f"{attn}/{kname}/pallas_call:", source="torch/nn/modules/module.py:1775", flops=aflops,
                       model_flops=0, bytes_accessed=0, raw_bytes=0, shape=q_s,
                       base_ps=compute_ps(aflops, abytes, CORE_PEAK_BF16, s.kernel_eff, eff_m=0.85), stat_flops=False)
        b.last = "%" + inst
        op(rpa)
        # out projection (row parallel) + its TP psum, with an async weight slice around it
        row = f"{root}/RowParallelLinear"
        op(b.ew(f"{row}/shard_map", (max(1, q // 512), 1, D), phase="fwd", dt="f32", n_in=1, flops_per=0,
                source="vllm/attention/layer.py:399", name=b.nm.name("constant_dynamic-slice_fusion")))
        op(quantized_matmul(b, row, T, q, D, source="vllm/attention/layer.py:399"))
        ss, sd = async_slice(b, 4 * D * 512, 2 * D * 512, phase="fwd")
        items.append((START, ss.idx))
        items.append((SYNC, tp_collective(b, "all_reduce", (T, D), "bf16", tf=f"{row}/shard_map/psum", prefix="psum",
                                          source="tpu_inference/layers/vllm/linear.py:57", group=tp).idx))
        items.append((DONE, sd.idx))
        # post-attention norm, gate/up (column parallel), silu*mul, down (row parallel) + psum
        op(b.ew(f"{root}/aten::mean.dim/reduce_sum", (T, D), phase="fwd", dt="f32", n_in=2, flops_per=3,
                source="torchax/ops/jaten.py:280", name=b.nm.name("multiply_reduce_fusion")))
        op(quantized_matmul(b, f"{root}/MergedColumnParallelLinear", T, D, 2 * F,
                            source="tpu_inference/layers/vllm/linear.py:57"))
        op(b.ew(f"{root}/aten::silu/logistic", (T, F), phase="fwd", n_in=2, flops_per=6,
                source="torchax/ops/jaten.py:1210"))
        op(b.ew(f"{row}/shard_map", (max(1, F // 512), 1, D), phase="fwd", dt="f32", n_in=1, flops_per=0,
                source="vllm/model_executor/models/qwen2.py:106", name=b.nm.name("constant_dynamic-slice_fusion")))
        op(quantized_matmul(b, row, T, F, D, source="vllm/model_executor/models/qwen2.py:106"))
        items.append((SYNC, tp_collective(b, "all_reduce", (T, D), "bf16", tf=f"{row}/shard_map/psum", prefix="psum",
                                          source="tpu_inference/layers/vllm/linear.py:57", group=tp).idx))
    op(b.ew(f"{root}/aten::mean.dim/reduce_sum", (T, D), phase="fwd", dt="f32", n_in=2, flops_per=3,
            source="torchax/ops/jaten.py:280", name=b.nm.name("multiply_reduce_fusion")))
    items.append((ME, 0))
    step.items = items

    # the logits program runs after the step (outside the step window)
    logits = Program("jit_compute_logits_func", ids[1])
    b.prog = 1
    n_req = 8
    lg = [(MB, 1)]
    lg.append((OP, b.matmul("jit(compute_logits_func)/dot_general", n_req, D, max(128, s.vocab // tp), phase="host",
                            source="tpu_inference/layers/jax/sample/sampling.py:31").idx))
    lg.append((OP, b.ew("jit(compute_logits_func)/reduce", (n_req, max(128, s.vocab // tp)), phase="host",
                        dt="f32", n_in=1, flops_per=2).idx))
    lg.append((ME, 1))
    logits.items = lg
    est = sum(b.ops[k].base_ps + b.ops[k].transfer_ps for c, k in items if c in (OP, START, SYNC))
    return [step, logits], est


# ---------------------------------------------------------------------------
# host-offload loop (like the v6e capture)
# ---------------------------------------------------------------------------

def build_offload_loop(b: Builder, ids: list[int]) -> tuple[list[Program], int]:
    """(programs, estimated step ps): ``jit__psum`` then the loop ``jit_f`` (the step)."""
    s = b.s
    dims = (2, 1024, 1024, 32)
    psum = Program("jit__psum", ids[0])
    b.prog = 0
    b.last = f"%bitcast.{b.nm.num('bitcast')}"
    psum.items = [(MB, 0), (SYNC, tp_collective(b, "all_reduce", dims, "f32", tf="jit(_psum)/jit(main)/reduce_sum",
                                                 source="host_offload_test.py:38", group=s.fsdp).idx), (ME, 0)]
    loop = Program("jit_f", ids[1], is_train=True)
    b.prog = 1
    items: list = [(MB, 1)]
    n = max(1, b.layers)
    copies = []
    for _ in range(n):
        b.last = f"%param.{b.nm.num('param')}"
        copies.append(host_copy(b, dims, "f32", "from_host", phase="fwd"))
    items.append((START, copies[0][0].idx))
    for i in range(n):
        if i + 1 < n:
            items.append((START, copies[i + 1][0].idx))
        items.append((DONE, copies[i][1].idx))
        b.last = "%" + copies[i][1].name
        items.append((OP, b.ew("jit(f)/jit(main)/add", dims, phase="fwd", dt="f32", n_in=1, flops_per=1,
                               source="host_offload_test.py:29", name=b.nm.name("broadcast_add_fusion")).idx))
    back = host_copy(b, dims, "f32", "to_host", phase="fwd")
    items += [(START, back[0].idx), (DONE, back[1].idx), (ME, 1)]
    loop.items = items
    est = sum(b.ops[k].base_ps + b.ops[k].transfer_ps for c, k in items if c in (OP, START, SYNC))
    return [psum, loop], est


# ---------------------------------------------------------------------------
# remat_policy=offload for the MaxText layer bodies
# ---------------------------------------------------------------------------

def splice_host_offload(b: Builder, fwd_body: list, bwd_body: list) -> tuple[list, list]:
    """Forward layers copy two activations to host; backward layers copy them back and wait for them."""
    T, D = b.Tm, b.D
    acts = ((1, T, D), (1, T, b.F))
    fwd = list(fwd_body)
    first_op = next(i for i, (c, _) in enumerate(fwd) if c == OP) + 1
    outs = [host_copy(b, a, "bf16", "to_host", phase="fwd",
                      tf=f"{_scope(b, 'fwd')}/checkpoint_name[name=decoder_layer_input]") for a in acts]
    fwd[first_op:first_op] = [(START, st.idx) for st, _ in outs]
    fwd += [(DONE, dn.idx) for _, dn in outs]
    bwd = list(bwd_body)
    ins = [host_copy(b, a, "bf16", "from_host", phase="bwd",
                     tf=f"{_scope(b, 'bwd')}/checkpoint_name[name=decoder_layer_input]") for a in acts]
    ops_at = [i for i, (c, _) in enumerate(bwd) if c == OP]
    cut = ops_at[max(0, len(ops_at) // 3)]
    bwd[cut:cut] = [(DONE, dn.idx) for _, dn in ins]
    bwd[0:0] = [(START, st.idx) for st, _ in ins]
    return fwd, bwd


def _scope(b: Builder, phase: str) -> str:
    from .hlo import layer_scope

    return layer_scope(phase, pipeline=b.pipeline)


#: `Scenario.program` -> its whole-program builder (for `program.build_plan`).
PROGRAM_BUILDERS = {"vllm": build_vllm, "offload_loop": build_offload_loop}
