"""Build hooks (all metadata is in pyproject.toml).

The optional C accelerators: `profanalyzer.read.xspace._wire` decodes XSpace wire
bytes (events, top-level fields, event-metadata maps) in one pass;
`profanalyzer.read.hlo._hlo` builds an HloModuleProto's plain instructions
and their text in one pass; `profanalyzer.classify._canon` erases instruction
numbers from op identities (op families); `profanalyzer.model._nest` nests a line's events (parents, depths,
self times); `profanalyzer.analyze._windows` sums their exclusive time per window and
label. All five are optional: without a C compiler the build skips them
and profanalyzer uses its numpy / protobuf-runtime / regular-expression
paths (same results, slower).

The report templates' compiled code (`profanalyzer/report/templating.py`),
made next to the extensions, as pip makes .pyc files: optional too (without
it a run compiles the template from its source, about 45 ms).
"""

import importlib.util
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
TEMPLATING = Path("profanalyzer", "report", "templating.py")


class BuildExt(build_ext):
    """The extensions, then the compiled report templates (in the source
    tree for in-place and editable builds, else in the build folder)."""

    def run(self) -> None:
        super().run()
        inplace = self.inplace or getattr(self, "editable_mode", False)
        base = ROOT if inplace else Path(self.build_lib)
        try:
            spec = importlib.util.spec_from_file_location("_profanalyzer_templating", ROOT / TEMPLATING)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            target = base / TEMPLATING.parent / "templates" / "compiled"
            names = mod.compile_templates(target)
            print(f"compiled {len(names)} report templates into {target}")
        except Exception as e:  # optional, as the extensions are
            print(f"warning: report templates not precompiled ({type(e).__name__}: {e}); "
                  "they are compiled on first use instead", file=sys.stderr)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "profanalyzer.read.xspace._wire",
            sources=["profanalyzer/read/xspace/_wire.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "profanalyzer.model._nest",
            sources=["profanalyzer/model/_nest.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "profanalyzer.analyze._windows",
            sources=["profanalyzer/analyze/_windows.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "profanalyzer.read.hlo._hlo",
            sources=["profanalyzer/read/hlo/_hlo.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "profanalyzer.classify._canon",
            sources=["profanalyzer/classify/_canon.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
