"""The small JAX programs of the real-TPU corpus (run by tools/capture_tpu.py).

Pure JAX (no flax, no optax): a llama-like decoder (RMSNorm, rotary-free
attention, SwiGLU FFN, layers scanned with `lax.scan`), trained with a
hand-written Adam or SGD-with-momentum, or served (a decode step over a KV
cache, a prefill step). Each workload is one configuration; the pairs of the
corpus differ in one field (remat policy, offload, attention kernel, block
sizes, precision, optimizer, KV layout, weight dtype, cache update, FFN
kernel).

This module imports jax: it is imported only by the child processes that
`capture_tpu.py` starts on the lent TPU (or on a CPU with --tiny, where the
Pallas kernels run in interpret mode). `make test` never imports it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax


@dataclass(frozen=True)
class Config:
    kind: str = "train"  # train | decode | prefill
    d: int = 1024
    heads: int = 8
    kv_heads: int = 8
    ff: int = 4096
    layers: int = 4
    vocab: int = 32000
    batch: int = 8
    seq: int = 1024
    #: compute dtype of the matmuls: bf16, or f32 at precision HIGHEST
    compute: str = "bf16"
    #: none | full | dots | names | offload
    remat: str = "none"
    #: dense | splash
    attention: str = "dense"
    splash_block: int = 512
    optimizer: str = "adam"  # adam | sgdm
    #: dense FFN, or a mixture of experts: moe_gmm (megablox grouped matmul) | moe_dense
    ffn: str = "dense"
    experts: int = 8
    top_k: int = 2
    #: decode: KV cache positions, weight dtype (bf16 | int8), how the cache is updated
    cache: int = 2048
    weights: str = "bf16"
    #: carry: the cache is the loop carry, updated in place at the layer's slot;
    #: scan_xs: the cache is the scan's xs and its ys (a new stacked buffer);
    #: per_layer: one donated buffer per layer, layers unrolled, each written at the new position only
    cache_update: str = "carry"
    #: decode: the KV cache's dtype (bf16 | int8: 8-bit values with a bf16 scale per position and KV head)
    kv_dtype: str = "bf16"
    #: decode: the cache as pages (page pools per layer, a page table per sequence): off | gather (pages gathered
    #: into a contiguous buffer, attention by einsum) | kernel (JAX's Pallas paged-attention kernel reads the pages)
    paged: str = "off"
    page_size: int = 64
    pages_per_block: int = 8
    #: prefill: the FFN matmuls by XLA or by the project's Pallas matmul at these blocks
    matmul: str = "xla"
    matmul_block: int = 512
    interpret: bool = False  # Pallas kernels in interpret mode (CPU tests)

    @property
    def head_dim(self) -> int:
        return self.d // self.heads

    @property
    def cdt(self):
        return jnp.float32 if self.compute == "f32" else jnp.bfloat16

    @property
    def precision(self):
        return lax.Precision.HIGHEST if self.compute == "f32" else None


# --------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------

def init_params(cfg: Config, key) -> dict:
    """fp32 master parameters, layers stacked on a leading axis (for scan)."""
    L, d, hd = cfg.layers, cfg.d, cfg.head_dim
    ks = iter(jax.random.split(key, 16))

    def w(shape, fan_in):
        return jax.random.normal(next(ks), shape, jnp.float32) * (fan_in ** -0.5)

    layer = {
        "ln1": jnp.ones((L, d), jnp.float32),
        "ln2": jnp.ones((L, d), jnp.float32),
        "wq": w((L, d, cfg.heads * hd), d),
        "wk": w((L, d, cfg.kv_heads * hd), d),
        "wv": w((L, d, cfg.kv_heads * hd), d),
        "wo": w((L, cfg.heads * hd, d), d),
    }
    if cfg.ffn == "dense":
        layer.update(w1=w((L, d, cfg.ff), d), w3=w((L, d, cfg.ff), d), w2=w((L, cfg.ff, d), cfg.ff))
    else:
        E = cfg.experts
        layer.update(router=w((L, d, E), d), w1=w((L, E, d, cfg.ff), d), w3=w((L, E, d, cfg.ff), d),
                     w2=w((L, E, cfg.ff, d), cfg.ff))
    return {
        "embed": w((cfg.vocab, d), 1.0) * 0.02,
        "layers": layer,
        "ln_f": jnp.ones((d,), jnp.float32),
        "unembed": w((d, cfg.vocab), d),
    }


def quantize_int8(params: dict) -> dict:
    """Weight-only int8 for serving: each 2-D+ matrix as int8 values and a
    per-output-channel fp32 scale (absmax)."""
    def q(x):
        if x.ndim < 3:  # norms, embeddings stay
            return x
        scale = jnp.max(jnp.abs(x), axis=-2, keepdims=True) / 127.0
        return {"q": jnp.round(x / scale).astype(jnp.int8), "s": scale}
    out = dict(params)
    out["layers"] = {k: q(v) for k, v in params["layers"].items()}
    return out


def _mat(w, cfg: Config):
    """A weight as the compute dtype: a bf16/f32 cast, or an int8 dequantize."""
    if isinstance(w, dict):
        return (w["q"].astype(cfg.cdt) * w["s"].astype(cfg.cdt))
    return w.astype(cfg.cdt)


def _dot(x, w, cfg: Config, spec: str):
    return jnp.einsum(spec, x, _mat(w, cfg), precision=cfg.precision)


def rmsnorm(x, g):
    xf = x.astype(jnp.float32)
    y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
    return (y * g).astype(x.dtype)


# --------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------

def dense_attention(q, k, v, cfg: Config):
    """Causal attention by einsum + softmax (q: b s h d; k, v: b s kvh d)."""
    b, s, h, hd = q.shape
    g = h // k.shape[2]
    q = q.reshape(b, s, k.shape[2], g, hd)
    logits = jnp.einsum("bskgd,btkd->bkgst", q, k, precision=cfg.precision).astype(jnp.float32)
    logits = logits * (hd ** -0.5)
    mask = jnp.tril(jnp.ones((s, s), bool))
    logits = jnp.where(mask, logits, -1e30)
    p = jax.nn.softmax(logits, axis=-1).astype(cfg.cdt)
    out = jnp.einsum("bkgst,btkd->bskgd", p, v, precision=cfg.precision)
    return out.reshape(b, s, h, hd)


@functools.cache
def _splash_kernel(heads: int, seq: int, block: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    mask = sa.MultiHeadMask([sa.CausalMask((seq, seq)) for _ in range(heads)])
    bs = sa.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                       block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                       block_q_dq=block, block_kv_dq=block)
    return sa.make_splash_mha(mask, block_sizes=bs, head_shards=1, q_seq_shards=1, interpret=interpret)


def splash_attention(q, k, v, cfg: Config):
    """Causal splash attention (the Pallas kernel), MHA, vmapped over batch."""
    b, s, h, hd = q.shape
    kernel = _splash_kernel(h, s, min(cfg.splash_block, s), cfg.interpret)
    q = (q * (hd ** -0.5)).astype(cfg.cdt)
    qh, kh, vh = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))  # b h s d
    out = jax.vmap(kernel)(qh, kh, vh)
    return jnp.swapaxes(out, 1, 2)


# --------------------------------------------------------------------------
# FFN: dense SwiGLU, a dense-computed MoE, a grouped-matmul MoE, a Pallas matmul
# --------------------------------------------------------------------------

def pallas_matmul(x, w, block: int, interpret: bool):
    """The project's own blocked Pallas matmul (bf16 in, f32 accumulate)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    m, k = x.shape
    n = w.shape[1]
    bm, bk, bn = min(block, m), min(block, k), min(block, n)
    nk = k // bk

    def kernel(x_ref, w_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == nk - 1)
        def _out():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, nk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=interpret,
    )(x, w)


