"""HLO anti-patterns: ops the compiled program runs that move or widen data
without computing anything the model asked for, each with its time on the
step and the fix.

Read from the programs the capture carries (`/host:metadata` HloProtos) or
the compiled program itself, over the main module's scheduled instructions
(profanalyzer.read.hlo.schedule: fusion bodies are summarised, not rows, so every
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
  state_copy         a whole copy of the program's state: a `copy`, or a
                     fusion that copies, slices out or updates a slice of, an
                     array of the dimensions and type of one of the program's
                     entry parameters or of one entry of a stacked one (a KV
                     cache or a layer's, parameters, optimizer state,
                     typically donated and aliased to an output), at least
                     STATE_MIN_BYTES, or gathers a state array's pages into a
                     new contiguous array that large (a paged KV cache made
                     dense); a fusion or gather counts only when its
                     time is that of moving the whole array (at least half
                     its bytes at the chip's HBM bandwidth), i.e. it was not
                     done in place

Time: the op's measured self time on the trace (mean per kept step per
TensorCore) when the trace has the op, else its share of the replay (a
compiled program's trace is the replay). An op the trace never ran gets 0.
Nothing is reported without a program (`None`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from profanalyzer.analyze.attributed import Attributed
from profanalyzer.analyze.attribution import CoreWork, locate
from profanalyzer.model.analysis import AntiPattern
from profanalyzer.model.trace import LINE_OPS, Trace

__all__ = ["KINDS", "find_antipatterns", "detect", "state_arrays", "squeezed"]

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
    "state_copy": (
        "whole copy of a state buffer (an entry parameter's array) every step", "tokamax",
        "update the state in place: donate it (jit donate_argnums) and write only the new slot with "
        "dynamic_update_slice into the buffer the parameter arrives in; a layer's slice taken out of a stacked "
        "array inside a loop (a scan's xs/ys, or a carry sliced per layer) makes XLA copy the whole array: keep "
        "one buffer per layer, or write the slot from a kernel with input_output_aliases; the dump's buffer "
        "assignment shows whether the output shares the parameter's buffer"),
    "page_gather": (
        "pages of a state buffer gathered into a new contiguous buffer every step", "tokamax",
        "read the pages where they lie: a paged-attention kernel takes the page pools and the page table "
        "(jax.experimental.pallas.ops.tpu paged_attention / ragged_paged_attention, vLLM TPU's ragged paged "
        "attention) instead of gathering every sequence's pages and relaying them out for an einsum"),
}

#: A state copy smaller than this is not worth naming.
STATE_MIN_BYTES = 1 << 20
#: A fusion that updates a slice of a state-sized array is a whole copy when its time moves at least
#: this fraction of the array's bytes at the HBM bandwidth (an in-place update touches the slice only).
STATE_COPY_MIN_FRACTION = 0.5

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


def squeezed(dims) -> tuple[int, ...]:
    """Dimensions without the unit ones (a slice [1, ...] of a stacked array is that array's entry)."""
    return tuple(d for d in dims if d != 1)


def state_arrays(module) -> dict[tuple[str, tuple[int, ...]], str]:
    """(dtype, dims) -> entry parameter name, for every entry parameter array of at least STATE_MIN_BYTES."""
    entry = module.entry_computation
    out: dict[tuple[str, tuple[int, ...]], str] = {}
    if entry is None:
        return out
    slices: dict[tuple[str, tuple[int, ...]], str] = {}
    for ins in entry.instructions:
        if ins.opcode != "parameter":
            continue
        for leaf in ins.shape.leaves():
            if leaf.bytes >= STATE_MIN_BYTES:
                out.setdefault((leaf.dtype, squeezed(leaf.dims)), ins.name)
                if len(leaf.dims) > 1 and leaf.bytes // max(1, leaf.dims[0]) >= STATE_MIN_BYTES:
                    slices.setdefault((leaf.dtype, squeezed(leaf.dims[1:])), f"{ins.name}[i]")
    for k, v in slices.items():  # one entry of a stacked state (a layer's KV cache), where it is no parameter itself
        out.setdefault(k, v)
    return out


def _slot_updated(module, states) -> dict:
    """The states the program writes position by position (a dynamic-update-slice or scatter into an
    array of their dimensions, fusion bodies included): a cache, not a table read as it is."""
    from profanalyzer.read.hlo.schedule import operand_shapes

    out = {}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode in ("dynamic-update-slice", "scatter"):
                shapes = operand_shapes(ins, comp)
                if shapes and not shapes[0].is_tuple:
                    key = (shapes[0].dtype, squeezed(shapes[0].dims))
                    if key in states:
                        out[key] = states[key]
    return out


def _state_copy(row, shapes, states, updated, module=None) -> tuple[str, int, bool] | None:
    """(detail, bytes, needs_time_check) when the row copies a state-sized array."""
    ins = row.instruction
    leaves = ins.shape.leaves()
    hit = next(((leaf, states[(leaf.dtype, squeezed(leaf.dims))]) for leaf in leaves
                if (leaf.dtype, squeezed(leaf.dims)) in states and leaf.memory_space == 0), None)
    if hit is None:
        return _gathered(row, shapes, updated, module)
    leaf, param = hit
    if row.opcode == "copy":
        return (f"{_shape(leaf)} ({leaf.bytes / 1e6:.1f} MB), the array of entry parameter {param}", leaf.bytes, False)
    body = row.body
    if row.opcode == "fusion" and body is not None and (
            {"copy", "dynamic-update-slice", "dynamic-slice"} & set(body.opcodes)) and not body.has_matmul:
        what = ("slice update" if "dynamic-update-slice" in body.opcodes
                else "slice copy" if "dynamic-slice" in body.opcodes else "copy")
        return (f"{what} fusion writing {_shape(leaf)} ({leaf.bytes / 1e6:.1f} MB), the array of entry parameter "
                f"{param}", leaf.bytes, True)
    return None


def _gathers_blocks(module, row) -> bool:
    """The op (or its fusion body) gathers blocks (slices of two or more non-unit dimensions: pages of
    positions x heads x head dim), not rows (an embedding lookup's one vector per index)."""
    ins = row.instruction
    cands = [ins] if ins.opcode == "gather" else []
    if ins.opcode == "fusion" and module is not None:
        for name in ins.called:
            comp = module.by_name.get(name)
            cands += [i for i in (comp.instructions if comp is not None else ()) if i.opcode == "gather"]
    for g in cands:
        sizes = [int(x) for x in re.findall(r"\d+", g.attr("slice_sizes"))]
        if sum(1 for x in sizes if x > 1) >= 2:
            return True
    return False


def _gathered(row, shapes, states, module=None) -> tuple[str, int, bool] | None:
    """A gather (or a fusion of one, no matmul) reading a state array the step writes position by position
    (a paged KV cache; `states`: those) into a new contiguous array of at least STATE_MIN_BYTES: its pages
    copied every step (time-checked). An embedding table, read as it is, is no such state."""
    body = row.body
    gathers = row.opcode == "gather" or (row.opcode == "fusion" and body is not None and "gather" in body.opcodes
                                         and not body.has_matmul)
    if not gathers or row.instruction.shape.is_tuple or row.instruction.shape.bytes < STATE_MIN_BYTES or not (
            _gathers_blocks(module, row)):
        return None
    src = next((states[(s.dtype, squeezed(s.dims))] for s in shapes
                if not s.is_tuple and (s.dtype, squeezed(s.dims)) in states), None)
    if src is None:
        return None
    out = row.instruction.shape
    return (f"gather of the pages of a state shaped like entry parameter {src} into a contiguous {_shape(out)} "
            f"({out.bytes / 1e6:.1f} MB)",
            out.bytes, True)


def detect(module) -> list[tuple[str, str, str, str]]:
    """(kind, instruction, opcode, detail) of every anti-pattern in the module's schedule."""
    return [f[:4] for f in _detect(module)]


def _detect(module) -> list[tuple[str, str, str, str, int, int]]:
    """detect's rows with (bytes moved, runs per step) for state copies that need a time check (runs 0:
    no check)."""
    from profanalyzer.read.hlo.schedule import operand_shapes, schedule

    rows = schedule(module)
    states = state_arrays(module)
    updated = _slot_updated(module, states) if states else {}
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
    out: list[tuple[str, str, str, str, int, int]] = []

    def add(kind: str, name: str, oc: str, detail: str, nbytes: int = 0, check: int = 0) -> None:
        out.append((kind, name, oc, detail, nbytes, check))

    for r in rows:
        ins, oc = r.instruction, r.opcode
        if r.sparsecore:
            continue
        comp = comp_of.get(r.computation)
        shapes = operand_shapes(ins, comp) if comp is not None else ()
        if states and oc in ("copy", "fusion", "gather"):
            sc = _state_copy(r, shapes, states, updated, module)
            if sc is not None:
                gathered = sc[0].startswith("gather of")
                add("page_gather" if gathered else "state_copy", ins.name, oc, sc[0], sc[1],
                    max(1, r.count) if sc[2] else 0)
                if gathered:  # the gathered pages relaid out for the consumer: the same cost, named with it
                    for u in _relayouts(ins.name, users, by_name):
                        ur = by_name[u]
                        add("page_gather", u, ur.opcode, f"relayout of the pages {ins.name} gathered: "
                            f"{_shape(ur.instruction.shape)} ({ur.instruction.shape.bytes / 1e6:.1f} MB)",
                            ur.instruction.shape.bytes, max(1, ur.count))
                continue
        if oc in ("copy", "transpose") and shapes and not shapes[0].is_tuple and not ins.shape.is_tuple:
            src = shapes[0]
            if src.memory_space != 0 or ins.shape.memory_space != 0 or src.elements != ins.shape.elements:
                continue
            before, after = through(ins.name, False), through(ins.name, True)
            if opcode(before) in COMPUTE and opcode(after) in COMPUTE:
                what = "dimension order" if oc == "transpose" or src.dims != ins.shape.dims else "layout"
                add("layout_copy", ins.name, oc,
                    f"{_shape(src)} -> {_shape(ins.shape)} ({what} only) between {before} and {after}")
        root = _fusion_root(module, ins)
        is_convert = oc == "convert" or (root is not None and root.opcode == "convert")
        if is_convert and shapes and ins.shape.dtype == "f32" and any(
                s.dtype == "bf16" and s.dims == ins.shape.dims for s in shapes):
            readers = [u for u in users.get(ins.name, []) if opcode(u) in REDUCE or _reduces(module, by_name.get(u))]
            if readers:
                add("f32_promotion", ins.name, oc,
                    f"bf16[{_dims(ins.shape.dims)}] -> f32 ({ins.shape.bytes / 1e6:.1f} MB), read by {readers[0]}")
        if has_f8 and _is_amax(module, ins):
            add("runtime_fp8_scaling", ins.name, oc, "max(|x|) reduction in a program that converts to FP8")
        if oc == "reshape":
            add("unfused_reshape", ins.name, oc, f"{_shape(shapes[0]) if shapes else '?'} -> {_shape(ins.shape)}")
        if oc == "dynamic-update-slice":
            upd = f" with {_shape(shapes[1])}" if len(shapes) > 1 else ""
            add("unfused_update", ins.name, oc, f"{_shape(ins.shape)}{upd}")
    return out


def _relayouts(name: str, users: dict[str, list[str]], by_name: dict) -> list[str]:
    """Copies / transposes of the whole of `name`'s output (through bitcasts): a relayout of it."""
    row = by_name.get(name)
    if row is None:
        return []
    n = row.instruction.shape.elements
    out, front, seen = [], [name], {name}
    for _ in range(3):
        nxt = []
        for x in front:
            for u in users.get(x, []):
                r = by_name.get(u)
                if u in seen or r is None:
                    continue
                seen.add(u)
                if r.opcode == "bitcast":
                    nxt.append(u)
                elif r.opcode in ("copy", "transpose") and not r.instruction.shape.is_tuple and (
                        r.instruction.shape.elements == n):
                    out.append(u)
        front = nxt
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
    program = att.programs[0]
    if program is None or not program.modules:
        return None
    module = program.main
    found = _detect(module)
    if not found:
        return ()
    tot, n = _measured(trace, work, kept_steps, {f[1] for f in found})
    n = max(1, n)
    hbm = trace.chip.core_hbm_bytes_per_s
    out = []
    for kind, name, oc, detail, nbytes, check in found:
        ps = tot.get(name, 0.0) / n
        if check:
            # a slice update of a state-sized array: a whole copy only when it took the time of moving it
            # (per execution: the op may run once per loop iteration)
            runs = check
            if ps / runs < STATE_COPY_MIN_FRACTION * nbytes / hbm * 1e12:
                continue
            why = ("a consumer reading the slice where it lies copies nothing" if detail.startswith("slice copy")
                   else "a kernel reading the pages where they lie moves nothing" if kind == "page_gather"
                   else "an in-place update touches the slice only")
            detail += f"; {ps / runs / 1e9:.3f} ms per run, the time of moving {ps / runs * 1e-12 * hbm / nbytes:.1f}x " \
                      f"its bytes at {hbm / 1e9:.0f} GB/s ({why})"
        what, lever, fix = KINDS[kind]
        out.append(AntiPattern(kind=kind, op=name, opcode=oc, detail=f"{what}: {detail}", ps=ps,
                               fraction=ps / step_mean_ps if step_mean_ps > 0 else 0.0, lever=lever, fix=fix))
    order = list(KINDS)
    out.sort(key=lambda a: (order.index(a.kind), -a.ps, a.op))
    return tuple(out)
