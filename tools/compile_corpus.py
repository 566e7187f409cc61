#!/usr/bin/env python3
"""Compile the real-compiler corpus: small JAX train and serving steps compiled
by the real TPU compiler (libtpu, deviceless: no TPU needed) for TPU7x, v6e
and v5p topologies, written under sample_traces/compiled/.

    pip install -e '.[aot]'            # jax[tpu] 0.10.2 / libtpu 0.0.42.1, Python 3.11
    python tools/compile_corpus.py --out sample_traces/compiled
    python tools/compile_corpus.py --out DIR --only dense_fsdp tp_dense

Each program is compiled in its own child process (LIBTPU_INIT_ARGS is read
once, when libtpu starts; libtpu also holds a lockfile, so children run one
at a time). The child lowers the jitted step with ShapeDtypeStructs for a
topology from `jax.experimental.topologies.get_topology_desc`, compiles it
with an XLA dump (`XLA_FLAGS=--xla_dump_to=... --xla_dump_hlo_as_proto`), and
writes per program:

- `<name>.hlo.pb.gz`   the dump's `after_optimizations.hlo.pb`: an HloProto
  (field 1 the scheduled HloModuleProto, field 3 its BufferAssignmentProto),
  the form XProf keeps in a run folder;
- `<name>.after_codegen.hlo.pb.gz`  the dump's `after_codegen.hlo.pb`: an
  HloProto with the final module only (the stage that carries most
  `estimated_cycles`; `compiled.runtime_executable().hlo_modules()[0]` is it);
- `<name>.hlo.txt.gz`  `compiled.as_text()`: the final module as text;
- `<name>.compiler.json`  `compiled.memory_analysis()` and `cost_analysis()`;

and, once for the corpus, the libtpu `flagfile` of the default-flags TPU7x
program (`tpu7x_default.flagfile.gz`) and `manifest.json`. Compile times are
printed, not stored (they vary run to run). Files are gzipped with mtime 0 and
no name, JSON is sorted: a rerun with the same jax/libtpu gives the same bytes
where the compiler does (see README.md in the output folder).

Needs jax only in the child processes; the parent is plain Python.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "tools/compile_corpus.py"

#: The SparseCore collective offload flags of the tuning guide, turned off.
SC_OFFLOAD_OFF = (
    "--xla_tpu_enable_sparse_core_collective_offload_all_gather=false",
    "--xla_tpu_enable_sparse_core_collective_offload_reduce_scatter=false",
    "--xla_tpu_enable_sparse_core_collective_offload_all_reduce=false",
)
#: A scoped-VMEM limit above the default (-1: the compiler's own choice).
SCOPED_VMEM = ("--xla_tpu_scoped_vmem_limit_kib=98304",)
#: The XLA dump every child writes (XLA_FLAGS: libtpu 0.0.42.1 refuses
#: --xla_dump_to in LIBTPU_INIT_ARGS; through XLA_FLAGS the dump also holds
#: libtpu's flagfile).
DUMP_FLAGS = "--xla_dump_hlo_as_proto --xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_"
ENV = {"TPU_ACCELERATOR_TYPE": "x", "TPU_WORKER_HOSTNAMES": "localhost"}


@dataclass(frozen=True)
class Program:
    name: str
    topology: str
    model: str  # dense | mlp | moe | cp_splash | decode
    mesh: tuple[tuple[str, int], ...]
    shows: str
    remat: str = "none"  # none | full | dots_saveable | host_offload
    dot: str = "bf16"  # bf16 | fp8
    flags: tuple[str, ...] = ()
    config: dict = field(default_factory=dict)


#: A small transformer-like dense model: embeddings, `layers` blocks of
#: attention + MLP scanned with lax.scan, a tied output head, Adam.
DENSE = {"vocab": 2048, "d_model": 512, "d_ff": 2048, "heads": 4, "head_dim": 128, "layers": 4, "seq": 256, "batch": 16}
MLP = {"vocab": 2048, "d_model": 1024, "d_ff": 4096, "layers": 4, "seq": 256, "batch": 16}
MLP_WIDE = {"vocab": 2048, "d_model": 4096, "d_ff": 14336, "layers": 2, "seq": 2048, "batch": 16}
MOE = {"vocab": 2048, "d_model": 512, "d_ff": 1024, "experts": 8, "top_k": 2, "capacity_factor": 1.25, "layers": 2, "seq": 256, "batch": 16}
CP = {"vocab": 2048, "d_model": 512, "d_ff": 1024, "heads": 4, "head_dim": 128, "layers": 2, "seq": 8192, "batch": 2}
DECODE = {"vocab": 2048, "d_model": 512, "d_ff": 2048, "heads": 8, "head_dim": 64, "layers": 4, "max_len": 1024, "batch": 8}

TPU7X = "tpu7x:2x2x1"
FSDP8 = (("fsdp", 8),)

PROGRAMS = (
    Program("dense_fsdp", TPU7X, "dense", FSDP8, "FSDP train step, layers in a while loop (lax.scan), default flags: all-gathers / reduce-scatters offloaded to the SparseCore", config=DENSE),
    Program("dense_fsdp_sc_offload_off", TPU7X, "dense", FSDP8, "dense_fsdp with the SparseCore collective offload flags off: collectives on the TensorCore", flags=SC_OFFLOAD_OFF, config=DENSE),
    Program("dense_fsdp_scoped_vmem", TPU7X, "dense", FSDP8, "dense_fsdp with a 96 MiB scoped-VMEM limit", flags=SCOPED_VMEM, config=DENSE),
    Program("mlp_fsdp_collective_matmul", TPU7X, "mlp", FSDP8, "FSDP MLP at llama-8B layer width (d_model 4096, d_ff 14336, 32k tokens): the compiler itself turns weight all-gathers into collective matmuls (windowed_dot_general loops ringing collective-permutes around the dots)", config=MLP_WIDE),
    Program("remat_full", TPU7X, "dense", FSDP8, "dense_fsdp with every layer rematerialized (jax.checkpoint, nothing saved)", remat="full", config=DENSE),
    Program("remat_dots_saveable", TPU7X, "dense", FSDP8, "dense_fsdp with jax.checkpoint_policies.dots_saveable (matmul outputs kept)", remat="dots_saveable", config=DENSE),
    Program("remat_host_offload", TPU7X, "dense", FSDP8, "dense_fsdp with the named MLP activations offloaded to pinned host memory (save_and_offload_only_these_names)", remat="host_offload", config=DENSE),
    Program("tp_dense", TPU7X, "dense", (("data", 2), ("tp", 4)), "tensor parallelism (Megatron-style heads / d_ff split over tp=4, data=2): all-reduces of activations", config=DENSE),
    Program("moe_ep", TPU7X, "moe", (("ep", 8),), "mixture of experts, one expert per TensorCore (expert parallelism): all-to-all dispatch and combine in shard_map", config=MOE),
    Program("long_seq_cp_splash", TPU7X, "cp_splash", (("fsdp", 2), ("cp", 4)), "8k-token sequence split over cp=4 (context parallelism): K/V all-gathered, Pallas splash attention kernel (full mask)", config=CP),
    Program("fp8_mlp", TPU7X, "mlp", FSDP8, "MLP train step with FP8 matmuls: E4M3 operands forward, E5M2 gradients backward", dot="fp8", config=MLP),
    Program("bf16_mlp", TPU7X, "mlp", FSDP8, "fp8_mlp's bf16 twin (same model, bf16 matmuls)", config=MLP),
    Program("serving_decode", TPU7X, "decode", (("tp", 8),), "serving decode step: one token per sequence, KV cache sharded by heads (tp=8) and donated", config=DECODE),
    Program("v6e_dense_fsdp", "v6e:2x2", "dense", (("fsdp", 4),), "dense_fsdp on TPU v6e (4 chips): no SparseCore collective offload", config=DENSE),
    Program("v5p_dense_fsdp", "v5p:2x2x1", "dense", (("fsdp", 4),), "dense_fsdp on TPU v5p (4 chips)", config=DENSE),
)
BY_NAME = {p.name: p for p in PROGRAMS}
#: The program whose libtpu flagfile is committed (default flags, TPU7x).
FLAGFILE_OF = "dense_fsdp"


# ---------------------------------------------------------------- the models
# `_models` and `_child` run only in a child process, with jax imported. Their
# source lines end up in the HLO metadata (StackFrames): editing this file
# changes the corpus bytes, so the manifest records the file's hash.

def _models():  # one closure of model code, kept together
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    f32, bf16 = jnp.float32, jnp.bfloat16
    e4m3, e5m2 = jnp.float8_e4m3fn, jnp.float8_e5m2
    from jax.ad_checkpoint import checkpoint_name as ckpt_name

    @jax.custom_vjp
    def fp8_dot(x, w):
        return jnp.dot(x.astype(e4m3), w.astype(e4m3), preferred_element_type=f32).astype(bf16)

    def fp8_fwd(x, w):
        x8, w8 = x.astype(e4m3), w.astype(e4m3)
        return jnp.dot(x8, w8, preferred_element_type=f32).astype(bf16), (x8, w8)

    def fp8_bwd(res, g):
        x8, w8 = res
        g8 = g.astype(e5m2)
        dx = jnp.dot(g8, w8.T, preferred_element_type=f32).astype(bf16)
        xs = x8.reshape(-1, x8.shape[-1])
        dw = jnp.dot(xs.T, g8.reshape(-1, g8.shape[-1]), preferred_element_type=f32)
        return dx, dw.astype(bf16)

    fp8_dot.defvjp(fp8_fwd, fp8_bwd)

    def bf16_dot(x, w):
        return jnp.dot(x, w, preferred_element_type=f32).astype(bf16)

    def rms(x):
        x32 = x.astype(f32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(bf16)

    def xent(logits, labels):
        logits = logits.astype(f32)
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        return jnp.mean(lse - picked)

    def adam(params, grads, m, v, step):
        b1, b2, lr = 0.9, 0.95, 1e-3
        t = (step + 1).astype(f32)
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(f32), m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(f32)), v, grads)
        params = jax.tree.map(
            lambda p, m, v: p - lr * (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + 1e-8), params, m, v)
        return params, m, v

    def remat_wrap(fn, remat):
        if remat == "none":
            return fn
        if remat == "full":
            return jax.checkpoint(fn, policy=jax.checkpoint_policies.nothing_saveable)
        if remat == "dots_saveable":
            return jax.checkpoint(fn, policy=jax.checkpoint_policies.dots_saveable)
        if remat == "host_offload":
            policy = jax.checkpoint_policies.save_and_offload_only_these_names(
                names_which_can_be_saved=[],
                names_which_can_be_offloaded=["mlp_in", "mlp_hidden"],
                offload_src="device",
                offload_dst="pinned_host",
            )
            return jax.checkpoint(fn, policy=policy)
        raise ValueError(remat)

    def train_wrapper(loss_fn):
        def train_step(params, opt, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            new_params, m, v = adam(params, grads, opt["m"], opt["v"], opt["step"])
            return loss, new_params, {"m": m, "v": v, "step": opt["step"] + 1}
        return train_step

    def train_args(mesh, shapes, specs, batch_shapes, batch_specs):
        def sds(shape, dtype, spec):
            return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))
        params = {k: sds(s, f32, specs[k]) for k, s in shapes.items()}
        opt = {"m": dict(params), "v": dict(params), "step": sds((), jnp.int32, P())}
        batch = {k: sds(s, jnp.int32, batch_specs[k]) for k, s in batch_shapes.items()}
        return (params, opt, batch)

    # ---- dense: attention + MLP blocks, scanned ---------------------------
    def dense(prog, mesh):
        c = prog.config
        D, F, H, Dh, L, V = c["d_model"], c["d_ff"], c["heads"], c["head_dim"], c["layers"], c["vocab"]
        B, S = c["batch"], c["seq"]
        axes = dict(prog.mesh)
        if "tp" in axes:  # Megatron: heads and d_ff over tp, batch over data
            w_in, w_out, act, emb = P(None, None, "tp"), P(None, "tp", None), P("data", None, None), P(None, "tp")
            bspec = P("data", None)
        else:  # FSDP: every weight sharded on d_model, batch over fsdp
            w_in, w_out, act, emb = P(None, "fsdp", None), P(None, None, "fsdp"), P("fsdp", None, None), P(None, "fsdp")
            bspec = P("fsdp", None)
        # q, k, v projections apart, so a heads split over tp needs no reshard
        shapes = {"embed": (V, D), "wq": (L, D, H * Dh), "wk": (L, D, H * Dh), "wv": (L, D, H * Dh),
                  "wo": (L, H * Dh, D), "w1": (L, D, F), "w2": (L, F, D)}
        specs = {"embed": emb, "wq": w_in, "wk": w_in, "wv": w_in, "wo": w_out, "w1": w_in, "w2": w_out}
        dot = fp8_dot if prog.dot == "fp8" else bf16_dot

        def layer(x, w):
            h = rms(x)
            q, k, v = (dot(h, w[n].astype(bf16)).reshape(B, S, H, Dh) for n in ("wq", "wk", "wv"))
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=f32) / (Dh ** 0.5)
            mask = jnp.tril(jnp.ones((S, S), bool))
            p = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1).astype(bf16)
            o = jnp.einsum("bhqk,bkhd->bqhd", p, v, preferred_element_type=f32).astype(bf16).reshape(B, S, H * Dh)
            x = x + dot(o, w["wo"].astype(bf16))
            h = ckpt_name(rms(x), "mlp_in")
            h = ckpt_name(jax.nn.gelu(dot(h, w["w1"].astype(bf16))), "mlp_hidden")
            x = x + dot(h, w["w2"].astype(bf16))
            return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, act))

        body = remat_wrap(layer, prog.remat)

        def loss_fn(params, batch):
            x = params["embed"].astype(bf16)[batch["tokens"]]
            x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, act))
            stacked = {k: params[k] for k in ("wq", "wk", "wv", "wo", "w1", "w2")}
            x, _ = jax.lax.scan(lambda x, w: (body(x, w), None), x, stacked)
            logits = jnp.einsum("bsd,vd->bsv", rms(x), params["embed"].astype(bf16), preferred_element_type=f32)
            return xent(logits, batch["labels"])

        args = train_args(mesh, shapes, specs, {"tokens": (B, S), "labels": (B, S)}, {"tokens": bspec, "labels": bspec})
        return jax.jit(train_wrapper(loss_fn), donate_argnums=(0, 1)), args

    # ---- mlp: MLP-only blocks (every matmul can be FP8) -------------------
    def mlp(prog, mesh):
        c = prog.config
        D, F, L, V, B, S = c["d_model"], c["d_ff"], c["layers"], c["vocab"], c["batch"], c["seq"]
        act = P("fsdp", None, None)
        shapes = {"embed": (V, D), "w1": (L, D, F), "w2": (L, F, D)}
        specs = {"embed": P(None, "fsdp"), "w1": P(None, "fsdp", None), "w2": P(None, None, "fsdp")}
        dot = fp8_dot if prog.dot == "fp8" else bf16_dot

        def layer(x, w):
            h = jax.nn.gelu(dot(rms(x), w["w1"].astype(bf16)))
            x = x + dot(h, w["w2"].astype(bf16))
            return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, act))

        def loss_fn(params, batch):
            x = params["embed"].astype(bf16)[batch["tokens"]]
            x, _ = jax.lax.scan(lambda x, w: (layer(x, w), None), x, {"w1": params["w1"], "w2": params["w2"]})
            logits = jnp.einsum("bsd,vd->bsv", rms(x), params["embed"].astype(bf16), preferred_element_type=f32)
            return xent(logits, batch["labels"])

        bspec = P("fsdp", None)
        args = train_args(mesh, shapes, specs, {"tokens": (B, S), "labels": (B, S)}, {"tokens": bspec, "labels": bspec})
        return jax.jit(train_wrapper(loss_fn), donate_argnums=(0, 1)), args

    # ---- moe: expert parallelism with all-to-all --------------------------
    def moe(prog, mesh):
        c = prog.config
        D, F, E, K, L, V, B, S = (c[k] for k in ("d_model", "d_ff", "experts", "top_k", "layers", "vocab", "batch", "seq"))
        n = dict(prog.mesh)["ep"]
        tokens_local = B * S // n
        cap = int(c["capacity_factor"] * tokens_local * K / E)
        shapes = {"embed": (V, D), "router": (L, D, E), "w1": (L, E, D, F), "w2": (L, E, F, D)}
        specs = {"embed": P(), "router": P(), "w1": P(None, "ep", None, None), "w2": P(None, "ep", None, None)}

        def moe_block(x, router, w1, w2):
            # x: [tokens_local, D]; w1/w2: this device's experts [E/n, D, F]
            logits = jnp.dot(rms(x), router.astype(bf16), preferred_element_type=f32)
            gates, idx = jax.lax.top_k(jax.nn.softmax(logits, axis=-1), K)
            onehot = jax.nn.one_hot(idx, E, dtype=f32)  # [T, K, E]
            pos = jnp.cumsum(onehot.reshape(-1, E), axis=0).reshape(onehot.shape) * onehot - 1.0
            keep = (pos < cap) & (pos >= 0)
            slot = jax.nn.one_hot(jnp.where(keep, pos, -1).astype(jnp.int32), cap, dtype=f32)  # [T, K, E, C]
            dispatch = jnp.einsum("tke,tkec->tec", onehot, slot).astype(bf16)
            combine = jnp.einsum("tk,tke,tkec->tec", gates, onehot, slot).astype(bf16)
            xe = jnp.einsum("tec,td->ecd", dispatch, rms(x))  # [E, C, D]
            xe = jax.lax.all_to_all(xe, "ep", split_axis=0, concat_axis=1, tiled=True)  # [E/n, n*C, D]
            h = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xe, w1.astype(bf16), preferred_element_type=f32).astype(bf16))
            ye = jnp.einsum("ecf,efd->ecd", h, w2.astype(bf16), preferred_element_type=f32).astype(bf16)
            ye = jax.lax.all_to_all(ye, "ep", split_axis=1, concat_axis=0, tiled=True)  # [E, C, D]
            return x + jnp.einsum("tec,ecd->td", combine, ye)

        def local_loss(params, tokens, labels):
            x = params["embed"].astype(bf16)[tokens.reshape(-1)]

            def step(x, w):
                return moe_block(x, w["router"], w["w1"], w["w2"]), None

            x, _ = jax.lax.scan(step, x, {k: params[k] for k in ("router", "w1", "w2")})
            logits = jnp.dot(rms(x), params["embed"].astype(bf16).T, preferred_element_type=f32)
            return jax.lax.pmean(xent(logits, labels.reshape(-1)), "ep")

        sharded = jax.shard_map(
            local_loss, mesh=mesh,
            in_specs=(specs, P("ep", None), P("ep", None)), out_specs=P())

        def loss_fn(params, batch):
            return sharded(params, batch["tokens"], batch["labels"])

        bspec = P("ep", None)
        args = train_args(mesh, shapes, specs, {"tokens": (B, S), "labels": (B, S)}, {"tokens": bspec, "labels": bspec})
        return jax.jit(train_wrapper(loss_fn), donate_argnums=(0, 1)), args

    # ---- cp_splash: context parallelism + splash attention ----------------
    def cp_splash(prog, mesh):
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

        c = prog.config
        D, F, H, Dh, L, V, B, S = (c[k] for k in ("d_model", "d_ff", "heads", "head_dim", "layers", "vocab", "batch", "seq"))
        cp = dict(prog.mesh)["cp"]
        Sl = S // cp
        mask = sm.MultiHeadMask([sm.FullMask((Sl, S)) for _ in range(H)])
        kernel = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1,
                                    block_sizes=sk.BlockSizes.get_default())
        act = P("fsdp", "cp", None)
        wspec = P(None, ("fsdp", "cp"), None)
        wspec_t = P(None, None, ("fsdp", "cp"))
        shapes = {"embed": (V, D), "wqkv": (L, D, 3 * H * Dh), "wo": (L, H * Dh, D), "w1": (L, D, F), "w2": (L, F, D)}
        specs = {"embed": P(None, ("fsdp", "cp")), "wqkv": wspec, "wo": wspec_t, "w1": wspec, "w2": wspec_t}

        def attend(q, k, v):  # per device: q [b, H, Sl, Dh], k/v [b, H, Sl, Dh]
            k = jax.lax.all_gather(k, "cp", axis=2, tiled=True)
            v = jax.lax.all_gather(v, "cp", axis=2, tiled=True)
            return jax.vmap(kernel)(q, k, v)

        attention = jax.shard_map(
            attend, mesh=mesh,
            in_specs=(P("fsdp", None, "cp", None),) * 3, out_specs=P("fsdp", None, "cp", None),
            check_vma=False)

        def layer(x, w):
            h = rms(x)
            qkv = bf16_dot(h, w["wqkv"].astype(bf16)).reshape(B, S, 3, H, Dh)
            q, k, v = (jnp.swapaxes(qkv[:, :, i], 1, 2) for i in range(3))  # [B, H, S, Dh]
            o = attention(q / (Dh ** 0.5), k, v)
            o = jnp.swapaxes(o, 1, 2).reshape(B, S, H * Dh)
            x = x + bf16_dot(o, w["wo"].astype(bf16))
            x = x + bf16_dot(jax.nn.gelu(bf16_dot(rms(x), w["w1"].astype(bf16))), w["w2"].astype(bf16))
            return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, act))

        body = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_saveable)

        def loss_fn(params, batch):
            x = params["embed"].astype(bf16)[batch["tokens"]]
            x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, act))
            x, _ = jax.lax.scan(lambda x, w: (body(x, w), None), x, {k: params[k] for k in ("wqkv", "wo", "w1", "w2")})
            logits = jnp.einsum("bsd,vd->bsv", rms(x), params["embed"].astype(bf16), preferred_element_type=f32)
            return xent(logits, batch["labels"])

        bspec = P("fsdp", "cp")
        args = train_args(mesh, shapes, specs, {"tokens": (B, S), "labels": (B, S)}, {"tokens": bspec, "labels": bspec})
        return jax.jit(train_wrapper(loss_fn), donate_argnums=(0, 1)), args

    # ---- decode: one serving step with a KV cache -------------------------
    def decode(prog, mesh):
        c = prog.config
        D, F, H, Dh, L, V, B, T = (c[k] for k in ("d_model", "d_ff", "heads", "head_dim", "layers", "vocab", "batch", "max_len"))

        def sds(shape, dtype, spec):
            return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

        col, row = P(None, None, "tp"), P(None, "tp", None)
        wsp = {"embed": P(None, None), "wq": col, "wk": col, "wv": col, "wo": row, "w1": col, "w2": row}
        wsh = {"embed": (V, D), "wq": (L, D, H * Dh), "wk": (L, D, H * Dh), "wv": (L, D, H * Dh),
               "wo": (L, H * Dh, D), "w1": (L, D, F), "w2": (L, F, D)}
        params = {k: sds(wsh[k], bf16, wsp[k]) for k in wsh}
        cache_spec = P(None, None, "tp", None, None)
        cache = {"k": sds((L, B, H, T, Dh), bf16, cache_spec), "v": sds((L, B, H, T, Dh), bf16, cache_spec)}
        tokens = sds((B,), jnp.int32, P())
        pos = sds((), jnp.int32, P())

        def serve_step(params, cache, tokens, pos):
            x = params["embed"][tokens]  # [B, D]

            def layer(x, lw):
                w, kc, vc = lw
                h = rms(x)
                q, k, v = (bf16_dot(h, w[n]).reshape(B, H, Dh) for n in ("wq", "wk", "wv"))
                kc = jax.lax.dynamic_update_slice(kc, k[:, :, None, :], (0, 0, pos, 0))
                vc = jax.lax.dynamic_update_slice(vc, v[:, :, None, :], (0, 0, pos, 0))
                s = jnp.einsum("bhd,bhtd->bht", q, kc, preferred_element_type=f32) / (Dh ** 0.5)
                s = jnp.where(jnp.arange(T)[None, None, :] <= pos, s, -1e9)
                p = jax.nn.softmax(s, axis=-1).astype(bf16)
                o = jnp.einsum("bht,bhtd->bhd", p, vc, preferred_element_type=f32).astype(bf16).reshape(B, H * Dh)
                x = x + bf16_dot(o, w["wo"])
                x = x + bf16_dot(jax.nn.gelu(bf16_dot(rms(x), w["w1"])), w["w2"])
                return x, (kc, vc)

            stacked = {k: params[k] for k in ("wq", "wk", "wv", "wo", "w1", "w2")}
            x, (ks, vs) = jax.lax.scan(layer, x, (stacked, cache["k"], cache["v"]))
            logits = jnp.dot(rms(x), params["embed"].T, preferred_element_type=f32)
            return jnp.argmax(logits, axis=-1).astype(jnp.int32), {"k": ks, "v": vs}

        return jax.jit(serve_step, donate_argnums=(1,)), (params, cache, tokens, pos)

    return {"dense": dense, "mlp": mlp, "moe": moe, "cp_splash": cp_splash, "decode": decode}


def _gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _write_gz(path: Path, data: bytes) -> None:
    path.write_bytes(_gzip_bytes(data))


def _memory_dict(mem) -> dict:
    keys = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
            "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
            "host_alias_size_in_bytes", "host_temp_size_in_bytes", "host_generated_code_size_in_bytes")
    return {k: int(getattr(mem, k)) for k in keys if hasattr(mem, k)}


def _child(name: str, out: Path, dump: Path) -> None:
    """Compile one program (this process has jax and libtpu) and write its files."""
    import jax
    import numpy as np
    from jax.experimental import topologies

    # Source paths in the HLO metadata relative to the repository (not this
    # machine's checkout or venv folder), so reruns elsewhere give the same bytes.
    jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/(?=tools/|jax/|site-packages/)")

    prog = BY_NAME[name]
    topo = topologies.get_topology_desc(topology_name=prog.topology, platform="tpu")
    shape = tuple(n for _, n in prog.mesh)
    devices = np.array(topo.devices)
    if devices.size != int(np.prod(shape)):
        raise SystemExit(f"{name}: mesh {prog.mesh} needs {int(np.prod(shape))} devices, {prog.topology} has {devices.size}")
    mesh = jax.sharding.Mesh(devices.reshape(shape), tuple(a for a, _ in prog.mesh))
    fn, args = _models()[prog.model](prog, mesh)
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()

    module = compiled.runtime_executable().hlo_modules()[0]
    stages = {}
    for stage in ("after_optimizations", "after_codegen"):
        found = sorted(dump.glob(f"*.{stage}.hlo.pb"))
        if len(found) != 1:
            raise SystemExit(f"{name}: expected one {stage}.hlo.pb in the dump, found {[p.name for p in found]}")
        stages[stage] = found[0].read_bytes()
    flagfiles = sorted(dump.glob("*.flagfile"))
    _write_gz(out / f"{name}.hlo.pb.gz", stages["after_optimizations"])
    _write_gz(out / f"{name}.after_codegen.hlo.pb.gz", stages["after_codegen"])
    _write_gz(out / f"{name}.hlo.txt.gz", compiled.as_text().encode())
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax: one dict per module
        cost = cost[0]
    doc = {
        "program": name,
        "module_name": module.name,
        "memory_analysis": _memory_dict(compiled.memory_analysis()),
        "cost_analysis": {k: float(v) for k, v in sorted(cost.items())},
    }
    (out / f"{name}.compiler.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if name == FLAGFILE_OF and flagfiles:
        _write_gz(out / "tpu7x_default.flagfile.gz", flagfiles[0].read_bytes())
    info = {
        "module_name": module.name,
        "devices": int(devices.size),
        "device_kind": devices.flat[0].device_kind,
        "dump_files": sorted(p.name.split(".", 3)[-1] for p in dump.iterdir() if p.is_file()),
        "lower_s": round(t1 - t0, 2),
        "compile_s": round(t2 - t1, 2),
    }
    print("CORPUS-INFO " + json.dumps(info), flush=True)


def text_stats(text: str) -> dict:
    """Counts read from an optimized HLO text (what the README table shows)."""
    def ops(opcode: str) -> int:
        return len(re.findall(rf" {opcode}(?:-start)?\(", text))
    return {
        "sparsecore_async_lines": text.count('async_execution_thread="sparsecore"'),
        "all_gather": ops("all-gather"),
        "reduce_scatter": ops("reduce-scatter"),
        "all_reduce": ops("all-reduce"),
        "all_to_all": ops("all-to-all"),
        "collective_permute": ops("collective-permute"),
        "while": ops("while"),
        "tpu_custom_call": text.count('custom_call_target="tpu_custom_call"'),
        "estimated_cycles": text.count('"estimated_cycles":"'),
        "fp8_dtypes": sorted(set(re.findall(r"\b(f8e[0-9a-z]+)\[", text))),
        "host_memory_space_S5": text.count("S(5)"),
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def write_readme(out: Path, manifest: dict) -> None:
    rows = []
    for e in manifest["programs"]:
        text = gzip.decompress((out / e["files"]["hlo_text"]).read_bytes()).decode()
        st = text_stats(text)
        mem = json.loads((out / e["files"]["compiler"]).read_text())["memory_analysis"]
        mesh = " x ".join(f"{m['axis']}={m['size']}" for m in e["mesh"])
        flags = "<br>".join(f"`{f}`" for f in e["flags"]) or "default"
        colls = ", ".join(f"{k.replace('_', '-')} {st[k]}" for k in
                          ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "collective_permute") if st[k])
        rows.append(
            f"| `{e['name']}` | {e['shows']} | {e['topology']} ({e['device_kind']}) | {mesh} | {flags} | "
            f"{colls or '-'} | {st['sparsecore_async_lines']} | {st['estimated_cycles']} | "
            f"{', '.join(st['fp8_dtypes']) or '-'} | {_mib(mem.get('temp_size_in_bytes', 0))} / "
            f"{_mib(mem.get('host_temp_size_in_bytes', 0))} |")
    v = manifest["versions"]
    head = f"""# Programs compiled by the real TPU compiler

