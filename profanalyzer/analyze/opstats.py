"""Per-op statistics of the kept steps: self time, FLOPs, bytes and roofline
per op group, per-bucket summaries, MFU / MXU use, host-offload traffic and
the run-kind evidence (analysis stage; numpy inside, records out).

FLOPs: the op's `flops` stat (per occurrence). A matmul or attention kernel
whose trace carries no FLOPs (no stat, or 0 with no model FLOPs either: the
real vLLM capture's Pallas kernels) gets 2*M*N*K from its operand shapes when
the classifier could derive them (`shape_flops`), else its time counts as
"FLOPs unknown" and MFU says how much of the compute it covers.

Cost: numpy over the (core, metadata row) contributions and over the op
groups (OpGroups, columns), so traces with tens of thousands of distinct ops
stay cheap; the float sums add in the order a loop over cores, rows and
groups would (ufunc.at and cumsum add one by one), so the numbers are bit
for bit those of that loop. Per-row features derived from a core's metadata
table are computed once per distinct table (attributed.TableMemo, the run's; the TensorCores of a
host usually carry equal copies) and shared by the analysis modules.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.attributed import TableMemo
from profanalyzer.analyze.attribution import CoreWork, locate
from profanalyzer.analyze.runkind import (
    RunKindEvidence,
    decide_run_kind,
    inference_marker,
    inference_markers,
)
from profanalyzer.arrays import object_array, unique_ids
from profanalyzer.classify import async_pair_key
from profanalyzer.classify.parse import shape_dims
from profanalyzer.classify.tables import ARRAY
from profanalyzer.model import (
    BucketOps,
    HostOffloadSummary,
    RunKind,
    TopOp,
    Utilisation,
)
from profanalyzer.trace import LINE_MODULES, LINE_OPS, Trace
from profanalyzer.vocab import ATTENTION_SPLIT, BUCKETS, COMPUTE_BUCKETS, MATMUL_BUCKETS

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

REMAT_TOP = 15
KERNELS_TOP = 20
#: An op's achieved rates (TFLOP/s, GB/s, share of its roofline) need at
#: least this much self time per run (1 us): below it the duration is a
#: launch (an async copy-start) or a few ticks of the profiler's timestamps,
#: and FLOPs or bytes over it are not a rate (0.000 ms copy-starts at
#: hundreds of millions of GB/s). Such ops show no rate.
RATE_MIN_RUN_PS = 1_000_000
#: Below this share of compute time with known FLOPs, MFU is marked low-confidence.
FLOPS_COVERAGE_MIN = 0.9

#: Bytes per element of HLO element types (fp8 one byte, 4-bit types half).
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8, "bf16": 2,
               "f16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5, "s2": 0.25, "u2": 0.25}
_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%?[^\s=]+\s*=\s*(.*?)\s[a-z][a-z0-9\-]*\(")


def _dtype_bytes(dt: str) -> float | None:
    if dt in DTYPE_BYTES:
        return DTYPE_BYTES[dt]
    return 1 if dt.startswith("f8") else (0.5 if dt.startswith("f4") else None)


def output_bytes(hlo_text: str, types_memo: dict[str, float] | None = None) -> float:
    """Bytes of an op's output shape(s) from its HLO text (nan when not
    visible). `types_memo`: output type -> bytes, the run's (the ops of
    unrolled layers share a few such types)."""
    m = _HEAD.match(hlo_text[:4096])
    if not m:
        return math.nan
    types = m.group(1)
    if types_memo is None:
        return _types_bytes(types)
    v = types_memo.get(types)
    return v if v is not None else types_memo.setdefault(types, _types_bytes(types))


def _types_bytes(types: str) -> float:
    """Bytes of the arrays an HLO output type (or tuple of types) holds; the
    ops of unrolled layers share a few such types."""
    total = 0.0
    for dt, dims in ARRAY.findall(types):
        size = _dtype_bytes(dt)
        if size is not None:
            total += math.prod(shape_dims(dims)) * size
    return total if total > 0 else math.nan


# A host-memory (S(5)) array written as an op's output: `= f32[..]{..S(5)} copy-done(`
_OUTPUT_TO_HOST = re.compile(r"=\s*\(?[a-z0-9]+\[[^\]]*\]\{[^}]*S\(5\)\}")


@dataclass(frozen=True)
class OpsResult:
    top: tuple[TopOp, ...]
    remat: tuple[TopOp, ...]
    kernels: tuple[TopOp, ...]
    buckets: Mapping[str, BucketOps]
    host_offload: HostOffloadSummary | None = None
    groups: OpGroups | tuple[OpGroup, ...] = ()  # most time first


class OpGroup:
    """Accumulator of one (name, HLO category, bucket) op group over the
    kept steps of every TensorCore (analysis-internal)."""

    __slots__ = ("name", "hlo_category", "bucket", "self_ps", "count", "tot_flops", "tot_model_flops", "mf_known",
                 "tot_bytes", "flops", "bytes", "tf_op", "dedup", "remat", "phase", "kernel", "precision", "reason",
                 "part", "flops_unknown", "to_host", "out_bytes")

    def __init__(self, name: str, hlo_category: str, bucket: str) -> None:
        self.name, self.hlo_category, self.bucket = name, hlo_category, bucket
        self.self_ps = self.count = self.mf_known = 0
        self.tot_flops = self.tot_model_flops = self.tot_bytes = 0.0
        self.flops = self.bytes = math.nan
        self.tf_op = self.dedup = self.phase = self.kernel = self.precision = self.reason = self.part = None
        self.remat = self.flops_unknown = self.to_host = False
        self.out_bytes = math.nan


_TEXT_FIELDS = ("name", "hlo_category", "bucket", "tf_op", "dedup", "phase", "kernel", "precision", "reason", "part")
_INT_FIELDS = ("self_ps", "count", "mf_known")
_FLOAT_FIELDS = ("tot_flops", "tot_model_flops", "tot_bytes", "flops", "bytes", "out_bytes")
_BOOL_FIELDS = ("remat", "flops_unknown", "to_host")


def _pick(values, idx: list[int]) -> list:
    """[values[i] for i in idx]."""
    if len(idx) > 1:
        return list(operator.itemgetter(*idx)(values))
    return [values[i] for i in idx]


@dataclass(frozen=True, eq=False)
class OpGroups:
    """Op groups as columns, one per OpGroup attribute (lists for the text
    and object attributes, numpy for the numbers; analysis-internal)."""

    name: list
    hlo_category: list
    bucket: list
    self_ps: np.ndarray  # int64
    count: np.ndarray  # int64
    tot_flops: np.ndarray  # float64
    tot_model_flops: np.ndarray
    mf_known: np.ndarray  # int64
    tot_bytes: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    tf_op: list
    dedup: list
    remat: np.ndarray  # bool
    phase: list
    kernel: list
    precision: list
    reason: list
    part: list
    flops_unknown: np.ndarray  # bool
    to_host: np.ndarray  # bool
    out_bytes: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.name)

    def __iter__(self):
        return (self.group(i) for i in range(len(self)))

    def group(self, i: int) -> OpGroup:
        """Group i as an OpGroup (Python ints, floats and bools)."""
        g = OpGroup(self.name[i], self.hlo_category[i], self.bucket[i])
        for f in _TEXT_FIELDS[3:]:
            setattr(g, f, getattr(self, f)[i])
        for f in _INT_FIELDS:
            setattr(g, f, int(getattr(self, f)[i]))
        for f in _FLOAT_FIELDS:
            setattr(g, f, float(getattr(self, f)[i]))
        for f in _BOOL_FIELDS:
            setattr(g, f, bool(getattr(self, f)[i]))
        return g

    def take(self, idx) -> OpGroups:
        ix = np.asarray(idx, dtype=np.int64)
        il = ix.tolist()
        cols: dict = {f: _pick(getattr(self, f), il) for f in _TEXT_FIELDS}
        cols.update({f: getattr(self, f)[ix] for f in _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS})
        return OpGroups(**cols)

    @staticmethod
    def of(groups) -> OpGroups:
        """Columns of a sequence of OpGroup."""
        gs = list(groups)
        cols: dict = {f: [getattr(g, f) for g in gs] for f in _TEXT_FIELDS}
        cols.update({f: np.asarray([getattr(g, f) for g in gs], dtype=np.int64) for f in _INT_FIELDS})
        cols.update({f: np.asarray([getattr(g, f) for g in gs], dtype=np.float64) for f in _FLOAT_FIELDS})
        cols.update({f: np.asarray([bool(getattr(g, f)) for g in gs], dtype=bool) for f in _BOOL_FIELDS})
        return OpGroups(**cols)


def _peak(chip, bucket: str, precision: str | None = None) -> float:
    if bucket == "matmul_fp8" or precision == "fp8":
        return chip.core_peak_fp8_flops
    if bucket == "matmul_int8":
        return chip.core_peak_int8_flops
    return chip.core_peak_bf16_flops


def _kept_rows(trace: Trace, w: CoreWork, kept_list: np.ndarray):
    """(rows, counts, self ps per row, number of kept steps) of a core's ops in its kept steps."""
    steps = trace.steps[w.plane.label]
    kept = np.isin(steps.number, kept_list)
    ln = w.plane.line(LINE_OPS)
    if ln is None or len(ln.events) == 0:
        return None, None, None, int(kept.sum())
    ev = ln.events
    ks, ke = steps.start_ps[kept], steps.end_ps[kept]
    order = np.argsort(ks)
    inside = locate(ks[order], ke[order], ev.start_ps)[1] & (ev.meta >= 0)
    if not inside.any():
        return None, None, None, int(kept.sum())
    r_in = ev.meta[inside].astype(np.int64)
    n = len(w.plane.meta)
    counts = np.bincount(r_in, minlength=n)
    # Exact: per-row sums stay far below 2**53 ps.
    self_sum = np.rint(np.bincount(r_in, weights=ev.self_ps[inside], minlength=n)).astype(np.int64)
    rows = np.flatnonzero(counts)
    return rows, counts[rows], self_sum[rows], int(kept.sum())


