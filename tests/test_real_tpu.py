"""Programs that ran on a real TPU (issue #31): the committed corpus
(sample_traces/real-tpu/, captured on a lent TPU v5e by tools/capture_tpu.py)
and the two runs in ../shared/real-tpu/ (skipped when absent). Each archive
holds the capture, the XLA dump of the same module and truth.json (the host's
wall clock, the compiler's figures)."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from profanalyzer.findings.engine import run_rules
from profanalyzer.pipeline.run import RunOptions, run_analysis

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "real-tpu"
SHARED = ROOT.parent / "shared" / "real-tpu"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())

#: Captures the manifest marks incomplete (no device plane, or steps captured in part; it says why):
#: their dump and wall clock stand.
NO_DEVICE = {Path(p["archive"]).name.removesuffix(".tar.gz") for p in MANIFEST["programs"]
             if not p.get("capture_complete", True)}

#: XProf names a decode step's cache contractions by their einsum's dot_general under the attention scope;
#: the cache is the operand with a time axis (`bhd,bthd->bht`, `bht,bthd->bhd`; not a projection `bd,de->be`).
XPROF_ATTENTION_DOT = re.compile(r"/attention/[a-z]+,[a-z]*t[a-z]*->[a-z]+/dot_general")


def _archives() -> list[Path]:
    out = sorted(CORPUS.glob("*.tar.gz"))
    out += sorted(SHARED.glob("*.tar.gz")) if SHARED.is_dir() else []
    return out


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> dict[str, Path]:
    """archive stem -> its unpacked folder (logdir/, dump/, truth.json)."""
    base = tmp_path_factory.mktemp("real_tpu")
    out = {}
    for a in _archives():
        with tarfile.open(a) as tar:
            top = tar.getmembers()[0].name.split("/")[0]
            tar.extractall(base / a.name.removesuffix(".tar.gz"), filter="data")
        out[a.name.removesuffix(".tar.gz")] = base / a.name.removesuffix(".tar.gz") / top
    return out


_CACHE: dict[tuple[str, str], object] = {}


def _analysis(folder: Path, what: str):
    key = (str(folder), what)
    if key not in _CACHE:
        _CACHE[key] = run_analysis(folder / what, RunOptions(top_ops=10_000))
    return _CACHE[key]


def test_a_capture_without_device_planes_is_one_clear_error(unpacked):
    """The capture the manifest marks (the profiler stopped before the device ran) is refused with the
    reader's one-line error, and its dump still analyses."""
    from profanalyzer.core.errors import NoTpuPlanesError

    for name in NO_DEVICE & set(unpacked):
        if b"/device:TPU:" in next((unpacked[name] / "logdir").rglob("*.xplane.pb")).read_bytes():
            continue  # a device plane, steps in part: not this test's case
        with pytest.raises(NoTpuPlanesError, match="no TPU device planes"):
            run_analysis(unpacked[name] / "logdir")


def test_corpus_manifest_covers_the_issue():
    """>= 12 programs and >= 5 one-lever pairs, each pair's programs in the corpus."""
    names = {p["workload"] for p in MANIFEST["programs"]}
    assert len(names) >= 12
    assert len(MANIFEST["pairs"]) >= 5
    for pair in MANIFEST["pairs"]:
        assert pair["before"] in names and pair["after"] in names
    for p in MANIFEST["programs"]:
        assert (CORPUS / p["archive"]).is_file()
        assert p["device_kind"] == "TPU v5 lite" and p["measured_step_ms"] > 0


def test_corpus_paths_are_rewritten(unpacked):
    """No machine path of the capture host is left in a committed file."""
    for name, folder in unpacked.items():
        if not (CORPUS / f"{name}.tar.gz").exists():
            continue
        for f in folder.rglob("*"):
            if f.is_file():
                data = f.read_bytes()
                assert b"/home/" not in data and b"site-packages" not in data and b"capture_tpu_" not in data, f


def test_the_chip_is_read_from_the_capture_and_from_the_dump(unpacked):
    """TPU v5e from the device planes' device_type_string and from the dump's target_arguments.txt."""
    for name, folder in unpacked.items():
        dump = _analysis(folder, "dump")
        assert dump.hardware.key == "v5e", name
        assert "target_arguments" in dump.chip_source, name
        if name in NO_DEVICE:
            continue
        cap = _analysis(folder, "logdir")
        assert cap.hardware.key == "v5e", name
        assert "device_type_string" in cap.chip_source and "assumed" not in cap.chip_source, name


