"""HLO anti-patterns (issue 26): layout-only copies/transposes between
compute ops, bf16 promoted to f32 before a reduction, FP8 scales computed at
run time, reshapes and dynamic-update-slices outside fusions; each with its
measured time on the step and its fix. Truth: the HLO (a fixture module that
has each once, its quiet twin, and every corpus program)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profanalyzer.analyze.antipatterns import KINDS, detect
from profanalyzer.pipeline.run import run_analysis
from profanalyzer.read.hlo.load import read_program
from profanalyzer.read.hlo.text import parse_text
from profanalyzer.report.markdown import render_markdown

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "compiled"

FIXTURE = """HloModule jit_step, is_scheduled=true

%max_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %maximum = f32[] maximum(f32[] %a, f32[] %b)
}

%add_f32 (a.1: f32[], b.1: f32[]) -> f32[] {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %a.1, f32[] %b.1)
}

%amax_body (p0: bf16[256,1024]) -> f32[] {
  %p0 = bf16[256,1024]{1,0} parameter(0)
  %abs = bf16[256,1024]{1,0} abs(bf16[256,1024]{1,0} %p0)
  %cvt = f32[256,1024]{1,0} convert(bf16[256,1024]{1,0} %abs)
  %zero = f32[] constant(0)
  ROOT %red = f32[] reduce(f32[256,1024]{1,0} %cvt, f32[] %zero), dimensions={0,1}, to_apply=%max_f32
}

%quant_body (q0: bf16[256,1024], q1: f32[]) -> f8e4m3fn[256,1024] {
  %q0 = bf16[256,1024]{1,0} parameter(0)
  %q1 = f32[] parameter(1)
  %c = f32[256,1024]{1,0} convert(bf16[256,1024]{1,0} %q0)
  %bc = f32[256,1024]{1,0} broadcast(f32[] %q1), dimensions={}
  %dv = f32[256,1024]{1,0} divide(f32[256,1024]{1,0} %c, f32[256,1024]{1,0} %bc)
  ROOT %f8 = f8e4m3fn[256,1024]{1,0} convert(f32[256,1024]{1,0} %dv)
}

