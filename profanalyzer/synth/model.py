"""Schedule simulation and ground truth.

:func:`simulate` walks a :class:`~.program.Plan` step by step for every TensorCore of
every host at once (numpy arrays indexed by core), so collectives couple the cores the
way SPMD programs do:

* compute ops run back to back with small seeded gaps; each op's duration is its roofline
  base time x per-core factor x per-step factor x per-op noise (+-1%);
* an async collective start issues the transfer; the transfer begins once every
  participant issued it and its engine is free (one ICI DMA queue per TensorCore, two
  SparseCores per TensorCore for offloaded collectives, a DCN queue for pipeline sends),
  and lasts bytes / bandwidth + latency;
* the done op lasts as long as the transfer still has left when the core reaches it
  (the exposed wait), at least a small floor;
* a synchronous collective waits for the slowest participant, then for the transfer;
* a ``while`` parent spans its layer loop; its self time is the small gaps inside it;
* step 0 is a warm-up (slower ops plus a long host wait before the train program).

The ground truth is accumulated while scheduling (never re-read from the written trace):
per TensorCore and step the self time of every op goes to its template's bucket, remat
recompute self time to ``remat_ps``, collective start/done/sync self times to the
collective's exposure; ``idle`` is the rest of the step window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from .program import (
    BUCKET_INDEX,
    BUCKETS,
    PRODUCT_BUCKETS,
    COLL_BUCKETS,
    DONE,
    GAP,
    MB,
    ME,
    OP,
    START,
    SYNC,
    US,
    WB,
    WE,
    Plan,
    stable_hash,
)

CORES_PER_HOST = 8
SC_PER_CORE = 2
N_BUCKETS = len(BUCKETS)
IDLE = BUCKET_INDEX["idle"]
OTHER = BUCKET_INDEX["other_compute"]


class Rng:
    """Deterministic random arrays built on Python's ``random`` (stable across numpy versions)."""

    def __init__(self, *seed_parts: int):
        s = 0
        for p in seed_parts:
            s = (s * 1_000_003 + int(p)) & ((1 << 62) - 1)
        self._r = random.Random(s)

    def uniform(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        raw = np.frombuffer(self._r.randbytes(8 * n), dtype="<u8") if n else np.zeros(0, "<u8")
        return ((raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))).reshape(shape)

    def random(self) -> float:
        return self._r.random()

    def randrange(self, a: int, b: int) -> int:
        return self._r.randrange(a, b)


@dataclass
class StepAcc:
    """Truth accumulators of one step (arrays over all TensorCores)."""

    buckets_train: np.ndarray
    buckets_other: np.ndarray
    remat_train: np.ndarray
    remat_other: np.ndarray
    coll_count: np.ndarray  # (5, C)
    coll_window: np.ndarray
    coll_exposed: np.ndarray
    coll_sc: np.ndarray  # instances offloaded to SparseCore
    coll_tc: np.ndarray  # instances on the TensorCore

    @classmethod
    def zeros(cls, C: int) -> "StepAcc":
        z = lambda *s: np.zeros(s, dtype=np.int64)  # noqa: E731
        return cls(z(N_BUCKETS, C), z(N_BUCKETS, C), z(C), z(C), z(5, C), z(5, C), z(5, C), z(5, C), z(5, C))


@dataclass
class Timeline:
    plan: Plan
    hosts: int
    steps: int
    seed: int
    C: int
    # XLA Ops occurrences (one row per op execution; columns = cores)
    occ_tid: np.ndarray
    occ_start: np.ndarray
    occ_dur: np.ndarray
    occ_step: np.ndarray
    occ_uid: np.ndarray  # all_reduce_unique_id for collective ops, 0 otherwise
    # async windows: (start occurrence row, done occurrence row)
    win_start: np.ndarray
    win_done: np.ndarray
    # SparseCore work: per offloaded instance
    sc_tid: np.ndarray  # start template
    sc_step: np.ndarray
    sc_t0: np.ndarray  # (m, C)
    sc_t1: np.ndarray
    sc_k: np.ndarray  # (m, C) which SparseCore of the TensorCore ran it
    sc_uid: np.ndarray
    # modules: program index, start/end per core, step
    mod_prog: np.ndarray
    mod_start: np.ndarray
    mod_end: np.ndarray
    mod_step: np.ndarray
    step_start: np.ndarray  # (S, C)
    step_end: np.ndarray
    traceme: list  # (name, start (C,), dur (C,), step)
    acc: list[StepAcc]
    end_ps: int
    core_factor: np.ndarray
    step_factor: np.ndarray
    occ_trim: np.ndarray | None = None  # ps each occurrence lost to the next op's overlap (issue #14)
    host_waits: list | None = None  # (name, start (C,), dur (C,), step): host work the device waits for (issue #16)


