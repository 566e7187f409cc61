"""Every `--xla_*` flag a rule can print exists in libtpu: checked against the
flag lists libtpu itself writes into an `--xla_dump_to` dump (`*.flagfile`,
every flag with its value): the committed libtpu 0.0.42.1 one of the compiled
corpus and the shared MaxText dump's (libtpu 0.0.50.1; skipped when absent).

Flags are gathered two ways: from the sources (heuristics/ and profanalyzer/,
literal flags and f-string templates) and from what every rule prints on the
sample trace it is meant to fire on (actions, evidence, assumptions, docs).
"""

from __future__ import annotations

import ast
import gzip
import re
import tarfile
from pathlib import Path

import pytest
from conftest import ROOT, analysis_of

SHARED = ROOT.parent / "shared" / "real-programs"
CORPUS = ROOT / "sample_traces" / "compiled"
#: A flag as printed: `--xla_name` with an optional `=value`.
FLAG_RE = re.compile(r"--(xla_[a-z0-9_]+)(?:=([A-Za-z0-9_.+-]+))?")
#: A flag name in source, possibly an f-string template (`{...}` placeholders).
SOURCE_RE = re.compile(r"--?(xla_[a-z0-9_]*(?:\{[^{}\n]*\}[a-z0-9_]*)*)")
BOOLS = {"true", "false"}


def parse_flagfile(text: str) -> dict[str, str]:
    flags = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("--"):
            continue
        name, _, value = line[2:].partition("=")
        flags[name] = value.strip("'")
    return flags


def _shared_flagfile() -> tuple[str, dict[str, str]] | None:
    tars = sorted(SHARED.glob("*.tar.gz")) if SHARED.is_dir() else []
    for path in tars:
        with tarfile.open(path) as t:
            for m in t:
                if m.isfile() and m.name.endswith(".flagfile"):
                    f = t.extractfile(m)
                    assert f is not None
                    return f"{path.name}:{Path(m.name).name}", parse_flagfile(f.read().decode())
    return None


def _corpus_flagfiles() -> list[tuple[str, dict[str, str]]]:
    return [(p.name, parse_flagfile(gzip.decompress(p.read_bytes()).decode())) for p in sorted(CORPUS.glob("*.flagfile.gz"))]


def flag_lists() -> list:
    lists = [pytest.param(n, f, id=n) for n, f in _corpus_flagfiles()]
    shared = _shared_flagfile()
    if shared is None:
        lists.append(pytest.param(None, None, id="shared-maxtext", marks=pytest.mark.skip(reason=f"no MaxText dump with a flagfile in {SHARED}")))
    else:
        lists.append(pytest.param(*shared, id="shared-maxtext"))
    return lists


def docstring_lines(source: str) -> set[int]:
    """The line numbers of a module's docstrings (module, class, function):
    developer prose, never printed as advice."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def source_flags() -> dict[str, list[str]]:
    """Flag names and templates in the rule and product sources -> where
    (docstrings aside: they print nothing)."""
    found: dict[str, list[str]] = {}
    files = sorted((ROOT / "heuristics").glob("*.py")) + sorted((ROOT / "profanalyzer").rglob("*.py"))
    for f in files:
        if "synth" in f.relative_to(ROOT).parts:
            continue  # the synthesizer writes traces; it prints no advice
        text = f.read_text()
        skip = docstring_lines(text)
        for i, line in enumerate(text.splitlines(), 1):
            if i in skip:
                continue
            for m in SOURCE_RE.finditer(line):
                if m.group(0).startswith("--"):
                    found.setdefault(m.group(1), []).append(f"{f.relative_to(ROOT)}:{i}")
    return found


def printed_flags() -> dict[str, set[str]]:
    """Flags (name -> printed values) in what each rule prints on its firing fixture."""
    from profanalyzer.heuristics import registry

    out: dict[str, set[str]] = {}
    for r in registry():
        texts = [r.doc.detects, r.doc.why, r.doc.change]
        for f in r.check(analysis_of(r.fixtures[0])):
            texts += [*f.actions, *f.evidence, *f.assumptions, f.title]
        for t in texts:
            for m in FLAG_RE.finditer(t):
                out.setdefault(m.group(1), set())
                if m.group(2):
                    out[m.group(1)].add(m.group(2))
    return out


def expansions(template: str) -> list[str]:
    """A source template's flags: its placeholders range over the collective
    types the SparseCore offload flags name (profanalyzer.core.vocab.OFFLOADABLE)."""
    from profanalyzer.core.vocab import OFFLOADABLE

    if "{" not in template:
        return [template]
    return sorted({re.sub(r"\{[^{}]*\}", t, template) for t in OFFLOADABLE})


def unknown_flags(known: dict[str, str], source: dict[str, list[str]], printed: dict[str, set[str]]) -> dict[str, str]:
    """The flags (and templates) that `known` lacks or whose printed value it
    would refuse (a boolean flag given a non-boolean) -> why."""
    bad = {}
    for template, where in sorted(source.items()):
        missing = [f for f in expansions(template) if f not in known]
        if missing:
            bad[template] = f"{', '.join(missing)} not in the flagfile ({', '.join(where)})"
    for flag, values in sorted(printed.items()):
        if flag not in known:
            bad[flag] = "printed by a rule on its fixture, not in the flagfile"
        elif known[flag] in BOOLS and values - BOOLS:
            bad[flag] = f"a boolean flag (default {known[flag]}) printed with {sorted(values - BOOLS)}"
    return bad


def test_flag_gathering_sees_the_rules_flags():
    # The scan is only worth something if it finds what the rules print.
    src, printed = source_flags(), printed_flags()
    assert any("{" in t for t in src), "the f-string templates of sc_offload are seen"
    assert "xla_tpu_scoped_vmem_limit_kib" in src and "xla_tpu_scoped_vmem_limit_kib" in printed
    printed_from_templates = {f for t in src if "{" in t for f in expansions(t)} & set(printed)
    assert printed_from_templates, "the rules' printed flags include expansions of the templates"


@pytest.mark.parametrize("name, known", flag_lists())
def test_every_printed_flag_is_known_to_libtpu(name, known):
    assert len(known) > 500, f"{name}: a libtpu flagfile lists every flag ({len(known)} read)"
    bad = unknown_flags(known, source_flags(), printed_flags())
    assert not bad, f"flags libtpu ({name}) does not know: {bad}"


def test_a_rule_printing_an_unknown_flag_fails():
    lists = _corpus_flagfiles()
    assert lists, f"no committed flagfile in {CORPUS}"
    known = lists[0][1]
    printed = printed_flags()
    assert not unknown_flags(known, {}, printed)
    # A misspelt flag, a misspelt template, a boolean given a number: each caught.
    assert set(unknown_flags(known, {}, {**printed, "xla_tpu_scoped_vmem_limit_kb": {"49152"}})) == {"xla_tpu_scoped_vmem_limit_kb"}
    assert set(unknown_flags(known, {"xla_tpu_enable_sparse_core_collective_upload_{f}": ["x.py:1"]}, {})) == {"xla_tpu_enable_sparse_core_collective_upload_{f}"}
    assert set(unknown_flags(known, {}, {"xla_tpu_use_tc_device_shape_on_sc": {"2.0"}})) == {"xla_tpu_use_tc_device_shape_on_sc"}
