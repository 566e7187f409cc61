"""Op groups: the kept steps' op occurrences of every TensorCore summed per
(name, HLO category, bucket) group (analysis stage; numpy inside); unrolled
repeats are folded into families by `profanalyzer.analyze.opfamilies`.

`group_ops` sums the (core, metadata row) contributions of the kept steps
into `OpGroups` (columns; `OpGroup` is one row): self time, counts, FLOPs
(the op's `flops` stat, else 2*M*N*K from its operand shapes for matmuls and
attention kernels the classifier sized, else "FLOPs unknown"), bytes and the
utilisation sums. The float sums add in the order a loop over cores, rows
and groups would (ufunc.at and cumsum add one by one), so the numbers are
bit for bit those of that loop. Per-row features of a core's metadata table
are computed once per distinct table (attributed.TableMemo, the run's).
`by_time` orders groups most time first. The records built from them are
`profanalyzer.analyze.opstats`.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from profanalyzer.analyze.attributed import TableMemo
from profanalyzer.analyze.attribution import CoreWork, locate
from profanalyzer.classify.parse import shape_dims
from profanalyzer.classify.tables import ARRAY
from profanalyzer.core.arrays import object_array, unique_ids
from profanalyzer.core.vocab import BUCKETS, CONTROL_FLOW, MATMUL_BUCKETS
from profanalyzer.model.trace import LINE_OPS, Trace

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


TEXT_FIELDS = ("name", "hlo_category", "bucket", "tf_op", "dedup", "phase", "kernel", "precision", "reason", "part")
INT_FIELDS = ("self_ps", "count", "mf_known")
FLOAT_FIELDS = ("tot_flops", "tot_model_flops", "tot_bytes", "flops", "bytes", "out_bytes")
BOOL_FIELDS = ("remat", "flops_unknown", "to_host")


def pick(values, idx: list[int]) -> list:
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
        for f in TEXT_FIELDS[3:]:
            setattr(g, f, getattr(self, f)[i])
        for f in INT_FIELDS:
            setattr(g, f, int(getattr(self, f)[i]))
        for f in FLOAT_FIELDS:
            setattr(g, f, float(getattr(self, f)[i]))
        for f in BOOL_FIELDS:
            setattr(g, f, bool(getattr(self, f)[i]))
        return g

    def take(self, idx) -> OpGroups:
        ix = np.asarray(idx, dtype=np.int64)
        il = ix.tolist()
        cols: dict = {f: pick(getattr(self, f), il) for f in TEXT_FIELDS}
        cols.update({f: getattr(self, f)[ix] for f in INT_FIELDS + FLOAT_FIELDS + BOOL_FIELDS})
        return OpGroups(**cols)

    @staticmethod
    def of(groups) -> OpGroups:
        """Columns of a sequence of OpGroup."""
        gs = list(groups)
        cols: dict = {f: [getattr(g, f) for g in gs] for f in TEXT_FIELDS}
        cols.update({f: np.asarray([getattr(g, f) for g in gs], dtype=np.int64) for f in INT_FIELDS})
        cols.update({f: np.asarray([getattr(g, f) for g in gs], dtype=np.float64) for f in FLOAT_FIELDS})
        cols.update({f: np.asarray([bool(getattr(g, f)) for g in gs], dtype=bool) for f in BOOL_FIELDS})
        return OpGroups(**cols)


def core_peak(chip, bucket: str, precision: str | None = None) -> float:
    if bucket == "matmul_fp8" or precision == "fp8":
        return chip.core_peak_fp8_flops
    if bucket == "matmul_int8":
        return chip.core_peak_int8_flops
    return chip.core_peak_bf16_flops


def _kept_rows(trace: Trace, w: CoreWork, kept_list: np.ndarray):
    """(rows, counts, self ps per row, number of kept steps, whether the row encloses ops) of a core's ops
    in its kept steps. A row whose runs enclose other ops on the line (a while loop, a conditional, a
    call: XLA's cost of such an op is its body's, and the body's ops run as events of their own) holds
    no work of its own: its FLOPs and bytes are its children's, counted once, there."""
    steps = trace.steps[w.plane.label]
    kept = np.isin(steps.number, kept_list)
    ln = w.plane.line(LINE_OPS)
    if ln is None or len(ln.events) == 0:
        return None, None, None, int(kept.sum()), None
    ev = ln.events
    ks, ke = steps.start_ps[kept], steps.end_ps[kept]
    order = np.argsort(ks)
    inside = locate(ks[order], ke[order], ev.start_ps)[1] & (ev.meta >= 0)
    if not inside.any():
        return None, None, None, int(kept.sum()), None
    r_in = ev.meta[inside].astype(np.int64)
    n = len(w.plane.meta)
    counts = np.bincount(r_in, minlength=n)
    # Exact: per-row sums stay far below 2**53 ps.
    self_sum = np.rint(np.bincount(r_in, weights=ev.self_ps[inside], minlength=n)).astype(np.int64)
    enclosing_rows = np.bincount(r_in, weights=ev.encloses()[inside], minlength=n) > 0
    category = w.plane.meta.category
    for r in np.flatnonzero(enclosing_rows).tolist():  # control flow only: a kernel's own nested events keep its work
        enclosing_rows[r] = category[r] in CONTROL_FLOW
    rows = np.flatnonzero(counts)
    return rows, counts[rows], self_sum[rows], int(kept.sum()), enclosing_rows[rows]


_ATTRS = ("phase", "kernel", "precision", "reason", "part")
_ATTR_COLUMN = {"phase": "phase", "kernel": "kernel", "precision": "precision", "reason": "reason", "part": "attention_part"}


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
    sb: np.ndarray  # float64: a kernel's bytes from the shapes its text prints (nan when absent)
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
    bucket_names = pick(BUCKETS, bucket.tolist())
    gid = np.asarray([keys.setdefault(k, len(keys)) for k in zip(md.short_names, md.category, bucket_names, strict=True)], dtype=np.int64)
    known = np.arange(n) < nk
    mm_flag = np.asarray([b in MATMUL_BUCKETS for b in BUCKETS] + [False], dtype=bool)
    attn = np.asarray([b == "attention" for b in BUCKETS] + [False], dtype=bool)
    mm = mm_flag[bucket]
    kern = np.zeros(n, dtype=bool)
    sf_ok = np.zeros(n, dtype=bool)
    sf = np.full(n, math.nan)
    sb = np.full(n, math.nan)
    remat = np.zeros(n, dtype=bool)
    attrs = {}
    if nk:
        kernel_c, shape_c = cols["kernel"], cols["shape_flops"]
        kern[:nk] = np.fromiter(map(bool, kernel_c[:nk].tolist()), dtype=bool, count=nk)
        shape_l = shape_c[:nk].tolist()
        sf_ok[:nk] = np.fromiter(map(bool, shape_l), dtype=bool, count=nk)
        sf[np.flatnonzero(sf_ok)] = [float(v) for v in itertools.compress(shape_l, sf_ok[:nk].tolist())]
        bytes_c = cols.get("shape_bytes")
        if bytes_c is not None:
            nb = min(nk, len(bytes_c))
            sb[:nb] = np.asarray([float(v) if v else math.nan for v in bytes_c[:nb].tolist()], dtype=np.float64)
        remat[:nk] = np.asarray(cols["remat"][:nk], dtype=bool)
    for a in _ATTRS:
        vals = np.empty(n, dtype=object)
        if nk:
            vals[:nk] = cols[_ATTR_COLUMN[a]][:nk]
        attrs[a] = (vals, np.fromiter(map(operator.is_not, vals.tolist(), itertools.repeat(None)), dtype=bool, count=n))
    return _RowTable(gid, known, mm, mm | attn[bucket], mm | (known & kern), sf_ok, sf, sb, remat, attrs, bucket)


def seq_sum(x: np.ndarray) -> float:
    """sum(x) added left to right from 0.0, as a Python loop adds (np.sum adds pairwise)."""
    return float(np.cumsum(np.concatenate([[0.0], x]))[-1]) if len(x) else 0.0


@dataclass(frozen=True, eq=False)
class _Contributions:
    """The kept (core, metadata row) contributions of every core, in order
    (core by core, rows ascending), as columns."""

    core: np.ndarray  # index into work
    row: np.ndarray  # metadata row
    cnt: np.ndarray  # occurrences in the kept steps
    sp: np.ndarray  # self ps in the kept steps
    f: np.ndarray  # FLOPs per occurrence (nan: unknown)
    mf: np.ndarray  # model FLOPs per occurrence (nan: unknown)
    by: np.ndarray  # bytes per occurrence (nan: unknown)
    unknown: np.ndarray  # bool: FLOPs unknown (no stat, no shape FLOPs)
    tables: Mapping[int, _RowTable]  # core -> its row table
    spans: tuple[tuple[int, np.ndarray], ...]  # (core, its rows) in order

    def col(self, get) -> np.ndarray:
        """A row-table column at each contribution."""
        return np.concatenate([get(self.tables[c])[rows] for c, rows in self.spans])


def _contributions(trace: Trace, work: list[CoreWork], kept_list: np.ndarray, memo: TableMemo,
                   keys: dict, kernel_bytes: Mapping[str, Mapping[int, float]]) -> tuple[_Contributions | None, int]:
    """The contributions of the kept steps of every core (None: none), and the kept core-steps."""
    parts: list[tuple] = []
    n_core_steps = 0
    for ci, w in enumerate(work):
        rows, counts, self_sum, n_kept, encloses = _kept_rows(trace, w, kept_list)
        n_core_steps += n_kept
        if rows is None:
            continue
        t = memo.get("opstats.rows", w.plane, w.classes, partial(_row_table, w, keys))
        md = w.plane.meta
        f = md.flops[rows].astype(np.float64)
        mf = md.model_flops[rows].astype(np.float64)
        by = md.bytes_accessed[rows].astype(np.float64)
        # kernels the capture gives no bytes: their operands and outputs from the program, else from the shapes
        # their text prints (`by` is a fresh array: astype copies; `rows` ascend)
        for r, nbytes in (kernel_bytes.get(w.plane.label) or {}).items():
            j = int(np.searchsorted(rows, r))
            if j < len(rows) and rows[j] == r and not (by[j] > 0):
                by[j] = nbytes
        sb = t.sb[rows]
        by = np.where(~(by > 0) & ~np.isnan(sb), sb, by)
        # a loop, conditional or call whose body ran as ops of its own: their work, not its
        f, mf, by = (np.where(encloses, 0.0, a) for a in (f, mf, by))
        # No FLOPs in the trace: no stat, or 0 with no model FLOPs (kernels)
        sub = t.mm_or_attn[rows] & ~(f > 0) & ~(mf > 0) & t.no_flops_ok[rows]
        ok = sub & t.sf_ok[rows]
        f = np.where(ok, t.sf[rows], np.where(sub, math.nan, f))
        mf = np.where(ok, t.sf[rows], np.where(sub, math.nan, mf))
        parts.append((np.full(len(rows), ci), rows, counts, self_sum, f, mf, by, sub & ~t.sf_ok[rows], t))
    if not parts:
        return None, n_core_steps
    return _Contributions(
        core=np.concatenate([p[0] for p in parts]),
        row=np.concatenate([p[1] for p in parts]).astype(np.int64),
        cnt=np.concatenate([p[2] for p in parts]).astype(np.int64),
        sp=np.concatenate([p[3] for p in parts]).astype(np.int64),
        f=np.concatenate([p[4] for p in parts]),
        mf=np.concatenate([p[5] for p in parts]),
        by=np.concatenate([p[6] for p in parts]),
        unknown=np.concatenate([p[7] for p in parts]),
        tables={int(p[0][0]): p[8] for p in parts},
        spans=tuple((int(p[0][0]), p[1]) for p in parts),
    ), n_core_steps


def _utilisation_sums(c: _Contributions, chip, acc: dict) -> None:
    """The MFU and MXU sums into `acc`, in contribution order."""
    peak_by_bucket = np.asarray([core_peak(chip, b) for b in BUCKETS] + [core_peak(chip, "other_compute")], dtype=np.float64)
    mm = c.col(lambda t: t.mm)
    bucket = c.col(lambda t: t.bucket)
    cnt_f = c.cnt.astype(np.float64)
    f_ok = ~np.isnan(c.f)
    mf_ok = ~np.isnan(c.mf)
    tot_f = np.where(f_ok, c.f, 0.0) * cnt_f
    # the model's work counted once: a rematerialised op recomputes work the forward already did
    remat = c.col(lambda t: t.remat)
    acc["any_model"] = bool(mf_ok.any())
    acc["mf_model"] = seq_sum(np.where(remat, 0.0, np.where(mf_ok, c.mf * cnt_f, tot_f)))
    acc["any_flops"] = bool(f_ok.any())
    acc["mf_flops"] = seq_sum(np.where(remat, 0.0, tot_f)[f_ok])
    # every FLOP the hardware executed, recompute included: an op's executed work is at least the model work it
    # does (XProf's model_flops of a dequantized or padded matmul can exceed its own `flops` count)
    hw = np.where(mf_ok, np.maximum(tot_f, np.where(mf_ok, c.mf, 0.0) * cnt_f), tot_f)
    acc["hw_flops"] = seq_sum(hw[f_ok | mf_ok])
    acc["remat_flops"] = seq_sum(np.where(remat, tot_f, 0.0)[f_ok])
    m = f_ok & mm
    acc["mm_self"] = int(c.sp[m].sum())
    acc["mm_cap"] = seq_sum(c.sp[m].astype(np.float64) * 1e-12 * peak_by_bucket[bucket[m]])
    acc["mm_flops"] = seq_sum(tot_f[m])


def _numbered(gid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups numbered in order of first appearance: (key ids, first
    contribution of each, group of each contribution)."""
    uniq, first = unique_ids(gid, return_index=True)
    order = np.argsort(first, kind="stable")
    uniq, first = uniq[order], first[order]
    local = np.empty(int(uniq.max()) + 1, dtype=np.int64)
    local[uniq] = np.arange(len(uniq))
    return uniq, first, local[gid]


def _summed(g: np.ndarray, values: np.ndarray, ng: int, dtype=np.float64) -> np.ndarray:
    """Per group, the sum of `values` added one by one in order."""
    out = np.zeros(ng, dtype=dtype)
    np.add.at(out, g, values)
    return out


def _output_bytes_of(texts: list[str], memo: TableMemo) -> list[float]:
    """output_bytes of each HLO text, through the run's memos."""
    out_memo = memo.shared.setdefault("opstats.output_bytes", {})  # HLO text -> output_bytes
    types_memo = memo.shared.setdefault("opstats.types_bytes", {})  # output type -> bytes
    assert isinstance(out_memo, dict) and isinstance(types_memo, dict)
    got = []
    for text in texts:
        v = out_memo.get(text)
        got.append(v if v is not None else out_memo.setdefault(text, output_bytes(text, types_memo)))
    return got


def _first_attrs(c: _Contributions, g: np.ndarray, known: np.ndarray, ng: int) -> dict[str, list]:
    """Per attribute (phase, kernel, ...), each group's value at its first contribution that has one."""
    attrs: dict[str, list] = {}
    for a in _ATTRS:
        has = known & c.col(lambda t, a=a: t.attrs[a][1])
        idx = np.flatnonzero(has)
        ga, fa = unique_ids(g[idx], return_index=True)
        ja = idx[fa]  # each group's first contribution with a value
        vals = np.full(ng, None, dtype=object)
        for core in unique_ids(c.core[ja]).tolist():
            sel = c.core[ja] == core
            vals[ga[sel]] = c.tables[core].attrs[a][0][c.row[ja[sel]]]
        attrs[a] = vals.tolist()
    return attrs


def _first_texts(c: _Contributions, first: np.ndarray, mds: list, ng: int) -> tuple[list, list]:
    """(tf_op, deduplicated name) of each group's first contribution."""
    tf_op, dedup = np.full(ng, None, dtype=object), np.full(ng, None, dtype=object)
    core_f, row_f = c.core[first], c.row[first]
    for core in unique_ids(core_f).tolist():
        sel = np.flatnonzero(core_f == core)
        rs = row_f[sel].tolist()
        tf_op[sel] = object_array(pick(mds[core].tf_op, rs))
        dedup[sel] = object_array(pick(mds[core].deduplicated_name, rs))
    return tf_op.tolist(), dedup.tolist()


def group_ops(trace: Trace, work: list[CoreWork], kept_list: np.ndarray, chip, acc: dict,
              memo: TableMemo, kernel_bytes: Mapping[str, Mapping[int, float]] | None = None) -> tuple[OpGroups, int]:
    """The op groups of the kept rows of every core, in order of first
    appearance (core by core, rows ascending), and the kept core-steps; the
    utilisation sums into `acc` (any_model, mf_model, any_flops, mf_flops,
    mm_self, mm_cap, mm_flops).

    Vectorised over (core, row) contributions; the float sums add in that
    same order (ufunc.at and cumsum add one by one), so they are bit for bit
    those of a Python loop over the cores and rows."""
    keys = memo.shared.setdefault("opstats.keys", {})
    assert isinstance(keys, dict)
    c, n_core_steps = _contributions(trace, work, kept_list, memo, keys, kernel_bytes or {})
    if c is None:
        return OpGroups.of([]), n_core_steps
    _utilisation_sums(c, chip, acc)
    uniq, first, g = _numbered(c.col(lambda t: t.gid))
    ng = len(uniq)
    cnt_f = c.cnt.astype(np.float64)
    f_ok, mf_ok = ~np.isnan(c.f), ~np.isnan(c.mf)
    known = c.col(lambda t: t.known)
    remat_at = known & c.col(lambda t: t.remat)
    key_list = memo.shared.get("opstats.key_list")
    if not isinstance(key_list, list) or len(key_list) != len(keys):
        key_list = memo.shared["opstats.key_list"] = list(keys)
    gkeys = [key_list[k] for k in uniq.tolist()]
    names, cats, buckets = (list(x) for x in zip(*gkeys, strict=True)) if gkeys else ([], [], [])
    mds = [w.plane.meta for w in work]
    core_l, row_l = c.core[first].tolist(), c.row[first].tolist()
    to_host = np.zeros(ng, dtype=bool)
    for i in [i for i, b in enumerate(buckets) if b == "host_offload"]:
        to_host[i] = _OUTPUT_TO_HOST.search(mds[core_l[i]].name[row_l[i]][:4096]) is not None
    out_bytes = np.full(ng, math.nan)
    remat_first = [i for i, x in enumerate(remat_at[first].tolist()) if x]
    out_bytes[remat_first] = _output_bytes_of([mds[core_l[i]].name[row_l[i]] for i in remat_first], memo)
    attrs = _first_attrs(c, g, known, ng)
    tf_op, dedup = _first_texts(c, first, mds, ng)
    return OpGroups(
        name=names, hlo_category=cats, bucket=buckets, self_ps=_summed(g, c.sp, ng, np.int64),
        count=_summed(g, c.cnt, ng, np.int64), tot_flops=_summed(g, np.where(f_ok, c.f, 0.0) * cnt_f, ng),
        tot_model_flops=_summed(g[mf_ok], (c.mf * cnt_f)[mf_ok], ng),
        mf_known=np.bincount(g[mf_ok], minlength=ng).astype(np.int64),
        tot_bytes=_summed(g, np.where(np.isnan(c.by), 0.0, c.by) * cnt_f, ng),
        flops=_max_not_nan(g, c.f, ng), bytes=_max_not_nan(g, c.by, ng), tf_op=tf_op, dedup=dedup,
        remat=np.bincount(g[remat_at], minlength=ng) > 0, phase=attrs["phase"], kernel=attrs["kernel"],
        precision=attrs["precision"], reason=attrs["reason"], part=attrs["part"],
        flops_unknown=np.bincount(g[c.unknown], minlength=ng) > 0, to_host=to_host, out_bytes=out_bytes), n_core_steps


def _max_not_nan(g: np.ndarray, x: np.ndarray, ng: int) -> np.ndarray:
    """Per group: the largest non-nan x (nan when none)."""
    ok = ~np.isnan(x)
    out = np.full(ng, -np.inf)
    np.maximum.at(out, g[ok], x[ok])
    has = np.bincount(g[ok], minlength=ng) > 0
    return np.where(has, out, math.nan)


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
    for a, b in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist(), strict=True):
        run = order[a:b].tolist()
        order[a:b] = sorted(run, key=names.__getitem__)
    return order
