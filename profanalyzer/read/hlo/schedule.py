"""The per-scheduled-instruction table of a module: every instruction of the
entry computation in schedule order, with the computations it runs expanded
in place (a `while`'s condition and body, a `call`'s callee, an async start's
computation on its execution thread), each row saying how many times a step
runs it (`count`: the product of the enclosing loops' trip counts).

Fusion bodies are not rows: a fusion is one op, its body summarised
(`FusionBody`: the opcodes inside, the dots / convolutions and their operand
and result element types, custom calls).

While trip counts: `known_trip_count` in the loop's backend config, else
read from the loop itself: the condition compares a tuple element of its
parameter with a constant (`LT`/`LE`/`NE`/`GT`/`GE`); the start value is the
matching element of the loop's initial tuple when that is a constant (else
0, said so in `TripCount.how`), the step the constant the body adds to that
element (else 1).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from profanalyzer.read.hlo.model import Computation, Instruction, Module, Shape

__all__ = ["ScheduledOp", "FusionBody", "TripCount", "schedule", "trip_count", "fusion_body", "operand_shapes", "xprof_text",
           "op_phase", "op_remat", "trip_counts", "async_pairs", "TRIVIAL_OPCODES", "SPARSECORE_THREAD",
           "async_wrapper_role", "wrapped_op", "source_of"]

SPARSECORE_THREAD = "sparsecore"
SPARSECORE_DEVICE = "DEVICE_TYPE_SPARSECORE"
#: Opcodes that name values, not work (no time on a device).
TRIVIAL_OPCODES = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
                             "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain"})
ASYNC_ROLES = {"async-start": "start", "async-update": "update", "async-done": "done"}
_PAIRED = re.compile(r"^(?P<kind>[a-z\-]+)-(?P<role>start|done|update)$")
#: The opcodes that are async pairs of their own (`all-gather-start`, `copy-done`, `send`/`send-done`, ...). Any
#: other `<op>-start` / `-update` / `-done` is the HLO text's short form of an `async-start` (`-update`, `-done`)
#: wrapping one `<op>` (`call-start`, `slice-start`, `dynamic-slice-start`): what the HloProto of the same module
#: holds as `async-start(calls=%async_computation)` around that one instruction.
NATIVE_ASYNC_KINDS = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "send", "recv"})
_OPTIMIZER = re.compile(r"(?:^|/)(?:optax|optimizer|adam\w*|adamw|sgd|lion|scale_by_\w+|apply_gradients|"
                        r"clip_by_global_norm)(?:/|\(|$)", re.I)


@dataclass(frozen=True)
class FusionBody:
    opcodes: tuple[str, ...]  # distinct opcodes inside (nested fusions/calls included), in order met
    dots: tuple[tuple[str, tuple[str, ...], str], ...]  # (opcode, operand dtypes, result dtype) per dot/convolution
    custom_calls: tuple[str, ...]  # custom-call targets inside
    root_opcode: str = ""

    @property
    def has_matmul(self) -> bool:
        return bool(self.dots)


@dataclass(frozen=True)
class TripCount:
    n: int | None
    how: str


@dataclass(frozen=True)
class ScheduledOp:
    index: int
    computation: str
    instruction: Instruction
    thread: str  # "" main (TensorCore), else the execution thread ("sparsecore")
    count: int  # executions per step
    loops: tuple[str, ...]  # enclosing while instructions, outermost first
    in_async: str  # the async start whose computation holds this row ("" none)
    body: FusionBody | None
    operand_dtypes: tuple[str, ...]
    operand_bytes: int
    source: str  # file:line
    function: str

    @property
    def name(self) -> str:
        return self.instruction.name

    @property
    def opcode(self) -> str:
        return self.instruction.opcode

    @property
    def trivial(self) -> bool:
        return self.opcode in TRIVIAL_OPCODES

    @property
    def op_name(self) -> str:
        return self.instruction.metadata.op_name

    @property
    def result_dtypes(self) -> tuple[str, ...]:
        return self.instruction.shape.dtypes

    @property
    def result_bytes(self) -> int:
        return self.instruction.shape.bytes

    @property
    def estimated_cycles(self) -> int | None:
        return self.instruction.estimated_cycles

    @property
    def sparsecore(self) -> bool:
        """Runs on the SparseCore: its thread, or the compiler placed it there."""
        return self.thread == SPARSECORE_THREAD or self.instruction.device_type == SPARSECORE_DEVICE

    @property
    def async_role(self) -> str | None:
        """start / update / done of an async pair (async-* wrappers and the
        `<op>-start`/`-done` forms), else None."""
        op = self.opcode
        if op in ASYNC_ROLES:
            return ASYNC_ROLES[op]
        m = _PAIRED.match(op)
        if m and m.group("kind") not in ("dynamic-update", "dynamic"):
            return m.group("role")
        return None

    @property
    def async_thread(self) -> str:
        return self.instruction.async_execution_thread

    @property
    def custom_call_target(self) -> str:
        return self.instruction.custom_call_target

    @property
    def fusion_kind(self) -> str:
        return self.instruction.fusion_kind

    @property
    def kernel(self) -> str:
        """A custom call's kernel: a Pallas kernel (`tpu_custom_call`) by the
        name the compiler gave the call (`splash_mha_fwd_segmented_residuals.3`
        -> `splash_mha_fwd_segmented_residuals`), another by its target."""
        if self.opcode != "custom-call":
            return ""
        target = self.custom_call_target
        if target == "tpu_custom_call":
            return re.sub(r"(?:\.\d+)+$", "", self.name)
        return target

    @cached_property
    def remat(self) -> bool:
        return op_remat(self.instruction)

    @cached_property
    def phase(self) -> str | None:
        return op_phase(self.instruction.metadata.op_name)


def op_remat(ins: Instruction) -> bool:
    return ".remat" in ins.name or "rematted_computation" in ins.metadata.op_name


def op_phase(op_name: str) -> str | None:
    """backward under `transpose(jvp(`, forward under `jvp(`, optimizer under
    an optimizer scope; else None."""
    if "transpose(jvp(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    if _OPTIMIZER.search(op_name):
        return "optimizer"
    return None


def async_wrapper_role(opcode: str) -> str | None:
    """start / update / done of an async wrapper: `async-start` / `-update` /
    `-done`, or the text's `<op>-start` short form of one (see
    NATIVE_ASYNC_KINDS); None for a native async op or any other opcode."""
    if opcode in ASYNC_ROLES:
        return ASYNC_ROLES[opcode]
    m = _PAIRED.match(opcode)
    if m is None or m.group("kind") in NATIVE_ASYNC_KINDS:
        return None
    return m.group("role")


def wrapped_op(ins: Instruction) -> Instruction | None:
    """The one instruction a short-form async start wraps (`slice-start` ->
    the `slice`), as the HloProto's async computation holds it: the start's
    operands, called computations and attributes, the result its shape's
    second element ((operands), result, context). None for `async-start`
    itself (its computation holds the work) and for anything else."""
    if ins.opcode == "async-start" or async_wrapper_role(ins.opcode) != "start":
        return None
    parts = ins.shape.parts if ins.shape.is_tuple else ()
    result = parts[1] if len(parts) >= 2 else ins.shape
    base = ins.opcode.removesuffix("-start")
    return Instruction(name=ins.name.removesuffix("-start") if ins.name.endswith("-start") else f"{ins.name}.wrapped",
                       opcode=base, shape=result, operands=ins.operands, operand_indices=ins.operand_indices,
                       called=ins.called, attrs=tuple(a for a in ins.attrs if a[0] != "async_execution_thread"),
                       metadata=ins.metadata, text=ins.text)


def operand_shapes(ins: Instruction, comp: Computation) -> tuple[Shape, ...]:
    out = []
    idx = ins.operand_indices or (-1,) * len(ins.operands)
    for name, k in zip(ins.operands, idx, strict=True):
        d = comp.by_name.get(name)
        if d is None:
            continue
        s = d.shape
        if k >= 0 and s.is_tuple and k < len(s.parts):
            s = s.parts[k]
        out.append(s)
    return tuple(out)


def xprof_text(ins: Instruction, comp: Computation) -> str:
    """The instruction as XProf names an XLA Ops event: the HLO long form,
    each operand with its shape (`fusion(bf16[8,128]{1,0} %p, ...)`), its
    attributes (kind, calls, custom_call_target, ...), no metadata and no
    backend_config -- what a capture's classifier sees for this op."""
    shapes = {}
    idx = ins.operand_indices or (-1,) * len(ins.operands)
    for name, k in zip(ins.operands, idx, strict=True):
        d = comp.by_name.get(name)
        if d is None:
            continue
        s = d.shape
        if k >= 0 and s.is_tuple and k < len(s.parts):
            s = s.parts[k]
        shapes[(name, k)] = s
    if ins.opcode == "constant":
        inner = ins.literal
    elif ins.opcode == "parameter":
        inner = str(ins.parameter_number)
    else:
        inner = ", ".join((f"{shapes[(n, k)].text()} " if (n, k) in shapes else "") + f"%{n}" + (f"#{k}" if k >= 0 else "")
                          for n, k in zip(ins.operands, idx, strict=True))
    attrs = "".join(f", {k}={v}" for k, v in ins.attrs if k not in ("frontend_attributes", "metadata", "backend_config"))
    return f"%{ins.name} = {ins.shape.text()} {ins.opcode}({inner}){attrs}"


