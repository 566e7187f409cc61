"""Source lines (issue 26): every top op, scope row and finding names the
Python file:line (and function) its HLO came from, when the HLO's stack
frames, its source_file/source_line metadata or the XLA Ops `source` stat
carry one. Truth: the HLO of every corpus program (its own stack frames),
the real v6e capture's HloProtos (host_offload_stress_test.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from profanalyzer.analyze.sourcelines import GROUP
from profanalyzer.findings.engine import run_rules
from profanalyzer.pipeline.run import run, run_analysis
from profanalyzer.read.hlo.load import read_program
from profanalyzer.report.html import render_html

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "compiled"
V6E = ROOT.parent / "shared" / "real-traces" / "v6e_host_offload.xplane.pb.gz"


def _corpus() -> list[str]:
    man = json.loads((CORPUS / "manifest.json").read_text())
    names = sorted({p.name.split(".")[0] for p in CORPUS.glob("*.hlo.pb.gz")})
    assert names and all(n in json.dumps(man) for n in names)
    return names


def _user_frame(stack, frame_id: int):
    """The first frame out from `frame_id` whose file is not in a jax / flax / optax package (the user's own),
    else the innermost (issue 32 item 4), walked here over the raw (file_location, parent) table."""
    f, first = frame_id, stack.location(frame_id)
    while 0 < f <= len(stack.frames):
        loc = stack.location(f)
        if loc is not None and loc[0] and not any(f"{p}/" in f"/{loc[0]}" for p in ("/jax", "/flax", "/optax")):
            return loc
        f = stack.frames[f - 1][1]
    return first


def _own_locations(path) -> dict[str, str]:
    """instruction -> 'file:line' from the HLO alone (the user's stack frame, else source_file)."""
    out = {}
    for m in read_program(path).modules:
        for c in m.computations:
            for i in c.instructions:
                md = i.metadata
                loc = _user_frame(m.stack, md.stack_frame_id) if md.stack_frame_id else None
                if loc is not None and loc[0]:
                    out.setdefault(i.name, f"{loc[0]}:{loc[1]}")
                elif md.source_file:
                    out.setdefault(i.name, f"{md.source_file}:{md.source_line}")
    return out


@pytest.mark.parametrize("name", _corpus())
def test_corpus_top_ops_name_their_hlo_source_line(name):
    path = CORPUS / f"{name}.hlo.pb.gz"
    own = _own_locations(path)
    a = run_analysis(path)
    checked = 0
    for op in a.top_ops:
        if GROUP.match(op.name):
            continue
        if op.name in own:
            assert op.source.startswith(own[op.name] + " ") or op.source == own[op.name], (op.name, op.source)
            assert " via " not in op.source
            checked += 1
        elif op.source:
            assert " via " in op.source  # taken from the value it moves, and it says so
    assert checked > 0
    # the corpus programs are written by tools/compile_corpus.py: its lines are what the HLO names
    assert any("compile_corpus.py:" in op.source for op in a.top_ops)


@pytest.mark.skipif(not V6E.exists(), reason="../shared/real-traces v6e capture not present")
def test_real_v6e_fusions_and_copies_show_the_test_script_lines():
    r = run(V6E)
    a, f = r.analysis, r.findings
    fusions = [op for op in a.top_ops if "fusion" in op.name]
    copies = [op for op in a.top_ops if op.name.startswith("copy-")]
    assert fusions and copies
    for op in fusions + copies:
        assert re.search(r"host_offload_stress_test\.py:\d+", op.source), (op.name, op.source)
    assert all(" via " not in op.source for op in fusions)  # their own stack frames
    assert all(" via " in op.source for op in copies)  # copies carry no metadata: the value they move
    assert any(r.source for r in a.scopes)
    ho = next(x for x in f.recommendations if x.code == "HO001")
    assert ho.sources and all("host_offload_stress_test.py" in s for s in ho.sources)
    # the whole name: `copy-done` is not named by `copy-done.4`
    for s in ho.sources:
        op = s.split(": ", 1)[0]
        assert re.search(rf"(?<![\w.-]){re.escape(op)}(?![\w-]|\.\d)", "\n".join(ho.evidence))


def test_synthesized_ops_take_the_xla_ops_source_stat():
    a = run_analysis(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    with_src = [op for op in a.top_ops if op.source]
    assert with_src and all(re.search(r"\.py:\d+", op.source) for op in with_src)


def test_report_links_a_finding_to_its_line_escaped():
    r = run(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    a = r.analysis
    evil = "<script>alert(1)</script>.py:7"
    op = a.top_ops[0]
    a2 = replace(a, top_ops=(replace(op, source=evil),) + a.top_ops[1:])
    f2 = run_rules(a2)
    fake = replace(f2.recommendations[0], sources=(f"{op.name}: {evil}",)) if f2.recommendations else None
    if fake is not None:
        f2 = replace(f2, recommendations=(fake,) + f2.recommendations[1:])
    html = render_html(a2, f2, command_line="profanalyze t", input_sha256="0" * 64)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.py:7" in html
    assert 'id="top-op-1"' in html
    if fake is not None:
        assert '<a href="#top-op-1">' in html


def test_family_members_are_the_names_the_row_folds():
    """A top-ops family row `x.* (k ops)` takes its members' lines: `x` covers `x` and `x.<digits>`
    (what the regex `x(\\.\\d+)?$` matches), whatever the names hold; one index for every row."""
    import random
    import re

    from profanalyzer.analyze.sourcelines import _members

    rng = random.Random(7)
    names = sorted({"".join(rng.choice("ab.12\n-\u0663") for _ in range(rng.randint(1, 6))) for _ in range(5000)})
    stems = {s for s in {n.rsplit(".", 1)[0] for n in names} | set(names) if s and "\n" not in s}
    index = _members(reversed(names), stems)
    for stem in stems:
        rx = re.compile(re.escape(stem) + r"(?:\.\d+)?$")
        assert index.get(stem, []) == [m for m in names if rx.match(m)], stem

