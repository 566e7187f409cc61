"""FLOPs of a compiled program's instructions, from the HLO alone: the
multiply-adds of its dots and convolutions (each one 2 FLOPs), a fusion
counting those of its body (nested fusions and calls included).

* dot (and ragged-dot / scaled-dot): 2 x the result's elements x the
  product of the left operand's contracting dimensions
  (`lhs_contracting_dims`); the batch and free dimensions are the result's;
* convolution: 2 x (input features / feature_group_count) x output
  features x (batch / batch_group_count) x the valid (output position,
  kernel position) pairs of its spatial dimensions: the pairs whose input
  position, after stride, padding and dilation (`window`), falls on a real
  input element -- base dilation (`lhs_dilate`) holes and padding do no
  work. Dimensions from `dim_labels` (`0b1f_0o1i->01bf`).

Elementwise work, reductions and transcendentals are not counted, so the
figure is a lower bound of what XLA's cost analysis reports for the same
module (it counts them); on matmul-dominated programs it is close to it.
Custom calls (Pallas kernels) carry no dot in the HLO: they get no FLOPs
here (the classifier derives a matmul kernel's from its operand shapes).

`accessed_bytes`: the HBM bytes an op reads and writes, from its shapes
(the roofline's denominator).

Imports: model only.
"""

from __future__ import annotations

import math
import re

from profanalyzer.read.hlo.model import Computation, Instruction, Module, Shape

__all__ = ["dot_flops", "convolution_flops", "instruction_flops", "accessed_bytes", "valid_window_pairs", "FlopsTable", "DOT_OPCODES"]

DOT_OPCODES = frozenset({"dot", "ragged-dot", "scaled-dot"})
_WINDOW_KEYS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate")
_DIMS = re.compile(r"\{([^}]*)\}")


def _int_list(text: str) -> tuple[int, ...] | None:
    """`{1,2}` / `1,2` -> (1, 2); None when not a list of integers."""
    m = _DIMS.fullmatch(text.strip())
    body = m.group(1) if m else text.strip()
    try:
        return tuple(int(x) for x in body.split(",") if x.strip())
    except ValueError:
        return None


def _shape(ins: Instruction, comp: Computation, k: int) -> Shape | None:
    """The array shape of operand k (a tuple element when indexed)."""
    if k >= len(ins.operands):
        return None
    d = comp.by_name.get(ins.operands[k])
    if d is None:
        return None
    s = d.shape
    idx = ins.operand_indices[k] if k < len(ins.operand_indices) else -1
    if idx >= 0 and s.is_tuple and idx < len(s.parts):
        s = s.parts[idx]
    return None if s.is_tuple else s


def dot_flops(ins: Instruction, comp: Computation) -> int | None:
    """2 x result elements x contracted elements; None when the shapes or
    the dimension numbers are not there."""
    lhs = _shape(ins, comp, 0)
    dims = _int_list(ins.attr("lhs_contracting_dims", "{}"))
    if lhs is None or dims is None or ins.shape.is_tuple or any(not 0 <= d < len(lhs.dims) for d in dims):
        return None
    return 2 * ins.shape.elements * math.prod(lhs.dims[d] for d in dims)


