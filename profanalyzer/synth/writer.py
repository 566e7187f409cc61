"""XSpace writer: one serialized XSpace per host from a simulated :class:`~.model.Timeline`.

Per host (4 chips = 8 TensorCores):

* ``/host:CPU`` -- a few Python/runtime thread lines (bulk a reader must skip);
* ``/device:TPU:<N>`` (N = 0..7) -- lines ``Steps`` (unless the scenario drops it),
  ``XLA Modules``, ``XLA Ops``, ``Async XLA Ops``, ``XLA TraceMe``; plane stats
  ``device_type_string``, ``peak_teraflops_per_second``, ``peak_hbm_bw_gigabytes_per_second``,
  ``has_megacore``, ``core_details`` (serialized CoreDetails);
* ``/device:TPU:<N> SparseCore <K>`` (K = 0, 1) after each TensorCore plane when collectives
  are offloaded and SparseCore tracing was on -- lines ``Sparse Core Steps``,
  ``Sparse Core Modules``, ``Sparse Core Ops``, ``Sparse Core Syncs``;
* ``/host:metadata`` -- one event metadata per program with an ``Hlo Proto`` bytes stat
  (seeded pseudo-random bytes standing in for the serialized HloProto);
* ``Task Environment`` -- ``profile_start_time`` / ``profile_stop_time`` stats.

Each plane has its own stat-metadata and event-metadata id spaces (ids from 1).
"""

from __future__ import annotations

import random

import numpy as np

from ..core.hardware import TPU7X
from ..read.xspace import xplane_pb2 as pb
from . import pbenc as P
from .builder import stable_hash
from .hlo_memory import hlo_proto
from .model import SC_PER_CORE, Rng, Timeline

US = 1_000_000
EPOCH_BASE_NS = 1_733_000_000_000_000_000  # early December 2024
UPTIME_BASE_PS = 4_210_000_000_000_000  # ~70 minutes of device uptime (zero-timestamp captures)