def test_no_fp8_advice_on_a_chip_without_fp8(unpacked):
    """v5e's MXU has no FP8: FP001/FP002 are quiet; where BF16 matmuls are worth it, the lever is int8
    with a MaxText override that quantizes (quantization=int8, not use_qwix_quantization alone)."""
    int8 = 0
    for name, folder in ((n, f) for n, f in unpacked.items() if n not in NO_DEVICE):
        f = run_rules(_analysis(folder, "logdir"))
        codes = {r.code for r in f.recommendations}
        assert not codes & {"FP001", "FP002"}, (name, codes)
        for r in f.recommendations:
            if r.code == "FP003":
                int8 += 1
                text = " ".join(r.actions)
                assert "int8" in text and "fp8" not in text.replace("fp8_full is", ""), (name, r.actions)
    assert int8 >= 3


def _xprof_attention(a) -> tuple[float, float]:
    """(time of the ops XProf names as attention dot_generals, the part of it in the attention bucket)."""
    named = [op for op in a.top_ops if XPROF_ATTENTION_DOT.search(op.tf_op or "")]
    return sum(op.self_ps for op in named), sum(op.self_ps for op in named if op.bucket == "attention")


def test_decode_attention_is_attention(unpacked):
    """The q.K and p.V contractions over a KV cache (convolution fusions, or loop fusions that multiply
    and reduce) are attention: >= 90% of the XProf-named attention time, decided from the program."""
    decode = [n for n in unpacked if "decode" in n]
    assert len(decode) >= 4
    for name in decode:
        a = _analysis(unpacked[name], "logdir")
        total, attention = _xprof_attention(a)
        if total == 0:  # no einsum over the cache: a paged-attention kernel reads it (its time is the cache's)
            assert [op for op in a.kernel_ops if op.bucket == "attention"], name
            assert a.decode_cache is not None and a.decode_cache.ps > 0, name
            continue
        assert attention >= 0.9 * total, (name, attention / total)
        assert a.bucket_ops["attention_decode"].ps > 0, name
        # splash is a prefill / training kernel: never the decode lever
        assert "TK001" not in {r.code for r in run_rules(a).recommendations}, name


def test_training_attention_is_not_decode(unpacked):
    """A training step's attention contracts activations, not a cache: nothing is filed as decode."""
    for name in (n for n in unpacked if n.startswith(("train_", "long_"))):
        assert _analysis(unpacked[name], "logdir").bucket_ops["attention_decode"].ps == 0, name


def test_whole_cache_copies_are_named_with_their_time(unpacked):
    """A decode step that copies its KV cache whole (a copy of the parameter's array, or a slice update
    that moves the whole array) names each copy with its measured time; the step spends most of it there
    on the scan-carried cache."""
    for name in ("decode_gqa_scan_cache", "decode_gqa_bf16", "decode_mha_bf16"):
        if name not in unpacked:
            continue
        a = _analysis(unpacked[name], "logdir")
        copies = [x for x in a.antipatterns or () if x.kind == "state_copy"]
        assert copies, name
        assert all(x.ps > 0 and "entry parameter" in x.detail for x in copies), name
        assert sum(x.fraction for x in copies) >= 0.25, (name, sum(x.fraction for x in copies))
    # the pair: the scan-carried cache copies more than the loop-carried one, and ran slower
    by = {p["workload"]: p["measured_step_ms"] for p in MANIFEST["programs"]}
    scan = _analysis(unpacked["decode_gqa_scan_cache"], "logdir")
    carry = _analysis(unpacked["decode_gqa_bf16"], "logdir")

    def copied(a) -> float:
        return sum(x.ps for x in a.antipatterns or () if x.kind == "state_copy")

    assert copied(scan) > copied(carry) and by["decode_gqa_scan_cache"] > by["decode_gqa_bf16"]
    # the in-place side: one donated buffer per layer, written at the new position only: nothing copied
    if "decode_gqa_per_layer" in unpacked:
        inplace = _analysis(unpacked["decode_gqa_per_layer"], "logdir")
        assert copied(inplace) == 0 and by["decode_gqa_per_layer"] < 0.5 * by["decode_gqa_bf16"]


