"""No command ever writes over, or into, what it reads (issue 23, section 1).

Every command and every output option is pointed at every kind of input
(a .xplane.pb.gz file, a plain .xplane.pb, a file named without .xplane.pb,
a run folder, a log dir, a symlink and a hard link to the input, `./a` vs
`a`, a relative vs an absolute path, a new file inside a run folder, through
a symlinked folder, a --history folder, a budget and a baseline): each is
refused with exit 2 and one error line, before any work, so the whole tree
(the inputs' bytes and every other file) is unchanged and no file appears,
not even the command's other, harmless outputs.

The refusals run before any trace is read, so each case costs milliseconds
(in-process, through profanalyzer.cli.main). `synth`, `schema` and `explain`
read no input: their outputs are checked for the missing-folder rule (every
command refuses an output whose folder does not exist) and for a folder
given as a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_cli, sample_path

RUN = "2024_01_01_00_00_00"
BUDGET = "[budget]\nmfu = { min = 0.0 }\n"


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under root: its kind and its bytes' hash (or link target)."""
    snap: dict[str, tuple] = {}
    for top, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(top) / n
            rel = str(p.relative_to(root))
            if p.is_symlink():
                snap[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                snap[rel] = ("dir",)
            else:
                st = p.stat()
                snap[rel] = ("file", st.st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
    return snap


@pytest.fixture()
def world(tmp_path, monkeypatch):
    """tmp_path/in: the inputs of every kind; tmp_path/out: where harmless
    outputs go; the working directory is tmp_path/in."""
    src = sample_path("host_offload_loop")
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    shutil.copy(src, inp / "a.xplane.pb.gz")
    shutil.copy(src, inp / "b.xplane.pb.gz")
    shutil.copy(src, inp / "capture.pb.gz")  # named without .xplane.pb
    import gzip

    (inp / "plain.xplane.pb").write_bytes(gzip.decompress(src.read_bytes()))
    run = inp / "logdir" / "plugins" / "profile" / RUN
    run.mkdir(parents=True)
    shutil.copy(src, run / "h0.xplane.pb.gz")
    shutil.copy(src, run / "h1.xplane.pb.gz")
    os.symlink("a.xplane.pb.gz", inp / "link.xplane.pb.gz")
    os.link(inp / "a.xplane.pb.gz", inp / "hard.xplane.pb.gz")
    os.link(run / "h0.xplane.pb.gz", inp / "h0-hard.xplane.pb.gz")
    os.symlink(run, inp / "runlink")
    (inp / "budget.toml").write_text(BUDGET)
    hist = inp / "history"
    hist.mkdir()
    (hist / "001.json").write_text("{}\n")
    monkeypatch.chdir(inp)
    monkeypatch.setenv("PROFANALYZER_CACHE_DIR", str(out / "cache"))
    return tmp_path


@dataclass(frozen=True)
class Kind:
    """An input and an output path that names it (or lies inside it), both
    relative to tmp_path/in unless absolute is asked."""

    name: str
    given: str  # the input argument
    victim: str  # the output path that aliases it
    victim_absolute: bool = False


KINDS = [
    Kind("gz-file", "a.xplane.pb.gz", "a.xplane.pb.gz"),
    Kind("plain-file", "plain.xplane.pb", "plain.xplane.pb"),
    Kind("no-xplane-name", "capture.pb.gz", "capture.pb.gz"),
    Kind("output-is-symlink-to-input", "a.xplane.pb.gz", "link.xplane.pb.gz"),
    Kind("input-is-symlink", "link.xplane.pb.gz", "a.xplane.pb.gz"),
    Kind("hard-link", "a.xplane.pb.gz", "hard.xplane.pb.gz"),
    Kind("dot-slash", "a.xplane.pb.gz", "./a.xplane.pb.gz"),
    Kind("relative-vs-absolute", "a.xplane.pb.gz", "a.xplane.pb.gz", victim_absolute=True),
    Kind("run-folder-host-file", f"logdir/plugins/profile/{RUN}", f"logdir/plugins/profile/{RUN}/h0.xplane.pb.gz"),
    Kind("new-file-in-run-folder", f"logdir/plugins/profile/{RUN}", f"logdir/plugins/profile/{RUN}/new.out"),
    Kind("run-folder-through-symlink", f"logdir/plugins/profile/{RUN}", "runlink/new.out"),
    Kind("hard-link-to-run-folder-file", f"logdir/plugins/profile/{RUN}", "h0-hard.xplane.pb.gz"),
    Kind("log-dir-host-file", "logdir", f"logdir/plugins/profile/{RUN}/h1.xplane.pb.gz"),
    Kind("new-file-in-log-dir", "logdir", "logdir/report.out"),
    Kind("log-dir-input-run-folder-output", "logdir", f"logdir/plugins/profile/{RUN}"),
]

#: command -> (argv before the output option, given the input; its output
#: options). Each case passes one option the victim and, when the command
#: has another, that one a fresh path in tmp_path/out: it must not appear.
COMMANDS = {
    "analyze": (lambda i: ["analyze", i], ["-o", "--json", "--markdown", "--trace-out"]),
    "info": (lambda i: ["info", i], ["--json"]),
    "compare-base": (lambda i: ["compare", i, "b.xplane.pb.gz"], ["-o", "--json", "--markdown"]),
    "compare-new": (lambda i: ["compare", "b.xplane.pb.gz", i], ["-o", "--json", "--markdown"]),
    "check": (lambda i: ["check", i, "--budget", "budget.toml"], ["--junit", "--json"]),
    "check-baseline": (lambda i: ["check", "b.xplane.pb.gz", "--budget", "budget.toml", "--baseline", i], ["--junit", "--json"]),
    "fleet": (lambda i: ["fleet", i, "--workers", "0"], ["-o", "--json"]),
}

CASES = [(c, opt, k) for c, (_, opts) in COMMANDS.items() for opt in opts for k in KINDS]


def _refused(capsys, world: Path, argv: list[str], needle: str = "refusing to write") -> str:
    before = _tree(world)
    rc, out, err = run_cli(capsys, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (argv, rc, err)
    assert len(lines) == 1 and lines[0].startswith("profanalyze: error: ") and needle in lines[0], (argv, err)
    assert "Traceback" not in err and out == "", (argv, out)
    assert _tree(world) == before, f"{argv}: the tree changed"
    return lines[0]


@pytest.mark.parametrize("command,option,kind", CASES, ids=[f"{c}{o}-{k.name}" for c, o, k in CASES])
def test_an_output_that_names_an_input_is_refused(capsys, world, command, option, kind):
    head, options = COMMANDS[command]
    victim = str(world / "in" / kind.victim) if kind.victim_absolute else kind.victim
    argv = [*head(kind.given), option, victim]
    others = [o for o in options if o != option]
    if others:
        argv += [others[0], str(world / "out" / f"harmless{others[0].lstrip('-')}")]
    _refused(capsys, world, argv)


def test_the_message_names_the_option_the_output_and_the_input(capsys, world):
    line = _refused(capsys, world, ["compare", "a.xplane.pb.gz", "b.xplane.pb.gz", "--json", "hard.xplane.pb.gz"])
    assert line == ("profanalyze: error: --json hard.xplane.pb.gz: refusing to write over the input "
                    "a.xplane.pb.gz (the same file by another name)")
    line = _refused(capsys, world, ["info", f"logdir/plugins/profile/{RUN}", "--json", "h0-hard.xplane.pb.gz"])
    assert line.endswith(f"--json h0-hard.xplane.pb.gz: refusing to write over logdir/plugins/profile/{RUN}/h0.xplane.pb.gz, "
                         f"a file of the input folder logdir/plugins/profile/{RUN} (the same file by another name)")
    line = _refused(capsys, world, ["analyze", "logdir", "--markdown", "logdir/x.md"])
    assert line.endswith("--markdown logdir/x.md: refusing to write over the input: it lies inside the input folder logdir")


def test_analyze_default_report_path_is_checked_too(capsys, world):
    # The default report is ./<stem>.report.html: with the working directory
    # inside the run folder it would land in the input.
    os.chdir(world / "in" / "logdir" / "plugins" / "profile" / RUN)
    _refused(capsys, world, ["analyze", ".", "--json", str(world / "out" / "r.json")])


@pytest.mark.parametrize("option", ["--json", "--markdown", "-o", "--trace-out"])
def test_history_folder_is_an_input_folder(capsys, world, option):
    _refused(capsys, world, ["analyze", "a.xplane.pb.gz", "--history", "history", option, "history/001.json"])
    _refused(capsys, world, ["analyze", "a.xplane.pb.gz", "--history", "history", option, "history/new.out"])


@pytest.mark.parametrize("option", ["--junit", "--json"])
def test_budget_and_the_budgets_baseline_are_inputs(capsys, world, option):
    _refused(capsys, world, ["check", "a.xplane.pb.gz", "--budget", "budget.toml", option, "budget.toml"])
    (world / "in" / "reg.toml").write_text('baseline = "b.xplane.pb.gz"\n[max_regression]\nstep_time = "3%"\n')
    _refused(capsys, world, ["check", "a.xplane.pb.gz", "--budget", "reg.toml", option, "b.xplane.pb.gz"])
    # The budget found in the working directory (no --budget) is an input as well.
    shutil.copy(world / "in" / "budget.toml", world / "in" / "profanalyze.toml")
    _refused(capsys, world, ["check", "a.xplane.pb.gz", option, "./profanalyze.toml"])


def test_fleet_cache_never_goes_inside_an_input_folder(capsys, world, monkeypatch):
    run = f"logdir/plugins/profile/{RUN}"
    _refused(capsys, world, ["fleet", run, "--workers", "0", "--no-html", "--cache-dir", f"{run}/cache"])
    _refused(capsys, world, ["fleet", "logdir", "--workers", "0", "--no-html", "--cache-dir", "runlink/c"])
    # The default cache dir (here from the environment) is checked as well.
    monkeypatch.setenv("PROFANALYZER_CACHE_DIR", str(world / "in" / "logdir" / "cache"))
    line = _refused(capsys, world, ["fleet", "logdir", "--workers", "0", "--no-html"])
    assert "the fleet cache" in line
    # A glob's matches are inputs too.
    _refused(capsys, world, ["fleet", "logdir/plugins/profile/*", "--workers", "0", "--no-html", "--json", f"{run}/f.json"])


@pytest.mark.parametrize("argv", [
    ["analyze", "a.xplane.pb.gz", "--json", "../out/x", "--markdown", "../out/x"],
    ["analyze", "a.xplane.pb.gz", "--json", "../out/x", "--trace-out", "../out/./x"],
    ["compare", "a.xplane.pb.gz", "b.xplane.pb.gz", "-o", "../out/x", "--markdown", "ABS:../out/x"],
    ["check", "a.xplane.pb.gz", "--budget", "budget.toml", "--junit", "../out/x", "--json", "../out/x"],
    ["fleet", "a.xplane.pb.gz", "--workers", "0", "-o", "../out/x", "--json", "../out/x"],
], ids=["analyze", "analyze-dot", "compare-abs", "check", "fleet"])
def test_two_outputs_naming_one_file_are_refused(capsys, world, argv):
    argv = [str((world / "in" / a[4:]).resolve()) if a.startswith("ABS:") else a for a in argv]
    _refused(capsys, world, argv, needle="names the same file")


MISSING = "../out/missing/x"


@pytest.mark.parametrize("argv", [
    ["analyze", "a.xplane.pb.gz", "-o", MISSING],
    ["analyze", "a.xplane.pb.gz", "--no-html", "--json", MISSING],
    ["analyze", "a.xplane.pb.gz", "--no-html", "--markdown", MISSING],
    ["analyze", "a.xplane.pb.gz", "--no-html", "--trace-out", MISSING + ".json.gz"],
    ["info", "a.xplane.pb.gz", "--json", MISSING],
    ["compare", "a.xplane.pb.gz", "b.xplane.pb.gz", "-o", MISSING],
    ["compare", "a.xplane.pb.gz", "b.xplane.pb.gz", "--json", MISSING],
    ["compare", "a.xplane.pb.gz", "b.xplane.pb.gz", "--markdown", MISSING],
    ["check", "a.xplane.pb.gz", "--budget", "budget.toml", "--junit", MISSING],
    ["check", "a.xplane.pb.gz", "--budget", "budget.toml", "--json", MISSING],
    ["fleet", "a.xplane.pb.gz", "--workers", "0", "-o", MISSING],
    ["fleet", "a.xplane.pb.gz", "--workers", "0", "--no-html", "--json", MISSING],
    ["synth", "dense_short_fsdp", "-o", MISSING + ".xplane.pb.gz"],
    ["synth", "dense_short_fsdp", "-o", MISSING + ".xplane.pb"],
    ["synth", "dense_short_fsdp", "-o", MISSING + "/run", "--hosts", "2"],
    ["schema", "-o", MISSING],
    ["explain", "SC001", "--json", MISSING],
], ids=lambda a: "-".join(x for x in a if x.startswith("-") or x in ("analyze", "info", "compare", "check", "fleet", "synth", "schema", "explain")))
def test_every_command_refuses_a_missing_folder(capsys, world, argv):
    line = _refused(capsys, world, argv, needle="cannot write: the folder")
    assert "does not exist (create it first)" in line


@pytest.mark.parametrize("argv", [
    ["synth", "dense_short_fsdp", "-o", "../out"],  # an existing folder: a run folder inside it (allowed) ...
], ids=["synth-folder"])
def test_synth_into_an_existing_folder_is_allowed(capsys, world, argv):
    rc, out, err = run_cli(capsys, *argv, "--steps", "2")
    assert rc == 0, err
    written = out.splitlines()
    assert written[-1] == "../out/truth.json" and all(Path(p).is_file() for p in written)
    assert len(written) == 2  # one host file and the truth


@pytest.mark.parametrize("argv", [
    ["synth", "dense_short_fsdp", "-o", "a.xplane.pb.gz/x"],  # a file where the folder should be
    ["synth", "dense_short_fsdp", "-o", "budget.toml"],  # folder mode: an existing file
    ["schema", "-o", "history"],
    ["explain", "SC001", "--json", "history"],
], ids=["synth-file-as-parent", "synth-file-as-folder", "schema-folder", "explain-folder"])
def test_outputs_of_commands_without_inputs_are_checked(capsys, world, argv):
    _refused(capsys, world, argv, needle="cannot write")


def test_synth_refuses_several_hosts_in_one_file(capsys, world):
    # A usage error (click's usage lines), before anything is written.
    before = _tree(world)
    rc, out, err = run_cli(capsys, "synth", "dense_short_fsdp", "-o", "../out/x.xplane.pb.gz", "--hosts", "2")
    assert rc == 2 and "a .xplane.pb[.gz] file holds one host" in err and "Traceback" not in err
    assert _tree(world) == before


# ---------------------------------------------------------------------------
# The output layer itself: atomic writes
# ---------------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    from profanalyzer.core.outputs import atomic_open, write_text

    dest = tmp_path / "r.json"
    dest.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_open(dest) as f:
            f.write(b"half a fi")
            raise RuntimeError("render failed")
    assert dest.read_text() == "old\n" and os.listdir(tmp_path) == ["r.json"]
    write_text("new\n", dest)
    assert dest.read_text() == "new\n" and os.listdir(tmp_path) == ["r.json"]


def test_a_symlinked_output_is_written_through(tmp_path):
    from profanalyzer.core.outputs import write_text

    (tmp_path / "real.html").write_text("old")
    os.symlink("real.html", tmp_path / "link.html")
    write_text("new", tmp_path / "link.html")
    assert (tmp_path / "link.html").is_symlink() and (tmp_path / "real.html").read_text() == "new"


def test_a_write_protected_output_is_left_alone(tmp_path):
    from profanalyzer.core.errors import OutputError
    from profanalyzer.core.outputs import check_outputs, write_text

    if os.geteuid() == 0:
        pytest.skip("root may write anything: permissions do not refuse")
    dest = tmp_path / "r.json"
    dest.write_text("mine")
    dest.chmod(0o444)
    with pytest.raises(OutputError, match="permission denied"):
        check_outputs([], [("--json", dest)])
    with pytest.raises(OutputError, match="permission denied"):
        write_text("new", dest)
    assert dest.read_text() == "mine"


def test_a_new_output_gets_the_usual_permissions(tmp_path):
    from profanalyzer.core.outputs import write_text

    umask = os.umask(0o022)
    os.umask(umask)
    write_text("x", tmp_path / "new.json")
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o666 & ~umask
