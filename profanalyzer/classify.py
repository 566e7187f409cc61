"""Op classifier: every TensorCore op -> one exclusive time bucket.

Input is the op identity XProf stores on an ``XLA Ops`` event's metadata:
the full HLO text (metadata ``name``), the instruction name
(``display_name``), the compiler's ``hlo_category`` stat, the framework
``tf_op`` name stack and ``shape_with_layout``. All of these are untrusted
strings: any of them may be empty, truncated or hostile, and the classifier
never raises on them.

How a decision is made
----------------------
1. The op is parsed once (``_Op``): instruction name (before ``=`` in the HLO
   text, else the display name), opcode (the first ``word(`` after the output
   shape; from the display name when the text is cut before it), the operand
   region (everything after the opcode's ``(``), and the name-stack tokens of
   ``tf_op``.
2. The ordered rules in ``RULES`` are tried top to bottom; the first that
   matches decides ``bucket``, ``collective``, ``role``, ``kernel`` and
   ``precision`` and writes ``reason`` (prefixed with the rule's name). Each
   rule is driven by a named regex table below (``COLLECTIVE_KINDS``,
   ``ATTENTION_KERNELS``, ``MATMUL_CATEGORIES``, ...). Collectives and async
   copies come first (an op *is* communication regardless of the model scope
   it was emitted for), then attention and Megablox kernels, then the
   attention name-stack scope, then matmuls, then other Pallas kernels.
   Anything left is ``other_compute``.
3. ``remat`` and ``phase`` are orthogonal tags from their own tables.

Documented choices
------------------
* Matmul precision (``_matmul_precision``) looks at *operand* element types
  (HLO prints the output type first: ``%f = bf16[..] fusion(f8e4m3fn[..] %a,
  ..)``): any f8 type -> ``fp8``; else the first of int8 (s8/u8/s4/u4), bf16,
  f32 that appears as a *matrix-like* operand (>= 2 dimensions larger than 1)
  -- so 1-D norm scales, scalars, index and sync-flag operands (s32/u32) do
  not decide; else the same over all operands; when the text is cut before
  the operands, the output type(s) in the text or ``shape_with_layout`` decide.
  fp8 -> ``matmul_fp8``, bf16 -> ``matmul_bf16``, anything else (f32, int8,
  f16, unknown) -> ``matmul_other``.
* Attention (``attention.*`` rules): Pallas attention kernels (splash, flash,
  ragged paged attention) by name; plus every op under an attention *core*
  name-stack scope (MaxText ``AttentionOp_N``, ``apply_attention*``,
  ``dot_product_attention``, ``*flash_attention``, ``*splash_attention``,
  ``splash_mha_*`` ...), whatever its opcode -- mask iotas, layout copies for
  the kernel, softmax pieces and the QK^T / PV dots exist only because of
  attention, so attention's share of the step includes them; plus, under a
  generic attention scope (a token containing ``attention``/``attn``, e.g.
  ``self_attention``, ``MultiHeadDotProductAttention_0``), the matmuls and
  softmax-like ops (exp, max/sum reductions, softmax) that are not inside a
  projection/rotary/norm sub-scope (``query``, ``key``, ``value``, ``out``,
  ``*_proj``, ``*_projection``, ``*rotary*``, ``*norm*``...). Tokens like
  ``pre_self_attention_layer_norm`` are norms, not attention.
* Megablox grouped matmuls are matmuls (``kernel="megablox_gmm"``) only for
  the kernel op itself (a custom-call / Pallas call / custom fusion, or an op
  *named* gmm/tgmm); helper ops under a ``jit(gmm)`` scope stay
  ``other_compute`` because the matmul buckets measure MXU ops, while the
  attention bucket measures attention as a feature.
* ``async-collective-start/-done`` (continuation fusions, category ``custom
  fusion``) carry no kind in their text; it is inferred from the two buffers
  the fusion threads through: output tuple (start) or operands (done) begin
  with (shard, full) -> bigger second buffer = all-gather, smaller =
  reduce-scatter, equal = all-reduce (the three kinds continuation fusion
  handles). When that is impossible (truncated text), ``collective`` is None,
  bucket ``other_collective``, and attribution pairs the done with its start.
* ``copy-start``/``copy-done`` are async memory copies (HBM<->host/VMEM), not
  collectives: ``other_compute``.
* ``remat``: instruction or display name contains ``.remat`` (XLA remat pass:
  ``fusion.12.remat``, ``copy.3.remat2``) or ``tf_op`` has a
  ``rematted_computation`` scope (``jax.checkpoint``). ``checkpoint/`` alone is
  not remat (the forward pass of a checkpointed layer), as XProf agrees.
* ``phase``: ``transpose(jvp(`` -> backward, ``jvp(`` -> forward, an optimizer
  scope token (``optimizer``, ``optax``, ``adam*``, ``scale_by_*``,
  ``apply_gradients``, a bare ``update`` segment, ...) -> optimizer, else None.
  Optimizer math without such a scope (MaxText's Adam update shows as
  ``jit(train_step)/jit(main)/reduce_sum``) gets None.
* Collective kinds: sync ops -> role ``sync``; ``-start``/``-done`` ops and
  ``async-start``/``async-done`` wrappers -> ``start``/``done`` (an
  ``async-update`` counts as ``start``); an async wrapper whose ``calls=``
  target is plain compute (custom-call, fusion, copy) is ``other_compute``.
  collective-permute and collective-broadcast -> ``collective_permute``;
  send/recv -> ``send_recv`` (``host_transfer`` when
  ``is_host_transfer=true``); infeed/outfeed -> ``host_transfer``; these all
  land in ``other_collective``. Operand names (``%all-gather.276`` feeding a
  matmul) never decide anything.
* v5p ``megacore fusion`` ops carry no kind in their text and stay
  ``other_compute`` (TPU7x has no megacore). XProf's synthetic ``IDLE`` op is
  ``other_compute`` too: the ``idle`` bucket is computed by attribution from
  gaps, never returned here.
* ``reason`` quotes input only through ``_clip`` (short, printable ASCII,
  markup and ``|`` replaced), so it is safe to render.

Checked against XProf's own per-op table of a real v5p MaxText run by
``tools/check_golden.py`` (see tests/test_classify.py for the numbers).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from profanalyzer.vocab import BUCKETS, COLLECTIVE_BUCKETS, COLLECTIVE_KIND_BUCKET, COMPUTE_BUCKETS, MATMUL_BUCKETS, PHASES

__all__ = [
    "BUCKETS",
    "COLLECTIVE_BUCKETS",
    "MATMUL_BUCKETS",
    "COMPUTE_BUCKETS",
    "COLLECTIVES",
    "ROLES",
    "KERNELS",
    "PRECISIONS",
    "PHASES",
    "RULES",
    "OpClass",
    "Rule",
    "classify_op",
    "classify_columns",
    "ROLE_CODES",
    "classify_table",
    "async_pair_key",
    "async_done_operand",
]

# --------------------------------------------------------------------------
# Public vocabulary
# --------------------------------------------------------------------------
# Buckets, their kinds and the phases live in profanalyzer.vocab (one table).
COLLECTIVES: tuple[str, ...] = (
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "collective_permute",
    "send_recv",
    "host_transfer",
)
ROLES: tuple[str, ...] = ("start", "done", "sync", "offload_start", "offload_done")
KERNELS: tuple[str, ...] = ("splash", "flash", "ragged_paged_attention", "paged_attention", "megablox_gmm",
                            "quantized_matmul", "pallas")
#: Matmul precision: the MXU's input type (bf16, fp8, f32, int8); weight-only
#: quantized kernels say their weight and activation widths (w4a16: 4-bit
#: weights, bf16 activations, computed on the MXU in bf16).
PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "f32", "int8", "w8a16", "w4a16", "w4a8", "w8a8")
#: Parts of the attention bucket: the fused kernel itself, the layout ops that
#: feed it (under the kernel's scope), and attention computed from separate ops.
ATTENTION_PARTS: tuple[str, ...] = ("kernel", "layout", "unfused")

# collective kind -> bucket: vocab.COLLECTIVE_KIND_BUCKET
_KIND_BUCKET = COLLECTIVE_KIND_BUCKET


@dataclass(frozen=True)
class OpClass:
    bucket: str  # one of BUCKETS except "idle"
    collective: str | None  # one of COLLECTIVES or None
    role: str | None  # collectives only: one of ROLES
    remat: bool
    phase: str | None  # one of PHASES or None
    kernel: str | None  # one of KERNELS or None
    precision: str | None  # one of PRECISIONS or None (matmuls / attention)
    reason: str  # "[rule.name] why"
    attention_part: str | None = None  # one of ATTENTION_PARTS (attention bucket only)
    shape_flops: float | None = None  # 2*M*N*K from a matmul kernel's operand shapes


# --------------------------------------------------------------------------
# Rule tables. All regexes are precompiled. Matching is case-insensitive:
# tables applied per op (names, opcodes, categories, calls=, attributes) are
# written in lowercase and run on lowercased input (re.IGNORECASE costs ~10x
# on this hot path); tables applied once per distinct tf_op use re.I.
# --------------------------------------------------------------------------
_I = re.IGNORECASE

# Collective kinds, in match order (reduce-scatter before all-reduce, because
# "all-reduce-scatter" contains both). Matched against an opcode, a category,
# a `calls=%...` target or the start of an instruction name.
COLLECTIVE_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reduce_scatter", re.compile(r"^(?:all-)?reduce-scatter")),
    ("all_to_all", re.compile(r"^(?:ragged-)?all-to-all")),
    ("all_gather", re.compile(r"^all-gather")),
    ("all_reduce", re.compile(r"^all-reduce")),
    ("collective_permute", re.compile(r"^collective-(?:permute|broadcast)")),
    ("send_recv", re.compile(r"^(?:send|recv)(?:-done)?(?![a-z])")),
    ("host_transfer", re.compile(r"^(?:infeed|outfeed)(?![a-z])")),
)
# The same kinds as they appear inside names/calls in snake_case forms too
# (`calls=%all-reduce-scatter.7`, `%wrapped_all_gather`).
_KIND_IN_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reduce_scatter", re.compile(r"(?:all[-_])?reduce[-_]scatter")),
    ("all_to_all", re.compile(r"all[-_]to[-_]all")),
    ("all_gather", re.compile(r"all[-_]gather")),
    ("all_reduce", re.compile(r"all[-_]reduce")),
    ("collective_permute", re.compile(r"collective[-_](?:permute|broadcast)")),
)

# role from an opcode/category/name suffix
_ROLE_SUFFIX: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("done", re.compile(r"-done$")),
    ("start", re.compile(r"-start$")),
)

# XProf hlo_category strings that name a collective (besides the bare
# opcodes matched by COLLECTIVE_KINDS): fusion forms.
COLLECTIVE_FUSION_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reduce_scatter", re.compile(r"^(?:all-)?reduce-scatter fusion$")),
    ("all_gather", re.compile(r"^all-gather fusion$")),
    ("all_reduce", re.compile(r"^all-reduce fusion$")),
    ("all_to_all", re.compile(r"^all-to-all fusion$")),
)

# Async memory copies: not collectives.
_ASYNC_COPY = re.compile(r"^copy-(?:start|done)(?![a-z])")
# Host memory space in an HLO layout (`{3,2,1,0:T(8,128)S(5)}`): a copy that
# reads or writes such a buffer moves data between host memory and HBM.
_HOST_MEMORY_SPACE = re.compile(r":[^{}]*S\(5\)\}")
# Non-collective async pairs named by what they wrap (`slice-start`,
# `copy-done.3`, `dynamic-slice-start`, `fusion-start`).
_COMPUTE_ASYNC_NAME = re.compile(r"^(?:dynamic-)?(?:slice|copy|fusion|custom-call|call|update-slice|dynamic-update-slice)"
                                 r"-(?:start|done|update)(?![a-z])")
# SparseCore collective offload wrapper on the TensorCore:
# `reduce-scatter.543.cloned.1.call-start` / `...call-done`.
_OFFLOAD_CALL = re.compile(r"\.call-(start|done)$")
# Continuation fusion form of async collectives.
_ASYNC_COLLECTIVE_FUSION = re.compile(r"^async-collective-(start|done)(?![a-z])")
# Generic async wrappers (`async-start`, `async-done`, `async-update`).
_GENERIC_ASYNC = re.compile(r"^async-(start|done|update)(?![a-z])")
# `calls=%name` targets inside HLO text
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
# async wrappers around non-collective work
_ASYNC_COMPUTE_TARGET = re.compile(r"^(?:custom-call|fusion|copy|wrapped_|call|host|dynamic|.*_computation)")
_HOST_TRANSFER_ATTR = re.compile(r"is_host_transfer=true", _I)
# operand of an async-done that names its start (`%all-to-all-start.3`)
_START_OPERAND = re.compile(r"%([\w.\-]*(?:start|done)[\w.\-]*)")
# custom-call attributes that may carry a kernel name
_KERNEL_ATTR_KEYS = ("custom_call_target=", "backend_config=", "kernel_name=")

# Attention kernels (Pallas tpu_custom_call), in match order; matched against
# the display name, the instruction name, tf_op and the custom-call's
# attributes (target / backend_config), never against operand names.
ATTENTION_KERNELS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ragged_paged_attention", re.compile(r"ragged_paged_attention")),
    ("splash", re.compile(r"splash_(?:m[hgq]a|attention)")),
    ("flash", re.compile(r"flash_attention")),
)
# Any other kernel *named* like attention (paged_attention, mla_attention...)
_OTHER_ATTENTION_KERNEL_NAME = re.compile(r"attention|(?<![a-z])attn(?![a-z])")
# Quantized / low-bit matmul kernels (int8, int4, fp8, fp4 weights or
# activations): names, tf_op tokens or custom-call attributes.
_QUANT_MATMUL = re.compile(
    r"quantized_matmul|quant(?:ized)?_(?:dot|gemm|mm|linear)|(?<![a-z0-9])q(?:mm|gemm|matmul)(?![a-z])"
    r"|(?<![a-z0-9])w(?:4|8)a(?:4|8|16)(?![0-9])|(?:int8|int4|fp8|fp4)_(?:matmul|gemm|mm|dot)"
)
# A kernel whose name says it multiplies matrices (for the operand-type path).
_MATMUL_NAME = re.compile(r"matmul|gemm|(?<![a-z])(?:mm|dot)(?![a-z])")
# Element types of quantized weights / activations (narrow ints, fp8, fp4).
_LOWBIT_ARRAY = re.compile(r"(?<![A-Za-z0-9_])(s8|u8|s4|u4|f8e[0-9a-z]+|f4e[0-9a-z]+)\[([0-9,\s]*)\]")
_FLOAT_ARRAY = re.compile(r"(?<![A-Za-z0-9_])(bf16|f16|f32|f8e[0-9a-z]+|s8|u8)\[([0-9,\s]*)\]")
_BITS = {"s8": 8, "u8": 8, "s4": 4, "u4": 4}

# Megablox grouped matmul kernel names / scopes: `gmm`, `tgmm`, `gmm_v2-...`,
# `jit(gmm)`; "gmm" must be a whole token (letters/digits not adjacent).
_GMM = re.compile(r"(?<![a-z0-9])t?gmm(?:_v\d+)?(?![a-z0-9])")

# Attention name-stack scopes. Core tokens: everything under them is
# attention. Generic tokens: only matmul/softmax-like ops under them.
_ATTN_CORE_TOKEN = re.compile(
    r"^(?:attentionop(?:_\d+)?|attention_op\w*|apply_attention.*|.*dot_product_attention.*|sdpa\w*"
    r"|attention_core|core_attention|attn_core|mha_reference"
    r"|.*flash_attention.*|.*splash_attention.*|splash_m[hgq]a.*|.*paged_attention.*|attention_kernel.*)$",
    _I,
)
_ATTN_GENERIC_TOKEN = re.compile(r"attention|attn", _I)
# sub-scopes that are not the attention core (projections, rotary, norms)
_ATTN_EXCLUDED_TOKEN = re.compile(
    r"^(?:q|k|v|o|qk|kv|qkv|query|key|value|keys|values|queries|out|output|wq|wk|wv|wo|wqkv|wkv"
    r"|c_attn|c_proj|dense|linear|to_q|to_k|to_v|to_out"
    r"|\w*_proj|\w*_projection|\w*proj_\w*|\w*rotary\w*|\w*rope\w*|\w*norm\w*)$",
    _I,
)
# primitive (last name-stack token) of softmax-like pieces
_SOFTMAX_PRIMITIVE = re.compile(
    r"^(?:exp|exp2|log_softmax|softmax|logsumexp|reduce_max|reduce_sum|max|sub|div|stop_gradient)$", _I
)
_SOFTMAX_SCOPE = re.compile(r"softmax", _I)

# Matmul evidence
MATMUL_CATEGORIES = re.compile(r"^(?:convolution fusion|convolution|output fusion)$", _I)
MATMUL_OPCODES = re.compile(r"^(?:convolution|dot|ragged-dot|scaled-dot|sparse-dot)$")
_OUTPUT_FUSION_KIND = re.compile(r"\bkind=kOutput\b")

# Pallas / custom-call detection
_TPU_CUSTOM_CALL = re.compile(r'custom_call_target="?tpu_custom_call', _I)
_KERNELISH_CATEGORY = re.compile(r"^(?:custom-call|custom fusion)$", _I)
_PALLAS_TOKEN = re.compile(r"^pallas_call$", _I)

# remat tags
_REMAT_NAME = re.compile(r"\.remat\d*(?:\.|$)")
_REMAT_TF_OP = re.compile(r"(?:^|/)rematted_computation(?=$|[/:\[(])", _I)

# phase tags, in order
_BACKWARD = re.compile(r"transpose\(\s*jvp\(", _I)
_FORWARD = re.compile(r"(?<![a-z_])jvp\(", _I)
_OPTIMIZER_TOKEN = re.compile(
    r"^(?:optimizer\w*|optax\w*|opt_state|adam\w*|adamw|sgd|lamb|lion|adafactor|rmsprop|muon"
    r"|scale_by_\w+|apply_gradients?|apply_updates?|update|update_fn|clip_by_global_norm|global_norm)$",
    _I,
)

# HLO text parsing
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=,(){}\[\]]+)\s*=\s*")
_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_NAME_OPCODE = re.compile(r"^([a-z][a-z0-9\-]*?)(?:\.\d[\w.\-]*)?$")
_ARRAY = re.compile(
    r"(?<![A-Za-z0-9_])(pred|[su](?:2|4|8|16|32|64)|bf16|f16|f32|f64|c64|c128|f8e[0-9a-z]+|f[46]e[0-9a-z]+)"
    r"\[([0-9,<=?\s]*)\]"
)
# element types that can decide a matmul's precision (not s32/u32/pred/...)
_PREC_ARRAY = re.compile(r"(?<![A-Za-z0-9_])(bf16|f16|f32|f8e[0-9a-z]+|[su][248])\[([0-9,<=?\s]*)\]")
_TF_PARAMS = re.compile(r"\[[^\]]*\]")
_TF_SPLIT = re.compile(r"[/()\s:]+")

_INT8 = frozenset({"s8", "u8", "s4", "u4", "s2", "u2"})  # "int8" precision (narrow ints)

# Length caps: op names are untrusted; a multi-MB string must stay cheap.
_MAX_TEXT = 32768
_MAX_FIELD = 8192


# characters replaced in excerpts of untrusted strings quoted in `reason`
# (non-printable/non-ASCII, and markup/table metacharacters)
_UNSAFE = re.compile(r"[^\x20-\x7e]|[<>&\"`|\\]")
# Any name that could trigger a name-based rule (cheap pre-filter).
_NAME_HINT = re.compile(
    r"copy-|call-|async-|gmm|remat|atten|attn|splash|all-|reduce-|collective|send|recv|infeed|outfeed"
)


# --------------------------------------------------------------------------
# Parsing. Features of each field are memoized on that field alone: across a
# profile, categories, opcodes, tf_op stacks, names and dims strings repeat a
# lot even when whole ops do not.
# --------------------------------------------------------------------------
def _s(value: Any, cap: int = _MAX_FIELD) -> str:
    """Coerce anything (None, NaN, bytes, numbers) to a bounded str."""
    if value is None:
        return ""
    if isinstance(value, str):
        s = value
    elif isinstance(value, (bytes, bytearray)):
        s = bytes(value).decode("utf-8", "replace")
    elif isinstance(value, float) and math.isnan(value):
        return ""
    else:
        try:
            s = str(value)
        except Exception:  # pragma: no cover - pathological __str__
            return ""
    if len(s) > cap:
        s = s[:cap]
    return s.replace("\x00", "") if "\x00" in s else s


def _clip(s: str, n: int = 48) -> str:
    """A short, inert excerpt of an untrusted string for reasons: printable
    ASCII only, with markup and markdown-table characters replaced by '?'."""
    s = _UNSAFE.sub("?", s[: n + 1])
    return s if len(s) <= n else s[: n - 3] + "..."


def _kind_of(s: str) -> str | None:
    for kind, rx in COLLECTIVE_KINDS:
        if rx.match(s):
            return kind
    return None


def _kind_in(s: str) -> str | None:
    for kind, rx in _KIND_IN_TEXT:
        if rx.search(s):
            return kind
    return None


def _role_of(s: str, default: str = "sync") -> str:
    for role, rx in _ROLE_SUFFIX:
        if rx.search(s):
            return role
    return default


def _sendrecv_role(s: str) -> str:
    return "done" if s.lower().split(".", 1)[0].endswith("-done") else "start"


class _CatInfo(NamedTuple):
    norm: str
    coll_kind: str | None  # category names a collective
    coll_role: str
    coll_is_fusion: bool
    matmul: bool
    kernelish: bool  # custom-call / custom fusion
    async_copy: bool
    generic_async: str  # "start" | "done" | "" (category async-start/-done)


@lru_cache(maxsize=1024)
def _cat_info(category: str) -> _CatInfo:
    norm = " ".join(category.lower().split())
    kind, role, is_fusion = None, "sync", False
    for k, rx in COLLECTIVE_FUSION_CATEGORIES:
        if rx.match(norm):
            kind, is_fusion = k, True
            break
    if kind is None and norm:
        kind = _kind_of(norm)
        if kind == "send_recv":
            role = _sendrecv_role(norm)
        elif kind is not None:
            role = _role_of(norm)
    ga = _GENERIC_ASYNC.match(norm)
    return _CatInfo(
        norm=norm,
        coll_kind=kind,
        coll_role=role,
        coll_is_fusion=is_fusion,
        matmul=bool(norm and MATMUL_CATEGORIES.match(norm)),
        kernelish=bool(norm and _KERNELISH_CATEGORY.match(norm)),
        async_copy=bool(_ASYNC_COPY.match(norm)),
        generic_async=(ga.group(1).lower() if ga else ""),
    )


class _OpcInfo(NamedTuple):
    coll_kind: str | None
    coll_role: str
    matmul: bool
    async_copy: bool
    generic_async: str  # "start" | "done" | "update" | ""
    custom_call: bool


@lru_cache(maxsize=1024)
def _opc_info(opcode: str) -> _OpcInfo:
    kind = _kind_of(opcode) if opcode else None
    if kind == "send_recv":
        role = _sendrecv_role(opcode)
    elif kind == "host_transfer":
        role = "sync"
    else:
        role = _role_of(opcode)
    ga = _GENERIC_ASYNC.match(opcode)
    return _OpcInfo(
        coll_kind=kind,
        coll_role=role,
        matmul=bool(opcode and MATMUL_OPCODES.match(opcode)),
        async_copy=bool(_ASYNC_COPY.match(opcode)),
        generic_async=(ga.group(1).lower() if ga else ""),
        custom_call=opcode in ("custom-call", "custom-call-start"),
    )


class _NameInfo(NamedTuple):
    hint: bool  # anything below can be true
    async_copy: bool
    offload_role: str  # "offload_start" | "offload_done" | ""
    acf_role: str  # async-collective-start/-done: "start" | "done" | ""
    coll_kind: str | None  # name starts with a collective opcode
    coll_role: str
    kind_in: str | None  # a collective kind anywhere in the name
    gmm: bool
    attn_kernel: str | None  # splash / flash / ragged_paged_attention / pallas
    remat: bool


_EMPTY_NAME = _NameInfo(False, False, "", "", None, "sync", None, False, None, False)


_COLL_PREFIXES = ("all-", "reduce-scatter", "ragged-all", "collective-", "send", "recv", "infeed", "outfeed")
_KIND_WORDS = ("gather", "scatter", "reduce", "to-all", "to_all", "permute", "broadcast")


@lru_cache(maxsize=65536)
def _name_info(name: str) -> _NameInfo:
    low = name.lower()
    if not low or not _NAME_HINT.search(low):
        return _EMPTY_NAME
    off = _OFFLOAD_CALL.search(low) if ".call-" in low else None
    acf = _ASYNC_COLLECTIVE_FUSION.match(low) if low.startswith("async-collective-") else None
    kind = _kind_of(low) if low.startswith(_COLL_PREFIXES) else None
    stem = low.split(".", 1)[0]
    role = _sendrecv_role(stem) if kind == "send_recv" else _role_of(stem)
    attn = None
    if "att" in low or "splash" in low:
        for k, rx in ATTENTION_KERNELS:
            if rx.search(low):
                attn = k
                break
        if attn is None and _OTHER_ATTENTION_KERNEL_NAME.search(low):
            attn = "pallas"
    return _NameInfo(
        hint=True,
        async_copy=low.startswith("copy-") and bool(_ASYNC_COPY.match(low)),
        offload_role=(("offload_" + off.group(1)) if off else ""),
        acf_role=(acf.group(1) if acf else ""),
        coll_kind=kind,
        coll_role=role,
        kind_in=(_kind_in(low) if any(w in low for w in _KIND_WORDS) else None),
        gmm=("gmm" in low) and bool(_GMM.search(low)),
        attn_kernel=attn,
        remat=(".remat" in low) and bool(_REMAT_NAME.search(low)),
    )


class _TfInfo(NamedTuple):
    tokens: tuple[str, ...]
    attn_core: str  # first attention-core token, or ""
    attn_generic: str  # first generic attention token, or ""
    attn_excluded: bool  # a projection/rotary/norm token below the generic one
    attn_softmax: str  # softmax-like primitive/scope below the generic one, or ""
    attn_kernel: str | None  # attention kernel named in tf_op
    gmm_scope: bool
    pallas_last: bool  # last token is pallas_call
    phase: str | None
    remat: bool


_EMPTY_TF = _TfInfo((), "", "", False, "", None, False, False, None, False)


@lru_cache(maxsize=65536)
def _tf_info(tf_op: str) -> _TfInfo:
    if not tf_op.strip():
        return _EMPTY_TF
    stripped = _TF_PARAMS.sub("", tf_op)
    toks: list[str] = []
    for seg in _TF_SPLIT.split(stripped):
        if seg:
            toks.extend(t for t in seg.split(".") if t)
    tokens = tuple(toks)
    core, generic, first = "", "", -1
    for i, t in enumerate(tokens):
        if _ATTN_CORE_TOKEN.match(t):
            core = t
            break
        if first < 0 and _ATTN_GENERIC_TOKEN.search(t) and not _ATTN_EXCLUDED_TOKEN.match(t):
            first, generic = i, t
    excluded, softmax = False, ""
    if generic and not core:
        below = tokens[first + 1:]
        excluded = any(_ATTN_EXCLUDED_TOKEN.match(t) for t in below)
        if below and _SOFTMAX_PRIMITIVE.match(below[-1]):
            softmax = below[-1]
        elif any(_SOFTMAX_SCOPE.search(t) for t in below):
            softmax = "softmax"
    low = tf_op.lower()
    kernel = None
    for k, rx in ATTENTION_KERNELS:
        if rx.search(low):
            kernel = k
            break
    if _BACKWARD.search(tf_op):
        phase = "backward"
    elif _FORWARD.search(tf_op):
        phase = "forward"
    elif any(_OPTIMIZER_TOKEN.match(t) for t in tokens):
        phase = "optimizer"
    else:
        phase = None
    return _TfInfo(
        tokens=tokens,
        attn_core=core,
        attn_generic=generic,
        attn_excluded=excluded,
        attn_softmax=softmax,
        attn_kernel=kernel,
        gmm_scope=("gmm" in low) and any(_GMM.search(t.lower()) for t in tokens),
        pallas_last=bool(tokens and _PALLAS_TOKEN.match(tokens[-1])),
        phase=phase,
        remat=bool(_REMAT_TF_OP.search(tf_op)),
    )


@lru_cache(maxsize=65536)
def _dims(dims: str) -> tuple[int, int]:
    """'1,2048,<=16' -> (elements, number of dims larger than 1)."""
    elems, big = 1, 0
    for d in dims.split(","):
        d = d.strip().lstrip("<=").strip()
        if d.isdigit():
            n = int(d)
            elems *= n
            big += n > 1
    return elems, big


def _arrays(segment: str) -> list[tuple[str, str]]:
    """[(dtype, dims_str)] of every array type written in an HLO segment."""
    return _ARRAY.findall(segment) if segment else []


def _prec_arrays(segment: str) -> list[tuple[str, str]]:
    """Like _arrays, only the element types that can decide a precision."""
    return _PREC_ARRAY.findall(segment) if segment else []


class _Op:
    """One op's parsed identity; heavier features are computed lazily."""

    def __init__(self, text: str, display: str, category: str, tf_op: str, swl: str):
        self.text = text
        self.display = display.strip().lstrip("%")
        self.cat = _cat_info(category)
        self.tf = _tf_info(tf_op)
        self.tf_op = tf_op
        self.swl = swl
        self.head_end = -1  # end of "name = "
        self.op_end = -1  # position right after "opcode("
        name = opcode = ""
        m = _INSTR.match(text)
        if m:
            name = m.group(1)
            self.head_end = m.end()
            om = _OPCODE.search(text, m.end() - 1)
            if om:
                opcode = om.group(1)
                self.op_end = om.end()
        self.name = name or self.display
        self.opcode_from_text = bool(opcode)
        if not opcode:
            nm = _NAME_OPCODE.match(self.name.lower())
            if nm:
                opcode = nm.group(1)
        self.opcode = opcode
        self.opc = _opc_info(opcode)
        self.names = (self.name,) if self.name == self.display or not self.display else (self.name, self.display)
        self.nis = tuple(_name_info(n) for n in self.names)
        self._attrs: str | None = None

    @property
    def operand_text(self) -> str:
        """Text after ``opcode(``: operands and attributes ("" if not visible)."""
        return self.text[self.op_end:] if self.op_end >= 0 else ""

    @property
    def operands(self) -> str:
        """The operand list alone (up to the ``)`` that closes ``opcode(``)."""
        t = self.operand_text
        depth = 1
        for i, ch in enumerate(t):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    return t[:i]
        return t

    @property
    def output_text(self) -> str:
        """The output shape(s): from the HLO text, else shape_with_layout."""
        if self.head_end >= 0:
            end = self.op_end if self.op_end >= 0 else len(self.text)
            seg = self.text[self.head_end:end]
            if "[" in seg:
                return seg
        return self.swl

    @property
    def calls(self) -> str:
        """Lowercased target of ``calls=%...`` or ""."""
        i = self.text.find("calls=")
        if i < 0:
            return ""
        m = _CALLS.match(self.text, i)
        return m.group(1).lower() if m else ""

    @property
    def attrs(self) -> str:
        """Lowercased attribute tail of the text (custom_call_target=..., backend_config=...)."""
        if self._attrs is None:
            start = max(self.op_end, 0)
            hits = [i for i in (self.text.find(k, start) for k in _KERNEL_ATTR_KEYS) if i >= 0]
            self._attrs = self.text[min(hits):].lower() if hits else ""
        return self._attrs

    @property
    def is_kernel_op(self) -> bool:
        """A custom-call / Pallas call (the kernel itself, not a helper op).

        XLA stamps a kernel's ``tf_op`` (``.../pallas_call``) on the layout
        copies it inserts around the call too, so the ``pallas_call`` token
        only counts when the HLO text does not show the opcode.
        """
        if self.opc.custom_call or self.cat.kernelish:
            return True
        if self.opcode_from_text:
            return False
        return self.tf.pallas_last