def fusion_body(module: Module, comp_name: str, _depth: int = 0) -> FusionBody:
    comp = module.by_name.get(comp_name)
    if comp is None or _depth > 6:
        return FusionBody((), (), ())
    opcodes: dict[str, None] = {}
    dots: list[tuple[str, tuple[str, ...], str]] = []
    customs: list[str] = []
    for ins in comp.instructions:
        opcodes.setdefault(ins.opcode)
        if ins.opcode in ("dot", "convolution", "ragged-dot", "scaled-dot"):
            dts = tuple(s.dtype for s in operand_shapes(ins, comp))
            dots.append((ins.opcode, dts, ins.shape.dtype))
        elif ins.opcode == "custom-call":
            customs.append(ins.custom_call_target)
        if ins.opcode in ("fusion", "call"):
            for c in ins.called:
                sub = fusion_body(module, c, _depth + 1)
                for o in sub.opcodes:
                    opcodes.setdefault(o)
                dots += sub.dots
                customs += sub.custom_calls
    root = comp.root
    return FusionBody(tuple(opcodes), tuple(dots), tuple(customs), root.opcode if root else "")


def _const(comp: Computation, name: str, depth: int = 0) -> int | None:
    ins = comp.by_name.get(name)
    if ins is None or depth > 4:
        return None
    if ins.opcode == "constant":
        try:
            return int(float(ins.literal))
        except ValueError:
            return None
    if ins.opcode in ("bitcast", "convert", "copy", "reshape", "broadcast") and ins.operands:
        return _const(comp, ins.operands[0], depth + 1)
    return None


