"""Decode an `xla.HloProto` (or a bare `xla.HloModuleProto`) into a `Module`:
the protobuf runtime parses it with the project's own minimal schema
(`hlo_min.proto`: the fields used, numbered as xla/service/hlo.proto and
xla/xla_data.proto number them), then each instruction becomes an
`Instruction` with the one-line HLO text the compiler would print for it
(`Instruction.text`), since that is what a trace's op metadata carries.

With the optional C accelerator (`_hlo.c`, built by setup.py) the plain
instructions, most of a module, are built from the wire bytes in one pass;
constants, convolutions and dots, collectives' replica groups and strings that
need JSON escapes take the Python path below, which gives the same module
without it (tests/test_hlo_accelerator.py).

Raises ValueError on bytes that are not such a message.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import cast

from profanalyzer.read.hlo.model import (
    Computation,
    Instruction,
    Module,
    OpMetadata,
    Shape,
    StackFrames,
)

__all__ = ["parse_hlo_proto_bytes", "proto_shape", "PRIMITIVE_TYPES"]

try:  # the optional C accelerator (setup.py): the plain instructions in one pass; the rest below
    from profanalyzer.read.hlo import _hlo as _accel  # type: ignore[attr-defined]  # a C extension: no stubs
except ImportError:  # no compiler at install time: every instruction takes the Python path
    _accel = None

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
    items = [f"{e.key}={_quoted(e.value) if not e.value.startswith('{') else e.value}" for e in fa.map]
    return "{" + ",".join(items) + "}" if items else ""


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


def _quoted(s: str) -> str:
    """`s` as a JSON string, as json.dumps writes it (ASCII escapes), without the encoder for plain text."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return json.dumps(s)


#: Opcodes whose dimensions the text prints, and those that print the convolution / dot numbers.
_DIM_OPS = frozenset({"broadcast", "reduce", "transpose", "all-gather", "reverse", "concatenate"})
_MATH_OPS = frozenset({"convolution", "dot", "ragged-dot", "scaled-dot"})


def _math(i) -> list[tuple[str, str]]:
    """Window, dim_labels, dot dimensions and group counts, as the text prints them for a convolution or dot."""
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
    return math


def _metadata_parts(md, memo: dict) -> tuple[OpMetadata, str]:
    """An OpMetadata and its `, metadata={...}` text ("" when empty), shared by instructions with equal fields."""
    key = (md.op_type, md.op_name, md.source_file, md.source_line, md.stack_frame_id)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _metadata_text(key)
    return got


def _metadata_text(key: tuple) -> tuple[OpMetadata, str]:
    """The OpMetadata of (op_type, op_name, source_file, source_line, stack_frame_id) and its text."""
    op_type, op_name, source_file, source_line, frame = key
    fields = []
    if op_type:
        fields.append("op_type=" + _quoted(op_type))
    if op_name:
        fields.append("op_name=" + _quoted(op_name))
    if source_file:
        fields.append("source_file=" + _quoted(source_file))
    if source_line:
        fields.append(f"source_line={source_line}")
    if frame:
        fields.append(f"stack_frame_id={frame}")
    return OpMetadata(*key), ", metadata={" + " ".join(fields) + "}" if fields else ""


def _shape_parts(s, memo: dict) -> tuple[Shape, str]:
    """A Shape and its text, shared by instructions with the same serialized shape."""
    key = s.SerializeToString()
    got = memo.get(key)
    if got is None:
        shape = _shape(s)
        got = memo[key] = (shape, shape.text())
    return got


class _Names:
    """What rendering an instruction needs from the whole module: instruction and computation names by id,
    and the memos of shapes and metadata."""

    __slots__ = ("ins", "comps", "shapes", "metas")

    def __init__(self, ins: dict[int, str], comps: dict[int, str]) -> None:
        self.ins, self.comps = ins, comps
        self.shapes: dict[bytes, tuple[Shape, str]] = {}
        self.metas: dict[tuple, tuple[OpMetadata, str]] = {}


