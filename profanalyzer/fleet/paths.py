"""PATHS -> runs -> host files: local paths, or fsspec for URLs (imported
lazily, only for URLs); hashing and fetching a host file."""

from __future__ import annotations

import glob as _glob
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from profanalyzer.core.errors import InputError, ProfanalyzerError
from profanalyzer.core.vocab import XPLANE_SUFFIXES
from profanalyzer.fleet.records import Failure, failure_from, one_line
from profanalyzer.read.sources import is_url, is_xplane_name, open_fsspec

RUN_NAME_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")
_GLOB_CHARS = re.compile(r"[*?\[]")


def host_stem(path: str) -> str:
    """``.../t1v-n-abc-w-3.xplane.pb.gz`` -> ``t1v-n-abc-w-3`` (the host, as XProf names the file)."""
    name = basename(path)
    for s in XPLANE_SUFFIXES + (".pb.gz", ".pb", ".gz"):
        if name.endswith(s) and len(name) > len(s):
            return name[: -len(s)]
    return name


def basename(path: str) -> str:
    return str(path).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]


def parent(path: str) -> str:
    p = str(path).rstrip("/")
    if is_url(p):
        head = p.rsplit("/", 1)[0]
        return head if not head.endswith(":/") else p
    return os.path.dirname(p) or "."


class _LocalFS:
    def exists(self, p: str) -> bool:
        return os.path.exists(p)

    def isdir(self, p: str) -> bool:
        return os.path.isdir(p)

    def isfile(self, p: str) -> bool:
        return os.path.isfile(p)

    def files_in(self, d: str) -> list[str]:
        try:
            return sorted(os.path.join(d, n) for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))
        except OSError:
            return []

    def glob(self, pattern: str) -> list[str]:
        return sorted(_glob.glob(pattern, recursive=True))

    def profile_runs(self, root: str) -> list[str]:
        runs = []
        for prof in sorted(Path(root).glob("**/plugins/profile")):
            try:
                children = sorted(prof.iterdir())
            except OSError:
                continue
            for run in children:
                if run.is_dir():
                    runs.append(os.path.join(root, str(run.relative_to(root))))
        return runs

    def mtime(self, p: str) -> float | None:
        try:
            return os.stat(p).st_mtime
        except OSError:
            return None

    def key(self, p: str) -> str:
        return os.path.normcase(os.path.abspath(p))


class _RemoteFS:
    """fsspec file system of one URL protocol; paths in and out are full URLs."""

    def __init__(self, fs):
        self.fs = fs

    def _s(self, url: str) -> str:
        return self.fs._strip_protocol(url)

    def _u(self, p: str) -> str:
        return self.fs.unstrip_protocol(p)

    def exists(self, p: str) -> bool:
        return bool(self.fs.exists(self._s(p)))

    def isdir(self, p: str) -> bool:
        return bool(self.fs.isdir(self._s(p)))

    def isfile(self, p: str) -> bool:
        return bool(self.fs.isfile(self._s(p)))

    def files_in(self, d: str) -> list[str]:
        try:
            entries = self.fs.ls(self._s(d), detail=True)
        except (OSError, ValueError):
            return []
        return sorted(self._u(e["name"]) for e in entries if e.get("type") == "file")

    def glob(self, pattern: str) -> list[str]:
        return sorted(self._u(p) for p in self.fs.glob(self._s(pattern)))

    def profile_runs(self, root: str) -> list[str]:
        rx = re.compile(r"(^|/)plugins/profile/[^/]+/[^/]+$")
        runs = set()
        for p in self.fs.find(self._s(root)):
            if rx.search(p) and is_xplane_name(p):
                runs.add(p.rsplit("/", 1)[0])
        return sorted(self._u(r) for r in runs)

    def mtime(self, p: str) -> float | None:
        try:
            info = self.fs.info(self._s(p))
        except (OSError, ValueError):
            return None
        for k in ("mtime", "updated", "LastModified", "last_modified", "created", "timeCreated"):
            v = info.get(k)
            if v is None:
                continue
            if isinstance(v, (int, float)):
                return float(v)
            if isinstance(v, datetime):
                return v.timestamp()
            try:
                return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
        return None

    def key(self, p: str) -> str:
        return p.rstrip("/")


def _fs_for(path: str):
    if is_url(path):
        fs, _ = open_fsspec(path)
        return _RemoteFS(fs)
    return _LocalFS()


# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInput:
    key: str  # normalised run folder (dedup key)
    path: str  # run folder as expanded (local path or URL)
    name: str  # run label (folder name; disambiguated when two runs share it)
    time: str | None  # ISO 8601
    time_source: str  # "folder name" | "modification time" | "unknown"
    sort_time: float  # seconds since the epoch (inf when unknown)
    files: tuple[str, ...]


@dataclass(frozen=True)
class Expansion:
    runs: tuple[RunInput, ...]  # sorted by (time, name)
    failures: tuple[Failure, ...]  # PATHS that do not exist or hold no host files

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for r in self.runs for f in r.files)


