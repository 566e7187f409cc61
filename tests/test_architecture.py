"""The import structure of profanalyzer and heuristics, read from the source (AST):

* no import cycle among their modules through the imports executed when a
  module loads (module level, class bodies, ``if``/``try`` blocks; not those
  inside functions, not ``if TYPE_CHECKING:``);
* no cycle either once the deferred imports inside functions count too (a
  deferred import that points back up hides a circle, it does not remove it);
* no module uses another module's private name (``from m import _x``,
  ``m._x`` on an imported module, or a ``_private`` module imported from
  outside its package), at module level or inside functions.

The allowlists name today's exceptions, each with why; they should only shrink.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The packages scanned: (folder, the package it installs as). The rules' folder heuristics/ installs as
#: profanalyzer.heuristics (pyproject.toml's package-dir).
PACKAGES = (("profanalyzer", "profanalyzer"), ("heuristics", "profanalyzer.heuristics"))

#: Cycles through deferred (function-level) imports that exist today, each a
#: sorted tuple of the modules of one strongly connected component. Empty it;
#: never add to it. (Load-time cycles have no allowlist: there are none.)
ALLOWED_DEFERRED_CYCLES: set[tuple[str, ...]] = set()

#: (importing module, imported module, private name) in use today. Empty it;
#: never add to it: make the name public where it is defined instead.
ALLOWED_PRIVATE: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Import:
    importer: str
    module: str  # the imported module (resolved, absolute)
    name: str | None  # the name taken from it (`from module import name`), None for `import module`
    line: int
    load_time: bool  # executed when the importer loads (not inside a function)


def module_files() -> dict[str, Path]:
    """Module name -> source file, for every module of PACKAGES."""
    out = {}
    for folder, pkg in PACKAGES:
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = [*pkg.split("."), *f.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return files[name].name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom, files: dict[str, Path]) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer, files):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    def __init__(self, importer: str, files: dict[str, Path]):
        self.importer, self.files = importer, files
        self.imports: list[Import] = []
        self.aliases: dict[str, str] = {}  # local name -> one of our modules
        self.attr_uses: list[tuple[str, str, int]] = []  # (module, attribute, line)
        self.depth = 0  # function nesting

    def _func(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _func

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.imports.append(Import(self.importer, a.name, None, node.lineno, self.depth == 0))
            if a.asname and a.name in self.files:
                self.aliases[a.asname] = a.name
            elif not a.asname:
                self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = _resolve(self.importer, node, self.files)
        for a in node.names:
            sub = f"{mod}.{a.name}"
            if sub in self.files:  # `from package import module`
                self.imports.append(Import(self.importer, sub, None, node.lineno, self.depth == 0))
                self.aliases[a.asname or a.name] = sub
            else:
                self.imports.append(Import(self.importer, mod, a.name, node.lineno, self.depth == 0))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # `mod._x` or `pkg.mod._x` on a module imported here
        chain, v = [node.attr], node.value
        while isinstance(v, ast.Attribute):
            chain.append(v.attr)
            v = v.value
        if isinstance(v, ast.Name) and v.id in self.aliases:
            mod = self.aliases[v.id]
            for attr in reversed(chain[1:]):
                if f"{mod}.{attr}" not in self.files:
                    break
                mod = f"{mod}.{attr}"
            else:
                self.attr_uses.append((mod, node.attr, node.lineno))
        self.generic_visit(node)


def collect() -> tuple[dict[str, Path], list[Import], list[tuple[str, str, str, int]]]:
    files = module_files()
    imports: list[Import] = []
    attrs: list[tuple[str, str, str, int]] = []
    for name, f in files.items():
        c = _Collector(name, files)
        c.visit(ast.parse(f.read_text(encoding="utf-8"), filename=str(f)))
        imports += c.imports
        attrs += [(name, m, a, line) for m, a, line in c.attr_uses]
    return files, imports, attrs


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(module: str) -> bool:
    return module.split(".")[0] == "profanalyzer"


def import_graph(files: dict[str, Path], imports: list[Import], deferred: bool = False) -> dict[str, set[str]]:
    """importer -> imported modules (load-time imports; with `deferred`, all)."""
    graph: dict[str, set[str]] = {m: set() for m in files}
    for i in imports:
        if (i.load_time or deferred) and i.module in files and i.module != i.importer:
            graph[i.importer].add(i.module)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: set[tuple[str, ...]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.add(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def private_uses(files: dict[str, Path], imports: list[Import], attrs) -> dict[tuple[str, str, str], list[str]]:
    """(importer, module, private name) -> where; a `_private` module counts
    as a private name of its parent package, allowed inside that package."""
    found: dict[tuple[str, str, str], list[str]] = {}

    def add(importer: str, module: str, name: str, line: int) -> None:
        found.setdefault((importer, module, name), []).append(f"{files[importer].relative_to(ROOT)}:{line}")

    def check_module_path(importer: str, module: str, line: int) -> None:
        parts = module.split(".")
        for k, part in enumerate(parts[1:], 1):
            parent = ".".join(parts[:k])
            if _private(part) and not (importer == parent or importer.startswith(parent + ".")):
                add(importer, parent, part, line)

    def own_private_module(importer: str, package: str, name: str) -> bool:
        # `from package import _mod` inside the package: a private submodule
        # (Python or compiled, e.g. profanalyzer.read.xspace._wire) shared within it.
        if package not in files or not _is_package(package, files) or not importer.startswith(package + "."):
            return False
        return any(p.name.split(".")[0] == name for p in files[package].parent.iterdir())

    for i in imports:
        if not _ours(i.module):
            continue
        check_module_path(i.importer, i.module, i.line)
        if i.name is not None and _private(i.name) and i.module != i.importer and not own_private_module(i.importer, i.module, i.name):
            add(i.importer, i.module, i.name, i.line)
    for importer, module, attr, line in attrs:
        if _private(attr) and module != importer and _ours(module):
            add(importer, module, attr, line)
    return found


@pytest.fixture(scope="module")
def collected():
    return collect()


def test_the_scan_sees_the_code(collected):
    files, imports, _ = collected
    assert {"profanalyzer.cli", "profanalyzer.cli._common", "profanalyzer.fleet.execute", "profanalyzer.heuristics"} <= set(files)
    graph = import_graph(files, imports)
    assert "profanalyzer.cli._common" in graph["profanalyzer.cli.analyze"]
    assert "profanalyzer.fleet.records" in graph["profanalyzer.fleet.aggregate"]


def test_no_import_cycles(collected):
    files, imports, _ = collected
    found = cycles(import_graph(files, imports))
    assert not found, "import cycles (load-time imports): " + "; ".join(" <-> ".join(c) for c in sorted(found))


def test_no_cycles_through_deferred_imports(collected):
    files, imports, _ = collected
    found = cycles(import_graph(files, imports, deferred=True))
    new = sorted(found - ALLOWED_DEFERRED_CYCLES)
    assert not new, "import cycles (counting imports inside functions): " + "; ".join(" <-> ".join(c) for c in new)
    gone = sorted(ALLOWED_DEFERRED_CYCLES - found)
    assert not gone, f"fixed, remove from ALLOWED_DEFERRED_CYCLES: {gone}"


def test_no_private_names_across_modules(collected):
    found = private_uses(*collected)
    new = {k: v for k, v in found.items() if k not in ALLOWED_PRIVATE}
    assert not new, "private names used across modules (make them public): " + "; ".join(
        f"{imp} uses {mod}.{name} ({', '.join(where)})" for (imp, mod, name), where in sorted(new.items())
    )
    gone = sorted(ALLOWED_PRIVATE - set(found))
    assert not gone, f"fixed, remove from ALLOWED_PRIVATE: {gone}"


def test_the_checks_catch_what_they_claim(tmp_path):
    # A made-up package: a cycle through module-level imports (a function-level
    # import and a TYPE_CHECKING block do not count) and each kind of private use.
    pkg = {
        "profanalyzer/__init__.py": "",
        "profanalyzer/a.py": "from profanalyzer import b\nfrom profanalyzer.c import _hidden\n",
        "profanalyzer/b.py": "import profanalyzer.a\n",
        "profanalyzer/c.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from profanalyzer import a\n_hidden = 1\n"
            "def g():\n    from profanalyzer import d\n"
        ),
        "profanalyzer/d.py": "import profanalyzer.c as c\nx = c._hidden\ndef f():\n    from profanalyzer import c\n",
        "profanalyzer/e/__init__.py": "from profanalyzer.e import _impl\n",
        "profanalyzer/e/g.py": "from profanalyzer.e import _impl\n",
        "profanalyzer/e/_impl.py": "",
        "profanalyzer/f.py": "from profanalyzer.e._impl import thing\n",
    }
    files = {}
    for rel, text in pkg.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        parts = list(Path(rel).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = p
    imports, attrs = [], []
    for name, f in files.items():
        c = _Collector(name, files)
        c.visit(ast.parse(f.read_text()))
        imports += c.imports
        attrs += [(name, m, a, line) for m, a, line in c.attr_uses]
    assert cycles(import_graph(files, imports)) == {("profanalyzer.a", "profanalyzer.b")}
    assert cycles(import_graph(files, imports, deferred=True)) == {("profanalyzer.a", "profanalyzer.b"), ("profanalyzer.c", "profanalyzer.d")}
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        uses = set(private_uses(files, imports, attrs))
    finally:
        ROOT = saved
    assert uses == {
        ("profanalyzer.a", "profanalyzer.c", "_hidden"),
        ("profanalyzer.d", "profanalyzer.c", "_hidden"),
        ("profanalyzer.f", "profanalyzer.e", "_impl"),
    }


# ---------------------------------------------------------------------------
# Stages: every module has one; imports point down (or across) only
# ---------------------------------------------------------------------------

#: The pipeline's stages, bottom first, each a list of module prefixes (the
#: longest prefix that matches names a module's stage). A module may import
#: its own stage and those below; never one above. `=name`: that module only.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # vocabularies, formatting, errors, the chip table, numeric helpers, output naming
    ("floor", ("profanalyzer.core",)),
    # the records, the trace model, the invariants, saved documents, the notebook's frames
    ("records", ("profanalyzer.model",)),
    # the read room: the Source, XSpace captures (the readers, the trace model's build) and compiled programs
    ("input", ("profanalyzer.read",)),
    ("classify", ("profanalyzer.classify",)),
    ("analyze", ("profanalyzer.analyze",)),
    # the findings stage and the rules it runs
    ("rules", ("profanalyzer.findings", "profanalyzer.heuristics")),
    ("run", ("profanalyzer.pipeline",)),
    ("compare", ("profanalyzer.compare", "profanalyzer.fleet")),
    ("report", ("profanalyzer.report",)),
    # the entry points; `profanalyzer` itself is the notebook facade (`load`, imported on first use of
    # profanalyzer.load; `show_cards`, whose printers import the renderer registry when a card is shown)
    ("top", ("profanalyzer.api", "profanalyzer.cli", "profanalyzer.synth", "=profanalyzer")),
)
_STAGE_NAMES = [name for name, _ in STAGES]

#: What the renderers (profanalyzer.report) may import besides their own
#: package: the floor and the records. Nothing that analyses or runs rules.
RENDERER_MAY_IMPORT = ("floor", "records")

#: Exceptions to the stage rules. Empty; keep it so.
ALLOWED_STAGE_ARROWS: set[tuple[str, str]] = set()


def stage_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for name, prefixes in STAGES:
        for p in prefixes:
            exact = p.startswith("=")  # that module only, not its package's modules
            if (module == p.lstrip("=") or (not exact and module.startswith(p + "."))) and (best is None or len(p) > best[0]):
                best = (len(p), name)
    return best[1] if best else None


def stage_arrows(files, imports) -> dict[str, list[str]]:
    """Broken stage rules -> the (importer -> imported) arrows breaking them,
    counting imports inside functions (not TYPE_CHECKING blocks)."""
    graph = import_graph(files, imports, deferred=True)
    out: dict[str, list[str]] = {"unstaged": sorted(m for m in files if stage_of(m) is None)}
    up, render, inputs = [], [], []
    for a in sorted(graph):
        sa = stage_of(a)
        for b in sorted(graph[a]):
            sb = stage_of(b)
            if sa is None or sb is None or (a, b) in ALLOWED_STAGE_ARROWS:
                continue
            if _STAGE_NAMES.index(sb) > _STAGE_NAMES.index(sa):
                up.append(f"{a} ({sa}) -> {b} ({sb})")
            if sa == "report" and sb != "report" and sb not in RENDERER_MAY_IMPORT:
                render.append(f"{a} -> {b} ({sb})")
            if sa == "input" and b.startswith("profanalyzer.fleet"):
                inputs.append(f"{a} -> {b}")
    out.update({"up": up, "renderer": render, "input imports fleet": inputs})
    return out


def test_no_flat_modules_but_the_package_entry():
    """The layout shows the pipeline: every module lives in a room (a sub-package), and every room is a
    whole stage (STAGES names packages, not modules): only `profanalyzer/__init__.py` sits at the top."""
    flat = sorted(p.name for p in (ROOT / "profanalyzer").iterdir() if p.suffix in (".py", ".c") and p.name != "__init__.py")
    assert not flat, flat
    rooms = {p.name for p in (ROOT / "profanalyzer").iterdir() if (p / "__init__.py").exists()}
    staged = {pre.split(".")[1] for _, pres in STAGES for pre in pres if pre.startswith("profanalyzer.")}
    assert rooms | {"heuristics"} == staged, (rooms, staged)


def test_stage_rules(collected):
    files, imports, _ = collected
    broken = {k: v for k, v in stage_arrows(files, imports).items() if v}
    assert not broken, "; ".join(f"{k}: {', '.join(v)}" for k, v in broken.items())
    assert not ALLOWED_STAGE_ARROWS


def test_stage_rules_catch_what_they_claim(tmp_path):
    pkg = {
        "profanalyzer/__init__.py": "",
        "profanalyzer/model/analysis.py": "def f():\n    from profanalyzer.analyze import analysis\n",  # up, deferred
        "profanalyzer/analyze/__init__.py": "",
        "profanalyzer/analyze/analysis.py": "from profanalyzer.model import analysis\n",
        "profanalyzer/report/__init__.py": "",
        "profanalyzer/report/html.py": ("from profanalyzer.findings import engine\nfrom profanalyzer.model import analysis\n"
                                        "from profanalyzer.report import svg\n"),
        "profanalyzer/report/svg.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from profanalyzer.analyze import analysis\n",
        "profanalyzer/findings/engine.py": "",
        "profanalyzer/read/sources.py": "from profanalyzer.fleet import paths\n",
        "profanalyzer/fleet/__init__.py": "",
        "profanalyzer/fleet/paths.py": "",
        "profanalyzer/mystery.py": "",
    }
    files = {}
    for rel, text in pkg.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        parts = list(Path(rel).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = p
    imports = []
    for name, f in files.items():
        c = _Collector(name, files)
        c.visit(ast.parse(f.read_text()))
        imports += c.imports
    got = stage_arrows(files, imports)
    assert got["unstaged"] == ["profanalyzer.mystery"]
    assert got["up"] == ["profanalyzer.model.analysis (records) -> profanalyzer.analyze.analysis (analyze)",
                         "profanalyzer.read.sources (input) -> profanalyzer.fleet.paths (compare)"]
    assert got["renderer"] == ["profanalyzer.report.html -> profanalyzer.findings.engine (rules)"]
    assert got["input imports fleet"] == ["profanalyzer.read.sources -> profanalyzer.fleet.paths"]


# ---------------------------------------------------------------------------
# One pipeline: only profanalyzer.pipeline.run calls the analysis stages
# ---------------------------------------------------------------------------

#: The stage entry points that only `profanalyzer.pipeline.run` calls.
STAGE_CALLS = frozenset({"analyze_trace", "analyze_attributed", "attribute", "attribute_trace", "read_trace",
                         "run_rules", "load_analysis"})
#: Where they are defined (and may call each other).
STAGE_HOMES = frozenset({"profanalyzer.analyze.analysis", "profanalyzer.analyze.attribution", "profanalyzer.findings.engine",
                         "profanalyzer.read.trace", "profanalyzer.pipeline.run"})
STAGE_MODULES = frozenset({"profanalyzer.analyze.analysis", "profanalyzer.analyze.attribution", "profanalyzer.findings.engine",
                           "profanalyzer.read.trace"})


def stage_callers(files, imports) -> list[str]:
    """Modules (outside STAGE_HOMES) that import a stage entry point."""
    return sorted(f"{i.importer} imports {i.module}.{i.name} ({files[i.importer].name}:{i.line})" for i in imports
                  if i.importer not in STAGE_HOMES and i.module in STAGE_MODULES and i.name in STAGE_CALLS)


def test_only_run_calls_the_analysis_stages(collected):
    files, imports, attrs = collected
    found = stage_callers(files, imports)
    found += sorted(f"{imp} uses {mod}.{a} (line {line})" for imp, mod, a, line in attrs
                    if imp not in STAGE_HOMES and mod in STAGE_MODULES and a in STAGE_CALLS)
    assert not found, "call profanalyzer.pipeline.run.run instead: " + "; ".join(found)
    # the scan sees the calls it forbids: pipeline/run.py's own
    own = [i for i in imports if i.importer == "profanalyzer.pipeline.run" and i.module in STAGE_MODULES and i.name in STAGE_CALLS]
    assert {i.name for i in own} >= {"read_trace", "attribute", "analyze_attributed", "run_rules", "load_analysis"}


#: Outside the package: the tools (tools/make_reports.py builds the committed reports/) and the tests'
#: shared helpers (conftest.py and the other modules of tests/ that are not a test file) assemble no
#: pipeline: they call pipeline.run (or run_analysis), so what they read is what `profanalyze` gives.
#: Test files may call a stage on its own: that is what a unit test of the stage does.
def outside_callers() -> list[str]:
    files = module_files()
    helpers = [f for f in sorted((ROOT / "tests").glob("*.py")) if not f.name.startswith("test_")]
    found = []
    for f in [*sorted((ROOT / "tools").glob("*.py")), *helpers]:
        c = _Collector(f"{f.parent.name}.{f.stem}", files)
        c.visit(ast.parse(f.read_text(encoding="utf-8")))
        found += [f"{f.relative_to(ROOT)}:{i.line} imports {i.module}.{i.name}" for i in c.imports
                  if i.module in STAGE_MODULES and i.name in STAGE_CALLS]
    return found


def test_tools_and_test_helpers_go_through_run():
    found = outside_callers()
    assert not found, "call profanalyzer.pipeline.run.run (or run_analysis) instead: " + "; ".join(found)
    assert any((ROOT / "tools").glob("make_reports.py")) and (ROOT / "tests" / "conftest.py").exists()


def test_the_outside_scan_sees_a_stage_call(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tests = tmp_path / "tests"
    tools.mkdir()
    tests.mkdir()
    (tools / "t.py").write_text("from profanalyzer.findings.engine import run_rules\n")
    (tests / "helper.py").write_text("def f():\n    from profanalyzer.analyze.analysis import attribute\n")
    (tests / "test_x.py").write_text("from profanalyzer.analyze.analysis import attribute\n")  # a test file: allowed
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert outside_callers() == ["tools/t.py:1 imports profanalyzer.findings.engine.run_rules",
                                 "tests/helper.py:2 imports profanalyzer.analyze.analysis.attribute"]


def test_the_cli_renders_through_the_registries(collected):
    """Every output the CLI writes of a run, a comparison, a check, a fleet, an `info` or an `explain`
    comes from a renderer of report/registry.py (RENDERERS, COMPARISON_RENDERERS, CHECK_RENDERERS,
    FLEET_RENDERERS, INFO_RENDERERS, PROGRAM_INFO_RENDERERS, EXPLANATION_RENDERERS, WINDOW_RENDERERS): no command imports a
    format module of report/ itself, and no format function is left outside report/."""
    _, imports, _ = collected
    direct = sorted(f"{i.importer} imports {i.module}" + (f".{i.name}" if i.name else "") for i in imports
                    if i.importer.startswith("profanalyzer.cli") and i.module.startswith("profanalyzer.report")
                    and i.module != "profanalyzer.report.registry")
    assert not direct, direct
    from profanalyzer.report import registry as R

    assert set(R.RENDERERS) == {"json", "markdown", "html", "terminal"} == set(R.COMPARISON_RENDERERS)
    assert set(R.CHECK_RENDERERS) == {"json", "junit"} and set(R.FLEET_RENDERERS) == {"json", "html", "terminal"}
    assert set(R.INFO_RENDERERS) == set(R.PROGRAM_INFO_RENDERERS) == set(R.EXPLANATION_RENDERERS) == {"json", "terminal"}
    assert set(R.WINDOW_RENDERERS) == {"perfetto"}
    # the trace export's format (a Trace Event Format document) is built under report/ only (the reader
    # recognises one as input: that is not building one)
    tef = sorted(str(f.relative_to(ROOT)) for f in (ROOT / "profanalyzer").rglob("*.py")
                 if "report" not in f.parts and re.search(r'"traceEvents"\s*:', f.read_text(encoding="utf-8")))
    assert not tef, tef
    outside = sorted(f"{f.relative_to(ROOT)}: {m}" for f in (ROOT / "profanalyzer").rglob("*.py")
                     if "report" not in f.parts and "synth" not in f.parts
                     for m in re.findall(r"^def (format_\w+)\(", f.read_text(encoding="utf-8"), re.M))
    assert not outside, outside


def test_the_rules_install_inside_the_package():
    """heuristics/ installs as profanalyzer.heuristics (nothing named `heuristics` in site-packages), and the
    package list names every package folder, so a new one is not left out of the wheel."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert conf["package-dir"] == {"profanalyzer.heuristics": "heuristics"}
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "profanalyzer").rglob("__init__.py")}
    assert set(conf["packages"]) == folders | {"profanalyzer.heuristics"}
    users = [str(f.relative_to(ROOT)) for d in ("profanalyzer", "heuristics", "tests", "tools", "benchmarks")
             for f in (ROOT / d).rglob("*.py") if re.search(r"^\s*(from heuristics\b|import heuristics\b)",
                                                             f.read_text(encoding="utf-8"), re.M)]
    assert users == []