# --------------------------------------------------------------------------
# Precision
# --------------------------------------------------------------------------
def _pick_precision(segment: str, allow_int: bool) -> str | None:
    if not segment:
        return None
    if "f8e" in segment and any(d.startswith("f8e") for d, _ in _PREC_ARRAY.findall(segment)):
        return "fp8"
    arrays = _prec_arrays(segment)
    if not arrays:
        return None
    dtypes = {d for d, _ in arrays}
    matrix = {d for d, dims in arrays if _dims(dims)[1] >= 2}
    for pool in (matrix, dtypes):
        if allow_int and pool & _INT8:
            return "int8"
        if "bf16" in pool:
            return "bf16"
        if "f16" in pool:
            return "f16"
        if "f32" in pool:
            return "f32"
    return None


def _matmul_precision(op: _Op, allow_int: bool = True) -> tuple[str | None, str]:
    """(precision, where) -- see the module docstring for the rule."""
    p = _pick_precision(op.operand_text, allow_int)
    if p:
        return p, "operands"
    if op.swl and "f8e" in op.swl.lower():
        return "fp8", "shape_with_layout"
    p = _pick_precision(op.output_text, allow_int)
    if p:
        return p, "output type"
    return None, "no element type"


def _matmul_bucket(precision: str | None) -> str:
    if precision == "fp8":
        return "matmul_fp8"
    if precision == "bf16":
        return "matmul_bf16"
    if precision == "int8":
        return "matmul_int8"
    return "matmul_other"


