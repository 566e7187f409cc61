"""The ordered classification rules: each takes a parsed `Op` and returns a
`Verdict` or None; `RULES` is the order they are tried in.

A reason quotes the op's own strings only through `Op.quote` (short, inert,
and noted when it holds an instruction number); everything else a rule
decides from must not depend on instruction numbers (what lets one
classification stand for a whole op family; tests/test_classify_numbers.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from profanalyzer.classify.parse import (
    Op,
    array_bytes,
    braced_attr,
    elementwise_shapes,
    infer_kind_from_buffers,
    kernel_operand_shapes,
    kind_in_text,
    matmul_bucket,
    matmul_kernel_flops,
    matmul_precision,
    operand_arrays,
    public_precision,
    shape_dims,
)
from profanalyzer.classify.stack import kernel_word
from profanalyzer.classify.tables import (
    ARRAY,
    ASYNC_COMPUTE_TARGET,
    ATTENTION_KERNELS,
    ATTENTION_METADATA,
    BITS,
    COMPUTE_ASYNC_NAME,
    COMPUTE_WRAPPER_NAME,
    HOST_MEMORY_SPACE,
    HOST_TRANSFER_ATTR,
    INT8,
    KIND_BUCKET,
    LOWBIT_ARRAY,
    MATMUL_PRIMITIVE,
    OUTPUT_FUSION_KIND,
    PREPARE_PREFIX,
    RING_OPERAND,
    RING_PASSTHROUGH,
    START_OPERAND,
    TPU_CUSTOM_CALL,
)


class Verdict(NamedTuple):
    bucket: str
    collective: str | None = None
    role: str | None = None
    kernel: str | None = None
    precision: str | None = None
    reason: str = ""
    attention_part: str | None = None
    shape_flops: float | None = None
    #: a matmul kernel's operands read once and outputs written once, from the shapes its text prints
    shape_bytes: float | None = None


def _collective(kind: str | None, role: str, reason: str) -> Verdict:
    return Verdict(KIND_BUCKET.get(kind, "other_collective"), kind, role, None, None, reason)


# --------------------------------------------------------------------------
# Rules (ordered). Each returns a verdict or None.
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    match: Callable[[Op], Verdict | None]


def _r_empty(op: Op) -> Verdict | None:
    if not (op.text.strip() or op.display or op.cat.norm or op.tf.tokens):
        return Verdict("other_compute", reason="no op identity (empty strings)")
    return None


def _r_host_offload(op: Op) -> Verdict | None:
    copy = op.is_async_copy or op.opcode == "copy"
    if not copy:
        generic = op.opc.generic_async or op.cat.generic_async
        copy = bool(generic) and (op.calls.startswith("copy") or any(COMPUTE_ASYNC_NAME.match(n.lower()) for n in op.names))
    if copy and "S(5)" in op.text and HOST_MEMORY_SPACE.search(op.text):
        what = op.opcode or op.cat.norm or op.name
        return Verdict("host_offload", reason=f"'{op.quote(what)}' moves a host-memory buffer (memory space S(5)) to or from HBM")
    return None


def _r_async_copy(op: Op) -> Verdict | None:
    if op.is_async_copy:
        what = op.opcode if op.opc.async_copy else (op.cat.norm if op.cat.async_copy else op.name)
        return Verdict("other_compute", reason=f"async copy '{op.quote(what)}' (HBM/VMEM DMA, not a collective)")
    return None


def _r_offload(op: Op) -> Verdict | None:
    for n, ni in zip(op.names, op.nis, strict=True):
        if ni.offload_role:
            kind = ni.coll_kind or ni.kind_in or kind_in_text(op.calls)
            # `prepare_start_X` / `prepare_done_X`: the TensorCore's set-up of the offloaded call X
            if kind is None and COMPUTE_WRAPPER_NAME.match(PREPARE_PREFIX.sub("", n.lower())):
                return Verdict("other_compute", reason=f"SparseCore offload of compute '{op.quote(n)}' (not a collective)")
            return _collective(kind, ni.offload_role,
                               f"SparseCore offload wrapper '{op.quote(n)}' -> {kind or 'unknown kind'}")
    return None


def _r_async_collective_fusion(op: Op) -> Verdict | None:
    for n, ni in zip(op.names, op.nis, strict=True):
        role = ni.acf_role
        if not role:
            continue
        calls = op.calls
        kind = kind_in_text(calls) if calls else None
        if kind:
            return _collective(kind, role, f"continuation fusion '{op.quote(n)}', calls={op.quote(calls, 32)} -> {kind}")
        kind, how = infer_kind_from_buffers(op.output_text if role == "start" else op.operand_text, op.features)
        if kind:
            return _collective(kind, role, f"continuation fusion '{op.quote(n)}', {how} -> {kind} (inferred)")
        return _collective(None, role, f"continuation fusion '{op.quote(n)}', kind not in text ({how}); pair with start")
    return None


def _r_collective_opcode(op: Op) -> Verdict | None:
    kind = op.opc.coll_kind
    if kind is None:
        return None
    role = op.opc.coll_role
    if kind == "send_recv" and HOST_TRANSFER_ATTR.search(op.text):
        kind = "host_transfer"
    src = "" if op.opcode_from_text else " (from name)"
    if kind == "collective_permute" and op.tf.tokens and MATMUL_PRIMITIVE.match(op.tf.tokens[-1]):
        return _matmul_ring(op, role)
    return _collective(kind, role, f"opcode '{op.quote(op.opcode)}'{src} -> {kind} ({role})")


def _matmul_ring(op: Op, role: str) -> Verdict:
    """A collective-permute emitted for a dot: a hop of a collective
    matmul's ring, the all-gather or reduce-scatter of its sharded operand.
    In the forward pass it gathers (FSDP weights); otherwise a hop that
    passes a buffer along unchanged gathers, one that sends a computed value
    (partial sums) reduce-scatters. A done's text shows neither: it takes its
    start's kind (attribution pairs them)."""
    if role == "done":
        return Verdict("other_collective", None, role, None, None,
                       f"'{op.quote(op.opcode)}' of a collective-matmul ring (dot scope); kind from its start")
    if op.tf.phase == "forward":
        kind, why = "all_gather", "forward pass"
    else:
        m = RING_OPERAND.search(op.operands)
        sent = m.group(1).lower() if m else ""
        if sent and RING_PASSTHROUGH.match(sent):
            kind, why = "all_gather", f"passes %{op.quote(sent, 32)} along unchanged"
        elif sent:
            kind, why = "reduce_scatter", f"sends the computed %{op.quote(sent, 32)}"
        else:
            return Verdict("other_collective", "collective_permute", role, None, None,
                           f"'{op.quote(op.opcode)}' of a collective-matmul ring, operand not visible")
    return _collective(kind, role, f"'{op.quote(op.opcode)}' under a dot scope: a collective-matmul ring hop ({why}) -> {kind}")