%mm_body (m0: f8e4m3fn[256,1024], m1: bf16[1024,512]) -> bf16[256,512] {
  %m0 = f8e4m3fn[256,1024]{1,0} parameter(0)
  %m1 = bf16[1024,512]{1,0} parameter(1)
  %m1c = f8e4m3fn[1024,512]{1,0} convert(bf16[1024,512]{1,0} %m1)
  ROOT %d = bf16[256,512]{1,0} dot(f8e4m3fn[256,1024]{1,0} %m0, f8e4m3fn[1024,512]{1,0} %m1c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%mm2_body (n0: bf16[512,256], n1: bf16[256,128]) -> bf16[512,128] {
  %n0 = bf16[512,256]{1,0} parameter(0)
  %n1 = bf16[256,128]{1,0} parameter(1)
  ROOT %d2 = bf16[512,128]{1,0} dot(bf16[512,256]{1,0} %n0, bf16[256,128]{1,0} %n1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: bf16[256,1024], w: bf16[1024,512], w2: bf16[256,128], cache: bf16[8,512], upd: bf16[1,512], i: s32[], kv: bf16[1024,1024]) -> (bf16[512,128], f32[256], bf16[8,512]) {
  %x = bf16[256,1024]{1,0} parameter(0)
  %w = bf16[1024,512]{1,0} parameter(1)
  %w2 = bf16[256,128]{1,0} parameter(2)
  %cache = bf16[8,512]{1,0} parameter(3)
  %upd = bf16[1,512]{1,0} parameter(4)
  %i = s32[] parameter(5)
  %kv = bf16[1024,1024]{1,0} parameter(7)
  %copy.7 = bf16[1024,1024]{1,0} copy(bf16[1024,1024]{1,0} %kv)
  %amax.1 = f32[] fusion(bf16[256,1024]{1,0} %x), kind=kLoop, calls=%amax_body
  %quant.1 = f8e4m3fn[256,1024]{1,0} fusion(bf16[256,1024]{1,0} %x, f32[] %amax.1), kind=kLoop, calls=%quant_body
  %mm.1 = bf16[256,512]{1,0} fusion(f8e4m3fn[256,1024]{1,0} %quant.1, bf16[1024,512]{1,0} %w), kind=kOutput, calls=%mm_body
  %transpose.1 = bf16[512,256]{0,1} transpose(bf16[256,512]{1,0} %mm.1), dimensions={1,0}
  %mm.2 = bf16[512,128]{1,0} fusion(bf16[512,256]{0,1} %transpose.1, bf16[256,128]{1,0} %w2), kind=kOutput, calls=%mm2_body
  %convert.9 = f32[256,512]{1,0} convert(bf16[256,512]{1,0} %mm.1)
  %zero.2 = f32[] constant(0)
  %reduce.3 = f32[256]{0} reduce(f32[256,512]{1,0} %convert.9, f32[] %zero.2), dimensions={1}, to_apply=%add_f32
  %reshape.4 = bf16[8,64]{1,0} reshape(bf16[1,512]{1,0} %upd)
  %zero.i = s32[] constant(0)
  %dynamic-update-slice.5 = bf16[8,512]{1,0} dynamic-update-slice(bf16[8,512]{1,0} %cache, bf16[1,512]{1,0} %upd, s32[] %i, s32[] %zero.i)
  ROOT %tuple.1 = (bf16[512,128]{1,0}, f32[256]{0}, bf16[8,512]{1,0}) tuple(bf16[512,128]{1,0} %mm.2, f32[256]{0} %reduce.3, bf16[8,512]{1,0} %dynamic-update-slice.5)
}
"""


def _quiet_twin() -> str:
    """The fixture without its anti-patterns: an unscaled bf16 path (no FP8, no amax), the transpose
    reading a parameter, the f32 convert read by no reduction, no standalone reshape / update."""
    t = FIXTURE.replace("f8e4m3fn", "bf16")
    t = t.replace("transpose(bf16[256,512]{1,0} %mm.1)", "transpose(bf16[256,512]{1,0} %xt)")
    t = t.replace("  %x = bf16[256,1024]{1,0} parameter(0)\n",
                  "  %x = bf16[256,1024]{1,0} parameter(0)\n  %xt = bf16[256,512]{1,0} parameter(6)\n")
    t = t.replace("f32[256]{0} reduce(f32[256,512]{1,0} %convert.9", "f32[256]{0} reduce(f32[256,512]{1,0} %zero.3")
    t = t.replace("  %zero.2 = f32[] constant(0)\n", "  %zero.2 = f32[] constant(0)\n  %zero.3 = f32[256,512]{1,0} broadcast(f32[] %zero.2), dimensions={}\n")
    t = t.replace("  %reshape.4 = bf16[8,64]{1,0} reshape(bf16[1,512]{1,0} %upd)\n", "")
    t = t.replace("  %copy.7 = bf16[1024,1024]{1,0} copy(bf16[1024,1024]{1,0} %kv)\n", "")
    t = t.replace("dynamic-update-slice(bf16[8,512]{1,0} %cache, bf16[1,512]{1,0} %upd, s32[] %i, s32[] %zero.i)",
                  "copy(bf16[8,512]{1,0} %cache)")
    return t


def test_fixture_has_each_kind_once():
    found = detect(parse_text(FIXTURE))
    # a page gather needs a paged cache written position by position: its own fixture below
    assert sorted(k for k, *_ in found) == sorted(set(KINDS) - {"page_gather"})
    by = {k: (n, d) for k, n, _, d in found}
    assert by["layout_copy"][0] == "transpose.1" and "between mm.1 and mm.2" in by["layout_copy"][1]
    assert by["f32_promotion"][0] == "convert.9" and "reduce.3" in by["f32_promotion"][1]
    assert by["runtime_fp8_scaling"][0] == "amax.1"
    assert by["unfused_reshape"][0] == "reshape.4" and by["unfused_update"][0] == "dynamic-update-slice.5"
    # a whole copy of a state buffer: the array of entry parameter kv (2 MiB)
    assert by["state_copy"][0] == "copy.7" and "entry parameter kv" in by["state_copy"][1]


def test_quiet_twin_has_none():
    assert detect(parse_text(_quiet_twin())) == []


def _corpus():
    return sorted({p.name.split(".")[0] for p in CORPUS.glob("*.hlo.pb.gz")})


def _fused_computations(module) -> set[str]:
    return {c for comp in module.computations for i in comp.instructions if i.opcode == "fusion" for c in i.called}


@pytest.mark.parametrize("name", _corpus())
def test_corpus_programs_against_their_hlo(name):
    path = CORPUS / f"{name}.hlo.pb.gz"
    module = read_program(path).main
    a = run_analysis(path)
    got = {(x.kind, x.op) for x in a.antipatterns}
    fused = _fused_computations(module)
    instr = {i.name: (c.name, i) for c in module.computations for i in c.instructions}
    # every standalone reshape / dynamic-update-slice of the scheduled computations is reported, none inside a fusion
    from profanalyzer.read.hlo.schedule import schedule

    rows = [r for r in schedule(module) if not r.sparsecore]
    for kind, opc in (("unfused_reshape", "reshape"), ("unfused_update", "dynamic-update-slice")):
        want = {r.name for r in rows if r.opcode == opc}
        assert {n for k, n in got if k == kind} == want
    for k, n in got:
        comp, ins = instr[n]
        assert comp not in fused  # outside every fusion
        if k == "layout_copy":
            assert ins.opcode in ("copy", "transpose") and ins.shape.memory_space == 0
    # the corpus casts to FP8 without scales: nothing computes an amax at run time
    assert not any(k == "runtime_fp8_scaling" for k, _ in got)
    # time: the op's self time per kept step per TensorCore, as the top-ops table measures it
    top = {op.name: op for op in a.top_ops}
    for x in a.antipatterns:
        if x.op in top:
            assert x.ps == pytest.approx(top[x.op].self_ps, rel=1e-6, abs=2)
        assert x.lever in ("fp8", "tokamax") and x.fix


def test_layout_copies_of_the_collective_matmul_program_cost_time():
    a = run_analysis(CORPUS / "mlp_fsdp_collective_matmul.hlo.pb.gz")
    copies = [x for x in a.antipatterns if x.kind == "layout_copy"]
    assert copies and all(x.ps > 0 and "between" in x.detail for x in copies)
    md = render_markdown(a, None)
    assert "HLO anti-patterns" in md and copies[0].op.replace("_", "\\_") in md


def test_no_program_no_antipatterns():
    a = run_analysis(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    assert a.antipatterns is None


def test_paged_cache_gathered_every_step_is_a_state_copy():
    """A gather of a state array's pages into a contiguous buffer (a paged KV cache made dense each step)
    is named a state copy when its time is that of moving the gathered bytes; the same gather into a
    small buffer is not."""
    from profanalyzer.analyze.antipatterns import _detect

    text = """HloModule decode, is_scheduled=true

ENTRY %main (pages: bf16[512,16,8,128], idx: s32[64,1], new: bf16[1,1,8,128], p: s32[]) -> (bf16[64,16,8,128], bf16[512,16,8,128]) {
  %pages = bf16[512,16,8,128]{3,2,1,0} parameter(0)
  %idx = s32[64,1]{1,0} parameter(1)
  %new = bf16[1,1,8,128]{3,2,1,0} parameter(2)
  %p = s32[] parameter(3)
  %z = s32[] constant(0)
  %written = bf16[512,16,8,128]{3,2,1,0} dynamic-update-slice(bf16[512,16,8,128]{3,2,1,0} %pages, bf16[1,1,8,128]{3,2,1,0} %new, s32[] %p, s32[] %p, s32[] %z, s32[] %z)
  %gather.1 = bf16[64,16,8,128]{3,2,1,0} gather(bf16[512,16,8,128]{3,2,1,0} %written, s32[64,1]{1,0} %idx), offset_dims={1,2,3}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16,8,128}
  ROOT %t = (bf16[64,16,8,128]{3,2,1,0}, bf16[512,16,8,128]{3,2,1,0}) tuple(%gather.1, %written)
}
"""
    found = [f for f in _detect(parse_text(text)) if f[0] == "page_gather" and f[1] == "gather.1"]
    assert len(found) == 1 and "pages" in found[0][3] and found[0][5] == 1
    # the gathered pages relaid out for an einsum: the same cost, named with the gather
    relaid = text.replace("ROOT %t = (bf16[64,16,8,128]{3,2,1,0}, bf16[512,16,8,128]{3,2,1,0}) tuple(%gather.1, %written)",
                          "%tr = bf16[64,8,16,128]{3,2,1,0} transpose(bf16[64,16,8,128]{3,2,1,0} %gather.1), "
                          "dimensions={0,2,1,3}\n  ROOT %t = (bf16[64,8,16,128]{3,2,1,0}, bf16[512,16,8,128]{3,2,1,0}) "
                          "tuple(%tr, %written)")
    rows = {f[1]: f for f in _detect(parse_text(relaid)) if f[0] == "page_gather"}
    assert set(rows) == {"gather.1", "tr"} and "relayout of the pages gather.1 gathered" in rows["tr"][3]
    small = text.replace("bf16[64,16,8,128]", "bf16[4,16,8,128]").replace("s32[64,1]", "s32[4,1]")
    assert not [f for f in _detect(parse_text(small)) if f[0] == "page_gather" and f[1] == "gather.1"]
    # a table the step only reads (an embedding looked up) is no cache: its gather is not a state copy
    table = text.replace("%written = bf16[512,16,8,128]{3,2,1,0} dynamic-update-slice(bf16[512,16,8,128]{3,2,1,0} "
                         "%pages, bf16[1,1,8,128]{3,2,1,0} %new, s32[] %p, s32[] %p, s32[] %z, s32[] %z)",
                         "%written = bf16[512,16,8,128]{3,2,1,0} negate(bf16[512,16,8,128]{3,2,1,0} %pages)")
    assert not [f for f in _detect(parse_text(table)) if f[0] == "page_gather" and f[1] == "gather.1"]
