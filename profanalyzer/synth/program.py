"""Compiled-program model: HLO op templates, their roofline cost, and the per-step op sequence.

:func:`build_plan` turns a :class:`~.scenarios.Scenario` into a :class:`Plan`:

* ``ops`` -- one :class:`OpT` per HLO instruction (an XLA Ops event metadata entry):
  name, full HLO text, XProf category, tf_op name stack, cost stats, the bucket the
  attribution must put its self time in, whether it is a remat recompute, and its
  roofline base duration on one TPU7x TensorCore.
* ``programs`` -- the XLA programs of one step in execution order (a small
  ``jit_fold_in`` then ``jit_train_step``), each a flat list of sequence items the
  scheduler in :mod:`.model` walks: ops, async collective starts/dones, synchronous
  collectives, ``while`` begin/end (the layer loops; their bodies repeated ``layers``
  times), idle gaps (pipeline bubbles) and module begin/end.

Bucket rules the templates follow (and the analysis must implement):

* convolution fusions / output fusions / megablox gmm,tgmm kernels are matmuls; the bucket
  is chosen by the dot operand element types: any ``f8*`` operand -> ``matmul_fp8``, else any
  ``bf16`` -> ``matmul_bf16``, else (f32, s8) -> ``matmul_other``;
* ``attention``: splash kernels (``splash_mha_*`` custom-calls) and every op whose tf_op
  contains ``/AttentionOp_0`` (the attention core: score/value dots, softmax). The Q/K/V/out
  projections live under ``self_attention/query`` etc. (no ``AttentionOp``) and are matmuls;
* collectives by kind: all-gather, reduce-scatter (incl. ``all-reduce-scatter fusion``),
  all-reduce, all-to-all, other (collective-permute, send/recv);
* everything else (loop fusions, copies, copy-start/done, data formatting,
  dynamic-update-slice, while self time, custom fusions that are not collectives, ...) is
  ``other_compute``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..hardware import TPU7X
from . import hlo as H
from .hlo import DG_ATTN, DG_DGRAD, DG_F32, DG_FWD, DG_WGRAD, Namer, nbytes, shape
from .scenarios import Scenario

# The bucket vocabulary is the product's (the truth is written in its terms);
# which op lands in which bucket is decided here by construction, not by the
# classifier.
from ..classify import BUCKETS as PRODUCT_BUCKETS  # noqa: E402

#: Buckets the truth of issue #14 uses that the product may not have yet (appended, so the
#: indices of the product's buckets do not move); a truth names them only when it uses them.
EXTRA_BUCKETS = tuple(b for b in ("matmul_int8", "host_offload") if b not in PRODUCT_BUCKETS)
BUCKETS = tuple(PRODUCT_BUCKETS) + EXTRA_BUCKETS
BUCKET_INDEX = {b: i for i, b in enumerate(BUCKETS)}
COLL_BUCKETS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "other_collective")

# sequence item codes
OP, START, DONE, SYNC, WB, WE, GAP, MB, ME = range(9)

US = 1_000_000  # ps per microsecond

CORE_PEAK_BF16 = TPU7X.core_peak_bf16_flops
CORE_PEAK_FP8 = TPU7X.core_peak_fp8_flops
CORE_HBM = TPU7X.core_hbm_bytes_per_s
CORE_ICI = TPU7X.core_ici_bytes_per_s
CORE_DCN = 12.5e9  # bytes/s per core across pods (pipeline stages)

OP_OVERHEAD_PS = 250_000


@dataclass
class OpT:
    idx: int
    program: int
    name: str
    hlo: str
    category: str
    bucket: str
    phase: str  # prologue | fwd | loss | bwd | opt | host
    tf_op: str | None = None
    source: str | None = None
    flops: int = 0
    model_flops: int = 0
    bytes_accessed: int = 0
    raw_bytes: int = 0
    shape: str = ""
    dedup: str | None = None
    remat: bool = False
    coll: str | None = None  # collective type when a collective op
    role: str = "op"  # op | start | done | sync | while
    base_ps: int = 0
    symbol_id: int = 0
    device_stats: bool = True
    transfer_ps: int = 0  # start/sync: transfer time once every participant issued it
    engine: str = ""  # ici | sc | dcn | dma
    peer: int = -1  # start <-> done
    sc_name: str = ""  # SparseCore op name (offloaded collectives)
    sc_module: str = ""  # SparseCore module name
    form: str = ""  # offload | pair | cont | sync | copy | host_copy | async
    stat_flops: bool = True  # False: no flops stat, model_flops/bytes stats 0 (Pallas kernels in real captures)
    layout: bool = False  # layout op feeding a fused attention kernel (attention layout time)
    host_bytes: int = 0  # host<->HBM bytes moved by this copy pair (on the done)
    host_dir: str = ""  # to_host | from_host
    precision: str = ""  # quantized matmul tag, e.g. w4a16


@dataclass
class Program:
    module: str  # e.g. jit_train_step
    program_id: int
    items: list = field(default_factory=list)
    is_train: bool = False

    @property
    def event_name(self) -> str:
        return f"{self.module}({self.program_id})"


@dataclass
class Plan:
    spec: Scenario
    ops: list[OpT]
    programs: list[Program]
    layers: int
    est_step_ps: int


def compute_ps(flops: float, nbytes_: float, peak: float, eff_c: float, eff_m: float = 0.82) -> int:
    tc = flops / (peak * eff_c) if flops else 0.0
    tm = nbytes_ / (CORE_HBM * eff_m)
    return int(max(tc, tm) * 1e12) + OP_OVERHEAD_PS


@dataclass
class _Coll:
    ctype: str | None  # None = async copy (copy-start/copy-done)
    nbytes: int
    in_shape: str
    out_shape: str
    tf: str | None
    phase: str
    group: int
    source: str | None = None
    engine_hint: str = ""  # dcn for pipeline transfers
    form_override: str = ""  # force a form for this instance
    sr: str = ""  # "send" / "recv": point-to-point transfer (other_collective)


class Builder:
    def __init__(self, spec: Scenario, seed: int, layers: int, scale: float):
        self.s = spec
        self.seed = seed
        self.layers = layers
        self.nm = Namer(seed * 1000003 + stable_hash(spec.name))
        self.rng = random.Random(seed * 65537 + stable_hash(spec.name) + 3)
        self.ops: list[OpT] = []
        self.colls: list[_Coll] = []
        self.made: dict[int, tuple] = {}
        self.prog = 0
        self._sym = 1000 + self.rng.randrange(1, 500)
        self.last = self.nm.param()
        s = spec
        self.B = max(1, int(round(s.batch_per_core * scale)))
        self.S_l = s.seq_len // s.cp
        self.T = self.B * self.S_l
        self.pipeline = s.pp > 1
        self.Tm = self.T // max(1, s.microbatches) if self.pipeline else self.T
        self.D, self.F, self.V = s.d_model, s.d_ff, s.vocab
        self.Hq, self.KV, self.Hd = s.n_heads, s.n_kv_heads, s.head_dim
        self.qd = self.Hq * self.Hd
        self.kvd = self.KV * self.Hd
        self.fp8 = s.precision == "fp8"

    # -- template creation ---------------------------------------------------
    def _new(self, **kw) -> OpT:
        self._sym += self.rng.randrange(1, 9)
        idx = len(self.ops)
        op = OpT(idx=idx, program=self.prog, symbol_id=self._sym, **kw)
        # a deterministic subset of templates lacks the device_offset_ps/device_duration_ps pair
        every = self.s.device_stats_every
        op.device_stats = not (every and (idx % every == every - 1))
        self.ops.append(op)
        return op

    def new_op(self, **kw) -> OpT:
        """A new op template (public name of :meth:`_new` for the other program builders)."""
        return self._new(**kw)

    def _bucket_for_dtypes(self, dts) -> str:
        if any(d.startswith("f8") for d in dts):
            return "matmul_fp8"
        if "bf16" in dts:
            return "matmul_bf16"
        return "matmul_other"

    def matmul(
        self,
        tf: str,
        M: int,
        K: int,
        N: int,
        *,
        phase: str,
        dts: tuple[str, str] = ("bf16", "bf16"),
        out_dt: str = "bf16",
        category: str = "convolution fusion",
        remat: bool = False,
        attention: bool = False,
        eff: float | None = None,
        model_flops: int | None = None,
        source: str = "linears.py:118",
        batch: int = 1,
        extra_in: tuple[str, ...] = (),
        dedup: str | None = None,
        name: str | None = None,
    ) -> OpT:
        a, b = dts
        flops = 2 * batch * M * K * N
        lhs = (batch, M, K) if batch > 1 else (1, M, K)
        rhs = (batch, K, N) if batch > 1 else (K, N)
        out = (batch, M, N) if batch > 1 else (1, M, N)
        byts = nbytes(a, lhs) + nbytes(b, rhs) + nbytes(out_dt, out)
        fp8 = a.startswith("f8") or b.startswith("f8")
        peak = CORE_PEAK_FP8 if fp8 else CORE_PEAK_BF16
        e = eff if eff is not None else self.s.matmul_eff
        if a == "f32" and b == "f32":
            peak, e = CORE_PEAK_BF16 / 4, (eff or 0.5)
        dur = compute_ps(flops, byts, peak, e)
        nm = name or self.nm.name("fusion")
        n = nm.split(".")[1] if "." in nm else "0"
        out_s = shape(out_dt, out)
        lhs_s = shape(a, lhs, minor_first=(len(lhs) == 3 and M % 3 == 0))
        rhs_s = shape(b, rhs)
        extras = "".join(f", {x}" for x in extra_in)
        src2 = self.nm.gte() if self.rng.random() < 0.6 else f"%all-gather-done.{self.nm.num('ref')}"
        k = self.nm.num("dot")
        if self.rng.random() < 0.5:
            root = (
                f"%dot.{k} = {out_s} dot({lhs_s} %param_0.{k}, {rhs_s} %param_1.{k}), "
                f"lhs_contracting_dims={{{len(lhs) - 1}}}, rhs_contracting_dims={{{len(rhs) - 2}}}"
            )
        else:
            root = (
                f"%convolution.{k} = {out_s} convolution({lhs_s} %param_0.{k}, {rhs_s} %param_1.{k}), "
                f"dim_labels=b0f_io->b0f"
            )
        text = (
            f"%{nm} = {out_s} fusion({lhs_s} {self.last}, {rhs_s} {src2}{extras}), kind=kOutput, "
            f"calls=%fused_computation.{n} /* fused root: {root} */"
        )
        bucket = "attention" if attention else self._bucket_for_dtypes((a, b))
        op = self._new(
            name=nm,
            hlo=text,
            category=category,
            bucket=bucket,
            phase=phase,
            tf_op=tf + ":",
            source=source,
            flops=flops,
            model_flops=0 if remat else (flops if model_flops is None else model_flops),
            bytes_accessed=byts,
            raw_bytes=int(byts * 1.06),
            shape=out_s,
            dedup=dedup,
            remat=remat,
            base_ps=dur,
        )
        self.last = "%" + nm
        return op

    def ew(
        self,
        tf: str | None,
        dims: tuple[int, ...],
        *,
        phase: str,
        dt: str = "bf16",
        n_in: int = 2,
        n_out: int = 1,
        flops_per: int = 4,
        category: str = "loop fusion",
        remat: bool = False,
        remat_suffix: bool = False,
        source: str | None = None,
        opcode: str = "fusion",
        out_dt: str | None = None,
        attention: bool = False,
        hlo_body: str | None = None,
        kind: str = "kLoop",
        bucket: str | None = None,
        name: str | None = None,
    ) -> OpT:
        elems = 1
        for d in dims:
            elems *= d
        od = out_dt or dt
        byts = n_in * nbytes(dt, dims) + n_out * nbytes(od, dims)
        flops = elems * flops_per
        dur = compute_ps(flops, byts, CORE_PEAK_BF16, 0.05)
        nm = name or self.nm.name(opcode)
        if remat_suffix:
            nm = self.nm.claim(nm + ".remat")
        out_s = shape(od, dims)
        in_s = shape(dt, dims)
        ins = ", ".join([f"{in_s} {self.last}"] + [f"{in_s} {self.nm.gte()}" for _ in range(max(0, n_in - 1))])
        if hlo_body is not None:
            text = f"%{nm} = {out_s} {hlo_body}"
        elif opcode == "fusion":
            n = nm.split(".")[1]
            text = f"%{nm} = {out_s} fusion({ins}), kind={kind}, calls=%fused_computation.{n}"
        else:
            text = f"%{nm} = {out_s} {opcode}({ins})"
        op = self._new(
            name=nm,
            hlo=text,
            category=category,
            bucket=bucket or ("attention" if attention else "other_compute"),
            phase=phase,
            tf_op=(tf + ":") if tf else None,
            source=source,
            flops=flops,
            model_flops=0 if remat else flops,
            bytes_accessed=byts,
            raw_bytes=byts,
            shape=out_s,
            remat=remat,
            base_ps=dur,
        )
        self.last = "%" + nm
        return op

    def kernel(
        self,
        inst: str,
        tf: str,
        *,
        phase: str,
        flops: int,
        nbytes_: int,
        eff: float,
        bucket: str,
        outs: list[str],
        ins: list[str],
        source: str,
        remat: bool = False,
        model_flops: int | None = None,
        peak: float = CORE_PEAK_BF16,
    ) -> OpT:
        nm = self.nm.claim(inst)
        out = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        operands = ", ".join(f"{s} {self.nm.gte() if i else self.last}" for i, s in enumerate(ins))
        text = (
            f"%{nm} = {out} custom-call({operands}), custom_call_target=\"tpu_custom_call\", "
            f"operand_layout_constraints={{{', '.join(ins)}}}, "
            f"backend_config={{\"custom_call_config\": {{\"body\": \"TUzvUgFNTElSMjAuMC4w{self.nm.num('cfg'):04d}\"}}}}"
        )
        dur = compute_ps(flops, nbytes_, peak, eff, eff_m=0.85)
        op = self._new(
            name=nm,
            hlo=text,
            category="custom-call",
            bucket=bucket,
            phase=phase,
            tf_op=tf + ":",
            source=source,
            flops=flops,
            model_flops=0 if remat else (flops if model_flops is None else model_flops),
            bytes_accessed=nbytes_,
            raw_bytes=int(nbytes_ * 1.1),
            shape=outs[0],
            remat=remat,
            base_ps=dur,
        )
        self.last = "%" + nm
        return op

    def misc(self, opcode: str, category: str, text_tail: str, out_s: str, *, phase: str, tf: str | None,
             nbytes_: int, source: str | None = None, flops: int = 0) -> OpT:
        nm = self.nm.name(opcode)
        op = self._new(
            name=nm,
            hlo=f"%{nm} = {out_s} {text_tail}",
            category=category,
            bucket="other_compute",
            phase=phase,
            tf_op=(tf + ":") if tf else None,
            source=source,
            flops=flops,
            model_flops=flops,
            bytes_accessed=nbytes_,
            raw_bytes=nbytes_,
            shape=out_s,
            base_ps=compute_ps(flops, nbytes_, CORE_PEAK_BF16, 0.05),
        )
        self.last = "%" + nm
        return op

    def while_op(self, phase: str, trip: int, carried: list[str]) -> OpT:
        nm = self.nm.name("while")
        r = self.nm.num("region")
        tup = "(" + ", ".join(["s32[]{:T(128)}"] + carried) + ")"
        text = (
            f"%{nm} = {tup} while({tup} %tuple.{self.nm.num('tuple')}), condition=%region_{r}.cond, "
            f"body=%region_{r + 1}.body, backend_config={{\"known_trip_count\":{{\"n\":\"{trip}\"}}}}"
        )
        return self._new(name=nm, hlo=text, category="while", bucket="other_compute", phase=phase,
                         shape=tup, role="while", base_ps=0)

    # -- collectives -----------------------------------------------------------
    def coll(self, ctype: str | None, dims: tuple[int, ...], *, phase: str, tf: str | None, group: int,
             dt: str = "bf16", source: str | None = None, engine_hint: str = "", form: str = "",
             sr: str = "") -> int:
        """Register a collective (or async copy when ctype is None); returns a placeholder key."""
        full = list(dims)
        part = list(dims)
        if ctype in ("all_gather", "reduce_scatter") and group > 1:
            part[0] = max(1, full[0] // group)
        if ctype == "all_gather":
            in_s, out_s, nb = shape(dt, part), shape(dt, full), nbytes(dt, full)
        elif ctype == "reduce_scatter":
            in_s, out_s, nb = shape(dt, full), shape(dt, part), nbytes(dt, full)
        else:
            in_s = out_s = shape(dt, full, mem="S(1)" if ctype is None else "")
            nb = nbytes(dt, full)
        self.colls.append(_Coll(ctype, nb, in_s, out_s, (tf + ":") if tf else None, phase, group, source, engine_hint,
                                form, sr))
        return len(self.colls) - 1

    def _transfer_ps(self, c: _Coll, engine: str) -> int:
        n = max(2, c.group)
        frac = (n - 1) / n
        if engine == "host":
            return int(c.nbytes / (self.s.host_gbps * 1e9) * 1e12) + 2 * US
        if c.ctype is None:
            return int(c.nbytes / (CORE_HBM * 0.45) * 1e12) + 1 * US
        if engine == "dcn":
            return int(c.nbytes / (CORE_DCN * 0.8) * 1e12) + 25 * US
        eff = {"all_gather": 0.82, "reduce_scatter": 0.78, "all_reduce": 0.72, "all_to_all": 0.42,
               "other_collective": 0.8}[c.ctype]
        vol = c.nbytes * frac * (2 if c.ctype == "all_reduce" else 1)
        lat = 9 * US if engine == "sc" else 6 * US
        return int(vol / (CORE_ICI * eff) * 1e12) + lat

    _KIND = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce",
             "all_to_all": "all-to-all", "other_collective": "collective-permute"}

    def _realize_coll(self, key: int) -> tuple[OpT | None, OpT]:
        """Templates for one collective: (start, done) or (None, sync op)."""
        c = self.colls[key]
        nm = self.nm
        if c.ctype is None:
            n = nm.num("copy")
            st = self._new(name=nm.claim(f"copy-start.{n}"),
                           hlo=f"%copy-start.{n} = ({c.out_shape}, {c.in_shape.replace('S(1)', '')}, u32[]{{:S(2)}}) "
                               f"copy-start({c.in_shape.replace('S(1)', '')} {nm.gte()})",
                           category="copy-start", bucket="other_compute", phase=c.phase, role="start",
                           shape=c.out_shape, base_ps=300_000, engine="dma", form="copy",
                           bytes_accessed=c.nbytes, raw_bytes=c.nbytes)
            dn = self._new(name=nm.claim(f"copy-done.{n}"),
                           hlo=f"%copy-done.{n} = {c.out_shape} copy-done(({c.out_shape}, {c.in_shape.replace('S(1)', '')}, "
                               f"u32[]{{:S(2)}}) %copy-start.{n})",
                           category="copy-done", bucket="other_compute", phase=c.phase, role="done",
                           shape=c.out_shape, base_ps=200_000, engine="dma", form="copy")
            st.transfer_ps = self._transfer_ps(c, "dma")
            st.peer, dn.peer = dn.idx, st.idx
            return st, dn
        form = self.form_of(key)
        if c.sr:
            return self._realize_sendrecv(c)
        if form == "offload" and c.ctype not in ("all_gather", "reduce_scatter", "all_reduce"):
            form = "pair"
        if form == "pair" and c.ctype in ("reduce_scatter", "all_to_all"):
            form = "cont"
        kind = self._KIND[c.ctype]
        bucket = c.ctype
        chan = nm.num("channel")
        groups = f"replica_groups=[{max(1, 64 // c.group)},{c.group}]<=[{max(64, c.group)}]"
        engine = c.engine_hint or "ici"
        if form == "sync":
            if c.ctype == "reduce_scatter":
                name = nm.name("fusion")
                text = (f"%{name} = {c.out_shape} fusion({c.in_shape} {self.last}), kind=kCustom, "
                        f"calls=%all-reduce-scatter.{nm.num('ars')}.clone")
                cat = "all-reduce-scatter fusion"
            else:
                name = nm.name(kind)
                tail = {
                    "all_gather": f"dimensions={{0}}, {groups}, use_global_device_ids=true",
                    "all_reduce": f"{groups}, use_global_device_ids=true, to_apply=%region_{nm.num('region')}.{nm.num('r2')}",
                    "all_to_all": f"replica_groups={{{{{','.join(str(i) for i in range(min(c.group, 8)))}}}}}, dimensions={{0}}",
                    "other_collective": "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}",
                }[c.ctype]
                text = f"%{name} = {c.out_shape} {kind}({c.in_shape} {self.last}), channel_id={chan}, {tail}"
                cat = kind
            op = self._new(name=name, hlo=text, category=cat, bucket=bucket, phase=c.phase, tf_op=c.tf,
                           source=c.source, shape=c.out_shape, coll=c.ctype, role="sync", base_ps=400_000,
                           bytes_accessed=c.nbytes * 2, raw_bytes=c.nbytes * 2, engine=engine, form="sync")
            op.transfer_ps = self._transfer_ps(c, engine)
            self.last = "%" + name
            return None, op
        if form == "offload":
            n = nm.num(kind)
            base = f"{kind}.{n + 1}.cloned.1"
            sname, dname = nm.claim(base + ".call-start"), nm.claim(base + ".call-done")
            tup = f"(({c.in_shape}), {c.out_shape}, u32[]{{:S(2)}})"
            st_text = (f"%{sname} = {tup} call-start({c.in_shape} {self.last}), "
                       f"async_execution_thread=\"sparsecore\", to_apply=%{base}")
            dn_text = f"%{dname} = {c.out_shape} call-done({tup} %{sname})"
            cats = ("async-start", "async-done")
            base_ps = (500_000, 400_000)
            engine = "sc"
            sc_name, sc_module = f"{kind}.{n}", base
        elif form == "pair":
            n = nm.num(kind + "-start")
            sname, dname = nm.claim(f"{kind}-start.{n}"), nm.claim(f"{kind}-done.{n}")
            tail = {
                "all_gather": f"dimensions={{0}}, {groups}, use_global_device_ids=true",
                "all_reduce": f"{groups}, use_global_device_ids=true, to_apply=%region_{nm.num('region')}.{nm.num('r2')}",
                "other_collective": "source_target_pairs={{0,1},{1,2},{2,3}}",
            }[c.ctype]
            tup = f"({c.in_shape}, {c.out_shape})"
            st_text = f"%{sname} = {tup} {kind}-start({c.in_shape} {self.last}), channel_id={chan}, {tail}"
            dn_text = f"%{dname} = {c.out_shape} {kind}-done({tup} %{sname})"
            cats = (f"{kind}-start", f"{kind}-done")
            base_ps = (800_000, 300_000)
            sc_name = sc_module = ""
        else:  # cont
            n = nm.num("async-collective-start")
            sname, dname = nm.claim(f"async-collective-start.{n}"), nm.claim(f"async-collective-done.{n}")
            m = nm.num(kind + "-clone")
            tup = (f"({c.in_shape}, {c.out_shape}, s32[2]{{0:S(4)}}, u32[]{{:S(2)}}, u32[]{{:S(2)}}, "
                   f"/*index=5*/u32[]{{:S(2)}})")
            st_text = (f"%{sname} = {tup} fusion({c.in_shape} {self.last}), kind=kCustom, "
                       f"output_to_operand_aliasing={{{{0}}: (0, {{}})}}, calls=%{kind}.{m}.clone")
            dn_text = (f"%{dname} = {c.out_shape} fusion({c.in_shape} {nm.gte()}, {c.out_shape} {nm.gte()}, "
                       f"s32[2]{{0:S(4)}} {nm.gte()}, u32[]{{:S(2)}} {nm.gte()}), kind=kCustom, "
                       f"calls=%{kind}.{m}.clone.done")
            cats = ("custom fusion", "custom fusion")
            base_ps = (2_500_000, 1_500_000)
            sc_name = sc_module = ""
        st = self._new(name=sname, hlo=st_text, category=cats[0], bucket=bucket, phase=c.phase,
                       tf_op=None if form == "cont" else c.tf, source=None, shape=c.out_shape, coll=c.ctype,
                       role="start", base_ps=base_ps[0], engine=engine, form=form, sc_name=sc_name,
                       sc_module=sc_module, bytes_accessed=c.nbytes // 8, raw_bytes=c.nbytes // 8)
        dn = self._new(name=dname, hlo=dn_text, category=cats[1], bucket=bucket, phase=c.phase, tf_op=c.tf,
                       source=c.source, shape=c.out_shape, coll=c.ctype, role="done", base_ps=base_ps[1],
                       engine=engine, form=form, sc_name=sc_name, sc_module=sc_module,
                       bytes_accessed=c.nbytes // 8, raw_bytes=c.nbytes // 8)
        st.transfer_ps = self._transfer_ps(c, engine)
        st.peer, dn.peer = dn.idx, st.idx
        self.last = "%" + dname
        return st, dn

    def is_short(self, key: int) -> bool:
        c = self.colls[key]
        return c.ctype is None or (not c.sr and self.s.coll(c.ctype)[1] == "short")

    def form_of(self, key: int) -> str:
        c = self.colls[key]
        if c.ctype is None:
            return "copy"
        return c.form_override or self.s.coll(c.ctype)[0]

    def is_sync(self, key: int) -> bool:
        return self.form_of(key) == "sync" and not self.colls[key].sr

    def _realize_sendrecv(self, c: _Coll) -> tuple[OpT, OpT]:
        """send/send-done or recv/recv-done pair over DCN (pipeline stage transfer)."""
        nm = self.nm
        n = nm.num(c.sr)
        chan = nm.num("channel")
        a, d = nm.claim(f"{c.sr}.{n}"), nm.claim(f"{c.sr}-done.{n}")
        pairs = "{{0,1},{1,2},{2,3}}" if c.sr == "send" else "{{1,0},{2,1},{3,2}}"
        fa = f'frontend_attributes={{_xla_send_recv_source_target_pairs="{pairs}"}}'
        tok = f"%after-all.{nm.num('after-all')}"
        if c.sr == "send":
            st_text = (f"%{a} = ({c.in_shape}, u32[], token[]) send({c.in_shape} {self.last}, token[] {tok}), "
                       f"channel_id={chan}, {fa}")
            dn_text = f"%{d} = token[] send-done(({c.in_shape}, u32[], token[]) %{a}), channel_id={chan}, {fa}"
        else:
            st_text = f"%{a} = ({c.out_shape}, u32[], token[]) recv(token[] {tok}), channel_id={chan}, {fa}"
            dn_text = (f"%{d} = ({c.out_shape}, token[]) recv-done(({c.out_shape}, u32[], token[]) %{a}), "
                       f"channel_id={chan}, {fa}")
        st = self._new(name=a, hlo=st_text, category=c.sr, bucket="other_collective", phase=c.phase, tf_op=c.tf,
                       source=c.source, shape=c.out_shape, coll="other_collective", role="start", base_ps=700_000,
                       engine=c.engine_hint or "dcn", form="pair", bytes_accessed=c.nbytes, raw_bytes=c.nbytes)
        dn = self._new(name=d, hlo=dn_text, category=f"{c.sr}-done", bucket="other_collective", phase=c.phase,
                       tf_op=c.tf, source=c.source, shape=c.out_shape, coll="other_collective", role="done",
                       base_ps=300_000, engine=c.engine_hint or "dcn", form="pair")
        st.transfer_ps = self._transfer_ps(c, c.engine_hint or "dcn")
        st.peer, dn.peer = dn.idx, st.idx
        self.last = "%" + d
        return st, dn

    def prefetch(self, keys: list[int]) -> tuple[list, list]:
        """Loop prologue/epilogue for cross-iteration prefetches (long overlap).

        In long-overlap mode a layer body waits (done) for the weights that the previous
        iteration started gathering and starts (start) the next layer's gather later in
        the body; the first start sits before the loop and the last done after it.
        """
        keep = [k for k in keys if not self.is_short(k) and not self.is_sync(k)]
        return [("S", k) for k in keep], [("D", k) for k in keep]

    def realize(self, items: list) -> list:
        """Replace ('S', key)/('D', key) placeholders by templates, honouring form and overlap.

        Short overlap: the start is moved right before the last op preceding its done.
        Sync form: the start disappears and the done becomes the synchronous op.
        """
        items = list(items)
        for key in sorted({k for t, k in items if t == "S"}):
            if not self.is_short(key) or ("D", key) not in items:
                continue
            items.remove(("S", key))
            di = items.index(("D", key))
            j = di - 1
            while j >= 0 and items[j][0] != OP:
                j -= 1
            items.insert(j if j >= 0 else di, ("S", key))
        out = []
        made = self.made
        for t, k in items:
            if t == "S":
                if k not in made:
                    made[k] = self._realize_coll(k)
                st, dn = made[k]
                if st is not None:
                    out.append((START, st.idx))
            elif t == "D":
                if k not in made:
                    made[k] = self._realize_coll(k)
                st, dn = made[k]
                out.append((SYNC, dn.idx) if st is None else (DONE, dn.idx))
            else:
                out.append((t, k))
        return out


def stable_hash(s: str) -> int:
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


# ---------------------------------------------------------------------------
# Layer bodies
# ---------------------------------------------------------------------------

def _mm_dts(b: Builder, which: str) -> tuple[str, str]:
    if not b.fp8:
        return ("bf16", "bf16")
    return {"fwd": ("f8e4m3fn", "f8e4m3fn"), "dgrad": ("f8e5m2", "f8e4m3fn"), "wgrad": ("f8e4m3fn", "f8e5m2")}[which]


def _quant(b: Builder, sc: str, dims, phase: str, what: str, remat: bool = False) -> list:
    """FP8 quantisation fusion (amax, scale, convert) when precision is fp8."""
    if not b.fp8:
        return []
    op = b.ew(f"{sc}/{what}/qwix_quantize/convert_element_type[new_dtype=float8_e4m3fn weak_type=False]",
              dims, phase=phase, n_in=1, flops_per=6, out_dt="f8e4m3fn", source="qwix/qconfig.py:210",
              remat=remat)
    return [(OP, op.idx)]


def _attention_core_fwd(b: Builder, sc: str, phase: str, remat: bool) -> list:
    s = b.s
    T, S_kv = b.Tm, s.seq_len
    causal_units = b.B * b.S_l * S_kv * b.Hq * b.Hd  # one causal score or value matmul = 2*units/2 flops
    att = f"{sc}/self_attention/AttentionOp_0/AttentionOp_0.apply_attention"
    if s.attention == "splash":
        inst, comp = H.splash_name("fwd", s.kernel_block)
        tf = f"{att}/AttentionOp_0.tpu_flash_attention/jit(shmap_body)/vmap(jit(_splash_attention))/{comp}/jit(wrapped)/pallas_call"
        flops = 2 * causal_units * (b.Tm / b.T)
        qb = nbytes("bf16", (b.Tm, b.qd))
        kvb = 2 * nbytes("bf16", (S_kv, b.kvd))
        nb = int(2 * qb + kvb * max(1, b.S_l // s.kernel_block) * 0.5 * (b.Tm / b.T) + kvb)
        op = b.kernel(inst, tf, phase=phase, flops=int(flops), nbytes_=nb, eff=s.kernel_eff, bucket="attention",
                      outs=[shape("f32", (s.kernel_block, 128)), shape("bf16", (b.Hq, T, b.Hd)),
                            shape("f32", (b.Hq, T, b.Hd))],
                      ins=[shape("s8", (1, 4, 4)), shape("bf16", (b.Hq, T, b.Hd)), shape("bf16", (b.KV, S_kv, b.Hd)),
                           shape("bf16", (b.KV, S_kv, b.Hd))],
                      source="splash_attention_kernel.py:2286", remat=remat)
        return [(OP, op.idx)]
    # unfused: QK^T dot, masked softmax, PV dot -- the score matrix goes through HBM
    tfd = f"{att}/AttentionOp_0.apply_attention_dot"
    out = []
    qk = b.matmul(f"{tfd}/einsum/{DG_ATTN}", T, b.Hd, S_kv, phase=phase, batch=b.Hq, attention=True,
                  out_dt="f32", eff=0.45, remat=remat, source="attentions.py:493")
    out.append((OP, qk.idx))
    sm = b.ew(f"{tfd}/softmax/reduce_max[axes=(-1,)]", (b.Hq, T, S_kv), phase=phase, dt="f32", n_in=1,
              n_out=1, flops_per=5, attention=True, remat=remat, source="attentions.py:512", out_dt="bf16")
    out.append((OP, sm.idx))
    pv = b.matmul(f"{tfd}/einsum/{DG_ATTN}", T, S_kv, b.Hd, phase=phase, batch=b.Hq, attention=True,
                  eff=0.5, remat=remat, source="attentions.py:530")
    out.append((OP, pv.idx))
    return out


def _attention_core_bwd(b: Builder, sc: str) -> list:
    s = b.s
    T, S_kv = b.Tm, s.seq_len
    units = b.B * b.S_l * S_kv * b.Hq * b.Hd * (b.Tm / b.T)
    att = f"{sc}/self_attention/AttentionOp_0/AttentionOp_0.apply_attention"
    out = []
    if s.attention == "splash":
        base = f"{att}/AttentionOp_0.tpu_flash_attention/jit(shmap_body)/vmap(jit(_splash_attention))"
        qb = nbytes("bf16", (b.Tm, b.qd))
        kvb = 2 * nbytes("bf16", (S_kv, b.kvd))
        rereads = max(1, b.S_l // s.kernel_block) * 0.5 * (b.Tm / b.T)
        for kind, mult in (("dq", 3), ("dkv", 4)):
            inst, comp = H.splash_name(kind, s.kernel_block)
            tf = f"{base}/{comp}/jit(wrapped)/pallas_call"
            nb = int(3 * qb + kvb * rereads * (1.5 if kind == "dkv" else 1.0) + 2 * kvb)
            outs = ([shape("f32", (s.kernel_block, 128)), shape("bf16", (b.Hq, T, b.Hd))] if kind == "dq" else
                    [shape("f32", (s.kernel_block, 128)), shape("f32", (s.kernel_block, 128)),
                     shape("bf16", (b.KV, S_kv, b.Hd)), shape("bf16", (b.KV, S_kv, b.Hd))])
            op = b.kernel(inst, tf, phase="bwd", flops=int(mult * units), nbytes_=nb, eff=s.kernel_eff * 0.92,
                          bucket="attention", outs=outs,
                          ins=[shape("s8", (1, 4, 4)), shape("bf16", (b.Hq, T, b.Hd)),
                               shape("bf16", (b.KV, S_kv, b.Hd)), shape("bf16", (b.KV, S_kv, b.Hd))],
                          source="splash_attention_kernel.py:2286")
            out.append((OP, op.idx))
        return out
    tfd = f"{att}/AttentionOp_0.apply_attention_dot"
    for i, (M, K, N, label) in enumerate(((S_kv, T, b.Hd, "dv"), (T, b.Hd, S_kv, "dp"))):
        op = b.matmul(f"{tfd}/einsum/{DG_ATTN}", M, K, N, phase="bwd", batch=b.Hq, attention=True, eff=0.45,
                      out_dt="f32" if label == "dp" else "bf16", source="attentions.py:493")
        out.append((OP, op.idx))
    sm = b.ew(f"{tfd}/softmax/mul", (b.Hq, T, S_kv), phase="bwd", dt="f32", n_in=2, flops_per=4, attention=True,
              source="attentions.py:512", out_dt="bf16")
    out.append((OP, sm.idx))
    red = b.ew(f"{tfd}/softmax/reduce_sum[axes=(-1,)]", (b.Hq, T, 128), phase="bwd", dt="f32", n_in=1,
               flops_per=2, attention=True, category="reduce", opcode="reduce", source="attentions.py:514",
               hlo_body=f"reduce(f32[{b.Hq},{T},{S_kv}] {b.last}, f32[] %constant.{b.nm.num('constant')}), "
                        f"dimensions={{2}}, to_apply=%region_{b.nm.num('region')}.add")
    out.append((OP, red.idx))
    for M, K, N in ((T, S_kv, b.Hd), (S_kv, T, b.Hd)):
        op = b.matmul(f"{tfd}/einsum/{DG_ATTN}", M, K, N, phase="bwd", batch=b.Hq, attention=True, eff=0.45,
                      source="attentions.py:493")
        out.append((OP, op.idx))
    return out


def _qkv_fwd(b: Builder, sc: str, phase: str, remat: bool) -> list:
    out = []
    dts = _mm_dts(b, "fwd")
    for proj, width in (("query", b.qd), ("key", b.kvd), ("value", b.kvd)):
        pname = "query_projection" if proj == "query" else "kv_projection"
        op = b.matmul(f"{sc}/self_attention/self_attention.{pname}/{proj}/{DG_FWD}", b.Tm, b.D, width,
                      phase=phase, dts=dts, remat=remat)
        out.append((OP, op.idx))
    return out


def _mlp_fwd_ops(b: Builder, sc: str, phase: str, remat: bool, upto_silu: bool = False) -> list:
    dts = _mm_dts(b, "fwd")
    out = []
    w0 = b.matmul(f"{sc}/mlp/wi_0/{DG_FWD}", b.Tm, b.D, b.F, phase=phase, dts=dts, remat=remat)
    w1 = b.matmul(f"{sc}/mlp/wi_1/{DG_FWD}", b.Tm, b.D, b.F, phase=phase, dts=dts, remat=remat, dedup=w0.name)
    out += [(OP, w0.idx), (OP, w1.idx)]
    si = b.ew(f"{sc}/mlp/mul", (1, b.Tm, b.F), phase=phase, n_in=2, flops_per=6, remat=remat,
              remat_suffix=remat, source="linears.py:262")
    out.append((OP, si.idx))
    if not upto_silu:
        wo = b.matmul(f"{sc}/mlp/wo/{DG_FWD}", b.Tm, b.F, b.D, phase=phase, dts=dts, remat=remat)
        out.append((OP, wo.idx))
    return out


def _moe_fwd_ops(b: Builder, sc: str, phase: str, remat: bool, with_comm: bool = True) -> list:
    s = b.s
    out = []
    moe = f"{sc}/MoeBlock_0"
    r = b.matmul(f"{moe}/gate/{DG_F32}", b.Tm, b.D, s.experts, phase=phase, dts=("f32", "f32"), out_dt="f32",
                 remat=remat, source="moe.py:402", eff=0.35)
    out.append((OP, r.idx))
    tk = b.ew(f"{moe}/top_k[k={s.top_k}]", (b.Tm, s.experts), phase=phase, dt="f32", n_in=1, flops_per=20,
              remat=remat, remat_suffix=remat, source="moe.py:431")
    out.append((OP, tk.idx))
    routed = b.Tm * s.top_k
    perm = b.ew(f"{moe}/permute/gather", (routed, b.D), phase=phase, n_in=1, flops_per=1, remat=remat,
                source="moe.py:470", category="loop fusion")
    out.append((OP, perm.idx))
    if with_comm:
        k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase=phase, group=s.ep,
                   tf=f"{moe}/shard_map/all_to_all[split_axis=0 concat_axis=0 axis_name=expert tiled=True]",
                   source="moe.py:512")
        out += [("S", k), ("D", k)]
    out += _experts(b, moe, phase, remat, "fwd")
    if with_comm:
        k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase=phase, group=s.ep,
                   tf=f"{moe}/shard_map/all_to_all[split_axis=0 concat_axis=0 axis_name=expert tiled=True]",
                   source="moe.py:540")
        out += [("S", k), ("D", k)]
    un = b.ew(f"{moe}/unpermute/mul", (b.Tm, b.D), phase=phase, n_in=3, flops_per=3, remat=remat,
              source="moe.py:560")
    out.append((OP, un.idx))
    return out


def _experts(b: Builder, moe: str, phase: str, remat: bool, which: str) -> list:
    """Expert FFN: megablox gmm kernels or padded dense einsums."""
    s = b.s
    D, Fm = b.D, s.moe_d_ff
    routed = b.Tm * s.top_k  # tokens this core's experts process (balanced)
    out = []
    dts = _mm_dts(b, "fwd")
    peak = CORE_PEAK_FP8 if b.fp8 else CORE_PEAK_BF16
    if s.moe_impl == "dense_padded":
        padded = int(routed * s.capacity_factor)
        tfb = f"{moe}/dense_matmul"
        mats = [("wi_0", padded, D, Fm), ("wi_1", padded, D, Fm), ("wo", padded, Fm, D)]
        if which == "fwd":
            for nm_, M, K, N in mats:
                op = b.matmul(f"{tfb}/{nm_}/{DG_FWD}", M, K, N, phase=phase, dts=dts, remat=remat,
                              model_flops=2 * routed * K * N, source="moe.py:655")
                out.append((OP, op.idx))
                if nm_ == "wi_1":
                    op = b.ew(f"{tfb}/mul", (padded, Fm), phase=phase, flops_per=6, remat=remat,
                              remat_suffix=remat, source="moe.py:668")
                    out.append((OP, op.idx))
        else:
            for nm_, M, K, N in reversed(mats):
                for g, dd in (("dgrad", _mm_dts(b, "dgrad")), ("wgrad", _mm_dts(b, "wgrad"))):
                    mm = (M, N, K) if g == "dgrad" else (K, M, N)
                    op = b.matmul(f"{tfb}/{nm_}/{DG_DGRAD if g == 'dgrad' else DG_WGRAD}", *mm, phase="bwd",
                                  dts=dd, model_flops=2 * routed * K * N, source="moe.py:655")
                    out.append((OP, op.idx))
                if nm_ == "wo":
                    op = b.ew(f"{tfb}/mul", (padded, Fm), phase="bwd", n_in=3, flops_per=8, source="moe.py:668")
                    out.append((OP, op.idx))
        return out
    # megablox gmm / tgmm
    gdt = "f8e4m3fn" if b.fp8 else "bf16"

    def gmm(kind: str, M: int, K: int, N: int, ph: str, rm: bool, tag: str) -> OpT:
        flops = 2 * M * K * N
        nb = nbytes(gdt, (M, K)) + nbytes(gdt, (s.experts // s.ep, K, N)) + nbytes("bf16", (M, N))
        inst = f"{kind}-{tag}"
        tf = f"{moe}/jit({kind})/{kind}/pallas_call"
        eff = 0.66 * min(1.0, s.kernel_eff / 0.62)
        ins = [shape(gdt, (M, K)), shape(gdt, (max(1, s.experts // s.ep), K, N)), shape("s32", (s.experts,))]
        return b.kernel(inst, tf, phase=ph, flops=flops, nbytes_=nb, eff=eff,
                        bucket="matmul_fp8" if b.fp8 else "matmul_bf16",
                        outs=[shape("bf16", (M, N))], ins=ins, source="megablox/gmm.py:320", remat=rm, peak=peak)

    if which == "fwd":
        out.append((OP, gmm("gmm", routed, D, Fm, phase, remat, "wi_0").idx))
        out.append((OP, gmm("gmm", routed, D, Fm, phase, remat, "wi_1").idx))
        op = b.ew(f"{moe}/mul", (routed, Fm), phase=phase, flops_per=6, remat=remat, remat_suffix=remat,
                  source="moe.py:610")
        out.append((OP, op.idx))
        out.append((OP, gmm("gmm", routed, Fm, D, phase, remat, "wo").idx))
    else:
        out.append((OP, gmm("gmm", routed, D, Fm, "bwd", False, "wo_dgrad").idx))
        out.append((OP, gmm("tgmm", Fm, routed, D, "bwd", False, "wo").idx))
        op = b.ew(f"{moe}/mul", (routed, Fm), phase="bwd", n_in=3, flops_per=8, source="moe.py:610")
        out.append((OP, op.idx))
        for w in ("wi_0", "wi_1"):
            out.append((OP, gmm("gmm", routed, Fm, D, "bwd", False, f"{w}_dgrad").idx))
            out.append((OP, gmm("tgmm", D, routed, Fm, "bwd", False, w).idx))
    return out


def _moe_bwd_ops(b: Builder, sc: str) -> list:
    s = b.s
    moe = f"{sc}/MoeBlock_0"
    routed = b.Tm * s.top_k
    out = []
    a2a_tf = f"{moe}/shard_map/all_to_all[split_axis=0 concat_axis=0 axis_name=expert tiled=True]"
    k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase="bwd", group=s.ep, tf=a2a_tf, source="moe.py:540")
    out += [("S", k), ("D", k)]
    out += _experts(b, moe, "bwd", False, "bwd")
    k = b.coll("all_to_all", (s.ep, routed // s.ep, b.D), phase="bwd", group=s.ep, tf=a2a_tf, source="moe.py:512")
    out += [("S", k), ("D", k)]
    r1 = b.matmul(f"{moe}/gate/{DG_F32}", b.Tm, s.experts, b.D, phase="bwd", dts=("f32", "f32"), out_dt="f32",
                  source="moe.py:402", eff=0.3)
    r2 = b.matmul(f"{moe}/gate/{DG_F32}", b.D, b.Tm, s.experts, phase="bwd", dts=("f32", "f32"), out_dt="f32",
                  source="moe.py:402", eff=0.3)
    out += [(OP, r1.idx), (OP, r2.idx)]
    return out


def _dus(b: Builder, dims: tuple[int, ...], dt: str, phase: str) -> OpT:
    full = (b.layers,) + tuple(dims)
    return b.misc("dynamic-update-slice", "dynamic-update-slice",
                  f"dynamic-update-slice({shape(dt, full)} {b.nm.gte()}, {shape(dt, (1,) + tuple(dims))} {b.last}, "
                  f"s32[] {b.nm.gte()}, s32[] %constant.{b.nm.num('constant')}, s32[] %constant.{b.nm.num('constant')})",
                  shape(dt, full, minor_first=(len(full) == 3 and dt == "f32")), phase=phase,
                  tf=f"{H.FWD if phase == 'fwd' else H.BWD}/while/body/dynamic_update_slice",
                  nbytes_=2 * nbytes(dt, dims), source="axes_scan.py:166")


def layer_fwd(b: Builder) -> tuple[list, list, list]:
    """(loop prologue, scanned layer body, loop epilogue) of the forward pass."""
    s = b.s
    sc = H.layer_scope("fwd", pipeline=b.pipeline)
    D, Tm = b.D, b.Tm
    items: list = []
    attn_w = b.coll("all_gather", (2 * b.qd + 2 * b.kvd, D), phase="fwd", group=s.fsdp,
                    tf=f"{sc}/self_attention/self_attention.query_projection/query/{DG_FWD}", source="linears.py:118")
    if s.arch == "moe":
        mlp_w = b.coll("all_gather", (3 * max(1, s.experts // s.ep) * s.moe_d_ff, D), phase="fwd",
                       group=max(1, s.fsdp // s.ep), tf=f"{sc}/MoeBlock_0/wi_0/all_gather", source="moe.py:380")
    else:
        mlp_w = b.coll("all_gather", (3 * b.F, D), phase="fwd", group=s.fsdp,
                       tf=f"{sc}/mlp/wi_0/{DG_FWD}", source="linears.py:118")
    vcopy = b.coll(None, (D, D // 8), phase="fwd", tf=None, group=1)
    items.append((OP, b.ew(f"{sc}/pre_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="fwd", n_in=2,
                           flops_per=5, source="normalizations.py:68").idx))
    items.append(("S", vcopy))
    items += _quant(b, sc + "/self_attention", (1, Tm, D), "fwd", "query")
    items.append(("D", attn_w))
    items += _qkv_fwd(b, sc, "fwd", False)
    items.append(("S", attn_w))  # prefetch the next layer's attention weights
    items.append((OP, b.ew(f"{sc}/self_attention/rotary_embedding/mul", (1, Tm, b.qd + b.kvd), phase="fwd",
                           n_in=3, flops_per=6, source="embeddings.py:297").idx))
    if s.cp > 1:
        kv = b.coll("all_gather", (2 * s.seq_len, b.kvd), phase="fwd", group=s.cp,
                    tf=f"{sc}/self_attention/AttentionOp_0/all_gather[axis_name=context tiled=True]",
                    source="attentions.py:402")
        items.insert(len(items) - 1, ("S", kv))
        items.append((OP, b.ew(f"{sc}/self_attention/AttentionOp_0/transpose", (1, Tm, b.qd), phase="fwd",
                               n_in=1, flops_per=0, category="data formatting", opcode="copy",
                               source="attentions.py:398").idx))
        items.append(("D", kv))
    items += _attention_core_fwd(b, sc, "fwd", False)
    items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.out_projection/out/{DG_FWD}", Tm, b.qd, D,
                               phase="fwd", dts=_mm_dts(b, "fwd")).idx))
    items.append((OP, b.ew(f"{sc}/post_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="fwd", n_in=3,
                           flops_per=6, source="normalizations.py:68").idx))
    items.append(("D", vcopy))
    items += _quant(b, sc + "/mlp", (1, Tm, D), "fwd", "wi_0")
    items.append(("D", mlp_w))
    if s.arch == "moe":
        items += _moe_fwd_ops(b, sc, "fwd", False)
    else:
        items += _mlp_fwd_ops(b, sc, "fwd", False)
    items.append(("S", mlp_w))  # prefetch the next layer's MLP weights
    items.append((OP, b.ew(f"{sc}/add", (1, Tm, D), phase="fwd", n_in=2, flops_per=1,
                           source="decoders.py:142").idx))
    items.append((OP, _dus(b, (Tm, D), "bf16", "fwd").idx))
    pre, post = b.prefetch([attn_w, mlp_w])
    body = b.realize(items)
    return b.realize(pre), body, b.realize(post)


def layer_bwd(b: Builder) -> tuple[list, list, list]:
    """(loop prologue, scanned layer body, loop epilogue) of the backward pass."""
    s = b.s
    sc = H.layer_scope("bwd", pipeline=b.pipeline)
    rsc = H.layer_scope("bwd", remat=True, pipeline=b.pipeline)
    D, Tm = b.D, b.Tm
    items: list = []
    if s.arch == "moe":
        mlp_dims = (3 * max(1, s.experts // s.ep) * s.moe_d_ff, D)
        mlp_group = max(1, s.fsdp // s.ep)
    else:
        mlp_dims, mlp_group = (3 * b.F, D), s.fsdp
    ag_mlp = b.coll("all_gather", mlp_dims, phase="bwd", group=mlp_group,
                    tf=f"{sc}/mlp/wi_0/{DG_DGRAD}" if s.arch != "moe" else f"{sc}/MoeBlock_0/wi_0/all_gather",
                    source="linears.py:118")
    ag_attn = b.coll("all_gather", (2 * b.qd + 2 * b.kvd, D), phase="bwd", group=s.fsdp,
                     tf=f"{sc}/self_attention/self_attention.query_projection/query/{DG_DGRAD}",
                     source="linears.py:118")
    items.append((OP, b.misc("dynamic-slice", "dynamic-slice",
                             f"dynamic-slice(bf16[{b.layers},{Tm},{D}] {b.nm.gte()}, s32[] {b.nm.gte()}, "
                             f"s32[] %constant.{b.nm.num('constant')}, s32[] %constant.{b.nm.num('constant')}), "
                             f"dynamic_slice_sizes={{1,{Tm},{D}}}",
                             shape("bf16", (1, Tm, D)), phase="bwd", tf=f"{H.BWD}/while/body/dynamic_slice",
                             nbytes_=2 * nbytes("bf16", (Tm, D)), source="axes_scan.py:160").idx))
    # -- recompute (remat policy) ---------------------------------------------
    pol = s.remat
    items.append((OP, b.ew(f"{sc}/pre_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=2,
                           flops_per=5, remat=True, remat_suffix=True, source="normalizations.py:68").idx))
    if pol == "full":
        items += _quant(b, rsc + "/self_attention", (1, Tm, D), "bwd", "query", remat=True)
        items.append(("D", ag_attn))
        items += _qkv_fwd(b, rsc, "bwd", True)
        items += _attention_core_fwd(b, rsc, "bwd", True)
        items.append((OP, b.matmul(f"{rsc}/self_attention/self_attention.out_projection/out/{DG_FWD}", Tm, b.qd,
                                   D, phase="bwd", dts=_mm_dts(b, "fwd"), remat=True).idx))
    items.append((OP, b.ew(f"{sc}/post_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=3,
                           flops_per=6, remat=True, remat_suffix=True, source="normalizations.py:68").idx))
    items.append(("D", ag_mlp))
    if pol in ("full", "moderate"):
        if s.arch == "moe":
            items += _moe_fwd_ops(b, rsc, "bwd", True, with_comm=(pol == "full"))
        else:
            items += _mlp_fwd_ops(b, rsc, "bwd", True, upto_silu=(pol == "moderate"))
    # -- MLP / MoE backward ------------------------------------------------------
    if s.arch == "moe":
        items += _moe_bwd_ops(b, sc)
        rs_mlp = b.coll("reduce_scatter", mlp_dims, phase="bwd", group=mlp_group,
                        tf=f"{sc}/MoeBlock_0/wi_0/reduce_scatter", source="moe.py:380")
    else:
        dd, wd = _mm_dts(b, "dgrad"), _mm_dts(b, "wgrad")
        items += _quant(b, sc + "/mlp", (1, Tm, D), "bwd", "wo_grad")
        items.append((OP, b.matmul(f"{sc}/mlp/wo/{DG_DGRAD}", Tm, D, b.F, phase="bwd", dts=dd).idx))
        items.append((OP, b.matmul(f"{sc}/mlp/wo/{DG_WGRAD}", b.F, Tm, D, phase="bwd", dts=wd).idx))
        items.append((OP, b.ew(f"{sc}/mlp/mul", (1, Tm, b.F), phase="bwd", n_in=3, flops_per=8,
                               source="linears.py:262").idx))
        for w in ("wi_0", "wi_1"):
            items.append((OP, b.matmul(f"{sc}/mlp/{w}/{DG_DGRAD}", Tm, b.F, D, phase="bwd", dts=dd).idx))
            items.append((OP, b.matmul(f"{sc}/mlp/{w}/{DG_WGRAD}", D, Tm, b.F, phase="bwd", dts=wd).idx))
        rs_mlp = b.coll("reduce_scatter", mlp_dims, phase="bwd", group=mlp_group,
                        tf=f"{sc}/mlp/wi_0/{DG_WGRAD}", source="linears.py:118")
    items.append(("S", ag_mlp))  # prefetch the next (lower) layer's MLP weights
    items.append(("S", rs_mlp))
    items.append((OP, b.ew(f"{sc}/post_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=3,
                           flops_per=8, source="normalizations.py:68").idx))
    if pol != "full":
        items.append(("D", ag_attn))
    dd, wd = _mm_dts(b, "dgrad"), _mm_dts(b, "wgrad")
    items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.out_projection/out/{DG_DGRAD}", Tm, D, b.qd,
                               phase="bwd", dts=dd).idx))
    items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.out_projection/out/{DG_WGRAD}", b.qd, Tm, D,
                               phase="bwd", dts=wd).idx))
    items += _attention_core_bwd(b, sc)
    rs_kv = None
    if s.cp > 1:
        rs_kv = b.coll("reduce_scatter", (2 * s.seq_len, b.kvd), phase="bwd", group=s.cp,
                       tf=f"{sc}/self_attention/AttentionOp_0/reduce_scatter[axis_name=context]",
                       source="attentions.py:402")
        items.append(("S", rs_kv))
    rs_attn = b.coll("reduce_scatter", (2 * b.qd + 2 * b.kvd, D), phase="bwd", group=s.fsdp,
                     tf=f"{sc}/self_attention/self_attention.query_projection/query/{DG_WGRAD}",
                     source="linears.py:118")
    for proj, width in (("query", b.qd), ("key", b.kvd), ("value", b.kvd)):
        pname = "query_projection" if proj == "query" else "kv_projection"
        items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.{pname}/{proj}/{DG_DGRAD}", Tm, width, D,
                                   phase="bwd", dts=dd).idx))
        items.append((OP, b.matmul(f"{sc}/self_attention/self_attention.{pname}/{proj}/{DG_WGRAD}", D, Tm, width,
                                   phase="bwd", dts=wd).idx))
        if proj == "query":
            items.append(("S", rs_attn))
        if rs_kv is not None and proj == "key":
            items.append(("D", rs_kv))
    items.append(("S", ag_attn))  # prefetch the next (lower) layer's attention weights
    items.append((OP, b.ew(f"{sc}/pre_self_attention_layer_norm/rms_norm/mul", (1, Tm, D), phase="bwd", n_in=3,
                           flops_per=8, source="normalizations.py:68").idx))
    ar = b.coll("all_reduce", (2, D), phase="bwd", group=s.fsdp, dt="f32",
                tf=f"{sc}/pre_self_attention_layer_norm/rms_norm/reduce_sum[axes=(0, 1)]",
                source="normalizations.py:70")
    items.append(("S", ar))
    gdims = (max(1, b.F // 4), D) if s.arch != "moe" else (max(1, s.moe_d_ff // 4), D)
    items.append((OP, _dus(b, gdims, "f32", "bwd").idx))
    items.append(("D", rs_mlp))
    items.append(("D", ar))
    items.append((OP, _dus(b, (D, b.qd // 4), "f32", "bwd").idx))
    items.append(("D", rs_attn))
    pre, post = b.prefetch([ag_mlp, ag_attn])
    body = b.realize(items)
    return b.realize(pre), body, b.realize(post)


# ---------------------------------------------------------------------------
# Whole programs
# ---------------------------------------------------------------------------

def program_id(rng: random.Random) -> int:
    return rng.randrange(10**17, 9 * 10**18)


#: A whole-program builder for scenarios that are not MaxText training steps:
#: (builder, two program ids) -> (programs, estimated step ps).
ProgramBuilder = Callable[[Builder, list[int]], tuple[list[Program], float]]
#: Splices extra ops into the layer bodies: (builder, forward body, backward body) -> both bodies.
BodySplice = Callable[[Builder, list, list], tuple[list, list]]


def build_plan(spec: Scenario, *, seed: int = 0, layers: int | None = None, scale: float = 1.0,
               programs_of: Mapping[str, ProgramBuilder] | None = None, host_offload: BodySplice | None = None) -> Plan:
    """The plan of a scenario. `programs_of` maps `Scenario.program` values
    other than "maxtext" to their builders and `host_offload` splices
    activation offload into the layer bodies (both given by the caller, which
    keeps this module below the builders that use its pieces)."""
    L = int(layers or spec.layers)
    b = Builder(spec, seed, L, scale)
    rng = random.Random(seed * 31 + stable_hash(spec.name))
    programs: list[Program] = []
    if spec.program != "maxtext":
        if not programs_of or spec.program not in programs_of:
            raise ValueError(f"no program builder for scenario program {spec.program!r}")
        programs, est = programs_of[spec.program](b, [program_id(rng), program_id(rng)])
        return Plan(spec=spec, ops=b.ops, programs=programs, layers=L, est_step_ps=est)

    # -- small program run before every step: jit_fold_in ----------------------
    fold = Program("jit_fold_in", program_id(rng))
    b.prog = 0
    rb = b.misc("rng-bit-generator", "rng-bit-generator",
                f"rng-bit-generator(u64[2]{{0:T(128)}} %custom-call.{b.nm.num('custom-call')}), algorithm=rng_default",
                shape("u32", (10, 4)), phase="host", tf="jit(fold_in)/jit(main)/rng_bit_generator[shape=(10, 4) dtype=uint32 algorithm=RNG_DEFAULT]",
                nbytes_=4096, source="train.py:582")
    fz = b.ew("jit(fold_in)/jit(main)/threefry2x32", (2,), phase="host", dt="u32", n_in=2, flops_per=40,
              source="random.py:286")
    fold.items = [(MB, 0), (OP, rb.idx), (OP, fz.idx), (ME, 0)]
    programs.append(fold)

    # -- the train step ------------------------------------------------------
    train = Program("jit_train_step", program_id(rng), is_train=True)
    b.prog = 1
    D, T, V = b.D, b.T, b.V
    items: list = [(MB, 1)]
    pro: list = []
    emb = f"{H.FWD}/token_embedder"
    pro.append((OP, b.misc("convert", "non-fusion elementwise",
                           f"convert(f32[{V // 64},{D}]{{1,0:T(8,128)}} %param.{b.nm.num('param')})",
                           shape("bf16", (V // 64, D)), phase="prologue",
                           tf=f"{emb}/convert_element_type[new_dtype=bfloat16 weak_type=False sharding=None]",
                           nbytes_=6 * (V // 64) * D, source="embeddings.py:84").idx))
    pro.append((OP, b.misc("iota", "iota", "iota(), iota_dimension=0", shape("s32", (T, 128)), phase="prologue",
                           tf=None, nbytes_=4 * T * 128).idx))
    a2a = b.coll("all_to_all", (4, 1, T // 4, D // 4), phase="prologue", group=4,
                 tf=f"{emb}/gather[dimension_numbers=GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,), "
                    "start_index_map=(0,)) slice_sizes=(1, 2048) unique_indices=False indices_are_sorted=False "
                    "mode=GatherScatterMode.PROMISE_IN_BOUNDS fill_value=None]", source="embeddings.py:84")
    pro += [("S", a2a), ("D", a2a)]
    pro.append((OP, b.ew(f"{emb}/gather", (1, T, D), phase="prologue", n_in=1, flops_per=1,
                         source="embeddings.py:84").idx))
    if spec.xss:
        x = b.nm.claim("custom-call.7<script>alert(1)</script>")
        pro.append((OP, b._new(
            name=x,
            hlo=f"%{x} = bf16[1,{T},{D}]{{2,1,0:T(8,128)(2,1)}} custom-call(bf16[1,{T},{D}] {b.last}), "
                f"custom_call_target=\"<script>alert(1)</script>\"",
            category="custom-call", bucket="other_compute", phase="prologue",
            tf_op="jit(train_step)/jit(main)/<script>alert(1)</script>/custom_call:",
            source="<script>alert(1)</script>.py:1", flops=0, model_flops=0,
            bytes_accessed=2 * nbytes("bf16", (T, D)), raw_bytes=2 * nbytes("bf16", (T, D)),
            shape=shape("bf16", (1, T, D)), base_ps=compute_ps(0, 2 * nbytes("bf16", (T, D)), CORE_PEAK_BF16, 1),
        ).idx))
    logits_w = b.coll("all_gather", (V, D), phase="prologue", group=spec.fsdp,
                      tf=f"{H.FWD}/logits_dense/{DG_FWD}", source="linears.py:118",
                      form="sync" if spec.coll("all_gather")[0] == "cont" else "")
    pro.append(("S", logits_w))
    bc = b.misc("broadcast", "broadcast", f"broadcast(f32[]{{:T(128)}} %constant.{b.nm.num('constant')}), dimensions={{}}",
                shape("f32", (L, D // 4, D), minor_first=True), phase="prologue", tf=None,
                nbytes_=nbytes("f32", (L, D // 4, D)))
    pro.append((OP, bc.idx))
    pro = b.realize(pro)

    carried = [shape("bf16", (1, b.Tm, D), minor_first=True), shape("bf16", (L, b.Tm, D)),
               shape("f32", (L, D // 4, D), minor_first=True)]
    fwd_pre, fwd_body, fwd_post = layer_fwd(b)
    bwd_pre, bwd_body, bwd_post = layer_bwd(b)
    if spec.host_offload:
        if host_offload is None:
            raise ValueError(f"scenario {spec.name} offloads activations but no splice was given")
        fwd_body, bwd_body = host_offload(b, fwd_body, bwd_body)
    w_f = b.while_op("fwd", L, carried)
    w_b = b.while_op("bwd", L, carried + [shape("f32", (L, b.qd // 4, D), minor_first=True)])

    # -- loss ------------------------------------------------------------------
    loss: list = []
    loss.append((OP, b.ew(f"{H.FWD}/decoder_norm/rms_norm/mul", (1, T, D), phase="loss", n_in=2, flops_per=5,
                          source="normalizations.py:68").idx))
    loss.append(("D", logits_w))
    loss.append((OP, b.matmul(f"{H.FWD}/logits_dense/{DG_FWD}", T, D, V, phase="loss", out_dt="f32",
                              dts=_mm_dts(b, "fwd"),
                              extra_in=(shape("bf16", (D,)) + f" {b.nm.gte()}",)).idx))
    loss.append((OP, b.ew(f"{H.ROOT}/cross_entropy_with_logits/reduce_max[axes=(-1,)]", (T, V), phase="loss",
                          dt="f32", n_in=1, n_out=1, flops_per=6, source="max_utils.py:640").idx))
    lar = b.coll("all_reduce", (4,), phase="loss", group=spec.fsdp, dt="f32",
                 tf=f"{H.ROOT}/psum[axes=('data', 'fsdp')]", source="train.py:412")
    loss += [("S", lar), ("D", lar)]
    loss.append((OP, b.ew(f"{H.BWD}/cross_entropy_with_logits/sub", (T, V), phase="loss", dt="f32", n_in=2,
                          flops_per=4, source="max_utils.py:646", out_dt="bf16").idx))
    loss.append((OP, b.matmul(f"{H.BWD}/logits_dense/{DG_DGRAD}", T, V, D, phase="loss",
                              dts=_mm_dts(b, "dgrad")).idx))
    loss.append((OP, b.matmul(f"{H.BWD}/logits_dense/{DG_WGRAD}", D, T, V, phase="loss", category="output fusion",
                              out_dt="f32", dts=_mm_dts(b, "wgrad")).idx))
    rs_logits = b.coll("reduce_scatter", (V, D), phase="loss", group=spec.fsdp,
                       tf=f"{H.BWD}/logits_dense/{DG_WGRAD}", source="linears.py:118")
    loss.append(("S", rs_logits))
    loss.append((OP, b.ew(f"{H.BWD}/decoder_norm/rms_norm/mul", (1, T, D), phase="loss", n_in=3, flops_per=8,
                          source="normalizations.py:68").idx))
    loss = b.realize(loss)

    # -- after the backward loop: embedding grads, grad norm, optimizer --------
    # (the logits reduce-scatter started before the backward loop completes here)
    epi_raw: list = [("D", rs_logits)]
    epi_raw.append((OP, b.misc("sort", "sort",
                               f"sort(s32[{T}]{{0:T(1024)}} {b.nm.gte()}, s32[{T}]{{0:T(1024)}} %iota.{b.nm.num('iota')}), "
                               f"dimensions={{0}}, to_apply=%compare", f"(s32[{T}]{{0:T(1024)}}, s32[{T}]{{0:T(1024)}})",
                               phase="opt", tf=f"{H.BWD}/token_embedder/scatter-add", nbytes_=16 * T,
                               source="embeddings.py:84", flops=T * 20).idx))
    sa = b.ew(f"{H.BWD}/token_embedder/scatter-add", (V // 64, D), phase="opt", n_in=2, flops_per=2,
              category="custom fusion", kind="kCustom", source="embeddings.py:84")
    epi_raw.append((OP, sa.idx))
    a2b = b.coll("all_to_all", (1, T // 4, 4, D // 4), phase="opt", group=4,
                 tf=f"{H.BWD}/token_embedder/scatter-add", source="embeddings.py:84")
    epi_raw += [("S", a2b), ("D", a2b)]
    # parameters held by this core after FSDP (and EP for experts) sharding
    if spec.arch == "moe":
        mlp_shard = 3 * max(1, spec.experts // spec.ep) * spec.moe_d_ff * D // max(1, spec.fsdp // spec.ep)
    else:
        mlp_shard = 3 * b.F * D // spec.fsdp
    nparams = L * ((2 * b.qd * D + 2 * b.kvd * D) // spec.fsdp + mlp_shard) + 2 * V * D // spec.fsdp
    groups = [("params/decoder/layers/self_attention", 0.2), ("params/decoder/layers/mlp", 0.6),
              ("params/decoder/logits_dense", 0.1), ("params/token_embedder", 0.1)]
    for g, frac in groups:
        epi_raw.append((OP, b.ew(f"{H.ROOT}/reduce_sum[axes=(0, 1, 2)]", (max(1, int(nparams * frac)) // 1024, 1024),
                                 phase="opt", dt="f32", n_in=1, flops_per=2, source="linear_algebra.py:37").idx))
    gar = b.coll("all_reduce", (len(groups),), phase="opt", group=spec.fsdp, dt="f32", tf=None)
    epi_raw += [("S", gar), ("D", gar)]
    for g, frac in groups:
        n = max(1, int(nparams * frac)) // 1024
        epi_raw.append((OP, b.ew(f"{H.ROOT}/optimizer/clip_by_global_norm/mul", (n, 1024), phase="opt", dt="f32",
                                 n_in=2, flops_per=2, source="optax/_src/clipping.py:91").idx))
        epi_raw.append((OP, b.ew(f"{H.ROOT}/optimizer/scale_by_adam/{g}/add", (n, 1024), phase="opt", dt="f32",
                                 n_in=4, n_out=3, flops_per=12, source="optax/_src/transform.py:366").idx))
        epi_raw.append((OP, b.misc("convert", "non-fusion elementwise",
                                   f"convert(f32[{n},1024]{{1,0:T(8,128)}} {b.last})", shape("bf16", (n, 1024)),
                                   phase="opt", tf=f"{H.ROOT}/optimizer/convert_element_type[new_dtype=bfloat16 weak_type=False]",
                                   nbytes_=6 * n * 1024, source="optax/_src/transform.py:390").idx))
    epi_raw.append((OP, b.misc("copy", "data formatting",
                               f"copy(f32[{L},{D},{b.qd // 4}]{{2,1,0:T(8,128)}} {b.last})",
                               shape("f32", (L, D, b.qd // 4), minor_first=True), phase="opt",
                               tf=f"{H.BWD}/while/body/dynamic_update_slice", nbytes_=2 * nbytes("f32", (L, D, b.qd // 4)),
                               source="axes_scan.py:166").idx))
    epi = b.realize(epi_raw)
    items += fwd_pre  # first layer's weights: gathered while the prologue runs
    items += pro
    # -- the layer loops (with pipeline microbatches when pp > 1) --------------
    def seq_ps(seq) -> int:
        tot = 0
        for t, k in seq:
            if t in (OP, START, DONE):
                tot += b.ops[k].base_ps
            elif t == SYNC:
                tot += b.ops[k].base_ps + b.ops[k].transfer_ps
        return tot

    post_bubble = 0
    if b.pipeline:
        mb_f = seq_ps(fwd_body) * L
        mb_b = seq_ps(bwd_body) * L
        stage = 1  # this host's pipeline stage (of spec.pp)
        items.append((GAP, int(stage * mb_f)))
        perm_tf = f"{H.FWD}/pipeline/ppermute[perm=((0, 1), (1, 2), (2, 3), (3, 0))]"
        prev = None
        for m in range(spec.microbatches):
            # the last layer of microbatch m prefetches the first layer of microbatch m+1
            items.append((WB, w_f.idx))
            items += fwd_body * L
            items.append((WE, w_f.idx))
            k = b.coll("other_collective", (1, b.Tm, D), phase="fwd", group=spec.pp, tf=perm_tf,
                       source="pipeline.py:310", engine_hint="dcn")
            items += b.realize(([("D", prev)] if prev is not None else []) + [("S", k)])
            prev = k
        items += bwd_pre
        items += loss
        items += fwd_post
        bprev = None
        for m in range(spec.microbatches):
            items.append((WB, w_b.idx))
            items += bwd_body * L
            items.append((WE, w_b.idx))
            ks = [b.coll("other_collective", (1, b.Tm, D), phase="bwd", group=2, sr=sr, engine_hint="dcn",
                         tf=f"{H.BWD}/pipeline/ppermute[perm=((1, 0), (2, 1), (3, 2), (0, 3))]",
                         source="pipeline.py:318") for sr in ("recv", "send")]
            pre: list = []
            if m == 0 and prev is not None:
                pre.append(("D", prev))
            if bprev is not None:
                pre += [("D", x) for x in bprev]
            items += b.realize(pre + [("S", x) for x in ks])
            bprev = ks
        items += b.realize([("D", x) for x in bprev])
        post_bubble = int((spec.pp - 1 - stage) * mb_b)
        items.append((GAP, post_bubble))
    else:
        items.append((WB, w_f.idx))
        items += fwd_body * L
        items.append((WE, w_f.idx))
        items += bwd_pre  # the backward loop's first weights: gathered during the loss
        items += loss
        items += fwd_post  # drain of the (unused) prefetch issued by the last forward iteration
        items.append((WB, w_b.idx))
        items += bwd_body * L
        items.append((WE, w_b.idx))
    items += epi
    items += bwd_post  # drain of the (unused) prefetch issued by the last backward iteration
    items.append((ME, 1))
    train.items = items
    programs.append(train)

    est_step = seq_ps(fold.items) + seq_ps(items) + sum(k for t, k in items if t == GAP)
    return Plan(spec=spec, ops=b.ops, programs=programs, layers=L, est_step_ps=est_step)