_ATTRS = ("phase", "kernel", "precision", "reason", "part")
_ATTR_COLUMN = {"phase": "phase", "kernel": "kernel", "precision": "precision", "reason": "reason", "part": "attention_part"}
_ROW_DEPS = ("md.display_name", "md.name", "md.category", "cls.bucket", "cls.remat", "cls.kernel", "cls.shape_flops",
             "cls.phase", "cls.precision", "cls.reason", "cls.attention_part")


@dataclass(frozen=True, eq=False)
class _RowTable:
    """Per metadata row of one table: its op group and what grouping reads."""

    gid: np.ndarray  # int64: id of the (short name, category, bucket) key (TableMemo.shared["opstats.keys"])
    known: np.ndarray  # bool: the row has classification columns
    mm: np.ndarray  # bool: matmul bucket
    mm_or_attn: np.ndarray  # bool: matmul or attention bucket
    no_flops_ok: np.ndarray  # bool: FLOPs may come from the shape (matmul, or a classified attention kernel)
    sf_ok: np.ndarray  # bool: shape FLOPs present (truthy)
    sf: np.ndarray  # float64: shape FLOPs (nan when absent)
    remat: np.ndarray  # bool
    attrs: Mapping[str, tuple[np.ndarray, np.ndarray]]  # attr -> (values, not None) of known rows
    bucket: np.ndarray  # int64 index into BUCKETS


