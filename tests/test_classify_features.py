"""The per-field parse features the run's classify memo keeps (`parse.Features`) equal the features
computed afresh, and the name-stack tokenizer equals the segment-then-'.' split it stands for."""

from __future__ import annotations

import random
from pathlib import Path

import realcap

from profanalyzer.classify import parse as P
from profanalyzer.classify.stack import tf_op_info
from profanalyzer.classify.tables import TF_PARAMS, TF_SPLIT
from profanalyzer.read.xspace.build import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _segment_tokens(tf_op: str) -> tuple[str, ...]:
    toks: list[str] = []
    for seg in TF_SPLIT.split(TF_PARAMS.sub("", tf_op)):
        if seg:
            toks.extend(t for t in seg.split(".") if t)
    return tuple(toks)


def _fields() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"tf_op": set(), "category": set(), "name": set()}
    paths = sorted(SAMPLES.glob("*.xplane.pb.gz"))[:8] + [realcap.real_path(realcap.VLLM)]
    for path in paths:
        for p in load_trace(str(path)).tensorcores:
            out["tf_op"].update(p.meta.tf_op)
            out["category"].update(p.meta.category)
            out["name"].update(p.meta.display_name)
    return out


def test_tokens_equal_the_segment_split():
    rnd = random.Random(3)
    alphabet = list("/().: \t\n[]ab_")
    tf_ops = _fields()["tf_op"] | {"".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 30)))
                                   for _ in range(20000)}
    for t in tf_ops:
        if t.strip():
            assert tf_op_info(t).tokens == _segment_tokens(t), repr(t)


def test_memoized_features_equal_fresh_ones():
    f = P.Features()
    fields = _fields()
    assert all(len(v) > 5 for v in fields.values())
    for t in fields["tf_op"]:
        assert f.tf_op(t) == tf_op_info(t) == f.tf_op(t)
    for c in fields["category"]:
        assert f.category(c) == P.category_info(c)
    for n in fields["name"]:
        assert f.name(n) == P.name_info(n)
    assert len(f.tf_ops) == len(fields["tf_op"]) and len(f.tokens) < sum(len(tf_op_info(t).tokens) for t in fields["tf_op"])