def _step_factors(n: int, rng: Rng) -> np.ndarray:
    """Per-step jitter: step 0 is the warm-up; the others are a shuffled even spread of +-0.5%."""
    f = np.ones(n)
    if n > 1:
        vals = np.linspace(-0.005, 0.005, n - 1) if n > 2 else np.zeros(1)
        order = sorted(range(n - 1), key=lambda i: rng.random())
        f[1:] = 1.0 + vals[order]
    f[0] = 1.28
    return f


def simulate(plan: Plan, *, seed: int = 0, hosts: int = 1, steps: int | None = None) -> Timeline:
    spec = plan.spec
    S = int(steps or spec.steps)
    cph = spec.cores_per_host
    C = cph * hosts
    ops = plan.ops
    base = np.array([o.base_ps for o in ops], dtype=np.float64)
    transfer = np.array([o.transfer_ps for o in ops], dtype=np.float64)
    bucket = np.array([BUCKET_INDEX[o.bucket] for o in ops], dtype=np.int64)
    remat = np.array([o.remat for o in ops], dtype=bool)
    coll_idx = np.array([COLL_BUCKETS.index(o.coll) if o.coll else -1 for o in ops], dtype=np.int64)
    engine = [o.engine for o in ops]

    rng = Rng(seed, stable_hash(spec.name), hosts, 7)
    core_f = 1.0 + (rng.uniform(C) - 0.5) * 0.006
    if spec.straggler_core is not None:
        for h in range(hosts):
            core_f[h * cph + spec.straggler_core] *= spec.straggler_factor
    step_f = _step_factors(S, rng)

    t = np.zeros(C, dtype=np.int64) + 5_000 * US  # 5 ms into the capture
    ici_free = np.zeros(C, dtype=np.int64)
    dcn_free = np.zeros(C, dtype=np.int64)
    dma_free = np.zeros(C, dtype=np.int64)
    host_free = np.zeros(C, dtype=np.int64)
    ov_ps = int(spec.overlap_ps)
    occ_trim: list[int] = []  # rows of the ops whose end the next op overlaps
    sc_free = np.zeros((C, SC_PER_CORE), dtype=np.int64)
    ar = np.arange(C)

    occ_tid: list[int] = []
    occ_start: list[np.ndarray] = []
    occ_dur: list[np.ndarray] = []
    occ_step: list[int] = []
    occ_uid: list[int] = []
    win_s: list[int] = []
    win_d: list[int] = []
    sc_rows: list[tuple] = []
    mods: list[tuple] = []
    tm: list[tuple] = []
    hw: list[tuple] = []  # host work the device waits for (host-bound scenarios only)
    accs: list[StepAcc] = []
    step_start = np.zeros((S, C), dtype=np.int64)
    step_end = np.zeros((S, C), dtype=np.int64)
    uid_counter = 1000 + rng.randrange(0, 5000)
    n_items = sum(len(p.items) for p in plan.programs)

    for s in range(S):
        acc = StepAcc.zeros(C)
        accs.append(acc)
        noise = 1.0 + (rng.uniform((n_items, C)) - 0.5) * 0.02
        gaps_u = rng.uniform((n_items, C))
        big = rng.uniform((n_items, C)) < 0.01
        gaps = (30_000 + 170_000 * gaps_u + big * (1_000_000 + 3_000_000 * gaps_u)).astype(np.int64)
        tfac = 1.0 + rng.uniform(n_items) * 0.02
        sf = step_f[s]
        scale = core_f * sf
        step_start[s] = t
        pre = (2 * US + rng.uniform(C) * 2 * US).astype(np.int64)
        t = t + pre
        tm.append(("barrier-cores", step_start[s] + pre // 4, np.full(C, 400_000, dtype=np.int64), s))
        it = 0
        for prog_i, prog in enumerate(plan.programs):
            in_train = prog.is_train
            buckets_acc = acc.buckets_train if in_train else acc.buckets_other
            # collective truth counts what the step window holds (programs outside it: a scratch acc)
            cacc = acc if (in_train or spec.steps_line) else StepAcc.zeros(C)
            remat_acc = acc.remat_train if in_train else acc.remat_other
            if in_train and spec.host_gap_us:  # host-bound: the program launches late (outside every module)
                hw.append(("InputPipeline::GetNext", t.copy(), np.full(C, int(spec.host_gap_us * US), dtype=np.int64), s))
                t = t + int(spec.host_gap_us * US)
            if in_train and spec.heavy_every and s >= spec.heavy_every and s % spec.heavy_every == 0:
                hw.append(("Checkpointer::Save", t.copy(), np.full(C, int(spec.heavy_extra_us * US), dtype=np.int64), s))
                t = t + int(spec.heavy_extra_us * US)  # periodic heavy step (checkpoint on the host)
            if in_train and s == 0:
                wait = int(plan.est_step_ps * 0.8)
                tm.append(("dependency-wait", t.copy(), np.full(C, wait, dtype=np.int64), s))
                t = t + wait
            stack: list[list] = []  # open while frames: [row, start, childsum]
            pending: dict[int, tuple] = {}
            mod_start = None
            for j, (code, k) in enumerate(prog.items):
                g = gaps[it]
                nz = noise[it]
                if code == OP:
                    d = np.rint(base[k] * scale * nz).astype(np.int64)
                    occ_tid.append(k)
                    occ_start.append(t)
                    occ_dur.append(d)
                    occ_step.append(s)
                    occ_uid.append(0)
                    buckets_acc[bucket[k]] += d
                    if remat[k]:
                        remat_acc += d
                    if stack:
                        stack[-1][2] += d
                    if ov_ps and not stack and _overlaps_next(prog.items, j, s, spec.overlap_every):
                        # device timestamp rounding: the next op starts ov_ps before this one ends;
                        # sequential truth: this op keeps its duration minus the overlap
                        g = np.full(C, -ov_ps, dtype=np.int64)
                        buckets_acc[bucket[k]] -= ov_ps
                        if remat[k]:
                            remat_acc -= ov_ps
                        occ_trim.append(len(occ_tid) - 1)
                    t = t + d + g
                elif code == START:
                    d = np.rint(base[k] * scale * nz).astype(np.int64)
                    issue = t + d
                    T = int(transfer[k] * tfac[it] * sf)
                    uid_counter += 1
                    eng = engine[k]
                    ci = coll_idx[k]
                    if eng == "sc":
                        kk = np.argmin(sc_free, axis=1)
                        avail = sc_free[ar, kk]
                        t0 = int(max(issue.max(), avail.max()))
                        t1 = t0 + T
                        sc_free[ar, kk] = t1
                        sc_rows.append((k, s, t0, t1, kk.copy(), uid_counter))
                        t1v = np.full(C, t1, dtype=np.int64)
                    elif eng == "dma":
                        t0v = np.maximum(issue, dma_free)
                        t1v = t0v + T
                        dma_free = t1v
                    elif eng == "host":
                        t0v = np.maximum(issue, host_free)
                        t1v = t0v + T
                        host_free = t1v
                    else:
                        free = dcn_free if eng == "dcn" else ici_free
                        t0 = int(max(issue.max(), free.max()))
                        t1v = np.full(C, t0 + T, dtype=np.int64)
                        if eng == "dcn":
                            dcn_free = t1v
                        else:
                            ici_free = t1v
                    row = len(occ_tid)
                    occ_tid.append(k)
                    occ_start.append(t)
                    occ_dur.append(d)
                    occ_step.append(s)
                    occ_uid.append(uid_counter if ci >= 0 else 0)
                    pending[ops[k].peer] = (t, t1v, row, uid_counter)
                    buckets_acc[bucket[k]] += d
                    if ci >= 0:
                        cacc.coll_exposed[ci] += d
                    if stack:
                        stack[-1][2] += d
                    t = t + d + g
                elif code == DONE:
                    begin, t1v, srow, uid = pending.pop(k)
                    floor = np.rint(base[k] * scale * nz).astype(np.int64)
                    d = np.maximum(floor, t1v - t)
                    row = len(occ_tid)
                    occ_tid.append(k)
                    occ_start.append(t)
                    occ_dur.append(d)
                    occ_step.append(s)
                    ci = coll_idx[k]
                    occ_uid.append(uid if ci >= 0 else 0)
                    win_s.append(srow)
                    win_d.append(row)
                    buckets_acc[bucket[k]] += d
                    if ci >= 0:
                        cacc.coll_exposed[ci] += d
                        cacc.coll_count[ci] += 1
                        cacc.coll_window[ci] += t + d - begin
                        if engine[k] == "sc":
                            cacc.coll_sc[ci] += 1
                        else:
                            cacc.coll_tc[ci] += 1
                    if stack:
                        stack[-1][2] += d
                    t = t + d + g
                elif code == SYNC:
                    T = int(transfer[k] * tfac[it] * sf)
                    floor = np.rint(base[k] * scale * nz).astype(np.int64)
                    free = dcn_free if engine[k] == "dcn" else ici_free
                    t0 = int(max(t.max(), free.max()))
                    end = t0 + T
                    d = (end - t) + floor
                    if engine[k] == "dcn":
                        dcn_free = np.full(C, end, dtype=np.int64)
                    else:
                        ici_free = np.full(C, end, dtype=np.int64)
                    uid_counter += 1
                    occ_tid.append(k)
                    occ_start.append(t)
                    occ_dur.append(d)
                    occ_step.append(s)
                    occ_uid.append(uid_counter)
                    ci = coll_idx[k]
                    buckets_acc[bucket[k]] += d
                    cacc.coll_exposed[ci] += d
                    cacc.coll_count[ci] += 1
                    cacc.coll_window[ci] += d
                    cacc.coll_tc[ci] += 1
                    if stack:
                        stack[-1][2] += d
                    t = t + d + g
                elif code == WB:
                    row = len(occ_tid)
                    occ_tid.append(k)
                    occ_start.append(t)
                    occ_dur.append(None)  # filled at WE
                    occ_step.append(s)
                    occ_uid.append(0)
                    stack.append([row, t, np.zeros(C, dtype=np.int64)])
                    t = t + 300_000 + g // 2
                elif code == WE:
                    row, st, child = stack.pop()
                    t = t + 250_000 + g // 2
                    d = t - st
                    occ_dur[row] = d
                    self_t = d - child
                    buckets_acc[OTHER] += self_t
                    if stack:
                        stack[-1][2] += d
                    t = t + g
                elif code == GAP:
                    t = t + int(k * sf)
                elif code == MB:
                    mod_start = t
                    t = t + 150_000
                elif code == ME:
                    t = t + 150_000
                    mods.append((prog_i, mod_start, t, s))
                    t = t + g
                it += 1
            assert not stack and not pending, (spec.name, len(stack), len(pending))
        post = (1 * US + rng.uniform(C) * 2 * US).astype(np.int64)
        t = t + post
        step_end[s] = t
        t = t + (40 * US + (rng.uniform(C) * 30 * US).astype(np.int64))

    n = len(occ_tid)
    tl = Timeline(
        plan=plan,
        hosts=hosts,
        steps=S,
        seed=seed,
        C=C,
        occ_tid=np.array(occ_tid, dtype=np.int64),
        occ_start=np.vstack(occ_start) if n else np.zeros((0, C), np.int64),
        occ_dur=np.vstack(occ_dur) if n else np.zeros((0, C), np.int64),
        occ_step=np.array(occ_step, dtype=np.int64),
        occ_uid=np.array(occ_uid, dtype=np.int64),
        win_start=np.array(win_s, dtype=np.int64),
        win_done=np.array(win_d, dtype=np.int64),
        sc_tid=np.array([r[0] for r in sc_rows], dtype=np.int64),
        sc_step=np.array([r[1] for r in sc_rows], dtype=np.int64),
        sc_t0=np.array([[r[2]] * C for r in sc_rows], dtype=np.int64).reshape(-1, C),
        sc_t1=np.array([[r[3]] * C for r in sc_rows], dtype=np.int64).reshape(-1, C),
        sc_k=np.array([r[4] for r in sc_rows], dtype=np.int64).reshape(-1, C),
        sc_uid=np.array([r[5] for r in sc_rows], dtype=np.int64),
        mod_prog=np.array([m[0] for m in mods], dtype=np.int64),
        mod_start=np.vstack([m[1] for m in mods]),
        mod_end=np.vstack([m[2] for m in mods]),
        mod_step=np.array([m[3] for m in mods], dtype=np.int64),
        step_start=step_start,
        step_end=step_end,
        traceme=tm,
        acc=accs,
        end_ps=int(t.max()),
        core_factor=core_f,
        step_factor=step_f,
        host_waits=hw or None,
    )
    if ov_ps:
        trim = np.zeros(n, dtype=np.int64)
        trim[np.array(occ_trim, dtype=np.int64)] = ov_ps
        tl.occ_trim = trim
    return tl


def _overlaps_next(items: list, j: int, step: int, every: int) -> bool:
    """Whether the op at item j overlaps the next op (deterministic: 1 in ``every`` eligible pairs)."""
    if j + 1 >= len(items) or items[j + 1][0] not in (OP, START, DONE, SYNC):
        return False
    return (j * 7 + step * 3) % max(1, every) == 0


# ---------------------------------------------------------------------------
# Truth
# ---------------------------------------------------------------------------

def robust_outliers(values: list[int], k: float = 3.0) -> list[int]:
    """Indices whose value exceeds median + k * MAD (unscaled MAD)."""
    if not values:
        return []
    v = np.asarray(values, dtype=np.float64)
    med = float(np.median(v))
    mad = float(np.median(np.abs(v - med)))
    return [i for i, x in enumerate(v) if x > med + k * mad]


def tensorcore_planes(hosts: int, cores_per_host: int = CORES_PER_HOST) -> list[tuple[int, str, str]]:
    """(global core index, hostname-qualified key, plane name) for every TensorCore."""
    out = []
    for h in range(hosts):
        for c in range(cores_per_host):
            out.append((h * cores_per_host + c, h, f"/device:TPU:{c}"))
    return out


def build_truth(tl: Timeline, hostnames: list[str], plane_names: dict) -> dict:
    plan = tl.plan
    spec = plan.spec
    S, C = tl.steps, tl.C
    steps_line = spec.steps_line
    train_prog = next(i for i, p in enumerate(plan.programs) if p.is_train)
    # bucket keys: the product's, plus the #14 buckets it may not have yet when this plan uses them
    used = {o.bucket for o in plan.ops}
    keys = {b_ for b_ in BUCKETS if b_ in PRODUCT_BUCKETS or b_ in used}
    # step windows
    if steps_line:
        win0, win1 = tl.step_start, tl.step_end
    else:
        win0 = np.zeros((S, C), dtype=np.int64)
        win1 = np.zeros((S, C), dtype=np.int64)
        for i in range(len(tl.mod_prog)):
            if tl.mod_prog[i] == train_prog:
                win0[tl.mod_step[i]] = tl.mod_start[i]
                win1[tl.mod_step[i]] = tl.mod_end[i]
    step_ps = win1 - win0  # (S, C)

    per_core: dict = {}
    sums_b = np.zeros(N_BUCKETS, dtype=np.float64)
    mean_step = [int(step_ps[s].sum() // C) for s in range(S)]
    warm = robust_outliers(mean_step)
    kept = [s for s in range(S) if s not in warm]
    tot_step = 0
    tot_remat = 0
    tot_exposed = np.zeros(5)
    tot_window = np.zeros(5)
    tot_count = np.zeros(5)
    any_sc = np.zeros(5, dtype=bool)
    any_tc = np.zeros(5, dtype=bool)
    for gi, h, plane in tensorcore_planes(tl.hosts, spec.cores_per_host):
        key = plane if tl.hosts == 1 else f"{hostnames[h]}:{plane}"
        rows = {}
        for s in range(S):
            acc = tl.acc[s]
            b = acc.buckets_train[:, gi].copy()
            rm = int(acc.remat_train[gi])
            if steps_line:
                b += acc.buckets_other[:, gi]
                rm += int(acc.remat_other[gi])
            busy = int(b.sum()) - int(b[IDLE])
            b[IDLE] = int(step_ps[s, gi]) - busy
            assert b[IDLE] >= 0, (spec.name, plane, s, int(b[IDLE]))
            colls = {}
            for ci, ct in enumerate(COLL_BUCKETS):
                cnt = int(acc.coll_count[ci, gi])
                if cnt == 0:
                    continue
                nsc, ntc = int(acc.coll_sc[ci, gi]), int(acc.coll_tc[ci, gi])
                eng = "sparsecore" if ntc == 0 else ("tensorcore" if nsc == 0 else "mixed")
                colls[ct] = {
                    "count": cnt,
                    "window_ps": int(acc.coll_window[ci, gi]),
                    "exposed_ps": int(acc.coll_exposed[ci, gi]),
                    "engine": eng,
                    "offloaded_count": nsc,
                }
                assert colls[ct]["exposed_ps"] == int(b[BUCKET_INDEX[ct]]), (spec.name, ct)
                if s in kept:
                    any_sc[ci] |= nsc > 0
                    any_tc[ci] |= ntc > 0
            rows[str(s)] = {
                "step_ps": int(step_ps[s, gi]),
                "start_offset_ps": int(win0[s, gi] - win0[0, 0]),
                "buckets": {BUCKETS[i]: int(b[i]) for i in range(N_BUCKETS) if BUCKETS[i] in keys},
                "remat_ps": rm,
                "collectives": colls,
            }
            if s in kept:
                sums_b += b
                tot_step += int(step_ps[s, gi])
                tot_remat += rm
                for ci in range(5):
                    tot_exposed[ci] += acc.coll_exposed[ci, gi]
                    tot_window[ci] += acc.coll_window[ci, gi]
                    tot_count[ci] += acc.coll_count[ci, gi]
        per_core[key] = rows

    frac = {BUCKETS[i]: float(sums_b[i] / tot_step) for i in range(N_BUCKETS) if BUCKETS[i] in keys}
    offloadable = ("all_gather", "reduce_scatter", "all_reduce")
    offloaded_types = [ct for ci, ct in enumerate(COLL_BUCKETS) if any_sc[ci]]
    present = [ct for ci, ct in enumerate(COLL_BUCKETS) if ct in offloadable and (any_sc[ci] or any_tc[ci])]
    if not offloaded_types and not any(tot_count):
        verdict = "none"  # no collective in the kept steps (as the analysis defines it)
    elif not offloaded_types:
        verdict = "off"
    elif not spec.sc_traced:
        verdict = "not_visible"
    elif all(not any_tc[COLL_BUCKETS.index(ct)] for ct in present):
        verdict = "on"
    else:
        verdict = "partial"
    kept_mean = sorted(mean_step[s] for s in kept)
    summary = {
        "breakdown_fraction": frac,
        "remat_fraction": float(tot_remat / tot_step),
        "exposed_fraction": {ct: float(tot_exposed[i] / tot_step) for i, ct in enumerate(COLL_BUCKETS)},
        "hidden_fraction": {
            ct: (float(1.0 - tot_exposed[i] / tot_window[i]) if tot_window[i] else None)
            for i, ct in enumerate(COLL_BUCKETS)
        },
        "collective_count_per_step": {
            ct: float(tot_count[i] / (len(kept) * C)) if kept else 0.0 for i, ct in enumerate(COLL_BUCKETS)
        },
        "communication_fraction": float(sum(tot_exposed) / tot_step),
        "step_time_ps_median": int(np.median(kept_mean)) if kept_mean else 0,
        "step_time_ps_mean": int(sum(kept_mean) // len(kept_mean)) if kept_mean else 0,
        "offload": {
            "verdict": verdict,
            "offloaded_types": offloaded_types,
            "tensorcore_types": [ct for ci, ct in enumerate(COLL_BUCKETS) if any_tc[ci]],
            "sparsecore_planes": bool(spec.sc_traced and offloaded_types),
        },
        "model_flops_per_step_per_core": int(_model_flops_per_step(plan)),
    }
    # per-core means over kept steps (straggler visibility)
    core_mean = {}
    for gi, h, plane in tensorcore_planes(tl.hosts, spec.cores_per_host):
        key = plane if tl.hosts == 1 else f"{hostnames[h]}:{plane}"
        busy = [sum(v for b_, v in per_core[key][str(s)]["buckets"].items() if b_ != "idle") for s in kept]
        core_mean[key] = int(sum(busy) // max(1, len(busy)))
    summary["busy_ps_mean_per_core"] = core_mean
    # SparseCore occupancy: offloaded transfer time over (2 SparseCores x step time), kept steps
    if len(tl.sc_tid):
        keep = np.isin(tl.sc_step, kept)
        sc_busy = float((tl.sc_t1[keep, 0] - tl.sc_t0[keep, 0]).sum()) * C
        summary["sparsecore_busy_fraction"] = sc_busy / (SC_PER_CORE * tot_step) if tot_step else 0.0
    else:
        summary["sparsecore_busy_fraction"] = 0.0

    truth = {
        "schema_version": 1,
        "scenario": spec.name,
        "description": spec.description,
        "seed": tl.seed,
        "chip": "tpu7x",
        "hosts": tl.hosts,
        "hostnames": hostnames,
        "workload": spec.workload,
        "stresses": spec.stresses,
        "pair": spec.pair,
        "role": spec.role,
        "expect": {"fire": list(spec.expect_fire), "quiet": list(spec.expect_quiet)},
        "config": _config(plan, tl),
        "planes": plane_names,
        "step_source": "Steps" if steps_line else "XLA Modules",
        "train_program": {
            "module": plan.programs[train_prog].module,
            "program_id": plan.programs[train_prog].program_id,
            "event_name": plan.programs[train_prog].event_name,
        },
        "steps": {
            "numbers": list(range(S)),
            "warmup": warm,
            "kept": kept,
            "step_ps_mean_over_cores": {str(s): mean_step[s] for s in range(S)},
            "rule": "drop steps whose mean-over-cores step time > median + 3 * MAD (unscaled)",
        },
        "per_core": per_core,
        "summary": summary,
        "op_classes": op_classes(plan),
    }
    if spec.extended_truth:
        _extend_truth(truth, tl, hostnames, kept, step_ps, train_prog)
    return truth


def _extend_truth(truth: dict, tl: Timeline, hostnames: list[str], kept: list[int], step_ps: np.ndarray,
                  train_prog: int) -> None:
    """Issue #14 truth: run kind, host offload bytes, attention layout time, matmul precision, overlaps.

    Computed from the simulated occurrences (never from the written bytes): an occurrence counts
    for step s when it ran in step s inside the step window (any program with a Steps line, the
    step program otherwise); its self time is its duration minus what the next op's overlap took
    (these ops are never nested). Host bytes count once per copy pair, on the copy-done.
    """
    plan = tl.plan
    spec = plan.spec
    ops = plan.ops
    n = len(tl.occ_tid)
    trim = tl.occ_trim if tl.occ_trim is not None else np.zeros(n, dtype=np.int64)
    tid = tl.occ_tid
    in_win = np.array([spec.steps_line or ops[k].program == train_prog for k in tid], dtype=bool)
    layout = np.array([o.layout for o in ops], dtype=bool)[tid] & in_win
    hbytes = np.array([o.host_bytes for o in ops], dtype=np.int64)[tid] * in_win
    to_host = np.array([o.host_dir == "to_host" for o in ops], dtype=bool)[tid]
    tags = sorted({o.precision for o in ops if o.precision})
    prec = np.array([o.precision for o in ops], dtype=object)[tid] if n else np.zeros(0, dtype=object)
    trimmed = (trim > 0) & in_win
    self_ps = tl.occ_dur - trim[:, None]
    S, C = tl.steps, tl.C
    tot = {"layout": 0, "bytes": 0, "to": 0, "from": 0, "ov": 0, "host_ps": 0, "step": 0}
    tot_prec = dict.fromkeys(tags, 0)
    hb = truth["per_core"]
    for gi, h, plane in tensorcore_planes(tl.hosts, spec.cores_per_host):
        key = plane if tl.hosts == 1 else f"{hostnames[h]}:{plane}"
        for s in range(S):
            m = tl.occ_step == s
            row = hb[key][str(s)]
            lay = int(self_ps[m & layout, gi].sum())
            byt = int(hbytes[m].sum())
            prec_ps = {t: int(self_ps[m & in_win & (prec == t), gi].sum()) for t in tags}
            row["attention_layout_ps"] = lay
            row["host_offload_bytes"] = byt
            row["host_offload_bytes_to_host"] = int(hbytes[m & to_host].sum())
            row["matmul_precision_ps"] = prec_ps
            row["overlaps"] = int((m & trimmed).sum())
            assert lay <= row["buckets"]["attention"], (spec.name, key, s)
            if s in kept:
                tot["layout"] += lay
                tot["bytes"] += byt
                tot["to"] += row["host_offload_bytes_to_host"]
                tot["from"] += byt - row["host_offload_bytes_to_host"]
                tot["ov"] += row["overlaps"]
                tot["host_ps"] += row["buckets"].get("host_offload", 0)
                tot["step"] += int(step_ps[s, gi])
                for t in tags:
                    tot_prec[t] += prec_ps[t]
    nk = max(1, len(kept) * C)
    st = max(1, tot["step"])
    sm = truth["summary"]
    sm["host_offload"] = {
        "fraction": tot["host_ps"] / st,
        "bytes_per_step_per_core": tot["bytes"] // nk,
        "to_host_bytes_per_step_per_core": tot["to"] // nk,
        "from_host_bytes_per_step_per_core": tot["from"] // nk,
        # bytes moved per second of step time (what a per-step GB/s reads)
        "gbytes_per_s_over_step": (tot["bytes"] / (st / 1e12)) / 1e9,
    }
    sm["attention_layout_fraction"] = tot["layout"] / st
    sm["matmul_precision_fraction"] = {t: v / st for t, v in tot_prec.items()}
    sm["overlaps"] = {"overlap_ps": int(spec.overlap_ps), "count_per_step_per_core": tot["ov"] / nk}
    sm["model_flops_without_stat_per_step_per_core"] = int(_model_flops_per_step(plan, stat=False))
    truth["run_kind"] = spec.run_kind
    truth["device_type_string"] = spec.device_type
    truth["config"].update({
        "program": spec.program,
        "run_kind": spec.run_kind,
        "cores_per_host": spec.cores_per_host,
        "tp": spec.tp,
        "weight_dtype": spec.weight_dtype if spec.program == "vllm" else None,
        "act_dtype": spec.act_dtype if spec.program == "vllm" else None,
        "host_offload": spec.host_offload,
        "host_gbps": spec.host_gbps,
        "overlap_ps": spec.overlap_ps,
        "overlap_every": spec.overlap_every,
        "device_type_string": spec.device_type,
    })
    for o in ops:
        oc = truth["op_classes"][o.name]
        oc.update({"precision": o.precision or None, "layout": o.layout, "host_bytes": o.host_bytes,
                   "host_dir": o.host_dir or None, "flops_stat": o.stat_flops})


def _model_flops_per_step(plan: Plan, stat: bool | None = None) -> float:
    """Model FLOPs of one step (all programs); ``stat=False``: only ops that carry no flops stat."""
    cnt: dict[int, int] = {}
    for prog in plan.programs:
        for code, k in prog.items:
            if code in (OP, START, DONE, SYNC):
                cnt[k] = cnt.get(k, 0) + 1
    return float(sum(plan.ops[k].model_flops * n for k, n in cnt.items()
                     if stat is None or plan.ops[k].stat_flops == stat))


def op_classes(plan: Plan) -> dict:
    out = {}
    for o in plan.ops:
        out[o.name] = {
            "bucket": o.bucket,
            "category": o.category,
            "remat": o.remat,
            "collective": o.coll,
            "role": o.role,
            "form": o.form or None,
            "phase": o.phase,
            "program_id": plan.programs[o.program].program_id,
        }
    return out


def _config(plan: Plan, tl: Timeline) -> dict:
    s = plan.spec
    return {
        "arch": s.arch,
        "layers": plan.layers,
        "steps": tl.steps,
        "d_model": s.d_model,
        "d_ff": s.d_ff,
        "n_heads": s.n_heads,
        "n_kv_heads": s.n_kv_heads,
        "head_dim": s.head_dim,
        "seq_len": s.seq_len,
        "batch_per_core": s.batch_per_core,
        "fsdp": s.fsdp,
        "cp": s.cp,
        "ep": s.ep,
        "pp": s.pp,
        "microbatches": s.microbatches,
        "experts": s.experts,
        "top_k": s.top_k,
        "moe_impl": s.moe_impl,
        "precision": s.precision,
        "remat_policy": s.remat,
        "attention": s.attention,
        "kernel_block": s.kernel_block,
        "collectives": {t: {"form": f, "overlap": o} for t, f, o in s.collectives},
        "sc_traced": s.sc_traced,
        "steps_line": s.steps_line,
        "zero_timestamps": s.zero_timestamps,
        "straggler_core": s.straggler_core,
        "intern_category": s.intern_category,
        "xss": s.xss,
        "core_factor": [round(float(x), 6) for x in tl.core_factor],
        "step_factor": [round(float(x), 6) for x in tl.step_factor],
    }

