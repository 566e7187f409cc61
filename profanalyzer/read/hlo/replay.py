"""Analysis before the run: replay a compiled program's schedule into a
predicted step, then write it as an XSpace (one TensorCore plane, one
SparseCore plane) that the trace pipeline reads unchanged.

The replay's assumptions (each listed in `Replay.assumptions`):

* the TensorCore runs the entry computation's instructions one after the
  other in schedule order; a `while` runs its condition trip+1 times and its
  body trip times (`schedule.trip_count`), a `call` runs its callee in place;
* an op with the compiler's `estimated_cycles` takes cycles / clock, the
  clock being the chip table's assumed figure (profanalyzer.core.hardware
  `clock_ghz`, inferred from the published peak);
* an op without an estimate (copies, custom calls incl. Pallas kernels,
  synchronous collectives) takes its bytes (operands + result) over the
  chip's per-TensorCore HBM bandwidth, or, for a collective, its bytes over
  the per-TensorCore ICI bandwidth: a lower bound, marked `estimate: false`;
* an async collective (`-start`/`-done`, `async-start` on a thread) moves
  its bytes over ICI while the TensorCore goes on, the bytes it moves per
  device (profanalyzer.read.hlo.traffic: all-gather the result x (n-1)/n,
  reduce-scatter and all-to-all the operand x (n-1)/n, all-reduce twice
  that, a collective-permute its operand), n the module's partitions; async
  copies and slices move their bytes over HBM; the `-done` waits for what is
  left;
* SparseCore work (an async start whose thread is `sparsecore`) runs on the
  SparseCore, one at a time, from its start; the TensorCore waits only at
  the done.

FLOPs: each TensorCore op carries the FLOPs of its dots and convolutions
derived from the HLO (profanalyzer.read.hlo.flops: 2 x the multiply-adds from
the shapes, dimension numbers and windows), written as the op's `flops`
stat as XProf writes it, so the trace pipeline's MFU, TFLOP/s per op and
roofline read them like a capture's; a loop body's ops count once per
iteration, as they run. Elementwise work is not counted (a lower bound);
custom calls get none here (the classifier derives a matmul kernel's from
its operand shapes, as on a capture). Bytes accessed (the roofline's):
a TensorCore compute op's HBM operand and result bytes, a buffer updated
in place counting its update (profanalyzer.read.hlo.flops.accessed_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.hardware import Chip
from profanalyzer.core.vocab import HLO_PROTO_STAT
from profanalyzer.read.hlo.flops import FlopsTable, accessed_bytes
from profanalyzer.read.hlo.kernels import MaskTable, kernel_flops
from profanalyzer.read.hlo.model import Computation, Instruction, Module, Program
from profanalyzer.read.hlo.schedule import (
    SPARSECORE_THREAD,
    TRIVIAL_OPCODES,
    async_wrapper_role,
    operand_shapes,
    source_of,
    trip_count,
    wrapped_op,
    xprof_text,
)
from profanalyzer.read.hlo.traffic import buffer_bytes, moved_factor, start_result
from profanalyzer.read.hlo.truth import HOST_MEMORY, category_of, collective_kind

__all__ = ["ReplayOp", "Replay", "replay", "to_xspace", "PREDICTED_NOTE", "op_bound"]

PS = 1e12
MIN_PS = 1000  # 1 ns: the shortest event written
PREDICTED_NOTE = ("compiled program: every time is PREDICTED from the compiler's estimates (estimated_cycles at an "
                  "assumed clock) and bytes over assumed bandwidths; no TPU ran this")


@dataclass(frozen=True)
class ReplayOp:
    instruction: Instruction
    computation: str
    start_ps: int
    dur_ps: int
    sparsecore: bool
    how: str  # estimated_cycles | kernel_roofline | hbm_bytes | ici_bytes | wait | none
    flops: int | None = None  # one run's FLOPs of its dots / convolutions, from the HLO (TensorCore ops only)
    bytes: int | None = None  # one run's HBM bytes read + written (TensorCore compute ops only; not async pairs)


@dataclass(frozen=True)
class Replay:
    module: Module
    chip: Chip
    ops: tuple[ReplayOp, ...]
    step_ps: int
    assumptions: tuple[str, ...]

    @property
    def estimated_ps(self) -> int:
        return sum(o.dur_ps for o in self.ops if o.how == "estimated_cycles")

    @property
    def step_flops(self) -> int:
        """FLOPs of the predicted step on one TensorCore: every op run as often as it runs (loop bodies trip
        count times)."""
        return sum(o.flops or 0 for o in self.ops)


class _Player:
    def __init__(self, module: Module, chip: Chip):
        self.m, self.chip = module, chip
        self.t = 0  # TensorCore time (ps)
        self.sc_free = 0
        self.ops: list[ReplayOp] = []
        self.finish: dict[str, int] = {}
        self.n = max(1, module.num_partitions)
        self.hbm = chip.core_hbm_bytes_per_s
        self.ici = chip.core_ici_bytes_per_s
        self.clock = chip.clock_hz
        self.flops = FlopsTable(module)
        self._kernels: dict[str, tuple[float, str] | None] = {}
        self.masks = MaskTable(module)  # the block masks, read once when a kernel needs them
        self.host_bytes = 0  # host <-> HBM transfer bytes of one step (host-memory buffers moved)
        self.host_ps = 0

    def kernel(self, ins: Instruction, comp: Computation) -> tuple[float, str] | None:
        """A custom-call kernel's FLOPs from its operand shapes (profanalyzer.read.hlo.kernels), once per instruction."""
        if ins.name not in self._kernels:
            self._kernels[ins.name] = kernel_flops(ins, comp, self.masks)
        return self._kernels[ins.name]

    def emit(self, ins: Instruction, comp: str, start: int, dur: int, sc: bool, how: str) -> None:
        c = None if sc else self.m.by_name.get(comp)
        f = self.flops.of(ins, c) if c is not None else None
        if f is None and c is not None and ins.opcode == "custom-call":
            k = self.kernel(ins, c)
            f = int(k[0]) if k is not None else None
        b = (accessed_bytes(self.m, ins, c) or None) if c is not None and how in (
                "estimated_cycles", "hbm_bytes", "kernel_roofline") and not (
            ins.opcode.endswith(("-start", "-done", "-update"))) else None
        self.ops.append(ReplayOp(ins, comp, int(start), max(MIN_PS, int(dur)), sc, how, f, b))

    def bytes_of(self, ins: Instruction, comp: Computation) -> int:
        return ins.shape.bytes + sum(s.bytes for s in operand_shapes(ins, comp))

    def collective_ps(self, ins: Instruction, comp: Computation) -> int:
        kind = collective_kind(ins.opcode) or ""
        in_b = sum(s.bytes for s in operand_shapes(ins, comp))
        b = buffer_bytes(kind, in_b, start_result(ins.shape, ins.opcode).bytes) * moved_factor(kind, self.n)
        return int(b / self.ici * PS)

    def cost(self, ins: Instruction, comp: Computation) -> tuple[int, str]:
        cyc = ins.estimated_cycles
        if cyc is not None:
            ps = cyc / self.clock * PS
            cal = self.chip.replay_calibration
            if cal is not None:
                f = self.flops.of(ins, comp) or 0
                b = accessed_bytes(self.m, ins, comp) or 0
                ps /= cal.compute if _compute_bound(f, b, self.chip) else cal.memory
            return int(ps), "estimated_cycles"
        if collective_kind(ins.opcode):
            return self.collective_ps(ins, comp), "ici_bytes"
        mem = self.bytes_of(ins, comp) / self.hbm * PS
        k = self.kernel(ins, comp) if ins.opcode == "custom-call" else None
        if k is not None:  # a kernel with no estimate: its roofline (FLOPs at the MXU peak, bytes over HBM)
            return int(max(mem, k[0] / _kernel_peak(ins, comp, self.chip) * PS)), "kernel_roofline"
        return int(mem), "hbm_bytes"

    def inner_ps(self, ins: Instruction, comp: Computation) -> int:
        """Time of an op inside an async computation: its bytes over ICI (collectives), over the host link
        (a host-memory, S(5), buffer moved: at HBM bandwidth where the chip's host link is not published), or
        over HBM."""
        if collective_kind(ins.opcode):
            return self.collective_ps(ins, comp)
        nbytes = self.bytes_of(ins, comp)
        shapes = operand_shapes(ins, comp)
        if any(x.memory_space == HOST_MEMORY for x in (*ins.shape.leaves(), *shapes)):
            # what crosses the link: the update written into a host buffer, else the array produced
            moved = shapes[1].bytes if ins.opcode == "dynamic-update-slice" and len(shapes) > 1 else ins.shape.bytes
            self.host_bytes += moved
            link = self.chip.host_gbps * 1e9 / self.chip.planes_per_chip if self.chip.host_gbps else self.hbm
            ps = int(moved / link * PS)
            self.host_ps += ps
            return ps
        return int(nbytes / self.hbm * PS)

    def async_work(self, start: Instruction, comp: Computation) -> tuple[int, list[tuple[Instruction, str, int]]]:
        """(ps, [(instruction, computation, ps)] of the work inside) of an async start's computation (an
        `async-start`'s, or the one op a text short form such as `slice-start` wraps)."""
        w = wrapped_op(start)
        if w is not None and w.opcode != "call":
            ps = self.inner_ps(w, comp)
            return ps, [(w, comp.name, ps)]
        callee = self.m.by_name.get(start.called[0]) if start.called else None
        inner: list[tuple[Instruction, str, int]] = []
        stack = [callee] if callee is not None else []
        seen = 0
        while stack and seen < 16:
            c = stack.pop()
            seen += 1
            for i in c.instructions:
                wi = wrapped_op(i)
                if wi is not None and wi.opcode != "call":
                    inner.append((wi, c.name, self.inner_ps(wi, c)))
                elif (i.opcode in ("call", "async-start") or wi is not None) and i.called:
                    sub = self.m.by_name.get(i.called[0])
                    if sub is not None:
                        stack.append(sub)
                elif (i.opcode not in TRIVIAL_OPCODES and not i.opcode.startswith("async-")
                      and async_wrapper_role(i.opcode) is None):
                    inner.append((i, c.name, self.inner_ps(i, c)))
        return sum(p for _, _, p in inner), inner

    def start_of(self, ins: Instruction, comp: Computation) -> str:
        name = ins.operands[0] if ins.operands else ""
        for _ in range(8):
            d = comp.by_name.get(name)
            if d is None or not d.opcode.endswith("-update"):
                break
            name = d.operands[0] if d.operands else ""
        return name

    def run(self, comp: Computation, thread: str, depth: int = 0) -> None:
        if depth > 32:
            return
        for ins in comp.instructions:
            op = ins.opcode
            if op in TRIVIAL_OPCODES:
                continue
            if op == "while":
                tc = trip_count(self.m, ins, comp)
                n = tc.n if tc.n is not None else 1
                cond = self.m.by_name.get(ins.attr("condition").lstrip("%"))
                body = self.m.by_name.get(ins.attr("body").lstrip("%"))
                for k in range(n + 1):
                    if cond is not None:
                        self.run(cond, thread, depth + 1)
                    if k < n and body is not None:
                        self.run(body, thread, depth + 1)
                continue
            if op == "call" and ins.called:
                callee = self.m.by_name.get(ins.called[0])
                if callee is not None:
                    self.run(callee, thread, depth + 1)
                continue
            if op == "conditional" and ins.called:
                callee = self.m.by_name.get(ins.called[0])
                if callee is not None:
                    self.run(callee, thread, depth + 1)
                continue
            role = async_wrapper_role(op)
            if role == "start":  # `async-start`, or the text's short form of one (`call-start`, `slice-start`)
                ps, inner = self.async_work(ins, comp)
                sc = (ins.async_execution_thread or "") == SPARSECORE_THREAD
                self.emit(ins, comp.name, self.t, MIN_PS, False, "none")
                if sc:
                    at = max(self.t, self.sc_free)
                    for i, cname, p in inner:
                        self.emit(i, cname, at, p, True, "ici_bytes" if collective_kind(i.opcode) else "hbm_bytes")
                        at += max(MIN_PS, p)
                    self.sc_free = at
                    self.finish[ins.name] = at
                else:
                    self.finish[ins.name] = self.t + ps
                self.t += MIN_PS
                continue
            if role == "update":
                src = self.start_of(ins, comp)
                self.finish[ins.name] = self.finish.get(src, self.t)
                self.emit(ins, comp.name, self.t, MIN_PS, False, "none")
                self.t += MIN_PS
                continue
            if op.endswith("-start"):
                if collective_kind(op):
                    ps, how = self.collective_ps(ins, comp), "ici_bytes"
                else:  # an async copy / slice: (destination, source, context) -> the destination's bytes over HBM
                    moved = ins.shape.parts[0] if ins.shape.is_tuple and ins.shape.parts else ins.shape
                    ps, how = int(moved.bytes / self.hbm * PS), "hbm_bytes"
                self.finish[ins.name] = self.t + ps
                self.emit(ins, comp.name, self.t, MIN_PS, False, how)
                self.t += MIN_PS
                continue
            if op.endswith("-done"):
                src = self.start_of(ins, comp)
                wait = max(0, self.finish.get(src, self.t) - self.t)
                self.emit(ins, comp.name, self.t, wait, False, "wait")
                self.t += max(MIN_PS, wait)
                continue
            dur, how = self.cost(ins, comp)
            self.emit(ins, comp.name, self.t, dur, False, how)
            self.t += max(MIN_PS, dur)


