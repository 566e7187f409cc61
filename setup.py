"""Build hook for the optional C accelerator (all metadata is in pyproject.toml).

`profanalyzer.xspace._wire` decodes XLine events in one pass. It is optional:
without a C compiler the build skips it and profanalyzer uses its numpy
decoder (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profanalyzer.xspace._wire",
            sources=["profanalyzer/xspace/_wire.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