def _public_precision(p: str | None) -> str | None:
    return p if p in PRECISIONS else None


def _infer_kind_from_buffers(segment: str) -> tuple[str | None, str]:
    """Continuation fusion buffers: (shard, full, ...) -> kind.

    The first two arrays with more than 2 elements are the buffers (the
    scalar u32 sync flags and the s32[2] counter are skipped)."""
    bufs = []
    for d, dims in _arrays(segment):
        n = _dims(dims)[0]
        if dims.strip() and n > 2:
            bufs.append((d.lower(), n))
            if len(bufs) == 2:
                break
    if len(bufs) < 2 or bufs[0][0] != bufs[1][0]:
        return None, "buffers not visible"
    a, b = bufs[0][1], bufs[1][1]
    if b > a:
        return "all_gather", f"buffer grows x{b / a:g}"
    if b < a:
        return "reduce_scatter", f"buffer shrinks x{a / b:g}"
    return "all_reduce", "buffers equal"


class _V(NamedTuple):
    bucket: str
    collective: str | None = None
    role: str | None = None
    kernel: str | None = None
    precision: str | None = None
    reason: str = ""
    attention_part: str | None = None
    shape_flops: float | None = None


def _shape_dims(dims: str) -> tuple[int, ...]:
    return tuple(int(d) for d in (x.strip() for x in dims.split(",")) if d.isdigit())