def _window(text: str, n: int) -> dict[str, list[tuple[int, ...]]] | None:
    """`{size=2x4 stride=1x3 pad=1_1x3_3 lhs_dilate=2x4}` -> per key one tuple per spatial dimension
    (pad: (low, high)); missing keys take their defaults."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    got: dict[str, str] = {}
    for item in body.split():
        k, sep, v = item.partition("=")
        if sep:
            got[k] = v
    out: dict[str, list[tuple[int, ...]]] = {}
    try:
        for key in _WINDOW_KEYS:
            if key not in got:
                out[key] = [(0, 0) if key == "pad" else (1,)] * n
                continue
            parts = got[key].split("x")
            if key == "pad":
                vals = [tuple(int(x) for x in re.split(r"(?<=\d)_", p)) for p in parts]
            else:
                vals = [(int(p),) for p in parts]
            if len(vals) != n or (key == "pad" and any(len(v) != 2 for v in vals)):
                return None
            out[key] = vals
    except ValueError:
        return None
    return out


def valid_window_pairs(out_n: int, kernel_n: int, in_n: int, stride: int, pad_low: int, lhs_dilate: int,
                 rhs_dilate: int) -> int:
    """(output, kernel) position pairs of one spatial dimension whose input
    position u = o*stride - pad_low + k*rhs_dilate lands on an input element
    of the base-dilated input: 0 <= u <= (in-1)*lhs_dilate and u a multiple
    of lhs_dilate. Per kernel position the outputs form a range, thinned by
    the dilation to one residue class (a linear congruence)."""
    if min(out_n, kernel_n, in_n) <= 0 or stride <= 0 or lhs_dilate <= 0:
        return 0
    top = (in_n - 1) * lhs_dilate
    g = math.gcd(stride, lhs_dilate)
    period = lhs_dilate // g
    inv = pow(stride // g, -1, period) if period > 1 else 0
    total = 0
    for k in range(kernel_n):
        c = k * rhs_dilate - pad_low  # u = o*stride + c
        lo = max(0, -(c // stride))  # the first o with u >= 0: ceil(-c / stride)
        hi = min(out_n - 1, (top - c) // stride)  # the last o with u <= top
        if hi < lo:
            continue
        if lhs_dilate == 1:
            total += hi - lo + 1
            continue
        r = (-c) % lhs_dilate  # need o*stride = r (mod lhs_dilate)
        if r % g:
            continue
        o0 = (r // g) * inv % period if period > 1 else 0
        first = lo + (o0 - lo) % period
        if first <= hi:
            total += (hi - first) // period + 1
    return total


def convolution_flops(ins: Instruction, comp: Computation) -> int | None:
    """2 x the valid multiply-adds of a convolution (see the module doc);
    None when its shapes, `dim_labels` or `window` cannot be read."""
    lhs, rhs = _shape(ins, comp, 0), _shape(ins, comp, 1)
    labels = ins.attr("dim_labels")
    m = re.fullmatch(r"([0-9bf]+)_([0-9io]+)->([0-9bf]+)", labels)
    if lhs is None or rhs is None or m is None or ins.shape.is_tuple:
        return None
    lab_in, lab_k, lab_out = m.groups()
    out = ins.shape
    if len(lab_in) != len(lhs.dims) or len(lab_k) != len(rhs.dims) or len(lab_out) != len(out.dims):
        return None
    n = sum(ch.isdigit() for ch in lab_in)

    def spatial(lab: str, dims: tuple[int, ...]) -> list[int]:
        pos = {int(ch): i for i, ch in enumerate(lab) if ch.isdigit()}
        return [dims[pos[s]] for s in range(n)] if sorted(pos) == list(range(n)) else []

    s_in, s_k, s_out = spatial(lab_in, lhs.dims), spatial(lab_k, rhs.dims), spatial(lab_out, out.dims)
    if len(s_in) != n or len(s_k) != n or len(s_out) != n:
        return None
    win = _window(ins.attr("window", "{}"), n) if n else {}
    if win is None:
        return None
    valid = 1
    for d in range(n):
        valid *= valid_window_pairs(s_out[d], s_k[d], s_in[d], win["stride"][d][0], win["pad"][d][0],
                              win["lhs_dilate"][d][0], win["rhs_dilate"][d][0])
    try:
        fgc = max(1, int(ins.attr("feature_group_count", "1")))
        bgc = max(1, int(ins.attr("batch_group_count", "1")))
    except ValueError:
        return None
    in_f, batch = lhs.dims[lab_in.index("f")], lhs.dims[lab_in.index("b")]
    out_f = out.dims[lab_out.index("f")]
    return 2 * (in_f // fgc) * out_f * (batch // bgc) * valid


def _own(ins: Instruction, comp: Computation) -> int | None:
    if ins.opcode in DOT_OPCODES:
        return dot_flops(ins, comp)
    if ins.opcode == "convolution":
        return convolution_flops(ins, comp)
    return None


class FlopsTable:
    """Per-instruction FLOPs of one module, each fusion body counted once."""

    def __init__(self, module: Module):
        self.m = module
        self._bodies: dict[str, int | None] = {}

    def body(self, name: str, depth: int = 0) -> int | None:
        """FLOPs of one run of a computation's dots and convolutions (nested
        fusions and calls included); None when it holds none."""
        if name in self._bodies:
            return self._bodies[name]
        comp = self.m.by_name.get(name)
        total: int | None = None
        if comp is not None and depth <= 8:
            for ins in comp.instructions:
                f = _own(ins, comp)
                if f is None and ins.opcode in ("fusion", "call") and ins.called:
                    f = self.body(ins.called[0], depth + 1)
                if f is not None:
                    total = (total or 0) + f
        self._bodies[name] = total
        return total

    def of(self, ins: Instruction, comp: Computation) -> int | None:
        """FLOPs of one run of an instruction as the replay emits it: a dot
        or convolution its own, a fusion its body's; None for anything else
        (a `call` or `while` runs its callees' instructions, which count
        themselves)."""
        own = _own(ins, comp)
        if own is not None:
            return own
        if ins.opcode == "fusion" and ins.called:
            return self.body(ins.called[0])
        return None


def instruction_flops(module: Module, ins: Instruction, comp: Computation) -> int | None:
    """One instruction's FLOPs (FlopsTable.of, without a shared table)."""
    return FlopsTable(module).of(ins, comp)


