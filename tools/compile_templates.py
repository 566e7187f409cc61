"""Compile the report templates to Python modules (profanalyzer/report/templates_compiled/).

    python tools/compile_templates.py      # or: make templates

Run after editing any template under profanalyzer/report/templates/; the test
suite fails while the compiled modules are stale (and the report falls back to
compiling the templates at run time meanwhile).
"""

from profanalyzer.report.html import COMPILED_DIR, compile_templates

if __name__ == "__main__":
    compile_templates(COMPILED_DIR)
    print(f"compiled templates into {COMPILED_DIR}")