def test_gathered_pages_are_named_with_their_time(unpacked):
    """A paged cache gathered into a contiguous buffer every step: each gather and the copies that relay
    the gathered pages out are named (`page_gather`), with their measured time, most of the step; the same
    cache read by a paged-attention kernel has none."""
    if "decode_paged_gather" not in unpacked:
        pytest.skip("decode_paged_gather not in the corpus")
    a = _analysis(unpacked["decode_paged_gather"], "logdir")
    rows = [x for x in a.antipatterns or () if x.kind == "page_gather"]
    assert {x.opcode for x in rows} >= {"fusion", "copy"}
    assert all(x.ps > 0 for x in rows) and sum(x.fraction for x in rows) >= 0.4
    k = _analysis(unpacked["decode_paged_kernel"], "logdir")
    assert not [x for x in k.antipatterns or () if x.kind in ("page_gather", "state_copy")]

def test_train_steps_have_no_state_copy(unpacked):
    """Donated parameters and optimizer state updated in place: no whole copy is named."""
    for name in (n for n in unpacked if n.startswith("train_")):
        a = _analysis(unpacked[name], "logdir")
        assert not [x for x in a.antipatterns or () if x.kind == "state_copy"], name


def test_capture_step_matches_the_wall_clock(unpacked):
    """The step the capture shows is the host's back-to-back wall clock within 5% (the profiler's own
    cost), on every program of the corpus."""
    by = {p["workload"]: p["measured_step_ms"] for p in MANIFEST["programs"]}
    for name, folder in ((n, f) for n, f in unpacked.items() if n not in NO_DEVICE):
        truth = json.loads((folder / "truth.json").read_text())
        wall = by.get(truth["workload"], truth["wall_step_ms_pipelined_mean"])
        step_ms = _analysis(folder, "logdir").steps.step_time_ps["median"] / 1e9
        assert abs(step_ms / wall - 1) <= 0.05 or (wall - step_ms) <= 1.5, (name, step_ms, wall)


def _pairs(lever: str) -> list[tuple[str, str]]:
    return [(p["before"], p["after"]) for p in MANIFEST["pairs"] if p["lever"] == lever]


def test_mfu_counts_the_models_work_once(unpacked):
    """A lighter remat policy that ran faster never shows a lower MFU (recompute is not model work);
    HFU, every executed FLOP, stays beside it and is at least the MFU."""
    by = {p["workload"]: p["measured_step_ms"] for p in MANIFEST["programs"]}
    checked = 0
    for before, after in _pairs("remat policy"):
        a, b = _analysis(unpacked[before], "logdir"), _analysis(unpacked[after], "logdir")
        for x in (a, b):
            assert x.utilisation.hfu is not None and x.utilisation.hfu >= x.utilisation.mfu - 1e-9
        if by[after] < by[before]:
            assert b.utilisation.mfu >= a.utilisation.mfu, (before, after)
            checked += 1
    assert checked >= 1
    full = _analysis(unpacked["train_remat_full"], "logdir").utilisation
    assert full.hfu > full.mfu * 1.05  # full remat recomputes the forward: the two differ
    # every program: the hardware executed at least the model's work (a dequantized int8 decode included)
    for name, folder in ((n, f) for n, f in unpacked.items() if n not in NO_DEVICE):
        u = _analysis(folder, "logdir").utilisation
        assert u.mfu is not None and u.hfu is not None and u.hfu >= u.mfu - 1e-9, (name, u.mfu, u.hfu)


