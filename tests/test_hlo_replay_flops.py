"""FLOPs of a replayed compiled program (issue #25): derived from the HLO
(profanalyzer.read.hlo.flops), written on the replayed ops as XProf's `flops`
stat, so the predicted MFU, TFLOP/s per op and the roofline have them.

Two truths, both from outside the code under test:

* the compiler's `cost_analysis()` (`NAME.compiler.json`, per device). XLA's
  cost analysis visits a `while` body once (it does not multiply by the trip
  count) and counts elementwise work too; so the HLO's dot/convolution FLOPs
  counted once per instruction are a lower bound of it, and close on these
  matmul-dominated steps. Measured (after_codegen proto and text alike):
  0.985 (serving_decode) to 0.998 (mlp_fsdp_collective_matmul) of it; the
  MaxText llama3.1-8b dump 0.9988 of its compile.log's `Cost analysis`.
* the model: the corpus tool's dense and MLP train steps without remat do
  3 x the forward pass (forward, then two matmuls per matmul backward), the
  forward's matmuls known from the manifest's config. The replay's per-step
  FLOPs, loop bodies counted trip-count times, equal that exactly on all
  nine such programs (e.g. dense_fsdp 45,097,156,608 per TensorCore, 3.27x
  the cost analysis figure: the 4 layers run in a while loop)."""

from __future__ import annotations

import json
import math
from itertools import product
from pathlib import Path

import pytest
from conftest import run_cli

from profanalyzer.core.hardware import TPU7X
from profanalyzer.read.hlo.flops import (
    FlopsTable,
    accessed_bytes,
    convolution_flops,
    dot_flops,
    valid_window_pairs,
)
from profanalyzer.read.hlo.kernels import MaskTable, kernel_flops
from profanalyzer.read.hlo.load import read_program
from profanalyzer.read.hlo.model import Computation, Instruction, Module, Shape
from profanalyzer.read.hlo.replay import replay
from profanalyzer.read.hlo.schedule import schedule

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "compiled"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
PROGRAMS = {p["name"]: p for p in MANIFEST["programs"]}
DUMP = ROOT.parent / "shared" / "real-programs" / "maxtext_llama3.1-8b_tpu7x-16_fsdp_remat_full.tar.gz"
#: the HLO's dot/conv FLOPs (each instruction once) over cost_analysis flops: a lower bound (<= 1, with 1% for
#: float rounding of the JSON figure), and at least LOWER: the elementwise work these steps do besides their matmuls
#: is under 2% of it (measured 0.985-0.998)
UPPER, LOWER = 1.01, 0.98


def _brute_pairs(out_n, k_n, in_n, stride, pad_low, lhs_dilate, rhs_dilate):
    n = 0
    for k, o in product(range(k_n), range(out_n)):
        u = o * stride - pad_low + k * rhs_dilate
        n += u % lhs_dilate == 0 and 0 <= u // lhs_dilate < in_n
    return n


def test_valid_window_positions_match_counting_them_one_by_one():
    for args in product((1, 3, 7), (1, 2, 5), (1, 4, 9), (1, 2, 3), (-2, 0, 3), (1, 2, 4), (1, 3)):
        assert valid_window_pairs(*args) == _brute_pairs(*args), args


def _comp(*ins: Instruction) -> Computation:
    return Computation("c", ins)


def test_dot_flops_from_the_contracting_dimensions():
    lhs = Instruction("a", "parameter", Shape("bf16", (8, 128, 64)), parameter_number=0)
    rhs = Instruction("b", "parameter", Shape("bf16", (8, 64, 32)), parameter_number=1)
    dot = Instruction("d", "dot", Shape("f32", (8, 128, 32)), operands=("a", "b"),
                      attrs=(("lhs_batch_dims", "{0}"), ("lhs_contracting_dims", "{2}"), ("rhs_batch_dims", "{0}"),
                             ("rhs_contracting_dims", "{1}")))
    assert dot_flops(dot, _comp(lhs, rhs, dot)) == 2 * 8 * 128 * 32 * 64
    # no dimension numbers: nothing claimed
    bare = Instruction("d", "dot", Shape("f32", (8, 128, 32)), operands=("a", "b"), attrs=(("lhs_contracting_dims", "{7}"),))
    assert dot_flops(bare, _comp(lhs, rhs, bare)) is None


