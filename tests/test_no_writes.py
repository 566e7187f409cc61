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
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import SAMPLES, sample_path

_HOOK = r"""
import json, os, sys
_fd = int(os.environ["PA_AUDIT_FD"])
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_EVENTS = {"os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown",
           "os.utime", "os.symlink", "os.link", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
           "shutil.copytree", "shutil.move", "shutil.rmtree", "tempfile.mkstemp", "tempfile.mkdtemp"}

def _name(a):
    return os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a)

def _hook(event, args):
    what = None
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None))[:3]
        if isinstance(path, int):
            return
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS):
            what = f"open\t{_name(path)}"
    elif event in _EVENTS:
        what = f"{event}\t{_name(args[0]) if args else ''}"
        if event in ("os.rename", "os.link", "os.symlink", "shutil.copyfile", "shutil.move") and len(args) > 1:
            what += f"\t{_name(args[1])}"
    if what is not None:
        os.write(_fd, (what + "\n").encode("utf-8", "backslashreplace"))

sys.addaudithook(_hook)
from profanalyzer.cli import main
# Several commands in one process (one interpreter start); each command's
# audit records, stdout and stderr end with a marker line.
for i, argv in enumerate(json.loads(os.environ["PA_COMMANDS"])):
    rc = main(argv)
    for stream in (sys.stdout, sys.stderr):
        stream.write(f"\n=== {i} {rc}\n")
        stream.flush()
    os.write(_fd, f"=== {i} {rc}\n".encode())
"""

_TEMP = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{8}\.tmp$")


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


BUDGET = 'baseline = "dense_short_fsdp.xplane.pb.gz"\n[budget]\nmfu = { min = 0.0 }\n[max_regression]\nstep_time = "50%"\n'


@pytest.fixture()
def sandbox(tmp_path):
    dirs = {k: tmp_path / k for k in ("input", "home", "tmp", "cwd", "out")}
    for p in dirs.values():
        p.mkdir()
    shutil.copy2(sample_path("dense_short_fsdp"), dirs["input"] / "dense_short_fsdp.xplane.pb.gz")
    shutil.copytree(SAMPLES / "dense_short_fsdp_2hosts", dirs["input"] / "logdir")
    (dirs["input"] / "budget.toml").write_text(BUDGET)
    _read_only(dirs["input"], True)
    yield dirs
    _read_only(dirs["input"], False)  # let pytest clean up


@dataclass
class Command:
    argv: list[str]
    files: list[Path]  # the files it must write (each printed)
    folders: list[Path] = field(default_factory=list)  # folder outputs (printed): anything beneath them is its own
    rc: int = 0


