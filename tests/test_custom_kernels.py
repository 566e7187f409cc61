"""Custom kernels are what they compute (issue 26): a tpu_custom_call whose
name, scope, kernel metadata or operand shapes say matmul is a matmul, with
its precision from the operand types and FLOPs 2*M*N*K from the shapes;
attention kernels by their metadata. Truth: the synthesizer's
``custom_kernels`` (a Pallas matmul under a name that says nothing)."""

from __future__ import annotations

import pytest

from profanalyzer.classify import RULES, classify_op
from profanalyzer.pipeline.run import run_analysis
from profanalyzer.synth import SCENARIOS, write_scenario
from profanalyzer.synth.layers import CUSTOM_MATMUL_KERNEL

TPU = 'custom_call_target="tpu_custom_call"'


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "custom.xplane.pb"
    spec = SCENARIOS["dense_short_fsdp"].with_(name="custom_matmul", custom_matmul=True)
    truth = write_scenario(spec, path, steps=3, layers=1)
    return run_analysis(path), truth


def test_synthesized_unfamiliar_kernel_is_a_matmul_with_shape_flops(custom):
    a, truth = custom
    kernels = truth["custom_kernels"]
    assert kernels and all(k.startswith(CUSTOM_MATMUL_KERNEL) for k in kernels)
    by_name = {op.name: op for op in a.top_ops}
    for name, t in kernels.items():
        op = by_name[name]
        assert op.bucket == t["bucket"] == "matmul_bf16"
        assert "kernel:pallas_matmul" in op.tags and f"precision:{t['precision']}" in op.tags
        assert op.flops / op.count == pytest.approx(t["flops"], rel=1e-9)
        assert "operand shapes" in op.reason and "2*M*N*K" in op.reason


def test_old_scenarios_have_no_custom_kernel_truth():
    from profanalyzer.synth import synthesize

    _, truth = synthesize("dense_short_fsdp", steps=2, layers=1)
    assert "custom_kernels" not in truth


def test_one_general_kernel_rule_no_rule_per_kernel_name():
    names = [r.name for r in RULES]
    assert "matmul.kernel" in names and not any(n in names for n in ("matmul.megablox", "matmul.quantized"))


def test_optimized_module_kernel_typed_by_its_layout_constraints():
    # an optimized module prints bare operand names; the layout constraints carry the types
    text = (f"%blk.7 = bf16[2048,4096]{{1,0}} custom-call(%fusion.3, %param.9), {TPU}, "
            "operand_layout_constraints={f8e4m3fn[2048,1024]{1,0}, f8e4m3fn[1024,4096]{1,0}}")
    r = classify_op(text, "blk.7", "custom-call", "jit(f)/my_block/pallas_call:")
    # fp8 operands: a low-bit (quantized) matmul on the fp8 MXU path
    assert (r.bucket, r.precision, r.kernel) == ("matmul_fp8", "fp8", "quantized_matmul")
    assert r.shape_flops == 2.0 * 2048 * 4096 * 1024
    assert "operand layout constraints" in r.reason


def test_kernel_metadata_names_the_matmul():
    text = (f"%custom-call.5 = bf16[8,128,256]{{2,1,0}} custom-call(bf16[8,128,512]{{2,1,0}} %a, "
            f"bf16[8,512,256]{{2,1,0}} %b), {TPU}, "
            'frontend_attributes={kernel_metadata={xprof_metadata="{\\"kernel\\":\\"batched_matmul\\",\\"tm\\":128}"}}')
    r = classify_op(text, "custom-call.5", "custom-call", "")
    assert (r.bucket, r.kernel) == ("matmul_bf16", "pallas_matmul")
    assert "kernel metadata" in r.reason


def test_low_bit_operands_make_an_unfamiliar_matmul_quantized():
    text = (f"%k.2 = bf16[512,1024]{{1,0}} custom-call(bf16[512,2048]{{1,0}} %x, s4[2048,1024]{{1,0}} %w), {TPU}")
    r = classify_op(text, "k.2", "custom-call", "")
    assert (r.bucket, r.precision, r.kernel) == ("matmul_bf16", "w4a16", "quantized_matmul")