# ---------------------------------------------------------------------------
# One Source: only the read stage opens the input
# ---------------------------------------------------------------------------

#: The modules that open or decode an input file (the Source, the XSpace readers, the program reader).
READERS = ("profanalyzer.read.xspace", "profanalyzer.read.source", "profanalyzer.read.sources", "profanalyzer.read.trace",
           "profanalyzer.read.allocator", "profanalyzer.read.hlo.load", "profanalyzer.read.compiled")
#: The stages that never import one: they ask the trace's input (Trace.reads) or get records.
READ_NOTHING = ("classify", "analyze", "rules", "report")


def reader_imports(files, imports) -> list[str]:
    """Imports (load-time or deferred, not TYPE_CHECKING) of a reader by a module of READ_NOTHING."""
    return sorted(f"{i.importer} -> {i.module}" for i in imports
                  if stage_of(i.importer) in READ_NOTHING
                  and any(i.module == r or i.module.startswith(r + ".") for r in READERS))


def test_no_stage_after_the_read_imports_a_reader(collected):
    files, imports, _ = collected
    found = reader_imports(files, imports)
    assert not found, "ask Trace.reads (the run's Source) instead: " + "; ".join(found)
    # the scan sees reader imports where they belong
    assert [i for i in imports if i.importer == "profanalyzer.pipeline.run" and i.module.startswith("profanalyzer.read.")]


def test_the_two_decoders_of_the_read_room_stay_apart(collected):
    """read/xspace (captures) never imports read/hlo (programs): what joins them, the Source, the
    program-as-trace, the allocator's memory sources, lives at the read room's top. The other way is
    one-way (a capture's `/host:metadata` programs, the replay's XSpace), so the room has no circle."""
    files, imports, _ = collected
    found = sorted(f"{i.importer} -> {i.module}" for i in imports
                   if i.importer.startswith("profanalyzer.read.xspace") and i.module.startswith("profanalyzer.read.hlo"))
    assert found == []
    # the scan sees the one-way imports it allows
    assert [i for i in imports if i.importer.startswith("profanalyzer.read.hlo") and i.module.startswith("profanalyzer.read.xspace")]