def dense_ffn(x, p, cfg: Config):
    if cfg.matmul == "pallas":
        b, s, d = x.shape
        x2 = x.reshape(b * s, d)
        mm = functools.partial(pallas_matmul, block=cfg.matmul_block, interpret=cfg.interpret)
        h = jax.nn.silu(mm(x2, _mat(p["w1"], cfg))) * mm(x2, _mat(p["w3"], cfg))
        return mm(h, _mat(p["w2"], cfg)).reshape(b, s, d)
    h = jax.nn.silu(_dot(x, p["w1"], cfg, "bsd,df->bsf")) * _dot(x, p["w3"], cfg, "bsd,df->bsf")
    return _dot(h, p["w2"], cfg, "bsf,fd->bsd")


def _route(x2, p, cfg: Config):
    logits = jnp.einsum("td,de->te", x2, p["router"].astype(cfg.cdt)).astype(jnp.float32)
    weights, experts = lax.top_k(jax.nn.softmax(logits, axis=-1), cfg.top_k)
    return weights / jnp.sum(weights, axis=-1, keepdims=True), experts


def moe_dense_ffn(x, p, cfg: Config):
    """Every expert on every token, combined by the router's (sparse) weights."""
    b, s, d = x.shape
    x2 = x.reshape(b * s, d)
    weights, experts = _route(x2, p, cfg)
    gate = jnp.sum(jax.nn.one_hot(experts, cfg.experts, dtype=jnp.float32) * weights[..., None], axis=1)
    h = jax.nn.silu(jnp.einsum("td,edf->etf", x2, p["w1"].astype(cfg.cdt))) * \
        jnp.einsum("td,edf->etf", x2, p["w3"].astype(cfg.cdt))
    y = jnp.einsum("etf,efd->etd", h, p["w2"].astype(cfg.cdt))
    return jnp.einsum("etd,te->td", y, gate.astype(cfg.cdt)).reshape(b, s, d)


