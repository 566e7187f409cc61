"""profanalyze writes only the output paths it prints (issue 8, security).

`analyze` runs in a subprocess on a read-only copy of a sample (a single
.xplane.pb.gz, and a two-host log dir so that the parallel host decoding runs
too), with HOME, TMPDIR and the working directory pointed at fresh, empty
folders. Two independent checks:

* file system: afterwards the input copy is byte-for-byte unchanged (same
  entries, sizes, mtimes, permissions), and HOME, TMPDIR and the working
  directory are still empty; the output folder holds exactly the requested
  outputs;
* audit hook (PEP 578) installed in the child before profanalyzer is
  imported, inherited by the forked decoder processes: every open for
  writing, mkdir, remove, rename, chmod, utime, truncate, symlink, mkstemp
  and mkdtemp anywhere on the machine is recorded, and each must be one of
  the requested outputs (which the CLI prints). Bytecode caching is the
  interpreter's, not profanalyzer's: it is off (PYTHONDONTWRITEBYTECODE).

chmod -w does not stop root (tests may run as root); the audit hook does not
depend on permissions, so the check holds either way.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES, sample_path

_HOOK = r"""
import os, sys
_fd = int(os.environ["PA_AUDIT_FD"])
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_EVENTS = {"os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown",
           "os.utime", "os.symlink", "os.link", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
           "shutil.copytree", "shutil.move", "shutil.rmtree", "tempfile.mkstemp", "tempfile.mkdtemp"}

def _hook(event, args):
    what = None
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None))[:3]
        if isinstance(path, int):
            return
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS):
            what = f"open\t{os.fsdecode(path)}"
    elif event in _EVENTS:
        a = args[0] if args else ""
        what = f"{event}\t{os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else a}"
    if what is not None:
        os.write(_fd, (what + "\n").encode("utf-8", "backslashreplace"))

sys.addaudithook(_hook)
from profanalyzer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _snapshot(root: Path) -> dict[str, tuple]:
    snap = {}
    for p in sorted(root.rglob("*")) + [root]:
        st = p.lstat()
        entry = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size if p.is_file() else 0, st.st_mtime_ns)
        if p.is_file():
            entry += (p.read_bytes(),)
        snap[str(p.relative_to(root))] = entry
    return snap


def _read_only(root: Path, on: bool) -> None:
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        p.chmod(mode & ~0o222 if on else mode | 0o200)


@pytest.fixture()
def sandbox(tmp_path):
    dirs = {k: tmp_path / k for k in ("input", "home", "tmp", "cwd", "out")}
    for p in dirs.values():
        p.mkdir()
    shutil.copy2(sample_path("dense_short_fsdp"), dirs["input"] / "dense_short_fsdp.xplane.pb.gz")
    shutil.copytree(SAMPLES / "dense_short_fsdp_2hosts", dirs["input"] / "logdir")
    _read_only(dirs["input"], True)
    yield dirs
    _read_only(dirs["input"], False)  # let pytest clean up


@pytest.mark.parametrize("which", ["dense_short_fsdp.xplane.pb.gz", "logdir"])
def test_analyze_writes_only_the_requested_outputs(sandbox, which):
    d = sandbox
    before = _snapshot(d["input"])
    outs = {"html": d["out"] / "r.html", "json": d["out"] / "r.json", "md": d["out"] / "r.md"}
    r_fd, w_fd = os.pipe()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(d["home"]),
        "TMPDIR": str(d["tmp"]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PA_AUDIT_FD": str(w_fd),
        "LANG": "C.UTF-8",
    }
    cmd = [sys.executable, "-c", _HOOK, "analyze", str(d["input"] / which), "-j", "2",
           "-o", str(outs["html"]), "--json", str(outs["json"]), "--markdown", str(outs["md"])]
    proc = subprocess.Popen(cmd, cwd=d["cwd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w_fd,))
    os.close(w_fd)
    with os.fdopen(r_fd, "rb") as audit_pipe:
        out, err = proc.communicate(timeout=300)
        audit = audit_pipe.read().decode()
    assert proc.returncode == 0, err.decode()
    printed = out.decode() + err.decode()
    # The outputs exist, are announced, and are all there is.
    for p in outs.values():
        assert p.is_file() and p.stat().st_size > 0
    assert f"report: {outs['html']}" in printed
    assert f"wrote {outs['json']}" in printed and f"wrote {outs['md']}" in printed
    assert sorted(os.listdir(d["out"])) == sorted(p.name for p in outs.values())
    json.loads(outs["json"].read_text())
    # Nothing else changed on disk.
    assert _snapshot(d["input"]) == before, "the input changed"
    for k in ("home", "tmp", "cwd"):
        assert os.listdir(d[k]) == [], f"wrote into {k}: {os.listdir(d[k])}"
    # Nothing else was even opened for writing, by the CLI or its workers.
    allowed = {str(p) for p in outs.values()}
    writes = [line.split("\t", 1) for line in audit.splitlines() if line]
    bad = [(ev, path) for ev, path in writes if not (ev == "open" and path in allowed)]
    assert not bad, f"unexpected writes: {bad}"
    assert {path for ev, path in writes} == allowed