def _instruction(i, names: _Names, root: bool) -> tuple[Instruction, int]:
    """One instruction message as an `Instruction` with the text the compiler prints for it, and the size of its
    largest replica group (0 when none). proto3 leaves zeros out, so an id, tuple index or parameter number of 0
    reads as absent, as the wire gives it."""
    opcode = i.opcode
    shape, shape_text = _shape_parts(i.shape, names.shapes)
    md, md_text = _metadata_parts(i.metadata, names.metas)
    found = [*map(names.ins.get, i.operand_ids)]
    ops: list[str] = ([names.ins.get(o, f"unknown.{o}") for o in i.operand_ids] if None in found
                      else cast("list[str]", found))
    attrs: list[tuple[str, str]] = []
    if kind := i.fusion_kind:
        attrs.append(("kind", kind if kind.startswith("k") else "k" + kind[:1].upper() + kind[1:]))
    if direction := i.comparison_direction:
        attrs.append(("direction", direction))
    if opcode == "get-tuple-element":  # tuple_index 0 is not serialized (the proto3 default)
        attrs.append(("index", str(max(0, i.tuple_index))))
    if (channel := i.channel_id) > 0:
        attrs.append(("channel_id", str(channel)))
    if opcode in _DIM_OPS and (dims := i.dimensions):
        attrs.append(("dimensions", "{" + ",".join(map(str, dims)) + "}"))
    if opcode == "gather" and (slices := i.gather_slice_sizes):
        attrs.append(("slice_sizes", "{" + ",".join(map(str, slices)) + "}"))
    if opcode in _MATH_OPS:
        attrs += _math(i)
    if thread := i.async_execution_thread:
        attrs.append(("async_execution_thread", _quoted(thread)))
    if called_ids := i.called_computation_ids:
        comp_names = names.comps
        called = tuple(comp_names.get(c, f"computation.{c}") for c in called_ids)
        grouped: dict[str, list[str]] = {}
        for k, c in zip(_called_keys(opcode, len(called)), called, strict=False):  # a while has body and
            grouped.setdefault(k, []).append(c)  # condition: extra called ids of a malformed proto are dropped
        for k, cs in grouped.items():
            attrs.append((k, "{" + ", ".join("%" + c for c in cs) + "}" if k == "branch_computations" else "%" + cs[0]))
    else:
        called = ()
    if target := i.custom_call_target:
        attrs.append(("custom_call_target", _quoted(target)))
    if i.HasField("frontend_attributes") and (frontend := _frontend(i.frontend_attributes)):
        attrs.append(("frontend_attributes", frontend))
    pnum = i.parameter_number or -1
    literal, lit_stats = "", cast("tuple[int, ...]", ())
    if opcode == "constant":
        if i.HasField("literal"):
            lit = i.literal
            literal, lit_stats = _literal(lit), _byte_literal_stats(lit)
        inner = literal
    elif opcode == "parameter":
        pnum = max(pnum, 0)  # proto3 leaves a parameter's number 0 out (the field's default)
        inner = str(pnum)
    else:
        inner = ", ".join(["%" + o for o in ops])
    backend = i.backend_config.decode("utf-8", "replace")
    name = i.name
    parts = ["%", name, " = ", shape_text, " ", opcode, "(", inner, ")"]
    for k, v in attrs:
        parts += (", ", k, "=", v)
    parts.append(md_text)
    if backend:
        parts += (", backend_config=", backend)
    text = "".join(parts)
    group = _group_size(i) if i.replica_groups or i.HasField("collective_device_list") or i.HasField(
        "mesh_replica_groups") else 0
    return Instruction.decoded(name, opcode, shape, tuple(ops), called, tuple(attrs), md, backend, text, root, pnum,
                               literal, lit_stats), group


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


def _stack(st) -> StackFrames:
    return StackFrames(tuple(st.file_names), tuple(st.function_names),
                       tuple((x.file_name_id, x.function_name_id, x.line) for x in st.file_locations),
                       tuple((x.file_location_id, x.parent_frame_id) for x in st.stack_frames))