def _element(comp: Computation, name: str, k: int) -> tuple[str, int] | None:
    """The (instruction, tuple index) a value reads: `%p#k` or get-tuple-element(%p), index=k."""
    ins = comp.by_name.get(name)
    if ins is None:
        return None
    if ins.opcode == "get-tuple-element" and ins.operands:
        try:
            return ins.operands[0], int(ins.attr("index", "-1"))
        except ValueError:
            return None
    return (name, k) if k >= 0 else None


def _induction(cond: Computation) -> tuple[int, int, str] | None:
    """(tuple index, limit, direction) of the condition's compare."""
    root = cond.root
    if root is None:
        return None
    comp = cond
    if root.opcode == "fusion" and root.called:  # a compare fused with its operands: look inside is not needed
        return None
    if root.opcode != "compare" or len(root.operands) != 2:
        return None
    direction = root.attr("direction")
    idx = root.operand_indices or (-1, -1)
    params = {i.name for i in comp.instructions if i.opcode == "parameter"}
    for side in (0, 1):
        el = _element(comp, root.operands[side], idx[side])
        lim = _const(comp, root.operands[1 - side])
        if el is not None and el[0] in params and lim is not None:
            d = direction
            if side == 1:  # constant on the left: flip the direction
                d = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(d, d)
            return el[1], lim, d
    return None


