"""The synthesizer's issue-#14 scenarios: shapes seen in real captures, with ground truth.

* truth self-consistency (buckets sum to the step, host-offload bytes, layout within attention);
* an independent reader re-derives buckets, layout time, host bytes and overlaps from the written
  bytes (sequential on 1 ps overlaps, nesting only on real containment) and must match the truth;
* structure of the bytes (no flops stat on quantized kernels, S(5) copies, async slices, ...);
* determinism;
* analysis vs truth (xfail until the #14 classifier lands).
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import pytest

from profanalyzer.read.xspace import xplane_pb2 as pb
from profanalyzer.synth import SCENARIOS, synthesize, write_scenario

NEW = ("serving_tp2_w4", "host_offload_train", "host_offload_loop")
SMALL = {"steps": 3, "layers": 2}
TC_RE = re.compile(r"^/device:TPU:(\d+)$")
REAL = Path(__file__).resolve().parents[2] / "shared" / "real-traces"


@pytest.fixture(scope="module")
def gen():
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = synthesize(name, **SMALL)
        return cache[name]

    return get


def _stats(stats, plane) -> dict:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = {}
    for s in stats:
        w = s.WhichOneof("value")
        v = getattr(s, w)
        out[names[s.metadata_id]] = plane.stat_metadata[v].name if w == "ref_value" else v
    return out


def _tc_planes(data: bytes):
    return [p for p in pb.XSpace.FromString(data).planes if TC_RE.match(p.name)]


def _ops(plane):
    """(start, end, display name, metadata stats) of XLA Ops events in device time, sorted."""
    line = next(ln for ln in plane.lines if ln.name == "XLA Ops")
    base = line.timestamp_ns * 1000
    out = []
    for e in line.events:
        st = _stats(e.stats, plane)
        if "device_offset_ps" in st:
            s, d = base + st["device_offset_ps"], st["device_duration_ps"]
        else:
            s, d = base + e.offset_ps, e.duration_ps
        md = plane.event_metadata[e.metadata_id]
        out.append((s, s + d, md.display_name, md))
    out.sort(key=lambda x: (x[0], -x[1]))
    return out


def _windows(plane, truth):
    lines = {ln.name: ln for ln in plane.lines}
    if "Steps" in lines:
        ln = lines["Steps"]
        base = ln.timestamp_ns * 1000
        return {int(plane.event_metadata[e.metadata_id].name): (base + e.offset_ps, base + e.offset_ps + e.duration_ps)
                for e in ln.events}
    want = truth["train_program"]["event_name"]
    ln = lines["XLA Modules"]
    base = ln.timestamp_ns * 1000
    w = {}
    for e in ln.events:
        if plane.event_metadata[e.metadata_id].name == want:
            st = _stats(e.stats, plane)
            w[int(st["group_id"])] = (base + e.offset_ps, base + e.offset_ps + e.duration_ps)
    return w


def recompute(data: bytes, truth: dict) -> dict:
    """Per plane and step, from the bytes: buckets, attention layout ps, host bytes, overlaps."""
    classes = truth["op_classes"]
    keys = list(next(iter(next(iter(truth["per_core"].values())).values()))["buckets"])
    res = {}
    for plane in _tc_planes(data):
        ops = _ops(plane)
        self_t = [e - s for s, e, _, _ in ops]
        trimmed = [False] * len(ops)
        stack: list[int] = []
        for i, (s, e, _, _) in enumerate(ops):
            while stack and ops[stack[-1]][1] <= s:
                stack.pop()
            while stack and e > ops[stack[-1]][1]:
                # partial overlap on a single-stream line: sequential, the earlier op ends where this starts
                j = stack.pop()
                self_t[j] -= ops[j][1] - s
                trimmed[j] = True
            if stack:
                self_t[stack[-1]] -= e - s
            stack.append(i)
        rows = {}
        for step, (w0, w1) in sorted(_windows(plane, truth).items()):
            b = dict.fromkeys(keys, 0)
            lay = hb = ov = 0
            for i, (s, e, name, _) in enumerate(ops):
                if not (w0 <= s and e <= w1):
                    continue
                c = classes[name]
                b[c["bucket"]] += self_t[i]
                lay += self_t[i] if c["layout"] else 0
                hb += c["host_bytes"]
                ov += trimmed[i]
            b["idle"] = (w1 - w0) - sum(v for k, v in b.items() if k != "idle")
            rows[str(step)] = {"step_ps": w1 - w0, "buckets": b, "attention_layout_ps": lay,
                               "host_offload_bytes": hb, "overlaps": ov}
        res[plane.name] = rows
    return res


# ---------------------------------------------------------------------------
# truth
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW)
def test_truth_self_consistency(name, gen):
    _, truth = gen(name)
    spec = SCENARIOS[name]
    assert truth["run_kind"] == spec.run_kind and truth["config"]["program"] == spec.program
    for plane, steps in truth["per_core"].items():
        for step, row in steps.items():
            assert sum(row["buckets"].values()) == row["step_ps"], (plane, step)
            assert all(v >= 0 for v in row["buckets"].values())
            assert 0 <= row["attention_layout_ps"] <= row["buckets"]["attention"]
            assert sum(row["matmul_precision_ps"].values()) <= sum(
                v for k, v in row["buckets"].items() if k.startswith("matmul_"))
    sm = truth["summary"]
    assert sum(sm["breakdown_fraction"].values()) == pytest.approx(1.0, abs=1e-12)
    assert sm["host_offload"]["fraction"] == pytest.approx(sm["breakdown_fraction"].get("host_offload", 0.0))
    if name == "serving_tp2_w4":
        assert sm["host_offload"]["bytes_per_step_per_core"] == 0
        assert sm["breakdown_fraction"]["idle"] < 0.01
        # every matmul in the step is a W4A16 kernel without a flops stat
        assert set(sm["matmul_precision_fraction"]) == {"w4a16"}
        assert sm["matmul_precision_fraction"]["w4a16"] == pytest.approx(sm["breakdown_fraction"]["matmul_bf16"])
        assert 0.005 < sm["attention_layout_fraction"] < sm["breakdown_fraction"]["attention"]
        assert sm["overlaps"]["overlap_ps"] == 1 and sm["overlaps"]["count_per_step_per_core"] > 0
        assert sm["model_flops_without_stat_per_step_per_core"] > 0.9 * sm["model_flops_per_step_per_core"]
        assert sm["exposed_fraction"]["all_reduce"] > 0.01
        assert sm["hidden_fraction"]["all_reduce"] == pytest.approx(0.0, abs=1e-9)  # synchronous psums
    else:
        assert sm["host_offload"]["bytes_per_step_per_core"] > 0
        assert sm["host_offload"]["to_host_bytes_per_step_per_core"] > 0
        assert sm["host_offload"]["from_host_bytes_per_step_per_core"] > 0
        assert sm["breakdown_fraction"]["host_offload"] > (0.15 if name == "host_offload_train" else 0.9)
    if name == "host_offload_train":
        assert truth["run_kind"] == "training" and sm["remat_fraction"] >= 0
        assert sm["breakdown_fraction"]["matmul_bf16"] > 0.3


@pytest.mark.parametrize("name", NEW)
def test_truth_matches_bytes(name, gen):
    files, truth = gen(name)
    got = recompute(files[0][1], truth)
    assert set(got) == set(truth["per_core"])
    for plane, steps in truth["per_core"].items():
        assert set(got[plane]) == set(steps)
        for step, row in steps.items():
            g = got[plane][step]
            for k in ("step_ps", "buckets", "attention_layout_ps", "host_offload_bytes", "overlaps"):
                assert g[k] == row[k], (name, plane, step, k)


# ---------------------------------------------------------------------------
# bytes
# ---------------------------------------------------------------------------

def test_serving_structure(gen):
    files, truth = gen("serving_tp2_w4")
    xs = pb.XSpace.FromString(files[0][1])
    tcs = [p for p in xs.planes if TC_RE.match(p.name)]
    assert len(tcs) == 2 and not any("SparseCore" in p.name for p in xs.planes)
    overlaps = 0
    for p in tcs:
        assert "device_type_string" not in _stats(p.stats, p)
        assert {ln.name for ln in p.lines} == {"XLA Modules", "XLA Ops", "XLA TraceMe"}
        line = next(ln for ln in p.lines if ln.name == "XLA Ops")
        assert all("device_offset_ps" in _stats(e.stats, p) for e in line.events)
        ops = _ops(p)
        overlaps += sum(1 for a, b in pairwise(ops) if b[0] == a[1] - 1)
        assert all(b[0] >= a[1] - 1 for a, b in pairwise(ops))  # no nesting, at most 1 ps overlap
        for i, (_, _, name, md) in enumerate(ops):
            ms = _stats(md.stats, p)
            if name.startswith("quantized_matmul_kernel_"):
                assert "flops" not in ms and ms["model_flops"] == 0
                assert "f4e2m1fn[" in md.name and "bf16[" in md.name and "f32[" in md.name
                assert "/jit(quantized_matmul_kernel)/" in ms["tf_op"] and ms["tf_op"].endswith("/pallas_call:")
            if name.startswith("RPA-"):
                assert "flops" not in ms and "jit(ragged_paged_attention)" in ms["tf_op"]
            if truth["op_classes"][name]["layout"]:
                assert re.search(r"jit\(ragged_paged_attention\)/(transpose|reshape|copy):$", ms["tf_op"])
            if name.startswith("psum."):
                prev = ops[i - 1][2] if not ops[i - 1][2].startswith("slice-start") else ops[i - 2][2]
                assert prev.startswith("quantized_matmul_kernel_") and f"%{prev})" in md.name
            if name.startswith("slice-start"):
                assert "async-start(" in md.name and "calls=%async_computation" in md.name
            if name.startswith("copy-start"):
                assert "S(5)" not in md.name and truth["op_classes"][name]["bucket"] == "other_compute"
    assert overlaps > 0
    buckets = {v["bucket"] for v in truth["op_classes"].values()}
    assert "host_offload" not in buckets and "matmul_int8" not in buckets


@pytest.mark.parametrize("name", ["host_offload_train", "host_offload_loop"])
def test_host_copies_use_memory_space_5(name, gen):
    files, truth = gen(name)
    p = _tc_planes(files[0][1])[0]
    texts = {md.display_name: md.name for md in p.event_metadata.values()}
    host = [n for n, c in truth["op_classes"].items() if c["bucket"] == "host_offload"]
    assert host and all(n.startswith(("copy-start.", "copy-done.")) for n in host)
    for n in host:
        assert "S(5)" in texts[n]
        c = truth["op_classes"][n]
        assert (c["host_bytes"] > 0) == (c["role"] == "done")
    others = [n for n, c in truth["op_classes"].items() if n.startswith("copy-") and c["bucket"] != "host_offload"]
    assert all("S(5)" not in texts[n] for n in others)


def test_truth_buckets_of_old_scenarios_unchanged():
    _, truth = synthesize("dense_short_fsdp", steps=2, layers=1)
    assert "run_kind" not in truth  # extended truth only on the #14 scenarios
    fr = truth["summary"]["breakdown_fraction"]
    assert fr["host_offload"] == 0.0 and fr["matmul_int8"] == 0.0


@pytest.mark.parametrize("name", NEW)
def test_generation_is_deterministic(name, gen, tmp_path):
    files, truth = gen(name)
    again, truth2 = synthesize(name, **SMALL)
    assert again == files and truth2 == truth
    other, _ = synthesize(name, seed=1, **SMALL)
    assert other[0][1] != files[0][1]


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real-traces not present")
def test_op_families_of_real_captures_are_synthesized(gen):
    import gzip

    def names(path: Path) -> set[str]:
        xs = pb.XSpace.FromString(gzip.decompress(path.read_bytes()))
        p = next(p for p in xs.planes if p.name == "/device:TPU:0")
        return {(md.display_name or md.name).split(".")[0] for md in p.event_metadata.values()}

    fam = ("quantized_matmul_kernel_", "RPA-", "psum", "slice-start", "slice-done", "copy-start", "copy-done",
           "all-to-all", "copy_bitcast_fusion")
    vllm = REAL / "vllm_w4_tp2_2026_01_12_00_26_20.xplane.pb.gz"
    if vllm.exists():
        real = names(vllm)
        synth = {n.split(".")[0] for n in gen("serving_tp2_w4")[1]["op_classes"]}
        for f in fam:
            assert any(n.startswith(f) for n in real) == any(n.startswith(f) for n in synth), f


# ---------------------------------------------------------------------------
# analysis vs truth (the classifier of #14)
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            from profanalyzer.findings.engine import run_rules
            from profanalyzer.model.documents import result_document
            from profanalyzer.pipeline.run import run_analysis

            out = tmp_path_factory.mktemp(name) / f"{name}.xplane.pb.gz"
            truth = write_scenario(name, out)
            a = run_analysis(out)
            doc = json.loads(json.dumps(result_document(a, run_rules(a))))
            cache[name] = (a, doc, truth)
        return cache[name]

    return get


@pytest.mark.parametrize("name", NEW)
def test_analysis_buckets_match_truth(name, analysed):
    a, _, truth = analysed(name)
    want = truth["summary"]["breakdown_fraction"]
    for b in set(want) | set(a.breakdown):
        got = a.breakdown[b].fraction if b in a.breakdown else 0.0
        assert got == pytest.approx(want.get(b, 0.0), abs=0.01), f"{name}: {b} {got:.4f} vs {want.get(b, 0.0):.4f}"
    assert a.breakdown["idle"].fraction < 0.01 or name == "host_offload_loop"


@pytest.mark.parametrize("name", NEW)
def test_analysis_host_offload_and_precision(name, analysed):
    a, _, truth = analysed(name)
    sm = truth["summary"]
    assert a.breakdown["host_offload"].fraction == pytest.approx(sm["host_offload"]["fraction"], abs=0.01)
    for b in ("matmul_bf16", "matmul_fp8", "matmul_int8"):
        got = a.breakdown[b].fraction if b in a.breakdown else 0.0
        assert got == pytest.approx(sm["breakdown_fraction"].get(b, 0.0), abs=0.01), b


@pytest.mark.parametrize("name", NEW)
def test_analysis_run_kind(name, analysed):
    _, doc, truth = analysed(name)
    assert doc["workload"]["run_kind"] == truth["run_kind"]

