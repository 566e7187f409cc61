"""Compiled-program model: HLO op templates, their roofline cost, and the per-step op sequence.

:func:`build_plan` turns a :class:`~.scenario.Scenario` into a :class:`Plan`:

* ``ops`` -- one :class:`OpT` per HLO instruction (an XLA Ops event metadata entry):
  name, full HLO text, XProf category, tf_op name stack, cost stats, the bucket the
  attribution must put its self time in, whether it is a remat recompute, and its
  roofline base duration on one TPU7x TensorCore.
* ``programs`` -- the XLA programs of one step in execution order (a small
  ``jit_fold_in`` then ``jit_train_step``), each a flat list of sequence items the
  scheduler in :mod:`.model` walks: ops, async collective starts/dones, synchronous
  collectives, ``while`` begin/end (the layer loops; their bodies repeated ``layers``
  times), idle gaps (pipeline bubbles) and module begin/end.

Bucket rules the templates follow (and the analysis must implement):

* convolution fusions / output fusions / megablox gmm,tgmm kernels are matmuls; the bucket
  is chosen by the dot operand element types: any ``f8*`` operand -> ``matmul_fp8``, else any
  ``bf16`` -> ``matmul_bf16``, else (f32, s8) -> ``matmul_other``;
* ``attention``: splash kernels (``splash_mha_*`` custom-calls) and every op whose tf_op
  contains ``/AttentionOp_0`` (the attention core: score/value dots, softmax). The Q/K/V/out
  projections live under ``self_attention/query`` etc. (no ``AttentionOp``) and are matmuls;
* collectives by kind: all-gather, reduce-scatter (incl. ``all-reduce-scatter fusion``),
  all-reduce, all-to-all, other (collective-permute, send/recv);
* everything else (loop fusions, copies, copy-start/done, data formatting,
  dynamic-update-slice, while self time, custom fusions that are not collectives, ...) is
  ``other_compute``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from . import hlo as H
from .builder import (
    CORE_PEAK_BF16,
    DONE,
    GAP,
    MB,
    ME,
    OP,
    START,
    SYNC,
    WB,
    WE,
    Builder,
    Plan,
    Program,
    compute_ps,
    stable_hash,
)
from .hlo import DG_DGRAD, DG_FWD, DG_WGRAD, nbytes, shape
from .layers import (
    layer_bwd,
    layer_fwd,
    mm_dts,
)
from .scenario import Scenario

# ---------------------------------------------------------------------------
# Whole programs
# ---------------------------------------------------------------------------

def program_id(rng: random.Random) -> int:
    return rng.randrange(10**17, 9 * 10**18)


#: A whole-program builder for scenarios that are not MaxText training steps:
#: (builder, two program ids) -> (programs, estimated step ps).
ProgramBuilder = Callable[[Builder, list[int]], tuple[list[Program], float]]
#: Splices extra ops into the layer bodies: (builder, forward body, backward body) -> both bodies.
BodySplice = Callable[[Builder, list, list], tuple[list, list]]


def build_plan(spec: Scenario, *, seed: int = 0, layers: int | None = None, scale: float = 1.0,
               programs_of: Mapping[str, ProgramBuilder] | None = None, host_offload: BodySplice | None = None) -> Plan:
    """The plan of a scenario. `programs_of` maps `Scenario.program` values
    other than "maxtext" to their builders and `host_offload` splices
    activation offload into the layer bodies (both given by the caller, which
    keeps this module below the builders that use its pieces)."""
    L = int(layers or spec.layers)
    b = Builder(spec, seed, L, scale)
    rng = random.Random(seed * 31 + stable_hash(spec.name))
    programs: list[Program] = []
    if spec.program != "maxtext":
        if not programs_of or spec.program not in programs_of:
            raise ValueError(f"no program builder for scenario program {spec.program!r}")
        programs, est = programs_of[spec.program](b, [program_id(rng), program_id(rng)])
        return Plan(spec=spec, ops=b.ops, programs=programs, layers=L, est_step_ps=est)

    # -- small program run before every step: jit_fold_in ----------------------
    fold = Program("jit_fold_in", program_id(rng))
    b.prog = 0
    rb = b.misc("rng-bit-generator", "rng-bit-generator",
                f"rng-bit-generator(u64[2]{{0:T(128)}} %custom-call.{b.nm.num('custom-call')}), algorithm=rng_default",
                shape("u32", (10, 4)), phase="host", tf="jit(fold_in)/jit(main)/rng_bit_generator[shape=(10, 4) dtype=uint32 algorithm=RNG_DEFAULT]",
                nbytes_=4096, source="train.py:582")
    fz = b.ew("jit(fold_in)/jit(main)/threefry2x32", (2,), phase="host", dt="u32", n_in=2, flops_per=40,
              source="random.py:286")
    fold.items = [(MB, 0), (OP, rb.idx), (OP, fz.idx), (ME, 0)]
    programs.append(fold)

    # -- the train step ------------------------------------------------------
    train = Program("jit_train_step", program_id(rng), is_train=True)
    b.prog = 1
    D, T, V = b.D, b.T, b.V
    items: list = [(MB, 1)]
    pro: list = []
    emb = f"{H.FWD}/token_embedder"
    pro.append((OP, b.misc("convert", "non-fusion elementwise",
                           f"convert(f32[{V // 64},{D}]{{1,0:T(8,128)}} %param.{b.nm.num('param')})",
                           shape("bf16", (V // 64, D)), phase="prologue",
                           tf=f"{emb}/convert_element_type[new_dtype=bfloat16 weak_type=False sharding=None]",
                           nbytes_=6 * (V // 64) * D, source="embeddings.py:84").idx))
    pro.append((OP, b.misc("iota", "iota", "iota(), iota_dimension=0", shape("s32", (T, 128)), phase="prologue",
                           tf=None, nbytes_=4 * T * 128).idx))
    a2a = b.coll("all_to_all", (4, 1, T // 4, D // 4), phase="prologue", group=4,
                 tf=f"{emb}/gather[dimension_numbers=GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,), "
                    "start_index_map=(0,)) slice_sizes=(1, 2048) unique_indices=False indices_are_sorted=False "
                    "mode=GatherScatterMode.PROMISE_IN_BOUNDS fill_value=None]", source="embeddings.py:84")
    pro += [("S", a2a), ("D", a2a)]
    pro.append((OP, b.ew(f"{emb}/gather", (1, T, D), phase="prologue", n_in=1, flops_per=1,
                         source="embeddings.py:84").idx))
    if spec.xss:
        x = b.nm.claim("custom-call.7<script>alert(1)</script>")
        pro.append((OP, b._new(
            name=x,
            hlo=f"%{x} = bf16[1,{T},{D}]{{2,1,0:T(8,128)(2,1)}} custom-call(bf16[1,{T},{D}] {b.last}), "
                f"custom_call_target=\"<script>alert(1)</script>\"",
            category="custom-call", bucket="other_compute", phase="prologue",
            tf_op="jit(train_step)/jit(main)/<script>alert(1)</script>/custom_call:",
            source="<script>alert(1)</script>.py:1", flops=0, model_flops=0,
            bytes_accessed=2 * nbytes("bf16", (T, D)), raw_bytes=2 * nbytes("bf16", (T, D)),
            shape=shape("bf16", (1, T, D)), base_ps=compute_ps(0, 2 * nbytes("bf16", (T, D)), CORE_PEAK_BF16, 1),
        ).idx))
    logits_w = b.coll("all_gather", (V, D), phase="prologue", group=spec.fsdp,
                      tf=f"{H.FWD}/logits_dense/{DG_FWD}", source="linears.py:118",
                      form="sync" if spec.coll("all_gather")[0] == "cont" else "")
    pro.append(("S", logits_w))
    bc = b.misc("broadcast", "broadcast", f"broadcast(f32[]{{:T(128)}} %constant.{b.nm.num('constant')}), dimensions={{}}",
                shape("f32", (L, D // 4, D), minor_first=True), phase="prologue", tf=None,
                nbytes_=nbytes("f32", (L, D // 4, D)))
    pro.append((OP, bc.idx))
    pro = b.realize(pro)

    carried = [shape("bf16", (1, b.Tm, D), minor_first=True), shape("bf16", (L, b.Tm, D)),
               shape("f32", (L, D // 4, D), minor_first=True)]
    fwd_pre, fwd_body, fwd_post = layer_fwd(b)
    bwd_pre, bwd_body, bwd_post = layer_bwd(b)
    if spec.host_offload:
        if host_offload is None:
            raise ValueError(f"scenario {spec.name} offloads activations but no splice was given")
        fwd_body, bwd_body = host_offload(b, fwd_body, bwd_body)
    w_f = b.while_op("fwd", L, carried)
    w_b = b.while_op("bwd", L, carried + [shape("f32", (L, b.qd // 4, D), minor_first=True)])

    # -- loss ------------------------------------------------------------------
    loss: list = []
    loss.append((OP, b.ew(f"{H.FWD}/decoder_norm/rms_norm/mul", (1, T, D), phase="loss", n_in=2, flops_per=5,
                          source="normalizations.py:68").idx))
    loss.append(("D", logits_w))
    loss.append((OP, b.matmul(f"{H.FWD}/logits_dense/{DG_FWD}", T, D, V, phase="loss", out_dt="f32",
                              dts=mm_dts(b, "fwd"),
                              extra_in=(shape("bf16", (D,)) + f" {b.nm.gte()}",)).idx))
    loss.append((OP, b.ew(f"{H.ROOT}/cross_entropy_with_logits/reduce_max[axes=(-1,)]", (T, V), phase="loss",
                          dt="f32", n_in=1, n_out=1, flops_per=6, source="max_utils.py:640").idx))
    lar = b.coll("all_reduce", (4,), phase="loss", group=spec.fsdp, dt="f32",
                 tf=f"{H.ROOT}/psum[axes=('data', 'fsdp')]", source="train.py:412")
    loss += [("S", lar), ("D", lar)]
    loss.append((OP, b.ew(f"{H.BWD}/cross_entropy_with_logits/sub", (T, V), phase="loss", dt="f32", n_in=2,
                          flops_per=4, source="max_utils.py:646", out_dt="bf16").idx))
    loss.append((OP, b.matmul(f"{H.BWD}/logits_dense/{DG_DGRAD}", T, V, D, phase="loss",
                              dts=mm_dts(b, "dgrad")).idx))
    loss.append((OP, b.matmul(f"{H.BWD}/logits_dense/{DG_WGRAD}", D, T, V, phase="loss", category="output fusion",
                              out_dt="f32", dts=mm_dts(b, "wgrad")).idx))
    rs_logits = b.coll("reduce_scatter", (V, D), phase="loss", group=spec.fsdp,
                       tf=f"{H.BWD}/logits_dense/{DG_WGRAD}", source="linears.py:118")
    loss.append(("S", rs_logits))
    loss.append((OP, b.ew(f"{H.BWD}/decoder_norm/rms_norm/mul", (1, T, D), phase="loss", n_in=3, flops_per=8,
                          source="normalizations.py:68").idx))
    loss = b.realize(loss)

    # -- after the backward loop: embedding grads, grad norm, optimizer --------
    # (the logits reduce-scatter started before the backward loop completes here)
    epi_raw: list = [("D", rs_logits)]
    epi_raw.append((OP, b.misc("sort", "sort",
                               f"sort(s32[{T}]{{0:T(1024)}} {b.nm.gte()}, s32[{T}]{{0:T(1024)}} %iota.{b.nm.num('iota')}), "
                               f"dimensions={{0}}, to_apply=%compare", f"(s32[{T}]{{0:T(1024)}}, s32[{T}]{{0:T(1024)}})",
                               phase="opt", tf=f"{H.BWD}/token_embedder/scatter-add", nbytes_=16 * T,
                               source="embeddings.py:84", flops=T * 20).idx))
    sa = b.ew(f"{H.BWD}/token_embedder/scatter-add", (V // 64, D), phase="opt", n_in=2, flops_per=2,
              category="custom fusion", kind="kCustom", source="embeddings.py:84")
    epi_raw.append((OP, sa.idx))
    a2b = b.coll("all_to_all", (1, T // 4, 4, D // 4), phase="opt", group=4,
                 tf=f"{H.BWD}/token_embedder/scatter-add", source="embeddings.py:84")
    epi_raw += [("S", a2b), ("D", a2b)]
    # parameters held by this core after FSDP (and EP for experts) sharding
    if spec.arch == "moe":
        mlp_shard = 3 * max(1, spec.experts // spec.ep) * spec.moe_d_ff * D // max(1, spec.fsdp // spec.ep)
    else:
        mlp_shard = 3 * b.F * D // spec.fsdp
    nparams = L * ((2 * b.qd * D + 2 * b.kvd * D) // spec.fsdp + mlp_shard) + 2 * V * D // spec.fsdp
    groups = [("params/decoder/layers/self_attention", 0.2), ("params/decoder/layers/mlp", 0.6),
              ("params/decoder/logits_dense", 0.1), ("params/token_embedder", 0.1)]
    for _g, frac in groups:
        epi_raw.append((OP, b.ew(f"{H.ROOT}/reduce_sum[axes=(0, 1, 2)]", (max(1, int(nparams * frac)) // 1024, 1024),
                                 phase="opt", dt="f32", n_in=1, flops_per=2, source="linear_algebra.py:37").idx))
    gar = b.coll("all_reduce", (len(groups),), phase="opt", group=spec.fsdp, dt="f32", tf=None)
    epi_raw += [("S", gar), ("D", gar)]
    for g, frac in groups:
        n = max(1, int(nparams * frac)) // 1024
        epi_raw.append((OP, b.ew(f"{H.ROOT}/optimizer/clip_by_global_norm/mul", (n, 1024), phase="opt", dt="f32",
                                 n_in=2, flops_per=2, source="optax/_src/clipping.py:91").idx))
        epi_raw.append((OP, b.ew(f"{H.ROOT}/optimizer/scale_by_adam/{g}/add", (n, 1024), phase="opt", dt="f32",
                                 n_in=4, n_out=3, flops_per=12, source="optax/_src/transform.py:366").idx))
        epi_raw.append((OP, b.misc("convert", "non-fusion elementwise",
                                   f"convert(f32[{n},1024]{{1,0:T(8,128)}} {b.last})", shape("bf16", (n, 1024)),
                                   phase="opt", tf=f"{H.ROOT}/optimizer/convert_element_type[new_dtype=bfloat16 weak_type=False]",
                                   nbytes_=6 * n * 1024, source="optax/_src/transform.py:390").idx))
    epi_raw.append((OP, b.misc("copy", "data formatting",
                               f"copy(f32[{L},{D},{b.qd // 4}]{{2,1,0:T(8,128)}} {b.last})",
                               shape("f32", (L, D, b.qd // 4), minor_first=True), phase="opt",
                               tf=f"{H.BWD}/while/body/dynamic_update_slice", nbytes_=2 * nbytes("f32", (L, D, b.qd // 4)),
                               source="axes_scan.py:166").idx))
    epi = b.realize(epi_raw)
    items += fwd_pre  # first layer's weights: gathered while the prologue runs
    items += pro
    # -- the layer loops (with pipeline microbatches when pp > 1) --------------
    def seq_ps(seq) -> int:
        tot = 0
        for t, k in seq:
            if t in (OP, START, DONE):
                tot += b.ops[k].base_ps
            elif t == SYNC:
                tot += b.ops[k].base_ps + b.ops[k].transfer_ps
        return tot

    post_bubble = 0
    if b.pipeline:
        mb_f = seq_ps(fwd_body) * L
        mb_b = seq_ps(bwd_body) * L
        stage = 1  # this host's pipeline stage (of spec.pp)
        items.append((GAP, int(stage * mb_f)))
        perm_tf = f"{H.FWD}/pipeline/ppermute[perm=((0, 1), (1, 2), (2, 3), (3, 0))]"
        prev = None
        for _m in range(spec.microbatches):
            # the last layer of microbatch m prefetches the first layer of microbatch m+1
            items.append((WB, w_f.idx))
            items += fwd_body * L
            items.append((WE, w_f.idx))
            k = b.coll("other_collective", (1, b.Tm, D), phase="fwd", group=spec.pp, tf=perm_tf,
                       source="pipeline.py:310", engine_hint="dcn")
            items += b.realize(([("D", prev)] if prev is not None else []) + [("S", k)])
            prev = k
        items += bwd_pre
        items += loss
        items += fwd_post
        bprev = None
        for m in range(spec.microbatches):
            items.append((WB, w_b.idx))
            items += bwd_body * L
            items.append((WE, w_b.idx))
            ks = [b.coll("other_collective", (1, b.Tm, D), phase="bwd", group=2, sr=sr, engine_hint="dcn",
                         tf=f"{H.BWD}/pipeline/ppermute[perm=((1, 0), (2, 1), (3, 2), (0, 3))]",
                         source="pipeline.py:318") for sr in ("recv", "send")]
            pre: list = []
            if m == 0 and prev is not None:
                pre.append(("D", prev))
            if bprev is not None:
                pre += [("D", x) for x in bprev]
            items += b.realize(pre + [("S", x) for x in ks])
            bprev = ks
        items += b.realize([("D", x) for x in bprev])
        post_bubble = int((spec.pp - 1 - stage) * mb_b)
        items.append((GAP, post_bubble))
    else:
        items.append((WB, w_f.idx))
        items += fwd_body * L
        items.append((WE, w_f.idx))
        items += bwd_pre  # the backward loop's first weights: gathered during the loss
        items += loss
        items += fwd_post  # drain of the (unused) prefetch issued by the last forward iteration
        items.append((WB, w_b.idx))
        items += bwd_body * L
        items.append((WE, w_b.idx))
    items += epi
    items += bwd_post  # drain of the (unused) prefetch issued by the last backward iteration
    items.append((ME, 1))
    train.items = items
    programs.append(train)

    est_step = seq_ps(fold.items) + seq_ps(items) + sum(k for t, k in items if t == GAP)
    return Plan(spec=spec, ops=b.ops, programs=programs, layers=L, est_step_ps=est_step)
