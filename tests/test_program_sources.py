"""Issue 32 item 4: an HLO text dump has source lines (its FileNames /
FileLocations / StackFrames tables, read as the proto holds them), source
lines walk out of framework frames (jax/_src, torch/nn/modules, ...) to the
user's own, and the name-scope rollup folds wrapper scopes (`eval_jaxpr`,
`closed_call`, `while/body`, `jvp(...)`). Truth: the same module's HloProto
(the compiler wrote both; the text prints a frame's parent as the proto's id
+ 1) and the stack tables themselves."""

from __future__ import annotations

import functools
import tarfile
from pathlib import Path

import pytest

from profanalyzer.core.vocab import FRAMEWORK_FILE
from profanalyzer.read.hlo.model import StackFrames

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "real-tpu" / "decode_gqa_bf16.tar.gz"
SHARED = ROOT.parent / "shared"
DUMP = SHARED / "real-programs" / "maxtext_llama3.1-8b_tpu7x-16_fsdp_remat_full.tar.gz"


def test_text_stack_frames_read_as_the_proto_holds_them(tmp_path):
    from profanalyzer.read.hlo.proto import parse_hlo_proto_bytes
    from profanalyzer.read.hlo.text import parse_text

    with tarfile.open(CORPUS) as tar:
        tar.extractall(tmp_path, filter="data")
    stem = next((tmp_path / "decode_gqa_bf16" / "dump").glob("*.after_optimizations.txt")).name.removesuffix(".txt")
    dump = tmp_path / "decode_gqa_bf16" / "dump"
    t = parse_text((dump / f"{stem}.txt").read_text())
    p = parse_hlo_proto_bytes((dump / f"{stem}.hlo.pb").read_bytes())
    assert t.stack.frames and t.stack.frames == p.stack.frames
    assert t.stack.file_locations == p.stack.file_locations


def test_source_walks_out_of_framework_frames():
    files = ("model.py", "site-packages/jax/_src/numpy/lax_numpy.py", "site-packages/torch/nn/modules/linear.py")
    # frame 1: the user's model line; 2: jax called from it; 3: torch called from 2
    st = StackFrames(files, ("forward", "dot", "linear"), ((1, 1, 42), (2, 2, 7), (3, 3, 9)), ((1, 0), (2, 1), (3, 2)))
    assert st.location(3) == ("site-packages/torch/nn/modules/linear.py", 9, "linear")
    assert st.user_location(3) == ("model.py", 42, "forward")
    assert st.user_location(1) == ("model.py", 42, "forward")
    only = StackFrames(files[1:], ("dot",), ((1, 1, 7),), ((1, 0),))
    assert only.user_location(1) == only.location(1)  # all framework: the innermost, not nothing
    # answers are kept per frame id, outside the fields: asked again, the same; equality unchanged
    assert st.user_location(3) is st.user_location(3) and st.user_location(99) is None
    fresh = StackFrames(files, ("forward", "dot", "linear"), ((1, 1, 42), (2, 2, 7), (3, 3, 9)), ((1, 0), (2, 1), (3, 2)))
    assert fresh == st and hash(fresh) == hash(st) and fresh.user_location(2) == st.user_location(2)
    assert FRAMEWORK_FILE.search("/usr/lib/python3.12/contextlib.py") and not FRAMEWORK_FILE.search("maxtext/layers/x.py")


need_dump = pytest.mark.skipif(not DUMP.exists(), reason="../shared/real-programs MaxText dump not present")


@functools.cache
def _maxtext():
    from profanalyzer.pipeline.run import run_analysis

    return run_analysis(DUMP)


@need_dump
def test_maxtext_text_dump_has_user_source_lines():
    a = _maxtext()
    top = [op for op in a.top_ops[:20] if op.self_ps > 0]
    with_src = [op for op in top if op.source]
    assert len(with_src) >= 0.8 * len(top)
    assert not [op.source for op in with_src if FRAMEWORK_FILE.search(op.source.split(":")[0])]
    assert any("maxtext/layers/" in op.source for op in with_src)


@need_dump
def test_maxtext_scopes_fold_wrappers():
    a = _maxtext()
    for row in a.scopes:
        parts = row.scope.split("/")
        assert not {"eval_jaxpr", "closed_call", "while", "body"} & set(parts), row.scope
        assert not any(p.startswith(("jvp(", "transpose(")) for p in parts), row.scope