Small JAX steps compiled by libtpu {v['libtpu']} (jax {v['jax']}, Python {v['python']}) on a CPU
machine with no TPU (deviceless / ahead-of-time compilation), for TPU7x, v6e
and v5p topologies. Nothing here is synthesized: every file is what the
compiler wrote. Regenerate with

    pip install -e '.[aot]'      # jax[tpu]=={v['jax']}, Python 3.11
    {manifest['command']}

(`--only NAME ...` recompiles some programs and keeps the other entries.)

Per program `NAME`:

| file | what it is |
| --- | --- |
| `NAME.hlo.pb.gz` | the dump's `after_optimizations.hlo.pb`: an **HloProto** (field 1 the scheduled HloModuleProto, field 3 its BufferAssignmentProto), as XProf keeps `*.hlo_proto.pb` |
| `NAME.after_codegen.hlo.pb.gz` | the dump's `after_codegen.hlo.pb`: an HloProto holding only the final module (field 1), the stage that carries most `estimated_cycles`; `compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()` is this module, unwrapped |
| `NAME.hlo.txt.gz` | `compiled.as_text()`: the final (after_codegen) module as text |
| `NAME.compiler.json` | `compiled.memory_analysis()` (bytes) and `compiled.cost_analysis()` |

and `manifest.json` (versions, environment, flags, model config, mesh, files),
`{manifest['flagfile']}` (the `flagfile` libtpu writes into an
`--xla_dump_to` dump, for `{manifest['flagfile_of']}`: every libtpu flag with its value).
libtpu {v['libtpu']} refuses `--xla_dump_to` in `LIBTPU_INIT_ARGS`; the dump is
asked for through `XLA_FLAGS` ({manifest['xla_flags']}), and the
program's own flags go in `LIBTPU_INIT_ARGS`, one child process per program
(libtpu reads it once, at start-up).

