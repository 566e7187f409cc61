"""`classify_columns` classifies op families (instruction numbers erased)
instead of every distinct op (issue #15). Its columns must equal
`classify_op` row by row: on every sample, both real captures, and tables
of clones renumbered the way unrolled layers and recompiled programs are
(numbers of 1 to 10 digits, so quoted names cross the reason's clip
length)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import realcap

from profanalyzer.classify import Memo, OpClass, classify_columns, classify_op
from profanalyzer.read.xspace.build import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
FILES = sorted(SAMPLES.glob("*.xplane.pb.gz"))
COLS = ("hlo_text", "display_name", "category", "tf_op", "shape_with_layout")
OUT = tuple(f.name for f in fields(OpClass))
_INSTR_NUMBER = re.compile(r"(?<![\w.\-])(%?[A-Za-z_][\w\-]*)\.(\d+)")


def _tables(path: Path) -> list[dict[str, list]]:
    trace = load_trace(str(path))
    seen, out = set(), []
    for p in trace.tensorcores:
        if id(p.meta) in seen:
            continue
        seen.add(id(p.meta))
        md = p.meta
        out.append({"hlo_text": list(md.name), "display_name": list(md.display_name), "category": list(md.category),
                    "tf_op": list(md.tf_op), "shape_with_layout": list(md.shape_with_layout)})
    return out


def _assert_rowwise(cols: dict[str, list], memo: Memo | None = None) -> int:
    n = len(cols["hlo_text"])
    got = classify_columns(cols, n=n, memo=memo)
    for i, row in enumerate(zip(*(cols[c] for c in COLS), strict=True)):
        want = classify_op(*row)
        for f in OUT:
            g = got[f][i]
            assert (bool(g) if f == "remat" else g) == getattr(want, f), (f, row[1], row[0][:120])
    return n


def _renumbered(cols: dict[str, list], k: int, width: int) -> dict[str, list]:
    """Every instruction number N -> a `width`-digit number derived from (N, k)."""

    def sub(text: str) -> str:
        if not isinstance(text, str):
            return text
        return _INSTR_NUMBER.sub(lambda m: f"{m.group(1)}.{(int(m.group(2)) * 7919 + k) % 10 ** width:0{width}d}", text)

    return {c: [sub(x) for x in v] if c in ("hlo_text", "display_name") else list(v) for c, v in cols.items()}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0])
def test_families_equal_rowwise_on_samples(path):
    for t in _tables(path):
        assert _assert_rowwise(t) > 0


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_families_equal_rowwise_on_real_captures(name):
    for t in _tables(realcap.real_path(name)):
        assert _assert_rowwise(t) > 0


@pytest.mark.parametrize("name", ["dense_short_fsdp", "moe_large_pp", "serving_tp2_w4", "attention_unfused",
                                  "host_offload_train"])
def test_families_equal_rowwise_on_unrolled_clones(name):
    """One table holding each op and clones renumbered with 1..10-digit
    numbers: families of many members, including the quoted-name ones."""
    base = _tables(SAMPLES / f"{name}.xplane.pb.gz")[0]
    table = {c: list(v) for c, v in base.items()}
    for k, width in enumerate((1, 3, 6, 10), start=1):
        for c, v in _renumbered(base, k, width).items():
            table[c].extend(v)
    assert _assert_rowwise(table) == 5 * len(base["hlo_text"])


@pytest.mark.parametrize("name", ["dense_short_fsdp", "serving_tp2_w4"])
def test_families_shared_across_tables_equal_rowwise(name):
    """The run's memo carried from table to table (the planes of a run
    folder, the programs of a capture): a later table's rows take the
    verdicts of families an earlier table found, quoted names included."""
    base = _tables(SAMPLES / f"{name}.xplane.pb.gz")[0]
    memo = Memo()
    assert _assert_rowwise(base, memo) > 0
    known = len(memo.families)
    for k, width in enumerate((1, 3, 6), start=1):  # the same ops renumbered: every family known already
        assert _assert_rowwise(_renumbered(base, k, width), memo) == len(base["hlo_text"])
    assert len(memo.families) == known
    assert any(not isinstance(v, int) for v in memo.families.values())  # per-member families met again too


def test_quoted_names_get_each_members_own_name():
    names = [f"all-gather.{i}.cloned.1.call-start" for i in (3, 40, 5000)]
    cols = {"hlo_text": [f"%{n} = bf16[8,128]{{1,0}} call-start(bf16[8,128]{{1,0}} %p.1)" for n in names],
            "display_name": names, "category": ["async-start"] * 3, "tf_op": [""] * 3, "shape_with_layout": [""] * 3}
    memo = Memo()
    got = classify_columns(cols, memo=memo)
    assert len(memo.families) == 1  # one family
    for i, n in enumerate(names):
        assert n in got["reason"][i]
        assert got["reason"][i] == classify_op(cols["hlo_text"][i], n, "async-start").reason


def test_erase_numbers_c_equals_regex(monkeypatch):
    import profanalyzer.classify as C

    texts = ["", ".", "..5", "a.5b", "x.", "fusion.12.remat3", "%p.0 = f32[2,3] add(%a.1, %b.22)", "v1.2.3",
             "nothing here", "é.5 ünïcode.17", "0.5 and 1.25e-3", ".9.8.7"]
    for p in FILES[:3]:
        for t in _tables(p):
            texts += t["hlo_text"][:200] + t["display_name"][:200]
    want = [C.NUMBER.sub(".0", t) for t in texts]
    if C._canon is None:
        pytest.skip("C accelerator not built (no compiler at install)")
    assert C._erase_numbers(list(texts)) == want
    monkeypatch.setattr(C, "_canon", None)
    assert C._erase_numbers(list(texts)) == want


def test_texts_check_c_equals_python(monkeypatch):
    """`_texts` passes a column through only when as_text would leave every
    cell as it is: the C check and the Python one agree on odd cells."""
    import profanalyzer.classify as C
    from profanalyzer.classify.parse import as_text

    class Sub(str):
        pass

    columns = [[], ["a", "b"], ["a\x00b"], ["x" * 10], ["x" * 11], ["é€\x00"], ["é€", "ascii"], ["€" * 11],
               [None], [1.5], [b"bytes"], [Sub("s")], ["ok", None]]
    for cap in (10, 4096):
        for col in columns:
            want = [as_text(v, cap) for v in col]
            if C._canon is not None:
                assert C._texts(list(col), cap) == want
            monkeypatch.setattr(C, "_canon", None)
            assert C._texts(list(col), cap) == want
            monkeypatch.undo()


def test_clip_fast_path_equals_the_substitution():
    """clip returns a clean short name as it is; that equals the UNSAFE
    substitution on every mix of ASCII, controls, markup and non-ASCII."""
    import random

    from profanalyzer.classify.parse import UNSAFE, clip

    def ref(s: str, n: int = 48) -> str:
        s = UNSAFE.sub("?", s[: n + 1])
        return s if len(s) <= n else s[: n - 3] + "..."

    chars = [chr(i) for i in range(0, 130)] + ["é", "€", "\u2028", "\ufeff"]
    rnd = random.Random(7)
    for _ in range(20000):
        s = "".join(rnd.choice(chars) for _ in range(rnd.randint(0, 60)))
        assert clip(s) == ref(s) and clip(s, 5) == ref(s, 5)
