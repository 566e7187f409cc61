"""The per-file record cache: content-addressed, in the user cache dir, never
next to the traces."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from profanalyzer.core.version import __version__
from profanalyzer.fleet.records import RECORD_VERSION, FleetOptions

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$PROFANALYZER_CACHE_DIR``, else ``$XDG_CACHE_HOME/profanalyzer``, else ``~/.cache/profanalyzer``."""
    env = os.environ.get("PROFANALYZER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "profanalyzer"


def fingerprint_sources() -> list[tuple[str, Path]]:
    """(label, file) of every Python source of profanalyzer and of its rules
    (``heuristics``), sorted per package: what :func:`code_fingerprint` hashes."""
    from profanalyzer import heuristics

    out: list[tuple[str, Path]] = []
    root = Path(__file__).resolve().parents[1]
    rules = Path(heuristics.__file__).resolve().parent
    # installed, the rules are inside the package (profanalyzer/heuristics/): hashed once, with it
    for pkg in (root,) + (() if rules.is_relative_to(root) else (rules,)):
        out.extend((f"{pkg.name}/{f.relative_to(pkg).as_posix()}", f) for f in sorted(pkg.rglob("*.py")))
    return out


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over the source of profanalyzer and its rules (``heuristics``): part
    of the cache key, so an edited checkout (same version number) never serves
    records an older analysis computed."""
    h = hashlib.sha256()
    for label, f in fingerprint_sources():
        h.update(label.encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


#: Stands for the file's path in a cached failure message (the same bytes may sit at another path).
PATH_MARK = "\x00path\x00"


class RecordCache:
    """Content-addressed store of per-file results: ``<root>/fleet-v1/<kk>/<key>.json``.

    key = sha256 of {file sha256, profanalyzer version, code fingerprint, record
    version, options}. An entry holds the file's record, or the one-line
    InputError of a file profanalyzer cannot read (deterministic for the bytes:
    a corrupt file stays corrupt). Writes are atomic (temp file + rename in the
    same folder); an unreadable or mismatching entry is a miss and is rewritten.
    """

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.base = self.root / "fleet-v1"

    @staticmethod
    def key(file_sha256: str, options: FleetOptions) -> str:
        ident = {
            "file_sha256": file_sha256,
            "tool_version": __version__,
            "code": code_fingerprint(),
            "record_version": RECORD_VERSION,
            "options": options.to_dict(),
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.base / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """``{"record": {...}}`` or ``{"failure": {"error", "error_type"}}``, None on a miss."""
        p = self.path(key)
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None
        if isinstance(doc.get("record"), dict):
            return {"record": doc["record"]}
        fail = doc.get("failure")
        if isinstance(fail, dict) and isinstance(fail.get("error"), str) and isinstance(fail.get("error_type"), str):
            return {"failure": fail}
        return None

    def put(self, key: str, file_sha256: str, record: dict | None = None, failure: dict | None = None) -> None:
        p = self.path(key)
        doc: dict[str, object] = {"key": key, "file_sha256": file_sha256, "tool_version": __version__}
        doc.update({"record": record} if record is not None else {"failure": failure})
        tmp = None
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=p.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, sort_keys=True)
            os.replace(tmp, p)
        except OSError as e:  # a read-only or full cache dir must not fail the analysis
            log.warning("profanalyzer cache: cannot write %s: %s", p, e)
            if tmp:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def entries(self) -> int:
        return sum(1 for _ in self.base.glob("*/*.json")) if self.base.is_dir() else 0


def from_cache(path: str, sha: str, hit: dict) -> dict:
    """A task output from a cache entry (the failure message names this path)."""
    out = {"path": path, "ok": True, "cached": True, "sha256": sha, "record": None, "error": None, "error_type": None}
    if "record" in hit:
        out["record"] = hit["record"]
    else:
        out.update(ok=False, error=hit["failure"]["error"].replace(PATH_MARK, path), error_type=hit["failure"]["error_type"])
    return out
