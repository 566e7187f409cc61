"""Where in the model the time went: a rollup by JAX name scope.

Every op's `tf_op` stat is the JAX name stack it was traced under plus its
primitive (`jit(train_step)/jit(main)/transpose(jvp(Transformer))/decoder/
while/body/checkpoint/layers/mlp/wi_0/dot_general[...]:`). `fold_scope` turns
it into a readable path (`decoder/layers/mlp/wi_0`):

* the trailing primitive (the last component) is dropped;
* wrapper components `name(...)` (jit, jvp, transpose, vmap, remat,
  shard_map, ...) are dropped: forward and backward of a block fold together
  (the phases are reported separately);
* loop, call and checkpoint plumbing (`while`, `body`, `cond`, `checkpoint`,
  `rematted_computation`, `eval_jaxpr`, `closed_call`, ...) is dropped, so a
  scanned layer loop is one path;
* layer indices are folded: `layers_12`, `layers.12`, `block_3` -> `layers`,
  `block`, and a pure-number component (`layers/12/mlp`) is dropped; the
  indices seen are counted, so 64 unrolled layers make one row with count 64.

`scope_rollup` attributes each instant of the kept steps to the deepest op
running (the same exclusive self time as the buckets, so the rows sum to the
step's busy time) and sums it per folded path, per bucket, with the exposed
communication (collective buckets) and remat. Rows are leaves (full folded
paths, at most MAX_DEPTH components); `collapse(rows, depth)` sums them to
any shallower depth exactly (the terminal's `--by-scope DEPTH`).

Imports: model, vocab, trace, attribution, attributed (TableMemo) (the analysis stage).
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.attribution import CoreWork
from profanalyzer.core.arrays import unique_ids
from profanalyzer.core.parallel import map_ordered
from profanalyzer.core.vocab import BUCKETS, COLLECTIVE_BUCKETS
from profanalyzer.model.parts import (
    DEFAULT_DEPTH,
    NO_SCOPE,
    TOP_LEVEL,
    ScopeRow,
    collapse,
)
from profanalyzer.model.trace import LINE_OPS

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

__all__ = ["fold_scope", "scope_rollup", "collapse", "NO_SCOPE", "TOP_LEVEL", "MAX_DEPTH", "DEFAULT_DEPTH", "MAX_ROWS"]

#: Row of the ops without a tf_op stat, and of those whose path folds to nothing.
#: Components kept in a leaf path; deeper ones are summed into it.
MAX_DEPTH = 8
#: Leaf rows kept in the JSON; the smallest beyond it are summed into their depth-2 parents.
MAX_ROWS = 300

#: Components dropped: loop, checkpoint and call plumbing.
PLUMBING = frozenset({"while", "body", "cond", "checkpoint", "rematted_computation", "remat", "scan", "shard_map",
                      "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "pjit", "xla_call", "named_call",
                      "eval_jaxpr", "core_closed_call", "remat2", "checkpoint_name"})
_WRAPPER = re.compile(r"^[A-Za-z_][\w.]*\(.*\)$", re.S)
_INDEXED = re.compile(r"^(?P<base>(?:[A-Za-z_]\w*_)?(?:layers?|blocks?|h|stages?|decoder_?layers?|encoder_?layers?|transformer_?blocks?))[_.](?P<idx>\d+)$", re.I)
_NUMBER = re.compile(r"^\d+$")


_BRACKET = re.compile(r"[()\[\]{}]")


def _split(tf_op: str) -> list[str]:
    """Split on '/' outside brackets and parentheses (a closing one with none open is ignored)."""
    segs = tf_op.split("/")
    if len(segs) == 1 or not _BRACKET.search(tf_op):
        return segs
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    last = len(segs) - 1
    for i, seg in enumerate(segs):  # the '/' after segment i splits when no bracket is open there
        cur.append(seg)
        for ch in _BRACKET.findall(seg):
            if ch in "([{":
                depth += 1
            elif depth:
                depth -= 1
        if depth == 0 or i == last:
            parts.append("/".join(cur))
            cur = []
    return parts


def _fold_part(p: str) -> tuple[str, int] | None:
    """What one component of a path keeps: None (plumbing, a wrapper, empty),
    else (the name kept, "" for none; the layer index folded out, -1 for none)."""
    p = p.strip()
    if not p or p in PLUMBING or _WRAPPER.match(p):
        return None
    if _NUMBER.match(p):
        return "", int(p)
    m = _INDEXED.match(p)
    if m:
        return m.group("base"), int(m.group("idx"))
    return p, -1


def fold_scope(tf_op: str, parts: dict[str, tuple[str, int] | None] | None = None) -> tuple[str, tuple[int, ...]]:
    """(folded path, layer indices folded out of it) of one tf_op stat.
    `parts`: a dict the caller keeps while folding many paths (each distinct
    component is then looked at once)."""
    text = (tf_op or "").strip()
    if not text:
        return NO_SCOPE, ()
    if text.endswith(":"):
        text = text[:-1]
    out: list[str] = []
    idx: list[int] = []
    for p in _split(text)[:-1]:  # the last component is the primitive
        if parts is None:
            got = _fold_part(p)
        elif p in parts:
            got = parts[p]
        else:
            got = parts[p] = _fold_part(p)
        if got is None:
            continue
        name, i = got
        if i >= 0:
            idx.append(i)
        if name:
            out.append(name)
    if not out:
        return TOP_LEVEL, tuple(idx)
    return "/".join(out[:MAX_DEPTH]), tuple(idx)


def _scope_rows(md, ids: dict[str, int], names: dict[str, int],
                layer_ids: dict[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per metadata row (plus one row for events without metadata): the folded
    scope id and the op-name id (trace-wide ids), and the (row, layer index
    id) pairs of the layer indices folded out of the rows' scopes."""
    # Each distinct tf_op folded once; ids numbered in order of first
    # appearance over the rows (that of the distinct values, first seen first).
    code: dict = {}
    n = len(md)
    tf_code = np.fromiter((code.setdefault(t, len(code)) for t in md.tf_op), dtype=np.int64, count=n)
    parts: dict[str, tuple[str, int] | None] = {}
    fold = [fold_scope(t, parts) for t in code]
    scope_of = np.asarray([ids.setdefault(f, len(ids)) for f, _ in fold], dtype=np.int64)
    row_scope = np.concatenate([scope_of[tf_code], [ids.setdefault(NO_SCOPE, len(ids))]]).astype(np.int64)
    row_name = np.asarray([names.setdefault(t, len(names)) for t in md.name] + [names.setdefault("", len(names))], dtype=np.int64)
    # (row, layer index id) pairs, row by row, each row's in its scope's order
    lids = [[layer_ids.setdefault(i, len(layer_ids)) for i in idx] for _, idx in fold]
    per = np.asarray([len(x) for x in lids], dtype=np.int64)
    k = per[tf_code] if n else np.zeros(0, dtype=np.int64)
    pr = np.repeat(np.arange(n, dtype=np.int64), k)
    flat = np.asarray([i for x in lids for i in x], dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.int64) if len(per) else per
    within = np.arange(len(pr), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    pi = flat[first[tf_code[pr]] + within] if len(pr) else np.zeros(0, dtype=np.int64)
    return row_scope, row_name, pr, pi


def _distinct_per(key: np.ndarray, val: np.ndarray, n: int) -> np.ndarray:
    """Per key 0..n-1: the number of distinct values (ids >= 0) paired with it."""
    if not len(key):
        return np.zeros(n, dtype=np.int64)
    width = int(val.max()) + 1
    pairs = unique_ids(key * width + val)
    return np.bincount(pairs // width, minlength=n)


def _core_scopes(w: CoreWork, ev, ks: np.ndarray, ke: np.ndarray, nk: int, tables, ns: int, nb: int):
    """One core's part of the roll-up: self time per (scope, bucket) and remat
    time per scope over its kept steps, and its (scope, op), (scope, runs per
    kept step) and (scope, layer index) pairs."""
    row_scope, row_name, pair_row, pair_idx = tables
    md = w.plane.meta
    rows = np.where((ev.meta >= 0) & (ev.meta < len(md)), ev.meta, len(md)).astype(np.int64)
    ev_scope = row_scope[rows]
    remat_rows = np.concatenate([np.asarray(w.classes.remat, dtype=bool)[: len(md)], [False]]) if len(w.classes.remat) >= len(md) \
        else np.zeros(len(md) + 1, dtype=bool)
    ev_remat = remat_rows[rows].astype(np.int64)
    order = np.argsort(ks)
    ks, ke = ks[order], ke[order]
    by_bucket, by_remat = w.ops.exclusive_totals([(ev_scope * nb + w.ev_bucket, ns * nb), (ev_scope * 2 + ev_remat, ns * 2)], ks, ke)
    tot_b = by_bucket.reshape(ns, nb)
    tot_r = by_remat.reshape(ns, 2)[:, 1]
    # runs of each metadata row inside the kept steps
    lo = np.searchsorted(ks, ev.start_ps, side="right") - 1
    inside = (lo >= 0) & (ev.start_ps < ke[np.clip(lo, 0, len(ke) - 1)])
    counts = np.bincount(rows[inside], minlength=len(md) + 1)
    seen = np.flatnonzero(counts)
    layers = None
    if len(pair_row):
        on = counts[pair_row] > 0
        layers = (row_scope[pair_row[on]], pair_idx[on])
    return tot_b, tot_r, (row_scope[seen], row_name[seen]), (row_scope[seen], counts[seen] / nk), layers


def scope_rollup(att: Attributed) -> tuple[ScopeRow, ...]:
    """Self time per folded name scope over the kept steps of every TensorCore,
    per kept step per TensorCore (the divisor of the top ops: kept core-steps)."""
    trace, work, kept_steps, step_mean = att.trace, att.work, att.kept_steps, att.step_mean
    nb = len(BUCKETS)
    coll = np.asarray([b in COLLECTIVE_BUCKETS for b in BUCKETS], dtype=bool)
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    memo = att.memo
    ids = memo.shared.setdefault("scopes.ids", {})
    names_ids = memo.shared.setdefault("scopes.names", {})
    layer_ids = memo.shared.setdefault("scopes.layers", {})
    assert isinstance(ids, dict) and isinstance(names_ids, dict) and isinstance(layer_ids, dict)
    bucket_ps: dict[int, np.ndarray] = {}
    remat_ps: dict[int, float] = {}
    n_core_steps = 0
    # The row tables first, core by core: scope ids are numbered in order of
    # first appearance. Then each core's array passes, on threads.
    todo = []
    for w in work:
        steps = trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        nk = int(kept.sum())
        n_core_steps += nk
        ln = w.plane.line(LINE_OPS)
        if ln is None or len(ln.events) == 0 or nk == 0:
            continue
        tables = memo.get("scopes.rows", w.plane, w.classes, partial(_scope_rows, w.plane.meta, ids, names_ids, layer_ids))
        todo.append((w, ln.events, steps.start_ps[kept], steps.end_ps[kept], nk, tables))
    ns = len(ids)
    per_core = map_ordered(lambda t: _core_scopes(*t, ns, nb), todo)
    # (scope, op name), (scope, runs per kept step), (scope, layer index) of every core
    op_pairs = [c[2] for c in per_core]
    run_pairs = [c[3] for c in per_core]
    layer_pairs = [c[4] for c in per_core if c[4] is not None]
    for tot_b, tot_r, *_ in per_core:
        for sid in np.flatnonzero(tot_b.sum(axis=1)).tolist():
            acc = bucket_ps.get(sid)
            bucket_ps[sid] = tot_b[sid].astype(np.float64) + (acc if acc is not None else 0.0)
            remat_ps[sid] = remat_ps.get(sid, 0.0) + float(tot_r[sid])
    ns = len(ids)
    if op_pairs:
        ops_n = _distinct_per(np.concatenate([a for a, _ in op_pairs]), np.concatenate([b for _, b in op_pairs]), ns).tolist()
        runs_max = np.zeros(ns)
        np.maximum.at(runs_max, np.concatenate([a for a, _ in run_pairs]), np.concatenate([b for _, b in run_pairs]))
        runs_l = runs_max.tolist()
    else:
        ops_n, runs_l = [0] * ns, [0.0] * ns
    layers_n = (_distinct_per(np.concatenate([a for a, _ in layer_pairs]), np.concatenate([b for _, b in layer_pairs]), ns).tolist()
                if layer_pairs else [0] * ns)
    if not bucket_ps or n_core_steps == 0:
        return ()
    names = {v: k for k, v in ids.items()}
    denom = step_mean if step_mean > 0 else 1.0
    out = []
    for sid, b in bucket_ps.items():
        per = np.rint(b / n_core_steps)  # whole picoseconds: sums of rows are exact after the JSON round trip
        ps = float(per.sum())
        count = max(layers_n[sid], int(round(runs_l[sid])), 1)
        out.append(ScopeRow(
            scope=names[sid],
            ps=ps,
            fraction=ps / denom,
            buckets={BUCKETS[i]: float(per[i]) for i in np.flatnonzero(per).tolist()},
            exposed_comm_ps=float(per[coll].sum()),
            remat_ps=float(round(remat_ps.get(sid, 0.0) / n_core_steps)),
            ops=ops_n[sid],
            count=count,
        ))
    out.sort(key=lambda r: (-r.ps, r.scope))
    if len(out) > MAX_ROWS:
        out = list(out[:MAX_ROWS]) + list(collapse(out[MAX_ROWS:], 2))
        out = list(collapse(out, MAX_DEPTH))
    return tuple(out)