def moe_gmm_ffn(x, p, cfg: Config):
    """Tokens sorted by expert, the experts' matmuls as megablox grouped matmuls."""
    from jax.experimental.pallas.ops.tpu.megablox import ops as mb

    b, s, d = x.shape
    x2 = x.reshape(b * s, d)
    weights, experts = _route(x2, p, cfg)
    flat = experts.reshape(-1)
    order = jnp.argsort(flat)
    token = order // cfg.top_k
    xs = x2[token]
    sizes = jnp.bincount(flat, length=cfg.experts).astype(jnp.int32)
    gmm = functools.partial(mb.gmm, preferred_element_type=cfg.cdt, interpret=cfg.interpret)
    h = jax.nn.silu(gmm(xs, p["w1"].astype(cfg.cdt), sizes)) * gmm(xs, p["w3"].astype(cfg.cdt), sizes)
    y = gmm(h, p["w2"].astype(cfg.cdt), sizes)
    y = y * weights.reshape(-1)[order][:, None].astype(cfg.cdt)
    return jnp.zeros_like(x2).at[token].add(y).reshape(b, s, d)


# --------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------

def _remat_policy(cfg: Config):
    cp = jax.checkpoint_policies
    if cfg.remat == "full":
        return cp.nothing_saveable
    if cfg.remat == "dots":
        return cp.dots_with_no_batch_dims_saveable
    if cfg.remat == "names":
        return cp.save_only_these_names("attn_out", "ffn_hidden")
    if cfg.remat == "offload":
        return cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["attn_out", "ffn_hidden"],
            offload_src="device", offload_dst="pinned_host")
    return None


def layer_fwd(x, p, cfg: Config):
    from jax.ad_checkpoint import checkpoint_name

    b, s, d = x.shape
    hd = cfg.head_dim
    with jax.named_scope("attention"):
        h = rmsnorm(x, p["ln1"])
        q = _dot(h, p["wq"], cfg, "bsd,de->bse").reshape(b, s, cfg.heads, hd)
        k = _dot(h, p["wk"], cfg, "bsd,de->bse").reshape(b, s, cfg.kv_heads, hd)
        v = _dot(h, p["wv"], cfg, "bsd,de->bse").reshape(b, s, cfg.kv_heads, hd)
        attn = (splash_attention if cfg.attention == "splash" else dense_attention)(q, k, v, cfg)
        attn = checkpoint_name(attn.reshape(b, s, cfg.heads * hd), "attn_out")
        x = x + _dot(attn, p["wo"], cfg, "bse,ed->bsd")
    with jax.named_scope("mlp"):
        h = checkpoint_name(rmsnorm(x, p["ln2"]), "ffn_hidden")
        ffn = {"dense": dense_ffn, "moe_dense": moe_dense_ffn, "moe_gmm": moe_gmm_ffn}[cfg.ffn]
        x = x + ffn(h, p, cfg)
    return x