@pytest.mark.parametrize("text,display", [
    # elementwise: every matrix operand has the output's shape (a square matmul looks the same: not decided)
    (f"%k.1 = bf16[128,128]{{1,0}} custom-call(bf16[128,128]{{1,0}} %a, bf16[128,128]{{1,0}} %b), {TPU}", "k.1"),
    # a norm: one matrix and a 1-D scale
    (f"%k.3 = bf16[2048,4096]{{1,0}} custom-call(bf16[2048,4096]{{1,0}} %x, f32[4096]{{0}} %g), {TPU}", "k.3"),
    # shapes that multiply but no kernel: a plain custom call of another target
    ('%cc.1 = f32[64,32]{1,0} custom-call(f32[64,16]{1,0} %a, f32[16,32]{1,0} %b), custom_call_target="Sharding"',
     "cc.1"),
])
def test_quiet_when_nothing_says_matmul(text, display):
    r = classify_op(text, display, "custom-call", "")
    assert r.bucket == "other_compute" and r.kernel in (None, "pallas")


def test_attention_kernel_by_its_block_metadata():
    text = (f"%k.9 = bf16[2,32,4096,128]{{3,2,1,0}} custom-call(%q, %k, %v), {TPU}, "
            "operand_layout_constraints={bf16[2,32,4096,128]{3,2,1,0}, bf16[2,8,4096,128]{3,2,1,0}, "
            "bf16[2,8,4096,128]{3,2,1,0}}, "
            'frontend_attributes={kernel_metadata={xprof_metadata="{\\"block_q\\":512,\\"block_kv\\":1024}"}}')
    r = classify_op(text, "k.9", "custom-call", "")
    assert (r.bucket, r.kernel) == ("attention", "pallas")
    assert "kernel metadata" in r.reason


def _opaque(tmp_path_factory, counters: bool):
    path = tmp_path_factory.mktemp("opaque") / "opaque.xplane.pb"
    spec = SCENARIOS["dense_short_fsdp"].with_(name="opaque_kernel", custom_matmul=True, opaque_kernel=True,
                                               counters=counters)
    truth = write_scenario(spec, path, steps=3, layers=1)
    return run_analysis(path), truth, path


@pytest.fixture(scope="module")
def opaque(tmp_path_factory):
    return _opaque(tmp_path_factory, counters=True)


def test_counters_make_an_opaque_kernel_a_matmul(opaque):
    # name, metadata and operands say nothing; the synthesized counters show the MXU 72% busy
    from profanalyzer.analyze.counters import MXU_MATMUL
    from profanalyzer.synth.layers import OPAQUE_MATMUL_KERNEL

    a, truth, _ = opaque
    kernels = truth["custom_kernels"]
    assert kernels and all(k.startswith(OPAQUE_MATMUL_KERNEL) and v["evidence"] == "counters" for k, v in kernels.items())
    by_name = {op.name: op for op in a.top_ops}
    for name, t in kernels.items():
        op = by_name[name]
        assert op.bucket == t["bucket"] == "matmul_bf16"
        assert "kernel:pallas_matmul" in op.tags and f"precision:{t['precision']}" in op.tags
        assert "[counters.mxu]" in op.reason and "MXU 72% busy" in op.reason and f">= {MXU_MATMUL:.0%}" in op.reason
        assert not op.flops  # no operand shapes: FLOPs are not derivable, none invented
        assert truth["counters"][name]["utilisation"]["MXU"] >= MXU_MATMUL
    # the step's matmul share holds the kernel's time (re-bucketed before attribution, not only in the table)
    assert a.breakdown["matmul_bf16"].ps >= sum(by_name[n].self_ps for n in kernels) * 0.99


def test_opaque_kernel_without_counters_stays_other_compute(tmp_path_factory):
    a, truth, _ = _opaque(tmp_path_factory, counters=False)
    by_name = {op.name: op for op in a.top_ops}
    for name, t in truth["custom_kernels"].items():
        assert by_name[name].bucket == t["bucket"] == "other_compute"
        assert "[counters.mxu]" not in by_name[name].reason


def test_an_mxu_below_the_threshold_is_no_matmul_evidence(opaque, monkeypatch):
    # the same kernel at 72% MXU is left in other_compute when the threshold is above it
    import profanalyzer.analyze.counters as counters

    _, truth, path = opaque
    monkeypatch.setattr(counters, "MXU_MATMUL", 0.8)
    a = run_analysis(path)
    by_name = {op.name: op for op in a.top_ops}
    for name in truth["custom_kernels"]:
        assert by_name[name].bucket == "other_compute" and "[counters.mxu]" not in by_name[name].reason
    assert not any("[counters.mxu]" in o.reason for o in a.top_ops)
