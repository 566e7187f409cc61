"""profanalyzer on real TPU captures nobody on this project wrote
(../shared/real-traces/, README there): the expert reading of each, checked
against an independent per-op sum (tests/realcap.py) and against what must and
must not be recommended. Skipped when the folder is absent."""

from __future__ import annotations

import functools

import pytest
import realcap

from profanalyzer.classify import MATMUL_BUCKETS
from profanalyzer.core.hardware import FP8_MAX_SPEEDUP

POINTS = 0.02  # bucket shares within 2 points of the independent per-op sum


@functools.cache
def _analysis(name: str):
    from profanalyzer.pipeline.run import run_analysis

    return run_analysis(realcap.real_path(name))


@functools.cache
def _findings(name: str):
    from profanalyzer.findings.engine import run_rules

    return run_rules(_analysis(name))


def _shares(a) -> dict[str, float]:
    b = {k: v.fraction for k, v in a.breakdown.items()}
    b["matmul"] = sum(b.pop(k) for k in list(b) if k in MATMUL_BUCKETS)
    return b


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_buckets_match_an_independent_per_op_sum(name):
    a = _analysis(name)
    ref = realcap.per_op_reading(name)
    got = _shares(a)
    for bucket, ps in ref["buckets"].items():
        assert got[bucket] == pytest.approx(ps / ref["step_ps"], abs=POINTS), bucket
    for bucket, share in got.items():  # nothing the reference does not see
        if bucket not in ref["buckets"] and bucket != "idle":
            assert share < POINTS, bucket
    assert got["idle"] < 0.01
    assert got["idle"] == pytest.approx(ref["idle_ps"] / ref["step_ps"], abs=0.005)
    a.self_check()


def test_vllm_serving_step():
    a = _analysis(realcap.VLLM)
    s = _shares(a)
    assert 0.33 < s["matmul"] < 0.43 and a.breakdown["matmul_bf16"].fraction == pytest.approx(s["matmul"], abs=0.005)
    assert 0.30 < s["attention"] < 0.42
    parts = a.bucket_ops
    assert parts["attention_kernel"].fraction > 0.28 and parts["attention_unfused"].fraction < 0.01
    assert 0.03 < parts["attention_layout"].fraction < 0.08
    assert 0.045 < s["all_reduce"] < 0.065
    # FLOPs from the kernels' operand shapes (the trace has none): ~32 TFLOP per step per core, MFU ~0.42
    assert a.bucket_ops["matmul_bf16"].flops == pytest.approx(32e12, rel=0.1)
    assert 0.35 < a.utilisation.mfu < 0.5
    quant = [op for op in a.top_ops if "kernel:quantized_matmul" in op.tags]
    assert quant and all("precision:w4a16" in op.tags and "operand shapes" in op.reason for op in quant)
    assert a.run_kind.kind == "inference" and a.run_kind.reasons
    assert a.chip_source.startswith("assumed")
    assert a.collectives["all_reduce"].critical_path_ps > 0.9 * a.collectives["all_reduce"].exposed_ps
    assert "unknown" not in a.collectives or a.collectives["unknown"].count == 0
    assert not a.communication.unmatched


def test_vllm_findings_are_serving_advice():
    f = _findings(realcap.VLLM)
    codes = [r.code for r in f.recommendations]
    assert f.workload.run_kind == "inference"
    assert "tensor parallelism" in f.workload.primary_sharding.lower()
    for quiet in ("RM001", "FP001", "TK001", "SC001", "SH001", "SH002", "SH003"):
        assert quiet not in codes, quiet
    for fire in ("SH004", "TK005"):
        assert fire in codes, fire
    # FP002's premise (these matmuls run on the BF16 MXU) is contradicted by their measured rate (above the BF16
    # peak): it is not ranked (#32 item 6)
    assert "FP002" not in codes
    text = " ".join(" ".join(r.actions) for r in f.recommendations)
    for training_only in ("use_qwix_quantization", "per_device_batch_size", "remat_policy", "E5M2"):
        assert training_only not in text


def test_serving_fp8_estimate_is_bounded_by_the_recipes():
    """Where FP002 fires (the serving sample, BF16 matmuls below the BF16 peak) its saving is bounded by the
    fastest published recipe (1.54x end to end) and says the guide's typical figure and the recipes' range."""
    from conftest import analysis_of, findings_of

    step = analysis_of("serving_tp2_w4").steps.step_time_ps["mean"]
    fp = next(r for r in findings_of("serving_tp2_w4").recommendations if r.code == "FP002")
    assert fp.estimated_saving_ps <= (1 - 1 / FP8_MAX_SPEEDUP) * step + 1
    assert any("1.3x" in x and "1.54x" in x for x in fp.assumptions)


def test_v6e_host_offload_loop():
    a = _analysis(realcap.V6E)
    assert a.breakdown["host_offload"].fraction == pytest.approx(0.965, abs=0.01)
    assert a.breakdown["other_compute"].fraction < 0.05
    ho = a.host_offload
    assert ho.bytes_per_step == pytest.approx(32.2e9, rel=0.02)
    assert 30 < ho.gbps < 55
    assert a.run_kind.kind == "inference"
    assert a.chip_source.startswith("device_type_string")
    assert a.utilisation.mfu is None or a.utilisation.mfu < 0.01
    f = _findings(realcap.V6E)
    assert f.recommendations and f.recommendations[0].code == "HO001"
    top = f.recommendations[0]
    assert top.estimated_saving_fraction > 0.5
    assert not any(r.code in ("RM001", "FP001", "TK001") for r in f.recommendations)


def test_v6e_host_offload_card_checks_the_hbm_headroom():
    """With memory read, keeping the 16.1 GB of offloaded arrays in HBM does not
    fit beside the 21.5 GB peak on a 33.6 GB v6e core: HO001 falls back to
    halving the bytes (L1) and says why."""
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import RunOptions, run_analysis

    a = run_analysis(realcap.real_path(realcap.V6E), RunOptions(memory=True))
    ho = next(r for r in run_rules(a).recommendations if r.code == "HO001")
    assert a.memory is not None and a.memory.host_offload_bytes == pytest.approx(16.1e9, rel=0.01)
    assert any("does not fit" in x for x in ho.assumptions)
    assert ho.estimated_saving_ps == pytest.approx(0.5 * a.host_offload.ps)


def test_v6e_cli_reads_memory_when_a_memory_rule_fires(capsys, tmp_path, monkeypatch):
    """Without --memory, HO001 (which trades HBM for time) fires: the CLI reads the
    HLO proto's buffer assignment and runs the rules again, so the card states the
    headroom in bytes instead of 'memory not read'."""
    import json

    from conftest import run_cli

    out = tmp_path / "a.json"
    rc, _, err = run_cli(capsys, "analyze", realcap.real_path(realcap.V6E), "--json", out, "--no-html", "-q")
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert doc["memory"] is not None and doc["memory"]["peak_bytes"] > 0
    ho = next(r for r in doc["recommendations"] if r["code"] == "HO001")
    line = next(x for x in ho["assumptions"] if "GiB needed" in x)
    assert line.startswith(f"+{16.1e9 / 2**30:.1f} GiB needed") and "does not fit" in line
    assert not any("memory not read" in x for x in ho["assumptions"])