Columns: collectives count the HLO instructions of each opcode (`-start` of
async pairs included, the ones inside SparseCore call computations too);
"SC lines" counts lines with `async_execution_thread="sparsecore"`
(call-start and call-done of collectives the SparseCore runs);
"estimates" counts `"estimated_cycles"` in backend configs; memory is
`memory_analysis()` temp bytes on the device / on the host, in MiB.

| program | what it shows | topology | mesh | LIBTPU_INIT_ARGS | collectives | SC lines | estimates | FP8 dtypes | temp MiB (device / host) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
"""
    tail = """
Models (tools/compile_corpus.py): a dense transformer-like step (embedding,
attention + MLP blocks in a `lax.scan`, so the layers are a `while` loop, a
tied head, Adam; parameters f32, compute bf16); an MLP-only step for the FP8
pair (every matmul in FP8 or bf16) and, at llama-8B layer width, for the
collective matmuls the compiler picks only for large dots; a top-2 MoE in `shard_map` with
`all_to_all` dispatch and combine; a context-parallel step whose attention is
the Pallas splash kernel (`tpu_custom_call`) on local queries against
all-gathered keys and values (a full mask: one SPMD program cannot give each
shard its own causal offset); a decode step that writes one token into a
donated KV cache. All small (a few to 50 MiB of weights): each compile takes
seconds on one CPU core, `mlp_fsdp_collective_matmul` about 45 s.

