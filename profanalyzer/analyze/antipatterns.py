"""HLO anti-patterns: ops the compiled program runs that move or widen data
without computing anything the model asked for, each with its time on the
step and the fix.

Read from the programs the capture carries (`/host:metadata` HloProtos) or
the compiled program itself, over the main module's scheduled instructions
(profanalyzer.hlo.schedule: fusion bodies are summarised, not rows, so every
row here runs on its own, outside a fusion). Kinds (`KINDS`, in report
order):

  layout_copy        a `copy` or `transpose` between two compute ops whose
                     result has its operand's elements (a layout or
                     dimension-order change only; host-memory copies are
                     host offload, not this)
  f32_promotion      a `convert` (or a fusion whose root is one) widening a
                     bf16 array to f32 of the same dimensions, read by a
                     reduction: the f32 copy goes through HBM at twice the
                     bytes
  runtime_fp8_scaling a fusion computing an amax (a max-reduction over `abs`)
                     in a program that converts to FP8: the scale is
                     computed at run time on every step
  unfused_reshape    a `reshape` (not a bitcast) run on its own
  unfused_update     a `dynamic-update-slice` run on its own

Time: the op's measured self time on the trace (mean per kept step per
TensorCore) when the trace has the op, else its share of the replay (a
compiled program's trace is the replay). An op the trace never ran gets 0.
Nothing is reported without a program (`None`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profanalyzer.analyze.attributed import Attributed
from profanalyzer.analyze.attribution import CoreWork, locate
from profanalyzer.model import AntiPattern
from profanalyzer.trace import LINE_OPS, Trace

__all__ = ["KINDS", "find_antipatterns", "detect"]

#: kind -> (what it is, the lever, the fix)
KINDS: dict[str, tuple[str, str, str]] = {
    "layout_copy": (
        "layout-only copy/transpose between two compute ops", "tokamax",
        "make producer and consumer agree on the layout: transpose the weights once outside the step, keep the "
        "dimension order the consumer contracts over (feature dim last, a multiple of 128 lanes), or fuse the two "
        "ops in one kernel"),
    "f32_promotion": (
        "bf16 promoted to f32 in HBM before a reduction", "fp8",
        "reduce in bf16 with an f32 accumulator (jnp.sum(x, dtype=jnp.float32) / preferred_element_type) so the "
        "widening happens inside the reduction's fusion instead of as a separate f32 array"),
    "runtime_fp8_scaling": (
        "FP8 scale computed at run time (amax reduction)", "fp8",
        "static (or delayed) FP8 scaling: pin the weight/activation scales found by profiling (guide L1: static "
        "scaling is faster), removing the per-step amax reductions"),
    "unfused_reshape": (
        "reshape left outside any fusion", "tokamax",
        "a reshape that changes the tiled layout copies the array: keep the minor dimension (a multiple of 128) "
        "unchanged, or reshape where the producer fuses it"),
    "unfused_update": (
        "dynamic-update-slice left outside any fusion", "tokamax",
        "update in place: donate the buffer (jit donate_argnums), keep the updated array in a scan carry, or write "
        "the slice from the producing kernel"),
}

COMPUTE = frozenset({"fusion", "dot", "convolution", "custom-call", "reduce", "ragged-dot"})
REDUCE = frozenset({"reduce", "reduce-window", "all-reduce", "reduce-scatter"})


def _fusion_root(module, ins):
    if ins.opcode != "fusion" or not ins.called:
        return None
    comp = module.by_name.get(ins.called[0])
    return comp.root if comp is not None else None


def _is_amax(module, ins) -> bool:
    """A fusion whose body takes abs and reduces with maximum."""
    if ins.opcode != "fusion" or not ins.called:
        return False
    comp = module.by_name.get(ins.called[0])
    if comp is None:
        return False
    ops = {i.opcode for i in comp.instructions}
    if "abs" not in ops or "reduce" not in ops:
        return False
    for i in comp.instructions:
        if i.opcode == "reduce":
            for callee in i.called:
                body = module.by_name.get(callee)
                if body is not None and any(x.opcode == "maximum" for x in body.instructions):
                    return True
    return False


def detect(module) -> list[tuple[str, str, str, str]]:
    """(kind, instruction, opcode, detail) of every anti-pattern in the module's schedule."""
    from profanalyzer.hlo.schedule import operand_shapes, schedule

    rows = schedule(module)
    comp_of = {c.name: c for c in module.computations}
    users: dict[str, list[str]] = {}
    by_name = {}
    for r in rows:
        by_name[r.name] = r
        for o in r.instruction.operands:
            users.setdefault(o, []).append(r.name)

    def opcode(name: str) -> str:
        r = by_name.get(name)
        return r.opcode if r is not None else ""

    def through(name: str, forward: bool, hops: int = 3) -> str:
        """The first non-trivial op before (operands) / after (users) `name`."""
        seen = {name}
        front = [name]
        for _ in range(hops):
            nxt = []
            for x in front:
                r = by_name.get(x)
                cand = users.get(x, []) if forward else (list(r.instruction.operands) if r is not None else [])
                for y in cand:
                    if y in seen:
                        continue
                    seen.add(y)
                    oc = opcode(y)
                    if oc in ("bitcast", "get-tuple-element", "tuple", "copy-start", "copy-done"):
                        nxt.append(y)
                    elif oc:
                        return y
            front = nxt
        return ""

    has_f8 = any(d.startswith("f8") for r in rows for d in r.result_dtypes) or any(
        d.startswith("f8") for r in rows for d in r.operand_dtypes)
    out: list[tuple[str, str, str, str]] = []
    for r in rows:
        ins, oc = r.instruction, r.opcode
        if r.sparsecore:
            continue
        comp = comp_of.get(r.computation)
        shapes = operand_shapes(ins, comp) if comp is not None else ()
        if oc in ("copy", "transpose") and shapes and not shapes[0].is_tuple and not ins.shape.is_tuple:
            src = shapes[0]
            if src.memory_space != 0 or ins.shape.memory_space != 0 or src.elements != ins.shape.elements:
                continue
            before, after = through(ins.name, False), through(ins.name, True)
            if opcode(before) in COMPUTE and opcode(after) in COMPUTE:
                what = "dimension order" if oc == "transpose" or src.dims != ins.shape.dims else "layout"
                out.append(("layout_copy", ins.name, oc,
                            f"{_shape(src)} -> {_shape(ins.shape)} ({what} only) between {before} and {after}"))
        root = _fusion_root(module, ins)
        is_convert = oc == "convert" or (root is not None and root.opcode == "convert")
        if is_convert and shapes and ins.shape.dtype == "f32" and any(
                s.dtype == "bf16" and s.dims == ins.shape.dims for s in shapes):
            readers = [u for u in users.get(ins.name, []) if opcode(u) in REDUCE or _reduces(module, by_name.get(u))]
            if readers:
                out.append(("f32_promotion", ins.name, oc,
                            f"bf16[{_dims(ins.shape.dims)}] -> f32 ({ins.shape.bytes / 1e6:.1f} MB), read by {readers[0]}"))
        if has_f8 and _is_amax(module, ins):
            out.append(("runtime_fp8_scaling", ins.name, oc, "max(|x|) reduction in a program that converts to FP8"))
        if oc == "reshape":
            out.append(("unfused_reshape", ins.name, oc,
                        f"{_shape(shapes[0]) if shapes else '?'} -> {_shape(ins.shape)}"))
        if oc == "dynamic-update-slice":
            upd = f" with {_shape(shapes[1])}" if len(shapes) > 1 else ""
            out.append(("unfused_update", ins.name, oc, f"{_shape(ins.shape)}{upd}"))
    return out


