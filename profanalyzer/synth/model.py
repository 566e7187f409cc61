"""Schedule simulation and ground truth.

:func:`simulate` walks a :class:`~.builder.Plan` step by step for every TensorCore of
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
collective's exposure; ``idle`` is the rest of the step window. :func:`.truth.build_truth`
turns the accumulated :class:`Timeline` into the ``truth.json`` dict.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from .builder import (
    BUCKET_INDEX,
    BUCKETS,
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
    def zeros(cls, C: int) -> StepAcc:
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
    peer_idle: np.ndarray | None = None  # (S, C) ps idle before top-level collectives waiting on the slowest core (peer_gate)


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
    peer_idle = np.zeros((S, C), dtype=np.int64)
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
                    if spec.peer_gate and coll_idx[k] >= 0 and not stack:  # barrier: idle until the slowest core arrives
                        peer_idle[s] += t.max() - t
                        t = np.full(C, t.max(), dtype=np.int64)
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
                    if spec.peer_gate and not stack:  # barrier: idle until the slowest core arrives
                        peer_idle[s] += t.max() - t
                        t = np.full(C, t.max(), dtype=np.int64)
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
        peer_idle=peer_idle if spec.peer_gate else None,
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
