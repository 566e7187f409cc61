"""The critical path of collectives: a window on it hid nothing and its op
consumes the output of the op that ran just before it on the TensorCore, so
no compute independent of the collective was ready to overlap it
(analysis stage; called per core by `profanalyzer.analyze.overlap`, whose
windows it reads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.core.arrays import unique_ids
from profanalyzer.model.trace import LINE_OPS, Plane

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import TableMemo
    from profanalyzer.analyze.overlap import Windows


#: An op that ends this close before a collective starts is "just before it".
ADJACENT_PS = 1_000_000  # 1 us
#: How many such ops are looked at.
MAX_ADJACENT_OPS = 16


def _names_operand(operands: str, name: str) -> bool:
    """`%name` appears in the operand text as a whole instruction name."""
    if not name:
        return False
    at = operands.find(f"%{name}")
    while at >= 0:
        end = at + len(name) + 1
        if end >= len(operands) or not (operands[end].isalnum() or operands[end] in "._-"):
            return True
        at = operands.find(f"%{name}", end)
    return False


def critical_path(plane: Plane, wins: Windows, hidden: np.ndarray, memo: TableMemo | None = None) -> np.ndarray:
    """Per window: on the critical path, i.e. nothing was hidden in it and its
    (start) op consumes the output of the op that ran just before it on the
    TensorCore (the HLO text names that op among its operands), so no compute
    independent of the collective was ready to overlap it.

    The ops looked at are found for all windows at once (a walk back from
    each window, one vectorised step at a time); the operand test runs once
    per distinct (window op, op before) pair of metadata rows (per table
    with `memo`)."""
    out = np.zeros(len(wins), dtype=bool)
    ln = plane.line(LINE_OPS)
    if ln is None or not len(ln.events) or not len(wins):
        return out
    ev = ln.events
    md = plane.meta
    cand = np.flatnonzero(hidden <= 0)
    before = np.searchsorted(ev.start_ps, wins.start[cand], side="left") - 1
    rows = wins.row[cand]
    ok = (rows >= 0) & (rows < len(md))
    k, j = cand[ok], before[ok]
    start = wins.start[k]
    looked = np.zeros(len(k), dtype=np.int64)
    pk: list[np.ndarray] = []
    pj: list[np.ndarray] = []
    # the ops that ended within ADJACENT_PS before the window (async issue
    # ops such as slice-start can sit between a producer and its collective)
    while len(k):
        go = (j >= 0) & (looked < MAX_ADJACENT_OPS)
        go[go] = ev.end_ps[j[go]] >= start[go] - ADJACENT_PS
        k, j, start, looked = k[go], j[go], start[go], looked[go]
        if not len(k):
            break
        end = ev.end_ps[j]
        q = (end <= start + ADJACENT_PS) & (ev.meta[j] >= 0)  # not an op enclosing the window
        pk.append(k[q])
        pj.append(j[q])
        looked += q
        j = j - 1
    if not pk:
        return out
    kk = np.concatenate(pk)
    if not len(kk):
        return out
    r = wins.row[kk].astype(np.int64)
    m = ev.meta[np.concatenate(pj)].astype(np.int64)
    width = int(m.max()) + 1
    pair, inv = unique_ids(r * width + m, return_inverse=True)
    known: dict[tuple[int, int], bool] = {} if memo is None else memo.get(
        "overlap.operand_pairs", plane, None, dict)
    hit = np.zeros(len(pair), dtype=bool)
    for i, (a, b) in enumerate(zip((pair // width).tolist(), (pair % width).tolist(), strict=True)):
        v = known.get((a, b))
        if v is None:
            text = md.name[a]
            v = known[(a, b)] = _names_operand(text[text.find("(") + 1:], md.short_name(b))
        hit[i] = v
    out[kk[hit[inv.reshape(-1)]]] = True
    return out