def matmul_kernel_flops(operand_text: str, output_text: str) -> float | None:
    """2*M*N*K of a matmul kernel from its operand and output shapes.

    The activation is the largest float (bf16/f16/f32/fp8/int8) operand, the
    weight the largest other matrix operand (any element type, incl. 4-bit);
    with a 2-D weight [N, K] or [K, N] and the output [.., M, N]:
    activation elements x weight elements / output elements = K^2. Returns
    None unless K is a whole number that is one of the weight's dimensions
    and divides the activation (so scale tensors and odd layouts give None).
    """
    out = [_shape_dims(d) for _, d in _ARRAY.findall(output_text or "")]
    out = [o for o in out if o and math.prod(o) > 1]
    if len(out) != 1:
        return None
    arrays = [(t, _shape_dims(d)) for t, d in _ARRAY.findall(operand_text or "")]
    mats = [(t, d) for t, d in arrays if sum(x > 1 for x in d) >= 2]
    if len(mats) < 2:
        return None
    mats.sort(key=lambda a: -math.prod(a[1]))
    x_elems = o_elems = w = None
    o_elems = math.prod(out[0])
    for i, (t, d) in enumerate(mats):
        if t in ("bf16", "f16", "f32", "s8", "u8") or t.startswith("f8e"):
            x_elems = math.prod(d)
            rest = mats[:i] + mats[i + 1:]
            w = next((d2 for _, d2 in rest if len([x for x in d2 if x > 1]) == 2), None)
            break
    if x_elems is None or w is None or o_elems <= 0:
        return None
    w_dims = [x for x in w if x > 1]
    k2 = x_elems * math.prod(w_dims) / o_elems
    k = round(math.sqrt(k2))
    if k <= 0 or k * k != k2 or k not in w_dims or x_elems % k:
        return None
    return 2.0 * o_elems * k


