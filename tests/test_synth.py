"""Tests of the TPU7x XSpace synthesizer (profanalyzer.synth).

Besides determinism and schema checks, an independent mini-reader below re-derives the
per-core, per-step buckets from the written bytes (device timespans, nesting, step
windows) and must agree exactly with the truth the synthesizer computed from its schedule.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from profanalyzer.read.xspace import xplane_pb2 as pb
from profanalyzer.synth import (
    COLL_BUCKETS,
    SCENARIOS,
    gzip_bytes,
    synthesize,
    truth_path_for,
    write_scenario,
)
from profanalyzer.synth.builder import PRODUCT_BUCKETS
from profanalyzer.synth.truth import robust_outliers

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
TC_RE = re.compile(r"^/device:TPU:(\d+)$")
SC_RE = re.compile(r"^/device:TPU:(\d+) SparseCore (\d+)$")


# ---------------------------------------------------------------------------
# independent mini reader
# ---------------------------------------------------------------------------

def _val(st: pb.XStat, plane: pb.XPlane):
    which = st.WhichOneof("value")
    if which == "ref_value":
        return plane.stat_metadata[st.ref_value].name
    return getattr(st, which)


def _stats(stats, plane, names) -> dict:
    return {names[s.metadata_id]: _val(s, plane) for s in stats}


def _events(line: pb.XLine, plane: pb.XPlane, names: dict):
    base = line.timestamp_ns * 1000
    for e in line.events:
        st = _stats(e.stats, plane, names)
        if "device_offset_ps" in st and "device_duration_ps" in st:
            start, dur = base + st["device_offset_ps"], st["device_duration_ps"]
        else:
            start, dur = base + e.offset_ps, e.duration_ps
        yield e, start, dur, st


def recompute_from_trace(data: bytes, truth: dict, host_prefix: str = "") -> dict:
    """Per TensorCore plane and step: step_ps, buckets, remat_ps, collectives -- from the bytes."""
    xs = pb.XSpace.FromString(data)
    classes = truth["op_classes"]
    # the truth names the product's buckets plus the issue-#14 buckets its scenario uses
    bucket_keys = list(next(iter(next(iter(truth["per_core"].values())).values()))["buckets"])
    out = {}
    for plane in xs.planes:
        if not TC_RE.match(plane.name):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        lines = {ln.name: ln for ln in plane.lines}
        windows = {}
        if "Steps" in lines:
            for e, s, d, _st in _events(lines["Steps"], plane, names):
                windows[int(plane.event_metadata[e.metadata_id].name)] = (s, s + d)
        else:
            want = truth["train_program"]["event_name"]
            for e, s, d, st in _events(lines["XLA Modules"], plane, names):
                if plane.event_metadata[e.metadata_id].name == want:
                    windows[int(st["group_id"])] = (s, s + d)
        ops = []
        for e, s, d, st in _events(lines["XLA Ops"], plane, names):
            md = plane.event_metadata[e.metadata_id]
            ops.append((s, s + d, md.display_name, st.get("all_reduce_unique_id", 0)))
        ops.sort(key=lambda x: (x[0], -x[1]))
        # self time via a nesting stack
        self_t = [o[1] - o[0] for o in ops]
        stack: list[int] = []
        for i, (s, e, _, _) in enumerate(ops):
            while stack and ops[stack[-1]][1] <= s:
                stack.pop()
            if stack:
                assert e <= ops[stack[-1]][1], "partial overlap on XLA Ops"
                self_t[stack[-1]] -= e - s
            stack.append(i)
        res = {}
        for step, (w0, w1) in sorted(windows.items()):
            b = dict.fromkeys(bucket_keys, 0)
            remat = 0
            colls: dict = {}
            starts: dict = {}
            for i, (s, e, name, uid) in enumerate(ops):
                if not (w0 <= s and e <= w1):
                    continue
                c = classes[name]
                b[c["bucket"]] += self_t[i]
                if c["remat"]:
                    remat += self_t[i]
                ct = c["collective"]
                if ct:
                    cc = colls.setdefault(ct, {"count": 0, "window_ps": 0, "exposed_ps": 0})
                    cc["exposed_ps"] += self_t[i]
                    if c["role"] == "start":
                        starts[uid] = s
                    elif c["role"] == "done":
                        cc["count"] += 1
                        cc["window_ps"] += e - starts.pop(uid)
                    elif c["role"] == "sync":
                        cc["count"] += 1
                        cc["window_ps"] += e - s
            b["idle"] = (w1 - w0) - sum(v for k, v in b.items() if k != "idle")
            res[str(step)] = {"step_ps": w1 - w0, "buckets": b, "remat_ps": remat, "collectives": colls}
        out[host_prefix + plane.name] = res
    return out


def compare(got: dict, truth: dict) -> None:
    assert set(got) == set(truth["per_core"])
    for plane, steps in truth["per_core"].items():
        assert set(got[plane]) == set(steps), plane
        for step, row in steps.items():
            g = got[plane][step]
            assert g["step_ps"] == row["step_ps"], (plane, step)
            assert g["buckets"] == row["buckets"], (plane, step)
            assert g["remat_ps"] == row["remat_ps"], (plane, step)
            want = {k: {f: v[f] for f in ("count", "window_ps", "exposed_ps")} for k, v in row["collectives"].items()}
            assert g["collectives"] == want, (plane, step)


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dense():
    return synthesize("dense_short_fsdp")


def _space(files) -> pb.XSpace:
    return pb.XSpace.FromString(files[0][1])


# ---------------------------------------------------------------------------
# catalog
# ---------------------------------------------------------------------------

def test_catalog_pairs_and_fields():
    need = {"dense_short_fsdp", "dense_long_fsdp_cp", "moe_short_fsdp_ep", "moe_large_pp", "remat_full",
            "remat_minimal", "offload_off", "offload_on", "bf16_dense", "fp8_dense", "attention_unfused",
            "attention_splash", "small_tiles", "tuned_vmem", "well_tuned", "offload_not_captured",
            "no_steps_line", "zero_timestamps", "straggler_core", "xss_names"}
    assert need <= set(SCENARIOS)
    for name, s in SCENARIOS.items():
        assert s.name == name and s.description
        if s.pair:
            other = SCENARIOS[s.pair]
            assert other.pair == name, f"{name} <-> {s.pair} not symmetric"
            assert {s.role, other.role} == {"before", "after"}
            before = s if s.role == "before" else other
            assert before.stresses is not None  # the lever the pair calibrates
    rows = {s.workload for s in SCENARIOS.values()}
    assert {"dense, short sequence", "dense, long sequence", "MoE, short sequence", "MoE, very large"} <= rows


# ---------------------------------------------------------------------------
# structure of the bytes
# ---------------------------------------------------------------------------

def test_planes_lines_and_stats(dense):
    files, truth = dense
    xs = _space(files)
    assert list(xs.hostnames) == truth["hostnames"]
    names = [p.name for p in xs.planes]
    for c in range(8):
        assert f"/device:TPU:{c}" in names
        assert f"/device:TPU:{c} SparseCore 0" in names and f"/device:TPU:{c} SparseCore 1" in names
    for n in ("/host:CPU", "/host:metadata", "Task Environment"):
        assert n in names
    for p in xs.planes:
        sn = {k: v.name for k, v in p.stat_metadata.items()}
        if TC_RE.match(p.name):
            lines = {ln.name for ln in p.lines}
            assert {"Steps", "XLA Modules", "XLA Ops", "Async XLA Ops", "XLA TraceMe"} <= lines
            ps = _stats(p.stats, p, sn)
            assert ps["device_type_string"] == "TPU v7x"
            assert ps["peak_teraflops_per_second"] == pytest.approx(1153.5)
            assert ps["has_megacore"] == 0
            cd = pb.CoreDetails.FromString(ps["core_details"])
            assert cd.device_ordinal == int(TC_RE.match(p.name).group(1)) and not cd.is_sparse_core
            assert cd.hostname == truth["hostnames"][0]
            ops = next(ln for ln in p.lines if ln.name == "XLA Ops")
            e = ops.events[0]
            est = _stats(e.stats, p, sn)
            assert "group_id" in est
            n_dev = sum(1 for e in ops.events if any(sn[s.metadata_id] == "device_offset_ps" for s in e.stats))
            assert 0 < n_dev < len(ops.events)
            for md in list(p.event_metadata.values())[:50]:
                ms = _stats(md.stats, p, sn)
                if "hlo_category" in ms:
                    assert ms["symbol_id"] != 0 and md.name.startswith("%" + md.display_name + " = ")
            async_line = next(ln for ln in p.lines if ln.name == "Async XLA Ops")
            st = _stats(async_line.events[0].stats, p, sn)
            assert st["_a"] == 1 and "done" in st["hlo_op"]
        m = SC_RE.match(p.name)
        if m:
            assert {ln.name for ln in p.lines} == {"Sparse Core Steps", "Sparse Core Modules", "Sparse Core Ops",
                                                  "Sparse Core Syncs"}
            mods = next(ln for ln in p.lines if ln.name == "Sparse Core Modules")
            st = _stats(mods.events[0].stats, p, sn)
            assert st["offload_core_id"] == int(m.group(1)) and st["tc_offload_start_id"] > 0
        if p.name == "/host:metadata":
            for md in p.event_metadata.values():
                assert sn[md.stats[0].metadata_id] == "Hlo Proto" and len(md.stats[0].bytes_value) > 1000
        if p.name == "Task Environment":
            ps = _stats(p.stats, p, sn)
            assert ps["profile_stop_time"] > ps["profile_start_time"] > 1.7e18


def test_op_naming_forms(dense):
    files, truth = dense
    names = set(truth["op_classes"])
    text = " ".join(names)
    assert re.search(r"reduce-scatter\.\d+\.cloned\.1\.call-start", text)
    assert re.search(r"all-gather\.\d+\.cloned\.1\.call-done", text)
    assert any(n.endswith(".remat") for n in names)
    assert any(n.startswith("splash_mha_fwd") for n in names)
    assert any(n.startswith("while.") for n in names)
    assert any(n.startswith("copy-start.") for n in names)
    xs = _space(files)
    p = next(p for p in xs.planes if p.name == "/device:TPU:0")
    sn = {k: v.name for k, v in p.stat_metadata.items()}
    tf_ops = [_stats(md.stats, p, sn).get("tf_op", "") for md in p.event_metadata.values()]
    assert any("/checkpoint/rematted_computation/" in t for t in tf_ops)
    assert any("transpose(jvp(Transformer))" in t for t in tf_ops)
    assert any("/optimizer/" in t for t in tf_ops)
    assert all(t.endswith(":") for t in tf_ops if t)
    texts = [md.name for md in p.event_metadata.values()]
    assert any("convolution(" in t or " dot(" in t for t in texts)
    assert any('custom_call_target="tpu_custom_call"' in t for t in texts)


def test_other_forms_across_catalog():
    forms = set()
    for name in ("offload_off", "moe_large_pp", "fp8_dense", "attention_unfused", "moe_short_fsdp_ep"):
        _, truth = synthesize(name, steps=2, layers=1)
        forms |= {(v["form"], v["collective"]) for v in truth["op_classes"].values() if v["collective"]}
        names = " ".join(truth["op_classes"])
        if name == "offload_off":
            assert "async-collective-start." in names and truth["summary"]["offload"]["verdict"] == "off"
            cats = {v["category"] for v in truth["op_classes"].values()}
            assert {"all-reduce-scatter fusion", "custom fusion", "all-reduce"} <= cats
        if name == "moe_large_pp":
            assert "collective-permute-start." in names
            assert truth["summary"]["breakdown_fraction"]["idle"] > 0.05
        if name == "moe_short_fsdp_ep":
            assert "gmm-" in names and "tgmm-" in names
            assert truth["summary"]["breakdown_fraction"]["matmul_other"] > 0
    assert ("cont", "all_gather") in forms and ("sync", "reduce_scatter") in forms
    assert ("pair", "other_collective") in forms and ("sync", "all_to_all") in forms


def test_fp8_dtypes():
    files, truth = synthesize("fp8_dense", steps=2, layers=1)
    xs = _space(files)
    p = next(p for p in xs.planes if p.name == "/device:TPU:0")
    texts = " ".join(md.name for md in p.event_metadata.values())
    assert "f8e4m3fn[" in texts and "f8e5m2[" in texts
    assert truth["summary"]["breakdown_fraction"]["matmul_fp8"] > 0.3


# ---------------------------------------------------------------------------
# truth <-> bytes
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dense_short_fsdp", "no_steps_line", "zero_timestamps", "moe_large_pp",
                                  "offload_off", "xss_names", "straggler_core"])
def test_truth_matches_bytes(name):
    files, truth = synthesize(name, steps=3, layers=2)
    compare(recompute_from_trace(files[0][1], truth), truth)


def test_truth_self_consistency(dense):
    _, truth = dense
    assert truth["chip"] == "tpu7x" and truth["hosts"] == 1
    assert truth["steps"]["warmup"] == [0]
    assert truth["steps"]["kept"] == [s for s in truth["steps"]["numbers"] if s != 0]
    for steps in truth["per_core"].values():
        for row in steps.values():
            assert set(row["buckets"]) == set(PRODUCT_BUCKETS)
            assert sum(row["buckets"].values()) == row["step_ps"]
            assert all(v >= 0 for v in row["buckets"].values())
            for ct, c in row["collectives"].items():
                assert c["exposed_ps"] == row["buckets"][ct] and c["window_ps"] >= c["exposed_ps"]
    sm = truth["summary"]
    assert sum(sm["breakdown_fraction"].values()) == pytest.approx(1.0, abs=1e-12)
    assert set(sm["exposed_fraction"]) == set(COLL_BUCKETS)
    for ct in COLL_BUCKETS:
        assert sm["exposed_fraction"][ct] == pytest.approx(sm["breakdown_fraction"][ct])
    assert 0.05 < sm["remat_fraction"] < 0.3
    assert sm["offload"]["verdict"] == "on"
    assert truth["workload"] == "dense, short sequence" and truth["stresses"] == "remat"


def test_warmup_rule_is_robust():
    # every sample's regular steps stay inside median + 3 MAD under both MAD conventions
    for name in ("dense_short_fsdp", "moe_large_pp", "straggler_core"):
        _, truth = synthesize(name, steps=8, layers=1)
        vals = [truth["steps"]["step_ps_mean_over_cores"][str(s)] for s in truth["steps"]["numbers"]]
        assert robust_outliers(vals) == [0]
        assert robust_outliers(vals, k=3.0 * 1.4826) == [0]


def test_capture_variants():
    files, truth = synthesize("offload_not_captured", steps=2, layers=1)
    xs = _space(files)
    assert not any(SC_RE.match(p.name) for p in xs.planes)
    assert truth["summary"]["offload"]["verdict"] == "not_visible"
    assert any(n.endswith(".call-start") for n in truth["op_classes"])

    files, truth = synthesize("no_steps_line", steps=2, layers=1)
    xs = _space(files)
    tc = [p for p in xs.planes if TC_RE.match(p.name)]
    assert all("Steps" not in {ln.name for ln in p.lines} for p in tc)
    assert truth["step_source"] == "XLA Modules"

    files, truth = synthesize("zero_timestamps", steps=2, layers=1)
    xs = _space(files)
    for p in xs.planes:
        if TC_RE.match(p.name):
            for ln in p.lines:
                assert ln.timestamp_ns == 0 and ln.events[0].offset_ps > 10**15

    files, truth = synthesize("xss_names", steps=2, layers=1)
    xs = _space(files)
    p = next(p for p in xs.planes if p.name == "/device:TPU:0")
    sn = {k: v.name for k, v in p.stat_metadata.items()}
    hit = [md for md in p.event_metadata.values() if "<script>alert(1)</script>" in md.display_name]
    assert hit and "<script>alert(1)</script>" in _stats(hit[0].stats, p, sn)["tf_op"]
    # hlo_category interned as ref_value
    md = next(md for md in p.event_metadata.values() if md.display_name.startswith("fusion."))
    refs = [s for s in md.stats if sn[s.metadata_id] == "hlo_category"]
    assert refs[0].WhichOneof("value") == "ref_value"


def test_straggler_visible():
    _, truth = synthesize("straggler_core", steps=3, layers=2)
    # the straggler computes longer; the others wait longer inside collectives
    comm = {p: sum(r["2"]["buckets"][c] for c in COLL_BUCKETS) for p, r in truth["per_core"].items()}
    compute = {p: r["2"]["buckets"]["matmul_bf16"] for p, r in truth["per_core"].items()}
    others = [p for p in comm if p != "/device:TPU:5"]
    assert comm["/device:TPU:5"] < min(comm[p] for p in others)
    assert compute["/device:TPU:5"] > 1.05 * max(compute[p] for p in others)


# ---------------------------------------------------------------------------
# files, determinism
# ---------------------------------------------------------------------------

def test_write_single_gz_and_determinism(tmp_path):
    out = tmp_path / "x.xplane.pb.gz"
    t1 = write_scenario("dense_short_fsdp", out, steps=3, layers=1)
    b1 = out.read_bytes()
    assert b1[:2] == b"\x1f\x8b" and b1[4:8] == b"\x00\x00\x00\x00"  # mtime 0
    assert b1[3] & 0x08 == 0  # no file name in the header
    tp = truth_path_for(out)
    assert tp.name == "x.truth.json" and json.loads(tp.read_text()) == t1
    out2 = tmp_path / "y.xplane.pb.gz"
    write_scenario("dense_short_fsdp", out2, steps=3, layers=1)
    assert out2.read_bytes() == b1
    assert tp.read_text() == truth_path_for(out2).read_text().replace('"y.xplane.pb.gz"', '"x.xplane.pb.gz"')
    pb.XSpace.FromString(gzip.decompress(b1))
    # another seed changes the bytes
    out3 = tmp_path / "z.xplane.pb"
    write_scenario("dense_short_fsdp", out3, steps=3, layers=1, seed=1)
    assert out3.read_bytes() != gzip.decompress(b1)


def test_multi_host_run_folder(tmp_path):
    truth = write_scenario("dense_short_fsdp", tmp_path / "run", hosts=2, steps=2, layers=1)
    files = sorted((tmp_path / "run" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(files) == 2 and (tmp_path / "run" / "truth.json").exists()
    assert [f.name for f in files] == [h + ".xplane.pb" for h in truth["hostnames"]]
    assert len(truth["per_core"]) == 16
    for i, f in enumerate(files):
        xs = pb.XSpace.FromString(f.read_bytes())
        assert list(xs.hostnames) == [truth["hostnames"][i]]
        got = recompute_from_trace(f.read_bytes(), truth, host_prefix=truth["hostnames"][i] + ":")
        sub = {k: v for k, v in truth["per_core"].items() if k.startswith(truth["hostnames"][i] + ":")}
        compare(got, {**truth, "per_core": sub})
        cd = None
        for p in xs.planes:
            if p.name == "/device:TPU:3":
                sn = {k: v.name for k, v in p.stat_metadata.items()}
                cd = pb.CoreDetails.FromString(_stats(p.stats, p, sn)["core_details"])
        assert cd.global_core_id == 8 * i + 3 and cd.global_chip_id == 4 * i + 1


def test_gzip_bytes_deterministic():
    a = gzip_bytes(b"abc" * 1000)
    assert a == gzip_bytes(b"abc" * 1000) and a[4:8] == b"\0\0\0\0"


SAMPLE_FILES = sorted(SAMPLES.glob("*.xplane.pb.gz"))
#: Scenarios added for issue #14 whose samples the lead writes when merging (`make samples`);
#: until then sample_traces/ may lack them. Empty this once sample_traces/ is regenerated.
PENDING_SAMPLES: frozenset[str] = frozenset()


@pytest.mark.skipif(not SAMPLE_FILES, reason="sample_traces not generated")
def test_samples_regenerate_identically(tmp_path):
    from profanalyzer.synth.samples import SAMPLE_SET

    have = {f.name for f in SAMPLE_FILES}
    want = {f"{n}.xplane.pb.gz" for n in SAMPLE_SET}
    assert have <= want and want - have <= {f"{n}.xplane.pb.gz" for n in PENDING_SAMPLES}
    for f in SAMPLE_FILES:
        assert f.stat().st_size < 3_000_000, f.name
        raw = f.read_bytes()
        assert raw[4:8] == b"\0\0\0\0"
        pb.XSpace.FromString(gzip.decompress(raw))
        truth = json.loads(truth_path_for(f).read_text())
        assert truth["scenario"] == f.name[: -len(".xplane.pb.gz")]
        spec = SCENARIOS[truth["scenario"]]
        heavy = [n for n in truth["steps"]["numbers"] if spec.heavy_every and n >= spec.heavy_every and n % spec.heavy_every == 0]
        assert truth["steps"]["warmup"] == [0] + heavy, f.name  # the warm-up, and periodic heavy steps (issue #16)
        assert sum(truth["summary"]["breakdown_fraction"].values()) == pytest.approx(1.0, abs=1e-9)
        assert truth["scenario"] in SCENARIOS and truth["expect"]["fire"] == list(SCENARIOS[truth["scenario"]].expect_fire)
    readme = (SAMPLES / "README.md").read_text()
    for name in SAMPLE_SET:
        assert f"`{name}`" in readme or name in PENDING_SAMPLES
    from profanalyzer.synth.samples import MULTI_HOST

    for d, kw in MULTI_HOST.items():
        ref = SAMPLES / d
        t = write_scenario(kw["name"], tmp_path / d, hosts=kw["hosts"], steps=kw["steps"], layers=kw["layers"])
        assert (ref / "truth.json").read_text() == (tmp_path / d / "truth.json").read_text()
        for rel in t["files"]:
            assert (ref / rel).read_bytes() == (tmp_path / d / rel).read_bytes(), rel
    # regenerate a few and compare (payload and truth byte for byte)
    for name in ("dense_short_fsdp", "moe_large_pp", "xss_names"):
        out = tmp_path / f"{name}.xplane.pb.gz"
        write_scenario(name, out)
        ref = SAMPLES / out.name
        assert gzip.decompress(out.read_bytes()) == gzip.decompress(ref.read_bytes()), name
        assert truth_path_for(out).read_text() == truth_path_for(ref).read_text(), name
