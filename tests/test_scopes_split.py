"""`scopes._split` (a tf_op split on '/' outside brackets) equals the character walk it replaced,
on random mixes of slashes, brackets of each kind (unbalanced too) and text, and on real tf_ops."""

from __future__ import annotations

import random
from pathlib import Path

from profanalyzer.analyze import scopes
from profanalyzer.read.xspace.build import load_trace


def _walk(tf_op: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in tf_op:
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        if ch == "/" and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def test_split_equals_the_character_walk():
    rnd = random.Random(11)
    alphabet = list("/()[]{}ab.: =,_") + ["jit(", "dot_general[", "]:", "//"]
    cases = ["", "/", "//", "a", "a/b", "(/)", ")/(", "]/]/[", "a(b/c)/d", "x[y/(z]/w)/v"]
    cases += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(20000)]
    for c in cases:
        assert scopes._split(c) == _walk(c), c


def test_split_equals_the_character_walk_on_sample_tf_ops():
    trace = load_trace(str(Path(__file__).resolve().parents[1] / "sample_traces" / "dense_short_fsdp.xplane.pb.gz"))
    tf_ops = {t for p in trace.tensorcores for t in p.meta.tf_op if t}
    assert len(tf_ops) > 20
    for t in tf_ops:
        assert scopes._split(t) == _walk(t)