def _r_collective_category(op: Op) -> Verdict | None:
    c = op.cat
    if c.coll_kind is None:
        return None
    return _collective(c.coll_kind, c.coll_role, f"hlo_category '{op.quote(c.norm)}' -> {c.coll_kind} ({c.coll_role})")


def _r_generic_async(op: Op) -> Verdict | None:
    role = op.opc.generic_async or op.cat.generic_async
    if not role:
        return None
    src = op.opcode if op.opc.generic_async else op.cat.norm
    if role == "update":
        role = "start"
    kind, how = None, ""
    calls = op.calls
    if calls:
        kind = kind_in_text(calls)
        how = f"calls={op.quote(calls, 32)}"
        if kind is None and ASYNC_COMPUTE_TARGET.match(calls):
            return Verdict("other_compute", reason=f"async wrapper '{op.quote(src)}' around compute ({how})")
    if kind is None:
        for n, ni in zip(op.names, op.nis, strict=True):
            if ni.kind_in:
                kind, how = ni.kind_in, f"name '{op.quote(n)}'"
                break
    if kind is None and op.op_end >= 0:
        m = START_OPERAND.search(op.text, op.op_end)
        if m:
            kind = kind_in_text(m.group(1).lower())
            how = f"operand %{op.quote(m.group(1), 32)}"
            if kind is None and COMPUTE_ASYNC_NAME.match(m.group(1).lower()):
                return Verdict("other_compute", reason=f"async wrapper '{op.quote(src)}' around compute ({how})")
    if kind is None:
        for n in op.names:
            if COMPUTE_ASYNC_NAME.match(n.lower()) or COMPUTE_WRAPPER_NAME.match(n.lower()):
                return Verdict("other_compute", reason=f"async wrapper '{op.quote(src)}' around compute (name '{op.quote(n)}')")
    if kind:
        return _collective(kind, role, f"async wrapper '{op.quote(src)}', {how} -> {kind}")
    return _collective(None, role, f"async wrapper '{op.quote(src)}', wrapped kind unknown")


def _r_collective_name(op: Op) -> Verdict | None:
    # Opcode not visible in the text (none, or cut before it) and the name
    # starts with a collective opcode in a form the opcode parse missed
    # (`all-gather.clone`, `All-Reduce-Start`).
    if op.opcode_from_text:
        return None
    for n, ni in zip(op.names, op.nis, strict=True):
        if ni.coll_kind:
            return _collective(ni.coll_kind, ni.coll_role,
                               f"instruction name '{op.quote(n)}' -> {ni.coll_kind} ({ni.coll_role})")
    return None