def test_a_loop_counts_its_bodys_flops_once(unpacked):
    """A while loop's own event encloses its body's ops, and XLA's cost of the loop is its body's: the loop
    holds no FLOPs of its own. The prefill step (layers in a scan) computes 2 x tokens x the weights it
    multiplies (every layer's projections and FFN, the unembedding for the last position only) plus the
    attention's 4 x batch x seq^2 x d per layer: the analysis' model FLOPs per step meet that within 3%."""
    name = "prefill_xla"
    if name not in unpacked:
        pytest.skip("prefill_xla not in the corpus")
    cfg = json.loads((unpacked[name] / "truth.json").read_text())["config"]
    a = _analysis(unpacked[name], "logdir")
    d, ff, layers, b, s = cfg["d"], cfg["ff"], cfg["layers"], cfg["batch"], cfg["seq"]
    kv = cfg["kv_heads"] * (d // cfg["heads"])
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * ff
    expected = 2 * b * s * per_layer * layers + 4 * b * s * s * d * layers + 2 * b * d * cfg["vocab"]
    step_s = a.steps.step_time_ps["mean"] / 1e12
    got = a.utilisation.mfu * step_s * a.hardware.per_core.peak_bf16_tflops * 1e12
    assert abs(got / expected - 1) <= 0.03, (got, expected)
    assert not [op for op in a.top_ops if op.name.split(".")[0] == "while" and (op.flops or 0) > 0]


def test_optimizer_phase_from_the_programs_structure(unpacked):
    """The update is the training step's work outside the forward (jvp) and backward: on the shared
    capture (no optimizer scope in its names) it is not 0; the Adam vs SGD-momentum pair's optimizer
    phases differ by the wall clock's difference within 40%; a small-batch step spends a large share there."""
    by = {p["workload"]: p["measured_step_ms"] for p in MANIFEST["programs"]}
    ((adam, sgdm),) = _pairs("optimizer")
    pa = _analysis(unpacked[adam], "logdir").phases["optimizer"].ps / 1e9
    ps = _analysis(unpacked[sgdm], "logdir").phases["optimizer"].ps / 1e9
    wall = by[adam] - by[sgdm]
    assert wall > 0 and abs((pa - ps) / wall - 1) <= 0.4, (pa, ps, wall)
    assert _analysis(unpacked["train_small_batch"], "logdir").phases["optimizer"].fraction >= 0.3
    if "v5e_train_remat_full" in unpacked:
        shared = _analysis(unpacked["v5e_train_remat_full"], "logdir")
        assert shared.phases["optimizer"].fraction >= 0.03


def test_splash_kernel_flops_from_shapes_and_block_mask(unpacked):
    """A splash kernel's FLOPs from its q/k/v shapes, its half (forward 4, dq 6, dkv 8 per pair and head
    dimension) and the block pairs its mask computes (the dump's proto carries the mask's literal:
    causal at 128 blocks computes 528 of 32x32 pairs, at 512 blocks 36 of 8x8)."""
    from profanalyzer.analyze.kernelflops import attention_kernel_flops
    from profanalyzer.read.hlo.proto import parse_hlo_proto_bytes

    for name, pairs in (("long_splash_b128", 528 / 1024), ("long_splash_b512", 36 / 64)):
        f = next((unpacked[name] / "dump").glob("*.after_optimizations.hlo.pb"))
        m = parse_hlo_proto_bytes(f.read_bytes(), f.name)
        kernels = {i.name for c in m.computations for i in c.instructions
                   if i.opcode == "custom-call" and "tpu_custom_call" in i.text and "block_q" in i.text}
        got = attention_kernel_flops(m, kernels)
        assert len(got) == len(kernels) >= 3, name
        dense = 2 * 8 * 4096 * 4096 * 128  # batch 2 x 8 heads, Sq = Skv = 4096, D = 128
        per_pair = sorted({round(flops / (dense * pairs), 6) for flops, _ in got.values()})
        assert per_pair == [4.0, 6.0, 8.0], (name, per_pair)


def test_a_capture_without_the_mask_keeps_kernel_flops_unknown(unpacked, tmp_path):
    """A capture's HloProto holds no constant's literal: alone, the splash kernels' FLOPs stay unknown
    rather than counted for every pair; with the XLA dump of the same compile beside it (the corpus'
    layout) the mask's values come from the dump and the FLOPs are known."""
    import shutil

    alone = tmp_path / "logdir"
    shutil.copytree(unpacked["long_splash_b512"] / "logdir", alone)
    a = run_analysis(alone, RunOptions(top_ops=10_000))
    kernels = [op for op in a.kernel_ops if op.bucket == "attention"]
    assert kernels and all(op.flops is None for op in kernels)
    assert all(k.computed_fraction is None for k in a.attention_kernels)
    beside = _analysis(unpacked["long_splash_b512"], "logdir")
    assert all(k.computed_fraction == 36 / 64 for k in beside.attention_kernels)
    assert any("XLA dump of the same compile" in n for n in beside.notes)
    assert not any("XLA dump of the same compile" in n for n in a.notes)


def test_kernel_flops_known_for_the_compute_time(unpacked):
    """FLOPs are known for >= 95% of the compute time of every complete capture (kernels included: splash
    from shapes and mask, grouped and custom matmuls from shapes)."""
    for name, folder in ((n, f) for n, f in unpacked.items() if n not in NO_DEVICE):
        cov = _analysis(folder, "logdir").utilisation.flops_coverage
        assert cov is not None and cov >= 0.95, (name, cov)


def _truth_step_ms(name: str, folder: Path) -> float:
    by = {Path(p["archive"]).name.removesuffix(".tar.gz"): p["measured_step_ms"] for p in MANIFEST["programs"]}
    if name in by:
        return by[name]
    return json.loads((folder / "truth.json").read_text())["wall_step_ms_pipelined_mean"]


def test_before_the_run_against_the_wall_clock(unpacked):
    """Each dump replayed with the chip's calibration (fitted on the corpus' complete captures) against
    the host's wall clock, on every program, ../shared's two included (not fitted on): median error
    <= 20%, >= 80% of the programs within 50%; kernels the compiler gives no estimate are named with
    their share of the predicted step."""
    from profanalyzer.core.hardware import V5E
    from profanalyzer.read.hlo.load import read_program
    from profanalyzer.read.hlo.replay import replay

    errors = {}
    for name, folder in unpacked.items():
        rep = replay(read_program(folder / "dump"), V5E)
        errors[name] = rep.step_ps / 1e9 / _truth_step_ms(name, folder) - 1
        if any(o.instruction.opcode == "custom-call" and o.how == "hbm_bytes" for o in rep.ops):
            assert any(a.startswith("not priced honestly") for a in rep.assumptions), name
    err = sorted(abs(e) for e in errors.values())
    median = err[len(err) // 2]
    within = sum(e <= 0.5 for e in err) / len(err)
    assert median <= 0.20 and within >= 0.8, (median, within, errors)


#: The corpus' one-lever pairs and the rule whose estimate is that lever's (the pair's after side is the
#: lever applied as the rule advises it: RM001's lighter policy is the dots pair, not no remat at all).
LEVER_PAIRS = (
    ("train_remat_full", "train_remat_dots", "RM001"),
    ("train_offload_names", "train_save_names", "HO001"),
    ("train_f32", "train_remat_none", "FP004"),
    ("long_dense", "long_splash_b512", "TK001"),
    ("long_splash_b128", "long_splash_b512", "TK007"),
    ("decode_gqa_per_layer", "decode_gqa_kv8", "FP005"),
    ("decode_paged_gather", "decode_paged_kernel", "TK006"),
    ("decode_gqa_bf16", "decode_gqa_per_layer", "TK006"),
    ("prefill_pallas_b128", "prefill_pallas_b512", "TK003"),
)


@pytest.mark.parametrize("before,after,code", LEVER_PAIRS, ids=[f"{p[2]}-{p[0]}" for p in LEVER_PAIRS])
def test_lever_estimate_meets_the_measured_pair(unpacked, before, after, code):
    """The step the rule predicts after its lever is within 20% of the step measured after it (the host's
    wall clock), and its saving within half of the measured gain; the rule is quiet on the after side."""
    by = {p["workload"]: p["measured_step_ms"] for p in MANIFEST["programs"]}
    a = _analysis(unpacked[before], "logdir")
    rec = {r.code: r for r in run_rules(a).recommendations}
    assert code in rec, (before, sorted(rec))
    step = a.steps.step_time_ps["median"] / 1e9
    predicted_after = step - rec[code].estimated_saving_ps / 1e9
    assert abs(predicted_after / by[after] - 1) <= 0.2, (predicted_after, by[after])
    gain = by[before] - by[after]
    assert abs(rec[code].estimated_saving_ps / 1e9 - gain) <= 0.5 * gain, (rec[code].estimated_saving_ps / 1e9, gain)
    if code != "RM001":  # the dots policy still recomputes: RM001 may advise the lighter one beyond it
        assert code not in {r.code for r in run_rules(_analysis(unpacked[after], "logdir")).recommendations}


def test_no_recommendation_under_half_a_percent(unpacked):
    """A finding that claims step time but saves under 0.5% of the step is not ranked."""
    for name, folder in ((n, f) for n, f in unpacked.items() if n not in NO_DEVICE):
        a = _analysis(folder, "logdir")
        step = a.steps.step_time_ps["mean"]
        for r in run_rules(a).recommendations:
            assert not r.claims or r.estimated_saving_ps >= 0.005 * step, (name, r.code)


def test_decode_cache_read_per_step_and_its_8bit_lever(unpacked):
    """What the attention over a KV cache reads from HBM per step: each contraction the slice (one layer) it
    reads of the stacked cache, every run; never above the HBM peak. A 16-bit cache whose reading takes
    >= 10% of the step gets FP005 (8-bit KV) with half that time; a training step has none."""
    shared = unpacked.get("v5e_serve_decode_int8")
    if shared is not None:
        a = _analysis(shared, "logdir")
        # K and V: 4 layers x batch 64 x 2048 positions x 16 heads x 128 x 2 bytes each
        assert a.decode_cache.bytes_per_step == 2 * 4 * 64 * 2048 * 16 * 128 * 2
    # every corpus decode: the whole cache its configuration holds (K and V, every layer), whatever the
    # layout (stacked, per layer, paged and gathered, read by a kernel, 8-bit with scales)
    for name, folder in unpacked.items():
        truth = json.loads((folder / "truth.json").read_text())
        cfg = truth.get("config") or {}
        if cfg.get("kind") != "decode" or name in NO_DEVICE:
            continue
        width = 1 if cfg.get("kv_dtype") == "int8" else 2
        whole = 2 * cfg["layers"] * cfg["batch"] * cfg["cache"] * cfg["kv_heads"] * (cfg["d"] // cfg["heads"]) * width
        assert _analysis(folder, "logdir").decode_cache.bytes_per_step == whole, name
    for name, folder in unpacked.items():
        if name in NO_DEVICE:
            continue
        a = _analysis(folder, "logdir")
        kv = a.decode_cache
        if "decode" not in name:
            assert kv is None, name
            continue
        if kv is not None:
            # above the HBM peak only where flagged (the contractions read VMEM copies staged by other ops)
            assert kv.gbps <= a.hardware.per_core.hbm_gbps * 1.02 or kv.staged, (name, kv.gbps)
            fp5 = [r for r in run_rules(a).recommendations if r.code == "FP005"]
            if kv.ps >= 0.1 * a.steps.step_time_ps["mean"] and set(kv.dtypes) <= {"bf16", "f16"}:
                assert fp5 and abs(fp5[0].estimated_saving_ps - 0.5 * kv.ps) <= 1e-3 * kv.ps, name


def test_before_the_run_names_host_transfers(unpacked):
    """Host offload in a compiled program: the host-memory transfers are priced over the host link where the
    chip publishes one, else at HBM bandwidth, and the page says which, with their bytes; the same program
    keeping its activations on the device has none."""
    from profanalyzer.core.hardware import V5E
    from profanalyzer.read.hlo.load import read_program
    from profanalyzer.read.hlo.replay import replay

    said = [x for x in replay(read_program(unpacked["train_offload_names"] / "dump"), V5E).assumptions
            if x.startswith("host transfers")]
    assert len(said) == 1 and "no host-link figure is published for TPU v5e" in said[0]
    assert float(said[0].split("(")[1].split(" MB")[0]) > 100
    assert not [x for x in replay(read_program(unpacked["train_save_names"] / "dump"), V5E).assumptions
                if x.startswith("host transfers")]


def test_the_optimizer_lever_when_the_update_is_large(unpacked):
    """OP001 rests on a measured fact: the update's time does not shrink with the batch (Adam at 256 and at
    8,192 tokens per step, within 20%); it fires where the update is a large share of a training step (the
    small batch), with 3/4 of it as the saving of 4 accumulated microbatches, and is quiet on the full batch."""
    small = _analysis(unpacked["train_small_batch"], "logdir")
    full = _analysis(unpacked["train_remat_none"], "logdir")
    a, b = small.phases["optimizer"].ps, full.phases["optimizer"].ps
    assert abs(a / b - 1) <= 0.2, (a, b)
    rec = {r.code: r for r in run_rules(small).recommendations}
    assert "OP001" in rec and rec["OP001"].estimated_saving_ps == pytest.approx(0.75 * a, rel=1e-6)
    assert "OP001" not in {r.code for r in run_rules(full).recommendations}