def _dims(dims) -> str:
    return ",".join(str(d) for d in dims)


def _shape(s) -> str:
    return f"{s.dtype}[{_dims(s.dims)}]{s.layout}"


def _reduces(module, row) -> bool:
    if row is None or row.body is None:
        return False
    return "reduce" in row.body.opcodes


def _measured(trace: Trace, work: Sequence[CoreWork], kept_steps: set[int], names: set[str]) -> tuple[dict[str, float], int]:
    """Self time (duration of the op's own events) per op name over the kept steps, summed over cores."""
    tot: dict[str, float] = {}
    n = 0
    kept = np.asarray(sorted(kept_steps), dtype=np.int64)
    for w in work:
        st = trace.steps.get(w.plane.label)
        ln = w.plane.line(LINE_OPS)
        if st is None or ln is None or not len(ln.events):
            continue
        sel = np.isin(st.number, kept)
        ks, ke = st.start_ps[sel], st.end_ps[sel]
        order = np.argsort(ks)
        ks, ke = ks[order], ke[order]
        n += int(sel.sum())
        ev = ln.events
        short = w.plane.meta.short_names
        rows = [i for i, s in enumerate(short) if s in names]
        if not rows:
            continue
        want = np.isin(ev.meta, np.asarray(rows, dtype=ev.meta.dtype))
        _, inside = locate(ks, ke, ev.start_ps[want])
        idx = np.flatnonzero(want)[inside]
        for k, d in zip(ev.meta[idx].tolist(), ev.self_ps[idx].tolist(), strict=True):
            nm = short[int(k)]
            tot[nm] = tot.get(nm, 0.0) + float(d)
    return tot, n


def find_antipatterns(att: Attributed) -> tuple[AntiPattern, ...] | None:
    trace, work, kept_steps, step_mean_ps = att.trace, att.work, att.kept_steps, att.step_mean
    program = att.program()[0]
    if program is None or not program.modules:
        return None
    module = program.main
    found = detect(module)
    if not found:
        return ()
    tot, n = _measured(trace, work, kept_steps, {f[1] for f in found})
    n = max(1, n)
    out = []
    for kind, name, oc, detail in found:
        ps = tot.get(name, 0.0) / n
        what, lever, fix = KINDS[kind]
        out.append(AntiPattern(kind=kind, op=name, opcode=oc, detail=f"{what}: {detail}", ps=ps,
                               fraction=ps / step_mean_ps if step_mean_ps > 0 else 0.0, lever=lever, fix=fix))
    order = list(KINDS)
    out.sort(key=lambda a: (order.index(a.kind), -a.ps, a.op))
    return tuple(out)