def test_a_1x1_convolution_is_a_matmul():
    # [b, f] x [i, o] -> [b, o] written as a convolution: 2*M*N*K
    x = Instruction("x", "parameter", Shape("bf16", (512, 256)), parameter_number=0)
    w = Instruction("w", "parameter", Shape("bf16", (256, 1024)), parameter_number=1)
    conv = Instruction("c", "convolution", Shape("f32", (512, 1024)), operands=("x", "w"), attrs=(("dim_labels", "bf_io->bf"),))
    assert convolution_flops(conv, _comp(x, w, conv)) == 2 * 512 * 1024 * 256
    grouped = Instruction("c", "convolution", Shape("f32", (512, 1024)), operands=("x", "w"),
                          attrs=(("dim_labels", "bf_io->bf"), ("feature_group_count", "2")))
    assert convolution_flops(grouped, _comp(x, w, grouped)) == 2 * 512 * 1024 * 128


def test_an_in_place_update_moves_the_update_not_the_buffer():
    buf = Instruction("p0", "parameter", Shape("bf16", (64, 1024)), parameter_number=0)
    upd = Instruction("p1", "parameter", Shape("bf16", (1, 1024)), parameter_number=1)
    i = Instruction("p2", "parameter", Shape("s32"), parameter_number=2)
    dus = Instruction("dus", "dynamic-update-slice", Shape("bf16", (64, 1024)), operands=("p0", "p1", "p2", "p2"),
                      is_root=True)
    body = Computation("body", (buf, upd, i, dus))
    a, b, k = (Instruction(n, "parameter", s.shape, parameter_number=j) for j, (n, s) in enumerate((("A", buf), ("B", upd), ("K", i))))
    fus = Instruction("f", "fusion", Shape("bf16", (64, 1024)), operands=("A", "B", "K"), called=("body",))
    entry = Computation("main", (a, b, k, fus), is_entry=True)
    m = Module("m", (body, entry), "main")
    # read the update and the index, write the update; the 128 KiB buffer is neither read nor written whole
    assert accessed_bytes(m, fus, entry) == 2 * 1024 * 2 + 1024 * 2 + 4


def _static(module) -> int:
    """Each instruction's FLOPs once (what the compiler's cost analysis counts, a loop body once)."""
    t = FlopsTable(module)
    seen, total = set(), 0
    for r in schedule(module):
        if r.sparsecore or r.name in seen:
            continue
        seen.add(r.name)
        total += t.of(r.instruction, module.by_name[r.computation]) or 0
    return total


FORMS = ("after_codegen.hlo.pb.gz", "hlo.txt.gz")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hlo_flops_meet_the_compilers_cost_analysis(name, form):
    prog = read_program(CORPUS / f"{name}.{form}")
    m = prog.main
    t = FlopsTable(m)
    # every dot and convolution of the program is counted
    for c in m.computations:
        for ins in c.instructions:
            if ins.opcode in ("dot", "convolution"):
                assert t.of(ins, c), (ins.name, ins.attrs)
    truth = json.loads((CORPUS / f"{name}.compiler.json").read_text())["cost_analysis"]["flops"]
    ratio = _static(m) / truth
    assert LOWER <= ratio <= UPPER, ratio
    rep = replay(prog, TPU7X)
    # the step runs each op as often as the schedule says: a loop body trip-count times
    # (custom-call kernels: their FLOPs from their operand shapes, which the compiler's cost analysis omits)
    masks = MaskTable(m)

    def kernel(r) -> float:
        got = kernel_flops(r.instruction, m.by_name[r.computation], masks)
        return int(got[0]) if got is not None else 0

    per_row = sum(((t.of(r.instruction, m.by_name[r.computation]) or 0) + (
        kernel(r) if r.opcode == "custom-call" else 0)) * r.count for r in schedule(m) if not r.sparsecore)
    assert rep.step_flops == per_row >= _static(m)
    assert all(o.flops is None for o in rep.ops if o.sparsecore)