def _row_table(w: CoreWork, keys: dict) -> _RowTable:
    md = w.plane.meta
    n = len(md)
    cols = w.classes.columns if len(w.classes) else {}
    bucket_c = cols.get("bucket", ())
    nk = min(len(bucket_c), n)
    # The bucket of each row (classified rows: their bucket, as classes.bucket
    # holds it by index; the rest: other_compute)
    bucket = np.full(n, BUCKETS.index("other_compute"), dtype=np.int64)
    bucket[:nk] = w.classes.bucket[:nk]
    bucket_names = _pick(BUCKETS, bucket.tolist())
    gid = np.asarray([keys.setdefault(k, len(keys)) for k in zip(md.short_names, md.category, bucket_names)], dtype=np.int64)
    known = np.arange(n) < nk
    mm_flag = np.asarray([b in MATMUL_BUCKETS for b in BUCKETS] + [False], dtype=bool)
    attn = np.asarray([b == "attention" for b in BUCKETS] + [False], dtype=bool)
    mm = mm_flag[bucket]
    kern = np.zeros(n, dtype=bool)
    sf_ok = np.zeros(n, dtype=bool)
    sf = np.full(n, math.nan)
    remat = np.zeros(n, dtype=bool)
    attrs = {}
    if nk:
        kernel_c, shape_c = cols["kernel"], cols["shape_flops"]
        kern[:nk] = np.fromiter(map(bool, kernel_c[:nk].tolist()), dtype=bool, count=nk)
        shape_l = shape_c[:nk].tolist()
        sf_ok[:nk] = np.fromiter(map(bool, shape_l), dtype=bool, count=nk)
        sf[np.flatnonzero(sf_ok)] = [float(v) for v in itertools.compress(shape_l, sf_ok[:nk].tolist())]
        remat[:nk] = np.asarray(cols["remat"][:nk], dtype=bool)
    for a in _ATTRS:
        vals = np.empty(n, dtype=object)
        if nk:
            vals[:nk] = cols[_ATTR_COLUMN[a]][:nk]
        attrs[a] = (vals, np.fromiter(map(operator.is_not, vals.tolist(), itertools.repeat(None)), dtype=bool, count=n))
    return _RowTable(gid, known, mm, mm | attn[bucket], mm | (known & kern), sf_ok, sf, remat, attrs, bucket)


def _seq_sum(x: np.ndarray) -> float:
    """sum(x) added left to right from 0.0, as a Python loop adds (np.sum adds pairwise)."""
    return float(np.cumsum(np.concatenate([[0.0], x]))[-1]) if len(x) else 0.0


