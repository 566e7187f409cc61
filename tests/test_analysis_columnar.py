"""The vectorised analysis stage (opstats, scopes, idle, overlap) against
straightforward reference implementations: per-row Python loops over every
core's metadata rows, as the analysis ran before it grouped with numpy and
shared per-row features between the cores sharing a table (TableMemo).

Each changed function's result must equal the reference's exactly (floats
bit for bit: the vectorised sums add in the reference's order), on every
sample trace and, when present, the real captures in ../shared/real-traces/.

This file holds those cases (CASES, loaded once per case and shared by the
files that import them; canon, the bit-exact form compared; fresh) and the
checks of the building blocks the vectorised code rests on: TableMemo's key,
equal tables shared by the reader, by_time's order, output_bytes, inference
markers and family stems by one search, the case-folded search of idle and
the per-scope folding of scopes. The stages against their references are in
test_analysis_columnar_ops.py (op statistics: top ops, roofline, utilisation,
buckets, families, run kind) and test_analysis_columnar_idle.py (scopes, idle
causes, overlap, critical path)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import SAMPLES, sample_names, sample_path
from realcap import REAL, V6E, VLLM

from profanalyzer.analyze.attributed import TableMemo
from profanalyzer.analyze.opgroups import by_time, output_bytes
from profanalyzer.read.trace import read_trace

# ---------------------------------------------------------------------------
# Cases: every sample trace, and the real captures when present
# ---------------------------------------------------------------------------

REAL_CAPTURES = (VLLM, V6E)
CASES = [("sample", n) for n in sample_names()] + [("real", n) for n in REAL_CAPTURES]


def _path(kind: str, name: str):
    if kind == "sample":
        return sample_path(name)
    p = REAL / name
    if not p.exists():
        pytest.skip(f"real capture {name} not available (../shared/real-traces/ absent)")
    return p


_LOADED: dict = {}


def loaded(kind: str, name: str) -> SimpleNamespace:
    """The trace, its CoreWork and the analysis's arguments to the stages
    (captured from analyze_trace), loaded once per case."""
    key = (kind, name)
    if key not in _LOADED:
        from profanalyzer.analyze.analysis import (
            AnalysisOptions,
            analyze_attributed,
            attribute,
        )

        att = attribute(read_trace(_path(kind, name)))
        trace = att.trace  # with the device planes' peaks, as the stages see it
        an = analyze_attributed(att)
        n_core_steps = max(1, sum(c.steps_kept for c in an.per_core))
        _LOADED[key] = SimpleNamespace(trace=trace, analysis=an, n_core_steps=n_core_steps, att=att, work=att.work,
                                       kept=att.kept_steps, mean=att.step_mean, top=AnalysisOptions().top_ops)
    return _LOADED[key]


def canon(x):
    """A comparable form: floats by their bits (nan as one value), records by fields."""
    if isinstance(x, (float, np.floating)):
        return ("nan",) if x != x else ("float", float(x).hex())
    if isinstance(x, (bool, np.bool_)):
        return ("bool", bool(x))
    if isinstance(x, (int, np.integer)):
        return ("int", int(x))
    if isinstance(x, (list, tuple)):
        return tuple(canon(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, canon(v)) for k, v in x.items())
    if isinstance(x, np.ndarray):
        return canon(x.tolist())
    if hasattr(x, "__dataclass_fields__"):
        return (type(x).__name__,) + tuple(canon(getattr(x, f)) for f in x.__dataclass_fields__)
    if hasattr(x, "__slots__"):
        return tuple(canon(getattr(x, f)) for f in x.__slots__)
    return x


def fresh(c: SimpleNamespace) -> None:
    """Forget the run's TableMemo: the next call computes every table anew."""
    c.att.memo.__init__()


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


def test_by_time_is_sorted_order():
    rng = np.random.default_rng(7)
    sp = rng.integers(0, 5, size=500)
    names = [f"op{rng.integers(0, 40)}" for _ in range(500)]
    assert by_time(sp, names).tolist() == sorted(range(500), key=lambda i: (-int(sp[i]), names[i]))


def test_table_memo_is_keyed_by_the_shared_table():
    """A feature is computed once per table object and its classes (the planes sharing a table share
    it); an equal copy of a table is another table (the reader shares equal tables, see below)."""
    meta, copy = SimpleNamespace(name=("a", "b")), SimpleNamespace(name=("a", "b"))
    p1, p2, p3 = SimpleNamespace(meta=meta), SimpleNamespace(meta=meta), SimpleNamespace(meta=copy)
    cls, cls2 = SimpleNamespace(), SimpleNamespace()
    memo = TableMemo()
    calls = []

    def feature(tag):
        calls.append(tag)
        return tag

    assert memo.get("f", p1, cls, lambda: feature(1)) == 1
    assert memo.get("f", p2, cls, lambda: feature(2)) == 1  # the same table: shared
    assert memo.get("f", p3, cls, lambda: feature(3)) == 3  # another table object
    assert memo.get("f", p1, cls2, lambda: feature(4)) == 4  # other classes of it
    assert memo.get("g", p1, cls, lambda: feature(5)) == 5  # another feature
    assert calls == [1, 3, 4, 5]