def _run_audited(d: dict[str, Path], commands: list[Command]) -> list[tuple[int, str, list[list[str]]]]:
    """Run the commands in one child process with the audit hook: per
    command (exit code, its stdout + stderr, its write events)."""
    r_fd, w_fd = os.pipe()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(d["home"]),
        "TMPDIR": str(d["tmp"]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PA_AUDIT_FD": str(w_fd),
        "PA_COMMANDS": json.dumps([c.argv for c in commands]),
        "LANG": "C.UTF-8",
    }
    proc = subprocess.Popen([sys.executable, "-c", _HOOK], cwd=d["cwd"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(w_fd,))
    os.close(w_fd)
    with os.fdopen(r_fd, "rb") as audit_pipe:
        out, err = proc.communicate(timeout=600)
        audit = audit_pipe.read().decode()
    assert proc.returncode == 0, err.decode()[-3000:]

    def split(text: str) -> list[tuple[int, str]]:
        parts = re.split(r"^=== (\d+) (-?\d+)$", text, flags=re.M)
        return [(int(parts[i + 2]), parts[i]) for i in range(0, len(parts) - 1, 3)]

    outs, errs = split(out.decode()), split(err.decode())
    audits = split(audit)
    assert len(outs) == len(errs) == len(audits) == len(commands), err.decode()[-3000:]
    return [(rc, o + e, [line.split("\t") for line in a.splitlines() if line])
            for (rc, o), (_, e), (_, a) in zip(outs, errs, audits, strict=True)]


def _check_writes(cmd: Command, printed: str, writes: list[list[str]]) -> None:
    """Every write event is one of the command's printed outputs: an output
    file, a temporary file next to it that is renamed onto it, or anything
    beneath a folder output; every output file was written."""
    files = {str(p) for p in cmd.files}
    folders = [str(p) for p in cmd.folders]
    for p in [*files, *folders]:
        assert p in printed, f"{cmd.argv}: {p} written but not printed:\n{printed}"

    def under_folder(path: str) -> bool:
        return any(path == f or path.startswith(f + os.sep) for f in folders)

    def temp_of(path: str) -> str | None:
        head, name = os.path.split(path)
        m = _TEMP.match(name)
        return os.path.join(head, m["name"]) if m else None

    renamed = {(w[1], w[2]) for w in writes if w[0] == "os.rename" and len(w) > 2}
    bad = []
    for w in writes:
        ev, path = w[0], w[1]
        if under_folder(path):
            continue
        if ev == "open" and (path in files or ((t := temp_of(path)) in files and (path, t) in renamed)):
            continue
        if ev == "os.rename" and len(w) > 2 and w[2] in files and temp_of(path) == w[2]:
            continue
        bad.append(w)
    assert not bad, f"{cmd.argv}: unexpected writes: {bad}"
    landed = {w[1] for w in writes if w[0] == "open"} | {w[2] for w in writes if w[0] == "os.rename" and len(w) > 2}
    for p in files:
        assert p in landed, f"{cmd.argv}: {p} was never written"


def _audit_commands(d: dict[str, Path], commands: list[Command]) -> list[str]:
    """Run and check the commands; each one's printed text."""
    before = _snapshot(d["input"])
    results = _run_audited(d, commands)
    for cmd, (rc, printed, writes) in zip(commands, results, strict=True):
        assert rc == cmd.rc, f"{cmd.argv}: exit {rc}\n{printed}"
        for p in cmd.files:
            assert p.is_file() and p.stat().st_size > 0, f"{cmd.argv}: {p} missing"
        _check_writes(cmd, printed, writes)
    # The output folder holds exactly the requested outputs.
    wanted = {p.relative_to(d["out"]).parts[0] for c in commands for p in [*c.files, *c.folders]}
    assert set(os.listdir(d["out"])) == wanted
    # Nothing else changed on disk.
    assert _snapshot(d["input"]) == before, "the input changed"
    for k in ("home", "tmp", "cwd"):
        assert os.listdir(d[k]) == [], f"wrote into {k}: {os.listdir(d[k])}"
    return [printed for _, printed, _ in results]


@pytest.mark.parametrize("which", ["dense_short_fsdp.xplane.pb.gz", "logdir"])
def test_analyze_writes_only_the_requested_outputs(sandbox, which):
    d = sandbox
    outs = {"html": d["out"] / "r.html", "json": d["out"] / "r.json", "md": d["out"] / "r.md", "trace": d["out"] / "t.json.gz"}
    argv = ["analyze", str(d["input"] / which), "-j", "2", "-o", str(outs["html"]), "--json", str(outs["json"]),
            "--markdown", str(outs["md"]), "--trace-out", str(outs["trace"])]
    (printed,) = _audit_commands(d, [Command(argv, list(outs.values()))])
    assert f"report: {outs['html']}" in printed and f"trace: {outs['trace']}" in printed
    assert f"wrote {outs['json']}" in printed and f"wrote {outs['md']}" in printed
    json.loads(outs["json"].read_text())


def test_every_command_writes_only_what_it_prints(sandbox):
    """info, compare, check, fleet (in this process), synth (a file and a run
    folder), schema and explain, each with every output option, in one
    audited process."""
    d = sandbox
    inp, o = d["input"], d["out"]
    trace, logdir, budget = str(inp / "dense_short_fsdp.xplane.pb.gz"), str(inp / "logdir"), str(inp / "budget.toml")
    commands = [
        Command(["info", trace, "--json", str(o / "info.json")], [o / "info.json"]),
        Command(["compare", trace, logdir, "-o", str(o / "diff.html"), "--json", str(o / "diff.json"), "--markdown", str(o / "diff.md")],
                [o / "diff.html", o / "diff.json", o / "diff.md"]),
        Command(["check", logdir, "--budget", budget, "--junit", str(o / "check.xml"), "--json", str(o / "check.json")],
                [o / "check.xml", o / "check.json"]),
        Command(["fleet", logdir, trace, "--workers", "0", "-o", str(o / "fleet.html"), "--json", str(o / "fleet.json"),
                 "--cache-dir", str(o / "cache")], [o / "fleet.html", o / "fleet.json"], [o / "cache"]),
        Command(["synth", "dense_short_fsdp", "-o", str(o / "s.xplane.pb.gz"), "--steps", "2"],
                [o / "s.xplane.pb.gz", o / "s.truth.json"]),
        Command(["synth", "dense_short_fsdp", "-o", str(o / "srun"), "--hosts", "2", "--steps", "2"], [], [o / "srun"]),
        Command(["schema", "-o", str(o / "schema.json")], [o / "schema.json"]),
        Command(["explain", "SC001", "--json", str(o / "explain.json")], [o / "explain.json"]),
    ]
    printed = _audit_commands(d, commands)
    # synth's run folder: every file in it was printed, one per line.
    made = sorted(str(p) for p in (o / "srun").rglob("*") if p.is_file())
    assert len(made) == 3  # two hosts and the truth
    assert set(made) <= set(printed[5].splitlines())
    assert {str(o / "s.xplane.pb.gz"), str(o / "s.truth.json")} <= set(printed[4].splitlines())
    assert (o / "cache").is_dir() and any((o / "cache").rglob("*.json"))
