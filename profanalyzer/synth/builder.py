"""The op builder of the synthesizer: its bucket vocabulary, the sequence item codes,
TPU7x per-core peaks, the op template (:class:`OpT`), :class:`Program` and :class:`Plan`,
and :class:`Builder`, which makes HLO op templates with their roofline cost
(the bucket rules they follow are in :mod:`.program`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# The bucket vocabulary is the product's (the truth is written in its terms);
# which op lands in which bucket is decided here by construction, not by the
# classifier.
from ..classify import BUCKETS as PRODUCT_BUCKETS  # noqa: E402
from ..core.hardware import TPU7X
from .hlo import Namer, nbytes, shape
from .scenario import Scenario

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