_PASS_THROUGH = frozenset({"bitcast", "copy", "reshape", "fusion", "convert"})


def _param_of(comp: Computation, name: str, module: Module, depth: int = 0) -> int | None:
    """The parameter number a value of a fusion body is (through bitcasts,
    copies and one-operand nested fusions), else None."""
    ins = comp.by_name.get(name)
    if ins is None or depth > 8:
        return None
    if ins.opcode == "parameter":
        return ins.parameter_number
    if ins.opcode in _PASS_THROUGH and len(ins.operands) == 1:
        return _param_of(comp, ins.operands[0], module, depth + 1)
    return None


def _hbm(s: Shape) -> int:
    """Bytes of the leaves of a shape that live in HBM (memory space 0)."""
    return sum(leaf.bytes for leaf in s.leaves() if leaf.memory_space == 0)


def accessed_bytes(module: Module, ins: Instruction, comp: Computation) -> int:
    """HBM bytes one run of an op reads and writes, from the shapes: its
    operands and result in HBM (memory space 0; on-chip operands move no HBM
    bytes). A fusion that updates a buffer in place (a dynamic-update-slice
    of one of its parameters, the root or an element of the root tuple)
    reads and writes the update, not the buffer."""
    shapes = []
    for k, name in enumerate(ins.operands):
        d = comp.by_name.get(name)
        if d is None:
            continue
        s = d.shape
        idx = ins.operand_indices[k] if k < len(ins.operand_indices) else -1
        if idx >= 0 and s.is_tuple and idx < len(s.parts):
            s = s.parts[idx]
        shapes.append(s)
    outs = list(ins.shape.parts) if ins.shape.is_tuple else [ins.shape]
    body = module.by_name.get(ins.called[0]) if ins.opcode == "fusion" and ins.called else None
    root = body.root if body is not None else None
    if body is None or root is None:
        return sum(map(_hbm, shapes)) + sum(map(_hbm, outs))
    elems = list(root.operands) if root.opcode == "tuple" else [root.name]
    total = 0
    in_place: set[int] = set()
    for k, out in enumerate(outs):
        e = body.by_name.get(elems[k]) if k < len(elems) else None
        while e is not None and e.opcode in ("bitcast", "copy") and e.operands:
            e = body.by_name.get(e.operands[0])
        if e is not None and e.opcode == "dynamic-update-slice" and len(e.operands) >= 2:
            p = _param_of(body, e.operands[0], module)
            upd = body.by_name.get(e.operands[1])
            if p is not None and 0 <= p < len(shapes) and p not in in_place and upd is not None:
                in_place.add(p)
                total += 2 * _hbm(upd.shape) if out.memory_space == 0 else 0
                continue
        total += _hbm(out)
    return total + sum(_hbm(s) for k, s in enumerate(shapes) if k not in in_place)