def _kernel_peak(ins: Instruction, comp: Computation, chip: Chip) -> float:
    """The MXU peak a kernel's matmuls run at: INT8 where its largest operands are 8-bit integers, else BF16."""
    shapes = sorted((s for s in operand_shapes(ins, comp) if not s.is_tuple), key=lambda s: -s.bytes)[:2]
    if shapes and all(s.dtype in ("s8", "u8") for s in shapes):
        return chip.core_peak_int8_flops
    return chip.core_peak_bf16_flops


def _compute_bound(flops: float, nbytes: float, chip: Chip) -> bool:
    """An op's FLOPs at the BF16 peak take longer than its bytes at the HBM bandwidth."""
    return flops / chip.core_peak_bf16_flops > nbytes / chip.core_hbm_bytes_per_s


def op_bound(op: ReplayOp, chip: Chip) -> str:
    """'compute' or 'memory': what bounds a replayed op by its HLO FLOPs and bytes (the calibration's classes)."""
    return "compute" if _compute_bound(op.flops or 0, op.bytes or 0, chip) else "memory"


def replay(program: Program, chip: Chip) -> Replay:
    m = program.main
    entry = m.entry_computation
    p = _Player(m, chip)
    if entry is not None:
        p.run(entry, entry.execution_thread)
    step = max([p.t] + [o.start_ps + o.dur_ps for o in p.ops])
    cal = chip.replay_calibration
    unpriced: tuple[str, ...] = ()
    for how, said in (("kernel_roofline", "priced at their roofline (FLOPs from their operand shapes at the MXU "
                                          "peak, or their bytes over HBM, whichever is longer), a lower bound: a "
                                          "kernel with small blocks runs far below it"),
                      ("hbm_bytes", "not priced honestly: no FLOPs from their shapes, they take their bytes over "
                                    "HBM, a lower bound of their time")):
        kernels: dict[str, int] = {}
        for o in p.ops:
            if o.how == how and o.instruction.opcode == "custom-call" and not o.sparsecore:
                kernels[o.instruction.name] = kernels.get(o.instruction.name, 0) + o.dur_ps
        if kernels:
            top = sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))
            share = sum(kernels.values()) / max(step, 1)
            lead, _, rest = said.partition(": ")
            unpriced += ((f"{lead}: {len(kernels)} custom-call kernel(s) with no compiler estimate "
                          f"({', '.join(n for n, _ in top[:4])}{', ...' if len(top) > 4 else ''}): {rest}; "
                          f"{share:.1%} of the predicted step") if how == "hbm_bytes" else
                         (f"{len(kernels)} custom-call kernel(s) with no compiler estimate "
                          f"({', '.join(n for n, _ in top[:4])}{', ...' if len(top) > 4 else ''}) {said}; "
                          f"{share:.1%} of the predicted step"),)
    if p.host_bytes:
        unpriced += ((f"host transfers ({p.host_bytes / 1e6:.1f} MB per step) over the host link at "
                      f"{chip.host_gbps:g} GB/s per chip" if chip.host_gbps else
                      f"host transfers ({p.host_bytes / 1e6:.1f} MB per step) priced at HBM bandwidth: no host-link "
                      f"figure is published for {chip.name}, a lower bound of their time")
                     + f"; {p.host_ps / max(step, 1):.1%} of the predicted step if none overlapped",)
    assumptions = (
        f"clock {chip.clock_ghz:g} GHz ({chip.name}; inferred from the BF16 peak, not published)",
        (f"estimated_cycles calibrated on {chip.name} programs that ran: cycles / clock divided by "
         f"{cal.compute:g} for compute-bound ops and {cal.memory:g} for memory-bound ones ({cal.source})"
         if cal is not None else f"estimated_cycles not calibrated for {chip.name} (no programs that ran on it)"),
        f"ICI {chip.core_ici_bytes_per_s / 1e9:g} GB/s per TensorCore (the chip's ICI figure / {chip.planes_per_chip})",
        f"HBM {chip.core_hbm_bytes_per_s / 1e9:g} GB/s per TensorCore for ops without an estimate (a lower bound)",
        f"collective groups span all {max(1, m.num_partitions)} partitions",
        "SparseCore work runs one op at a time from its start; the TensorCore waits at the done",
        "FLOPs derived from the HLO: 2 x the multiply-adds of each dot and convolution (fusion bodies included) "
        "from its shapes, dimension numbers and window, loop bodies counted per iteration; elementwise work not "
        "counted (a lower bound); custom-call kernels from their operand shapes (attention kernels from q/k/v, the "
        "half and the block mask; matmul kernels 2 x M x N x K)",
    ) + unpriced
    return Replay(m, chip, tuple(p.ops), int(step), assumptions)


