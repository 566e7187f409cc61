"""The name stack (`tf_op`) as classification reads it: its tokens, what each
token says (`TokenInfo`), what the whole stack says (`TfOpInfo`), and the
part of it the rules read (`rules_view`), by which ops form one family."""

from __future__ import annotations

from typing import NamedTuple

from profanalyzer.classify.tables import (
    ATTENTION_KERNELS,
    ATTN_CORE_TOKEN,
    ATTN_EXCLUDED_TOKEN,
    ATTN_GENERIC_TOKEN,
    BACKWARD,
    FORWARD,
    GMM,
    MATMUL_NAME,
    OPTIMIZER_TOKEN,
    PALLAS_TOKEN,
    QUANT_MATMUL,
    REMAT_TF_OP,
    SOFTMAX_PRIMITIVE,
    SOFTMAX_SCOPE,
    TF_PARAMS,
    TF_TOKEN_SPLIT,
)

__all__ = ["TfOpInfo", "TokenInfo", "kernel_word", "rules_view", "tf_op_info", "token_info"]


def kernel_word(text: str) -> str | None:
    """The matmul family a kernel's name, scope token or metadata names:
    megablox_gmm (gmm/tgmm), quantized_matmul (quantized / low-bit names),
    pallas_matmul (any other matmul/gemm/mm/dot word), else None."""
    low = text.lower()
    if "gmm" in low and GMM.search(low):
        return "megablox_gmm"
    if QUANT_MATMUL.search(low):
        return "quantized_matmul"
    if MATMUL_NAME.search(low):
        return "pallas_matmul"
    return None


class TfOpInfo(NamedTuple):
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
    kernel_token: str = ""  # first token naming a matmul kernel family (`kernel_word`; not pallas_call), or ""


_EMPTY_TF = TfOpInfo((), "", "", False, "", None, False, False, None, False, "")


class TokenInfo(NamedTuple):
    """What the tf_op rules read of one name-stack token."""

    attn_core: bool  # an attention-core scope
    attn_generic: bool  # a generic attention scope (not a projection/rotary/norm one)
    attn_excluded: bool  # a projection/rotary/norm scope
    softmax_scope: bool
    optimizer: bool
    gmm: bool
    kernel: bool  # names a matmul kernel family (`kernel_word`), pallas_call itself aside


def token_info(t: str) -> TokenInfo:
    excluded = bool(ATTN_EXCLUDED_TOKEN.match(t))
    low = t.lower()
    return TokenInfo(bool(ATTN_CORE_TOKEN.match(t)), bool(ATTN_GENERIC_TOKEN.search(t)) and not excluded, excluded,
                     bool(SOFTMAX_SCOPE.search(t)), bool(OPTIMIZER_TOKEN.match(t)), bool(GMM.search(low)),
                     low != "pallas_call" and kernel_word(t) is not None)


def tf_op_info(tf_op: str, known: dict[str, TokenInfo] | None = None) -> TfOpInfo:
    """The features of a tf_op name stack; `known`: token -> its `token_info`,
    filled as tokens are met (`Features.tokens`: each distinct token's once per run)."""
    if not tf_op.strip():
        return _EMPTY_TF
    # the name stack's segments (split on TF_SPLIT), each split on '.': one split on both
    tokens = tuple(filter(None, TF_TOKEN_SPLIT.split(TF_PARAMS.sub("", tf_op))))
    if known is None:
        infos = [token_info(t) for t in tokens]
    else:
        infos = [known.get(t) or known.setdefault(t, token_info(t)) for t in tokens]
    core, generic, first = "", "", -1
    for i, ti in enumerate(infos):
        if ti.attn_core:
            core = tokens[i]
            break
        if first < 0 and ti.attn_generic:
            first, generic = i, tokens[i]
    excluded, softmax = False, ""
    if generic and not core:
        below = tokens[first + 1:]
        excluded = any(ti.attn_excluded for ti in infos[first + 1:])
        if below and SOFTMAX_PRIMITIVE.match(below[-1]):
            softmax = below[-1]
        elif any(ti.softmax_scope for ti in infos[first + 1:]):
            softmax = "softmax"
    low = tf_op.lower()
    kernel = None
    for k, rx in ATTENTION_KERNELS:
        if rx.search(low):
            kernel = k
            break
    if BACKWARD.search(tf_op):
        phase = "backward"
    elif FORWARD.search(tf_op):
        phase = "forward"
    elif any(ti.optimizer for ti in infos):
        phase = "optimizer"
    else:
        phase = None
    return TfOpInfo(
        tokens=tokens,
        attn_core=core,
        attn_generic=generic,
        attn_excluded=excluded,
        attn_softmax=softmax,
        attn_kernel=kernel,
        gmm_scope=("gmm" in low) and any(ti.gmm for ti in infos),
        pallas_last=bool(tokens and PALLAS_TOKEN.match(tokens[-1])),
        phase=phase,
        remat=bool(REMAT_TF_OP.search(tf_op)),
        kernel_token=next((tokens[i] for i, ti in enumerate(infos) if ti.kernel), ""),
    )


def rules_view(info: TfOpInfo) -> TfOpInfo:
    """What the classification rules read of a name stack: `info` with its
    tokens cut to the last. The rules read the tokens only so: whether there
    are any (`_r_empty`) and the last (`_r_collective`: a collective-permute
    under a dot); everything else they read is a field `tf_op_info` derived
    from all of them (`kernel_token` for `_r_matmul_kernel`, the attention,
    phase and remat fields). Two name stacks with one view get one verdict,
    which lets the ops of layers unrolled with their own scopes
    (`layers_3/...`, `layers_4/...`) form one family (`classify.classify_codes`;
    tests/test_classify_numbers.py checks the verdicts on the full stacks)."""
    return info._replace(tokens=info.tokens[-1:])