def _collective(kind: str | None, role: str, reason: str) -> _V:
    return _V(_KIND_BUCKET.get(kind, "other_collective"), kind, role, None, None, reason)


# --------------------------------------------------------------------------
# Rules (ordered). Each returns a verdict or None.
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    match: Callable[[_Op], _V | None]


def _r_empty(op: _Op) -> _V | None:
    if not (op.text.strip() or op.display or op.cat.norm or op.tf.tokens):
        return _V("other_compute", reason="no op identity (empty strings)")
    return None


def _r_host_offload(op: _Op) -> _V | None:
    copy = op.opc.async_copy or op.cat.async_copy or any(ni.async_copy for ni in op.nis) or op.opcode == "copy"
    if not copy:
        generic = op.opc.generic_async or op.cat.generic_async
        copy = bool(generic) and (op.calls.startswith("copy") or any(_COMPUTE_ASYNC_NAME.match(n.lower()) for n in op.names))
    if copy and "S(5)" in op.text and _HOST_MEMORY_SPACE.search(op.text):
        what = op.opcode or op.cat.norm or op.name
        return _V("host_offload", reason=f"'{_clip(what)}' moves a host-memory buffer (memory space S(5)) to or from HBM")
    return None


def _r_async_copy(op: _Op) -> _V | None:
    if op.opc.async_copy or op.cat.async_copy or any(ni.async_copy for ni in op.nis):
        what = op.opcode if op.opc.async_copy else (op.cat.norm if op.cat.async_copy else op.name)
        return _V("other_compute", reason=f"async copy '{_clip(what)}' (HBM/VMEM DMA, not a collective)")
    return None


