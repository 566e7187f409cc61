"""Decode an `xla.HloProto` (or a bare `xla.HloModuleProto`) into a `Module`:
the protobuf runtime parses it with the project's own minimal schema
(`hlo_min.proto`: the fields used, numbered as xla/service/hlo.proto and
xla/xla_data.proto number them), then each instruction becomes an
`Instruction` with the one-line HLO text the compiler would print for it
(`Instruction.text`), since that is what a trace's op metadata carries.

Raises ValueError on bytes that are not such a message.
"""

from __future__ import annotations

import json
from dataclasses import replace

from profanalyzer.hlo.model import (
    Computation,
    Instruction,
    Module,
    OpMetadata,
    Shape,
    StackFrames,
)

__all__ = ["parse_hlo_proto_bytes", "proto_shape", "PRIMITIVE_TYPES"]

# xla.PrimitiveType -> text spelling
PRIMITIVE_TYPES: dict[int, str] = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16", 11: "f32",
    12: "f64", 13: "tuple", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128", 19: "f8e5m2",
    20: "f8e4m3fn", 21: "s4", 22: "u4", 23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2",
    28: "f8e4m3", 29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu",
}



def _shape(s) -> Shape:
    et = s.element_type
    dtype = PRIMITIVE_TYPES.get(et, f"type{et}")
    if dtype == "tuple":
        return Shape("tuple", parts=tuple(_shape(p) for p in s.tuple_shapes))
    lay = s.layout
    m2m, mspace = lay.minor_to_major, lay.memory_space
    layout = "{" + ",".join(map(str, m2m)) + (f":S({mspace})" if mspace else "") + "}" if m2m or mspace else ""
    return Shape(dtype, tuple(s.dimensions), mspace, (), layout)


def proto_shape(s) -> Shape:
    """A ShapeProto message (hlo_min_pb2.Shape) as a Shape."""
    return _shape(s)


def _metadata(md) -> OpMetadata:
    return OpMetadata(md.op_type, md.op_name, md.source_file, md.source_line, md.stack_frame_id)


def _literal(lit) -> str:
    """A scalar or short literal's values as text (`15`, `{1, 2}`), else `{...}`."""
    vals = [str(x) for x in (*lit.s32s, *lit.s64s, *lit.u32s, *lit.u64s)] + [f"{x:g}" for x in lit.f32s]
    if len(vals) == 1:
        return vals[0]
    if 1 < len(vals) <= 8:
        return "{" + ", ".join(vals) + "}"
    return "{...}"


def _byte_literal_stats(lit) -> tuple[int, ...]:
    """(elements, nonzero, min, max) of an 8-bit integer literal (a kernel's block mask, say), else ()."""
    for raw, signed in ((lit.u8s, False), (lit.s8s, True)):
        if raw:
            vals = [x - 256 if signed and x > 127 else x for x in raw]
            return (len(vals), sum(1 for x in vals if x), min(vals), max(vals))
    return ()


def _frontend(fa) -> str:
    items = [f"{e.key}={json.dumps(e.value) if not e.value.startswith('{') else e.value}" for e in fa.map]
    return "{" + ",".join(items) + "}" if items else ""


class _Raw:
    """One instruction's fields as the renderer reads them (`_instruction` fills every one)."""

    __slots__ = ("name", "opcode", "shape", "meta", "literal", "pnum", "kind", "dims", "target", "id", "operands",
                 "called", "backend", "direction", "frontend", "thread", "tuple_index", "channel", "group", "math",
                 "lit_stats", "slices")
    name: str
    opcode: str
    shape: Shape
    meta: OpMetadata
    literal: str
    pnum: int
    kind: str
    dims: list[int]
    target: str
    id: int
    operands: list[int]
    called: list[int]
    backend: str
    direction: str
    frontend: str
    thread: str
    tuple_index: int
    channel: int
    group: int  # the largest replica group of a collective (devices)
    math: list[tuple[str, str]]  # window / dim_labels / dot dims / group counts, as the text prints them
    lit_stats: tuple[int, ...]
    slices: list[int]  # a gather's slice sizes


def _window_text(w) -> str:
    dims = w.dimensions
    if not dims:
        return ""  # a 0-d window: the text prints none
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any((d.stride or 1) != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.stride or 1) for d in dims))
    if any(d.padding_low or d.padding_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
    if any((d.base_dilation or 1) != 1 for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation or 1) for d in dims))
    if any((d.window_dilation or 1) != 1 for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation or 1) for d in dims))
    if any(d.window_reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join(str(int(d.window_reversal)) for d in dims))
    return "{" + " ".join(parts) + "}"


def _dim_labels(c) -> str:
    def side(first: int, second: int, spatial, letters: str) -> str:
        out = ["?"] * (2 + len(spatial))
        for d, letter in zip((first, second), letters, strict=True):
            if 0 <= d < len(out):
                out[d] = letter
        for i, d in enumerate(spatial):
            if 0 <= d < len(out):
                out[d] = str(i)
        return "".join(out)

    return (f"{side(c.input_batch_dimension, c.input_feature_dimension, c.input_spatial_dimensions, 'bf')}_"
            f"{side(c.kernel_input_feature_dimension, c.kernel_output_feature_dimension, c.kernel_spatial_dimensions, 'io')}"
            f"->{side(c.output_batch_dimension, c.output_feature_dimension, c.output_spatial_dimensions, 'bf')}")


