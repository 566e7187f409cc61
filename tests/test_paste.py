"""Copy-paste must work: every flag block the reports print, pasted into bash,
sets LIBTPU_INIT_ARGS to exactly the flags the JSON document lists (same
flags, same order, one space between them); `explain` prints the flags its
text refers to; no change line is cut or dropped by a renderer.

The recommendations come from the rules' own fixtures (the sample each rule
fires on), so every rule that sets flags on its sample is covered; which
rules those are is read from the findings, not listed here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from conftest import analysis_of, findings_of, sample_doc
from test_report_html import dom_case

from profanalyzer.findings.explain import explain
from profanalyzer.heuristics import registry
from profanalyzer.report.explain_text import format_explanation
from profanalyzer.report.markdown import render_markdown
from profanalyzer.report.terminal import format_recommendations

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")
ENV = "LIBTPU_INIT_ARGS"


def paste(block: str) -> str:
    """`block` pasted into a fresh bash (no LIBTPU_INIT_ARGS set), then the
    variable's value."""
    r = subprocess.run(
        [BASH, "--noprofile", "--norc", "-c", block + f'\nprintf %s "${ENV}"'],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, capture_output=True, text=True, timeout=20,
    )
    assert r.returncode == 0 and not r.stderr, f"bash rejected the block:\n{block}\n{r.stderr}"
    return r.stdout


def _fixture_samples() -> list[str]:
    return sorted({r.fixtures[0] for r in registry()})


def _flag_cases() -> list[tuple[str, int]]:
    """(sample, rank index) of every recommendation on the rules' fixture
    samples that sets LIBTPU_INIT_ARGS: the JSON lists flags, or the change
    text mentions the variable."""
    out = []
    for name in _fixture_samples():
        doc = sample_doc(name)
        for i, rec in enumerate(doc["recommendations"]):
            if rec.get("flags") or any(ENV in x for x in rec.get("actions", ())):
                out.append((name, i))
    return out


CASES = _flag_cases()
IDS = [f"{n}-{sample_doc(n)['recommendations'][i]['code']}" for n, i in CASES]


def test_flag_rules_are_covered():
    codes = {sample_doc(n)["recommendations"][i]["code"] for n, i in CASES}
    assert {"SC001", "SC002", "SC003", "VM001"} <= codes, codes


def _expected(name: str, i: int) -> str:
    rec = sample_doc(name)["recommendations"][i]
    flags = rec.get("flags")
    assert flags, f"{rec['code']}: the JSON document lists no flags"
    assert all(f.startswith("--") and not re.search(r"\s", f) for f in flags), flags
    return " ".join(flags)


def _markdown_section(md: str, rank: int) -> str:
    start = md.index(f"\n**{rank}. ")
    nxt = md.find(f"\n**{rank + 1}. ", start + 1)
    end = nxt if nxt >= 0 else md.index("\n#### ", start)
    return md[start:end]