def _r_offload(op: _Op) -> _V | None:
    for n, ni in zip(op.names, op.nis):
        if ni.offload_role:
            kind = ni.coll_kind or ni.kind_in or _kind_in(op.calls)
            return _collective(kind, ni.offload_role,
                               f"SparseCore offload wrapper '{_clip(n)}' -> {kind or 'unknown kind'}")
    return None


def _r_async_collective_fusion(op: _Op) -> _V | None:
    for n, ni in zip(op.names, op.nis):
        role = ni.acf_role
        if not role:
            continue
        calls = op.calls
        kind = _kind_in(calls) if calls else None
        if kind:
            return _collective(kind, role, f"continuation fusion '{_clip(n)}', calls={_clip(calls, 32)} -> {kind}")
        kind, how = _infer_kind_from_buffers(op.output_text if role == "start" else op.operand_text)
        if kind:
            return _collective(kind, role, f"continuation fusion '{_clip(n)}', {how} -> {kind} (inferred)")
        return _collective(None, role, f"continuation fusion '{_clip(n)}', kind not in text ({how}); pair with start")
    return None


def _r_collective_opcode(op: _Op) -> _V | None:
    kind = op.opc.coll_kind
    if kind is None:
        return None
    role = op.opc.coll_role
    if kind == "send_recv" and _HOST_TRANSFER_ATTR.search(op.text):
        kind = "host_transfer"
    src = "" if op.opcode_from_text else " (from name)"
    return _collective(kind, role, f"opcode '{_clip(op.opcode)}'{src} -> {kind} ({role})")


def _r_collective_category(op: _Op) -> _V | None:
    c = op.cat
    if c.coll_kind is None:
        return None
    return _collective(c.coll_kind, c.coll_role, f"hlo_category '{_clip(c.norm)}' -> {c.coll_kind} ({c.coll_role})")


def _r_generic_async(op: _Op) -> _V | None:
    role = op.opc.generic_async or op.cat.generic_async
    if not role:
        return None
    src = op.opcode if op.opc.generic_async else op.cat.norm
    if role == "update":
        role = "start"
    kind, how = None, ""
    calls = op.calls
    if calls:
        kind = _kind_in(calls)
        how = f"calls={_clip(calls, 32)}"
        if kind is None and _ASYNC_COMPUTE_TARGET.match(calls):
            return _V("other_compute", reason=f"async wrapper '{_clip(src)}' around compute ({how})")
    if kind is None:
        for n, ni in zip(op.names, op.nis):
            if ni.kind_in:
                kind, how = ni.kind_in, f"name '{_clip(n)}'"
                break
    if kind is None and op.op_end >= 0:
        m = _START_OPERAND.search(op.text, op.op_end)
        if m:
            kind = _kind_in(m.group(1).lower())
            how = f"operand %{_clip(m.group(1), 32)}"
            if kind is None and _COMPUTE_ASYNC_NAME.match(m.group(1).lower()):
                return _V("other_compute", reason=f"async wrapper '{_clip(src)}' around compute ({how})")
    if kind is None:
        for n in op.names:
            if _COMPUTE_ASYNC_NAME.match(n.lower()):
                return _V("other_compute", reason=f"async wrapper '{_clip(src)}' around compute (name '{_clip(n)}')")
    if kind:
        return _collective(kind, role, f"async wrapper '{_clip(src)}', {how} -> {kind}")
    return _collective(None, role, f"async wrapper '{_clip(src)}', wrapped kind unknown")


def _r_collective_name(op: _Op) -> _V | None:
    # Opcode not visible in the text (none, or cut before it) and the name
    # starts with a collective opcode in a form the opcode parse missed
    # (`all-gather.clone`, `All-Reduce-Start`).
    if op.opcode_from_text:
        return None
    for n, ni in zip(op.names, op.nis):
        if ni.coll_kind:
            return _collective(ni.coll_kind, ni.coll_role,
                               f"instruction name '{_clip(n)}' -> {ni.coll_kind} ({ni.coll_role})")
    return None


def _attrs_kernel(op: _Op) -> str | None:
    attrs = op.attrs
    if attrs:
        for k, rx in ATTENTION_KERNELS:
            if rx.search(attrs):
                return k
    return None


def _r_attention_kernel(op: _Op) -> _V | None:
    if not op.is_kernel_op:
        return None
    hit = None
    for ni in op.nis:  # specific kernels by name first, then tf_op, then attributes
        if ni.attn_kernel and ni.attn_kernel != "pallas":
            hit = ni.attn_kernel, "name"
            break
    if hit is None and op.tf.attn_kernel:
        hit = op.tf.attn_kernel, "tf_op"
    if hit is None:
        k = _attrs_kernel(op)
        if k:
            hit = k, "custom-call attributes"
    if hit is None and any(ni.attn_kernel == "pallas" for ni in op.nis):
        hit = "pallas", "name"
    if hit is None:
        return None
    kernel, src = hit
    p, where = _matmul_precision(op, allow_int=False)
    return _V("attention", None, None, kernel, _public_precision(p),
              f"attention kernel ({kernel}) by {src}, {p or 'unknown'} from {where}", "kernel")