def trip_count(module: Module, loop: Instruction, caller: Computation) -> TripCount:
    known = loop.known_trip_count
    if known is not None:
        return TripCount(known, "known_trip_count in the backend config")
    cond_name = loop.attr("condition").lstrip("%")
    body_name = loop.attr("body").lstrip("%")
    cond, body = module.by_name.get(cond_name), module.by_name.get(body_name)
    if cond is None or body is None:
        return TripCount(None, "condition or body not in the module")
    ind = _induction(cond)
    if ind is None:
        return TripCount(None, "the condition is not a compare of a loop counter with a constant")
    k, limit, direction = ind
    init, how_init = 0, "start 0 (assumed: the initial value is not a constant)"
    if loop.operands:
        tup = caller.by_name.get(loop.operands[0])
        if tup is not None and tup.opcode == "tuple" and k < len(tup.operands):
            v = _const(caller, tup.operands[k])
            if v is not None:
                init, how_init = v, f"start {v}"
    step, how_step = 1, "step 1 (assumed)"
    root = body.root
    if root is not None and root.opcode == "tuple" and k < len(root.operands):
        upd = body.by_name.get(root.operands[k])
        if upd is not None and upd.opcode in ("add", "subtract") and len(upd.operands) == 2:
            uidx = upd.operand_indices or (-1, -1)
            for side in (0, 1):
                c = _const(body, upd.operands[side])
                el = _element(body, upd.operands[1 - side], uidx[1 - side])
                if c is not None and el is not None and el[1] == k:
                    step = c if upd.opcode == "add" else -c
                    how_step = f"step {step}"
                    break
    if step == 0:
        return TripCount(None, "the loop counter does not change")
    if direction in ("LT", "NE") and step > 0:
        n = max(0, math.ceil((limit - init) / step))
    elif direction == "LE" and step > 0:
        n = max(0, (limit - init) // step + 1)
    elif direction == "GT" and step < 0:
        n = max(0, math.ceil((init - limit) / -step))
    elif direction == "GE" and step < 0:
        n = max(0, (init - limit) // -step + 1)
    else:
        return TripCount(None, f"compare {direction} with step {step}: not a counted loop")
    return TripCount(n, f"condition: counter #{k} {direction} {limit}; {how_init}, {how_step}")


def source_of(module: Module, ins: Instruction) -> tuple[str, str]:
    """(`file:line`, function) of an instruction: its stack frame's first user frame, else its metadata."""
    md = ins.metadata
    if md.stack_frame_id:
        loc = module.stack.user_location(md.stack_frame_id)
        if loc is not None and loc[0]:
            return f"{loc[0]}:{loc[1]}", loc[2]
    if md.source_file:
        return f"{md.source_file}:{md.source_line}", ""
    return "", ""


def schedule(module: Module) -> tuple[ScheduledOp, ...]:
    """The rows, in schedule order (the entry computation's order; the
    instructions of each computation it runs in place)."""
    rows: list[ScheduledOp] = []

    def walk(comp: Computation, count: int, loops: tuple[str, ...], thread: str, in_async: str, depth: int) -> None:
        if depth > 32:
            return
        for ins in comp.instructions:
            body = None
            if ins.opcode == "fusion" and ins.called:
                body = fusion_body(module, ins.called[0])
            shapes = operand_shapes(ins, comp)
            src, fn = source_of(module, ins)
            rows.append(ScheduledOp(len(rows), comp.name, ins, thread, count, loops, in_async, body,
                                    tuple(dict.fromkeys(s.dtype for s in shapes for s in s.leaves())),
                                    sum(s.bytes for s in shapes), src, fn))
            if ins.opcode == "while":
                tc = trip_count(module, ins, comp)
                n = tc.n if tc.n is not None else 1
                cond = module.by_name.get(ins.attr("condition").lstrip("%"))
                bodyc = module.by_name.get(ins.attr("body").lstrip("%"))
                if cond is not None:
                    walk(cond, count * (n + 1), loops + (ins.name,), thread, in_async, depth + 1)
                if bodyc is not None:
                    walk(bodyc, count * n, loops + (ins.name,), thread, in_async, depth + 1)
            elif ins.opcode == "call" and ins.called:
                callee = module.by_name.get(ins.called[0])
                if callee is not None:
                    walk(callee, count, loops, callee.execution_thread or thread, in_async, depth + 1)
            elif ins.opcode == "async-start" and ins.called:
                callee = module.by_name.get(ins.called[0])
                if callee is not None:
                    t = ins.async_execution_thread or callee.execution_thread or thread
                    walk(callee, count, loops, t, ins.name, depth + 1)
            elif (inner := wrapped_op(ins)) is not None:  # the text's `<op>-start`: the proto's async computation
                t = ins.async_execution_thread or thread
                callee = module.by_name.get(inner.called[0]) if inner.opcode == "call" and inner.called else None
                if callee is not None:
                    walk(callee, count, loops, callee.execution_thread or t, ins.name, depth + 1)
                elif inner.opcode != "call":
                    rows.append(ScheduledOp(len(rows), comp.name, inner, t, count, loops, ins.name, None,
                                            rows[-1].operand_dtypes, rows[-1].operand_bytes, src, fn))
            elif ins.opcode == "conditional":
                for c in ins.called:
                    callee = module.by_name.get(c)
                    if callee is not None:
                        walk(callee, count, loops, thread, in_async, depth + 1)

    entry = module.entry_computation
    if entry is not None:
        walk(entry, 1, (), entry.execution_thread, "", 0)
    return tuple(rows)


def async_pairs(module: Module) -> dict[str, str]:
    """Each async done (and update) -> the start it completes, followed
    through the operand chain (`x-done(x-update(x-start))`), per computation."""
    out: dict[str, str] = {}
    for c in module.computations:
        for ins in c.instructions:
            if not (ins.opcode.endswith("-done") or ins.opcode.endswith("-update")) or not ins.operands:
                continue
            name = ins.operands[0]
            for _ in range(8):
                d = c.by_name.get(name)
                if d is None:
                    break
                if d.opcode.endswith("-start"):
                    out[ins.name] = d.name
                    break
                if not d.opcode.endswith("-update") or not d.operands:
                    break
                name = d.operands[0]
    return out


def trip_counts(module: Module) -> dict[str, TripCount]:
    """Each while instruction's trip count, by instruction name."""
    return {ins.name: trip_count(module, ins, c) for c in module.computations for ins in c.instructions
            if ins.opcode == "while"}