def _names_of(comps_pb) -> _Names:
    """The module's instruction and computation names by id (an id of 0 is absent on the wire: -1)."""
    return _Names({i.id or -1: i.name for c in comps_pb for i in c.instructions}, {c.id or -1: c.name for c in comps_pb})


def _accelerated(data: bytes, nested: bool, names: _Names) -> list | None:
    """The C accelerator's instructions of the module in `data` (per computation, in wire order: an
    Instruction, or None for one the Python path builds), or None when it is not installed or declines."""
    if _accel is None:
        return None
    from profanalyzer.read.hlo import hlo_min_pb2 as pb

    def new_shape(raw: bytes) -> tuple[Shape, str]:
        shape = _shape(pb.Shape.FromString(raw))  # type: ignore[attr-defined]
        return shape, shape.text()

    def new_meta(key: tuple) -> tuple[OpMetadata, str]:
        return _metadata_text(key)

    return _accel.instructions(data, nested, names.ins, names.comps, {}, new_shape, names.metas, new_meta, Instruction)


def _module(mod, source: str, data: bytes | None = None, nested: bool = False) -> Module:
    sched = {e.key: list(e.value.instruction_ids) for e in mod.schedule.sequences}
    comps_pb = list(mod.computations)
    if not comps_pb:
        raise ValueError("no computations: not an HloProto / HloModuleProto")
    entry_id, entry_name = mod.entry_computation_id or -1, mod.entry_computation_name
    names = _names_of(comps_pb)
    comp_names = names.comps
    fast = _accelerated(data, nested, names) if data is not None else None
    if fast is not None and [len(x) for x in fast] != [len(c.instructions) for c in comps_pb]:
        fast = None  # not the runtime's reading of the bytes: the Python path for all
    comps, groups = [], 1
    for k, c in enumerate(comps_pb):
        cid, root = c.id or -1, c.root_id or -1
        order = list(zip(c.instructions, fast[k] if fast is not None else [None] * len(c.instructions), strict=True))
        if cid in sched:  # the schedule's order for scheduled computations
            by_id = {i.id or -1: (i, f) for i, f in order}
            ids = sched[cid]
            listed = set(ids)
            order = [by_id[i] for i in ids if i in by_id] + [(i, f) for i, f in order if (i.id or -1) not in listed]
        made = []
        for i, ins in order:
            if ins is None:
                ins, group = _instruction(i, names, (i.id or -1) == root)
                if group > groups:
                    groups = group
            made.append(ins)
        comps.append(Computation(c.name, tuple(made), cid == entry_id or c.name == entry_name, c.execution_thread))
    entry = comp_names.get(entry_id, entry_name) or comps[-1].name
    # the proto holds no num_partitions (the module config does): the largest collective group stands for it
    return Module(name=mod.name or "module", computations=tuple(comps), entry=entry, is_scheduled=bool(sched),
                  stack=_stack(mod.stack_frame_index), source=source, stage="proto", num_partitions=groups)


def parse_hlo_proto_bytes(data: bytes, source: str = "") -> Module:
    """An HloProto (field 1: the module) or a bare HloModuleProto, decoded by the protobuf runtime from the
    project's own hlo_min.proto. Raises ValueError on bytes that are neither."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    from profanalyzer.read.hlo import hlo_min_pb2 as pb

    try:
        top = pb.HloProto.FromString(data)  # type: ignore[attr-defined]
        if top.HasField("hlo_module") and top.hlo_module.computations:
            return replace(_module(top.hlo_module, source, data, nested=True), proto=bytes(data))
    except (DecodeError, ValueError):
        pass  # an HloModuleProto's field 1 is its name, not a message
    try:
        mod = pb.Module.FromString(data)  # type: ignore[attr-defined]
    except DecodeError:
        raise ValueError("not an HloProto or HloModuleProto (the bytes do not parse as one)") from None
    return _module(mod, source, data)
