"""Issue 32 item 3: a collective's bandwidth from the bytes it moves per
device (its shapes, its group and the algorithm's factor), not its
bytes_accessed (operands + result); above the link it is flagged, never shown
as a plain rate. Truth: the shapes and replica groups in the HLO text (the
vLLM TPU7x capture's all-reduce: bf16[1024,5120], groups of 2)."""

from __future__ import annotations

import dataclasses
import functools
import re

import pytest
import realcap

from profanalyzer.read.hlo.traffic import (
    group_size,
    moved_factor,
    name_free,
    traffic_of_text,
)

AR = ("%all-reduce = bf16[1024,5120]{1,0:T(8,128)(2,1)S(1)} all-reduce(bf16[1024,5120]{1,0:T(8,128)(2,1)S(1)} %b), "
      "channel_id=3, replica_groups=[1,2]<=[2], use_global_device_ids=true, to_apply=%add.1.clone")


@pytest.mark.parametrize("kind,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 2, 0.5), ("collective_permute", 8, 1.0), ("all_reduce", None, 2.0), ("all_gather", None, 1.0),
])
def test_factor_per_type(kind, n, factor):
    assert moved_factor(kind, n) == pytest.approx(factor)


@pytest.mark.parametrize("text,n", [
    ("x = f32[8]{0} all-reduce(f32[8]{0} %a), replica_groups={{0,1},{2,3}}, to_apply=%add", 2),
    ("x = f32[8]{0} all-reduce(f32[8]{0} %a), replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=%add", 8),
    ("x = f32[8]{0} all-reduce(f32[8]{0} %a), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%add", 2),
    ("x = f32[8]{0} all-reduce(f32[8]{0} %a), replica_groups={}, to_apply=%add", None),
    ("x = f32[8]{0} all-reduce(f32[8]{0} %a), to_apply=%add", None),
])
def test_group_from_the_text(text, n):
    assert group_size(text) == n


def test_bytes_from_shapes_on_every_form():
    t = traffic_of_text("all_reduce", AR)
    assert (t.buffer_bytes, t.group, t.moved_bytes) == (1024 * 5120 * 2, 2, 1024 * 5120 * 2)
    # an async all-gather on a thread: ((operands), result, context); no groups -> from the shapes
    sc = ("%ag.call-start = ((bf16[512,4096]{1,0}), bf16[32768,4096]{1,0}, u32[]{:S(2)}) call-start("
          "bf16[512,4096]{1,0} %a), async_execution_thread=\"sparsecore\", to_apply=%all-gather.17")
    t = traffic_of_text("all_gather", sc)
    assert (t.group, t.group_from) == (64, "shapes")
    assert t.buffer_bytes == 32768 * 4096 * 2 and t.moved_bytes == pytest.approx(t.buffer_bytes * 63 / 64)
    # a done: its operand is the start's (operand, result)
    t = traffic_of_text("all_gather", "%d = bf16[64]{0} all-gather-done((bf16[8]{0}, bf16[64]{0}) %s)")
    assert (t.buffer_bytes, t.group, t.moved_bytes) == (128, 8, 112)
    # no group and no shape ratio: the large-group bound, said
    t = traffic_of_text("all_reduce", "x = f32[4]{0} all-reduce(f32[4]{0} %a), to_apply=%add")
    assert t.group is None and t.moved_bytes == 32 and t.group_from.startswith("unknown")
    assert traffic_of_text("all_reduce", "all-reduce.3") is None  # a name, no shapes: unknown, not guessed


_FORMS = [
    ("all_reduce", AR),
    ("all_gather", "%ag.3.call-start = ((bf16[512,4096]{1,0}), bf16[32768,4096]{1,0}, u32[]{:S(2)}) call-start("
                   "bf16[512,4096]{1,0} %all-to-all.10), async_execution_thread=\"sparsecore\", to_apply=%all-gather.17"),
    ("all_gather", "%d.2 = bf16[64]{0} all-gather-done((bf16[8]{0}, bf16[64]{0}) %s.1)"),
    ("all_reduce", "x.4 = f32[8]{0} all-reduce(f32[8]{0} %a.1, f32[8]{0} %b.2), replica_groups={{0,1},{2,3}}, "
                   "to_apply=%add"),
    ("all_to_all", "%all-to-all.10 = bf16[4,1,2048]{2,1,0} all-to-all(bf16[4,1,2048]{2,1,0} %broadcast.8), "
                   "channel_id=49, replica_groups={{0,1,2,3}}, dimensions={0}, metadata={op_name=\"jit(f)/%x.1\"}"),
]


def _renamed(text: str, k: int) -> str:
    return re.sub(r"%([\w.\-]+)", lambda m: f"%{m.group(1)}_v{k}.{k}{k}", text)