def _group_all(trace: Trace, work: list[CoreWork], kept_list: np.ndarray, chip, acc: dict,
               memo: TableMemo) -> tuple[OpGroups, int]:
    """The op groups of the kept rows of every core, in order of first
    appearance (core by core, rows ascending), and the kept core-steps.

    Vectorised over (core, row) contributions; the float sums add in that
    same order (ufunc.at and cumsum add one by one), so they are bit for bit
    those of a Python loop over the cores and rows."""
    keys = memo.shared.setdefault("opstats.keys", {})
    assert isinstance(keys, dict)
    peak_by_bucket = np.asarray([_peak(chip, b) for b in BUCKETS] + [_peak(chip, "other_compute")], dtype=np.float64)
    parts: list[tuple] = []
    n_core_steps = 0
    for ci, w in enumerate(work):
        rows, counts, self_sum, n_kept = _kept_rows(trace, w, kept_list)
        n_core_steps += n_kept
        if rows is None:
            continue
        t = memo.get("opstats.rows", w.plane, w.classes, _ROW_DEPS, lambda: _row_table(w, keys))
        md = w.plane.meta
        f = md.flops[rows].astype(np.float64)
        mf = md.model_flops[rows].astype(np.float64)
        by = md.bytes_accessed[rows].astype(np.float64)
        # No FLOPs in the trace: no stat, or 0 with no model FLOPs (kernels)
        sub = t.mm_or_attn[rows] & ~(f > 0) & ~(mf > 0) & t.no_flops_ok[rows]
        ok = sub & t.sf_ok[rows]
        f = np.where(ok, t.sf[rows], np.where(sub, math.nan, f))
        mf = np.where(ok, t.sf[rows], np.where(sub, math.nan, mf))
        parts.append((np.full(len(rows), ci), rows, counts, self_sum, f, mf, by, sub & ~t.sf_ok[rows], t))
    if not parts:
        return OpGroups.of([]), n_core_steps
    core = np.concatenate([p[0] for p in parts])
    row = np.concatenate([p[1] for p in parts]).astype(np.int64)
    cnt = np.concatenate([p[2] for p in parts]).astype(np.int64)
    sp = np.concatenate([p[3] for p in parts]).astype(np.int64)
    f = np.concatenate([p[4] for p in parts])
    mf = np.concatenate([p[5] for p in parts])
    by = np.concatenate([p[6] for p in parts])
    unknown = np.concatenate([p[7] for p in parts])

    def col(get):
        return np.concatenate([get(p[8])[p[1]] for p in parts])

    gid = col(lambda t: t.gid)
    mm = col(lambda t: t.mm)
    bucket = col(lambda t: t.bucket)
    cnt_f = cnt.astype(np.float64)
    f_ok = ~np.isnan(f)
    mf_ok = ~np.isnan(mf)
    tot_f = np.where(f_ok, f, 0.0) * cnt_f
    mf_tot = mf * cnt_f
    # utilisation sums, in contribution order
    acc["any_model"] = bool(mf_ok.any())
    acc["mf_model"] = _seq_sum(np.where(mf_ok, mf_tot, tot_f))
    acc["any_flops"] = bool(f_ok.any())
    acc["mf_flops"] = _seq_sum(tot_f[f_ok])
    m = f_ok & mm
    acc["mm_self"] = int(sp[m].sum())
    acc["mm_cap"] = _seq_sum(sp[m].astype(np.float64) * 1e-12 * peak_by_bucket[bucket[m]])
    acc["mm_flops"] = _seq_sum(tot_f[m])
    # groups, numbered in order of first appearance
    uniq, first = unique_ids(gid, return_index=True)
    order = np.argsort(first, kind="stable")
    uniq, first = uniq[order], first[order]
    local = np.empty(int(uniq.max()) + 1, dtype=np.int64)
    local[uniq] = np.arange(len(uniq))
    g = local[gid]
    ng = len(uniq)
    self_ps = np.zeros(ng, dtype=np.int64)
    np.add.at(self_ps, g, sp)
    count = np.zeros(ng, dtype=np.int64)
    np.add.at(count, g, cnt)
    tot_flops = np.zeros(ng)
    np.add.at(tot_flops, g, tot_f)
    tot_bytes = np.zeros(ng)
    np.add.at(tot_bytes, g, np.where(np.isnan(by), 0.0, by) * cnt_f)
    tot_model = np.zeros(ng)
    np.add.at(tot_model, g[mf_ok], mf_tot[mf_ok])
    mf_known = np.bincount(g[mf_ok], minlength=ng)
    flops_unknown = np.bincount(g[unknown], minlength=ng) > 0
    gflops = _max_not_nan(g, f, ng)
    gbytes = _max_not_nan(g, by, ng)
    known = col(lambda t: t.known)
    remat = np.bincount(g[known & col(lambda t: t.remat)], minlength=ng) > 0
    firsts = {}
    for a in _ATTRS:
        has = known & col(lambda t: t.attrs[a][1])
        idx = np.flatnonzero(has)
        ga, fa = unique_ids(g[idx], return_index=True)
        firsts[a] = (ga, idx[fa])  # group, its first contribution with a value
    key_list = memo.shared.get("opstats.key_list")
    if not isinstance(key_list, list) or len(key_list) != len(keys):
        key_list = memo.shared["opstats.key_list"] = list(keys)
    core_l, row_l = core[first].tolist(), row[first].tolist()
    remat_first = (known & col(lambda t: t.remat))[first].tolist()
    part_of = {int(p[0][0]): p[8] for p in parts}
    gkeys = [key_list[k] for k in uniq.tolist()]
    mds = [w.plane.meta for w in work]
    names, cats, buckets = (list(c) for c in zip(*gkeys)) if gkeys else ([], [], [])
    to_host = np.zeros(ng, dtype=bool)
    out_bytes = np.full(ng, math.nan)
    for i in [i for i, b in enumerate(buckets) if b == "host_offload"]:
        to_host[i] = _OUTPUT_TO_HOST.search(mds[core_l[i]].name[row_l[i]][:4096]) is not None
    out_memo = memo.shared.setdefault("opstats.output_bytes", {})  # HLO text -> output_bytes
    types_memo = memo.shared.setdefault("opstats.types_bytes", {})  # output type -> bytes
    assert isinstance(out_memo, dict) and isinstance(types_memo, dict)
    for i in [i for i, x in enumerate(remat_first) if x]:
        text = mds[core_l[i]].name[row_l[i]]
        v = out_memo.get(text)
        out_bytes[i] = v if v is not None else out_memo.setdefault(text, output_bytes(text, types_memo))
    attrs: dict[str, list] = {}
    for a in _ATTRS:
        ga, ja = firsts[a]
        vals = np.full(ng, None, dtype=object)
        for c in unique_ids(core[ja]).tolist():
            sel = core[ja] == c
            vals[ga[sel]] = part_of[c].attrs[a][0][row[ja[sel]]]
        attrs[a] = vals.tolist()
    tf_op, dedup = np.full(ng, None, dtype=object), np.full(ng, None, dtype=object)
    core_f, row_f = core[first], row[first]
    for c in unique_ids(core_f).tolist():
        sel = np.flatnonzero(core_f == c)
        rs = row_f[sel].tolist()
        tf_op[sel] = object_array(_pick(mds[c].tf_op, rs))
        dedup[sel] = object_array(_pick(mds[c].deduplicated_name, rs))
    groups = OpGroups(
        name=names, hlo_category=cats, bucket=buckets, self_ps=self_ps, count=count, tot_flops=tot_flops,
        tot_model_flops=tot_model, mf_known=mf_known.astype(np.int64), tot_bytes=tot_bytes, flops=gflops, bytes=gbytes,
        tf_op=tf_op.tolist(), dedup=dedup.tolist(),
        remat=remat, phase=attrs["phase"], kernel=attrs["kernel"], precision=attrs["precision"], reason=attrs["reason"],
        part=attrs["part"], flops_unknown=flops_unknown, to_host=to_host, out_bytes=out_bytes)
    return groups, n_core_steps


