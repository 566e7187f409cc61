"""Fleet scale: many hosts and many runs, analysed on a Dask cluster.

    from profanalyzer.fleet import run_fleet
    result = run_fleet(["gs://bucket/nightly/", "logs/"], workers=8)   # -> FleetResult
    result.to_dict()                                                   # deterministic JSON

Pipeline:

1. **Expand** PATHS (:func:`expand_paths`): run folders (``<run>/<host>.xplane.pb``),
   log dirs (every ``**/plugins/profile/<run>/``, not only the newest), single
   host files and globs. Local paths always work; URLs (``gs://``, ``s3://``,
   ``file://`` ...) go through fsspec when it (and the protocol's package, e.g.
   gcsfs) is installed. fsspec is imported lazily, only for URLs.
2. **Analyse** every host file as one task (:func:`analyse_host_file`): the full
   single-file analysis (:func:`profanalyzer.analysis.analyze` plus the rules)
   runs where the task runs, and only a small JSON record (a few KB: step time,
   buckets, idle and exposed communication, top recommendations) comes back.
   The trace never travels. Tasks run on a Dask cluster: a
   ``dask.distributed.LocalCluster`` (processes, one single-threaded worker per
   core) or the cluster of a given scheduler address; ``workers=0`` runs them
   in this process without Dask (the sequential reference path).
3. **Cache**: each record (or the InputError of a file that cannot be read) is
   stored under a content address (sha256 of the file bytes + profanalyzer
   version and code fingerprint + record version + options) in the user cache
   dir (``$PROFANALYZER_CACHE_DIR``, else ``$XDG_CACHE_HOME/profanalyzer``, else
   ``~/.cache/profanalyzer``), never next to the traces. A local run hashes and
   looks up local files in this process first (threads), so an unchanged fleet
   starts no cluster; tasks on a remote cluster use their workers' cache.
4. **Isolate failures**: a missing or corrupt host file becomes a failure entry
   (its one-line :class:`~profanalyzer.errors.ProfanalyzerError` message); the
   other files complete.
5. **Aggregate** (:func:`aggregate`): per run the pod view (per-host step time and
   buckets, straggler hosts by modified z-score, the slowest host's critical
   bucket); across runs a trend of step time and every bucket, sorted by run
   time, with the first run where each regressed.

Nothing here imports Dask at module level: the single-trace command must not
pay for it (``dask`` is the optional ``[fleet]`` extra).
"""

from __future__ import annotations

import functools
import glob as _glob
import hashlib
import json
import logging
import math
import os
import re
import statistics
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from profanalyzer import __version__
from profanalyzer.errors import InputError, ProfanalyzerError
from profanalyzer.stats import STRAGGLER_MIN_MEMBERS, STRAGGLER_MIN_REL_SCALE, STRAGGLER_Z, modified_z

FLEET_SCHEMA_VERSION = 1
#: Version of the per-file record layout (part of the cache key).
RECORD_VERSION = 1
XPLANE_SUFFIXES = (".xplane.pb.gz", ".xplane.pb")

#: Straggler hosts: modified z-score above STRAGGLER_Z (needs >= STRAGGLER_MIN_HOSTS analysed hosts).
STRAGGLER_MIN_HOSTS = STRAGGLER_MIN_MEMBERS
#: (The z-score scale is floored at STRAGGLER_MIN_REL_SCALE of the pod's median
#: step time, so hosts that agree to the picosecond do not turn noise into
#: stragglers; see profanalyzer.stats.)
#: Regression rule: value - baseline > max(K x noise, MIN_POINTS x baseline step time).
REGRESSION_K = 3.0
REGRESSION_MIN_POINTS = 0.01
REGRESSION_WINDOW = 7  # previous runs the baseline is taken over
REGRESSION_MIN_NOISE_RUNS = 3  # fewer previous runs: noise is 0 (the 1-point floor decides)

RUN_NAME_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB_CHARS = re.compile(r"[*?\[]")

log = logging.getLogger(__name__)


def _buckets() -> tuple[str, ...]:
    from profanalyzer.classify import BUCKETS

    return tuple(BUCKETS)


# ---------------------------------------------------------------------------
# Options and cache
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetOptions:
    """Options of the per-file analysis; all of them are part of the cache key."""

    chip: str | None = None

    def to_dict(self) -> dict:
        return {"chip": self.chip.lower() if self.chip else None}