def _attrs_kernel(op: Op) -> str | None:
    attrs = op.attrs
    if attrs:
        for k, rx in ATTENTION_KERNELS:
            if rx.search(attrs):
                return k
    return None


def _r_attention_kernel(op: Op) -> Verdict | None:
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
        meta = braced_attr(op.text, "kernel_metadata")
        if meta and all(rx.search(meta) for rx in ATTENTION_METADATA):
            hit = "pallas", "kernel metadata (query and key/value block sizes)"
    if hit is None:
        return None
    kernel, src = hit
    p, where = matmul_precision(op, allow_int=False)
    return Verdict("attention", None, None, kernel, public_precision(p),
              f"attention kernel ({kernel}) by {src}, {p or 'unknown'} from {where}", "kernel")


def _quant_precision(op: Op, seg: str | None = None) -> tuple[str, str]:
    """(precision, bucket) of a matmul kernel from its operand types (`seg`,
    default the operand list): the activation (the widest float or int8
    matrix) sets the MXU precision, the narrowest matrix the weight width
    (w4a16: 4-bit weights, bf16 in)."""
    if seg is None:
        seg = op.operands or op.text
    arrays = [(t, d) for t, d in ARRAY.findall(seg) if sum(x > 1 for x in shape_dims(d)) >= 2]
    types = [t for t, _ in arrays]
    if "bf16" in types or "f16" in types:
        act: str | None = "bf16"
    elif any(t.startswith("f8e") for t in types):
        act = "fp8"
    elif any(t in INT8 for t in types):
        act = "int8"
    else:
        act = "f32" if "f32" in types else None
    # f32 matrices next to narrower ones are scales, not weights.
    bits = [4 if t.startswith("f4e") else BITS.get(t, 8 if t.startswith("f8e") else 16) for t in types if t != "f32"]
    wbits = min(bits) if bits else 16
    if act in ("bf16", "f32") and wbits < 16:
        prec, bucket = f"w{wbits}a16", "matmul_bf16"
    elif act == "fp8":
        prec, bucket = ("fp8" if wbits >= 8 else "w4a8"), "matmul_fp8"
    elif act == "int8":
        prec, bucket = ("w8a8" if wbits >= 8 else "w4a8"), "matmul_int8"
    else:
        prec, bucket = (act or "unknown"), matmul_bucket(act)
    return prec, bucket


def _r_matmul_kernel(op: Op) -> Verdict | None:
    """A custom kernel is what it computes. Evidence, first that holds: its
    instruction/display name (an op *named* gmm/tgmm counts even when the
    text is gone), its tf_op scope tokens, its custom-call target /
    kernel_name / `kernel_metadata` (xprof_metadata JSON), or its operand
    and output shapes forming a matmul ([.., M, K] x [K, N] -> [.., M, N],
    K a weight dimension; not when every matrix operand has the output's
    shape). The family (megablox_gmm / quantized_matmul / pallas_matmul)
    comes from the words; low-bit operands make a matmul quantized.
    Precision from the operand element types (XProf's typed operands, else
    the operand layout constraints); FLOPs 2*M*N*K from the shapes."""
    by, family = "", None
    for n, ni in zip(op.names, op.nis, strict=True):
        if ni.gmm:
            by, family = f"name '{op.quote(n)}'", "megablox_gmm"
            break
    if not by and not op.is_kernel_op:
        return None
    if not by:
        for n in op.names:
            family = kernel_word(n)
            if family:
                by = f"name '{op.quote(n)}'"
                break
    if not by and op.tf.kernel_token:  # the first scope token naming a kernel family, pallas_call aside
        family = kernel_word(op.tf.kernel_token)
        by = f"tf_op scope '{op.quote(op.tf.kernel_token, 40)}'"
    meta = braced_attr(op.text, "kernel_metadata")
    if not by:
        attrs = op.attrs.split("backend_config=")[0].split("frontend_attributes=")[0]
        for where, seg in (("custom-call attributes", attrs),
                           ("kernel metadata", meta)):
            family = kernel_word(seg) if seg else None
            if family:
                by = where
                break
    seg, where = kernel_operand_shapes(op)
    flops = matmul_kernel_flops(seg, op.output_text) if seg else None
    if not by:
        if not flops or elementwise_shapes(seg, op.output_text) or not TPU_CUSTOM_CALL.search(op.attrs):
            return None
        by, family = "operand shapes ([.., M, K] x [K, N] -> [.., M, N])", "pallas_matmul"
    if family == "pallas_matmul" and LOWBIT_ARRAY.search(seg):
        family = "quantized_matmul"
    if seg:
        prec, bucket = _quant_precision(op, seg)
    else:
        p, where = matmul_precision(op)
        prec, bucket = p or "unknown", matmul_bucket(p)
    how = f"FLOPs 2*M*N*K = {flops:.4g} from {where}" if flops else f"FLOPs not derivable from {where}"
    what = {"megablox_gmm": "Megablox grouped matmul", "quantized_matmul": "quantized matmul kernel"}.get(
        family or "", "matmul kernel")
    nbytes = (array_bytes(seg) + array_bytes(op.output_text)) if seg else 0
    return Verdict(bucket, None, None, family, public_precision(prec),
                   f"{what} by {by}, {prec} from {where} -> {bucket}; {how}", None, flops, float(nbytes) or None)