@pytest.mark.parametrize("kind,text", _FORMS)
def test_names_change_no_traffic(kind, text):
    """Texts that differ by their instruction names alone share a key (`name_free`), and one traffic: what lets
    the analysis read each collective text of an unrolled program once."""
    want = traffic_of_text(kind, text)
    assert want is not None
    for k in range(1, 4):
        other = _renamed(text, k)
        assert other != text and name_free(other) == name_free(text)
        assert traffic_of_text(kind, other) == want


def test_mesh_axes_keep_their_names():
    """Mesh groups compare their quoted axis names: such a text is its own key."""
    x = "x = f32[8]{0} all-reduce(f32[8]{0} %a), replica_groups=mesh['%p'=2,'%q'=4] {'%p'}, to_apply=%add"
    y = x.replace("{'%p'}", "{'%q'}")
    assert (group_size(x), group_size(y)) == (2, 4)
    assert name_free(x) == x and name_free(y) == y


def test_a_table_reads_each_text_once(monkeypatch):
    """window_traffic computes one traffic per name-free text of a table, whatever its rows."""
    import numpy as np

    import profanalyzer.analyze.overlap as overlap
    from profanalyzer.core.vocab import COLLECTIVE_TYPES
    from profanalyzer.model.trace import OpMetadata

    texts = tuple(_renamed(AR, k) for k in range(40)) + (_FORMS[3][1],)
    n = len(texts)
    empty = ("",) * n
    md = OpMetadata(np.arange(n), texts, empty, empty, empty, empty, empty, empty, np.full(n, -1), np.full(n, -1),
                    *(np.full(n, np.nan) for _ in range(4)))
    calls = []
    monkeypatch.setattr(overlap, "traffic_of_text", lambda kind, text: calls.append(text) or traffic_of_text(kind, text))
    rows = np.r_[np.arange(n), np.arange(n)]
    types = np.full(len(rows), COLLECTIVE_TYPES.index("all_reduce"))
    cache: dict = {}
    moved, buf, group, kind = overlap.window_traffic(md, rows, types, cache)
    assert len(calls) == 2  # the 40 renamed all-reduces, then the other form
    want = traffic_of_text("all_reduce", AR)
    assert (moved[:40] == want.moved_bytes).all() and (group[:40] == 2).all()
    assert moved[40] == traffic_of_text("all_reduce", _FORMS[3][1]).moved_bytes
    assert (moved[n:] == moved[:n]).all()
    overlap.window_traffic(md, rows, types, cache)
    assert len(calls) == 2


@functools.cache
def _vllm():
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import run_analysis

    a = run_analysis(realcap.real_path(realcap.VLLM))
    return a, run_rules(a)


def test_vllm_all_reduce_moves_its_buffer_not_bytes_accessed():
    a, _ = _vllm()
    x = a.collective_diagnosis.types["all_reduce"]
    buf = 1024 * 5120 * 2  # bf16[1024,5120], the shape in every all-reduce's text
    assert x.bytes_per_instance == buf and x.group == 2
    assert x.moved_per_instance == buf  # 2 (n-1)/n = 1 for a pair
    # bytes_accessed counts operand + result: twice the buffer, the old 760 GB/s and "126.7% of link"
    assert x.achieved_gbps < x.link_gbps and not x.above_link
    assert x.link_fraction == pytest.approx(x.achieved_gbps / x.link_gbps)
    c = a.collectives["all_reduce"]
    assert c.bytes == pytest.approx(c.count * buf)


def test_vllm_ici_intensity_uses_the_moved_bytes():
    a, f = _vllm()
    sh = next(x for x in f.recommendations if x.code == "SH004")
    line = next(e for e in sh.evidence if "intensity against ICI" in e)
    moved = sum(c.bytes or 0 for c in a.collectives.values())
    gb = float(re.search(r"over ([\d.]+) GB of collectives", line).group(1))
    assert gb == pytest.approx(moved / 1e9, abs=0.006)
    # 31.95 TFLOP over 1.39 GB moved: above the guide's ~11,500 FLOP/byte (over 2.86 GB accessed it read below)
    assert "compute-bound against ICI" in line


def test_a_rate_above_the_link_is_flagged_never_plain():
    from profanalyzer.report.collectives_view import (
        collectives_markdown,
        collectives_view,
    )

    a, _ = _vllm()
    d = a.collective_diagnosis
    x = d.types["all_reduce"]
    fast = dataclasses.replace(x, achieved_gbps=x.link_gbps * 1.3, link_fraction=1.3, above_link=True)
    a2 = dataclasses.replace(a, collective_diagnosis=dataclasses.replace(d, types={**d.types, "all_reduce": fast}))
    row = next(r for r in collectives_view(a2).rows if r.type == "all_reduce")
    assert row.achieved.startswith("above link") and row.of_link == "—"
    md = "\n".join(collectives_markdown(a2, lambda s: s))
    assert "130.0%" not in md and "Above the link (All-reduce)" in md