def default_cache_dir() -> Path:
    """``$PROFANALYZER_CACHE_DIR``, else ``$XDG_CACHE_HOME/profanalyzer``, else ``~/.cache/profanalyzer``."""
    env = os.environ.get("PROFANALYZER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "profanalyzer"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over the source of profanalyzer and its rules (``heuristics``): part
    of the cache key, so an edited checkout (same version number) never serves
    records an older analysis computed."""
    import heuristics

    h = hashlib.sha256()
    for pkg in (Path(__file__).resolve().parent, Path(heuristics.__file__).resolve().parent):
        for f in sorted(pkg.rglob("*.py")):
            h.update(f"{pkg.name}/{f.relative_to(pkg).as_posix()}".encode() + b"\0")
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
        doc = {"key": key, "file_sha256": file_sha256, "tool_version": __version__}
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


def _from_cache(path: str, sha: str, hit: dict) -> dict:
    """A task output from a cache entry (the failure message names this path)."""
    out = {"path": path, "ok": True, "cached": True, "sha256": sha, "record": None, "error": None, "error_type": None}
    if "record" in hit:
        out["record"] = hit["record"]
    else:
        out.update(ok=False, error=hit["failure"]["error"].replace(PATH_MARK, path), error_type=hit["failure"]["error_type"])
    return out


# ---------------------------------------------------------------------------
# File systems: local paths, or fsspec for URLs (imported lazily)
# ---------------------------------------------------------------------------


def is_url(path: str) -> bool:
    return bool(_URL_RE.match(str(path)))


def _is_xplane_name(name: str) -> bool:
    return name.endswith(XPLANE_SUFFIXES)


def host_stem(path: str) -> str:
    """``.../t1v-n-abc-w-3.xplane.pb.gz`` -> ``t1v-n-abc-w-3`` (the host, as XProf names the file)."""
    name = _basename(path)
    for s in XPLANE_SUFFIXES + (".pb.gz", ".pb", ".gz"):
        if name.endswith(s) and len(name) > len(s):
            return name[: -len(s)]
    return name


def _basename(path: str) -> str:
    return str(path).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]


def _parent(path: str) -> str:
    p = str(path).rstrip("/")
    if is_url(p):
        head = p.rsplit("/", 1)[0]
        return head if not head.endswith(":/") else p
    return os.path.dirname(p) or "."


def _fsspec(url: str):
    """(filesystem, stripped path) for a URL; InputError when fsspec or the protocol's package is missing."""
    try:
        from fsspec.core import url_to_fs  # optional: only URLs need it
    except ImportError:
        raise InputError(f"{url}: URLs need fsspec (pip install fsspec, plus gcsfs for gs://)") from None
    try:
        return url_to_fs(url)
    except ImportError as e:
        raise InputError(f"{url}: this protocol needs an extra package: {e}") from None
    except (ValueError, OSError) as e:
        raise InputError(f"{url}: cannot open: {e}") from None


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
            if rx.search(p) and _is_xplane_name(p):
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
        fs, _ = _fsspec(path)
        return _RemoteFS(fs)
    return _LocalFS()


# ---------------------------------------------------------------------------
# Expansion: PATHS -> runs -> host files
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A host file (or a PATH) that could not be analysed, with its one-line error."""

    path: str
    run: str | None
    host: str | None
    error: str
    error_type: str


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
            dt = datetime(*(int(g) for g in m.groups()), tzinfo=timezone.utc)
            return dt.strftime("%Y-%m-%dT%H:%M:%SZ"), "folder name", dt.timestamp()
        except ValueError:
            pass
    if mtime is not None:
        dt = datetime.fromtimestamp(mtime, tz=timezone.utc)
        return dt.strftime("%Y-%m-%dT%H:%M:%SZ"), "modification time", float(mtime)
    return None, "unknown", math.inf


def _failure(path: str, err: BaseException, run: str | None = None, host: str | None = None) -> Failure:
    if isinstance(err, ProfanalyzerError):
        msg = str(err)
    else:
        msg = f"internal error: {type(err).__name__}: {err}"
    return Failure(path=path, run=run, host=host, error=_one_line(msg), error_type=type(err).__name__)


def _one_line(text: str, limit: int = 500) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


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
        run = _parent(f)
        g = groups.setdefault(fs.key(run), {"path": run, "fs": fs, "files": []})
        g["files"].append(f)

    def add_dir(fs, d: str, given: str) -> None:
        direct = [f for f in fs.files_in(d) if _is_xplane_name(f)]
        if direct:
            for f in direct:
                add_file(fs, f)
            return
        found = False
        for run in fs.profile_runs(d):
            for f in fs.files_in(run):
                if _is_xplane_name(f):
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
                    elif _is_xplane_name(m):
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
                    Failure(given, _run_name(_parent(given)), host_stem(given), f"{given}: no such file or directory", "InputError")
                )
        except ProfanalyzerError as e:
            failures.append(_failure(given, e))
        except (OSError, ValueError) as e:
            failures.append(Failure(given, None, None, _one_line(f"{given}: cannot list: {e}"), type(e).__name__))

    runs: list[RunInput] = []
    names: dict[str, int] = {}
    for g in groups.values():
        names[_run_name(g["path"])] = names.get(_run_name(g["path"]), 0) + 1
    taken: set[str] = set()
    for key, g in sorted(groups.items()):
        path = g["path"]
        folder = _run_name(path)
        name = folder
        if names[name] > 1:  # two log dirs with a run folder of the same name
            name = _disambiguate(path if is_url(path) else os.path.abspath(path))
        base, k = name, 2
        while name in taken:
            name, k = f"{base} ({k})", k + 1
        taken.add(name)
        t, src, sort_t = run_time(folder, g["fs"].mtime(path) if not RUN_NAME_RE.match(folder) else None)
        files = tuple(sorted(g["files"], key=lambda f: (_natural(host_stem(f)), f)))
        runs.append(RunInput(key, path, name, t, src, sort_t, files))
    runs.sort(key=lambda r: (r.sort_time, r.name, r.key))
    return Expansion(tuple(runs), tuple(failures))


def _run_name(path: str) -> str:
    return _basename(path) if is_url(path) else (os.path.basename(os.path.abspath(path)) or path)


def _disambiguate(path: str) -> str:
    parts = [p for p in str(path).replace("\\", "/").split("/") if p]
    if len(parts) >= 4 and parts[-3:-1] == ["plugins", "profile"]:
        return f"{parts[-4]}/{parts[-1]}"
    return "/".join(parts[-2:])


def _natural(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


# ---------------------------------------------------------------------------
# The per-file task
# ---------------------------------------------------------------------------


def _sha256_local(path: str) -> str:
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


def _fetch_remote(url: str) -> tuple[str, str]:
    """Copy a URL to a local temp file (system temp dir) while hashing it: (temp path, sha256)."""
    fs, p = _fsspec(url)
    name = _basename(url)
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


def host_record(analysis, findings) -> dict:
    """The small per-file record (JSON types only) the fleet aggregates."""
    d = analysis.to_dict()
    fd = findings.to_dict() if findings is not None else {"recommendations": [], "workload": None}
    buckets = {b: v["ps"] for b, v in d["breakdown"].items()}
    st = d["steps"]["step_time_ps"]
    hw = d.get("hardware") or d.get("chip") or {}
    rec = {
        "record_version": RECORD_VERSION,
        "tool_version": d["tool_version"],
        "hostnames": d["hosts"],
        "chip": hw.get("name"),
        "chip_source": d["chip_source"],
        "tensorcores": d["tensorcores"],
        "sparsecores": d["sparsecores"],
        "steps": {
            "count": d["steps"]["count"],
            "kept": d["steps"]["kept"],
            "source": d["steps"]["source"],
            "mean_ps": st["mean"],
            "median_ps": st["median"],
            "min_ps": st["min"],
            "max_ps": st["max"],
        },
        "buckets": buckets,
        "idle_ps": buckets.get("idle", 0.0),
        "exposed_comm_ps": d["communication"].get("exposed_total_ps") or 0.0,
        "remat_ps": d["remat"]["ps"],
        "mfu": d["utilisation"].get("mfu"),
        "straggler_cores": [c["core"] for c in d["per_core"] if c.get("straggler")],
        "workload": (fd.get("workload") or {}).get("row"),
        "recommendations": [
            {
                "code": r["code"],
                "lever": r["lever"],
                "title": r["title"],
                "severity": r["severity"],
                "saving_fraction": r["estimated_saving_fraction"],
            }
            for r in fd.get("recommendations", [])[:3]
        ],
        "notes": d["notes"],
    }
    # JSON round trip: a fresh record and a cached one are the same objects.
    return json.loads(json.dumps(rec, sort_keys=True))


def analyse_host_file(
    path: str,
    options: FleetOptions = FleetOptions(),
    cache_dir: str | None = None,
    use_cache: bool = True,
    sha256: str | None = None,
) -> dict:
    """One task: analyse one host file (local path or URL) and return a small dict.

    ``{"path", "ok", "cached", "sha256", "record", "error", "error_type"}``. Never
    raises for a bad file: the error is in the dict (one line). ``cache_dir``
    None: the default user cache dir of the machine the task runs on.
    ``sha256``: the local file's hash when the caller already computed it.
    """
    out = {"path": path, "ok": False, "cached": False, "sha256": None, "record": None, "error": None, "error_type": None}
    tmp = None
    try:
        if is_url(path):
            tmp, sha = _fetch_remote(path)
            local = tmp
        else:
            sha = sha256 or _sha256_local(path)
            local = path
        out["sha256"] = sha
        cache = RecordCache(cache_dir) if use_cache else None
        key = RecordCache.key(sha, options) if cache else None
        hit = cache.get(key) if cache else None
        if hit is not None:
            return _from_cache(path, sha, hit)
        from profanalyzer.analysis import AnalysisOptions, analyze
        from profanalyzer.findings import run_rules

        try:
            a = analyze(local, AnalysisOptions(chip=options.chip))
        except InputError as e:  # the bytes cannot be analysed: remember that too
            if cache:
                msg = _failure(path, e).error.replace(local, PATH_MARK)
                cache.put(key, sha, failure={"error": msg, "error_type": type(e).__name__})
            raise
        rec = host_record(a, run_rules(a))
        if cache:
            cache.put(key, sha, record=rec)
        out.update(ok=True, record=rec)
    except Exception as e:  # isolation: any failure of one file is that file's result
        f = _failure(path, e)
        msg = f.error.replace(tmp, path) if tmp else f.error
        out.update(ok=False, error=msg, error_type=f.error_type)
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return out


# ---------------------------------------------------------------------------
# Execution: sequential, or on a Dask cluster
# ---------------------------------------------------------------------------


class FleetDependencyError(ProfanalyzerError):
    """Dask is not installed (the optional [fleet] extra)."""


Progress = Callable[[int, int], None]


def _task(path: str, sha256: str | None, options: FleetOptions, cache_dir: str | None, use_cache: bool) -> dict:
    return analyse_host_file(path, options, cache_dir, use_cache, sha256)


def probe_cache(files: Sequence[str], options: FleetOptions, cache_dir: str | None, threads: int | None = None) -> list[tuple[str | None, dict | None]]:
    """Hash the local files (threads: hashlib releases the GIL) and look their
    records up in the cache, here, before any cluster starts: per file
    ``(sha256, task output)``; the output is None on a miss, the hash None for
    URLs and unreadable files (their task fetches or reports them)."""
    from concurrent.futures import ThreadPoolExecutor

    cache = RecordCache(cache_dir)

    def one(f: str) -> tuple[str | None, dict | None]:
        if is_url(f):
            return None, None
        try:
            sha = _sha256_local(f)
        except ProfanalyzerError:
            return None, None
        hit = cache.get(RecordCache.key(sha, options))
        return sha, (_from_cache(f, sha, hit) if hit is not None else None)

    with ThreadPoolExecutor(max_workers=threads or min(32, (os.cpu_count() or 1) * 2)) as ex:
        return list(ex.map(one, files))


def analyse_sequential(
    files: Sequence[str],
    options: FleetOptions,
    cache_dir: str | None,
    use_cache: bool,
    progress: Progress | None = None,
    shas: Sequence[str | None] | None = None,
) -> list[dict]:
    out = []
    shas = shas or [None] * len(files)
    for i, (f, sha) in enumerate(zip(files, shas)):
        out.append(analyse_host_file(f, options, cache_dir, use_cache, sha))
        if progress:
            progress(i + 1, len(files))
    return out


def start_local_cluster(n_workers: int, memory_limit: str | float | int | None = "auto"):
    """A ``LocalCluster`` of ``n_workers`` single-threaded worker processes.

    Two departures from Dask's defaults, both for this workload (one big numpy
    analysis per task):

    * glibc's dynamic malloc thresholds are kept: Dask spawns workers with
      ``MALLOC_TRIM_THRESHOLD_=65536``, which fixes the mmap threshold too, so
      every large temporary array is mmap'd, faulted in and unmapped again
      (~10x page faults, the analysis ~30% slower). A value the user set in
      the environment is kept.
    * this process's environment is left as it was: Dask's nannies write their
      pre-spawn variables (``MALLOC_TRIM_THRESHOLD_``, ``OMP_NUM_THREADS``,
      ``PYTHONHASHSEED``, ...) into ``os.environ`` of the process that starts them.

    The dashboard binds a free port (no clash with a running cluster).
    """
    import dask
    from dask.distributed import LocalCluster

    saved = dict(os.environ)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            return LocalCluster(
                n_workers=n_workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=logging.ERROR,
                memory_limit=memory_limit,
            )
    finally:
        for k in set(os.environ) - set(saved):
            del os.environ[k]
        for k, v in saved.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def analyse_dask(
    files: Sequence[str],
    options: FleetOptions,
    cache_dir: str | None,
    use_cache: bool,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    memory_limit: str | float | int | None = "auto",
    shas: Sequence[str | None] | None = None,
) -> list[dict]:
    """Map :func:`analyse_host_file` over ``files`` on a Dask cluster; results in input order."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise FleetDependencyError(
            "the fleet command needs Dask: pip install 'profanalyzer[fleet]' (or dask[distributed]); "
            "--workers 0 analyses in this process without it"
        ) from None
    if not files:
        return []
    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as e:
            raise InputError(f"cannot connect to the Dask scheduler at {scheduler}: {e}") from None
    else:
        n = workers or os.cpu_count() or 1
        n = max(1, min(n, len(files)))
        cluster = start_local_cluster(n, memory_limit=memory_limit)
        client = Client(cluster)
    try:
        futures = client.map(
            _task,
            list(files),
            list(shas or [None] * len(files)),
            options=options,
            cache_dir=cache_dir,
            use_cache=use_cache,
            pure=False,
        )
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[dict | None] = [None] * len(files)
        done = 0
        for fut in as_completed(futures):
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except Exception as e:  # worker died (KilledWorker), lost connection, ...
                results[i] = {
                    "path": files[i], "ok": False, "cached": False, "sha256": None, "record": None,
                    "error": _one_line(f"{files[i]}: the Dask task failed: {type(e).__name__}: {e}"),
                    "error_type": type(e).__name__,
                }
            done += 1
            if progress:
                progress(done, len(files))
            fut.release()
        return results  # type: ignore[return-value]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_fleet(
    paths: Iterable[str],
    *,
    options: FleetOptions = FleetOptions(),
    scheduler: str | None = None,
    workers: int | None = None,
    use_cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> "FleetResult":
    """Expand, analyse (``workers=0``: in this process, no Dask; else on a Dask
    cluster: ``scheduler`` address or a local one with ``workers`` processes,
    default one per core) and aggregate.

    Raises InputError when no PATH yields a host file.
    """
    paths = [str(p) for p in paths]
    exp = expand_paths(paths)
    files = exp.files
    if not files:
        msgs = "; ".join(f.error for f in exp.failures[:3]) or "no PATHS given"
        raise InputError(f"no host files to analyse: {msgs}")
    # A local run resolves the cache dir here (same machine); a remote cluster's
    # workers use their own user cache dir unless one is given.
    remote = bool(scheduler) and workers != 0
    if cache_dir is not None:
        cdir: str | None = str(cache_dir)
    elif remote:
        cdir = None
    else:
        cdir = str(default_cache_dir())
    outputs: list[dict | None] = [None] * len(files)
    shas: list[str | None] = [None] * len(files)
    if use_cache and not remote:
        # Local run: cache hits are found here, and a rerun of an unchanged fleet
        # starts no cluster at all. (A remote cluster's workers probe their own cache.)
        for i, (sha, out) in enumerate(probe_cache(files, options, cdir)):
            shas[i], outputs[i] = sha, out
    todo = [i for i, o in enumerate(outputs) if o is None]
    done = len(files) - len(todo)
    if progress and done:
        progress(done, len(files))
    if todo:
        sub, sub_shas = [files[i] for i in todo], [shas[i] for i in todo]
        step = (lambda k, n: progress(done + k, len(files))) if progress else None
        if workers == 0:
            res = analyse_sequential(sub, options, cdir, use_cache, step, sub_shas)
        else:
            res = analyse_dask(sub, options, cdir, use_cache, scheduler=scheduler, workers=workers, progress=step, shas=sub_shas)
        for i, r in zip(todo, res):
            outputs[i] = r
    return aggregate(exp, outputs, inputs=paths, options=options, use_cache=use_cache)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Aggregation: result types
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostResult:
    host: str  # file stem (XProf names host files <host>.xplane.pb)
    path: str
    ok: bool
    error: str | None
    hostnames: tuple[str, ...]  # host name(s) inside the file
    sha256: str | None
    tensorcores: int | None
    steps_kept: int | None
    step_ps: float | None  # mean per kept step, averaged over the host's TensorCores
    step_median_ps: float | None
    buckets: Mapping[str, float]  # ps per step
    idle_ps: float | None
    exposed_comm_ps: float | None
    wait_ps: float | None  # idle + exposed communication
    remat_ps: float | None
    mfu: float | None
    step_z: float | None
    wait_z: float | None
    straggler: bool
    straggler_reasons: tuple[str, ...]
    straggler_cores: tuple[str, ...]  # straggler TensorCores inside this host (single-file rule)
    top_recommendation: str | None
    workload: str | None


