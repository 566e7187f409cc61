"""The report templates' code compiled at build time (report.templating):
loading it skips jinja2's compile, the output is the same with or without
it, nothing is written at run time, and anything stale or damaged falls back
to compiling the source."""

from __future__ import annotations

import jinja2
import pytest

from profanalyzer.report import templating
from profanalyzer.report.html import TEMPLATE


def _compiles(monkeypatch) -> list[str]:
    """The names jinja2 compiles from source from now on (it calls
    Environment.compile only when no compiled code serves)."""
    seen: list[str] = []
    orig = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):
        seen.append(name)
        return orig(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    return seen


@pytest.fixture(scope="module")
def context(analyses):
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.report.context import build_context

    a = analyses("dense_short_fsdp")
    return build_context(a, run_rules(a), command_line="x", input_sha256="0")


def test_built_templates_load_without_compiling_and_render_the_same(tmp_path, monkeypatch, context):
    names = templating.compile_templates(tmp_path / "compiled")
    assert TEMPLATE in names and len(list((tmp_path / "compiled").glob("*.code"))) == len(names)
    seen = _compiles(monkeypatch)
    built = templating.environment(tmp_path / "compiled").get_template(TEMPLATE).render(r=context)
    assert seen == []  # the template and its includes came compiled
    from_source = templating.environment(None).get_template(TEMPLATE).render(r=context)
    assert TEMPLATE in seen
    assert built == from_source


def test_run_time_never_writes(tmp_path, context):
    empty = tmp_path / "compiled"
    empty.mkdir()
    assert templating.environment(empty).get_template(TEMPLATE).render(r=context)
    assert list(empty.iterdir()) == []
    assert templating.environment(tmp_path / "absent").get_template(TEMPLATE).render(r=context)
    assert not (tmp_path / "absent").exists()


def test_edited_template_or_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    src, built = tmp_path / "src", tmp_path / "built"
    src.mkdir()
    (src / "t.j2").write_text("a {{ x }}")

    def env(write=False):
        return jinja2.Environment(loader=jinja2.FileSystemLoader(str(src)),
                                  bytecode_cache=templating.CompiledTemplates(built, write=write), **templating.OPTIONS)

    env(write=True).get_template("t.j2")
    seen = _compiles(monkeypatch)
    assert env().get_template("t.j2").render(x=1) == "a 1" and seen == []
    (src / "t.j2").write_text("b {{ x }}")  # same name, new source: jinja2's checksum differs
    assert env().get_template("t.j2").render(x=1) == "b 1" and seen == ["t.j2"]
    (entry,) = built.glob("*.code")
    data = entry.read_bytes()
    head = data[: data.index(b"\0", len(b"profanalyzer-template-v1\0") + 4) + 1]
    for junk in (data[:20], head + b"\xff" * 9, b"not ours", b""):
        entry.write_bytes(junk)
        assert env().get_template("t.j2").render(x=2) == "b 2"


def test_cache_key_is_the_name_alone(tmp_path):
    """Built in one folder, read in another (a wheel built in build/ and
    installed in site-packages): the entry's name does not hold the path."""
    cache = templating.CompiledTemplates(tmp_path)
    assert cache.get_cache_key("report.html.j2", "/a/b/report.html.j2") == cache.get_cache_key("report.html.j2", "/c/report.html.j2")


def test_installed_build_serves_the_report_template(monkeypatch, context):
    if not templating.COMPILED_DIR.is_dir():
        pytest.skip("this install has no compiled templates (built without setup.py's build_ext step)")
    env = templating.environment()
    probe = env.bytecode_cache.get_bucket(env, TEMPLATE, None, env.loader.get_source(env, TEMPLATE)[0])
    if probe.code is None:
        pytest.skip("compiled templates older than the sources or jinja2 (a template edited since the install)")
    seen = _compiles(monkeypatch)
    assert templating.environment().get_template(TEMPLATE).render(r=context) and seen == []