def _max_not_nan(g: np.ndarray, x: np.ndarray, ng: int) -> np.ndarray:
    """Per group: the largest non-nan x (nan when none)."""
    ok = ~np.isnan(x)
    out = np.full(ng, -np.inf)
    np.maximum.at(out, g[ok], x[ok])
    has = np.bincount(g[ok], minlength=ng) > 0
    return np.where(has, out, math.nan)


def ops_and_roofline(att: Attributed, top_n: int) -> tuple[OpsResult, Utilisation]:
    """Per-op self time, FLOPs and bytes over the kept steps of every
    TensorCore, grouped by (name, HLO category, bucket); MFU and MXU use."""
    trace, work, kept_steps, step_mean = att.trace, att.work, att.kept_steps, att.step_mean
    chip = trace.chip
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    acc: dict = {"mf_model": 0.0, "mf_flops": 0.0, "any_model": False, "any_flops": False,
                 "mm_self": 0, "mm_cap": 0.0, "mm_flops": 0.0}
    groups, n_core_steps = _group_all(trace, work, kept_list, chip, acc, att.memo)
    n_core_steps = n_core_steps or 1
    if not len(groups):
        return OpsResult((), (), (), {}), Utilisation(None, "none", None)
    agg = groups.take(by_time(groups.self_ps, groups.name))
    util = _utilisation(agg, acc, chip, step_mean, n_core_steps)
    denom = step_mean if step_mean > 0 else 1.0
    ctx = (chip, n_core_steps, denom)
    fam = families(agg)
    top = tuple(_top_op(fam.group(i), *ctx) for i in range(len(fam))[:top_n])
    remat_ops = tuple(_top_op(fam.group(i), *ctx) for i in np.flatnonzero(fam.remat)[:REMAT_TOP].tolist())
    kern: list[int] = []
    for i, k in enumerate(fam.kernel):
        if len(kern) >= KERNELS_TOP:
            break
        if k is not None and str(k) != "":
            kern.append(i)
    kernels = tuple(_top_op(fam.group(i), *ctx) for i in kern)
    summaries = _bucket_summaries(agg, n_core_steps, denom, chip)
    host = host_offload_summary([agg.group(i) for i, b in enumerate(agg.bucket) if b == "host_offload"], n_core_steps, denom)
    return OpsResult(top, remat_ops, kernels, summaries, host, agg), util


def by_time(self_ps: np.ndarray, names: list[str]) -> np.ndarray:
    """The order of sorted(range(n), key=lambda i: (-self_ps[i], names[i])):
    most time first, ties by name, then as given."""
    order = np.argsort(-np.asarray(self_ps, dtype=np.int64), kind="stable")
    n = len(order)
    if n < 2:
        return order
    sp = np.asarray(self_ps)[order]
    cut = np.flatnonzero(sp[1:] != sp[:-1]) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [n]])
    for a, b in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist()):
        run = order[a:b].tolist()
        order[a:b] = sorted(run, key=names.__getitem__)
    return order


#: Ops of one family (same instruction name up to its number, category,
#: bucket and framework scope: one op repeated in unrolled layers) are listed
#: as one row when there are at least this many.
FAMILY_MIN = 4
_NUMBER_SUFFIX = re.compile(r"\.\d+$")


def _stem(name: str) -> str:
    """_NUMBER_SUFFIX.sub("", name): without a trailing `.<digits>` (\\d is
    any Unicode decimal digit, as str.isdecimal; `$` also matches before a
    final newline, left to the regex)."""
    head, dot, tail = name.rpartition(".")
    if dot and tail.isdecimal():
        return head
    return _NUMBER_SUFFIX.sub("", name) if name.endswith("\n") else name