@dataclass(frozen=True)
class CriticalBucket:
    host: str  # the slowest host
    bucket: str
    host_ps: float
    pod_median_ps: float
    excess_ps: float  # host - pod median, for this bucket
    step_excess_ps: float  # host step - pod median step
    reason: str


@dataclass(frozen=True)
class RunResult:
    run: str
    path: str
    time: str | None
    time_source: str
    hosts_total: int
    hosts_ok: int
    hosts_failed: int
    step_ps: float | None  # mean over analysed hosts
    step_median_ps: float | None  # median over analysed hosts
    step_max_ps: float | None
    buckets: Mapping[str, float]  # mean over analysed hosts, ps per step
    wait_ps: float | None
    slowest_host: str | None
    critical: CriticalBucket | None
    stragglers: tuple[str, ...]
    straggler_check: str
    workload: str | None
    chip: str | None
    hosts: tuple[HostResult, ...]


@dataclass(frozen=True)
class Regression:
    metric: str  # step_time or a bucket
    run: str
    value_ps: float
    baseline_ps: float  # median over the previous runs (window)
    delta_ps: float
    threshold_ps: float
    noise_ps: float
    baseline_runs: int


@dataclass(frozen=True)
class TrendRow:
    run: str
    time: str | None
    hosts_ok: int
    values: Mapping[str, float | None]  # metric -> ps per step (None: no analysed host)
    regressed: tuple[str, ...]  # metrics that regressed at this run


