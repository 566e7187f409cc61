"""Bad and odd inputs through the real CLI (issue 8, robustness).

Every case is a row of CASES: how to build the input, and what must happen:

* ``err(regex)``: exit code 2, exactly one line on stderr, starting with
  ``profanalyze: error:`` and matching regex; no traceback, nothing written;
* ``ok(check)``: exit code 0 and a sensible analysis (``check`` looks at the
  JSON): the input is valid but odd.

Every run also checks that the input is left alone (same files, bytes and
mtimes, nothing created next to it) and that nothing is written outside the
requested output folder (the working directory is an empty folder).

The table (input -> expected outcome) is the contract documented in the
issue-8 report; keep the two in sync.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from test_reader import EPOCH_NS, _basic_space
from xsb import SpaceBuilder

from profanalyzer.cli import main
from profanalyzer.read.xspace import capturefile

# ---------------------------------------------------------------------------
# Input builders: each writes its input under `d` and returns the path to pass.
# ---------------------------------------------------------------------------


def _file(name: str, data: bytes | Callable[[], bytes]):
    def build(d: Path) -> Path:
        p = d / name
        p.write_bytes(data() if callable(data) else data)
        return p

    return build


def _basic() -> bytes:
    return _basic_space()


def _tpu(ops_events, *, ts_ns=EPOCH_NS, steps=None, steps_ts=None, modules=None, extra=None) -> bytes:
    """A one-TensorCore space: ops_events / steps / modules are lists of
    (name, start_ps, dur_ps, stats) for the XLA Ops / Steps / XLA Modules lines."""
    sp = SpaceBuilder("h0")
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    if steps is not None:
        ln = tc.line("Steps", timestamp_ns=ts_ns if steps_ts is None else steps_ts)
        for name, s, dur, st in steps:
            ln.event(name, s, dur, stats=st)
    if modules is not None:
        ln = tc.line("XLA Modules", timestamp_ns=ts_ns)
        for name, s, dur, st in modules:
            ln.event(name, s, dur, stats=st)
    ops = tc.line("XLA Ops", timestamp_ns=ts_ns)
    for name, s, dur, st in ops_events:
        ops.event(name, s, dur, display=name.split(" ")[0].lstrip("%"), meta_stats={"hlo_category": "loop fusion"}, stats=st)
    if extra:
        extra(sp, tc)
    return sp.bytes()


_OPS = [
    ("%fusion.1 = bf16[8]{0} fusion(bf16[8] %a), kind=kLoop", 0, 400_000, {"group_id": 0}),
    ("%fusion.2 = bf16[8]{0} fusion(bf16[8] %b), kind=kLoop", 1_000_000, 400_000, {"group_id": 1}),
]
_STEPS = [("0", 0, 1_000_000, {"group_id": 0}), ("1", 1_000_000, 1_000_000, {"group_id": 1})]


def _missing_stats() -> bytes:
    """No hlo_category / tf_op / flops on any op, no group_id on steps or ops."""
    sp = SpaceBuilder("h0")
    tc = sp.plane("/device:TPU:0")  # no device_type_string either
    st = tc.line("Steps", timestamp_ns=EPOCH_NS)
    st.event("0", 0, 1_000_000)
    st.event("1", 1_000_000, 1_000_000)
    ops = tc.line("XLA Ops", timestamp_ns=EPOCH_NS)
    ops.event("%convolution.1 = bf16[8,8]{1,0} convolution(bf16[8,8] %a, bf16[8,8] %b)", 0, 500_000)
    ops.event("%all-reduce.2 = f32[8]{0} all-reduce(f32[8] %c)", 600_000, 200_000)
    ops.event("%convolution.1 = bf16[8,8]{1,0} convolution(bf16[8,8] %a, bf16[8,8] %b)", 1_000_000, 500_000)
    return sp.bytes()


def _steps_named_not_numbers() -> bytes:
    """Steps without group_id whose names are not numbers (nor ASCII digits)."""
    return _tpu(_OPS, steps=[("train", 0, 1_000_000, {}), ("\u00b2", 1_000_000, 1_000_000, {})])


def _empty_sparsecore_epoch() -> bytes:
    """Epoch timestamps, plus a SparseCore plane whose lines hold no events."""

    def extra(sp, tc):
        sc = sp.plane("/device:TPU:0 SparseCore 0")
        sc.line("Sparse Core Ops", timestamp_ns=EPOCH_NS)

    return _tpu(_OPS, steps=_STEPS, extra=extra)


def _empty_line_far_timestamp() -> bytes:
    """An empty line whose timestamp is far from the others (irrelevant)."""

    def extra(sp, tc):
        tc.line("XLA TraceMe", timestamp_ns=0)

    return _tpu(_OPS, steps=_STEPS, extra=extra)


def _odd_numeric_stats() -> bytes:
    """FLOPs / bytes / ids that no integer stat can hold: tiny, huge, negative,
    non-finite doubles and strings. They are treated as missing."""
    odd = [
        {"flops": 5e-324, "bytes_accessed": 1e19},
        {"flops": 1e19, "bytes_accessed": 1e-300},
        {"flops": float("inf"), "bytes_accessed": float("nan"), "model_flops": -1.0},
        {"flops": "1e999", "bytes_accessed": -5, "program_id": (1 << 64) - 1},
        {"flops": 1e300, "bytes_accessed": 0.5, "symbol_id": 1e300},
    ]
    sp = SpaceBuilder("h0")
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    st = tc.line("Steps", timestamp_ns=EPOCH_NS)
    st.event("0", 0, 1_000_000, stats={"group_id": 0})
    st.event("1", 1_000_000, 1_000_000, stats={"group_id": 1})
    ops = tc.line("XLA Ops", timestamp_ns=EPOCH_NS)
    for step in range(2):
        for k, ms in enumerate(odd):
            ops.event(f"%convolution.{k} = bf16[8,8]{{1,0}} convolution(bf16[8,8] %a, bf16[8,8] %b)", step * 1_000_000 + k * 100_000,
                      50_000, display=f"convolution.{k}", meta_stats={"hlo_category": "convolution", **ms}, stats={"group_id": step})
    return sp.bytes()


def _gpu() -> bytes:
    sp = SpaceBuilder("gpu-host")
    sp.plane("/host:CPU").line("python").event("step", 0, 10)
    g = sp.plane("/device:GPU:0")
    g.line("Stream #1(Compute)").event("volta_sgemm", 0, 100)
    return sp.bytes()


def _cpu_only() -> bytes:
    sp = SpaceBuilder("cpu-host")
    sp.plane("/host:CPU").line("python").event("train_step", 0, 5_000_000)
    sp.plane("/host:metadata")
    return sp.bytes()


def _tpu_no_events() -> bytes:
    sp = SpaceBuilder("h0")
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    tc.line("XLA Ops", timestamp_ns=EPOCH_NS)
    return sp.bytes()


def _bad_utf8_in_op_name() -> bytes:
    """Framing intact, but an op name inside the TPU plane is not UTF-8."""
    data = _basic_space()
    i = data.index(b"fusion.3 = bf16")
    return data[:i] + b"\xff" + data[i + 1 :]


def _json_trace() -> bytes:
    doc = {"displayTimeUnit": "ns", "traceEvents": [{"ph": "X", "name": "fusion", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]}
    return json.dumps(doc).encode()


def _dir_with_json_only(d: Path) -> Path:
    run = d / "logs" / "plugins" / "profile" / "2026_11_30_10_00_00"
    run.mkdir(parents=True)
    (run / "h0.trace.json.gz").write_bytes(gzip.compress(_json_trace(), mtime=0))
    return d / "logs"


def _empty_dir(d: Path) -> Path:
    p = d / "empty_run"
    p.mkdir()
    (p / "notes.txt").write_text("nothing here\n")
    return p


def _missing(d: Path) -> Path:
    return d / "does-not-exist.xplane.pb"


def _fifo(d: Path) -> Path:
    p = d / "pipe.xplane.pb"
    os.mkfifo(p)
    return p


def _gzip_bomb(d: Path) -> Path:
    # 8 MiB of zeros compress to ~8 KiB; the test lowers the cap to 1 MiB
    # (the real cap is 16 GiB: the same code path, without writing GBs).
    p = d / "bomb.xplane.pb.gz"
    with gzip.GzipFile(p, "wb", mtime=0) as gz:
        for _ in range(8):
            gz.write(b"\0" * (1 << 20))
    return p


def _two_member_gzip() -> bytes:
    """A valid multi-member gzip file (e.g. `cat a.gz b.gz`): all members are read."""
    data = _basic_space()
    k = len(data) // 3
    return gzip.compress(data[:k], mtime=0) + gzip.compress(data[k:], mtime=0)


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], Path]
    error: str | None = None  # regex the one error line must match; None: must succeed
    check: Callable[[dict], None] | None = None  # on the --json output when it succeeds
    cap: int | None = None  # capturefile.MAX_DECOMPRESSED_BYTES for this case
    commands: tuple[str, ...] = ("analyze", "info", "")  # "" = the default command
    xfail: str | None = None  # a known bug, fixed outside this test's reach


def err(id, build, regex, **kw) -> Case:
    return Case(id, build, error=regex, **kw)


def ok(id, build, check=None, **kw) -> Case:
    return Case(id, build, check=check, **kw)


def _check_missing_stats(d: dict) -> None:
    st = d["steps"]
    assert st["count"] == 2 and st["source"] == "Steps line"
    assert [r["number"] for r in st["table"]] == [0, 1]  # from the event names
    assert abs(sum(v["fraction"] for v in d["breakdown"].values()) - 1) < 1e-6
    assert d["utilisation"]["mfu"] is None  # no FLOPs anywhere: not made up
    assert d["chip_source"].startswith("assumed TPU7x")


def _check_odd_stats_missing(d: dict) -> None:
    assert len(d["top_ops"]) == 5
    for op in d["top_ops"]:
        assert op["intensity"] is None and op["roofline_fraction"] is None, op
    # 1e19 FLOPs in 50 us is impossible but representable: the MFU is absurd
    # (not flagged), yet finite; the JSON holds no NaN/Infinity (_no_nan).
    assert d["utilisation"]["mfu"] is None or d["utilisation"]["mfu"] >= 0


def _check_index_numbers(d: dict) -> None:
    assert [r["number"] for r in d["steps"]["table"]] == [0, 1]


def _check_some_zero_steps(d: dict) -> None:
    assert d["steps"]["count"] == 2
    assert "1 zero-length step ignored" in d["steps"]["source"]
    assert d["steps"]["step_time_ps"]["median"] == 1_000_000


def _check_all_zero_steps(d: dict) -> None:
    assert d["steps"]["source"].startswith("XLA Modules: "), d["steps"]["source"]
    assert d["steps"]["count"] == 2


def _check_two_steps(d: dict) -> None:
    assert d["steps"]["count"] == 2
    assert abs(sum(v["fraction"] for v in d["breakdown"].values()) - 1) < 1e-6


def _check_negative_offset(d: dict) -> None:
    assert d["steps"]["count"] == 2
    # the op that started 0.1 us before its line's timestamp still counts
    assert d["breakdown"]["idle"]["fraction"] < 0.75


_B = _basic_space()
_MODULES = [("jit_step(1)", 0, 900_000, {}), ("jit_step(1)", 1_000_000, 900_000, {})]
_I64_MAX = (1 << 63) - 1

CASES: list[Case] = [
    # --- not a readable profile --------------------------------------------
    err("empty", _file("empty.xplane.pb", b""), r": empty file$"),
    err("truncated-1-byte", _file("t1.xplane.pb", _B[:1]), r"not an XSpace profile .*ends inside a record"),
    *[
        err(f"truncated-at-{k}", _file(f"t{k}.xplane.pb", _B[:k]), r"truncated or corrupt: the file ends at byte \d+, inside a field .*incomplete download or copy")
        for k in (len(_B) // 4, len(_B) // 2, len(_B) - 7, len(_B) - 1)
    ],
    err("truncated-gzip", _file("t.xplane.pb.gz", gzip.compress(_B, mtime=0)[:-9]), r"truncated gzip file"),
    err("corrupt-gzip", _file("c.xplane.pb.gz", gzip.compress(_B, mtime=0)[:40] + b"\0" * 64), r"corrupt gzip data"),
    err("random-bytes", _file("r.xplane.pb", np.random.default_rng(0).bytes(4096)), r"not an XSpace profile \(\.xplane\.pb\)"),
    err("utf8-mangled", _file("m.xplane.pb", _B.decode("latin-1").encode("utf-8")), r"went through a text conversion .*copy the original file in binary mode"),
    err("utf8-mangled-cp1252", _file("m2.xplane.pb", _basic_space(ts_ns=0).decode("cp1252", errors="ignore").encode("utf-8")),
        r"went through a text conversion|not an XSpace profile|corrupt"),
    err("utf8-mangled-gzip", _file("m.xplane.pb.gz", gzip.compress(_B, mtime=0).decode("latin-1").encode("utf-8")),
        r"went through a text conversion"),
    err("utf8-replacement-chars", _file("m3.xplane.pb", _B.decode("utf-8", errors="replace").encode("utf-8")), r"text conversion .*cannot be repaired"),
    err("invalid-utf8-in-op-name", _file("u.xplane.pb", _bad_utf8_in_op_name), r"plane '/device:TPU:0': .*invalid UTF-8 in XPlane\.event_metadata\.value\.name"),
    err("trace-json-gz", _file("h0.trace.json.gz", lambda: gzip.compress(_json_trace(), mtime=0)), r"this is JSON .*trace\.json.*pass the <host>\.xplane\.pb"),
    err("trace-json", _file("h0.trace.json", _json_trace), r"this is JSON .*pass the <host>\.xplane\.pb"),
    err("log-dir-with-only-trace-json", _dir_with_json_only, r"no \*\.xplane\.pb files .*found plugins/profile/.*h0\.trace\.json\.gz: that is the trace viewer's JSON"),
    err("gzip-bomb", _gzip_bomb, r"decompresses to more than 1 MiB; refusing \(gzip bomb guard", cap=1 << 20),
    err("gzip-twice", _file("g2.xplane.pb.gz", lambda: gzip.compress(gzip.compress(_B, mtime=0), mtime=0)), r"compressed twice"),
    err("html-page", _file("login.xplane.pb", b"<!DOCTYPE html><html><body>Sign in</body></html>"), r"HTML page"),
    err("missing-path", _missing, r"does-not-exist\.xplane\.pb: no such file or directory$"),
    err("dir-without-traces", _empty_dir, r"no \*\.xplane\.pb files here or under plugins/profile/<run>/"),
    err("fifo", _fifo, r"not a regular file or directory", commands=("info", "analyze")),
    err("newline-in-file-name", _file("bad\nname.xplane.pb", b""), r"bad\\nname\.xplane\.pb: empty file"),
    # --- a profile, but not one we can analyse -------------------------------
    err("cpu-only-capture", _file("cpu.xplane.pb", _cpu_only), r"CPU-only capture: no TPU device planes"),
    err("gpu-capture", _file("gpu.xplane.pb", _gpu), r"GPU capture \(1 /device:GPU:N plane\(s\)\): not supported; .*TPU captures only"),
    # `info` describes such a file fine (exit 0); only the analysis has nothing to do.
    err("tpu-plane-without-events", _file("e.xplane.pb", _tpu_no_events), r"nothing to attribute", commands=("analyze", "")),
    # --- times ------------------------------------------------------------
    err("negative-duration", _file("nd.xplane.pb", lambda: _tpu([("%f = f32[] add()", 0, -5, {})], steps=_STEPS)),
        r"line 'XLA Ops': event 0 has a negative duration \(-5 ps\): corrupt trace"),
    err("offset-near-2^63", _file("o63.xplane.pb", lambda: _tpu([("%f = f32[] add()", _I64_MAX - 10, 5, {})], steps=_STEPS)),
        r"line 'XLA Ops': event 0 lies out of range"),
    err("negative-offset-near-2^63", _file("on63.xplane.pb", lambda: _tpu([("%f = f32[] add()", -(1 << 63), 5, {})], steps=_STEPS)),
        r"line 'XLA Ops': event 0 lies out of range"),
    err("duration-near-2^63", _file("d63.xplane.pb", lambda: _tpu([("%f = f32[] add()", 0, _I64_MAX, {})], steps=_STEPS)),
        r"line 'XLA Ops': event 0 lies out of range"),
    err("device-offset-stat-near-2^63", _file("dos.xplane.pb", lambda: _tpu(
        [("%f = f32[] add()", 0, 5, {"device_offset_ps": _I64_MAX - 1, "device_duration_ps": 5})], steps=_STEPS)),
        r"line 'XLA Ops': event 0 lies out of range"),
    err("line-timestamps-overflow-x1000", _file("ts.xplane.pb", lambda: _tpu(_OPS, ts_ns=0, steps=_STEPS, steps_ts=_I64_MAX)),
        r"line '(Steps|XLA Ops)': timestamp_ns \d+ is .* s after line '(Steps|XLA Ops)''s \(0\): corrupt or mixed-clock line timestamps"),
    # --- valid but odd: succeed with a sensible analysis --------------------
    ok("missing-optional-stats", _file("ms.xplane.pb", _missing_stats), _check_missing_stats),
    ok("odd-numeric-stats", _file("ns.xplane.pb", _odd_numeric_stats), _check_odd_stats_missing),
    ok("steps-without-group-id-or-numeric-names", _file("sn.xplane.pb", _steps_named_not_numbers), _check_index_numbers),
    ok("some-zero-length-steps", _file("z1.xplane.pb", lambda: _tpu(_OPS, steps=_STEPS + [("2", 2_000_000, 0, {"group_id": 2})])), _check_some_zero_steps),
    ok("all-zero-length-steps", _file("z2.xplane.pb", lambda: _tpu(_OPS, steps=[("0", 0, 0, {"group_id": 0}), ("1", 10, 0, {"group_id": 1})], modules=_MODULES)),
       _check_all_zero_steps),
    ok("negative-offset", _file("no.xplane.pb", lambda: _tpu([("%fusion.0 = bf16[8]{0} fusion(bf16[8] %z), kind=kLoop", -100_000, 300_000, {})] + _OPS,
                                                              steps=_STEPS)), _check_negative_offset),
    ok("all-timestamps-near-2^63", _file("t63.xplane.pb", lambda: _tpu(_OPS, ts_ns=_I64_MAX - 10, steps=_STEPS)), _check_two_steps),
    ok("partially-overlapping-ops", _file("po.xplane.pb", lambda: _tpu(
        [("%a = f32[] add()", -1000, 200_000, {}), ("%b = f32[] add()", 0, 600_000, {}), ("%c = f32[] add()", 100_000, 200_000, {})] + _OPS,
        steps=_STEPS)), _check_two_steps),
    ok("empty-line-with-far-timestamp", _file("el.xplane.pb", _empty_line_far_timestamp), _check_two_steps),
    ok("empty-sparsecore-plane-epoch-timestamps", _file("esc.xplane.pb", _empty_sparsecore_epoch), _check_two_steps),
    ok("multi-member-gzip", _file("mm.xplane.pb.gz", _two_member_gzip), _check_two_steps),
    ok("gzip-with-nul-padding", _file("pad.xplane.pb.gz", lambda: gzip.compress(_B, mtime=0) + b"\0" * 512), _check_two_steps),
]


# ---------------------------------------------------------------------------
# Running the CLI with the file-system guards
# ---------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root: kind, size, mtime and content hash for files."""
    import hashlib

    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            rel = str(p.relative_to(root))
            if p.is_file() and not p.is_symlink():
                snap[rel] = ("f", st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                snap[rel] = ("d" if p.is_dir() else "o", st.st_mtime_ns)
    return snap


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    """in/ holds the input, out/ the requested outputs, cwd/ is the working
    directory (the default report would land there: it must stay empty)."""
    d = {k: tmp_path / k for k in ("in", "out", "cwd")}
    for p in d.values():
        p.mkdir()
    monkeypatch.chdir(d["cwd"])
    return d


def _args(command: str, path: Path, out: Path, case: Case) -> list[str]:
    if command == "info":
        return ["info", str(path)]
    if command == "analyze":
        return ["analyze", "-q", "-o", str(out / "report.html"), "--json", str(out / "a.json"), str(path)]
    # The default command (`profanalyze TRACE ...`): the trace comes first.
    return [str(path), "--no-html", "-q"] if case.error else [str(path), "-q", "-o", str(out / "default.html")]


def _no_nan(name: str):
    raise AssertionError(f"{name} in the JSON output")


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.xfail(reason=c.xfail, strict=True)) if c.xfail else c for c in CASES], ids=[c.id for c in CASES]
)
def test_bad_input_table(case: Case, dirs, capsys, monkeypatch):
    if case.cap is not None:
        monkeypatch.setattr(capturefile, "MAX_DECOMPRESSED_BYTES", case.cap)
    path = case.build(dirs["in"])
    before = _snapshot(dirs["in"])
    for command in case.commands:
        rc = main(_args(command, path, dirs["out"], case))
        cap = capsys.readouterr()
        lines = cap.err.splitlines()
        where = f"{case.id} / {command or 'default'}"
        assert "Traceback" not in cap.err and "internal error" not in cap.err, f"{where}: {cap.err}"
        if case.error:
            assert rc == 2, f"{where}: exit {rc}, stderr: {cap.err}"
            assert len(lines) == 1, f"{where}: want one stderr line, got {lines}"
            assert lines[0].startswith("profanalyze: error: "), f"{where}: {lines[0]}"
            import re

            assert re.search(case.error, lines[0]), f"{where}: {lines[0]!r} does not match {case.error!r}"
            assert os.listdir(dirs["out"]) == [], f"{where}: wrote output although it failed"
        else:
            assert rc == 0, f"{where}: exit {rc}, stderr: {cap.err}"
            assert lines == [] or all(not l.startswith("profanalyze: error") for l in lines), f"{where}: {cap.err}"
        assert _snapshot(dirs["in"]) == before, f"{where}: the input folder changed"
        assert os.listdir(dirs["cwd"]) == [], f"{where}: wrote into the working directory"
    if case.error is None:
        assert sorted(os.listdir(dirs["out"])) == ["a.json", "default.html", "report.html"]
        if case.check:
            case.check(json.loads((dirs["out"] / "a.json").read_text(), parse_constant=_no_nan))


def test_console_script_subprocess(tmp_path):
    """The installed `profanalyze` entry point: exit 2, one line, no traceback."""
    exe = Path(sys.executable).with_name("profanalyze")
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    src = tmp_path / "in"
    src.mkdir()
    cases = {
        "truncated.xplane.pb": (_B[: len(_B) // 2], "truncated or corrupt: the file ends"),
        "h0.trace.json.gz": (gzip.compress(_json_trace(), mtime=0), "this is JSON"),
        "gpu.xplane.pb": (_gpu(), "GPU capture"),
    }
    for name, (data, _) in cases.items():
        (src / name).write_bytes(data)
    before = _snapshot(src)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, (_, needle) in cases.items():
        r = subprocess.run([str(exe), str(src / name)], cwd=cwd, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PROFANALYZE_DEBUG": ""})
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("profanalyze: error: ") and needle in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
    assert _snapshot(src) == before
    assert os.listdir(cwd) == []
