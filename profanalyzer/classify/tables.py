"""The classifier's named tables: its vocabulary (collective kinds, roles,
kernels, precisions, attention parts) and every precompiled regex the parse
and the rules match with (see the package docstring for the decisions)."""

from __future__ import annotations

import re

from profanalyzer.core.vocab import COLLECTIVE_KIND_BUCKET

# --------------------------------------------------------------------------
# Public vocabulary
# --------------------------------------------------------------------------
# Buckets, their kinds and the phases live in profanalyzer.core.vocab (one table).
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
                            "quantized_matmul", "pallas_matmul", "pallas")
#: Matmul precision: the MXU's input type (bf16, fp8, f32, int8); weight-only
#: quantized kernels say their weight and activation widths (w4a16: 4-bit
#: weights, bf16 activations, computed on the MXU in bf16).
PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "f32", "int8", "w8a16", "w4a16", "w4a8", "w8a8")
#: Parts of the attention bucket: the fused kernel itself, the layout ops that
#: feed it (under the kernel's scope), and attention computed from separate ops.
ATTENTION_PARTS: tuple[str, ...] = ("kernel", "layout", "unfused", "decode")  # decode: analyze.kvcache


# collective kind -> bucket: vocab.COLLECTIVE_KIND_BUCKET
KIND_BUCKET = COLLECTIVE_KIND_BUCKET


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
KIND_IN_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reduce_scatter", re.compile(r"(?:all[-_])?reduce[-_]scatter")),
    ("all_to_all", re.compile(r"all[-_]to[-_]all")),
    ("all_gather", re.compile(r"all[-_]gather")),
    ("all_reduce", re.compile(r"all[-_]reduce")),
    ("collective_permute", re.compile(r"collective[-_](?:permute|broadcast)")),
)


