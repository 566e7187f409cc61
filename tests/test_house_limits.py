"""House limits on the size of the code (issues #24, #33): no Python file of
profanalyzer/ over MAX_FILE_LINES lines (synth/, the test-data generator, over
SYNTH_MAX_FILE_LINES), no function over MAX_FUNCTION_LINES lines outside
profanalyzer/synth/ (the synthesizer's catalog and builders are data-shaped). Generated protobuf modules (`*_pb2.py`) are not counted.

A function's length is the span of its `def` (decorators excluded) to its
last line, nested functions included in their parent's span and checked on
their own too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "profanalyzer"
MAX_FILE_LINES = 600
SYNTH_MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 120
#: Folders (relative to the package) whose functions may be longer.
LONG_FUNCTIONS_OK = ("synth",)


def _generated(path: Path) -> bool:
    return path.name.endswith("_pb2.py")


def offenders(package: Path, max_file: int = MAX_FILE_LINES, max_function: int = MAX_FUNCTION_LINES,
              long_ok: tuple[str, ...] = LONG_FUNCTIONS_OK) -> list[str]:
    """'path: N lines' for each file over `max_file` lines and
    'path:line name(): N lines' for each function over `max_function` lines
    (outside the `long_ok` folders), sorted."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        if _generated(path):
            continue
        rel = path.relative_to(package.parent)
        text = path.read_text(encoding="utf-8")
        n = len(text.splitlines())
        limit = SYNTH_MAX_FILE_LINES if path.relative_to(package).parts[0] in long_ok else max_file
        if n > limit:
            found.append(f"{rel}: {n} lines (at most {limit})")
        if path.relative_to(package).parts[0] in long_ok:
            continue
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > max_function:
                    found.append(f"{rel}:{node.lineno} {node.name}(): {length} lines (at most {max_function})")
    return found


def test_the_scan_sees_the_package():
    files = [p for p in PACKAGE.rglob("*.py") if not _generated(p)]
    assert len(files) > 50 and (PACKAGE / "model" / "analysis.py") in files
    assert any(_generated(p) for p in PACKAGE.rglob("*.py")), "the generated module is there, and skipped"


def test_no_file_or_function_over_the_limits():
    found = offenders(PACKAGE)
    assert not found, "over the house limits (split along a real seam): " + "; ".join(found)


def _body(lines: int) -> str:
    return "".join(f"    x{i} = {i}\n" for i in range(lines))


def test_the_check_catches_what_it_claims(tmp_path):
    pkg = tmp_path / "profanalyzer"
    (pkg / "synth").mkdir(parents=True)
    (pkg / "xspace").mkdir()
    (pkg / "__init__.py").write_text("")
    # at the limits: not reported
    (pkg / "fits.py").write_text("def ok():\n" + _body(119) + "\n" * (600 - 120))
    (pkg / "synth" / "fits.py").write_text("x = 1\n" * 700)
    # a file one line over; a function one line over (nested in a method)
    (pkg / "big.py").write_text("x = 1\n" * 601)
    (pkg / "long.py").write_text("class C:\n    def m(self):\n        def inner():\n" + _body(121).replace("    ", "            ")
                                 + "        return inner\n")
    # long functions are allowed under synth/, long files are not
    (pkg / "synth" / "catalog.py").write_text("def build():\n" + _body(200) + "x = 1\n" * 600)
    # the generated module is skipped whatever its size
    (pkg / "xspace" / "big_pb2.py").write_text("x = 1\n" * 5000)
    found = offenders(pkg)
    assert found == [
        "profanalyzer/big.py: 601 lines (at most 600)",
        "profanalyzer/long.py:2 m(): 124 lines (at most 120)",
        "profanalyzer/long.py:3 inner(): 122 lines (at most 120)",
        "profanalyzer/synth/catalog.py: 801 lines (at most 700)",
    ]