def _dot_dims(d) -> list[tuple[str, str]]:
    out = []
    for key, vals in (("lhs_batch_dims", d.lhs_batch_dimensions), ("lhs_contracting_dims", d.lhs_contracting_dimensions),
                      ("rhs_batch_dims", d.rhs_batch_dimensions), ("rhs_contracting_dims", d.rhs_contracting_dimensions)):
        if vals:
            out.append((key, "{" + ",".join(map(str, vals)) + "}"))
    return out


def _group_size(i) -> int:
    """The largest replica group of a collective (devices): replica_groups, the device list (explicit groups or
    the iota form's devices per group) or the mesh axes' product; 0 when none."""
    best = max([len(g.replica_ids) for g in i.replica_groups] + [0])
    dl = i.collective_device_list
    best = max([best, dl.iota_replica_group_list.num_devices_per_group] + [len(g.replica_ids) for g in dl.replica_groups])
    if i.HasField("mesh_replica_groups") and i.mesh_replica_groups.HasField("mesh"):
        n = 1
        for ax in i.mesh_replica_groups.mesh.axes:
            n *= max(1, ax.size)
        best = max(best, n)
    return best


def _instruction(i) -> _Raw:
    """One instruction message as the renderer's fields; proto3 leaves zeros out, so an id, root, tuple index or
    parameter number of 0 reads as absent (-1), as the wire gives it."""
    r = _Raw()
    r.name, r.opcode, r.kind, r.target = i.name, i.opcode, i.fusion_kind, i.custom_call_target
    r.backend = i.backend_config.decode("utf-8", "replace")
    r.direction, r.thread = i.comparison_direction, i.async_execution_thread
    r.shape = _shape(i.shape)
    r.meta = _metadata(i.metadata)
    lit = i.literal
    r.literal = _literal(lit) if i.HasField("literal") else ""
    r.lit_stats = _byte_literal_stats(lit) if i.HasField("literal") else ()
    r.frontend = _frontend(i.frontend_attributes)
    r.pnum = i.parameter_number or -1
    r.id = i.id or -1
    r.tuple_index = i.tuple_index or -1
    r.channel = i.channel_id
    r.group = _group_size(i) if i.replica_groups or i.HasField("collective_device_list") or i.HasField(
        "mesh_replica_groups") else 0
    r.dims, r.slices = list(i.dimensions), list(i.gather_slice_sizes)
    r.operands, r.called = list(i.operand_ids), list(i.called_computation_ids)
    math: list[tuple[str, str]] = []
    if i.HasField("window") and (w := _window_text(i.window)):
        math.append(("window", w))
    if i.HasField("convolution_dimension_numbers"):
        math.append(("dim_labels", _dim_labels(i.convolution_dimension_numbers)))
    if i.HasField("dot_dimension_numbers"):
        math += _dot_dims(i.dot_dimension_numbers)
    for key, n in (("feature_group_count", i.feature_group_count), ("batch_group_count", i.batch_group_count)):
        if n > 1:
            math.append((key, str(n)))
    r.math = math
    return r


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


def _stack(st) -> StackFrames:
    return StackFrames(tuple(st.file_names), tuple(st.function_names),
                       tuple((x.file_name_id, x.function_name_id, x.line) for x in st.file_locations),
                       tuple((x.file_location_id, x.parent_frame_id) for x in st.stack_frames))


def _module(mod, source: str) -> Module:
    sched = {e.key: list(e.value.instruction_ids) for e in mod.schedule.sequences}
    comps_raw = [(c.name, [_instruction(i) for i in c.instructions], c.id or -1, c.root_id or -1, c.execution_thread)
                 for c in mod.computations]
    if not comps_raw:
        raise ValueError("no computations: not an HloProto / HloModuleProto")
    entry_id, entry_name = mod.entry_computation_id or -1, mod.entry_computation_name
    names = {r.id: r.name for _, rs, _, _, _ in comps_raw for r in rs}
    comp_names = {cid: cname for cname, _, cid, _, _ in comps_raw}
    comps = []
    for cname, rs, cid, root, thread in comps_raw:
        order = rs
        if cid in sched:  # the schedule's order for scheduled computations
            by_id = {r.id: r for r in rs}
            ids = sched[cid]
            listed = set(ids)
            order = [by_id[i] for i in ids if i in by_id] + [r for r in rs if r.id not in listed]
        made = tuple(_render(r, names, comp_names, r.id == root)[0] for r in order)
        comps.append(Computation(cname, made, cid == entry_id or cname == entry_name, thread))
    entry = comp_names.get(entry_id, entry_name) or comps[-1].name
    # the proto holds no num_partitions (the module config does): the largest collective group stands for it
    groups = max([r.group for _c, rs, *_ in comps_raw for r in rs] + [1])
    return Module(name=mod.name or "module", computations=tuple(comps), entry=entry, is_scheduled=bool(sched),
                  stack=_stack(mod.stack_frame_index), source=source, stage="proto", num_partitions=groups)


def parse_hlo_proto_bytes(data: bytes, source: str = "") -> Module:
    """An HloProto (field 1: the module) or a bare HloModuleProto, decoded by the protobuf runtime from the
    project's own hlo_min.proto. Raises ValueError on bytes that are neither."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    from profanalyzer.hlo import hlo_min_pb2 as pb

    try:
        top = pb.HloProto.FromString(data)  # type: ignore[attr-defined]
        if top.HasField("hlo_module") and top.hlo_module.computations:
            return replace(_module(top.hlo_module, source), proto=bytes(data))
    except (DecodeError, ValueError):
        pass  # an HloModuleProto's field 1 is its name, not a message
    try:
        mod = pb.Module.FromString(data)  # type: ignore[attr-defined]
    except DecodeError:
        raise ValueError("not an HloProto or HloModuleProto (the bytes do not parse as one)") from None
    return _module(mod, source)
