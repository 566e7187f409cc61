"""Decode an `xla.HloProto` (or a bare `xla.HloModuleProto`) into a `Module`,
by hand from the field numbers of xla/service/hlo.proto and xla/xla_data.proto
(only the fields used; profanalyzer.xspace.wire.iter_fields walks the wire
format). Each instruction also gets the one-line HLO text the compiler would
print for it (`Instruction.text`), since that is what a trace's op metadata
carries.

Raises ValueError on bytes that are not such a message.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace

from profanalyzer.hlo.model import (
    Computation,
    Instruction,
    Module,
    OpMetadata,
    Shape,
    StackFrames,
)
from profanalyzer.xspace import wire

__all__ = ["parse_hlo_proto_bytes", "PRIMITIVE_TYPES"]

# xla.PrimitiveType -> text spelling
PRIMITIVE_TYPES: dict[int, str] = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16", 11: "f32",
    12: "f64", 13: "tuple", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128", 19: "f8e5m2",
    20: "f8e4m3fn", 21: "s4", 22: "u4", 23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2",
    28: "f8e4m3", 29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu",
}

# HloProto
_P_MODULE = 1
# HloModuleProto
_M_NAME, _M_ENTRY_NAME, _M_COMPUTATIONS, _M_ENTRY_ID, _M_SCHEDULE, _M_STACK = 1, 2, 3, 6, 7, 17
# HloComputationProto
_C_NAME, _C_INSTRUCTIONS, _C_ID, _C_ROOT_ID, _C_THREAD = 1, 2, 5, 6, 8
# HloInstructionProto
_I_NAME, _I_OPCODE, _I_SHAPE, _I_METADATA, _I_LITERAL, _I_PARAM_NUMBER, _I_FUSION_KIND = 1, 2, 3, 7, 8, 9, 11
_I_TUPLE_INDEX, _I_DIMENSIONS, _I_CHANNEL_ID, _I_CUSTOM_CALL_TARGET, _I_ID = 13, 14, 26, 28, 35
_I_OPERAND_IDS, _I_CALLED_IDS, _I_BACKEND_CONFIG, _I_COMPARISON, _I_FRONTEND, _I_ASYNC_THREAD = 36, 38, 43, 63, 68, 79
# the FLOPs of dots and convolutions (profanalyzer.hlo.flops): Window {1 dimensions: WindowDimension {1 size,
# 2 stride, 3 padding_low, 4 padding_high, 5 window_dilation, 6 base_dilation, 7 window_reversal}},
# ConvolutionDimensionNumbers, DotDimensionNumbers {1 lhs_contracting, 2 rhs_contracting, 3 lhs_batch, 4 rhs_batch}
_I_WINDOW, _I_CONV_DNUMS, _I_DOT_DNUMS, _I_FEATURE_GROUPS, _I_BATCH_GROUPS = 15, 16, 30, 50, 58
#: a gather's slice sizes (repeated int64): which blocks it reads (a paged cache's pages, an embedding's rows)
_I_GATHER_SLICE_SIZES = 34
#: ConvolutionDimensionNumbers fields: (input batch, input feature, input spatial), (kernel input feature, kernel
#: output feature, kernel spatial), (output batch, output feature, output spatial)
_CD_LHS, _CD_RHS, _CD_OUT = (7, 8, 11), (3, 4, 6), (9, 10, 12)
# ShapeProto / LayoutProto
_S_ELEMENT_TYPE, _S_DIMENSIONS, _S_TUPLE, _S_LAYOUT = 2, 3, 4, 5
_L_MINOR_TO_MAJOR, _L_MEMORY_SPACE = 1, 8
# OpMetadata
_MD_OP_TYPE, _MD_OP_NAME, _MD_SOURCE_FILE, _MD_SOURCE_LINE, _MD_STACK_FRAME = 1, 2, 3, 4, 15
# LiteralProto: s32s, s64s, u32s, u64s, f32s (packed)
_LIT_S32, _LIT_S64, _LIT_U32, _LIT_U64, _LIT_F32 = 4, 5, 6, 7, 8
#: LiteralProto's byte-packed 8-bit integer arrays (s8s, u8s)
_LIT_S8, _LIT_U8 = 15, 3
# HloScheduleProto {map<int64, InstructionSequence> sequences = 1}; entry {key=1, value=2}; sequence {ids=1}
# StackFrameIndexProto
_SF_FILES, _SF_FUNCS, _SF_LOCS, _SF_FRAMES = 1, 2, 3, 4
# FrontendAttributes {map<string,string> map = 1}


def _fields(buf, a: int, b: int):
    return wire.iter_fields(buf, a, b)


def _str(buf, a: int, b: int) -> str:
    return bytes(buf[a:b]).decode("utf-8", "replace")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _varints(buf, wt: int, v, a: int, b: int) -> list[int]:
    if wt == 0:
        return [_signed(v)]
    out, pos = [], a
    while pos < b:
        x, pos = wire.varint(buf, pos, b)
        out.append(_signed(x))
    return out


def _shape(buf, a: int, b: int) -> Shape:
    et, dims, parts, mspace, m2m = 0, [], [], 0, []
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        if f == _S_ELEMENT_TYPE and wt == 0:
            et = v
        elif f == _S_DIMENSIONS:
            dims += _varints(buf, wt, v, pa, pb)
        elif f == _S_TUPLE and wt == 2:
            parts.append(_shape(buf, pa, pb))
        elif f == _S_LAYOUT and wt == 2:
            for f2, wt2, v2, a2, b2, _ in _fields(buf, pa, pb):
                if f2 == _L_MEMORY_SPACE and wt2 == 0:
                    mspace = v2
                elif f2 == _L_MINOR_TO_MAJOR:
                    m2m += _varints(buf, wt2, v2, a2, b2)
    dtype = PRIMITIVE_TYPES.get(et, f"type{et}")
    if dtype == "tuple":
        return Shape("tuple", parts=tuple(parts))
    layout = ""
    if m2m or mspace:
        layout = "{" + ",".join(map(str, m2m)) + (f":S({mspace})" if mspace else "") + "}"
    return Shape(dtype, tuple(dims), mspace, (), layout)


def _metadata(buf, a: int, b: int) -> OpMetadata:
    d: dict[int, object] = {}
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        if wt == 2 and f in (_MD_OP_TYPE, _MD_OP_NAME, _MD_SOURCE_FILE):
            d[f] = _str(buf, pa, pb)
        elif wt == 0 and f in (_MD_SOURCE_LINE, _MD_STACK_FRAME):
            d[f] = _signed(v)
    return OpMetadata(str(d.get(_MD_OP_TYPE, "")), str(d.get(_MD_OP_NAME, "")), str(d.get(_MD_SOURCE_FILE, "")),
                      int(d.get(_MD_SOURCE_LINE, 0) or 0), int(d.get(_MD_STACK_FRAME, 0) or 0))  # type: ignore[call-overload]


def _literal(buf, a: int, b: int) -> str:
    """A scalar or short literal's values as text (`15`, `{1, 2}`), else `{...}`."""
    vals: list[str] = []
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        if f in (_LIT_S32, _LIT_S64, _LIT_U32, _LIT_U64):
            vals += [str(x) for x in _varints(buf, wt, v, pa, pb)]
        elif f == _LIT_F32:
            raw = bytes(buf[pa:pb])
            vals += [f"{x:g}" for x in struct.unpack(f"<{len(raw) // 4}f", raw[: len(raw) // 4 * 4])]
    if len(vals) == 1:
        return vals[0]
    if 1 < len(vals) <= 8:
        return "{" + ", ".join(vals) + "}"
    return "{...}"


def _byte_literal_stats(buf, a: int, b: int) -> tuple[int, ...]:
    """(elements, nonzero, min, max) of an 8-bit integer literal (a kernel's block mask, say), else ()."""
    for f, wt, _v, pa, pb, _ in _fields(buf, a, b):
        if wt == 2 and f in (_LIT_S8, _LIT_U8) and pb > pa:
            raw = bytes(buf[pa:pb])
            vals = [x - 256 if f == _LIT_S8 and x > 127 else x for x in raw]
            return (len(vals), sum(1 for x in vals if x), min(vals), max(vals))
    return ()


def _frontend(buf, a: int, b: int) -> str:
    items = []
    for f, wt, _v, pa, pb, _ in _fields(buf, a, b):
        if f == 1 and wt == 2:
            k = val = ""
            for f2, wt2, _v2, a2, b2, _ in _fields(buf, pa, pb):
                if f2 == 1 and wt2 == 2:
                    k = _str(buf, a2, b2)
                elif f2 == 2 and wt2 == 2:
                    val = _str(buf, a2, b2)
            items.append(f"{k}={json.dumps(val) if not val.startswith('{') else val}")
    return "{" + ",".join(items) + "}" if items else ""


class _Raw:
    __slots__ = ("name", "opcode", "shape", "meta", "literal", "pnum", "kind", "dims", "target", "id", "operands",
                 "called", "backend", "direction", "frontend", "thread", "tuple_index", "channel", "group", "math",
                 "lit_stats", "slices")

    def __init__(self) -> None:
        self.name = self.opcode = self.kind = self.target = self.backend = self.direction = ""
        self.frontend = self.thread = self.literal = ""
        self.lit_stats: tuple[int, ...] = ()
        self.shape = Shape("unknown")
        self.meta = OpMetadata()
        self.pnum, self.id, self.tuple_index, self.channel = -1, -1, -1, 0
        self.group = 0  # the largest replica group of a collective (devices)
        self.dims: list[int] = []
        self.slices: list[int] = []  # a gather's slice sizes
        self.operands: list[int] = []
        self.called: list[int] = []
        self.math: list[tuple[str, str]] = []  # window / dim_labels / dot dims / group counts, as the text prints them


def _window_text(buf, a: int, b: int) -> str:
    dims: list[dict[int, int]] = []
    for f, wt, _v, pa, pb, _ in _fields(buf, a, b):
        if f == 1 and wt == 2:
            dims.append({f2: _signed(v2) for f2, wt2, v2, *_ in _fields(buf, pa, pb) if wt2 == 0})
    if not dims:
        return ""  # a 0-d window: the text prints none

    def one(key: int) -> list[int]:  # stride / dilations: 0 (unset) is 1
        return [d.get(key, 0) or 1 for d in dims]

    parts = ["size=" + "x".join(str(d.get(1, 0)) for d in dims)]
    if any(x != 1 for x in one(2)):
        parts.append("stride=" + "x".join(map(str, one(2))))
    if any(d.get(3, 0) or d.get(4, 0) for d in dims):
        parts.append("pad=" + "x".join(f"{d.get(3, 0)}_{d.get(4, 0)}" for d in dims))
    if any(x != 1 for x in one(6)):
        parts.append("lhs_dilate=" + "x".join(map(str, one(6))))
    if any(x != 1 for x in one(5)):
        parts.append("rhs_dilate=" + "x".join(map(str, one(5))))
    if any(d.get(7, 0) for d in dims):
        parts.append("rhs_reversal=" + "x".join(str(int(bool(d.get(7, 0)))) for d in dims))
    return "{" + " ".join(parts) + "}"


def _dim_labels(buf, a: int, b: int) -> str:
    got: dict[int, list[int]] = {}
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        got.setdefault(f, []).extend(_varints(buf, wt, v, pa, pb))

    def side(fields: tuple[int, int, int], letters: str) -> str:
        spatial = got.get(fields[2], [])
        out = ["?"] * (2 + len(spatial))
        for k, letter in zip(fields[:2], letters, strict=True):
            d = (got.get(k) or [0])[0]
            if 0 <= d < len(out):
                out[d] = letter
        for i, d in enumerate(spatial):
            if 0 <= d < len(out):
                out[d] = str(i)
        return "".join(out)

    return f"{side(_CD_LHS, 'bf')}_{side(_CD_RHS, 'io')}->{side(_CD_OUT, 'bf')}"


def _dot_dims(buf, a: int, b: int) -> list[tuple[str, str]]:
    got: dict[int, list[int]] = {}
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        got.setdefault(f, []).extend(_varints(buf, wt, v, pa, pb))
    out = []
    for key, f in (("lhs_batch_dims", 3), ("lhs_contracting_dims", 1), ("rhs_batch_dims", 4),
                   ("rhs_contracting_dims", 2)):
        if got.get(f):
            out.append((key, "{" + ",".join(map(str, got[f])) + "}"))
    return out


def _instruction(buf, a: int, b: int) -> _Raw:
    r = _Raw()
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        if wt == 2:
            if f == _I_NAME:
                r.name = _str(buf, pa, pb)
            elif f == _I_OPCODE:
                r.opcode = _str(buf, pa, pb)
            elif f == _I_SHAPE:
                r.shape = _shape(buf, pa, pb)
            elif f == _I_METADATA:
                r.meta = _metadata(buf, pa, pb)
            elif f == _I_LITERAL:
                r.literal = _literal(buf, pa, pb)
                r.lit_stats = _byte_literal_stats(buf, pa, pb)
            elif f == _I_FUSION_KIND:
                r.kind = _str(buf, pa, pb)
            elif f == _I_CUSTOM_CALL_TARGET:
                r.target = _str(buf, pa, pb)
            elif f == _I_BACKEND_CONFIG:
                r.backend = _str(buf, pa, pb)
            elif f == _I_COMPARISON:
                r.direction = _str(buf, pa, pb)
            elif f == _I_FRONTEND:
                r.frontend = _frontend(buf, pa, pb)
            elif f == _I_ASYNC_THREAD:
                r.thread = _str(buf, pa, pb)
            elif f == _I_OPERAND_IDS:
                r.operands += _varints(buf, wt, v, pa, pb)
            elif f == _I_CALLED_IDS:
                r.called += _varints(buf, wt, v, pa, pb)
            elif f == _I_DIMENSIONS:
                r.dims += _varints(buf, wt, v, pa, pb)
            elif f in (_I_REPLICA_GROUPS, _I_DEVICE_LIST, _I_MESH_GROUPS):
                r.group = max(r.group, _group_size(buf, f, pa, pb))
            elif f == _I_WINDOW and (w := _window_text(buf, pa, pb)):
                r.math.insert(0, ("window", w))
            elif f == _I_CONV_DNUMS:
                r.math.append(("dim_labels", _dim_labels(buf, pa, pb)))
            elif f == _I_DOT_DNUMS:
                r.math += _dot_dims(buf, pa, pb)
            elif f == _I_GATHER_SLICE_SIZES:
                r.slices += _varints(buf, wt, v, pa, pb)
        elif wt == 0:
            if f == _I_ID:
                r.id = _signed(v)
            elif f == _I_PARAM_NUMBER:
                r.pnum = _signed(v)
            elif f == _I_OPERAND_IDS:
                r.operands.append(_signed(v))
            elif f == _I_CALLED_IDS:
                r.called.append(_signed(v))
            elif f == _I_TUPLE_INDEX:
                r.tuple_index = _signed(v)
            elif f == _I_DIMENSIONS:
                r.dims.append(_signed(v))
            elif f == _I_CHANNEL_ID:
                r.channel = _signed(v)
            elif f == _I_GATHER_SLICE_SIZES:
                r.slices.append(_signed(v))
            elif f in (_I_FEATURE_GROUPS, _I_BATCH_GROUPS) and _signed(v) > 1:
                r.math.append(("feature_group_count" if f == _I_FEATURE_GROUPS else "batch_group_count", str(_signed(v))))
    return r


#: HloInstructionProto replica_groups (ReplicaGroup {1 replica_ids}) and collective_device_list
#: (CollectiveDeviceListProto {1 replica_groups, 2 iota_replica_group_list {1 groups, 2 devices per group}}).
#: Mesh-axes replica groups (`replica_groups=mesh['axis_0'=1,'axis_1'=8]`): {1 mesh {1 axes {1 name, 2 size}}, ...};
#: the mesh's device count is taken (the program's partitions).
_I_REPLICA_GROUPS, _I_DEVICE_LIST, _I_MESH_GROUPS = 49, 87, 93


def _group_size(buf, f: int, a: int, b: int) -> int:
    if f == _I_MESH_GROUPS:
        n = 0
        for g, w, _v, pa, pb, _ in _fields(buf, a, b):
            if g == 1 and w == 2:
                n = 1
                for g2, w2, _v2, qa, qb, _ in _fields(buf, pa, pb):
                    if g2 == 1 and w2 == 2:
                        n *= max([1] + [_signed(v3) for g3, w3, v3, *_ in _fields(buf, qa, qb) if g3 == 2 and w3 == 0])
        return n
    if f == _I_REPLICA_GROUPS:  # one ReplicaGroup
        return sum(len(_varints(buf, w, v, pa, pb)) for g, w, v, pa, pb, _ in _fields(buf, a, b) if g == 1)
    best = 0
    for g, w, _v, pa, pb, _ in _fields(buf, a, b):
        if g == 1 and w == 2:
            best = max(best, _group_size(buf, _I_REPLICA_GROUPS, pa, pb))
        elif g == 2 and w == 2:
            best = max([best] + [_signed(v2) for g2, w2, v2, *_ in _fields(buf, pa, pb) if g2 == 2 and w2 == 0])
    return best


def _called_keys(opcode: str, n: int) -> list[str]:
    if opcode == "while":  # HloInstruction's called computations of a while: body first, then condition
        return ["body", "condition"][:n]
    if opcode in ("fusion", "async-start", "async-update", "async-done"):
        return ["calls"] * n
    if opcode == "conditional":
        return ["branch_computations"] * n
    if opcode in ("call", "map", "reduce", "reduce-window", "scatter", "sort", "select-and-scatter", "all-reduce",
                  "reduce-scatter", "all-reduce-start", "custom-call"):
        return ["to_apply"] * n
    return ["calls"] * n


def _render(r: _Raw, names: dict[int, str], comp_names: dict[int, str], root: bool) -> tuple[Instruction, str]:
    ops = [names.get(o, f"unknown.{o}") for o in r.operands]
    called = [comp_names.get(c, f"computation.{c}") for c in r.called]
    attrs: list[tuple[str, str]] = []
    if r.kind:
        kind = r.kind if r.kind.startswith("k") else "k" + r.kind[:1].upper() + r.kind[1:]
        attrs.append(("kind", kind))
    if r.direction:
        attrs.append(("direction", r.direction))
    if r.opcode == "get-tuple-element":  # tuple_index 0 is not serialized (the proto3 default)
        attrs.append(("index", str(max(0, r.tuple_index))))
    if r.channel > 0:
        attrs.append(("channel_id", str(r.channel)))
    if r.dims and r.opcode in ("broadcast", "reduce", "transpose", "all-gather", "reverse", "concatenate"):
        attrs.append(("dimensions", "{" + ",".join(map(str, r.dims)) + "}"))
    if r.slices and r.opcode == "gather":
        attrs.append(("slice_sizes", "{" + ",".join(map(str, r.slices)) + "}"))
    if r.opcode in ("convolution", "dot", "ragged-dot", "scaled-dot"):
        attrs += r.math
    if r.thread:
        attrs.append(("async_execution_thread", json.dumps(r.thread)))
    keys = _called_keys(r.opcode, len(called))
    grouped: dict[str, list[str]] = {}
    for k, c in zip(keys, called, strict=False):  # a while has body and condition: extra called ids of a malformed proto are dropped
        grouped.setdefault(k, []).append(c)
    for k, cs in grouped.items():
        attrs.append((k, "{" + ", ".join("%" + c for c in cs) + "}" if k == "branch_computations" else "%" + cs[0]))
    if r.target:
        attrs.append(("custom_call_target", json.dumps(r.target)))
    if r.frontend:
        attrs.append(("frontend_attributes", r.frontend))
    inner = ", ".join("%" + o for o in ops)
    if r.opcode == "parameter" and r.pnum < 0:
        r.pnum = 0  # proto3 leaves a parameter's number 0 out (the field's default)
    if r.opcode == "constant":
        inner = r.literal
    elif r.opcode == "parameter":
        inner = str(r.pnum)
    parts = [f"%{r.name} = {r.shape.text()} {r.opcode}({inner})"] + [f"{k}={v}" for k, v in attrs]
    md = r.meta
    mfields = []
    if md.op_type:
        mfields.append(f"op_type={json.dumps(md.op_type)}")
    if md.op_name:
        mfields.append(f"op_name={json.dumps(md.op_name)}")
    if md.source_file:
        mfields.append(f"source_file={json.dumps(md.source_file)}")
    if md.source_line:
        mfields.append(f"source_line={md.source_line}")
    if md.stack_frame_id:
        mfields.append(f"stack_frame_id={md.stack_frame_id}")
    if mfields:
        parts.append("metadata={" + " ".join(mfields) + "}")
    if r.backend:
        parts.append(f"backend_config={r.backend}")
    text = ", ".join(parts)
    ins = Instruction(name=r.name, opcode=r.opcode, shape=r.shape, operands=tuple(ops),
                      called=tuple(called), attrs=tuple((k, v) for k, v in attrs if k not in ("frontend_attributes",))
                      + ((("frontend_attributes", r.frontend),) if r.frontend else ()),
                      metadata=md, backend_config=r.backend, text=text, is_root=root, parameter_number=r.pnum,
                      literal=r.literal if r.opcode == "constant" else "",
                      literal_stats=r.lit_stats if r.opcode == "constant" else ())
    return ins, text


def _stack(buf, a: int, b: int) -> StackFrames:
    files, funcs, locs, frames = [], [], [], []
    for f, wt, _v, pa, pb, _ in _fields(buf, a, b):
        if wt != 2:
            continue
        if f == _SF_FILES:
            files.append(_str(buf, pa, pb))
        elif f == _SF_FUNCS:
            funcs.append(_str(buf, pa, pb))
        elif f in (_SF_LOCS, _SF_FRAMES):
            d: dict[int, int] = {}
            for f2, wt2, v2, _a2, _b2, _ in _fields(buf, pa, pb):
                if wt2 == 0:
                    d[f2] = _signed(v2)
            if f == _SF_LOCS:
                locs.append((d.get(1, 0), d.get(2, 0), d.get(3, 0)))
            else:
                frames.append((d.get(1, 0), d.get(2, 0)))
    return StackFrames(tuple(files), tuple(funcs), tuple(locs), tuple(frames))


def _schedule(buf, a: int, b: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for f, wt, _v, pa, pb, _ in _fields(buf, a, b):
        if f != 1 or wt != 2:
            continue
        key, ids = 0, []
        for f2, wt2, v2, a2, b2, _ in _fields(buf, pa, pb):
            if f2 == 1 and wt2 == 0:
                key = _signed(v2)
            elif f2 == 2 and wt2 == 2:
                for f3, wt3, v3, a3, b3, _ in _fields(buf, a2, b2):
                    if f3 == 1:
                        ids += _varints(buf, wt3, v3, a3, b3)
        out[key] = ids
    return out


def _module(buf, a: int, b: int, source: str) -> Module:
    name = entry_name = ""
    entry_id = -1
    comps_raw: list[tuple[str, list[_Raw], int, int, str]] = []
    sched: dict[int, list[int]] = {}
    stack = StackFrames()
    for f, wt, v, pa, pb, _ in _fields(buf, a, b):
        if f == _M_NAME and wt == 2:
            name = _str(buf, pa, pb)
        elif f == _M_ENTRY_NAME and wt == 2:
            entry_name = _str(buf, pa, pb)
        elif f == _M_ENTRY_ID and wt == 0:
            entry_id = _signed(v)
        elif f == _M_SCHEDULE and wt == 2:
            sched = _schedule(buf, pa, pb)
        elif f == _M_STACK and wt == 2:
            stack = _stack(buf, pa, pb)
        elif f == _M_COMPUTATIONS and wt == 2:
            cname, instrs, cid, root, thread = "", [], -1, -1, ""
            for f2, wt2, v2, a2, b2, _ in _fields(buf, pa, pb):
                if f2 == _C_NAME and wt2 == 2:
                    cname = _str(buf, a2, b2)
                elif f2 == _C_INSTRUCTIONS and wt2 == 2:
                    instrs.append(_instruction(buf, a2, b2))
                elif f2 == _C_ID and wt2 == 0:
                    cid = _signed(v2)
                elif f2 == _C_ROOT_ID and wt2 == 0:
                    root = _signed(v2)
                elif f2 == _C_THREAD and wt2 == 2:
                    thread = _str(buf, a2, b2)
            comps_raw.append((cname, instrs, cid, root, thread))
    if not comps_raw:
        raise ValueError("no computations: not an HloProto / HloModuleProto")
    names = {r.id: r.name for _, rs, _, _, _ in comps_raw for r in rs}
    comp_names = {cid: cname for cname, _, cid, _, _ in comps_raw}
    comps = []
    for cname, rs, cid, root, thread in comps_raw:
        order = rs
        if cid in sched:  # the schedule's order for scheduled computations
            by_id = {r.id: r for r in rs}
            seq = [by_id[i] for i in sched[cid] if i in by_id]
            rest = [r for r in rs if r.id not in set(sched[cid])]
            order = seq + rest
        made = tuple(_render(r, names, comp_names, r.id == root)[0] for r in order)
        comps.append(Computation(cname, made, cid == entry_id or cname == entry_name, thread))
    entry = comp_names.get(entry_id, entry_name) or comps[-1].name
    # the proto holds no num_partitions (the module config does): the largest collective group stands for it
    groups = max([r.group for _c, rs, *_ in comps_raw for r in rs] + [1])
    return Module(name=name or "module", computations=tuple(comps), entry=entry, is_scheduled=bool(sched),
                  stack=stack, source=source, stage="proto", num_partitions=groups)


def parse_hlo_proto_bytes(data: bytes, source: str = "") -> Module:
    """An HloProto (field 1: the module) or a bare HloModuleProto."""
    buf = memoryview(data)
    try:
        top = list(_fields(buf, 0, len(buf)))
    except ValueError as e:
        raise ValueError(f"not a protobuf message ({e})") from None
    mods = [(pa, pb) for f, wt, _v, pa, pb, _ in top if f == _P_MODULE and wt == 2]
    # An HloProto has field 1 = module (a message); an HloModuleProto has field 1 = name (a string).
    if len(mods) == 1:
        try:
            return replace(_module(buf, mods[0][0], mods[0][1], source), proto=bytes(data))
        except ValueError:
            pass
    return _module(buf, 0, len(buf), source)