# role from an opcode/category/name suffix
ROLE_SUFFIX: tuple[tuple[str, re.Pattern[str]], ...] = (
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
ASYNC_COPY = re.compile(r"^copy-(?:start|done)(?![a-z])")
# Host memory space in an HLO layout (`{3,2,1,0:T(8,128)S(5)}`): a copy that
# reads or writes such a buffer moves data between host memory and HBM.
HOST_MEMORY_SPACE = re.compile(r":[^{}]*S\(5\)\}")
# Non-collective async pairs named by what they wrap (`slice-start`,
# `copy-done.3`, `dynamic-slice-start`, `fusion-start`).
COMPUTE_ASYNC_NAME = re.compile(r"^(?:dynamic-)?(?:slice|copy|fusion|custom-call|call|update-slice|dynamic-update-slice)"
                                 r"-(?:start|done|update)(?![a-z])")
# Async wrappers named after the compute they wrap (the name starts with a
# compute opcode: `gather_offload_async_start`, `copy.3.cloned.1.call-start`,
# `sparse-core-data-format-call.7.cloned.1.call-done`): not collectives.
COMPUTE_WRAPPER_NAME = re.compile(r"^(?:gather|scatter|copy|fusion|custom-call|sparse-core-data-format|slice|dynamic-slice"
                                  r"|dynamic-update-slice|transpose|sort|convert|pad|concatenate|reduce(?![-_]scatter))"
                                  r"(?=[._\-]|$)")
# A collective-permute emitted for a dot (the name stack's last primitive):
# a hop of a collective matmul's ring (windowed einsum).
MATMUL_PRIMITIVE = re.compile(r"^(?:dot_general|dot|einsum|matmul)$", _I)
# What a ring hop sends, when it passes a buffer along unchanged (a
# loop-carried shard, the previous hop's result): an all-gather ring; a
# computed value (partial sums) makes it a reduce-scatter ring.
RING_PASSTHROUGH = re.compile(r"^(?:[\w.\-]*param[\w.\-]*|get-tuple-element[\w.\-]*|collective-permute-done[\w.\-]*)$")
RING_OPERAND = re.compile(r"%([\w.\-]+)")
# SparseCore collective offload wrapper on the TensorCore:
# `reduce-scatter.543.cloned.1.call-start` / `...call-done`.
OFFLOAD_CALL = re.compile(r"\.call-(start|done)$")
# The PrepareAsyncCallStart / -Done custom calls that set up an offloaded call are named after it.
PREPARE_PREFIX = re.compile(r"^prepare_(?:start|done)_")
# Continuation fusion form of async collectives.
ASYNC_COLLECTIVE_FUSION = re.compile(r"^async-collective-(start|done)(?![a-z])")
# Generic async wrappers (`async-start`, `async-done`, `async-update`).
GENERIC_ASYNC = re.compile(r"^async-(start|done|update)(?![a-z])")
# `calls=%name` targets inside HLO text
CALLS = re.compile(r"calls=%?([\w.\-]+)")
# async wrappers around non-collective work
ASYNC_COMPUTE_TARGET = re.compile(r"^(?:custom-call|fusion|copy|wrapped_|call|host|dynamic|.*_computation)")
HOST_TRANSFER_ATTR = re.compile(r"is_host_transfer=true", _I)
# operand of an async-done that names its start (`%all-to-all-start.3`)
START_OPERAND = re.compile(r"%([\w.\-]*(?:start|done)[\w.\-]*)")
# custom-call attributes that may carry a kernel name
KERNEL_ATTR_KEYS = ("custom_call_target=", "backend_config=", "kernel_name=")


# Attention kernels (Pallas tpu_custom_call), in match order; matched against
# the display name, the instruction name, tf_op and the custom-call's
# attributes (target / backend_config), never against operand names.
ATTENTION_KERNELS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ragged_paged_attention", re.compile(r"ragged_paged_attention")),
    ("splash", re.compile(r"splash_(?:m[hgq]a|attention)")),
    ("flash", re.compile(r"flash_attention")),
)
# Any other kernel *named* like attention (paged_attention, mla_attention...)
OTHER_ATTENTION_KERNEL_NAME = re.compile(r"attention|(?<![a-z])attn(?![a-z])")
# Quantized / low-bit matmul kernels (int8, int4, fp8, fp4 weights or
# activations): names, tf_op tokens or custom-call attributes.
QUANT_MATMUL = re.compile(
    r"quantized_matmul|quant(?:ized)?_(?:dot|gemm|mm|linear)|(?<![a-z0-9])q(?:mm|gemm|matmul)(?![a-z])"
    r"|(?<![a-z0-9])w(?:4|8)a(?:4|8|16)(?![0-9])|(?:int8|int4|fp8|fp4)_(?:matmul|gemm|mm|dot)"
)
# A kernel whose name says it multiplies matrices (for the operand-type path).
MATMUL_NAME = re.compile(r"matmul|gemm|(?<![a-z])(?:mm|dot)(?![a-z])")
# Element types of quantized weights / activations (narrow ints, fp8, fp4).
LOWBIT_ARRAY = re.compile(r"(?<![A-Za-z0-9_])(s8|u8|s4|u4|f8e[0-9a-z]+|f4e[0-9a-z]+)\[([0-9,\s]*)\]")
_FLOAT_ARRAY = re.compile(r"(?<![A-Za-z0-9_])(bf16|f16|f32|f8e[0-9a-z]+|s8|u8)\[([0-9,\s]*)\]")
BITS = {"s8": 8, "u8": 8, "s4": 4, "u4": 4}

# Attention-kernel block parameters in a kernel's `xprof_metadata` JSON
# (splash: block_q / block_kv / block_kv_compute): a kernel tiled over query
# and key/value blocks is an attention kernel whatever it is called.
ATTENTION_METADATA = (re.compile(r"(?<![a-z_])block_q(?![a-z])", _I), re.compile(r"(?<![a-z_])block_kv", _I))

# Megablox grouped matmul kernel names / scopes: `gmm`, `tgmm`, `gmm_v2-...`,
# `jit(gmm)`; "gmm" must be a whole token (letters/digits not adjacent).
GMM = re.compile(r"(?<![a-z0-9])t?gmm(?:_v\d+)?(?![a-z0-9])")


# Attention name-stack scopes. Core tokens: everything under them is
# attention. Generic tokens: only matmul/softmax-like ops under them.
ATTN_CORE_TOKEN = re.compile(
    r"^(?:attentionop(?:_\d+)?|attention_op\w*|apply_attention.*|.*dot_product_attention.*|sdpa\w*"
    r"|attention_core|core_attention|attn_core|mha_reference"
    r"|.*flash_attention.*|.*splash_attention.*|splash_m[hgq]a.*|.*paged_attention.*|attention_kernel.*)$",
    _I,
)
ATTN_GENERIC_TOKEN = re.compile(r"attention|attn", _I)
# sub-scopes that are not the attention core (projections, rotary, norms)
ATTN_EXCLUDED_TOKEN = re.compile(
    r"^(?:q|k|v|o|qk|kv|qkv|query|key|value|keys|values|queries|out|output|wq|wk|wv|wo|wqkv|wkv"
    r"|c_attn|c_proj|dense|linear|to_q|to_k|to_v|to_out"
    r"|\w*_proj|\w*_projection|\w*proj_\w*|\w*rotary\w*|\w*rope\w*|\w*norm\w*)$",
    _I,
)
# primitive (last name-stack token) of softmax-like pieces
SOFTMAX_PRIMITIVE = re.compile(
    r"^(?:exp|exp2|log_softmax|softmax|logsumexp|reduce_max|reduce_sum|max|sub|div|stop_gradient)$", _I
)
SOFTMAX_SCOPE = re.compile(r"softmax", _I)