@dataclass(frozen=True)
class Trend:
    metrics: tuple[str, ...]
    rows: tuple[TrendRow, ...]  # sorted by run time
    regressions: tuple[Regression, ...]
    first_regression: Mapping[str, Regression]  # metric -> first run where it regressed
    rule: str


@dataclass(frozen=True)
class FleetResult:
    schema_version: int
    tool_version: str
    inputs: tuple[str, ...]
    options: Mapping[str, object]
    files: int
    files_ok: int
    files_failed: int
    runs: tuple[RunResult, ...]  # sorted by run time
    trend: Trend
    failures: tuple[Failure, ...]
    cache: Mapping[str, object]
    definitions: Mapping[str, str]

    def to_dict(self) -> dict:
        from profanalyzer.analysis import _jsonable

        return _jsonable(self)

    @property
    def stragglers(self) -> tuple[tuple[str, str], ...]:
        return tuple((r.run, h) for r in self.runs for h in r.stragglers)


# ---------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------


def _ms(ps: float) -> str:
    return f"{ps / 1e9:.3f} ms"


def _host_from(path: str, out: dict, buckets: tuple[str, ...]) -> HostResult:
    host = host_stem(path)
    if not out.get("ok"):
        return HostResult(
            host, path, False, out.get("error") or "failed", (), out.get("sha256"), None, None, None, None, {},
            None, None, None, None, None, None, None, False, (), (), None, None,
        )
    r = out["record"]
    b = {k: float(r["buckets"].get(k, 0.0)) for k in buckets}
    idle = float(r.get("idle_ps") or 0.0)
    exp = float(r.get("exposed_comm_ps") or 0.0)
    recs = r.get("recommendations") or []
    top = None
    if recs:
        top = f"{recs[0]['code']} {recs[0]['title']} (~{recs[0]['saving_fraction'] * 100:.1f}% of the step)"
    return HostResult(
        host=host,
        path=path,
        ok=True,
        error=None,
        hostnames=tuple(r.get("hostnames") or ()),
        sha256=out.get("sha256"),
        tensorcores=int(r.get("tensorcores") or 0),
        steps_kept=int(r["steps"]["kept"]),
        step_ps=float(r["steps"]["mean_ps"]),
        step_median_ps=float(r["steps"]["median_ps"]),
        buckets=b,
        idle_ps=idle,
        exposed_comm_ps=exp,
        wait_ps=idle + exp,
        remat_ps=float(r.get("remat_ps") or 0.0),
        mfu=r.get("mfu"),
        step_z=None,
        wait_z=None,
        straggler=False,
        straggler_reasons=(),
        straggler_cores=tuple(r.get("straggler_cores") or ()),
        top_recommendation=top,
        workload=r.get("workload"),
    )