def run_time(name: str, mtime: float | None) -> tuple[str | None, str, float]:
    """(ISO time, source, sort key) of a run: its folder name when it is a
    ``YYYY_MM_DD_HH_MM_SS`` timestamp (taken as UTC), else the folder's mtime."""
    m = RUN_NAME_RE.match(name)
    if m:
        try:
            year, month, day, hour, minute, second = (int(g) for g in m.groups())
            dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
            return dt.strftime("%Y-%m-%dT%H:%M:%SZ"), "folder name", dt.timestamp()
        except ValueError:
            pass
    if mtime is not None:
        dt = datetime.fromtimestamp(mtime, tz=UTC)
        return dt.strftime("%Y-%m-%dT%H:%M:%SZ"), "modification time", float(mtime)
    return None, "unknown", math.inf


def expand_paths(paths: Iterable[str]) -> Expansion:
    """PATHS -> runs (sorted by time) -> host files. Never raises for a bad PATH:
    it becomes a failure entry."""
    groups: dict[str, dict] = {}  # run key -> {path, files: {file key: file}}
    failures: list[Failure] = []
    seen_files: set[str] = set()

    def add_file(fs, f: str) -> None:
        k = fs.key(f)
        if k in seen_files:
            return
        seen_files.add(k)
        run = parent(f)
        g = groups.setdefault(fs.key(run), {"path": run, "fs": fs, "files": []})
        g["files"].append(f)

    def add_dir(fs, d: str, given: str) -> None:
        direct = [f for f in fs.files_in(d) if is_xplane_name(f)]
        if direct:
            for f in direct:
                add_file(fs, f)
            return
        found = False
        for run in fs.profile_runs(d):
            for f in fs.files_in(run):
                if is_xplane_name(f):
                    add_file(fs, f)
                    found = True
        if not found:
            failures.append(
                Failure(given, None, None, f"{given}: no *.xplane.pb files here or under plugins/profile/<run>/", "InputError")
            )

    for given in paths:
        given = str(given)
        try:
            fs = _fs_for(given)
            if _GLOB_CHARS.search(given) and not fs.exists(given):
                matches = fs.glob(given)
                hit = False
                for m in matches:
                    if fs.isdir(m):
                        before = len(seen_files)
                        add_dir(fs, m, m)
                        hit = hit or len(seen_files) > before
                    elif is_xplane_name(m):
                        add_file(fs, m)
                        hit = True
                if not hit:
                    failures.append(Failure(given, None, None, f"{given}: matches no host files (*.xplane.pb[.gz]) or run folders", "InputError"))
                continue
            if fs.isdir(given):
                add_dir(fs, given, given)
            elif fs.isfile(given):
                add_file(fs, given)
            else:
                failures.append(
                    Failure(given, run_name(parent(given)), host_stem(given), f"{given}: no such file or directory", "InputError")
                )
        except ProfanalyzerError as e:
            failures.append(failure_from(given, e))
        except (OSError, ValueError) as e:
            failures.append(Failure(given, None, None, one_line(f"{given}: cannot list: {e}"), type(e).__name__))

    runs: list[RunInput] = []
    names: dict[str, int] = {}
    for g in groups.values():
        names[run_name(g["path"])] = names.get(run_name(g["path"]), 0) + 1
    taken: set[str] = set()
    for key, g in sorted(groups.items()):
        path = g["path"]
        folder = run_name(path)
        name = folder
        if names[name] > 1:  # two log dirs with a run folder of the same name
            name = _disambiguate(path if is_url(path) else os.path.abspath(path))
        base, k = name, 2
        while name in taken:
            name, k = f"{base} ({k})", k + 1
        taken.add(name)
        t, src, sort_t = run_time(folder, g["fs"].mtime(path) if not RUN_NAME_RE.match(folder) else None)
        files = tuple(sorted(g["files"], key=lambda f: (natural(host_stem(f)), f)))
        runs.append(RunInput(key, path, name, t, src, sort_t, files))
    runs.sort(key=lambda r: (r.sort_time, r.name, r.key))
    return Expansion(tuple(runs), tuple(failures))


def run_name(path: str) -> str:
    return basename(path) if is_url(path) else (os.path.basename(os.path.abspath(path)) or path)


def _disambiguate(path: str) -> str:
    parts = [p for p in str(path).replace("\\", "/").split("/") if p]
    if len(parts) >= 4 and parts[-3:-1] == ["plugins", "profile"]:
        return f"{parts[-4]}/{parts[-1]}"
    return "/".join(parts[-2:])


def natural(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


# ---------------------------------------------------------------------------
# The per-file task


def sha256_local(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a host file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    return h.hexdigest()


def fetch_remote(url: str) -> tuple[str, str]:
    """Copy a URL to a local temp file (system temp dir) while hashing it: (temp path, sha256)."""
    fs, p = open_fsspec(url)
    name = basename(url)
    suffix = ".xplane.pb.gz" if name.endswith(".gz") else ".xplane.pb"
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix="profanalyzer-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out, fs.open(p, "rb") as src:
            for chunk in iter(lambda: src.read(1 << 22), b""):
                h.update(chunk)
                out.write(chunk)
    except FileNotFoundError:
        os.unlink(tmp)
        raise InputError(f"{url}: no such file or directory") from None
    except OSError as e:
        os.unlink(tmp)
        raise InputError(f"{url}: cannot read: {e}") from None
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, h.hexdigest()