def to_xspace(rep: Replay, hostname: str = "compiled") -> bytes:
    """The predicted step as a serialized XSpace: per TensorCore of one chip
    a plane (lines Steps, XLA Modules, XLA Ops; op metadata as XProf writes
    it: HLO text, instruction name, hlo_category, tf_op, shape) and, when
    the program offloads to the SparseCore, a SparseCore plane; the
    program's HloProto in `/host:metadata` when it was read from one."""
    from profanalyzer.read.xspace import xplane_pb2 as pb

    m = rep.module
    chip = rep.chip
    space = pb.XSpace()  # type: ignore[attr-defined]
    space.hostnames.append(hostname)

    def plane(pid: int, name: str):
        pl = space.planes.add()
        pl.id, pl.name = pid, name
        return pl

    def stat_ids(pl, names):
        out = {}
        for k, n in enumerate(names, 1):
            pl.stat_metadata[k].id = k
            pl.stat_metadata[k].name = n
            out[n] = k
        return out

    names = ("device_type_string", "peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second", "hlo_category",
             "tf_op", "program_id", "symbol_id", "source", "shape_with_layout", "group_id", "step_num",
             "device_offset_ps", "device_duration_ps", "run_id", "flops", "bytes_accessed")
    program_name = f"{m.name}(1)"

    def fill(pl, sc: bool) -> None:
        st = stat_ids(pl, names)
        s = pl.stats.add()
        s.metadata_id, s.str_value = st["device_type_string"], chip.device_type_strings[0]
        for key, num in (("peak_teraflops_per_second", chip.core_peak_bf16_flops / 1e12),
                         ("peak_hbm_bw_gigabytes_per_second", chip.core_hbm_bytes_per_s / 1e9)):
            s = pl.stats.add()
            s.metadata_id, s.double_value = st[key], num
        meta: dict[str, int] = {}

        def md(op: ReplayOp) -> int:
            ins = op.instruction
            key = ins.name
            got = meta.get(key)
            if got is not None:
                return got
            k = len(meta) + 10
            em = pl.event_metadata[k]
            comp = m.by_name.get(op.computation)
            # named as XProf names an XLA Ops event: the HLO long form, operand shapes, no backend_config
            em.id, em.name, em.display_name = k, xprof_text(ins, comp) if comp is not None else ins.text, ins.name
            for sk, sv in (("hlo_category", category_of(m, ins, op.computation)), ("tf_op", ins.metadata.op_name),
                           ("shape_with_layout", ins.shape.text()), ("source", source_of(m, ins)[0])):
                if sv:
                    s = em.stats.add()
                    s.metadata_id, s.str_value = st[sk], sv
            for sk, iv in (("program_id", 1), ("symbol_id", k)):
                s = em.stats.add()
                s.metadata_id, s.int64_value = st[sk], iv
            for sk, n in (("flops", op.flops), ("bytes_accessed", op.bytes)):  # per occurrence, as XProf writes them
                if n:
                    s = em.stats.add()
                    s.metadata_id, s.uint64_value = st[sk], n
            meta[key] = k
            return k

        pl.event_metadata[1].id, pl.event_metadata[1].name = 1, "0"
        pl.event_metadata[2].id, pl.event_metadata[2].name = 2, program_name
        ops = [o for o in rep.ops if o.sparsecore == sc]
        if not sc:
            steps = pl.lines.add()
            steps.id, steps.name, steps.timestamp_ns = 1, "Steps", 0
            e = steps.events.add()
            e.metadata_id, e.offset_ps, e.duration_ps = 1, 0, rep.step_ps
            for sk in ("group_id", "step_num"):
                s = e.stats.add()
                s.metadata_id, s.int64_value = st[sk], 0
        mods = pl.lines.add()
        mods.id, mods.name, mods.timestamp_ns = 2, "Sparse Core Modules" if sc else "XLA Modules", 0
        e = mods.events.add()
        e.metadata_id, e.offset_ps, e.duration_ps = 2, 0, rep.step_ps
        s = e.stats.add()
        s.metadata_id, s.int64_value = st["group_id"], 0
        line = pl.lines.add()
        line.id, line.name, line.timestamp_ns = 3, "Sparse Core Ops" if sc else "XLA Ops", 0
        for o in ops:
            e = line.events.add()
            e.metadata_id, e.offset_ps, e.duration_ps = md(o), o.start_ps, o.dur_ps
            s = e.stats.add()
            s.metadata_id, s.int64_value = st["group_id"], 0

    # every TensorCore of one chip runs the same SPMD program: one plane each
    with_sc = any(o.sparsecore for o in rep.ops)
    pid = 1
    for core in range(max(1, chip.planes_per_chip)):
        fill(plane(pid, f"/device:TPU:{core}"), False)
        pid += 1
        if with_sc:
            fill(plane(pid, f"/device:TPU:{core} SparseCore 0"), True)
            pid += 1
    if m.proto:  # the program's HloProto, where XProf keeps it (buffer assignment for --memory)
        meta = plane(pid, "/host:metadata")
        meta.stat_metadata[1].id, meta.stat_metadata[1].name = 1, HLO_PROTO_STAT
        em = meta.event_metadata[1]
        em.id, em.name = 1, program_name
        s = em.stats.add()
        s.metadata_id, s.bytes_value = 1, m.proto
    return space.SerializeToString()