def _dot_operands_visible(op: Op) -> bool:
    """An output fusion can hold a dot only with two numeric (not pred /
    index) operands that are not scalars, a dot's lhs and rhs; True when the
    text is cut before the operands (nothing to tell)."""
    if op.op_end < 0 or not op.operand_text:
        return True
    return sum(1 for _d, dims in operand_arrays(op.operand_text) if shape_dims(dims) and max(shape_dims(dims)) > 1) >= 2


def _matmul_evidence(op: Op) -> str:
    if op.cat.matmul:
        # 'output fusion' is the category of every kOutput fusion (XProf's own table counts it as
        # compute): a matmul only when it has a dot's two operands; 'convolution fusion' always is one
        if op.cat.norm.lower() == "output fusion" and not _dot_operands_visible(op):
            return ""
        return f"hlo_category '{op.cat.norm}'"
    if op.opc.matmul:
        return f"opcode '{op.opcode}'"
    if not op.cat.norm and op.opcode == "fusion" and OUTPUT_FUSION_KIND.search(op.text) and _dot_operands_visible(op):
        return "kOutput fusion"
    return ""


def _r_attention_scope(op: Op) -> Verdict | None:
    tf = op.tf
    if tf.attn_kernel and not op.is_kernel_op:
        # Under a fused kernel's own scope (`jit(ragged_paged_attention)/transpose`):
        # the transposes, reshapes, copies and masks that feed the kernel.
        return Verdict("attention", None, None, None, None,
                  f"layout/helper op feeding the fused {tf.attn_kernel} kernel (under its tf_op scope)", "layout")
    if tf.attn_core:
        p, _ = matmul_precision(op, allow_int=False)
        return Verdict("attention", None, None, None, public_precision(p),
                  f"tf_op inside attention core scope '{op.quote(tf.attn_core, 40)}'", "unfused")
    if not tf.attn_generic or tf.attn_excluded:
        return None
    mm = _matmul_evidence(op)
    if not (mm or tf.attn_softmax):
        return None
    p, _ = matmul_precision(op, allow_int=False)
    what = f"matmul ({mm})" if mm else f"softmax-like '{op.quote(tf.attn_softmax, 24)}'"
    return Verdict("attention", None, None, None, public_precision(p),
              f"{what} under attention scope '{op.quote(tf.attn_generic, 40)}' (not a projection)", "unfused")


def _r_matmul(op: Op) -> Verdict | None:
    why = _matmul_evidence(op)
    if not why:
        return None
    p, where = matmul_precision(op)
    bucket = matmul_bucket(p)
    if p == "int8" and where == "operands":  # int8 weights: bf16 activations make it w8a16 on a bf16 MXU
        p, bucket = _quant_precision(op)
    return Verdict(bucket, None, None, None, public_precision(p), f"{why} + {p or 'unknown'} from {where} -> {bucket}")


def _r_pallas(op: Op) -> Verdict | None:
    if (op.opc.custom_call and TPU_CUSTOM_CALL.search(op.attrs)) or (
            not op.opcode_from_text and op.tf.pallas_last):
        return Verdict("other_compute", None, None, "pallas", None, "other Pallas kernel (tpu_custom_call)")
    return None


def _r_default(op: Op) -> Verdict | None:
    what = f"hlo_category '{op.cat.norm}'" if op.cat.norm else (f"opcode '{op.opcode}'" if op.opcode else "op")
    return Verdict("other_compute", reason=f"{op.quote(what, 60)}: no matmul/attention/collective evidence")


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
    Rule("matmul.kernel", "Custom kernel (custom-call / Pallas call) whose name, scope, attributes, kernel metadata "
         "or operand shapes say matmul -> matmul bucket of its activation precision (family megablox_gmm, "
         "quantized_matmul or pallas_matmul); FLOPs 2*M*N*K from the shapes.", _r_matmul_kernel),
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
def op_remat(op: Op) -> bool:
    return op.tf.remat or any(ni.remat for ni in op.nis)


def op_phase(op: Op) -> str | None:
    return op.tf.phase