def _mode(values: Iterable[str | None]) -> str | None:
    vals = [v for v in values if v]
    if not vals:
        return None
    counts: dict[str, int] = {}
    for v in vals:
        counts[v] = counts.get(v, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def pod_view(run: RunInput, outputs: Sequence[dict], buckets: tuple[str, ...]) -> RunResult:
    """Per-run aggregation: hosts, stragglers, the slowest host's critical bucket."""
    from dataclasses import replace

    hosts = [_host_from(p, o, buckets) for p, o in zip(run.files, outputs)]
    ok = [h for h in hosts if h.ok]
    n_ok = len(ok)
    if not ok:
        return RunResult(
            run.name, run.path, run.time, run.time_source, len(hosts), 0, len(hosts), None, None, None, {}, None, None, None, (),
            "skipped: no host file of this run could be analysed", None, None, tuple(hosts),
        )
    steps = [h.step_ps for h in ok]
    med_step = statistics.median(steps)
    floor = STRAGGLER_MIN_REL_SCALE * med_step
    stragglers: list[str] = []
    if n_ok >= STRAGGLER_MIN_HOSTS:
        zs = modified_z(steps, floor)
        waits = [h.wait_ps for h in ok]
        zw = modified_z(waits, floor)
        med_wait = statistics.median(waits)
        new: dict[int, HostResult] = {}
        for h, z1, z2 in zip(ok, zs, zw):
            reasons = []
            if z1 > STRAGGLER_Z:
                reasons.append(f"step time {_ms(h.step_ps)} is {_ms(h.step_ps - med_step)} above the pod median {_ms(med_step)} (z {z1:.1f})")
            if z2 < -STRAGGLER_Z:
                reasons.append(
                    f"idle + exposed communication {_ms(h.wait_ps)} is {_ms(med_wait - h.wait_ps)} below the pod median "
                    f"{_ms(med_wait)} (z {z2:.1f}): the other hosts wait for it"
                )
            elif z2 > STRAGGLER_Z:
                reasons.append(
                    f"idle + exposed communication {_ms(h.wait_ps)} is {_ms(h.wait_ps - med_wait)} above the pod median "
                    f"{_ms(med_wait)} (z {z2:.1f}): slow links, input pipeline or host-side stalls"
                )
            new[id(h)] = replace(h, step_z=z1, wait_z=z2, straggler=bool(reasons), straggler_reasons=tuple(reasons))
            if reasons:
                stragglers.append(h.host)
        hosts = [new.get(id(h), h) for h in hosts]
        check = (
            f"modified z-score of step time and of idle + exposed communication over {n_ok} hosts; "
            f"straggler when step z > {STRAGGLER_Z:g} or |wait z| > {STRAGGLER_Z:g}"
        )
    else:
        check = f"skipped: {n_ok} analysed host{'s' if n_ok != 1 else ''} (needs >= {STRAGGLER_MIN_HOSTS})"
    ok = [h for h in hosts if h.ok]
    mean_b = {b: statistics.fmean(h.buckets[b] for h in ok) for b in buckets}
    slowest = max(ok, key=lambda h: (h.step_ps, _natural(h.host)))
    med_b = {b: statistics.median(h.buckets[b] for h in ok) for b in buckets}
    excess = {b: slowest.buckets[b] - med_b[b] for b in buckets}
    step_excess = slowest.step_ps - med_step
    crit_b = max(buckets, key=lambda b: (excess[b], -buckets.index(b)))
    if n_ok > 1 and step_excess > floor and excess[crit_b] > 0:
        reason = (
            f"{slowest.host} is {_ms(step_excess)} per step slower than the pod median; {crit_b} is "
            f"{_ms(excess[crit_b])} above its pod median, the largest excess of any bucket"
        )
    else:
        crit_b = max(buckets, key=lambda b: (slowest.buckets[b], -buckets.index(b)))
        reason = (
            f"{crit_b} is the largest bucket of {slowest.host} ({_ms(slowest.buckets[crit_b])} per step)"
            + (
                f"; no host is more than {STRAGGLER_MIN_REL_SCALE:.1%} slower than the pod median"
                if n_ok > 1
                else ""
            )
        )
    critical = CriticalBucket(slowest.host, crit_b, slowest.buckets[crit_b], med_b[crit_b], excess[crit_b], step_excess, reason)
    return RunResult(
        run=run.name,
        path=run.path,
        time=run.time,
        time_source=run.time_source,
        hosts_total=len(hosts),
        hosts_ok=n_ok,
        hosts_failed=len(hosts) - n_ok,
        step_ps=statistics.fmean(h.step_ps for h in ok),
        step_median_ps=med_step,
        step_max_ps=slowest.step_ps,
        buckets=mean_b,
        wait_ps=statistics.fmean(h.wait_ps for h in ok),
        slowest_host=slowest.host,
        critical=critical,
        stragglers=tuple(stragglers),
        straggler_check=check,
        workload=_mode(h.workload for h in ok),
        chip=_mode(o["record"].get("chip") for o in outputs if o.get("ok")),
        hosts=tuple(hosts),
    )


def trend(runs: Sequence[RunResult], buckets: tuple[str, ...]) -> Trend:
    """Step time and every bucket per run (runs already sorted by time), and regressions.

    Rule, per metric, for each run with analysed hosts: baseline = median of the
    metric over the up to REGRESSION_WINDOW previous such runs; noise = 1.4826 x
    MAD of those (0 with fewer than REGRESSION_MIN_NOISE_RUNS); the run regressed
    when value - baseline > max(REGRESSION_K x noise, REGRESSION_MIN_POINTS x
    the baseline step time).
    """
    metrics = ("step_time", *buckets)
    rows: list[TrendRow] = []
    history: list[dict[str, float]] = []
    regs: list[Regression] = []
    first: dict[str, Regression] = {}
    for r in runs:
        if r.hosts_ok == 0 or r.step_ps is None:
            rows.append(TrendRow(r.run, r.time, 0, {m: None for m in metrics}, ()))
            continue
        vals = {"step_time": r.step_ps, **{b: r.buckets[b] for b in buckets}}
        flagged = []
        prev = history[-REGRESSION_WINDOW:]
        if prev:
            base_step = statistics.median(p["step_time"] for p in prev)
            for m in metrics:
                pv = [p[m] for p in prev]
                base = statistics.median(pv)
                noise = 1.4826 * statistics.median([abs(v - base) for v in pv]) if len(pv) >= REGRESSION_MIN_NOISE_RUNS else 0.0
                thr = max(REGRESSION_K * noise, REGRESSION_MIN_POINTS * base_step)
                delta = vals[m] - base
                if delta > thr:
                    reg = Regression(m, r.run, vals[m], base, delta, thr, noise, len(pv))
                    regs.append(reg)
                    flagged.append(m)
                    first.setdefault(m, reg)
        history.append(vals)
        rows.append(TrendRow(r.run, r.time, r.hosts_ok, vals, tuple(flagged)))
    rule = (
        f"per metric (step time, each bucket; mean over a run's analysed hosts, ps per step): a run regressed when "
        f"its value exceeds the median of the previous {REGRESSION_WINDOW} runs by more than max({REGRESSION_K:g} x noise, "
        f"{REGRESSION_MIN_POINTS * 100:g}% of the baseline step time); noise = 1.4826 x MAD of those runs "
        f"(0 with fewer than {REGRESSION_MIN_NOISE_RUNS})"
    )
    return Trend(metrics, tuple(rows), tuple(regs), first, rule)


DEFINITIONS = {
    "step_time": "per host: mean of its kept steps, averaged over its TensorCores (the single-trace analysis); per run: mean over analysed hosts",
    "buckets": "exclusive time per step (ps) of each bucket, as the single-trace analysis attributes it; per run: mean over analysed hosts",
    "wait": "idle + exposed communication per step: the time a host's TensorCores compute nothing",
    "straggler": (
        f"modified z-score 0.6745 (x - median) / max(MAD, {STRAGGLER_MIN_REL_SCALE:.1%} of the pod's median step time) over the "
        f"run's analysed hosts (>= {STRAGGLER_MIN_HOSTS}); a host is a straggler when its step-time z > {STRAGGLER_Z:g} "
        f"or its wait z is beyond +/-{STRAGGLER_Z:g} (below: the others wait for it; above: it waits on links or input)"
    ),
    "critical_bucket": (
        f"for the run's slowest host: the bucket with the largest excess over the pod's per-bucket median when the host is "
        f"more than {STRAGGLER_MIN_REL_SCALE:.1%} slower than the pod median step, else its largest bucket"
    ),
    "run_time": "the run folder name when it is a YYYY_MM_DD_HH_MM_SS timestamp (read as UTC), else the folder's modification time",
    "cache": (
        "per-file records (or the InputError of an unreadable file) stored by sha256(file bytes) + profanalyzer version "
        "and code fingerprint + record version + options in the user cache dir; hits: files answered from it, "
        "analysed: the others"
    ),
}


def aggregate(
    exp: Expansion,
    outputs: Sequence[dict],
    *,
    inputs: Sequence[str] = (),
    options: FleetOptions = FleetOptions(),
    use_cache: bool = True,
) -> FleetResult:
    """Build the FleetResult from the expansion and the per-file task outputs (in ``exp.files`` order)."""
    buckets = _buckets()
    if len(outputs) != len(exp.files):
        raise ValueError("one output per expanded host file expected")
    by_file = dict(zip(exp.files, outputs))
    runs = tuple(pod_view(r, [by_file[f] for f in r.files], buckets) for r in exp.runs)
    failures = list(exp.failures)
    for r in exp.runs:
        for f in r.files:
            o = by_file[f]
            if not o.get("ok"):
                failures.append(Failure(f, r.name, host_stem(f), o.get("error") or "failed", o.get("error_type") or "Error"))
    n_ok = sum(1 for o in outputs if o.get("ok"))
    hits = sum(1 for o in outputs if o.get("cached"))
    return FleetResult(
        schema_version=FLEET_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=tuple(inputs),
        options=options.to_dict(),
        files=len(outputs),
        files_ok=n_ok,
        files_failed=len(outputs) - n_ok,
        runs=runs,
        trend=trend(runs, buckets),
        failures=tuple(failures),
        cache={"enabled": bool(use_cache), "hits": hits, "analysed": len(outputs) - hits},
        definitions=dict(DEFINITIONS),
    )