# Matmul evidence
MATMUL_CATEGORIES = re.compile(r"^(?:convolution fusion|convolution|output fusion)$", _I)
MATMUL_OPCODES = re.compile(r"^(?:convolution|dot|ragged-dot|scaled-dot|sparse-dot)$")
OUTPUT_FUSION_KIND = re.compile(r"\bkind=kOutput\b")


# Pallas / custom-call detection
TPU_CUSTOM_CALL = re.compile(r'custom_call_target="?tpu_custom_call', _I)
KERNELISH_CATEGORY = re.compile(r"^(?:custom-call|custom fusion)$", _I)
PALLAS_TOKEN = re.compile(r"^pallas_call$", _I)


# remat tags
REMAT_NAME = re.compile(r"\.remat\d*(?:\.|$)")
REMAT_TF_OP = re.compile(r"(?:^|/)rematted_computation(?=$|[/:\[(])", _I)


# phase tags, in order
BACKWARD = re.compile(r"transpose\(\s*jvp\(", _I)
FORWARD = re.compile(r"(?<![a-z_])jvp\(", _I)
OPTIMIZER_TOKEN = re.compile(
    r"^(?:optimizer\w*|optax\w*|opt_state|adam\w*|adamw|sgd|lamb|lion|adafactor|rmsprop|muon"
    r"|scale_by_\w+|apply_gradients?|apply_updates?|update|update_fn|clip_by_global_norm|global_norm)$",
    _I,
)


# HLO text parsing
INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=,(){}\[\]]+)\s*=\s*")
OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
NAME_OPCODE = re.compile(r"^([a-z][a-z0-9\-]*?)(?:\.\d[\w.\-]*)?$")
ARRAY = re.compile(
    r"(?<![A-Za-z0-9_])(pred|[su](?:2|4|8|16|32|64)|bf16|f16|f32|f64|c64|c128|f8e[0-9a-z]+|f[46]e[0-9a-z]+)"
    r"\[([0-9,<=?\s]*)\]"
)
# element types that can decide a matmul's precision (not s32/u32/pred/...)
PREC_ARRAY = re.compile(r"(?<![A-Za-z0-9_])(bf16|f16|f32|f8e[0-9a-z]+|[su][248])\[([0-9,<=?\s]*)\]")
TF_PARAMS = re.compile(r"\[[^\]]*\]")
TF_SPLIT = re.compile(r"[/()\s:]+")
#: TF_SPLIT's separators and '.': what splits a name stack into its tokens
#: (its segments, each split on '.'; tests/test_classify_features.py).
TF_TOKEN_SPLIT = re.compile(r"[/()\s:.]+")

INT8 = frozenset({"s8", "u8", "s4", "u4", "s2", "u2"})  # "int8" precision (narrow ints)


# Length caps: op names are untrusted; a multi-MB string must stay cheap.
MAX_TEXT = 32768
MAX_FIELD = 8192


# characters replaced in excerpts of untrusted strings quoted in `reason`
# (non-printable/non-ASCII, and markup/table metacharacters)
UNSAFE = re.compile(r"[^\x20-\x7e]|[<>&\"`|\\]")
# Any name that could trigger a name-based rule (cheap pre-filter).
NAME_HINT = re.compile(
    r"copy-|call-|async-|gmm|remat|atten|attn|splash|all-|reduce-|collective|send|recv|infeed|outfeed"
)


PAIR_CALL = re.compile(r"^(?P<base>.+)\.call-(?P<role>start|done)$", _I)
PAIR_SENDRECV = re.compile(r"^(?P<base>send|recv)(?P<done>-done)?(?P<suffix>(?:\.[\w\-]+)*)$", _I)
PAIR_GENERIC = re.compile(r"^(?P<base>[\w.\-]*?[A-Za-z0-9_])-(?P<role>start|done)(?P<suffix>(?:\.[\w\-]+)*)$", _I)


DONE_OPERAND = re.compile(r"%([\w.\-]*(?:-start|\.call-start)(?:\.[\w\-]+)*|(?:send|recv)(?:\.[\w\-]+)*)\b")

