"""Which XSpace files a user path names (`resolve_input`).

What a user may pass:
  * one `<host>.xplane.pb` or `<host>.xplane.pb.gz`;
  * a profile run folder (`plugins/profile/<run>/`) with one file per host;
  * a log dir: any folder with `plugins/profile/<run>/` below it (the newest
    run is picked and named).

Anything else is one InputError line, with a hint when the folder holds
trace files of another kind (the trace viewer's JSON). Opening and decoding
the files is `profanalyzer.read.xspace.reader`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from profanalyzer.core.errors import InputError
from profanalyzer.core.vocab import XPLANE_SUFFIXES


@dataclass(frozen=True)
class ResolvedInput:
    """What a user path resolved to."""

    path: Path  # as given
    kind: str  # 'file' | 'run' | 'logdir'
    files: tuple[Path, ...]  # one per host, sorted by name
    run: str | None  # run folder name for 'run'/'logdir'
    note: str | None  # e.g. which run of a log dir was picked


def _is_xplane(p: Path) -> bool:
    return p.is_file() and p.name.endswith(XPLANE_SUFFIXES)


def resolve_input(path: str | os.PathLike) -> ResolvedInput:
    try:
        return _resolve(Path(path))
    except (OSError, ValueError) as e:  # permissions, name too long, symlink loops, NUL bytes
        msg = getattr(e, "strerror", None) or str(e)
        raise InputError(f"{path}: cannot read: {msg}") from None


_OTHER_TRACE_FILES = ("*.trace.json.gz", "*.trace.json", "*.xplane.json")


def _other_traces_hint(p: Path) -> str:
    """'; found h0.trace.json.gz: ...' when a folder holds trace files profanalyzer does not read."""
    found: list[str] = []
    for pat in _OTHER_TRACE_FILES:
        found += sorted(q.name for q in p.glob(pat) if q.is_file())
        found += sorted(str(q.relative_to(p)) for q in p.glob(f"plugins/profile/*/{pat}") if q.is_file())
    if not found:
        return ""
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return (
        f"; found {shown}: that is the trace viewer's JSON, profanalyzer reads the "
        "<host>.xplane.pb files that XProf writes next to it (jax.profiler / tf.profiler captures)"
    )


def _resolve(p: Path) -> ResolvedInput:
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    if p.is_file():
        return ResolvedInput(p, "file", (p,), None, None)
    if not p.is_dir():
        raise InputError(f"{p}: not a regular file or directory")
    hosts = sorted(q for q in p.iterdir() if _is_xplane(q))
    if hosts:
        return ResolvedInput(p, "run", tuple(hosts), p.name, None)
    # A log dir: find run folders holding xplane files under plugins/profile/.
    runs: list[Path] = []
    for prof in sorted(p.glob("**/plugins/profile")):
        if not prof.is_dir():
            continue
        for run in sorted(prof.iterdir()):
            if run.is_dir() and any(_is_xplane(q) for q in run.iterdir()):
                runs.append(run)
    if not runs:
        raise InputError(
            f"{p}: no *.xplane.pb files here or under plugins/profile/<run>/ "
            "(pass a .xplane.pb[.gz] file, a run folder or a log dir)" + _other_traces_hint(p)
        )
    # Newest run: run folder names are timestamps (YYYY_MM_DD_HH_MM_SS); fall
    # back to modification time when names do not sort as times.
    newest = max(runs, key=lambda r: (r.name, r.stat().st_mtime))
    files = tuple(sorted(q for q in newest.iterdir() if _is_xplane(q)))
    note = None
    if len(runs) > 1:
        note = f"log dir has {len(runs)} runs; using the newest: {newest.name}"
    return ResolvedInput(p, "logdir", files, newest.name, note)
