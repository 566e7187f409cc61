"""Op families: an op repeated in unrolled layers (same instruction name up to
its number, category, bucket and framework scope) folded into one row of the
op groups (`families`), counts and times summed, per-occurrence FLOPs and
bytes the family's mean (analysis stage; numpy inside). The groups come from
`profanalyzer.analyze.opgroups`.
"""

from __future__ import annotations

import math
import re

import numpy as np

from profanalyzer.analyze.opgroups import (
    BOOL_FIELDS,
    FLOAT_FIELDS,
    INT_FIELDS,
    TEXT_FIELDS,
    OpGroups,
    by_time,
    pick,
)
from profanalyzer.core.arrays import unique_ids

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
                                                     agg.bucket, agg.remat.tolist(), agg.kernel, agg.precision, agg.part, strict=True):
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
    nums = INT_FIELDS + FLOAT_FIELDS + BOOL_FIELDS
    # Rows as columns: the numbers per part, the text fields as the agg row
    # they come from (taken once, in the final order, at the end).
    src = [single]
    num_parts = [{f: getattr(agg, f)[single] for f in nums}]
    names = pick(agg.name, single.tolist())
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
    order = order[by_time(cols["self_ps"][order], pick(names, order.tolist()))]
    il = rows[order].tolist()
    out: dict = {f: pick(getattr(agg, f), il) for f in TEXT_FIELDS if f != "name"}
    out["name"] = pick(names, order.tolist())
    out.update({f: v[order] for f, v in cols.items()})
    return OpGroups(**out)