def _r_megablox(op: _Op) -> _V | None:
    by = ""
    for n, ni in zip(op.names, op.nis):
        if ni.gmm:
            by = f"name '{_clip(n)}'"
            break
    if not by and op.is_kernel_op:
        if op.tf.gmm_scope:
            by = "gmm/tgmm scope + kernel op"
        elif op.attrs and _GMM.search(op.attrs):
            by = "gmm kernel in custom-call attributes"
    if not by:
        return None
    p, where = _matmul_precision(op)
    bucket = _matmul_bucket(p)
    return _V(bucket, None, None, "megablox_gmm", _public_precision(p),
              f"Megablox grouped matmul by {by}, {p or 'unknown'} from {where} -> {bucket}")


def _quant_precision(op: _Op) -> tuple[str, str]:
    """(precision, bucket) of a quantized matmul kernel from its operands:
    the activation (the widest float or int8 matrix) sets the MXU precision,
    the narrowest matrix the weight width (w4a16: 4-bit weights, bf16 in)."""
    seg = op.operands or op.text
    arrays = [(t, d) for t, d in _ARRAY.findall(seg) if sum(x > 1 for x in _shape_dims(d)) >= 2]
    types = [t for t, _ in arrays]
    if "bf16" in types or "f16" in types:
        act: str | None = "bf16"
    elif any(t.startswith("f8e") for t in types):
        act = "fp8"
    elif any(t in _INT8 for t in types):
        act = "int8"
    else:
        act = "f32" if "f32" in types else None
    # f32 matrices next to narrower ones are scales, not weights.
    bits = [4 if t.startswith("f4e") else _BITS.get(t, 8 if t.startswith("f8e") else 16) for t in types if t != "f32"]
    wbits = min(bits) if bits else 16
    if act in ("bf16", "f32") and wbits < 16:
        prec, bucket = f"w{wbits}a16", "matmul_bf16"
    elif act == "fp8":
        prec, bucket = ("fp8" if wbits >= 8 else "w4a8"), "matmul_fp8"
    elif act == "int8":
        prec, bucket = ("w8a8" if wbits >= 8 else "w4a8"), "matmul_int8"
    else:
        prec, bucket = (act or "unknown"), _matmul_bucket(act)
    return prec, bucket


def _r_quantized_matmul(op: _Op) -> _V | None:
    if not op.is_kernel_op:
        return None
    by = ""
    for n in op.names:
        if _QUANT_MATMUL.search(n.lower()):
            by = f"name '{_clip(n)}'"
            break
    if not by and any(_QUANT_MATMUL.search(t.lower()) for t in op.tf.tokens):
        by = "tf_op scope"
    if not by and op.attrs and _QUANT_MATMUL.search(op.attrs):
        by = "custom-call attributes"
    if not by and any(_MATMUL_NAME.search(n.lower()) for n in op.names) and _LOWBIT_ARRAY.search(op.operand_text):
        by = "matmul kernel with low-bit operands"
    if not by:
        return None
    prec, bucket = _quant_precision(op)
    flops = matmul_kernel_flops(op.operands, op.output_text)
    how = "FLOPs 2*M*N*K from operand shapes" if flops else "FLOPs not derivable from the shapes"
    return _V(bucket, None, None, "quantized_matmul", prec,
              f"quantized matmul kernel by {by}, {prec} -> {bucket}; {how}", None, flops)


def _matmul_evidence(op: _Op) -> str:
    if op.cat.matmul:
        return f"hlo_category '{op.cat.norm}'"
    if op.opc.matmul:
        return f"opcode '{op.opcode}'"
    if not op.cat.norm and op.opcode == "fusion" and _OUTPUT_FUSION_KIND.search(op.text):
        return "kOutput fusion"
    return ""


def _r_attention_scope(op: _Op) -> _V | None:
    tf = op.tf
    if tf.attn_kernel and not op.is_kernel_op:
        # Under a fused kernel's own scope (`jit(ragged_paged_attention)/transpose`):
        # the transposes, reshapes, copies and masks that feed the kernel.
        return _V("attention", None, None, None, None,
                  f"layout/helper op feeding the fused {tf.attn_kernel} kernel (under its tf_op scope)", "layout")
    if tf.attn_core:
        p, _ = _matmul_precision(op, allow_int=False)
        return _V("attention", None, None, None, _public_precision(p),
                  f"tf_op inside attention core scope '{_clip(tf.attn_core, 40)}'", "unfused")
    if not tf.attn_generic or tf.attn_excluded:
        return None
    mm = _matmul_evidence(op)
    if not (mm or tf.attn_softmax):
        return None
    p, _ = _matmul_precision(op, allow_int=False)
    what = f"matmul ({mm})" if mm else f"softmax-like '{_clip(tf.attn_softmax, 24)}'"
    return _V("attention", None, None, None, _public_precision(p),
              f"{what} under attention scope '{_clip(tf.attn_generic, 40)}' (not a projection)", "unfused")


def _r_matmul(op: _Op) -> _V | None:
    why = _matmul_evidence(op)
    if not why:
        return None
    p, where = _matmul_precision(op)
    bucket = _matmul_bucket(p)
    if p == "int8" and where == "operands":  # int8 weights: bf16 activations make it w8a16 on a bf16 MXU
        p, bucket = _quant_precision(op)
    return _V(bucket, None, None, None, _public_precision(p), f"{why} + {p or 'unknown'} from {where} -> {bucket}")


def _r_pallas(op: _Op) -> _V | None:
    if (op.opc.custom_call and _TPU_CUSTOM_CALL.search(op.attrs)) or (
            not op.opcode_from_text and op.tf.pallas_last):
        return _V("other_compute", None, None, "pallas", None, "other Pallas kernel (tpu_custom_call)")
    return None


def _r_default(op: _Op) -> _V | None:
    what = f"hlo_category '{op.cat.norm}'" if op.cat.norm else (f"opcode '{op.opcode}'" if op.opcode else "op")
    return _V("other_compute", reason=f"{_clip(what, 60)}: no matmul/attention/collective evidence")


RULES: tuple[Rule, ...] = (
    Rule("empty", "No identity at all -> other_compute.", _r_empty),
    Rule("host_offload", "copy / copy-start / copy-done (or an async wrapper around a copy) of a host-memory "
         "buffer (layout memory space S(5)) -> host_offload.", _r_host_offload),
    Rule("async_copy", "copy-start/copy-done (opcode, category or name) -> other_compute.", _r_async_copy),
    Rule("collective.offload", "SparseCore offload wrapper `<kind>....call-start/-done` -> kind, offload role.",
         _r_offload),
    Rule("collective.async_fusion", "async-collective-start/-done continuation fusions; kind from calls= or "
         "buffer sizes.", _r_async_collective_fusion),
    Rule("collective.opcode", "Collective HLO opcode (sync, -start, -done, send/recv, infeed/outfeed).",
         _r_collective_opcode),
    Rule("collective.category", "XProf category naming a collective (incl. `all-reduce-scatter fusion`).",
         _r_collective_category),
    Rule("collective.async_wrapper", "async-start/-done/-update; kind from calls=, name or operand.",
         _r_generic_async),
    Rule("collective.name", "Opcode not in the text; instruction name starts with a collective opcode.",
         _r_collective_name),
    Rule("attention.kernel", "Pallas attention kernel (splash/flash/ragged paged) -> attention.",
         _r_attention_kernel),
    Rule("matmul.megablox", "Megablox gmm/tgmm kernel -> matmul by precision.", _r_megablox),
    Rule("matmul.quantized", "Quantized / low-bit matmul kernel (quantized_matmul, qmm, w8a8, w4a16, int8/fp8/fp4 "
         "operands) -> matmul bucket of its activation precision; FLOPs from operand shapes.", _r_quantized_matmul),
    Rule("attention.scope", "Op under an attention-core tf_op scope, or matmul/softmax under an attention "
         "scope outside projections -> attention.", _r_attention_scope),
    Rule("matmul", "convolution/output fusion category, dot/convolution opcode or kOutput fusion -> matmul "
         "by operand precision.", _r_matmul),
    Rule("pallas", "Other Pallas tpu_custom_call -> other_compute (kernel=pallas).", _r_pallas),
    Rule("default", "Everything else -> other_compute.", _r_default),
)