class _Stats:
    """Per-plane stat metadata registry (names -> ids in first-use order)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            i = len(self.ids) + 1
            self.ids[name] = i
        return i

    def xstat(self, name: str, kind: int, value) -> pb.XStat:
        s = pb.XStat(metadata_id=self.id(name))
        if kind == P.V_STR:
            s.str_value = value
        elif kind == P.V_BYTES:
            s.bytes_value = value
        elif kind == P.V_INT64:
            s.int64_value = int(value)
        elif kind == P.V_UINT64:
            s.uint64_value = int(value)
        elif kind == P.V_REF:
            s.ref_value = int(value)
        elif kind == P.V_DOUBLE:
            s.double_value = float(value)
        return s

    def bytes(self, name: str, kind: int, value) -> bytes:
        return P.stat_bytes(self.id(name), kind, value)

    def metadata(self) -> dict[int, bytes]:
        return {i: pb.XStatMetadata(id=i, name=n).SerializeToString() for n, i in self.ids.items()}


class _Events:
    """Per-plane event metadata registry."""

    def __init__(self) -> None:
        self.by_key: dict = {}
        self.msgs: dict[int, pb.XEventMetadata] = {}

    def get(self, key, name: str, display_name: str = "", stats: list[pb.XStat] | None = None) -> int:
        i = self.by_key.get(key)
        if i is None:
            i = len(self.by_key) + 1
            self.by_key[key] = i
            md = pb.XEventMetadata(id=i, name=name, display_name=display_name)
            if stats:
                md.stats.extend(stats)
            self.msgs[i] = md
        return i

    def serialized(self) -> dict[int, bytes]:
        return {i: m.SerializeToString() for i, m in self.msgs.items()}


def hostnames_for(name: str, seed: int, hosts: int) -> list[str]:
    h = (stable_hash(name) ^ (seed * 2654435761)) & 0xFFFFFFFF
    return [f"t1v-n-{h:08x}-w-{i}" for i in range(hosts)]


def run_name_for(name: str, seed: int) -> str:
    r = random.Random(stable_hash(name) + seed)
    return f"2024_12_{r.randrange(1, 28):02d}_{r.randrange(0, 24):02d}_{r.randrange(0, 60):02d}_{r.randrange(0, 60):02d}"


class _Clock:
    """Maps schedule time (ps) to line timestamp_ns / offset_ps."""

    def __init__(self, tl: Timeline, zero: bool, seed: int):
        self.zero = zero
        r = random.Random(stable_hash(tl.plan.spec.name) * 3 + seed)
        self.base_ns = EPOCH_BASE_NS + r.randrange(0, 86_400) * 1_000_000_000 + r.randrange(0, 10**9)
        self.uptime_ps = UPTIME_BASE_PS + r.randrange(0, 10**12)
        self.r = r

    def line_ts(self, first_ps: int) -> tuple[int, int]:
        """(timestamp_ns for the line, ps origin of its offsets in schedule time)."""
        if self.zero:
            return 0, -self.uptime_ps
        lead = self.r.randrange(1_000, 9_000)  # line starts a few us before its first event
        rel_ns = max(0, first_ps // 1000 - lead)
        return self.base_ns + rel_ns, rel_ns * 1000


def _line(lid: int, name: str, clock: _Clock, starts: np.ndarray, durs: np.ndarray, encode) -> bytes:
    if len(starts):
        first = int(starts.min())
        last = int((starts + durs).max())
    else:
        first = last = 0
    ts, origin = clock.line_ts(first)
    events = encode(origin)
    return P.encode_line(lid, name, ts, last - first if len(starts) else 0, events)


def write_host(tl: Timeline, h: int, hostname: str, seed: int, counts: dict) -> bytes:
    plan = tl.plan
    spec = plan.spec
    ops = plan.ops
    clock = _Clock(tl, spec.zero_timestamps, seed + 101 * h)
    rng = random.Random(stable_hash(spec.name) * 7 + seed * 13 + h)
    offloaded = len(tl.sc_tid) > 0
    with_sc = offloaded and spec.sc_traced
    planes: list[bytes] = []
    pid = 1
    n_xla = 0
    n_dev = 0

    # ---------------------------------------------------------------- host CPU
    planes.append(_host_cpu_plane(tl, h, clock, rng, pid))
    pid += 1

    # ---------------------------------------------------------- TensorCores
    cph = spec.cores_per_host
    for c in range(cph):
        gi = h * cph + c
        st = _Stats()
        ev = _Events()
        # plane stats
        cd = pb.CoreDetails(hostname=hostname, device_ordinal=c, core_num=c % 2, local_chip_id=c // 2,
                            global_chip_id=h * max(1, cph // 2) + c // 2, global_core_id=gi, is_sparse_core=False)
        # converted captures carry no device_type_string (spec.device_type None)
        pstats = [st.bytes("device_type_string", P.V_STR, spec.device_type)] if spec.device_type is not None else []
        pstats += [
            st.bytes("peak_teraflops_per_second", P.V_DOUBLE, TPU7X.core_peak_bf16_flops / 1e12),
            st.bytes("peak_hbm_bw_gigabytes_per_second", P.V_DOUBLE, TPU7X.core_hbm_bytes_per_s / 1e9),
            st.bytes("peak_vmem_rd_bw_gigabytes_per_second", P.V_DOUBLE, 24_000.0),
            st.bytes("peak_vmem_wr_bw_gigabytes_per_second", P.V_DOUBLE, 24_000.0),
            st.bytes("has_megacore", P.V_INT64, 0),
            st.bytes("has_merged_vmem", P.V_INT64, 1),
            st.bytes("core_details", P.V_BYTES, cd.SerializeToString()),
        ]
        # stat names used by events, registered in a fixed order
        for nm in ("group_id", "device_offset_ps", "device_duration_ps", "all_reduce_unique_id", "hlo_op", "_a",
                   "run_id", "replica_id", "queue_id", "core_type", "hlo_category", "program_id", "symbol_id",
                   "tf_op", "flops", "model_flops", "bytes_accessed", "raw_bytes_accessed", "deduplicated_name",
                   "source", "shape_with_layout", "step_num"):
            st.id(nm)
        # op metadata (one per HLO instruction, ids in template order)
        meta_of = np.zeros(len(ops), dtype=np.int64)
        for o in ops:
            mstats = []
            if spec.intern_category:
                mstats.append(st.xstat("hlo_category", P.V_REF, st.id(o.category)))
            else:
                mstats.append(st.xstat("hlo_category", P.V_STR, o.category))
            mstats.append(st.xstat("program_id", P.V_INT64, plan.programs[o.program].program_id))
            mstats.append(st.xstat("symbol_id", P.V_INT64, o.symbol_id))
            if o.tf_op:
                mstats.append(st.xstat("tf_op", P.V_STR, o.tf_op))
            if o.stat_flops:
                mstats.append(st.xstat("flops", P.V_UINT64, o.flops))
                mstats.append(st.xstat("model_flops", P.V_UINT64, o.model_flops))
                mstats.append(st.xstat("bytes_accessed", P.V_UINT64, o.bytes_accessed))
                mstats.append(st.xstat("raw_bytes_accessed", P.V_UINT64, o.raw_bytes))
            else:  # Pallas kernels in real captures: no flops stat, model_flops/bytes_accessed 0
                mstats.append(st.xstat("model_flops", P.V_UINT64, 0))
                mstats.append(st.xstat("bytes_accessed", P.V_UINT64, 0))
            if o.dedup:
                mstats.append(st.xstat("deduplicated_name", P.V_STR, o.dedup))
            if o.source:
                mstats.append(st.xstat("source", P.V_STR, o.source))
            if o.shape:
                mstats.append(st.xstat("shape_with_layout", P.V_STR, o.shape))
            meta_of[o.idx] = ev.get(("op", o.idx), o.hlo, o.name, mstats)
        lines: list[bytes] = []

        # Steps
        ss, se = tl.step_start[:, gi], tl.step_end[:, gi]
        if spec.steps_line:
            step_meta = np.array([ev.get(("step", s), str(s)) for s in range(tl.steps)], dtype=np.int64)
            steps_idx = np.arange(tl.steps)

            def enc_steps(origin, ss=ss, se=se, step_meta=step_meta, steps_idx=steps_idx, st=st):
                return P.encode_events(step_meta, ss - origin, se - ss,
                                       [(st.id("group_id"), P.V_INT64, steps_idx, None),
                                        (st.id("step_num"), P.V_INT64, steps_idx, None)])

            lines.append(_line(1, "Steps", clock, ss, se - ss, enc_steps))
            n_dev += tl.steps

        # XLA Modules
        ms, me = tl.mod_start[:, gi], tl.mod_end[:, gi]
        mod_meta = np.array([ev.get(("mod", int(p)), plan.programs[int(p)].event_name) for p in tl.mod_prog],
                            dtype=np.int64)
        run_ids = np.array([(stable_hash(f"{spec.name}/{seed}/{i}") * 2654435761) & 0x7FFFFFFFFFFF
                            for i in range(len(ms))], dtype=np.int64)

        def enc_mods(origin, ms=ms, me=me, mod_meta=mod_meta, run_ids=run_ids, st=st):
            z = np.zeros(len(ms), dtype=np.int64)
            return P.encode_events(mod_meta, ms - origin, me - ms, [
                (st.id("run_id"), P.V_INT64, run_ids, None),
                (st.id("replica_id"), P.V_INT64, z, None),
                (st.id("queue_id"), P.V_INT64, z, None),
                (st.id("core_type"), P.V_INT64, z, None),
                (st.id("group_id"), P.V_INT64, tl.mod_step, None),
            ])

        lines.append(_line(2, "XLA Modules", clock, ms, me - ms, enc_mods))
        n_dev += len(ms)

        # XLA Ops (the bulk: vectorized)
        starts = tl.occ_start[:, gi]
        durs = tl.occ_dur[:, gi]
        tids = tl.occ_tid
        has_dev = np.array([o.device_stats for o in ops], dtype=bool)[tids]
        # own offset/duration differ slightly from the authoritative device pair
        jr = Rng(stable_hash(spec.name), seed, gi, 11)
        delta = (jr.uniform(len(tids)) * 1500).astype(np.int64)
        eps = (jr.uniform(len(tids)) * 900).astype(np.int64)
        uid = tl.occ_uid

        def enc_ops(origin, starts=starts, durs=durs, tids=tids, has_dev=has_dev, delta=delta, eps=eps,
                    meta_of=meta_of, uid=uid, st=st):
            dev_off = starts - origin
            own_off = np.where(has_dev, np.maximum(dev_off - delta, 0), dev_off)
            own_dur = np.where(has_dev, durs + delta + eps, durs)
            return P.encode_events(meta_of[tids], own_off, own_dur, [
                (st.id("group_id"), P.V_INT64, tl.occ_step, None),
                (st.id("device_offset_ps"), P.V_UINT64, dev_off, has_dev),
                (st.id("device_duration_ps"), P.V_UINT64, durs, has_dev),
                (st.id("all_reduce_unique_id"), P.V_UINT64, uid, uid > 0),
            ])

        lines.append(_line(3, "XLA Ops", clock, starts, durs, enc_ops))
        n_xla += len(tids)
        n_dev += len(tids)

        # Async XLA Ops: one event per start->done window
        ws, wd = tl.win_start, tl.win_done
        a_start = starts[ws]
        a_end = starts[wd] + durs[wd]
        a_meta = meta_of[tids[ws]]
        done_names = [ops[int(k)].name for k in tids[wd]]
        a_step = tl.occ_step[ws]

        def enc_async(origin, a_start=a_start, a_end=a_end, a_meta=a_meta, done_names=done_names, a_step=a_step,
                      st=st):
            uniq = sorted(set(done_names))
            pos = {n: i for i, n in enumerate(uniq)}
            table = [P.stat_bytes(st.id("hlo_op"), P.V_STR, n) for n in uniq]
            idx = np.array([pos[n] for n in done_names], dtype=np.int64)
            return P.encode_events(a_meta, a_start - origin, a_end - a_start, [
                (st.id("_a"), P.V_INT64, np.ones(len(a_start), dtype=np.int64), None),
                (st.id("group_id"), P.V_INT64, a_step, None),
            ], table_stats=[(table, idx)] if len(a_start) else [])

        if spec.async_line:
            lines.append(_line(4, "Async XLA Ops", clock, a_start, a_end - a_start, enc_async))
            n_dev += len(ws)

        # XLA TraceMe
        tm_meta = np.array([ev.get(("tm", name), name) for name, _, _, _ in tl.traceme], dtype=np.int64)
        tm_s = np.array([x[1][gi] for x in tl.traceme], dtype=np.int64)
        tm_d = np.array([x[2][gi] for x in tl.traceme], dtype=np.int64)
        tm_g = np.array([x[3] for x in tl.traceme], dtype=np.int64)

        if spec.counters:
            ctr_line, ph, n_ctr = _counter_lines(tl, gi, ops, ev, st, clock, stable_hash(spec.name) + seed)
            if ctr_line:
                lines.append(ctr_line)
                n_dev += n_ctr
            if len(ph[0]):
                tm_meta, tm_s, tm_d, tm_g = (np.concatenate([a, b]) for a, b in zip((tm_meta, tm_s, tm_d, tm_g), ph, strict=True))
                o_ = np.argsort(tm_s, kind="stable")
                tm_meta, tm_s, tm_d, tm_g = tm_meta[o_], tm_s[o_], tm_d[o_], tm_g[o_]

        def enc_tm(origin, tm_meta=tm_meta, tm_s=tm_s, tm_d=tm_d, tm_g=tm_g, st=st):
            return P.encode_events(tm_meta, tm_s - origin, tm_d, [(st.id("group_id"), P.V_INT64, tm_g, None)])

        lines.append(_line(5, "XLA TraceMe", clock, tm_s, tm_d, enc_tm))
        n_dev += len(tm_s)

        planes.append(P.encode_plane(pid, f"/device:TPU:{c}", lines, ev.serialized(), st.metadata(), pstats))
        pid += 1

        # ------------------------------------------------------ SparseCores
        if with_sc:
            for k in range(SC_PER_CORE):
                plane, n = _sparsecore_plane(tl, h, c, k, hostname, clock, pid)
                planes.append(plane)
                n_dev += n
                pid += 1

    # -------------------------------------------------------- host metadata
    planes.append(_metadata_plane(tl, seed, pid))
    pid += 1
    planes.append(_task_env_plane(tl, clock, pid))
    counts["xla_ops_events"] = counts.get("xla_ops_events", 0) + n_xla
    counts["device_events"] = counts.get("device_events", 0) + n_dev
    return P.encode_space(planes, [hostname])


def _counter_lines(tl: Timeline, gi: int, ops, ev: _Events, st: _Stats, clock: _Clock, seed: int):
    """(the `_counters_` line, the emit_pipeline phases (meta, start, dur, group), its event count) of one TensorCore."""
    from .counters import PROFILES, UNITS, profile_of, windows

    kinds = [profile_of(o) for o in ops]
    occ = [i for i, t in enumerate(tl.occ_tid.tolist()) if kinds[t] is not None]
    util_id = st.id("% util")
    events: list[tuple[int, int, int, float]] = []  # (start, dur, unit meta, util)
    ph_meta, ph_s, ph_d, ph_g = [], [], [], []
    for i in occ:
        t = int(tl.occ_tid[i])
        s0, d0 = int(tl.occ_start[i, gi]), int(tl.occ_dur[i, gi])
        utils, wait, _ = PROFILES[kinds[t]]
        ws, we = windows(s0, d0, seed + i)
        for u in UNITS:
            if u in utils:
                mid = ev.get(("ctr", u), u)
                events.extend((int(a), int(b - a), mid, utils[u] * 100.0) for a, b in zip(ws.tolist(), we.tolist(), strict=True))
        w = int(round(d0 * wait))
        for name, a, d in (("ep_wait_in", s0, w), ("ep_run_kernel", s0 + w, d0 - w)):
            ph_meta.append(ev.get(("tm", name), name))
            ph_s.append(a)
            ph_d.append(d)
            ph_g.append(int(tl.occ_step[i]))
    phases = tuple(np.asarray(x, dtype=np.int64) for x in (ph_meta, ph_s, ph_d, ph_g))
    if not events:
        return b"", phases, 0
    events.sort()
    first = events[0][0]
    last = max(a + d for a, d, _, _ in events)
    ts, origin = clock.line_ts(first)
    line = pb.XLine(id=6, name="_counters_", timestamp_ns=ts, duration_ps=last - first)
    for a, d, mid, u in events:
        line.events.add(metadata_id=mid, offset_ps=a - origin, duration_ps=d,
                        stats=[pb.XStat(metadata_id=util_id, double_value=u)])
    return line.SerializeToString(), phases, len(events)


def _sparsecore_plane(tl: Timeline, h: int, c: int, k: int, hostname: str, clock: _Clock, pid: int):
    plan = tl.plan
    ops = plan.ops
    gi = h * plan.spec.cores_per_host + c
    st = _Stats()
    ev = _Events()
    cd = pb.CoreDetails(hostname=hostname, device_ordinal=c, core_num=k, local_chip_id=c // 2,
                        global_chip_id=h * 4 + c // 2, global_core_id=gi, is_sparse_core=True)
    pstats = [st.bytes("device_type_string", P.V_STR, plan.spec.device_type or "TPU v7x"),
              st.bytes("core_details", P.V_BYTES, cd.SerializeToString())]
    for nm in ("group_id", "offload_core_id", "tc_offload_start_id", "hlo_category", "bytes_accessed"):
        st.id(nm)
    sel = np.nonzero(tl.sc_k[:, gi] == k)[0]
    t0 = tl.sc_t0[sel, gi]
    t1 = tl.sc_t1[sel, gi]
    tids = tl.sc_tid[sel]
    uids = tl.sc_uid[sel]
    steps = tl.sc_step[sel]
    mod_of: dict[int, int] = {}
    op_of: dict[int, int] = {}
    for t in sorted(set(int(x) for x in tids), key=lambda x: int(np.argmax(tids == x))):
        o = ops[t]
        mod_of[t] = ev.get(("mod", t), o.sc_module)
        op_of[t] = ev.get(("op", t), o.sc_name, o.sc_name,
                          [st.xstat("hlo_category", P.V_STR, o.sc_name.split(".")[0]),
                           st.xstat("bytes_accessed", P.V_UINT64, o.bytes_accessed * 8)])
    lut_mod = np.zeros(len(ops), dtype=np.int64)
    lut_op = np.zeros(len(ops), dtype=np.int64)
    for t in mod_of:
        lut_mod[t], lut_op[t] = mod_of[t], op_of[t]
    mod_meta = lut_mod[tids]
    op_meta = lut_op[tids]
    lines = []
    n = 0
    ss, se = tl.step_start[:, gi], tl.step_end[:, gi]
    step_meta = np.array([ev.get(("step", s), str(s)) for s in range(tl.steps)], dtype=np.int64)
    lines.append(_line(1, "Sparse Core Steps", clock, ss, se - ss, lambda o: P.encode_events(
        step_meta, ss - o, se - ss, [(st.id("group_id"), P.V_INT64, np.arange(tl.steps), None)])))
    n += tl.steps
    core_ids = np.full(len(sel), c, dtype=np.int64)
    lines.append(_line(2, "Sparse Core Modules", clock, t0, t1 - t0, lambda o: P.encode_events(
        mod_meta, t0 - o, t1 - t0, [(st.id("offload_core_id"), P.V_INT64, core_ids, None),
                                    (st.id("tc_offload_start_id"), P.V_UINT64, uids, None),
                                    (st.id("group_id"), P.V_INT64, steps, None)])))
    o0 = t0 + 700_000
    o1 = np.maximum(o0 + 100_000, t1 - 400_000)
    lines.append(_line(3, "Sparse Core Ops", clock, o0, o1 - o0, lambda o: P.encode_events(
        op_meta, o0 - o, o1 - o0, [(st.id("group_id"), P.V_INT64, steps, None)])))
    sync_meta = ev.get(("sync",), "sync-flag-wait")
    s_start = np.sort(np.concatenate([t0 + 100_000, o1 + 50_000]))
    s_dur = np.full(len(s_start), 300_000, dtype=np.int64)
    lines.append(_line(4, "Sparse Core Syncs", clock, s_start, s_dur, lambda o: P.encode_events(
        np.full(len(s_start), sync_meta, dtype=np.int64), s_start - o, s_dur)))
    n += 4 * len(sel)
    name = f"/device:TPU:{c} SparseCore {k}"
    return P.encode_plane(pid, name, lines, ev.serialized(), st.metadata(), pstats), n


def _host_cpu_plane(tl: Timeline, h: int, clock: _Clock, rng: random.Random, pid: int) -> bytes:
    st = _Stats()
    ev = _Events()
    lines = []
    train = next(p for p in tl.plan.programs if p.is_train)
    threads = [
        (rng.randrange(1000, 60000), "python3", ["train_step", f"PjitFunction({train.module[4:]})",
                                                   "PyArray::BlockUntilReady"]),
        (rng.randrange(1000, 60000), "tpu_runtime_0", ["TpuExecutable::ExecuteOnDevices", "LaunchProgram",
                                                        "tpu::System::Enqueue"]),
        (rng.randrange(1000, 60000), "tf_data_worker", ["Iterator::GetNext", "MapAndBatch::Produce"]),
    ]
    gi = h * tl.plan.spec.cores_per_host
    for tid, tname, names in threads:
        starts, durs, metas, steps = [], [], [], []
        for s in range(tl.steps):
            t = int(tl.step_start[s, gi]) - 300 * US
            for j, nm in enumerate(names):
                d = (250 - 60 * j) * US + rng.randrange(0, 40) * US
                starts.append(t + 10 * US * j)
                durs.append(d)
                metas.append(ev.get(("h", nm), nm))
                steps.append(s)
        starts_a = np.array(starts, dtype=np.int64)
        durs_a = np.array(durs, dtype=np.int64)
        m = np.array(metas, dtype=np.int64)
        g = np.array(steps, dtype=np.int64)
        lines.append(_line(tid, tname, clock, starts_a, durs_a, lambda o, s_=starts_a, d_=durs_a, m_=m, g_=g:
                           P.encode_events(m_, s_ - o, d_, [(st.id("step_num"), P.V_INT64, g_, None)])))
    if tl.host_waits:  # issue #16: the host work a host-bound step waits for (new scenarios only)
        starts_a = np.array([int(w[1][gi]) for w in tl.host_waits], dtype=np.int64)
        durs_a = np.array([int(w[2][gi]) for w in tl.host_waits], dtype=np.int64)
        m = np.array([ev.get(("h", w[0]), w[0]) for w in tl.host_waits], dtype=np.int64)
        g = np.array([w[3] for w in tl.host_waits], dtype=np.int64)
        lines.append(_line(rng.randrange(1000, 60000), "input_pipeline", clock, starts_a, durs_a,
                           lambda o, s_=starts_a, d_=durs_a, m_=m, g_=g:
                           P.encode_events(m_, s_ - o, d_, [(st.id("step_num"), P.V_INT64, g_, None)])))
    return P.encode_plane(pid, "/host:CPU", lines, ev.serialized(), st.metadata(), [])


def _metadata_plane(tl: Timeline, seed: int, pid: int) -> bytes:
    st = _Stats()
    msgs = {}
    for p in tl.plan.programs:
        r = random.Random(p.program_id ^ seed)
        size = 24_576 if p.is_train else 3_072
        # issue #16: a real HloProto with a buffer assignment (new scenarios only), else opaque bulk
        blob = hlo_proto(tl.plan, p.module) if p.is_train and tl.plan.spec.hlo_memory else r.randbytes(size)
        md = pb.XEventMetadata(id=p.program_id, name=p.module)
        md.stats.append(st.xstat("Hlo Proto", P.V_BYTES, blob))
        msgs[p.program_id] = md.SerializeToString()
    return P.encode_plane(pid, "/host:metadata", [], msgs, st.metadata(), [])


def _task_env_plane(tl: Timeline, clock: _Clock, pid: int) -> bytes:
    st = _Stats()
    start_ns = clock.base_ns
    stop_ns = clock.base_ns + tl.end_ps // 1000 + 2_000_000
    stats = [st.bytes("profile_start_time", P.V_UINT64, start_ns),
             st.bytes("profile_stop_time", P.V_UINT64, stop_ns)]
    return P.encode_plane(pid, "Task Environment", [], {}, st.metadata(), stats)


def plane_names(tl: Timeline) -> dict:
    spec = tl.plan.spec
    cph = spec.cores_per_host
    tcs = [f"/device:TPU:{c}" for c in range(cph)]
    scs = []
    if len(tl.sc_tid) and spec.sc_traced:
        scs = [f"/device:TPU:{c} SparseCore {k}" for c in range(cph) for k in range(SC_PER_CORE)]
    return {"tensorcore": tcs, "sparsecore": scs, "host": ["/host:CPU", "/host:metadata", "Task Environment"]}