def forward(params, tokens, cfg: Config):
    x = params["embed"][tokens].astype(cfg.cdt)
    body = functools.partial(layer_fwd, cfg=cfg)
    policy = _remat_policy(cfg)
    if cfg.remat != "none":
        body = jax.checkpoint(body, policy=policy, prevent_cse=False)

    def step(carry, p):
        return body(carry, p), None

    x, _ = lax.scan(step, x, params["layers"])
    x = rmsnorm(x, params["ln_f"])
    return jnp.einsum("bsd,dv->bsv", x, params["unembed"].astype(cfg.cdt), precision=cfg.precision)


def loss_fn(params, tokens, cfg: Config):
    logits = forward(params, tokens[:, :-1], cfg).astype(jnp.float32)
    labels = tokens[:, 1:]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def init_opt(params, cfg: Config):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    if cfg.optimizer == "adam":
        return {"m": zeros, "v": jax.tree_util.tree_map(jnp.zeros_like, params), "t": jnp.zeros((), jnp.int32)}
    return {"m": zeros}


def apply_opt(params, grads, opt, cfg: Config, lr=1e-4):
    tm = jax.tree_util.tree_map
    with jax.named_scope("optimizer"):
        if cfg.optimizer == "adam":
            b1, b2, eps = 0.9, 0.95, 1e-8
            t = opt["t"] + 1
            m = tm(lambda m, g: b1 * m + (1 - b1) * g, opt["m"], grads)
            v = tm(lambda v, g: b2 * v + (1 - b2) * g * g, opt["v"], grads)
            c1 = 1 - b1 ** t.astype(jnp.float32)
            c2 = 1 - b2 ** t.astype(jnp.float32)
            new = tm(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
            return new, {"m": m, "v": v, "t": t}
        m = tm(lambda m, g: 0.9 * m + g, opt["m"], grads)
        return tm(lambda p, m: p - lr * m, params, m), {"m": m}


def make_train_step(cfg: Config):
    def train_step(params, opt, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, cfg)
        params, opt = apply_opt(params, grads, opt, cfg)
        return params, opt, loss
    return jax.jit(train_step, donate_argnums=(0, 1))


# --------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------

def _quantize_kv(x):
    """int8 values and a bf16 scale per (batch, position, KV head): x is b t kvh d."""
    scale = jnp.max(jnp.abs(x.astype(jnp.float32)), axis=-1) / 127.0 + 1e-8
    q = jnp.clip(jnp.round(x.astype(jnp.float32) / scale[..., None]), -127, 127).astype(jnp.int8)
    return q, scale.astype(jnp.bfloat16)


def _cache_attention(q, k_cache, v_cache, pos, cfg: Config, k_scale=None, v_scale=None):
    """q: b kvh g d over a contiguous cache b t kvh d (int8 with scales b t kvh, or bf16)."""
    hd = cfg.head_dim
    k = k_cache.astype(cfg.cdt)
    s = jnp.einsum("bkgd,btkd->bkgt", q, k).astype(jnp.float32) * (hd ** -0.5)
    if k_scale is not None:
        s = s * jnp.transpose(k_scale, (0, 2, 1))[:, :, None, :].astype(jnp.float32)
    valid = jnp.arange(k_cache.shape[1]) <= pos
    s = jnp.where(valid, s, -1e30)
    pr = jax.nn.softmax(s, axis=-1)
    if v_scale is not None:
        pr = pr * jnp.transpose(v_scale, (0, 2, 1))[:, :, None, :].astype(jnp.float32)
    return jnp.einsum("bkgt,btkd->bkgd", pr.astype(cfg.cdt), v_cache.astype(cfg.cdt))


def _paged_layer(x, p, layer_cache, page_indices, pos, cfg: Config):
    """One decode layer over a paged cache: pools kvh pages page_size d, a page table b pages_per_seq."""
    b, d = x.shape
    hd, kvh = cfg.head_dim, cfg.kv_heads
    k_pages, v_pages = layer_cache["k"], layer_cache["v"]
    with jax.named_scope("attention"):
        h = rmsnorm(x, p["ln1"])
        q = _dot(h, p["wq"], cfg, "bd,de->be").reshape(b, kvh, cfg.heads // kvh, hd)
        k = _dot(h, p["wk"], cfg, "bd,de->be").reshape(b, kvh, hd)
        v = _dot(h, p["wv"], cfg, "bd,de->be").reshape(b, kvh, hd)
        page = page_indices[:, pos // cfg.page_size]
        slot = pos % cfg.page_size
        # write the new position into each sequence's current page (a scatter into the donated pools)
        k_pages = k_pages.at[:, page, slot].set(jnp.transpose(k, (1, 0, 2)).astype(k_pages.dtype))
        v_pages = v_pages.at[:, page, slot].set(jnp.transpose(v, (1, 0, 2)).astype(v_pages.dtype))
        if cfg.paged == "kernel":
            lengths = jnp.full((b,), pos + 1, jnp.int32)
            # the kernel does not scale the logits: the query carries 1/sqrt(d)
            qs = (q.astype(jnp.float32) * (hd ** -0.5)).astype(q.dtype).reshape(b, cfg.heads, hd)
            o = _paged_kernel(qs, k_pages, v_pages, lengths, page_indices, cfg)
            o = o.reshape(b, cfg.heads * hd).astype(cfg.cdt)
        else:
            # gather each sequence's pages into a contiguous buffer: b t kvh d
            kc = jnp.transpose(k_pages[:, page_indices], (1, 2, 3, 0, 4)).reshape(b, -1, kvh, hd)
            vc = jnp.transpose(v_pages[:, page_indices], (1, 2, 3, 0, 4)).reshape(b, -1, kvh, hd)
            o = _cache_attention(q, kc, vc, pos, cfg).reshape(b, cfg.heads * hd)
        x = x + _dot(o, p["wo"], cfg, "be,ed->bd")
    with jax.named_scope("mlp"):
        h = rmsnorm(x, p["ln2"])
        f = jax.nn.silu(_dot(h, p["w1"], cfg, "bd,df->bf")) * _dot(h, p["w3"], cfg, "bd,df->bf")
        x = x + _dot(f, p["w2"], cfg, "bf,fd->bd")
    return x, {"k": k_pages, "v": v_pages}


def _paged_kernel(q, k_pages, v_pages, lengths, page_indices, cfg: Config):
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention
    call = functools.partial(paged_attention, pages_per_compute_block=cfg.pages_per_block)
    if cfg.interpret:
        from jax.experimental.pallas import tpu as pltpu
        with pltpu.force_tpu_interpret_mode():
            return call(q, k_pages, v_pages, lengths, page_indices)
    return call(q, k_pages, v_pages, lengths, page_indices)


def _decode_layer(x, p, k_cache, v_cache, pos, cfg: Config):
    """One layer of a one-token decode step; k/v caches: b t kvh d."""
    b, d = x.shape
    hd, kvh = cfg.head_dim, cfg.kv_heads
    with jax.named_scope("attention"):
        h = rmsnorm(x, p["ln1"])
        q = _dot(h, p["wq"], cfg, "bd,de->be").reshape(b, kvh, cfg.heads // kvh, hd)
        k = _dot(h, p["wk"], cfg, "bd,de->be").reshape(b, 1, kvh, hd)
        v = _dot(h, p["wv"], cfg, "bd,de->be").reshape(b, 1, kvh, hd)
        if isinstance(k_cache, dict):  # an 8-bit cache: values and scales, each written at the new position
            kq, ks = _quantize_kv(k)
            vq, vs = _quantize_kv(v)
            k_cache = {"q": lax.dynamic_update_slice_in_dim(k_cache["q"], kq, pos, axis=1),
                       "s": lax.dynamic_update_slice_in_dim(k_cache["s"], ks, pos, axis=1)}
            v_cache = {"q": lax.dynamic_update_slice_in_dim(v_cache["q"], vq, pos, axis=1),
                       "s": lax.dynamic_update_slice_in_dim(v_cache["s"], vs, pos, axis=1)}
            o = _cache_attention(q, k_cache["q"], v_cache["q"], pos, cfg, k_cache["s"], v_cache["s"])
        else:
            k_cache = lax.dynamic_update_slice_in_dim(k_cache, k.astype(k_cache.dtype), pos, axis=1)
            v_cache = lax.dynamic_update_slice_in_dim(v_cache, v.astype(v_cache.dtype), pos, axis=1)
            o = _cache_attention(q, k_cache, v_cache, pos, cfg)
        o = o.reshape(b, cfg.heads * hd)
        x = x + _dot(o, p["wo"], cfg, "be,ed->bd")
    with jax.named_scope("mlp"):
        h = rmsnorm(x, p["ln2"])
        f = jax.nn.silu(_dot(h, p["w1"], cfg, "bd,df->bf")) * _dot(h, p["w3"], cfg, "bd,df->bf")
        x = x + _dot(f, p["w2"], cfg, "bf,fd->bd")
    return x, k_cache, v_cache


def make_decode_step(cfg: Config):
    def decode_step(params, cache, tokens, pos):
        x = params["embed"][tokens].astype(cfg.cdt)
        if cfg.paged != "off":
            new = []
            for i, layer_cache in enumerate(cache["layers"]):
                p = jax.tree_util.tree_map(lambda a, i=i: a[i], params["layers"])
                x, layer_cache = _paged_layer(x, p, layer_cache, cache["page_indices"], pos, cfg)
                new.append(layer_cache)
            cache = {"layers": new, "page_indices": cache["page_indices"]}
        elif cfg.cache_update == "per_layer":
            new = []
            for i, layer_cache in enumerate(cache):
                p = jax.tree_util.tree_map(lambda a, i=i: a[i], params["layers"])
                x, k_i, v_i = _decode_layer(x, p, layer_cache["k"], layer_cache["v"], pos, cfg)
                new.append({"k": k_i, "v": v_i})
            cache = new
        elif cfg.cache_update == "scan_xs":
            def body(x, xs):
                p, kc, vc = xs
                x, kc, vc = _decode_layer(x, p, kc, vc, pos, cfg)
                return x, (kc, vc)
            x, (k, v) = lax.scan(body, x, (params["layers"], cache["k"], cache["v"]))
            cache = {"k": k, "v": v}
        else:
            def body(i, carry):
                x, kc, vc = carry
                p = jax.tree_util.tree_map(lambda a: a[i], params["layers"])
                x, k_i, v_i = _decode_layer(x, p, kc[i], vc[i], pos, cfg)
                kc = lax.dynamic_update_index_in_dim(kc, k_i, i, 0)
                vc = lax.dynamic_update_index_in_dim(vc, v_i, i, 0)
                return x, kc, vc
            x, k, v = lax.fori_loop(0, cfg.layers, body, (x, cache["k"], cache["v"]))
            cache = {"k": k, "v": v}
        x = rmsnorm(x, params["ln_f"])
        logits = jnp.einsum("bd,dv->bv", x, params["unembed"].astype(cfg.cdt)).astype(jnp.float32)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), cache
    return jax.jit(decode_step, donate_argnums=(1,))


def init_cache(cfg: Config):
    if cfg.paged != "off":
        per_seq = cfg.cache // cfg.page_size
        pool = (cfg.kv_heads, cfg.batch * per_seq, cfg.page_size, cfg.head_dim)
        # a page table that is not the identity: sequence i owns pages i, i + batch, i + 2 * batch, ...
        table = (jnp.arange(per_seq)[None, :] * cfg.batch + jnp.arange(cfg.batch)[:, None]).astype(jnp.int32)
        return {"layers": [{"k": jnp.zeros(pool, jnp.bfloat16), "v": jnp.zeros(pool, jnp.bfloat16)}
                           for _ in range(cfg.layers)], "page_indices": table}
    if cfg.cache_update == "per_layer":
        one = (cfg.batch, cfg.cache, cfg.kv_heads, cfg.head_dim)
        if cfg.kv_dtype == "int8":
            def part():
                return {"q": jnp.zeros(one, jnp.int8), "s": jnp.zeros(one[:3], jnp.bfloat16)}
            return [{"k": part(), "v": part()} for _ in range(cfg.layers)]
        return [{"k": jnp.zeros(one, jnp.bfloat16), "v": jnp.zeros(one, jnp.bfloat16)} for _ in range(cfg.layers)]
    shape = (cfg.layers, cfg.batch, cfg.cache, cfg.kv_heads, cfg.head_dim)
    return {"k": jnp.zeros(shape, jnp.bfloat16), "v": jnp.zeros(shape, jnp.bfloat16)}


def make_prefill_step(cfg: Config):
    def prefill_step(params, tokens):
        logits = forward(params, tokens, cfg)
        return jnp.argmax(logits[:, -1].astype(jnp.float32), axis=-1).astype(jnp.int32)
    return jax.jit(prefill_step)


# --------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------

_TRAIN = Config()
_LONG = Config(d=1024, heads=8, kv_heads=8, ff=4096, layers=2, batch=2, seq=4096, remat="full")
_MOE = Config(d=1024, heads=8, kv_heads=8, ff=1024, layers=2, batch=4, seq=1024, ffn="moe_gmm")
_DECODE = Config(kind="decode", d=2048, heads=16, kv_heads=4, ff=8192, layers=4, batch=32, cache=2048)
_PREFILL = Config(kind="prefill", d=2048, heads=16, kv_heads=16, ff=8192, layers=4, batch=4, seq=1024,
                  matmul="pallas")

#: name -> (config, what it is; the lever it differs from its pair in)
WORKLOADS: dict[str, tuple[Config, str]] = {
    "train_remat_none": (_TRAIN, "dense train step, no remat (baseline of the remat and precision pairs)"),
    "train_remat_full": (dataclasses.replace(_TRAIN, remat="full"), "remat: nothing_saveable on each layer"),
    "train_remat_dots": (dataclasses.replace(_TRAIN, remat="dots"), "remat: dots_with_no_batch_dims_saveable"),
    "train_save_names": (dataclasses.replace(_TRAIN, remat="names"),
                         "remat: save attn_out, ffn_hidden on device"),
    "train_offload_names": (dataclasses.replace(_TRAIN, remat="offload"),
                            "remat: offload attn_out, ffn_hidden to pinned host (pair of train_save_names)"),
    "train_f32": (dataclasses.replace(_TRAIN, compute="f32"), "precision: f32 matmuls at HIGHEST"),
    "train_sgdm": (dataclasses.replace(_TRAIN, optimizer="sgdm"), "optimizer: SGD with momentum vs Adam"),
    "train_small_batch": (dataclasses.replace(_TRAIN, batch=1, seq=256), "small batch: 256 tokens per step"),
    "long_dense": (_LONG, "seq 4096, causal attention by einsum + softmax"),
    "long_splash_b128": (dataclasses.replace(_LONG, attention="splash", splash_block=128),
                         "seq 4096, splash attention, 128 blocks"),
    "long_splash_b512": (dataclasses.replace(_LONG, attention="splash", splash_block=512),
                         "seq 4096, splash attention, 512 blocks"),
    "moe_gmm": (_MOE, "MoE 8 experts top-2, megablox grouped matmuls"),
    "moe_dense": (dataclasses.replace(_MOE, ffn="moe_dense"), "MoE 8 experts top-2, every expert on every token"),
    "decode_gqa_bf16": (_DECODE, "decode, GQA 16q/4kv heads, bf16 weights, cache updated in place (carry)"),
    "decode_mha_bf16": (dataclasses.replace(_DECODE, kv_heads=16), "decode, MHA 16 heads, bf16 weights"),
    "decode_gqa_per_layer": (dataclasses.replace(_DECODE, cache_update="per_layer"),
                             "decode, GQA, one donated cache buffer per layer, written at the new position only"),
    "decode_gqa_int8": (dataclasses.replace(_DECODE, weights="int8"), "decode, GQA, int8 weights (dequantized)"),
    "decode_gqa_kv8": (dataclasses.replace(_DECODE, cache_update="per_layer", kv_dtype="int8"),
                       "decode, GQA, per-layer cache stored in int8 with a scale per position and KV head"),
    "decode_paged_gather": (dataclasses.replace(_DECODE, paged="gather"),
                            "decode, GQA, paged cache gathered into a contiguous buffer each step"),
    "decode_paged_kernel": (dataclasses.replace(_DECODE, paged="kernel"),
                            "decode, GQA, paged cache read by JAX's Pallas paged-attention kernel"),
    "decode_gqa_scan_cache": (dataclasses.replace(_DECODE, cache_update="scan_xs"),
                              "decode, GQA, cache as the scan's xs/ys (a new buffer each step)"),
    "prefill_pallas_b128": (dataclasses.replace(_PREFILL, matmul_block=128),
                            "prefill, FFN by a Pallas matmul, 128 blocks"),
    "prefill_pallas_b512": (_PREFILL, "prefill, FFN by a Pallas matmul, 512 blocks"),
    "prefill_xla": (dataclasses.replace(_PREFILL, matmul="xla"), "prefill, FFN by XLA's dot"),
}

#: one-lever pairs: (before, after, the lever)
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("train_remat_full", "train_remat_none", "remat policy"),
    ("train_remat_full", "train_remat_dots", "remat policy"),
    ("train_offload_names", "train_save_names", "host offload vs device"),
    ("train_f32", "train_remat_none", "precision"),
    ("train_remat_none", "train_sgdm", "optimizer"),
    ("long_dense", "long_splash_b512", "attention kernel"),
    ("long_splash_b128", "long_splash_b512", "splash block sizes"),
    ("moe_dense", "moe_gmm", "grouped-matmul kernel"),
    ("decode_mha_bf16", "decode_gqa_bf16", "KV layout (GQA)"),
    ("decode_gqa_bf16", "decode_gqa_int8", "weight precision"),
    # measured: the loop-carried cache still copies the stacked array whole (69% of its step): this pair is
    # scan vs carry, not the in-place update; decode_gqa_per_layer is the in-place side (next capture)
    ("decode_gqa_scan_cache", "decode_gqa_bf16", "cache as a loop carry vs a scan's xs/ys"),
    ("decode_gqa_bf16", "decode_gqa_per_layer", "in-place cache update"),
    ("decode_gqa_per_layer", "decode_gqa_kv8", "KV cache in 8 bits"),
    ("decode_paged_gather", "decode_paged_kernel", "paged-attention kernel vs page gather"),
    ("prefill_pallas_b128", "prefill_pallas_b512", "Pallas matmul block sizes"),
    ("prefill_pallas_b512", "prefill_xla", "custom kernel vs XLA"),
)


def tiny(cfg: Config) -> Config:
    """The same program at shapes a CPU runs in seconds (tests of the tool)."""
    small = dict(d=256, heads=2, kv_heads=min(cfg.kv_heads, 2) if cfg.kv_heads < cfg.heads else 2,
                 ff=256, layers=2, vocab=512, batch=2, seq=256, cache=256, experts=4,
                 splash_block=min(cfg.splash_block, 128), matmul_block=min(cfg.matmul_block, 128),
                 page_size=64, pages_per_block=2,
                 interpret=True)
    if cfg.kv_heads < cfg.heads:
        small.update(heads=4, kv_heads=2)
    return dataclasses.replace(cfg, **small)


def build(cfg: Config, key):
    """(jitted step, example args, a function from (args, outputs) to the next args)."""
    params = init_params(cfg, key)
    if cfg.kind == "train":
        tokens = jax.random.randint(jax.random.fold_in(key, 1), (cfg.batch, cfg.seq + 1), 0, cfg.vocab)
        args = (params, init_opt(params, cfg), tokens)
        return make_train_step(cfg), args, lambda a, out: (out[0], out[1], a[2])
    if cfg.kind == "decode":
        if cfg.weights == "int8":
            params = quantize_int8(params)
        else:
            params = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), params)
        tokens = jax.random.randint(jax.random.fold_in(key, 1), (cfg.batch,), 0, cfg.vocab)
        args = (params, init_cache(cfg), tokens, jnp.asarray(cfg.cache // 2, jnp.int32))
        return (make_decode_step(cfg), args,
                lambda a, out: (a[0], out[1], out[0], (a[3] + 1) % cfg.cache))
    params = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), params)
    tokens = jax.random.randint(jax.random.fold_in(key, 1), (cfg.batch, cfg.seq), 0, cfg.vocab)
    return make_prefill_step(cfg), (params, tokens), lambda a, out: a