# --------------------------------------------------------------------------
# Tags
# --------------------------------------------------------------------------
def _remat(op: _Op) -> bool:
    return op.tf.remat or any(ni.remat for ni in op.nis)


def _phase(op: _Op) -> str | None:
    return op.tf.phase


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------
def classify_op(hlo_text: str, display_name: str = "", category: str = "", tf_op: str = "",
                shape_with_layout: str = "") -> OpClass:
    """Classify one op. Never raises on odd input; see the module docstring."""
    return _classify_cached(_s(hlo_text, _MAX_TEXT), _s(display_name), _s(category), _s(tf_op),
                            _s(shape_with_layout))


@lru_cache(maxsize=4096)
def _classify_cached(text: str, display: str, category: str, tf_op: str, swl: str) -> OpClass:
    return _classify(text, display, category, tf_op, swl)


def _classify(text: str, display: str, category: str, tf_op: str, swl: str) -> OpClass:
    op = _Op(text, display, category, tf_op, swl)
    verdict: _V | None = None
    rule_name = "default"
    for rule in RULES:
        try:
            verdict = rule.match(op)
        except Exception as exc:  # defensive: a rule bug must not kill an analysis
            verdict = None
            rule_name = f"{rule.name}!error:{type(exc).__name__}"
            continue
        if verdict is not None:
            rule_name = rule.name
            break
    if verdict is None:  # pragma: no cover - default always matches
        verdict = _V("other_compute", reason="no rule matched")
    try:
        remat = _remat(op)
        phase = _phase(op)
    except Exception:  # pragma: no cover - defensive
        remat, phase = False, None
    return OpClass(
        bucket=verdict.bucket,
        collective=verdict.collective,
        role=verdict.role,
        remat=remat,
        phase=phase,
        kernel=verdict.kernel,
        precision=verdict.precision,
        reason=f"[{rule_name}] {verdict.reason}",
        attention_part=verdict.attention_part,
        shape_flops=verdict.shape_flops,
    )


_PAIR_CALL = re.compile(r"^(?P<base>.+)\.call-(?P<role>start|done)$", _I)
_PAIR_SENDRECV = re.compile(r"^(?P<base>send|recv)(?P<done>-done)?(?P<suffix>(?:\.[\w\-]+)*)$", _I)
_PAIR_GENERIC = re.compile(r"^(?P<base>[\w.\-]*?[A-Za-z0-9_])-(?P<role>start|done)(?P<suffix>(?:\.[\w\-]+)*)$", _I)


def async_pair_key(display_name: str) -> tuple[str, str] | None:
    """Key that a start op and its done op share, and the op's role.

    ``all-gather-start.12`` / ``all-gather-done.12`` -> ``("all-gather-*.12", role)``;
    ``async-collective-start.5`` -> ``"async-collective-*.5"``;
    ``reduce-scatter.543.cloned.1.call-start`` / ``...call-done`` ->
    ``"reduce-scatter.543.cloned.1.call-*"``; ``send.1`` / ``send-done.1`` ->
    ``"send-*.1"``; ``copy-start.7`` -> ``"copy-*.7"``. The ``*`` marks the
    start/done slot, so a key never equals a real instruction name.
    Anything else (sync ops, ``-update``) -> None.
    """
    n = _s(display_name, 1024).strip().lstrip("%")
    if not n:
        return None
    m = _PAIR_CALL.match(n)
    if m:
        return f"{m.group('base')}.call-*", m.group("role").lower()
    m = _PAIR_SENDRECV.match(n)
    if m:
        return f"{m.group('base').lower()}-*{m.group('suffix')}", "done" if m.group("done") else "start"
    m = _PAIR_GENERIC.match(n)
    if m:
        return f"{m.group('base')}-*{m.group('suffix')}", m.group("role").lower()
    return None


_DONE_OPERAND = re.compile(r"%([\w.\-]*(?:-start|\.call-start)(?:\.[\w\-]+)*|(?:send|recv)(?:\.[\w\-]+)*)\b")


def async_done_operand(hlo_text: str) -> str | None:
    """For a done op's HLO text, the start op it consumes (``copy-done(... %copy-start.50)``
    -> ``"copy-start.50"``), else None. Lets attribution pair ops whose numbering drifted."""
    text = _s(hlo_text, _MAX_TEXT)
    op = _Op(text, "", "", "", "")
    if op.op_end < 0:
        return None
    m = _DONE_OPERAND.search(text, op.op_end)
    return m.group(1) if m else None


#: Integer codes of the async roles (0: none / not a collective half).
ROLE_CODES = {"start": 1, "done": 2, "sync": 3, "offload_start": 4, "offload_done": 5}

_OUT_COLUMNS = ("bucket", "collective", "role", "remat", "phase", "kernel", "precision", "reason", "attention_part",
                "shape_flops")
_IN_COLUMNS = ("hlo_text", "display_name", "category", "tf_op", "shape_with_layout")


def classify_columns(cols: Mapping[str, Sequence], n: int | None = None) -> dict[str, np.ndarray]:
    """Vectorised ``classify_op`` over columns (one row per op metadata).

    Input columns: hlo_text, display_name, category, tf_op, shape_with_layout
    (missing columns read as ""). Returns numpy arrays bucket, collective,
    role, remat (bool), phase, kernel, precision, reason (object arrays with
    None where classify_op says None). Each distinct input tuple is
    classified once.
    """
    if n is None:
        n = max((len(v) for v in cols.values()), default=0)
    inputs = [list(cols[c]) if c in cols else [""] * n for c in _IN_COLUMNS]
    cache: dict[tuple, OpClass] = {}
    results: list[OpClass] = []
    append = results.append
    for key in zip(*inputs):
        try:
            r = cache.get(key)
        except TypeError:  # an unhashable cell (list, dict): use the str forms
            key = tuple(_s(v) for v in key)
            r = cache.get(key)
        if r is None:
            r = cache[key] = classify_op(*key)
        append(r)
    out: dict[str, np.ndarray] = {}
    for c in _OUT_COLUMNS:
        col = np.empty(len(results), dtype=object)
        col[:] = [getattr(r, c) for r in results]
        out[c] = col
    out["remat"] = out["remat"].astype(bool)
    return out


def classify_table(df):
    """``classify_columns`` over a pandas DataFrame, returning a DataFrame
    with the same index (for notebooks; the analysis uses classify_columns)."""
    import pandas as pd

    out = classify_columns({c: df[c].tolist() for c in _IN_COLUMNS if c in df.columns}, n=len(df))
    return pd.DataFrame({c: pd.Series(v, dtype=bool if c == "remat" else object, index=df.index) for c, v in out.items()}, index=df.index)