def _stems(names: list[str]) -> list[str]:
    """[_stem(n) for n in names], its common case inline."""
    out = []
    for n in names:
        head, dot, tail = n.rpartition(".")
        out.append(head if dot and tail.isdecimal() else (_stem(n) if n.endswith("\n") else n))
    return out


def families(agg: OpGroups) -> OpGroups:
    """The op groups (most time first) with unrolled repeats of one op merged
    into one row (`name.*`, count and times summed), most time first."""
    keys: dict[tuple, int] = {}
    stems: dict[int, str] = {}
    nxt = 0
    scoped: dict = {}  # tf_op -> it is a framework scope
    ids: list[int] = []
    for name, stem, tf, cat, b, rm, k, pr, pa in zip(agg.name, _stems(agg.name), agg.tf_op, agg.hlo_category,
                                                     agg.bucket, agg.remat.tolist(), agg.kernel, agg.precision, agg.part):
        if stem != name and (scoped[tf] if tf in scoped else scoped.setdefault(tf, bool((tf or "").strip()))):
            # repeats share a framework scope
            j = keys.setdefault((stem, cat, b, tf, rm, k, pr, pa), nxt)
            if j == nxt:
                stems[j] = stem
                nxt += 1
        else:
            j = nxt
            nxt += 1
        ids.append(j)
    fid = np.asarray(ids, dtype=np.int64)
    size = np.bincount(fid, minlength=nxt)
    merged = size[fid] >= FAMILY_MIN
    single = np.flatnonzero(~merged)
    nums = _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS
    # Rows as columns: the numbers per part, the text fields as the agg row
    # they come from (taken once, in the final order, at the end).
    src = [single]
    num_parts = [{f: getattr(agg, f)[single] for f in nums}]
    names = _pick(agg.name, single.tolist())
    pos = [fid[single]]  # a family's rows stand where its first member's key first appeared
    if merged.any():
        members = np.flatnonzero(merged)
        mfid = fid[members]
        ufid, first, inv = unique_ids(mfid, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        nf = len(ufid)
        first_m = members[first]
        self_ps = np.zeros(nf, dtype=np.int64)
        np.add.at(self_ps, inv, agg.self_ps[members])
        count = np.zeros(nf, dtype=np.int64)
        np.add.at(count, inv, agg.count[members])
        sums = {}
        for f in ("tot_flops", "tot_model_flops", "tot_bytes"):
            sums[f] = np.zeros(nf)
            np.add.at(sums[f], inv, getattr(agg, f)[members])  # member by member, in order
        mf_known = np.zeros(nf, dtype=np.int64)
        np.add.at(mf_known, inv, agg.mf_known[members])
        unknown = np.bincount(inv[agg.flops_unknown[members]], minlength=nf) > 0
        # per occurrence: the family's mean
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_f = sums["tot_flops"] / count
            mean_b = sums["tot_bytes"] / count
        any_f = np.bincount(inv[~np.isnan(agg.flops[members])], minlength=nf) > 0
        any_b = np.bincount(inv[~np.isnan(agg.bytes[members])], minlength=nf) > 0
        names += [f"{stems[j]}.* ({int(size[j])} ops)" for j in ufid.tolist()]
        num_parts.append({**{f: getattr(agg, f)[first_m] for f in nums},
                          "self_ps": self_ps, "count": count, "mf_known": mf_known, "flops_unknown": unknown,
                          "flops": np.where((count != 0) & any_f, mean_f, math.nan),
                          "bytes": np.where((count != 0) & any_b, mean_b, math.nan), **sums})
        pos.append(ufid)
        src.append(first_m)
    rows = np.concatenate(src)
    cols = {f: np.concatenate([p[f] for p in num_parts]) for f in nums}
    order = np.lexsort((rows, np.concatenate(pos)))
    order = order[by_time(cols["self_ps"][order], _pick(names, order.tolist()))]
    il = rows[order].tolist()
    out: dict = {f: _pick(getattr(agg, f), il) for f in _TEXT_FIELDS if f != "name"}
    out["name"] = _pick(names, order.tolist())
    out.update({f: v[order] for f, v in cols.items()})
    return OpGroups(**out)


def _in(values: list, allowed) -> np.ndarray:
    """Per value: in `allowed` (one test per distinct value)."""
    memo: dict = {}
    return np.fromiter((memo[v] if v in memo else memo.setdefault(v, v in allowed) for v in values), dtype=bool, count=len(values))


def _utilisation(agg: OpGroups, acc: dict, chip, step_mean: float, n_core_steps: int) -> Utilisation:
    """MFU over all kept steps and cores, with how much compute time its FLOPs cover."""
    total_time_s = step_mean * 1e-12 * n_core_steps
    if acc["any_model"]:
        mf, src = acc["mf_model"], "model_flops"
    elif acc["any_flops"]:
        mf, src = acc["mf_flops"], "flops"
    else:
        mf, src = 0.0, "none"
    compute_ps = int(agg.self_ps[_in(agg.bucket, COMPUTE_BUCKETS)].sum())
    unknown_ps = int(agg.self_ps[agg.flops_unknown].sum())
    coverage = (1.0 - unknown_ps / compute_ps) if compute_ps > 0 else None
    mfu = mf / (total_time_s * chip.core_peak_bf16_flops) if src != "none" and total_time_s > 0 else None
    if mfu is not None and not any(b in MATMUL_BUCKETS or b == "attention" for b in set(agg.bucket)):
        mfu = None  # no matmul and no attention: MFU says nothing about this loop
        src = "none (no matmul or attention in the step)"
    mxu = (acc["mm_flops"] / acc["mm_cap"] if acc["mm_cap"] > 0 else None) if acc["mm_self"] > 0 else None
    return Utilisation(mfu, src, mxu, flops_coverage=coverage,
                       low_confidence=bool(mfu is not None and coverage is not None and coverage < FLOPS_COVERAGE_MIN))


def host_offload_summary(agg: list[OpGroup], n_core_steps: int, denom: float) -> HostOffloadSummary | None:
    """Host <-> HBM traffic of the host_offload ops per step and TensorCore.
    Bytes are counted once per transfer: on the done half (or a synchronous
    copy), never on the start that issues it."""
    ops = [g for g in agg if g.bucket == "host_offload"]
    if not ops:
        return None
    ps = sum(g.self_ps for g in ops) / n_core_steps
    done = [g for g in ops if (async_pair_key(g.name) or ("", "sync"))[1] != "start"]
    to_host = sum(g.tot_bytes for g in done if g.to_host) / n_core_steps
    from_host = sum(g.tot_bytes for g in done if not g.to_host) / n_core_steps
    total = to_host + from_host
    gbps = (total / (ps * 1e-12) / 1e9) if ps > 0 and total > 0 else None
    return HostOffloadSummary(ps=ps, fraction=ps / denom, bytes_per_step=total, to_host_bytes=to_host,
                              from_host_bytes=from_host, gbps=gbps, transfers=float(sum(g.count for g in done)) / n_core_steps)


def program_names(trace: Trace) -> tuple[str, ...]:
    """Programs on the first TensorCore's XLA Modules line, most time first."""
    for plane in trace.tensorcores:
        ln = plane.line(LINE_MODULES)
        if ln is None or not len(ln.events):
            continue
        tot: dict[str, int] = {}
        for r, d in zip(ln.events.meta.tolist(), ln.events.dur_ps.tolist()):
            nm = plane.meta.name[r] if r >= 0 else ""
            tot[nm] = tot.get(nm, 0) + int(d)
        return tuple(sorted(tot, key=lambda k: (-tot[k], k)))
    return ()


def run_kind_of(agg: OpGroups | tuple[OpGroup, ...], step_ps: float, n_core_steps: int, phases: Mapping,
                remat_ps: float, programs: tuple[str, ...]) -> RunKind:
    """Training / inference / unknown from the op groups (see profanalyzer.analyze.runkind)."""
    g = agg if isinstance(agg, OpGroups) else OpGroups.of(agg)
    compute = _in(g.bucket, COMPUTE_BUCKETS)
    by_tf: dict = {}
    marks = [by_tf[tf] if tf in by_tf else by_tf.setdefault(tf, inference_marker(tf or "")) for tf in g.tf_op]
    need = [i for i, m in enumerate(marks) if not m]
    for i, m in zip(need, inference_markers([g.name[i] for i in need])):
        marks[i] = m
    sp = g.self_ps.astype(np.float64)
    marked = np.fromiter(map(bool, marks), dtype=bool, count=len(marks))  # a marker is None or a word
    kinds = list(dict.fromkeys(m for m in marks if m))
    if kinds:
        code = {m: k for k, m in enumerate(kinds)}
        mcode = np.fromiter((code.get(m, -1) for m in marks), dtype=np.int64, count=len(marks))
        markers = {m: _seq_sum(sp[mcode == k]) for k, m in enumerate(kinds)}
    else:
        markers = {}
    scoped_tf: dict = {}
    scoped = np.fromiter((scoped_tf[t] if t in scoped_tf else scoped_tf.setdefault(t, bool((t or "").strip())) for t in g.tf_op),
                         dtype=bool, count=len(g))
    ev = RunKindEvidence(
        step_ps=step_ps,
        compute_ps=int(g.self_ps[compute].sum()) / n_core_steps,
        scoped_ps=int(g.self_ps[compute & scoped].sum()) / n_core_steps,
        forward_ps=phases["forward"].ps if "forward" in phases else 0.0,
        backward_ps=phases["backward"].ps if "backward" in phases else 0.0,
        optimizer_ps=phases["optimizer"].ps if "optimizer" in phases else 0.0,
        remat_ps=remat_ps,
        inference_ps=_seq_sum(sp[marked]) / n_core_steps,
        inference_markers=tuple(sorted(markers, key=lambda k: (-markers[k], k))),
        programs=programs,
    )
    kind, reasons = decide_run_kind(ev)
    return RunKind(kind=kind, reasons=reasons)


def _top_op(r: OpGroup, chip, n_core_steps: int, denom: float) -> TopOp:
    # a rate needs a duration: none for ops whose runs last under RATE_MIN_RUN_PS on average
    timed = r.count > 0 and r.self_ps >= RATE_MIN_RUN_PS * r.count
    t_s = r.self_ps * 1e-12 if timed else 0.0
    has_f = r.flops == r.flops and r.flops is not None and r.flops > 0
    has_b = r.bytes == r.bytes and r.bytes is not None and r.bytes > 0
    intensity = (r.flops / r.bytes) if has_f and has_b else None
    tflops = (r.tot_flops / t_s / 1e12) if has_f and t_s > 0 else None
    gbps = (r.tot_bytes / t_s / 1e9) if has_b and t_s > 0 else None
    peak = _peak(chip, r.bucket, r.precision)
    bw = chip.core_hbm_bytes_per_s
    if intensity is not None:
        ridge = peak / bw
        bound = "compute" if intensity >= ridge else "hbm"
        attainable = min(peak, intensity * bw)
        roof = (r.tot_flops / t_s) / attainable if t_s > 0 else None
    else:
        bound, roof = "unknown", None
    tags = []
    if r.remat:
        tags.append("remat")
    if isinstance(r.phase, str) and r.phase:
        tags.append(r.phase)
    if isinstance(r.kernel, str) and r.kernel:
        tags.append(f"kernel:{r.kernel}")
    if isinstance(r.precision, str) and r.precision:
        tags.append(f"precision:{r.precision}")
    if isinstance(r.part, str) and r.part == "layout":
        tags.append("attention:layout")
    if r.flops_unknown:
        tags.append("flops:unknown")
    mf = r.tot_model_flops
    return TopOp(
        name=r.name,
        hlo_category=r.hlo_category,
        bucket=r.bucket,
        tags=tuple(tags),
        tf_op=r.tf_op or "",
        reason=r.reason or "",
        self_ps=r.self_ps / n_core_steps,
        fraction=r.self_ps / n_core_steps / denom,
        count=r.count / n_core_steps,
        flops=float(r.flops) if has_f else None,
        bytes=float(r.bytes) if has_b else None,
        intensity=intensity,
        tflops_per_s=tflops,
        gbps=gbps,
        bound_by=bound,
        roofline_fraction=roof,
        deduplicated_name=r.dedup or "",
        model_flops_ratio=(float(mf) / r.tot_flops) if has_f and r.mf_known > 0 and r.tot_flops > 0 else None,
        output_bytes=float(r.out_bytes) if r.out_bytes == r.out_bytes else None,
    )


def _intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte; nan when either is unknown (or 0/0)."""
    if flops != flops or nbytes != nbytes or (nbytes == 0 and flops == 0):
        return math.nan
    if nbytes == 0:
        return math.copysign(math.inf, flops)
    return flops / nbytes


def _attention_part(g: OpGroup) -> str:
    if g.part == "layout":
        return "attention_layout"
    if g.part == "kernel" or (g.kernel is not None and str(g.kernel) != ""):
        return "attention_kernel"
    return "attention_unfused"


def _intensities(flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """_intensity of each (flops, bytes) pair."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = flops / nbytes
    zero_b = nbytes == 0
    out = np.where(zero_b, np.copysign(np.inf, flops), out)
    return np.where(np.isnan(flops) | np.isnan(nbytes) | (zero_b & (flops == 0)), math.nan, out)


def _bucket_summaries(agg: OpGroups, n_core_steps: int, denom: float, chip) -> dict:
    """Per bucket (and attention split into kernel / layout / unfused): time,
    FLOPs, bytes, compute- vs HBM-bound time, per step per TensorCore."""
    names = [b for b in BUCKETS if b != "idle"] + list(ATTENTION_SPLIT)
    n = len(agg)
    peak = {b: _peak(chip, b) / chip.core_hbm_bytes_per_s for b in set(agg.bucket)}
    ridge = np.fromiter((peak[b] for b in agg.bucket), dtype=np.float64, count=n)
    inten = _intensities(agg.flops, agg.bytes)
    compute_bound = inten >= ridge
    hbm_bound = ~compute_bound & ~np.isnan(inten)
    model = np.where(agg.mf_known > 0, agg.tot_model_flops, agg.tot_flops)
    code = {name: k for k, name in enumerate(names)}  # the names as integers: one integer test per name
    target = np.fromiter((code.get(b, -1) for b in agg.bucket), dtype=np.int64, count=n)
    part = np.full(n, -1, dtype=np.int64)
    for i in [i for i, b in enumerate(agg.bucket) if b == "attention"]:
        part[i] = code.get(_attention_part(agg.group(i)), -1)
    out = {}
    for k, name in enumerate(names):
        m = (target == k) | (part == k)
        ps = float(int(agg.self_ps[m].sum())) / n_core_steps
        out[name] = BucketOps(
            ps=ps,
            fraction=ps / denom,
            ops=int(m.sum()),
            flops=_seq_sum(agg.tot_flops[m]) / n_core_steps,
            model_flops=_seq_sum(model[m]) / n_core_steps,
            bytes=_seq_sum(agg.tot_bytes[m]) / n_core_steps,
            compute_bound_ps=float(int(agg.self_ps[m & compute_bound].sum())) / n_core_steps,
            hbm_bound_ps=float(int(agg.self_ps[m & hbm_bound].sum())) / n_core_steps,
            remat_ps=float(int(agg.self_ps[m & agg.remat].sum())) / n_core_steps,
        )
    return out