Determinism: gzip with mtime 0 and no file name, JSON sorted; source paths in
the HLO metadata are made relative (`jax_hlo_source_file_canonicalization_regex`),
so the files do not depend on where the checkout or the venv is. A rerun with
the same jax/libtpu, into another folder, gave the same bytes for every file;
compile times are printed, not stored. What changes the bytes: another libtpu
or jax version (the manifest pins them), and any edit of
tools/compile_corpus.py, whose line numbers are in every program's StackFrames
(each manifest entry records the tool's sha256; tests/test_compiled_corpus.py
fails on a stale corpus). The dump's `cl_NNN` file prefix is not stored.
"""
    (out / "README.md").write_text(head + "\n".join(rows) + "\n" + tail)


def _versions(python: str) -> dict:
    code = ("import json, importlib.metadata as m, platform;"
            "print(json.dumps({k: m.version(k) for k in ('jax', 'jaxlib', 'libtpu')} | {'python': platform.python_version()}))")
    return json.loads(subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout)


def _files(out: Path, name: str) -> dict:
    return {kind: f"{name}{suffix}" for kind, suffix in
            (("hlo_proto", ".hlo.pb.gz"), ("hlo_proto_after_codegen", ".after_codegen.hlo.pb.gz"),
             ("hlo_text", ".hlo.txt.gz"), ("compiler", ".compiler.json"))
            if (out / f"{name}{suffix}").exists()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder (sample_traces/compiled)")
    ap.add_argument("--only", nargs="*", default=None, help="compile only these programs (the manifest keeps the others' entries)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that has jax[tpu] (default: this one)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a.child, a.out, a.dump)
        return 0
    unknown = sorted(set(a.only or ()) - set(BY_NAME))
    if unknown:
        print(f"error: unknown program(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() and a.only else {}
    entries = {p["name"]: p for p in old.get("programs", [])}
    try:
        versions = _versions(a.python)
    except (subprocess.CalledProcessError, OSError, ValueError):
        print(f"error: {a.python} has no jax, jaxlib and libtpu (pip install -e '.[aot]', Python 3.11)", file=sys.stderr)
        return 2
    tool_sha = hashlib.sha256((ROOT / SCRIPT).read_bytes()).hexdigest()
    for prog in PROGRAMS:
        if a.only and prog.name not in a.only:
            continue
        dump = Path(tempfile.mkdtemp(prefix=f"corpus_{prog.name}_"))
        env = dict(os.environ, **ENV)
        env["LIBTPU_INIT_ARGS"] = " ".join(prog.flags)
        env["XLA_FLAGS"] = f"--xla_dump_to={dump} {DUMP_FLAGS}"
        env["PYTHONHASHSEED"] = "0"
        cmd = [a.python, str(ROOT / SCRIPT), "--child", prog.name, "--out", str(out), "--dump", str(dump)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        shutil.rmtree(dump, ignore_errors=True)
        info_lines = [ln for ln in r.stdout.splitlines() if ln.startswith("CORPUS-INFO ")]
        if r.returncode != 0 or not info_lines:
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-15:])
            print(f"error: {prog.name} did not compile (exit {r.returncode}):\n{tail}", file=sys.stderr)
            return 1
        info = json.loads(info_lines[-1][len("CORPUS-INFO "):])
        sizes = {f: (out / f).stat().st_size for f in _files(out, prog.name).values()}
        print(f"{prog.name:28s} {prog.topology:12s} lower {info['lower_s']:6.2f} s  compile {info['compile_s']:6.2f} s  "
              f"(process {wall:5.1f} s)  " + "  ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()), flush=True)
        entry = asdict(prog)
        entry["mesh"] = [{"axis": ax, "size": n} for ax, n in prog.mesh]
        entry["flags"] = list(prog.flags)
        entry["libtpu_init_args"] = " ".join(prog.flags)
        entry.update(module_name=info["module_name"], devices=info["devices"], device_kind=info["device_kind"],
                     files=_files(out, prog.name), tool_sha256=tool_sha)
        entries[prog.name] = entry
    manifest = {
        "about": "Programs compiled by the real TPU compiler (libtpu, deviceless) from tools/compile_corpus.py",
        "command": f"python {SCRIPT} --out sample_traces/compiled",
        "environment": dict(ENV),
        "xla_flags": f"--xla_dump_to=<temp folder> {DUMP_FLAGS}",
        "versions": versions,
        "host": {"system": platform.system(), "machine": platform.machine()},
        "flagfile": "tpu7x_default.flagfile.gz" if (out / "tpu7x_default.flagfile.gz").exists() else None,
        "flagfile_of": FLAGFILE_OF,
        "programs": [entries[p.name] for p in PROGRAMS if p.name in entries],
    }
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    write_readme(out, manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