def _fences(text: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(`{3,})[a-z]*\n(.*?)\n\1$", text, re.M | re.S)]


@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_markdown_flag_block_pastes_into_bash(name, i):
    want = _expected(name, i)
    f = findings_of(name)
    md = render_markdown(analysis_of(name), f, max_recommendations=len(f.recommendations))
    blocks = [b for b in _fences(_markdown_section(md, i + 1)) if ENV in b]
    assert len(blocks) == 1, blocks
    assert paste(blocks[0]) == want


def _terminal_change(lines: list[str], rank: int) -> list[str]:
    """The change lines of recommendation `rank`, as a user copies them: the
    display margin and the `$ ` prompt off, nothing else touched."""
    start = next(k for k, s in enumerate(lines) if re.match(rf"\s*{rank}\. \[", s))
    out = []
    for s in lines[start + 2:]:
        if re.match(r"\s*\d+\. \[", s):
            break
        assert s.startswith("     "), f"a change line lost its margin: {s!r}"
        s = s[5:]
        out.append(s[2:] if s.startswith("$ ") else s)
    return out


@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_terminal_flag_block_pastes_into_bash(name, i):
    want = _expected(name, i)
    f = findings_of(name)
    change = _terminal_change(format_recommendations(f, n=len(f.recommendations)), i + 1)
    assert any(ENV in s for s in change), change
    assert paste("\n".join(change)) == want


@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_html_change_box_pastes_into_bash(name, i):
    """What the Copy button copies (the code element's text)."""
    want = _expected(name, i)
    card = dom_case(name).find("article", id=f"rec-{i + 1}")
    code = card.find(data_field="actions").find("code")
    assert paste(code.text) == want


@pytest.mark.parametrize("name", _fixture_samples())
def test_no_change_line_is_dropped_or_cut(name):
    """Every change line of every recommendation reaches the terminal and the
    Markdown whole: wrapping never cuts a sentence, nothing is left out."""
    f = findings_of(name)
    term = "\n".join(format_recommendations(f, n=len(f.recommendations)))
    md = render_markdown(analysis_of(name), f, max_recommendations=len(f.recommendations))

    def words(text: str) -> str:  # the words, without line breaks and the leading `$` / `#` of each line
        return " ".join(w for ln in text.splitlines() for w in re.sub(r"^\s*[$#]*", "", ln).split())

    term_words = words(term)
    for rec in f.recommendations:
        for line in rec.actions:
            assert "\n" not in line, f"{rec.code}: an action spans lines: {line!r}"
            assert line in md, f"{rec.code}: {line!r} missing from the Markdown"
            assert words(line) in term_words, f"{rec.code}: {line!r} missing from the terminal"
        if rec.code == "FP001":
            text = " ".join(rec.actions)
            assert "dynamic scaling, E4M3" in text and "E5M2" in text


def test_fp001_recipe_is_whole_in_the_terminal():
    f = findings_of("bf16_dense")
    term = "\n".join(format_recommendations(f))
    flat = " ".join(re.sub(r"\n\s*#\s*", " ", term).split())
    assert "dynamic scaling, E4M3 (float8_e4m3fn) weights/activations forward, E5M2 (float8_e5m2) gradients" in flat, term


@pytest.mark.parametrize("code", [r.code for r in registry()])
def test_explain_prints_the_flags_it_refers_to(code):
    e = explain(code)
    text = format_explanation(e)
    if "flags below" in e.change:
        assert e.flags, f"{code}: says 'flags below' and lists none"
    for flag in e.flags:
        assert flag in text


def test_explain_sc001_flag_block_pastes():
    e = explain("SC001")
    text = format_explanation(e)
    start = text.index("export " + ENV)
    lines = []
    for s in text[start:].splitlines():
        lines.append(s)
        if not s.endswith("\\"):
            break
    assert paste("\n".join(lines)) == " ".join(e.flags)
    assert "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true" in e.flags


def test_blocks_append_to_flags_already_set():
    from profanalyzer.core.shell import flags_block, flags_line

    flags = ["--a=1", "--b_c=true", "--d=2.0"]
    for block in ("\n".join(flags_block(flags)), flags_line(flags)):
        assert paste(block) == "--a=1 --b_c=true --d=2.0"
        assert paste(f'export {ENV}="--x=1"\n' + block) == "--x=1 --a=1 --b_c=true --d=2.0"
        # pasted twice (two findings' blocks): both sets, still single spaces
        assert paste(block + "\n" + block) == " ".join(flags + flags)


def test_the_forms_are_enforced():
    from profanalyzer.core.shell import check_action, check_flag, wrap_comment
    from profanalyzer.findings.rules import rule

    for bad in ("--a b", '--a="x"', "--a=$(x)", "-a", "--a;b", ""):
        with pytest.raises(ValueError):
            check_flag(bad)
    with pytest.raises(ValueError):
        check_action("# one sentence cut\n# in two")
    with pytest.raises(ValueError):
        check_action(f'{ENV}="--a=1"')

    def check(self, analysis):
        """
        What it detects: a made-up condition for this test, long enough to pass.

        Why it costs time: it does not; this rule exists only inside the test.

        What to change: set the LIBTPU_INIT_ARGS flags below to fix the condition.
        """
        return []

    with pytest.raises(ValueError, match="lists none"):
        rule("ZZ001", "fp8", "t", fixtures=("a", "b"))(check)
    assert rule("ZZ001", "fp8", "t", fixtures=("a", "b"), flags=["--a=1"])(check).flags == ("--a=1",)
    # comments wrap at spaces into comment lines, words whole, nothing lost; code never wraps
    long = "# " + " ".join(f"word{i}" for i in range(60))
    pieces = wrap_comment(long, 80)
    assert len(pieces) > 1 and all(p.startswith("#") and len(p) <= 80 for p in pieces)
    assert " ".join(w for p in pieces for w in p.lstrip("# ").split()) == long[2:]
    code = "x=" + "y" * 200
    assert wrap_comment(code, 80) == [code]
