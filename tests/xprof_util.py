"""Running XProf (the optional `[xprof]` extra) from tests without touching anything
outside a temporary directory. Shared by test_xprof_crosscheck.py and
test_xprof_real.py.

XProf caches: its CLI tools (`decorators.cached`) write an SQLite cache under
`$TMPDIR/xprof_cli_cache_<user>/` even when bypassed, and its converters
(`xprof.convert.raw_to_tool_data.xspace_to_tool_data`) write `ALL_HOSTS.op_stats_v2.pb`
and `<program>.hlo_proto.pb` files next to the XSpace they read, even with
`use_saved_result=False`. So XProf only ever reads a decompressed copy in a
`TemporaryDirectory`, with HOME / TMPDIR / XDG_CACHE_HOME and `tempfile.tempdir`
pointed into it (`sandbox`), and callers check with `listing` that the source folder
did not change.
"""

from __future__ import annotations

import contextlib
import getpass
import gzip
import json
import os
import tempfile
from pathlib import Path

import pandas as pd


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under `folder` with its size and mtime (to detect writes)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def real_cli_cache() -> Path:
    """Where XProf's CLI tools would put their cache outside a sandbox."""
    return Path(tempfile.gettempdir()) / f"xprof_cli_cache_{getpass.getuser()}"


@contextlib.contextmanager
def sandbox(tmp: Path):
    """HOME, TMPDIR, XDG_CACHE_HOME and tempfile.tempdir inside `tmp`, restored after."""
    dirs = {k: tmp / k.lower() for k in ("HOME", "TMPDIR", "XDG_CACHE_HOME")}
    for d in dirs.values():
        d.mkdir()
    saved_env = {k: os.environ.get(k) for k in dirs}
    saved_tempdir = tempfile.tempdir
    try:
        os.environ.update({k: str(v) for k, v in dirs.items()})
        tempfile.tempdir = str(dirs["TMPDIR"])
        yield
    finally:
        tempfile.tempdir = saved_tempdir
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_converters(src: Path, tools: tuple[str, ...]) -> tuple[dict[str, object], tuple[str, ...]]:
    """XProf's converters on a decompressed copy of the single-host capture `src`, laid
    out as XProf wants it (`<run>/<host>.xplane.pb`). Returns each tool's parsed JSON
    and the files XProf wrote outside its input copy (relative to the temp dir; its
    per-run caches next to the copy included). Asserts that the folder of `src` did not
    change and that no XProf cache appeared in the real temp dir."""
    from xprof.convert import raw_to_tool_data  # the caller skips when xprof is absent

    cache, cache_before = real_cli_cache(), real_cli_cache().exists()
    before = listing(src.parent)
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="xprof-real-") as tmp_s:
        tmp = Path(tmp_s)
        run = tmp / "run"
        run.mkdir()
        copy = run / "host.xplane.pb"
        data = src.read_bytes()
        copy.write_bytes(gzip.decompress(data) if src.name.endswith(".gz") else data)
        with sandbox(tmp):
            for tool in tools:
                raw, content_type = raw_to_tool_data.xspace_to_tool_data([str(copy)], tool, {"use_saved_result": False})
                assert raw is not None, f"XProf's {tool} converter failed on {src.name}"
                assert content_type == "application/json", (tool, content_type)
                out[tool] = json.loads(raw)
        written = tuple(str(p.relative_to(tmp)) for p in sorted(tmp.rglob("*")) if p.is_file() and p != copy)
    assert listing(src.parent) == before, f"{src.parent} changed"
    assert cache.exists() == cache_before, f"XProf created {cache}"
    return out, written


def datatable(table: dict) -> pd.DataFrame:
    """A Google DataTable JSON (`{"cols": [...], "rows": [{"c": [...]}]}`) as a frame
    keyed by column id."""
    cols = [c["id"] for c in table["cols"]]
    rows = [[(cell or {}).get("v") for cell in r["c"]] for r in table.get("rows", [])]
    return pd.DataFrame(rows, columns=cols)
