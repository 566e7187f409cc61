"""The compiled-template cache (report.html.TemplateCache): a second
environment loads the compiled code instead of compiling, output is the same
with or without it, and anything stale, damaged or unwritable falls back to
compiling the source."""

from __future__ import annotations

import os
import stat

import jinja2
import pytest

from profanalyzer.report.html import _OPTIONS, TEMPLATE, TEMPLATE_DIR, TemplateCache


def _env(directory, loader=None) -> jinja2.Environment:
    return jinja2.Environment(loader=loader or jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                              bytecode_cache=TemplateCache(directory), **_OPTIONS)


def _compiles(monkeypatch) -> list[str]:
    seen: list[str] = []
    orig = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):
        seen.append(name)
        return orig(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    return seen


def test_second_environment_loads_without_compiling(tmp_path, monkeypatch, analyses):
    from profanalyzer.findings import run_rules
    from profanalyzer.report.context import build_context

    a = analyses("dense_short_fsdp")
    ctx = build_context(a, run_rules(a), command_line="x", input_sha256="0")
    seen = _compiles(monkeypatch)
    first = _env(tmp_path).get_template(TEMPLATE).render(r=ctx)
    assert TEMPLATE in seen and list(tmp_path.glob("*.code"))
    seen.clear()
    second = _env(tmp_path).get_template(TEMPLATE).render(r=ctx)
    assert seen == []  # every template (and its includes) came from the cache
    plain = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), **_OPTIONS)
    assert first == second == plain.get_template(TEMPLATE).render(r=ctx)


def test_edited_template_or_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.j2").write_text("a {{ x }}")
    cache = tmp_path / "cache"
    seen = _compiles(monkeypatch)
    assert _env(cache, jinja2.FileSystemLoader(str(src))).get_template("t.j2").render(x=1) == "a 1"
    (src / "t.j2").write_text("b {{ x }}")  # same name, new source: the checksum differs
    assert _env(cache, jinja2.FileSystemLoader(str(src))).get_template("t.j2").render(x=1) == "b 1"
    assert seen == ["t.j2", "t.j2"]
    for f in cache.glob("*.code"):  # damaged entries: truncated, garbage after the header, foreign
        for junk in (f.read_bytes()[:40], f.read_bytes()[: f.read_bytes().index(b"\0", 30) + 1] + b"\xff" * 9, b"not ours"):
            f.write_bytes(junk)
            assert _env(cache, jinja2.FileSystemLoader(str(src))).get_template("t.j2").render(x=2) == "b 2"


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root writes to read-only dirs")
def test_unwritable_cache_dir_only_costs_the_compile(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert _env(ro / "templates").get_template("_script.html.j2").render()
        assert not (ro / "templates").exists()
    finally:
        ro.chmod(stat.S_IRWXU)


def test_cache_dir_that_is_a_file_only_costs_the_compile(tmp_path):
    blocker = tmp_path / "templates"
    blocker.write_text("a file where the dir would be")
    assert _env(blocker).get_template("_script.html.j2").render()
    assert blocker.read_text() == "a file where the dir would be"


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    import subprocess
    import sys

    env = {**os.environ, "PROFANALYZER_CACHE_DIR": str(tmp_path), "PROFANALYZER_TEMPLATE_CACHE": "0"}
    code = "from profanalyzer.report.html import environment, TEMPLATE; environment().get_template(TEMPLATE)"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert not (tmp_path / "templates").exists()
    env["PROFANALYZER_TEMPLATE_CACHE"] = "1"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert list((tmp_path / "templates").glob("*.code"))