def _model_step_flops(p) -> float | None:
    """FLOPs per device of the corpus tool's train step (tools/compile_corpus.py): 3 x the forward matmuls."""
    c = p["config"]
    if p["remat"] != "none" or p["model"] not in ("dense", "mlp"):
        return None
    tokens, d = c["batch"] * c["seq"], c["d_model"]
    layer = 2 * (2 * tokens * d * c["d_ff"])  # w1, w2
    if p["model"] == "dense":  # wq, wk, wv, wo and the two attention einsums
        layer += 4 * (2 * tokens * d * c["heads"] * c["head_dim"])
        layer += 2 * (2 * c["batch"] * c["heads"] * c["seq"] ** 2 * c["head_dim"])
    forward = c["layers"] * layer + 2 * tokens * d * c["vocab"]  # + the unembedding
    return 3 * forward / p["devices"]


MODEL = sorted(n for n, p in PROGRAMS.items() if _model_step_flops(p) is not None)


def test_the_model_check_covers_the_dense_and_mlp_programs():
    assert len(MODEL) >= 9 and {"dense_fsdp", "tp_dense", "mlp_fsdp_collective_matmul", "fp8_mlp"} <= set(MODEL)


@pytest.mark.parametrize("name", MODEL)
def test_step_flops_are_the_models(name):
    p = PROGRAMS[name]
    rep = replay(read_program(CORPUS / p["files"]["hlo_proto_after_codegen"]), TPU7X)
    assert rep.step_flops == pytest.approx(_model_step_flops(p), rel=1e-9)


def test_predicted_mfu_and_tflops_per_op(capsys, tmp_path):
    src = CORPUS / "dense_fsdp.after_codegen.hlo.pb.gz"
    out = tmp_path / "a.json"
    rc, _, _ = run_cli(capsys, "analyze", src, "--json", out, "--no-html")
    assert rc == 0
    doc = json.loads(out.read_text())
    rep = replay(read_program(src), TPU7X)
    u = doc["utilisation"]
    assert u["mfu_flops_source"] == "flops" and u["flops_coverage"] == pytest.approx(1.0)
    peak = TPU7X.core_peak_bf16_flops
    assert u["mfu"] == pytest.approx(rep.step_flops / (rep.step_ps * 1e-12 * peak), rel=1e-6)
    ops = doc["top_ops"]
    mm = [o for o in ops if o["bucket"] == "matmul_bf16"]
    assert mm and all(o["flops"] and o["tflops_per_s"] for o in mm)
    # the roofline: every matmul with HBM bytes has a side (ops whose operands all sit in on-chip memory, S(1),
    # move no HBM bytes and stay unplaced)
    assert all(o["bound_by"] in ("compute", "hbm") for o in mm if o["bytes"])
    assert sum(1 for o in mm if o["bytes"]) >= len(mm) // 2
    assert any("FLOPs: derived from the HLO" in a and "PREDICTED" in a for a in doc["assumptions"])
    assert doc["steps"]["source"] == "the replayed schedule (compiled program)"


@pytest.mark.skipif(not DUMP.exists(), reason="../shared/real-programs MaxText dump not present")
def test_the_maxtext_dump_meets_its_compile_log_cost_analysis():
    import re

    prog = read_program(DUMP)
    line = next(ln for ln in prog.files.compile_log.splitlines() if ln.startswith("Cost analysis:"))
    truth = float(re.search(r"'flops': ([0-9.e+]+)", line).group(1))
    ratio = _static(prog.main) / truth
    assert LOWER <= ratio <= UPPER, ratio  # measured 0.9988
    assert not math.isclose(replay(prog, TPU7X).step_flops, truth, rel_tol=0.5)  # the 4 layers loop: ~2.97x
