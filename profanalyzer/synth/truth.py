"""Ground truth of a simulated schedule: per TensorCore and step, bucket self times,
remat, collective exposure and idle, as accumulated by :func:`.model.simulate` in its
:class:`~.model.Timeline`; :func:`build_truth` turns it into the ``truth.json`` dict."""

from __future__ import annotations

import numpy as np

from .builder import (
    BUCKET_INDEX,
    BUCKETS,
    COLL_BUCKETS,
    DONE,
    OP,
    PRODUCT_BUCKETS,
    START,
    SYNC,
    Plan,
)
from .model import (
    CORES_PER_HOST,
    IDLE,
    N_BUCKETS,
    SC_PER_CORE,
    Timeline,
)

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
    for _gi, h, plane in tensorcore_planes(tl.hosts, spec.cores_per_host):
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
    if spec.custom_matmul:
        # issue #26: custom Pallas kernels without a flops stat: what each computes
        truth["custom_kernels"] = {o.name: {"bucket": o.bucket, "flops": int(o.flops), "precision": o.precision or None,
                                            "evidence": "counters" if spec.opaque_kernel else "operand shapes"}
                                   for o in plan.ops if o.category == "custom-call" and not o.stat_flops}
    if spec.counters:
        # issue #26: the counter profile of each Pallas kernel (synth.counters)
        from .counters import PROFILES, profile_of

        truth["counters"] = {o.name: {"utilisation": PROFILES[k][0], "ep_wait_fraction": PROFILES[k][1],
                                      "verdict": PROFILES[k][2]}
                             for o in plan.ops for k in (profile_of(o),) if k is not None}
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
