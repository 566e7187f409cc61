"""The report templates' jinja2 environment, with their code compiled when
the package is built.

Compiling the report template from its source costs about 45 ms a run (the
lexer, parser and code generator of jinja2, then Python's compiler); loading
its compiled code costs about 1 ms. setup.py compiles every template into
`COMPILED_DIR` at build time (`compile_templates`), as pip compiles .py files
to .pyc at install; at run time `CompiledTemplates` only reads them, and an
analysis writes nothing but the outputs asked for. An entry serves only when
its header matches this format, the Python bytecode magic, the jinja2
version and jinja2's checksum of the template source: an edited template, an
upgraded jinja2 or another Python compile from source as before (same
output, the usual cost).

Imports jinja2 and the standard library only: setup.py loads this file by
path, before the package's dependencies are installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import os
import tempfile
import types
from pathlib import Path
from typing import TypedDict

import jinja2
import jinja2.bccache

TEMPLATE_DIR = Path(__file__).with_name("templates")
COMPILED_DIR = TEMPLATE_DIR / "compiled"


class EnvironmentOptions(TypedDict):
    """The keyword arguments of jinja2.Environment the report sets."""

    autoescape: bool
    undefined: type[jinja2.Undefined]
    trim_blocks: bool
    lstrip_blocks: bool
    keep_trailing_newline: bool


#: Options of every report template's environment (HTML report, diff, fleet).
OPTIONS = EnvironmentOptions(
    # Autoescape every template, whatever its extension (.html.j2 is not
    # recognised by select_autoescape's defaults).
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=False,
    lstrip_blocks=False,
    keep_trailing_newline=True,
)

_FORMAT = b"profanalyzer-template-v1\0"


class CompiledTemplates(jinja2.BytecodeCache):
    """Compiled template code in `directory`, one file per template; read
    only, unless `write` (the build, `compile_templates`)."""

    def __init__(self, directory: Path, write: bool = False) -> None:
        self.directory = Path(directory)
        self.write = write

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        """The template's name alone: the built files serve wherever the
        package is installed (jinja2's default key adds the file's path)."""
        return hashlib.sha1(name.encode("utf-8")).hexdigest()

    def _file(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.directory / f"{bucket.key}.code"

    @staticmethod
    def _header(bucket: jinja2.bccache.Bucket) -> bytes:
        return _FORMAT + importlib.util.MAGIC_NUMBER + f"\0{jinja2.__version__}\0{bucket.checksum}\0".encode()

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            data = self._file(bucket).read_bytes()
        except OSError:
            return
        head = self._header(bucket)
        if not data.startswith(head):
            return
        try:
            code = marshal.loads(data[len(head):])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(code, types.CodeType):
            bucket.code = code

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if not self.write or bucket.code is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(self._header(bucket) + marshal.dumps(bucket.code))
            os.replace(tmp, self._file(bucket))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def environment(compiled: Path | None = COMPILED_DIR) -> jinja2.Environment:
    """The environment of the report templates, reading their compiled code
    from `compiled` when it is there and current (None: always compile)."""
    cache = CompiledTemplates(compiled) if compiled is not None else None
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), bytecode_cache=cache, **OPTIONS)


def compile_templates(directory: Path = COMPILED_DIR) -> list[str]:
    """Compile every template into `directory` (the build); their names."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                             bytecode_cache=CompiledTemplates(directory, write=True), **OPTIONS)
    names = sorted(p.name for p in TEMPLATE_DIR.glob("*.j2"))
    for name in names:
        env.get_template(name)
    return names
