"""Build hook for the optional C accelerator (all metadata is in pyproject.toml).

`profanalyzer.xspace._wire` decodes XSpace wire bytes (events, top-level
fields, event-metadata maps) in one pass; `profanalyzer.classify._canon`
erases instruction numbers from op identities (op families). Both are
optional: without a C compiler the build skips them and profanalyzer uses
its numpy / protobuf-runtime / regular-expression paths (same results,
slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profanalyzer.xspace._wire",
            sources=["profanalyzer/xspace/_wire.c"],
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