@pytest.mark.parametrize("name", ["dense_short_fsdp_2hosts", "moe_short_fsdp_ep"])
def test_the_reader_shares_equal_tables_across_cores_and_hosts(name):
    """What the identity key rests on: the TensorCores whose op-metadata tables are equal hold one table
    object, whichever host they are on, and one PlaneClasses per table."""
    from profanalyzer.pipeline.run import run

    att = run(SAMPLES / name if name.endswith("2hosts") else sample_path(name)).attributed
    planes = att.trace.tensorcores
    by_content = {}
    for pl in planes:
        by_content.setdefault((pl.meta.name, pl.meta.display_name, pl.meta.category, pl.meta.ids.tobytes()), set()).add(id(pl.meta))
    assert all(len(ids) == 1 for ids in by_content.values())
    assert len({pl.host for pl in planes}) >= (2 if name.endswith("2hosts") else 1) and len(by_content) < len(planes)
    classes_of = {}
    for w in att.work:
        classes_of.setdefault(id(w.plane.meta), set()).add(id(w.classes))
    assert all(len(c) == 1 for c in classes_of.values())


def test_output_bytes_reads_shapes():
    assert output_bytes("%a = bf16[4,8]{1,0} fusion(%b)") == 64
    assert math.isnan(output_bytes("not hlo"))


def test_inference_markers_equal_one_search_per_text():
    from profanalyzer.analyze.runkind import inference_marker, inference_markers

    texts = ["", "decode", "jit(decode_step)/dot", "predecode", "kv-cache.3", "fusion.1\nprefill", "Sampler_0",
             "x.logits y", "vllm", "İdecode", "no marker here", "decode\n", "\ndecode", "ragged_paged_attention.12",
             "tokens/sample", "generate-then-decode"]
    for name in ("serving_tp2_w4", "dense_short_fsdp"):
        tr = read_trace(sample_path(name))
        texts += list(tr.tensorcores[0].meta.display_name) + list(tr.tensorcores[0].meta.tf_op)
    want = [inference_marker(t) for t in texts]
    assert any(want) and want.count(None) > 0
    assert inference_markers(texts) == want
    assert inference_markers([]) == []


def test_family_stems_equal_the_regex_per_name():
    from profanalyzer.analyze.opfamilies import _NUMBER_SUFFIX, _stems

    names = ["fusion.12", "fusion", "fusion.", "a.1.2", "a.b", "x.12a", ".5", "5", "", "copy.٣",  # Arabic-Indic digit
             "dot.0001", "all-gather-start.3.remat"]
    assert _stems(names) == [_NUMBER_SUFFIX.sub("", n) for n in names]
    odd = names + ["conv.4\n", "a\x00b.3"]  # a final newline ($ matches before it); a NUL in a name
    assert _stems(odd) == [_NUMBER_SUFFIX.sub("", n) for n in odd]
    assert _stems([]) == []


def test_idle_case_folded_search_equals_lower_case_search():
    """idle._Lowered folds ASCII by setting bit 0x20: for letter needles it
    finds exactly the texts whose str.lower() contains them (markup,
    controls and digits never fold into letters)."""
    import random

    from profanalyzer.analyze.idle import _BARRIER, HOST_CALLBACK, _Lowered

    rnd = random.Random(3)
    alphabet = "abcxyzABCXYZ@[]^_`{|}~ \x01\x1f09.-" + "CALLBACKcallbackBarrierBARRIER"
    for _ in range(300):
        texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(rnd.randint(0, 30))]
        texts += ["CallBack", "xbarrierx", "BARRIER", "cAlLbAcK", "@ALLBACK", "[ARRIER"]
        low = _Lowered(texts)
        for needle, pattern in (("callback", HOST_CALLBACK), ("barrier", _BARRIER)):
            assert low.containing(needle, pattern).tolist() == [needle in t.lower() for t in texts]
    mixed = _Lowered(["Ünïcode callback", "plain"])  # not ASCII: the pattern itself, text by text
    assert mixed.low is None
    assert mixed.containing("callback", HOST_CALLBACK).tolist() == [HOST_CALLBACK.search(t) is not None for t in mixed.texts]


def test_scope_rows_per_distinct_scope_equal_row_by_row():
    """scopes._scope_rows folds each distinct tf_op once: the same ids (in
    first-seen order), names and (row, layer) pairs as folding row by row."""
    from profanalyzer.analyze.scopes import NO_SCOPE, _scope_rows, fold_scope

    tf = ["jit(f)/layers_3/mlp/dot", "", "jit(f)/layers_4/mlp/dot", "jit(f)/layers_3/mlp/dot", None,
          "jit(f)/block_2/layer_7/attn", "jit(f)/layers_4/mlp/dot", "plain"]

    class Table:  # the columns _scope_rows reads of an OpMetadata
        tf_op = tf
        name = [f"%op.{i} = f32[] add()" for i in range(len(tf))]

        def __len__(self) -> int:
            return len(tf)

    table = Table()
    got_ids, got_names, got_layers = {}, {}, {}
    rs, rn, pr, pi = _scope_rows(table, got_ids, got_names, got_layers)
    ids: dict = {}
    layers: dict = {}
    want_rs, want_pairs = [], []
    for r, t in enumerate(tf):
        s, idx = fold_scope(t)
        want_rs.append(ids.setdefault(s, len(ids)))
        want_pairs += [(r, layers.setdefault(i, len(layers))) for i in idx]
    want_rs.append(ids.setdefault(NO_SCOPE, len(ids)))
    assert rs.tolist() == want_rs and list(got_ids) == list(ids) and list(got_layers) == list(layers)
    assert list(zip(pr.tolist(), pi.tolist(), strict=True)) == want_pairs and want_pairs
    assert rn.tolist() == list(range(len(tf))) + [len(tf)]
